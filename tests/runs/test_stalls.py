"""`ggml-trace stalls`: what each host-blocking call waited for and whether any access needed it, on
scheduler scenarios over virtual devices and on the committed H200 Vulkan traces."""
import json
from pathlib import Path

import pandas as pd

from ggml_trace.analysis import load
from ggml_trace.analysis.stalls import STALL_COLUMNS, stalls, totals
from conftest import ggml_trace
from ggml_trace.tracer import scenario

DATA = Path(__file__).parent / "data"


def waits(s, kind=None):
    w = s[s["kind"].isin(["synchronize", "event_synchronize"])]
    return w if kind is None else w[w["kind"] == kind]


def test_the_pipeline_fixs_waits_are_needed_and_name_the_tensor(tmp_path):
    """b11434-ppfix: before each later iteration's CPU split the host waits on the event recorded
    after VDEV0's copy of e; each of those waits orders the CPU's write of e after that read."""
    r = scenario.run("pipeline-input-reuse", build="b11434-ppfix", runs=1, latency_us="2000,0", out_dir=tmp_path)
    s = stalls(load(r.traces[0]))
    assert list(s.columns) == list(STALL_COLUMNS)
    fix = waits(s, "event_synchronize")
    fix = fix[(fix["backend"] == "VDEV0") & (fix["split"] == 0)]
    assert len(fix) == 7
    assert fix["needed"].all() and not fix["avoidable"].any()
    assert fix["conflict"].str.contains(r"VDEV0 cpy_tensor_async \(graph \d+\) reads e before CPU split 0").all()
    assert (fix["blocked_ns"] > 1_000_000).sum() >= 5  # VDEV0 is 2 ms an operation behind
    # the program's last wait on VDEV1 is needed: it reads the results VDEV1 copied into host memory
    last = waits(s)[waits(s)["backend"] == "VDEV1"].iloc[-1]
    assert last["needed"] and "reads on the host" in last["conflict"]


def test_draining_every_queue_before_every_split_is_mostly_avoidable(tmp_path):
    """b11434-ppsync synchronizes every backend before every split: each of those waits, taken on its
    own, could go (the next one drains the same work before anything touches it), and the analysis
    says so; only the program's own waits for its results are needed."""
    fixed = stalls(load(scenario.run("pipeline-input-reuse", build="b11434-ppfix", runs=1, latency_us="2000,0",
                                     out_dir=tmp_path / "fix").traces[0]))
    blunt = stalls(load(scenario.run("pipeline-input-reuse", build="b11434-ppsync", runs=1, latency_us="2000,0",
                                     out_dir=tmp_path / "sync").traces[0]))
    tf, tb = totals(fixed), totals(blunt)
    assert tb["avoidable_calls"] > 2 * tf["avoidable_calls"]
    assert tb["avoidable_blocked_ns"] > tf["avoidable_blocked_ns"]
    sync = waits(blunt, "synchronize")
    inside = sync[sync["graph"].notna()]
    assert len(inside) >= 8 * 3 * 2 and inside["avoidable"].all(), inside[~inside["avoidable"]]["conflict"].tolist()
    assert inside.loc[inside["pending"] > 0, "blocked_ns"].sum() > 20_000_000  # VDEV0's 2 ms per operation


def test_the_23321_fixs_synchronize_is_needed(tmp_path):
    """b10531 synchronizes VDEV0 before the input-less CPU split: that wait orders VDEV0's read of h
    before the CPU's write of z over the same bytes."""
    r = scenario.run("inputless-reuse", build="b10531", runs=1, out_dir=tmp_path)
    s = stalls(load(r.traces[0]))
    w = waits(s, "synchronize")
    w = w[(w["backend"] == "VDEV0") & (w["split"] == 2)]
    assert len(w) == 1
    assert w.iloc[0]["needed"] and "reads h before CPU split 2 (graph 0) writes z" in w.iloc[0]["conflict"]


def test_the_h200_vulkan_traces():
    """The fix's wait on the real GPU is needed (the CPU's next write of node_1 or embd); the
    totals add up; synchronous copies are counted, not judged."""
    s = stalls(load(DATA / "vulkan-nvidia-b11434-ppfix-h200.ggmltrace"))
    w = waits(s, "event_synchronize")
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


def test_leaving_out_calls_by_their_buffers_changes_no_answer(tmp_path, monkeypatch):
    """Calls whose buffers cannot meet the other side's are left out before the join (BUFFER_BITS):
    the frame is the same as when every call's accesses are joined, on traces with needed and
    avoidable waits, conflicts named, and the CPU's waits for results read on the host."""
    from ggml_trace.analysis import stalls as module
    runs = [scenario.run("pipeline-input-reuse", build=b, runs=1, latency_us="2000,0", out_dir=tmp_path / b).traces[0]
            for b in ("b11434-ppfix", "b11434-ppsync")]
    paths = [*runs, DATA / "vulkan-nvidia-b11434-ppfix-h200.ggmltrace", DATA / "vulkan-nvidia-b10531-h200.ggmltrace"]
    seen = pd.Series(dtype=bool)
    for path in paths:
        assert module._Model(load(path)).writes_of is not None  # the buffers as bits, where they are few
        with_bits = stalls(load(path))
        monkeypatch.setattr(module, "BUFFER_BITS", 0)
        without = stalls(load(path))
        monkeypatch.undo()
        pd.testing.assert_frame_equal(with_bits, without)
        seen = pd.concat([seen, with_bits["needed"].dropna().astype(bool)])
    assert seen.any() and not seen.all()


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
