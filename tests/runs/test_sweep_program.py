"""`ggml-trace sweep --program`: llama.cpp's llama-completion over a small matrix, on the builds
before and after the fix of #23321 with one slow virtual device (docs/sweep.md, "Real
configurations"): the race found, forced and named where it is and nowhere else, an environment
variable of the matrix reaching the program, a configuration the program refuses said in its own
words while the others run."""
import json
import shlex

import pytest

from support import ggml_trace
from support.diagnose_checks import BUILD, QWEN, QWEN_ARGS, needs

BUILDS = ["b10524", "b10531"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    needs(QWEN, *(BUILD / f"llama-{b}" / "bin" / "llama-completion" for b in BUILDS))
    out = tmp_path_factory.mktemp("program-sweep")
    program = shlex.join(["{bin}/llama-completion", "-m", str(QWEN), *QWEN_ARGS])
    r = ggml_trace("sweep", "-o", out, "--program", program, *[a for b in BUILDS for a in ("--build", b)],
                   "--virtual-devices", "1", "--vdev-latency-us", "5000", "--reference-dev", "none",
                   "--axis", "graph reuse: LLAMA_GRAPH_REUSE_DISABLE=1", "--axis", "refused: --no-such-option",
                   "--runs", "2", "--force-runs", "1", timeout=1200)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r, out, json.loads((out / "sweep.json").read_text())


def cell(d, config, build):
    (c,) = [c for c in d["cells"] if c["pattern"] == config and c["build"] == build]
    return c


def test_a_line_per_cell_and_exit_2_for_the_refused_configuration(swept):
    r, _, d = swept
    assert r.returncode == 2, r.stderr[-3000:]
    assert len([x for x in r.stderr.splitlines() if x.startswith("[")]) == len(d["cells"]) == 6
    assert [c["pattern"] for c in d["cells"]][::2] == ["as given", "LLAMA_GRAPH_REUSE_DISABLE=1", "--no-such-option"]
    for b in BUILDS:
        refused = cell(d, "--no-such-option", b)
        assert refused["verdict"] == "ERROR" and "invalid argument: --no-such-option" in refused["error"]


@pytest.mark.parametrize("config", ["as given", "LLAMA_GRAPH_REUSE_DISABLE=1"])
def test_the_23321_race_is_red_forced_and_named_before_the_fix_and_green_after(swept, config):
    _, out, d = swept
    red = cell(d, config, "b10524")
    assert red["verdict"] == "RED" and red["wrong_runs"] >= 1 and red["devices"] == ["VDEV0", "CPU"]
    race = red["races"][0]
    assert race["tensors"][0] == "model.input_embed" and race["backends"] == ["VDEV0", "CPU"]
    assert race["forced"] == "diverged" and "VDEV0" in race["missing"]
    assert (out / red["issue"]).exists() and "model.input_embed" in (out / red["issue"]).read_text()
    green = cell(d, config, "b10531")
    assert green["verdict"] == "GREEN" and green["races"] == [] and green["runs"] == 2


def test_the_matrix_variable_reaches_the_program_and_its_reference(swept):
    _, _, d = swept
    c = cell(d, "LLAMA_GRAPH_REUSE_DISABLE=1", "b10531")
    assert c["command"][:2] == ["env", "LLAMA_GRAPH_REUSE_DISABLE=1"] and c["reference"][:2] == c["command"][:2]
    assert c["command"][2] == str(BUILD / "llama-b10531" / "bin" / "llama-completion")  # {bin}: the build's
    assert c["reference"][-2:] == ["-dev", "none"]


def test_the_page_is_a_table_of_configurations(swept):
    _, out, _ = swept
    md = (out / "sweep.md").read_text()
    assert "| configuration | llama-completion<br>b10524 | llama-completion<br>b10531 |" in md
    assert "| `as given` | 🔴 RED | 🟢 |" in md and "| `--no-such-option` | ⚠️ ERROR | ⚠️ ERROR |" in md


def test_cells_whose_reference_failed_compare_their_runs_and_say_so(tmp_path):
    """A reference the program refuses (an option of ours it does not know): each cell's runs are
    compared with each other, and the page marks the cell and says why."""
    needs(QWEN, BUILD / "llama-b10531" / "bin" / "llama-completion")
    program = shlex.join(["{bin}/llama-completion", "-m", str(QWEN), *QWEN_ARGS])
    r = ggml_trace("sweep", "-o", tmp_path, "--program", program, "--build", "b10531", "--virtual-devices", "1",
                   "--reference", "-dev none --no-such-option", "--axis", "reuse: LLAMA_GRAPH_REUSE_DISABLE=1",
                   "--runs", "2", timeout=600)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    d = json.loads((tmp_path / "sweep.json").read_text())
    assert len(d["cells"]) == 2 and r.returncode == 0, r.stderr[-3000:]  # b10531: the runs agree, no race
    for c in d["cells"]:
        assert c["verdict"] == "GREEN" and c["outputs"] == 1
        assert c["reference_failed"].startswith("exit status 1") and "--no-such-option" in c["reference_failed"]
    md = (tmp_path / "sweep.md").read_text()
    assert "| `as given` | 🟢 † |" in md and "compared only with each other" in md


def test_a_tensor_split_runs_on_virtual_devices_with_what_the_program_needs(tmp_path):
    """The default matrix's -sm tensor on b11434 (two virtual devices, tiny Llama): llama.cpp's --fit
    refuses a tensor split, so the cell runs it with -fit off; it runs (the meta backend's race is
    b11434's, docs/tensor-parallel.md), an ERROR it is not."""
    llama = BUILD / "models" / "tiny-llama.gguf"
    needs(llama, BUILD / "llama-b11434" / "bin" / "llama-completion")
    program = shlex.join(["{bin}/llama-completion", "-m", str(llama), "-p", "the of and to", "-n", "8", "--temp", "0",
                          "--seed", "1", "-no-cnv", "-ngl", "99", "-dev", "VDEV0,VDEV1"])
    r = ggml_trace("sweep", "-o", tmp_path, "--program", program, "--build", "b11434", "--virtual-devices", "2",
                   "--axis", "split: -sm tensor", "--runs", "2", "--force-runs", "1", timeout=900)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    d = json.loads((tmp_path / "sweep.json").read_text())
    tensor = cell(d, "-sm tensor", "b11434")
    assert tensor["command"][-4:] == ["-sm", "tensor", "-fit", "off"], tensor["command"]
    assert tensor["verdict"] != "ERROR", tensor["error"]
    assert tensor["runs"] == 2, tensor
