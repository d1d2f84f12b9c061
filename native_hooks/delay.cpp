#include "delay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <initializer_list>
#include <mutex>
#include <thread>

#include "capture.h"
#include "cupti_mode.h"
#include "delay_work.h"
#include "device_timing.h"
#include "ggml_api.h"
#include "observer_api.h"
#include "platform.h"
#include "registry.h"
#include "trace_writer.h"

namespace ggml_trace {

namespace {

// ---------------------------------------------------------------- rule set-up

std::once_flag g_ops_once;
std::atomic<bool> g_rule_acted[MAX_DELAY_RULES];  // whether each rule's first delay was said on stderr
// The virtual devices' own queue stall, when their library is loaded (observer_api.h).
decltype(&ggmltrace_vdev_delay) g_vdev_delay = nullptr;

// op= names are checked against the program's own ggml (its op list changes between versions).
void resolve_ops() {
    g_vdev_delay = (decltype(g_vdev_delay)) ggml_symbol("ggmltrace_vdev_delay");
    const char * (*op_name)(enum ggml_op) = nullptr;
    resolve_symbol(op_name, "ggml_op_name", false, "delay rules with op=");
    for (int i = 0; i < g_delay_n_rules; i++) {
        DelayRule & r = g_delay_rules[i];
        if (!r.op[0]) continue;
        for (int op = 0; op_name && op < GGML_OP_COUNT && r.op_id < 0; op++) {
            const char * name = op_name((enum ggml_op) op);
            if (name && strcmp(name, r.op) == 0) r.op_id = op;
        }
        if (r.op_id < 0) {
            fprintf(stderr, "ggml-trace: bad delay rule '%s': %s is not an op of this ggml (e.g. ADD, MUL_MAT, SOFT_MAX)\n",
                    r.text, r.op);
            exit(2);
        }
    }
}

// ---------------------------------------------------------------- tensor names

bool name_matches(const ggml_tensor * t, const char * glob) { return t && glob_match(glob, t->name); }

bool graph_has_tensor(const void * ctx, const char * glob) {
    ggml_cgraph * graph = (ggml_cgraph *) ctx;
    int n = g_api.graph_n_nodes(graph);
    for (int i = 0; i < n; i++) {
        if (name_matches(g_api.graph_node(graph, i), glob)) return true;
    }
    return false;
}

struct TensorPair {
    const ggml_tensor * a;
    const ggml_tensor * b;
};

bool pair_has_tensor(const void * ctx, const char * glob) {
    const TensorPair * p = (const TensorPair *) ctx;
    return name_matches(p->a, glob) || name_matches(p->b, glob);
}

// ---------------------------------------------------------------- records

void write_delay(const CallRec & target, uint32_t index, const DelayHit & h, uint64_t id, uint8_t where, bool failed,
                 uint64_t t0, uint64_t t1) {
    emit_record<CallRec>(REC_CALL, [&](CallRec & r) {
        r.kind = K_DELAY;
        r.sched = target.sched;
        r.flags = (uint8_t) (where << DELAY_WHERE_SHIFT) | (failed ? CALL_FAILED : 0);
        r.thread = thread_index();
        r.t_begin = t0;
        r.t_end = t1;
        r.call_id = id;
        r.backend = index;
        r.backend2 = NONE32;
        r.graph = target.graph;
        r.split = target.split;
        r.obj = target.call_id;
        r.arg = ((uint64_t) h.rule << DELAY_RULE_SHIFT) | (h.ns & ((1ull << DELAY_RULE_SHIFT) - 1));
    });
}

// The delay as a call, for device timing to tie its device_exec row to (its host times: when it began).
CallRec delay_call(const CallRec & target, uint32_t index, const CallContext & delay, uint64_t t0) {
    CallRec r;
    memset(&r, 0, sizeof(r));
    r.kind = K_DELAY;
    r.sched = target.sched;
    r.call_id = delay.call_id;
    r.backend = index;
    r.backend2 = NONE32;
    r.graph = target.graph;
    r.split = target.split;
    r.t_begin = r.t_end = t0;
    r.obj = target.call_id;
    return r;
}

// ---------------------------------------------------------------- CUDA streams

// The CUDA runtime the program already loaded (the hooks do not link CUDA). Handles are pointers
// and errors ints, as in cuda_runtime_api.h.
struct CudaRt {
    int (*launch_host_func)(void * stream, void (*fn)(void *), void * arg);
    int (*event_record)(void * event, void * stream);
    int (*stream_wait_event)(void * stream, void * event, unsigned flags);
    int (*stream_create_with_flags)(void ** stream, unsigned flags);
    int (*host_alloc)(void ** ptr, size_t size, unsigned flags);
    const char * (*error_string)(int);
    bool ok;
};
CudaRt g_cuda;

// The driver API (libcuda, which the runtime loaded), for the spin kernel: a stall the GPU times
// itself, where a host function's stall also waits for CUDA's callback thread to wake (on the
// H200s 3-30 % over 2 ms). Handles are pointers, results ints, as in cuda.h.
struct CudaDrv {
    int (*ctx_get_current)(void ** ctx);
    int (*ctx_push)(void * ctx);
    int (*ctx_pop)(void ** ctx);
    int (*module_load_data)(void ** module, const void * image);
    int (*module_get_function)(void ** fn, void * module, const char * name);
    int (*launch_kernel)(void * fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned shared, void * stream, void ** params, void ** extra);
    bool ok;
};
CudaDrv g_drv;

// One thread spins on the GPU's nanosecond timer until `ns` have passed since it started, and
// writes when it started and ended into `out` (host memory mapped into the device: a generic
// address under unified addressing). PTX, so that the hooks need no CUDA compiler: the driver
// compiles it for the device at first use.
const char SPIN_PTX[] = R"(
.version 7.0
.target sm_75
.address_size 64
.visible .entry ggml_trace_spin(.param .u64 ns, .param .u64 out)
{
    .reg .u64 %t0, %t1, %d, %ns, %out;
    .reg .pred %p;
    ld.param.u64 %ns, [ns];
    ld.param.u64 %out, [out];
    mov.u64 %t0, %globaltimer;
    st.volatile.u64 [%out], %t0;
    membar.sys;
SPIN:
    mov.u64 %t1, %globaltimer;
    sub.u64 %d, %t1, %t0;
    setp.lt.u64 %p, %d, %ns;
    @%p bra SPIN;
    st.volatile.u64 [%out+8], %t1;
    membar.sys;
    ret;
}
)";
const int SPIN_SLOTS = 256;  // delays in flight per backend (each slot: start, end)
std::once_flag g_cuda_once;
const unsigned CUDA_STREAM_NON_BLOCKING = 1;

template <typename F> void bind(const char * lib, F & fn, const char * name) {
    fn = (F) g_os.loaded_symbol(lib, name);
}

void resolve_cuda() {
    // The runtime's entry points where they are global; else a backend library opened with
    // RTLD_LOCAL keeps them to itself: the runtime, or a static one inside ggml-cuda.
    const char * in = nullptr;  // the library that has them (null: the global scope)
    bool found = false;
    for (const char * l : {(const char *) nullptr, "libcudart.so", "cudart64", "libggml-cuda.so", "ggml-cuda.dll"}) {
        if ((found = g_os.loaded_symbol(l, "cudaLaunchHostFunc") != nullptr)) {
            in = l;
            break;
        }
    }
    if (found) {
        bind(in, g_cuda.launch_host_func, "cudaLaunchHostFunc");
        bind(in, g_cuda.event_record, "cudaEventRecord");
        bind(in, g_cuda.stream_wait_event, "cudaStreamWaitEvent");
        bind(in, g_cuda.stream_create_with_flags, "cudaStreamCreateWithFlags");
        bind(in, g_cuda.error_string, "cudaGetErrorString");
        bind(in, g_cuda.host_alloc, "cudaHostAlloc");
    }
    g_cuda.ok = g_cuda.launch_host_func && g_cuda.event_record && g_cuda.stream_wait_event && g_cuda.stream_create_with_flags;
    const char * drv = g_os.loaded_symbol("libcuda.so", "cuLaunchKernel") ? "libcuda.so"
                     : g_os.loaded_symbol("nvcuda", "cuLaunchKernel") ? "nvcuda" : nullptr;
    if (drv) {
        bind(drv, g_drv.ctx_get_current, "cuCtxGetCurrent");
        bind(drv, g_drv.ctx_push, "cuCtxPushCurrent_v2");
        bind(drv, g_drv.ctx_pop, "cuCtxPopCurrent_v2");
        bind(drv, g_drv.module_load_data, "cuModuleLoadData");
        bind(drv, g_drv.module_get_function, "cuModuleGetFunction");
        bind(drv, g_drv.launch_kernel, "cuLaunchKernel");
        g_drv.ok = g_drv.ctx_get_current && g_drv.ctx_push && g_drv.ctx_pop && g_drv.module_load_data &&
                   g_drv.module_get_function && g_drv.launch_kernel && g_cuda.host_alloc;
    }
}

// Per CUDA backend: a private stream on its device and two of the device's events (ggml-cuda's
// event context is a cudaEvent_t). A wait captures the event's latest record when it is issued,
// so re-recording them for the next delay does not disturb the waits already queued.
struct StreamQueue {
    std::mutex m;
    ggml_backend_t backend = nullptr;
    void * stream = nullptr;
    ggml_backend_event_t tail = nullptr, done = nullptr;
    bool failed = false;
    // the spin kernel, when the driver API is there (else the stall is a sleeping host function)
    void * ctx = nullptr;
    void * spin = nullptr;
    volatile uint64_t * slots = nullptr;  // SPIN_SLOTS x {start, end}, GPU timer ns
    uint64_t next_slot = 0;
    int64_t gpu_minus_host = 0;  // GPU timer minus CLOCK_MONOTONIC, ns (calibrated at open)
};
StreamQueue g_queues[MAX_BACKENDS];

struct StreamDelay {
    uint64_t ns;
    CallContext delay;
    uint32_t index;
    volatile uint64_t * slot = nullptr;  // the spin kernel's times, read once it has run
    int64_t gpu_minus_host = 0;
};

// Runs on CUDA's callback thread when the private stream reaches it: the stall itself.
void on_stream(void * arg) {
    StreamDelay * d = (StreamDelay *) arg;
    uint64_t t0 = now_ticks();
    delay_sleep_ns(d->ns);
    // when the queue or stream ran the delay (obj: the delay's call_id), like a virtual device's work
    write_device_exec(SRC_DEVICE, 0, d->index, d->delay.graph, d->delay.split, d->delay.call_id, t0, now_ticks());
    delete d;
}

// Runs on CUDA's callback thread after a spin kernel (the backend's stream does not wait for it):
// records when the GPU says the stall ran.
void after_spin(void * arg) {
    StreamDelay * d = (StreamDelay *) arg;
    double tick = writer_ns_per_tick();
    ClockPair now = clock_pair();  // both clocks at one moment: the conversion below rests on it
    uint64_t now_ns = now.ns, now_t = now.ticks;
    auto to_ticks = [&](uint64_t gpu_ns) {
        int64_t host_ns = (int64_t) gpu_ns - d->gpu_minus_host;
        return (uint64_t) ((int64_t) now_t - (int64_t) (((int64_t) now_ns - host_ns) / tick));
    };
    write_device_exec(SRC_DEVICE, 0, d->index, d->delay.graph, d->delay.split, d->delay.call_id,
                      to_ticks(d->slot[0]), to_ticks(d->slot[1]));
    delete d;
}

// On the queue's own thread, in the backend device's primary context: the spin kernel, its
// slots, and the GPU timer's offset from CLOCK_MONOTONIC (one spin of 0 ns, watched from the host:
// the start it writes becomes visible within about a microsecond).
void open_spin(StreamQueue & q) {
    void * module = nullptr;
    void * slots = nullptr;
    if (!g_drv.ok || g_drv.ctx_get_current(&q.ctx) || !q.ctx || g_drv.module_load_data(&module, SPIN_PTX) ||
        g_drv.module_get_function(&q.spin, module, "ggml_trace_spin") ||
        g_cuda.host_alloc(&slots, SPIN_SLOTS * 2 * sizeof(uint64_t), 1 | 2 /* portable | mapped */)) {
        q.spin = nullptr;
        return;
    }
    q.slots = (volatile uint64_t *) slots;
    for (int i = 0; i < 2 * SPIN_SLOTS; i++) q.slots[i] = 0;
    uint64_t ns = 0;
    void * out = slots;
    void * params[] = {&ns, &out};
    if (g_drv.launch_kernel(q.spin, 1, 1, 1, 1, 1, 1, 0, q.stream, params, nullptr)) {
        q.spin = nullptr;
        return;
    }
    uint64_t limit = monotonic_ns() + 5000000000ull;
    while (q.slots[0] == 0 && monotonic_ns() < limit) {
    }
    uint64_t host = monotonic_ns();
    if (q.slots[0] == 0) {
        q.spin = nullptr;  // never ran: keep to host functions
        return;
    }
    q.gpu_minus_host = (int64_t) q.slots[0] - (int64_t) host;
    while (q.slots[1] == 0 && monotonic_ns() < limit) {
    }
    q.next_slot = 1;
}

bool is_cuda(ggml_backend_t backend) {
    static const char * (*reg_name)(ggml_backend_reg_t) = (const char * (*)(ggml_backend_reg_t)) ggml_symbol("ggml_backend_reg_name");
    ggml_backend_dev_t dev = g_api.backend_get_device(backend);
    ggml_backend_reg_t reg = dev && g_api.dev_backend_reg ? g_api.dev_backend_reg(dev) : nullptr;
    return reg && reg_name && strcmp(reg_name(reg), "CUDA") == 0;
}

void cuda_warn(const char * what, int err) {
    fprintf(stderr, "ggml-trace: CUDA stream delays: %s (%s); delaying on the host instead\n", what,
            err && g_cuda.error_string ? g_cuda.error_string(err) : "not found");
}

// The events and the stream are made on a thread of our own: ggml-cuda's event_new switches the
// calling thread's current device, which must not happen to the program's threads.
bool open_queue(StreamQueue & q, ggml_backend_t backend) {
    ggml_backend_dev_t dev = g_api.backend_get_device(backend);
    DeviceEntry * de = find_device(dev);
    ggml_backend_event_t (*event_new)(ggml_backend_dev_t) = de ? de->orig.event_new : dev->iface.event_new;
    int err = 0;
    q.backend = backend;
    q.failed = true;
    if (!event_new) {
        cuda_warn("the device has no events", 0);
        return false;
    }
    std::thread([&] {
        q.tail = event_new(dev);
        q.done = event_new(dev);  // leaves this thread on the backend's device: the stream goes there
        if (q.tail && q.done) err = g_cuda.stream_create_with_flags(&q.stream, CUDA_STREAM_NON_BLOCKING);
        // CUDA starts the thread that runs host functions on first use: not during a delay
        if (!err && q.stream) err = g_cuda.launch_host_func(q.stream, [](void *) {}, nullptr);
        if (!err && q.stream) open_spin(q);
    }).join();
    if (!q.tail || !q.done || err) {
        cuda_warn("cannot create the private stream", err);
        return false;
    }
    q.failed = false;
    return true;
}

enum Injected { INJ_NO, INJ_YES, INJ_FAILED };
enum BackendKind : uint8_t { BK_UNKNOWN, BK_OTHER, BK_CUDA };
std::atomic<uint8_t> g_backend_kind[MAX_BACKENDS];

// Whether `backend` takes stream delays. The first call for a CUDA backend opens its private
// stream then, before any delay, so that the set-up (milliseconds) does not lengthen one.
bool stream_ready(ggml_backend_t backend, uint32_t index, const ggml_backend_i & orig) {
    if (index >= (uint32_t) MAX_BACKENDS) return false;
    uint8_t kind = g_backend_kind[index].load(std::memory_order_acquire);
    if (kind == BK_UNKNOWN) {
        kind = BK_OTHER;
        if (is_cuda(backend)) {
            std::call_once(g_cuda_once, resolve_cuda);
            if (!g_cuda.ok || !orig.event_record || !orig.event_wait) {
                static std::once_flag warned;
                std::call_once(warned, [] { cuda_warn("the CUDA runtime or the backend's events are not available", 0); });
            } else {
                StreamQueue & q = g_queues[index];
                std::lock_guard<std::mutex> lock(q.m);
                kind = q.backend == backend || open_queue(q, backend) ? BK_CUDA : BK_OTHER;
            }
        }
        g_backend_kind[index].store(kind, std::memory_order_release);
    }
    return kind == BK_CUDA;
}

// The private stream waits for the backend stream's work so far, sleeps, records `done`; the
// backend stream waits for `done`. So the backend stream stalls `ns` at this point of its queue.
Injected stream_delay(ggml_backend_t backend, uint32_t index, const ggml_backend_i & orig, uint64_t ns,
                      const CallContext & delay) {
    StreamQueue & q = g_queues[index];
    std::lock_guard<std::mutex> lock(q.m);
    if (q.failed || q.backend != backend) return INJ_NO;
    orig.event_record(backend, q.tail);
    int err = g_cuda.stream_wait_event(q.stream, q.tail->context, 0);
    if (err) {
        cuda_warn("cudaStreamWaitEvent failed", err);
        return INJ_NO;
    }
    StreamDelay * d = new StreamDelay{ns, delay, index};
    if (q.spin) {
        d->slot = q.slots + 2 * (q.next_slot++ % SPIN_SLOTS);
        d->slot[0] = d->slot[1] = 0;
        d->gpu_minus_host = q.gpu_minus_host;
        void * out = (void *) d->slot;
        void * params[] = {&d->ns, &out};
        void * popped = nullptr;
        // in the device's context, and tied to the delay's own id (not the target call's) in CUPTI
        if (cupti_active()) cupti_push(delay.call_id);
        g_drv.ctx_push(q.ctx);
        err = g_drv.launch_kernel(q.spin, 1, 1, 1, 1, 1, 1, 0, q.stream, params, nullptr);
        g_drv.ctx_pop(&popped);
        if (cupti_active()) cupti_pop();
        if (err) {
            delete d;
            fprintf(stderr, "ggml-trace: CUDA stream delays: cuLaunchKernel failed (%d)\n", err);
            return INJ_NO;
        }
    } else {
        err = g_cuda.launch_host_func(q.stream, on_stream, d);
        if (err) {
            delete d;
            cuda_warn("cudaLaunchHostFunc failed", err);
            return INJ_NO;
        }
    }
    err = g_cuda.event_record(q.done->context, q.stream);
    if (err) {  // the sleep is queued but the backend's stream will not wait for it
        fprintf(stderr, "ggml-trace: CUDA stream delays: cudaEventRecord failed (%s)\n",
                g_cuda.error_string ? g_cuda.error_string(err) : "?");
        q.failed = true;
        if (q.spin) delete d;  // (a host function owns its own)
        return INJ_FAILED;
    }
    orig.event_wait(backend, q.done);
    device_timing_waited(index);  // the event watcher must time the next operation's start
    // after `done`: the backend's stream does not wait for the record of the spin's times
    if (q.spin && g_cuda.launch_host_func(q.stream, after_spin, d)) delete d;
    return INJ_YES;
}

}  // namespace

// ---------------------------------------------------------------- interface

void delay_init(bool tracing) {
    const char * text = getenv("GGML_TRACE_DELAY");
    if (!text || !*text) return;
    if (!tracing) {
        fprintf(stderr, "ggml-trace: GGML_TRACE_DELAY is set but GGML_TRACE_OUTPUT is not: no delays injected "
                        "(each delay is recorded in the trace)\n");
        return;
    }
    char err[512];
    if (!delay_parse(text, err, sizeof(err))) {
        fprintf(stderr, "ggml-trace: %s (GGML_TRACE_DELAY; see docs/delay.md)\n", err);
        exit(2);
    }
}

void delay_start() {
    if (g_delay_n_rules == 0) return;
    char buf[MAX_DELAY_RULES * sizeof(DelayRule::text)];
    size_t len = 0;
    for (int i = 0; i < g_delay_n_rules; i++) {
        len += (size_t) snprintf(buf + len, sizeof(buf) - len, "%s%s", i ? ";" : "", g_delay_rules[i].text);
    }
    write_meta("delay.rules", buf, len);
    for (int i = 0; i < g_delay_n_rules; i++) {  // which queue each rule acts on (a peer copy: its source's)
        char words[400];
        delay_rule_queue_words(g_delay_rules[i], words, sizeof(words));
        fprintf(stderr, "ggml-trace: delay rule %d '%s' %s\n", i, g_delay_rules[i].text, words);
    }
    g_delay_on = true;
}

void delay_prepare(ggml_backend_t backend, uint32_t index, const ggml_backend_i & own) {
    if (!delay_on()) return;
    const char * name = g_api.backend_name(backend);
    bool named = false;  // a rule may act on this backend's queue
    for (int i = 0; i < g_delay_n_rules && !named; i++) {
        named = delay_rule_may_act_on(g_delay_rules[i], name);
    }
    ggml_backend_dev_t dev = g_api.backend_get_device(backend);
    enum ggml_backend_dev_type type = dev && g_api.dev_type ? g_api.dev_type(dev) : GGML_BACKEND_DEVICE_TYPE_CPU;
    bool device = type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU;
    // virtual devices stall their own queue, CUDA its stream (stream_delay)
    bool own_delay = (name && strncmp(name, "VDEV", 4) == 0) || is_cuda(backend);
    if (named && device && !own_delay) {
        work_prepare(backend, index, own);
    }
}

void delay_before(CallRec & call, ggml_backend_t backend, uint32_t index, const ggml_backend_i & orig,
                  ggml_cgraph * graph, const ggml_tensor * a, const ggml_tensor * b, ggml_backend_t named,
                  ggml_backend_t source) {
    std::call_once(g_ops_once, resolve_ops);
    bool stream = stream_ready(backend, index, orig);
    DelayQuery q;
    q.kind = call.kind;
    q.graph = call.graph;
    q.split = call.split;
    q.backend_name = g_api.backend_name(named ? named : backend);
    q.queue_name = g_api.backend_name(backend);
    q.source_name = source ? g_api.backend_name(source) : nullptr;
    q.op_first = q.op_last = -1;
    q.has_tensor = nullptr;
    q.ctx = nullptr;
    TensorPair pair{a, b};
    if (graph) {
        int n = g_api.graph_n_nodes(graph);
        if (n > 0) {
            q.op_first = (int) g_api.graph_node(graph, 0)->op;
            q.op_last = (int) g_api.graph_node(graph, n - 1)->op;
        }
        q.has_tensor = graph_has_tensor;
        q.ctx = graph;
    } else if (a || b) {
        q.has_tensor = pair_has_tensor;
        q.ctx = &pair;
    }
    DelayHit hits[MAX_DELAY_RULES];
    int n = delay_match(q, hits, MAX_DELAY_RULES);
    for (int i = 0; i < n; i++) {
        CallContext delay{next_call_id(), call.graph, call.split};
        uint64_t t0 = now_ticks();
        uint8_t where = DELAY_HOST;
        bool failed = false;
        if (g_vdev_delay && g_vdev_delay(backend, hits[i].ns, delay.call_id, delay.graph, delay.split)) {
            where = DELAY_QUEUE;
        } else {
            Injected inj = stream ? stream_delay(backend, index, orig, hits[i].ns, delay) : INJ_NO;
            where = inj == INJ_NO ? DELAY_HOST : DELAY_STREAM;
            failed = inj == INJ_FAILED;
            if (inj == INJ_NO && work_delay(backend, index, orig, hits[i].ns, delay_call(call, index, delay, t0))) {
                where = DELAY_WORK;
            } else if (inj == INJ_NO) {
                delay_sleep_ns(hits[i].ns);
            }
        }
        uint64_t t1 = now_ticks();
        write_delay(call, index, hits[i], delay.call_id, where, failed, t0, t1);
        if (!g_rule_acted[hits[i].rule].exchange(true, std::memory_order_relaxed)) {  // said once a rule
            static const char * const WHERE[] = {"the host, before submitting to", "the queue of", "the stream of",
                                                 "matrix products on the queue of"};
            const char * queue = q.queue_name ? q.queue_name : "?";
            const char * callee = q.backend_name ? q.backend_name : "?";
            bool other = strcmp(queue, callee) != 0;
            fprintf(stderr, "ggml-trace: delay rule %d first acted on %s %s%s%s%s\n", hits[i].rule, WHERE[where & 3],
                    queue, other ? " (the delayed call is " : "", other ? callee : "",
                    other ? "'s: a copy runs on its source's queue)" : "");
        }
        if (where == DELAY_HOST) {
            call.t_begin = now_ticks();
        }
    }
}

}  // namespace ggml_trace
