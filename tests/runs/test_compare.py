"""`ggml-trace compare` and the #28874 stall: a scheduler scenario that blocks the host on the previous
device at every split boundary, our patch that copies user inputs first, and what it changes."""
import json
from pathlib import Path

import pytest

from ggml_trace.analysis import load
from ggml_trace.analysis.compare import NOISE_REL_ONE, compare
from ggml_trace.analysis.stalls import stalls
from support import ggml_trace, same_text, stall_waits
from ggml_trace.tracer import scenario

RUNS = 3


@pytest.fixture(scope="module")
def stall_runs(tmp_path_factory):
    """user-input-stall over three virtual devices (2 ms an operation), before and after the patch."""
    out = {}
    for build in ("b11434", "b11434-inputsfirst"):
        out[build] = scenario.run("user-input-stall", build=build, runs=RUNS, latency_us=2000, devices=3,
                                  out_dir=tmp_path_factory.mktemp(build))
    return out


def boundary_stalls(path):
    """The waits at split boundaries that drained a cross-device copy (the #28874 stall)."""
    s = stalls(load(path))
    w = s[(s["kind"] == "synchronize") & s["split"].isin([1, 2]) & s["via"].notna()]
    return w[w["waited_kind"] == "cpy_tensor_async"]


def test_stalls_names_the_28874_stall_and_the_patch_removes_it(stall_runs):
    before, after = stall_runs["b11434"], stall_runs["b11434-inputsfirst"]
    assert before.corrupt_runs == after.corrupt_runs == 0 and before.reference == after.reference
    for path in before.traces:
        w = boundary_stalls(path)
        # on VDEV1 (it waited on VDEV0) and VDEV2 (on VDEV1), in most of the 8 steps; none needed
        assert set(w["backend"]) == {"VDEV1", "VDEV2"} and len(w) >= 8, w
        assert {tuple(x) for x in w[["backend", "via"]].to_numpy()} == {("VDEV1", "VDEV0"), ("VDEV2", "VDEV1")}
        assert w["avoidable"].all()
        # they cost time: those that found the copy still running returned only after it had ended
        # (how long they blocked: bench/bench_stall_figures.py)
        drained = w[(w["pending"] > 0) & w["waited_end"].notna()]
        assert len(drained) > 0 and (drained["t_end"] >= drained["waited_end"]).all()
    for path in after.traces:
        assert len(boundary_stalls(path)) == 0


def test_compare_shows_what_the_patch_saved(stall_runs, tmp_path):
    a = [load(p) for p in stall_runs["b11434"].traces]
    b = [load(p) for p in stall_runs["b11434-inputsfirst"].traces]
    r = compare(a, b)
    d = r["diff"]
    # the boundary stalls ordered nothing: those waits are gone (the host then waits at the end instead:
    # in this chain nothing else is left for it to do, so its blocked total hardly moves)
    assert d["avoidable_waits"]["diff"] < 0
    assert r["a"]["totals"]["splits"] == r["b"]["totals"]["splits"]  # the same schedule
    assert r["graphs"]["aligned"] == 8 and r["graphs"]["split_structure_differs_count"] == 0
    # the critical path: unpatched, the host waits on each device in turn, so the first two devices
    # carry much of it; patched, the chain runs ahead and the host waits once, for the last device
    for side in ("a", "b"):
        p = r[side]["critical_path"]
        assert p["host_ns"] + p["copies_ns"] + p["waiting_ns"] + sum(p["devices"].values()) == p["wall_ns"]
    pa, pb = r["a"]["critical_path"]["devices"], r["b"]["critical_path"]["devices"]
    # (the shares of the path: bench/bench_stall_figures.py)
    assert pa["VDEV0"] + pa["VDEV1"] > pa["VDEV2"] > 0, pa
    assert pb["VDEV2"] > pb["VDEV0"] + pb["VDEV1"], pb
    # the devices bound this run, not the host: the devices' work is the path's largest part, before
    # the host's work and copies, and before the waiting (threads waking after a device's work ended)
    assert d["critical_device_ns"]["a"] > max(d["critical_host_ns"]["a"], d["critical_waiting_ns"]["a"])
    # the CLI: folders of runs as sides, JSON, the page with both timelines, the exit status
    da, db = Path(stall_runs["b11434"].traces[0]).parent, Path(stall_runs["b11434-inputsfirst"].traces[0]).parent
    page = tmp_path / "cmp.html"
    res = ggml_trace("compare", da, db, "--json", "-o", page, timeout=300)
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    assert j["a"]["runs"] == j["b"]["runs"] == RUNS
    for k in ("host_blocked_ns", "avoidable_blocked_ns", "wall_ns"):
        assert k in j["a"]["totals"] and k in j["b"]["totals"] and k in j["diff"]
    html = page.read_text()
    assert 'id="compare-a"' in html and 'id="compare-b"' in html and "host_blocked_ns" in html
    slower = ggml_trace("compare", db, da, "--fail-if-slower", "0", timeout=300)  # B = the unpatched side
    wall = j["diff"]["wall_ns"]
    assert slower.returncode == (1 if wall["a"] > wall["b"] else 0), slower.stdout + slower.stderr


def test_two_runs_of_one_build_have_the_same_schedule(stall_runs):
    """The same build and settings: one run a side is compared with the noise bound of one run, and
    the counts that the schedule fixes are equal. (Whether the headline times differ by more than
    the noise bound is a matter of the machine: bench/bench_stall_figures.py; docs/compare.md.)"""
    runs = [load(p) for p in stall_runs["b11434-inputsfirst"].traces]
    r = compare(runs[:1], runs[1:2])
    assert r["noise_rel"] == NOISE_REL_ONE  # one run a side
    for k in ("graphs", "splits", "copies", "copy_bytes", "event_waits"):
        assert r["diff"][k]["diff"] == 0, k


def test_llama_layer_split_with_a_tensor_override(model, tmp_path):
    """llama-completion -sm layer over three virtual devices with an --override-tensor (pipeline
    parallelism off, the layers still on the devices): stalls names the host blocked at split
    boundaries on the previous device, through the copy queued first; with user inputs copied first
    those stalls are gone, and the output is the same."""
    from ggml_trace.tracer import programs

    out, texts = {}, {}
    for build in ("b11434", "b11434-inputsfirst"):
        path = tmp_path / f"{build}.ggmltrace"
        cmd = ["stdbuf", "-o0", str(programs.program("b11434", "llama-completion")), "-m", str(model), "-p",
               "the of and to a in is it", "-n", "16", "--temp", "0", "--seed", "1", "-no-cnv", "-ngl", "99",
               "-sm", "layer", "-dev", "VDEV0,VDEV1,VDEV2", "-ot", r"blk\.0\.ffn_norm=VDEV0"]
        r = ggml_trace("record", "--build", build, "-o", path, "--virtual-devices", 3, "--vdev-latency-us", 1000, "--",
                       *cmd, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        t = load(path)
        assert (t.calls["kind"].astype(str) == "event_wait").sum() == 0  # no pipeline parallelism
        s = stalls(t)
        w = s[(s["kind"] == "synchronize") & s["graph"].notna() & s["via"].notna()]
        out[build], texts[build] = w[w["waited_kind"] == "cpy_tensor_async"], r.stdout
    assert same_text(texts["b11434"], texts["b11434-inputsfirst"])  # a tail the logger dropped at exit aside
    before = out["b11434"]
    assert len(before) >= 8 and before["avoidable"].all()
    # they cost time: those that found the copy still running returned only after it had ended
    drained = before[(before["pending"] > 0) & before["waited_end"].notna()]
    assert len(drained) > 0 and (drained["t_end"] >= drained["waited_end"]).all()
    assert len(out["b11434-inputsfirst"]) == 0


def avoidable_waits(t):
    """The waits of a trace that ordered nothing (analysis.stalls)."""
    s = stall_waits(stalls(t))
    return s[s["avoidable"]]


@pytest.mark.parametrize("scenario_name,before,after,devices,latency", [
    ("inputless-reuse", "b10524", "b10531", 3, 5000),                 # the #23321 fix
    ("meta-allreduce", "b10531", "b10531-tpfix", 2, "0,3000"),        # our tensor-parallel fix
])
def test_what_the_verified_fixes_cost(scenario_name, before, after, devices, latency, tmp_path):
    """Each fix adds its orderings (a synchronize; an event record and wait per peer copy), and the
    #23321 fix's synchronize takes the work off the waits that ordered nothing. What the fixes cost
    in wall time (none beyond the noise bound): bench/bench_stall_figures.py, docs/compare.md. The two
    builds' runs alternate, so that a slow spell of a shared machine falls on both sides, not on one."""
    sides = {before: [], after: []}
    for i in range(RUNS):
        for b in sides:
            run = scenario.run(scenario_name, build=b, runs=1, latency_us=latency, devices=devices,
                               out_dir=tmp_path / f"{b}-{i}")
            sides[b] += [load(p) for p in run.traces]
    r = compare(sides[before], sides[after])
    d = r["diff"]
    if after == "b10531":
        assert d["synchronizations"]["diff"] == 1
        # before the fix a wait that ordered nothing drained VDEV0's running work; with it, the waits
        # that order nothing find nothing left to drain (the fix's own synchronize is needed)
        assert any((avoidable_waits(t)["pending"] > 0).any() for t in sides[before])
        assert all((avoidable_waits(t)["pending"] == 0).all() for t in sides[after])
    else:
        assert d["event_records"]["diff"] == d["event_waits"]["diff"] == 16
        # one host thread, and each blocking call counted once: a meta backend's waits are not counted
        # again beside its devices', and no two of the thread's blocking calls overlap
        for t in sides[after]:
            s = stalls(t)
            assert not s["backend"].astype(str).str.startswith("Meta").any()
            for _, calls in s.groupby("thread"):
                calls = calls.sort_values("t_begin")
                assert (calls["t_begin"].to_numpy()[1:] >= calls["t_end"].to_numpy()[:-1]).all()
