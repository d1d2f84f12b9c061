"""Reading a trace larger than memory: its index, and its graph windows as RawTraces.

One pass over the file (64 MiB at a time) builds a TraceIndex: every record that any part of the
trace needs (strings, metadata, threads, backends, buffers, clock points, counter samples), the
time span of each chunk's records, when each scheduler graph began, and how many records there
are. The graphs are then cut into windows of about WINDOW_RECORDS records. A window is read from
the chunks whose span meets it, with the CONTEXT_GRAPHS graphs before it: the context orders
what the window's operations follow. Memory holds the index and a window or two (the next one is
read while the caller works on one: read_ahead).

Device-side records (device_exec) go with their host call, so a file cut before the call's chunk
loses them. Ring files are bounded: they are read whole. A file cut inside a chunk is read as the
whole-file reader reads it: every whole record of its last chunk.

A reader, like trace_file.py: what is done with a window (load it, judge it, export it) is in the
modules above (load.py, window_races.py, summary.py, export_windows.py; windows.py names them all).
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .arrays import lookup
from .columns import Columns, word_of_rows
from .raw_trace import TickClock
from .threads import thread_count
from .trace_file import display_path, parse_header, records_before_first_zero, records_to_raw
from .trace_format import (ACCESS_DTYPE, CALL_DTYPE, CALL_META_PARENT, CHUNK_HEADER_DTYPE, CHUNK_MAGIC, CHUNK_SIZE,
                           CLOCK_DTYPE, FILE_RING, GPU_API, GPU_CORRELATION, GPU_DTYPE, HEADER_SIZE, KIND_IDS,
                           MAX_RECORD_TYPE, NEST_DTYPE, NONE32, REC_ACCESS, REC_BACKEND, REC_BUFFER, REC_CALL,
                           REC_CLOCK, REC_GPU, REC_META, REC_NEST, REC_PLACE, REC_SAMPLE, REC_STRING, REC_THREAD,
                           RECORD_SIZE, SLOTS_PER_CHUNK, TraceFormatError)

# Records a window aims at. Measured on 31 M events: 2 M a window analyses in 0.65 of the time 4 M
# take (1 M: 0.7). A window's per-record arrays then stay under glibc's largest threshold for
# serving memory by mmap (32 MiB: 4 M int64s), so the memory a window frees serves the next one;
# larger arrays come back from the kernel as new pages to zero and fault in (docs/performance.md).
WINDOW_RECORDS = 2_000_000
CONTEXT_GRAPHS = 2               # graphs before a window read with it, to order what follows
TAIL_NS = 1_000_000_000          # device-side records are written up to this long after their call
BLOCK_CHUNKS = 1024              # the index pass reads 64 MiB at a time
GLOBAL_TYPES = [REC_STRING, REC_META, REC_THREAD, REC_BACKEND, REC_BUFFER, REC_CLOCK, REC_SAMPLE]
WINDOW_TYPES = [REC_CALL, REC_ACCESS, REC_PLACE, REC_NEST, REC_GPU]  # read from a window's chunks
DEVICE_EXEC = KIND_IDS["device_exec"]
U64_MAX = np.iinfo(np.uint64).max


@dataclass
class TraceIndex:
    path: str
    header: dict
    size: int
    positions: np.ndarray     # chunk number in the file of each chunk in use
    lo_ns: np.ndarray         # the time span of what each chunk holds (ns since t0), widened
    hi_ns: np.ndarray         # to its thread's neighbours for records without times
    n_records: np.ndarray     # records in each chunk
    globals: np.ndarray       # (n, 64) bytes: the records every window needs
    graph_ids: np.ndarray     # scheduler graphs, by when they began
    graph_start_ns: np.ndarray
    operations: int           # host calls (what races() counts as operations) and accesses
    accesses: int
    cut: bool                 # the file ends inside a chunk
    closed: bool              # no unused chunks: the writer closed the file
    damage: list              # what the index pass found damaged (strict=False; strict raises)
    clock: TickClock          # from the trace's clock points (all in `globals`)
    header_page: np.ndarray   # the file's first HEADER_SIZE bytes, for the windows' own files


@dataclass
class Window:
    number: int
    first_graph: int          # position in TraceIndex.graph_ids of the window's first own graph
    end_graph: int            # and one past its last
    context_ns: int           # the context's start (the first context graph's start)
    own_ns: int               # the window's own start
    end_ns: int               # its end (the next window's start)


def is_large(path, limit_bytes: int | None = None) -> bool:
    """Whether a trace is better read in windows: larger than an eighth of this machine's memory
    (loading takes several times the file's size), or than GGML_TRACE_WINDOWS_ABOVE bytes when
    set. Rings are bounded and read whole whatever this says (the commands check)."""
    if limit_bytes is None:
        above = os.environ.get("GGML_TRACE_WINDOWS_ABOVE", "")
        limit_bytes = (int(above) if above.isdigit()
                       else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 8)
    return os.path.getsize(path) > limit_bytes


def index_trace(path, progress=None, strict: bool = True) -> TraceIndex:
    """One pass over the file: see the module's docstring."""
    path = os.fspath(path)
    shown = display_path(path)
    # Reads, not a mapping: the pages of a mapped file count as this process's memory (RSS), and a
    # pass over a file larger than memory would make them the largest part of it.
    try:
        size = os.path.getsize(path)
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise TraceFormatError(f"{shown}: cannot read: {e}") from e
    try:
        return _index(path, fd, size, shown, progress, strict)
    finally:
        os.close(fd)


def _index(path, fd, size, shown, progress, strict) -> TraceIndex:
    header_page = np.frombuffer(os.pread(fd, HEADER_SIZE, 0), np.uint8)
    header = parse_header(header_page, shown)
    if header["file_flags"] & FILE_RING:
        raise TraceFormatError(f"{shown}: a flight recorder's file is bounded: analyse it whole")
    body_size = max(size - HEADER_SIZE, 0)
    n_chunks = -(-body_size // CHUNK_SIZE)  # a last chunk cut by the end of the file counts
    unused = unknown = bad_chunks = 0
    first_bad = None
    parts: dict[str, list] = {k: [] for k in ("pos", "thread", "calls_lo", "calls_hi", "gpu_lo", "gpu_hi", "n", "globals",
                              "graph", "graph_t")}
    operations = accesses = 0
    t_start = time.monotonic()
    block = np.empty(min(BLOCK_CHUNKS, n_chunks) * CHUNK_SIZE, np.uint8)  # one buffer, read into again
    for first in range(0, n_chunks, BLOCK_CHUNKS):
        nc = min(BLOCK_CHUNKS, n_chunks - first)
        blk = _pread_chunks(fd, first, nc, body_size, shown, out=block[:nc * CHUNK_SIZE])
        heads = blk[:, 0, :].copy().view(CHUNK_HEADER_DTYPE)[:, 0]
        used = heads["magic"] == CHUNK_MAGIC
        types = blk[:, 1:, 0]
        valid = records_before_first_zero(types) & used[:, None]
        # damage, as read_trace_file sees it: unknown record types, records in a chunk without a header
        odd = valid & (types > MAX_RECORD_TYPE)
        damaged = ~used & (types[:, 0] != 0)
        unknown += int(odd.sum())
        bad_chunks += int(damaged.sum())
        if first_bad is None and (odd.any() or damaged.any()):
            first_bad = HEADER_SIZE + first * CHUNK_SIZE + int(np.flatnonzero(odd.any(axis=1) | damaged)[0]) * CHUNK_SIZE
        valid &= ~odd
        recs = blk[:, 1:, :]
        t = np.where(valid, types, 0)
        parts["globals"].append(recs[np.isin(t, GLOBAL_TYPES)].copy())
        is_call = t == REC_CALL
        calls = recs[is_call].copy().view(CALL_DTYPE)[:, 0]
        row = np.nonzero(is_call)[0]
        tb, te = calls["t_begin"].astype(np.uint64), calls["t_end"].astype(np.uint64)
        lo = np.full(nc, U64_MAX, np.uint64)
        hi = np.zeros(nc, np.uint64)
        np.minimum.at(lo, row, tb)
        np.maximum.at(hi, row, np.maximum(te, tb))
        is_gpu = t == REC_GPU
        gpu = recs[is_gpu].copy().view(GPU_DTYPE)[:, 0]
        grow = np.nonzero(is_gpu)[0]
        timed = (gpu["kind"] != GPU_CORRELATION) & (gpu["kind"] != GPU_API)
        glo = np.full(nc, U64_MAX, np.uint64)
        ghi = np.zeros(nc, np.uint64)
        np.minimum.at(glo, grow[timed], gpu["t_begin_ns"][timed].astype(np.uint64))
        np.maximum.at(ghi, grow[timed], gpu["t_end_ns"][timed].astype(np.uint64))
        in_graph = (calls["graph"] != NONE32) & (calls["kind"] != DEVICE_EXEC)
        g, gt = calls["graph"][in_graph], tb[in_graph]
        if len(g):  # each graph's first call in this block
            order = np.lexsort((gt, g))
            first_of = np.r_[True, g[order][1:] != g[order][:-1]]
            parts["graph"].append(g[order][first_of])
            parts["graph_t"].append(gt[order][first_of])
        operations += int(((calls["kind"] != DEVICE_EXEC) & ((calls["flags"] & CALL_META_PARENT) == 0)).sum())
        accesses += int((t == REC_ACCESS).sum())
        keep = np.flatnonzero(used)
        unused += nc - len(keep)
        parts["pos"].append(first + keep)
        parts["thread"].append(heads["thread"][keep])
        for k, v in (("calls_lo", lo), ("calls_hi", hi), ("gpu_lo", glo), ("gpu_hi", ghi)):
            parts[k].append(v[keep])
        parts["n"].append(valid.sum(axis=1)[keep])
        if progress:
            progress("index", first + nc, n_chunks, time.monotonic() - t_start)
    damage = []
    if unknown or bad_chunks:
        what = ", ".join(x for x in (f"{unknown} record(s) with an unknown type byte" if unknown else "",
                                      f"{bad_chunks} chunk(s) with a damaged header" if bad_chunks else "") if x)
        msg = f"{shown}: {what} (first in the chunk at file offset {first_bad:#x})"
        if strict:
            raise TraceFormatError(msg + "; --lenient (strict=False) drops them and loads the rest")
        damage.append(msg + " dropped")
    cat = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in parts.items() if k != "globals"}
    globals_ = (np.concatenate(parts["globals"]) if parts["globals"] else np.zeros((0, RECORD_SIZE), np.uint8))
    clock = TickClock.from_trace(header, globals_[globals_[:, 0] == REC_CLOCK].copy().view(CLOCK_DTYPE)[:, 0])
    t0 = header["t0_monotonic_ns"]
    lo_ns = _span(clock, cat["calls_lo"], cat["gpu_lo"], t0, np.minimum, U64_MAX)
    hi_ns = _span(clock, cat["calls_hi"], cat["gpu_hi"], t0, np.maximum, 0)
    lo_ns, hi_ns = _widen_to_neighbours(cat["thread"].astype(np.int64), lo_ns, hi_ns)
    graph_ids, graph_start = _graph_starts(cat["graph"], cat["graph_t"], clock)
    return TraceIndex(path, header, size, cat["pos"].astype(np.int64), lo_ns, hi_ns,
                      cat["n"].astype(np.int64), globals_, graph_ids, graph_start, operations, accesses,
                      body_size % CHUNK_SIZE != 0, unused == 0, damage, clock, header_page)


def _pread_chunks(fd: int, first: int, n: int, body_size: int, shown: str, out: np.ndarray | None = None) -> np.ndarray:
    """Chunks `first` .. first + n - 1 of the body, read into `out` (a new array if None) and
    returned as (n, SLOTS_PER_CHUNK, RECORD_SIZE) bytes. A last chunk cut by the end of the file
    keeps its whole records and reads as zeros after them, as read_trace_file reads a cut file (a
    zero type byte ends a chunk)."""
    want = n * CHUNK_SIZE
    expect = min(want, body_size - first * CHUNK_SIZE)
    if out is None:
        out = np.empty(want, np.uint8)
    buf = out.reshape(-1).view(np.uint8)
    got, offset = 0, HEADER_SIZE + first * CHUNK_SIZE
    while got < want:  # straight into place; one read may return less than asked (2 GiB at most)
        k = os.preadv(fd, [buf[got:]], offset + got)  # type: ignore[list-item]  # an ndarray is a writable buffer
        if k == 0:
            break
        got += k
    if got < expect:
        raise TraceFormatError(f"{shown}: the file shrank while it was read")
    whole = got - got % RECORD_SIZE  # a record cut by the end of the file is left out
    buf[whole:] = 0
    return buf.reshape(n, SLOTS_PER_CHUNK, RECORD_SIZE)


def _span(clock, ticks, gpu_ns, t0, pick, none):
    """Per chunk: the earliest (or latest) time of its calls (ticks) and GPU records (ns)."""
    out = np.full(len(ticks), np.nan)
    has = ticks != none
    out[has] = clock.to_ns(ticks[has].astype(np.int64))
    g = gpu_ns != none
    gv = gpu_ns[g].astype(np.int64) - t0
    out[g] = np.where(np.isnan(out[g]), gv, pick(out[g], gv))
    return out


def _widen_to_neighbours(thread, lo, hi):
    """A chunk's records without times (accesses, placements) belong to calls in it or in its
    thread's next chunk, and a chunk with no times at all lies between its neighbours: each span
    reaches back to the end of the thread's previous chunk and on to the start of its next one
    (chunks are in file order, which is each thread's order). No neighbour: unbounded."""
    df = pd.DataFrame({"thread": thread, "lo": lo, "hi": hi})
    by_thread = df.groupby("thread", sort=False)
    prev_hi = by_thread["hi"].transform(lambda s: s.ffill().shift(1)).to_numpy()
    next_lo = by_thread["lo"].transform(lambda s: s.bfill().shift(-1)).to_numpy()
    new_lo = np.fmin(lo, prev_hi)
    new_hi = np.fmax(hi, next_lo)
    return np.where(np.isnan(new_lo), -np.inf, new_lo), np.where(np.isnan(new_hi), np.inf, new_hi)


def _graph_starts(graph, ticks, clock):
    if len(graph) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort((ticks, graph))
    g, t = graph[order], ticks[order]
    first = np.r_[True, g[1:] != g[:-1]]
    g, start = g[first].astype(np.int64), clock.to_ns(t[first].astype(np.int64))
    by_time = np.argsort(start, kind="stable")
    return g[by_time], start[by_time]


def plan_windows(index: TraceIndex, records: int = WINDOW_RECORDS, context: int = CONTEXT_GRAPHS) -> list[Window]:
    """Windows of whole graphs, each about `records` records (at least one graph)."""
    n_graphs = len(index.graph_ids)
    total = int(index.n_records.sum())
    per_graph = max(1, total // max(n_graphs, 1))
    step = max(1, records // per_graph)
    out = []
    starts = index.graph_start_ns
    for k, g0 in enumerate(range(0, max(n_graphs, 1), step)):
        g1 = min(g0 + step, n_graphs)
        ctx = max(0, g0 - context)
        out.append(Window(
            k, g0, g1,
            context_ns=int(starts[ctx]) if g0 > 0 else -(1 << 62),
            own_ns=int(starts[g0]) if g0 > 0 else -(1 << 62),
            end_ns=int(starts[g1]) if g1 < n_graphs else (1 << 62)))
    return out


def read_window(index: TraceIndex, w: Window, strict: bool = True, tail_ns: int = TAIL_NS):
    """A RawTrace of one window: the index's global records, the calls that began in it (with
    its context), everything that belongs to them, and the GPU activity of its time (up to
    `tail_ns` after it: work a device ran after the window's last call)."""
    # (chunks as far as TAIL_NS on whatever tail_ns: device-side records of the window's calls
    # are written after them, and are kept by their call, not by their time)
    sel = (index.hi_ns >= w.context_ns) & (index.lo_ns < w.end_ns + TAIL_NS)
    rows, types = _read_chunks(index, index.positions[sel])
    # What does not belong to the window is left out by its type byte (0), not copied out. The
    # global records come once, from the index (first in `rows`), not again from the chunks.
    chunk_types = types[len(index.globals):]
    chunk_types *= np.isin(chunk_types, WINDOW_TYPES)
    at = np.flatnonzero(types == REC_CALL)
    calls = Columns.of_rows(rows, CALL_DTYPE, at)
    begin = index.clock.to_ns(calls["t_begin"].astype(np.int64))
    host = calls["kind"] != DEVICE_EXEC
    in_window = host & (begin >= w.context_ns) & (begin < w.end_ns)
    ids = pd.Index(calls["call_id"][in_window])
    # device-side records go with the call that enqueued the work
    types[at[~(in_window | (~host & (lookup(ids, calls["obj"]) >= 0)))]] = 0
    for rtype, dtype in ((REC_ACCESS, ACCESS_DTYPE), (REC_PLACE, ACCESS_DTYPE), (REC_NEST, NEST_DTYPE)):
        at = np.flatnonzero(types == rtype)
        types[at[lookup(ids, word_of_rows(rows, dtype, "call_id", at)) < 0]] = 0
    at = np.flatnonzero(types == REC_GPU)
    gpu = rows[at].view(GPU_DTYPE)[:, 0]
    t0 = index.header["t0_monotonic_ns"]
    gb = gpu["t_begin_ns"].astype(np.int64) - t0
    untimed = (gpu["kind"] == GPU_CORRELATION) | (gpu["kind"] == GPU_API)
    types[at[~(untimed | ((gb >= w.context_ns) & (gb < w.end_ns + tail_ns)))]] = 0
    return records_to_raw(rows, types, index.path, index.header, strict)


def _read_chunks(index: TraceIndex, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, types): the index's global records, then every record slot of the chunks at
    `positions` (ascending), as (n, 8) uint64 rows read straight into place; the type byte of each
    row, 0 for a chunk's header and whatever follows its first zero. Runs of adjacent chunks are
    read at once."""
    g = len(index.globals)
    n_slots = len(positions) * SLOTS_PER_CHUNK
    rows = np.empty((g + n_slots, RECORD_SIZE // 8), np.uint64)
    rows[:g] = index.globals.view(np.uint64)
    if len(positions):
        breaks = np.flatnonzero(np.diff(positions) != 1) + 1
        starts = np.r_[positions[0], positions[breaks]]
        counts = np.diff(np.r_[0, breaks, len(positions)])
        chunks = rows[g:].reshape(len(positions), SLOTS_PER_CHUNK, RECORD_SIZE // 8)
        body_size = index.size - HEADER_SIZE
        fd = os.open(index.path, os.O_RDONLY)
        try:
            at = 0
            for start, n in zip(starts.tolist(), counts.tolist()):
                _pread_chunks(fd, start, n, body_size, display_path(index.path), out=chunks[at:at + n])
                at += n
        finally:
            os.close(fd)
    types = rows.view(np.uint8)[:, 0].copy()
    slot_types = types[g:].reshape(len(positions), SLOTS_PER_CHUNK)
    slot_types[:, 1:] *= records_before_first_zero(slot_types[:, 1:])
    slot_types[:, 0] = 0  # the chunk headers
    return rows, types


def read_ahead(index: TraceIndex, plan: list, strict: bool = True, tail_ns: int = TAIL_NS):
    """(Window, its RawTrace) for each window of the plan, the next window read in a thread of its
    own while the caller works on this one (reading is mostly file reads and numpy, which let
    other threads run); in the calling thread when loads keep to one (GGML_TRACE_THREADS=1)."""
    if thread_count() == 1 or len(plan) < 2:
        for w in plan:
            yield w, read_window(index, w, strict, tail_ns)
        return
    with ThreadPoolExecutor(1, thread_name_prefix="ggml-trace-read-ahead") as reader:
        ahead = reader.submit(read_window, index, plan[0], strict, tail_ns)
        for i, w in enumerate(plan):
            raw = ahead.result()
            if i + 1 < len(plan):
                ahead = reader.submit(read_window, index, plan[i + 1], strict, tail_ns)
            yield w, raw
            del raw  # not held while the next window is read
