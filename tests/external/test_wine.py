"""ggml-trace on Windows programs (docs/windows.md), run here under Wine: the pinned ggml cross-built
with MinGW-w64 (`make setup`: build/win/), the hooks brought in by ggml's backend loader
(GGML_BACKEND_PATH), the traces read by the Linux analysis. The #23321 scenario on a virtual device
is RED on b10524 with the same finding as the Linux build's, GREEN on b10531; a crash keeps what was
recorded; hooks of another backend API are refused in one line and the program runs untraced. And
b10524's llama-completion.exe, laid out as llama.cpp's Windows releases are, is diagnosed with the
#23321 race, forced from its own trace under Wine, and clean on b10531's ggml-base."""
import json
import os
import re
import shutil
import subprocess

import pytest

from support import ROOT, ggml_trace
from ggml_trace import analysis
from ggml_trace.analysis.race_match import identity
from ggml_trace.tracer import programs, windows

WIN = ROOT / "build" / "win"
PREFIX = ROOT / "build" / "wine"  # ours (make setup), never the user's ~/.wine
WINE = windows.wine()
SCENARIO = ["inputless-reuse", "--seed", "1", "--devices", "1", "--device", "VDEV0"]
VDEV_23321 = ["--virtual-devices", "1", "--vdev-latency-us", "5000"]  # the CPU's next split always first


def exe(build, name):
    return WIN / f"llama-{build}" / "bin" / name


@pytest.fixture(scope="module")
def wine_env():
    needed = [exe(b, "ggml-trace-hooks.dll") for b in ("b10524", "b10531", "b11434")] + [PREFIX / ".ready"]
    if WINE is None or any(not p.exists() for p in needed):
        pytest.skip("needs `make setup` (MinGW-w64, Wine and the Windows builds under build/win)")
    return dict(os.environ, WINEPREFIX=str(PREFIX), WINEDEBUG="-all")


def result(stdout):
    (line,) = [x for x in stdout.splitlines() if x.startswith("result ")]
    return line


def reference(build, env):
    """The scenario on the CPU alone, untraced, under Wine."""
    r = subprocess.run([WINE, str(exe(build, "ggml-trace-scenarios.exe")), *SCENARIO, "--cpu-only"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return result(r.stdout)


def record_windows(build, out, env, *args, hooks=None, scenario=SCENARIO):
    """`ggml-trace record` of the scenario program of a Windows build, under Wine."""
    which = ["--hooks", hooks] if hooks else ["--build", build]
    return ggml_trace("record", "-o", out, "--no-nvml", *which, *args, "--", WINE,
                      exe(build, "ggml-trace-scenarios.exe"), *scenario, env=env, timeout=300)


def linux_finding(build, tmp_path):
    """The same scenario traced from the Linux build: its race."""
    out = tmp_path / f"linux-{build}.ggmltrace"
    r = ggml_trace("record", "-o", out, "--no-nvml", "--build", build, *VDEV_23321, "--",
                   programs.bin_dir(build) / "ggml-trace-scenarios", *SCENARIO, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return analysis.races(analysis.load(out)).to_json()["races"], result(r.stdout)


def test_the_23321_scenario_is_red_before_the_fix_with_the_linux_finding(wine_env, tmp_path):
    out = tmp_path / "win-b10524.ggmltrace"
    r = record_windows("b10524", out, wine_env, *VDEV_23321)
    assert r.returncode == 0, r.stderr[-3000:]
    assert result(r.stdout) != reference("b10524", wine_env)  # RED: a wrong result
    t = analysis.load(out)
    assert t.warnings == [] and t.meta["platform"] == "windows" and t.meta["hooks_build"] == "b10524"
    found = analysis.races(t).to_json()["races"]
    assert len(found) == 1 and found[0]["verdict"] == "manifested"
    a, b = found[0]["a"], found[0]["b"]
    assert (a["backend"], a["kind"], a["tensor"], b["backend"], b["tensor"]) == ("VDEV0", "cpy_tensor_async", "h",
                                                                                  "CPU", "z")
    linux, linux_result = linux_finding("b10524", tmp_path)
    assert [identity(x) for x in found] == [identity(x) for x in linux]  # the same race, named the same
    assert result(r.stdout) == linux_result  # and the same wrong bytes


def test_after_the_fix_the_same_scenario_is_green(wine_env, tmp_path):
    out = tmp_path / "win-b10531.ggmltrace"
    r = record_windows("b10531", out, wine_env, *VDEV_23321)
    assert r.returncode == 0, r.stderr[-3000:]
    assert result(r.stdout) == reference("b10531", wine_env)
    t = analysis.load(out)
    assert t.warnings == [] and len(t.splits) >= 3  # traced: the CPU and VDEV0's splits
    assert analysis.races(t).to_json()["races"] == []


def test_a_crash_keeps_every_completed_event(wine_env, tmp_path):
    out = tmp_path / "crash.ggmltrace"
    r = ggml_trace("record", "-o", out, "--no-nvml", "--build", "b10531", "--", WINE, exe("b10531", "sched-loop.exe"),
                   "7", "segv", env=wine_env, timeout=300)
    # under Wine a Windows exit status keeps its low byte only: 0xC0000005 reads as 5
    assert r.returncode == 5 and "the program crashed (exception 0xC0000005" in r.stderr, r.stderr[-2000:]
    assert r.stdout.splitlines()[-1] == "computed 7"
    t = analysis.load(out)
    assert not t.closed and any("not closed" in w for w in t.warnings)
    assert (t.calls["kind"] == "sched_graph_compute").sum() == 7 and len(t.splits) == 7
    assert t.copies["kind"].eq("buf_get_tensor").sum() == 7


def test_hooks_of_another_backend_api_are_refused_in_one_line_and_the_program_runs_untraced(wine_env, tmp_path):
    out = tmp_path / "mismatch.ggmltrace"
    r = record_windows("b10531", out, wine_env, hooks=exe("b11434", "ggml-trace-hooks.dll"),
                       scenario=[*SCENARIO, "--cpu-only"])  # a scheduler of the CPU alone: no virtual device
    assert r.returncode == 0, r.stderr[-2000:]
    said = [x for x in r.stderr.splitlines() if x.startswith("ggml-trace:") and "do not match" in x]
    assert len(said) == 1 and "backend API version 2, the hooks were built for 3" in said[0], r.stderr
    assert "Running untraced" in said[0]
    assert result(r.stdout) == reference("b10531", wine_env)  # ran, with the right result
    t = analysis.load(out)
    assert len(t.calls) == 0  # nothing traced


def test_a_windows_program_without_hooks_beside_it_is_told_where_they_go(wine_env, tmp_path):
    lone = tmp_path / "bin"
    lone.mkdir()
    shutil.copy(exe("b10531", "sched-loop.exe"), lone)
    r = ggml_trace("record", "-o", tmp_path / "t.ggmltrace", "--", WINE, lone / "sched-loop.exe", "1",
                   env=wine_env, timeout=120)
    assert r.returncode != 0 and re.search(r"no ggml-trace-hooks\.dll beside .*sched-loop\.exe", r.stderr), r.stderr


def test_build_hooks_puts_windows_hooks_beside_a_windows_build_and_record_finds_them(wine_env, tmp_path):
    """A Windows build of b10531's ggml with no hooks (its DLLs and a program): `build-hooks --windows`
    cross-builds them beside it, and `record` then traces the program without being told where they are."""
    mine = tmp_path / "bin"
    mine.mkdir()
    for f in exe("b10531", "sched-loop.exe").parent.iterdir():
        if f.suffix in (".dll", ".exe") and not f.name.startswith("ggml-trace"):
            shutil.copy(f, mine)
    r = ggml_trace("build-hooks", ROOT / "build" / "src" / "llama-b10531" / "llama.cpp", "--windows",
                   "--build-dir", mine, "--name", "wine-test", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (mine / "ggml-trace-hooks.dll").exists() and (mine / "ggml-trace-vdev.dll").exists()
    out = tmp_path / "t.ggmltrace"
    r = ggml_trace("record", "-o", out, "--no-nvml", "--", WINE, mine / "sched-loop.exe", "3", env=wine_env,
                   timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    t = analysis.load(out)
    assert t.meta["hooks_build"] == "wine-test" and (t.calls["kind"] == "sched_graph_compute").sum() == 3


# -- a llama.cpp program as the Windows releases lay it out ---------------------------------------

RELEASE = WIN / "release-b10524" / "bin"  # ggml with its backends as DLLs, libllama, llama-completion.exe
QWEN = ROOT / "build" / "models" / "tiny-qwen35.gguf"
COMPLETION = ["-m", QWEN, "-n", "8", "-p", "the of and", "--temp", "0", "--seed", "1", "-no-cnv", "-ngl", "99", "-nkvo"]
DIAGNOSE = ["--runs", "3", "--force-runs", "2", "--replay-runs", "0", "--max-races", "1", *VDEV_23321,
            "--reference-dev", "none"]


def diagnose_windows(out, program, env):
    r = ggml_trace("diagnose", "-o", out, *DIAGNOSE, "--", WINE, program, *COMPLETION, env=env, timeout=600)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r, json.loads((out / "diagnosis.json").read_text())


def test_a_windows_llama_completion_is_diagnosed_with_the_23321_race(wine_env, tmp_path):
    """No -dev in the command: the program loads its backends (ggml_backend_load_all, GGML_BACKEND_DL),
    and the hooks with them; its CPU backend is a DLL loaded before the hooks are."""
    if not (RELEASE / "llama-completion.exe").exists() or not QWEN.exists():
        pytest.skip("needs `make setup` (build/win/release-b10524, the tiny Qwen model)")
    out = tmp_path / "diag"
    r, d = diagnose_windows(out, RELEASE / "llama-completion.exe", wine_env)
    assert r.returncode == 1, r.stderr[-3000:]
    m = d["races"][0]
    a, b = m["race"]["a"], m["race"]["b"]
    assert (a["backend"], a["tensor"], b["backend"]) == ("VDEV0", "model.input_embed", "CPU")  # as on Linux
    assert m["force"]["verdict"] == "diverged"  # forced: the program re-run under Wine from its own trace
    assert d["explained_by"] == m["number"] and len(d["differing_runs"]) >= 1
    md = (out / "ISSUE.md").read_text()
    assert re.search(r"\nwine64 \S*llama-completion\.exe -m \S*tiny-qwen35\.gguf", md), md  # what was run
    assert "GGML_BACKEND_PATH" not in md and str(tmp_path) not in md and "Z:\\" not in md  # how it was traced


def test_the_same_program_on_the_fixed_ggml_base_is_clean(wine_env, tmp_path):
    """b10524's llama-completion on b10531's ggml-base.dll (the #23321 fix is there; the headers are
    the same), as `--build b10531-...` patched builds run on Linux."""
    if not (RELEASE / "llama-completion.exe").exists() or not QWEN.exists():
        pytest.skip("needs `make setup` (build/win/release-b10524, the tiny Qwen model)")
    fixed = tmp_path / "bin"
    shutil.copytree(RELEASE, fixed)
    shutil.copy(exe("b10531", "ggml-base.dll"), fixed / "ggml-base.dll")
    r, d = diagnose_windows(tmp_path / "diag", fixed / "llama-completion.exe", wine_env)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert d["races"] == [] and d["differing_runs"] == [] and d["outputs"] == 1


# -- a program that never calls ggml_backend_load_all(): the launcher -------------------------------

def test_a_program_that_never_loads_backends_is_traced_through_the_launcher(wine_env, tmp_path):
    prog = [WINE, exe("b10531", "sched-loop.exe"), "3", "exit", "--no-load-all"]
    plain = ggml_trace("record", "-o", tmp_path / "plain.ggmltrace", "--no-nvml", "--build", "b10531", "--", *prog,
                       env=wine_env, timeout=300)
    assert plain.returncode == 0 and "wrote no trace" in plain.stderr and "--launch" in plain.stderr, plain.stderr
    out = tmp_path / "launched.ggmltrace"
    r = ggml_trace("record", "-o", out, "--no-nvml", "--build", "b10531", "--launch", "--", *prog, env=wine_env,
                   timeout=300)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "computed 3", r.stderr[-2000:]
    t = analysis.load(out)
    assert t.warnings == [] and (t.calls["kind"] == "sched_graph_compute").sum() == 3
    # the program's own command line, and how it was launched (force re-launches it so)
    assert t.meta["cmdline"].split("\0")[0].endswith("sched-loop.exe")
    assert "GGML_TRACE_LAUNCH=1" in t.meta["env"] and "GGML_BACKEND_PATH" not in t.meta["env"]
    # launched, no ggml loader checks the hooks' API version: their own layout check refuses b11434's
    other = ggml_trace("record", "-o", tmp_path / "other.ggmltrace", "--no-nvml", "--launch", "--hooks",
                       exe("b11434", "ggml-trace-hooks.dll"), "--", *prog, env=wine_env, timeout=300)
    assert other.returncode == 0 and other.stdout.splitlines()[-1] == "computed 3", other.stderr[-2000:]
    assert "backend API version 2, the hooks were built for 3" in other.stderr and "Running untraced" in other.stderr


def test_a_launched_runs_race_is_forced_by_launching_it_again(wine_env, tmp_path):
    out = tmp_path / "w.ggmltrace"
    r = ggml_trace("record", "-o", out, "--no-nvml", "--build", "b10524", "--launch", *VDEV_23321, "--", WINE,
                   exe("b10524", "ggml-trace-scenarios.exe"), *SCENARIO, env=wine_env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(analysis.races(analysis.load(out)).to_json()["races"]) == 1
    f = ggml_trace("force", out, "--runs", "1", "--baseline-runs", "0", "--out", tmp_path / "force", env=wine_env,
                   timeout=300)
    assert "Traceback" not in f.stderr, f.stderr[-3000:]
    runs = sorted((tmp_path / "force").glob("forced-*.ggmltrace"))
    assert runs, f.stdout + f.stderr[-3000:]
    assert "GGML_TRACE_LAUNCH=1" in analysis.load(runs[0]).meta["env"]  # launched again, not through ggml's loader
    assert "manifested" in f.stdout, f.stdout
