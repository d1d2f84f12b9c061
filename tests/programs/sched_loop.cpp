// A small program on ggml's public scheduler API, for the capture tests: it computes one graph
// N times, prints "computed K" after each compute, then ends as asked (normally, abort(), SIGSEGV,
// or by computing on until it is killed from outside); with `seconds` it computes for N seconds
// and ends normally, so a test's run lasts as long on a fast machine as on a slow one.
//   sched-loop N [exit|abort|segv|forever|seconds] [--no-load-all]
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

int main(int argc, char ** argv) {
#ifdef _WIN32
    // as llama.cpp's programs do: on Windows the hooks come in so (GGML_BACKEND_PATH); with
    // --no-load-all, as a program that never does (its hooks then come in through ggml-trace-launch)
    if (!(argc > 3 && strcmp(argv[3], "--no-load-all") == 0)) ggml_backend_load_all();
#endif
    int n = argc > 1 ? atoi(argv[1]) : 10;
    const char * end = argc > 2 ? argv[2] : "exit";

    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_sched_t sched = ggml_backend_sched_new(&cpu, nullptr, 1, 1024, false, true);

    ggml_init_params params = {ggml_tensor_overhead() * 64 + ggml_graph_overhead(), nullptr, true};
    ggml_context * ctx = ggml_init(params);
    ggml_tensor * x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4096);
    ggml_set_name(x, "x");
    ggml_set_input(x);
    ggml_tensor * y = ggml_scale(ctx, ggml_add(ctx, ggml_sqr(ctx, x), x), 0.5f);
    ggml_set_name(y, "y");
    ggml_set_output(y);
    ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, y);

    const bool forever = strcmp(end, "forever") == 0;
    const bool timed = strcmp(end, "seconds") == 0;
    const auto stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(n);
    auto go_on = [&](int k) {
        if (forever) return true;
        if (timed) return std::chrono::steady_clock::now() < stop_at;
        return k <= n;
    };

    std::vector<float> in(4096), out(4096);
    for (int k = 1; go_on(k); k++) {
        ggml_backend_sched_reset(sched);
        ggml_backend_sched_alloc_graph(sched, graph);
        for (size_t i = 0; i < in.size(); i++) in[i] = (float) (i % 97) * 0.01f * k;
        ggml_backend_tensor_set(x, in.data(), 0, in.size() * sizeof(float));
        ggml_backend_sched_graph_compute(sched, graph);
        ggml_backend_tensor_get(y, out.data(), 0, out.size() * sizeof(float));
        printf("computed %d\n", k);
        fflush(stdout);
    }
    if (strcmp(end, "abort") == 0) abort();
#ifdef _WIN32
    if (strcmp(end, "segv") == 0) *(volatile int *) nullptr = 0;  // an access violation
#else
    if (strcmp(end, "segv") == 0) raise(SIGSEGV);
#endif

    ggml_backend_sched_free(sched);
    ggml_free(ctx);
    ggml_backend_free(cpu);
    return 0;
}
