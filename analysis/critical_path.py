"""Where a run's wall time went, along the host thread that drives the scheduler (docs/compare.md).

One host thread drives ggml's scheduler: it runs the CPU's splits, enqueues the devices' work and
waits for it. So at each moment of a run, from its first graph to the end of its last work, the
critical path is on one of:

- the host: the driving thread is running (the CPU's splits, the scheduler, the program);
- copies: it is blocked in a synchronous copy;
- a device: it is blocked in a wait (docs/stalls.md) while the queue it drains is occupied, else
  while a queue that the drained work waited on (the wait's `via`) is; after the thread's last
  call, the device that finishes last, while occupied. A queue is occupied from when its next
  operation could start (enqueued, and the one before it on that queue ended) to when it ended:
  launch latency counts, as a virtual device's latency does. A copy from another device is on the
  source's queue, where it runs;
- waiting: it is blocked while none of those is busy (a device's latency, launch gaps, a queue
  waiting on an event nobody traced).

The parts add up to the wall time. It is the path through the driving thread's dependencies, not
through every queue's: work that overlapped a running host or another queue's busy time is off it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .arrays import lookup, union_runs
from .load import Trace, best_device_intervals
from .stalls import SYNC_COPY_KINDS, stalls


def first_graph_ns(t: Trace) -> int:
    """When a run's first scheduler graph began (its first call, without any): where its wall time starts."""
    c = t.calls
    begin = c["t_begin"].to_numpy(np.int64)
    graphs = begin[(c["kind"] == "sched_graph_compute").to_numpy()]
    return int(graphs.min()) if len(graphs) else int(begin.min()) if len(begin) else 0


def run_window(t: Trace, dev: pd.DataFrame) -> tuple[int, int]:
    """A run's wall time (t0, t_end): from its first graph to its last call or work on a device
    (`dev`: best_device_intervals, rows with a backend)."""
    c = t.calls
    t_end = max(int(c["t_end"].max()) if len(c) else 0, int(dev["t_end"].max()) if len(dev) else 0)
    return first_graph_ns(t), t_end


class _Busy:
    """A queue's busy time as disjoint runs, and how much of any interval they cover."""

    def __init__(self, b: np.ndarray, e: np.ndarray):
        self.starts, self.ends = union_runs(b, e)
        self.before = np.r_[0, np.cumsum(self.ends - self.starts)]  # busy time before run k

    def _upto(self, x: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self.starts, x, side="right") - 1
        run = np.maximum(k, 0)
        inside = np.minimum(x - self.starts[run], self.ends[run] - self.starts[run])
        return np.where(k >= 0, self.before[run] + inside, 0)

    def covered(self, b: np.ndarray, e: np.ndarray) -> np.ndarray:
        if len(self.starts) == 0:
            return np.zeros(len(b), np.int64)
        return self._upto(e) - self._upto(b)


def _occupied(t: Trace, dev: pd.DataFrame) -> tuple[dict[str, _Busy], np.ndarray]:
    """Per queue, the time it was occupied (see the module's words); and the queue of each row of
    `dev` (a copy from another device: its source's)."""
    if not len(dev):
        return {}, np.array([], dtype=str)
    c = t.calls
    row = lookup(c["call_id"].to_numpy(np.uint64), dev["call_id"].to_numpy(np.uint64))  # the enqueuing call
    found, at = row >= 0, np.maximum(row, 0)
    # queues by code: the devices' backends, then the copies' other sources
    b2 = c["backend2"].cat
    names = dev["backend"].cat.categories.astype(str)
    names = names.append(b2.categories.astype(str).difference(names))
    dest = dev["backend"].cat.codes.to_numpy()  # the devices' backends are the first names
    b2_code = np.where(found, b2.codes.to_numpy()[at], -1)
    src = np.where(b2_code >= 0, names.get_indexer(b2.categories.astype(str))[np.maximum(b2_code, 0)], -1)
    b = t.backends
    is_async = names.get_indexer(b.loc[b["has_async"] | b["has_events"], "name"].astype(str))
    cpy = c["kind"].cat.categories.get_indexer(["cpy_tensor_async"])[0]
    kind_code = np.where(found, c["kind"].cat.codes.to_numpy()[at], -1)
    peer = (cpy >= 0) & (kind_code == cpy) & (src >= 0) & np.isin(src, is_async[is_async >= 0])
    queue = np.where(peer, src, dest)
    begin, end = dev["t_begin"].to_numpy(np.int64), dev["t_end"].to_numpy(np.int64)
    start = np.minimum(np.where(found, c["t_begin"].to_numpy(np.int64)[at], 0), begin)
    out = {}
    for q in np.unique(queue):
        sel = np.flatnonzero(queue == q)
        sel = sel[np.argsort(end[sel], kind="stable")]
        prev_end = np.r_[np.iinfo(np.int64).min, end[sel][:-1]]
        occ = np.minimum(np.maximum(start[sel], prev_end), begin[sel])
        out[names[q]] = _Busy(occ, end[sel])
    return out, np.asarray(names, dtype=object)[queue]


def device_work(t: Trace) -> pd.DataFrame:
    """The work that ran on a backend's device (best_device_intervals, rows with a backend)."""
    dev = best_device_intervals(t.device)
    return dev[dev["backend"].notna()]


def critical_path(t: Trace, st: pd.DataFrame | None = None, dev: pd.DataFrame | None = None) -> dict:
    """{"wall_ns", "host_ns", "copies_ns", "waiting_ns", "devices": {backend: ns}} of one run (its
    stalls frame and device_work may be given, to avoid computing them twice)."""
    c = t.calls
    if not len(c):
        return {"wall_ns": 0, "host_ns": 0, "copies_ns": 0, "waiting_ns": 0, "devices": {}}
    dev = device_work(t) if dev is None else dev
    t0, t_end = run_window(t, dev)
    thread = c["thread"].to_numpy(np.int64)
    in_graphs = thread[(c["kind"] == "sched_graph_compute").to_numpy()]
    ids, n = np.unique(in_graphs if len(in_graphs) else thread, return_counts=True)
    driver = int(ids[n.argmax()])  # the thread that made most of them (the smallest of ties)
    host_end = int(c["t_end"].to_numpy(np.int64)[thread == driver].max())
    busy, queue_of = _occupied(t, dev)
    devices = {name: 0 for name in busy}

    st = stalls(t) if st is None else st
    b, e = st["t_begin"].to_numpy(np.int64), st["t_end"].to_numpy(np.int64)
    rows = np.flatnonzero((st["thread"].to_numpy(np.int64) == driver) & (e > t0))
    rows = rows[np.argsort(b[rows], kind="stable")]
    b, e = np.maximum(b[rows], t0), e[rows]
    b = np.maximum(b, np.r_[t0, np.maximum.accumulate(e)[:-1]])  # nested or overlapping: each instant once
    e = np.maximum(e, b)
    span = e - b
    copy = st["kind"].isin(SYNC_COPY_KINDS).to_numpy()[rows]
    copies = int(span[copy].sum())
    waiting = 0
    queue = st["backend"].astype(object).to_numpy()[rows]
    via = st["via"].astype(object).to_numpy()[rows]
    for q in pd.unique(queue[~copy]):
        on_q = ~copy & (queue == q)
        cq = busy[q].covered(b[on_q], e[on_q]) if q in busy else np.zeros(int(on_q.sum()), np.int64)
        devices[q] = devices.get(q, 0) + int(cq.sum())
        rest = span[on_q] - cq
        # the rest: while a queue the drained work waited on was busy (the first named, as many)
        v = via[on_q]
        for name in pd.unique(v[pd.notna(v)]):
            sel = v == name
            first = str(name).split(", ")[0]
            if first in busy:
                cv = np.minimum(busy[first].covered(b[on_q][sel], e[on_q][sel]), rest[sel])
                devices[first] = devices.get(first, 0) + int(cv.sum())
                rest[sel] -= cv
        waiting += int(rest.sum())
    blocked = int(span.sum())
    host = max(min(host_end, t_end) - t0 - blocked, 0)
    # after the driving thread's last call: the device that finished last, while it was busy
    tail = max(t_end - max(host_end, t0), 0)
    if tail and len(dev):
        last = str(queue_of[int(np.argmax(dev["t_end"].to_numpy(np.int64)))])
        on_last = int(busy[last].covered(np.array([t_end - tail]), np.array([t_end]))[0])
        devices[last] += on_last
        waiting += tail - on_last
    return {"wall_ns": t_end - t0, "host_ns": host, "copies_ns": copies, "waiting_ns": waiting,
            "devices": {k: v for k, v in sorted(devices.items())}}
