"""The sweep's planning and writing without running anything (tracer/sweep.py, tracer/sweep_report.py):
what each run slows, the delay rules it asks for, the verdict of a cell, the table and its limits.
The sweep run on real builds: tests/runs/test_sweep.py and tests/external/test_sweep_vulkan.py."""
import re
from pathlib import Path

import pytest

from ggml_trace.tracer import sweep_report
from ggml_trace.tracer.delay_spec import DelaySpecError, parse
from ggml_trace.tracer.sweep import (PATTERN_DEVICES, SLOWINGS, CellResult, Cell, DeviceSet, SweepOptions, SweepResult,
                                     _merge_race, _run_env, profiles, progress_words, slow_rules)

VDEV = DeviceSet("VDEV", ("VDEV0", "VDEV1", "VDEV2"), "b10531", (("GGML_TRACE_VDEV_HOST_COPIES", "pinned"),))
MIXED = DeviceSet("Vulkan0+VDEV", ("Vulkan0", "VDEV0", "VDEV1"), "b10531-vulkan", (("GGML_VK_VISIBLE_DEVICES", "0"),))


def test_quick_slows_each_device_of_the_pattern_once():
    opts = SweepOptions(out=Path("x"), quick=True)
    assert [p["slow"] for p in profiles(Cell("y-graph", VDEV, "b10531", "pinned", 1), opts)] == [
        {"VDEV0": 3000.0}, {"VDEV1": 3000.0}]
    assert len(profiles(Cell("inputless-reuse", VDEV, "b10531", "pinned", 0), opts)) == 1
    again = SweepOptions(out=Path("x"), quick=True, runs=3)
    assert [p["slow"] for p in profiles(Cell("y-graph", VDEV, "b10531", "pinned", 1), again)] == [
        {"VDEV0": 3000.0}, {"VDEV1": 3000.0}, {"VDEV0": 3000.0}]


def test_a_full_cell_is_plain_then_each_device_then_seeded_random():
    runs = profiles(Cell("y-graph", VDEV, "b10531", "pinned", 0), SweepOptions(out=Path("x"), runs=5, seed=7))
    assert [p["name"] for p in runs][:3] == ["plain", "VDEV0 +3000 us", "VDEV1 +3000 us"]
    assert [(p["random"], p.get("seed")) for p in runs[3:]] == [(True, 7), (True, 8)]


def test_each_slowing_in_turn_for_each_device():
    opts = SweepOptions(out=Path("x"), quick=True, slowings=("queue", "compute", "copies-into"))
    runs = profiles(Cell("y-graph", VDEV, "b10531", "pinned", 1), opts)
    assert [(p["slowing"], list(p["slow"])) for p in runs] == [
        ("queue", ["VDEV0"]), ("queue", ["VDEV1"]), ("compute", ["VDEV0"]), ("compute", ["VDEV1"]),
        ("copies-into", ["VDEV0"]), ("copies-into", ["VDEV1"])]
    assert runs[-1]["name"] == "copies into VDEV1, by destination +3000 us"


def test_a_slowed_device_is_slowed_on_its_own_queue_alone_by_rules_that_parse():
    """Virtual and real devices alike: delay rules, so that every run's trace records its delays and the
    queue each acted on. The default slows every operation that runs on the device's queue (queue=), never
    the copies into it by name: a copy from another asynchronous device runs on the source's queue, and a
    delay before it there would slow the copy's writer with the device (docs/delay.md)."""
    cell = Cell("y-graph", MIXED, "b10531", "pinned", 0)
    env, rules = _run_env(cell, {"slow": {"VDEV0": 3000.0}, "random": False})
    assert env["GGML_TRACE_VIRTUAL_DEVICES"] == "2" and "GGML_TRACE_VDEV_LATENCY_US" not in env
    assert rules == ["*:*,queue=VDEV0:3000"]
    env, rules = _run_env(cell, {"slow": {"Vulkan0": 3000.0}, "slowing": "queue", "random": False})
    assert rules == ["*:*,queue=Vulkan0:3000"]
    env, rules = _run_env(cell, {"slow": {"Vulkan0": 3000.0, "VDEV0": 3000.0}, "slowing": "queue", "random": True,
                                 "seed": 4})
    assert "GGML_TRACE_VDEV_JITTER_US" not in env
    assert rules == ["*:*,queue=Vulkan0,seed=32:rand:3000", "*:*,queue=VDEV0,seed=33:rand:3000"]
    assert slow_rules("VDEV1", "compute", "3000") == ["VDEV1:graph_compute:3000"]
    assert slow_rules("VDEV1", "copies-from", "3000") == ["*:cpy_tensor_async,src=VDEV1:3000"]
    assert slow_rules("VDEV1", "copies-into", "3000") == ["VDEV1:cpy_tensor_async:3000"]
    every = [r for s in SLOWINGS for r in slow_rules("VDEV1", s, "rand:3000", ",seed=2")]
    assert len(parse(every + rules)) == 6  # the rules are the delay language's (docs/delay.md)
    assert parse(["*:*,queue=VDEV1:1"])[0]["queue"] == "VDEV1"
    with pytest.raises(DelaySpecError, match="src= applies to cpy_tensor_async only"):
        parse(["VDEV0:graph_compute,src=VDEV1:1"])


def _finding(tensor_a="h", tensor_b="z", verdict="manifested", missing="nothing orders VDEV0 ..."):
    side = {"kind": "cpy_tensor_async", "backend": "VDEV0", "split": 1, "mode": "read"}
    return {"class": "read-after-reuse", "verdict": verdict, "missing": missing,
            "a": dict(side, tensor=tensor_a), "b": dict(side, kind="graph_compute", backend="CPU", split=2,
                                                         mode="write", tensor=tensor_b)}


def test_a_race_over_runs_keeps_its_runs_and_strongest_verdict():
    races: dict = {}
    _merge_race(races, _finding(verdict="latent"), 0, "run-0", False)
    _merge_race(races, _finding(verdict="manifested"), 1, "run-1", True)
    _merge_race(races, _finding(tensor_a="k"), 1, "run-1", True)
    (first, other) = races.values()
    assert (first["runs"], first["wrong_runs"], first["verdict"], first["trace"]) == ([0, 1], [1], "manifested", "run-1")
    assert other["tensors"] == ["k", "z"]


def _result(cells, problems=()):
    return SweepResult(SweepOptions(out=Path("x"), builds=("b10524", "b10531"), quick=True), cells,
                       list(problems), 12.0)


def _cell(pattern="inputless-reuse", build="b10524", buffer="pinned", parallel=0, verdict="GREEN", **kw):
    return CellResult(Cell(pattern, VDEV, build, buffer, parallel), runs=1, verdict=verdict, **kw)


def test_exit_status_follows_the_worst_cell():
    assert _result([_cell()]).exit_status == 0
    assert _result([_cell(), _cell(verdict="RACE")]).exit_status == 1
    assert _result([_cell(verdict="RED", wrong_runs=1)]).exit_status == 1
    assert _result([_cell(verdict="RED"), _cell(verdict="ERROR", error="hung")]).exit_status == 2
    assert _result([_cell()], problems=["unknown pattern 'nope'"]).exit_status == 2


def test_the_page_has_a_row_per_pattern_a_column_per_set_and_build_and_names_the_race():
    red = _cell(verdict="RED", wrong_runs=1, races=[{
        "class": "read-after-reuse", "tensors": ["h", "z"], "verdict": "manifested", "runs": [0], "wrong_runs": [0],
        "missing": "nothing orders VDEV0 cpy_tensor_async (reads h) before CPU split 2 writes z"}])
    cells = [red, _cell(parallel=1), _cell(build="b10531"), _cell(build="b10531", parallel=1),
             _cell("chain", verdict="RACE", races=[dict(red.races[0], wrong_runs=[])]), _cell("chain", build="b10531")]
    md = sweep_report.markdown(_result(cells))
    lines = md.splitlines()
    header = next(x for x in lines if x.startswith("| pattern |"))
    assert header.count("|") == 4 and "b10524" in header and "b10531" in header
    assert next(x for x in lines if x.startswith("| `inputless-reuse`")).split("|")[2:4] == [" 🔴 RED 1/2 ", " 🟢 "]
    assert next(x for x in lines if x.startswith("| `chain`")).split("|")[2:4] == [" 🟠 RACE ", " 🟢 "]
    assert "before CPU split 2 writes z" in md and "1 of 1 runs wrong" in md
    assert "2 cells" not in md and md.startswith("# ggml-trace sweep")


def test_a_wrong_result_without_a_race_says_so():
    md = sweep_report.markdown(_result([_cell(verdict="RED", wrong_runs=1)]))
    assert "no race in the traces" in md and "same output" not in md
    # the same wrong result in every run (two or more): a difference timing does not make
    same = CellResult(Cell("y-graph", VDEV, "b10531", "pinned", 0), runs=2, wrong_runs=2, verdict="RED",
                      detail={"outputs": 1})
    assert "every run printed the same output" in sweep_report.markdown(_result([same]))
    one = CellResult(Cell("y-graph", VDEV, "b10531", "pinned", 0), runs=1, wrong_runs=1, verdict="RED",
                     detail={"outputs": 1})
    assert "same output" not in sweep_report.markdown(_result([one]))  # one run shows nothing of timing


def test_meta_allreduce_on_cuda_takes_cudas_f32_allreduce():
    cuda = DeviceSet("CUDA×2", ("CUDA0", "CUDA1"), "b11434", (("GGML_CUDA_DEVICES", "2"),))
    env, _ = _run_env(Cell("meta-allreduce", cuda, "b11434", "-", -1), {"slow": {"CUDA0": 3000.0}, "random": False})
    assert env["GGML_CUDA_AR_BF16_THRESHOLD"] == "0" and env["GGML_CUDA_DEVICES"] == "2"
    env, _ = _run_env(Cell("y-graph", cuda, "b11434", "pinned", 0), {"slow": {"CUDA0": 3000.0}, "random": False})
    assert "GGML_CUDA_AR_BF16_THRESHOLD" not in env
    env, _ = _run_env(Cell("meta-allreduce", VDEV, "b11434", "-", -1), {"slow": {"VDEV0": 3000.0}, "random": False})
    assert "GGML_CUDA_AR_BF16_THRESHOLD" not in env


def test_hostile_names_are_escaped_and_the_page_stays_under_githubs_limit():
    hostile = "<img src=x onerror=alert(1)>|@someone **bold**"
    many = [_cell(verdict="RED", wrong_runs=1, races=[{
        "class": "read-after-reuse", "tensors": [hostile, "z"], "verdict": "manifested", "runs": [0],
        "wrong_runs": [0], "missing": f"nothing orders {hostile} " + "x" * 500}]) for _ in range(400)]
    md = sweep_report.markdown(_result(many))
    assert len(md) < sweep_report.GITHUB_LIMIT
    assert not re.search(r"(?<!\\)<img", md) and "\\@someone" in md  # escaped: shown as text, no mention
    assert "more cells not listed here" in md


def test_the_progress_line_says_the_verdict_and_the_race():
    r = _cell(verdict="RED", wrong_runs=2, races=[{"verdict": "manifested", "tensors": ["h", "z"]}])
    r.runs = 2
    assert progress_words(r) == "RED   inputless-reuse on VDEV, b10524 pinned p0: 2/2 wrong; 1 race (manifested: h / z)"


def test_every_pattern_is_a_scenario_of_the_program():
    source = (Path(__file__).resolve().parents[2] / "scenarios" / "scenarios.cpp").read_text()
    for p in PATTERN_DEVICES:
        assert f'"{p}"' in source, p
