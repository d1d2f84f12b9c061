"""The reader and the commands on hostile input: never crash, never hang, never stay silent.

Each case damages a committed trace (tests/data: real CUDA runs) or builds a small one, then
checks the one-line error (which file, what, where; exit 2), what --lenient loads and reports,
and that nothing is lost silently. The last tests record real llama.cpp programs: a capture
the hooks refused, and a program killed with SIGKILL while its trace is read live.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ggml_trace import analysis
from ggml_trace.analysis import TraceFormatError
from ggml_trace.analysis.trace_file import read_trace_file
from ggml_trace.analysis.trace_format import (
    CHUNK_SIZE, GPU_KERNEL, HEADER_SIZE, REC_CALL, REC_GPU, RECORD_DTYPES, RECORD_SIZE,
)
from conftest import completion_cmd, ggml_trace, simple_cmd
from test_fuzz import _offsets
from tracegen import TraceBuilder
from ggml_trace.tracer import programs
from ggml_trace.tracer.cli import main

pytestmark = pytest.mark.filterwarnings("error::DeprecationWarning", "error::FutureWarning")

DATA = Path(__file__).parent / "data"
TIMED = DATA / "cuda-b10531-simple-1gpu-timed.ggmltrace"  # calls, device_exec, CUPTI, NVML
PLAIN = DATA / "cuda-b10531-nkvo-1gpu.ggmltrace"
VOID = np.dtype((np.void, RECORD_SIZE))


def records(recs) -> np.ndarray:
    """A RawTrace's records of one type as a structured array (calls and accesses are Columns)."""
    return recs if isinstance(recs, np.ndarray) else recs.records()


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
    offs = _offsets(data)[rtype]
    dtype = RECORD_DTYPES[rtype]
    if callable(which):
        recs = np.frombuffer(data, np.uint8)
        rows = [o for o in offs.tolist() if which(recs[o: o + 64].view(dtype)[0])]
        at = rows[0]
    else:
        at = int(offs[which])
    return at + dtype.fields[field][1]


def cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_error_line(err: str, command: str) -> str:
    """The error: exactly one line that is not a warning, naming the command."""
    lines = [ln for ln in err.splitlines() if ": warning: " not in ln]
    assert len(lines) == 1 and lines[0].startswith(f"ggml-trace {command}: "), err
    assert "Traceback" not in err
    return lines[0]


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
    t0 = time.monotonic()
    for cmd, out in (("timeline", "t.html"), ("report", "r.html"), ("export", "p.json")):
        rc, _, err = cli(capsys, cmd, "--lenient", p, "-o", tmp_path / out)
        assert rc == 0, err
        assert "warning:" in err and (tmp_path / out).stat().st_size > 0
    assert time.monotonic() - t0 < 60
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


def test_non_numeric_pid_in_meta(tmp_path, capsys):
    b = TraceBuilder(pid=77)
    b.meta("pid", "12abc; DROP")
    b.backend(0, "CPU", device_type=0)
    b.call("sched_graph_compute", 0, 100, sched=0, graph=0)
    b.call("graph_compute", 10, 90, backend=0, sched=0, graph=0, split=0)
    b.write(tmp_path / "pid.ggmltrace")
    rc, _, err = cli(capsys, "export", tmp_path / "pid.ggmltrace", "-o", tmp_path / "p.json")
    assert rc == 0, err
    assert '"pid": 77' in (tmp_path / "p.json").read_text()


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


def test_unclosed_trace_is_said(tmp_path, capsys):
    b = TraceBuilder()
    b.backend(0, "CPU", device_type=0)
    b.call("sched_graph_compute", 0, 100, sched=0, graph=0)
    c = b.call("graph_compute", 10, 90, backend=0, sched=0, graph=0, split=0)
    b.buffer(0x1, base=0x1000, size=0x1000, is_host=True)
    b.access(c, "write", 0x1, 0, 16, tensor="x")
    b.write(tmp_path / "open.ggmltrace", extra_zero_chunks=3)
    t = analysis.load(tmp_path / "open.ggmltrace")
    assert not t.closed and not t.damage and "was not closed" in t.warnings[0]
    rc, _, err = cli(capsys, "races", tmp_path / "open.ggmltrace")
    assert rc == 0 and "was not closed" in err  # a crash is no damage: the prefix is analysed
    assert "not closed" in t.banner()


def test_no_scheduler_is_nothing_to_analyse(tmp_path, capsys):
    b = TraceBuilder()
    b.meta("exe", "/bin/python3")
    b.call("user_mark", 5, obj="hello")
    b.write(tmp_path / "empty.ggmltrace")
    rc, _, err = cli(capsys, "races", tmp_path / "empty.ggmltrace")
    line = one_error_line(err, "races")
    assert rc == 2 and "never attached: no ggml backend scheduler ran" in line


def test_escape_sequences_do_not_reach_the_terminal(tmp_path, capsys):
    b = TraceBuilder()
    b.backend(0, "\x1b[2J\x1b[31mEVIL\x07", device_type=0)
    b.call("sched_graph_compute", 0, 100, sched=0, graph=0)
    b.call("graph_compute", 10, 90, backend=0, sched=0, graph=0, split=0)
    b.write(tmp_path / "esc.ggmltrace")
    rc, out, err = cli(capsys, "summary", tmp_path / "esc.ggmltrace")
    assert rc == 0 and "\x1b" not in out + err and "\x07" not in out
    assert "\\x1b[2J\\x1b[31mEVIL\\x07" in out


# -- real programs ------------------------------------------------------------------------------

def test_capture_refused_by_the_hooks(model, tmp_path, capsys):
    """b11434's hooks in a b10531 program: the hooks refuse (backend API 3 vs 2) and write why
    into the trace; races must not go green on it."""
    out = tmp_path / "refused.ggmltrace"
    r = ggml_trace("record", "--hooks", programs.hooks("b11434"), "-o", out, "--",
                   *simple_cmd("b10531", model), timeout=120)
    assert r.returncode == 0 and out.exists()
    rc, _, err = cli(capsys, "races", out)
    line = one_error_line(err, "races")
    assert rc == 2 and "the capture never attached" in line
    assert "backend API version 2, the hooks were built for 3" in line
    rc, out_text, _ = cli(capsys, "summary", out)
    assert rc == 0 and "never attached" in out_text
    rc, _, err = cli(capsys, "report", out, "-o", tmp_path / "r.html")
    assert rc == 0 and "never attached" in (tmp_path / "r.html").read_text()


def test_sigkill_keeps_every_event_seen_live(model, tmp_path):
    """Read the growing trace of a running llama-completion, then kill -9 it: every event the
    live file showed is still there, unchanged, after the kill."""
    out = tmp_path / "live.ggmltrace"
    exe = Path(sys.executable).parent / "ggml-trace"
    cmd = completion_cmd("b10531", model, "--ignore-eos", "-c", "4096", n=100000)
    proc = subprocess.Popen([str(exe), "record", "--no-nvml", "-o", str(out), "--", *cmd],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        live, end = None, time.monotonic() + 120
        while time.monotonic() < end:
            time.sleep(0.2)
            if not out.exists() or out.stat().st_size <= HEADER_SIZE:
                continue
            t = analysis.load(out)
            if (t.calls["kind"] == "sched_graph_compute").sum() >= 20:
                live = t
                break
        assert live is not None, "the program made no progress"
        assert not live.closed and not live.damage  # read while running: unclosed, not damaged
        seen = read_trace_file(out)  # a look while the program runs ...
        while len(read_trace_file(out).calls) == len(seen.calls) and time.monotonic() < end:
            time.sleep(0.05)  # ... and it goes on writing after it
        assert proc.poll() is None
        child = int(subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                   text=True).stdout.split()[0])
        os.kill(child, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    after = analysis.load(out)
    assert not after.damage
    # Compared as records (bytes): loaded times move as later CLOCK points refine the clock.
    kept = read_trace_file(out)
    for name in ("calls", "accesses", "places", "buffers", "backends", "threads", "string_recs",
                 "meta", "clocks"):
        a, b = (set(records(getattr(r, name)).view(VOID).tolist()) for r in (seen, kept))
        assert a and a <= b, f"{name}: {len(a - b)} records seen live are gone or changed"
    assert len(kept.calls) > len(seen.calls)  # and what it wrote after the look is kept too


def test_a_missing_package_is_named_not_blamed_on_the_trace(tmp_path):
    """A reading command on a host without plotly (the GPU hosts have none) says what to install."""
    code = ("import sys; sys.modules['plotly'] = None; from ggml_trace.tracer.cli import main; "
            f"sys.exit(main(['timeline', {str(DATA / 'cuda-b10531-layer-2gpu.ggmltrace')!r}, '-o', "
            f"{str(tmp_path / 't.html')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=Path(__file__).parents[1], timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == \
        "ggml-trace timeline: needs the Python package 'plotly', which is not installed", r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "t.html").exists()


@pytest.mark.parametrize("command", ["races", "stalls", "summary"])
def test_a_reader_that_goes_away_gets_no_error_line(command):
    """`ggml-trace races t | head`: when the pipe's reader has gone, the command stops quietly with
    the status of a tool killed by SIGPIPE, not with an error line on stderr."""
    exe = Path(sys.executable).parent / "ggml-trace"
    trace = DATA / "cuda-b10531-layer-2gpu.ggmltrace"
    # `true` exits at once: the first write after the trace is loaded meets a closed pipe
    r = subprocess.run(f"'{exe}' {command} '{trace}' | true; echo \"status ${{PIPESTATUS[0]}}\" >&2",
                       shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120)
    assert r.stderr.strip() == "status 141", r.stderr
