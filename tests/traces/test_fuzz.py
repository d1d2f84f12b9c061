"""Fuzzing the reader and the commands with damaged copies of the committed traces
(tests/data: real CUDA runs with every record type): cuts anywhere, flipped bytes in every
region of the file, extreme values in every field of every record type.

Every outcome must be a loaded Trace or a TraceFormatError (never another exception), damage
must be reported, and every command must end (an alarm stops one that hangs), under a memory cap,
with exit 0, 1 or 2 and at most a one-line error. Hypothesis runs derandomized (the same cases on
every machine) and without its example database, within a bounded number of cases.
"""
from __future__ import annotations

import collections
import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import support
from support import DATA, check_dtypes, no_hang, record_offsets

from ggml_trace import analysis
from ggml_trace.analysis import TraceFormatError
from ggml_trace.analysis.trace_format import CHUNK_SIZE, HEADER_SIZE, RECORD_DTYPES, RECORD_SIZE

SOURCES = sorted(DATA.glob("*.ggmltrace"))
LOAD_CASES = 150          # in-process: load strict and lenient, summary, races
COMMAND_BATCHES = 3       # subprocesses, each running every command on FILES_PER_BATCH files
FILES_PER_BATCH = 3
COMMAND_SECONDS = 60      # a hang guard: the alarm that ends any one command still running
MEMORY_CAP = 2 << 30      # RLIMIT_AS of the command runs
OUTCOMES: collections.Counter = collections.Counter()
pytestmark = pytest.mark.filterwarnings("error::DeprecationWarning", "error::FutureWarning")


_CACHE: dict[int, tuple[bytes, dict]] = {}


def source(i: int) -> tuple[bytes, dict]:
    if i not in _CACHE:
        data = SOURCES[i].read_bytes()
        _CACHE[i] = (data, record_offsets(data))
    return _CACHE[i]


def _extremes(fmt: np.dtype) -> list[int]:
    info = np.iinfo(fmt)
    vals = {0, 1, int(info.max), int(info.max) - 1, int(info.max) // 2 + 1}
    if info.min < 0:
        vals |= {-1, int(info.min)}
    return sorted(vals)


REGIONS = ["header", "header_pad", "chunk_header", "type_byte", "record", "anywhere"]


@st.composite
def mutation(draw, src: int):
    data, offs = source(src)
    kind = draw(st.sampled_from(["cut", "flip", "field", "field", "chunk"]))
    if kind == "cut":
        return ("cut", draw(st.integers(0, len(data) - 1)))
    n_chunks = (len(data) - HEADER_SIZE) // CHUNK_SIZE
    if kind == "chunk":  # a chunk header's magic, thread or index
        c = draw(st.integers(0, max(n_chunks - 1, 0)))
        return ("flip", HEADER_SIZE + c * CHUNK_SIZE + draw(st.integers(0, 15)), draw(st.integers(1, 255)))
    if kind == "flip":
        region = draw(st.sampled_from(REGIONS))
        if region == "header":
            at = draw(st.integers(0, 127))
        elif region == "header_pad":
            at = draw(st.integers(128, HEADER_SIZE - 1))
        elif region == "chunk_header":
            at = HEADER_SIZE + draw(st.integers(0, max(n_chunks - 1, 0))) * CHUNK_SIZE + draw(st.integers(0, 63))
        elif region in ("type_byte", "record"):
            t = draw(st.sampled_from([t for t, o in offs.items() if len(o)]))
            rec = int(offs[t][draw(st.integers(0, len(offs[t]) - 1))])
            at = rec if region == "type_byte" else rec + draw(st.integers(1, RECORD_SIZE - 1))
        else:
            at = draw(st.integers(0, len(data) - 1))
        return ("flip", at, draw(st.integers(1, 255)))
    # an extreme value in one field of one record
    t = draw(st.sampled_from([t for t, o in offs.items() if len(o)]))
    dtype = RECORD_DTYPES[t]
    names = [n for n in dtype.names if n != "type" and dtype.fields[n][0].kind in "ui"
             and dtype.fields[n][0].shape == ()]
    name = draw(st.sampled_from(names))
    fmt, off = dtype.fields[name][0], dtype.fields[name][1]
    rec = int(offs[t][draw(st.integers(0, len(offs[t]) - 1))])
    value = draw(st.sampled_from(_extremes(fmt)))
    return ("field", rec + off, np.array([value], fmt).tobytes())


@st.composite
def damaged_trace(draw):
    src = draw(st.integers(0, len(SOURCES) - 1))
    muts = draw(st.lists(mutation(src), min_size=1, max_size=3))
    data = bytearray(source(src)[0])
    for m in sorted(muts, key=lambda m: m[0] == "cut"):  # cuts last: the others land first
        if m[0] == "cut":
            del data[m[1]:]
        elif m[0] == "flip" and m[1] < len(data):
            data[m[1]] ^= m[2]
        elif m[0] == "field":
            data[m[1]: m[1] + len(m[2])] = m[2]
    return SOURCES[src].name, muts, bytes(data)


def _load(path, strict):
    try:
        return analysis.load(path, strict=strict)
    except TraceFormatError as e:
        assert str(path) in str(e), e  # the message names the file
        return e


FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=True,
                suppress_health_check=list(HealthCheck))


@settings(FUZZ, max_examples=LOAD_CASES)
@given(case=damaged_trace())
def test_fuzz_load(tmp_path_factory, case):
    name, muts, data = case
    p = tmp_path_factory.getbasetemp() / "fuzz.ggmltrace"
    p.write_bytes(data)
    with no_hang(300, "loading a damaged trace"):  # a hang guard: a load takes well under a second
        strict, lenient = _load(p, True), _load(p, False)
    if isinstance(lenient, TraceFormatError):
        assert isinstance(strict, TraceFormatError)  # only what no mode can read: the header
        OUTCOMES["rejected (header)"] += 1
        return
    check_dtypes(lenient)
    analysis.summarize(lenient)
    analysis.races(lenient)
    if isinstance(strict, TraceFormatError):
        assert lenient.warnings and lenient.damage, (muts, strict)  # the damage is reported
        OUTCOMES["damaged: strict refuses, lenient loads and reports it"] += 1
        return
    check_dtypes(strict)
    assert len(strict.calls) == len(lenient.calls) and strict.warnings == lenient.warnings
    OUTCOMES["loads, with warnings" if strict.warnings else "loads clean"] += 1


def _cap():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


@settings(FUZZ, max_examples=COMMAND_BATCHES)
@given(cases=st.lists(damaged_trace(), min_size=FILES_PER_BATCH, max_size=FILES_PER_BATCH))
def test_fuzz_commands(tmp_path_factory, cases):
    d = tmp_path_factory.mktemp("cmds")
    files = []
    for i, (_, _, data) in enumerate(cases):
        files.append(d / f"damaged{i}.ggmltrace")
        files[-1].write_bytes(data)
    r = subprocess.run([sys.executable, str(Path(support.__file__).parent / "fuzz_commands.py"),
                        str(COMMAND_SECONDS), str(d), *map(str, files)],
                       capture_output=True, text=True, preexec_fn=_cap,
                       timeout=COMMAND_SECONDS * 14 * FILES_PER_BATCH)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(lines) == 13 * FILES_PER_BATCH
    for x in lines:
        what = (x["run"], cases[x["file"]][1], x["stderr"][-2000:])
        assert x["rc"] in (0, 1, 2), what  # not "timeout": it ended before its COMMAND_SECONDS alarm
        assert "Traceback" not in x["stderr"], what
        assert "cannot process this trace" not in x["stderr"], what  # an internal error
        assert "out of memory" not in x["stderr"], what
        assert not x["leftovers"], what
        if x["rc"] == 2:
            errors = [ln for ln in x["stderr"].splitlines() if ": warning: " not in ln
                      and not ln.startswith("ggml-trace: ")]
            assert len(errors) >= 1 and all(ln.startswith("ggml-trace ") for ln in errors), what
        if x["output_size"] is not None:
            assert x["output_size"] > 0, what  # never an empty output file
        OUTCOMES[f"command exit {x['rc']}"] += 1


def test_fuzz_outcomes_reported():
    """Prints the classes of outcomes (run with -s to see them) and checks the cases covered
    more than one class: damage that loads, damage that is refused, files that load clean. The
    counts are this process's: with pytest-xdist, test_fuzz_load may have run in another worker."""
    if not any(not k.startswith("command") for k in OUTCOMES):
        pytest.skip("run with test_fuzz_load, in the same process")
    print("\nfuzz outcomes:", dict(OUTCOMES))
    assert OUTCOMES["damaged: strict refuses, lenient loads and reports it"] > 0
    assert OUTCOMES["loads clean"] + OUTCOMES["loads, with warnings"] > 0
