"""Delays injected on an H200 (bench/gpu/delay_h200.sh, llama-completion -ngl 99, CUPTI): what the
committed traces say of the CUDA stream's stalls, by a host function and by the spin kernel."""
import numpy as np
import pytest

from support import DATA

from ggml_trace.analysis import load
from ggml_trace.analysis.delay import delay_stalls

MS = 1_000_000


@pytest.mark.parametrize("name,n", [("cuda-b10531-delay-graph5", 1), ("cuda-b10531-delay-graphs4-12", 9)])
def test_cuda_stream_delays_recorded_on_an_h200(name, n):
    """bench/gpu/delay_h200.sh on an H200 (llama-completion -ngl 99, CUPTI): the backend's stream
    stalled before each targeted compute's first kernel, while the host went on."""
    t = load(DATA / f"{name}.ggmltrace")
    d = t.delays
    assert len(d) == n and (d["where"] == "stream").all() and (d["requested_ns"] == 2 * MS).all()
    assert (d["t_end"] < d["device_end"]).all()  # enqueued, not waited for: the host went on before the stall ended
    # the host function slept the requested time on the stream, and the first kernel of the
    # targeted compute came after it
    assert ((d["device_end"] - d["device_begin"]).astype(int) >= 2 * MS).all()
    s = delay_stalls(t)
    assert (s["target_start"] >= d["device_end"].astype(float)).all()
    assert (s["stall_ns"] >= 2 * MS).all() and (s["gap_ns"] >= s["stall_ns"]).all()
    # measured against CUPTI's kernels: the requested time plus the CUDA runtime's latency in
    # starting the host function, never less (the figures: bench/bench_device_timing.py, docs/delay.md)
    assert (s["error"] >= 0).all()


def test_cuda_spin_kernel_delays_on_an_h200():
    """The same with the spin kernel (the GPU times the stall itself): the spin kernel ran for the
    requested 2 ms on the stream, and each targeted compute's first kernel, seen by CUPTI, came after
    it (how close the stall is to the request: bench/bench_device_timing.py)."""
    t = load(DATA / "cuda-b10531-spin-delay-graphs5-7.ggmltrace")
    d = t.delays
    assert len(d) == 3 and (d["where"] == "stream").all() and (d["requested_ns"] == 2 * MS).all()
    s = delay_stalls(t)
    assert (s["target_start"].to_numpy() >= d["device_end"].astype(float).to_numpy()).all(), s
    assert (s["stall_ns"] > 0).all() and (s["gap_ns"] >= s["stall_ns"]).all(), s
    # the spin kernel is CUPTI's too, tied to the delay (not to the compute it precedes), and its
    # GPU-timed record agrees with CUPTI's within a few microseconds
    spin = t.gpu[t.gpu["name"].astype(str) == "ggml_trace_spin"]
    calibration = spin[spin["call_id"].isna()]  # one 0 ns spin per backend's private stream, at its opening
    spun = (d["device_end"] - d["device_begin"]).astype(int).min()
    assert len(calibration) >= 1 and ((calibration["t_end"] - calibration["t_begin"]) < spun).all()
    spin = spin[spin["call_id"].notna()].set_index("call_id")
    assert sorted(spin.index) == sorted(d["call_id"]) and (spin["call_kind"] == "delay").all()
    for col, ours in (("t_begin", "device_begin"), ("t_end", "device_end")):
        assert (np.abs(spin.loc[d["call_id"], col].to_numpy() - d[ours].to_numpy().astype(np.int64)) < 20_000).all()
    assert ((d["device_end"] - d["device_begin"]).astype(int) >= 2 * MS).all()
