"""The window a flight-recorder (ring) file holds, and the cut that makes it consistent.

A ring recycles its oldest chunks (docs/trace-format.md, "Ring files"), so each thread lost its
records up to some point, and not the same point for every thread. Every record younger than the
latest of those points survived on every thread: that is the window. Records before it are cut,
with every graph that began before it (its placements or some of its calls may be gone) and every
record that belonged to a cut call (accesses, placements, nesting, device-side execution).
Strings, metadata, threads, backends and buffers live in chunks a ring never recycles; they stay.
"""
from __future__ import annotations

import os

import numpy as np

from .checks import BEFORE_NS, I63, SPAN_NS, Problem
from .raw_trace import RawTrace, RingWindow, TickClock
from .trace_format import (CALL_ID_COUNTER, CALL_ID_THREAD_SHIFT, CHUNK_HEADER_DTYPE, CHUNK_KEPT, CHUNK_MAGIC,
                           CHUNK_RING, CHUNK_SIZE, FILE_CLOSED, FILE_RING, FILE_SNAPSHOT, GPU_API, GPU_CORRELATION,
                           HEADER_SIZE, KIND_IDS, NONE32, RECORD_SIZE, SLOTS_PER_CHUNK)

BLOCK_CHUNKS = 1024  # settled_blocks reads 64 MiB at a time: bounded memory whatever the file's size


def is_ring(header: dict) -> bool:
    return bool(header.get("file_flags", 0) & FILE_RING)


def oldest_chunk_ns(path, header: dict) -> int | None:
    """CLOCK_MONOTONIC ns at which the oldest ring chunk of a ring file (live or not) was claimed:
    nothing older can be in its window. None when the file has no ring chunk yet. Read as
    settled_blocks reads a live file (pread: the writer may trim it meanwhile), headers kept."""
    fd = os.open(path, os.O_RDONLY)
    try:
        blocks = [_chunk_heads(_read_block(fd, off)) for off in _offsets(fd)]
    finally:
        os.close(fd)
    if not blocks:
        return None
    heads = np.concatenate(blocks).view(CHUNK_HEADER_DTYPE)[:, 0]
    ring = heads[(heads["magic"] == CHUNK_MAGIC) & (heads["region"] == CHUNK_RING)]
    if len(ring) == 0:
        return None
    ticks = float(ring["t_claim"].min()) - float(header["t0_ticks"])
    return int(header["t0_monotonic_ns"] + ticks * header["ns_per_tick"])


def bad_ring_chunks(chunks: np.ndarray, offsets: np.ndarray, header: dict) -> tuple[np.ndarray, list[Problem]]:
    """The chunks of a ring file (CHUNK_HEADER_DTYPE, at file `offsets`) whose header would place
    the window wrongly, or not at all: an unknown region; a thread's ring chunk claimed outside
    the run (t_claim 0 or out of the range checks.py allows record times); an ordinal its thread
    has twice; ordinals out of the order the thread claimed its chunks in. Returns which chunks
    are bad and one Problem per reason (docs/trace-format.md, "Damaged files")."""
    bad = np.zeros(len(chunks), bool)
    problems: list[Problem] = []

    def mark(rows: np.ndarray, what: str) -> None:
        new = np.zeros(len(chunks), bool)
        new[rows] = True
        new &= ~bad
        if new.any():
            problems.append(Problem(what, int(new.sum()), int(offsets[np.flatnonzero(new)[0]])))
            bad[new] = True

    region = chunks["region"]
    mark(np.flatnonzero((region != CHUNK_RING) & (region != CHUNK_KEPT)), "chunks with an unknown region")
    # chunks appended after the run (NVML) belong to no thread and have no claim time
    owned = (region == CHUNK_RING) & (chunks["thread"] != NONE32)
    t = chunks["t_claim"].astype(np.uint64)
    lo, hi = _claim_range(header)
    mark(np.flatnonzero(owned & ((t == 0) | (t < lo) | (t > hi))),
         "ring chunks with a claim time (t_claim) outside the run")
    # each thread's chunks by ordinal: one chunk per ordinal, claimed in that order
    rows = np.flatnonzero(owned & ~bad)
    rows = rows[np.lexsort((chunks["ordinal"][rows], chunks["thread"][rows]))]
    same_thread = chunks["thread"][rows][1:] == chunks["thread"][rows][:-1]
    twice = same_thread & (chunks["ordinal"][rows][1:] == chunks["ordinal"][rows][:-1])
    mark(_both_of(rows, twice), "ring chunks whose ordinal another chunk of their thread has")
    rows = rows[~bad[rows]]
    same_thread = chunks["thread"][rows][1:] == chunks["thread"][rows][:-1]
    back = same_thread & (t[rows][1:] < t[rows][:-1])  # a later ordinal claimed earlier
    mark(_both_of(rows, back), "ring chunks whose ordinals are out of the order their thread claimed them in")
    return bad, problems


def _both_of(rows: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """The rows on either side of each neighbour pair (rows[i], rows[i + 1]) that `pairs` marks:
    which of the two is wrong, the file cannot say."""
    mask = np.zeros(len(rows), bool)
    mask[1:] |= pairs
    mask[:-1] |= pairs
    return rows[mask]


def _claim_range(header: dict) -> tuple[np.uint64, np.uint64]:
    """The claim times (ticks) a chunk of this run can have: the window checks.py allows record
    times, by the header's rate. Unbounded below 2^63 when the header's t0_ticks is itself
    damaged (checks.check_header reports that)."""
    t0 = header["t0_ticks"]
    if t0 >= I63:
        return np.uint64(1), np.uint64(I63 - 1)
    rate = float(header["ns_per_tick"])
    if not np.isfinite(rate) or rate <= 0:
        rate = 1.0  # as TickClock: ticks taken as nanoseconds
    lo = max(float(t0) - BEFORE_NS / rate, 1.0)
    hi = min(float(t0) + SPAN_NS / rate, float(I63 - 1024))  # below 2^63 in float64 too
    return np.uint64(lo), np.uint64(hi)


def cut_to_window(raw: RawTrace) -> RingWindow:
    """Cuts a ring file's records to its window (in place) and says what it holds."""
    flags = raw.header["file_flags"]
    chunks = raw.chunks
    ring = chunks[chunks["region"] == CHUNK_RING]
    start = _window_start(ring)
    clock = raw.clock()
    start_ns, cut = None, {}
    if start is not None:
        start_ns = int(clock.to_ns(np.array([start]))[0])
        cut = _cut(raw, start, start_ns)
    ends = [clock.to_ns(raw.calls["t_end"]).max()] if len(raw.calls) else []
    t0 = raw.header["t0_monotonic_ns"]
    snap = raw.header["snapshot_ns"] - t0 if flags & FILE_SNAPSHOT and raw.header["snapshot_ns"] else None
    return RingWindow(
        keep_ns=raw.header["ring_keep_ns"], max_bytes=raw.header["ring_max_bytes"],
        start_ns=start_ns,
        end_ns=int(ends[0]) if ends else None, closed=bool(flags & FILE_CLOSED), snapshot_ns=snap,
        ring_chunks=len(ring), kept_chunks=int((chunks["region"] == CHUNK_KEPT).sum()), cut=cut)


def _window_start(ring: np.ndarray) -> int | None:
    """Record-clock time from which every thread's ring records survive, or None if none were lost.

    A thread's ring chunks are recycled in the order it released them, so what survives of a
    thread is its newest chunks: from its oldest survivor on, unless a chunk is missing between
    survivors (one recycled while a live file was being read). A thread whose records survive
    only from its chunk number k > 0 on lost what it wrote before claiming that chunk."""
    if len(ring) == 0:
        return None
    r = ring[np.lexsort((ring["ordinal"], ring["thread"]))]
    thread, ordinal = r["thread"], r["ordinal"].astype(np.int64)
    new_thread = thread[1:] != thread[:-1]
    gap = ~new_thread & (ordinal[1:] != ordinal[:-1] + 1)
    starts = np.flatnonzero(np.r_[True, new_thread | gap])  # where an unbroken run of chunks begins
    last_run = starts[np.r_[thread[starts][1:] != thread[starts][:-1], True]]  # each thread's newest run
    lossy = last_run[ordinal[last_run] > 0]
    return int(r["t_claim"][lossy].max()) if len(lossy) else None


def _cut(raw: RawTrace, start: int, start_ns: int) -> dict:
    calls = raw.calls
    early = calls["t_begin"].astype(np.uint64) < np.uint64(start)
    graphs = calls["graph"]
    early_graphs = np.unique(graphs[early & (graphs != NONE32)])
    drop = early | np.isin(graphs, early_graphs)
    # device-side work of a host call that is cut goes with it
    device_exec = calls["kind"] == KIND_IDS["device_exec"]
    kept_ids = calls["call_id"][~drop].astype(np.uint64)
    drop |= device_exec & ~np.isin(calls["obj"].astype(np.uint64), kept_ids)
    kept_ids = calls["call_id"][~drop].astype(np.uint64)
    cut_ids = calls["call_id"][drop].astype(np.uint64)
    first_kept = _first_counter_per_thread(kept_ids)
    counts = {"calls": int(drop.sum())}
    raw.calls = calls[~drop]
    for name in ("accesses", "places", "nest"):
        recs = getattr(raw, name)
        keep = _belongs_to_window(recs["call_id"].astype(np.uint64), kept_ids, cut_ids, first_kept)
        counts[name] = int((~keep).sum())
        setattr(raw, name, recs[keep])
    gpu = raw.gpu
    timed = (gpu["kind"] != GPU_CORRELATION) & (gpu["kind"] != GPU_API)
    # a window that starts before CLOCK_MONOTONIC 0 (a claim just after boot) keeps every activity
    t0 = np.uint64(max(raw.header["t0_monotonic_ns"] + start_ns, 0))
    keep = ~timed | (gpu["t_begin_ns"] >= t0)
    counts["gpu"] = int((~keep).sum())
    raw.gpu = gpu[keep]
    keep = raw.samples["t_ns"] >= t0
    counts["samples"] = int((~keep).sum())
    raw.samples = raw.samples[keep]
    return {k: v for k, v in counts.items() if v}


def _first_counter_per_thread(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(threads ascending, the smallest call counter of each among `ids`): call ids count up per thread."""
    if len(ids) == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    thread, counter = ids >> np.uint64(CALL_ID_THREAD_SHIFT), ids & np.uint64(CALL_ID_COUNTER)
    order = np.lexsort((counter, thread))
    thread, counter = thread[order], counter[order]
    first = np.r_[True, thread[1:] != thread[:-1]]
    return thread[first], counter[first]


def _belongs_to_window(ids: np.ndarray, kept_ids: np.ndarray, cut_ids: np.ndarray, first_kept) -> np.ndarray:
    """Records of kept calls stay; records of cut calls go. A record whose call has no record at
    all stays only when it is newer than its thread's first kept call (a call that was still
    running when the file was read), not when its call was recycled with the ring."""
    known = np.isin(ids, kept_ids)
    orphan = ~known & ~np.isin(ids, cut_ids)
    threads, counters = first_kept
    thread, counter = ids >> np.uint64(CALL_ID_THREAD_SHIFT), ids & np.uint64(CALL_ID_COUNTER)
    pos = np.searchsorted(threads, thread)
    has = pos < len(threads)
    has[has] = threads[pos[has]] == thread[has]
    newer = np.zeros(len(ids), bool)
    newer[has] = counter[has] > counters[pos[has]]
    return known | (orphan & newer)


# -- reading a file that is still being written ---------------------------------------------

def claimed_after(chunks: np.ndarray, clocks: np.ndarray, header: dict, taken_ns: int) -> np.ndarray:
    """Which chunks (CHUNK_HEADER_DTYPE) a thread claimed after CLOCK_MONOTONIC `taken_ns`, when a
    copy of a file being written began (settled_blocks): a copy leaves them out, because the
    chunk before such a chunk in its thread may have been read before it was full."""
    claimed = TickClock.from_trace(header, clocks).to_ns(chunks["t_claim"])
    return (chunks["t_claim"] != 0) & (claimed > taken_ns - header["t0_monotonic_ns"])


def settled_blocks(fd: int):
    """The body of the trace file open at `fd`, while its writer may still write (and a ring
    recycle) it, as (in-use chunks that were settled, how many chunks in use when the copy began
    were not: recycled while it ran) per block.

    A first pass reads every chunk header; then each block is read twice, and its headers once
    more. A chunk whose header is not the same in all four reads was recycled (or claimed)
    meanwhile and is left out: the last read catches a recycle that began after a read had taken
    the header and before it took the records (a read is no snapshot: the writer unpublishes a
    chunk, clears it and writes its new header while a read copies it). A record that differs
    between the two block reads, or is not there, becomes the zero that ends its chunk, as an
    unwritten one would. The reader then leaves out the chunks claimed after the copy began
    (claimed_after), and no thread has a hole in its records: a chunk with a successor claimed
    before the first pass began was full before then, so it is whole in the later reads. A file
    whose writer is gone reads the same each time and comes out whole."""
    offsets = _offsets(fd)
    heads = [_chunk_heads(_read_block(fd, off)) for off in offsets]
    for off, head_a in zip(offsets, heads):
        b = _read_block(fd, off)
        c = _read_block(fd, off)
        head_d = _chunk_heads(_read_block(fd, off))
        n = min(len(b), len(c), len(head_d) * CHUNK_SIZE) // CHUNK_SIZE
        if n == 0:
            return
        yield _settled_chunks(head_a, b[: n * CHUNK_SIZE], c[: n * CHUNK_SIZE], head_d[:n])
        if n < BLOCK_CHUNKS:
            return


def _offsets(fd: int):
    size = os.fstat(fd).st_size
    return range(HEADER_SIZE, max(size, HEADER_SIZE), BLOCK_CHUNKS * CHUNK_SIZE)


def _read_block(fd: int, offset: int) -> np.ndarray:
    # pread, not a mapping: the writer may trim the file when it closes, which would fault a map
    return np.frombuffer(os.pread(fd, BLOCK_CHUNKS * CHUNK_SIZE, offset), np.uint8)


def _chunk_heads(block: np.ndarray) -> np.ndarray:
    """The header slot of every whole chunk of a block, as (chunks, 64) bytes."""
    n = len(block) // CHUNK_SIZE
    return block[: n * CHUNK_SIZE].reshape(n, CHUNK_SIZE)[:, :RECORD_SIZE].copy()


def _settled_chunks(first_heads: np.ndarray, b: np.ndarray, c: np.ndarray,
                    last_heads: np.ndarray) -> tuple[np.ndarray, int]:
    rb = b.reshape(-1, SLOTS_PER_CHUNK, RECORD_SIZE)
    rc = c.reshape(-1, SLOTS_PER_CHUNK, RECORD_SIZE).copy()
    ha = np.zeros((len(rc), RECORD_SIZE), np.uint8)  # chunks the first pass did not see: never stable
    seen = min(len(rc), len(first_heads))
    ha[:seen] = first_heads[:seen]
    magic = rc[:, 0, :4].copy().view("<u4")[:, 0]
    # chunks in use when the copy began: those left out were lost to it (recycled meanwhile)
    in_use = ha[:, :4].copy().view("<u4")[:, 0] == CHUNK_MAGIC
    # a chunk with records but no magic in every read is damaged, not being written: it stays,
    # for the reader to report
    holds = (magic == CHUNK_MAGIC) | (rc[:, 1, 0] != 0)
    stable = ((ha == rb[:, 0, :]).all(axis=1) & (rb[:, 0, :] == rc[:, 0, :]).all(axis=1)
              & (rc[:, 0, :] == last_heads).all(axis=1) & holds)
    settled = (rb[:, 1:, :] == rc[:, 1:, :]).all(axis=2) & (rb[:, 1:, 0] != 0)
    rc[:, 1:, 0] = np.where(settled, rc[:, 1:, 0], 0)
    return rc[stable].reshape(-1), int((in_use & ~stable).sum())
