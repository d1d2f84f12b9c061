"""Issue #23321 on the real ggml Vulkan backend (Mesa's lavapipe here), before (b10524) and after
(b10531) the fix, traced with device timing. The race verdicts' rules for the bounds that markers
give: tests/unit/test_vulkan_rules.py."""

import numpy as np
import pandas as pd
import pytest

from ggml_trace.analysis import load
from ggml_trace.analysis.races import format_report, races
from support.race_cases import findings
from ggml_trace.tracer import vulkan_runs
from ggml_trace.tracer.hooks import build_root

RUNS = 20


def vulkan_bin(build):
    d = build_root() / f"llama-{build}-vulkan" / "bin"
    if not (d / "libggml-trace-hooks.so").exists():
        raise FileNotFoundError(f"{d} has no Vulkan build with hooks: run `make setup`")
    return d


def qwen35():
    p = build_root() / "models" / "tiny-qwen35.gguf"
    if not p.exists():
        raise FileNotFoundError(f"{p} is missing: run `make setup`")
    return p


@pytest.fixture(scope="module")
def before(tmp_path_factory):
    return vulkan_runs.run(vulkan_bin("b10524"), qwen35(), RUNS, tmp_path_factory.mktemp("b10524"))


@pytest.fixture(scope="module")
def after(tmp_path_factory):
    return vulkan_runs.run(vulkan_bin("b10531"), qwen35(), RUNS, tmp_path_factory.mktemp("b10531"))


def test_before_the_fix_corrupt_runs_show_the_race_manifested(before):
    """Every corrupt run shows the pair with the times of an overlap at least; MANIFESTED where the
    markers prove the order (the copy had not started when the CPU's split of 8 nodes had ended),
    OVERLAPPED where they show the copy inside that split, whose node writing conv_states-0 has no
    time of its own (docs/races.md). A correct text can come with a manifested race: the tiny random
    model's greedy tokens absorb an overwritten embedding now and then (seen here once in 20 runs;
    3 of 81 forced runs in test_force_programs.py), so the text is no oracle for the other direction;
    the scenario's bit-exact result is (test_inputless_reuse_on_real_vulkan_before_and_after_the_fix)."""
    assert before["crashed_runs"] == 0
    assert before["complete_runs"] == RUNS
    assert before["corrupt_runs"] >= 18, before
    verdicts = []
    for run in before["runs"]:
        race = [r for r in run["races"] if "model.input_embed" in (r["a"], r["b"])]
        if run["corrupt"]:
            assert len(race) == 1, run
            (r,) = race
            # exactly the upstream pair: Vulkan0's copy reads model.input_embed, CPU overwrites it
            assert (r["a_backend"], r["b_backend"], r["b"]) == ("Vulkan0", "CPU", "conv_states-0"), r
            assert r["verdict"] in ("manifested", "overlapped") and r["basis"] == "bounds", r
            verdicts.append(r["verdict"])
    assert "manifested" in verdicts, verdicts


def test_after_the_fix_every_run_is_clean_and_race_free(after):
    assert after["crashed_runs"] == 0
    assert after["complete_runs"] == RUNS
    assert after["corrupt_runs"] == 0, after
    assert all(run["races"] == [] for run in after["runs"])


def test_vulkan_work_is_timed_by_markers_and_the_bounds_hold(after):
    t = load(after["runs"][0]["trace"])
    modes = {int(k.rsplit(".", 1)[1]): v for k, v in t.meta.items() if k.startswith("device_timing.mode.")}
    names = dict(zip(t.backends["backend"], t.backends["name"]))
    assert [names[i] for i, m in modes.items() if m == "markers"] == ["Vulkan0"], modes
    d = t.device
    assert len(d) > 100 and set(d["source"]) == {"markers"}
    calls = t.calls.set_index("call_id")
    host = calls.loc[d["call_id"].to_numpy(np.uint64)]
    # the work did not start before its enqueue call began, nor end before it started
    assert (d["t_begin"].to_numpy() >= host["t_begin"].to_numpy()).all()
    assert (d["t_end"].to_numpy() >= d["t_begin"].to_numpy()).all()
    # and the end bound is no later than the program's next wait for the whole queue returning
    syncs = t.calls[(t.calls["kind"] == "synchronize") & (t.calls["backend"] == "Vulkan0")]
    ops = pd.DataFrame({"t": host["t_end"].to_numpy(), "end": d["t_end"].to_numpy()}).sort_values("t")
    waits = pd.DataFrame({"t": syncs["t_begin"].to_numpy(), "sync_end": syncs["t_end"].to_numpy()}).sort_values("t")
    nxt = pd.merge_asof(ops, waits, on="t", direction="forward").dropna()
    assert len(nxt) > 50 and (nxt["end"] <= nxt["sync_end"]).all()


def test_without_device_timing_the_verdict_rests_on_host_times(tmp_path):
    s = vulkan_runs.run(vulkan_bin("b10524"), qwen35(), 2, tmp_path, device_timing=False)
    assert s["crashed_runs"] == 0 and s["complete_runs"] == 2
    for run in s["runs"]:
        (r,) = [r for r in run["races"] if "model.input_embed" in (r["a"], r["b"])]
        assert r["verdict"] == "undetermined" and r["basis"] == "host" and r["margin_us"] is None
        text = format_report(races(load(run["trace"])))
        assert "UNDETERMINED: host times only" in text and "latent, margin" not in text


# -- scheduler scenarios on the real Vulkan device ---------------------------------------------

def test_inputless_reuse_on_real_vulkan_before_and_after_the_fix(tmp_path):
    from ggml_trace.tracer import scenario
    # measured 8/10, 12/20, 9/20, 12/20 corrupt before the fix: the copy often runs in time; once,
    # on a loaded machine, 1/20. Rounds of 20 until 4 corrupt runs (at most 3 rounds).
    rounds = []
    while len(rounds) < 3 and sum(r.corrupt_runs for r in rounds) < 4:
        rounds.append(scenario.run("inputless-reuse", build="b10524", runs=20, backend="vulkan",
                                   out_dir=tmp_path / f"red{len(rounds)}"))
    red_corrupt = sum(r.corrupt_runs for r in rounds)
    assert red_corrupt >= 4, [r.corrupt for r in rounds]
    for red in rounds:
        for i, path in enumerate(red.traces):
            (race,) = findings(races(load(path)))
            assert {race["a"]["tensor"], race["b"]["tensor"]} == {"h", "z"}
            # A corrupt run's race is never called latent: the marker bounds prove it manifested (the
            # copy began after the CPU's split had ended) or show the two overlapping; on a loaded
            # machine a marker can be read too late to show either (seen: 1 run of 20 undetermined),
            # which is honest, not wrong. A correct run's is never called manifested (docs/races.md).
            if i in red.corrupt:
                assert race["verdict"] != "latent" and race["basis"] == "bounds", (path, race)
            else:
                assert race["verdict"] != "manifested", (path, race)
    green = scenario.run("inputless-reuse", build="b10531", runs=20, backend="vulkan", out_dir=tmp_path / "green")
    assert green.corrupt_runs == 0
    assert all(findings(races(load(p))) == [] for p in green.traces)
