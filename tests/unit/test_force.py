"""`ggml-trace force` without running programs: which race it picks, the delay it chooses and the
rule that injects it, and its verdicts. On the pinned builds' scenario programs and llama.cpp:
tests/runs/test_force_programs.py."""
import fnmatch

import pytest

from support.race_cases import latent_trace

from ggml_trace import analysis
from ggml_trace.tracer import force


def test_the_delay_without_device_timing_is_the_default(tmp_path):
    t = analysis.load(latent_trace(tmp_path / "t.ggmltrace", {}))
    (race,) = analysis.races(t).to_json()["races"]
    assert race["basis"] == "host" and race["verdict"] == "undetermined"
    assert force.pick_race([race], None) == (1, race)
    us, why = force.delay_for(race, None)
    assert us == force.UNTIMED_US + force.MIN_SLACK_US and "unknown" in why
    assert force.delay_rule(race, us) == f"VDEV0:graph_compute,graph=0,split=3:{us:g}"


@pytest.mark.parametrize("name", ["h", "n12 (cont)", "x[0]*", "a,b:c;d", "?"])
def test_copy_rules_select_the_tensor_by_its_own_name(name):
    race = {"a": {"backend": "VDEV0", "kind": "cpy_tensor_async", "graph": 4, "split": 2, "tensor": name}}
    rule = force.delay_rule(race, 1500)
    glob = rule.split("tensor=")[1].rsplit(":", 1)[0]
    assert fnmatch.fnmatchcase(name, glob) and not fnmatch.fnmatchcase(name + "x", glob)
    assert rule.startswith("VDEV0:cpy_tensor_async,graph=4,split=2,") and rule.endswith(":1500")


def test_the_default_race_is_the_closest_latent_one():
    found = [{"verdict": "manifested"}, {"verdict": "undetermined"}, {"verdict": "latent", "margin_us": 5.0},
             {"verdict": "latent", "margin_us": 50.0}]
    assert force.pick_race(found, None)[0] == 3
    assert force.pick_race(found[:2], None)[0] == 2
    assert force.pick_race(found[:1], None)[0] == 1
    assert force.pick_race(found, 4) == (4, found[3])
    with pytest.raises(force.ForceError, match="has 4 races"):
        force.pick_race(found, 0)


def test_the_delay_outlasts_what_the_later_operation_needed():
    def race(a, b, margin):
        return {"basis": "device", "margin_us": margin, "a": {"t_begin_us": a[0], "t_end_us": a[1]},
                "b": {"t_begin_us": b[0], "t_end_us": b[1]}}
    latent = race((10, 12), (17, 30), 5.0)  # b ended 20 us after a began
    assert force.delay_for(latent, 100)[0] == 120
    assert force.delay_for(latent, None)[0] == 20 + force.MIN_SLACK_US
    slow = race((0, 15000), (16000, 20000), 1000.0)  # a need above the minimum slack doubles
    assert force.delay_for(slow, None)[0] == 40000
    inverted = race((10, 12), (1, 3), None)  # it manifested in the trace: only the slack
    us, why = force.delay_for(inverted, None)
    assert us == force.MIN_SLACK_US and "manifested there" in why


def test_a_manifested_race_that_changed_nothing_is_harmless_so_far_not_fixed():
    assert force.verdict(manifested=3, diverged=0, undetermined=0) == "harmless-so-far"
    assert force.verdict(manifested=1, diverged=1, undetermined=2) == "diverged"
    assert force.verdict(manifested=0, diverged=3, undetermined=3) == "undetermined"
    assert force.verdict(manifested=0, diverged=0, undetermined=0) == "not-manifested"
    r = force.ForceResult("t", "harmless-so-far", "", 1, {"class": "read-after-reuse", "a": {
        "backend": "VDEV0", "kind": "graph_compute"}}, runs=3, manifested_runs=3, delay_us=1000.0,
        compared_with="expected")
    assert "harmless so far, not fixed" in force._message(r)


def test_long_delays_stay_plain_microseconds():
    race = {"a": {"backend": "CUDA0", "kind": "graph_compute", "graph": 7, "split": 0, "tensor": None}}
    assert force.delay_rule(race, 2_500_000.0) == "CUDA0:graph_compute,graph=7,split=0:2500000"
