"""Append records to a finished trace file (format version 1, docs/trace-format.md).

The records go into whole new chunks after the file's existing ones. Their chunks belong to no
thread (thread = NONE32), and nothing the writer wrote is moved. Records are built as numpy
structured arrays, a whole array at a time.
"""
from __future__ import annotations

import hashlib
import os

import numpy as np

from ..analysis.trace_file import chunk_bytes, read_header
from ..analysis.trace_format import (
    CHUNK_SIZE, HEADER_SIZE, META_DTYPE, REC_META, REC_SAMPLE, REC_STRING, RECORD_SIZE, SAMPLE_DTYPE, NONE32,
    STRING_DTYPE, STRING_PIECE,
)

VOID = np.dtype((np.void, RECORD_SIZE))
MAX_STRING = 0xFFFF * STRING_PIECE  # StringRec.piece is a u16


def string_id(data: bytes) -> int:
    """An id for a string: readers treat ids as opaque, so any stable nonzero hash will do."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") or 1


def string_records(texts) -> tuple[dict[str, int], np.ndarray]:
    """({text: id}, STRING records of every distinct non-empty text, in 48-byte pieces)."""
    ids, parts = {}, []
    for text in dict.fromkeys(texts):  # one step per distinct string, not per piece
        data = text.encode("utf-8")
        if not data:
            ids[text] = 0  # the empty string is "no string"
            continue
        if len(data) > MAX_STRING:
            raise ValueError(f"string of {len(data)} bytes is longer than a trace can hold")
        n = -(-len(data) // STRING_PIECE)
        piece = np.arange(n)
        text_bytes = np.zeros(n * STRING_PIECE, np.uint8)
        text_bytes[: len(data)] = np.frombuffer(data, np.uint8)
        r = np.zeros(n, STRING_DTYPE)
        r["type"] = REC_STRING
        r["len"] = np.minimum(len(data) - piece * STRING_PIECE, STRING_PIECE)
        r["piece"] = piece
        r["total_len"] = len(data)
        r["id"] = ids[text] = string_id(data)
        r["text"] = text_bytes.reshape(n, STRING_PIECE)
        parts.append(r)
    return ids, np.concatenate(parts) if parts else np.zeros(0, STRING_DTYPE)


def meta_records(meta: dict[str, str]) -> np.ndarray:
    """STRING and META records (as 64-byte voids) for key/value metadata."""
    ids, strings = string_records([*meta.keys(), *meta.values()])
    m = np.zeros(len(meta), META_DTYPE)
    m["type"] = REC_META
    m["thread"] = NONE32
    m["key"] = [ids[k] for k in meta]
    m["value"] = [ids[v] for v in meta.values()]
    return np.concatenate([strings.view(VOID), m.view(VOID)])


def sample_records(t_ns, device, metric, value) -> np.ndarray:
    """STRING and SAMPLE records (as 64-byte voids) for counter readings: t_ns (CLOCK_MONOTONIC
    ns), device index, metric name and value, one array each."""
    names, which = np.unique(np.asarray(metric, dtype=str), return_inverse=True)
    ids, strings = string_records(names.tolist())
    s = np.zeros(len(which), SAMPLE_DTYPE)
    s["type"] = REC_SAMPLE
    s["device"] = device
    s["t_ns"] = t_ns
    s["metric"] = np.array([ids[n] for n in names.tolist()], np.uint64)[which.reshape(-1)]
    s["value"] = value
    return np.concatenate([strings.view(VOID), s.view(VOID)])


def append_records(path, records: np.ndarray) -> None:
    """Append 64-byte records to the trace at `path` in new chunks.

    The new chunks start at the first chunk boundary at or after the end of the file, so a file
    cut mid-chunk keeps all it had. Only a record cut by the end of the file is dropped: readers
    ignore it, and zero padding after it would make it look whole. If the write fails, the file
    is put back as it was."""
    records = np.ascontiguousarray(records).view(VOID).reshape(-1)
    if len(records) == 0:
        return
    read_header(path)  # refuse to append to something that is not a trace
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        body = max(size - HEADER_SIZE, 0)
        n_chunks = -(-body // CHUNK_SIZE)
        data = chunk_bytes(records, n_chunks)  # everything computed before the file is touched
        keep = HEADER_SIZE + body // RECORD_SIZE * RECORD_SIZE if body else size
        f.seek(keep)
        cut = f.read()  # a partial record, put back if the write fails
        try:
            f.truncate(keep)
            f.seek(HEADER_SIZE + n_chunks * CHUNK_SIZE)  # the gap reads as zeros
            f.write(data.data)
            f.flush()
        except BaseException:
            f.truncate(keep)
            f.seek(keep)
            f.write(cut)
            f.flush()
            raise


def append(path, meta: dict[str, str] | None = None, samples=None) -> None:
    """Append metadata and counter samples (anything with t_ns, device, metric and value
    arrays) to the trace at `path`, in one write."""
    parts = []
    if meta:
        parts.append(meta_records(meta))
    if samples is not None and len(samples.t_ns):
        parts.append(sample_records(samples.t_ns, samples.device, samples.metric, samples.value))
    if parts:
        append_records(path, np.concatenate(parts))
