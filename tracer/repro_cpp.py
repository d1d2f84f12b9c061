"""A reduced race as one C++ file on ggml's public API alone (`ggml-trace reduce` writes it beside
the spec): no hooks, no virtual devices, nothing of this project. A maintainer compiles it against
their own tree; it runs the graph on the first GPU ggml lists (and the CPU), compares each run with
the same graph on the CPU alone, and exits 1 when a run is wrong (docs/reduce.md).

Two things of the traced program that made its device late are kept: the device's resident work
(`work` in the spec: products of weights uploaded once, sized on the device at start), and results
read into the device's pinned host memory, as llama.cpp reads its outputs (ggml-vulkan drains its
queue to read into pageable memory, and that drain would order every graph after the last)."""
from __future__ import annotations

from typing import Any

from .hooks import SOURCE_ROOT

OPS = {"scale": "ggml_scale(ctx, {a}, 2.0f)", "cont": "ggml_cont(ctx, {a})", "sqr": "ggml_sqr(ctx, {a})",
       "add": "ggml_add(ctx, {a}, {b})", "mul": "ggml_mul(ctx, {a}, {b})"}


class NoStandalone(ValueError):
    """The spec has no standalone form (a meta backend's graph, several devices)."""


def parse(spec: str) -> dict:
    out: dict[str, Any] = {"devices": 1, "elements": 4096, "iterations": 1, "pipelined": False, "lines": [],
                           "output": None, "work_us": 0}
    for raw in spec.splitlines():
        w = raw.split("#", 1)[0].split()
        if not w:
            continue
        if w[0] in ("devices", "elements", "iterations"):
            out[w[0]] = int(w[1])
        elif w[0] == "pipelined":
            out["pipelined"] = w[1] == "1"
        elif w[0] == "output":
            out["output"] = w[1]
        elif w[0] == "meta":
            raise NoStandalone("a meta backend's graph (tensor parallelism) needs several devices")
        elif w[0] in ("input", "op"):
            out["lines"].append(w)
        elif w[0] == "work":
            if len(w) != 4 or w[2] == "cpu" or out["work_us"]:
                raise NoStandalone("work on the CPU, or twice")
            out["work_us"] = int(w[3])
            out["lines"].append(w)
    if out["devices"] != 1:
        raise NoStandalone("the graph spans several devices")
    return out


def _graph_code(spec: dict) -> str:
    lines = []
    for w in spec["lines"]:
        name = w[1]
        if w[0] == "input":
            lines.append(f'    ggml_tensor * {name} = input(g, "{name}");')
            continue
        if w[0] == "work":
            lines.append(f'    work(g, "{name}", dev);')
            continue
        backend, op, args = w[2], w[3], w[4:]
        expr = OPS[op].format(a=args[0], b=args[1] if len(args) > 1 else "")
        where = "cpu" if backend == "cpu" else "dev"
        lines.append(f'    ggml_tensor * {name} = place(g, {expr}, "{name}", {where});')
    lines.append(f"    return {spec['output']};")
    return "\n".join(lines)


WORK_CPP = r"""// The device's resident work (below, from the scenarios' device_work.h): chained in every graph, so
// that the next graph's copy waits behind at least WORK_MS of it on the device's queue (what the
// traced read waited there).
static const double WORK_MS = @WORK_MS@;
@DEVICE_WORK@
static void work(Graph & g, const char * name, ggml_backend_t b) {
    if (!g.device) return;  // the CPU alone: the result never reads the work
    const Work & w = g_works.back();
    ggml_tensor * p = w.b;
    char label[GGML_MAX_NAME];
    for (int r = 0; r < w.reps; r++) {
        p = ggml_mul_mat(g.ctx, w.a, p);
        snprintf(label, sizeof(label), "%s.%d", name, r);
        place(g, p, label, b);
    }
}

"""
SIZE_WORK_CPP = r"""    {
        const Work & w = g_works[size_work(dev, WORK_MS)];
        fprintf(stderr, "device work: %d products of %dx%d weights a graph, %.3f ms each, for %g ms ahead of each copy\n",
                w.reps, w.n, w.n, w.ms, WORK_MS);
    }
"""


def device_work_source() -> str:
    """scenarios/device_work.h without its include lines (repro.cpp includes what it needs itself)."""
    text = (SOURCE_ROOT / "scenarios" / "device_work.h").read_text()
    return "\n".join(x for x in text.splitlines() if not x.startswith(("#include", "#pragma once"))) + "\n"


def one_line(text: str) -> str:
    """One line of a // comment: tensor and file names come from models and users, and a line break
    in one would end the comment and put the rest into the program."""
    return "".join(c if c.isprintable() else "?" for c in text)


def cpp(spec_text: str, title: str, missing: str) -> str:
    """The program's source; NoStandalone when the spec has no such form."""
    spec = parse(spec_text)
    title, missing = one_line(title), one_line(missing)
    pipelined = "true" if spec["pipelined"] else "false"
    work_ms = f'{spec["work_us"] / 1000:g}'
    work_code = (WORK_CPP.replace("@WORK_MS@", work_ms).replace("@DEVICE_WORK@", device_work_source())
                 if spec["work_us"] else "")
    size_work = SIZE_WORK_CPP if spec["work_us"] else ""
    free_work = "    free_works();\n" if spec["work_us"] else ""
    return f'''// {title}
// Written by `ggml-trace reduce`: {missing}
//
// A reproduction on ggml's public API alone. Build it against a llama.cpp build with an async backend
// (Vulkan, CUDA, ...), shared libraries:
//   c++ -std=c++17 -O2 repro.cpp -I LLAMA/ggml/include -L BUILD/bin -lggml -lggml-base -lggml-cpu \\
//       -Wl,-rpath,BUILD/bin -o repro
//   ./repro [RUNS]      # exit 1: RED (a run's result differs from the CPU's), 0: GREEN, 2: no device
// REPRO_DEVICE=NAME picks the device (default: the first GPU ggml lists).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

static const int64_t ELEMENTS = {spec["elements"]};
static const int ITERATIONS = {spec["iterations"]};
static const bool PIPELINED = {pipelined};  // graphs in a row, not synchronized (as llama.cpp's ubatches)

struct Graph {{
    ggml_context * ctx;
    bool device;  // false: the CPU alone
    std::vector<std::pair<ggml_tensor *, std::vector<float>>> inputs;
    std::vector<ggml_tensor *> ops;  // in the order listed: the graph's node order
    std::vector<std::pair<ggml_tensor *, ggml_backend_t>> placement;
}};

static ggml_tensor * input(Graph & g, const char * name) {{
    ggml_tensor * t = ggml_new_tensor_1d(g.ctx, GGML_TYPE_F32, ELEMENTS);
    ggml_set_name(t, name);
    ggml_set_input(t);
    std::mt19937 rng((unsigned) g.inputs.size() + 1);
    std::uniform_real_distribution<float> d(-1, 1);
    std::vector<float> v(ELEMENTS);
    for (float & x : v) x = d(rng);
    g.inputs.push_back({{t, v}});
    return t;
}}

static ggml_tensor * place(Graph & g, ggml_tensor * t, const char * name, ggml_backend_t b) {{
    ggml_set_name(t, name);
    g.ops.push_back(t);
    g.placement.push_back({{t, b}});
    return t;
}}

{work_code}static ggml_tensor * build(Graph & g, ggml_backend_t dev, ggml_backend_t cpu) {{
    ggml_context * ctx = g.ctx;
    (void) ctx;
{_graph_code(spec)}
}}

// Every iteration's result, concatenated: on `dev` and the CPU, or on the CPU alone (dev == nullptr).
static std::vector<float> run(ggml_backend_t dev, ggml_backend_t cpu) {{
    std::vector<ggml_backend_t> backends;
    std::vector<ggml_backend_buffer_type_t> bufts;
    if (dev) {{
        backends.push_back(dev);
        bufts.push_back(ggml_backend_get_default_buffer_type(dev));
    }}
    backends.push_back(cpu);
    // the CPU's buffers in the device's pinned host memory, as llama.cpp makes them when it offloads:
    // copies into the device then read them when the device runs them
    ggml_backend_buffer_type_t host = dev ? ggml_backend_dev_host_buffer_type(ggml_backend_get_device(dev)) : nullptr;
    bufts.push_back(host ? host : ggml_backend_get_default_buffer_type(cpu));
    ggml_backend_sched_t sched = ggml_backend_sched_new(backends.data(), bufts.data(), (int) backends.size(), 2048,
                                                        PIPELINED && dev, false);
    std::vector<ggml_context *> contexts;  // alive to the end: queued work may still name their tensors
    std::vector<std::vector<float>> results(ITERATIONS, std::vector<float>(ELEMENTS));
    // results read asynchronously land in pinned memory, as llama.cpp's outputs do: a read into pageable
    // memory makes ggml-vulkan drain its queue, which would order every graph after the one before
    ggml_backend_buffer_t pinned = PIPELINED && host ? ggml_backend_buft_alloc_buffer(host, ITERATIONS * ELEMENTS * sizeof(float))
                                                     : nullptr;
    for (int it = 0; it < ITERATIONS; it++) {{
        Graph g;
        ggml_init_params params = {{ggml_tensor_overhead() * 256 + ggml_graph_overhead(), nullptr, true}};
        g.ctx = ggml_init(params);
        g.device = dev != nullptr;
        contexts.push_back(g.ctx);
        ggml_tensor * out = build(g, dev ? dev : cpu, cpu);
        ggml_set_output(out);
        ggml_cgraph * graph = ggml_new_graph(g.ctx);
        for (ggml_tensor * t : g.ops) ggml_build_forward_expand(graph, t);
        ggml_backend_sched_reset(sched);
        for (auto & p : g.placement) ggml_backend_sched_set_tensor_backend(sched, p.first, p.second);
        if (!ggml_backend_sched_alloc_graph(sched, graph)) {{
            fprintf(stderr, "allocation failed\\n");
            exit(2);
        }}
        for (auto & in : g.inputs) {{
            for (float & v : in.second) v += 0.125f * (float) it;  // new inputs every iteration
            ggml_backend_tensor_set(in.first, in.second.data(), 0, in.second.size() * sizeof(float));
        }}
        ggml_backend_sched_graph_compute_async(sched, graph);
        if (PIPELINED) {{  // read as llama.cpp reads logits: queued behind the graph, no wait
            float * to = pinned ? (float *) ggml_backend_buffer_get_base(pinned) + it * ELEMENTS : results[it].data();
            ggml_backend_tensor_get_async(ggml_backend_sched_get_tensor_backend(sched, out), out, to, 0,
                                          ELEMENTS * sizeof(float));
        }} else {{
            ggml_backend_sched_synchronize(sched);
            ggml_backend_tensor_get(out, results[it].data(), 0, ELEMENTS * sizeof(float));
        }}
    }}
    ggml_backend_sched_synchronize(sched);
    if (pinned) {{
        for (int it = 0; it < ITERATIONS; it++) {{
            memcpy(results[it].data(), (float *) ggml_backend_buffer_get_base(pinned) + it * ELEMENTS, ELEMENTS * sizeof(float));
        }}
        ggml_backend_buffer_free(pinned);
    }}
    ggml_backend_sched_free(sched);
    for (ggml_context * c : contexts) ggml_free(c);
    std::vector<float> all;
    for (auto & r : results) all.insert(all.end(), r.begin(), r.end());
    return all;
}}

static ggml_backend_dev_t pick_device() {{
    const char * want = getenv("REPRO_DEVICE");
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {{
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        if (want ? strcmp(ggml_backend_dev_name(d), want) == 0 : ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_GPU) {{
            return d;
        }}
    }}
    return nullptr;
}}

int main(int argc, char ** argv) {{
    const int runs = argc > 1 ? atoi(argv[1]) : 20;
    ggml_backend_load_all();
    ggml_backend_dev_t d = pick_device();
    if (!d) {{
        fprintf(stderr, "no GPU device (set REPRO_DEVICE to a device name; lavapipe: GGML_VK_VISIBLE_DEVICES=0)\\n");
        return 2;
    }}
    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu, 1);
    ggml_backend_t dev = ggml_backend_dev_init(d, nullptr);
{size_work}    const std::vector<float> expected = run(nullptr, cpu);
    int wrong = 0;
    for (int i = 0; i < runs; i++) {{
        std::vector<float> got = run(dev, cpu);
        wrong += memcmp(got.data(), expected.data(), got.size() * sizeof(float)) != 0;
    }}
    printf("%s: %d of %d runs wrong on %s\\n", wrong ? "RED" : "GREEN", wrong, runs, ggml_backend_dev_name(d));
{free_work}    ggml_backend_free(dev);
    ggml_backend_free(cpu);
    return wrong ? 1 : 0;
}}
'''
