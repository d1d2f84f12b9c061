"""A program sweep's matrix without running anything (tracer/sweep_program.py): axes as the command
line and a matrix file write them, the configurations of each design, the command line of a cell,
and what the page says of a program's cells. Run on real llama.cpp builds:
tests/runs/test_sweep_program.py."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from ggml_trace.tracer import sweep_program, sweep_report
from ggml_trace.tracer.diagnose import reference_argv
from ggml_trace.tracer.sweep import CellResult, DeviceSet, SweepResult
from ggml_trace.tracer.sweep_program import (AS_GIVEN, CUDA_AXES, Axis, MatrixError, ProgramCell, ProgramSweepOptions,
                                             command, configurations, default_axes, load_matrix, parse_axis)


def test_an_axis_is_alternatives_split_at_bare_pipes():
    assert parse_axis("split: -sm layer | -sm tensor") == Axis("split", ("-sm layer", "-sm tensor"))
    assert parse_axis(" | -nkvo").values == ("", "-nkvo")  # the command as given, then -nkvo
    assert parse_axis("-fa on|-fa off") == Axis("-fa on | -fa off", ("-fa on", "-fa off"))  # named by its values
    # a quoted pipe is part of its word (a regular expression of -ot)
    assert parse_axis('ot: -ot "blk\\.(0|1)\\.=CPU" | -nkvo').values == ("-ot 'blk\\.(0|1)\\.=CPU'", "-nkvo")
    assert parse_axis("copies: GGML_SCHED_MAX_COPIES=1 || -nkvo").values == ("GGML_SCHED_MAX_COPIES=1", "", "-nkvo")


@pytest.mark.parametrize("bad", ["", " | ", "x: |", "-ot 'unclosed"])
def test_an_axis_without_alternatives_or_with_an_open_quote_is_refused(bad):
    with pytest.raises(MatrixError):
        parse_axis(bad)


def test_designs_each_and_full():
    axes = (Axis("sm", ("-sm layer", "-sm tensor")), Axis("kv", ("", "-nkvo")))
    assert configurations(axes, "each") == [(), ("-sm layer",), ("-sm tensor",), ("-nkvo",)]
    assert configurations(axes, "full") == [("-sm layer",), ("-sm layer", "-nkvo"), ("-sm tensor",),
                                            ("-sm tensor", "-nkvo")]


def test_a_cell_puts_its_options_in_place_and_its_variables_before_the_program(no_ldd):
    cell = ProgramCell(("GGML_SCHED_MAX_COPIES=1 -sm tensor", "-ot 'a=CPU'"), 3, "", DeviceSet("p", (), ""))
    opts = ProgramSweepOptions(Path("x"), ("llama-completion", "-m", "m.gguf", "--split-mode", "layer"))
    assert command(cell, opts) == ["env", "GGML_SCHED_MAX_COPIES=1", "llama-completion", "-m", "m.gguf",
                                   "-sm", "tensor", "-ot", "a=CPU"]
    assert cell.pattern == "GGML_SCHED_MAX_COPIES=1 -sm tensor -ot 'a=CPU'"
    assert cell.name.startswith("03-") and "/" not in cell.name.split("/")[0] and cell.name.endswith("/own")
    plain = ProgramCell((), 1, "", DeviceSet("p", (), ""))
    assert command(plain, opts) == list(opts.program) and plain.pattern == AS_GIVEN


def test_a_matrix_file(tmp_path):
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"program": "llama-completion -m m.gguf", "design": "full",
                             "axes": {"split": ["-sm layer", "-sm tensor"], "reuse": ["", "LLAMA_GRAPH_REUSE_DISABLE=1"]}}))
    program, design, axes = load_matrix(f)
    assert (program, design) == ("llama-completion -m m.gguf", "full")
    assert axes == (Axis("split", ("-sm layer", "-sm tensor")), Axis("reuse", ("", "LLAMA_GRAPH_REUSE_DISABLE=1")))
    for bad in ("{", json.dumps({"axes": {}}), json.dumps({"axes": {"a": "-nkvo"}}),
                json.dumps({"axes": {"a": ["-x"]}, "design": "some"}), json.dumps({"axes": {"a": ["'open"]}})):
        f.write_text(bad)
        with pytest.raises(MatrixError, match=str(f)):
            load_matrix(f)


def test_the_page_of_a_program_sweep_names_configurations_and_their_diagnoses(tmp_path):
    opts = ProgramSweepOptions(tmp_path, ("llama-completion", "-m", "m.gguf"), builds=("b10524",))
    ds = DeviceSet("llama-completion", (), "b10524")
    red = CellResult(ProgramCell(("-ot 'a|b=CPU'",), 2, "b10524", ds), runs=2, wrong_runs=2, verdict="RED",  # type: ignore[arg-type]
                     devices=["VDEV0", "CPU"], detail={"outputs": 1, "issue": "cells/02-x/b10524/ISSUE.md"})
    ok = CellResult(ProgramCell((), 1, "b10524", ds), runs=2, verdict="GREEN")  # type: ignore[arg-type]
    md = sweep_report.markdown(SweepResult(opts, [ok, red], [], 3.0))
    assert "| configuration | llama-completion<br>b10524 |" in md
    assert "| `as given` | 🟢 |" in md and "| `-ot 'a\\|b=CPU'` | 🔴 RED |" in md  # a pipe escaped in the table
    assert "(VDEV0, CPU)" in md and "cells/02-x/b10524/ISSUE.md" in md
    assert "every run printed the same output" in md  # no race, one output: not timing
    j = json.loads(json.dumps(SweepResult(opts, [ok, red], [], 3.0).to_json()))
    assert j["cells"][1]["devices"] == ["VDEV0", "CPU"] and j["cells"][1]["issue"].endswith("ISSUE.md")
    assert j["options"]["program"] == ["llama-completion", "-m", "m.gguf"]


def test_a_cell_whose_reference_failed_is_marked_and_says_so(tmp_path):
    opts = ProgramSweepOptions(tmp_path, ("llama-completion", "-m", "m.gguf"), builds=("b10531",))
    ds = DeviceSet("llama-completion", (), "b10531")
    failed = {"reference_failed": "exit status 1: error: invalid argument: --no-such-option", "outputs": 1}
    green = CellResult(ProgramCell((), 1, "b10531", ds), runs=2, verdict="GREEN", detail=failed)  # type: ignore[arg-type]
    red = CellResult(ProgramCell(("-nkvo",), 2, "b10531", ds), runs=2, wrong_runs=1, verdict="RED",  # type: ignore[arg-type]
                     detail=dict(failed, outputs=2))
    ok = CellResult(ProgramCell(("-fa on",), 3, "b10531", ds), runs=2, verdict="GREEN")  # type: ignore[arg-type]
    md = sweep_report.markdown(SweepResult(opts, [green, red, ok], [], 3.0))
    assert "| `as given` | 🟢 † |" in md and "| `-nkvo` | 🔴 RED † |" in md and "| `-fa on` | 🟢 |" in md
    assert md.count("invalid argument: --no-such-option") == 2  # each cell whose reference failed, said once
    assert "compared only with each other" in md and "its reference failed" in md


@pytest.fixture
def no_ldd(monkeypatch):
    """The program's libraries as a dict the test sets (ldd is a program: not started here)."""
    libs: dict = {}
    monkeypatch.setattr(sweep_program, "_loaded", lambda exe: libs)
    monkeypatch.setattr(sweep_program, "ggml_program", lambda cmd: next(w for w in cmd if "llama" in w))
    monkeypatch.setattr(sweep_program, "registered_backends", lambda libggml, folder: ())
    return libs


def _program(folder: Path, carries_refusal: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "llama-completion"
    exe.write_bytes(b"\x7fELF..." + (sweep_program.FIT_REFUSES_TENSOR if carries_refusal else b"") + b"...")
    exe.chmod(0o755)
    return exe


def test_a_tensor_split_gets_fit_off_where_the_programs_fit_refuses_one(tmp_path, no_ldd):
    """llama.cpp's --fit (on by default) refuses -sm tensor (common/fit.cpp of b10524 to b11434): the
    cell runs the split with -fit off, unless the command sets --fit itself; other split modes, and a
    program without that refusal, are left as they are."""
    refuses = str(_program(tmp_path / "a", True))
    plain = str(_program(tmp_path / "b", False))
    tensor = ProgramCell(("-sm tensor",), 2, "", DeviceSet("p", (), ""))
    layer = ProgramCell(("-sm layer",), 3, "", DeviceSet("p", (), ""))
    opts = ProgramSweepOptions(Path("x"), (refuses, "-m", "m.gguf", "-ngl", "99"))
    assert command(tensor, opts) == [refuses, "-m", "m.gguf", "-ngl", "99", "-sm", "tensor", "-fit", "off"]
    assert command(layer, opts)[-2:] == ["-sm", "layer"]
    assert command(ProgramCell(("-sm tensor",), 2, "", DeviceSet("p", (), "")),
                   replace(opts, program=(plain, "-m", "m.gguf")))[-2:] == ["-sm", "tensor"]
    # the command's own --fit is kept (and with it the program's refusal, its own words in the cell)
    own = replace(opts, program=(refuses, "-m", "m.gguf", "--fit", "on"))
    assert command(tensor, own)[-4:] == ["--fit", "on", "-sm", "tensor"]
    # the split given by the command itself, a matrix variable before it
    given = replace(opts, program=(refuses, "--split-mode", "tensor"))
    reuse = ProgramCell(("LLAMA_GRAPH_REUSE_DISABLE=1",), 4, "", DeviceSet("p", (), ""))
    assert command(reuse, given) == ["env", "LLAMA_GRAPH_REUSE_DISABLE=1", refuses, "--split-mode", "tensor",
                                     "-fit", "off"]
    # the reference (one device, -sm none in place of tensor) keeps the command's -fit off
    assert reference_argv(command(tensor, opts), None, None)[-4:] == ["-fit", "off", "-dev", "none"]


def test_cuda_axes_come_from_the_programs_ggml_not_from_its_words(tmp_path, no_ldd, monkeypatch):
    """Offered where the program's ggml has CUDA: a libggml-cuda it loads (through libggml), one beside
    its libggml-base or beside it (loadable backends), or CUDA among the backends its ggml registers;
    with --build, each build's program ({bin}). A device name in the command says nothing."""
    exe = _program(tmp_path / "own" / "bin", False)
    words = (str(exe), "-m", "m.gguf", "-dev", "CUDA0,CUDA1")
    assert CUDA_AXES[0] not in default_axes(words)  # CUDA in the words, none in the ggml
    no_ldd["libggml-cuda.so"] = tmp_path / "ggml" / "src" / "ggml-cuda" / "libggml-cuda.so"  # a ggml tree's layout
    assert default_axes(words)[-2:] == CUDA_AXES
    no_ldd.clear()
    base = tmp_path / "lib" / "libggml-base.so"
    base.parent.mkdir()
    base.write_bytes(b"")
    no_ldd["libggml-base.so.0"] = base
    assert CUDA_AXES[0] not in default_axes(words)
    (tmp_path / "lib" / "libggml-cuda.so").write_bytes(b"")  # beside libggml-base
    assert default_axes(words)[-2:] == CUDA_AXES
    (tmp_path / "lib" / "libggml-cuda.so").unlink()
    (exe.parent / "libggml-cuda.so").write_bytes(b"")  # beside the program (GGML_BACKEND_DL)
    assert default_axes(words)[-2:] == CUDA_AXES
    (exe.parent / "libggml-cuda.so").unlink()
    no_ldd["libggml.so.0"] = tmp_path / "lib" / "libggml.so.0"
    monkeypatch.setattr(sweep_program, "registered_backends", lambda libggml, folder: ("CPU", "CUDA"))
    assert default_axes(words)[-2:] == CUDA_AXES  # registered by the ggml itself (GGML_BACKEND_DIR)
    monkeypatch.setattr(sweep_program, "registered_backends", lambda libggml, folder: ("CPU",))
    # --build: each build's program; CUDA where any column's ggml has it
    cuda_bin = _program(tmp_path / "b2" / "bin", False).parent
    (cuda_bin / "libggml-cuda.so").write_bytes(b"")
    monkeypatch.setattr(sweep_program, "pinned_builds", lambda: {"b1": exe.parent, "b2": cuda_bin})
    templ = ("{bin}/llama-completion", "-m", "m.gguf")
    assert CUDA_AXES[0] not in default_axes(templ, ("b1",))
    assert default_axes(templ, ("b1", "b2"))[-2:] == CUDA_AXES


def test_a_tensor_split_the_commands_own_fit_refuses_says_why(tmp_path, no_ldd):
    refuses = str(_program(tmp_path / "a", True))
    argv = ["env", "A=1", refuses, "--fit", "on", "-sm", "tensor"]
    assert sweep_program._with_reason("every run failed", argv) == (
        "the command sets --fit on, and llama.cpp's --fit refuses -sm tensor (-fit off runs it); every run failed")
    assert sweep_program._with_reason("x", [refuses, "-fit", "off", "-sm", "tensor"]) == "x"
    assert sweep_program._with_reason("x", [refuses, "-fit", "on", "-sm", "layer"]) == "x"
