"""Several devices of one H200 on the real drivers (bench/gpu/virtual_devices_h200.sh, b11434 built
with CUDA, Vulkan and RPC in one ggml; docs/tensor-parallel.md and docs/pipeline-parallel.md):

- `-sm tensor` on two CUDA virtual devices (GGML_CUDA_DEVICES=2): the butterfly
  (GGML_CUDA_ALLREDUCE=none) unpatched, with the fix, with the fix under the delay `force` found
  (CUDA1's split 1 by 13 ms: unpatched 5 of 5 runs diverged), and the default path;
- `-sm layer` on two Vulkan devices of one GPU (GGML_VK_VISIBLE_DEVICES=0,0), layers on both (the
  output right) and every layer on Vulkan0 beside an empty Vulkan1 (`-ts 1,0`: the output wrong).

These tests read what the traces themselves say; the run counts are in
bench/gpu/results-h200-2026-12-03-virtual/."""
from pathlib import Path

import pytest

from ggml_trace import analysis
from ggml_trace.analysis.races import races
from support import apart_from_warmup_clear
from ggml_trace.analysis.stalls import stalls

DATA = Path(__file__).resolve().parents[1] / "data"


def load(name):
    return analysis.load(DATA / f"{name}.ggmltrace")


def scratch_races(t):
    f = races(t).findings
    return f[f["b_tensor"].astype(str).str.startswith("allreduce.tmp[")]


def test_the_butterfly_on_cuda_virtual_devices_races_on_the_second_devices_scratch():
    t = load("cuda-virtual-b11434-tp2-butterfly")
    f = apart_from_warmup_clear(races(t).findings)  # llama.cpp's clear of the KV cache after its warm-up races too
    assert len(f) == 1, f
    r = f.iloc[0]
    assert r["class"] == "write-after-read"
    assert r["a_tensor"] == r["b_tensor"] == "allreduce.tmp[0]@CUDA1"
    assert (r["a_backend"], r["a_mode"]) == ("CUDA1", "read")
    assert (r["b_kind"], r["b_mode"], r["b_queue_backend"]) == ("cpy_tensor_async", "write", "CUDA0")
    # device timing by the event watcher: the two operations lie within its tolerance
    assert r["verdict"] == "undetermined" and r["basis"] == "events"
    assert r["count"] > 200  # every subgraph of every graph
    (path,) = analysis.summarize(t)["allreduce"]
    assert path["path"] == "butterfly" and path["accepted_calls"] == 0 and path["declined_calls"] > 0


@pytest.mark.parametrize("name", ["cuda-virtual-b11434-tp2-butterfly-tpfix",
                                  "cuda-virtual-b11434-tp2-butterfly-tpfix-forced"])
def test_the_fix_orders_the_scratch_on_cuda_virtual_devices(name):
    t = load(name)
    assert apart_from_warmup_clear(races(t).findings).empty
    # the fix's ordering is in the trace: CUDA1 records an event that CUDA0 waits on before its copy
    kinds = t.calls["kind"].astype(str)
    waits = t.calls[(kinds == "event_wait") & (t.calls["backend"].astype(str) == "CUDA0")]
    assert len(waits) > 100


def test_the_fix_held_under_the_delay_that_made_the_unpatched_build_diverge():
    t = load("cuda-virtual-b11434-tp2-butterfly-tpfix-forced")
    d = t.delays
    assert len(d) > 0 and not d["failed"].any()
    assert set(d["backend"].astype(str)) == {"CUDA1"} and set(d["where"].astype(str)) == {"stream"}
    assert set(d["split"]) == {1} and (d["requested_ns"] == 13_042_000).all()
    assert (d["device_end"] - d["device_begin"] >= 13_000_000).all()  # the spin kernel ran on CUDA1's stream


def test_the_default_allreduce_on_virtual_devices_is_named_internal_not_nccl():
    """NCCL is in the process, but ggml-cuda turns it off for virtual devices ("NCCL disabled:
    virtual devices in use"): the calls the registry accepted ran on the internal pipeline."""
    t = load("cuda-virtual-b11434-tp2-default")
    (path,) = analysis.summarize(t)["allreduce"]
    assert path["path"] == "internal", path
    assert "virtual devices" in path["evidence"] and "CUDA0, CUDA1" in path["evidence"]
    assert path["accepted_calls"] > 0 and path["declined_calls"] == 0
    assert apart_from_warmup_clear(races(t).findings).empty  # the accepted calls are barriers: no scratch to race on


def test_real_gpus_are_not_taken_for_virtual_devices():
    """Two real H200s with NCCL: still NCCL (the description has no virtual device in it)."""
    t = analysis.load(DATA / "cuda-b10531-tp-2gpu-nccl-delay.ggmltrace")
    (path,) = analysis.summarize(t)["allreduce"]
    assert path["path"] == "nccl", path


def pipeline_read_races(t):
    """The pipeline race: Vulkan0's asynchronous copy reads a host input that the next graph's
    CPU split writes (docs/pipeline-parallel.md)."""
    f = races(t).findings
    return f[(f["a_kind"] == "cpy_tensor_async") & (f["a_backend"] == "Vulkan0") & (f["b_backend"] == "CPU")]


def test_two_vulkan_devices_of_one_gpu_are_ordered_by_the_synchronize_before_the_cross_device_copy():
    t = load("vulkan-nvidia-virtual-b11434-layer-2dev")
    assert apart_from_warmup_clear(races(t).findings).empty
    # the scheduler's parallel mode is on (events), and Vulkan0 -> Vulkan1 goes through a synchronous copy
    kinds = t.calls["kind"].astype(str)
    assert (kinds == "event_wait").sum() > 0
    copies = t.copies
    assert ((copies["kind"].astype(str) == "buf_cpy_tensor") & (copies["dst_backend"].astype(str) == "Vulkan1")).any()
    # stalls names the wait that protects the host input: the synchronize on Vulkan0 that orders
    # its asynchronous read of the input before the next graph's CPU split writes it
    s = stalls(t)
    protecting = s[s["needed"] & (s["backend"].astype(str) == "Vulkan0") & (s["kind"].astype(str) == "synchronize")
                   & s["conflict"].astype(str).str.contains(r"Vulkan0 cpy_tensor_async \(graph \d+\) reads node_1 "
                                                            r"before CPU split 0 \(graph \d+\) writes node_1")]
    assert len(protecting) >= 3, s[s["needed"]]["conflict"].tolist()
    assert (protecting["waited_graph"] + 1 >= protecting["graph"]).all()


def test_an_empty_second_vulkan_device_leaves_the_host_input_unordered():
    """Every layer on Vulkan0 (`-ts 1,0`): no cross-device copy, so no synchronize: the race
    manifests (the run's output was wrong, as in 3 of 3 such runs)."""
    t = load("vulkan-nvidia-virtual-b11434-layer-2dev-ts10")
    f = pipeline_read_races(t)
    assert len(f) >= 1 and (f["verdict"] == "manifested").all(), races(t).findings
    assert (f["a_graph"] + 1 == f["b_graph"]).all()  # the next graph's CPU split overwrites it
