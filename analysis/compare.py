"""What a change did: two traces, or two sets of runs, side by side (docs/compare.md).

Each run is reduced to totals (time on the host and on the devices, how much the host was blocked
and how much of that ordered nothing, how much the devices overlapped, and counts of splits,
copies, synchronizations and event waits); a set of runs to the median and range of each. Graphs
are aligned by their sequence number and compared by their splits. A difference in a time is
*significant* only beyond the noise bound: the largest of a share of side A's median (NOISE_REL_ONE
with one run a side, NOISE_REL with several), NOISE_WALL of side A's wall time (so that a small
quantity's jitter is not news), and the spread (max - min) of either side's runs.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .arrays import cat_codes, codes_of, join_runs, take_text, union_runs
from .critical_path import critical_path, device_work, run_window
from .load import Trace
from .stalls import stalls, totals as stall_totals

# Two single runs of one build and settings differed by up to 26 % in wall time on a busy 2-core VM
# (virtual devices, whose latency is a sleep); several runs a side bring their own spread instead.
NOISE_REL_ONE = 0.30  # one run a side
NOISE_REL = 0.10      # several: and at least their spread
NOISE_WALL = 0.02     # a small quantity's jitter: ~1 ms of device time in a 100 ms run
TIMES = ["wall_ns", "host_blocked_ns", "avoidable_blocked_ns", "device_busy_ns", "device_idle_ns",
         "device_overlap_ns", "in_flight_ns", "critical_host_ns", "critical_device_ns", "critical_waiting_ns"]
COUNTS = ["graphs", "splits", "copies", "copy_bytes", "synchronizations", "event_records", "event_waits",
          "avoidable_waits"]


def _union_ns(b: np.ndarray, e: np.ndarray) -> int:
    """Length of the union of intervals [b, e)."""
    starts, ends = union_runs(b, e)
    return int((ends - starts).sum())


def _overlap_ns(per_queue: list[tuple[np.ndarray, np.ndarray]]) -> int:
    """Time during which at least two queues were busy at once (a sweep over their runs)."""
    edges = []
    for b, e in per_queue:
        starts, ends = union_runs(b, e)
        if len(starts):
            edges.append(np.stack([np.r_[starts, ends], np.r_[np.ones(len(starts)), -np.ones(len(ends))]], axis=1))
    if len(edges) < 2:
        return 0
    ev = np.concatenate(edges)
    ev = ev[np.lexsort((ev[:, 1], ev[:, 0]))]  # ends before begins at the same instant
    busy = np.cumsum(ev[:, 1])
    return int(np.diff(ev[:, 0])[busy[:-1] >= 2].sum())


def _count_kinds(kind: pd.Series, names: list[str]) -> int:
    """How many rows of a categorical kind column are of one of `names` (compared by code)."""
    return int(np.isin(cat_codes(kind), codes_of(kind.cat.categories, names)).sum())


def split_structure(t: Trace) -> pd.Series:
    """Per graph, its splits' backends in order, joined: "CPU,VDEV0,CPU"."""
    sp = t.splits
    graph = sp["graph"].to_numpy(np.int64, na_value=-1)
    keep = np.flatnonzero(graph >= 0)
    if not len(keep):
        return pd.Series(dtype=object)
    order = keep[np.lexsort((sp["split"].to_numpy(np.int64)[keep], graph[keep]))]
    g = graph[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    backend = sp["backend"]
    names = take_text([*backend.cat.categories.astype(str), "?"], backend.cat.codes.to_numpy()[order])  # -1: none
    return pd.Series(join_runs(names, starts, ","), index=g[starts], dtype=object)


def run_totals(t: Trace, with_structure: bool = True) -> dict:
    """One run's totals (TIMES and COUNTS, ns and counts) and its graphs' split structure."""
    c = t.calls
    dev = device_work(t)
    t0, t_end = run_window(t, dev)
    wall = t_end - t0
    queue = dev["backend"].cat.codes.to_numpy()
    d_begin, d_end = dev["t_begin"].to_numpy(np.int64), dev["t_end"].to_numpy(np.int64)
    per_queue = [(d_begin[queue == q], d_end[queue == q]) for q in np.unique(queue)]
    busy = sum(_union_ns(b, e) for b, e in per_queue)
    # a graph is in flight from its host call to the end of its last work on a device (or of the call)
    c_graph = c["graph"].to_numpy(np.int64, na_value=-1)
    is_graph = (c["kind"] == "sched_graph_compute").to_numpy()
    numbered = is_graph & (c_graph >= 0)
    span_g, span_b = c_graph[numbered], c["t_begin"].to_numpy(np.int64)[numbered]
    g = np.r_[c_graph, dev["graph"].to_numpy(np.int64, na_value=-1)]
    ends = np.r_[c["t_end"].to_numpy(np.int64), d_end][g >= 0]
    graph_ids, of_graph = np.unique(g[g >= 0], return_inverse=True)
    g_end = np.full(len(graph_ids), np.iinfo(np.int64).min)
    np.maximum.at(g_end, of_graph, ends)
    in_flight = _union_ns(span_b, g_end[np.searchsorted(graph_ids, span_g)]) if len(span_g) else 0
    s = stalls(t)
    st = stall_totals(s, breakdown=False)
    path = critical_path(t, s, dev)
    cp = t.copies
    structure = split_structure(t) if with_structure else None
    out = {
        "wall_ns": wall, "host_blocked_ns": st["blocked_ns"], "avoidable_blocked_ns": st["avoidable_blocked_ns"],
        "device_busy_ns": busy, "device_idle_ns": max(len(per_queue) * wall - busy, 0),
        "device_overlap_ns": _overlap_ns(per_queue), "in_flight_ns": in_flight,
        # the critical path along the driving host thread (analysis/critical_path.py)
        "critical_host_ns": path["host_ns"] + path["copies_ns"], "critical_device_ns": sum(path["devices"].values()),
        "critical_waiting_ns": path["waiting_ns"],
        "graphs": int(is_graph.sum()), "splits": int(len(t.splits)), "copies": int(len(cp)),
        "copy_bytes": int(cp["bytes"].sum()),
        "synchronizations": _count_kinds(c["kind"], ["synchronize", "event_synchronize"]),
        "event_records": _count_kinds(c["kind"], ["event_record"]),
        "event_waits": _count_kinds(c["kind"], ["event_wait"]),
        "avoidable_waits": st["avoidable_calls"],
    }
    return {"totals": out, "structure": structure, "critical_path": path}


def side(traces: list[Trace]) -> dict:
    """A set of runs: each metric's median and range, and the first run's graph structure."""
    runs = [run_totals(t, with_structure=i == 0) for i, t in enumerate(traces)]
    df = pd.DataFrame([r["totals"] for r in runs])
    return {"runs": len(runs), "median": {k: float(df[k].median()) for k in df},
            "min": {k: int(df[k].min()) for k in df}, "max": {k: int(df[k].max()) for k in df},
            "structure": runs[0]["structure"], "critical_path": runs[0]["critical_path"]}


def compare(a: list[Trace], b: list[Trace]) -> dict:
    """Side A against side B (each a list of loaded runs), JSON-ready."""
    sa, sb = side(a), side(b)
    rel = NOISE_REL_ONE if min(sa["runs"], sb["runs"]) == 1 else NOISE_REL
    diff = {}
    for k in TIMES + COUNTS:
        va, vb = sa["median"][k], sb["median"][k]
        d = {"a": va, "b": vb, "diff": vb - va, "rel": (vb - va) / va if va else None}
        if k in TIMES:
            noise = max(rel * va, NOISE_WALL * sa["median"]["wall_ns"], sa["max"][k] - sa["min"][k],
                        sb["max"][k] - sb["min"][k])
            d["noise"] = noise
            d["significant"] = abs(vb - va) > noise
        else:
            d["significant"] = vb != va
        diff[k] = d
    ga, gb = sa["structure"], sb["structure"]
    both = ga.index.intersection(gb.index)
    differing = both[(ga[both].to_numpy() != gb[both].to_numpy())].astype(int).tolist()
    return {
        "a": {"runs": sa["runs"], "totals": sa["median"], "min": sa["min"], "max": sa["max"],
              "critical_path": sa["critical_path"]},
        "b": {"runs": sb["runs"], "totals": sb["median"], "min": sb["min"], "max": sb["max"],
              "critical_path": sb["critical_path"]},
        "diff": diff, "noise_rel": rel, "noise_wall": NOISE_WALL,
        "graphs": {"a": int(len(ga)), "b": int(len(gb)), "aligned": int(len(both)),
                   "split_structure_differs": differing[:50], "split_structure_differs_count": len(differing)},
    }


def format_compare(r: dict, label_a: str, label_b: str) -> str:
    """The comparison as a text table."""
    def ms(ns):
        return f"{ns / 1e6:10.3f} ms"

    lines = [f"A: {label_a} ({r['a']['runs']} run(s))", f"B: {label_b} ({r['b']['runs']} run(s))",
             f"times: medians; a difference counts (*) beyond the noise bound ({r['noise_rel']:.0%} of A, "
             f"{r['noise_wall']:.0%} of A's wall time, or either side's spread)", f"{'':24} {'A':>13} {'B':>13} {'B - A':>13} {'':>8}"]
    for k in TIMES:
        d = r["diff"][k]
        rel = f"{d['rel']:+.1%}" if d["rel"] is not None else ""
        mark = "  *" if d["significant"] else ""
        lines.append(f"{k:24} {ms(d['a'])} {ms(d['b'])} {ms(d['diff'])} {rel:>8}{mark}")
    for k in COUNTS:
        d = r["diff"][k]
        mark = "  *" if d["significant"] else ""
        lines.append(f"{k:24} {d['a']:13.0f} {d['b']:13.0f} {d['diff']:+13.0f}{mark}")
    for side, label in (("a", "A"), ("b", "B")):
        p = r[side].get("critical_path")
        if p and p["wall_ns"]:
            parts = [("host", p["host_ns"]), ("copies", p["copies_ns"]), *p["devices"].items(), ("waiting", p["waiting_ns"])]
            lines.append(f"critical path {label} (first run): " + ", ".join(
                f"{name} {ns / p['wall_ns']:.0%}" for name, ns in parts if ns))
    g = r["graphs"]
    lines.append(f"graphs: A {g['a']}, B {g['b']}, aligned by sequence number {g['aligned']}; "
                 f"split structure differs in {g['split_structure_differs_count']}")
    return "\n".join(lines)
