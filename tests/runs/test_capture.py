"""Capture on real llama.cpp programs and real ggml builds."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ggml_trace.analysis import load, summarize
from support import API_VERSION, BUILDS, built_program, completion_cmd, ggml_trace, logged_schedules, simple_cmd
from ggml_trace.tracer import programs


@pytest.mark.parametrize("build", BUILDS)
def test_llama_simple_trace_loads(build, model, tmp_path):
    out = tmp_path / "simple.ggmltrace"
    r = ggml_trace("record", "-o", out, "--", programs.program(build, "llama-simple"), "-m", model, "-n", "4", "the of")
    assert r.returncode == 0, r.stderr[-3000:]
    t = load(out)
    assert t.header["backend_api_version"] == API_VERSION[build]
    assert t.meta["hooks_build"] == build
    assert "llama-simple" in t.meta["cmdline"]
    assert list(t.backends["name"]) == ["CPU"]
    assert len(t.splits) >= 4  # prompt + 3 generated tokens, one CPU split each
    assert (t.splits["n_nodes"] > 0).all()
    assert (t.splits["t_end"] >= t.splits["t_begin"]).all()
    writes = t.accesses[t.accesses["mode"] == "write"]
    assert writes["tensor"].isin(["result_output"]).any()
    # every graph the scheduler computed is there, with its splits numbered from 0
    assert summarize(t)["graphs"] == t.calls["kind"].eq("sched_graph_compute").sum() >= 4
    assert set(t.splits.groupby("graph")["split"].min()) == {0}


@pytest.mark.parametrize("build", BUILDS)
def test_tracing_does_not_change_the_tokens(build, model, tmp_path):
    cmd = simple_cmd(build, model, n=24)
    plain = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=120)
    traced = ggml_trace("record", "-o", tmp_path / "c.ggmltrace", "--", *cmd, timeout=120)
    assert plain.returncode == 0 and traced.returncode == 0, traced.stderr[-3000:]
    assert plain.stdout.strip() and plain.stdout == traced.stdout
    assert len(load(tmp_path / "c.ggmltrace").splits) >= 24  # the prompt, then one graph per new token


def traced_schedules(t):
    """Each scheduler graph compute's splits, with the inputs copied in before each split."""
    copies = t.copies.sort_values("t_begin")
    inputs = {}
    for (graph, split), g in copies.groupby(["graph", "split"]):
        inputs[(graph, split)] = [input_name(r) for r in g.itertuples()]
    out = []
    for graph, g in t.splits.sort_values(["graph", "split"]).groupby("graph"):
        out.append([(r.backend, inputs.get((graph, r.split), [])) for r in g.itertuples()])
    return out


def input_name(copy):
    """The scheduler names an input's copy 'BACKEND#input#copy'; a copy from host memory knows only that."""
    if isinstance(copy.src_tensor, str):
        return copy.src_tensor
    return copy.dst_tensor.split("#", 1)[1].rsplit("#", 1)[0]


@pytest.mark.parametrize("build", BUILDS)
def test_rpc_split_lists_match_ggml_sched_debug(build, model, tmp_path):
    server_trace = tmp_path / "server.ggmltrace"
    client_trace = tmp_path / "client.ggmltrace"
    with programs.rpc_server(build, trace=server_trace) as endpoint:
        cmd = completion_cmd(build, model, "--rpc", endpoint, "-ngl", "99", "-nkvo", "-v", n=6)
        env = {**os.environ, "GGML_SCHED_DEBUG": "1"}
        r = ggml_trace("record", "-o", client_trace, "--", *cmd, env=env, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    t = load(client_trace)
    s = summarize(t)
    busy = [b for b in s["backends"] if b["splits"] > 0 and b["copies_in"] > 0]
    assert len(busy) >= 2, s
    assert {b["name"].split("[")[0] for b in busy} == {"CPU", "RPC0"}

    logged = logged_schedules(r.stderr)
    traced = traced_schedules(t)
    assert len(traced) == s["graphs"] >= 6
    # Every graph the client computed ran exactly a split list that ggml printed, in order.
    i = 0
    for sched in traced:
        while i < len(logged) and logged[i] != sched:
            i += 1
        assert i < len(logged), f"traced schedule not in ggml's log: {sched}"
    assert any(len(inputs) > 0 for sched in traced for _, inputs in sched)
    assert max(len(sched) for sched in traced) >= 8  # CPU and RPC0 alternate with -nkvo

    server = load(server_trace)  # the server side traced too: its graph computes on its CPU backend
    assert len(server.splits) > 0 and len(server.copies) > 0


@pytest.mark.parametrize("end,sig", [("abort", signal.SIGABRT), ("segv", signal.SIGSEGV)])
def test_crash_keeps_every_completed_event(end, sig, tmp_path):
    out = tmp_path / "crash.ggmltrace"
    r = ggml_trace("record", "-o", out, "--", built_program("b10531", "sched-loop"), 7, end)
    assert r.returncode == 128 + sig, r.stderr
    assert "killed by " + sig.name in r.stderr
    t = load(out)
    computes = t.calls[t.calls["kind"] == "sched_graph_compute"]
    assert len(computes) == 7  # each was complete before "computed K" was printed
    assert len(t.splits) == 7
    assert t.copies["kind"].eq("buf_get_tensor").sum() == 7


def test_sigkill_keeps_every_completed_event(tmp_path):
    out = tmp_path / "kill.ggmltrace"
    exe = Path(sys.executable).parent / "ggml-trace"
    proc = subprocess.Popen([str(exe), "record", "-o", str(out), "--", str(built_program("b10531", "sched-loop")),
                             "0", "forever"], stdout=subprocess.PIPE, text=True)
    seen = 0
    for line in proc.stdout:
        seen = int(line.split()[1])
        if seen >= 200:
            break
    # kill the traced program itself (the child of ggml-trace), not the launcher
    child = int(subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()[0])
    os.kill(child, signal.SIGKILL)
    proc.wait(timeout=30)
    t = load(out)
    n = (t.calls["kind"] == "sched_graph_compute").sum()
    # every compute that finished before its line was printed (the program ran on while we read)
    assert n >= seen
    # and each of them whole: its split and its read-back; the one in flight may be partial
    assert n <= len(t.splits) <= n + 1
    assert n <= (t.copies["kind"] == "buf_get_tensor").sum() <= n + 1


def test_a_full_disk_stops_tracing_and_keeps_what_was_written(tmp_path):
    """The file cannot grow past 3 segments (RLIMIT_FSIZE, SIGXFSZ ignored, as a full disk answers
    a write with an error): the program runs on untraced, the error is said once, and the trace
    keeps every event recorded before it."""
    out = tmp_path / "full.ggmltrace"
    limit = 4096 + 3 * (4 << 20) + 100_000  # the header, 3 segments, part of a fourth
    program = [str(built_program("b10531", "sched-loop")), "20000"]
    launch = ("import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
              f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); os.execv(sys.argv[1], sys.argv[1:])")
    r = ggml_trace("record", "--build", "b10531", "-o", out, "--", sys.executable, "-c", launch, *program, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "computed 20000" in r.stdout
    assert r.stderr.count("cannot grow") == 1, r.stderr[-3000:]
    assert "File too large" in r.stderr
    t = load(out)
    computes = t.calls[t.calls["kind"] == "sched_graph_compute"]
    # the three segments' worth, each compute whole (its split, its read-back)
    assert 1000 < len(computes) < 20000
    assert abs(len(t.splits) - len(computes)) <= 1
    assert abs(t.copies["kind"].eq("buf_get_tensor").sum() - len(computes)) <= 1


def test_the_grow_threads_take_only_idle_cpu_time(tmp_path):
    """The threads that grow the trace file are SCHED_IDLE: a CPU that runs only them counts as idle
    when one of the program's threads wakes up (at nice 19 one did not: docs/performance.md)."""
    out = tmp_path / "idle.ggmltrace"
    exe = Path(sys.executable).parent / "ggml-trace"
    proc = subprocess.Popen([str(exe), "record", "-o", str(out), "--", str(built_program("b10531", "sched-loop")),
                             "0", "forever"], stdout=subprocess.PIPE, text=True)
    try:
        next(proc.stdout)  # computing: the trace is open
        child = int(subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()[0])
        grow = []
        for task in Path(f"/proc/{child}/task").iterdir():
            if (task / "comm").read_text().strip() == "ggml-trace grow":
                stat = (task / "stat").read_text()
                grow.append(int(stat[stat.rindex(")") + 2:].split()[38]))  # field 41: the policy
        assert grow == [5, 5]  # two threads, both SCHED_IDLE
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_hooks_for_another_ggml_refuse_and_run_untraced(model, tmp_path):
    """b11434's hooks (backend API 3) injected into a b10531 program (API 2)."""
    cmd = simple_cmd("b10531", model)
    plain = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=120)
    out = tmp_path / "mismatch.ggmltrace"
    r = ggml_trace("record", "--hooks", programs.hooks("b11434"), "-o", out, "--", *cmd, timeout=120)
    assert r.returncode == 0
    assert "do not match this program's ggml" in r.stderr
    assert r.stdout == plain.stdout  # ran, untraced, with the same result
    t = load(out)
    assert len(t.calls) == 0 and "disabled" in t.meta


def test_python_process_marks_and_ranges(tmp_path):
    out = tmp_path / "py.ggmltrace"
    script = ("import time\nfrom ggml_trace import tracer\n"
              "assert tracer.is_active()\n"
              "with tracer.range('prompt 3'):\n    time.sleep(0.01)\n"
              "tracer.mark('done')\ntracer.flush()\n")
    r = ggml_trace("record", "--build", "b10531", "-o", out, "--", sys.executable, "-c", script)
    assert r.returncode == 0, r.stderr
    m = load(out).marks
    assert list(m["name"]) == ["prompt 3", "done"] or sorted(m["name"]) == ["done", "prompt 3"]
    rng = m[m["name"] == "prompt 3"].iloc[0]
    assert rng["t_end"] - rng["t_begin"] >= 10_000_000


def test_record_without_program_and_unknown_build_fail_clearly(tmp_path):
    r = ggml_trace("record", "-o", tmp_path / "x")
    assert r.returncode == 2 and "give the program" in r.stderr
    r = ggml_trace("record", "--build", "b1", "--", "true")
    assert r.returncode == 2 and "no build 'b1' has hooks" in r.stderr and "ggml-trace build-hooks SOURCE --name b1" in r.stderr
    r = ggml_trace("record", "--", "true")
    assert r.returncode == 2 and "pass --build NAME" in r.stderr and "--hooks LIB" in r.stderr


def test_record_sees_through_wrappers_and_says_what_to_do_with_a_script(model, tmp_path):
    """`stdbuf`, `env`, `taskset`, `timeout` before the program: record finds the ggml the program
    loads, as the docs' own commands write it; a shell command it cannot see into gets one line
    naming --build."""
    simple = str(programs.program("b10531", "llama-simple"))
    out = tmp_path / "w.ggmltrace"
    r = ggml_trace("record", "-o", out, "--", "stdbuf", "-o0", "env", "OMP_NUM_THREADS=1", "timeout", "120",
                   "taskset", "-c", "0", simple, "-m", model, "-n", "2", "the of", timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    assert summarize(load(out))["build"]["hooks_build"] == "b10531"
    r = ggml_trace("record", "-o", tmp_path / "s.ggmltrace", "--", "sh", "-c", f"{simple} -m {model} -n 2 x")
    assert r.returncode == 2 and "pass --build NAME" in r.stderr and len(r.stderr.strip().splitlines()) == 1
