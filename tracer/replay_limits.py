"""What a reproduction folder may ask of this machine, checked before `ggml-trace replay` starts its
program. The folder `reduce` wrote may come from anyone: its spec.txt sizes the scenario
program's vectors, graphs and layers (scenarios/scenarios.cpp, `read_spec`), and reduce.json its
virtual devices and their latency. A size the machine cannot hold, a count beyond what the program
can build, or a value that is no count at all is refused in one line, and nothing is run.

The spec language is docs/reduce.md's; the caps below are the scenario program's own (it refuses
the same values, for a program run without this check).
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_SPEC_BYTES = 64 * 1024   # a reduction writes a few hundred bytes
MAX_LINES = 1000
MAX_DEVICES = 8              # VDEV0..7
MAX_ELEMENTS = 1 << 30       # floats per vector: 4 GiB, and an int in the program
MAX_ITERATIONS = 1024        # graphs in a row (a reduction writes 4)
MAX_META_LAYERS = 256        # the MLP's graph holds ~5 nodes a layer, in a graph of 2048
MAX_STATEMENTS = 200         # input, op and work lines: the program's graph context holds 512 tensors
MAX_WORKS = 4                # work lines, each at most 64 products a graph
MAX_WORK_US = 1_000_000      # a work line's time on its device's queue, each graph
MAX_LATENCY_US = 50000.0     # per operation of a virtual device: the most `reduce` writes
OPS = {"scale": 1, "cont": 1, "sqr": 1, "add": 2, "mul": 2}  # op name: its arguments

# What the program holds, for the estimate of its memory (scenarios.cpp):
SCHED_COPIES = 4             # a pipelined spec's scheduler keeps this many copies of split inputs
CONTEXT_BYTES = 512 * 1024   # a graph's context (512 tensor headers and the graph), one per pipelined graph
# a work line's weights (three n x n matrices for each n it tries, 256 to 4096) and its chained products
WORK_BYTES = 3 * 4 * sum(n * n for n in (256, 512, 1024, 2048, 4096)) + 3 * 4 * 4096 * 4096
META_LAYER_BYTES = 2 * (2 * 256 * 512 * 4)  # a layer's two weight matrices, and the values set into them
MEMORY_SHARE = 0.5           # of the memory available now: the traced run's trace and its analysis need the rest

_WORD = re.compile(r"[ \t\n\v\f\r]+")  # the program splits words as C++ streams do
_COUNT = re.compile(r"[0-9]+")


class SpecRefused(ValueError):
    """The reproduction asks for what this machine should not run: the message says why, in one line."""


@dataclass
class Spec:
    devices: int = 1
    elements: int = 4096     # the program's default vector
    iterations: int = 1
    pipelined: bool = False
    meta_layers: int = 0
    output: str = ""
    inputs: int = 0
    ops: int = 0
    works: int = 0
    names: set = field(default_factory=set)


def read_spec(path: Path) -> str:
    """The spec's text, read no further than MAX_SPEC_BYTES."""
    with open(path, "rb") as f:
        data = f.read(MAX_SPEC_BYTES + 1)
    if len(data) > MAX_SPEC_BYTES:
        raise SpecRefused(f"{path} is larger than {MAX_SPEC_BYTES} bytes: not a spec written by `reduce`")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecRefused(f"{path} is not text (UTF-8)") from None


def parse_spec(text: str, where: str = "spec.txt") -> Spec:
    """The spec's statements, each value checked as the program reads it and against its caps."""
    lines = text.split("\n")
    if len(lines) > MAX_LINES:
        raise SpecRefused(f"{where} has {len(lines)} lines, more than {MAX_LINES}")
    spec = Spec()
    for no, line in enumerate(lines, 1):
        w = _WORD.split(line.split("#", 1)[0].strip(" \t\n\v\f\r"))
        if w == [""]:
            continue
        at = f"{where}:{no}"
        k = w[0]
        if k in ("devices", "elements", "iterations", "meta") and len(w) == 2:
            lo, hi = {"devices": (1, MAX_DEVICES), "elements": (1, MAX_ELEMENTS),
                      "iterations": (1, MAX_ITERATIONS), "meta": (1, MAX_META_LAYERS)}[k]
            setattr(spec, "meta_layers" if k == "meta" else k, _count(w[1], lo, hi, f"{at}: {k}"))
        elif k == "pipelined" and len(w) == 2 and w[1] in ("0", "1"):
            spec.pipelined = w[1] == "1"
        elif k == "output" and len(w) == 2:
            spec.output = w[1]
        elif k == "input" and len(w) in (2, 3):
            if len(w) == 3:
                _backend(w[2], at)
            spec.inputs += 1
            spec.names.add(w[1])
        elif k == "op" and len(w) in (5, 6):
            _op(w, spec, at)
        elif k == "work" and len(w) == 4:
            if w[2] == "cpu":
                raise SpecRefused(f"{at}: work on the CPU: give a device (dev0 to dev{MAX_DEVICES - 1})")
            _backend(w[2], at)
            _count(w[3], 1, MAX_WORK_US, f"{at}: work")
            spec.works += 1
            if spec.works > MAX_WORKS:
                raise SpecRefused(f"{at}: more than {MAX_WORKS} work lines")
        else:
            raise SpecRefused(f"{at}: cannot read this line: {_shown(line)}")
        if spec.inputs + spec.ops + spec.works > MAX_STATEMENTS:
            raise SpecRefused(f"{at}: more than {MAX_STATEMENTS} input, op and work lines")
    if not spec.meta_layers:
        if not spec.output:
            raise SpecRefused(f"{where}: no output line")
        if spec.output not in spec.names:
            raise SpecRefused(f"{where}: the spec's output {_shown(spec.output)} is not defined")
    return spec


def _count(word: str, lo: int, hi: int, what: str) -> int:
    if not _COUNT.fullmatch(word):
        raise SpecRefused(f"{what} {_shown(word)} is not a count (digits only)")
    if len(word) > 12 or not lo <= int(word) <= hi:  # (no int() of a line of digits)
        raise SpecRefused(f"{what} {_shown(word)} is out of range ({lo} to {hi})")
    return int(word)


def _backend(word: str, at: str) -> None:
    if word != "cpu" and not (re.fullmatch(r"dev[0-9]", word) and int(word[3:]) < MAX_DEVICES):
        raise SpecRefused(f"{at}: unknown backend {_shown(word)} in the spec (cpu, dev0 to dev{MAX_DEVICES - 1})")


def _op(w: list, spec: Spec, at: str) -> None:
    """op NAME BACKEND OP ARG [ARG], checked in the order the program checks it."""
    for a in w[4:]:
        if a not in spec.names:
            raise SpecRefused(f"{at}: the spec uses {_shown(a)} before defining it")
    if OPS.get(w[3]) != len(w) - 4:
        raise SpecRefused(f"{at}: unknown op or wrong arguments in the spec: op {_shown(w[3])}")
    _backend(w[2], at)
    spec.ops += 1
    spec.names.add(w[1])


def _shown(text: str) -> str:
    """A stranger's text in a one-line message: printable, and not too long."""
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text if len(text) <= 60 else text[:57] + "..."


def spec_bytes(spec: Spec) -> int:
    """What the program's run of `spec` holds at most, in bytes (scenarios.cpp): every vector in
    every backend's buffers (in each of a pipelined scheduler's copies), the input values, one
    result per iteration, a graph context per pipelined graph, each work line's weights and products;
    or the MLP's weights."""
    if spec.meta_layers:
        return spec.meta_layers * META_LAYER_BYTES
    vector = 4 * spec.elements
    copies = SCHED_COPIES if spec.pipelined else 1
    buffers = (spec.inputs + spec.ops) * vector * (spec.devices + 1) * copies
    host = spec.inputs * vector + (spec.iterations + 1) * vector
    contexts = (spec.iterations if spec.pipelined else 1) * CONTEXT_BYTES
    return buffers + host + contexts + spec.works * WORK_BYTES


def available_memory() -> int | None:
    """Bytes of memory this process may still take: the kernel's MemAvailable, or free pages, and
    no more than its cgroup's limit leaves. None when the machine does not say."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit != "max":
            avail = min(avail, max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass
    return avail


def check_spec(text: str, available: int | None, where: str = "spec.txt") -> Spec:
    """The spec, parsed and checked; refused (SpecRefused) when its run would take more than a
    share of the `available` memory (bytes; None: not checked)."""
    spec = parse_spec(text, where)
    need = spec_bytes(spec)
    if available is not None and need > MEMORY_SHARE * available:
        what = (f"meta {spec.meta_layers}" if spec.meta_layers else
                f"elements {spec.elements}, {spec.inputs} inputs, {spec.ops} ops, devices {spec.devices}, "
                f"iterations {spec.iterations}" + (", pipelined" if spec.pipelined else ""))
        raise SpecRefused(f"{where} asks for about {_gib(need)} of memory ({what}); this machine has "
                          f"{_gib(available)} available, and a replay takes at most half of it")
    return spec


def check_about(latency_us: list, devices: int, where: str = "reduce.json") -> None:
    """reduce.json's virtual devices and their latency per operation."""
    if not isinstance(latency_us, list):
        raise SpecRefused(f"{where}: latency_us is not a list (one value per device)")
    if not 1 <= devices <= MAX_DEVICES:
        raise SpecRefused(f"{where}: {devices} devices is out of range (1 to {MAX_DEVICES})")
    if not 1 <= len(latency_us) <= MAX_DEVICES:
        raise SpecRefused(f"{where}: {len(latency_us)} latencies, give one per device (at most {MAX_DEVICES})")
    for v in latency_us:
        if not (math.isfinite(v) and 0 <= v <= MAX_LATENCY_US):
            raise SpecRefused(f"{where}: latency {v:g} us is out of range (0 to {MAX_LATENCY_US:g} us an operation)")


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"
