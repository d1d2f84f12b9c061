"""`ggml-trace reduce` and `replay`: from a race in a trace to a small deterministic reproduction
that runs on virtual devices (or a real Vulkan device) without the model or the GPUs, and back.

reduce: the finding's shape (analysis/reduction.py) becomes the smallest scheduler graph of that
shape, written as a spec the scenario program reads; the reduced run is traced and its race
analysed to confirm that the same race (class, roles, missing ordering) is there, and the vectors
are halved while it stays. A race across graphs keeps what made the device late: the work its
queue held ahead of the read, as measured in the trace (queue_wait). replay: the spec run N times
on a build, each result compared with the CPU's, each trace analysed: RED when some result is wrong
(exit 1), GREEN when none is (exit 0). docs/reduce.md.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..analysis.load import load
from ..analysis.races import races
from ..analysis.reduction import (NotReducible, Shape, matching, queue_wait, shape_of, size_unit, smallest_size,
                                  spec_text, start_size)
from . import scenario
from .replay_limits import MAX_LATENCY_US, available_memory, check_about, check_spec, read_spec
from .repro_cpp import NoStandalone, cpp, one_line

CPP = "repro.cpp"
SPEC = "spec.txt"
ABOUT = "reduce.json"
README = "README.md"
MIN_LATENCY_US = 2000.0  # the device's lateness on virtual devices: far beyond a small CPU split
# ... and beyond what the host does between two graphs (reset, allocate, write the inputs, the next
# CPU split), for a race across graphs
MIN_LATENCY_NEXT_GRAPH_US = 10000.0


class ReduceError(RuntimeError):
    """No reproduction (or no replay): the message says why, in one line."""


@dataclass
class Confirmation:
    found: bool  # the reduced run's trace has the same race
    manifested: bool  # ... and the times prove it hit
    wrong: bool  # the reduced run's result differs from the CPU's
    graph: dict  # splits, nodes


@dataclass
class Reduction:
    directory: str
    trace: str
    race: int
    shape: dict
    build: str
    backend: str
    devices: int  # virtual devices
    latency_us: list  # per virtual device
    size: int  # what the reduction halved: elements of each vector, or layers (size_unit)
    size_unit: str
    splits: int
    nodes: int
    original: dict  # splits, nodes, bytes of the graph the race was found in
    steps: list = field(default_factory=list)  # each tried size and whether the race stayed
    expected: dict = field(default_factory=dict)  # a replay on the build it came from
    command: str = ""
    standalone: str | None = None  # repro.cpp, on ggml's public API alone; None: why not in standalone_why
    standalone_why: str | None = None
    # next-graph-write: the read's wait on its queue in the trace, and the device work kept for it (queue_wait)
    queue: dict | None = None

    def to_json(self) -> dict:
        return asdict(self)


def _pick(report, race: int | None) -> tuple[int, dict]:
    findings = report.findings.to_dict("records")
    if not findings:
        raise ReduceError("no race in this trace: nothing to reduce")
    n = race or 1
    if not 1 <= n <= len(findings):
        raise ReduceError(f"there is no race {n}: the trace has {len(findings)} (see `ggml-trace races`)")
    return n, findings[n - 1]


def _original_size(trace, finding: dict) -> dict:
    s = trace.splits
    g = s[s["graph"] == finding["a_graph"]]
    return {"graph": int(finding["a_graph"]), "splits": int(len(g)), "nodes": int(g["n_nodes"].sum()),
            "bytes": int(finding["range_end"]) - int(finding["range_start"])}


def _latency_for(trace, finding: dict, shape: Shape) -> list[float]:
    """Per virtual device: the one that reads late gets a latency well beyond what the writer took
    in the trace (four times its split, at least MIN_LATENCY_US); the others none. An allreduce's
    writer is a peer's copy inside the same split: the floor alone."""
    s = trace.splits
    w = s[(s["graph"] == finding["b_graph"]) & (s["split"] == finding["b_split"])]
    took_us = float(w["duration"].max()) / 1000 if len(w) and shape.name != "allreduce-scratch" else 0.0
    floor = MIN_LATENCY_NEXT_GRAPH_US if shape.name == "next-graph-write" else MIN_LATENCY_US
    late = round(min(MAX_LATENCY_US, max(floor, 4 * took_us)))
    return [float(late) if i == shape.reader_index else 0.0 for i in range(shape.devices)]


def _latency_arg(latency_us: list) -> str:
    return ",".join(f"{v:g}" for v in latency_us)


def confirm(spec: str, shape: Shape, build: str, latency_us: list, work: Path, backend: str = "vdev",
            ) -> Confirmation:
    """Runs `spec` once, traced, on `build` and looks for the race of `shape` in its trace."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / SPEC
    path.write_text(spec)
    r = scenario.run("spec", build=build, runs=1, latency_us=_latency_arg(latency_us), devices=shape.devices,
                     out_dir=work, backend=backend, spec=path)
    trace = load(r.traces[0])
    found = matching(races(trace).findings, trace, shape)
    return Confirmation(bool(found), any(bool(f["manifested"]) for f in found), r.corrupt_runs > 0, r.graph)


def reduce(trace_path, out_dir, race: int | None = None, build: str | None = None, backend: str = "vdev",
           expect_runs: int = 3, log=lambda line: None) -> Reduction:
    trace = load(trace_path)
    n, finding = _pick(races(trace), race)
    try:
        shape = shape_of(finding, trace)
    except NotReducible as e:
        raise ReduceError(f"race {n} cannot be reduced: {e}") from None
    build = build or (trace.header.get("hooks_build") or "").removesuffix("-vulkan")
    if not build:
        raise ReduceError("the trace does not say which build made it: give --build NAME")
    latency = _latency_for(trace, finding, shape)
    unit = size_unit(shape)
    header = (f"ggml-trace reduce {Path(trace_path).name} --race {n}\n"
              f"{shape.race_class}: {finding['missing']}")
    size, smallest = start_size(shape, trace, finding), smallest_size(shape)
    queue = None
    if shape.name == "next-graph-write":
        queue = queue_wait(trace, finding)
        queue["kept"] = (f"work w dev0 {queue['target_us']}: products of weights uploaded once, sized on the device "
                         f"at start (n doubles from 256 until one takes an eighth of the target, 4096 at most; then "
                         f"enough of them to exceed it, 64 at most), in every graph, ahead of the next graph's copy")
    out = Path(out_dir)
    work = Path(tempfile.mkdtemp(prefix="ggml-trace-reduce-"))
    steps = []
    try:
        # Halve the size while the race is there; keep the smallest size at which it also hit: the
        # times prove it (inverted) or the result was wrong (on virtual devices; a real device's
        # markers may show neither).
        best = None
        while True:
            spec = spec_text(shape, size, header=header, work_us=queue["target_us"] if queue else 0)
            c = confirm(spec, shape, build, latency, work / f"s{size}", backend)
            steps.append({unit: size, "race": c.found, "manifested": c.manifested, "wrong": c.wrong})
            log(f"{size} {unit}: " + ("same race" + (", manifested" if c.manifested else "")
                                      + (", a wrong result" if c.wrong else "") if c.found else "the race is gone"))
            if not c.found:
                break
            if c.manifested or c.wrong or backend != "vdev":
                best = (size, spec, c)
            if size <= smallest:
                break
            size = max(smallest, size // 2)
        if best is None:
            seen = ("shows the race, but neither its times nor its result show it hit" if any(s["race"] for s in steps)
                    else "shows no such race")
            raise ReduceError(f"race {n} did not survive in the smallest graph of its shape ({shape.name}) on "
                              f"{build} ({backend}): the reduced run's trace {seen}")
        size, spec, c = best
        if queue:  # how the reduced run sized its work on the device it ran on (a real one sizes its own)
            queue["sized"] = {"build": build, "backend": backend, "work": c.graph.get("work", [])}
        out.mkdir(parents=True, exist_ok=True)
        (out / SPEC).write_text(spec)
        result = Reduction(str(out), str(trace_path), n, shape.to_json(), build, backend, shape.devices, latency,
                           size, unit, c.graph.get("splits", 0), c.graph.get("nodes", 0),
                           _original_size(trace, finding), steps, queue=queue)
        result.command = f"ggml-trace replay {out} --build {build} --runs 20"
        try:
            title = f"A {shape.race_class} race ({shape.name}) reduced from {Path(trace_path).name}, race {n}"
            (out / CPP).write_text(cpp(spec, title, finding["missing"]))
            result.standalone = str(out / CPP)
        except NoStandalone as e:
            result.standalone_why = str(e)
        (out / ABOUT).write_text(json.dumps(result.to_json(), indent=2) + "\n")  # replay reads it
        rep = replay(out, build, runs=expect_runs, backend=backend, work=work / "expected")
        result.expected = rep.to_json() | {"traces": []}
        (out / ABOUT).write_text(json.dumps(result.to_json(), indent=2) + "\n")
        (out / README).write_text(readme(result, finding))
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class Replay:
    build: str
    backend: str
    runs: int
    red_runs: int  # runs whose result differs from the CPU's
    manifested_runs: int  # runs whose trace proves the race hit
    race_runs: int  # runs whose trace shows the race at all
    verdict: str  # RED or GREEN
    splits: int
    nodes: int
    latency_us: list
    traces: list = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _about(directory: Path) -> tuple[dict, Shape]:
    """reduce.json of a reproduction, and the shape of its race."""
    try:
        about = json.loads((directory / ABOUT).read_text())
        (directory / SPEC).stat()
        s = about["shape"]
        shape = Shape(s["name"], s["race_class"], s["device"], s["writer"], s["missing"], int(s["bytes"]),
                      int(s["devices"]), int(s["reader_index"]))
        [float(v) for v in about["latency_us"]]
        return about, shape
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ReduceError(f"{directory} is not a reproduction written by this `ggml-trace reduce` "
                          f"({type(e).__name__}: {e})") from None


def replay(directory, build: str, runs: int = 20, backend: str = "vdev", seed: int = 0, work=None) -> Replay:
    directory = Path(directory)
    about, shape = _about(directory)
    # a reproduction may come from anyone: what it asks of this machine is checked before it runs
    check_about(about["latency_us"], shape.devices, str(directory / ABOUT))
    check_spec(read_spec(directory / SPEC), available_memory(), str(directory / SPEC))
    out = Path(work) if work else Path(tempfile.mkdtemp(prefix="ggml-trace-replay-"))
    r = scenario.run("spec", build=build, runs=runs, latency_us=_latency_arg(about["latency_us"]),
                     devices=shape.devices, seed=seed, out_dir=out, backend=backend, spec=directory / SPEC)
    race_runs = manifested_runs = 0
    for path in r.traces:
        trace = load(path)
        found = matching(races(trace).findings, trace, shape)
        race_runs += bool(found)
        manifested_runs += any(bool(f["manifested"]) for f in found)
    return Replay(build, backend, runs, r.corrupt_runs, manifested_runs, race_runs,
                  "RED" if r.corrupt_runs else "GREEN", r.graph.get("splits", 0), r.graph.get("nodes", 0),
                  about["latency_us"], r.traces)


def format_replay(r: Replay) -> str:
    where = ("a real Vulkan device" if r.backend == "vulkan"
             else f"virtual devices, latency {_latency_arg(r.latency_us)} us")
    return (f"{r.verdict}: {r.red_runs} of {r.runs} runs wrong on {r.build} ({where}); the race in "
            f"{r.race_runs} traces, manifested in {r.manifested_runs}; graph of {r.splits} splits, {r.nodes} nodes")


def format_reduction(r: Reduction) -> str:
    o, e = r.original, r.expected
    return "\n".join([
        f"race {r.race} of {r.trace}: {r.shape['name']} ({r.shape['what']})",
        f"reduced: graph {o['graph']} of {o['splits']} splits, {o['nodes']} nodes, {o['bytes']} bytes shared "
        f"-> {r.splits} splits, {r.nodes} nodes, {r.size} {r.size_unit}; the same race confirmed by tracing it",
        *([_queue_words(r.queue)] if r.queue else []),
        f"expected on {r.build}: {e.get('verdict')} ({e.get('red_runs')} of {e.get('runs')} runs wrong, "
        f"manifested in {e.get('manifested_runs')})",
        f"written to {r.directory}/ ({SPEC}, {ABOUT}, {README}" + (f", {CPP}" if r.standalone else "") + ")",
        f"run it: {r.command}",
    ])


def _queue_words(q: dict) -> str:
    """What made the device late, in one sentence (reduce.json's `queue`)."""
    if not q.get("measured"):
        return f"device work kept: {q['target_us']} us a graph ({q['why']})"
    ahead = [a for a in q["ahead"] if a["kind"] == "graph_compute"]
    what = ", ".join(f"graph {a['graph']}'s split {a['split']} ({a['nodes']} nodes)" for a in ahead) or "earlier work"
    return (f"the read waited {q['wait_us'] / 1000:.1f} ms on its queue behind {what}; the next graph wrote the "
            f"bytes {q['write_before_read_us'] / 1000:.1f} ms before the device read them; kept: resident device "
            f"work of {q['target_us'] / 1000:g} ms a graph, sized on the device at start")


def readme(r: Reduction, finding: dict) -> str:
    """What a maintainer pastes into an issue or a test."""
    o, e = r.original, r.expected
    late = f"\n\nWhat made the device late: {_queue_words(r.queue)}." if r.queue else ""
    return f"""# A reproduction of a {r.shape['race_class']} race ({r.shape['name']})

Reduced by `ggml-trace reduce {Path(r.trace).name} --race {r.race}` from a trace of {r.build}:

> {one_line(finding['missing'])}

Shape: {r.shape['what']}.
The traced graph {o['graph']} had {o['splits']} splits and {o['nodes']} nodes; this one has {r.splits} splits and
{r.nodes} nodes ({r.size} {r.size_unit}), on {r.devices} virtual async device(s) whose operations take
{_latency_arg(r.latency_us)} us.

Run it (exit 1 RED: some run's result differs from the CPU's; 0 GREEN; 2 error):

```sh
{r.command}
ggml-trace replay {r.directory} --build {r.build} --backend vulkan --runs 20   # the build's Vulkan tree
```

Expected on {r.build} ({r.backend}): **{e.get('verdict')}**, {e.get('red_runs')} of {e.get('runs')} runs wrong, the race
manifested in {e.get('manifested_runs')} of them. A build with the ordering this race lacks is GREEN.

`{SPEC}` is the graph (the scenario program's spec language, docs/reduce.md); `{ABOUT}` holds the
finding's shape, the sizes before and after, and each size the reduction tried.{late}
{_standalone_words(r)}"""


def _standalone_words(r: Reduction) -> str:
    if not r.standalone:
        return f"\nNo standalone program: {r.standalone_why}.\n"
    return f"""
`{CPP}` is the same graph on ggml's public API alone, for your own tree and a real device (it
compares each run with the CPU's; exit 1 RED, 0 GREEN, 2 no device):

```sh
c++ -std=c++17 -O2 {CPP} -I LLAMA/ggml/include -L BUILD/bin -lggml -lggml-base -lggml-cpu -Wl,-rpath,BUILD/bin -o repro
./repro 20
```
"""
