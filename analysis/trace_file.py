"""Low-level reader for ggml-trace binary files (format version 1, analysis/trace_format.py).

The file is mapped once and every step works on whole arrays; nothing here loops over records
or chunks. Record times are raw ticks of the writer's record clock; TickClock converts them.
The reader drives the record checks (checks.py) and a flight recorder's window (ring.py); those
import the format and the reader's data types (raw_trace.py), never this module.
"""
from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from .checks import Parts, check_header, check_records
from .columns import Columns
from .raw_trace import RawTrace
from .ring import bad_ring_chunks, claimed_after, cut_to_window, settled_blocks
from .trace_format import (
    ACCESS_DTYPE, ACCESS_PER_NODE, BACKEND_DTYPE, BUFFER_DTYPE, CALL_DTYPE, CHUNK_HEADER_DTYPE, CHUNK_MAGIC, CHUNK_SIZE,
    CLOCK_DTYPE, FILE_CLOSED, FILE_HEADER_DTYPE, FILE_MAGIC, FILE_RING, FILE_SNAPSHOT, FORMAT_VERSION,
    HEADER_SIZE, MAX_RECORD_TYPE, META_DTYPE, NONE32, REC_ACCESS, REC_BACKEND, REC_BUFFER, REC_CALL,
    REC_CLOCK, REC_CUDA, REC_GPU, REC_META, REC_NEST, REC_PLACE, REC_SAMPLE, REC_STRING, REC_THREAD, RECORD_DTYPES,
    RECORD_SIZE, SLOTS_PER_CHUNK, STRING_DTYPE, STRING_PIECE, THREAD_DTYPE, TraceFormatError,
)

COLUMNAR = (REC_CALL, REC_ACCESS, REC_PLACE)  # read into Columns; the other types stay records

INCOMPLETE_STRING = "<incomplete string>"


def parse_header(data: np.ndarray, path: str) -> dict:
    size = len(data)
    if size < FILE_HEADER_DTYPE.itemsize:
        raise TraceFormatError(
            f"{path}: file too small ({size} bytes) to be a ggml-trace file "
            f"(the header alone is {FILE_HEADER_DTYPE.itemsize} bytes)")
    magic = data[:8].tobytes()
    if magic != FILE_MAGIC:
        raise TraceFormatError(
            f"{path}: not a ggml-trace file (bad magic {magic!r}, expected {FILE_MAGIC!r})")
    h = data[:FILE_HEADER_DTYPE.itemsize].view(FILE_HEADER_DTYPE)[0]
    header = {
        "magic": magic,
        "version": int(h["version"]),
        "header_size": int(h["header_size"]),
        "record_size": int(h["record_size"]),
        "chunk_size": int(h["chunk_size"]),
        "t0_monotonic_ns": int(h["t0_monotonic_ns"]),
        "t0_realtime_ns": int(h["t0_realtime_ns"]),
        "t0_ticks": int(h["t0_ticks"]),
        "ns_per_tick": float(h["ns_per_tick"]),
        "pid": int(h["pid"]),
        "backend_api_version": int(h["backend_api_version"]),
        "hooks_build": bytes(h["hooks_build"]).split(b"\0", 1)[0].decode("utf-8", "replace"),
        "file_flags": int(h["file_flags"]),
        "ring_keep_ns": int(h["ring_keep_ns"]),
        "ring_max_bytes": int(h["ring_max_bytes"]),
        "snapshot_ns": int(h["snapshot_ns"]),
    }
    if header["version"] != FORMAT_VERSION:
        raise TraceFormatError(
            f"{path}: unsupported ggml-trace format version {header['version']} "
            f"(this loader reads version {FORMAT_VERSION})")
    for name, want in (("header_size", HEADER_SIZE), ("record_size", RECORD_SIZE),
                       ("chunk_size", CHUNK_SIZE)):
        if header[name] != want:
            raise TraceFormatError(
                f"{path}: corrupt header: {name} is {header[name]}, expected {want}")
    return header


def read_header(path: str | os.PathLike) -> dict:
    """The FileHeader of a trace file, validated as read_trace_file does, without the body."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = np.frombuffer(f.read(FILE_HEADER_DTYPE.itemsize), np.uint8)
    except OSError as e:
        raise TraceFormatError(f"{display_path(path)}: cannot read: {e}") from e
    return parse_header(data, display_path(path))


def records_before_first_zero(types: np.ndarray) -> np.ndarray:
    """Which record slots of chunks hold records, from their type bytes (chunks, slots 1..):
    the first zero ends a chunk, whatever follows it."""
    return ~np.logical_or.accumulate(types == 0, axis=1)


def _valid_record_mask(recs: np.ndarray, types: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which record slots hold records: slot >= 1 of a used chunk, before the chunk's first zero.

    Returns (mask over all slots, chunk header array of the used chunks)."""
    per_chunk = SLOTS_PER_CHUNK
    n = len(types)
    n_chunks = -(-n // per_chunk)
    # Slot 0 of every chunk is its header; every counted chunk has a whole header record.
    heads = recs[::per_chunk].view(CHUNK_HEADER_DTYPE)
    used = heads["magic"] == CHUNK_MAGIC
    # Pad the last (cut) chunk with zeros: they sit after the cut, so they end it harmlessly.
    padded = np.zeros(n_chunks * per_chunk, dtype=np.uint8)
    padded[:n] = types
    t2 = padded.reshape(n_chunks, per_chunk)
    mask = np.zeros((n_chunks, per_chunk), dtype=bool)
    mask[:, 1:] = records_before_first_zero(t2[:, 1:]) & used[:, None]
    return mask.reshape(-1)[:n], heads[used].copy()


def _without_chunks(valid, position, chunks, drop):
    """Leaves out the chunks `drop` (a mask over `chunks`, which sit at chunk `position`s of the
    body): their records are no longer valid. Returns (valid, position, chunks, records left out)."""
    per_chunk = SLOTS_PER_CHUNK
    slots = (position[drop][:, None] * per_chunk + np.arange(per_chunk)).reshape(-1)
    slots = slots[slots < len(valid)]
    lost = int(valid[slots].sum())
    valid = valid.copy()
    valid[slots] = False
    return valid, position[~drop], chunks[~drop], lost


def _leave_out_later_chunks(recs, types, valid, position, chunks, header, taken_ns):
    """A copy of a file being written: its chunks claimed after the copy began are left out."""
    clocks = recs[(types == REC_CLOCK) & valid].view(CLOCK_DTYPE)
    late = claimed_after(chunks, clocks, header, taken_ns)
    return _without_chunks(valid, position, chunks, late)[:3]


def _leave_out_bad_ring_chunks(raw, valid, position, strict):
    """A ring's chunks whose headers cannot place its window (ring.bad_ring_chunks): an error, or
    with strict=False left out as if recycled (the window then starts after them) and counted."""
    bad, problems = bad_ring_chunks(raw.chunks, HEADER_SIZE + position * CHUNK_SIZE, raw.header)
    if not problems:
        return valid
    valid, _, raw.chunks, lost = _without_chunks(valid, position, raw.chunks, bad)
    shown = display_path(raw.path)
    if strict:
        more = f" and {len(problems) - 1} more kind(s) of damage" if len(problems) > 1 else ""
        raise TraceFormatError(f"{shown}: {problems[0]}{more}: the flight recorder's window cannot be "
                               "placed; --lenient (strict=False) drops those chunks and loads the rest")
    for p in problems:
        raw.warnings.append(f"{shown}: {p} dropped")
        raw.damage.append(raw.warnings[-1])
    raw.warnings.append(f"{shown}: the {int(bad.sum())} dropped ring chunk(s) held {lost} record(s)")
    raw.damage.append(raw.warnings[-1])
    return valid


def chunk_bytes(records: np.ndarray, first_index: int = 0, thread: int = NONE32) -> np.ndarray:
    """Whole chunks (bytes) holding `records` (n 64-byte records, any dtype), owned by `thread`
    and numbered from first_index; the zeros after the last record end its chunk. The one chunk
    encoder of the Python writers (records appended after a run, windows, generated traces)."""
    recs = np.ascontiguousarray(records).view(np.uint8).reshape(-1, RECORD_SIZE)
    per = SLOTS_PER_CHUNK - 1
    n_chunks = -(-len(recs) // per)
    slots = np.zeros((n_chunks * (per + 1), RECORD_SIZE), np.uint8)
    heads = np.zeros(n_chunks, CHUNK_HEADER_DTYPE)
    heads["magic"] = CHUNK_MAGIC
    heads["thread"] = thread
    heads["chunk_index"] = first_index + np.arange(n_chunks)
    slots[:: per + 1] = heads.view(np.uint8).reshape(n_chunks, RECORD_SIZE)
    i = np.arange(len(recs))
    slots[(i // per) * (per + 1) + 1 + i % per] = recs
    return slots.reshape(-1)


def _assemble_strings(s: np.ndarray) -> dict[int, str]:
    """Join StringRec pieces into {id: text}; ids missing a piece map to INCOMPLETE_STRING."""
    s = s[s["id"] != 0]
    if len(s) == 0:
        return {}
    order = np.lexsort((s["piece"], s["id"]))
    ids, piece = s["id"][order], s["piece"][order]
    # Duplicate pieces are normal (two threads interning the same string): keep the first.
    keep = np.ones(len(ids), dtype=bool)
    keep[1:] = (ids[1:] != ids[:-1]) | (piece[1:] != piece[:-1])
    order, ids, piece = order[keep], ids[keep], piece[keep]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    uid = ids[starts]
    total = s["total_len"][order][starts].astype(np.int64)
    need = -(-total // STRING_PIECE)
    group = np.repeat(np.arange(len(uid)), np.diff(np.r_[starts, len(ids)]))
    # Pieces are unique and sorted per id, so "all of 0..need-1 present" == "need of them < need".
    in_range = piece < need[group]
    complete = np.bincount(group[in_range], minlength=len(uid)) == need

    rows = order[in_range]
    ln = np.minimum(s["len"][rows], STRING_PIECE).astype(np.int64)
    text = s["text"][rows]
    blob = text[np.arange(STRING_PIECE) < ln[:, None]].tobytes()
    nbytes = np.bincount(group[in_range], weights=ln, minlength=len(uid)).astype(np.int64)
    ends = np.cumsum(nbytes)
    begins = ends - nbytes
    ends = np.minimum(ends, begins + total)  # never longer than the declared length
    out: dict[int, str] = {}
    # One Python step per distinct string (not per record): building str objects needs it.
    for i, b, e, ok in zip(uid.tolist(), begins.tolist(), ends.tolist(), complete.tolist()):
        out[i] = blob[b:e].decode("utf-8", "replace") if ok else INCOMPLETE_STRING
    return out


def _damaged_chunks(recs: np.ndarray, types: np.ndarray) -> tuple[int, int, int]:
    """Chunks whose header is not CHUNK_MAGIC but whose first slot holds a record: the writer
    stores the magic before any record, so their header was damaged. Returns (chunks, records
    before each one's first zero, file offset of the first such chunk or -1)."""
    per_chunk = SLOTS_PER_CHUNK
    n_chunks = -(-len(types) // per_chunk)
    heads = recs[::per_chunk].view(CHUNK_HEADER_DTYPE)
    padded = np.zeros(n_chunks * per_chunk, dtype=np.uint8)
    padded[: len(types)] = types
    t2 = padded.reshape(n_chunks, per_chunk)
    bad = np.flatnonzero((heads["magic"] != CHUNK_MAGIC) & (t2[:, 1] != 0))
    if len(bad) == 0:
        return 0, 0, -1
    n_recs = int(records_before_first_zero(t2[bad, 1:]).sum())
    return len(bad), n_recs, HEADER_SIZE + int(bad[0]) * CHUNK_SIZE


def display_path(path) -> str:
    """A path as text that can always be printed and written (bytes that are not UTF-8 show
    as \\xNN escapes)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def read_trace_file(path: str | os.PathLike, strict: bool = True) -> RawTrace:
    """Read and validate a trace file; return its records grouped by type.

    Damage (records with an unknown type byte, chunks with a damaged header, records whose
    fields are out of range: analysis/checks.py, a ring's chunks whose ordinals or claim times
    cannot place its window: analysis/ring.py) raises TraceFormatError; strict=False drops
    those records instead, counts them and describes them in `warnings` and `damage`. A cut
    file and a file the writer never closed load either way, with a warning."""
    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
        # A read-only map is much cheaper than reading into fresh memory; every array kept
        # below is a copy, so the map is dropped when this function returns.
        data = (np.memmap(path, dtype=np.uint8, mode="r") if size
                else np.zeros(0, np.uint8))
    except OSError as e:
        raise TraceFormatError(f"{display_path(path)}: cannot read: {e}") from e
    header = parse_header(data, display_path(path))
    # A copy taken while the writer ran holds what was recorded before it began (analysis/ring.py).
    taken_ns = header["snapshot_ns"] if header["file_flags"] & FILE_SNAPSHOT else None
    if header["file_flags"] & FILE_RING and not header["file_flags"] & (FILE_CLOSED | FILE_SNAPSHOT):
        # A ring that may still be written: chunks can be recycled under the reader.
        taken_ns = time.monotonic_ns()
        with open(path, "rb") as f:
            data = np.concatenate([data[:HEADER_SIZE]] + [b for b, _ in settled_blocks(f.fileno())])
    return parse_trace_bytes(data, path, header, strict, taken_ns)


def parse_trace_bytes(data: np.ndarray, path: str, header: dict, strict: bool = True,
                      taken_ns: int | None = None) -> RawTrace:
    """read_trace_file's work on a file's bytes (header page included) already in `data`: the
    records grouped by type and checked. `taken_ns`: the bytes are a copy taken while the writer
    ran, from that CLOCK_MONOTONIC time on (chunks claimed later are left out)."""
    body = data[HEADER_SIZE:]
    n = len(body) // RECORD_SIZE  # a record cut by the end of the file is ignored
    recs = body[: n * RECORD_SIZE].view(np.dtype((np.void, RECORD_SIZE)))
    types = body[: n * RECORD_SIZE: RECORD_SIZE].copy() if n else np.zeros(0, np.uint8)
    raw = _empty_raw(path, header)
    raw.truncated = len(body) % CHUNK_SIZE != 0
    shown = display_path(path)
    if raw.truncated:
        raw.warnings.append(f"{shown}: the file ends inside a chunk (at byte {len(data)}): it was "
                            "cut (copied while being written, or a full disk); what followed is lost")
        raw.damage.append(raw.warnings[-1])
    if n == 0:
        return raw

    valid, raw.chunks = _valid_record_mask(recs, types)
    position = np.flatnonzero(recs[::SLOTS_PER_CHUNK].view(CHUNK_HEADER_DTYPE)["magic"] == CHUNK_MAGIC)
    if taken_ns:
        valid, position, raw.chunks = _leave_out_later_chunks(recs, types, valid, position, raw.chunks, header,
                                                              taken_ns)
    if header["file_flags"] & FILE_RING:
        valid = _leave_out_bad_ring_chunks(raw, valid, position, strict)
    n_bad, n_lost, at = _damaged_chunks(recs, types)
    if n_bad:
        msg = (f"{shown}: {n_bad} chunk(s) with a damaged header (first at file offset {at:#x}): "
               f"their {n_lost} record(s) are dropped")
        if strict:
            raise TraceFormatError(msg + "; --lenient (strict=False) loads the rest")
        raw.warnings.append(msg)
        raw.damage.append(msg)
    # The writer trims unused chunks when it closes the file: any left mean it never closed. A ring
    # has none to leave (it recycles them), nor a file that cannot shrink while mapped (Windows):
    # their header says whether it was closed.
    if header["file_flags"] & (FILE_RING | FILE_CLOSED):
        raw.closed = bool(header["file_flags"] & FILE_CLOSED)
    else:
        raw.closed = len(raw.chunks) + n_bad >= -(-n // SLOTS_PER_CHUNK)
    types = np.where(valid, types, 0).astype(np.uint8)
    _group_records(raw, recs.view(np.uint64).reshape(n, 8), types, strict)
    if header["file_flags"] & FILE_SNAPSHOT:
        raw.warnings.append(f"{shown}: a snapshot taken while the program ran; what it did "
                            "afterwards is not in it")
    elif not raw.closed:
        raw.warnings.append(f"{shown}: the trace was not closed: the program crashed, was killed "
                            "or is still running; events after the last recorded one are unknown")
    if header["file_flags"] & FILE_RING:
        raw.ring = cut_to_window(raw)
        raw.warnings.append(f"{shown}: {raw.ring.describe()}")  # what the views show is a window
    return raw


def records_to_raw(rows: np.ndarray, types: np.ndarray, path: str, header: dict, strict: bool = True) -> RawTrace:
    """A RawTrace of records already out of their chunks: `rows` (n, 8) uint64, one record a row,
    each thread's in the order it wrote them; `types` their type bytes, 0 for a row to leave out.
    The records are checked as a file's are (the chunks' own checks are the caller's: a window of
    a large trace, analysis/windows.py, had them from its index pass)."""
    raw = _empty_raw(path, header)
    if len(rows):
        _group_records(raw, rows, types, strict)
    return raw


def _empty_raw(path: str, header: dict) -> RawTrace:
    return RawTrace(path=path, header=header, chunks=np.zeros(0, CHUNK_HEADER_DTYPE),
                    string_recs=np.zeros(0, STRING_DTYPE), meta=np.zeros(0, META_DTYPE),
                    threads=np.zeros(0, THREAD_DTYPE), backends=np.zeros(0, BACKEND_DTYPE),
                    buffers=np.zeros(0, BUFFER_DTYPE), calls=Columns.of_records(np.zeros(0, CALL_DTYPE)),
                    accesses=Columns.of_records(np.zeros(0, ACCESS_DTYPE)),
                    places=Columns.of_records(np.zeros(0, ACCESS_DTYPE)),
                    clocks=np.zeros(0, CLOCK_DTYPE))


def _group_records(raw: RawTrace, rows: np.ndarray, types: np.ndarray, strict: bool) -> None:
    """Group the records (rows, with their type bytes; 0: no record) by type into `raw`, checking
    them (analysis/checks.py). A row's file offset is HEADER_SIZE + its row number * RECORD_SIZE."""
    shown = display_path(raw.path)
    header = raw.header
    unknown = types > MAX_RECORD_TYPE
    if unknown.any():
        where = np.flatnonzero(unknown)
        first = HEADER_SIZE + int(where[0]) * RECORD_SIZE
        msg = (f"{shown}: {len(where)} record(s) with an unknown type byte "
               f"(first: type {int(types[where[0]])} at file offset {first:#x})")
        if strict:
            raise TraceFormatError(msg + "; the file is corrupt or from a newer writer "
                                   "(--lenient, or strict=False, skips them)")
        raw.unknown_records = len(where)
        raw.warnings.append(msg + " dropped")
        raw.damage.append(raw.warnings[-1])

    slots = {}
    for rtype in RECORD_DTYPES:  # one pass per record type, not per record
        slots[rtype] = np.flatnonzero(types == rtype)
    checked = {rtype: Parts(Columns.of_rows(rows, RECORD_DTYPES[rtype], idx) if rtype in COLUMNAR
                            else rows[idx].view(RECORD_DTYPES[rtype])[:, 0], idx)
               for rtype, idx in slots.items()}
    for msg in check_header(header, shown, strict, checked):
        raw.warnings.append(msg)
        raw.damage.append(msg)
    problems = check_records(checked, header)
    if problems:
        msg = f"{shown}: {problems[0]}"
        if strict:
            more = f" and {len(problems) - 1} more kind(s) of damage" if len(problems) > 1 else ""
            raise TraceFormatError(f"{msg}{more}; --lenient (strict=False) drops them and loads the rest")
        for p in problems:
            raw.warnings.append(f"{shown}: {p} dropped")
            raw.damage.append(raw.warnings[-1])
    # a record array of each type, or its Columns for the columnar types
    parts: dict[int, Any] = {rtype: p.recs for rtype, p in checked.items()}
    raw.string_recs = parts[REC_STRING]
    raw.meta = parts[REC_META]
    raw.threads = parts[REC_THREAD]
    raw.backends = parts[REC_BACKEND]
    raw.buffers = parts[REC_BUFFER]
    raw.calls = parts[REC_CALL]
    raw.accesses = parts[REC_ACCESS]
    per_node = (raw.accesses["flags"] & ACCESS_PER_NODE) != 0
    if per_node.any():  # CUDA streams mode's reads node by node: a frame of their own (node_reads)
        raw.accesses, raw.node_reads = raw.accesses[~per_node], raw.accesses[per_node]
    raw.places = parts[REC_PLACE]
    raw.clocks = parts[REC_CLOCK]
    raw.gpu = parts[REC_GPU]
    raw.samples = parts[REC_SAMPLE]
    raw.nest = parts[REC_NEST]
    raw.cuda = parts[REC_CUDA]
    raw.strings = _assemble_strings(raw.string_recs)
