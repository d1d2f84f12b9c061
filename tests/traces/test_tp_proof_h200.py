"""Tensor parallelism on two H200s with device times (b10531, `-sm tensor`), traces made by
bench/gpu/tp_proof_h200.sh; run counts in bench/gpu/results-h200-2026-12-01/ and
docs/tensor-parallel.md. These tests check what the traces themselves say:

- cupti-none / cupti-delay-gpu1 (GGML_CUDA_ALLREDUCE=none, --device-timing --cupti): the scratch
  race latent with its margin in a run whose output was right, MANIFESTED in a run delayed 200 us
  before CUDA1's ADDs whose output diverged;
- dt-none (the same without CUPTI): the event watcher's times do not prove either verdict;
- nccl-cupti, internal-cupti: the build's default path (NCCL) and GGML_CUDA_ALLREDUCE=internal,
  named from their kernels; nccl-delay: a 2 ms delay before CUDA1's part of every allreduce.
"""
import pytest

from ggml_trace import analysis
from support import DATA, apart_from_warmup_clear
from ggml_trace.analysis.allreduce import held_by_delays
from ggml_trace.analysis.races import races



def load(name):
    return analysis.load(DATA / f"cuda-b10531-tp-2gpu-{name}.ggmltrace")


def scratch_finding(t):
    f = apart_from_warmup_clear(races(t).findings)  # llama.cpp's clear of the KV cache after its warm-up races too
    assert len(f) == 1, f
    r = f.iloc[0]
    assert r["a_tensor"] == r["b_tensor"] == "allreduce.tmp[0]@CUDA1"
    assert (r["a_kind"], r["a_role"], r["b_kind"], r["b_queue_backend"]) == (
        "graph_compute", "reduce", "cpy_tensor_async", "CUDA0")
    return r


def test_a_correct_run_shows_the_race_latent_with_its_margin():
    r = scratch_finding(load("cupti-none"))
    assert (r["verdict"], r["basis"]) == ("latent", "device")
    assert r["margin_ns"] > 0  # CUDA1's ADD ended before the next copy into its scratch began


def test_a_diverged_run_shows_it_manifested():
    t = load("cupti-delay-gpu1")
    r = scratch_finding(t)
    assert (r["verdict"], r["basis"]) == ("manifested", "device") and r["manifested"]
    d = t.delays
    assert len(d) > 0 and set(d["backend"].astype(str)) == {"CUDA1"}
    assert set(d["where"].astype(str)) == {"stream"} and (d["requested_ns"] == 200_000).all()


def test_cupti_times_decide_over_the_watcher():
    t = load("cupti-none")
    assert {"cupti", "events"} <= set(t.device["source"].astype(str))


def test_the_watcher_alone_proves_neither_verdict():
    r = scratch_finding(load("dt-none"))
    assert (r["verdict"], r["basis"]) == ("undetermined", "events")


@pytest.mark.parametrize("name,path", [("nccl-cupti", "nccl"), ("internal-cupti", "internal")])
def test_which_allreduce_ran_is_named_from_its_kernels(name, path):
    t = load(name)
    (a,) = analysis.summarize(t)["allreduce"]
    assert (a["registry"], a["devices"], a["path"]) == ("CUDA", "CUDA0,CUDA1", path)
    assert a["evidence"] == "kernels recorded by CUPTI"
    assert a["accepted_calls"] > 0 and a["declined_calls"] == 0
    c = t.calls
    comm = c[c["kind"] == "comm_allreduce"]
    assert len(comm) == 2 * a["accepted_calls"] and (comm["role"] == "reduce").all()
    assert set(comm["backend"].astype(str)) == {"CUDA0", "CUDA1"}
    # the butterfly did not run, and the barrier leaves nothing unordered
    assert not (c["role"] == "copy").any() and not ((c["kind"] == "graph_compute") & (c["role"] == "reduce")).any()
    assert len(apart_from_warmup_clear(races(t).findings)) == 0
    # the allreduce kernels CUPTI saw belong to the calls
    kernels = t.gpu[t.gpu["name"].astype(str).str.contains("nccl" if path == "nccl" else "ggml_cuda_ar_kernel")]
    assert len(kernels) >= len(comm) and kernels["call_id"].isin(comm["call_id"]).all()


@pytest.mark.parametrize("name", ["cupti-none", "dt-none"])
def test_allreduce_none_is_the_butterfly_declined_call_by_call(name):
    """GGML_CUDA_ALLREDUCE=none: CUDA still makes a communicator, but its allreduce returns false for
    every tensor, so the meta backend's butterfly (copies, then ADDs) does the reduction."""
    t = load(name)
    (a,) = analysis.summarize(t)["allreduce"]
    assert (a["registry"], a["path"], a["accepted_calls"]) == ("CUDA", "butterfly", 0)
    assert a["evidence"] == "the registry declined every call" and a["declined_calls"] == 136
    c = t.calls
    comm = c[c["kind"] == "comm_allreduce"]
    assert len(comm) == 2 * 136 and comm["declined"].all()
    assert not c.loc[~c["kind"].isin(["comm_allreduce", "cpy_tensor_async"]), "declined"].any()
    assert (c["role"] == "copy").sum() > 0 and ((c["kind"] == "graph_compute") & (c["role"] == "reduce")).any()


def test_the_allreduce_holds_every_device_until_all_arrive():
    t = load("nccl-delay")
    d = t.delays
    assert len(d) > 0 and (d["target_kind"] == "comm_allreduce").all()
    assert set(d["backend"].astype(str)) == {"CUDA1"}
    held = held_by_delays(t, device_index=0)
    assert len(held) == len(d)
    # CUDA0's part of each call ended only after CUDA1's delay before that call had
    assert (held["after_ns"] >= 0).all()
    assert len(apart_from_warmup_clear(races(t).findings)) == 0


def test_a_damaged_comm_record_is_unknown_not_an_error():
    t = load("nccl-cupti")
    t.meta["comm.init.0"] = "registry=CUDA;context=1;ctx=not-a-pointer;devices=CUDA0,CUDA1"
    t.meta["comm.init.x"] = "\x00junk"
    (a,) = analysis.summarize(t)["allreduce"]
    assert (a["path"], a["accepted_calls"]) == ("unknown", 0)
