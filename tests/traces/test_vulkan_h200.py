"""Traces from NVIDIA's Vulkan driver on an H200 (bench/gpu/vulkan_h200.sh, tiny qwen35, -ngl 99 -nkvo,
--device-timing): b10524 corrupt in 20 of 20 runs, b10531 clean in 20 of 20
(bench/gpu/results-h200-2026-11-30/). One run of each is kept here."""
from ggml_trace import analysis
from support import DATA



def _races(name):
    return analysis.races(analysis.load(str(DATA / name))).to_json()["races"]


def test_h200_vulkan_before_the_fix_the_input_embed_copy_overlapped_the_write():
    """The #23321 pair on NVIDIA's Vulkan driver: marker bounds put Vulkan0's copy of
    model.input_embed inside the CPU split that overwrote it, but that split has 8 nodes, so the
    times do not prove which of the two accesses came first: overlapped, never manifested."""
    races = [r for r in _races("vulkan-nvidia-b10524-h200.ggmltrace")
             if "model.input_embed" in (r["a"]["tensor"], r["b"]["tensor"])]
    assert races, "the #23321 pair is missing"
    (r,) = races
    assert (r["verdict"], r["basis"], r["manifested"]) == ("overlapped", "bounds", False)
    assert (r["a"]["backend"], r["b"]["backend"], r["b"]["tensor"]) == ("Vulkan0", "CPU", "conv_states-0")
    assert r["occurrences"]["overlapped"] > 0 and sum(r["occurrences"].values()) == r["count"]
    assert "a split of 8 nodes" in r["b"]["timing"] and r["a"]["timing"].startswith("marker bounds")


def test_h200_vulkan_after_the_fix_no_race():
    assert _races("vulkan-nvidia-b10531-h200.ggmltrace") == []


def test_h200_vulkan_trace_names_the_nvidia_device():
    t = analysis.load(str(DATA / "vulkan-nvidia-b10524-h200.ggmltrace"))
    names = " ".join(str(v) for v in t.backends.to_numpy().ravel())
    assert "H200" in names
