"""`ggml-trace stalls` on the committed H200 Vulkan traces: what each host-blocking call waited for
and whether any access needed it; the command, the timeline and the report."""
import json

import pandas as pd

from support import DATA, ggml_trace, stall_waits

from ggml_trace.analysis import load
from ggml_trace.analysis.stalls import STALL_COLUMNS, stalls, totals


def test_the_h200_vulkan_traces():
    """The fix's wait on the real GPU is needed (the CPU's next write of node_1 or embd); the
    totals add up; synchronous copies are counted, not judged."""
    s = stalls(load(DATA / "vulkan-nvidia-b11434-ppfix-h200.ggmltrace"))
    w = stall_waits(s, "event_synchronize")
    fix = w[(w["backend"] == "Vulkan0") & (w["split"] == 0)]
    assert len(fix) >= 1 and fix["needed"].all()
    assert fix["conflict"].str.contains(r"Vulkan0 cpy_tensor_async \(graph \d+\) reads (?:embd|node_1) before CPU").all()
    t = totals(s)
    assert t["blocked_ns"] == s["blocked_ns"].sum() == t["wait_blocked_ns"] + t["copy_blocked_ns"]
    assert 0 <= t["avoidable_blocked_ns"] <= t["wait_blocked_ns"]
    copies = s[s["kind"] == "buf_set_tensor"]
    assert len(copies) > 0 and copies["needed"].isna().all() and not copies["avoidable"].any()
    per = t["per_boundary"]
    assert per["blocked_ns"].sum() == t["blocked_ns"]
    assert set(per["boundary"]) >= {"graph 3 split 0", "before the first graph"}


def test_cli_json_and_text():
    path = DATA / "vulkan-nvidia-b11434-ppfix-h200.ggmltrace"
    r = ggml_trace("stalls", path, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    s = stalls(load(path))
    assert d["blocked_ns"] == int(s["blocked_ns"].sum())
    assert d["avoidable_blocked_ns"] == int(s.loc[s["avoidable"], "blocked_ns"].sum())
    assert len(d["stalls"]) == len(s) and all("words" in x for x in d["stalls"])
    r = ggml_trace("stalls", path, "--top", "3")
    assert r.returncode == 0, r.stderr
    assert "the host was blocked" in r.stdout and "needed: Vulkan0 cpy_tensor_async" in r.stdout


def test_a_trace_without_waits_gives_the_empty_frame(tmp_path):
    path = DATA / "cuda-b10531-layer-2gpu-timed.ggmltrace"
    s = stalls(load(path))
    assert list(s.columns) == list(STALL_COLUMNS)
    empty = s.iloc[0:0]
    assert totals(empty)["blocked_ns"] == 0
    assert isinstance(totals(empty)["per_graph"], pd.DataFrame)


def test_the_timeline_and_the_report_show_the_stalls():
    from ggml_trace.analysis.report import report_html
    from ggml_trace.analysis.timeline import timeline

    t = load(DATA / "vulkan-nvidia-b11434-ppfix-h200.ggmltrace")
    fig = timeline(t, races=False)
    (layer,) = [tr for tr in fig.data if tr.meta == "stalls"]
    assert len(layer.x) > 0 and any("needed: Vulkan0 cpy_tensor_async" in h for h in layer.hovertext)
    outlines = [sh for sh in fig.layout.shapes if sh.line.color in ("#59A14F", "#F28E2B")]
    assert len(outlines) == len(layer.x)
    assert not any(tr.meta == "stalls" for tr in timeline(t, races=False, stalls=False).data)
    page = report_html(t)
    assert "<h2>Host stalls</h2>" in page and "avoidable (ordered nothing)" in page
    assert page.index("<h2>Races</h2>") < page.index("<h2>Host stalls</h2>") < page.index("<h2>Environment</h2>")
