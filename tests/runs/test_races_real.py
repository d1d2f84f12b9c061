"""The race analysis on traces of real programs and real ggml builds."""
import os

import pytest

from ggml_trace import analysis
from ggml_trace.analysis import load
from support import completion_cmd, ggml_trace
from ggml_trace.tracer import programs, scenario


def races_of(path):
    return analysis.races(load(path)).to_json()["races"]


def test_the_23321_race_is_found_in_every_run_before_the_fix(tmp_path):
    # 5 ms of device latency: the copy reads h after the CPU has written z, every time
    corrupt = scenario.run("inputless-reuse", build="b10524", runs=10, out_dir=tmp_path / "slow")
    # no injected latency: the output is sometimes right, the race is there all the same (latent)
    quiet = scenario.run("inputless-reuse", build="b10524", runs=20, latency_us=0, out_dir=tmp_path / "quiet")
    assert corrupt.corrupt_runs == 10
    for r in (corrupt, quiet):
        for i, path in enumerate(r.traces):
            (race,) = races_of(path)
            assert race["class"] == "read-after-reuse"
            assert {race["a"]["tensor"], race["b"]["tensor"]} == {"h", "z"}
            assert {race["a"]["backend"], race["b"]["backend"]} == {"VDEV0", "CPU"}
            # a wrong result: the device read h after the CPU began writing z (proven where the copy
            # began after the CPU's split ended: manifested; else the two overlapped). A right one:
            # never proven out of order
            if i in r.corrupt:
                assert race["verdict"] in ("manifested", "overlapped") and race["margin_us"] is None, f"{path}: {race}"
            else:
                assert not race["manifested"] and race["verdict"] in ("latent", "overlapped"), f"{path}: {race}"
    assert any(races_of(p)[0]["manifested"] for p in corrupt.traces)  # 5 ms late: inverted, proven


@pytest.mark.parametrize("build", ["b10531", "b11434"])
@pytest.mark.parametrize("name", [n for n in scenario.SCENARIOS  # the others: their own tests
                                  if n not in {"random-dag", "pipeline-input-reuse"} | scenario.META_SCENARIOS])
def test_no_races_after_the_fix(name, build, tmp_path):
    r = scenario.run(name, build=build, runs=10, jitter_us=2000, out_dir=tmp_path)
    for path in r.traces:
        assert races_of(path) == [], path


@pytest.mark.parametrize("build", programs.PINNED)
def test_no_races_in_real_llama_runs(build, model, tmp_path):
    runs = {
        "cpu": ({}, completion_cmd(build, model, n=8)),
        "vdev-partial-nkvo": ({"GGML_TRACE_VIRTUAL_DEVICES": "1", "GGML_TRACE_VDEV_LATENCY_US": "300"},
                              completion_cmd(build, model, "-ngl", "2", "-nkvo", n=8)),
        "vdev-full": ({"GGML_TRACE_VIRTUAL_DEVICES": "1", "GGML_TRACE_VDEV_LATENCY_US": "300"},
                      completion_cmd(build, model, "-ngl", "99", n=8)),
    }
    for name, (extra_env, cmd) in runs.items():
        out = tmp_path / f"{name}.ggmltrace"
        r = ggml_trace("record", "-o", out, "--", *cmd, env={**os.environ, **extra_env}, timeout=180)
        assert r.returncode == 0, r.stderr[-2000:]
        assert races_of(out) == [], name
    with programs.rpc_server(build) as endpoint:
        out = tmp_path / "rpc.ggmltrace"
        r = ggml_trace("record", "-o", out, "--", *completion_cmd(build, model, "--rpc", endpoint, "-ngl", "99",
                                                                  "-nkvo", n=8), timeout=180)
        assert r.returncode == 0, r.stderr[-2000:]
        assert races_of(out) == []
