"""How well one observer of device-side intervals agrees with another on the same run: the event
watcher against CUPTI (first kernel start to last kernel end of each operation), or against a
virtual device's own record."""
from __future__ import annotations

import numpy as np
import pandas as pd


def compare_sources(trace, a: str = "events", b: str = "cupti") -> pd.DataFrame:
    """One row per operation that both sources saw: d_start and d_end are a's minus b's times
    (ns), with the operation's kind and backend and a's flags."""
    d = trace.device
    # several pieces of one operation: its first start and last end
    span = d.groupby(["source", "call_id"], observed=True).agg(
        t_begin=("t_begin", "min"), t_end=("t_end", "max"), kind=("kind", "first"),
        backend=("backend", "first"), start_estimated=("start_estimated", "any"),
        end_late=("end_late", "any"))
    if a not in span.index.get_level_values(0) or b not in span.index.get_level_values(0):
        return pd.DataFrame(columns=["call_id", "kind", "backend", "d_start", "d_end",
                                     "start_estimated", "end_late"])
    x, y = span.loc[a], span.loc[b]
    j = x.merge(y[["t_begin", "t_end"]], left_index=True, right_index=True, suffixes=("", "_b"))
    return pd.DataFrame({
        "call_id": j.index.to_numpy(np.uint64),
        "kind": j["kind"].to_numpy(), "backend": j["backend"].to_numpy(),
        "d_start": (j["t_begin"] - j["t_begin_b"]).to_numpy(np.int64),
        "d_end": (j["t_end"] - j["t_end_b"]).to_numpy(np.int64),
        "start_estimated": j["start_estimated"].to_numpy(bool),
        "end_late": j["end_late"].to_numpy(bool),
    })


def accuracy(diff: pd.DataFrame) -> dict:
    """Median and 95th percentile of |Δstart| and |Δend|, in µs, over `compare_sources` rows."""
    out: dict[str, float] = {"operations": int(len(diff))}
    for col, name in (("d_start", "start"), ("d_end", "end")):
        v = np.abs(diff[col].to_numpy(np.float64)) / 1e3
        out[f"{name}_median_us"] = float(np.median(v)) if len(v) else float("nan")
        out[f"{name}_p95_us"] = float(np.percentile(v, 95)) if len(v) else float("nan")
        out[f"{name}_signed_median_us"] = (float(np.median(diff[col].to_numpy(np.float64))) / 1e3
                                           if len(v) else float("nan"))
    return out
