"""`ggml-trace replay` on Mesa's lavapipe (the pinned builds' Vulkan trees), and the standalone
reproduction compiled against a Vulkan build as a maintainer would: RED on the build that raced,
GREEN on the build with the fix (docs/reduce.md)."""
import os
import subprocess
from pathlib import Path

import pytest

from support import ROOT, replay_json


def compile_repro(directory, build, exe):
    """repro.cpp compiled against a pinned tree's Vulkan build, as a maintainer compiles it against theirs."""
    src = ROOT / "build" / "src" / f"llama-{build}" / "llama.cpp"
    lib = ROOT / "build" / f"llama-{build}-vulkan" / "bin"
    cc = subprocess.run(["c++", "-std=c++17", "-O2", str(directory / "repro.cpp"), "-I", str(src / "ggml" / "include"),
                         "-L", str(lib), "-lggml", "-lggml-base", "-lggml-cpu", f"-Wl,-rpath,{lib}", "-o", str(exe)],
                        capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    assert "libggml-trace" not in subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout


def run_on_lavapipe(exe, runs, libraries=None):
    """The program on lavapipe, without any of this project's libraries; `libraries` first on the library
    path (a patched libggml-base). Returns the run and the number of wrong runs it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GGML_TRACE", "LD_PRELOAD"))}
    env["GGML_VK_VISIBLE_DEVICES"] = "0"
    if libraries:
        env["LD_LIBRARY_PATH"] = str(libraries)
        assert str(libraries) in subprocess.run(["ldd", str(exe)], capture_output=True, text=True, env=env).stdout
    r = subprocess.run([str(exe), str(runs)], capture_output=True, text=True, env=env, timeout=300)
    return r, int(r.stdout.split()[1])


@pytest.mark.parametrize("backend", ["vulkan"])  # virtual devices: tests/runs/test_reduce.py
def test_replay_is_red_on_the_racing_build_and_green_with_the_fix(vulkan_23321, backend):
    """On virtual devices and on lavapipe (the builds' Vulkan trees): at least 18 of 20 runs wrong on
    b10524, none on b10531; wrong runs show the same race in their traces."""
    out, _ = vulkan_23321
    red = replay_json(out, "b10524", 20, "--backend", backend)
    assert red["verdict"] == "RED" and red["red_runs"] >= 18, red
    assert red["race_runs"] == 20 and red["manifested_runs"] >= (18 if backend == "vdev" else 1), red
    green = replay_json(out, "b10531", 20, "--backend", backend)
    assert green["verdict"] == "GREEN" and green["red_runs"] == 0 and green["race_runs"] == 0, green
    assert red["splits"] == green["splits"] <= 4


@pytest.mark.parametrize("build, red", [("b10524", True), ("b10531", False)])
def test_the_standalone_program_is_red_before_the_fix_on_a_real_device(vulkan_23321, tmp_path, build, red):
    """repro.cpp, compiled against a pinned tree's Vulkan build as a maintainer would compile it
    against theirs, run on lavapipe without any of this project's libraries."""
    out, doc = vulkan_23321
    assert doc["standalone"] and Path(doc["standalone"]).name == "repro.cpp"
    exe = tmp_path / "repro"
    compile_repro(out, build, exe)
    r, wrong = run_on_lavapipe(exe, 20)
    assert r.returncode == (1 if red else 0), r.stdout + r.stderr
    assert (wrong >= 18) if red else (wrong == 0), r.stdout


def test_the_pipeline_replay_on_lavapipe_is_red_and_green_with_the_fix(pipeline_race):
    """The next-graph-write spec on lavapipe (b10531's Vulkan tree, traced with markers): its device work
    makes the next graph's CPU split overwrite e before Vulkan0 copies it; the fix orders that write
    after the copy."""
    out, _ = pipeline_race
    red = replay_json(out, "b10531", 10, "--backend", "vulkan")
    assert red["red_runs"] >= 9 and red["manifested_runs"] >= 1, red
    green = replay_json(out, "b10531-vulkan-ppfix", 10, "--backend", "vulkan")
    assert green["red_runs"] == 0 and green["race_runs"] == 0, green


@pytest.mark.parametrize("fixed", [False, True])
def test_the_pipeline_program_is_red_on_lavapipe_and_green_with_the_fix(pipeline_race, tmp_path, fixed):
    """The next-graph-write repro.cpp compiled against b10531's Vulkan tree and run on lavapipe: RED (20 of
    20 runs wrong in each of 28 sets measured, docs/reduce.md); with the fix's libggml-base first on the
    library path (build/llama-b10531-vulkan-ppfix), GREEN."""
    out, _ = pipeline_race
    exe = tmp_path / "repro"
    compile_repro(out, "b10531", exe)
    fix = ROOT / "build" / "llama-b10531-vulkan-ppfix" / "bin"
    r, wrong = run_on_lavapipe(exe, 20, fix if fixed else None)
    assert "device work:" in r.stderr, r.stderr  # sized on the device at start
    assert r.returncode == (0 if fixed else 1), r.stdout + r.stderr
    assert (wrong == 0) if fixed else (wrong >= 18), r.stdout
