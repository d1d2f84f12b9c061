// A device's resident work, as a model's layers on its weights: products of n x n weights uploaded
// once into the device's memory (never written from the host between graphs), chained in every
// graph so that later work on the device's queue waits behind them. Sized on the device before the
// first graph: n doubles from 256 until one product takes an eighth of the time asked (4096 at
// most), then enough products to exceed it (64 at most).
//
// One source for the scheduler scenarios (scenarios.cpp includes it) and for the standalone
// reproductions `ggml-trace reduce` writes (tracer/repro_cpp.py copies this file into repro.cpp,
// which must build against ggml alone): plain ggml API, nothing of this project.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

struct Work {
    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t buf = nullptr;
    ggml_tensor * a = nullptr;
    ggml_tensor * b = nullptr;
    ggml_tensor * c = nullptr;  // where the timed product goes
    int n = 0, reps = 0;
    double ms = 0;  // one product, measured
};

// Every size tried; freed only at exit (free_works): ggml-vulkan's descriptor sets keep naming a
// freed buffer, and lavapipe crashed reading them when the timed product's buffer was freed before
// the graphs ran.
static std::vector<Work> g_works;

static Work upload_weights(ggml_backend_t dev, int n) {
    Work w;
    w.n = n;
    ggml_init_params params = {3 * ggml_tensor_overhead(), nullptr, true};
    w.ctx = ggml_init(params);
    w.a = ggml_new_tensor_2d(w.ctx, GGML_TYPE_F32, n, n);
    w.b = ggml_new_tensor_2d(w.ctx, GGML_TYPE_F32, n, n);
    w.c = ggml_new_tensor_2d(w.ctx, GGML_TYPE_F32, n, n);
    w.buf = ggml_backend_alloc_ctx_tensors(w.ctx, dev);
    ggml_backend_buffer_set_usage(w.buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    std::vector<float> v((size_t) n * n, 1.0f / n);  // a averages: chained products stay bounded
    ggml_backend_tensor_set(w.a, v.data(), 0, ggml_nbytes(w.a));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> d(-1, 1);
    for (float & x : v) x = d(rng);
    ggml_backend_tensor_set(w.b, v.data(), 0, ggml_nbytes(w.b));
    return w;
}

// One product on the device, synchronously, in ms: the second of two (the first compiles and sizes buffers).
static double time_product(ggml_backend_t dev, const Work & w) {
    ggml_init_params params = {2 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
    ggml_context * ctx = ggml_init(params);
    ggml_tensor * p = ggml_mul_mat(ctx, w.a, w.b);
    ggml_backend_tensor_alloc(w.buf, p, w.c->data);
    ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, p);
    double ms = 0;
    for (int i = 0; i < 2; i++) {
        auto t0 = std::chrono::steady_clock::now();
        ggml_backend_graph_compute(dev, graph);
        ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    ggml_free(ctx);
    return ms;
}

// The size for `target_ms` of work on `dev`: its index in g_works.
static size_t size_work(ggml_backend_t dev, double target_ms) {
    for (int n = 256;; n *= 2) {
        g_works.push_back(upload_weights(dev, n));
        Work & w = g_works.back();
        w.ms = time_product(dev, w);
        if (w.ms >= target_ms / 8 || n >= 4096) break;
    }
    Work & w = g_works.back();
    w.reps = std::min(64, std::max(1, (int) std::ceil(target_ms / w.ms)));
    return g_works.size() - 1;
}

static void free_works() {
    for (Work & w : g_works) {
        ggml_backend_buffer_free(w.buf);
        ggml_free(w.ctx);
    }
    g_works.clear();
}
