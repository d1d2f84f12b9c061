"""GPU counters through NVML: the sampler, appending to trace files, loading them back.

This machine has no GPU: NVML is simulated (a fake `pynvml`), and samples are fabricated and
appended to real traces of the sched-loop program. The sampler alone: tests/unit/test_nvml_sampler.py."""
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

from ggml_trace import analysis
from ggml_trace.analysis import load
from ggml_trace.analysis.trace_file import read_header, read_trace_file
from ggml_trace.analysis.trace_format import CHUNK_SIZE, HEADER_SIZE, NONE32, RECORD_SIZE
from support import built_program, ggml_trace
from ggml_trace.tracer import record
from ggml_trace.tracer.nvml import NvmlSampler, Samples
from ggml_trace.tracer.trace_append import append
from support.fake_nvml import fake_pynvml

LOOPS = 300  # sched-loop graphs: enough records for several chunks (~0.2 s)


def sched_loop(n=LOOPS, end="exit"):
    return [built_program("b10531", "sched-loop"), n, end]


@pytest.fixture(scope="module")
def base_trace(tmp_path_factory):
    """A real trace without NVML data; tests copy it."""
    out = tmp_path_factory.mktemp("base") / "loop.ggmltrace"
    r = ggml_trace("record", "--no-nvml", "-o", out, "--", *sched_loop())
    assert r.returncode == 0, r.stderr
    assert "nvml" not in r.stderr
    return out


@pytest.fixture
def trace_copy(base_trace, tmp_path):
    p = tmp_path / "t.ggmltrace"
    shutil.copy(base_trace, p)
    return p


def fabricated(t0: int, n: int = 50, step_ns: int = 1_000_000) -> Samples:
    """n readings of 3 metrics on 2 devices, every step_ns from t0 - 5 steps (some before the
    trace began); value = 1000 * device + 10 * metric + reading."""
    k = np.arange(n)
    t, dev, m = np.meshgrid(t0 + (k - 5) * step_ns, [0, 1], [0, 1, 2], indexing="ij")
    names = np.array(["sm_clock_mhz", "power_w", "gpu_util_pct"])
    value = 1000.0 * dev + 10 * m + np.repeat(k, 6).reshape(t.shape)
    return Samples(t.ravel().astype(np.int64), dev.ravel().astype(np.uint32), names[m.ravel()],
                   value.ravel())


CAPTURE_FRAMES = ("calls", "threads", "backends", "buffers", "accesses", "allocations", "splits",
                  "copies", "sync", "marks", "device")


def assert_same_capture(before, after):
    """Everything the traced program recorded is unchanged."""
    for frame in CAPTURE_FRAMES:
        pd.testing.assert_frame_equal(getattr(before, frame), getattr(after, frame), obj=frame)
    assert {k: v for k, v in after.meta.items() if not k.startswith("nvml")} == before.meta


class FakeSampler:
    """What the recorder sees of a sampler that ran on two GPUs."""
    available, reason, n_gpus = True, "ok", 2

    def __init__(self, samples):
        self._samples = samples

    def samples(self):
        return self._samples


FAKE_INFO = {"available": True, "driver": "555.42", "gpus": [{"index": 0, "name": "Fake GPU é"},
                                                             {"index": 1, "name": "Fake GPU 2"}]}


# -- (a) without NVML ------------------------------------------------------------------------

def test_record_without_nvml_writes_a_loadable_trace(tmp_path):
    # A pynvml whose init fails as it does on a machine without a driver (also on a GPU host).
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "pynvml.py").write_text("class NVMLError(Exception):\n    pass\n\n"
                                    "def nvmlInit():\n    raise NVMLError('NVML Shared Library Not Found')\n")
    out = tmp_path / "a.ggmltrace"
    env = dict(os.environ, PYTHONPATH=str(fake))
    r = ggml_trace("record", "-o", out, "--", *sched_loop(20), env=env)
    assert r.returncode == 0, r.stderr
    line = ("nvml: unavailable: NVML Shared Library Not Found; "
            "capture continues without GPU counters")
    assert line in r.stderr
    t = load(out)
    assert (t.calls["kind"] == "sched_graph_compute").sum() == 20
    assert t.meta["nvml.status"] == "NVML Shared Library Not Found"
    assert t.nvml == {"available": False, "reason": "NVML Shared Library Not Found"}
    assert len(t.gpu_samples) == 0 and list(t.gpu_samples) == ["t", "device", "metric", "value"]


# -- (b) samples appended to a real trace ------------------------------------------------------

def test_appended_samples_load_back(trace_copy, monkeypatch):
    before = load(trace_copy)
    t0 = read_header(trace_copy)["t0_monotonic_ns"]
    s = fabricated(t0)
    t_end = t0 + 40 * 1_000_000  # readings 45..49 come after the run
    monkeypatch.setattr(record, "gpu_metadata", lambda: FAKE_INFO)
    line = record.add_gpu_counters([trace_copy], FakeSampler(s), t_end)
    want = s.between(t0, t_end)
    assert line == f"nvml: 2 GPUs, {len(want)} samples"
    assert len(want) == 41 * 6

    after = load(trace_copy)
    g = after.gpu_samples
    assert {c: str(d) for c, d in g.dtypes.items()} == {
        "t": "int64", "device": "int64", "metric": "category", "value": "float64"}
    key = ["t", "device", "metric"]
    got = g.astype({"metric": str}).sort_values(key).reset_index(drop=True)
    exp = pd.DataFrame({"t": want.t_ns - t0, "device": want.device.astype(np.int64),
                        "metric": want.metric, "value": want.value})
    exp = exp.sort_values(key).reset_index(drop=True)
    assert got["t"].tolist() == exp["t"].tolist()
    assert got["t"].min() == 0 and got["t"].max() == 40_000_000
    assert got["device"].tolist() == exp["device"].tolist()
    assert got["metric"].tolist() == exp["metric"].tolist()
    assert got["value"].tolist() == exp["value"].tolist()
    assert after.nvml == FAKE_INFO and after.meta["nvml.status"] == "ok"

    assert_same_capture(before, after)
    raw = read_trace_file(trace_copy)
    assert raw.chunks["chunk_index"].tolist() == list(range(len(raw.chunks)))
    assert raw.chunks["thread"][-1] == NONE32 and not raw.truncated

    fig = analysis.timeline(after, races=False)
    rows = fig.layout.meta["ggml_trace"]["rows"]
    # one counter row per (device, metric), metrics in the order they were read
    assert rows[-6:] == [f"GPU{d} {m}" for d in (0, 1) for m in ("sm_clock_mhz", "power_w", "gpu_util_pct")]


# -- (c) a file cut mid-chunk --------------------------------------------------------------------

@pytest.mark.parametrize("cut", [
    HEADER_SIZE + 2 * CHUNK_SIZE + 777,         # mid-chunk, mid-record
    HEADER_SIZE + 2 * CHUNK_SIZE + 30,          # inside a chunk header
    HEADER_SIZE + CHUNK_SIZE + 9 * RECORD_SIZE,  # on a record boundary
])
def test_append_after_a_cut_keeps_what_was_there(trace_copy, cut):
    data = trace_copy.read_bytes()
    assert len(data) > cut
    trace_copy.write_bytes(data[:cut])
    before = load(trace_copy)
    assert len(before.calls) > 0
    t0 = read_header(trace_copy)["t0_monotonic_ns"]
    append(trace_copy, {"nvml.status": "ok"}, fabricated(t0, n=10))

    after_bytes = trace_copy.read_bytes()
    whole = cut - (cut - HEADER_SIZE) % RECORD_SIZE
    assert after_bytes[:whole] == data[:whole]  # only a cut record's bytes may go
    assert len(after_bytes) == HEADER_SIZE + (-(-(cut - HEADER_SIZE) // CHUNK_SIZE) + 1) * CHUNK_SIZE
    after = load(trace_copy)
    assert_same_capture(before, after)
    assert len(after.gpu_samples) == 60 and after.meta["nvml.status"] == "ok"


def test_failed_append_leaves_the_trace_as_it_was(trace_copy):
    data = trace_copy.read_bytes()[:HEADER_SIZE + CHUNK_SIZE + 100]  # ends in a cut record
    trace_copy.write_bytes(data)
    t0 = read_header(trace_copy)["t0_monotonic_ns"]
    # A full disk, as the kernel reports it to a writer: the file may not grow past a limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(data) + CHUNK_SIZE, hard))
    try:
        line = record.add_gpu_counters([trace_copy], FakeSampler(fabricated(t0, n=5000)), t0 + 10**12)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert "not added (trace left as it was)" in line and str(trace_copy) in line
    assert trace_copy.read_bytes() == data


# -- (d) a flight recorder's counters, on a simulated NVML ---------------------------------------

@pytest.mark.parametrize("ring", ["time", "size"])
def test_a_flight_recorder_keeps_only_recent_gpu_counters(ring, tmp_path, monkeypatch):
    """Hours under --ring with --nvml must not pile the whole run's readings up in memory, nor
    append them to a file that is to stay bounded: readings older than what the ring can hold
    are dropped while the program runs (every SAMPLES_TRIM_EVERY_S), and at the end."""
    calls = {}
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(calls))
    monkeypatch.setattr(record, "SAMPLES_TRIM_EVERY_S", 0.1)
    made = []

    class Sampler(NvmlSampler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(record, "NvmlSampler", Sampler)
    hooks = built_program("b10531", "libggml-trace-hooks.so")
    out = tmp_path / "ring.ggmltrace"
    env = dict(os.environ, **record.ring_env("0.2" if ring == "time" else "4M"))
    t_start = time.monotonic_ns()
    rec = record.record(list(map(str, sched_loop(5, "seconds"))), hooks, out, nvml=True, nvml_interval_ms=5, env=env,
                        stdout=subprocess.DEVNULL)
    t_end = time.monotonic_ns()
    assert rec.returncode == 0 and "nvml: 2 GPUs" in rec.nvml, rec.nvml
    run_s = (t_end - t_start) / 1e9
    assert run_s > 3.0  # sched-loop ran its 5 s: long enough that the ring's bound shows
    held = made[0].samples()
    t = load(out)
    if ring == "time":
        assert t.ring.keep_ns == 200_000_000
    else:
        assert t.ring.start_ns is not None and t.ring.start_ns > 0  # the 4 MiB ring wrapped
    # the sampler dropped readings while the program ran (nothing else drops any): it holds fewer
    # periods' readings than it read, but every reading the file keeps
    read = calls["power0"]  # one per period: device 0's power is read every time
    per_period = (held.device == 0) & (held.metric == "sm_clock_mhz")
    assert 0 < per_period.sum() < read
    g = t.gpu_samples
    t0 = t.header["t0_monotonic_ns"]
    assert len(g) > 0 and np.isin(g["t"].to_numpy() + t0, held.t_ns).all()
    # the file holds the readings of its window (and a margin), not of the whole run
    assert ((g["device"] == 0) & (g["metric"] == "sm_clock_mhz")).sum() < read


# -- on a GPU host: the real thing ---------------------------------------------------------------

def real_nvml_available() -> bool:
    with NvmlSampler() as s:
        return s.available and s.n_gpus > 0


@pytest.mark.skipif(not real_nvml_available(), reason="no NVML GPU on this machine")
def test_record_with_real_nvml(tmp_path):
    out = tmp_path / "gpu.ggmltrace"
    r = ggml_trace("record", "--nvml-interval-ms", 5, "-o", out, "--", *sched_loop(3000))
    assert r.returncode == 0, r.stderr
    assert "nvml: " in r.stderr and " samples" in r.stderr and "unavailable" not in r.stderr
    t = load(out)
    assert t.meta["nvml.status"] == "ok" and t.nvml["available"] and len(t.nvml["gpus"]) >= 1
    g = t.gpu_samples
    assert len(g) > 0 and g["t"].min() >= 0 and "sm_clock_mhz" in set(g["metric"].astype(str))
    assert (t.calls["kind"] == "sched_graph_compute").sum() == 3000
    json.dumps(t.nvml)
