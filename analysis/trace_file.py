"""Low-level reader for ggml-trace binary files (format version 1).

The numpy dtypes below mirror native_hooks/trace_format.h byte for byte (little-endian, fields at
the offsets the C compiler gives them, 64-byte records). Change both together; docs/trace-format.md
describes the format.

The file is mapped once and every step works on whole arrays; nothing here loops over records
or chunks. Record times are raw ticks of the writer's record clock; TickClock converts them.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .columns import Columns

if TYPE_CHECKING:
    from .ring import RingWindow

FILE_MAGIC = b"GGMLTRC\0"
FORMAT_VERSION = 1
HEADER_SIZE = 4096
RECORD_SIZE = 64
CHUNK_SIZE = 64 * 1024
SLOTS_PER_CHUNK = CHUNK_SIZE // RECORD_SIZE  # slot 0 holds the chunk header
CHUNK_MAGIC = 0x4B4E4843  # "CHNK"
STRING_PIECE = 48
NONE32 = 0xFFFFFFFF
# FileHeader.file_flags and ChunkHeader.region (flight recorder: "Ring files" in the docs)
FILE_RING, FILE_CLOSED, FILE_SNAPSHOT = 0x1, 0x2, 0x4
CHUNK_RING, CHUNK_KEPT = 0, 1

# RecordType
REC_NONE, REC_STRING, REC_META, REC_THREAD, REC_BACKEND = 0, 1, 2, 3, 4
REC_BUFFER, REC_CALL, REC_ACCESS, REC_PLACE, REC_CLOCK = 5, 6, 7, 8, 9
REC_GPU, REC_SAMPLE, REC_NEST = 10, 11, 12
MAX_RECORD_TYPE = REC_NEST

# CallRec flags (trace_format.h CALL_*; bit 1 only for copies and backend allreduces)
CALL_FAILED, CALL_DECLINED, CALL_SCHED_PARALLEL, CALL_SYNC_COMPUTE = 0x01, 0x02, 0x04, 0x08
CALL_META_PARENT = 0x20  # a meta (tensor-parallel) backend's call
# device_exec flags: DeviceSource in bits 4-5, then the two bounds flags; delay flags: DelayWhere
DEVICE_SOURCE_SHIFT, DEVICE_START_ESTIMATED, DEVICE_END_LATE = 4, 0x40, 0x80
SRC_DEVICE, SRC_EVENTS, SRC_MARKERS = 0, 1, 2
DELAY_WHERE_SHIFT = 1
DELAY_HOST, DELAY_QUEUE, DELAY_STREAM = 0, 1, 2
# MetaRole of REC_NEST
META_ROLES = ["main", "zero", "copy", "reduce", "io", "sync", "other"]  # MetaRole 1..7

# GpuActivityKind (REC_GPU)
GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET, GPU_CORRELATION, GPU_API = 1, 2, 3, 4, 5

# AccessMode, BufferEvent
ACC_READ, ACC_WRITE = 1, 2
BUF_SEEN, BUF_ALLOCATED, BUF_FREED = 1, 2, 3

# CallKind values, named as the loader exposes them (CallKind without K_, lower case).
CALL_KINDS: dict[int, str] = {
    1: "sched_new", 2: "sched_free", 3: "sched_graph_compute", 4: "sched_alloc_graph",
    5: "sched_reserve", 6: "sched_synchronize", 7: "sched_reset",
    16: "graph_compute", 17: "cpy_tensor_async", 18: "set_tensor_async",
    19: "get_tensor_async", 20: "set_tensor_2d_async", 21: "get_tensor_2d_async",
    22: "synchronize", 23: "event_record", 24: "event_wait", 25: "comm_allreduce",
    32: "event_new", 33: "event_free", 34: "event_synchronize",
    48: "buf_set_tensor", 49: "buf_get_tensor", 50: "buf_set_tensor_2d",
    51: "buf_get_tensor_2d", 52: "buf_cpy_tensor", 53: "buf_memset_tensor", 54: "buf_clear",
    55: "buf_alloc", 56: "buf_free",
    64: "user_mark", 65: "user_range", 66: "host_write", 67: "host_write_inferred",
    80: "device_exec", 81: "delay",
}
KIND_IDS: dict[str, int] = {v: k for k, v in CALL_KINDS.items()}


class TraceFormatError(ValueError):
    """The file is not a readable ggml-trace file (or is corrupt in a way we refuse to guess at)."""


def _struct(itemsize: int, fields: list[tuple[str, str, int]]) -> np.dtype:
    """A packed little-endian record dtype; padding fields are left out, offsets keep the layout."""
    names, formats, offsets = zip(*fields)
    return np.dtype({"names": list(names), "formats": list(formats),
                     "offsets": list(offsets), "itemsize": itemsize})


FILE_HEADER_DTYPE = _struct(168, [
    ("magic", "S8", 0), ("version", "<u4", 8), ("header_size", "<u4", 12),
    ("record_size", "<u4", 16), ("chunk_size", "<u4", 20),
    ("t0_monotonic_ns", "<u8", 24), ("t0_realtime_ns", "<u8", 32),
    ("t0_ticks", "<u8", 40), ("ns_per_tick", "<f8", 48),
    ("pid", "<u4", 56), ("backend_api_version", "<u4", 60), ("hooks_build", "S64", 64),
    ("file_flags", "<u4", 128), ("ring_keep_ns", "<u8", 136), ("ring_max_bytes", "<u8", 144),
    ("snapshot_ns", "<u8", 152), ("hold_until_ns", "<u8", 160),
])

CHUNK_HEADER_DTYPE = _struct(64, [
    ("magic", "<u4", 0), ("thread", "<u4", 4), ("chunk_index", "<u8", 8),
    ("t_claim", "<u8", 16), ("ordinal", "<u4", 24), ("region", "u1", 28),  # pad[35] at 29
])

STRING_DTYPE = _struct(64, [
    ("type", "u1", 0), ("len", "u1", 1), ("piece", "<u2", 2), ("total_len", "<u4", 4),
    ("id", "<u8", 8), ("text", ("u1", (STRING_PIECE,)), 16),
])

META_DTYPE = _struct(64, [
    ("type", "u1", 0), ("thread", "<u4", 4), ("t", "<u8", 8),
    ("key", "<u8", 16), ("value", "<u8", 24),  # pad2[32] at 32
])

CLOCK_DTYPE = _struct(64, [
    ("type", "u1", 0), ("thread", "<u4", 4), ("ticks", "<u8", 8),
    ("monotonic_ns", "<u8", 16),  # pad2[40] at 24
])

THREAD_DTYPE = _struct(64, [
    ("type", "u1", 0), ("thread", "<u4", 4), ("t", "<u8", 8),
    ("os_tid", "<u8", 16), ("name", "<u8", 24),  # pad2[32] at 32
])

BACKEND_DTYPE = _struct(64, [
    ("type", "u1", 0), ("device_type", "u1", 1), ("has_async", "u1", 2), ("has_events", "u1", 3),
    ("backend", "<u4", 4), ("ptr", "<u8", 8), ("device_ptr", "<u8", 16), ("name", "<u8", 24),
    ("device_name", "<u8", 32), ("device_description", "<u8", 40), ("t", "<u8", 48),
    ("reserved", "<u8", 56),
])

BUFFER_DTYPE = _struct(64, [
    ("type", "u1", 0), ("event", "u1", 1), ("usage", "u1", 2), ("is_host", "u1", 3),
    ("thread", "<u4", 4), ("t", "<u8", 8), ("ptr", "<u8", 16), ("base", "<u8", 24),
    ("size", "<u8", 32), ("buft_name", "<u8", 40), ("device_ptr", "<u8", 48),
    ("reserved", "<u8", 56),
])

CALL_DTYPE = _struct(64, [
    ("type", "u1", 0), ("kind", "u1", 1), ("sched", "u1", 2), ("flags", "u1", 3),
    ("thread", "<u4", 4), ("t_begin", "<u8", 8), ("t_end", "<u8", 16), ("call_id", "<u8", 24),
    ("backend", "<u4", 32), ("backend2", "<u4", 36), ("graph", "<u4", 40), ("split", "<i4", 44),
    ("obj", "<u8", 48), ("arg", "<u8", 56),
])

# Used for REC_ACCESS and REC_PLACE.
ACCESS_DTYPE = _struct(64, [
    ("type", "u1", 0), ("mode", "u1", 1), ("thread", "<u4", 4), ("call_id", "<u8", 8),
    ("buffer", "<u8", 16), ("offset", "<u8", 24), ("size", "<u8", 32), ("tensor", "<u8", 40),
    ("node", "<u8", 48), ("op", "<u4", 56), ("index", "<u4", 60),
])

# Times in GPU and SAMPLE records are CLOCK_MONOTONIC ns, not ticks.
GPU_DTYPE = _struct(64, [
    ("type", "u1", 0), ("kind", "u1", 1), ("copy_kind", "u1", 2), ("device", "<u4", 4),
    ("t_begin_ns", "<u8", 8), ("t_end_ns", "<u8", 16), ("correlation", "<u4", 24),
    ("stream", "<u4", 28), ("name", "<u8", 32), ("bytes", "<u8", 40),
    ("reserved", ("<u8", (2,)), 48),
])

SAMPLE_DTYPE = _struct(64, [
    ("type", "u1", 0), ("device", "<u4", 4), ("t_ns", "<u8", 8), ("metric", "<u8", 16),
    ("value", "<f8", 24),  # pad2[32] at 32
])

NEST_DTYPE = _struct(64, [
    ("type", "u1", 0), ("role", "u1", 1), ("device", "u1", 2), ("thread", "<u4", 4),
    ("call_id", "<u8", 8), ("parent", "<u8", 16), ("meta_backend", "<u4", 24),
    ("subgraph", "<i4", 28),  # pad2[32] at 32
])

RECORD_DTYPES = {
    REC_STRING: STRING_DTYPE, REC_META: META_DTYPE, REC_THREAD: THREAD_DTYPE,
    REC_BACKEND: BACKEND_DTYPE, REC_BUFFER: BUFFER_DTYPE, REC_CALL: CALL_DTYPE,
    REC_ACCESS: ACCESS_DTYPE, REC_PLACE: ACCESS_DTYPE, REC_CLOCK: CLOCK_DTYPE,
    REC_GPU: GPU_DTYPE, REC_SAMPLE: SAMPLE_DTYPE, REC_NEST: NEST_DTYPE,
}

COLUMNAR = (REC_CALL, REC_ACCESS, REC_PLACE)  # read into Columns; the other types stay records

INCOMPLETE_STRING = "<incomplete string>"


@dataclass
class RawTrace:
    """Everything in a trace file, by record type: numpy structured arrays, and for the types
    COLUMNAR names (calls, accesses, placements) Columns indexed the same way."""
    path: str
    header: dict
    chunks: np.ndarray          # CHUNK_HEADER_DTYPE, the used chunks in file order
    string_recs: np.ndarray     # STRING_DTYPE
    meta: np.ndarray            # META_DTYPE
    threads: np.ndarray         # THREAD_DTYPE
    backends: np.ndarray        # BACKEND_DTYPE
    buffers: np.ndarray         # BUFFER_DTYPE
    calls: Columns              # CALL_DTYPE (the most numerous types are held as columns)
    accesses: Columns           # ACCESS_DTYPE
    places: Columns             # ACCESS_DTYPE
    clocks: np.ndarray          # CLOCK_DTYPE
    gpu: np.ndarray = field(default_factory=lambda: np.zeros(0, GPU_DTYPE))
    samples: np.ndarray = field(default_factory=lambda: np.zeros(0, SAMPLE_DTYPE))
    nest: np.ndarray = field(default_factory=lambda: np.zeros(0, NEST_DTYPE))
    strings: dict[int, str] = field(default_factory=dict)
    truncated: bool = False     # the body is not a whole number of chunks (file was cut)
    unknown_records: int = 0    # records with an unknown type byte dropped (strict=False)
    warnings: list[str] = field(default_factory=list)
    damage: list[str] = field(default_factory=list)  # the warnings that say data was lost
    closed: bool = True         # no unused chunks: the writer closed (trimmed) the file
    ring: "RingWindow | None" = None  # a flight recorder's file: the window it holds (analysis/ring.py)

    @property
    def n_records(self) -> int:
        return sum(len(a) for a in (self.string_recs, self.meta, self.threads, self.backends,
                                    self.buffers, self.calls, self.accesses, self.places,
                                    self.clocks, self.gpu, self.samples))

    def clock(self) -> "TickClock":
        return TickClock.from_trace(self.header, self.clocks)


@dataclass
class TickClock:
    """Converts record times (ticks) to nanoseconds since the header's t0_monotonic_ns.

    Calibration points are the header's (t0_ticks, t0_monotonic_ns) and every CLOCK record's
    (ticks, monotonic_ns). Between two points times are interpolated linearly; outside them
    they are extrapolated with the slope over all points (the header's ns_per_tick when there
    is a single point)."""
    ticks: np.ndarray   # int64, ascending
    ns: np.ndarray      # int64, ns since t0_monotonic_ns, ascending
    slope: np.ndarray   # float64 ns per tick of each segment (len(ticks) - 1)
    edge_slope: float

    @classmethod
    def from_trace(cls, header: dict, clocks: np.ndarray) -> "TickClock":
        t0 = header["t0_monotonic_ns"]
        ticks = np.r_[np.int64(header["t0_ticks"]), clocks["ticks"].astype(np.int64)]
        ns = np.r_[np.int64(0), clocks["monotonic_ns"].astype(np.int64) - np.int64(t0)]
        order = np.lexsort((ns, ticks))
        ticks, ns = ticks[order], ns[order]
        # Keep a strictly increasing chain: a point not later in both clocks is a bad sample.
        keep = np.ones(len(ticks), bool)
        keep[1:] = (ns[1:] > np.maximum.accumulate(ns)[:-1]) & (ticks[1:] > ticks[:-1])
        ticks, ns = ticks[keep], ns[keep]
        slope = np.diff(ns) / np.diff(ticks).astype(np.float64)
        if len(ticks) > 1:
            edge = float(ns[-1] - ns[0]) / float(ticks[-1] - ticks[0])
        else:
            edge = float(header["ns_per_tick"])
            if not np.isfinite(edge) or edge <= 0:
                edge = 1.0  # no usable calibration: take ticks as nanoseconds
        return cls(ticks, ns, slope, edge)

    def to_ns(self, ticks: np.ndarray) -> np.ndarray:
        t = np.asarray(ticks).astype(np.int64)
        n = len(self.ticks)
        if n == 1:
            return self.ns[0] + np.rint((t - self.ticks[0]) * self.edge_slope).astype(np.int64)
        i = np.searchsorted(self.ticks, t, side="right") - 1  # segment; -1 / n-1: outside
        base = np.clip(i, 0, n - 1)
        inside = (i >= 0) & (i < n - 1)
        slope = np.where(inside, self.slope[np.clip(i, 0, n - 2)], self.edge_slope)
        return self.ns[base] + np.rint((t - self.ticks[base]) * slope).astype(np.int64)


def _parse_header(data: np.ndarray, path: str) -> dict:
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
    return _parse_header(data, display_path(path))


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
    t2 = np.zeros(n_chunks * per_chunk, dtype=np.uint8)
    t2[:n] = types
    t2 = t2.reshape(n_chunks, per_chunk)
    mask = np.zeros((n_chunks, per_chunk), dtype=bool)
    mask[:, 1:] = records_before_first_zero(t2[:, 1:]) & used[:, None]
    return mask.reshape(-1)[:n], heads[used].copy()


def _leave_out_later_chunks(recs, types, valid, chunks, header, taken_ns):
    """A copy of a file being written: its chunks claimed after the copy began are left out."""
    from .ring import claimed_after

    clocks = recs[(types == REC_CLOCK) & valid].view(CLOCK_DTYPE)
    late = claimed_after(chunks, clocks, header, taken_ns)
    if not late.any():
        return valid, chunks
    per_chunk = SLOTS_PER_CHUNK
    position = np.flatnonzero(recs[::per_chunk].view(CHUNK_HEADER_DTYPE)["magic"] == CHUNK_MAGIC)[late]
    slots = (position[:, None] * per_chunk + np.arange(per_chunk)).reshape(-1)
    valid = valid.copy()
    valid[slots[slots < len(valid)]] = False
    return valid, chunks[~late]


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
    t2 = np.zeros(n_chunks * per_chunk, dtype=np.uint8)
    t2[: len(types)] = types
    t2 = t2.reshape(n_chunks, per_chunk)
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
    fields are out of range: analysis/checks.py) raises TraceFormatError; strict=False drops
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
    header = _parse_header(data, display_path(path))
    # A copy taken while the writer ran holds what was recorded before it began (analysis/ring.py).
    taken_ns = header["snapshot_ns"] if header["file_flags"] & FILE_SNAPSHOT else None
    if header["file_flags"] & FILE_RING and not header["file_flags"] & (FILE_CLOSED | FILE_SNAPSHOT):
        # A ring that may still be written: chunks can be recycled under the reader.
        from .ring import settled_blocks

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
    if taken_ns:
        valid, raw.chunks = _leave_out_later_chunks(recs, types, valid, raw.chunks, header, taken_ns)
    n_bad, n_lost, at = _damaged_chunks(recs, types)
    if n_bad:
        msg = (f"{shown}: {n_bad} chunk(s) with a damaged header (first at file offset {at:#x}): "
               f"their {n_lost} record(s) are dropped")
        if strict:
            raise TraceFormatError(msg + "; --lenient (strict=False) loads the rest")
        raw.warnings.append(msg)
        raw.damage.append(msg)
    # The writer trims unused chunks when it closes the file: any left mean it never closed. A ring
    # has none to leave (it recycles them): its header says whether it was closed.
    if header["file_flags"] & FILE_RING:
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
        from .ring import cut_to_window

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

    from .checks import Parts, check_header, check_records

    slots = {}
    for rtype, dtype in RECORD_DTYPES.items():  # one pass per record type, not per record
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
    parts = {rtype: p.recs for rtype, p in checked.items()}
    raw.string_recs = parts[REC_STRING]
    raw.meta = parts[REC_META]
    raw.threads = parts[REC_THREAD]
    raw.backends = parts[REC_BACKEND]
    raw.buffers = parts[REC_BUFFER]
    raw.calls = parts[REC_CALL]
    raw.accesses = parts[REC_ACCESS]
    raw.places = parts[REC_PLACE]
    raw.clocks = parts[REC_CLOCK]
    raw.gpu = parts[REC_GPU]
    raw.samples = parts[REC_SAMPLE]
    raw.nest = parts[REC_NEST]
    raw.strings = _assemble_strings(raw.string_recs)
