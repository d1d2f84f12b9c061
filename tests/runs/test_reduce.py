"""`ggml-trace reduce` and `replay` (docs/reduce.md): races found in traces of real GPUs become small
reproductions that run on virtual devices and on lavapipe, RED on the build that raced and GREEN on
the build with the fix; what cannot be reduced is refused in one line. Lavapipe's runs:
tests/external/test_reduce_vulkan.py; refusals that run nothing: tests/traces/test_reduce_refusals.py."""
import pytest

from support import DATA, ggml_trace, reduce_json, replay_json, warmup_clear
from ggml_trace.analysis import load, races
from ggml_trace.tracer.repro_cpp import cpp


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
    assert doc["queue"] is None and "work" not in (out / "spec.txt").read_text()  # within one graph: no queue kept


@pytest.mark.parametrize("backend", ["vdev"])  # lavapipe: tests/external/test_reduce_vulkan.py
def test_replay_is_red_on_the_racing_build_and_green_with_the_fix(vulkan_23321, backend):
    """On virtual devices and on lavapipe (the builds' Vulkan trees): at least 18 of 20 runs wrong on
    b10524, none on b10531; wrong runs show the same race in their traces."""
    out, _ = vulkan_23321
    red = replay_json(out, "b10524", 20, "--backend", backend)
    assert red["verdict"] == "RED" and red["red_runs"] >= 18, red
    # proven (inverted) where the copy began after the CPU's split ended; the others overlapped it, which
    # proves no order (docs/races.md): 20 of 20 idle here, 14 of 20 beside the suite's other workers
    assert red["race_runs"] == 20 and red["manifested_runs"] >= 1, red
    green = replay_json(out, "b10531", 20, "--backend", backend)
    assert green["verdict"] == "GREEN" and green["red_runs"] == 0 and green["race_runs"] == 0, green
    assert red["splits"] == green["splits"] <= 4


# a 2 ms latency sets the race up: a host preempted longer beside the suite's other workers misses it
@pytest.mark.serial
def test_the_two_gpu_tensor_parallel_race_replays_on_two_virtual_devices(tmp_path):
    """The meta backend's allreduce race of a committed two-H200 `-sm tensor` trace: RED with
    b10531, GREEN with our fix (b10531-tpfix); the reduction drops layers while the race stays."""
    # the scratch race by its number: the findings of llama.cpp's clear of the KV cache after its warm-up,
    # which CUDA's clear leaves unordered (docs/races.md, rule 6) and reduce refuses, come before it (12)
    found = races(load(DATA / "cuda-b10531-tp-2gpu-none.ggmltrace")).findings
    scratch = (~warmup_clear(found)).to_numpy().nonzero()[0]
    assert len(scratch) == 1 and found["a_tensor"].iloc[scratch[0]] == "allreduce.tmp[0]@CUDA1"
    doc = reduce_json("cuda-b10531-tp-2gpu-none.ggmltrace", tmp_path / "tp", "--race", scratch[0] + 1)
    assert doc["shape"]["name"] == "allreduce-scratch" and doc["devices"] == 2
    assert doc["size_unit"] == "layers" and doc["size"] < doc["steps"][0]["layers"]
    assert doc["latency_us"] == [0.0, 2000.0]  # the reader, CUDA1, is the late one
    red = replay_json(tmp_path / "tp", "b10531", 5)
    assert red["red_runs"] == 5 and red["manifested_runs"] == 5
    green = replay_json(tmp_path / "tp", "b10531-tpfix", 5)
    assert green["red_runs"] == 0 and green["race_runs"] == 0


def test_the_pipeline_race_replays_red_and_green_with_its_fix(pipeline_race):
    """embd overwritten by the next ubatch (b11434, pipeline parallelism, NVIDIA Vulkan on an H200)."""
    out, doc = pipeline_race
    assert doc["shape"]["name"] == "next-graph-write" and doc["splits"] <= 2
    assert replay_json(out, "b11434", 5)["red_runs"] == 5
    green = replay_json(out, "b11434-ppfix", 5)
    assert green["red_runs"] == 0 and green["race_runs"] == 0


def test_the_pipeline_reduction_keeps_the_work_queued_ahead_of_the_copy(pipeline_race):
    """In the trace, Vulkan0's copy of graph 2's embd was enqueued and then waited 15.6 ms on the
    device's queue behind graph 1's layers (255 nodes), while graph 3's CPU split wrote embd 11.0 ms
    before the device read it: the reduced graph keeps that much resident device work in every graph,
    in the spec and in repro.cpp alike, and reduce.json says so."""
    out, doc = pipeline_race
    q = doc["queue"]
    assert q["measured"] and q["wait_us"] == 15559.6 and q["busy_us"] == 15559.6
    assert q["device_start_us"] - q["enqueued_us"] == pytest.approx(q["wait_us"], abs=0.2)
    assert q["write_before_read_us"] == 11034.9
    layers = [(a["graph"], a["split"], a["nodes"]) for a in q["ahead"] if a["kind"] == "graph_compute"]
    assert layers == [(1, 1, 255)]
    assert q["target_us"] == 15600 and "products of weights uploaded once" in q["kept"]
    assert q["sized"]["backend"] == "vdev" and q["sized"]["work"][0].startswith("work w on VDEV0: ")
    assert "work w dev0 15600" in (out / "spec.txt").read_text()
    assert "static const double WORK_MS = 15.6;" in (out / "repro.cpp").read_text()
    assert "waited 15.6 ms on its queue behind graph 1's split 1 (255 nodes)" in (out / "README.md").read_text()
    assert doc["nodes"] >= 3  # e, out, and at least one product of the work


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


def test_hostile_names_stay_inside_the_programs_comments(vulkan_23321):
    out, _ = vulkan_23321
    spec = (out / "spec.txt").read_text()
    src = cpp(spec, "trace\nint injected = 1;", "tensor\rint also = 2;\u2028x")
    assert not any(line.lstrip().startswith("int injected") or line.lstrip().startswith("int also")
                   for line in src.splitlines())
    assert not any(line.startswith(("int ", "static")) and "injected" in line for line in src.split("\n"))
