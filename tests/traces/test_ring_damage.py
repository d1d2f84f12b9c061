"""Flight-recorder (ring) files whose chunk headers are damaged: the window a ring keeps is placed
from each thread's chunk ordinals and claim times (docs/trace-format.md, "Ring files"), so those
fields are checked like every other one. Each case turns a committed CUDA trace into a closed ring
in tmp_path and rewrites some chunk headers; the reader names the damage (strict) or drops the bad
chunks and loads the rest (strict=False, --lenient)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ggml_trace.analysis import TraceFormatError
from ggml_trace.analysis.trace_file import (
    CHUNK_HEADER_DTYPE, CHUNK_MAGIC, CHUNK_SIZE, FILE_CLOSED, FILE_RING, HEADER_SIZE, REC_CALL, RECORD_SIZE,
    read_trace_file,
)
DATA = Path(__file__).resolve().parents[1] / "data"
NO_CLAIMS = DATA / "cuda-b10531-nkvo-1gpu.ggmltrace"  # an older writer: t_claim and ordinal are 0
CLAIMED = DATA / "cuda-b10531-simple-1gpu-cupti-kernels.ggmltrace"  # threads 0 and 1, real claim times

CLAIM_TIME = "ring chunks with a claim time (t_claim) outside the run"
TWICE = "ring chunks whose ordinal another chunk of their thread has"
OUT_OF_ORDER = "ring chunks whose ordinals are out of the order their thread claimed them in"


def ggml_trace(*args, **kw):
    """The installed command, as a user runs it."""
    exe = Path(sys.executable).parent / "ggml-trace"
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, errors="replace", **kw)


def chunk_heads(data: bytearray) -> np.ndarray:
    """A writable view of every chunk header of a file's bytes."""
    n = (len(data) - HEADER_SIZE) // CHUNK_SIZE
    body = np.frombuffer(data, np.uint8, count=n * CHUNK_SIZE, offset=HEADER_SIZE).reshape(n, CHUNK_SIZE)
    return body[:, :RECORD_SIZE].view(CHUNK_HEADER_DTYPE)[:, 0]


def as_ring(tmp_path, src: Path, edit=None, name="ring.ggmltrace") -> Path:
    """src as a closed ring file; edit(heads) rewrites its chunk headers first."""
    data = bytearray(src.read_bytes())
    flags = int.from_bytes(data[128:132], "little") | FILE_RING | FILE_CLOSED
    data[128:132] = flags.to_bytes(4, "little")
    heads = chunk_heads(data)
    assert (heads["magic"] == CHUNK_MAGIC).all()
    if edit:
        edit(heads)
    p = tmp_path / name
    p.write_bytes(bytes(data))
    return p


def from_5(heads):
    """The chunks' ordinals 5, 6, 7, ... in file order, whatever their thread."""
    heads["ordinal"] = 5 + np.arange(len(heads))


def per_thread_from_5(heads):
    """Each thread's chunks numbered 5, 6, ... in file order: a ring that lost each thread's first five."""
    for t in np.unique(heads["thread"]):
        mine = heads["thread"] == t
        heads["ordinal"][mine] = 5 + np.arange(mine.sum())


def thread0(heads) -> np.ndarray:
    return np.flatnonzero(heads["thread"] == 0)


def records_in(path: Path, chunks, rtype=None) -> int:
    """Records (of type rtype, or all) in the given chunks (positions) of a file: each chunk's
    records end at its first zero."""
    body = np.frombuffer(path.read_bytes(), np.uint8, offset=HEADER_SIZE)
    types = body.reshape(-1, CHUNK_SIZE)[list(chunks), RECORD_SIZE::RECORD_SIZE]
    before_zero = ~np.logical_or.accumulate(types == 0, axis=1)
    return int((before_zero & (types == rtype if rtype else True)).sum())


def test_odd_ordinals_without_claim_times_are_named(tmp_path):
    """The reported case: ordinals 5, 6, 7, ... on chunks without claim times (0). The window used
    to start at tick 0, before the run, and ended in an OverflowError."""
    p = as_ring(tmp_path, NO_CLAIMS, from_5)
    with pytest.raises(TraceFormatError) as e:
        read_trace_file(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: 5 {CLAIM_TIME} (first at file offset {HEADER_SIZE:#x})"), msg
    assert "window cannot be placed" in msg and "--lenient" in msg
    raw = read_trace_file(p, strict=False)  # every chunk is bad: nothing of the window is left
    assert len(raw.calls) == 0 and raw.ring.ring_chunks == 0
    assert any(CLAIM_TIME in w and "dropped" in w for w in raw.warnings)
    assert any("the 5 dropped ring chunk(s) held" in d for d in raw.damage)


def test_lenient_keeps_the_records_of_the_good_chunks(tmp_path):
    """One chunk of thread 1 without a claim time, among chunks that lost each thread's first five:
    that chunk goes (as if recycled), every record of the others stays but for what lies before the
    window (counted in ring.cut, as in any ring)."""
    bad = None

    def edit(heads):
        nonlocal bad
        per_thread_from_5(heads)
        bad = int(np.flatnonzero(heads["thread"] == 1)[-1])  # thread 1's newest chunk
        heads["t_claim"][bad] = 0

    p = as_ring(tmp_path, CLAIMED, edit)
    with pytest.raises(TraceFormatError, match=re.escape(f"1 {CLAIM_TIME} (first at file offset "
                                                        f"{HEADER_SIZE + bad * CHUNK_SIZE:#x})")):
        read_trace_file(p)
    raw = read_trace_file(p, strict=False)
    n_chunks = (p.stat().st_size - HEADER_SIZE) // CHUNK_SIZE
    good = [i for i in range(n_chunks) if i != bad]
    assert len(raw.chunks) == len(good)
    assert len(raw.calls) > 0
    assert len(raw.calls) + raw.ring.cut.get("calls", 0) == records_in(p, good, REC_CALL)
    assert raw.damage[-1].endswith(f"the 1 dropped ring chunk(s) held {records_in(p, [bad])} record(s)")
    # the same file with that chunk unused (all zeros) reads the same, strictly
    data = bytearray(p.read_bytes())
    at = HEADER_SIZE + bad * CHUNK_SIZE
    data[at: at + CHUNK_SIZE] = bytes(CHUNK_SIZE)
    without = tmp_path / "without.ggmltrace"
    without.write_bytes(bytes(data))
    ref = read_trace_file(without)
    assert ref.damage == [] and ref.ring.start_ns == raw.ring.start_ns
    for name in ("calls", "accesses", "places", "gpu", "strings"):
        assert len(getattr(raw, name)) == len(getattr(ref, name)), name


def _set(field, rows, values):
    def edit(heads):
        per_thread_from_5(heads)
        heads[field][rows(heads)] = values
    return edit


def reversed_thread0(heads):
    """Thread 0's ordinals against the order of its claim times."""
    per_thread_from_5(heads)
    rows = thread0(heads)
    heads["ordinal"][rows] = heads["ordinal"][rows][::-1]


VARIANTS = {
    # every chunk of thread 0 numbered 0, as an older writer leaves them
    "zero": (_set("ordinal", thread0, 0), TWICE),
    "duplicated": (_set("ordinal", lambda h: thread0(h)[1:3], 6), TWICE),
    "reversed": (reversed_thread0, OUT_OF_ORDER),
    "huge first": (_set("ordinal", lambda h: thread0(h)[:1], 0xFFFFFFFF), OUT_OF_ORDER),
    "claimed in the future": (_set("t_claim", lambda h: thread0(h)[2:3], 2**64 - 1), CLAIM_TIME),
    "claimed before the run": (_set("t_claim", lambda h: thread0(h)[2:3], 1), CLAIM_TIME),
    "unknown region": (_set("region", lambda h: thread0(h)[2:3], 7), "chunks with an unknown region"),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_neighbouring_damage_is_named(tmp_path, variant):
    edit, what = VARIANTS[variant]
    p = as_ring(tmp_path, CLAIMED, edit)
    with pytest.raises(TraceFormatError, match=re.escape(what)) as e:
        read_trace_file(p)
    assert str(e.value).startswith(f"{p}: ")
    raw = read_trace_file(p, strict=False)
    assert any(what in d for d in raw.damage)
    assert len(raw.chunks) < (p.stat().st_size - HEADER_SIZE) // CHUNK_SIZE


def test_a_huge_newest_ordinal_is_a_gap_not_damage(tmp_path):
    """Ordinals jump (a thread's chunks recycled in between) in a ring that is not damaged: the
    window starts after the jump, with no warning of damage."""
    p = as_ring(tmp_path, CLAIMED, _set("ordinal", lambda h: thread0(h)[-1:], 0xFFFFFFFF))
    raw = read_trace_file(p)
    assert raw.damage == [] and raw.ring.start_ns is not None


def test_the_commands_name_it_in_one_line(tmp_path):
    """The installed command, as a user runs it: exit 2 and one line, no internal error."""
    p = as_ring(tmp_path, NO_CLAIMS, from_5)
    for cmd in ("summary", "races"):
        r = ggml_trace(cmd, p, timeout=120)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"ggml-trace {cmd}: {p}: 5 {CLAIM_TIME}"), r.stderr
        assert "OverflowError" not in r.stderr and "Traceback" not in r.stderr
    r = ggml_trace("summary", "--lenient", p, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    assert CLAIM_TIME in r.stdout + r.stderr and "Traceback" not in r.stderr
    # with good chunks left, the lenient summary shows them; races says its answer rests on damage
    # (exit 2, as for every damaged file: no green light)
    partial = as_ring(tmp_path, CLAIMED, _set("ordinal", lambda h: thread0(h)[1:3], 6), name="partial.ggmltrace")
    r = ggml_trace("summary", "--lenient", partial, timeout=120)
    assert r.returncode in (0, 1) and TWICE in r.stdout + r.stderr, r.stderr
    r = ggml_trace("races", "--lenient", partial, timeout=120)
    assert "Traceback" not in r.stderr and "OverflowError" not in r.stderr
    assert r.returncode == 2 and r.stderr.splitlines()[-1].startswith("ggml-trace races: "), r.stderr
