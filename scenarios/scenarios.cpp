// Scheduler scenarios: small graphs on ggml's public scheduler API that exercise the orderings
// async backends need. Each prints a hash of its result; `ggml-trace scenario` compares it with the
// same graph computed on the CPU alone. The async devices are ggml-trace's virtual devices (VDEVn),
// so the program runs under the hooks with GGML_TRACE_VIRTUAL_DEVICES set.
//   ggml-trace-scenarios NAME [--cpu-only] [--seed S] [--backend vdev|vulkan] [--devices N]
//                        [--device NAME]... [--buffer pageable|pinned] [--parallel 0|1]
//                        [--rpc HOST:PORT]...   (a ggml-rpc-server's devices join the list: RPC0, ...)
//   ggml-trace-scenarios spec --spec FILE [...]   (a reproduction written by `ggml-trace reduce`)
//   ggml-trace-scenarios devices                  (the devices ggml lists here, a line each)
// Graph pictures and what each scenario checks: docs/scenarios.md; the spec language: docs/reduce.md.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <algorithm>
#include <vector>

#include "device_work.h"
#include "ggml-alloc.h"
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
    int n_devices;  // the devices the scenario spreads over (--devices; VDEV0.. when not folded)
    int n_elements = N;
    std::vector<ggml_tensor *> roots;  // a spec's ops (`out` among them), added to the graph in this order
    std::vector<std::pair<ggml_tensor *, std::vector<float>>> inputs;
    std::vector<std::pair<ggml_tensor *, ggml_backend_t>> placement;  // re-applied after each reset

    // With one real device (--backend vulkan) every device of the scenario folds onto it.
    ggml_backend_t dev(int i) { return cpu_only ? cpu : backends[std::min<size_t>(i, backends.size() - 2)]; }

    ggml_tensor * input(const char * name, std::mt19937 & rng) {
        ggml_tensor * t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n_elements);
        ggml_set_name(t, name);
        ggml_set_input(t);
        std::vector<float> v(n_elements);
        std::uniform_real_distribution<float> d(-1, 1);
        for (float & x : v) x = d(rng);
        inputs.push_back({t, v});
        return t;
    }

    ggml_tensor * on(ggml_backend_t b, ggml_tensor * t, const char * name) {
        ggml_set_name(t, name);
        placement.push_back({t, b});
        return t;
    }

    void place() {
        for (auto & p : placement) {
            ggml_backend_sched_set_tensor_backend(sched, p.first, p.second);
        }
    }
};

ggml_backend_t device_backend(const char * name) {
    ggml_backend_dev_t d = ggml_backend_dev_by_name(name);
    if (!d) {
        fprintf(stderr, "no device %s: run under `ggml-trace scenario` (or `ggml-trace record --virtual-devices N`)\n", name);
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

// Fan-in: two async devices compute in parallel, the CPU joins them.
//   [VDEV0] a = 2x ─┐
//   [VDEV1] b = 3w ─┴─▶ [CPU] out = a + b
ggml_tensor * y_graph(Scenario & s, std::mt19937 & rng) {
    ggml_tensor * x = s.input("x", rng);
    ggml_tensor * w = s.input("w", rng);
    ggml_tensor * a = s.on(s.dev(0), ggml_scale(s.ctx, x, 2.0f), "a");
    ggml_tensor * b = s.on(s.dev(1), ggml_scale(s.ctx, w, 3.0f), "b");
    return s.on(s.cpu, ggml_add(s.ctx, a, b), "out");
}

// Fan-out then fan-in across three backends: each device consumes the other's output.
//   [CPU] h = x + w ─┬─▶ [VDEV0] a = 2h ─┬─▶ [VDEV1] c = a * b ─┐
//                    └─▶ [VDEV1] b = 3h ─┴─▶ [VDEV0] d = a - b ─┴─▶ [CPU] out = c + d
ggml_tensor * x_graph(Scenario & s, std::mt19937 & rng) {
    ggml_tensor * x = s.input("x", rng);
    ggml_tensor * w = s.input("w", rng);
    ggml_tensor * h = s.on(s.cpu, ggml_add(s.ctx, x, w), "h");
    ggml_tensor * a = s.on(s.dev(0), ggml_scale(s.ctx, h, 2.0f), "a");
    ggml_tensor * b = s.on(s.dev(1), ggml_scale(s.ctx, h, 3.0f), "b");
    ggml_tensor * c = s.on(s.dev(1), ggml_mul(s.ctx, a, b), "c");
    ggml_tensor * d = s.on(s.dev(0), ggml_sub(s.ctx, a, b), "d");
    return s.on(s.cpu, ggml_add(s.ctx, c, d), "out");
}

// A seeded random DAG of 24 element-wise ops over three devices and the CPU.
ggml_tensor * random_dag(Scenario & s, std::mt19937 & rng) {
    std::vector<ggml_tensor *> pool = {s.input("x", rng), s.input("w", rng), s.input("v", rng)};
    char name[32];
    for (int i = 0; i < 24; i++) {
        ggml_tensor * p = pool[rng() % pool.size()];
        ggml_tensor * q = pool[rng() % pool.size()];
        ggml_tensor * t;
        switch (rng() % 4) {
            case 0: t = ggml_add(s.ctx, p, q); break;
            case 1: t = ggml_mul(s.ctx, p, q); break;
            case 2: t = ggml_scale(s.ctx, p, 0.5f); break;
            default: t = ggml_cont(s.ctx, p); break;
        }
        t = ggml_scale(s.ctx, t, 0.75f);  // keeps values bounded over long chains
        int b = (int) (rng() % 4);
        snprintf(name, sizeof(name), "n%d", i);
        ggml_tensor * placed = s.on(b == 3 ? s.cpu : s.dev(b), t, name);
        s.placement.push_back({t->src[0], b == 3 ? s.cpu : s.dev(b)});
        pool.push_back(placed);
    }
    ggml_tensor * out = pool[pool.size() - 1];
    for (size_t i = pool.size() - 6; i < pool.size() - 1; i++) {
        out = ggml_add(s.ctx, out, pool[i]);
    }
    return s.on(s.cpu, out, "out");
}

// Pipeline parallelism: a scheduler with parallel=true (several copies of the inputs, events
// between the devices) runs a four-stage chain eight times with new inputs, without synchronizing
// between iterations except to read each result.
//   x ─▶ [VDEV0] l0 ─▶ [VDEV1] l1 ─▶ [VDEV2] l2 ─▶ [CPU] out       (x 8 iterations)
ggml_tensor * pipeline(Scenario & s, std::mt19937 & rng) {
    ggml_tensor * x = s.input("x", rng);
    ggml_tensor * l0 = s.on(s.dev(0), ggml_scale_bias(s.ctx, x, 0.5f, 1.0f), "l0");
    ggml_tensor * l1 = s.on(s.dev(1), ggml_mul(s.ctx, l0, l0), "l1");
    ggml_tensor * l2 = s.on(s.dev(2), ggml_add(s.ctx, l1, l0), "l2");
    return s.on(s.cpu, ggml_scale(s.ctx, l2, 0.25f), "out");
}

// Pipeline parallelism across graphs, as llama.cpp's ubatches: parallel=true, and no synchronization
// between iterations, whose results are read asynchronously. Each iteration starts with a CPU split that
// writes e (llama.cpp's token embeddings, looked up on the CPU), which VDEV0 copies asynchronously from
// host memory; the next iteration's CPU split writes e again. Unless something orders that write after
// VDEV0's queued copy, VDEV0 reads the next iteration's e.
//   x ─▶ [CPU] e = 2x ─▶ [VDEV0] l0 = e + 1 ─▶ [VDEV1] out = l0 · l0       (x 8 iterations)
ggml_tensor * pipeline_input_reuse(Scenario & s, std::mt19937 & rng) {
    ggml_tensor * x = s.input("x", rng);
    ggml_tensor * e = s.on(s.cpu, ggml_scale(s.ctx, x, 2.0f), "e");
    ggml_tensor * l0 = s.on(s.dev(0), ggml_scale_bias(s.ctx, e, 1.0f, 1.0f), "l0");
    return s.on(s.dev(1), ggml_mul(s.ctx, l0, l0), "out");
}

// Backend API 3's allocation dependencies (upstream #27301): VDEV0's graph_optimize keeps its copy of
// the split input h ("VDEV0#h#0") allocated until node c (add_alloc_dep), which the scheduler turns
// into a GGML_OP_NONE node after c in the graph it allocates. Without the dependency a computes in place
// on the copy's bytes (its only reader); with it, a gets bytes of its own and out, the first tensor
// allocated after c, gets the copy's bytes. GGML_TRACE_VDEV_ALLOC_DEPS set by the caller (empty: none)
// takes precedence; builds before API 3 have no dependencies, so the placement is the first one.
//   x -> [CPU] h = 2x -> [VDEV0] a = 3h, b = a/2 + 1, c = b/4 (h kept until c), out = cont(c)
ggml_tensor * alloc_dep(Scenario & s, std::mt19937 & rng) {
    if (!getenv("GGML_TRACE_VDEV_ALLOC_DEPS")) {  // read by VDEV0 when the graph is allocated
#ifdef _WIN32
        _putenv("GGML_TRACE_VDEV_ALLOC_DEPS=VDEV0#h#0>c");
#else
        setenv("GGML_TRACE_VDEV_ALLOC_DEPS", "VDEV0#h#0>c", 0);
#endif
    }
    ggml_tensor * x = s.input("x", rng);
    ggml_tensor * h = s.on(s.cpu, ggml_scale(s.ctx, x, 2.0f), "h");
    ggml_tensor * a = s.on(s.dev(0), ggml_scale(s.ctx, h, 3.0f), "a");
    ggml_tensor * b = s.on(s.dev(0), ggml_scale_bias(s.ctx, a, 0.5f, 1.0f), "b");
    ggml_tensor * c = s.on(s.dev(0), ggml_scale(s.ctx, b, 0.25f), "c");
    return s.on(s.dev(0), ggml_cont(s.ctx, c), "out");
}

// llama.cpp PR #28874's stall, pipeline parallelism off: each device's split takes the previous
// device's result (a cross-device copy) and then a user input, in that order. The scheduler copies a
// split's inputs in order, and for the user input it synchronizes the split's backend, whose queue
// now holds the cross-device copy, which waits for the previous device: the host is blocked until the
// previous device has finished everything it had, at every split boundary, ordering no access.
//   x ─▶ [VDEV0] a0 = 2x ─▶ [VDEV1] a1 = a0 + u1 ─▶ [VDEV2] a2 = a1 + u2 ─▶ ... ─▶ [CPU] out = a/2
ggml_tensor * user_input_stall(Scenario & s, std::mt19937 & rng) {
    ggml_tensor * a = s.on(s.dev(0), ggml_scale(s.ctx, s.input("x", rng), 2.0f), "a0");
    char name[16];
    for (int d = 1; d < s.n_devices; d++) {
        snprintf(name, sizeof(name), "u%d", d);
        ggml_tensor * u = s.input(name, rng);
        snprintf(name, sizeof(name), "a%d", d);
        a = s.on(s.dev(d), ggml_add(s.ctx, a, u), name);  // src[0]: the cross-device input, first
    }
    return s.on(s.cpu, ggml_scale(s.ctx, a, 0.5f), "out");
}


// -- the orderings a scheduler must support (sweep's patterns, docs/scenarios.md) ----------------
// Values pass through adds and scales by one, so every backend computes them bit for bit as the CPU
// does (no fused multiply-add can round differently), and every step adds its own amount: a copy
// that is stale or misrouted changes a number.

// The scenario's backends as one list: 0 the CPU, then its devices.
ggml_backend_t backend_at(Scenario & s, int k) { return k == 0 ? s.cpu : s.dev(k - 1); }

ggml_tensor * plus(Scenario & s, ggml_tensor * t, float k) { return ggml_scale_bias(s.ctx, t, 1.0f, k); }

// A walk over the scenario's backends (the CPU and its devices) that hops from u to v for every
// ordered pair u != v; `hop(from, to)` adds the step that lands on `to` (from: -1 for the first).
template <typename Hop> void every_ordered_pair(Scenario & s, Hop hop) {
    const int m = 1 + s.n_devices;
    int cur = -1;
    for (int u = 0; u < m; u++) {
        for (int v = 0; v < m; v++) {
            if (u == v) continue;
            if (cur != u) {
                hop(cur, u);
                cur = u;
            }
            hop(cur, v);
            cur = v;
        }
    }
}

// A chain across every ordered pair of backends: each hop a split of its own.
//   x -> [CPU] h0 = x+1 -> [VDEV0] h1 = h0+2 -> [CPU] h2 -> [VDEV1] h3 -> [CPU] ... -> [VDEV1] hN
ggml_tensor * chain(Scenario & s, std::mt19937 & rng) {
    ggml_tensor * t = s.input("x", rng);
    int step = 0;
    every_ordered_pair(s, [&](int, int to) {
        char name[16];
        snprintf(name, sizeof(name), "h%d", step);
        t = s.on(backend_at(s, to), plus(s, t, (float) (step + 1)), name);
        step++;
    });
    return t;
}

// All-to-all ping-pong: the same walk, and every second hop also adds a user input placed on the
// *sender's* backend, so that the receiving split copies an activation and an input together, both
// from the sender.
//   ... [VDEV0] h3 -> [VDEV1] h4 = h3 + u4 (u4 a user input on VDEV0) -> [CPU] h5 = h4+6 ...
ggml_tensor * ping_pong(Scenario & s, std::mt19937 & rng) {
    ggml_tensor * t = s.input("x", rng);
    int step = 0;
    every_ordered_pair(s, [&](int from, int to) {
        char name[16];
        ggml_tensor * next;
        if (step % 2 == 1 && from >= 0) {
            snprintf(name, sizeof(name), "u%d", step);
            ggml_tensor * u = s.input(name, rng);
            s.placement.push_back({u, backend_at(s, from)});
            next = ggml_add(s.ctx, t, u);
        } else {
            next = plus(s, t, (float) (step + 1));
        }
        snprintf(name, sizeof(name), "h%d", step);
        t = s.on(backend_at(s, to), next, name);
        step++;
    });
    return t;
}

// Constants resident on a backend (weights: uploaded once, never written between graphs), by name,
// alive to the end: a pipelined scenario builds its graph anew every iteration.
struct Constant {
    ggml_context * ctx;
    ggml_backend_buffer_t buf;
    ggml_tensor * t;
};
std::map<std::string, Constant> g_constants;

ggml_tensor * constant(Scenario & s, const char * name, ggml_backend_t b, float value) {
    auto it = g_constants.find(name);
    if (it != g_constants.end()) return it->second.t;
    Constant c;
    ggml_init_params params = {ggml_tensor_overhead(), nullptr, true};
    c.ctx = ggml_init(params);
    c.t = ggml_new_tensor_1d(c.ctx, GGML_TYPE_F32, s.n_elements);
    ggml_set_name(c.t, name);
    c.buf = ggml_backend_alloc_ctx_tensors(c.ctx, b);
    ggml_backend_buffer_set_usage(c.buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    std::vector<float> v(s.n_elements);
    for (size_t i = 0; i < v.size(); i++) v[i] = value + 0.125f * (float) (i % 8);
    ggml_backend_tensor_set(c.t, v.data(), 0, ggml_nbytes(c.t));
    g_constants[name] = c;
    return c.t;
}

void free_constants() {
    for (auto & c : g_constants) {
        ggml_backend_buffer_free(c.second.buf);
        ggml_free(c.second.ctx);
    }
    g_constants.clear();
}

// Lanes: one split makes two values that two independent splits consume; an inputless split on a
// device and one on the CPU start again from a constant resident on their backend; a later split
// reads an older split's output; everything joins at the end.
//   [VDEV0] a = x+1, b = x+2 ─┬─▶ [VDEV1] c = a+3 ──────────────────┐
//                             └─▶ [CPU] d = b+5                      │ (c: three splits older)
//   [VDEV0] e = k0+7   (no inputs: k0 resident on VDEV0)             ▼
//   [VDEV1] f = c + e ─▶ [CPU] g = kc+9 (no inputs: kc on the CPU) ─▶ [VDEV0] out = (d + f) + g
ggml_tensor * lanes(Scenario & s, std::mt19937 & rng) {
    ggml_tensor * x = s.input("x", rng);
    ggml_tensor * a = s.on(s.dev(0), plus(s, x, 1.0f), "a");
    ggml_tensor * b = s.on(s.dev(0), plus(s, x, 2.0f), "b");
    ggml_tensor * c = s.on(s.dev(1), plus(s, a, 3.0f), "c");
    ggml_tensor * d = s.on(s.cpu, plus(s, b, 5.0f), "d");
    ggml_tensor * e = s.on(s.dev(0), plus(s, constant(s, "k0", s.dev(0), 0.5f), 7.0f), "e");
    ggml_tensor * f = s.on(s.dev(1), ggml_add(s.ctx, c, e), "f");
    ggml_tensor * g = s.on(s.cpu, plus(s, constant(s, "kc", s.cpu, -0.25f), 9.0f), "g");
    ggml_tensor * df = s.on(s.dev(0), ggml_add(s.ctx, d, f), "df");
    ggml_tensor * out = s.on(s.dev(0), ggml_add(s.ctx, df, g), "out");
    s.roots = {a, b, c, d, e, f, g, df, out};  // the graph's node order: the splits as drawn
    return out;
}

// Y merge: a split receives activations from two different earlier splits, on two other backends.
//   [VDEV0] a = x+1 ──┐
//   [CPU]   c = w+3 ──┴─▶ [VDEV1] m = a + c ─▶ [CPU] out = m+4
ggml_tensor * y_merge(Scenario & s, std::mt19937 & rng) {
    ggml_tensor * x = s.input("x", rng);
    ggml_tensor * w = s.input("w", rng);
    ggml_tensor * a = s.on(s.dev(0), plus(s, x, 1.0f), "a");
    ggml_tensor * c = s.on(s.cpu, plus(s, w, 3.0f), "c");
    ggml_tensor * m = s.on(s.dev(1), ggml_add(s.ctx, a, c), "m");
    ggml_tensor * out = s.on(s.cpu, plus(s, m, 4.0f), "out");
    s.roots = {a, c, m, out};
    return out;
}

// A user input beside an activation, on the sender's backend or on the receiver's, over decode-like
// iterations with new inputs each time (sweep varies parallel: n_copies > 1 and scheduler events).
//   [VDEV0] a = x+1 ─▶ [VDEV1] out = a + u      (u a user input on VDEV0, or on VDEV1)
ggml_tensor * input_beside(Scenario & s, std::mt19937 & rng, bool on_sender) {
    ggml_tensor * x = s.input("x", rng);
    ggml_tensor * u = s.input("u", rng);
    s.placement.push_back({u, on_sender ? s.dev(0) : s.dev(1)});
    ggml_tensor * a = s.on(s.dev(0), plus(s, x, 1.0f), "a");
    return s.on(s.dev(1), ggml_add(s.ctx, a, u), "out");
}
ggml_tensor * input_on_sender(Scenario & s, std::mt19937 & rng) { return input_beside(s, rng, true); }
ggml_tensor * input_on_receiver(Scenario & s, std::mt19937 & rng) { return input_beside(s, rng, false); }

// A reproduction read from a file (`ggml-trace reduce` writes it; docs/reduce.md). One statement a
// line, `#` starts a comment:
//   devices N | elements N | iterations N | pipelined 0|1
//   input NAME [BACKEND]                 a vector of `elements` random values, new each iteration
//   op NAME BACKEND OP ARG [ARG]         OP: scale (x2), add, mul, cont, sqr; BACKEND: cpu, dev0, dev1..
//   output NAME                          the tensor whose bytes are compared (an op)
//   work NAME BACKEND US                 resident device work: products of weights uploaded once, enough of
//                                        them in every graph to keep BACKEND's queue busy US microseconds
//   meta LAYERS                          instead of ops: meta-allreduce's tensor-parallel MLP with LAYERS
//                                        layers over `devices` devices (docs/scenarios.md)
// Ops that nothing consumes are computed too; every op is added to the graph in the order listed, so
// the node order -- which decides the allocator's reuse and the order of a split's input copies -- is
// the listing's.
struct Spec {
    int devices = 1, elements = N, iterations = 1, meta_layers = 0;
    bool pipelined = false;
    std::vector<std::vector<std::string>> statements;  // input and op lines, in order
    std::string output;
};

Spec g_spec;

// A spec comes from a reproduction folder, that is from anyone: every count is digits only and
// within these caps (tracer/replay_limits.py holds the same ones, and checks memory before a replay).
const long MAX_DEVICES = 8, MAX_ELEMENTS = 1L << 30, MAX_ITERATIONS = 1024, MAX_META_LAYERS = 256;
const size_t MAX_STATEMENTS = 200;  // input and op lines; the graph's context holds 512 tensors
const long MAX_WORK_US = 1000000, MAX_WORKS = 4;  // `work` lines, each at most 64 products a graph

bool count(const std::string & word, long lo, long hi, int & out) {
    if (word.empty() || word.size() > 12 || word.find_first_not_of("0123456789") != std::string::npos) return false;
    long v = strtol(word.c_str(), nullptr, 10);
    if (v < lo || v > hi) return false;
    out = (int) v;
    return true;
}

bool read_spec(const char * path, Spec & spec) {
    std::ifstream in(path);
    if (!in) {
        fprintf(stderr, "cannot read spec %s\n", path);
        return false;
    }
    std::string line;
    int works = 0;
    for (int no = 1; std::getline(in, line); no++) {
        line = line.substr(0, line.find('#'));
        std::istringstream words(line);
        std::vector<std::string> w;
        for (std::string x; words >> x;) w.push_back(x);
        if (w.empty()) continue;
        const std::string & k = w[0];
        bool ok = true;
        if (k == "devices" && w.size() == 2) ok = count(w[1], 1, MAX_DEVICES, spec.devices);
        else if (k == "elements" && w.size() == 2) ok = count(w[1], 1, MAX_ELEMENTS, spec.elements);
        else if (k == "iterations" && w.size() == 2) ok = count(w[1], 1, MAX_ITERATIONS, spec.iterations);
        else if (k == "pipelined" && w.size() == 2) {
            ok = w[1] == "0" || w[1] == "1";
            spec.pipelined = w[1] == "1";
        }
        else if (k == "output" && w.size() == 2) spec.output = w[1];
        else if (k == "meta" && w.size() == 2) ok = count(w[1], 1, MAX_META_LAYERS, spec.meta_layers);
        else if (k == "work" && w.size() == 4) {  // on a device: devN
            int us = 0, dev = 0;
            ok = w[2].rfind("dev", 0) == 0 && count(w[2].substr(3), 0, MAX_DEVICES - 1, dev) &&
                 count(w[3], 1, MAX_WORK_US, us) && ++works <= MAX_WORKS;
            spec.statements.push_back(w);
        }
        else if ((k == "input" && (w.size() == 2 || w.size() == 3)) || (k == "op" && (w.size() == 5 || w.size() == 6))) {
            spec.statements.push_back(w);
            ok = spec.statements.size() <= MAX_STATEMENTS;
        }
        else ok = false;
        if (!ok) {
            fprintf(stderr, "%s:%d: cannot read this line: %s\n", path, no, line.c_str());
            return false;
        }
    }
    if (spec.output.empty() && !spec.meta_layers) {
        fprintf(stderr, "%s: no output line\n", path);
        return false;
    }
    return true;
}

// A spec's `work`: the device's resident work (device_work.h), by the name its statement gives.
std::map<std::string, size_t> g_work;  // a `work` statement's name -> the size it uses in g_works

ggml_tensor * from_spec(Scenario & s, std::mt19937 & rng) {
    s.n_elements = g_spec.elements;
    std::map<std::string, ggml_tensor *> named;
    std::vector<ggml_tensor *> listed;  // the ops, as listed
    auto backend = [&](const std::string & b) -> ggml_backend_t {
        if (b == "cpu") return s.cpu;
        if (b.rfind("dev", 0) == 0) return s.dev(atoi(b.c_str() + 3));
        fprintf(stderr, "unknown backend %s in the spec\n", b.c_str());
        exit(2);
    };
    auto arg = [&](const std::string & n) -> ggml_tensor * {
        auto it = named.find(n);
        if (it == named.end()) {
            fprintf(stderr, "the spec uses %s before defining it\n", n.c_str());
            exit(2);
        }
        return it->second;
    };
    for (auto & w : g_spec.statements) {
        if (w[0] == "work") {  // sized before the first graph; the CPU alone has none (the result never reads it)
            auto it = g_work.find(w[1]);
            const Work * k = it == g_work.end() ? nullptr : &g_works[it->second];
            ggml_tensor * p = k ? k->b : nullptr;
            for (int r = 0; p && r < k->reps; r++) {
                p = ggml_mul_mat(s.ctx, k->a, p);
                listed.push_back(s.on(backend(w[2]), p, (w[1] + "." + std::to_string(r)).c_str()));
            }
            continue;
        }
        if (w[0] == "input") {
            ggml_tensor * t = s.input(w[1].c_str(), rng);
            if (w.size() == 3) s.placement.push_back({t, backend(w[2])});
            named[w[1]] = t;
        } else {
            const std::string & op = w[3];
            ggml_tensor * a = arg(w[4]);
            ggml_tensor * t = nullptr;
            if (op == "scale") t = ggml_scale(s.ctx, a, 2.0f);
            else if (op == "cont") t = ggml_cont(s.ctx, a);
            else if (op == "sqr") t = ggml_sqr(s.ctx, a);
            else if ((op == "add" || op == "mul") && w.size() == 6) {
                ggml_tensor * b = arg(w[5]);
                t = op == "add" ? ggml_add(s.ctx, a, b) : ggml_mul(s.ctx, a, b);
            } else {
                fprintf(stderr, "unknown op or wrong arguments in the spec: op %s\n", op.c_str());
                exit(2);
            }
            named[w[1]] = s.on(backend(w[2]), t, w[1].c_str());
            listed.push_back(named[w[1]]);
        }
    }
    if (!named.count(g_spec.output)) {
        fprintf(stderr, "the spec's output %s is not defined\n", g_spec.output.c_str());
        exit(2);
    }
    s.roots = listed;  // every op, in the order listed
    return named[g_spec.output];
}

typedef ggml_tensor * (*Builder)(Scenario &, std::mt19937 &);

struct Entry {
    const char * name;
    Builder build;
    int devices;
    bool pipelined;  // parallel=true, iterations not synchronized: results read asynchronously
    bool repeated;   // 8 iterations with new inputs, synchronized, as decode steps (else one graph)
};

const Entry SCENARIOS[] = {
    {"inputless-reuse", inputless_reuse, 1, false, false},
    {"cpu-async-cpu", cpu_async_cpu, 1, false, false},
    {"y-graph", y_graph, 2, false, false},
    {"x-graph", x_graph, 2, false, false},
    {"random-dag", random_dag, 3, false, false},
    {"pipeline", pipeline, 3, false, true},
    {"pipeline-input-reuse", pipeline_input_reuse, 2, true, true},
    {"user-input-stall", user_input_stall, 3, false, true},
    {"alloc-dep", alloc_dep, 1, false, false},
    {"chain", chain, 2, false, false},
    {"ping-pong", ping_pong, 2, false, false},
    {"lanes", lanes, 2, false, false},
    {"y-merge", y_merge, 2, false, false},
    {"input-on-sender", input_on_sender, 2, false, true},
    {"input-on-receiver", input_on_receiver, 2, false, true},
};

uint64_t fnv(const void * p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ ((const uint8_t *) p)[i]) * 0x100000001b3ull;
    }
    return h;
}

// Tensor parallelism (docs/tensor-parallel.md): a meta device over VDEV0..n-1 runs L residual MLP
// layers, each up-projection split by its output rows and each down-projection by its input
// columns, so every layer ends in partial sums that the meta backend all-reduces (its butterfly
// fallback on virtual devices). Weights and inputs are small integers and the residual is clamped:
// every sum is exact in any order, so the result must equal the CPU's bit for bit.
//   x -> [up.l: F rows split] -> [down.l: F columns split] -> partial y -> allreduce -> x = clamp(x + y)
const int MLP_H = 256, MLP_F = 512, MLP_L = 8, MLP_T = 4;  // MLP_L: layers unless a spec says

ggml_backend_meta_split_state mlp_split(const ggml_tensor * t, void * ud) {
    const int n = *(const int *) ud;
    ggml_backend_meta_split_state st;
    memset(&st, 0, sizeof(st));
    st.nr[0] = 1;
    st.n_segments = 1;
    if (strncmp(t->name, "up.", 3) == 0 || strncmp(t->name, "down.", 5) == 0) {
        st.axis = t->name[0] == 'u' ? GGML_BACKEND_SPLIT_AXIS_1 : GGML_BACKEND_SPLIT_AXIS_0;
        const int64_t ne = t->ne[st.axis];
        for (int j = 0; j < n; j++) st.ne[j] = ne * (j + 1) / n - ne * j / n;
    } else {
        st.axis = GGML_BACKEND_SPLIT_AXIS_MIRRORED;
    }
    return st;
}

// `names`: the devices under the meta device (default VDEV0..n_dev-1; sweep names CUDA's too)
int meta_allreduce(int n_dev, bool cpu_only, unsigned seed, int layers = MLP_L, std::vector<std::string> names = {}) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> wd(-1, 1), xd(-4, 4);
    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu, 1);
    ggml_backend_t main_backend = cpu;
    ggml_backend_buffer_type_t wbuft = ggml_backend_cpu_buffer_type();
    if (!cpu_only) {
        std::vector<ggml_backend_dev_t> devs;
        for (int i = 0; i < n_dev; i++) {
            std::string name = i < (int) names.size() ? names[i] : "VDEV" + std::to_string(i);
            ggml_backend_dev_t d = ggml_backend_dev_by_name(name.c_str());
            if (!d) {
                fprintf(stderr, "no device %s: run under `ggml-trace scenario` (or `ggml-trace record --virtual-devices N`)\n", name.c_str());
                return 2;
            }
            devs.push_back(d);
        }
        ggml_backend_dev_t meta = ggml_backend_meta_device(devs.data(), devs.size(), mlp_split, &n_dev);
        main_backend = ggml_backend_dev_init(meta, nullptr);
        wbuft = ggml_backend_dev_buffer_type(meta);
    }
    ggml_init_params wp = {ggml_tensor_overhead() * (2 * layers + 1), nullptr, true};
    ggml_context * wctx = ggml_init(wp);
    std::vector<ggml_tensor *> up, down;
    char name[32];
    for (int l = 0; l < layers; l++) {
        up.push_back(ggml_new_tensor_2d(wctx, GGML_TYPE_F32, MLP_H, MLP_F));
        snprintf(name, sizeof(name), "up.%d", l);
        ggml_set_name(up.back(), name);
        down.push_back(ggml_new_tensor_2d(wctx, GGML_TYPE_F32, MLP_F, MLP_H));
        snprintf(name, sizeof(name), "down.%d", l);
        ggml_set_name(down.back(), name);
    }
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, wbuft);
    ggml_backend_buffer_set_usage(wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    for (ggml_tensor * t = ggml_get_first_tensor(wctx); t; t = ggml_get_next_tensor(wctx, t)) {
        std::vector<float> v(ggml_nelements(t));
        for (float & x : v) x = (float) (rng() % 16 == 0 ? wd(rng) : 0);  // sparse: sums stay small
        ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
    }
    ggml_backend_t backends[2] = {main_backend, cpu};
    ggml_backend_sched_t sched = ggml_backend_sched_new(backends, nullptr, cpu_only ? 1 : 2, 4096, false, false);
    ggml_init_params cp = {ggml_tensor_overhead() * 64 * layers + ggml_graph_overhead(), nullptr, true};
    ggml_context * ctx = ggml_init(cp);
    ggml_tensor * x0 = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, MLP_H, MLP_T);
    ggml_set_name(x0, "x");
    ggml_set_input(x0);
    ggml_tensor * x = x0;
    for (int l = 0; l < layers; l++) {
        ggml_tensor * h = ggml_mul_mat(ctx, up[l], x);
        ggml_tensor * y = ggml_mul_mat(ctx, down[l], h);
        snprintf(name, sizeof(name), "y.%d", l);
        ggml_set_name(y, name);
        x = ggml_clamp(ctx, ggml_add(ctx, x, y), -64.0f, 64.0f);
        snprintf(name, sizeof(name), "x.%d", l);
        ggml_set_name(x, name);
    }
    ggml_set_output(x);
    ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, x);
    if (!ggml_backend_sched_alloc_graph(sched, graph)) {
        fprintf(stderr, "allocation failed\n");
        return 1;
    }
    fprintf(stderr, "graph splits %d nodes %d\n", ggml_backend_sched_get_n_splits(sched), ggml_graph_n_nodes(graph));
    std::vector<float> in(MLP_H * MLP_T), result(MLP_H * MLP_T);
    for (float & v : in) v = (float) xd(rng);
    ggml_backend_tensor_set(x0, in.data(), 0, ggml_nbytes(x0));
    if (ggml_backend_sched_graph_compute(sched, graph) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "compute failed\n");
        return 1;
    }
    ggml_backend_tensor_get(x, result.data(), 0, ggml_nbytes(x));
    printf("result %016llx %g %g\n", (unsigned long long) fnv(result.data(), result.size() * sizeof(float)), result[0],
           result[result.size() - 1]);
    ggml_backend_sched_free(sched);
    ggml_free(ctx);
    ggml_backend_buffer_free(wbuf);
    ggml_free(wctx);
    if (main_backend != cpu) ggml_backend_free(main_backend);
    ggml_backend_free(cpu);
    return 0;
}

// --rpc HOST:PORT (repeatable): that ggml-rpc-server's devices join ggml's list, as llama.cpp's
// --rpc adds them. Not for --cpu-only: the reference needs no server. 0, or 2 with the reason said.
int add_rpc_servers(int argc, char ** argv) {
    bool cpu_only = false;
    for (int i = 2; i < argc; i++) cpu_only = cpu_only || strcmp(argv[i], "--cpu-only") == 0;
    for (int i = 2; i + 1 < argc && !cpu_only; i++) {
        if (strcmp(argv[i], "--rpc") != 0) continue;
        ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
        typedef ggml_backend_reg_t (*add_server_t)(const char *);
        add_server_t add = rpc ? (add_server_t) ggml_backend_reg_get_proc_address(rpc, "ggml_backend_rpc_add_server") : nullptr;
        if (!add) {
            fprintf(stderr, "--rpc: this ggml has no RPC backend (built without GGML_RPC)\n");
            return 2;
        }
        ggml_backend_reg_t reg = add(argv[++i]);
        if (!reg) {
            fprintf(stderr, "--rpc: no server at %s\n", argv[i]);
            return 2;
        }
        ggml_backend_register(reg);
    }
    return 0;
}

}  // namespace

int main(int argc, char ** argv) {
#ifdef _WIN32
    // As llama.cpp's programs do: on Windows this is how the hooks come in (GGML_BACKEND_PATH).
    ggml_backend_load_all();
#endif
    if (argc < 2) {
        fprintf(stderr, "usage: %s NAME [--cpu-only] [--seed S]\nscenarios:", argv[0]);
        for (const Entry & e : SCENARIOS) fprintf(stderr, " %s", e.name);
        fprintf(stderr, "\n");
        return 2;
    }
    if (int rc = add_rpc_servers(argc, argv)) return rc;
    if (strcmp(argv[1], "devices") == 0) {  // what this process sees: one device name a line (sweep asks)
        for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
            ggml_backend_dev_t d = ggml_backend_dev_get(i);
            printf("%s\t%s\n", ggml_backend_dev_name(d), ggml_backend_dev_description(d));
        }
        return 0;
    }
    if (strcmp(argv[1], "meta-allreduce") == 0) {  // its own set-up: a meta device, not placements
        int n_dev = 2;
        bool cpu_only = false;
        unsigned seed = 1;
        std::vector<std::string> names;
        for (int i = 2; i < argc; i++) {
            if (strcmp(argv[i], "--cpu-only") == 0) cpu_only = true;
            if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = (unsigned) atoi(argv[++i]);
            if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc) n_dev = atoi(argv[++i]);
            if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) names.push_back(argv[++i]);
        }
        return meta_allreduce(n_dev, cpu_only, seed, MLP_L, names);
    }
    const Entry * entry = nullptr;
    for (const Entry & e : SCENARIOS) {
        if (strcmp(e.name, argv[1]) == 0) entry = &e;
    }
    static Entry spec_entry = {"spec", from_spec, 1, false, false};
    if (strcmp(argv[1], "spec") == 0) {
        const char * path = nullptr;
        for (int i = 2; i + 1 < argc; i++) {
            if (strcmp(argv[i], "--spec") == 0) path = argv[i + 1];
        }
        if (!path || !read_spec(path, g_spec)) {
            if (!path) fprintf(stderr, "spec: give --spec FILE\n");
            return 2;
        }
        if (g_spec.meta_layers) {  // its own set-up, as meta-allreduce's
            bool cpu_only = false;
            unsigned seed = 1;
            for (int i = 2; i < argc; i++) {
                if (strcmp(argv[i], "--cpu-only") == 0) cpu_only = true;
                if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = (unsigned) atoi(argv[++i]);
            }
            return meta_allreduce(g_spec.devices, cpu_only, seed, g_spec.meta_layers);
        }
        spec_entry.devices = g_spec.devices;
        spec_entry.pipelined = g_spec.pipelined;
        entry = &spec_entry;
    }
    if (!entry) {
        fprintf(stderr, "unknown scenario %s\n", argv[1]);
        return 2;
    }
    Scenario s;
    s.cpu_only = false;
    unsigned seed = 1;
    const char * backend_kind = "vdev";
    const char * buffer = nullptr;  // the CPU's buffers: "pageable", "pinned" (default: pinned on Vulkan only)
    int parallel_opt = -1;          // --parallel 0|1 (default: the scenario's own)
    std::vector<std::string> device_names;  // --device NAME..., the scenario's devices in order
    int n_devices = entry->devices;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--cpu-only") == 0) s.cpu_only = true;
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = (unsigned) atoi(argv[++i]);
        if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) backend_kind = argv[++i];
        if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc) n_devices = atoi(argv[++i]);
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) device_names.push_back(argv[++i]);
        if (strcmp(argv[i], "--buffer") == 0 && i + 1 < argc) buffer = argv[++i];
        if (strcmp(argv[i], "--parallel") == 0 && i + 1 < argc) parallel_opt = atoi(argv[++i]);
    }
    if (buffer && strcmp(buffer, "pageable") != 0 && strcmp(buffer, "pinned") != 0) {
        fprintf(stderr, "--buffer %s: give pageable or pinned\n", buffer);
        return 2;
    }
    s.n_devices = n_devices;
    s.cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(s.cpu, 1);  // small graphs; spinning thread pools only add noise
    if (!s.cpu_only && !device_names.empty()) {
        // named devices (sweep): the scenario's device i is the i-th, the later ones fold onto the last
        for (const std::string & name : device_names) s.backends.push_back(device_backend(name.c_str()));
    } else if (!s.cpu_only && strcmp(backend_kind, "vulkan") == 0) {
        s.backends.push_back(device_backend("Vulkan0"));  // a real device: lavapipe, a GPU
        // the scenario's other devices: virtual ones beside it, where they were asked for
        for (int i = 1; i < n_devices && ggml_backend_dev_by_name(("VDEV" + std::to_string(i - 1)).c_str()); i++) {
            s.backends.push_back(device_backend(("VDEV" + std::to_string(i - 1)).c_str()));
        }
    } else if (!s.cpu_only) {
        for (int i = 0; i < n_devices; i++) {
            std::string name = "VDEV" + std::to_string(i);
            s.backends.push_back(device_backend(name.c_str()));
        }
    }
    s.backends.push_back(s.cpu);
    // parallel: the scheduler's (several copies of the split inputs, events); pipelined: a new graph
    // each iteration, none waited for but the last. --parallel 1 sets both, --parallel 0 neither.
    const bool pipelined = parallel_opt >= 0 ? parallel_opt == 1 : entry->pipelined;
    const bool parallel = parallel_opt >= 0 ? parallel_opt == 1 : strcmp(entry->name, "pipeline") == 0 || entry->pipelined;
    const int iterations = entry == &spec_entry ? g_spec.iterations : parallel || pipelined || entry->repeated ? 8 : 1;
    // On a real device the CPU's buffers are the device's pinned host memory, as llama.cpp makes
    // them when it offloads: then copies into the device read them asynchronously (the #23321 path).
    std::vector<ggml_backend_buffer_type_t> bufts;
    for (ggml_backend_t b : s.backends) bufts.push_back(ggml_backend_get_default_buffer_type(b));
    ggml_backend_dev_t first = s.backends.size() > 1 ? ggml_backend_get_device(s.backends[0]) : nullptr;
    ggml_backend_buffer_type_t host = first ? ggml_backend_dev_host_buffer_type(first) : nullptr;
    const bool pinned_cpu = buffer ? strcmp(buffer, "pinned") == 0 : strcmp(backend_kind, "vulkan") == 0;
    if (pinned_cpu && first && !host) {
        fprintf(stderr, "--buffer pinned: %s has no pinned host buffer type\n", ggml_backend_dev_name(first));
        return 2;
    }
    if (pinned_cpu && host) bufts.back() = host;
    s.sched = ggml_backend_sched_new(s.backends.data(), bufts.data(), (int) s.backends.size(), 2048, parallel, false);
    for (auto & w : g_spec.statements) {
        if (w[0] != "work" || s.cpu_only) continue;
        ggml_backend_t b = s.dev(atoi(w[2].c_str() + 3));
        g_work[w[1]] = size_work(b, atof(w[3].c_str()) / 1000);
        const Work & k = g_works[g_work[w[1]]];
        fprintf(stderr, "work %s on %s: %d products of %dx%d weights a graph, %.3f ms each, for %s us\n", w[1].c_str(),
                ggml_backend_name(b), k.reps, k.n, k.n, k.ms, w[3].c_str());
    }
    // A pipelined scenario builds its graph anew for every iteration, as llama.cpp does for each ubatch;
    // every context stays alive to the end, since queued work may still name its tensors.
    std::vector<ggml_context *> contexts;
    ggml_tensor * out = nullptr;
    auto build_graph = [&]() {
        ggml_init_params params = {ggml_tensor_overhead() * 512 + ggml_graph_overhead(), nullptr, true};
        s.ctx = ggml_init(params);
        contexts.push_back(s.ctx);
        s.inputs.clear();
        s.placement.clear();
        s.roots.clear();
        std::mt19937 rng(seed);
        out = entry->build(s, rng);
        ggml_set_output(out);
        ggml_cgraph * g = ggml_new_graph(s.ctx);
        if (s.roots.empty()) s.roots.push_back(out);
        for (ggml_tensor * r : s.roots) ggml_build_forward_expand(g, r);
        return g;
    };
    ggml_cgraph * graph = build_graph();

    std::vector<float> result(ggml_nelements(out));
    std::vector<std::vector<float>> results(iterations, result);  // read asynchronously when pipelined
    // ... into the device's pinned memory where it has one, as llama.cpp's outputs: ggml-vulkan drains its
    // queue to read into pageable memory, which would order every graph after the one before
    const size_t result_bytes = result.size() * sizeof(float);
    ggml_backend_buffer_t pinned = pipelined && host ? ggml_backend_buft_alloc_buffer(host, iterations * result_bytes)
                                                     : nullptr;
    uint64_t hash = 0;
    for (int it = 0; it < iterations; it++) {
        // The others allocate once: with parallel=true, re-allocating the same graph after a reset crashes in
        // ggml_gallocr_alloc_graph on b10531 (an uninitialised leaf allocation; see docs/scenarios.md).
        // Pipelined, like llama.cpp's ubatches: a new graph each iteration, allocated anew, which moves the
        // scheduler on to its next copy of the split inputs.
        if (pipelined && it > 0) {
            ggml_backend_sched_reset(s.sched);
            graph = build_graph();
        }
        if (it == 0 || pipelined) {
            s.place();
            if (!ggml_backend_sched_alloc_graph(s.sched, graph)) {
                fprintf(stderr, "allocation failed\n");
                return 1;
            }
            if (it == 0) {  // the size of what ran (reduce reports it), on stderr: stdout is compared
                            // with the same program's run on the CPU alone
                fprintf(stderr, "graph splits %d nodes %d\n", ggml_backend_sched_get_n_splits(s.sched), ggml_graph_n_nodes(graph));
            }
        }
        for (auto & in : s.inputs) {
            if (!in.first->buffer) {
                continue;  // an input the (random) graph never reached
            }
            for (float & v : in.second) v += 0.125f * (float) it;  // new inputs every iteration
            ggml_backend_tensor_set(in.first, in.second.data(), 0, in.second.size() * sizeof(float));
        }
        // async: the next iteration's inputs are copied while the devices may still be busy
        if (ggml_backend_sched_graph_compute_async(s.sched, graph) != GGML_STATUS_SUCCESS) {
            fprintf(stderr, "compute failed\n");
            return 1;
        }
        if (pipelined) {  // as llama.cpp reads logits: queued behind the graph, no wait
            void * to = pinned ? (void *) ((uint8_t *) ggml_backend_buffer_get_base(pinned) + it * result_bytes) : results[it].data();
            ggml_backend_tensor_get_async(ggml_backend_sched_get_tensor_backend(s.sched, out), out, to, 0, result_bytes);
            continue;
        }
        ggml_backend_sched_synchronize(s.sched);
        ggml_backend_tensor_get(out, result.data(), 0, result.size() * sizeof(float));
        hash = hash * 31 + fnv(result.data(), result.size() * sizeof(float));
    }
    if (pipelined) {
        ggml_backend_sched_synchronize(s.sched);
        for (int it = 0; pinned && it < iterations; it++) {
            memcpy(results[it].data(), (uint8_t *) ggml_backend_buffer_get_base(pinned) + it * result_bytes, result_bytes);
        }
        for (auto & r : results) hash = hash * 31 + fnv(r.data(), r.size() * sizeof(float));
        result = results.back();
    }
    printf("result %016llx %g %g\n", (unsigned long long) hash, result[0], result[result.size() - 1]);

    ggml_backend_sched_free(s.sched);
    if (pinned) ggml_backend_buffer_free(pinned);
    free_works();
    free_constants();
    for (ggml_context * c : contexts) ggml_free(c);
    for (ggml_backend_t b : s.backends) ggml_backend_free(b);
    return 0;
}
