"""`ggml-trace replay` on a reproduction folder made hostile: a real reduction's folder whose
spec.txt or reduce.json asks for what no machine should run. The command refuses in one line
(exit 2) at once, and starts nothing: its work folder (under TMPDIR) is never made."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"


def ggml_trace(*args, **kw):
    """The installed command, as a user runs it."""
    exe = Path(sys.executable).parent / "ggml-trace"
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, errors="replace", **kw)


@pytest.fixture(scope="module")
def reduction(tmp_path_factory):
    """#23321 (b10524, NVIDIA's Vulkan driver on an H200) reduced, as tests/runs/test_reduce.py does."""
    out = tmp_path_factory.mktemp("reduce") / "repro"
    r = ggml_trace("reduce", DATA / "vulkan-nvidia-b10524-h200.ggmltrace", "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    return out


def hostile(reduction, tmp_path, spec=None, about=None):
    d = tmp_path / "repro"
    shutil.copytree(reduction, d)
    if spec is not None:
        (d / "spec.txt").write_text(spec((d / "spec.txt").read_text()))
    if about is not None:
        doc = json.loads((d / "reduce.json").read_text())
        about(doc)
        (d / "reduce.json").write_text(json.dumps(doc))
    return d


def elements(n):
    return lambda text: "\n".join(f"elements {n}" if line.startswith("elements ") else line
                                  for line in text.splitlines()) + "\n"


def set_latency(doc):
    doc["latency_us"] = [1e12]


CASES = {
    "the reported spec": (dict(spec=elements(99999999999999)), "elements 99999999999999 is out of range"),
    "negative": (dict(spec=elements(-1)), "elements -1 is not a count"),
    "beyond memory": (dict(spec=lambda text: elements(1 << 30)(text).replace("devices 1", "devices 8")
                           + "pipelined 1\n" + "op more dev3 scale y\n" * 100),
                      "of memory"),
    "absurdly many lines": (dict(spec=lambda text: text + "# padding\n" * 5000), "more than 1000"),
    "latency": (dict(about=set_latency), "latency 1e+12 us is out of range"),
}


@pytest.mark.parametrize("case", CASES)
def test_replay_refuses_a_hostile_folder_at_once(reduction, tmp_path, case):
    edits, says = CASES[case]
    d = hostile(reduction, tmp_path, **edits)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = ggml_trace("replay", d, "--build", "b10524", "--runs", 1, env=dict(os.environ, TMPDIR=str(tmp)), timeout=60)
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ggml-trace replay: ") and says in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert list(tmp.iterdir()) == []  # replay's work folder was never made: no program started


def test_the_folder_as_written_still_replays(reduction, tmp_path):
    """The check lets the reduction's own folder through (one run, on the build it came from)."""
    r = ggml_trace("replay", reduction, "--build", "b10524", "--runs", 1, timeout=300)
    assert r.returncode in (0, 1), r.stderr
