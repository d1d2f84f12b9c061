#include "startup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <filesystem>
#include <string>

#include <mutex>

#include "capture.h"
#include "cuda_calls.h"
#include "cupti_mode.h"
#include "delay.h"
#include "device_timing.h"
#include "host_writes.h"
#include "ggml_api.h"
#include "platform.h"
#include "trace_writer.h"

#ifndef GGML_TRACE_HOOKS_BUILD
#define GGML_TRACE_HOOKS_BUILD "unknown"
#endif

namespace ggml_trace {

namespace {

// The environment variables that shape a ggml run (NUL-separated KEY=VALUE), to re-run it; not
// the injection itself, nor the trace's own output and delay rules (recorded apart).
size_t program_env(char * buf, size_t cap) {
    static const char * prefixes[] = {"GGML_", "LLAMA_", "CUDA_", "HIP_", "VK_", "OMP_", "OPENBLAS_", "MESA_", "LP_"};
    static const char * skip[] = {"GGML_TRACE_OUTPUT=", "GGML_TRACE_DELAY="};
    size_t len = 0;
    for (char ** e = g_os.environment(); e && *e; e++) {
        bool keep = false;
        for (const char * p : prefixes) keep = keep || strncmp(*e, p, strlen(p)) == 0;
        for (const char * p : skip) keep = keep && strncmp(*e, p, strlen(p)) != 0;
        size_t n = strlen(*e) + 1;
        if (keep && len + n <= cap) {
            memcpy(buf + len, *e, n);
            len += n;
        }
    }
    return len;
}

void write_process_meta() {
    char buf[1 << 16];
    if (size_t n = g_os.command_line(buf, sizeof(buf))) {
        write_meta("cmdline", buf, n);  // NUL-separated argv
    }
    if (size_t n = g_os.executable(buf, sizeof(buf))) {
        write_meta("exe", buf, n);
    }
    std::error_code ec;
    std::string cwd = std::filesystem::current_path(ec).string();
    if (!ec) {
        write_meta("cwd", cwd.data(), cwd.size());
    }
    write_meta("env", buf, program_env(buf, sizeof(buf)));
    snprintf(buf, sizeof(buf), "%u", (unsigned) g_os.process_id());
    write_meta("pid", buf, strlen(buf));
    if (size_t n = g_os.host_name(buf, sizeof(buf))) {
        write_meta("hostname", buf, n);
    }
    write_meta("platform", g_os.name, strlen(g_os.name));
    write_meta("hooks_build", GGML_TRACE_HOOKS_BUILD, strlen(GGML_TRACE_HOOKS_BUILD));
    snprintf(buf, sizeof(buf), "%d", GGML_BACKEND_API_VERSION);
    write_meta("backend_api_version", buf, strlen(buf));
}

#ifndef GGML_TRACE_SOURCE_BUILD_NUMBER
#define GGML_TRACE_SOURCE_BUILD_NUMBER "0"
#define GGML_TRACE_SOURCE_COMMIT "unknown"
#endif

// Which build made this trace: the program's ggml (version, commit), the program's llama.cpp
// build info where it links libllama-common, and the sources the hooks were built against.
void write_ggml_meta() {
    const char * v = g_api.version ? g_api.version() : "unknown";
    write_meta("ggml_version", v, strlen(v));
    const char * c = g_api.commit ? g_api.commit() : "unknown";
    write_meta("ggml_commit", c, strlen(c));
    write_meta("source.build_number", GGML_TRACE_SOURCE_BUILD_NUMBER, strlen(GGML_TRACE_SOURCE_BUILD_NUMBER));
    write_meta("source.commit", GGML_TRACE_SOURCE_COMMIT, strlen(GGML_TRACE_SOURCE_COMMIT));
    const int * number = (const int *) ggml_symbol("LLAMA_BUILD_NUMBER");
    const char * const * commit = (const char * const *) ggml_symbol("LLAMA_COMMIT");
    if (number && commit && *commit) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%d", *number);
        write_meta("llama.build_number", buf, strlen(buf));
        write_meta("llama.commit", *commit, strnlen(*commit, 64));
    }
}

// The flight recorder's settings (`ggml-trace record --ring`, which checks them): a value that
// does not parse is reported and ignored, and the file is written straight through.
RingConfig ring_config() {
    RingConfig ring;
    const char * seconds = getenv("GGML_TRACE_RING_SECONDS");
    const char * bytes = getenv("GGML_TRACE_RING_BYTES");
    char * end = nullptr;
    if (seconds && *seconds) {
        double s = strtod(seconds, &end);
        if (*end || !(s > 0) || s > 1e6) {
            fprintf(stderr, "ggml-trace: GGML_TRACE_RING_SECONDS=%s is not a number of seconds; no ring\n", seconds);
            return RingConfig();
        }
        ring.keep_ns = (uint64_t) (s * 1e9);
    }
    if (bytes && *bytes) {
        unsigned long long b = strtoull(bytes, &end, 10);
        if (*end || b == 0) {
            fprintf(stderr, "ggml-trace: GGML_TRACE_RING_BYTES=%s is not a number of bytes; no ring\n", bytes);
            return RingConfig();
        }
        ring.max_bytes = b;
    }
    return ring;
}

// Opens the trace file named by GGML_TRACE_OUTPUT. If another process of the same run already
// took that name (a program that starts another traced program), this one writes NAME.PID.
bool open_output(const char * path) {
    char alt[4200];
    int err = 0;
    intptr_t fd = g_os.file_create(path, true, &err);
    if (fd < 0) {
        snprintf(alt, sizeof(alt), "%s.%u", path, (unsigned) g_os.process_id());
        path = alt;
    } else {
        g_os.file_close(fd);
    }
    return writer_open(path, GGML_TRACE_HOOKS_BUILD, GGML_BACKEND_API_VERSION, ring_config());
}

// llama.cpp's common logger prints from a thread of its own and is never destroyed (upstream
// #22142), so what it still holds when the program exits is lost: the tail of the generated text,
// the last error. Drain it as the program's own SIGINT path does (common_log_pause joins the
// thread once it has printed everything queued), where the program has it in a shared library.
void drain_program_log() {
    auto log_main = (void * (*)()) ggml_symbol("_Z15common_log_mainv");
    auto log_pause = (void (*)(void *)) ggml_symbol("_Z16common_log_pauseP10common_log");
    if (log_main && log_pause) {
        log_pause(log_main());
    }
}

void at_exit() {
    drain_program_log();  // first: its last lines may be the run's verdict
    device_timing_shutdown();
    cupti_flush();
    writer_close();
}

// The trace file opens on the first call that needs it: a ggml entry point, or a user mark from a
// process that has not loaded ggml yet.
std::once_flag g_writer_once;
void init_writer() {
    const char * out = getenv("GGML_TRACE_OUTPUT");
    delay_init(out && *out);  // exits when GGML_TRACE_DELAY does not parse
    host_writes_init();        // exits when GGML_TRACE_HOST_WRITES does not parse
    if (!out || !*out) {
        // loaded but not asked to trace: every hook passes straight through, and the program's log
        // is still drained at exit (diagnose's reference runs so: its output whole, as a traced run's)
        atexit(drain_program_log);
        return;
    }
    const char * paused = getenv("GGML_TRACE_START_PAUSED");
    g_capture_on.store(!(paused && *paused == '1'));
    const char * vdevs = getenv("GGML_TRACE_VIRTUAL_DEVICES");
    if (vdevs && atoi(vdevs) > 0 && !ggml_symbol("ggmltrace_vdev_delay")) {
        fprintf(stderr, "ggml-trace: GGML_TRACE_VIRTUAL_DEVICES=%s, but the virtual devices' library is not loaded: "
                        "run under `ggml-trace record --virtual-devices N`, or put libggml-trace-vdev.so (beside "
                        "the hooks) in LD_PRELOAD too\n", vdevs);
    }
    if (open_output(out)) {
        write_process_meta();
        delay_start();
        device_timing_init();
        cupti_start();
        cuda_calls_start();
        atexit(at_exit);
    }
}

void init() {
    bool resolved = resolve_ggml_api();  // the real entry points, needed even when not tracing
    if (!writer_ready()) {
        g_capture_state.store(CaptureState::DISABLED);
        return;
    }
    if (!resolved) {
        g_capture_state.store(CaptureState::DISABLED);  // resolve_ggml_api said what is missing, on stderr
        const char * why = "this program's ggml lacks entry points the hooks need (named on stderr)";
        write_meta("disabled", why, strlen(why));  // so that readers can say the capture never attached
        return;
    }
    write_ggml_meta();
    char why[256];
    if (!check_tensor_layout(why, sizeof(why))) {
        disable(why);
        return;
    }
    g_capture_state.store(CaptureState::ACTIVE);
}

std::once_flag g_init_once;

}  // namespace

bool writer_ready() {
    std::call_once(g_writer_once, init_writer);
    return writer_is_open();
}

bool active() {
    std::call_once(g_init_once, init);
    return g_capture_state.load(std::memory_order_acquire) == CaptureState::ACTIVE;
}

bool user_capturing() { return writer_ready() && g_capture_on.load(std::memory_order_relaxed); }

}  // namespace ggml_trace
