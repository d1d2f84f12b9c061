"""A program sweep's matrix without running anything (tracer/sweep_program.py): axes as the command
line and a matrix file write them, the configurations of each design, the command line of a cell,
and what the page says of a program's cells. Run on real llama.cpp builds:
tests/runs/test_sweep_program.py."""
import json
from pathlib import Path

import pytest

from ggml_trace.tracer import sweep_report
from ggml_trace.tracer.sweep import CellResult, DeviceSet, SweepResult
from ggml_trace.tracer.sweep_program import (AS_GIVEN, Axis, MatrixError, ProgramCell, ProgramSweepOptions, command,
                                             configurations, load_matrix, parse_axis)


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


def test_a_cell_puts_its_options_in_place_and_its_variables_before_the_program():
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
