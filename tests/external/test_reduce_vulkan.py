"""`ggml-trace replay` on Mesa's lavapipe (the pinned builds' Vulkan trees), and the standalone
reproduction compiled against a Vulkan build as a maintainer would: RED on the build that raced,
GREEN on the build with the fix (docs/reduce.md)."""
import os
import subprocess
from pathlib import Path

import pytest

from support import ROOT, replay_json


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
    src = ROOT / "build" / "src" / f"llama-{build}" / "llama.cpp"
    lib = ROOT / "build" / f"llama-{build}-vulkan" / "bin"
    exe = tmp_path / "repro"
    cc = subprocess.run(["c++", "-std=c++17", "-O2", str(out / "repro.cpp"), "-I", str(src / "ggml" / "include"),
                         "-L", str(lib), "-lggml", "-lggml-base", "-lggml-cpu", f"-Wl,-rpath,{lib}", "-o", str(exe)],
                        capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GGML_TRACE", "LD_PRELOAD"))}
    r = subprocess.run([str(exe), "20"], capture_output=True, text=True, env=dict(env, GGML_VK_VISIBLE_DEVICES="0"),
                       timeout=300)
    assert r.returncode == (1 if red else 0), r.stdout + r.stderr
    wrong = int(r.stdout.split()[1])
    assert (wrong >= 18) if red else (wrong == 0), r.stdout
    assert "libggml-trace" not in subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
