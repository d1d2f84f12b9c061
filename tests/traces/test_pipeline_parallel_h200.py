"""Pipeline parallelism's cross-ubatch race on an H200 (docs/pipeline-parallel.md): what the
committed traces of NVIDIA's Vulkan driver say, before and with our fix."""
from support import DATA, apart_from_warmup_clear, races_of
from support.pipeline_cases import the_cross_graph_race

from ggml_trace.analysis import load


def test_the_committed_h200_traces():
    """b11434's Vulkan build on one H200 (NVIDIA's driver) with an empty virtual device beside it, so
    that llama.cpp pipelines: the race manifested (output wrong), and is gone with the fix (output
    right); bench/gpu/pipeline_vulkan_h200.sh made them."""
    red = races_of(DATA / "vulkan-nvidia-b11434-pp-h200.ggmltrace")
    found = the_cross_graph_race(red)
    assert {(f["a"]["tensor"], f["b"]["backend"], f["b"]["split"]) for f in found} == {
        ("embd", "CPU", 0), ("node_1", "CPU", 0)}
    assert all(f["a"]["backend"] == "Vulkan0" and f["b"]["graph"] > f["a"]["graph"] and f["manifested"]
               for f in found)
    green = DATA / "vulkan-nvidia-b11434-ppfix-h200.ggmltrace"
    assert apart_from_warmup_clear(races_of(green)) == []  # the warm-up's clear of the KV cache races on Vulkan
    t = load(green)  # the host waited on the event recorded after Vulkan0's copies from host memory
    assert ((t.sync.kind == "event_synchronize") & (t.sync.backend == "Vulkan0")).sum() > 0
    assert (t.calls["kind"].astype(str) == "event_wait").sum() > 0  # pipeline parallelism was on
