// Cost of recording one event on the hot path: two clock reads, one 64-byte CALL record, and
// (for the "call+2 ranges" case) two ACCESS records with interned tensor names, as a hooked
// buffer set_tensor writes. Prints the median over repetitions, in ns per event and per record.
// Also the delay test the hooks make before each queued operation (delay_rules.h), without rules
// and with four rules that select nothing, beside the plain call record of the same run.
//   build/hooks-b10531/bench-writer [events] [threads] [ring]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include <fnmatch.h>

#include "delay_rules.h"
#include "trace_writer.h"

using namespace ggml_trace;

static void one_call(uint64_t i) {
    emit_record<CallRec>(REC_CALL, [&](CallRec & r) {
        r.thread = thread_index();
        r.t_begin = now_ticks();
        r.kind = K_GRAPH_COMPUTE;
        r.call_id = next_call_id();
        r.backend = 0;
        r.backend2 = NONE32;
        r.graph = (uint32_t) (i >> 4);
        r.split = (int32_t) (i & 15);
        r.arg = i;
        r.t_end = now_ticks();
    });
}

static void one_access(uint64_t call_id, const char * name, uint64_t off) {
    uint64_t id = intern(name);
    emit_record<AccessRec>(REC_ACCESS, [&](AccessRec & a) {
        a.mode = ACC_WRITE;
        a.thread = thread_index();
        a.call_id = call_id;
        a.buffer = 0x1000;
        a.offset = off;
        a.size = 4096;
        a.tensor = id;
        a.node = id;
    });
}

// The hooks' delay test before each operation (delay.cpp builds the query the same way).
static const char * g_nodes[8] = {"inp_embd", "Kcur-0", "Vcur-0", "attn_norm-0", "ffn_out-1", "result_norm", "kq-3", "CPU#Kcur-2#0"};
static bool nodes_match(const void *, const char * glob) {
    for (const char * n : g_nodes) {
        if (fnmatch(glob, n, 0) == 0) return true;
    }
    return false;
}
static uint64_t g_hits = 0;

static void call_with_delay_check(uint64_t i) {
    if (delay_on()) {
        DelayQuery q{K_GRAPH_COMPUTE, (uint32_t) (i >> 4), (int32_t) (i & 15), "CPU", 1, 2, nodes_match, nullptr};
        DelayHit hits[MAX_DELAY_RULES];
        g_hits += (uint64_t) delay_match(q, hits, MAX_DELAY_RULES);
    }
    one_call(i);
}

static double run_checked(uint64_t n) {
    uint64_t t0 = monotonic_ns();
    for (uint64_t i = 0; i < n; i++) {
        call_with_delay_check(i);
    }
    return (double) (monotonic_ns() - t0) / (double) n;
}

static double run(uint64_t n, bool with_ranges) {
    static const char * names[8] = {"inp_embd", "Kcur-0", "Vcur-0", "attn_norm-0", "ffn_out-1", "result_norm", "kq-3", "CPU#Kcur-2#0"};
    uint64_t t0 = monotonic_ns();
    for (uint64_t i = 0; i < n; i++) {
        one_call(i);
        if (with_ranges) {
            one_access(i, names[i & 7], i * 64);
            one_access(i, names[(i + 3) & 7], i * 64 + 4096);
        }
    }
    return (double) (monotonic_ns() - t0) / (double) n;
}

int main(int argc, char ** argv) {
    uint64_t n = argc > 1 ? strtoull(argv[1], nullptr, 10) : 2000000;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    const char * dir = getenv("BENCH_DIR") ? getenv("BENCH_DIR") : "/dev/shm";
    char path[4096];
    snprintf(path, sizeof(path), "%s/ggml-trace-bench-XXXXXX", dir);
    int fd = mkstemp(path);
    close(fd);
    const int reps = 7;
    // `ring`: the flight recorder's steady state instead (a 64 MiB ring, full, recycling its chunks).
    if (argc > 3 && strcmp(argv[3], "ring") == 0) {
        RingConfig ring;
        ring.max_bytes = 64u << 20;
        if (!writer_open(path, "bench", 0, ring)) return 1;
        run((2 * ring.max_bytes) / (3 * RECORD_SIZE), true);  // fill the ring once over
        std::vector<double> ns;
        for (int r = 0; r < reps; r++) {
            ns.push_back(run(n, true));
        }
        std::sort(ns.begin(), ns.end());
        printf("%-28s threads=1 events=%llu  median %.1f ns/event  %.1f ns/record  (goal <= 50 ns: %.2fx it)\n",
               "call + 2 ranges, ring 64 MiB, full speed", (unsigned long long) n, ns[reps / 2], ns[reps / 2] / 3,
               ns[reps / 2] / 50.0);
        writer_close();
        unlink(path);
        return 0;
    }
    if (!writer_open(path, "bench", 0)) return 1;
    // First as a real run writes: bursts of records (a token's worth) with pauses between, the
    // file growing 4 MiB at a time as they arrive. A background thread maps the next segment
    // ahead, so no burst should wait for the growth: compare the slowest bursts with the median.
    {
        const int bursts = 400, per_burst = 1000;
        std::vector<double> burst_ns;
        for (int b = 0; b < bursts; b++) {
            burst_ns.push_back(run(per_burst, true) * per_burst);
            std::this_thread::sleep_for(std::chrono::microseconds(500));
        }
        std::sort(burst_ns.begin(), burst_ns.end());
        printf("bursts of %d events (3 records each), file growing: median %.1f us, p99 %.1f us, max %.1f us a burst\n",
               per_burst, burst_ns[bursts / 2] / 1e3, burst_ns[bursts * 99 / 100] / 1e3, burst_ns.back() / 1e3);
    }
    // Then at full speed (GB/s): faster than the background thread can grow the file.
    {
        std::vector<double> grown;
        for (int r = 0; r < reps; r++) {
            grown.push_back(run(n, true));
        }
        std::sort(grown.begin(), grown.end());
        printf("%-28s threads=1 events=%llu  median %.1f ns/event  %.1f ns/record  (goal <= 50 ns: %.2fx it)\n",
               "call + 2 ranges, growing, full speed", (unsigned long long) n, grown[reps / 2], grown[reps / 2] / 3,
               grown[reps / 2] / 50.0);
    }
    // Hot path only: the file's pages are provisioned up front, as they are for a real run between
    // two 4 MiB segment growths. Growth itself is timed separately below.
    uint64_t grow_t0 = monotonic_ns();
    // (past what the growing runs above used)
    writer_reserve((uint64_t) (reps * n + 400 * 1000) * 3 * RECORD_SIZE + (uint64_t) reps * 4 * n * threads * RECORD_SIZE +
                   (64u << 20));
    double grow_ns = (double) (monotonic_ns() - grow_t0);
    double grow_per_record = grow_ns / ((double) reps * 4 * n * threads);
    for (int mode = 0; mode < 2; mode++) {
        std::vector<double> per_call;
        for (int r = 0; r < reps; r++) {
            std::vector<std::thread> ts;
            std::vector<double> res(threads);
            for (int t = 0; t < threads; t++) ts.emplace_back([&, t] { res[t] = run(n, mode == 1); });
            for (auto & t : ts) t.join();
            per_call.push_back(*std::max_element(res.begin(), res.end()));
        }
        std::sort(per_call.begin(), per_call.end());
        double med = per_call[reps / 2];
        int recs = mode == 1 ? 3 : 1;
        printf("%-28s threads=%d events=%llu  median %.1f ns/event  %.1f ns/record\n",
               mode == 1 ? "call + 2 byte ranges" : "call record", threads, (unsigned long long) n, med, med / recs);
    }
    // The delay test on the hot path, interleaved with the plain call record (same run): without
    // rules it is one predictable branch; with rules that select nothing, the matching itself.
    {
        char err[256];
        const char * rules = "CUDA1:graph_compute,graph=5:2000;VDEV0:cpy_tensor_async,tensor=Kcur-*:100;"
                             "CPU:graph_compute,graph=3-4,split=99:50;CPU:graph_compute,tensor=no-such-*:10";
        if (!delay_parse(rules, err, sizeof(err))) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        std::vector<double> plain, off, on;
        writer_reserve((uint64_t) (reps * n + 400 * 1000) * 3 * RECORD_SIZE + (uint64_t) reps * 4 * n * threads * RECORD_SIZE +
                       (uint64_t) reps * 3 * n * RECORD_SIZE + (64u << 20));  // these rows' records, provisioned too
        for (int r = 0; r < reps; r++) {
            plain.push_back(run(n, false));
            g_delay_on = false;
            off.push_back(run_checked(n));
            g_delay_on = true;
            on.push_back(run_checked(n));
            g_delay_on = false;
        }
        for (auto * v : {&plain, &off, &on}) std::sort(v->begin(), v->end());
        printf("%-28s threads=1 events=%llu  median %.1f ns/event\n", "call record (same run)", (unsigned long long) n,
               plain[reps / 2]);
        printf("%-28s threads=1 events=%llu  median %.1f ns/event  (+%.1f ns)\n", "call + delay test, no rules",
               (unsigned long long) n, off[reps / 2], off[reps / 2] - plain[reps / 2]);
        printf("%-28s threads=1 events=%llu  median %.1f ns/event  (+%.1f ns; %llu matches)\n",
               "call + 4 delay rules, no hit", (unsigned long long) n, on[reps / 2], on[reps / 2] - plain[reps / 2],
               (unsigned long long) g_hits);
    }
    printf("file growth (zeros written + populate), amortised: %.1f ns/record\n", grow_per_record);
    writer_close();
    unlink(path);
    return 0;
}
