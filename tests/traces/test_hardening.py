"""The reader and the commands on hostile input: never crash, never hang, never stay silent.

Each case damages a committed trace (tests/data: real CUDA runs), then checks the one-line error
(which file, what, where; exit 2), what --lenient loads and reports, and that nothing is lost
silently. Small hostile traces written here: tests/unit/test_hardening_synthetic.py; real
llama.cpp programs (a capture the hooks refused, a program killed while its trace is read live):
tests/runs/test_hardening_programs.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ggml_trace import analysis
from ggml_trace.analysis import TraceFormatError
from ggml_trace.analysis.trace_format import (
    CHUNK_SIZE, GPU_KERNEL, HEADER_SIZE, REC_CALL, REC_GPU, RECORD_DTYPES,
)
from support import DATA, ROOT, cli, ggml_trace, no_hang, one_error_line, record_offsets

pytestmark = pytest.mark.filterwarnings("error::DeprecationWarning", "error::FutureWarning")

TIMED = DATA / "cuda-b10531-simple-1gpu-timed.ggmltrace"  # calls, device_exec, CUPTI, NVML
PLAIN = DATA / "cuda-b10531-nkvo-1gpu.ggmltrace"
def patched(tmp_path, src: Path, edits: list[tuple[int, bytes]], name="damaged.ggmltrace") -> Path:
    data = bytearray(src.read_bytes())
    for at, b in edits:
        data[at: at + len(b)] = b
    p = tmp_path / name
    p.write_bytes(bytes(data))
    return p


def field_at(src: Path, rtype: int, field: str, which=0) -> int:
    """File offset of `field` in the `which`-th record of type rtype (filtered by a predicate
    when `which` is a callable on the record)."""
    data = src.read_bytes()
    offs = record_offsets(data)[rtype]
    dtype = RECORD_DTYPES[rtype]
    if callable(which):
        recs = np.frombuffer(data, np.uint8)
        rows = [o for o in offs.tolist() if which(recs[o: o + 64].view(dtype)[0])]
        at = rows[0]
    else:
        at = int(offs[which])
    return at + dtype.fields[field][1]


# -- NumPy 2.5's promotion rules, on any NumPy -----------------------------------------------------

@pytest.fixture
def numpy25_where(monkeypatch):
    """np.where as NumPy 2.5 has it: a Python int that does not fit the other operand's integer
    dtype is an OverflowError (NumPy <= 2.4 quietly wrapped it). Catches the hazard here."""
    where = np.where

    def strict(cond, *xy):
        if len(xy) == 2:
            for arr, v in (xy, xy[::-1]):
                a = np.asarray(arr)
                if (isinstance(v, int) and not isinstance(v, bool) and a.dtype.kind in "ui"
                        and not np.iinfo(a.dtype).min <= v <= np.iinfo(a.dtype).max):
                    raise OverflowError(f"Python integer {v} out of bounds for {a.dtype}")
        return where(cond, *xy)

    monkeypatch.setattr(np, "where", strict)


def test_numpy25_rule_is_emulated(numpy25_where):
    u8 = np.array([1, 3], np.uint8)
    with pytest.raises(OverflowError):
        np.where(u8 < 2, u8, -1)  # the line that broke the loader on the H200 host
    assert np.where(u8 < 2, u8.astype(np.int64), -1).tolist() == [1, -1]


@pytest.mark.parametrize("path", sorted(DATA.glob("*.ggmltrace")), ids=lambda p: p.stem)
def test_every_committed_trace_under_numpy25_rules(numpy25_where, path, tmp_path):
    from ggml_trace.analysis.export import perfetto_events
    from ggml_trace.analysis.report import report_html
    from ggml_trace.analysis.timeline import timeline

    t = analysis.load(path)
    analysis.summarize(t)
    analysis.races(t)
    perfetto_events(t)
    if path == TIMED:  # the heavy presentations once, on the trace with every record type
        timeline(t)
        report_html(t)


def test_device_exec_observer_bits_3(tmp_path):
    """flags bits 4-5 = 3 names no observer: a missing source, not a crash."""
    at = field_at(TIMED, REC_CALL, "flags", lambda r: r["kind"] == 80)
    p = patched(tmp_path, TIMED, [(at, bytes([0x30]))])
    t = analysis.load(p)
    assert t.device["source"].isna().sum() == 1


# -- fields out of range ----------------------------------------------------------------------

def test_gpu_device_number_is_checked(tmp_path, capsys):
    """A CUPTI record's device ordinal used to become a list length (hang, then MemoryError)."""
    at = field_at(TIMED, REC_GPU, "device", lambda r: r["kind"] == GPU_KERNEL)
    p = patched(tmp_path, TIMED, [(at, (0xFFFFFFF0).to_bytes(4, "little"))])
    rc, _, err = cli(capsys, "summary", p)
    line = one_error_line(err, "summary")
    assert rc == 2 and str(p) in line and "1 GPU records with a bad kind, device or times" in line
    assert f"file offset {at - 4:#x}" in line and "--lenient" in line
    t = analysis.load(p, strict=False)
    assert t.gpu["device"].max() < 1024 and len(t.damage) == 1
    with no_hang(300, "timeline, report and export of the file"):  # what the bad ordinal once did
        for cmd, out in (("timeline", "t.html"), ("report", "r.html"), ("export", "p.json")):
            rc, _, err = cli(capsys, cmd, "--lenient", p, "-o", tmp_path / out)
            assert rc == 0, err
            assert "warning:" in err and (tmp_path / out).stat().st_size > 0
    assert "damaged file" in (tmp_path / "r.html").read_text()
    assert "damaged file" in (tmp_path / "t.html").read_text()


@pytest.mark.parametrize("field,offset", [("t0_monotonic_ns", 24), ("t0_realtime_ns", 32),
                                          ("t0_ticks", 40)])
def test_header_clock_fields_beyond_int64(tmp_path, capsys, field, offset):
    p = patched(tmp_path, TIMED, [(offset, (2**64 - 1).to_bytes(8, "little"))])
    with pytest.raises(TraceFormatError, match=f"corrupt header: {field} is {2**64 - 1}"):
        analysis.load(p)
    rc, _, err = cli(capsys, "races", p)
    assert rc == 2 and f"file offset {offset:#x}" in one_error_line(err, "races")
    t = analysis.load(p, strict=False)
    assert any(field in w for w in t.warnings)
    rc, out, _ = cli(capsys, "summary", "--lenient", p)
    assert rc == 0 and f"warning: {p}: corrupt header: {field}" in out


def test_call_times_that_would_overflow(tmp_path, capsys):
    a = field_at(TIMED, REC_CALL, "t_end", 3)
    b = field_at(TIMED, REC_CALL, "t_begin", 7)
    p = patched(tmp_path, TIMED, [(a, (2**63 + 5).to_bytes(8, "little")),
                                  (b, (2**62).to_bytes(8, "little"))])
    rc, _, err = cli(capsys, "races", p)
    assert rc == 2 and "2 CALL records with times outside the run" in one_error_line(err, "races")
    t = analysis.load(p, strict=False)
    assert len(t.calls) == len(analysis.load(TIMED).calls) - 2
    assert t.calls["duration"].abs().max() < 10**12
    rc, _, err = cli(capsys, "races", "--lenient", p)
    assert rc == 2 and "rests on a damaged file" in err  # no green light on a damaged file


def test_backend_index_beyond_the_table(tmp_path, capsys):
    at = field_at(PLAIN, REC_CALL, "backend", lambda r: r["backend"] != 0xFFFFFFFF)
    p = patched(tmp_path, PLAIN, [(at, (123456).to_bytes(4, "little"))])
    rc, _, err = cli(capsys, "export", p, "-o", tmp_path / "p.json")
    assert rc == 2 and "backend index beyond the backend table" in one_error_line(err, "export")
    assert not (tmp_path / "p.json").exists()
    t = analysis.load(p, strict=False)
    assert not t.calls["backend"].astype(str).str.contains("123456").any()


def test_file_name_that_is_not_utf8(tmp_path):
    name = os.fsdecode(b"run-\xff\xfe.ggmltrace")
    (tmp_path / name).write_bytes(PLAIN.read_bytes())
    for cmd in ("report", "export", "timeline", "summary"):
        r = ggml_trace(cmd, name, cwd=tmp_path, timeout=120)
        assert r.returncode == 0, (cmd, r.stderr)
        assert "Traceback" not in r.stderr
    made = sorted(os.listdir(os.fsencode(tmp_path)))
    assert b"run-\xff\xfe-report.html" in made and b"run-\xff\xfe.json" in made
    assert all(os.path.getsize(os.path.join(os.fsencode(tmp_path), f)) > 0 for f in made)
    assert not [f for f in made if b".tmp-" in f]
    assert "run-\\xff\\xfe" in (tmp_path / os.fsdecode(b"run-\xff\xfe-report.html")).read_text()


# -- the one error path ------------------------------------------------------------------------

def test_an_unexpected_error_is_one_line(tmp_path, capsys, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(sys.modules["ggml_trace.analysis.races"], "races", boom)
    rc, _, err = cli(capsys, "races", PLAIN)
    line = one_error_line(err, "races")
    assert rc == 2 and str(PLAIN) in line and "RuntimeError: boom" in line


def test_failed_output_leaves_no_file(tmp_path, capsys, monkeypatch):
    import ggml_trace.analysis.report  # noqa: F401  (loaded, to be patched)

    out = tmp_path / "r.html"
    out.write_text("the previous report")

    def boom(*a, **k):
        raise MemoryError()

    monkeypatch.setattr(sys.modules["ggml_trace.analysis.report"], "report_html", boom)
    rc, _, err = cli(capsys, "report", PLAIN, "-o", out)
    assert rc == 2 and "out of memory" in one_error_line(err, "report")
    assert out.read_text() == "the previous report"  # untouched, not emptied
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]


def test_missing_and_unreadable_files(tmp_path, capsys):
    for cmd in ("summary", "races", "timeline", "report", "export", "view"):
        rc, _, err = cli(capsys, cmd, tmp_path / "nope.ggmltrace")
        assert rc == 2 and "cannot read" in one_error_line(err, cmd)


# -- nothing lost silently ---------------------------------------------------------------------

def test_damaged_chunk_header(tmp_path, capsys):
    at = HEADER_SIZE + 1 * CHUNK_SIZE  # the second chunk's magic
    p = patched(tmp_path, PLAIN, [(at, bytes(4))])
    rc, _, err = cli(capsys, "summary", p)
    line = one_error_line(err, "summary")
    assert rc == 2 and f"1 chunk(s) with a damaged header (first at file offset {at:#x})" in line
    t = analysis.load(p, strict=False)
    full = analysis.load(PLAIN)
    lost = len(full.calls) + len(full.accesses) - len(t.calls) - len(t.accesses)
    assert lost > 0 and "their 1023 record(s) are dropped" in t.damage[0]
    rc, out, _ = cli(capsys, "summary", "--lenient", p)
    assert rc == 0 and "warning:" in out and "damaged header" in out


def test_cut_file_says_so(tmp_path, capsys):
    data = PLAIN.read_bytes()
    p = tmp_path / "cut.ggmltrace"
    p.write_bytes(data[: HEADER_SIZE + 2 * CHUNK_SIZE + 777])
    t = analysis.load(p)
    assert t.damage and "the file ends inside a chunk" in t.warnings[0]
    rc, out, _ = cli(capsys, "summary", p)
    assert rc == 0 and "warning:" in out and "ends inside a chunk" in out
    rc, out, err = cli(capsys, "races", p)
    assert rc == 2 and "rests on a damaged file" in err and "no races" in out


def test_a_missing_package_is_named_not_blamed_on_the_trace(tmp_path):
    """A reading command on a host without plotly (the GPU hosts have none) says what to install."""
    code = ("import sys; sys.modules['plotly'] = None; from ggml_trace.tracer.cli import main; "
            f"sys.exit(main(['timeline', {str(DATA / 'cuda-b10531-layer-2gpu.ggmltrace')!r}, '-o', "
            f"{str(tmp_path / 't.html')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == \
        "ggml-trace timeline: needs the Python package 'plotly', which is not installed", r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "t.html").exists()
