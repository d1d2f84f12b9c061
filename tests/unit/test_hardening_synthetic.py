"""The commands on small hostile traces written here (support.tracegen): names that are escape
sequences or not numbers, a trace never closed, a trace of a program that never ran a scheduler.
Never a crash, never silence, never an escape sequence on the terminal."""
from __future__ import annotations

import pytest

from support import cli, one_error_line
from support.tracegen import TraceBuilder

from ggml_trace import analysis

pytestmark = pytest.mark.filterwarnings("error::DeprecationWarning", "error::FutureWarning")


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
