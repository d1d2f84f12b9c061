"""Device-side timing by the event watcher (GGML_TRACE_DEVICE_TIMING), checked against the
virtual devices, which record when each operation really ran."""
import os

import numpy as np

from ggml_trace import analysis
from ggml_trace.analysis import load
from support import completion_cmd, ggml_trace
from ggml_trace.tracer import scenario

ENQUEUE_KINDS = ["graph_compute", "cpy_tensor_async", "set_tensor_async", "get_tensor_async"]


def test_the_watcher_times_every_operation_and_never_ends_before_the_device(monkeypatch, tmp_path):
    monkeypatch.setenv("GGML_TRACE_DEVICE_TIMING", "1")
    r = scenario.run("pipeline", build="b10531", runs=3, latency_us=0, jitter_us=300, out_dir=tmp_path)
    assert r.corrupt_runs == 0
    for path in r.traces:
        t = load(path)
        d = t.device
        ev = d[d["source"] == "events"].set_index("call_id")
        dv = d[d["source"] == "device"].set_index("call_id")
        assert len(dv) > 20 and sorted(ev.index) == sorted(dv.index), path  # nothing untimed
        assert not any(k.startswith("device_timing.untimed") for k in t.meta)
        j = ev.merge(dv, left_index=True, right_index=True, suffixes=("", "_dev"))
        # The end event is recorded after the operation on the same queue: it cannot pass first.
        assert (j["t_end"] >= j["t_end_dev"]).all(), path
        assert (j["t_begin"] <= j["t_end"]).all()
        # Per queue, the watcher sees operations finish in the order they were enqueued. (Copies are
        # left out: a peer copy runs, and is timed, on its source's queue, not its call's backend's.)
        own = ev[ev["kind"].astype(str) != "cpy_tensor_async"]
        for _, q in own.reset_index().merge(t.calls[["call_id", "t_begin"]].rename(
                columns={"t_begin": "enqueued"}), on="call_id").groupby("backend", observed=True):
            assert np.all(np.diff(q.sort_values("enqueued")["t_end"].to_numpy()) >= 0)
        assert analysis.races(t).to_json()["races"] == []


def test_timing_is_off_unless_asked(monkeypatch, tmp_path):
    monkeypatch.delenv("GGML_TRACE_DEVICE_TIMING", raising=False)
    r = scenario.run("y-graph", build="b10531", runs=1, latency_us=0, out_dir=tmp_path)
    d = load(r.traces[0]).device
    assert len(d) > 0 and set(d["source"]) == {"device"}


def test_record_device_timing_on_a_llama_run(model, tmp_path):
    out = tmp_path / "t.ggmltrace"
    r = ggml_trace("record", "--device-timing", "--virtual-devices", "1", "-o", out, "--",
                   *completion_cmd("b10531", model, "-ngl", "99", n=8), env=dict(os.environ), timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    t = load(out)
    ev = t.device[t.device["source"] == "events"]
    splits = t.calls[(t.calls["kind"] == "graph_compute") & (t.calls["backend"] == "VDEV0")]
    assert len(splits) >= 8 and set(splits["call_id"]) <= set(ev["call_id"])
    assert set(ev["kind"]) <= set(ENQUEUE_KINDS)
    assert analysis.races(t).to_json()["races"] == []
    rows = analysis.timeline(t).layout.meta["ggml_trace"]["rows"]
    assert "VDEV0 execution" in rows
