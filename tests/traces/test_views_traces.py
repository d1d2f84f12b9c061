"""The views of committed traces and of traces written here, without a browser: the report's order
of sections and its record command, and the Perfetto export's trace events. Recorded traces:
tests/runs/test_views_recorded.py; in a browser: tests/external/test_views.py."""
from __future__ import annotations

import json
import re

import pytest

from support import DATA, ROOT, ggml_trace
from support.view_traces import HOSTILE, expected_intervals, hostile_trace, overlap_trace, recorded_with, validate_trace_events

from ggml_trace import analysis

GPU_TIMED = DATA / "cuda-b10531-layer-2gpu-timed.ggmltrace"  # 2 H200s, CUPTI


def test_the_report_puts_the_races_before_the_environment():
    from ggml_trace.analysis.report import report_html

    page = report_html(analysis.load(ROOT / "tests" / "data" / "vulkan-nvidia-b11434-pp-h200.ggmltrace"))
    assert re.findall(r"<h2>([^<]*)</h2>", page) == ["Races", "Host stalls", "Environment", "Command", "Summary",
                                                     "Timeline"]
    assert page.index('id="race-1"') < page.index('id="race-2"') < page.index("<h2>Environment</h2>")
    cmd = recorded_with(page)  # recorded on one virtual device, Vulkan timed by markers
    assert cmd[:2] == ["env", "CUDA_VERSION=13.0.2"] and "CUDA_HOME=/usr/local/cuda" in cmd
    at = cmd.index("ggml-trace")
    assert cmd[at:at + 7] == ["ggml-trace", "record", "--virtual-devices", "1", "--device-timing", "-o",
                              "vulkan-nvidia-b11434-pp-h200.ggmltrace"]
    assert cmd[at + 7:at + 9] == ["--", "/work/main/.ppwork/build/bin/llama-completion"]


@pytest.mark.parametrize("which", ["hostile", "overlap", "gpu"])  # recorded: tests/runs/test_views_recorded.py
def test_perfetto_json_is_valid(tmp_path, which):
    path = {"hostile": lambda: hostile_trace(tmp_path / "h.ggmltrace"),
            "overlap": lambda: overlap_trace(tmp_path / "o.ggmltrace"), "gpu": lambda: GPU_TIMED}[which]()
    t = analysis.load(path)
    out = tmp_path / "t.json"
    r = ggml_trace("export", path, "--format", "perfetto", "-o", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    c = validate_trace_events(doc)
    assert c.get("X", 0) + c.get("b", 0) == expected_intervals(t)
    if which == "overlap":
        assert c["b"] == 1  # the partially overlapping synchronize, as an async slice
    if which == "hostile":
        assert c["s"] == c["f"] >= 1
    if which == "gpu":  # CUPTI kernels on their own tracks, NVML samples as counters
        tracks = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
        assert {"CUDA0 kernels (CUPTI)", "CUDA1 kernels (CUPTI)"} <= tracks
        s = t.gpu_samples
        assert c["C"] == int((s["t"] >= 0).sum()) > 0
        counters = {e["name"] for e in doc["traceEvents"] if e["ph"] == "C"}
        assert "GPU0 sm_clock_mhz" in counters and "GPU1 power_w" in counters
    if which == "hostile":
        names = json.dumps(doc, ensure_ascii=False)
        assert HOSTILE[3] in [e["args"]["name"] for e in doc["traceEvents"]
                              if e["ph"] == "M" and e["name"] == "thread_name"][0]
        assert "&lt;" not in names.replace(HOSTILE[5], "")  # raw strings in JSON
