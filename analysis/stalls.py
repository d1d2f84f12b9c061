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

from .arrays import (arrow_text, choose_text, codes_of, expand_ranges, join_text, last_before, lookup, stable_order,
                     take_text)
from .load import Trace, backend_labels, best_device_intervals
from .schema import STALLS

WAIT_KINDS = ["synchronize", "event_synchronize"]
SYNC_COPY_KINDS = ["buf_set_tensor", "buf_get_tensor", "buf_set_tensor_2d", "buf_get_tensor_2d", "buf_cpy_tensor"]
READ_BACK_KINDS = ["get_tensor_async", "get_tensor_2d_async"]
QUEUED_KINDS = ["graph_compute", "cpy_tensor_async", "set_tensor_async", "get_tensor_async",
                "set_tensor_2d_async", "get_tensor_2d_async", "event_record", "event_wait", "comm_allreduce"]

STALL_COLUMNS = STALLS  # the stalls frame's columns and dtypes (analysis/schema.py)
# With fewer written buffers than this (64 at most), each call's buffers are known as bits, so that calls
# that cannot conflict are left out before their accesses are listed (the answer is the same without)
BUFFER_BITS = 64


def stalls(t: Trace) -> pd.DataFrame:
    """The stalls frame of a loaded trace (STALL_COLUMNS), in time order."""
    m = _Model(t)
    parts = [m.waits_on(q) for q in m.queues] + [m.sync_copies()]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=d) for c, d in STALL_COLUMNS.items()})
    out = pd.concat(parts, ignore_index=True)
    out = out.sort_values(["t_begin", "call_id"], kind="stable").reset_index(drop=True)
    out.insert(list(STALL_COLUMNS).index("boundary"), "boundary",
               pd.Series(_boundaries(t, out), dtype=object, copy=False))
    differ = {c: d for c, d in STALL_COLUMNS.items() if str(out[c].dtype) != d}  # the parts are built typed
    return out.astype(differ) if differ else out


def _boundaries(t: Trace, s: pd.DataFrame) -> np.ndarray:
    """Where each stall stands in the schedule: "graph G split S" inside a scheduler graph, else
    "after graph G" (the latest graph begun before it; the program's own waits between graphs)."""
    c = t.calls
    first = (c["kind"] == "sched_graph_compute").to_numpy() & c["graph"].notna().to_numpy()
    start_t = c["t_begin"].to_numpy(np.int64)[first]
    order = np.argsort(start_t, kind="stable")
    start_t, start_g = start_t[order], c["graph"].to_numpy(np.int64, na_value=-1)[first][order]
    prev = np.searchsorted(start_t, s["t_begin"].to_numpy(np.int64), side="right") - 1
    graph, split = s["graph"].to_numpy(np.int64, na_value=-1), s["split"].to_numpy(np.int64, na_value=-1)
    inside = s["graph"].notna().to_numpy()
    prev_g = start_g[np.maximum(prev, 0)] if len(start_g) else np.zeros(len(prev), np.int64)
    split_s = choose_text(split >= 0, arrow_text(" split ", split), " split ?")
    words = arrow_text(choose_text(inside, "graph ", "after graph "), np.where(inside, graph, prev_g),
                       choose_text(inside, split_s, ""))
    return choose_text(inside | (prev >= 0), words, "before the first graph").to_numpy(zero_copy_only=False)


class _Model:
    """The calls as arrays (kinds and backends as category codes): who runs each queued call, when
    it ended on its device, where each wait drains to."""

    def __init__(self, t: Trace):
        c = t.calls
        self.ids = c["call_id"].to_numpy(np.uint64)
        self.obj = c["obj"].to_numpy(np.uint64)
        self.kcats = pd.Index(c["kind"].cat.categories)
        self.kc = c["kind"].cat.codes.to_numpy(np.int64)
        self.bcats = pd.Index(c["backend"].cat.categories)
        self.bc = c["backend"].cat.codes.to_numpy(np.int64)  # -1: no backend
        self.knames = np.asarray(self.kcats, dtype=object)
        self.bnames = np.array([*self.bcats, None], dtype=object)  # code -1: none
        self.thread = c["thread"].to_numpy(np.int64)
        self.meta_parent = c["meta_parent"].to_numpy(bool)
        self.t_begin = c["t_begin"].to_numpy(np.int64)
        self.t_end = c["t_end"].to_numpy(np.int64)
        self.graph = c["graph"].astype("Int64").array
        self.split = c["split"].astype("Int64").array
        self.g = self.graph.to_numpy(dtype=np.int64, na_value=-1)  # for words
        self.sp = self.split.to_numpy(dtype=np.int64, na_value=-1)
        be = t.backends
        flags = (be["has_async"] | be["has_events"]).tolist()
        self.queues = sorted(set(codes_of(self.bcats, [n for n, f in zip(backend_labels(be), flags) if f]).tolist()))
        on_queue = np.isin(self.bc, self.queues)
        a = t.access_columns()  # the accesses' own columns: none joined from their calls is read
        a_call = t.access_calls()
        kept = np.flatnonzero(a_call >= 0) if (a_call < 0).any() else None  # None: every access has its call
        take = (lambda x: x) if kept is None else (lambda x: x[kept])  # no copies in the usual case
        # queued work, and the queue that runs it: a copy from another queue runs on the source's,
        # and the destination waits for it (a declined copy queued nothing: it has no accesses)
        has_acc = np.bincount(take(a_call), minlength=len(c)) > 0
        may_decline = self.kind_in(["cpy_tensor_async", "comm_allreduce"])
        self.queued = self.kind_in(QUEUED_KINDS) & on_queue & (has_acc | ~may_decline)
        b2 = self.bcats.get_indexer(c["backend2"].cat.categories)  # backend2's codes in backend's
        bc2 = np.where(c["backend2"].cat.codes.to_numpy() >= 0, b2[c["backend2"].cat.codes.to_numpy()], -1)
        self.peer = (self.queued & self.kind_in(["cpy_tensor_async"]) & np.isin(bc2, self.queues)
                     & (bc2 != self.bc))
        self.runs_on = np.where(self.peer, bc2, self.bc)
        dev = best_device_intervals(t.device)
        self.dev_end = np.full(len(c), np.nan)  # NaN: no device time
        if len(dev):
            ends = dev.groupby("call_id")["t_end"].max()
            pos = lookup(self.ids, ends.index.to_numpy(np.uint64))
            self.dev_end[pos[pos >= 0]] = ends.to_numpy(np.float64)[pos >= 0]
        # each wait, the queue it drains and the point it drains to
        # a meta (tensor-parallel) backend's wait is the waits it makes on its devices: counted there
        self.is_wait = self.kind_in(WAIT_KINDS) & on_queue & ~self.meta_parent
        self.drains = self.bc.copy()
        self.point = self.t_begin.copy()
        self.event_source = np.full(len(c), -1, np.int64)  # event_wait: where its event was recorded
        self._events()
        # the accesses the judgement joins: only those of buffers that something writes (two reads
        # never conflict; the weights are read only), as (buffer code, bytes, mode, tensor)
        a_buf = _buffer_codes(t.buffers["buffer"].to_numpy(np.uint64), take(t.access_lifetimes()),
                              take(a["buffer"].to_numpy(np.uint64)))
        modes = pd.Index(a["mode"].cat.categories)
        a_write = take(a["mode"].cat.codes.to_numpy() == modes.get_indexer(["write"])[0])
        written = np.bincount(a_buf[a_write], minlength=int(a_buf.max(initial=0)) + 1) > 0
        of_written = written[a_buf]
        join = np.flatnonzero(of_written) if kept is None else kept[of_written]
        # ... grouped by call (a call's accesses keep their order), so that the accesses of a set of
        # calls are ranges: call c's are [a_start[c], a_start[c + 1]); a_order is the file order.
        # The loader's accesses come grouped so already (the order is then kept as it is)
        dense = np.cumsum(written) - 1  # the written buffers' codes, renumbered 0, 1, ...
        self.a_call, self.a_buf, self.a_write = a_call[join], dense[a_buf[of_written]], a_write[of_written]
        self.a_order = np.arange(len(join))
        if np.any(self.a_call[1:] < self.a_call[:-1]):
            by_call = stable_order(self.a_call)
            self.a_order, join = by_call, join[by_call]
            self.a_call, self.a_buf, self.a_write = self.a_call[by_call], self.a_buf[by_call], self.a_write[by_call]
        self.a_start = np.searchsorted(self.a_call, np.arange(len(c) + 1))
        # per call, the buffers it reads, writes and touches as bits (BUFFER_BITS)
        self.reads_of = self.writes_of = self.touches_of = None
        if len(self.a_buf) and self.a_buf.max() < min(BUFFER_BITS, 64):
            bit = np.left_shift(np.uint64(1), self.a_buf.astype(np.uint64))
            self.reads_of = _or_by_call(np.where(self.a_write, np.uint64(0), bit), self.a_start)
            self.writes_of = _or_by_call(np.where(self.a_write, bit, np.uint64(0)), self.a_start)
            self.touches_of = self.reads_of | self.writes_of
        self.a_off = a["offset"].to_numpy(np.uint64)[join]
        self.a_end = a["end"].to_numpy(np.uint64)[join]
        self.a_tcats = np.asarray(a["tensor"].cat.categories, dtype=object)
        self.a_tensor = a["tensor"].cat.codes.to_numpy()  # by access row: only the words read it
        self.a_row = join

    def kind_in(self, names) -> np.ndarray:
        return np.isin(self.kc, codes_of(self.kcats, names))

    def kind_name(self, i):
        return self.knames[self.kc[i]]

    def backend_name(self, codes):
        return self.bnames[codes]

    def _events(self):
        """An event_synchronize drains the queue of the event's latest record, up to that record;
        an event_wait makes its queue wait for that record's queue."""
        # an event never recorded: its synchronize returns at once and drains nothing
        self.point[self.kind_in(["event_synchronize"])] = np.iinfo(np.int64).min
        rec = np.flatnonzero(self.kind_in(["event_record"]))
        use = np.flatnonzero(self.kind_in(["event_synchronize", "event_wait"]))
        if len(rec) == 0 or len(use) == 0:
            return
        handles, r_event = np.unique(self.obj[rec], return_inverse=True)  # an event's handle is obj
        u_event = lookup(handles, self.obj[use])
        use, u_event = use[u_event >= 0], u_event[u_event >= 0]
        t0 = min(int(self.t_begin[rec].min()), int(self.t_begin[use].min(initial=0)))
        # the latest record of the same event that began at or before the use began
        j = last_before(r_event, self.t_begin[rec] - t0, u_event, self.t_begin[use] - t0 + 1)
        use, rec = use[j >= 0], rec[j[j >= 0]]
        src = self.bc[rec]
        sync = self.kind_in(["event_synchronize"])[use]
        self.drains[use[sync]] = src[sync]
        self.point[use[sync]] = self.t_begin[rec[sync]]
        self.event_source[use[~sync]] = src[~sync]

    def waits_on(self, q: int) -> pd.DataFrame:
        w = np.flatnonzero(self.is_wait & (self.drains == q))
        if len(w) == 0:
            return pd.DataFrame()
        w = w[np.argsort(self.t_begin[w], kind="stable")]
        # the work each wait drains: enqueued on q (or copied into q) up to its point and after the
        # furthest point of the waits before it (an event_synchronize's point can lie far back)
        reach = np.maximum.accumulate(self.point[w])
        work = np.flatnonzero(self.queued & ((self.runs_on == q) | (self.peer & (self.bc == q))))
        seg = np.searchsorted(reach, self.t_begin[work], side="left")
        inside = seg < len(w)
        work, seg = work[inside], seg[inside]
        pending = ~(self.dev_end[work] <= self.t_begin[w][seg])  # NaN (no device time): pending
        other = np.where(self.runs_on[work] != q, self.runs_on[work],
                         np.where(self.event_source[work] != q, self.event_source[work], -1))
        wk = pd.DataFrame({"seg": seg, "call": work})
        last, n_pending = _last_and_pending(seg, work, self.t_begin[work], pending, len(w))
        via = self._via(seg, other)
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
        needed, conflict = self._conflicts(work, seg, later_seg, len(w))
        # a copy into host memory: the program reads what it wrote after the wait, with plain loads
        # the trace cannot see (the program's own waits only: inside a graph the scheduler waits for
        # its own reasons)
        own = pd.Series(self.graph[w]).isna().to_numpy()
        calls = wk["call"].to_numpy()
        back = wk[np.isin(self.kc[calls], codes_of(self.kcats, READ_BACK_KINDS)) & own[wk["seg"].to_numpy()]]
        back = back.drop_duplicates("seg")
        back = back[~needed[back["seg"].to_numpy()]]
        for sg, i in zip(back["seg"].tolist(), back["call"].tolist()):  # a few: the program's own waits
            needed[sg] = True
            graph = f" (graph {self.g[i]})" if self.g[i] >= 0 else ""
            conflict[sg] = (f"the program reads on the host what {self.backend_name(self.runs_on[i])} "
                            f"{self.kind_name(i)}{graph} wrote there")
        via_of = np.full(len(w), None, dtype=object)
        via_of[via.index.to_numpy(np.int64)] = via.to_numpy(object)
        return self._rows(w, last, n_pending, via_of, needed, conflict, self.backend_name(q))

    def _via(self, seg: np.ndarray, other: np.ndarray) -> pd.Series:
        """Per segment: the other queues its work came through, by name in code order, joined. As a
        bit set per segment: the few distinct sets are named once."""
        has = other >= 0
        if not has.any():
            return pd.Series(dtype=object)
        if other.max() >= 64:  # more backends than bits: name each segment's set the slow way
            p = pd.DataFrame({"seg": seg[has], "other": other[has]}).drop_duplicates().sort_values(["seg", "other"])
            return p.assign(name=self.backend_name(p["other"].to_numpy())).groupby("seg")["name"].agg(", ".join)
        bits = np.zeros(int(seg.max()) + 1, np.uint64)
        np.bitwise_or.at(bits, seg[has], np.left_shift(np.uint64(1), other[has].astype(np.uint64)))
        segs = np.flatnonzero(bits)
        sets, inverse = np.unique(bits[segs], return_inverse=True)
        names = [", ".join(self.backend_name(np.flatnonzero([(int(s) >> b) & 1 for b in range(64)])))
                 for s in sets.tolist()]
        return pd.Series(np.asarray(names, dtype=object)[inverse], index=segs)

    def _conflicts(self, work: np.ndarray, seg: np.ndarray, later_seg: np.ndarray, n: int):
        """Per segment (n of them): whether an access of its drained work and one of the later calls
        overlap in bytes, one writing; and the first such pair in words. `work`: the drained calls,
        in call order, and `seg` the segment of each."""
        needed, conflict = np.zeros(n, bool), np.full(n, None, dtype=object)
        later = np.flatnonzero(later_seg >= 0)
        reads_of, writes_of, touches_of = self.reads_of, self.writes_of, self.touches_of
        if reads_of is not None and writes_of is not None and touches_of is not None:  # (set together)
            # By call first, the buffers as bits: a call none of whose accesses can meet one of the
            # other side's in its segment (a write meets any access, a read a write) is left out
            # before its accesses are listed.
            ls = later_seg[later]  # per segment: the buffers its drained work and its later calls write, touch
            d_writes, d_touches = _or_by(seg, writes_of[work], n), _or_by(seg, touches_of[work], n)
            l_writes, l_touches = _or_by(ls, writes_of[later], n), _or_by(ls, touches_of[later], n)
            meets_d = (writes_of[work] & l_touches[seg]) | (reads_of[work] & l_writes[seg])
            meets_l = (writes_of[later] & d_touches[ls]) | (reads_of[later] & d_writes[ls])
            work, seg, later = work[meets_d != 0], seg[meets_d != 0], later[meets_l != 0]
        d, d_seg = self._accesses_of(work, seg)
        la, l_seg = self._accesses_of(later, later_seg[later])
        if len(d) == 0 or len(la) == 0:
            return needed, conflict
        # A pair conflicts only if one of the two writes: a drained write against every later access
        # of its key (segment, buffer), a drained read against the later writes. Later accesses that
        # can meet neither are left out before the join.
        n_buf = int(self.a_buf.max()) + 1
        n_keys = n * n_buf
        key_d = d_seg * n_buf + self.a_buf[d]  # dense codes
        key_l = l_seg * n_buf + self.a_buf[la]
        dw, lw = self.a_write[d], self.a_write[la]
        meets = np.zeros(2 * n_keys, bool)  # by key * 2 + (a later write)
        meets[key_d[dw] * 2] = True         # a later read meets a drained write
        meets[key_d * 2 + 1] = True         # a later write meets any drained access
        keep = np.flatnonzero(meets[key_l * 2 + lw])
        la, key_l, lw = la[keep], key_l[keep], lw[keep]
        by_key = stable_order(key_l)
        writes = by_key[lw[by_key]]  # the later writes, still in key order
        partners = {True: _KeyGroups(key_l, by_key, n_keys), False: _KeyGroups(key_l, writes, n_keys)}
        # The drained accesses in rounds of growing rank within their segment (1, 2, 4, ...): a
        # segment's first pair in file order lies among its first drained accesses, so a segment
        # that conflicts leaves after the round that finds it, and only the segments that order
        # nothing are joined in full. This holds when the drained accesses come by segment, each
        # segment's in file order (as in every trace seen); otherwise one round holds them all.
        order = self.a_order[d]
        same = d_seg[1:] == d_seg[:-1]
        if np.all(d_seg[1:] >= d_seg[:-1]) and np.all(order[1:][same] > order[:-1][same]):
            rank = np.arange(len(d)) - np.searchsorted(d_seg, np.arange(n))[d_seg]
        else:
            rank = np.zeros(len(d), np.int64)
        by_rank = stable_order(rank)  # each round a slice of it
        rank_sorted = rank[by_rank]
        open_seg = np.ones(n, bool)
        first_seg, first_d, first_l = [], [], []
        done, upto = 0, 1  # the drained accesses joined so far (a prefix of by_rank); this round's ranks end
        while done < len(d) and open_seg.any():
            end = int(np.searchsorted(rank_sorted, upto, side="left"))
            rows = by_rank[done:end]
            rows = rows[open_seg[d_seg[rows]]]
            done, upto = end, 2 * upto + 1
            hit_d, hit_l, hit_seg = [], [], []
            for write in (True, False):
                i, j = partners[write].pairs(rows[dw[rows] == write], key_d)
                dd, ll = d[i], la[j]
                cd, cl = self.a_call[dd], self.a_call[ll]
                same_queue = self.queued[cl] & (self.runs_on[cl] == self.runs_on[cd])  # a peer copy's own queue
                hit = (self.a_off[dd] < self.a_end[ll]) & (self.a_off[ll] < self.a_end[dd]) & ~same_queue
                hit_d.append(dd[hit])
                hit_l.append(ll[hit])
                hit_seg.append(d_seg[i[hit]])
            dd, ll, sg = np.concatenate(hit_d), np.concatenate(hit_l), np.concatenate(hit_seg)
            # each segment's first pair in file order: its first drained access, then the first later one
            first = np.lexsort((self.a_order[ll], self.a_order[dd], sg))
            sg, at = np.unique(sg[first], return_index=True)
            needed[sg] = True
            open_seg[sg] = False
            first_seg.append(sg)
            first_d.append(dd[first[at]])
            first_l.append(ll[first[at]])
        if needed.any():
            dd, ll = np.concatenate(first_d), np.concatenate(first_l)
            conflict[np.concatenate(first_seg)] = join_text(self._access(dd), " before ", self._access(ll))
        return needed, conflict

    def _accesses_of(self, calls: np.ndarray, value: np.ndarray):
        """The (joined) accesses of `calls` (in call order), and for each the value of its call."""
        start = self.a_start[calls]
        count = self.a_start[calls + 1] - start
        return expand_ranges(start, count), np.repeat(value, count)

    def _access(self, a: np.ndarray) -> np.ndarray:
        """'VDEV0 split 3 (graph 2) reads h' for each access in `a`, in whole-array string operations
        (one per needed wait: there can be thousands)."""
        ci = self.a_call[a]
        kind, split_code = self.kc[ci], self.kcats.get_indexer(["graph_compute"])[0]
        what = choose_text((kind == split_code) & (split_code >= 0), arrow_text("split ", self.sp[ci]),
                           take_text(self.knames, kind))
        who = take_text([*self.bnames[:-1], "the host"], self.runs_on[ci])  # -1: no backend
        graph = choose_text(self.g[ci] >= 0, arrow_text(" (graph ", self.g[ci], ")"), "")
        mode = choose_text(self.a_write[a], " writes ", " reads ")
        tensor = take_text([*self.a_tcats, "?"], self.a_tensor[self.a_row[a]])  # -1: no name
        return arrow_text(who, " ", what, graph, mode, tensor)

    def _rows(self, i: np.ndarray, last: np.ndarray, pending: np.ndarray, via: np.ndarray, needed: np.ndarray,
              conflict: np.ndarray, q) -> pd.DataFrame:
        """The stalls frame's rows of the waits `i` (calls), each with the call it waited for last
        (-1: none), its pending count, via, needed and conflict."""
        has = last >= 0
        li = np.maximum(last, 0)
        end = self.dev_end[li]
        return _frame({
            "call_id": self.ids[i], "kind": self.kind_name(i), "thread": self.thread[i], "t_begin": self.t_begin[i],
            "t_end": self.t_end[i], "blocked_ns": self.t_end[i] - self.t_begin[i], "backend": np.full(len(i), q, object),
            "graph": self.graph[i], "split": self.split[i],
            "waited_call_id": _masked(self.ids[li], has, "UInt64"),
            "waited_kind": np.where(has, self.kind_name(li), None),
            "waited_graph": _masked(self.graph[li], has, "Int64"),
            "waited_split": _masked(self.split[li], has, "Int64"),
            "waited_end": _masked(np.nan_to_num(end).astype(np.int64), has & ~np.isnan(end), "Int64"),
            "via": via, "pending": pending, "needed": needed, "avoidable": ~needed, "conflict": conflict,
        })

    def sync_copies(self) -> pd.DataFrame:
        i = np.flatnonzero(self.kind_in(SYNC_COPY_KINDS) & ~self.meta_parent)
        n = len(i)
        none = np.full(n, None, object)
        return _frame({
            "call_id": self.ids[i], "kind": self.kind_name(i), "thread": self.thread[i], "t_begin": self.t_begin[i],
            "t_end": self.t_end[i], "blocked_ns": self.t_end[i] - self.t_begin[i], "backend": self.backend_name(self.bc[i]),
            "graph": self.graph[i], "split": self.split[i],
            "waited_call_id": pd.array([pd.NA] * n, dtype="UInt64"), "waited_kind": none,
            "waited_graph": pd.array([pd.NA] * n, dtype="Int64"), "waited_split": pd.array([pd.NA] * n, dtype="Int64"),
            "waited_end": pd.array([pd.NA] * n, dtype="Int64"), "via": none, "pending": np.zeros(n, np.int64),
            "needed": pd.array([pd.NA] * n, dtype="boolean"), "avoidable": np.zeros(n, bool), "conflict": none,
        }) if n else pd.DataFrame()


def _buffer_codes(pointers: np.ndarray, lifetime: np.ndarray, buffers: np.ndarray) -> np.ndarray:
    """A code per access's buffer (the join's key): its place among the pointers the trace
    registered (`pointers`: of each buffer lifetime), through the lifetime the load matched it to;
    the others (a pointer never registered, host memory in no known buffer) after them."""
    known, of_lifetime = np.unique(pointers, return_inverse=True)
    code = np.append(of_lifetime.reshape(-1), -1)[lifetime]  # lifetime -1: code -1
    miss = np.flatnonzero(code < 0)
    if len(miss):
        code[miss] = len(known) + pd.factorize(buffers[miss])[0]
    return code


def _or_by_call(bits: np.ndarray, a_start: np.ndarray) -> np.ndarray:
    """Per call, the bitwise or of its accesses' `bits` (call c's accesses: [a_start[c], a_start[c + 1]))."""
    out = np.zeros(len(a_start) - 1, np.uint64)
    has = np.flatnonzero(a_start[1:] > a_start[:-1])  # the calls between two of these have no accesses
    if len(has):
        out[has] = np.bitwise_or.reduceat(bits, a_start[has])
    return out


def _or_by(group: np.ndarray, bits: np.ndarray, n: int) -> np.ndarray:
    """Per group (n of them), the bitwise or of its members' `bits`."""
    out = np.zeros(n, np.uint64)
    np.bitwise_or.at(out, group, bits)
    return out


def _last_and_pending(seg: np.ndarray, calls: np.ndarray, t: np.ndarray, pending: np.ndarray, n: int):
    """Per segment (n of them): the call of its work that began last (the first of equal starts;
    -1: no work), and how many of its calls were pending. The work is in time order, so segments
    come in runs and a run's latest start is at its end."""
    last = np.full(n, -1, np.int64)
    n_pending = np.bincount(seg, weights=pending, minlength=n).astype(np.int64)
    if len(seg):
        i = np.arange(len(seg))
        head = np.ones(len(seg), bool)
        head[1:] = (seg[1:] != seg[:-1]) | (t[1:] != t[:-1])
        first_equal = np.maximum.accumulate(np.where(head, i, 0))
        ends = np.append(np.flatnonzero(seg[1:] != seg[:-1]), len(seg) - 1)
        last[seg[ends]] = calls[first_equal[ends]]
    return last, n_pending


class _KeyGroups:
    """Positions of `keys` (dense codes below n_keys) grouped by key: `order` lists the positions
    to join (all of them, or some) in key order."""

    def __init__(self, keys: np.ndarray, order: np.ndarray, n_keys: int):
        self.order = order
        self.count = np.bincount(keys[order], minlength=n_keys)
        self.first = np.cumsum(self.count) - self.count

    def pairs(self, rows_a: np.ndarray, key_a: np.ndarray):
        """Inner join: the pairs (a row of `rows_a`, a position of the grouped keys) whose keys are
        equal, key_a[row] being a row's key."""
        k = key_a[rows_a]
        cnt = self.count[k]
        return np.repeat(rows_a, cnt), self.order[expand_ranges(self.first[k], cnt)]


def _frame(columns: dict) -> pd.DataFrame:
    """A part of the stalls frame with its columns' dtypes (STALL_COLUMNS) from the start: text
    columns stay object arrays (pandas would otherwise infer its string dtype, then convert back)."""
    return pd.DataFrame({c: pd.Series(np.asarray(v, dtype=object), dtype=object, copy=False)
                         if STALL_COLUMNS[c] == "object" else v for c, v in columns.items()}, copy=False)


def _masked(values, keep: np.ndarray, dtype: str):
    """A nullable array of `values`, missing where not `keep`."""
    out = pd.array(values, dtype=dtype)
    out[~keep] = pd.NA
    return out


def totals(s: pd.DataFrame, breakdown: bool = True) -> dict:
    """Host-blocked time in all, in waits, in synchronous copies, avoidable; per graph and per
    boundary (a split of a graph, or the program's own waits after a graph; ns; DataFrames), unless
    `breakdown` is False."""
    blocked = s["blocked_ns"].to_numpy(np.int64)
    avoidable = s["avoidable"].to_numpy(bool)
    waits = s["kind"].isin(WAIT_KINDS).to_numpy()
    out = {
        "blocked_ns": int(blocked.sum()),
        "wait_blocked_ns": int(blocked[waits].sum()),
        "copy_blocked_ns": int(blocked[~waits].sum()),
        "avoidable_blocked_ns": int(blocked[avoidable].sum()),
        "calls": int(len(s)), "avoidable_calls": int(avoidable.sum()),
    }
    if breakdown:
        out.update(per_graph=_per(s["graph"], blocked, avoidable), per_boundary=_per(s["boundary"], blocked, avoidable))
    return out


def _per(key: pd.Series, blocked: np.ndarray, avoidable: np.ndarray) -> pd.DataFrame:
    """Blocked time, avoidable blocked time and calls per value of `key` (in its sorted order, a
    missing value last)."""
    codes, values = pd.factorize(key, sort=True, use_na_sentinel=False)
    sums = np.zeros((3, len(values)), np.int64)
    for row, weights in enumerate((blocked, np.where(avoidable, blocked, 0), np.ones(len(codes), np.int64))):
        np.add.at(sums[row], codes, weights)
    return pd.DataFrame({key.name: values.infer_objects(), "blocked_ns": sums[0], "avoidable_blocked_ns": sums[1],
                         "calls": sums[2]})


def words(r: dict) -> str:
    """One stall in a sentence."""
    if r["kind"] in SYNC_COPY_KINDS:
        on = f" on {r['backend']}" if isinstance(r["backend"], str) else " into or out of host memory"
        return f"{r['kind']}{on}: a synchronous copy"
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
