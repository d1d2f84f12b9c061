"""`ggml-trace diagnose` end to end (docs/diagnose.md): real llama.cpp programs before and after the
fix of #23321 on a virtual device (on lavapipe: tests/external), the pipeline-parallel race, a program that
crashes and one that hangs; what it writes (ISSUE.md, timeline.png) checked as a maintainer would
meet it, with hostile names and arguments kept inert."""
from __future__ import annotations

import os
import random
from pathlib import Path


from support import built_program
from support.diagnose_checks import BUILD, QWEN, QWEN_ARGS, check_issue, check_png, diagnose, needs
from ggml_trace import analysis
from ggml_trace.tracer.diagnose import Diagnosis, DiagnoseOptions, Run, analyse, conclude, reference_argv

# the #23321 case: one virtual device slow enough that the CPU's next split always comes first
VDEV_23321 = ["--virtual-devices", "1", "--vdev-latency-us", "5000", "--reference-dev", "none"]
FEW = ["--runs", "3", "--force-runs", "2", "--replay-runs", "2", "--max-races", "1"]


# -- llama.cpp #23321 on a virtual device -----------------------------------------------------------------

def test_the_23321_race_is_diagnosed_before_the_fix(tmp_path):
    exe = BUILD / "llama-b10524" / "bin" / "llama-completion"
    needs(exe, QWEN)
    out = tmp_path / "diag"
    r, d = diagnose(out, *FEW, *VDEV_23321, "--", exe, "-m", QWEN, *QWEN_ARGS)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "run 1 of 3:" in r.stderr and "run 3 of 3:" in r.stderr  # a progress line per run
    m = d["races"][0]
    a, b = m["race"]["a"], m["race"]["b"]
    assert (a["backend"], a["tensor"], b["backend"]) == ("VDEV0", "model.input_embed", "CPU")
    assert m["force"]["verdict"] == "diverged" and m["force"]["diverged_runs"] >= 1  # forced: corrupt
    assert m["reduction"]["shape"]["name"] == "inputless-reuse"
    assert m["reduction"]["expected"]["verdict"] == "RED"  # the reduction replayed on b10524
    assert d["explained_by"] == m["number"] and m["explains"]
    md = check_issue(out / "ISSUE.md", "model.input_embed", "<details>", "repro.cpp")
    assert "Wrong output" in md.splitlines()[0]
    assert str(tmp_path) not in md and str(BUILD) not in md  # nothing absolute of this machine
    check_png(out / "timeline.png")
    assert (out / "report.html").stat().st_size > 0 and (out / "repro" / "repro.cpp").exists()
    assert len(list((out / "runs").glob("run-*.ggmltrace"))) == 3


def test_after_the_fix_the_same_command_is_clean(tmp_path):
    exe = BUILD / "llama-b10531" / "bin" / "llama-completion"
    needs(exe, QWEN)
    out = tmp_path / "diag"
    r, d = diagnose(out, *FEW, *VDEV_23321, "--", exe, "-m", QWEN, *QWEN_ARGS)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "no race in 3 runs; outputs identical to the reference" in r.stdout
    assert "not covered:" in r.stdout
    assert d["races"] == [] and d["differing_runs"] == [] and d["outputs"] == 1
    md = check_issue(out / "ISSUE.md")
    assert md.startswith("# No race in 3 runs") and "### Not covered" in md
    assert (out / "timeline.png").stat().st_size > 0


# -- the pipeline-parallel race (docs/pipeline-parallel.md) -------------------------------------------------

WORDS = "the of and to a in is it you that he was for on are with as I his they be at one have this from".split()
_rng = random.Random(1)
PROMPT = " ".join(_rng.choice(WORDS) for _ in range(200))  # as tests/test_pipeline_parallel.py


def test_the_pipeline_race_on_b11434(tmp_path):
    exe = BUILD / "llama-b11434" / "bin" / "llama-completion"
    model = BUILD / "models" / "tiny-llama.gguf"
    needs(exe, model)
    out = tmp_path / "diag"
    r, d = diagnose(out, "--runs", "2", "--force-runs", "1", "--replay-runs", "1", "--max-races", "1",
                    "--build", "b11434", "--virtual-devices", "2", "--vdev-latency-us", "2000,0", "--",
                    "stdbuf", "-o0", exe, "-m", model, "-p", PROMPT, "-n", "32", "-b", "256", "-ub", "32", "--temp", "0",
                    "--seed", "1", "-no-cnv", "-ngl", "99", "-sm", "layer", "-dev", "VDEV0,VDEV1")
    assert r.returncode == 1, r.stderr[-3000:]
    assert d["reference_argv"][-2:] == ["-dev", "none"]  # -dev VDEV0,VDEV1 replaced
    named = {t for m in d["races"] for t in (m["race"]["a"]["tensor"], m["race"]["b"]["tensor"])}
    assert "embd" in named, named
    check_issue(out / "ISSUE.md", "embd")
    check_png(out / "timeline.png")


# -- tensor parallelism: a reference that runs, and one that fails -------------------------------------------

TENSOR = ["--runs", "2", "--force-runs", "0", "--replay-runs", "0", "--build", "b11434", "--virtual-devices", "3",
          "--vdev-latency-us", "0,3000,0"]
TENSOR_ARGS = ["-n", "8", "-p", "a quiet harbor at dusk", "--temp", "0", "--seed", "2", "-no-cnv", "-ngl", "99",
               "-sm", "tensor"]


def test_a_tensor_parallel_command_gets_a_reference_that_runs(tmp_path):
    exe = BUILD / "llama-b11434" / "bin" / "llama-completion"
    model = BUILD / "models" / "tiny-llama.gguf"
    needs(exe, model)
    r, d = diagnose(tmp_path / "diag", *TENSOR, "--", exe, "-m", model, *TENSOR_ARGS)
    assert d["reference"]["exit"] == "exit status 0" and d["reference"]["output_bytes"] > 0, r.stderr[-3000:]
    assert d["reference_argv"][-4:] == ["-sm", "none", "-dev", "none"] and d["reference_failed"] is None


def test_a_failed_reference_is_said_and_the_runs_compared_among_themselves(tmp_path):
    exe = BUILD / "llama-b11434" / "bin" / "llama-completion"
    model = BUILD / "models" / "tiny-llama.gguf"
    needs(exe, model)
    out = tmp_path / "diag"
    # -dev none alone keeps -sm tensor, which llama.cpp refuses without a device
    r, d = diagnose(out, *TENSOR, "--reference", "-dev none", "--", exe, "-m", model, *TENSOR_ARGS)
    assert d["reference"]["exit"] == "exit status 1", r.stderr[-3000:]
    # said with its last line on stderr, as the file holds it (llama.cpp's logger can lose it at exit)
    lines = [x.strip() for x in (out / d["reference"]["stderr"]).read_text(errors="replace").splitlines() if x.strip()]
    assert d["reference_failed"] == "exit status 1" + (f": {lines[-1][:300]}" if lines else "")
    assert "the reference failed" in d["headline"]
    assert d["differing_runs"] == [] and d["explained_by"] is None
    assert all(m["explains"] == [] for m in d["races"])
    assert all(run["differs_from_reference"] is None for run in d["runs"])
    md = check_issue(out / "ISSUE.md", "### The reference failed", lines[-1] if lines else "It wrote nothing to stderr")
    assert "Wrong output" not in md.splitlines()[0] and "explains the wrong output" not in md
    assert "explains the wrong output" not in r.stdout


# -- crashes and hangs ---------------------------------------------------------------------------------------

def test_a_crash_is_reported_with_its_trace(tmp_path):
    exe = built_program("b10531", "sched-loop")
    needs(exe)
    out = tmp_path / "diag"
    r, d = diagnose(out, "--runs", "2", "--", exe, 5, "abort")
    assert r.returncode in (1, 2), r.stderr[-3000:]
    assert "crashed in 2 of 2 runs (killed by SIGABRT)" in r.stdout
    assert d["reference"]["exit"] == "killed by SIGABRT"
    t = analysis.load(out / "runs" / "run-1.ggmltrace", strict=False)  # salvaged: every graph before the abort
    assert (t.calls["kind"] == "sched_graph_compute").sum() == 5
    md = check_issue(out / "ISSUE.md", "killed by SIGABRT", "### How it ended")
    assert "the reference run crashed too" in md


def test_a_hang_is_ended_and_reported(tmp_path):
    exe = built_program("b10531", "sched-loop")
    needs(exe)
    out = tmp_path / "diag"
    r, d = diagnose(out, "--runs", "1", "--no-reference", "--timeout", "3", "--", exe, 0, "forever")
    assert r.returncode == 1, r.stderr[-3000:]
    assert "hung in 1 of 1 runs" in r.stdout and d["runs"][0]["timed_out"]
    t = analysis.load(out / "runs" / "run-1.ggmltrace", strict=False)
    assert (t.calls["kind"] == "sched_graph_compute").sum() > 0
    check_issue(out / "ISSUE.md", "hung")


# -- hostile names and arguments ------------------------------------------------------------------------------

HOSTILE_ARGS = ["<script>alert(1)</script>", "``` `x` ```", "a|b|c", "@someone #1 http://example.com",
                "x\ny", "$\\frac{1}{0}$", "[a](javascript:alert(1))", "y" * 5000]


def test_hostile_arguments_stay_inert(tmp_path):
    exe = built_program("b10531", "sched-loop")
    needs(exe)
    out = tmp_path / "diag"
    r, d = diagnose(out, "--runs", "1", "--no-reference", "--", exe, 2, "exit", *HOSTILE_ARGS)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert r.stdout.startswith("no race in 1 run; outputs identical")
    md = check_issue(out / "ISSUE.md")
    assert "y" * 5000 not in md  # a very long argument is cut
    check_png_renders(out / "timeline.png")
    assert HOSTILE_ARGS[0] not in (out / "report.html").read_text()  # the page escapes the command line


def check_png_renders(path):
    from PIL import Image

    assert Image.open(path).size[0] >= 1000


def test_hostile_names_from_the_trace_stay_inert(tmp_path):
    # a trace whose every name is hostile (support.view_traces), as one run of a diagnosis
    from support.view_traces import HOSTILE, hostile_trace

    runs = tmp_path / "runs"
    runs.mkdir()
    path = hostile_trace(runs / "run-1.ggmltrace")
    (runs / "run-1.stdout").write_text("<script>alert(1)</script>\n```\n| a | b |\n")
    (runs / "run-1.stderr").write_text(f"error: {HOSTILE[2]} in {Path.home()}/secret/model.gguf\n")
    run = Run("run-1", 0, "exit status 0", 0.1, "runs/run-1.stdout", "runs/run-1.stderr",
              trace="runs/run-1.ggmltrace", output_bytes=40)
    analyse(path, run)
    d = Diagnosis(str(tmp_path), ["diagnose", "-o", str(tmp_path), "--", "llama-cli", "-m", HOSTILE[0]],
                  ["llama-cli", "-m", HOSTILE[1], "`rm -rf ~`"], os.getcwd(), [run], None, None)
    conclude(d, tmp_path, DiagnoseOptions(tmp_path, force_runs=0, replay_runs=0))
    assert d.status == 1 and d.races
    md = check_issue(tmp_path / "ISSUE.md", HOSTILE[0], HOSTILE[1])
    assert str(tmp_path) not in md
    check_png(tmp_path / "timeline.png")


# -- pieces -------------------------------------------------------------------------------------------------

def test_the_reference_replaces_the_device_option():
    argv = ["llama-completion", "-m", "m.gguf", "--device", "VDEV0,VDEV1", "-ngl", "99", "-nkvo"]
    assert reference_argv(argv, None, None) == ["llama-completion", "-m", "m.gguf", "-dev", "none", "-ngl", "99", "-nkvo"]
    assert reference_argv(argv, "-ngl 0 -ts 1,0", None) == [
        "llama-completion", "-m", "m.gguf", "--device", "VDEV0,VDEV1", "-ngl", "0", "-nkvo", "-ts", "1,0"]
    assert reference_argv(["p", "--device=A"], None, "CPU") == ["p", "-dev", "CPU"]
    assert reference_argv(["p", "-n", "8"], "", None) == ["p", "-n", "8"]
