"""`ggml-trace reduce` and `replay` (docs/reduce.md): races found in traces of real GPUs become small
reproductions that run on virtual devices and on lavapipe, RED on the build that raced and GREEN on
the build with the fix; what cannot be reduced is refused in one line."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, ggml_trace
from ggml_trace.tracer.repro_cpp import cpp

DATA = ROOT / "tests" / "data"


def reduce_json(trace, out, *extra):
    r = ggml_trace("reduce", DATA / trace if not Path(trace).is_absolute() else trace, "-o", out, "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def replay_json(directory, build, runs, *extra):
    r = ggml_trace("replay", directory, "--build", build, "--runs", runs, "--json", *extra)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert r.returncode == (1 if doc["verdict"] == "RED" else 0)
    assert doc["runs"] == runs and len(doc["traces"]) == runs
    return doc


@pytest.fixture(scope="module")
def vulkan_23321(tmp_path_factory):
    """#23321 as NVIDIA's Vulkan driver on an H200 showed it (b10524, a qwen35 model), reduced."""
    out = tmp_path_factory.mktemp("reduce") / "repro"
    return out, reduce_json("vulkan-nvidia-b10524-h200.ggmltrace", out)


def test_the_h200_vulkan_race_reduces_to_four_splits_or_fewer(vulkan_23321):
    out, doc = vulkan_23321
    assert doc["shape"]["name"] == "inputless-reuse" and doc["shape"]["race_class"] == "read-after-reuse"
    assert 0 < doc["splits"] <= 4 and 0 < doc["nodes"] <= 16
    # far smaller than the graph the race was found in, and confirmed by tracing the reduced run
    assert doc["original"]["splits"] > 5 * doc["splits"] and doc["original"]["nodes"] > 10 * doc["nodes"]
    assert doc["steps"] and all(s["race"] for s in doc["steps"][:1])
    assert doc["expected"]["verdict"] == "RED" and doc["expected"]["manifested_runs"] >= 1
    # what a maintainer pastes: the command, the expected result, the sizes
    readme = (out / "README.md").read_text()
    assert doc["command"] in readme and "RED" in readme and f"{doc['splits']} splits" in readme
    assert "op z cpu cont w" in (out / "spec.txt").read_text()


@pytest.mark.parametrize("backend", ["vdev", "vulkan"])
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


def test_the_two_gpu_tensor_parallel_race_replays_on_two_virtual_devices(tmp_path):
    """The meta backend's allreduce race of a committed two-H200 `-sm tensor` trace: RED with
    b10531, GREEN with our fix (b10531-tpfix); the reduction drops layers while the race stays."""
    doc = reduce_json("cuda-b10531-tp-2gpu-none.ggmltrace", tmp_path / "tp")
    assert doc["shape"]["name"] == "allreduce-scratch" and doc["devices"] == 2
    assert doc["size_unit"] == "layers" and doc["size"] < doc["steps"][0]["layers"]
    assert doc["latency_us"] == [0.0, 2000.0]  # the reader, CUDA1, is the late one
    red = replay_json(tmp_path / "tp", "b10531", 5)
    assert red["red_runs"] == 5 and red["manifested_runs"] == 5
    green = replay_json(tmp_path / "tp", "b10531-tpfix", 5)
    assert green["red_runs"] == 0 and green["race_runs"] == 0


def test_the_pipeline_race_replays_red_and_green_with_its_fix(tmp_path):
    """embd overwritten by the next ubatch (b11434, pipeline parallelism, NVIDIA Vulkan on an H200)."""
    doc = reduce_json("vulkan-nvidia-b11434-pp-h200.ggmltrace", tmp_path / "pp")
    assert doc["shape"]["name"] == "next-graph-write" and doc["splits"] <= 2
    assert replay_json(tmp_path / "pp", "b11434", 5)["red_runs"] == 5
    green = replay_json(tmp_path / "pp", "b11434-ppfix", 5)
    assert green["red_runs"] == 0 and green["race_runs"] == 0


def test_a_trace_without_a_race_is_refused_in_one_line(tmp_path):
    r = ggml_trace("reduce", DATA / "vulkan-nvidia-b10531-h200.ggmltrace", "-o", tmp_path / "x")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "no race" in r.stderr
    assert not (tmp_path / "x").exists()


def test_a_race_of_another_shape_is_refused_saying_why(tmp_path):
    """random-dag's finding after the #23321 fix: the bytes are written by a synchronous copy, not a
    split; reduce knows no graph for it and says which part differs."""
    r = ggml_trace("scenario", "random-dag", "--build", "b10531", "--runs", 1, "--seed", 39, "--jitter-us", 2000,
                   "--out", tmp_path / "rd")
    assert r.returncode == 0, r.stderr
    races = ggml_trace("races", tmp_path / "rd" / "run-000.ggmltrace")
    assert races.returncode == 1, races.stdout
    r = ggml_trace("reduce", tmp_path / "rd" / "run-000.ggmltrace", "-o", tmp_path / "x")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "cannot be reduced" in r.stderr and "buf_get_tensor" in r.stderr
    r = ggml_trace("reduce", DATA / "vulkan-nvidia-b10524-h200.ggmltrace", "--race", 2, "-o", tmp_path / "y")
    assert r.returncode == 2 and "there is no race 2" in r.stderr


def test_replay_refuses_what_is_not_a_reproduction(tmp_path, vulkan_23321):
    r = ggml_trace("replay", tmp_path, "--build", "b10524")
    assert r.returncode == 2 and "not a reproduction" in r.stderr and r.stderr.strip().count("\n") == 0
    out, _ = vulkan_23321
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "reduce.json").write_text((out / "reduce.json").read_text())
    (bad / "spec.txt").write_text("devices 1\nop y dev0 frobnicate x\noutput y\n")
    r = ggml_trace("replay", bad, "--build", "b10524", "--runs", 1)
    assert r.returncode == 2 and "the spec uses x before defining it" in r.stderr


def test_the_report_offers_the_reduction(tmp_path):
    page = tmp_path / "r.html"
    r = ggml_trace("report", DATA / "vulkan-nvidia-b10524-h200.ggmltrace", "-o", page)
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    assert "ggml-trace reduce vulkan-nvidia-b10524-h200.ggmltrace --race 1 -o race-1-repro" in html
    assert "inputless-reuse" in html


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


def test_hostile_names_stay_inside_the_programs_comments(vulkan_23321):
    out, _ = vulkan_23321
    spec = (out / "spec.txt").read_text()
    src = cpp(spec, "trace\nint injected = 1;", "tensor\rint also = 2;\u2028x")
    assert not any(line.lstrip().startswith("int injected") or line.lstrip().startswith("int also")
                   for line in src.splitlines())
    assert not any(line.startswith(("int ", "static")) and "injected" in line for line in src.split("\n"))
