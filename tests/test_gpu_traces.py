"""Traces captured on real H200 GPUs (CUDA build of b10531, see docs/gpu.md), analysed here on a
machine without a GPU."""
from pathlib import Path

import pytest

import analysis

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("name", ["cuda-b10531-layer-2gpu", "cuda-b10531-big-layer-2gpu"])
def test_two_gpu_layer_split_uses_events_and_has_no_races(name):
    t = analysis.load(DATA / f"{name}.ggmltrace")
    assert t.meta["hooks_build"] == "b10531-cuda"
    be = t.backends.drop_duplicates("name").set_index("name")
    assert {"CUDA0", "CUDA1", "CPU"} <= set(be.index)
    assert be.loc["CUDA0", "has_events"] and be.loc["CUDA1", "has_async"]
    assert be.loc["CUDA0", "device_description"] == "NVIDIA H200"
    s = {b["name"]: b for b in t.summary()["backends"]}
    # the scheduler's parallel mode: an event recorded after every split, waited on before copies
    for gpu in ("CUDA0", "CUDA1"):
        assert s[gpu]["splits"] == s[gpu]["event_records"] == s[gpu]["event_waits"] == t.summary()["graphs"]
    copies = t.copies
    assert ((copies.src_backend == "CUDA0") & (copies.dst_backend == "CUDA1")).any()
    assert copies[(copies.src_backend == "CUDA0") & (copies.dst_backend == "CUDA1")]["async"].all()
    assert analysis.races(t).to_json()["races"] == []


def test_one_gpu_partial_offload_without_events():
    t = analysis.load(DATA / "cuda-b10531-nkvo-1gpu.ggmltrace")
    s = {b["name"]: b for b in t.summary()["backends"]}
    assert s["CUDA0"]["splits"] == s["CPU"]["splits"] == 2 * t.summary()["graphs"]
    assert s["CUDA0"]["event_records"] == 0 and s["CUDA0"]["syncs"] > 0  # no events: synchronize
    assert analysis.races(t).to_json()["races"] == []


def test_two_gpu_timeline_renders_with_event_arrows():
    t = analysis.load(DATA / "cuda-b10531-layer-2gpu.ggmltrace")
    fig = analysis.timeline(t)
    rows = " ".join(fig.layout.yaxis.ticktext)
    assert "CUDA0" in rows and "CUDA1" in rows
    (events,) = [tr for tr in fig.data if tr.meta == "arrows:1"]  # event record -> wait arrows
    assert len(events.x) // 3 >= t.summary()["graphs"]  # at least one per graph
