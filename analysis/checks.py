"""Range checks of a trace file's records against the file itself (docs/trace-format.md,
"Damaged files").

Every field the loader relies on as an index, a time or a size is checked here, on whole arrays:
a record that fails is dropped and counted, never trusted. Each Problem says what was wrong,
how many records and where the first one is (a file offset), so that a message can point at it.
All arithmetic is on int64 / float64 copies: an unsigned field never meets a negative number.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .columns import Columns
from .raw_trace import TickClock
from .trace_format import (
    FILE_HEADER_DTYPE, GPU_CORRELATION, GPU_GRAPH, GPU_KERNEL, HEADER_SIZE, NONE32, REC_ACCESS, REC_BACKEND, REC_BUFFER,
    REC_CALL, REC_CLOCK, REC_CUDA, REC_GPU, REC_NEST, REC_PLACE, REC_SAMPLE, REC_STRING, REC_THREAD, RECORD_SIZE,
    STRING_PIECE, BUF_FREED, BUF_SEEN, ACC_READ, ACC_WRITE, CALL_ID_THREAD_SHIFT, CUDA_OPS, MAX_BACKENDS, MAX_THREAD,
    TraceFormatError,
)

I63 = 1 << 63
MAX_BACKEND_INDEX = 1 << 16  # backend indices count up from 0, one per backend created
MAX_GPU_DEVICES = 1024      # CUDA ordinals and NVML indices
# Times must fall within [t0 - BEFORE_NS, t0 + SPAN_NS], t0 the instant the file was opened.
BEFORE_NS = 60 * 10**9      # a minute of slack (clock calibration, samplers that start first)
SPAN_NS = 1 << 50           # ~13 days of run
CLOCK_TOLERANCE = 0.02      # a CLOCK point may drift this far (relative) from the header's rate


@dataclass
class Problem:
    what: str      # e.g. "CALL records with a backend index beyond the backend table"
    count: int
    offset: int    # file offset of the first one

    def __str__(self) -> str:
        return f"{self.count} {self.what} (first at file offset {self.offset:#x})"


class Parts:
    """The records of one type and the slot index (in the body) each came from."""

    def __init__(self, recs: np.ndarray | Columns, slots: np.ndarray):
        self.recs, self.slots = recs, slots  # Columns for the types trace_file.COLUMNAR names


# field: its file offset (the header dtype knows it)
HEADER_CLOCKS = {k: FILE_HEADER_DTYPE.fields[k][1]  # type: ignore[index]  # a record dtype: fields is set
                 for k in ("t0_monotonic_ns", "t0_realtime_ns", "t0_ticks")}


def check_header(header: dict, path: str, strict: bool, parts: dict[int, Parts]) -> list[str]:
    """Header clock fields beyond int64 would overflow every time computation. Strict: an error.
    Lenient: the earliest sane CLOCK point stands in for t0 (0 without one), with a warning."""
    out = []
    for k, off in HEADER_CLOCKS.items():
        if header[k] < I63:
            continue
        msg = f"{path}: corrupt header: {k} is {header[k]} (beyond 2^63) at file offset {off:#x}"
        if strict:
            raise TraceFormatError(msg + "; --lenient (strict=False) loads it with a stand-in")
        c = parts[REC_CLOCK].recs
        sane = c[(c["ticks"] < np.uint64(I63)) & (c["monotonic_ns"] < np.uint64(I63))]
        field = {"t0_ticks": "ticks", "t0_monotonic_ns": "monotonic_ns"}.get(k)
        header[k] = int(sane[field].min()) if field and len(sane) else 0
        out.append(msg + f"; taken as {header[k]}, times may be off")
    return out


def _first(p: Parts, bad: np.ndarray) -> int:
    return HEADER_SIZE + int(p.slots[np.flatnonzero(bad)[0]]) * RECORD_SIZE


def check_records(parts: dict[int, Parts], header: dict) -> list[Problem]:
    """Drops (in place, from `parts`) every record with a field out of range; returns what was
    dropped, one Problem per reason."""
    problems: list[Problem] = []

    def drop(rtype: int, bad: np.ndarray, what: str) -> None:
        p = parts[rtype]
        if not bad.any():
            return
        problems.append(Problem(what, int(bad.sum()), _first(p, bad)))
        keep = np.flatnonzero(~bad)
        p.recs, p.slots = p.recs[keep], p.slots[keep]

    def u64(p: Parts, f: str) -> np.ndarray:
        return p.recs[f].astype(np.uint64, copy=False)  # read-only: never written into

    t0_ns = int(header["t0_monotonic_ns"])
    t0_rt = int(header["t0_realtime_ns"])

    def in_window(ns: np.ndarray, t0: int) -> np.ndarray:
        """ns (uint64 absolute) within the run's window around t0, in float64 (no overflow)."""
        rel = ns.astype(np.float64) - float(t0)
        return (rel >= -BEFORE_NS) & (rel <= SPAN_NS)

    # CLOCK points first: they define how ticks become nanoseconds.
    c = parts[REC_CLOCK]
    ticks, mono = u64(c, "ticks"), u64(c, "monotonic_ns")
    bad = (ticks >= np.uint64(I63)) | (mono >= np.uint64(I63)) | ~in_window(mono, t0_ns)
    rate = float(header["ns_per_tick"])
    if np.isfinite(rate) and rate > 0 and header["t0_ticks"] < I63:
        want = (ticks.astype(np.float64) - float(header["t0_ticks"])) * rate
        got = mono.astype(np.float64) - float(t0_ns)
        bad |= np.abs(got - want) > CLOCK_TOLERANCE * np.abs(got) + 1e9
    drop(REC_CLOCK, bad, "CLOCK records with ticks or times out of range")
    clock_recs = parts[REC_CLOCK].recs
    assert isinstance(clock_recs, np.ndarray)  # not a columnar type
    clock = TickClock.from_trace(header, clock_recs)

    # The run's window in ticks, worked out once (in float64: no overflow), so that each record
    # time is compared as it is, without a conversion per record.
    first_tick = float(clock.ticks[0]) + (-BEFORE_NS - float(clock.ns[0])) / clock.edge_slope
    last_tick = float(clock.ticks[0]) + (SPAN_NS - float(clock.ns[0])) / clock.edge_slope
    lo_tick = np.uint64(min(max(np.ceil(first_tick), 0.0), I63 - 1024))
    hi_tick = np.uint64(min(max(np.floor(last_tick), 0.0), I63 - 1024))  # below 2^63 in float64 too

    def tick_ok(t: np.ndarray) -> np.ndarray:
        """Record times (ticks) that fall within the run's window."""
        t = t.astype(np.uint64, copy=False)
        return (t >= lo_tick) & (t <= hi_tick)

    # THREAD, BACKEND, BUFFER
    th = parts[REC_THREAD]
    drop(REC_THREAD, (u64(th, "thread") >= MAX_THREAD) | ~tick_ok(th.recs["t"]),
         "THREAD records with a thread index or time out of range")
    be = parts[REC_BACKEND]
    drop(REC_BACKEND, (u64(be, "backend") >= MAX_BACKEND_INDEX) | ~tick_ok(be.recs["t"]),
         "BACKEND records with a backend index or time out of range")
    bu = parts[REC_BUFFER]
    ev = bu.recs["event"].astype(np.int64)
    base, size = u64(bu, "base"), u64(bu, "size")
    bad = (ev < BUF_SEEN) | (ev > BUF_FREED) | ~tick_ok(bu.recs["t"])
    bad |= (ev != BUF_FREED) & ((size >= np.uint64(I63)) | (base + size < base))
    drop(REC_BUFFER, bad, "BUFFER records with a bad event, time or size")

    # CALL: thread and call id agree, times in the run, backends in (or just past) the table.
    ca = parts[REC_CALL]
    known = parts[REC_BACKEND].recs["backend"].astype(np.int64)
    limit = (int(known.max()) + 1 if len(known) else 0) + MAX_BACKENDS
    thread = u64(ca, "thread")
    bad_id = (thread >= MAX_THREAD) | ((u64(ca, "call_id") >> np.uint64(CALL_ID_THREAD_SHIFT)) != thread)
    drop(REC_CALL, bad_id, "CALL records whose call id does not match their thread")
    drop(REC_CALL, ~tick_ok(ca.recs["t_begin"]) | ~tick_ok(ca.recs["t_end"]),
         "CALL records with times outside the run")
    b1, b2 = ca.recs["backend"].astype(np.int64), ca.recs["backend2"].astype(np.int64)
    drop(REC_CALL, ((b1 != NONE32) & (b1 >= limit)) | ((b2 != NONE32) & (b2 >= limit)),
         "CALL records with a backend index beyond the backend table")
    drop(REC_CALL, parts[REC_CALL].recs["split"].astype(np.int64) < -1,
         "CALL records with a negative split index")

    # ACCESS and PLACE: a known mode, a range that does not wrap around.
    for rtype, modes, name in ((REC_ACCESS, (ACC_READ, ACC_WRITE), "ACCESS"), (REC_PLACE, (0,), "PLACE")):
        a = parts[rtype]
        off, size = u64(a, "offset"), u64(a, "size")
        mode = a.recs["mode"]
        known = mode == modes[0]
        for m in modes[1:]:
            known |= mode == m
        bad = ~known | (a.recs["thread"] >= MAX_THREAD)
        bad |= (size >= np.uint64(I63)) | (off + size < off)
        drop(rtype, bad, f"{name} records with a bad mode, thread or byte range")

    # GPU: a known kind, a device ordinal, activity times in the run (either clock).
    g = parts[REC_GPU]
    kind = g.recs["kind"].astype(np.int64)
    bad = (kind < GPU_KERNEL) | (kind > GPU_GRAPH) | (g.recs["device"].astype(np.int64) >= MAX_GPU_DEVICES)
    act = kind != GPU_CORRELATION  # correlations: no times
    tb, te = u64(g, "t_begin_ns"), u64(g, "t_end_ns")
    in_run = ((in_window(tb, t0_ns) & in_window(te, t0_ns))
              | (in_window(tb, t0_rt) & in_window(te, t0_rt)))
    bad |= act & (~in_run | (te < tb))
    drop(REC_GPU, bad, "GPU records with a bad kind, device or times")

    s = parts[REC_SAMPLE]
    drop(REC_SAMPLE, (s.recs["device"].astype(np.int64) >= MAX_GPU_DEVICES)
         | ~in_window(u64(s, "t_ns"), t0_ns), "SAMPLE records with a bad device or time")

    # STRING: a piece inside the declared length (id 0 is "no string": the reader skips those).
    st = parts[REC_STRING]
    need = -(-st.recs["total_len"].astype(np.int64) // STRING_PIECE)
    bad = (st.recs["len"].astype(np.int64) > STRING_PIECE) | (st.recs["piece"].astype(np.int64) >= need)
    drop(REC_STRING, bad & (st.recs["id"] != 0), "STRING records with a bad piece or length")

    nest = parts[REC_NEST]
    drop(REC_NEST, u64(nest, "thread") >= MAX_THREAD, "NEST records with a thread out of range")

    # CUDA: a known operation, a thread, a time in the run, a device ordinal
    cu = parts[REC_CUDA]
    op = cu.recs["op"].astype(np.int64)
    bad = (op < min(CUDA_OPS)) | (op > max(CUDA_OPS)) | (u64(cu, "thread") >= MAX_THREAD) | ~tick_ok(cu.recs["t"])
    drop(REC_CUDA, bad | (cu.recs["device"].astype(np.int64) >= MAX_GPU_DEVICES),
         "CUDA records with a bad operation, thread, time or device")
    return problems
