"""What a trace holds, in counts (`ggml-trace summary`): per backend the splits it ran, the copies
and bytes into it, its syncs, events and busy time; which allreduce ran; which build made the
trace. A judgement over the loaded frames (it names the allreduce path), so it sits above
load.py, which only loads."""
from __future__ import annotations

import pandas as pd

from .allreduce import allreduce_paths
from .build_info import build_info
from .frames import backend_labels
from .load import Trace


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
