"""The GPU counter sampler (tracer/nvml.py) without a GPU: without pynvml it is a no-op; on a
simulated NVML its thread reads every metric it can, once a period, and drops only what is older
than asked. Appending samples to traces and a flight recorder's counters: tests/runs/test_nvml.py."""
import sys
import time

import numpy as np
import pandas as pd

from support import wait_until
from support.fake_nvml import fake_pynvml

from ggml_trace.tracer.nvml import METRICS, NvmlSampler


def test_sampler_without_pynvml_is_a_no_op(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with NvmlSampler(5) as s:
        time.sleep(0.02)
    assert not s.available and "pynvml" in s.reason
    assert len(s.samples()) == 0


def test_sampler_thread_on_simulated_nvml(monkeypatch):
    calls = {}
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(calls))
    t_start = time.monotonic_ns()
    with NvmlSampler(interval_ms=5) as s:
        assert s.available and s.reason == "ok" and s.n_gpus == 2
        wait_until(lambda: calls.get("power0", 0) >= 5, "five readings")  # however long five periods take here
    t_stop = time.monotonic_ns()
    assert calls["init"] == calls["shutdown"] == 1
    n_reads = calls["power0"]
    assert n_reads >= 5
    assert calls["power1"] == 1  # not supported: not asked again

    x = s.samples()
    df = pd.DataFrame({"t": x.t_ns, "device": x.device, "metric": x.metric, "value": x.value})
    assert ((df["t"] >= t_start) & (df["t"] <= t_stop)).all()
    for (dev, metric), g in df.groupby(["device", "metric"]):
        assert np.all(np.diff(g["t"].to_numpy()) > 0), (dev, metric)  # one reading per period
    per = df.groupby(["device", "metric"]).size().to_dict()
    assert {m for d, m in per if d == 0} == set(METRICS)
    assert {m for d, m in per if d == 1} == set(METRICS) - {"power_w"}
    assert per[(0, "sm_clock_mhz")] == n_reads
    assert per[(0, "temperature_c")] in (n_reads // 2, (n_reads + 1) // 2)
    last = df.groupby(["device", "metric"])["value"].last()
    assert last[(0, "power_w")] == 250.5 and last[(1, "sm_clock_mhz")] == 1979
    assert last[(1, "memory_used_bytes")] == 2 << 30 and last[(1, "temperature_c")] == 41
    assert len(s.samples()) == len(x)  # stopped: nothing more comes


def test_forget_before_drops_only_older_readings(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml({}))
    with NvmlSampler(interval_ms=2) as s:
        wait_until(lambda: len(s.samples()) > 0, "a first reading")
        mid = time.monotonic_ns()
        wait_until(lambda: (s.samples().t_ns >= mid).any(), "a reading after the middle")
        before = s.samples()
        dropped = s.forget_before(mid)
        after = s.samples()
    assert dropped > 0 and (after.t_ns >= mid).all()
    # what stays is what was there from `mid` on (and what the sampler read since)
    kept = before.t_ns >= mid
    assert after.t_ns[: kept.sum()].tolist() == before.t_ns[kept].tolist()
    assert after.value[: kept.sum()].tolist() == before.value[kept].tolist()
