"""Race analysis: conflicting byte accesses that nothing orders (see docs/races.md).

The ordering model, in short:

* every host thread is one program order (calls by `t_begin`);
* every async backend (`has_async` or `has_events`) is one FIFO queue: the work of
  graph_compute, cpy_tensor_async (on the destination from host memory, on the source from
  another async backend, with the destination waiting for it), the async set/get calls,
  event_record and event_wait is a queue position, and runs after the host state at its enqueue;
* synchronize(B), event_synchronize(e), event_wait(C, e), the implicit source dependency of
  cpy_tensor_async and the clear of a buffer of a backend whose clear waits for its queue
  (clear_waits_for_queue) add the remaining happens-before edges; everything else (CPU, RPC up to b10531,
  buffer calls) is a host operation that completes before it returns, except the buffer calls on
  an asynchronous RPC client's buffers, which its one sender queues with its work.

Each operation gets a vector clock (one component per thread and per queue). The clocks are
computed with whole-array passes: apply every cross-component edge, then a running maximum
along every component; a shortest happens-before path enters each component at most once, so
this reaches the fixed point in at most K rounds (K = components).

Conflicting pairs are found per buffer lifetime without looking at all pairs: for an access B
and another component c, the only accesses of c that B can race with are those c ran after
B's clock[c] and before B in the topological order, a contiguous window of c's accesses to
that lifetime. In a well synchronised trace the windows are short; on one thread with only
synchronous backends there are none.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .arrays import (bit_width, cat_codes, expand_ranges, int_values, ints_or_none, last_before, lookup, nullable,
                     objects_at, rank_in_group, take_int)
from .frames import backend_labels
from .kinds import ENQUEUE_KINDS
from .race_report import CLASSES, RaceReport, findings_frame, format_report, missing_column, verdict_words
from .race_timing import (BASES, LATENT, LISTING_ORDER, MANIFESTED, VERDICTS, OperationTimes, finding_verdict,
                          operation_times, pair_verdicts, timing_words, untimed_reasons)
from .schema import FINDING_SIDE

# RaceReport, format_report and verdict_words are read from here by the CLI and the views.
__all__ = ["races", "RaceReport", "format_report", "verdict_words", "MODES", "CHUNK", "MAX_CANDIDATES",
           "CLEAR_WAITS_FOR_QUEUE", "clear_waits_for_queue"]

MODES = ["read", "write"]
# The buffer calls that a backend of one FIFO queues with its work (rule 9 of docs/races.md).
FIFO_BUFFER_KINDS = ["buf_set_tensor", "buf_get_tensor", "buf_set_tensor_2d", "buf_get_tensor_2d", "buf_cpy_tensor",
                     "buf_memset_tensor", "buf_clear"]

# What ggml_backend_buffer_clear on a buffer of each backend family waits for, from each backend's
# source (b10524, b10531 and b11434; docs/races.md, rule 6, gives the lines): True where the clear
# runs after all the work queued on the backend before it (rule 6's edge), False where nothing of
# the backend's queue orders it. Keyed by the start of the backend's name (see clear_waits_for_queue).
CLEAR_WAITS_FOR_QUEUE: dict[str, bool] = {
    "CPU": False,     # a memset on the host, and no queue to wait for
    "CUDA": False,    # cudaMemsetAsync on cudaStreamPerThread, then a synchronize of that stream only:
                      # ggml's own streams are non-blocking, so nothing orders the memset after them
    "ROCm": False,    # the CUDA code built for HIP
    "MUSA": False,    # the CUDA code built for MUSA
    "Vulkan": False,  # UMA: a memset on the host; else a fill submitted to the device's transfer queue
                      # (a queue of its own unless the device has one queue), with no barrier or
                      # semaphore after the compute queue; the host waits for that submission's fence
    "MTL": False,     # Metal: shared buffers, a memset on the host; private buffers, a blit on the
                      # device's queue, waited for. The trace does not tell the two apart: not waiting
    "RPC": False,     # b11434's asynchronous client sends the clear through its one sender, behind its work
                      # (a queue operation: FIFO_BUFFER_KINDS; the server runs it after that work), and
                      # returns once it is sent, not once that work ran; up to b10531 the client is
                      # synchronous (no queue)
    "VDEV": True,     # ggml-trace's virtual devices (virtual_device.cpp buf_clear): every stream of the
                      # device drained first, then a memset on the host
}


def clear_waits_for_queue(backends: pd.DataFrame) -> np.ndarray:
    """For each row of a trace's `backends` frame, whether clearing a buffer of that backend waits for
    the work queued on it (CLEAR_WAITS_FOR_QUEUE). The trace records no flag for this, and not the
    backend's registry either: its name ("CUDA0", "Vulkan0", "RPC0[host:port]", "VDEV0") is the only
    thing in it that tells the families apart, so the name is read here, in this one place. A backend
    of no listed family waits for nothing: an edge its device may not give would hide a race."""
    names = backends["name"].astype(object).tolist() if "name" in backends else []
    return np.array([isinstance(n, str) and any(n.startswith(family) and waits
                                                for family, waits in CLEAR_WAITS_FOR_QUEUE.items())
                     for n in names], dtype=bool)


# Candidate (window) entries examined per chunk, and in all for one window pass before the
# windows are cut to their most recent entries (a safety valve for traces in which a queue is
# never synchronised: then every later access races with all its history).
CHUNK = 1 << 22
MAX_CANDIDATES = 1 << 25


# -- the analysis -----------------------------------------------------------------------------

def races(trace, own_from_ns: int | None = None) -> RaceReport:
    """Find races in a loaded trace (analysis.load). See docs/races.md.

    own_from_ns: the trace is a window of a larger one (analysis/windows.py) whose part before
    this time (ns, as in its frames) is context, there only to order what follows: a pair whose
    later operation began before it belongs to the window before."""
    return _Analysis(trace, own_from_ns).run()


class _Analysis:
    def __init__(self, trace, own_from_ns: int | None = None):
        self.trace = trace
        self.own_from_ns = own_from_ns

    # ---------------------------------------------------------------------------------------
    def run(self) -> RaceReport:
        self.operations_setup()
        self.clocks()
        n_acc = self.accesses_setup()
        pa, pb = self.candidate_pairs()
        if self.own_from_ns is not None:
            own = self.c_t_begin[self.a_ord[pb]] >= self.own_from_ns
            pa, pb = pa[own], pb[own]
        pairs = self.pairs_frame(pa, pb)
        findings = self.findings(pairs)
        comps = [f"thread {t}" for t in self.thread_ids] + list(self.queue_names)
        return RaceReport(findings, self.public_pairs(pairs), int(self.n), n_acc,
                          self.truncated, comps, self.latent_margin_ns)

    def public_pairs(self, p: pd.DataFrame) -> pd.DataFrame:
        """The racing access pairs, described by call ids and access rows."""
        pa, pb = p["acc_a"].to_numpy(np.int64), p["acc_b"].to_numpy(np.int64)
        tcat = pd.CategoricalDtype(list(self.tensor_names))
        out = {
            "class": pd.Categorical.from_codes(p["cls"].to_numpy(np.int64),
                                               categories=CLASSES),
            "manifested": p["manifested"].to_numpy(bool),
            "inverted": p["inverted"].to_numpy(bool),
            # only a latent pair has a margin
            "margin_ns": nullable(p["margin_ns"].to_numpy(np.int64), p["verdict"].to_numpy() != 1),
            "verdict": pd.Categorical.from_codes(p["verdict"].to_numpy(np.int64), categories=VERDICTS),
            "basis": pd.Categorical.from_codes(p["basis"].to_numpy(np.int64), categories=BASES),
            "buffer": self.a_buffer[pa],
            "start": np.maximum(self.a_off[pa], self.a_off[pb]),
            "end": np.minimum(self.a_end[pa], self.a_end[pb]),
        }
        for s, acc, o in (("a", pa, p["ord_a"].to_numpy(np.int64)),
                          ("b", pb, p["ord_b"].to_numpy(np.int64))):
            out[f"{s}_call_id"] = self.c_id[o]
            out[f"{s}_access"] = self.a_row[acc]  # row in trace.accesses
            out[f"{s}_graph"] = pd.array(np.where(self.c_graph[o] >= 0, self.c_graph[o], 0),
                                         dtype="Int64")
            out[f"{s}_graph"][self.c_graph[o] < 0] = pd.NA
            out[f"{s}_tensor"] = pd.Categorical.from_codes(self.a_tensor[acc], dtype=tcat)
            out[f"{s}_mode"] = pd.Categorical.from_codes(self.a_write[acc].astype(np.int64),
                                                         categories=MODES)
        return pd.DataFrame(out)

    # ---------------------------------------------------------------------------------------
    def operations_setup(self) -> None:
        """Calls -> host events (one per call) and queue events (one per enqueued call)."""
        t = self.trace
        calls = t.calls
        kinds = list(calls["kind"].cat.categories)
        self.kind_names = np.array(kinds, dtype=object)
        kcode_all = cat_codes(calls["kind"])
        dev = kinds.index("device_exec") if "device_exec" in kinds else -2
        # A meta backend's call is only a range over the calls it made on its simple backends.
        parent = (calls["meta_parent"].to_numpy(bool) if "meta_parent" in calls
                  else np.zeros(len(calls), bool))
        keep = np.flatnonzero((kcode_all != dev) & ~parent)
        self.c_role = (cat_codes(calls["role"])[keep] if "role" in calls
                       else np.full(len(keep), -1, np.int64))
        self.role_names = np.array(list(calls["role"].cat.categories) if "role" in calls else [],
                                   dtype=object)
        c = calls.iloc[keep]
        self.n = n = len(keep)
        self.c_id = c["call_id"].to_numpy(np.uint64)
        self.c_kind = kcode_all[keep]
        self.c_thread = c["thread"].to_numpy(np.int64)
        self.c_t_begin = c["t_begin"].to_numpy(np.int64)
        self.c_t_end = c["t_end"].to_numpy(np.int64)
        self.c_backend = cat_codes(c["backend"])
        self.c_backend2 = cat_codes(c["backend2"])
        self.c_graph = int_values(c["graph"])
        self.c_split = int_values(c["split"])
        self.c_obj = c["obj"].to_numpy(np.uint64)
        self.c_nodes = c["arg"].to_numpy(np.uint64).astype(np.int64)  # a split's node count
        self.backend_names = np.array(list(calls["backend"].cat.categories), dtype=object)

        # Async backends, and those whose buffer clear waits for their queue, by name (the frames
        # identify backends by name).
        cats = pd.Index(calls["backend"].cat.categories)
        is_async = np.zeros(len(cats) + 1, bool)  # last slot: code -1 (no backend)
        clear_waits = np.zeros(len(cats) + 1, bool)
        be = t.backends
        flags = (be["has_async"].to_numpy(bool) | be["has_events"].to_numpy(bool))
        for label, f, w in zip(backend_labels(be), flags.tolist(), clear_waits_for_queue(be).tolist()):
            i = cats.get_indexer([label])[0]
            if i >= 0:
                is_async[i] |= f
                clear_waits[i] |= w
        self.backend_async = is_async

        def kind_is(names):
            ids = [kinds.index(k) for k in names if k in kinds]
            return np.isin(self.c_kind, ids)

        # Accesses per call (a copy without any access was declined: nothing was queued).
        ordinal = np.full(len(calls) + 1, -1, np.int64)  # of each call row; the extra slot: row -1
        ordinal[keep] = np.arange(n)
        self.a_ord_all = ordinal[t.access_calls()]
        has_acc = np.zeros(n + 1, bool)
        has_acc[self.a_ord_all] = True  # -1 lands on the extra slot
        has_acc = has_acc[:n]
        on_async = is_async[self.c_backend]
        declined = kind_is(["cpy_tensor_async", "comm_allreduce"]) & ~has_acc
        # (9) One FIFO for all of a backend's memory: an asynchronous RPC client (b11434) sends every
        # command on a server's memory, its buffers' set/get/memset/copy as well as its graphs, through
        # one sender, and the server runs them in order: there a buffer call is a queue operation too.
        fifo = np.zeros(len(cats) + 1, bool)
        fifo[:-1] = is_async[:-1] & cats.astype(str).str.startswith("RPC")
        self.c_fifo_buffer = kind_is(FIFO_BUFFER_KINDS) & fifo[self.c_backend]
        enq = (kind_is(ENQUEUE_KINDS) & on_async & ~declined) | self.c_fifo_buffer
        self.c_enq = enq

        # Components: host threads, then async backend queues.
        self.thread_ids, tcomp = np.unique(self.c_thread, return_inverse=True)
        nt = len(self.thread_ids)
        eo = np.flatnonzero(enq)  # enqueued calls, in ordinal order
        # (7) A copy from another async backend runs on the *source* queue (CUDA: the peer copy is
        # issued on the source stream, and the destination stream waits on an event after it).
        # A copy from a synchronous backend (host memory) runs on the destination queue.
        queue_backend = self.c_backend.copy()
        cross = kind_is(["cpy_tensor_async"]) & enq & (self.c_backend2 >= 0)
        cross &= is_async[np.maximum(self.c_backend2, 0)] & (self.c_backend2 != self.c_backend)
        queue_backend[cross] = self.c_backend2[cross]
        self.c_qbackend = queue_backend  # whose queue runs each call (a peer copy: the source's)
        qb, qcomp = np.unique(queue_backend[eo], return_inverse=True)
        self.queue_names = [str(self.backend_names[b]) for b in qb.tolist()]
        self.queue_of_backend = np.full(len(cats) + 1, -1, np.int64)
        self.queue_of_backend[qb] = nt + np.arange(len(qb))
        self.K = nt + len(qb)
        m = len(eo)

        # Events: host event o for call o; queue event n + j for the j-th enqueued call.
        comp = np.r_[tcomp, nt + qcomp].astype(np.int64)
        ordinal = np.r_[np.arange(n), eo].astype(np.int64)
        topo = np.r_[2 * np.arange(n), 2 * eo + 1].astype(np.int64)
        seq = rank_in_group(comp)  # ordinals are increasing within each part
        # Store events in chain order (component, then topological order) so that a running
        # maximum down the rows is the program/queue order propagation.
        order = np.lexsort((topo, comp))
        inv = np.empty(n + m, np.int64)
        inv[order] = np.arange(n + m)
        self.ev_comp, self.ev_seq, self.ev_topo = comp[order], seq[order], topo[order]
        self.ev_ord = ordinal[order]
        self.host_ev = inv[:n]
        queue_ev = np.full(n, -1, np.int64)
        queue_ev[eo] = inv[n:]
        self.queue_ev = queue_ev
        self.work_ev = np.where(enq, queue_ev, self.host_ev)  # where a call's accesses happen

        # -- happens-before edges (src event -> dst event), one source per dst per kind ----
        edges = [(self.host_ev[eo], queue_ev[eo])]  # (3) enqueue
        q_ev = inv[n:]
        q_comp = comp[n:]
        q_ord = eo

        by_queue = np.lexsort((q_ord, q_comp))
        q_key = q_comp[by_queue] * (n + 1) + q_ord[by_queue]

        def first_queue_op_after(qc: np.ndarray, after: np.ndarray) -> np.ndarray:
            """Queue event of component qc enqueued first after ordinal `after` (-1: none)."""
            pos = np.searchsorted(q_key, np.maximum(qc, 0) * (n + 1) + after, side="right")
            ok = (qc >= 0) & (pos < len(q_key))
            pos = np.minimum(pos, max(len(q_key) - 1, 0))
            ok &= (q_comp[by_queue][pos] == qc) if len(q_key) else False
            return np.where(ok, q_ev[by_queue][pos] if len(q_key) else -1, -1)

        def last_queue_op(qc: np.ndarray, before: np.ndarray) -> np.ndarray:
            """Queue event of component qc enqueued last before ordinal `before` (-1: none)."""
            j = last_before(q_comp, q_ord, np.maximum(qc, 0), before)
            return take_int(q_ev, np.where(qc >= 0, j, -1))

        # (6) synchronize(B) on an async backend: the host after B's queue so far. Clearing a
        # whole buffer of B does the same only on the backends whose clear waits for their queue
        # (clear_waits_for_queue: the virtual devices; CUDA's clear synchronizes its own stream only).
        s = np.flatnonzero(kind_is(["synchronize"]) | (kind_is(["buf_clear"]) & clear_waits[self.c_backend]))
        src = last_queue_op(self.queue_of_backend[self.c_backend[s]], s)
        edges.append((src, self.host_ev[s]))
        # (7) ... and the destination queue's later work waits for that copy.
        cp = np.flatnonzero(cross)
        edges.append((queue_ev[cp], first_queue_op_after(self.queue_of_backend[self.c_backend[cp]], cp)))
        # (4), (5) events: the latest record of the handle before the wait / synchronize.
        rec = np.flatnonzero(kind_is(["event_record"]))
        handles, h_rec = np.unique(self.c_obj[rec], return_inverse=True)

        def last_record(calls_idx: np.ndarray) -> np.ndarray:
            h = lookup(handles, self.c_obj[calls_idx])
            j = last_before(h_rec, rec, np.maximum(h, 0), calls_idx)
            return take_int(self.work_ev, take_int(rec, np.where(h >= 0, j, -1)))

        w = np.flatnonzero(kind_is(["event_wait"]))
        edges.append((last_record(w), self.work_ev[w]))  # a queue position on an async C
        es = np.flatnonzero(kind_is(["event_synchronize"]))
        edges.append((last_record(es), self.host_ev[es]))
        # (8) A backend's own allreduce is a barrier (NCCL, CUDA's internal pipeline: each device's
        # part waits for every peer's arrival): each device's part runs after the work enqueued
        # before the call on every other device of the call (same arg: the call's sequence number).
        cm = np.flatnonzero(kind_is(["comm_allreduce"]) & enq)
        seq = c["arg"].to_numpy(np.uint64)[cm]
        order = np.argsort(seq, kind="stable")
        lo = np.searchsorted(seq[order], seq[order], side="left")
        cnt = np.searchsorted(seq[order], seq[order], side="right") - lo
        for member, peer in _expand(lo, cnt):  # every (member, member of its call) pair
            a, b = cm[order[member]], cm[order[peer]]
            a, b = a[a != b], b[a != b]
            edges.append((last_queue_op(self.queue_of_backend[self.c_qbackend[a]], a), queue_ev[b]))
        self.edges = [(a[(a >= 0) & (b >= 0)], b[(a >= 0) & (b >= 0)]) for a, b in edges]

    # ---------------------------------------------------------------------------------------
    def clocks(self) -> None:
        """Vector clocks of all events: edges, then running maxima down each component."""
        E, K = len(self.ev_comp), self.K
        C = np.zeros((E, K), np.int64)
        C[np.arange(E), self.ev_comp] = self.ev_seq
        if E and K > 1:
            big = int(self.ev_seq.max()) + 1
            off = (self.ev_comp * big)[:, None]
            # A shortest happens-before path enters each component at most once, so K - 1
            # rounds reach the fixed point and one more sees no change.
            for _ in range(K + 1):
                before = C.copy()
                for src, dst in self.edges:
                    if len(src):
                        # .at: several edges may share a destination (copies a queue waits for)
                        np.maximum.at(C, dst, C[src])
                C += off
                np.maximum.accumulate(C, axis=0, out=C)
                C -= off
                if np.array_equal(before, C):
                    break
        self.C = C
        # frontier[e, c]: the last seq of component c topologically before event e. The
        # components with frontier > clock are the ones e may race with.
        unc = np.zeros((E, K), bool)
        for c in range(K):
            sel = np.flatnonzero(self.ev_comp == c)  # contiguous, in topological order
            front = np.searchsorted(self.ev_topo[sel], self.ev_topo, side="left")
            unc[:, c] = front > C[:, c]
        unc[np.arange(E), self.ev_comp] = False
        self.uncovered = unc

    # ---------------------------------------------------------------------------------------
    def accesses_setup(self) -> int:
        t = self.trace
        acc = t.access_columns()  # the accesses' own columns: none joined from their calls is read
        buffer = acc["buffer"].to_numpy(np.uint64)
        size = acc["size"].to_numpy(np.uint64)
        mode = cat_codes(acc["mode"])
        ok = (self.a_ord_all >= 0) & (buffer != 0) & (size > 0) & (mode >= 0)
        keep = np.flatnonzero(ok)
        self.a_row = keep
        self.a_ord = self.a_ord_all[keep]
        self.a_buffer = buffer[keep]
        self.a_off = acc["offset"].to_numpy(np.uint64)[keep]
        self.a_end = acc["end"].to_numpy(np.uint64)[keep]
        self.a_write = mode[keep] == 1
        self.a_tensor = cat_codes(acc["tensor"])[keep]
        self.tensor_names = np.array(list(acc["tensor"].cat.categories), dtype=object)
        self.a_node = cat_codes(acc["node"])[keep]
        self.node_names = np.array(list(acc["node"].cat.categories), dtype=object)
        # Buffer lifetime, as the load matched it (at the call's end); a pointer without any
        # buffer record is one lifetime of its own.
        lt = t.access_lifetimes()[keep].copy()
        miss = lt < 0
        if miss.any():
            _, u = np.unique(self.a_buffer[miss], return_inverse=True)
            lt[miss] = len(t.buffers) + u
        self.a_lt = lt.astype(np.int64)
        self.a_ev = self.work_ev[self.a_ord]
        # (9) ... but such a call's side in host memory is done when it returns: the sender copies
        # what it sends and waits for what it reads (only the server's memory is touched in queue order)
        fifo = np.flatnonzero(self.c_fifo_buffer[self.a_ord])
        if len(fifo):
            known = self.a_lt[fifo] < len(t.buffers)
            host = np.ones(len(fifo), bool)  # no buffer record: host memory
            host[known] = t.buffers["is_host"].to_numpy(bool)[self.a_lt[fifo][known]]
            on_host = fifo[host]
            self.a_ev[on_host] = self.host_ev[self.a_ord[on_host]]
        return len(keep)

    # ---------------------------------------------------------------------------------------
    def candidate_pairs(self):
        """(earlier access, later access) index pairs that conflict, overlap and are unordered."""
        self.truncated = 0
        na = len(self.a_ev)
        K = self.K
        empty = np.zeros(0, np.int64)
        if na == 0 or K < 2:
            return empty, empty
        comp = self.ev_comp[self.a_ev]
        seq = self.ev_seq[self.a_ev]
        topo = self.ev_topo[self.a_ev]
        g = self.a_lt * K + comp
        shift = bit_width(max(int(topo.max()), int(seq.max())) + 2)
        if bit_width(int(g.max()) + 1) + shift > 62:
            raise OverflowError("trace too large for the race analysis' packed keys")
        key = (g << shift) | topo  # (lifetime, component, topological position) packed: one sort key
        order = _sort_order(g, topo, key)
        # The structures searched: for a read, the writes; for a write, all accesses. Each is the
        # accesses in key order, with their keys holding the topological position (ktopo) or the
        # component's sequence number (kseq) in the low bits. The writes' are the same arrays cut
        # to the writes (the sort is stable), so everything is gathered once.
        ktopo = key[order]
        kseq = (ktopo >> shift << shift) | seq[order]
        is_w = self.a_write[order]
        structures = {False: (order[is_w], kseq[is_w], ktopo[is_w]), True: (order, kseq, ktopo)}
        # Windows: for each access b and component c, the accesses of c to the same lifetime
        # that come after b's clock[c] and before b (a read only conflicts with writes).
        plans = []  # (structure, b, lo, cnt)
        for c in range(K):
            qb = np.flatnonzero(self.uncovered[self.a_ev, c])
            if len(qb) == 0:
                continue
            for is_w in (False, True):
                order, kseq, ktopo = structures[is_w]
                b = qb[self.a_write[qb] == is_w]
                if len(b) == 0 or len(order) == 0:
                    continue
                gq = (self.a_lt[b] * K + c) << shift
                lo = np.searchsorted(kseq, gq | self.C[self.a_ev[b], c], side="right")
                hi = np.searchsorted(ktopo, gq | topo[b], side="left")
                nz = np.flatnonzero(hi > lo)
                if len(nz):
                    plans.append((order, b[nz], lo[nz], (hi - lo)[nz]))
        if not plans:
            return empty, empty
        cnt_all = np.concatenate([p[3] for p in plans])
        cap = None
        if int(cnt_all.sum()) > MAX_CANDIDATES:
            # Keep the most recent entries of the longest windows (see MAX_CANDIDATES).
            srt = np.sort(cnt_all)
            n = len(srt)
            fill = np.cumsum(srt) + srt * (n - 1 - np.arange(n))  # total if cap = srt[i]
            i = int(np.searchsorted(fill, MAX_CANDIDATES, side="right")) - 1
            cap = int(srt[i]) if i >= 0 else max(MAX_CANDIDATES // n, 1)
            self.truncated = int((cnt_all > cap).sum())
        out_a, out_b = [], []
        for order, b, lo, cnt in plans:
            if cap is not None:
                lo = np.where(cnt > cap, lo + cnt - cap, lo)
                cnt = np.minimum(cnt, cap)
            for qi, pos in _expand(lo, cnt):
                ai, bi = order[pos], b[qi]
                hit = (self.a_off[ai] < self.a_end[bi]) & (self.a_off[bi] < self.a_end[ai])
                out_a.append(ai[hit])
                out_b.append(bi[hit])
        return np.concatenate(out_a), np.concatenate(out_b)

    # ---------------------------------------------------------------------------------------
    def operation_times(self) -> OperationTimes:
        """When each operation ran and how finely that is known (race_timing.operation_times)."""
        return operation_times(getattr(self.trace, "device", None), self.c_id, self.c_kind, self.kind_names,
                               self.c_t_begin, self.c_t_end, self.c_enq, self.c_nodes)

    def pairs_frame(self, pa: np.ndarray, pb: np.ndarray) -> pd.DataFrame:
        times = self.times = self.operation_times()
        oa, ob = self.a_ord[pa], self.a_ord[pb]
        same = self.a_tensor[pa] == self.a_tensor[pb]
        both_w = self.a_write[pa] & self.a_write[pb]
        cls = np.where(~same, 0, np.where(both_w, 1, np.where(self.a_write[pa], 2, 3)))
        # a comes first in program order; what the times prove of each pair: race_timing
        v = pair_verdicts(times, oa, ob)
        graph = np.where(self.c_graph[ob] >= 0, self.c_graph[ob], self.c_graph[oa])
        cols = {"cls": cls, "acc_a": pa, "acc_b": pb, "ord_a": oa, "ord_b": ob,
                "manifested": v.verdict == MANIFESTED, "inverted": v.inverted,
                "verdict": v.verdict, "basis": v.basis, "margin_ns": v.margin_ns,
                "graph": graph, "t": np.minimum(times.begin[oa], times.begin[ob])}
        for s, o, p in (("a", oa, pa), ("b", ob, pb)):
            cols[f"{s}_kind"] = self.c_kind[o]
            cols[f"{s}_backend"] = self.c_backend[o]
            cols[f"{s}_split"] = self.c_split[o]
            cols[f"{s}_tensor"] = self.a_tensor[p]
            cols[f"{s}_mode"] = self.a_write[p].astype(np.int64)
        return pd.DataFrame(cols)

    # ---------------------------------------------------------------------------------------
    def findings(self, pairs: pd.DataFrame) -> pd.DataFrame:
        self.latent_margin_ns = pd.array([], dtype="Int64")
        if len(pairs) == 0:
            return findings_frame()
        key = ["cls"] + [f"{s}_{c}" for s in "ab"
                         for c in ("kind", "backend", "split", "tensor", "mode")]
        p = pairs[key + ["acc_a", "acc_b", "ord_a", "ord_b", "manifested", "inverted",
                         "verdict", "basis", "margin_ns", "graph", "t"]].copy()
        p["key"] = p.groupby(key, sort=False).ngroup()
        # One occurrence per (finding, pair of operations): its first pair of accesses.
        p = p.sort_values(["key", "t", "ord_a", "ord_b"], kind="stable")
        occ = p.drop_duplicates(["key", "ord_a", "ord_b"])
        g = occ.groupby("key", sort=True)
        # occurrences per verdict (columns: VERDICTS), and the finding's verdict from them
        nv, keys = len(VERDICTS), occ["key"].to_numpy(np.int64)  # keys: 0..findings-1 (ngroup)
        counts = np.bincount(keys * nv + occ["verdict"].to_numpy(np.int64),
                             minlength=(int(keys.max()) + 1) * nv).reshape(-1, nv)
        verdict = finding_verdict(counts)
        agg = pd.DataFrame({
            "n_occ": g.size(),
            "manifested": verdict == MANIFESTED,
            "inverted": g["inverted"].any(),
            "margin_ns": (occ["margin_ns"].astype("Int64").where(occ["verdict"] == LATENT)
                          .groupby(occ["key"]).min()),
            "verdict": verdict,
            "basis": g["basis"].max(),
        })
        for v, name in enumerate(VERDICTS):
            agg[f"n_{name}"] = counts[:, v]
        first = occ.drop_duplicates("key", keep="first").set_index("key")
        last = occ.drop_duplicates("key", keep="last").set_index("key")
        # The occurrence shown (sides, bytes, missing): the first of the finding's own verdict, so
        # that it shows the evidence of that verdict (a manifested pair for a manifested finding).
        own = occ["verdict"].to_numpy(np.int64) == agg["verdict"].reindex(occ["key"]).to_numpy(np.int64)
        shown = (occ.assign(_other=~own).sort_values("_other", kind="stable")
                 .drop_duplicates("key").set_index("key"))
        agg = agg.join(shown[["acc_a", "acc_b", "ord_a", "ord_b", "cls"]])
        agg["graph"] = first["graph"]
        agg["t"] = first["t"]
        agg["last_graph"] = last["graph"]
        agg["last_t"] = last["t"]
        # only a latent finding has a margin (the smallest latent one is kept: latent_margin_ns)
        agg["shown_margin"] = agg["margin_ns"].where(agg["verdict"] == LATENT)
        agg["sort_margin"] = agg["shown_margin"].fillna(-1)
        agg["sort_verdict"] = agg["verdict"].map(LISTING_ORDER).fillna(2)
        agg = agg.sort_values(["sort_verdict", "sort_margin", "t"], kind="stable")
        return self.describe(agg)

    def side_columns(self, acc: np.ndarray, o: np.ndarray) -> dict:
        """The columns of one side of the findings (FINDING_SIDE, and whether it ran on a
        queue), names and nullable integers as Python lists (None for missing): the words of
        `missing` are made from them."""
        t = self.times
        kinds = objects_at(self.kind_names, self.c_kind[o])
        backends = objects_at(self.backend_names, self.c_backend[o])
        trace = self.trace
        untimed = untimed_reasons(getattr(trace, "meta", None) or {}, trace.backends, backend_labels(trace.backends))
        return {
            "backend": backends,
            "graph": ints_or_none(self.c_graph[o]),
            "split": ints_or_none(self.c_split[o]),
            "kind": kinds,
            "tensor": objects_at(self.tensor_names, self.a_tensor[acc]),
            "node": objects_at(self.node_names, self.a_node[acc]),
            "thread": self.c_thread[o].tolist(),
            "mode": np.array(MODES, dtype=object)[self.a_write[acc].astype(np.int64)].tolist(),
            "t_begin_ns": t.begin[o],
            "t_end_ns": t.end[o],
            "device": t.measured[o].tolist(),
            "call_id": self.c_id[o].tolist(),
            "role": objects_at(self.role_names, self.c_role[o]),
            "queue": self.c_enq[o].tolist(),
            "queue_backend": objects_at(self.backend_names, self.c_qbackend[o]),
            "timing": timing_words(t, o, backends, self.c_nodes[o], untimed),
        }

    def describe(self, agg: pd.DataFrame) -> pd.DataFrame:
        col = {k: agg[k].to_numpy() for k in ("acc_a", "acc_b", "ord_a", "ord_b")}
        aa, ab = col["acc_a"].astype(np.int64), col["acc_b"].astype(np.int64)
        sides = {"a": self.side_columns(aa, col["ord_a"].astype(np.int64)),
                 "b": self.side_columns(ab, col["ord_b"].astype(np.int64))}
        bf = self.trace.buffers
        lt = self.a_lt[aa]
        known = lt < len(bf)
        ltk = np.where(known, lt, 0)
        gen = np.where(known, bf["generation"].to_numpy(np.int64)[ltk] if len(bf) else 0, -1)
        btype = objects_at(np.array(list(bf["buft_name"].cat.categories), dtype=object),
                         np.where(known, cat_codes(bf["buft_name"])[ltk] if len(bf) else -1, -1))
        self.latent_margin_ns = agg["margin_ns"].array
        verdict = agg["verdict"].to_numpy(np.int64)
        out = {
            "class": pd.Categorical.from_codes(agg["cls"].to_numpy(np.int64), categories=CLASSES),
            "manifested": agg["manifested"].to_numpy(bool),
            "inverted": agg["inverted"].to_numpy(bool),
            "margin_ns": agg["shown_margin"].array,
            "count": agg["n_occ"].to_numpy(np.int64),
            **{f"n_{v}": agg[f"n_{v}"].to_numpy(np.int64) for v in VERDICTS},
        }
        for s in "ab":
            for k in FINDING_SIDE:
                out[f"{s}_{k}"] = sides[s][k]
        out["buffer"] = [f"0x{x:x}" for x in self.a_buffer[aa].tolist()]
        out["generation"] = ints_or_none(gen)
        out["buffer_type"] = btype
        out["range_start"] = np.maximum(self.a_off[aa], self.a_off[ab]).tolist()
        out["range_end"] = np.minimum(self.a_end[aa], self.a_end[ab]).tolist()
        is_host = np.where(known, bf["is_host"].to_numpy(bool)[ltk] if len(bf) else False, False)
        memory = ["host memory" if h else f"{b} device memory" if b else "device memory"
                  for h, b in zip(is_host.tolist(), btype)]
        out["missing"] = missing_column(sides["a"], sides["b"], memory)
        out["first_graph"] = ints_or_none(agg["graph"].to_numpy(np.int64))
        out["first_t_ns"] = agg["t"].to_numpy(np.int64)
        out["last_graph"] = ints_or_none(agg["last_graph"].to_numpy(np.int64))
        out["last_t_ns"] = agg["last_t"].to_numpy(np.int64)
        out["verdict"] = pd.Categorical.from_codes(verdict, categories=VERDICTS)
        out["basis"] = pd.Categorical.from_codes(agg["basis"].to_numpy(np.int64), categories=BASES)
        return findings_frame(out)


def _sort_order(group: np.ndarray, pos: np.ndarray, key: np.ndarray) -> np.ndarray:
    """The stable sort order of `key` = (group, pos) packed. With few groups (buffer lifetimes x
    components) a stable sort of the small group numbers (a radix sort in numpy) does it, several
    times faster, over accesses already in pos order, as they almost always are (one thread's
    program order, its queues'); otherwise over a stable sort by pos. Equal keys keep their
    order either way."""
    if len(group) == 0 or int(group.max()) >= 1 << 16:
        return np.argsort(key, kind="stable")
    small = group.astype(np.uint16)
    if bool((pos[1:] >= pos[:-1]).all()):
        return np.argsort(small, kind="stable")
    by_pos = np.argsort(pos, kind="stable")
    return by_pos[np.argsort(small[by_pos], kind="stable")]


def _expand(lo: np.ndarray, cnt: np.ndarray):
    """Yield (query index, position) for every position in [lo[i], lo[i] + cnt[i]), in chunks
    of about CHUNK entries."""
    cum = np.cumsum(cnt)
    start, n = 0, len(cnt)
    while start < n:
        base = int(cum[start - 1]) if start else 0
        end = max(int(np.searchsorted(cum, base + CHUNK, side="right")), start + 1)
        c = cnt[start:end]
        yield np.repeat(np.arange(start, end), c), expand_ranges(lo[start:end], c)
        start = end
