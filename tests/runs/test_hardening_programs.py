"""The reader and the commands on hostile runs of real programs: a capture the hooks refused, a
program killed with SIGKILL while its trace is read live, a pipe whose reader goes away."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from support import DATA, cli, completion_cmd, ggml_trace, one_error_line, simple_cmd

from ggml_trace import analysis
from ggml_trace.analysis.trace_file import read_trace_file
from ggml_trace.analysis.trace_format import HEADER_SIZE, RECORD_SIZE
from ggml_trace.tracer import programs

pytestmark = pytest.mark.filterwarnings("error::DeprecationWarning", "error::FutureWarning")

VOID = np.dtype((np.void, RECORD_SIZE))


def records(recs) -> np.ndarray:
    """A RawTrace's records of one type as a structured array (calls and accesses are Columns)."""
    return recs if isinstance(recs, np.ndarray) else recs.records()


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
