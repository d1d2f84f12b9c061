"""Snapshots: a consistent copy of a trace file while its program still writes it.

The hooks write through a shared file mapping, so the file itself always holds what was
recorded; a snapshot needs no help from the traced process (it works on a hung one too). The
copy keeps what analysis.ring.settled_blocks finds settled, compacted (unused chunks left out),
and is marked FILE_SNAPSHOT with the time it was taken.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..analysis.ring import settled_blocks
from ..analysis.trace_file import read_header
from ..analysis.trace_format import (
    CHUNK_SIZE, FILE_CLOSED, FILE_HEADER_DTYPE, FILE_MAGIC, FILE_RING, FILE_SNAPSHOT, HEADER_SIZE, TraceFormatError,
)


class SnapshotError(Exception):
    """No trace to take a snapshot of (a PID that traces nothing, an unreadable file)."""


@dataclass
class Snapshot:
    path: Path
    chunks: int          # chunks copied
    skipped: int         # chunks recycled or unpublished while being read
    taken_ns: int        # CLOCK_MONOTONIC when the copy began: it holds what was recorded before


def trace_of_process(pid: int) -> Path:
    """The trace file a traced process writes: the file it maps that starts with the magic."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError as e:
        raise SnapshotError(f"process {pid}: {e.strerror or e}") from e
    seen = []
    for line in maps.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith("/") or parts[5] in seen:
            continue
        seen.append(parts[5])
        try:
            with open(parts[5], "rb") as f:
                if f.read(len(FILE_MAGIC)) == FILE_MAGIC:
                    return Path(parts[5])
        except OSError:
            continue
    raise SnapshotError(f"process {pid} writes no ggml-trace file (is it running under `ggml-trace record`?)")


def default_path(trace: Path) -> Path:
    """TRACE.snapshot-N.ggmltrace beside TRACE, N the first number not taken."""
    trace = Path(trace)
    stem = trace.name.removesuffix(".ggmltrace")
    n = 1
    while (trace.parent / f"{stem}.snapshot-{n}.ggmltrace").exists():
        n += 1
    return trace.parent / f"{stem}.snapshot-{n}.ggmltrace"


def take(source: Path | str | int, out: Path | str | None = None) -> Snapshot:
    """Copies the trace of process `source` (an int) or the trace file `source` to `out`
    (default: default_path). The copy is written beside `out` and renamed into place."""
    src = trace_of_process(source) if isinstance(source, int) else Path(source)
    try:
        live_ring = read_header(src)["file_flags"] & (FILE_RING | FILE_CLOSED) == FILE_RING
    except TraceFormatError as e:  # a clear error for a file that is no trace
        raise SnapshotError(str(e)) from e
    out = Path(out) if out else default_path(src)
    tmp = out.with_name(out.name + ".part")
    copied = skipped = 0
    try:
        with open(src, "rb") as f, open(tmp, "wb") as w, _hold(src, live_ring):
            header = np.frombuffer(os.pread(f.fileno(), HEADER_SIZE, 0), np.uint8).copy()
            w.write(header.tobytes())  # rewritten with the snapshot flag at the end
            taken = time.monotonic_ns()  # the copy holds what was recorded before this
            for block, lost in settled_blocks(f.fileno()):
                w.write(block.tobytes())
                copied += len(block) // CHUNK_SIZE
                skipped += lost
            h = header[: FILE_HEADER_DTYPE.itemsize].view(FILE_HEADER_DTYPE)
            h["file_flags"] |= FILE_SNAPSHOT
            h["snapshot_ns"] = taken
            h["hold_until_ns"] = 0
            w.seek(0)
            w.write(header.tobytes())
        os.replace(tmp, out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise SnapshotError(f"{e.filename or src}: {e.strerror or e}") from e
    return Snapshot(out, copied, skipped, taken)


@contextlib.contextmanager
def _hold(path: Path, live_ring: bool):
    """While a live ring is copied, ask its writer to recycle nothing (FileHeader.hold_until_ns:
    the ring grows instead, to twice its size at most). The request lapses by itself if this
    process dies; a file we may not write is copied without it."""
    fd = None
    if live_ring:
        try:
            fd = os.open(path, os.O_WRONLY)
        except OSError:
            fd = None
    at = FILE_HEADER_DTYPE.fields["hold_until_ns"][1]  # type: ignore[index]  # a record dtype: fields is set
    if fd is not None:
        # long enough for three reads of the file at a slow 500 MB/s, and at least 2 s
        hold = time.monotonic_ns() + max(2_000_000_000, 6 * os.path.getsize(path))
        os.pwrite(fd, np.uint64(hold).tobytes(), at)
    try:
        yield
    finally:
        if fd is not None:
            os.pwrite(fd, np.uint64(0).tobytes(), at)
            os.close(fd)
