"""Delay injection (`ggml-trace record --delay`, GGML_TRACE_DELAY) on real ggml programs: a
virtual device's queue stalls while the host goes on, a host delay delays the call, the filter
keys select exactly what they say, bad rules are refused, and nothing is injected by default. The
delays recorded on an H200: tests/traces/test_delay_h200.py."""
import os
import subprocess

import numpy as np
import pytest

from ggml_trace.analysis import load
from ggml_trace.analysis.delay import delay_stalls
from support import built_program, check_dtypes, ggml_trace
from ggml_trace.tracer import delay_spec, programs

BUILD = "b10531"
MS = 1_000_000


def scenario_exe():
    return programs.program(BUILD, "ggml-trace-scenarios")


def record(tmp_path, name, *args, delay=(), vdev=False):
    out = tmp_path / f"{name}.ggmltrace"
    opts = [x for d in delay for x in ("--delay", d)]
    if vdev:
        opts += ["--virtual-devices", "3"]
    r = ggml_trace("record", "--build", BUILD, "-o", out, *opts, "--", *args, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return load(out), r


def test_a_queue_delay_stalls_the_virtual_device_and_not_the_host(tmp_path):
    t, r = record(tmp_path, "q", scenario_exe(), "cpu-async-cpu", "--seed", "1",
                  delay=["VDEV0:graph_compute,split=1:100000"], vdev=True)
    assert "VDEV0:graph_compute,split=1:100000" in r.stderr
    d = t.delays
    assert len(d) == 1
    d = d.iloc[0]
    assert d["where"] == "queue" and d["requested_ns"] == 100 * MS and d["rule"] == 0 and not d["failed"]
    target = t.calls.set_index("call_id").loc[d["target_call_id"]]
    assert target["kind"] == "graph_compute" and target["backend"] == "VDEV0" and target["split"] == 1
    # the host call did not wait for the stall: it returned before the queue's stall ended
    assert target["t_end"] < d["device_end"]
    # the queue ran the stall (a device_exec of the delay) for at least the delay, then the split,
    # no earlier than (the delay's injection or the end of the work before it on that queue) + the
    # delay. An idle queue starts sleeping as soon as the delay is pushed, before the host's call
    # returns: the injection counts from the call's begin (docs/delay.md), not its end
    assert d["device_end"] - d["device_begin"] >= 100 * MS
    dev = t.device[(t.device["backend"] == "VDEV0") & (t.device["kind"] != "delay")]
    start = dev.loc[dev["call_id"] == d["target_call_id"], "t_begin"].min()
    prev_end = dev.loc[dev["t_end"] <= start, "t_end"].max()
    assert start >= max(prev_end, d["t_begin"]) + 100 * MS
    check_dtypes(t)  # the documented schema, with a delay in every frame that has one
    s = delay_stalls(t).iloc[0]
    assert s["error"] >= 0 and s["stall_ns"] == start - max(prev_end, d["t_begin"])
    # the program's result is unchanged: the delay only moves work in time
    ref = subprocess.run([str(scenario_exe()), "cpu-async-cpu", "--cpu-only", "--seed", "1"],
                         capture_output=True, text=True, timeout=60)
    assert r.stdout.split()[:2] == ref.stdout.split()[:2]


def test_nothing_is_injected_by_default(tmp_path):
    t, _ = record(tmp_path, "none", scenario_exe(), "cpu-async-cpu", "--seed", "1", vdev=True)
    assert len(t.delays) == 0 and "delay.rules" not in t.meta
    assert not (t.calls["kind"] == "delay").any() and not (t.device["kind"] == "delay").any()
    assert "delay" in t.calls["kind"].cat.categories  # the frame is there, empty
    # the run's environment is recorded for a re-run, without the injection itself
    env = t.meta["env"].split("\0")
    assert "GGML_TRACE_VIRTUAL_DEVICES=3" in env and not any(e.startswith("LD_PRELOAD=") for e in env)
    assert t.meta["cwd"] == os.getcwd()


def test_a_host_delay_delays_the_call_on_the_cpu_backend(tmp_path):
    t, _ = record(tmp_path, "h", built_program(BUILD, "sched-loop"), 6, delay=["CPU:graph_compute,graph=3:30000"])
    d = t.delays
    assert len(d) == 1 and d["where"].iloc[0] == "host" and d["graph"].iloc[0] == 3
    d = d.iloc[0]
    assert d["t_end"] - d["t_begin"] >= 30 * MS  # the calling thread slept
    split = t.splits.set_index("call_id").loc[d["target_call_id"]]
    assert split["graph"] == 3 and split["t_begin"] >= d["t_end"]  # the call came after the sleep
    graphs = t.calls[t.calls["kind"] == "sched_graph_compute"].set_index("graph")["duration"]
    assert graphs[3] >= 30 * MS
    assert delay_stalls(t)["stall_ns"].iloc[0] >= 30 * MS


def test_the_filter_keys_select_exactly_the_intended_operations(tmp_path):
    rules = [
        "CPU:graph_compute,graph=2-4:50",       # 0: graphs 2, 3, 4
        "*:graph_compute,op=SCALE:50",          # 1: the last node of every graph is y = scale(...)
        "*:graph_compute,op=ADD:50",            # 2: ADD is in the middle: never first or last
        "CPU:*,tensor=y:50",                    # 3: the computes that write y (every graph)
        "C:graph_compute,tensor=no-such-*:50",  # 4: nothing
        "CPU:graph_compute,nth=3-5:50",         # 5: the 4th to 6th compute
        "CPU:graph_compute,split=1:50",         # 6: a single backend: no split 1
        "CUDA:graph_compute:50",                # 7: no such backend
        "CPU:graph_compute,graph=6,seed=7:rand:400",  # 8, 9: seeded random delays
        "CPU:graph_compute,graph=6-8,seed=7:rand:400",
    ]
    t, _ = record(tmp_path, "keys", built_program(BUILD, "sched-loop"), 10, delay=rules)
    d = t.delays
    assert t.meta["delay.rules"] == ";".join(rules)
    splits = t.splits.set_index("call_id")
    graph_of = splits["graph"]
    by_rule = {k: sorted(graph_of.loc[g["target_call_id"]].tolist()) for k, g in d.groupby("rule")}
    all_graphs = sorted(t.splits["graph"].tolist())
    assert all_graphs == list(range(10))
    assert by_rule[0] == [2, 3, 4]
    assert by_rule[1] == all_graphs and by_rule[3] == all_graphs
    assert 2 not in by_rule and 4 not in by_rule and 6 not in by_rule and 7 not in by_rule
    assert by_rule[5] == [3, 4, 5]  # nth counts the rule's matches in order, from 0
    assert by_rule[8] == [6] and by_rule[9] == [6, 7, 8]
    fixed = d[d["rule"] < 8]
    assert (fixed["requested_ns"] == 50_000).all() and (fixed["where"] == "host").all()
    rand = d[d["rule"] >= 8].sort_values(["rule", "t_begin"])["requested_ns"].tolist()
    assert all(0 <= x <= 400_000 for x in rand) and len(set(rand[1:])) == 3
    # the same seed draws the same delays for the same match numbers, in another run too
    assert rand[0] == rand[1]
    t2, _ = record(tmp_path, "keys2", built_program(BUILD, "sched-loop"), 10, delay=rules[8:])
    assert t2.delays.sort_values(["rule", "t_begin"])["requested_ns"].tolist() == rand
    t3, _ = record(tmp_path, "keys3", built_program(BUILD, "sched-loop"), 10,
                   delay=[r.replace("seed=7", "seed=8") for r in rules[8:]])
    assert t3.delays["requested_ns"].tolist() != rand


def test_a_copy_is_selected_by_its_tensor_names_on_the_queue_that_runs_it(tmp_path):
    t, _ = record(tmp_path, "cp", scenario_exe(), "cpu-async-cpu", "--seed", "1",
                  delay=["VDEV:cpy_tensor_async,tensor=c:5000"], vdev=True)
    d = t.delays
    assert len(d) == 1 and d["where"].iloc[0] == "queue" and d["backend"].iloc[0] == "VDEV0"
    copy = t.copies.set_index("call_id").loc[d["target_call_id"].iloc[0]]
    assert copy["src_tensor"] == "c" and copy["kind"] == "cpy_tensor_async"
    assert delay_stalls(t)["stall_ns"].iloc[0] >= 0.99 * 5 * MS  # clock granularity: a few hundred ns



def test_a_copy_into_a_device_from_another_is_delayed_on_the_writers_queue_and_each_rule_says_where(tmp_path):
    """A copy between two asynchronous devices runs on the source's queue: a rule naming the destination
    stalls the source (the copy's writer), and says so at start and at its first delay; src= selects the
    same copies by their source; queue= keeps a rule to one device's own queue (docs/delay.md)."""
    rules = ["VDEV1:cpy_tensor_async:300", "*:cpy_tensor_async,src=VDEV0:300", "*:*,queue=VDEV1:300"]
    t, r = record(tmp_path, "peer", scenario_exe(), "pipeline-input-reuse", "--seed", "1", "--devices", "2",
                  "--device", "VDEV0", "--device", "VDEV1", "--buffer", "pageable", "--parallel", "1", delay=rules,
                  vdev=True)
    assert ("delay rule 0 'VDEV1:cpy_tensor_async:300' acts on VDEV1's queue, but a copy into VDEV1 from another "
            "asynchronous backend runs on the source's queue: there it stalls the source (the copy's writer)") in r.stderr
    assert "delay rule 0 first acted on the queue of VDEV0 (the delayed call is VDEV1's" in r.stderr
    assert "delay rule 2 '*:*,queue=VDEV1:300' acts on VDEV1's queue alone" in r.stderr
    d = t.delays
    by_rule = {k: g for k, g in d.groupby("rule")}
    for rule in (0, 1):  # the same copies, by destination and by source: on VDEV0's queue
        g = by_rule[rule]
        assert len(g) > 0 and set(g["target_kind"].astype(str)) == {"cpy_tensor_async"}
        assert set(g["backend"].astype(str)) == {"VDEV0"} and set(g["target_backend"].astype(str)) == {"VDEV1"}
        assert set(g["where"].astype(str)) == {"queue"}
    assert by_rule[0]["target_call_id"].tolist() == by_rule[1]["target_call_id"].tolist()
    mine = by_rule[2]
    assert set(mine["backend"].astype(str)) == {"VDEV1"} and "graph_compute" in set(mine["target_kind"].astype(str))
    assert not set(mine["target_call_id"]) & set(by_rule[0]["target_call_id"])  # never the writer's copies


BAD = {
    "CPU:graph_compute": "expected BACKEND:KIND",
    "CPU:graph_compute:-5": "microseconds",
    "CPU:graph_compute:abc": "microseconds",
    "CPU:graph_compute:1e3": "microseconds",
    "CPU:graph_compute:0": "microseconds",
    "CPU:compute:100": "unknown call kind",
    ":graph_compute:100": "no backend",
    "CPU:graph_compute,graph=5-2:100": "graph= takes N or A-B",
    "CPU:graph_compute,split=x:100": "split= takes",
    "CPU:graph_compute,colour=red:100": "unknown key",
    "CPU:graph_compute,op=MUL-MAT:100": "op= takes a ggml op name",
    "CPU:event_wait,op=ADD:100": "op= applies to graph_compute only",
    "CPU:graph_compute,src=VDEV0:100": "src= applies to cpy_tensor_async only",
    "CPU:graph_compute,seed=-1:rand:100": "seed= takes",
    "CPU:graph_compute:rand:0": "microseconds",
    "CPU:graph_compute,nth:100": "KEY=VALUE",
}


@pytest.mark.parametrize("spec", list(BAD))
def test_a_bad_rule_is_refused_before_the_run_and_by_the_hooks(spec, tmp_path):
    with pytest.raises(delay_spec.DelaySpecError, match=BAD[spec]):
        delay_spec.parse([spec])
    out = tmp_path / "bad.ggmltrace"
    r = ggml_trace("record", "--build", BUILD, "-o", out, "--delay", spec, "--",
                   built_program(BUILD, "sched-loop"), 2, timeout=60)
    assert r.returncode == 2 and f"bad delay rule '{spec}'" in r.stderr and BAD[spec] in r.stderr
    assert "computed" not in r.stdout and not out.exists()  # refused before the program ran
    # the hooks, for programs started without ggml-trace, refuse the same rule the same way
    env = dict(os.environ, LD_PRELOAD=str(programs.hooks(BUILD)), GGML_TRACE_OUTPUT=str(out),
               GGML_TRACE_DELAY=spec)
    p = subprocess.run([str(built_program(BUILD, "sched-loop")), "2"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and f"bad delay rule '{spec}'" in p.stderr and BAD[spec] in p.stderr
    assert "computed" not in p.stdout


def test_the_hooks_refuse_an_op_this_ggml_does_not_have(tmp_path):
    out = tmp_path / "op.ggmltrace"
    r = ggml_trace("record", "--build", BUILD, "-o", out, "--delay", "CPU:graph_compute,op=NOT_AN_OP:100", "--",
                   built_program(BUILD, "sched-loop"), 2, timeout=60)
    assert r.returncode == 2 and "NOT_AN_OP is not an op of this ggml" in r.stderr
    assert "computed" not in r.stdout


def test_rules_from_the_environment_and_several_in_one_variable(tmp_path):
    out = tmp_path / "env.ggmltrace"
    env = dict(os.environ, LD_PRELOAD=str(programs.hooks(BUILD)), GGML_TRACE_OUTPUT=str(out),
               GGML_TRACE_DELAY=" CPU:graph_compute,graph=1:100 ; CPU:graph_compute,graph=2:200 ")
    p = subprocess.run([str(built_program(BUILD, "sched-loop")), "4"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    t = load(out)
    assert t.delays[["graph", "requested_ns", "rule"]].astype(int).values.tolist() == [[1, 100_000, 0], [2, 200_000, 1]]
    assert "GGML_TRACE_DELAY" not in t.meta["env"]  # the rules are recorded apart
    assert t.meta["delay.rules"] == "CPU:graph_compute,graph=1:100;CPU:graph_compute,graph=2:200"


def test_the_python_and_native_parsers_agree_on_good_rules(tmp_path):
    good = ["*:*:1", "VDEV0:cpy_tensor_async,tensor=Kcur-*,nth=0-3:0.5",
            "CPU:graph_compute,graph=0-99,split=0,op=scale,seed=3:rand:250",
            "*:cpy_tensor_async,src=VDEV0,queue=VDEV0:1"]
    assert [r["us"] for r in delay_spec.parse(good)] == [1.0, 0.5, 250.0, 1.0]
    assert delay_spec.parse(good[2:])[0]["op"] == "SCALE" and delay_spec.parse(good[2:])[0]["random"]
    assert (delay_spec.parse(good)[3]["src"], delay_spec.parse(good)[3]["queue"]) == ("VDEV0", "VDEV0")
    t, _ = record(tmp_path, "good", built_program(BUILD, "sched-loop"), 3, delay=good)
    assert t.meta["delay.rules"] == ";".join(good)
    assert np.array_equal(np.sort(t.delays["rule"].unique()), [0, 2])  # rule 1: no copies here


def test_delays_in_the_timeline_the_exports_and_the_report(tmp_path):
    from ggml_trace.analysis.export import export_parquet, perfetto_events
    from ggml_trace.analysis.report import report_html
    from ggml_trace.analysis.timeline import timeline

    t, _ = record(tmp_path, "views", scenario_exe(), "cpu-async-cpu", "--seed", "1",
                  delay=["VDEV0:graph_compute,split=1:3000", "CPU:graph_compute,split=2:1000"], vdev=True)
    assert sorted(t.delays["where"].astype(str)) == ["host", "queue"]
    html = timeline(t).to_html()  # hover texts are in JSON: µ is \u00b5 there
    assert "injected delay: 3,000.000 \\u00b5s requested (rule 0)" in html
    assert "injected delay: 1,000.000 \\u00b5s requested (rule 1)" in html
    ev = [e for f in perfetto_events(t)["frames"] for e in f.to_dict("records") if e.get("name") == "delay"]
    # the host's injection of both, and the queue's stall on the VDEV0 device track
    assert sorted(e["args"]["on_device"] for e in ev) == [False, False, True]
    stall = next(e for e in ev if e["args"]["on_device"])
    assert stall["dur"] >= 3000 and stall["args"]["backend"] == "VDEV0"
    files = {p.name for p in export_parquet(t, tmp_path / "pq")}
    assert "delays.parquet" in files
    page = report_html(t, races=False)
    assert "<h2>Injected delays</h2><p>2 delays injected" in page
    assert "<td>VDEV0:graph_compute,split=1:3000</td>" in page
    assert "--delay VDEV0:graph_compute,split=1:3000 --delay CPU:graph_compute,split=2:1000" in page


def test_rules_need_tracing_and_record_checks_an_inherited_variable(tmp_path):
    env = dict(os.environ, LD_PRELOAD=str(programs.hooks(BUILD)), GGML_TRACE_DELAY="CPU:graph_compute:100")
    env.pop("GGML_TRACE_OUTPUT", None)
    p = subprocess.run([str(built_program(BUILD, "sched-loop")), "2"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "GGML_TRACE_DELAY is set but GGML_TRACE_OUTPUT is not" in p.stderr
    bad = dict(os.environ, GGML_TRACE_DELAY="CPU:graph_compute:soon")
    r = ggml_trace("record", "--build", BUILD, "-o", tmp_path / "i.ggmltrace", "--",
                   built_program(BUILD, "sched-loop"), 2, env=bad, timeout=60)
    assert r.returncode == 2 and "bad delay rule 'CPU:graph_compute:soon'" in r.stderr


def test_a_llama_program_on_a_virtual_device_gives_the_same_tokens_with_delays(tmp_path, model):
    """llama-simple fully offloaded to a virtual device (b10531: the #23321 fix is in): stalling
    two of its graphs moves work in time and changes nothing else."""
    cmd = [programs.program(BUILD, "llama-simple"), "-m", model, "-n", "8", "-ngl", "99", "the of and"]
    plain, r = record(tmp_path, "plain", *cmd, vdev=True)
    t, r2 = record(tmp_path, "delayed", *cmd, delay=["VDEV0:graph_compute,graph=2-3:5000"], vdev=True)
    assert r.stdout.strip() and r.stdout == r2.stdout
    assert len(plain.delays) == 0
    d = t.delays
    assert d["graph"].tolist() == [2, 3] and (d["where"] == "queue").all() and (d["backend"] == "VDEV0").all()
    assert (delay_stalls(t)["stall_ns"] >= 5 * MS).all()
