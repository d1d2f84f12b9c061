"""What a trace holds, in counts (`ggml-trace summary`): per backend the splits it ran, the copies
and bytes into it, its syncs, events and busy time; which allreduce ran; which build made the
trace. A judgement over the loaded frames (it names the allreduce path), so it sits above
load.py, which only loads. summarize_in_windows counts a trace larger than memory a window at a
time (window_index.py)."""
from __future__ import annotations

import time

import pandas as pd

from .allreduce import allreduce_paths
from .build_info import build_info
from .frames import backend_labels
from .load import Trace, load_raw
from .window_index import WINDOW_RECORDS, index_trace, plan_windows, read_ahead


def summarize(trace: Trace) -> dict:
    """Per-backend counts: splits run, copies/bytes into it, syncs, events, busy time; which
    allreduce ran; which build made the trace. Backends sharing a name (one per scheduler, say)
    are counted together, under the first."""
    calls, splits, copies, sync = trace.calls, trace.splits, trace.copies, trace.sync
    names = list(dict.fromkeys(backend_labels(trace.backends)))

    def count(series: pd.Series) -> dict:
        return series.value_counts().to_dict()

    def of(df: pd.DataFrame, kinds: list[str]) -> pd.DataFrame:
        return df[df["kind"].isin(kinds)]

    n_splits = count(splits["backend"])
    # A meta backend's compute spans its devices' work, which their own rows count.
    own = ~splits["call_id"].isin(calls.loc[calls["meta_parent"], "call_id"])
    busy = splits[own].groupby("backend", observed=True)["duration"].sum().to_dict()
    copies_in = count(copies["dst_backend"])
    bytes_in = copies.groupby("dst_backend", observed=True)["bytes"].sum().to_dict()
    syncs = count(of(sync, ["synchronize", "event_synchronize"])["backend"])
    records = count(of(sync, ["event_record"])["backend"])
    waits = count(of(sync, ["event_wait"])["backend"])
    return {
        "graphs": int((calls["kind"] == "sched_graph_compute").sum()),
        "backends": [{
            "name": n,
            "splits": int(n_splits.get(n, 0)),
            "copies_in": int(copies_in.get(n, 0)),
            "bytes_in": int(bytes_in.get(n, 0)),
            "syncs": int(syncs.get(n, 0)),
            "event_records": int(records.get(n, 0)),
            "event_waits": int(waits.get(n, 0)),
            "busy_ns": int(busy.get(n, 0)),
        } for n in names],
        "allreduce": allreduce_paths(trace),
        "build": build_info(trace.meta),
    }


def summarize_in_windows(path, records: int = WINDOW_RECORDS, strict: bool = True, progress=None) -> tuple[dict, dict]:
    """summarize() of a trace of any size, a window at a time: the per-backend counts and busy
    times add up over windows (each call is in one); an allreduce entry's calls add up, and its
    path is the one a window could name. Returns (summary, {"windows", "warnings", "damage"})."""
    index = index_trace(path, progress, strict)
    plan = plan_windows(index, records, context=0)
    total, warnings, damage, t_start = None, list(index.damage), list(index.damage), time.monotonic()
    for w, raw in read_ahead(index, plan, strict, tail_ns=0):
        trace = load_raw(raw)
        part = summarize(trace)
        warnings += trace.warnings
        damage += trace.damage
        total = part if total is None else _add_summaries(total, part)
        if progress:
            progress("summary", w.number + 1, len(plan), time.monotonic() - t_start)
    assert total is not None  # plan_windows gives at least one window
    info = {"windows": len(plan), "warnings": list(dict.fromkeys(warnings)), "damage": list(dict.fromkeys(damage))}
    return total, info


def _add_summaries(a: dict, b: dict) -> dict:
    backends = {x["name"]: dict(x) for x in a["backends"]}
    for x in b["backends"]:
        if x["name"] in backends:
            backends[x["name"]] = {k: v + x[k] if k != "name" else v for k, v in backends[x["name"]].items()}
        else:
            backends[x["name"]] = dict(x)
    reduce = {(r["registry"], r["devices"]): dict(r) for r in a["allreduce"]}
    for r in b["allreduce"]:
        key = (r["registry"], r["devices"])
        if key not in reduce:
            reduce[key] = dict(r)
            continue
        mine = reduce[key]
        known = mine if mine["path"] != "unknown" else r
        reduce[key] = dict(known, accepted_calls=mine["accepted_calls"] + r["accepted_calls"],
                           declined_calls=mine["declined_calls"] + r["declined_calls"])
    return dict(a, graphs=a["graphs"] + b["graphs"], backends=list(backends.values()),
                allreduce=list(reduce.values()))
