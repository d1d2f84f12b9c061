"""How long each injected delay really stalled the queue it targeted (docs/delay.md).

For a delay on a queue (virtual device), a CUDA stream or a backend's own queue (products, "work"),
the stall is measured on the device side: the targeted operation's first device start minus the
later of (the end of the work before it on the same queue or stream, the moment the host had
enqueued the delay). A virtual device's own device_exec records time its queue; CUPTI's kernel and
copy records time a CUDA stream; Vulkan's markers bound its queue's operations (the start they give
is the last moment the operation was seen not started: the stall is a lower bound). For a host
delay, the stall is the targeted call's start minus the injection (the submission delay).

    python -m ggml_trace.analysis.delay TRACE [--tolerance 0.1]   # prints the table; exit 1 if any is off
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

COLUMNS = ["call_id", "target_call_id", "backend", "where", "requested_ns", "injected_at",
           "prev_end", "target_start", "gap_ns", "stall_ns", "error"]


def _first_start(work: pd.DataFrame, ids: np.ndarray) -> pd.DataFrame:
    """Per call id in `ids`: its first row in `work` (columns call_id, key, t_begin)."""
    w = work[np.isin(work["call_id"].to_numpy(np.uint64), ids)]
    w = w.sort_values("t_begin", kind="stable").drop_duplicates("call_id")
    return w[["call_id", "key", "t_begin"]]


def _prev_end(work: pd.DataFrame, first: pd.DataFrame) -> np.ndarray:
    """For each row of `first`: the latest end of work on the same key at or before its start."""
    if len(first) == 0:
        return np.zeros(0, np.int64)
    left = first.reset_index(drop=True).assign(_row=lambda x: np.arange(len(x)))
    left = left.sort_values("t_begin", kind="stable")
    right = work[["key", "t_end"]].sort_values("t_end", kind="stable")
    m = pd.merge_asof(left, right, left_on="t_begin", right_on="t_end", by="key",
                      direction="backward", allow_exact_matches=True)
    out = np.full(len(first), np.iinfo(np.int64).min, np.int64)
    ok = m["t_end"].notna().to_numpy()
    out[m["_row"].to_numpy()[ok]] = m["t_end"].to_numpy()[ok].astype(np.int64)
    return out


def delay_stalls(trace) -> pd.DataFrame:
    """One row per injected delay: requested_ns, the measured gap_ns (target start - end of the
    work before it) and stall_ns (target start - the later of that end and the injection),
    error = stall_ns / requested_ns - 1. Times in ns since the trace start; NaN where the
    targeted work was not seen (no device records, or CUPTI off)."""
    d = trace.delays
    out = pd.DataFrame({
        "call_id": d["call_id"].to_numpy(np.uint64),
        "target_call_id": d["target_call_id"].to_numpy(np.uint64),
        "backend": d["backend"], "where": d["where"],
        "requested_ns": d["requested_ns"].to_numpy(np.int64),
        "injected_at": d["t_begin"].to_numpy(np.int64),
    })
    n = len(out)
    prev = np.full(n, np.nan)
    start = np.full(n, np.nan)
    where = out["where"].astype(object).to_numpy()
    targets = out["target_call_id"].to_numpy(np.uint64)

    # Virtual device queues, and a backend's own queue busy with products ("work": Vulkan's markers,
    # which bound when each operation ran): their device_exec records, by backend (delays themselves
    # excluded).
    dev = trace.device
    dev = dev[dev["source"].isin(["device", "markers"]) & (dev["kind"] != "delay")]
    qwork = pd.DataFrame({"call_id": dev["call_id"].to_numpy(np.uint64),
                          "key": dev["backend"].cat.codes.to_numpy(np.int64),
                          "t_begin": dev["t_begin"].to_numpy(np.int64),
                          "t_end": dev["t_end"].to_numpy(np.int64)})
    # CUDA streams: CUPTI's activity, by (device, stream).
    g = trace.gpu
    gwork = pd.DataFrame({"call_id": g["call_id"].fillna(0).to_numpy(np.uint64),
                          "key": g["device"].to_numpy(np.int64) * (1 << 32) + g["stream"].to_numpy(np.int64),
                          "t_begin": g["t_begin"].to_numpy(np.int64),
                          "t_end": g["t_end"].to_numpy(np.int64)})
    for kinds, work in ((("queue", "work"), qwork), (("stream",), gwork)):
        sel = np.flatnonzero(np.isin(where, kinds))
        first = _first_start(work, targets[sel])
        pos = pd.Index(first["call_id"].to_numpy(np.uint64))
        hit = pos.get_indexer(targets[sel])
        ok = hit >= 0
        rows = first.iloc[hit[ok]]
        start[sel[ok]] = rows["t_begin"].to_numpy(np.float64)
        pe = _prev_end(work, rows).astype(np.float64)
        pe[pe == np.iinfo(np.int64).min] = np.nan
        prev[sel[ok]] = pe
    # Host delays: the call itself started late.
    host = np.flatnonzero(where == "host")
    if len(host):
        calls = trace.calls
        idx = pd.Index(calls["call_id"].to_numpy(np.uint64)).get_indexer(targets[host])
        ok = idx >= 0
        start[host[ok]] = calls["t_begin"].to_numpy(np.float64)[idx[ok]]
    out["prev_end"] = prev
    out["target_start"] = start
    out["gap_ns"] = start - prev
    # A stream's delay counts from when the host had enqueued it (t_end). A virtual device's queue,
    # idle, starts sleeping as soon as the delay is pushed, before the host's call returns: from
    # its start (t_begin), as a host delay, the host's own sleep.
    inj = np.where(where == "stream", d["t_end"], d["t_begin"]).astype(np.float64)
    out["stall_ns"] = start - np.fmax(prev, inj)
    out["error"] = out["stall_ns"] / out["requested_ns"] - 1
    return out[COLUMNS]


def main(argv=None) -> int:
    from .load import load

    ap = argparse.ArgumentParser(prog="python -m ggml_trace.analysis.delay", description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--tolerance", type=float, default=0.10, help="allowed |error| (default: %(default)s)")
    args = ap.parse_args(argv)
    s = delay_stalls(load(args.trace))
    if len(s) == 0:
        print(f"{args.trace}: no injected delays")
        return 1
    us = s.assign(requested_us=s["requested_ns"] / 1e3, gap_us=s["gap_ns"] / 1e3,
                  stall_us=s["stall_ns"] / 1e3)
    print(us[["target_call_id", "backend", "where", "requested_us", "gap_us", "stall_us", "error"]]
          .to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    bad = ~(s["error"].abs() <= args.tolerance)  # NaN (not measured) counts as bad
    print(f"{len(s)} delays, {int(bad.sum())} outside ±{args.tolerance:.0%} of the request "
          f"(median stall / request {np.nanmedian(s['stall_ns'] / s['requested_ns']):.3f})")
    return 1 if bad.any() else 0


if __name__ == "__main__":
    sys.exit(main())
