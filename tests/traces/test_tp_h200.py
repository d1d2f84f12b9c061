"""Tensor parallelism on two H200s (b10531, `-sm tensor`, GGML_CUDA_ALLREDUCE=none): traces made by
bench/gpu/tp_h200.py — one run without delays, one with 200 us before every ADD compute on the
second GPU (its output diverged from the one-GPU output in 10 of 10 runs), one with the same delay
on the first GPU (0 of 10). The run counts are in bench/gpu/results-tp-h200.json and docs/gpu.md;
these tests check what the traces themselves say."""
import pytest

from ggml_trace import analysis
from support import DATA, apart_from_warmup_clear
from ggml_trace.analysis.races import races

WAYS = {"none": None, "delay-gpu1": "CUDA1", "delay-gpu0": "CUDA0"}


@pytest.fixture(scope="module", params=list(WAYS))
def run(request):
    return request.param, analysis.load(DATA / f"cuda-b10531-tp-2gpu-{request.param}.ggmltrace")


def test_the_scratch_race_is_the_only_race_and_rests_on_host_times(run):
    way, t = run
    f = apart_from_warmup_clear(races(t).findings)  # llama.cpp's clear of the KV cache after its warm-up races too
    assert len(f) == 1, f
    r = f.iloc[0]
    # CUDA1's ADD reads the scratch; the next subgraph's partial sum is copied into it on CUDA0's queue.
    assert r["class"] == "write-after-read"
    assert (r["a_backend"], r["a_kind"], r["a_mode"]) == ("CUDA1", "graph_compute", "read")
    assert (r["b_kind"], r["b_mode"], r["b_queue_backend"]) == ("cpy_tensor_async", "write", "CUDA0")
    assert r["a_tensor"] == r["b_tensor"] == "allreduce.tmp[0]@CUDA1"
    # recorded without device timing: neither manifested nor latent can be proven
    assert (r["verdict"], r["basis"]) == ("undetermined", "host")
    assert r["count"] > 100  # every subgraph of every graph


def test_the_delays_act_on_the_chosen_gpu_stream(run):
    way, t = run
    d = t.delays
    gpu = WAYS[way]
    if gpu is None:
        assert len(d) == 0
        return
    assert len(d) > 0
    assert set(d["backend"].astype(str)) == {gpu}
    assert set(d["where"].astype(str)) == {"stream"}
    assert set(d["target_kind"].astype(str)) == {"graph_compute"}
    assert (d["requested_ns"] == 200_000).all()
    assert not d["failed"].any()
    # every delay targets a compute of its own GPU that the trace holds
    targets = t.calls.set_index("call_id").loc[d["target_call_id"]]
    assert set(targets["backend"].astype(str)) == {gpu}


def test_the_meta_backend_does_no_work_of_its_own(run):
    _, t = run
    backends = {b["name"]: b for b in analysis.summarize(t)["backends"]}
    assert set(backends) >= {"CUDA0", "CUDA1", "Meta(CUDA0,CUDA1)"}
    assert backends["Meta(CUDA0,CUDA1)"]["busy_ns"] == 0
    assert backends["CUDA0"]["busy_ns"] > 0 and backends["CUDA1"]["busy_ns"] > 0
