// Scheduler scenarios: small graphs on ggml's public scheduler API that exercise the orderings
// async backends need. Each prints a hash of its result; `ggml-trace scenario` compares it with the
// same graph computed on the CPU alone. The async devices are ggml-trace's virtual devices (VDEVn),
// so the program runs under the hooks with GGML_TRACE_VIRTUAL_DEVICES set.
//   ggml-trace-scenarios NAME [--cpu-only] [--seed S]
// Graph pictures and what each scenario checks: docs/scenarios.md.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <random>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

namespace {

const int N = 4096;  // elements per tensor: large enough that reuse lands on whole tensors

struct Scenario {
    ggml_context * ctx;
    ggml_backend_sched_t sched;
    std::vector<ggml_backend_t> backends;  // VDEV0.., then the CPU (the scheduler wants it last)
    ggml_backend_t cpu;
    bool cpu_only;
    std::vector<std::pair<ggml_tensor *, std::vector<float>>> inputs;

    ggml_backend_t dev(int i) { return cpu_only ? cpu : backends[i]; }

    ggml_tensor * input(const char * name, std::mt19937 & rng) {
        ggml_tensor * t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N);
        ggml_set_name(t, name);
        ggml_set_input(t);
        std::vector<float> v(N);
        std::uniform_real_distribution<float> d(-1, 1);
        for (float & x : v) x = d(rng);
        inputs.push_back({t, v});
        return t;
    }

    ggml_tensor * on(ggml_backend_t b, ggml_tensor * t, const char * name) {
        ggml_set_name(t, name);
        ggml_backend_sched_set_tensor_backend(sched, t, b);
        return t;
    }
};

ggml_backend_t device_backend(const char * name) {
    ggml_backend_dev_t d = ggml_backend_dev_by_name(name);
    if (!d) {
        fprintf(stderr, "no device %s: run under `ggml-trace scenario` (or set GGML_TRACE_VIRTUAL_DEVICES)\n", name);
        exit(2);
    }
    return ggml_backend_dev_init(d, nullptr);
}

// The #23321 pattern. h (CPU) is copied asynchronously into VDEV0 for y; the next split, on the CPU
// and with no inputs of its own, computes z, which the allocator places on h's bytes (CONT cannot
// run in place, and h is dead once its copy is queued). Unless something orders that split after
// VDEV0's copy of h, z can overwrite h before VDEV0 reads it.
//   x -> [CPU] h=2x -> [VDEV0] y=3h -> [CPU] z=cont(w) -> [VDEV0] out=y+z
ggml_tensor * inputless_reuse(Scenario & s, std::mt19937 & rng) {
    ggml_tensor * x = s.input("x", rng);
    ggml_tensor * w = s.input("w", rng);
    ggml_tensor * h = s.on(s.cpu, ggml_scale(s.ctx, x, 2.0f), "h");
    ggml_tensor * y = s.on(s.dev(0), ggml_scale(s.ctx, h, 3.0f), "y");
    ggml_tensor * z = s.on(s.cpu, ggml_cont(s.ctx, w), "z");
    return s.on(s.dev(0), ggml_add(s.ctx, y, z), "out");
}

// Three successive splits without inputs from each other: CPU -> VDEV0 -> CPU, each writing bytes
// the allocator hands on to the next.
//   [CPU] a=x+1 -> [VDEV0] b=2w -> [CPU] c=3v -> [VDEV0] out=a+b+c
ggml_tensor * cpu_async_cpu(Scenario & s, std::mt19937 & rng) {
    ggml_tensor * x = s.input("x", rng);
    ggml_tensor * w = s.input("w", rng);
    ggml_tensor * v = s.input("v", rng);
    ggml_tensor * a = s.on(s.cpu, ggml_scale_bias(s.ctx, x, 1.0f, 1.0f), "a");
    ggml_tensor * b = s.on(s.dev(0), ggml_scale(s.ctx, w, 2.0f), "b");
    ggml_tensor * c = s.on(s.cpu, ggml_scale(s.ctx, v, 3.0f), "c");
    ggml_tensor * ab = s.on(s.dev(0), ggml_add(s.ctx, a, b), "ab");
    return s.on(s.dev(0), ggml_add(s.ctx, ab, c), "out");
}

typedef ggml_tensor * (*Builder)(Scenario &, std::mt19937 &);

struct Entry {
    const char * name;
    Builder build;
    int devices;
};

const Entry SCENARIOS[] = {
    {"inputless-reuse", inputless_reuse, 1},
    {"cpu-async-cpu", cpu_async_cpu, 1},
};

uint64_t fnv(const void * p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ ((const uint8_t *) p)[i]) * 0x100000001b3ull;
    }
    return h;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s NAME [--cpu-only] [--seed S]\nscenarios:", argv[0]);
        for (const Entry & e : SCENARIOS) fprintf(stderr, " %s", e.name);
        fprintf(stderr, "\n");
        return 2;
    }
    const Entry * entry = nullptr;
    for (const Entry & e : SCENARIOS) {
        if (strcmp(e.name, argv[1]) == 0) entry = &e;
    }
    if (!entry) {
        fprintf(stderr, "unknown scenario %s\n", argv[1]);
        return 2;
    }
    Scenario s;
    s.cpu_only = false;
    unsigned seed = 1;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--cpu-only") == 0) s.cpu_only = true;
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = (unsigned) atoi(argv[++i]);
    }
    s.cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(s.cpu, 1);  // small graphs; spinning thread pools only add noise
    if (!s.cpu_only) {
        for (int i = 0; i < entry->devices; i++) {
            std::string name = "VDEV" + std::to_string(i);
            s.backends.push_back(device_backend(name.c_str()));
        }
    }
    s.backends.push_back(s.cpu);
    s.sched = ggml_backend_sched_new(s.backends.data(), nullptr, (int) s.backends.size(), 256, false, false);
    ggml_init_params params = {ggml_tensor_overhead() * 256 + ggml_graph_overhead(), nullptr, true};
    s.ctx = ggml_init(params);
    std::mt19937 rng(seed);
    ggml_tensor * out = entry->build(s, rng);
    ggml_set_output(out);
    ggml_cgraph * graph = ggml_new_graph(s.ctx);
    ggml_build_forward_expand(graph, out);

    if (!ggml_backend_sched_alloc_graph(s.sched, graph)) {
        fprintf(stderr, "allocation failed\n");
        return 1;
    }
    for (auto & in : s.inputs) {
        ggml_backend_tensor_set(in.first, in.second.data(), 0, in.second.size() * sizeof(float));
    }
    if (ggml_backend_sched_graph_compute(s.sched, graph) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "compute failed\n");
        return 1;
    }
    std::vector<float> result(ggml_nelements(out));
    ggml_backend_tensor_get(out, result.data(), 0, result.size() * sizeof(float));
    printf("result %016llx %g %g\n", (unsigned long long) fnv(result.data(), result.size() * sizeof(float)),
           result[0], result[result.size() - 1]);

    ggml_backend_sched_free(s.sched);
    ggml_free(s.ctx);
    for (ggml_backend_t b : s.backends) ggml_backend_free(b);
    return 0;
}
