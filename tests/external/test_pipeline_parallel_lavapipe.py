"""Pipeline parallelism's cross-ubatch race with a real async backend: Mesa's lavapipe (the pinned
builds' Vulkan trees) beside virtual devices, RED on b10531 and GREEN with our fix
(docs/pipeline-parallel.md)."""
import os
import subprocess

from support import apart_from_warmup_clear, ggml_trace, races_of, same_text
from support.pipeline_cases import PROMPT, the_cross_graph_race

from ggml_trace.tracer import programs, scenario


def test_lavapipe_beside_a_virtual_device_is_red_and_the_fix_green(model, tmp_path):
    """b10531's Vulkan build on Mesa's lavapipe, all layers on Vulkan0 and one empty virtual device
    beside it so that llama.cpp pipelines (-dev Vulkan0,VDEV0 -ts 1,0), device timing by markers:
    the output differs from Vulkan0 alone and the race on embd MANIFESTED; with the fix under the
    same programs (b10531-vulkan-ppfix: its libggml-base), the output is Vulkan0's and no race."""
    env = {**os.environ, "GGML_VK_VISIBLE_DEVICES": "0"}
    exe = str(programs.program("b10531-vulkan", "llama-completion"))
    args = ["-m", str(model), "-p", PROMPT, "-n", "32", "-b", "256", "-ub", "32", "--temp", "0", "--seed", "1",
            "-no-cnv", "-ngl", "99"]
    alone = subprocess.run(["stdbuf", "-o0", exe, *args, "-dev", "Vulkan0"], capture_output=True, text=True,
                           errors="replace", timeout=600, env=env)
    assert alone.returncode == 0, alone.stderr[-2000:]
    for build, red in (("b10531-vulkan", True), ("b10531-vulkan-ppfix", False)):
        out = tmp_path / f"{build}.ggmltrace"
        r = ggml_trace("record", "--build", build, "--no-nvml", "--device-timing", "--virtual-devices", 1, "-o", out,
                       "--", "stdbuf", "-o0", exe, *args, "-sm", "layer", "-dev", "Vulkan0,VDEV0", "-ts", "1,0",
                       timeout=600, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        found = the_cross_graph_race(races_of(out))
        if red:
            assert not same_text(r.stdout, alone.stdout)
            assert any(f["a"]["tensor"] == "embd" and f["a"]["backend"] == "Vulkan0" and f["manifested"]
                       for f in found), found
        else:
            assert same_text(r.stdout, alone.stdout)
            # llama.cpp's clear of the KV cache (on Vulkan0) right after its warm-up races too (docs/races.md, rule 6)
            assert apart_from_warmup_clear(races_of(out)) == []


def test_random_dag_on_lavapipe_beside_virtual_devices(tmp_path):
    """The random-dag finding (docs/scenarios.md) with a real async backend among its devices:
    Vulkan0 (lavapipe) and two virtual devices. On b10531 the analysis finds Vulkan0's async copy
    from host memory unordered before a later synchronous copy into those bytes (the missing edge of
    the pipeline race, inside one graph); with the fix under the same programs, no race in any run."""
    found = set()
    r = scenario.run("random-dag", build="b10531", runs=100, jitter_us=2000, backend="vulkan", vdevs_beside=2,
                     out_dir=tmp_path / "before")
    for path in r.traces:
        for f in races_of(path):
            found.add((f["a"]["backend"], f["a"]["kind"], f["b"]["kind"]))
    assert ("Vulkan0", "cpy_tensor_async", "buf_get_tensor") in found, found
    r = scenario.run("random-dag", build="b10531-vulkan-ppfix", runs=100, jitter_us=2000, backend="vulkan",
                     vdevs_beside=2, out_dir=tmp_path / "after")
    assert r.corrupt_runs == 0, r.corrupt
    for path in r.traces:
        assert races_of(path) == [], path
