#include "delay_work.h"

#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "capture.h"
#include "device_timing.h"
#include "ggml_api.h"
#include "registry.h"
#include "trace_writer.h"

namespace ggml_trace {

namespace {

// ggml's graph API, from the program's own libggml-base (the hooks do not link ggml).
struct GraphApi {
    ggml_context * (*init)(ggml_init_params);
    ggml_tensor * (*new_tensor_2d)(ggml_context *, ggml_type, int64_t, int64_t);
    ggml_tensor * (*mul_mat)(ggml_context *, ggml_tensor *, ggml_tensor *);
    ggml_cgraph * (*new_graph_custom)(ggml_context *, size_t, bool);
    void (*build_forward_expand)(ggml_cgraph *, ggml_tensor *);
    size_t (*graph_overhead_custom)(size_t, bool);
    ggml_backend_buffer_t (*buft_alloc_buffer)(ggml_backend_buffer_type_t, size_t);
    enum ggml_status (*tensor_alloc)(ggml_backend_buffer_t, ggml_tensor *, void *);
    void (*tensor_set)(ggml_tensor *, const void *, size_t, size_t);
    void (*tensor_get)(const ggml_tensor *, void *, size_t, size_t);
    bool ok;
};
GraphApi g_graph;
std::once_flag g_graph_once;

void resolve_graph_api() {
    const char * user = "device-side delays";
    g_graph.ok = resolve_symbol(g_graph.init, "ggml_init", false, user) &&
                 resolve_symbol(g_graph.new_tensor_2d, "ggml_new_tensor_2d", false, user) &&
                 resolve_symbol(g_graph.mul_mat, "ggml_mul_mat", false, user) &&
                 resolve_symbol(g_graph.new_graph_custom, "ggml_new_graph_custom", false, user) &&
                 resolve_symbol(g_graph.build_forward_expand, "ggml_build_forward_expand", false, user) &&
                 resolve_symbol(g_graph.graph_overhead_custom, "ggml_graph_overhead_custom", false, user) &&
                 resolve_symbol(g_graph.buft_alloc_buffer, "ggml_backend_buft_alloc_buffer", false, user) &&
                 resolve_symbol(g_graph.tensor_alloc, "ggml_backend_tensor_alloc", false, user) &&
                 resolve_symbol(g_graph.tensor_set, "ggml_backend_tensor_set", false, user) &&
                 resolve_symbol(g_graph.tensor_get, "ggml_backend_tensor_get", false, user);
}

const int MIN_N = 64, MAX_N = 2048;   // product sizes tried, doubling
const double TARGET_PRODUCT_US = 50;  // the smallest product at least this long: the delay's grain
const int MAX_REPS = 4096;            // products in one delay (a delay longer than this many is cut)
const int TIMED_FEW = 4, TIMED_MANY = 32;  // two chains timed: the difference is the products' own time
const int STABLE_PAIRS = 8;                // timed until the shortest long chain held this many turns,
const double STABLE_GAIN = 0.03;           // (shorter by less than this share does not count)
const int MAX_SIZING_MS = 1500;            // or for this long at one size

// One backend's products: weights a, b and two result buffers the chain alternates between, in a
// buffer of the backend's own; one graph per number of products, made on first use and kept (a
// queued graph may still name its tensors), never freed: the process ends with them.
struct Work {
    ggml_backend_t backend = nullptr;
    enum ggml_status (*graph_compute)(ggml_backend_t, ggml_cgraph *) = nullptr;  // the unpatched entry
    ggml_backend_buffer_t buf = nullptr;
    ggml_tensor * a = nullptr;
    ggml_tensor * b = nullptr;
    void * out[2] = {nullptr, nullptr};
    int n = 0;
    double product_ns = 0;  // one more product in the chain
    double fixed_ns = 0;    // a chain's own cost beyond its products (submitting it), at least 0
    std::mutex m;
    std::map<int, ggml_cgraph *> graphs;  // by number of products
};
Work g_work[MAX_BACKENDS];

// The graph of `reps` chained products: p1 = a·b, p2 = a·p1, ...; each result in the other buffer.
ggml_cgraph * chain(Work & w, int reps) {
    auto it = w.graphs.find(reps);
    if (it != w.graphs.end()) return it->second;
    // the graph holds the products and, as leaves, a and b: its hash set must take them all
    const size_t size = (size_t) reps + 2;
    ggml_init_params params = {(size_t) reps * g_api.tensor_overhead() + g_graph.graph_overhead_custom(size, false),
                               nullptr, true};
    ggml_context * ctx = g_graph.init(params);
    if (!ctx) return nullptr;
    ggml_cgraph * graph = g_graph.new_graph_custom(ctx, size, false);
    ggml_tensor * p = w.b;
    for (int r = 0; r < reps; r++) {
        p = g_graph.mul_mat(ctx, w.a, p);
        if (g_graph.tensor_alloc(w.buf, p, w.out[r % 2]) != GGML_STATUS_SUCCESS) return nullptr;
        g_graph.build_forward_expand(graph, p);
    }
    w.graphs[reps] = graph;
    return graph;
}

// Allocates weights of size n in the backend's default buffer type; false (nothing changed) on failure.
bool allocate(Work & w, int n) {
    ggml_backend_buffer_type_t buft = g_api.backend_get_default_buffer_type(w.backend);
    size_t bytes = (size_t) n * n * sizeof(float), align = 256;
    size_t stride = (bytes + align - 1) / align * align;
    ggml_backend_buffer_t buf = buft ? g_graph.buft_alloc_buffer(buft, 4 * stride + align) : nullptr;
    if (!buf) return false;
    ggml_init_params params = {2 * g_api.tensor_overhead(), nullptr, true};
    ggml_context * ctx = g_graph.init(params);  // kept: the tensors live as long as the buffer
    if (!ctx) return false;
    char * base = (char *) g_api.buffer_get_base(buf);
    base += (align - (uintptr_t) base % align) % align;
    ggml_tensor * a = g_graph.new_tensor_2d(ctx, GGML_TYPE_F32, n, n);
    ggml_tensor * b = g_graph.new_tensor_2d(ctx, GGML_TYPE_F32, n, n);
    if (g_graph.tensor_alloc(buf, a, base) != GGML_STATUS_SUCCESS ||
        g_graph.tensor_alloc(buf, b, base + stride) != GGML_STATUS_SUCCESS) {
        return false;
    }
    std::vector<float> v((size_t) n * n, 1.0f / (float) n);  // an average: chained products stay bounded
    g_graph.tensor_set(a, v.data(), 0, bytes);
    g_graph.tensor_set(b, v.data(), 0, bytes);
    w.a = a;
    w.b = b;
    w.out[0] = base + 2 * stride;
    w.out[1] = base + 3 * stride;
    w.buf = buf;
    w.n = n;
    w.graphs.clear();
    return true;
}

// One run of a chain, ns (0 when the backend cannot run it). Done when its last product is read
// back: RPC's synchronize only waits until the graph is sent (the server answers no graph), and
// its server runs each command in order, so the read waits for the products.
double run_chain(Work & w, const ggml_backend_i & orig, ggml_cgraph * graph) {
    auto t0 = std::chrono::steady_clock::now();
    if (orig.graph_compute(w.backend, graph) != GGML_STATUS_SUCCESS) return 0;
    if (orig.synchronize) orig.synchronize(w.backend);
    float last;
    g_graph.tensor_get(g_api.graph_node(graph, -1), &last, 0, sizeof(last));
    return (double) std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
}

// The shortest times of a chain of TIMED_FEW and of TIMED_MANY products, ns, timed in turn after a
// first run of each (which compiles and sizes what the backend needs); false when the backend cannot
// run them. The shortest, and timed until the shortest long chain has held for STABLE_PAIRS turns:
// a program's start can keep the machine busy for a few hundred milliseconds (lavapipe on 2 cores:
// products sized then came out 1.4x too long, so delays came out that much too short).
bool time_chains(Work & w, const ggml_backend_i & orig, double & few, double & many) {
    ggml_cgraph * g_few = chain(w, TIMED_FEW);
    ggml_cgraph * g_many = g_few ? chain(w, TIMED_MANY) : nullptr;
    if (!g_many || run_chain(w, orig, g_few) <= 0 || run_chain(w, orig, g_many) <= 0) return false;
    few = many = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int held = 0; held < STABLE_PAIRS; held++) {
        double a = run_chain(w, orig, g_few), b = run_chain(w, orig, g_many);
        if (a <= 0 || b <= 0) return false;
        few = few == 0 ? a : std::min(few, a);
        if (many == 0 || b < many * (1 - STABLE_GAIN)) held = -1;
        many = many == 0 ? b : std::min(many, b);
        if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(MAX_SIZING_MS)) break;
    }
    return true;
}

}  // namespace

void work_prepare(ggml_backend_t backend, uint32_t index, const ggml_backend_i & orig) {
    if (index >= (uint32_t) MAX_BACKENDS || !orig.graph_compute) return;
    std::call_once(g_graph_once, resolve_graph_api);
    if (!g_graph.ok) return;
    Work & w = g_work[index];
    std::lock_guard<std::mutex> lock(w.m);
    OwnCalls own;
    w.backend = backend;
    for (int n = MIN_N; n <= MAX_N; n *= 2) {
        if (!allocate(w, n)) break;
        double few = 0, many = 0;
        if (!time_chains(w, orig, few, many)) {  // a size the backend cannot run: none is used (nor would a larger one)
            w.product_ns = 0;
            break;
        }
        // per product: the difference; what a chain costs beyond that (its submission): the rest
        w.product_ns = std::max(many - few, many / 4) / (TIMED_MANY - TIMED_FEW);
        w.fixed_ns = std::max(0.0, few - TIMED_FEW * w.product_ns);
        if (w.product_ns >= TARGET_PRODUCT_US * 1000) break;
    }
    if (w.product_ns <= 0) {
        fprintf(stderr, "ggml-trace: %s cannot run device-side delays; they act on the host instead\n",
                g_api.backend_name(backend));
        return;
    }
    w.graph_compute = orig.graph_compute;
    char meta[160];
    int len = snprintf(meta, sizeof(meta), "products of %dx%d f32 on %s: %.1f us each, %.1f us a chain besides", w.n, w.n,
                       g_api.backend_name(backend), w.product_ns / 1e3, w.fixed_ns / 1e3);
    char key[48];
    snprintf(key, sizeof(key), "delay.work.%u", index);
    write_meta(key, meta, (size_t) len);
}

bool work_delay(ggml_backend_t backend, uint32_t index, const ggml_backend_i & orig, uint64_t ns, const CallRec & delay) {
    if (index >= (uint32_t) MAX_BACKENDS) return false;
    Work & w = g_work[index];
    if (!w.graph_compute || w.backend != backend) return false;
    // rounded up: as sized, at least what was asked (by up to one product more); the products' real
    // time varies around that (docs/delay.md)
    int reps = std::min(MAX_REPS, (int) std::ceil(((double) ns - w.fixed_ns) / w.product_ns));
    if (ns == 0) return true;  // (rand: can draw 0) nothing to enqueue
    reps = std::max(reps, 1);
    std::lock_guard<std::mutex> lock(w.m);
    OwnCalls own;  // a new chain's tensors placed in the products' buffer
    ggml_cgraph * graph = chain(w, reps);
    if (!graph) return false;
    TimedOp op = device_timing_begin(backend, index, orig);
    bool ok = w.graph_compute(backend, graph) == GGML_STATUS_SUCCESS;
    if (ok) {
        device_timing_end(op, backend, delay);
    } else {
        device_timing_cancel(op);
    }
    return ok;
}

}  // namespace ggml_trace
