// Writes a flight-recorder (ring) trace from several threads at once, for the ring tests: each
// thread writes CALL records numbered 0, 1, 2... in `arg` (one ACCESS record after each, naming a
// tensor out of 5000, so that names keep being evicted from the threads' string caches) until
// the time is up, with a pause now and then so that the threads write at different rates; PACE
// caps each thread's calls per millisecond (0: as fast as it can). SECONDS `stdin`: until standard
// input ends (a test closes it once it has done what it does while the program writes: it never races
// a fixed time), then one call more from each thread, so that every thread's last call follows it.
//   ring-writer PATH SECONDS|stdin THREADS KEEP_MS MAX_BYTES [PACE [exit|abort]]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "trace_writer.h"

using namespace ggml_trace;

static std::atomic<bool> g_input_ended{false};

// seconds < 0: until standard input ends
static void write_thread(int t, double seconds, uint64_t pace, std::atomic<uint64_t> * total) {
    uint64_t start = monotonic_ns();
    uint64_t end = seconds < 0 ? UINT64_MAX : start + (uint64_t) (seconds * 1e9);
    uint64_t i = 0;
    char name[32];
    for (;; i++) {
        bool last = g_input_ended.load();  // seen before this call is written: the call follows the end
        if (!last && monotonic_ns() >= end) break;
        uint64_t id = 0;
        bool ok = emit_record<CallRec>(REC_CALL, [&](CallRec & r) {
            r.thread = thread_index();
            r.t_begin = now_ticks();
            r.kind = K_GRAPH_COMPUTE;
            r.sched = 0xff;
            r.call_id = id = next_call_id();
            r.backend = NONE32;
            r.backend2 = NONE32;
            r.graph = NONE32;
            r.split = -1;
            r.arg = i;
            r.obj = (uint64_t) t;
            r.t_end = now_ticks();
        });
        if (!ok) break;
        snprintf(name, sizeof(name), "tensor-%d", (int) ((i * 7919 + t) % 5000));
        uint64_t sid = intern(name);  // before the slot: interning may write a STRING record
        ok = emit_record<AccessRec>(REC_ACCESS, [&](AccessRec & a) {
            a.mode = ACC_READ;
            a.thread = thread_index();
            a.call_id = id;
            a.size = 64;
            a.tensor = sid;
            a.op = NONE32;
            a.index = NONE32;
        });
        if (!ok) break;
        if (last) {
            i++;
            break;
        }
        maybe_clock_sync();
        if (i % (1000 * (t + 1)) == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
        while (pace && i > pace * ((monotonic_ns() - start) / 1000000)) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    *total += i;
}

int main(int argc, char ** argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: ring-writer PATH SECONDS|stdin THREADS KEEP_MS MAX_BYTES [PACE [exit|abort]]\n");
        return 2;
    }
    RingConfig ring;
    ring.keep_ns = (uint64_t) (atof(argv[4]) * 1e6);
    ring.max_bytes = strtoull(argv[5], nullptr, 10);
    if (!writer_open(argv[1], "ring-writer", 0, ring)) return 1;
    write_meta("program", "ring-writer", 11);
    std::atomic<uint64_t> total{0};
    std::vector<std::thread> ts;
    uint64_t pace = argc > 6 ? strtoull(argv[6], nullptr, 10) : 0;
    bool until_input_ends = strcmp(argv[2], "stdin") == 0;
    std::thread input;
    if (until_input_ends) input = std::thread([] {
        while (fgetc(stdin) != EOF) {}
        g_input_ended = true;
    });
    for (int t = 0; t < atoi(argv[3]); t++)
        ts.emplace_back(write_thread, t, until_input_ends ? -1.0 : atof(argv[2]), pace, &total);
    for (auto & t : ts) t.join();
    if (input.joinable()) input.join();
    printf("calls %llu\n", (unsigned long long) total.load());
    fflush(stdout);
    if (argc > 7 && strcmp(argv[7], "abort") == 0) abort();
    writer_close();
    return 0;
}
