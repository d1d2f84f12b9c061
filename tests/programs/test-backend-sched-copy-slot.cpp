// Scheduler test: with pipeline parallelism, a split's input slot must not be overwritten while the split
// of an earlier graph still reads it.
//
// With parallel=true the scheduler keeps n_copies (GGML_SCHED_MAX_COPIES, 4) copies ("slots") of every split
// input and moves to the next one with every graph, so that it can queue graphs without waiting for the
// devices. Before it copies an input into a slot it must order that copy after the split that read the slot
// n_copies graphs earlier. It makes the destination's queue wait for the event recorded after that split;
// an asynchronous copy from another device may however run on the *source's* queue (CUDA copies between
// devices on the source stream), and a wait of the destination's queue does not hold such a copy back.
//
// The test: two devices A and B beside the CPU. a = 2x + 1 is computed on A and copied into one of B's
// slots; B first runs a chain of large matrix products that do not read the slot (they only make B slow: a
// stand-in for a sleep operation), then reads the slot: out = a + 0, written into a result buffer on B.
// Several graphs are queued with no synchronization, then all results are read once and compared exactly
// with 2x + 1. When B lags more than n_copies graphs behind A and nothing orders A's copies after B's reads,
// the copy of graph g + n_copies overwrites the slot before B of graph g reads it, and graph g's result
// holds the values of graph g + n_copies.
//
// usage: test-backend-sched-copy-slot [-d DEV_A,DEV_B] [-n GRAPHS] [-t MS]
//   -d  the two devices (default: the first two GPU devices); -n graphs queued (default 16);
//   -t  B's work a graph in milliseconds (default 50), sized on B at start
// Prints GREEN and exits 0 when every result is exact, RED and exits 1 when one is not; with fewer than two
// devices it prints SKIPPED and exits 0 (GGML_CUDA_DEVICES=2 makes two devices of one CUDA GPU).

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static const int64_t N_ELEMENTS = 4096; // the copied input: a, 16 KiB

static double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// the time of `reps` chained n x n products on `backend`, computed synchronously (the second of two runs)
static double time_products(ggml_backend_t backend, int n, int reps) {
    ggml_init_params params = { ggml_tensor_overhead() * (reps + 2) + ggml_graph_overhead(), nullptr, true };
    ggml_context * ctx = ggml_init(params);
    ggml_tensor * w = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, n);
    ggml_tensor * h = w;
    for (int r = 0; r < reps; r++) {
        h = ggml_mul_mat(ctx, w, h);
    }
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, h);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    if (buf == nullptr) {
        ggml_free(ctx);
        return -1;
    }
    ggml_backend_buffer_clear(buf, 0);
    double ms = 0;
    for (int run = 0; run < 2; run++) {
        const double t0 = now_ms();
        ggml_backend_graph_compute(backend, gf);
        ms = now_ms() - t0;
    }
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return ms;
}

struct work_size {
    int    n    = 256; // the products' size
    int    reps = 1;   // products a graph
    double ms   = 0;   // one product, measured
};

// n doubles from 256 until one product takes an eighth of the target (4096 at most), then enough of them
// for the target (64 at most): the same test keeps a fast GPU and a slow emulated device busy
static work_size size_work(ggml_backend_t backend, double target_ms) {
    work_size w;
    for (;;) {
        w.ms = time_products(backend, w.n, 1);
        if (w.ms < 0) {
            w.n /= 2;
            w.ms = time_products(backend, w.n, 1);
            break;
        }
        if (w.ms >= target_ms / 8 || w.n >= 4096) {
            break;
        }
        w.n *= 2;
    }
    w.reps = std::min(64, std::max(1, (int) std::ceil(target_ms / std::max(w.ms, 1e-3))));
    return w;
}

static ggml_backend_dev_t pick_device(const std::string & name) {
    ggml_backend_dev_t dev = ggml_backend_dev_by_name(name.c_str());
    if (dev == nullptr) {
        fprintf(stderr, "no device named %s\n", name.c_str());
        exit(2);
    }
    return dev;
}

int main(int argc, char ** argv) {
    std::string names;
    int    n_graphs  = 16;
    double target_ms = 50;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-d") == 0 && i + 1 < argc) {
            names = argv[++i];
        } else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            n_graphs = atoi(argv[++i]);
        } else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) {
            target_ms = atof(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [-d DEV_A,DEV_B] [-n GRAPHS] [-t MS]\n", argv[0]);
            return 2;
        }
    }
    if (n_graphs < 1 || n_graphs > 1024 || !(target_ms > 0 && target_ms <= 10000)) {
        fprintf(stderr, "-n 1..1024, -t 0..10000\n");
        return 2;
    }

    ggml_backend_load_all();

    std::vector<ggml_backend_dev_t> devs;
    if (!names.empty()) {
        const size_t comma = names.find(',');
        if (comma == std::string::npos) {
            fprintf(stderr, "-d: give two device names, A,B\n");
            return 2;
        }
        devs.push_back(pick_device(names.substr(0, comma)));
        devs.push_back(pick_device(names.substr(comma + 1)));
    } else {
        for (size_t i = 0; i < ggml_backend_dev_count() && devs.size() < 2; i++) {
            ggml_backend_dev_t dev = ggml_backend_dev_get(i);
            const enum ggml_backend_dev_type type = ggml_backend_dev_type(dev);
            if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) {
                devs.push_back(dev);
            }
        }
    }
    if (devs.size() < 2) {
        printf("SKIPPED: the test needs two GPU devices, found %zu\n", devs.size());
        return 0;
    }

    ggml_backend_t backend_a   = ggml_backend_dev_init(devs[0], nullptr);
    ggml_backend_t backend_b   = ggml_backend_dev_init(devs[1], nullptr);
    ggml_backend_t backend_cpu = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, nullptr);
    if (backend_a == nullptr || backend_b == nullptr || backend_cpu == nullptr) {
        fprintf(stderr, "cannot initialize the backends\n");
        return 2;
    }

    const work_size work = size_work(backend_b, target_ms);
    fprintf(stderr, "%s -> %s: %d products of %dx%d a graph on %s (%.3f ms each), %d graphs\n",
            ggml_backend_name(backend_a), ggml_backend_name(backend_b), work.reps, work.n, work.n,
            ggml_backend_name(backend_b), work.ms, n_graphs);

    // resident on B: the products' weights (zeros: the products add nothing to the result) and the results
    ggml_init_params params_res = { ggml_tensor_overhead() * 2, nullptr, true };
    ggml_context * ctx_res = ggml_init(params_res);
    ggml_tensor * w = ggml_new_tensor_2d(ctx_res, GGML_TYPE_F32, work.n, work.n);
    ggml_tensor * results = ggml_new_tensor_1d(ctx_res, GGML_TYPE_F32, N_ELEMENTS * n_graphs);
    ggml_set_name(w, "w");
    ggml_set_name(results, "results");
    ggml_backend_buffer_t buf_res = ggml_backend_alloc_ctx_tensors(ctx_res, backend_b);
    if (buf_res == nullptr) {
        fprintf(stderr, "cannot allocate the resident tensors on %s\n", ggml_backend_name(backend_b));
        return 2;
    }
    ggml_backend_buffer_clear(buf_res, 0);
    {
        std::vector<float> unset(N_ELEMENTS * n_graphs, -1.0f); // no result of this test is negative
        ggml_backend_tensor_set(results, unset.data(), 0, ggml_nbytes(results));
    }

    ggml_backend_t backends[3] = { backend_a, backend_b, backend_cpu };
    ggml_backend_sched_t sched = ggml_backend_sched_new(backends, nullptr, 3, GGML_DEFAULT_GRAPH_SIZE, true, false);
    const int n_copies = ggml_backend_sched_get_n_copies(sched);

    // one graph per iteration, allocated anew (as llama.cpp does for each ubatch), which moves the scheduler
    // on to its next slot; every context stays alive until the end, since queued work may still use it
    std::vector<ggml_context *> contexts;
    std::vector<float> x_values(N_ELEMENTS);
    const double t_start = now_ms();
    for (int g = 0; g < n_graphs; g++) {
        ggml_init_params params = { ggml_tensor_overhead() * (work.reps + 16) + ggml_graph_overhead(), nullptr, true };
        ggml_context * ctx = ggml_init(params);
        contexts.push_back(ctx);

        ggml_tensor * x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N_ELEMENTS);
        ggml_set_name(x, "x");
        ggml_set_input(x);
        ggml_tensor * a = ggml_scale_bias(ctx, x, 2.0f, 1.0f);
        ggml_set_name(a, "a");

        ggml_tensor * h = w;
        std::vector<ggml_tensor *> on_b;
        for (int r = 0; r < work.reps; r++) {
            h = ggml_mul_mat(ctx, w, h);
            on_b.push_back(h);
        }
        ggml_tensor * zeros = ggml_view_1d(ctx, h, N_ELEMENTS, 0);
        ggml_tensor * out = ggml_add(ctx, a, zeros); // B reads its copy of a only after the products
        ggml_set_name(out, "out");
        ggml_tensor * store = ggml_cpy(ctx, out, ggml_view_1d(ctx, results, N_ELEMENTS, g * N_ELEMENTS * sizeof(float)));
        on_b.push_back(zeros);
        on_b.push_back(out);
        on_b.push_back(store);

        ggml_cgraph * gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, store);

        ggml_backend_sched_reset(sched);
        ggml_backend_sched_set_tensor_backend(sched, a, backend_a);
        for (ggml_tensor * t : on_b) {
            ggml_backend_sched_set_tensor_backend(sched, t, backend_b);
        }
        if (!ggml_backend_sched_alloc_graph(sched, gf)) {
            fprintf(stderr, "graph %d: allocation failed\n", g);
            return 2;
        }
        if (g == 0) {
            fprintf(stderr, "splits %d, n_copies %d\n", ggml_backend_sched_get_n_splits(sched), n_copies);
        }
        for (int64_t i = 0; i < N_ELEMENTS; i++) {
            x_values[i] = (float) (g * N_ELEMENTS + i); // integers: 2x + 1 is exact in f32
        }
        ggml_backend_tensor_set(x, x_values.data(), 0, ggml_nbytes(x));
        if (ggml_backend_sched_graph_compute_async(sched, gf) != GGML_STATUS_SUCCESS) {
            fprintf(stderr, "graph %d: compute failed\n", g);
            return 2;
        }
    }
    const double t_queued = now_ms();
    ggml_backend_sched_synchronize(sched);
    const double t_done = now_ms();

    std::vector<float> got(N_ELEMENTS * n_graphs);
    ggml_backend_tensor_get(results, got.data(), 0, ggml_nbytes(results));
    int n_wrong = 0;
    for (int g = 0; g < n_graphs; g++) {
        int64_t bad = -1;
        for (int64_t i = 0; i < N_ELEMENTS && bad < 0; i++) {
            const float expected = 2.0f * (float) (g * N_ELEMENTS + i) + 1.0f;
            if (got[g * N_ELEMENTS + i] != expected) {
                bad = i;
            }
        }
        if (bad < 0) {
            continue;
        }
        n_wrong++;
        const float v = got[g * N_ELEMENTS + bad];
        const double from = ((double) v - 1.0) / 2.0 - (double) bad; // x of the graph whose values these are
        const double from_graph = from / N_ELEMENTS;
        printf("graph %d: out[%lld] = %.1f, expected %.1f", g, (long long) bad, v,
               2.0f * (float) (g * N_ELEMENTS + bad) + 1.0f);
        if (from_graph == std::floor(from_graph) && from_graph >= 0 && from_graph < n_graphs) {
            printf(" (the value of graph %d)", (int) from_graph);
        }
        printf("\n");
    }
    printf("host queued %d graphs in %.1f ms, the devices finished %.1f ms later\n", n_graphs, t_queued - t_start,
           t_done - t_queued);
    if (n_wrong > 0) {
        printf("RED: %d of %d graphs wrong (parallel, %d copies): %s overwrote an input slot of %s "
               "that a split of an earlier graph had not read yet\n",
               n_wrong, n_graphs, n_copies, ggml_backend_name(backend_a), ggml_backend_name(backend_b));
    } else {
        printf("GREEN: %d of %d graphs exact (parallel, %d copies)\n", n_graphs, n_graphs, n_copies);
    }

    ggml_backend_sched_free(sched);
    for (ggml_context * ctx : contexts) {
        ggml_free(ctx);
    }
    ggml_backend_buffer_free(buf_res);
    ggml_free(ctx_res);
    ggml_backend_free(backend_a);
    ggml_backend_free(backend_b);
    ggml_backend_free(backend_cpu);
    return n_wrong > 0 ? 1 : 0;
}
