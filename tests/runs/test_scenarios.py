"""Virtual async devices and scheduler scenarios, on real upstream code before and after the fix
for llama.cpp issue #23321 (b10524 -> b10531)."""
import subprocess

import pytest

from ggml_trace.analysis import load
from support import ggml_trace, simple_cmd
from ggml_trace.tracer import programs, scenario

RUNS = 100


@pytest.fixture(scope="module")
def red(tmp_path_factory):  # its own directory: later runs of the scenario must not replace its traces
    return scenario.run("inputless-reuse", build="b10524", runs=RUNS, out_dir=tmp_path_factory.mktemp("red"))


def test_inputless_reuse_is_red_before_the_fix(red):
    assert red.runs == RUNS and red.corrupt_runs >= 0.9 * RUNS


NOT_GREEN = {"random-dag": "a race the #23321 fix does not cover: see docs/scenarios.md, 'Finding'"}


@pytest.mark.parametrize("build", ["b10531", "b11434"])
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(reason=NOT_GREEN[n], strict=False)) if n in NOT_GREEN else n
    # RED until their own fixes: test_tensor_parallel.py, test_pipeline_parallel.py
    for n in scenario.SCENARIOS if n not in scenario.META_SCENARIOS and n != "pipeline-input-reuse"])
def test_scenarios_are_green_after_the_fix(name, build, tmp_path):
    r = scenario.run(name, build=build, runs=RUNS, jitter_us=2000, out_dir=tmp_path)
    assert r.runs == RUNS and r.corrupt_runs == 0, r.corrupt
    # not vacuous: the work really ran on the virtual devices, later than it was enqueued
    t = load(r.traces[0])
    assert t.splits.backend.astype(str).str.startswith("VDEV").any()
    assert len(t.device) > 0


def test_a_corrupt_run_shows_the_overwrite_before_the_device_read(red):
    t = load(red.traces[red.corrupt[0]])
    acc = t.accesses
    # VDEV0's copy of h reads the bytes that the next CPU split writes as z
    read_h = acc[(acc.kind == "cpy_tensor_async") & (acc.tensor == "h") & (acc["mode"] == "read")].iloc[0]
    write_z = acc[(acc.kind == "graph_compute") & (acc.tensor == "z") & (acc["mode"] == "write")].iloc[0]
    assert read_h.buffer == write_z.buffer
    assert read_h.offset < write_z.end and write_z.offset < read_h.end
    # the copy was enqueued before the CPU split ran, but ran on the device only after it
    copy_exec = t.device[t.device.call_id == read_h.call_id].iloc[0]
    cpu_split = t.splits[(t.splits.backend == "CPU") & (t.splits.split == write_z.split)].iloc[0]
    assert read_h.t_end <= cpu_split.t_begin
    assert copy_exec.t_begin >= cpu_split.t_end


def test_the_fix_orders_the_cpu_split_after_the_device(tmp_path):
    r = scenario.run("inputless-reuse", build="b10531", runs=3, out_dir=tmp_path)
    t = load(r.traces[0])
    cpu_split = t.splits[(t.splits.backend == "CPU") & (t.splits.split == 2)].iloc[0]
    sync = t.sync[(t.sync.kind == "synchronize") & (t.sync.backend == "VDEV0") & (t.sync.split == 2)]
    assert len(sync) == 1 and sync.iloc[0].t_end <= cpu_split.t_begin
    assert (t.device.t_end <= sync.iloc[0].t_end).sum() >= 2  # the copy and y were done by then


@pytest.mark.parametrize("build", programs.PINNED)
def test_llama_completion_on_a_virtual_device(build, model, tmp_path):
    # the same command line on both sides; without virtual devices it runs on the CPU alone
    cmd = simple_cmd(build, model, "-ngl", "2", n=16)
    plain = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=120)
    out = tmp_path / "vdev.ggmltrace"
    r = ggml_trace("record", "--virtual-devices", 1, "--vdev-latency-us", 200, "-o", out, "--", *cmd, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == plain.stdout
    t = load(out)
    vdev = t.splits[t.splits.backend == "VDEV0"]
    assert len(vdev) >= 16
    # each VDEV0 split was enqueued by the host thread and ran later on the device's stream thread
    ran = t.device.merge(vdev[["call_id", "t_begin", "thread"]], on="call_id", suffixes=("", "_host"))
    assert len(ran) == len(vdev)
    assert (ran.t_begin >= ran.t_begin_host).all() and (ran.thread != ran.thread_host).all()
    names = dict(zip(t.threads.thread, t.threads.name))
    assert {names[th] for th in ran.thread} == {"VDEV0 stream"}
    copies = t.copies
    assert ((copies.src_backend == "CPU") & (copies.dst_backend == "VDEV0")).any()
    assert ((copies.src_backend == "VDEV0") & (copies.dst_backend == "CPU")).any()
