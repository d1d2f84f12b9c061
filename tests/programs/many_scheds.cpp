// Many schedulers on ggml's public API, for the capture tests: each scheduler K has a graph of its
// own (output tensor "out<K>") and the program prints one line per scheduler call it makes, in
// order ("new K", "reset K", "alloc K", "compute K", "sync K", "free K"), so that a test can pair
// the trace's scheduler calls with the scheduler that made them.
//   many-scheds N turns   N schedulers one after another: made, 1 to 3 graphs computed, freed
//   many-scheds N alive   N alive at once, computed in a shuffled order; the even ones freed and
//                         N/2 new ones made among the odd ones (they take the freed slots); all
//                         computed again, then freed (N + N/2 schedulers in all)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

namespace {

ggml_backend_t g_cpu;

struct Sched {
    int k = -1;
    ggml_backend_sched_t sched = nullptr;
    ggml_context * ctx = nullptr;
    ggml_tensor * x = nullptr;
    ggml_tensor * y = nullptr;
    ggml_cgraph * graph = nullptr;
};

void op(const char * what, int k) { printf("%s %d\n", what, k); }

Sched make(int k) {
    Sched s;
    s.k = k;
    op("new", k);
    s.sched = ggml_backend_sched_new(&g_cpu, nullptr, 1, 64, false, true);
    ggml_init_params params = {ggml_tensor_overhead() * 16 + ggml_graph_overhead_custom(64, false), nullptr, true};
    s.ctx = ggml_init(params);
    s.x = ggml_new_tensor_1d(s.ctx, GGML_TYPE_F32, 256);
    ggml_set_name(s.x, "x");
    ggml_set_input(s.x);
    s.y = ggml_scale(s.ctx, ggml_add(s.ctx, ggml_sqr(s.ctx, s.x), s.x), 0.5f);
    ggml_format_name(s.y, "out%d", k);
    ggml_set_output(s.y);
    s.graph = ggml_new_graph_custom(s.ctx, 64, false);
    ggml_build_forward_expand(s.graph, s.y);
    return s;
}

// One graph computed on s; its output checked against the host's own arithmetic.
void compute(Sched & s, int round) {
    op("reset", s.k);
    ggml_backend_sched_reset(s.sched);
    op("alloc", s.k);
    if (!ggml_backend_sched_alloc_graph(s.sched, s.graph)) {
        fprintf(stderr, "scheduler %d: alloc failed\n", s.k);
        exit(1);
    }
    std::vector<float> in(256), out(256);
    for (size_t i = 0; i < in.size(); i++) in[i] = (float) ((i + s.k + round) % 13) * 0.25f;
    ggml_backend_tensor_set(s.x, in.data(), 0, in.size() * sizeof(float));
    op("compute", s.k);
    if (ggml_backend_sched_graph_compute(s.sched, s.graph) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "scheduler %d: compute failed\n", s.k);
        exit(1);
    }
    op("sync", s.k);
    ggml_backend_sched_synchronize(s.sched);
    ggml_backend_tensor_get(s.y, out.data(), 0, out.size() * sizeof(float));
    for (size_t i = 0; i < in.size(); i++) {
        if (out[i] != (in[i] * in[i] + in[i]) * 0.5f) {
            fprintf(stderr, "scheduler %d: wrong output at %zu\n", s.k, i);
            exit(1);
        }
    }
}

void release(Sched & s) {
    op("free", s.k);
    ggml_backend_sched_free(s.sched);
    ggml_free(s.ctx);
    s.sched = nullptr;
}

}  // namespace

int main(int argc, char ** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 300;
    const char * mode = argc > 2 ? argv[2] : "turns";
    if (n <= 0 || n % 7 == 0 || n % 11 == 0) {  // the shuffles below step by 7 and 11
        fprintf(stderr, "many-scheds: N must be positive and prime to 7 and 11\n");
        return 2;
    }
    g_cpu = ggml_backend_cpu_init();
    if (strcmp(mode, "turns") == 0) {
        for (int k = 0; k < n; k++) {
            Sched s = make(k);
            for (int g = 0; g <= k % 3; g++) compute(s, g);
            release(s);
        }
    } else if (strcmp(mode, "alive") == 0) {
        std::vector<Sched> all;
        for (int k = 0; k < n; k++) all.push_back(make(k));
        for (int i = 0; i < n; i++) compute(all[(size_t) (i * 7 + 3) % n], 0);  // 7 and n coprime: each once
        for (int k = 0; k < n; k += 2) release(all[k]);
        for (int k = 0; k < n; k += 2) all[k] = make(n + k / 2);
        for (int i = n - 1; i >= 0; i--) compute(all[i], 1);
        for (int i = 0; i < n; i++) release(all[(size_t) (i * 11 + 5) % n]);
    } else {
        fprintf(stderr, "usage: many-scheds N turns|alive\n");
        return 2;
    }
    ggml_backend_free(g_cpu);
    fflush(stdout);
    return 0;
}
