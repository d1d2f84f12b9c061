"""Why the host waited: every call that blocked the host thread on a backend's queue, what it
waited for, and whether any traced access needed that ordering (docs/stalls.md).

A wait drains queue Q up to a point P (a backend `synchronize`: everything enqueued on Q so far; an
`event_synchronize`: what Q had before the event's latest record). The work it waited for is what
was enqueued on Q, or copied into Q from another queue (Q waits for such a copy), since the
previous wait on Q and up to P (`pending`: how much of it had not finished on the device when the
wait began; without device times, all of it). The wait was *needed* when an access made after it and before the next
wait on Q that drains new work, by anything but Q's own queue (which queue order already orders), touches bytes that
work touched, one of the two writing. Otherwise it ordered nothing the trace shows: *avoidable*.
A wait of the program's own (outside a scheduler graph) that drains a copy into host memory
(`get_tensor_async`) is needed too: the program reads what it wrote with plain loads, which the
trace does not see. A wait with nothing new to drain ordered nothing (the wait before it did):
avoidable. Each wait is judged on its own, and the blocked time counted as avoidable may partly move
to a later wait if it were removed. Synchronous copies block the host too; they move bytes rather
than wait, so they are counted but not judged.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .load import Trace, backend_labels, best_device_intervals
from .schema import STALLS

WAIT_KINDS = ["synchronize", "event_synchronize"]
SYNC_COPY_KINDS = ["buf_set_tensor", "buf_get_tensor", "buf_set_tensor_2d", "buf_get_tensor_2d", "buf_cpy_tensor"]
READ_BACK_KINDS = ["get_tensor_async", "get_tensor_2d_async"]
QUEUED_KINDS = ["graph_compute", "cpy_tensor_async", "set_tensor_async", "get_tensor_async",
                "set_tensor_2d_async", "get_tensor_2d_async", "event_record", "event_wait", "comm_allreduce"]

STALL_COLUMNS = STALLS  # the stalls frame's columns and dtypes (analysis/schema.py)


def stalls(t: Trace) -> pd.DataFrame:
    """The stalls frame of a loaded trace (STALL_COLUMNS), in time order."""
    m = _Model(t)
    parts = [m.waits_on(q) for q in sorted(m.queues)] + [m.sync_copies()]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=d) for c, d in STALL_COLUMNS.items()})
    out = pd.concat(parts, ignore_index=True)
    out = out.sort_values(["t_begin", "call_id"], kind="stable").reset_index(drop=True)
    out["boundary"] = _boundaries(t, out)
    return out.astype(STALL_COLUMNS)[list(STALL_COLUMNS)]


def _boundaries(t: Trace, s: pd.DataFrame) -> np.ndarray:
    """Where each stall stands in the schedule: "graph G split S" inside a scheduler graph, else
    "after graph G" (the latest graph begun before it; the program's own waits between graphs)."""
    c = t.calls
    starts = c[c["kind"] == "sched_graph_compute"][["t_begin", "graph"]].dropna()
    prev = (pd.merge_asof(s[["t_begin"]], starts.astype({"graph": "int64"}).sort_values("t_begin"),
                          on="t_begin", direction="backward")["graph"] if len(starts) else
            pd.Series(np.nan, index=s.index))
    inside = "graph " + s["graph"].astype("string") + " split " + s["split"].astype("string").fillna("?")
    between = ("after graph " + prev.astype("Int64").astype("string")).fillna("before the first graph")
    return inside.fillna(between).to_numpy(object)


class _Model:
    """The calls as arrays: who runs each queued call, when it ended on its device, where each
    wait drains to."""

    def __init__(self, t: Trace):
        c = t.calls
        self.ids = c["call_id"].to_numpy(np.uint64)
        self.kind = c["kind"].astype(object).to_numpy()
        self.backend = c["backend"].astype(object).to_numpy()
        self.thread = c["thread"].to_numpy(np.int64)
        self.t_begin = c["t_begin"].to_numpy(np.int64)
        self.t_end = c["t_end"].to_numpy(np.int64)
        self.graph = c["graph"].astype("Int64").array
        self.split = c["split"].astype("Int64").array
        be = t.backends
        flags = (be["has_async"] | be["has_events"]).tolist()
        self.queues = {n for n, f in zip(backend_labels(be), flags) if f}
        on_queue = np.isin(self.backend, list(self.queues))
        # queued work, and the queue that runs it: a copy from another queue runs on the source's,
        # and the destination waits for it (a declined copy queued nothing: it has no accesses)
        has_acc = np.isin(self.ids, t.accesses["call_id"].to_numpy(np.uint64))
        may_decline = np.isin(self.kind, ["cpy_tensor_async", "comm_allreduce"])
        self.queued = np.isin(self.kind, QUEUED_KINDS) & on_queue & (has_acc | ~may_decline)
        backend2 = c["backend2"].astype(object).to_numpy()
        self.peer = (self.queued & (self.kind == "cpy_tensor_async") & np.isin(backend2, list(self.queues))
                     & (backend2 != self.backend))
        self.runs_on = np.where(self.peer, backend2, self.backend)
        dev = best_device_intervals(t.device)
        ends = dev.groupby("call_id")["t_end"].max() if len(dev) else pd.Series(dtype="int64")
        self.dev_end = pd.Series(self.ids).map(ends).to_numpy(dtype=float)  # NaN: no device time
        # each wait, the queue it drains and the point it drains to
        self.is_wait = np.isin(self.kind, WAIT_KINDS) & on_queue
        self.drains = self.backend.copy()
        self.point = self.t_begin.copy()
        self.event_source = np.full(len(c), None, dtype=object)  # event_wait: where its event was recorded
        self._events(t.sync)
        a = t.accesses
        self.a_call = pd.Index(self.ids).get_indexer(a["call_id"].to_numpy(np.uint64))
        keep = self.a_call >= 0
        self.a_call = self.a_call[keep]
        self.a_buf = a["buffer"].to_numpy(np.uint64)[keep]
        self.a_off = a["offset"].to_numpy(np.uint64)[keep]
        self.a_end = a["end"].to_numpy(np.uint64)[keep]
        self.a_write = (a["mode"].astype(object) == "write").to_numpy()[keep]
        self.a_tensor = a["tensor"].astype(object).to_numpy()[keep]

    def _events(self, ev: pd.DataFrame):
        """An event_synchronize drains the queue of the event's latest record, up to that record;
        an event_wait makes its queue wait for that record's queue."""
        # an event never recorded: its synchronize returns at once and drains nothing
        self.point[self.kind == "event_synchronize"] = np.iinfo(np.int64).min
        rec = ev[ev["kind"] == "event_record"].dropna(subset=["event"])
        use = ev[ev["kind"].isin(["event_synchronize", "event_wait"])].dropna(subset=["event"])
        if len(rec) == 0 or len(use) == 0:
            return
        rec = rec[["event", "t_begin", "backend"]].rename(columns={"t_begin": "rec_t", "backend": "rec_backend"})
        got = pd.merge_asof(use[["call_id", "kind", "event", "t_begin"]].astype({"event": "uint64"}),
                            rec.astype({"event": "uint64"}).sort_values("rec_t"), left_on="t_begin",
                            right_on="rec_t", by="event", direction="backward").dropna(subset=["rec_t"])
        pos = pd.Index(self.ids).get_indexer(got["call_id"].to_numpy(np.uint64))
        src = got["rec_backend"].astype(object).to_numpy()
        sync = (got["kind"] == "event_synchronize").to_numpy()
        self.drains[pos[sync]] = src[sync]
        self.point[pos[sync]] = got["rec_t"].to_numpy(np.int64)[sync]
        self.event_source[pos[~sync]] = src[~sync]

    def waits_on(self, q: str) -> pd.DataFrame:
        w = np.flatnonzero(self.is_wait & (self.drains == q))
        if len(w) == 0:
            return pd.DataFrame()
        w = w[np.argsort(self.t_begin[w], kind="stable")]
        # the work each wait drains: enqueued on q (or copied into q) up to its point and after the
        # furthest point of the waits before it (an event_synchronize's point can lie far back)
        reach = np.maximum.accumulate(self.point[w])
        work = np.flatnonzero(self.queued & ((self.runs_on == q) | (self.peer & (self.backend == q))))
        seg = np.searchsorted(reach, self.t_begin[work], side="left")
        inside = seg < len(w)
        work, seg = work[inside], seg[inside]
        pending = ~(self.dev_end[work] <= self.t_begin[w][seg])  # NaN (no device time): pending
        wk = pd.DataFrame({"seg": seg, "call": work, "t": self.t_begin[work], "pending": pending,
                           "other": np.where(self.runs_on[work] != q, self.runs_on[work],
                                             np.where(self.event_source[work] != q, self.event_source[work], None))})
        g = wk.groupby("seg")
        last = wk.loc[g["t"].idxmax()].set_index("seg")["call"]
        n_pending = g["pending"].sum()
        via = wk.dropna(subset=["other"]).groupby("seg")["other"].agg(lambda s: ", ".join(sorted(set(s))))
        # accesses after each wait and before the next wait on q that drains at least as far (without
        # this wait, that one would order the same work: the wait is judged on its own), by anything
        # but q's own queue; a wait that reaches less far (an event recorded long ago) drains nothing new
        busy = np.flatnonzero(self.point[w] >= reach)
        after = np.searchsorted(self.t_end[w[busy]], self.t_begin, side="right") - 1
        nxt = np.append(self.t_begin[w[busy]][1:], np.iinfo(np.int64).max)
        later_seg = np.where((after >= 0) & (self.t_begin < nxt[np.maximum(after, 0)])
                             & ~(self.queued & (self.runs_on == q)), busy[np.maximum(after, 0)], -1)
        # judged on the ordering, not on this run's timing: work that happened to be done already
        # still needed the wait, if something after it conflicts
        needed, conflict = self._conflicts(wk, later_seg)
        # a copy into host memory: the program reads what it wrote after the wait, with plain loads
        # the trace cannot see
        # (the program's own waits only: inside a graph the scheduler waits for its own reasons)
        own = pd.Series(self.graph[w]).isna().to_numpy()
        back = wk[np.isin(self.kind[wk["call"].to_numpy()], READ_BACK_KINDS) & own[wk["seg"].to_numpy()]]
        back = back.drop_duplicates("seg")
        back = back[~back["seg"].isin(needed.index)]
        needed = pd.concat([needed, pd.Series(True, index=back["seg"].to_numpy())])
        conflict = pd.concat([conflict, pd.Series(
            [f"the program reads on the host what {self.runs_on[i]} {self.kind[i]} (graph {self.graph[i]}) wrote there"
             for i in back["call"].tolist()], index=back["seg"].to_numpy(), dtype=object)])
        out = pd.DataFrame({"i": w, "seg": np.arange(len(w))})
        out["last"] = out["seg"].map(last)
        out["pending"] = out["seg"].map(n_pending).fillna(0).astype(np.int64)
        out["via"] = out["seg"].map(via)
        out["needed"] = out["seg"].isin(needed.index)
        out["conflict"] = out["seg"].map(conflict)
        return self._rows(out, q)

    def _conflicts(self, work: pd.DataFrame, later_seg: np.ndarray):
        """Per segment: whether an access of its drained work and one of the later calls overlap in
        bytes, one writing; and the first such pair in words."""
        seg_of_call = pd.Series(work["seg"].to_numpy(), index=work["call"].to_numpy())
        d_seg = seg_of_call.reindex(self.a_call).to_numpy()
        d = np.flatnonzero(~np.isnan(d_seg))
        l_seg = later_seg[self.a_call]
        l = np.flatnonzero(l_seg >= 0)
        if len(d) == 0 or len(l) == 0:
            return pd.Series(dtype=bool), pd.Series(dtype=object)
        m = pd.DataFrame({"seg": d_seg[d].astype(np.int64), "buf": self.a_buf[d], "d": d}).merge(
            pd.DataFrame({"seg": l_seg[l], "buf": self.a_buf[l], "l": l}), on=["seg", "buf"])
        dd, ll = m["d"].to_numpy(), m["l"].to_numpy()
        cd, cl = self.a_call[dd], self.a_call[ll]
        same_queue = self.queued[cl] & (self.runs_on[cl] == self.runs_on[cd])  # a peer copy's own queue
        hit = ((self.a_off[dd] < self.a_end[ll]) & (self.a_off[ll] < self.a_end[dd])
               & (self.a_write[dd] | self.a_write[ll]) & ~same_queue)
        m = m[hit].drop_duplicates("seg")
        conflict = [f"{self._access(x)} before {self._access(y)}" for x, y in zip(m["d"], m["l"])]
        return (pd.Series(True, index=m["seg"].to_numpy()),
                pd.Series(conflict, index=m["seg"].to_numpy(), dtype=object))

    def _access(self, a: int) -> str:
        ci = self.a_call[a]
        what = f"split {self.split[ci]}" if self.kind[ci] == "graph_compute" else str(self.kind[ci])
        mode = "writes" if self.a_write[a] else "reads"
        return f"{self.runs_on[ci]} {what} (graph {self.graph[ci]}) {mode} {self.a_tensor[a]}"

    def _rows(self, out: pd.DataFrame, q) -> pd.DataFrame:
        i = out["i"].to_numpy()
        last = out["last"].astype("Int64")
        has = last.notna().to_numpy()
        li = last.fillna(0).to_numpy(np.int64)
        end = self.dev_end[li]
        return pd.DataFrame({
            "call_id": self.ids[i], "kind": self.kind[i], "thread": self.thread[i], "t_begin": self.t_begin[i],
            "t_end": self.t_end[i], "blocked_ns": self.t_end[i] - self.t_begin[i], "backend": q,
            "graph": self.graph[i], "split": self.split[i],
            "waited_call_id": _masked(self.ids[li], has, "UInt64"),
            "waited_kind": np.where(has, self.kind[li], None),
            "waited_graph": _masked(self.graph[li], has, "Int64"),
            "waited_split": _masked(self.split[li], has, "Int64"),
            "waited_end": _masked(np.nan_to_num(end).astype(np.int64), has & ~np.isnan(end), "Int64"),
            "via": out["via"].to_numpy(object), "pending": out["pending"].to_numpy(),
            "needed": out["needed"].to_numpy(), "avoidable": ~out["needed"].to_numpy(),
            "conflict": out["conflict"].to_numpy(object),
        })

    def sync_copies(self) -> pd.DataFrame:
        i = np.flatnonzero(np.isin(self.kind, SYNC_COPY_KINDS))
        n = len(i)
        return pd.DataFrame({
            "call_id": self.ids[i], "kind": self.kind[i], "thread": self.thread[i], "t_begin": self.t_begin[i],
            "t_end": self.t_end[i], "blocked_ns": self.t_end[i] - self.t_begin[i], "backend": self.backend[i],
            "graph": self.graph[i], "split": self.split[i],
            "waited_call_id": pd.array([pd.NA] * n, dtype="UInt64"), "waited_kind": [None] * n,
            "waited_graph": pd.array([pd.NA] * n, dtype="Int64"), "waited_split": pd.array([pd.NA] * n, dtype="Int64"),
            "waited_end": pd.array([pd.NA] * n, dtype="Int64"), "via": [None] * n, "pending": np.zeros(n, np.int64),
            "needed": pd.array([pd.NA] * n, dtype="boolean"), "avoidable": np.zeros(n, bool), "conflict": [None] * n,
        }) if n else pd.DataFrame()


def _masked(values, keep: np.ndarray, dtype: str):
    """A nullable array of `values`, missing where not `keep`."""
    out = pd.array(values, dtype=dtype)
    out[~keep] = pd.NA
    return out


def totals(s: pd.DataFrame) -> dict:
    """Host-blocked time in all, in waits, in synchronous copies, avoidable; per graph and per
    boundary (a split of a graph, or the program's own waits after a graph; ns; DataFrames)."""
    s = s.assign(avoidable_ns=np.where(s["avoidable"], s["blocked_ns"], 0))
    per = lambda keys: (s.groupby(keys, dropna=False)
                        .agg(blocked_ns=("blocked_ns", "sum"), avoidable_blocked_ns=("avoidable_ns", "sum"),
                             calls=("blocked_ns", "size")).reset_index())
    waits = s["kind"].isin(WAIT_KINDS)
    return {
        "blocked_ns": int(s["blocked_ns"].sum()),
        "wait_blocked_ns": int(s.loc[waits, "blocked_ns"].sum()),
        "copy_blocked_ns": int(s.loc[~waits, "blocked_ns"].sum()),
        "avoidable_blocked_ns": int(s["avoidable_ns"].sum()),
        "calls": int(len(s)), "avoidable_calls": int(s["avoidable"].sum()),
        "per_graph": per(["graph"]), "per_boundary": per(["boundary"]),
    }


def words(r: dict) -> str:
    """One stall in a sentence."""
    if r["kind"] in SYNC_COPY_KINDS:
        return f"{r['kind']} on {r['backend']}: a synchronous copy"
    if pd.isna(r["waited_kind"]):
        what = f"nothing queued on {r['backend']} since its previous wait"
    else:
        what = f"{r['waited_kind']} (graph {r['waited_graph']}, split {r['waited_split']})"
    via = f", which waited on {r['via']}" if not pd.isna(r["via"]) else ""
    if r["needed"]:
        why = f"needed: {r['conflict']}"
    elif pd.isna(r["waited_kind"]):
        why = "avoidable: it ordered nothing"
    else:
        why = (f"avoidable: nothing after it, up to the next wait on {r['backend']}, touches the bytes of the "
               "work it waited for (queue order would have sufficed)")
    return f"{r['kind']} on {r['backend']} waited for {what}{via}; {why}"
