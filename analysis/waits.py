"""What a hung program's host threads were blocked in (docs/cuda-streams.md, "A call that never returned"):
from a trace recorded in CUDA streams mode, each thread whose last CUDA call is a blocking one
(`cudaEventSynchronize`, `cudaStreamSynchronize`, `cudaDeviceSynchronize`) that never returned, and the
chain of work it waited for: the stream and operation the event was recorded after, and before that, the
events that stream itself waited on, hop by hop, as far as the trace's records go.

The chain is what the host issued, not what ran: which of those operations completed is not in the
records (CUPTI's activity, `--cupti kernels`, would say). A wait on an event recorded in no call of the
trace, or never recorded, ends the chain with that said.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

BLOCKING = ["event_sync", "stream_sync", "device_sync"]
WORK = ["launch", "memcpy", "memset"]
MAX_HOPS = 8


@dataclass(frozen=True)
class Blocked:
    """A host thread blocked in a CUDA call that never returned: the call's row in `trace.cuda`, and
    the chain of what it waited for, one line a hop."""
    thread: int
    row: int
    op: str
    since_ns: int
    chain: list


def _label(cu: pd.DataFrame, row: int) -> str:
    r = cu.loc[row]
    where = f"{r['backend']} " if pd.notna(r["backend"]) else ""
    return f"{where}stream {int(r['stream']):#x}"


def _work_before(cu: pd.DataFrame, stream: int, seq: int) -> str:
    """The last kernel, copy or memset issued on `stream` before `seq`, in words."""
    w = cu[(cu["stream"] == stream) & (cu["seq"] < seq) & cu["op"].isin(WORK)]
    if len(w) == 0:
        return "no work issued on it before"
    r = w.iloc[-1]
    what = str(r["kernel"]) if r["op"] == "launch" and pd.notna(r["kernel"]) else str(r["op"])
    node = f", node {int(r['node'])}" if pd.notna(r["node"]) else ""
    at = f" (graph {r['graph']}, split {r['split']})" if pd.notna(r["graph"]) else ""
    return f"after {what[:80]}{node}{at}"


def _hops(cu: pd.DataFrame, stream: int, seq: int) -> list:
    """The waits `stream` was given before `seq`, latest first, each followed to the stream that recorded
    its event, up to MAX_HOPS."""
    out: list = []
    seen = set()
    for _ in range(MAX_HOPS):
        waits = cu[(cu["op"] == "stream_wait") & (cu["stream"] == stream) & (cu["seq"] < seq)]
        if len(waits) == 0 or (stream, seq) in seen:
            break
        seen.add((stream, seq))
        w = waits.iloc[-1]
        rec = cu[(cu["op"] == "event_record") & (cu["handle"] == w["handle"]) & (cu["seq"] < w["seq"])]
        if len(rec) == 0:
            out.append(f"which first waited on event {int(w['handle']):#x}, recorded in no call of this trace")
            break
        r = rec.iloc[-1]
        stream, seq = int(r["stream"]), int(r["seq"])
        out.append(f"which first waited on event {int(w['handle']):#x}, recorded on {_label(cu, rec.index[-1])} "
                   f"{_work_before(cu, stream, seq)}")
    return out


def blocked_threads(trace) -> list[Blocked]:
    """Every thread whose last CUDA call is a blocking one that never returned, with its chain."""
    cu = trace.cuda
    if len(cu) == 0:
        return []
    last = cu.groupby("thread", sort=True).tail(1)
    stuck = last[last["op"].isin(BLOCKING).to_numpy(bool) & ~last["returned"].to_numpy(bool)]
    out = []
    for row, r in stuck.iterrows():  # one step per blocked thread, a handful at most
        op, seq = str(r["op"]), int(r["seq"])
        if op == "event_sync":
            rec = cu[(cu["op"] == "event_record") & (cu["handle"] == r["handle"]) & (cu["seq"] < seq)]
            if len(rec) == 0:
                chain = [f"on event {int(r['handle']):#x}, recorded in no call of this trace"]
            else:
                s, at = int(rec.iloc[-1]["stream"]), int(rec.iloc[-1]["seq"])
                chain = [f"on event {int(r['handle']):#x}, recorded on {_label(cu, rec.index[-1])} "
                         f"{_work_before(cu, s, at)}"] + _hops(cu, s, at)
        elif op == "stream_sync":
            s = int(r["stream"])
            chain = [f"on {_label(cu, row)}, {_work_before(cu, s, seq)}"] + _hops(cu, s, seq)
        else:
            streams = np.unique(cu.loc[cu["seq"] < seq, "stream"].to_numpy(np.uint64))
            chain = [f"on every stream of its device ({len(streams)} used so far)"]
        out.append(Blocked(int(r["thread"]), int(row), op, int(r["t"]), chain))
    return out


def format_blocked(blocked: list[Blocked], name: str, t_end: int) -> str:
    if not blocked:
        return f"{name}: no thread was blocked in a CUDA call that never returned"
    lines = [f"{name}: {len(blocked)} thread(s) blocked in a CUDA call that never returned"]
    for b in blocked:
        lines.append(f"thread {b.thread}: cuda{b.op.replace('_sync', '').title()}Synchronize since "
                     f"{(t_end - b.since_ns) / 1e6:.1f} ms before the trace's end, waiting")
        lines += [f"  {x}" for x in b.chain]
    return "\n".join(lines)
