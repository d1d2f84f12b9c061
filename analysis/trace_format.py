"""The ggml-trace file format (version 1) as Python sees it: every number, name and record layout
the readers and writers share, and nothing else (no reading; analysis/trace_file.py reads).

The numpy dtypes below mirror native_hooks/trace_format.h byte for byte (little-endian, fields at
the offsets the C compiler gives them, 64-byte records). Change both together:
tests/unit/test_format_contract.py holds this module to the header, docs/trace-format.md describes it.

A leaf: it imports no other analysis module, so that every layer above can import it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

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
REC_GPU, REC_SAMPLE, REC_NEST, REC_CUDA = 10, 11, 12, 13
REC_COUNT = 14  # one past the last record type (the header's sentinel)
MAX_RECORD_TYPE = REC_COUNT - 1

# CallRec flags (trace_format.h CALL_*; bit 1 only for copies and backend allreduces)
CALL_FAILED, CALL_DECLINED, CALL_SCHED_PARALLEL, CALL_SYNC_COMPUTE = 0x01, 0x02, 0x04, 0x08
CALL_META_PARENT = 0x20  # a meta (tensor-parallel) backend's call

# device_exec flags: DeviceSource in bits 4-5, then the two bounds flags; delay flags: DelayWhere
DEVICE_SOURCE_SHIFT, DEVICE_START_ESTIMATED, DEVICE_END_LATE = 4, 0x40, 0x80
SRC_DEVICE, SRC_EVENTS, SRC_MARKERS = 0, 1, 2
DELAY_WHERE_SHIFT = 1
DELAY_RULE_SHIFT = 48  # delay's arg = rule index << 48 | requested ns
DELAY_HOST, DELAY_QUEUE, DELAY_STREAM, DELAY_WORK = 0, 1, 2, 3
# MetaRole of REC_NEST
META_ROLES = ["main", "zero", "copy", "reduce", "io", "sync", "other"]  # MetaRole 1..7

# GpuActivityKind (REC_GPU)
GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET, GPU_CORRELATION, GPU_API, GPU_GRAPH = 1, 2, 3, 4, 5, 6

# AccessMode, BufferEvent
ACC_READ, ACC_WRITE = 1, 2
# AccessRec flags: a read a split's first reads leave out, recorded per node (CUDA streams mode)
ACCESS_PER_NODE = 0x01
BUF_SEEN, BUF_ALLOCATED, BUF_FREED = 1, 2, 3

# CudaOp (REC_CUDA), named as the loader exposes them (CudaOp without CUDA_, lower case), and flags
CUDA_OPS: dict[int, str] = {
    1: "launch", 2: "memcpy", 3: "memset", 4: "event_record", 5: "stream_wait", 6: "event_sync",
    7: "stream_sync", 8: "device_sync", 9: "capture_begin", 10: "capture_end", 11: "graph_launch",
}
CUDA_CAPTURED, CUDA_DRIVER, CUDA_RETURNED, CUDA_FAILED = 0x01, 0x02, 0x04, 0x08

# CallRec.call_id = thread << 40 | the thread's call counter (native_hooks/trace_writer.cpp)
CALL_ID_THREAD_SHIFT = 40
CALL_ID_COUNTER = (1 << CALL_ID_THREAD_SHIFT) - 1
MAX_THREAD = 1 << (64 - CALL_ID_THREAD_SHIFT)  # a thread index must fit above the counter
# CallRec.sched of a call outside any scheduler; NestRec.device when the device is unknown (meta.cpp)
SCHED_NONE = 0xFF
NEST_NO_DEVICE = 0xFF
# native_hooks/registry.h: backends one process may register; a call may name one whose record is lost
MAX_BACKENDS = 64

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


def _struct(itemsize: int, fields: list[tuple[str, Any, int]]) -> np.dtype:
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
    ("type", "u1", 0), ("mode", "u1", 1), ("flags", "u1", 2), ("thread", "<u4", 4), ("call_id", "<u8", 8),
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

CUDA_DTYPE = _struct(64, [
    ("type", "u1", 0), ("op", "u1", 1), ("flags", "u1", 2), ("thread", "<u4", 4), ("t", "<u8", 8),
    ("call_id", "<u8", 16), ("stream", "<u8", 24), ("handle", "<u8", 32), ("src", "<u8", 40),
    ("name", "<u8", 48), ("node", "<u4", 56), ("device", "<u4", 60),
])

RECORD_DTYPES = {
    REC_STRING: STRING_DTYPE, REC_META: META_DTYPE, REC_THREAD: THREAD_DTYPE,
    REC_BACKEND: BACKEND_DTYPE, REC_BUFFER: BUFFER_DTYPE, REC_CALL: CALL_DTYPE,
    REC_ACCESS: ACCESS_DTYPE, REC_PLACE: ACCESS_DTYPE, REC_CLOCK: CLOCK_DTYPE,
    REC_GPU: GPU_DTYPE, REC_SAMPLE: SAMPLE_DTYPE, REC_NEST: NEST_DTYPE, REC_CUDA: CUDA_DTYPE,
}
