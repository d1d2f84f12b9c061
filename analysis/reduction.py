"""A race's shape, and the smallest scheduler graph of that shape (`ggml-trace reduce`, docs/reduce.md).

A shape is what makes a race the same race in another program: its class, the roles of its two
operations (which call, on which kind of backend, reading or writing which kind of memory), and
the kind of ordering that is missing between them. `shape_of` reads it off a finding; `spec_text`
writes the smallest graph of a shape in the scenario program's spec language (scenarios/); a
reduced run's trace shows the same race when one of its findings has the same shape.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from .load import best_device_intervals

# The shapes reduce knows, with the graph each becomes. `dev0` is the traced async device, `cpu`
# the synchronous backend whose split wrote the bytes.
SHAPES = {
    # llama.cpp #23321: an async copy from host memory into a device, then a later split of the same
    # graph on the CPU, with no inputs (so the scheduler synchronizes nothing), writes over the bytes
    "inputless-reuse": "an async copy from host memory into a device, then a CPU split of the same "
                       "graph with no inputs writing over those bytes",
    # pipeline parallelism (docs/pipeline-parallel.md): a later graph's CPU split writes the bytes
    # that the previous graph's async copy has not read yet
    "next-graph-write": "an async copy from host memory into a device, then a CPU split of a later "
                        "graph writing over those bytes, with no synchronization between the graphs",
    # tensor parallelism (docs/tensor-parallel.md): a meta backend's allreduce, where a device's reduce
    # reads its scratch buffer and a peer's copy for the next allreduce writes it, with no event between
    "allreduce-scratch": "a meta backend's allreduce: a device's reduce reads its scratch buffer, then a "
                         "peer's copy into that buffer writes it, with no event between the two queues",
}
# The smallest vectors the reduction keeps. For inputless-reuse 16 MiB: on virtual devices the
# latency knob makes the device late at any size, but a real one only while its copy lasts. On
# lavapipe that graph, traced, gave wrong results in 3 of 10 runs at 4 Ki floats, 16 of 20 at 64 Ki,
# 18 of 20 at 256 Ki, 99 of 100 at 1 Mi (and once fewer than 18 of 20), 120 of 120 at 4 Mi
# (docs/reduce.md): at this floor its reproduction replays on both. Across graphs (next-graph-write)
# the work queued ahead of the copy makes a real device late, not the copy's size, and the host's
# work between graphs grows with the bytes: that shape goes down to 16 KiB.
MIN_ELEMENTS = {"inputless-reuse": 1 << 22, "next-graph-write": 1 << 12}
# Across graphs a real device is late only behind work already on its queue: the reduced graph keeps
# resident device work (the spec's `work`) for as long as the traced read waited there, within these
# bounds (µs); a trace without device times for the read gets the default.
MIN_WORK_US, MAX_WORK_US, DEFAULT_WORK_US = 2000, 100000, 10000


class NotReducible(ValueError):
    """This finding cannot be reduced; the message says why, in one line."""


@dataclass(frozen=True)
class Shape:
    name: str  # a key of SHAPES
    race_class: str
    device: str  # the traced async backend that read late (VDEV0 / dev0 in the reduction)
    writer: str  # the backend (or queue) that wrote the bytes
    missing: str  # "drain": a synchronize of the device would order them; "event": an event between queues
    bytes: int  # how many bytes the two operations shared in the trace
    devices: int = 1  # the virtual devices its graph needs
    reader_index: int = 0  # which of them reads late (it gets the latency)

    def same_race(self, other: "Shape") -> bool:
        """The same class, roles and kind of missing ordering (names and sizes may differ)."""
        return (self.name, self.race_class, self.missing) == (other.name, other.race_class, other.missing)

    def to_json(self) -> dict:
        return asdict(self) | {"what": SHAPES[self.name]}


def _meta_devices(trace) -> list[str]:
    """The async devices under a meta backend, in the order VDEV0.. stand for them."""
    b = trace.backends
    names = [n for n in b["name"].drop_duplicates() if not str(n).startswith("Meta(")]
    return [n for n in names if _backend_is_async(trace, n)]


def start_size(shape: Shape, trace, finding: dict) -> int:
    """What the reduction halves, at its start: the vectors' elements (the bytes the race shared),
    or for an allreduce the layers (the allreduces a device ran in the race's graph)."""
    if shape.name == "allreduce-scratch":
        c = trace.calls
        reduces = c[(c["graph"] == finding["a_graph"]) & (c["role"] == "reduce") & (c["backend"] == shape.device)]
        return max(1, len(reduces))
    return max(smallest_size(shape), shape.bytes // 4)


def smallest_size(shape: Shape) -> int:
    return MIN_ELEMENTS.get(shape.name, 1)  # an allreduce: one layer


def size_unit(shape: Shape) -> str:
    """What start_size and smallest_size count."""
    return "layers" if shape.name == "allreduce-scratch" else "elements"


def _backend_is_async(trace, name) -> bool:
    b = trace.backends[trace.backends["name"] == name]
    return bool(len(b)) and bool((b["has_async"] | b["has_events"]).any())


def _buffer_is_host(trace, buffer: str, generation) -> bool:
    b = trace.buffers
    rows = b[(b["buffer"] == int(str(buffer), 16)) & (b["generation"] == generation)]
    return bool(len(rows)) and bool(rows["is_host"].iloc[0])


def _split_inputs(trace, graph, split, backend) -> int | None:
    s = trace.splits
    rows = s[(s["graph"] == graph) & (s["split"] == split) & (s["backend"] == backend)]
    return int(rows["n_inputs"].iloc[0]) if len(rows) else None


def flat_finding(race: dict) -> dict:
    """A finding in its JSON form (RaceReport.to_json()["races"]) in the form of a findings row."""
    flat = {k: v for k, v in race.items() if k not in ("a", "b", "range")}
    for side in "ab":
        flat |= {f"{side}_{k}": v for k, v in (race.get(side) or {}).items()}
    flat["range_start"], flat["range_end"] = race.get("range") or (0, 0)
    return flat


def shape_of(finding: dict, trace) -> Shape:
    """The shape of one finding (a row of RaceReport.findings, as a dict) of `trace`; raises
    NotReducible when it is none of SHAPES, saying which part differs."""
    f: dict[str, Any] = {k: (None if (v is not None and not isinstance(v, str) and pd.isna(v)) else v) for k, v in finding.items()}
    who = f"{f['a_backend']} {f['a_kind']} / {f['b_backend']} {f['b_kind']}"
    if f.get("a_role") == "reduce" and f.get("b_role") == "copy":
        devices = _meta_devices(trace)
        if f["a_backend"] not in devices:
            raise NotReducible(f"the reduce runs on {f['a_backend']}, which is not a device of a meta backend")
        return Shape("allreduce-scratch", f["class"], f["a_backend"], f["b_queue_backend"] or f["b_backend"], "event",
                     int(f["range_end"]) - int(f["range_start"]), len(devices), devices.index(f["a_backend"]))
    if f["a_kind"] != "cpy_tensor_async" or f["a_mode"] != "read" or not _backend_is_async(trace, f["a_backend"]):
        raise NotReducible(f"its first operation ({who}) is not an async device's copy of its input; reduce knows "
                           f"{' and '.join(SHAPES)} (docs/reduce.md)")
    if not _buffer_is_host(trace, f["buffer"], f["generation"]):
        raise NotReducible(f"the copy reads device memory ({f['buffer_type']}), not host memory; reduce knows "
                           f"copies from host memory only (docs/reduce.md)")
    if f["b_kind"] != "graph_compute" or f["b_mode"] != "write" or _backend_is_async(trace, f["b_backend"]):
        raise NotReducible(f"its second operation ({who}) is not a synchronous backend's split writing the bytes "
                           f"(docs/reduce.md)")
    if f["a_graph"] is None or f["b_graph"] is None:
        raise NotReducible("the race's operations are outside any traced graph (docs/reduce.md)")
    common = dict(race_class=f["class"], device=f["a_backend"], writer=f["b_backend"], missing="drain",
                  bytes=int(f["range_end"]) - int(f["range_start"]))
    if f["b_graph"] > f["a_graph"]:
        return Shape("next-graph-write", **common)
    inputs = _split_inputs(trace, f["b_graph"], f["b_split"], f["b_backend"])
    if f["b_graph"] == f["a_graph"] and f["b_split"] > f["a_split"] and inputs == 0:
        return Shape("inputless-reuse", **common)
    raise NotReducible(f"the writing split ({f['b_backend']} split {f['b_split']}, graph {f['b_graph']}) has "
                       f"{inputs} inputs; reduce knows a writer without inputs in the same graph or a split of a "
                       f"later graph (docs/reduce.md)")


def queue_wait(trace, finding: dict) -> dict:
    """What made the device late across graphs, as the trace saw it: when the racing read (side a)
    was enqueued and when the device started it (times in µs of the trace, as `ggml-trace races`
    prints them; with markers the start is a lower bound, so the wait is too), how long it waited,
    how long before that the later graph wrote the bytes, and the work the device ran in between
    (`ahead`: the calls enqueued before the read whose device time overlaps the wait). `target_us`:
    the work the reduced graph keeps on the device in every graph (MIN_WORK_US..MAX_WORK_US)."""
    c, d = trace.calls, best_device_intervals(trace.device)
    read = d[d["call_id"] == finding["a_call_id"]]
    call = c[c["call_id"] == finding["a_call_id"]]
    if not len(read) or not len(call):
        return {"measured": False, "target_us": DEFAULT_WORK_US,
                "why": "the trace has no device times for the read (record --device-timing): a default"}
    enqueued, start = int(call["t_end"].iloc[0]), int(read["t_begin"].min())
    queue = finding.get("a_queue_backend") or finding["a_backend"]
    before = d["call_id"].map(c.set_index("call_id")["t_begin"]) < int(call["t_begin"].iloc[0])  # enqueued before it
    ran = d[(d["backend"] == queue) & before & (d["t_end"] > enqueued) & (d["t_begin"] < start)]
    nodes = trace.splits.set_index("call_id")["n_nodes"]
    ahead = [{"kind": str(r.kind), "graph": None if pd.isna(r.graph) else int(r.graph),
              "split": None if pd.isna(r.split) else int(r.split),
              "nodes": int(nodes[r.call_id]) if r.call_id in nodes.index else None,
              "device_us": [round(r.t_begin / 1e3, 1), round(r.t_end / 1e3, 1)]}
             for r in ran.sort_values("t_begin").itertuples()]
    # the time within the wait that the device was busy with them (their union, clipped to the wait)
    spans = np.clip(ran[["t_begin", "t_end"]].to_numpy(np.int64), enqueued, start) if len(ran) else np.empty((0, 2))
    busy, reach = 0, enqueued
    for b, e in sorted(map(tuple, spans)):
        busy += max(0, e - max(b, reach))
        reach = max(reach, e)
    wait_us = (start - enqueued) / 1e3
    return {"measured": True, "enqueued_us": round(enqueued / 1e3, 1), "device_start_us": round(start / 1e3, 1),
            "wait_us": round(wait_us, 1), "busy_us": round(busy / 1e3, 1),
            "write_before_read_us": round((start - int(finding["b_t_begin_ns"])) / 1e3, 1), "ahead": ahead,
            "target_us": int(round(min(MAX_WORK_US, max(MIN_WORK_US, wait_us)), -2))}


def spec_text(shape: Shape, size: int, header: str = "", work_us: int = 0) -> str:
    """The smallest graph of `shape` in the spec language (scenarios/scenarios.cpp), of `size`
    (start_size: vectors of that many floats, or that many layers); next-graph-write with `work_us`
    of resident device work in every graph (queue_wait)."""
    lines = [f"# {line}" for line in header.splitlines()]
    if shape.name == "allreduce-scratch":
        return "\n".join(lines + [f"devices {shape.devices}", f"meta {size}"]) + "\n"
    lines += [f"elements {size}", "devices 1"]
    if shape.name == "inputless-reuse":
        # h is dead once its copy into dev0 is queued, and cont cannot run in place: the allocator
        # gives z h's bytes, and the split writing z has no inputs, so nothing waits for the copy
        lines += ["input x", "input w",
                  "op h cpu scale x      # the bytes the device copies (traced: the copy's input)",
                  "op y dev0 scale h     # the device's split that reads them",
                  "output y",
                  "op z cpu cont w       # a CPU split with no inputs, placed on h's bytes"]
    elif shape.name == "next-graph-write":
        # each iteration a new graph, no synchronization between them: the next CPU split writes e
        # while the device may still hold its copy of the previous e
        lines += ["pipelined 1", "iterations 4",
                  "input x",
                  "op e cpu scale x      # written by the CPU split of every graph",
                  "op out dev0 scale e   # read by the device's copy, late",
                  "output out"]
        if work_us:
            # the traced device was late because its queue still held the previous graph's layers
            lines += [f"work w dev0 {work_us}   # resident device work ahead of the next graph's copy"]
    else:
        raise NotReducible(f"no graph for shape {shape.name}")
    return "\n".join(lines) + "\n"


def matching(findings: pd.DataFrame, trace, shape: Shape) -> list[dict]:
    """The findings of a (reduced) trace that are the same race as `shape`."""
    out = []
    for f in findings.to_dict("records"):
        try:
            if shape_of(f, trace).same_race(shape):
                out.append(f)
        except NotReducible:
            continue
    return out
