"""`ggml-trace sweep` on virtual devices over the pinned builds and the pipeline fix: the known races
found where they are and nowhere else, the page and its JSON (docs/sweep.md). Lavapipe:
tests/external/test_sweep_vulkan.py."""
import json

import pytest

from ggml_trace import analysis
from support import ggml_trace

BUILDS = ["b10524", "b10531", "b11434", "b11434-ppfix", "b11434-slotfix"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    r = ggml_trace("sweep", "--backend", "vdev", "--quick", *[a for b in BUILDS for a in ("--build", b)], "-o", out,
                   timeout=1800)
    return r, out, json.loads((out / "sweep.json").read_text())


def cells(d, pattern, build, **axes):
    return [c for c in d["cells"] if c["pattern"] == pattern and c["build"] == build
            and all(c[k] == v for k, v in axes.items())]


def test_the_sweep_exits_1_with_a_line_per_cell(swept):
    r, out, d = swept
    assert r.returncode == 1, r.stderr[-3000:]
    progress = [x for x in r.stderr.splitlines() if x.startswith("[")]
    assert len(progress) == len(d["cells"]) and all(c["verdict"] != "ERROR" for c in d["cells"])
    assert {c["build"] for c in d["cells"]} == set(BUILDS)
    assert len({c["pattern"] for c in d["cells"]}) >= 8
    for c in d["cells"]:
        assert set(c) >= {"pattern", "devices", "build", "buffer", "parallel", "runs", "wrong_runs", "verdict", "races"}
        assert c["runs"] >= 1 and c["verdict"] == ("RED" if c["wrong_runs"] else "RACE" if c["races"] else "GREEN")


def test_the_23321_pattern_is_red_before_the_fix_with_the_ordering_named_and_green_after(swept):
    _, _, d = swept
    (red,) = cells(d, "inputless-reuse", "b10524", buffer="pinned", parallel=0)
    assert red["verdict"] == "RED" and red["wrong_runs"] == red["runs"]
    (race,) = red["races"]
    assert race["tensors"] == ["h", "z"] and race["verdict"] == "manifested"
    assert "synchronize on VDEV0" in race["missing"] and "CPU split 2" in race["missing"]
    for buffer in ("pinned", "pageable"):
        (green,) = cells(d, "inputless-reuse", "b10531", buffer=buffer, parallel=0)
        assert green["verdict"] == "GREEN", green
    # pageable host memory is copied synchronously (as Vulkan does): no race even before the fix
    (pageable,) = cells(d, "inputless-reuse", "b10524", buffer="pageable", parallel=0)
    assert pageable["verdict"] == "GREEN"


def _cpu_input_races(cell):
    """The pipeline-parallel race on the CPU's input e (docs/pipeline-parallel.md)."""
    return [r for r in cell["races"] if r["tensors"] == ["e", "e"] and r["backends"][1] == "CPU"]


def test_the_pipeline_input_race_is_red_on_b11434_and_gone_with_the_fix(swept):
    _, _, d = swept
    (before,) = cells(d, "pipeline-input-reuse", "b11434", buffer="pinned", parallel=1)
    assert before["verdict"] == "RED" and _cpu_input_races(before), before
    (after,) = cells(d, "pipeline-input-reuse", "b11434-ppfix", buffer="pinned", parallel=1)
    assert _cpu_input_races(after) == [], after
    # what is left there is the race on the destination's copy slot (docs/census.md): the peer copy runs
    # on the source's queue, which nothing makes wait for the slot's last reader ...
    assert after["races"] and all(r["tensors"][0].startswith("VDEV1#l0#") for r in after["races"]), after["races"]
    assert "an event_wait on VDEV0 before the second" in after["races"][0]["missing"]
    # ... which our second fix orders (patches/copy-slot-wait.patch, on top of the first)
    for cell in cells(d, "pipeline-input-reuse", "b11434-slotfix"):
        assert cell["verdict"] == "GREEN", cell


def test_the_page_is_a_table_github_renders(swept):
    _, out, d = swept
    md = (out / "sweep.md").read_text()
    assert len(md) < 65_536
    lines = md.splitlines()
    header = next(x for x in lines if x.startswith("| pattern |"))
    assert all(b in header for b in BUILDS)
    rows = [x for x in lines if x.startswith("| `")]
    assert len(rows) == len({c["pattern"] for c in d["cells"]})
    assert all(x.count("|") == header.count("|") for x in rows)
    assert "## Findings" in md and "inputless-reuse" in md


def test_unknown_builds_and_patterns_get_a_line_each_and_the_rest_runs(tmp_path):
    r = ggml_trace("sweep", "--quick", "--build", "b10531", "--build", "b99999", "--pattern", "inputless-reuse",
                   "--pattern", "no-such-pattern", "-o", tmp_path, timeout=600)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "unknown pattern 'no-such-pattern'" in r.stderr and "build 'b99999'" in r.stderr
    d = json.loads((tmp_path / "sweep.json").read_text())
    assert {c["pattern"] for c in d["cells"]} == {"inputless-reuse"} and len(d["problems"]) == 2
    r = ggml_trace("sweep", "--build", "b99999", "-o", tmp_path / "none", timeout=600)
    assert r.returncode == 2 and "nothing to run" in r.stderr


def test_a_slowed_device_never_stalls_the_writer_of_a_copy_into_it(tmp_path):
    """The copy-slot pattern (docs/census.md): VDEV0 copies into VDEV1's input slot, a copy between two
    asynchronous devices, which runs on VDEV0's queue. Every run that slows a device (its queue, or its
    splits alone) delays only that device's own queue, never the queue of a device that writes a copy into
    it, as each run's trace shows (the delays and the queue each acted on); the copies into VDEV1 slowed by
    name act on VDEV0's queue, the writer's, and the trace says that too."""
    r = ggml_trace("sweep", "--quick", "--build", "b10531", "--pattern", "pipeline-input-reuse", "--slow", "queue",
                   "--slow", "compute", "--slow", "copies-into", "-o", tmp_path, timeout=900)
    assert r.returncode in (0, 1), r.stderr[-3000:]
    d = json.loads((tmp_path / "sweep.json").read_text())
    assert d["cells"] and all(c["verdict"] != "ERROR" for c in d["cells"])
    peer_copies_checked = 0
    for cell in d["cells"]:
        assert [p["slowing"] for p in cell["profiles"]] == ["queue"] * 2 + ["compute"] * 2 + ["copies-into"] * 2
        for profile, path in zip(cell["profiles"], cell["traces"]):
            (dev,) = profile["slow"]
            t = analysis.load(path)
            delays = t.delays
            assert len(delays) > 0, (cell["pattern"], profile["name"])
            acted_on = set(delays["backend"].astype(str))
            c = t.copies
            into = c[(c["kind"] == "cpy_tensor_async") & (c["dst_backend"] == dev)]
            writers = set(into["src_backend"].dropna().astype(str)) - {dev, "CPU"}
            if profile["slowing"] in ("queue", "compute"):
                assert acted_on == {dev}, (profile["name"], acted_on)
                assert not writers & acted_on
                if profile["slowing"] == "compute":
                    assert set(delays["target_kind"].astype(str)) == {"graph_compute"}
                peer_copies_checked += bool(writers)
            elif writers:  # the copies into dev, named by their destination: delayed on their writer's queue
                peer = delays[delays["target_backend"] == dev]
                assert set(peer["backend"].astype(str)) == writers, profile["name"]
    assert peer_copies_checked  # the slowed reader did receive copies from another device
