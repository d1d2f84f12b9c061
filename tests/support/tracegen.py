"""A small Python writer of the ggml-trace binary format, for tests and benchmarks.

It lays records out the way the C++ writer does (native_hooks/trace_format.h): a 4096-byte file
header, then 64 KiB chunks, each owned by one thread: a chunk header and up to 1023 records,
zero padding after the last record, optionally extra all-zero (pre-extended) chunks at the end.

Times passed to the builder are nanoseconds since the trace start (t0). Records store ticks of
the record clock, as the writer does: by default a TSC-like clock of 2 ticks per ns starting at
t0_ticks, so every test goes through the loader's tick -> ns conversion.
"""
from __future__ import annotations

import numpy as np

from ggml_trace.analysis.trace_format import (
    ACC_READ, ACC_WRITE, ACCESS_DTYPE, BACKEND_DTYPE, BUF_ALLOCATED, BUFFER_DTYPE, CALL_DTYPE,
    CHUNK_HEADER_DTYPE, CHUNK_MAGIC, CHUNK_SIZE, CLOCK_DTYPE, CUDA_DTYPE, CUDA_OPS, FILE_HEADER_DTYPE, FILE_MAGIC,
    FORMAT_VERSION, HEADER_SIZE, KIND_IDS, META_DTYPE, NONE32, REC_ACCESS, REC_BACKEND,
    REC_BUFFER, REC_CALL, REC_CLOCK, REC_CUDA, REC_META, REC_PLACE, REC_STRING, REC_THREAD, RECORD_SIZE,
    STRING_DTYPE, STRING_PIECE, THREAD_DTYPE,
)

RECORDS_PER_CHUNK = CHUNK_SIZE // RECORD_SIZE - 1  # slot 0 is the chunk header
DEFAULT_T0 = 1_000_000_000_000
MASK64 = (1 << 64) - 1


def string_id(data: bytes) -> int:
    """The string id the C++ writer uses (native_hooks/trace_writer.cpp string_id): a
    word-at-a-time multiply-xorshift hash; 0 for the empty string, never 0 otherwise."""
    n = len(data)
    if n == 0:
        return 0
    h = 0x9E3779B97F4A7C15 ^ n
    i = 0
    while i + 8 <= n:
        h = ((h ^ int.from_bytes(data[i:i + 8], "little")) * 0xFF51AFD7ED558CCD) & MASK64
        h ^= h >> 32
        i += 8
    if i < n:
        h = ((h ^ int.from_bytes(data[i:], "little")) * 0xC4CEB9FE1A85EC53) & MASK64
        h ^= h >> 29
    h = (h * 0xFF51AFD7ED558CCD) & MASK64
    h ^= h >> 33
    return h or 1


def _as_bytes(s: str | bytes) -> bytes:
    return s if isinstance(s, bytes) else s.encode("utf-8")


def _kind(kind: str | int) -> int:
    return KIND_IDS[kind] if isinstance(kind, str) else int(kind)


def _none32(v) -> int:
    return NONE32 if v is None else int(v)


class TraceBuilder:
    """Collects records (one by one or as whole arrays) and writes a trace file."""

    def __init__(self, t0_monotonic_ns: int = DEFAULT_T0, t0_ticks: int = 7 * 10**12,
                 ticks_per_ns: int = 2, header_ns_per_tick: float | None = None,
                 t0_realtime_ns: int = 1_700_000_000 * 10**9, pid: int = 4242,
                 backend_api_version: int = 2, hooks_build: str = "test"):
        self.t0 = t0_monotonic_ns
        self.t0_ticks = t0_ticks
        self.ticks_per_ns = ticks_per_ns
        # What the header claims (the writer's 2 ms calibration may be a little off).
        self.header_ns_per_tick = (1 / ticks_per_ns if header_ns_per_tick is None
                                   else header_ns_per_tick)
        self.t0_realtime_ns = t0_realtime_ns
        self.pid = pid
        self.backend_api_version = backend_api_version
        self.hooks_build = hooks_build
        self._parts: list[tuple[np.ndarray, np.ndarray]] = []  # (records as (k,64) u1, stream)
        self._strings: dict[bytes, int] = {}
        self._counters: dict[int, int] = {}

    def tick(self, t):
        """Record-clock ticks of time t (ns since t0; scalar or array)."""
        return self.t0_ticks + np.asarray(t, dtype=np.int64) * self.ticks_per_ns

    # -- raw records -------------------------------------------------------------------------
    def add_records(self, recs: np.ndarray, stream) -> None:
        """Append a structured array of 64-byte records; stream = thread index (scalar/array)."""
        recs = np.ascontiguousarray(recs)
        assert recs.dtype.itemsize == RECORD_SIZE
        stream = np.broadcast_to(np.asarray(stream, dtype=np.int64), (len(recs),))
        self._parts.append((recs.view(np.uint8).reshape(len(recs), RECORD_SIZE), stream))

    def raw(self, data: bytes, thread: int = 0) -> None:
        """Append one record given as raw bytes (padded to 64), e.g. junk for tests."""
        rec = np.zeros(1, np.dtype((np.void, RECORD_SIZE)))
        rec.view(np.uint8)[: len(data)] = np.frombuffer(data, np.uint8)
        self.add_records(rec, thread)

    def _one(self, dtype: np.dtype, stream: int, /, **fields) -> None:
        rec = np.zeros(1, dtype)
        for k, v in fields.items():
            rec[k] = v
        self.add_records(rec, stream)

    # -- typed records -----------------------------------------------------------------------
    def add_string(self, s: str | bytes | None, thread: int = 0, force: bool = False) -> int:
        """Intern a string (pieces of 48 bytes); returns its id. None or "" -> 0 (no string)."""
        if s is None:
            return 0
        data = _as_bytes(s)
        sid = string_id(data)
        if sid == 0 or (data in self._strings and not force):
            return sid
        self._strings[data] = sid
        n_pieces = -(-len(data) // STRING_PIECE)
        recs = np.zeros(n_pieces, STRING_DTYPE)
        recs["type"] = REC_STRING
        recs["piece"] = np.arange(n_pieces)
        recs["total_len"] = len(data)
        recs["id"] = sid
        padded = np.zeros(n_pieces * STRING_PIECE, np.uint8)
        padded[: len(data)] = np.frombuffer(data, np.uint8)
        recs["text"] = padded.reshape(n_pieces, STRING_PIECE)
        recs["len"] = np.minimum(len(data) - recs["piece"].astype(np.int64) * STRING_PIECE,
                                 STRING_PIECE)
        self.add_records(recs, thread)
        return sid

    def _sid(self, s, thread: int) -> int:
        """A string argument: str/bytes are interned, ints are taken as ids already."""
        if s is None or isinstance(s, (int, np.integer)):
            return int(s or 0)
        return self.add_string(s, thread)

    def clock(self, t: int, thread: int = 0, ticks: int | None = None) -> None:
        """A CLOCK record pairing ticks (default: the builder's clock at t) with t0 + t."""
        self._one(CLOCK_DTYPE, thread, type=REC_CLOCK, thread=thread,
                  ticks=self.tick(t) if ticks is None else ticks, monotonic_ns=self.t0 + t)

    def meta(self, key, value, t: int = 0, thread: int = 0) -> None:
        self._one(META_DTYPE, thread, type=REC_META, thread=thread, t=self.tick(t),
                  key=self._sid(key, thread), value=self._sid(value, thread))

    def thread(self, thread: int, os_tid: int = 0, name=None, t: int = 0) -> None:
        self._one(THREAD_DTYPE, thread, type=REC_THREAD, thread=thread, t=self.tick(t),
                  os_tid=os_tid or 1000 + thread, name=self._sid(name, thread))

    def backend(self, backend: int, name, device_name=None, device_description=None,
                device_type: int = 0, has_async: bool = False, has_events: bool = False,
                ptr: int | None = None, device_ptr: int | None = None, t: int = 0,
                thread: int = 0) -> None:
        self._one(BACKEND_DTYPE, thread, type=REC_BACKEND, device_type=device_type,
                  has_async=has_async, has_events=has_events, backend=backend,
                  ptr=0x7000_0000 + 0x100 * backend if ptr is None else ptr,
                  device_ptr=0x6000_0000 + 0x100 * backend if device_ptr is None else device_ptr,
                  name=self._sid(name, thread), device_name=self._sid(device_name, thread),
                  device_description=self._sid(device_description, thread), t=self.tick(t))

    def buffer(self, ptr: int, event: int = BUF_ALLOCATED, base: int = 0, size: int = 0,
               usage: int = 0, is_host: bool = False, buft_name=None, device_ptr: int = 0,
               t: int = 0, thread: int = 0) -> None:
        self._one(BUFFER_DTYPE, thread, type=REC_BUFFER, event=event, usage=usage,
                  is_host=is_host, thread=thread, t=self.tick(t), ptr=ptr, base=base, size=size,
                  buft_name=self._sid(buft_name, thread), device_ptr=device_ptr)

    def call(self, kind, t_begin: int, t_end: int | None = None, thread: int = 0,
             backend: int | None = None, backend2: int | None = None, sched: int | None = None,
             graph: int | None = None, split: int | None = None, obj=0, arg: int = 0,
             flags: int = 0, call_id: int | None = None) -> int:
        if call_id is None:
            self._counters[thread] = self._counters.get(thread, 0) + 1
            call_id = (thread << 40) | self._counters[thread]
        obj = self._sid(obj, thread) if isinstance(obj, (str, bytes)) else obj
        self._one(CALL_DTYPE, thread, type=REC_CALL, kind=_kind(kind),
                  sched=0xFF if sched is None else sched, flags=flags, thread=thread,
                  t_begin=self.tick(t_begin), t_end=self.tick(t_begin if t_end is None else t_end),
                  call_id=call_id, backend=_none32(backend), backend2=_none32(backend2),
                  graph=_none32(graph), split=-1 if split is None else split, obj=obj, arg=arg)
        return call_id

    def _access(self, rtype: int, call_id: int, mode: int, buffer: int, offset: int, size: int,
                tensor, node, op: int, index: int | None, thread: int | None, flags: int = 0) -> None:
        if thread is None:
            thread = call_id >> 40
        tid = self._sid(tensor, thread)
        nid = tid if node is None else self._sid(node, thread)
        self._one(ACCESS_DTYPE, thread, type=rtype, mode=mode, flags=flags, thread=thread, call_id=call_id,
                  buffer=buffer, offset=offset, size=size, tensor=tid, node=nid, op=op,
                  index=_none32(index))

    def access(self, call_id: int, mode="read", buffer: int = 0, offset: int = 0, size: int = 0,
               tensor=None, node=None, op: int = 0, index: int | None = None,
               thread: int | None = None, flags: int = 0) -> None:
        m = {"read": ACC_READ, "write": ACC_WRITE}.get(mode, mode)
        self._access(REC_ACCESS, call_id, m, buffer, offset, size, tensor, node, op, index, thread, flags)

    def cuda(self, op: str, t: int, thread: int = 0, call_id: int = 0, stream: int = 0, handle: int = 0,
             src: int = 0, name=None, node: int | None = None, device: int = 0, flags: int = 0) -> None:
        """A CUDA streams mode record (REC_CUDA): `op` as the loader names it (launch, event_record, ...);
        `name` a kernel's name (a launch) or bytes (a copy, a memset)."""
        code = {v: k for k, v in CUDA_OPS.items()}[op]
        name_field = name if isinstance(name, (int, np.integer)) else self._sid(name, thread)
        self._one(CUDA_DTYPE, thread, type=REC_CUDA, op=code, flags=flags, thread=thread, t=self.tick(t),
                  call_id=call_id, stream=stream, handle=handle, src=src, name=name_field,
                  node=_none32(node), device=device)

    def place(self, call_id: int, buffer: int, offset: int = 0, size: int = 0, tensor=None,
              op: int = 0, index: int | None = None, thread: int | None = None) -> None:
        self._access(REC_PLACE, call_id, 0, buffer, offset, size, tensor, None, op, index, thread)

    # -- output ------------------------------------------------------------------------------
    def header_bytes(self) -> bytes:
        h = np.zeros(1, FILE_HEADER_DTYPE)
        h["magic"] = FILE_MAGIC
        h["version"] = FORMAT_VERSION
        h["header_size"] = HEADER_SIZE
        h["record_size"] = RECORD_SIZE
        h["chunk_size"] = CHUNK_SIZE
        h["t0_monotonic_ns"] = self.t0
        h["t0_realtime_ns"] = self.t0_realtime_ns
        h["t0_ticks"] = self.t0_ticks
        h["ns_per_tick"] = self.header_ns_per_tick
        h["pid"] = self.pid
        h["backend_api_version"] = self.backend_api_version
        h["hooks_build"] = self.hooks_build.encode()
        out = np.zeros(HEADER_SIZE, np.uint8)
        out[: FILE_HEADER_DTYPE.itemsize] = h.view(np.uint8)
        return out.tobytes()

    def write(self, path, threads: int | None = None, extra_zero_chunks: int = 0) -> np.ndarray:
        """Write the file. threads=N folds record streams onto N writer threads (thread % N).

        Returns the file offset of every record, in the order the records were added."""
        if self._parts:
            recs = np.concatenate([p[0] for p in self._parts])
            stream = np.concatenate([p[1] for p in self._parts])
        else:
            recs, stream = np.zeros((0, RECORD_SIZE), np.uint8), np.zeros(0, np.int64)
        if threads is not None:
            stream = stream % threads
        body, offsets = layout_chunks(recs, stream, extra_zero_chunks)
        with open(path, "wb") as f:
            f.write(self.header_bytes())
            body.tofile(f)
        return offsets


def layout_chunks(recs: np.ndarray, stream: np.ndarray, extra_zero_chunks: int = 0):
    """Pack (n,64) records into per-stream chunks, interleaved round robin like concurrent
    threads would claim them. Returns (body as uint8 array, file offset of each record)."""
    n = len(recs)
    order = np.argsort(stream, kind="stable")  # keep each stream's records in order
    s_sorted = stream[order]
    uniq, first, counts = np.unique(s_sorted, return_index=True, return_counts=True)
    pos_in_stream = np.arange(n) - np.repeat(first, counts)
    local_chunk = pos_in_stream // RECORDS_PER_CHUNK
    n_chunks_per = -(-counts // RECORDS_PER_CHUNK)
    # Chunks of all streams: (stream rank, local chunk j); file order = round robin by j.
    ch_stream = np.repeat(np.arange(len(uniq)), n_chunks_per)
    ch_local = np.arange(len(ch_stream)) - np.repeat(np.cumsum(n_chunks_per) - n_chunks_per,
                                                     n_chunks_per)
    file_order = np.lexsort((ch_stream, ch_local))
    file_pos = np.empty(len(file_order), np.int64)
    file_pos[file_order] = np.arange(len(file_order))
    chunk_first = np.cumsum(n_chunks_per) - n_chunks_per  # first global chunk of each stream
    rank = np.repeat(np.arange(len(uniq)), counts)
    rec_chunk = file_pos[chunk_first[rank] + local_chunk]
    slot = 1 + pos_in_stream % RECORDS_PER_CHUNK

    n_chunks = len(ch_stream) + extra_zero_chunks
    per_chunk = RECORDS_PER_CHUNK + 1
    # Whole 64-byte records are moved as single void items (much faster than (n,64) rows).
    void = np.dtype((np.void, RECORD_SIZE))
    body = np.zeros(n_chunks * per_chunk * RECORD_SIZE, np.uint8)
    slots = body.view(void)
    heads = np.zeros(len(ch_stream), CHUNK_HEADER_DTYPE)
    heads["magic"] = CHUNK_MAGIC
    heads["thread"] = uniq[ch_stream]
    heads["chunk_index"] = file_pos
    slots[file_pos * per_chunk] = heads.view(void)
    dest = rec_chunk * per_chunk + slot
    slots[dest] = np.ascontiguousarray(recs).view(void).reshape(-1)[order]
    offsets = np.empty(n, np.int64)
    offsets[order] = HEADER_SIZE + dest * RECORD_SIZE
    return body, offsets


# -- synthetic traces for benchmarks ----------------------------------------------------------

SYNTH_KINDS = ["graph_compute", "cpy_tensor_async", "synchronize", "event_record", "event_wait",
               "buf_set_tensor", "cpy_tensor_async", "graph_compute"]


def synth_trace(path, n_events: int, threads: int = 4, accesses_per_call: int = 4,
                n_tensors: int = 2000, seed: int = 0) -> int:
    """Write a synthetic trace of about n_events calls + accesses, fully vectorised.

    Two backends (gpu 0, cpu 1), one weight and one compute buffer per backend, a host buffer;
    calls cycle through SYNTH_KINDS, each with `accesses_per_call` accesses, 5% of them given
    as raw host addresses. Returns the number of call + access records written."""
    rng = np.random.default_rng(seed)
    b = TraceBuilder()
    for t in range(threads):
        b.thread(t, name=f"worker-{t}")
    b.meta("model", "synthetic.gguf")
    for t in range(0, n_events * 200 + 1, 50_000_000):  # a CLOCK record every 50 ms
        b.clock(t)
    b.backend(0, "CUDA0", "CUDA0", "Synthetic GPU", device_type=1, has_async=True,
              has_events=True)
    b.backend(1, "CPU", "CPU", "Synthetic CPU", device_type=0)
    gpu_dev, cpu_dev = 0x6000_0000, 0x6000_0100
    bufs = [  # ptr, base, size, usage, is_host, device
        (0xA000, 0x7F00_0000_0000, 1 << 30, 1, False, gpu_dev),
        (0xA100, 0x7F10_0000_0000, 1 << 28, 2, False, gpu_dev),
        (0xB000, 0x5500_0000_0000, 1 << 30, 1, True, cpu_dev),
        (0xB100, 0x5510_0000_0000, 1 << 28, 2, True, cpu_dev),
    ]
    for ptr, base, size, usage, host, dev in bufs:
        b.buffer(ptr, base=base, size=size, usage=usage, is_host=host,
                 buft_name="CUDA0" if dev == gpu_dev else "CPU", device_ptr=dev)
    tensor_ids = np.array([b.add_string(f"blk.{i // 10}.t{i}") for i in range(n_tensors)],
                          np.uint64)

    n_calls = max(1, n_events // (1 + accesses_per_call))
    n_acc = n_calls * accesses_per_call
    kinds = np.array([KIND_IDS[k] for k in SYNTH_KINDS], np.uint8)
    calls = np.zeros(n_calls, CALL_DTYPE)
    i = np.arange(n_calls, dtype=np.int64)
    thread = (i % threads).astype(np.uint32)
    calls["type"] = REC_CALL
    calls["kind"] = kinds[i % len(kinds)]
    calls["sched"] = 0
    calls["thread"] = thread
    t_begin = i * 1000 + rng.integers(0, 100, n_calls)
    calls["t_begin"] = b.tick(t_begin)
    calls["t_end"] = b.tick(t_begin + 50 + rng.integers(0, 800, n_calls))
    calls["call_id"] = (thread.astype(np.uint64) << np.uint64(40)) | (i // threads + 1).astype(
        np.uint64)
    calls["backend"] = (i // len(kinds)) % 2
    calls["backend2"] = NONE32
    calls["graph"] = i // 64
    calls["split"] = (i // len(kinds)) % 4
    calls["arg"] = rng.integers(1, 1 << 20, n_calls)

    acc = np.zeros(n_acc, ACCESS_DTYPE)
    ci = np.repeat(i, accesses_per_call)
    acc["type"] = REC_ACCESS
    acc["mode"] = np.where(np.arange(n_acc) % 2 == 0, ACC_READ, ACC_WRITE)
    acc["thread"] = thread[ci]
    acc["call_id"] = calls["call_id"][ci]
    which = rng.integers(0, len(bufs), n_acc)
    ptrs = np.array([x[0] for x in bufs], np.uint64)
    bases = np.array([x[1] for x in bufs], np.uint64)
    off = rng.integers(0, 1 << 26, n_acc).astype(np.uint64)
    host = (rng.random(n_acc) < 0.05) & (which >= 2)  # raw host addresses in host buffers
    acc["buffer"] = np.where(host, np.uint64(0), ptrs[which])
    acc["offset"] = np.where(host, bases[which] + off, off)
    acc["size"] = rng.integers(1, 1 << 16, n_acc)
    tens = tensor_ids[rng.integers(0, n_tensors, n_acc)]
    acc["tensor"] = tens
    acc["node"] = tens
    acc["op"] = rng.integers(0, 80, n_acc)
    acc["index"] = np.arange(n_acc) % 1000
    b.add_records(calls, calls["thread"])
    b.add_records(acc, acc["thread"])
    b.write(path, extra_zero_chunks=2)
    return n_calls + n_acc
