"""The views of real traces recorded here (the CPU + RPC demo run, a virtual-device scenario with
a race; support.view_traces): the timeline's filters and colours, the exports, and the report's
record command, which records the same run again. In a browser: tests/external/test_views.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from support import ROOT, ggml_trace
from support.view_traces import expected_intervals, recorded_with, validate_trace_events

from ggml_trace import analysis


def test_filters_and_colours(real_trace, tmp_path):
    from ggml_trace.analysis.intervals import IntervalModel

    DEMO = real_trace("demo")
    t = analysis.load(DEMO)
    full = analysis.timeline(t, races=False).layout.meta["ggml_trace"]
    g = analysis.timeline(t, graphs=(3, 5), races=False)
    m = g.layout.meta["ggml_trace"]
    iv = _Model_iv(t, graphs=(3, 5))
    assert set(iv["graph"].unique()) <= {-1, 3, 4, 5}
    assert 0 < m["intervals"] < full["intervals"]
    only = analysis.timeline(t, backends="RPC0", races=False).layout.meta["ggml_trace"]
    assert not any(r.startswith("CPU") for r in only["rows"])
    assert any(r.startswith("RPC0") for r in only["rows"])
    # a window from the middle graph compute on, whatever the run's pace on this machine (µs); the
    # middle of the run's time can fall in a gap with no call at all (while the model loads), and the
    # middle compute in the run's last tenth, so the window is half of what is left of the run after it
    computes = t.calls.loc[t.calls["kind"] == "graph_compute", "t_begin"].sort_values()
    lo = int(computes.iloc[len(computes) // 2]) // 1000
    t_end = IntervalModel(t).t_end  # ns: the last call's or device interval's end
    hi = lo + max((t_end // 1000 - lo) // 2, 1)
    w = analysis.timeline(t, window=(lo, hi), races=False)
    iv = _Model_iv(t, window=(lo, hi))
    assert len(iv) and ((iv["t1"] >= lo * 1000) & (iv["t0"] <= hi * 1000)).all()
    assert w.layout.xaxis.range == pytest.approx((lo / 1e6, hi / 1e6))
    # a window that runs past the trace's end is drawn to its end
    past = analysis.timeline(t, window=(lo, t_end // 1000 + 1_000_000), races=False)
    assert past.layout.xaxis.range == pytest.approx((lo / 1e6, t_end / 1e9))
    by_split = analysis.timeline(t, color_by="split", races=False)
    names = [d.name for d in by_split.data if str(d.meta).startswith("bars:")]
    assert "split 0" in names and "no split" in names
    with pytest.raises(ValueError):
        analysis.timeline(t, color_by="colour")
    r = ggml_trace("timeline", DEMO, "-o", tmp_path / "x.html", "--backend", "CUDA7")
    assert r.returncode == 2 and "no backend matches" in r.stderr and "RPC0" in r.stderr


def _Model_iv(t, **kw):
    from ggml_trace.analysis.intervals import IntervalModel

    return IntervalModel(t, **kw).iv


def test_counter_rows_hook(real_trace, tmp_path):
    t = analysis.load(real_trace("vdev"))
    t.gpu_samples = pd.DataFrame({"t": np.arange(0, 10_000_000, 1_000_000),
                                  "device": 0, "metric": "util %",
                                  "value": np.linspace(0, 100, 10)})
    fig = analysis.timeline(t, races=False)
    rows = fig.layout.meta["ggml_trace"]["rows"]
    assert rows[-1] == "GPU0 util %"


LLAMA_SIMPLE = ROOT / "build" / "llama-b11434" / "bin" / "llama-simple"


@pytest.mark.skipif(not LLAMA_SIMPLE.exists(), reason="needs build b11434 (make setup)")
def test_recorded_with_reproduces_a_virtual_device_run(tmp_path):
    """The report's record command carries the run's virtual-device settings, device timing and its
    other variables: run again, it records the same settings and gives the same command."""
    from ggml_trace.analysis.report import report_html
    from ggml_trace.tracer import programs

    program = [str(LLAMA_SIMPLE), "-m", str(programs.tiny_model()), "-n", "4", "the of"]
    # a user's environment has no GGML_TRACE_ variable here; the tests' keeps the download cache's
    users_env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_TRACE_")}
    first = tmp_path / "first"
    first.mkdir()
    r = ggml_trace("record", "--virtual-devices", "1", "--vdev-latency-us", "300", "--vdev-jitter-us", "50",
                   "--vdev-seed", "7", "--device-timing", "-o", first / "run.ggmltrace", "--", *program,
                   env=dict(users_env, OMP_NUM_THREADS="2"), timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    t = analysis.load(first / "run.ggmltrace")
    cmd = recorded_with(report_html(t, races=False))
    at = cmd.index("ggml-trace")
    assert cmd[0] == "env" and "OMP_NUM_THREADS=2" in cmd[1:at]
    assert not any(w.startswith("GGML_TRACE_") for w in cmd[1:at])  # those are the options'
    assert cmd[at:] == ["ggml-trace", "record", "--virtual-devices", "1", "--vdev-latency-us", "300",
                        "--vdev-jitter-us", "50.0", "--vdev-seed", "7", "--device-timing", "-o", "run.ggmltrace",
                        "--", *program]
    again = tmp_path / "again"
    again.mkdir()
    env = {k: v for k, v in users_env.items() if k != "OMP_NUM_THREADS"}  # the command sets it
    exe = Path(sys.executable).parent / "ggml-trace"
    r = subprocess.run([str(exe) if w == "ggml-trace" else w for w in cmd], cwd=again, env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    t2 = analysis.load(again / "run.ggmltrace")
    assert set(t2.meta["env"].split("\0")) == set(t.meta["env"].split("\0"))
    assert recorded_with(report_html(t2, races=False)) == cmd


@pytest.mark.parametrize("which", ["demo", "vdev"])  # written here, committed: tests/traces/test_views_traces.py
def test_perfetto_json_is_valid(real_trace, tmp_path, which):
    path = real_trace(which)
    t = analysis.load(path)
    out = tmp_path / "t.json"
    r = ggml_trace("export", path, "--format", "perfetto", "-o", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    c = validate_trace_events(doc)
    assert c.get("X", 0) + c.get("b", 0) == expected_intervals(t)
    if which == "vdev":
        assert c["s"] == c["f"] >= 1


def test_parquet_export(real_trace, tmp_path):
    VDEV = real_trace("vdev")
    t = analysis.load(VDEV)
    r = ggml_trace("export", VDEV, "--format", "parquet", "-o", tmp_path / "pq")
    assert r.returncode == 0, r.stderr
    for name in ("calls", "splits", "copies", "sync", "accesses", "allocations", "marks",
                 "threads", "backends", "buffers", "device", "gpu", "gpu_samples"):
        df = pd.read_parquet(tmp_path / "pq" / f"{name}.parquet")
        assert len(df) == len(getattr(t, name)) and list(df.columns) == list(
            getattr(t, name).columns)
    meta = json.loads((tmp_path / "pq" / "meta.json").read_text())
    assert meta["meta"]["cmdline"] == t.meta["cmdline"]


def test_exports_need_no_plotting_library(real_trace, tmp_path):
    """The Perfetto and Parquet exports are views of the interval model (analysis/intervals.py),
    which imports no plotting library: they work where plotly is not installed."""
    code = (
        "import sys; sys.modules['plotly'] = None\n"
        "from ggml_trace.analysis import load\n"
        "from ggml_trace.analysis.export import export_parquet, perfetto_events\n"
        f"t = load({str(real_trace('vdev'))!r})\n"
        "n = sum(len(f) for f in perfetto_events(t)['frames'])\n"
        f"files = export_parquet(t, {str(tmp_path / 'pq')!r})\n"
        "print(n, len(files))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    n, files = map(int, r.stdout.split())
    assert n > 0 and files >= 13
