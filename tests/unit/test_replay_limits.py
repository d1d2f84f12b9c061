"""What `ggml-trace replay` lets a reproduction folder ask of this machine (tracer/replay_limits.py):
the specs `reduce` writes pass; sizes beyond the machine's memory, counts beyond the scenario
program's caps and values that are no counts are refused in one line, before anything runs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ggml_trace.analysis.reduction import MIN_ELEMENTS, Shape, spec_text
from ggml_trace.tracer import replay_limits as rl
from ggml_trace.tracer.replay_limits import SpecRefused, check_about, check_spec, parse_spec, read_spec, spec_bytes

ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30
INPUTLESS = Shape("inputless-reuse", "read-after-reuse", "Vulkan0", "CPU", "drain", 16 << 20)
NEXT_GRAPH = Shape("next-graph-write", "read-after-reuse", "Vulkan0", "CPU", "drain", 16 << 10)
ALLREDUCE = Shape("allreduce-scratch", "write-after-read", "CUDA1", "CUDA0", "event", 4096, devices=2, reader_index=1)
SIMPLE = "elements 4096\ninput x\nop y dev0 scale x\noutput y\n"


def refused(text, available=16 * GiB) -> str:
    with pytest.raises(SpecRefused) as e:
        check_spec(text, available)
    msg = str(e.value)
    assert "\n" not in msg and "\r" not in msg
    return msg


@pytest.mark.parametrize("shape, size", [(INPUTLESS, MIN_ELEMENTS["inputless-reuse"]), (INPUTLESS, 1 << 24),
                                         (NEXT_GRAPH, MIN_ELEMENTS["next-graph-write"]), (ALLREDUCE, 8)])
def test_what_reduce_writes_passes(shape, size):
    text = spec_text(shape, size, header="ggml-trace reduce x.ggmltrace --race 1\nread-after-reuse: # odd text")
    spec = check_spec(text, 4 * GiB)
    assert spec.meta_layers == size if shape is ALLREDUCE else spec.elements == size
    assert spec_bytes(spec) < GiB


def test_the_device_work_reduce_keeps_passes_and_is_counted():
    """next-graph-write's resident device work (`work NAME devN US`): its weights count in the memory."""
    text = spec_text(NEXT_GRAPH, MIN_ELEMENTS["next-graph-write"], work_us=15600)
    spec = check_spec(text, 4 * GiB)
    assert spec.works == 1 and spec_bytes(spec) > rl.WORK_BYTES
    assert refused(SIMPLE + "work w cpu 1000\n").endswith("work on the CPU: give a device (dev0 to dev7)")
    assert "work 0 is out of range" in refused(SIMPLE + "work w dev0 0\n")
    assert "is not a count" in refused(SIMPLE + "work w dev0 -5\n")
    assert "unknown backend" in refused(SIMPLE + "work w dev9 1000\n")
    many = SIMPLE + "work w dev0 1000\n" * (rl.MAX_WORKS + 1)
    assert refused(many).endswith(f"more than {rl.MAX_WORKS} work lines")


def test_the_reported_spec_is_refused():
    """elements 99999999999999: the program ran until memory ran out (3.5 GB after 12 s)."""
    msg = refused("elements 99999999999999\ninput x\nop y dev0 scale x\noutput y\n")
    assert msg == f"spec.txt:1: elements 99999999999999 is out of range (1 to {rl.MAX_ELEMENTS})"


def test_a_size_beyond_this_machines_memory_is_refused():
    text = SIMPLE.replace("4096", str(1 << 28))  # 1 GiB a vector, two vectors on two backends
    assert spec_bytes(parse_spec(text)) > 4 * GiB
    assert check_spec(text, 64 * GiB)
    msg = refused(text, 8 * GiB)
    assert re.fullmatch(r"spec\.txt asks for about [0-9.]+ GiB of memory \(elements 268435456, 1 inputs, 1 ops, "
                        r"devices 1, iterations 1\); this machine has 8\.0 GiB available, and a replay takes at "
                        r"most half of it", msg), msg
    assert check_spec(text, None)  # a machine that does not say: the caps alone
    # each count multiplies what the program holds
    base = spec_bytes(parse_spec(SIMPLE))
    for more in ("iterations 1000\n", "pipelined 1\n", "devices 8\n", "input w\n"):
        assert spec_bytes(parse_spec(more + SIMPLE)) > base, more
    assert spec_bytes(parse_spec("meta 256\n")) > spec_bytes(parse_spec("meta 2\n"))


@pytest.mark.parametrize("line, says", [
    ("elements -5", "elements -5 is not a count"),
    ("elements 1e9", "elements 1e9 is not a count"),
    ("elements 0x1000", "elements 0x1000 is not a count"),
    ("elements 12abc", "elements 12abc is not a count"),
    ("elements 4096.0", "elements 4096.0 is not a count"),
    ("elements 0", "elements 0 is out of range"),
    ("elements 1234567890123", "elements 1234567890123 is out of range"),
    ("elements " + "9" * 5000, "elements " + "9" * 57 + "... is out of range"),  # shortened, and no int() of it
    ("iterations 1025", "iterations 1025 is out of range (1 to 1024)"),
    ("iterations 99999999999", "iterations 99999999999 is out of range"),
    ("devices 0", "devices 0 is out of range (1 to 8)"),
    ("devices 9", "devices 9 is out of range"),
    ("meta 0", "meta 0 is out of range (1 to 256)"),
    ("meta 100000", "meta 100000 is out of range"),
    ("pipelined 2", "cannot read this line: pipelined 2"),
    ("elements", "cannot read this line: elements"),
    ("elements 4096 4096", "cannot read this line"),
    ("frobnicate 3", "cannot read this line: frobnicate 3"),
    ("op z dev0 frobnicate x", "unknown op or wrong arguments in the spec: op frobnicate"),
    ("op z dev0 add x", "unknown op or wrong arguments in the spec: op add"),
    ("op z dev9 scale x", "unknown backend dev9 in the spec"),
    ("op z gpu scale x", "unknown backend gpu in the spec"),
    ("op z cpu scale nowhere", "the spec uses nowhere before defining it"),
    ("input q devX", "unknown backend devX"),
    ("elements \x1b[2J", "elements \\x1b[2J is not a count"),
])
def test_malformed_values_are_refused_naming_the_line(line, says):
    msg = refused(SIMPLE + line + "\n")
    assert msg.startswith("spec.txt:5: ") and says in msg, msg


def test_what_the_program_would_refuse_later_is_refused_now():
    assert refused("elements 64\ninput x\n") == "spec.txt: no output line"
    assert refused("input x\noutput nowhere\n") == "spec.txt: the spec's output nowhere is not defined"
    assert refused("op y dev0 frobnicate x\noutput y\n").endswith("the spec uses x before defining it")


def test_absurdly_many_lines_or_statements():
    many = "input x\n" + "op y cpu scale x\n" * rl.MAX_STATEMENTS + "output y\n"
    assert refused(many) == f"spec.txt:{rl.MAX_STATEMENTS + 1}: more than {rl.MAX_STATEMENTS} input, op and work lines"
    lines = SIMPLE + "# a comment\n" * rl.MAX_LINES
    assert refused(lines).startswith(f"spec.txt has {rl.MAX_LINES + 5} lines, more than {rl.MAX_LINES}")
    assert check_spec(SIMPLE + "\n  # blank and comment lines are fine\n\n", GiB)


def test_the_file_is_read_no_further_than_a_spec_can_be(tmp_path):
    big = tmp_path / "spec.txt"
    big.write_bytes(SIMPLE.encode() + b"#" * rl.MAX_SPEC_BYTES)
    with pytest.raises(SpecRefused, match="is larger than 65536 bytes"):
        read_spec(big)
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"elements \xff\xfe\n")
    with pytest.raises(SpecRefused, match="is not text"):
        read_spec(binary)
    ok = tmp_path / "ok.txt"
    ok.write_text(SIMPLE)
    assert read_spec(ok) == SIMPLE


@pytest.mark.parametrize("latency, devices, says", [
    ([float("nan")], 1, "latency nan us is out of range"),
    ([float("inf")], 1, "latency inf us is out of range"),
    ([-1.0], 1, "latency -1 us is out of range"),
    ([1e12], 1, "latency 1e+12 us is out of range (0 to 50000 us an operation)"),
    ([0.0] * 9, 1, "9 latencies"),
    ([], 1, "0 latencies"),
    ([2000.0], 0, "0 devices is out of range (1 to 8)"),
    ([2000.0], 10**9, "1000000000 devices is out of range"),
    ("2000", 1, "latency_us is not a list"),
])
def test_reduce_json_devices_and_latency(latency, devices, says):
    with pytest.raises(SpecRefused, match=re.escape(says)):
        check_about(latency, devices)


def test_reduces_own_latencies_pass():
    check_about([0.0, 2000.0], 2)
    check_about([rl.MAX_LATENCY_US], 1)


def test_this_machine_says_how_much_memory_it_has():
    avail = rl.available_memory()
    assert avail is None or avail > 0


def test_the_scenario_program_holds_the_same_caps():
    """scenarios.cpp refuses the same counts for a program run without this check."""
    src = (ROOT / "scenarios" / "scenarios.cpp").read_text()
    caps = dict(re.findall(r"(MAX_[A-Z_]+) = ([^,;]+)", src))
    assert caps["MAX_ELEMENTS"] == "1L << 30" and rl.MAX_ELEMENTS == 1 << 30
    for name in ("MAX_DEVICES", "MAX_ITERATIONS", "MAX_META_LAYERS", "MAX_STATEMENTS", "MAX_WORKS", "MAX_WORK_US"):
        assert int(caps[name]) == getattr(rl, name), name
