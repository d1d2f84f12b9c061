"""`ggml-trace force`: latent races made to manifest by a delay, on the pinned builds' scenario
programs (virtual devices, no latency), before and after the fix for llama.cpp issue #23321."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import completion_cmd, ggml_trace
from support.race_cases import latent_trace

from ggml_trace import analysis
from ggml_trace.analysis import race_match
from ggml_trace.tracer import force, programs
from ggml_trace.tracer.record import record
from ggml_trace.tracer.vulkan_runs import FINAL_LINE

RUNS = 3


def record_scenario(build, name, seed, out, latency_us=0, delays=None):
    """One traced run of a scenario program on three virtual devices; returns the trace's races."""
    env = dict(os.environ, GGML_TRACE_VIRTUAL_DEVICES="3", GGML_TRACE_VDEV_LATENCY_US=str(latency_us))
    r = record([str(programs.program(build, "ggml-trace-scenarios")), name, "--seed", str(seed)],
               programs.hooks(build), out, env=env, stdout=subprocess.DEVNULL, delays=delays)
    assert r.returncode == 0 and r.traces, r
    return analysis.races(analysis.load(out)).to_json()["races"]


def cpu_only(build, name, seed):
    exe = str(programs.program(build, "ggml-trace-scenarios"))
    return subprocess.run([exe, name, "--seed", str(seed), "--cpu-only"], capture_output=True, text=True,
                          check=True).stdout


def force_json(trace, out, *extra):
    r = ggml_trace("force", trace, "--runs", RUNS, "--out", out, "--json", *extra, timeout=300)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return r.returncode, json.loads(r.stdout)


def check_forced_runs(j, original):
    """Every forced run: one delay injected, the same race found (same bytes), and inverted."""
    forced = [d for d in j["details"] if d["name"].startswith("forced-")]
    assert len(forced) == RUNS
    for d in forced:
        assert d["delays"] == 1 and Path(d["trace"]).exists()
        assert d["race"]["found"] and d["race"]["same_bytes"], d
        assert d["race"]["manifested"] and d["race"]["inverted"] and d["race"]["target_manifested"], d
    assert j["delay_us"] >= (original["margin_us"] or 0) + force.MIN_SLACK_US


@pytest.mark.serial  # a 2 ms hold of the host keeps the race latent: a worker woken later misses it
def test_the_23321_race_is_forced_before_the_fix(tmp_path):
    # The race is there in every run; which way it goes depends on microseconds: untraced, 5 runs of
    # 40 printed the right result here; traced, 11 of 240 runs were latent with the writer before
    # its grow threads and 0 of 600 with today's (the copy's worker starts ~10 us after the copy is
    # queued, the CPU split ~4 us after). So the CPU split is held back on the host, as a lucky run
    # would have it (2 ms: room for a worker woken late on a busy machine): h is read before z is
    # written over it.
    held = "CPU:graph_compute,graph=0,split=2:2000"
    trace = tmp_path / "orig.ggmltrace"
    (race,) = record_scenario("b10524", "inputless-reuse", 1, trace, delays=[held])
    assert race["verdict"] == "latent"
    rc, j = force_json(trace, tmp_path / "forced")
    assert rc == 1 and j["verdict"] == "diverged"
    assert j["runs"] == RUNS and j["manifested_runs"] == RUNS and j["diverged_runs"] == RUNS
    assert j["compared_with"] == "expected" and "CPU alone" in j["expected"]
    assert j["rule"].startswith("VDEV0:cpy_tensor_async,graph=0,split=1,tensor=h:")
    check_forced_runs(j, race)
    # The command printed reproduces it: the same race, manifested, and a corrupt result.
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    r = subprocess.run(j["command"], shell=True, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    out = Path(j["command"].split(" -o ")[1].split()[0])
    (again,) = analysis.races(analysis.load(out)).to_json()["races"]
    assert race_match.identity(again) == race_match.identity(race) and again["inverted"]
    assert r.stdout != cpu_only("b10524", "inputless-reuse", 1)


def test_a_race_held_apart_by_a_recorded_delay_is_forced_with_that_delay_kept(tmp_path):
    # The CPU split held back 20 ms on the host: the copy of h is done before z is written.
    held = "CPU:graph_compute,graph=0,split=2:20000"
    trace = tmp_path / "held.ggmltrace"
    (race,) = record_scenario("b10524", "inputless-reuse", 1, trace, delays=[held])
    assert race["verdict"] == "latent"
    rc, j = force_json(trace, tmp_path / "forced")
    assert rc == 1 and j["kept_rules"] == [held] and j["command"].count("--delay") == 2
    # Without the force rule the runs keep the order and the right result; with it, never.
    assert j["baseline_manifested_runs"] == 0 and j["baseline_diverged_from_expected"] == 0
    assert j["manifested_runs"] == RUNS and j["diverged_from_expected"] == RUNS == j["diverged_from_baseline"]
    check_forced_runs(j, race)
    for d in j["details"]:  # the kept rule acted in every run, the force rule only in the forced ones
        t = analysis.load(d["trace"])
        assert (t.delays["rule"] == 0).sum() == 1 and (t.delays["rule"] == 1).sum() == d["delays"]


def test_nothing_to_force_after_the_fix(tmp_path):
    trace = tmp_path / "fixed.ggmltrace"
    assert record_scenario("b10531", "inputless-reuse", 1, trace) == []
    r = ggml_trace("force", trace, timeout=120)
    assert r.returncode == 0 and "no race to force" in r.stdout, r.stdout + r.stderr
    rc, j = force_json(trace, tmp_path / "forced")
    assert rc == 0 and j["verdict"] == "no-race" and j["runs"] == 0 and j["manifested_runs"] == 0
    assert not (tmp_path / "forced").exists()  # nothing was run


def test_the_random_dag_race_that_outlives_the_fix_is_forced(tmp_path):
    # Seed 57's graph: VDEV1 copies n3 from host memory for split 3, and a later synchronous copy
    # into host memory (for split 6, from VDEV0) reuses those bytes; nothing orders them on b10531.
    trace = tmp_path / "dag.ggmltrace"
    found = record_scenario("b10531", "random-dag", 57, trace)
    assert len(found) == 1, found
    (race,) = found
    assert (race["a"]["backend"], race["a"]["kind"], race["a"]["tensor"]) == ("VDEV1", "cpy_tensor_async", "n3")
    assert (race["b"]["kind"], race["b"]["mode"]) == ("buf_get_tensor", "write")
    # b is the host thread's own synchronous copy, queued after a: a host preempted for longer than
    # force's default slack (10 ms; the suite runs 4 workers on 2 cores) reaches it after a ran
    rc, j = force_json(trace, tmp_path / "forced", "--slack-us", "50000")
    assert rc == 1 and j["verdict"] == "diverged"
    assert j["manifested_runs"] == RUNS and j["diverged_from_expected"] == RUNS
    check_forced_runs(j, race)
    forced = Path(j["details"][-1]["stdout"]).read_text()
    assert forced != cpu_only("b10531", "random-dag", 57)
    # force warns when it would delay a peer copy: those run on the source's queue, the delay on the destination's
    t = analysis.load(trace)
    copies = t.calls[t.calls["kind"] == "cpy_tensor_async"]
    peer = [force._peer_copy({"kind": "cpy_tensor_async", "call_id": c, "backend": b}, t)
            for c, b in zip(copies["call_id"], copies["backend"].astype(str))]
    assert peer == copies["backend2"].astype(str).str.startswith("VDEV").tolist() and any(peer) and not all(peer)


def test_the_23321_race_in_llama_completion_is_forced(tmp_path):
    # The upstream pattern in a real program: a qwen35-style model fully offloaded to a virtual
    # device with the KV cache on the CPU; VDEV0 copies model.input_embed, the next CPU split
    # (no inputs) reuses its bytes. b10531's output is the expected one (it has no race).
    qwen = programs.build_root() / "models" / "tiny-qwen35.gguf"
    if not qwen.exists():
        pytest.skip(f"{qwen} is missing: `make setup` builds it")
    env = dict(os.environ, GGML_TRACE_VIRTUAL_DEVICES="1")
    traces = {}
    for build in ("b10524", "b10531"):
        traces[build] = tmp_path / f"{build}.ggmltrace"
        # b10531's output is the expected one: its log must be whole (the hooks drain llama.cpp's
        # logger at exit, which loses its last lines otherwise)
        with open(tmp_path / f"{build}.out", "wb") as out, open(tmp_path / f"{build}.err", "wb") as err:
            r = record(completion_cmd(build, qwen, "-ngl", 99, "-nkvo"), programs.hooks(build), traces[build],
                       env=env, stdout=out, stderr=err)
        assert r.returncode == 0
        assert FINAL_LINE.encode() in (tmp_path / f"{build}.err").read_bytes(), (tmp_path / f"{build}.err").read_text()
    rc, j = force_json(traces["b10531"], tmp_path / "none")
    assert rc == 0 and j["verdict"] == "no-race"
    (race,) = analysis.races(analysis.load(traces["b10524"])).to_json()["races"]
    assert (race["a"]["backend"], race["a"]["tensor"], race["b"]["backend"]) == ("VDEV0", "model.input_embed", "CPU")
    rc, j = force_json(traces["b10524"], tmp_path / "forced", "--expect-output", tmp_path / "b10531.out")
    # Every forced run manifests the race (the copy reads model.input_embed after the CPU split wrote
    # over it); the tiny random model's text absorbs that now and then (a forced run whose race
    # manifested in all 9 graphs printed the expected text: 3 of 81 forced runs here), so one
    # run of three may print the expected text.
    assert rc == 1 and j["manifested_runs"] == RUNS and j["diverged_from_expected"] >= RUNS - 1, j["message"]
    assert all(d["race"]["target_manifested"] for d in j["details"] if d["name"].startswith("forced-"))


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    bare = latent_trace(tmp_path / "bare.ggmltrace", {"cmdline": "/bin/true\0"})
    r = ggml_trace("force", bare, timeout=60)
    assert r.returncode == 2 and "no META cwd, env" in r.stderr and len(r.stderr.splitlines()) == 1
    full = latent_trace(tmp_path / "full.ggmltrace", {"cmdline": "/bin/true\0", "cwd": "/", "env": ""})
    r = ggml_trace("force", full, "--race", 2, timeout=60)
    assert r.returncode == 2 and "has 1 race" in r.stderr, r.stderr
    r = ggml_trace("force", tmp_path / "missing.ggmltrace", timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr


def test_the_tensor_parallel_scratch_race_is_forced_in_every_graph(tmp_path):
    # meta-allreduce on two virtual devices without latency: VDEV1's ADD reading its allreduce
    # scratch against the next subgraph's copy into it, latent in nearly every run (measured 0 of 10
    # corrupt on b10531). --every-graph delays VDEV1's compute of that split in every graph.
    exe = str(programs.program("b10531", "ggml-trace-scenarios"))
    env = dict(os.environ, GGML_TRACE_VIRTUAL_DEVICES="2", GGML_TRACE_VDEV_LATENCY_US="0")
    for i in range(10):
        trace = tmp_path / f"tp-{i}.ggmltrace"
        r = record([exe, "meta-allreduce", "--seed", "0", "--devices", "2"], programs.hooks("b10531"), trace,
                   env=env, stdout=subprocess.DEVNULL)
        assert r.returncode == 0 and r.traces, r
        found = analysis.races(analysis.load(trace)).to_json()["races"]
        if len(found) == 1 and found[0]["verdict"] == "latent":
            break
    (race,) = found
    assert race["verdict"] == "latent", "10 runs without latency and the race was never latent"
    assert race["class"] == "write-after-read" and race["a"]["tensor"] == "allreduce.tmp[0]@VDEV1"
    rc, j = force_json(trace, tmp_path / "forced", "--every-graph")
    assert rc == 1 and j["verdict"] == "diverged", j["message"]
    assert j["rule"].startswith("VDEV1:graph_compute,split=") and "graph=" not in j["rule"]
    assert j["manifested_runs"] == RUNS and j["diverged_from_expected"] == RUNS
    forced = [d for d in j["details"] if d["name"].startswith("forced-")]
    assert all(d["delays"] >= 1 and d["race"]["manifested"] for d in forced), forced
