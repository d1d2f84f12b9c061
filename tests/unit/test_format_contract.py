"""The contracts between the halves, each written once and checked here: the trace format's names
and numbers in native_hooks/trace_format.h (the Python side, analysis/trace_format.py, which the
loader, the writers in tracer/ and tests/support/tracegen.py import, is held to every enum value and flag
bit in it), and the DataFrame schemas in analysis/schema.py, the loaded trace's and the race
findings' (docs/dataframes.md is held to them)."""
import re
from pathlib import Path

import pytest

from ggml_trace.analysis import trace_format as tf
from ggml_trace.analysis.schema import ANALYSIS_FRAMES, FRAMES

HEADER = Path(__file__).resolve().parents[2] / "native_hooks" / "trace_format.h"


def _int(text: str) -> int:
    return eval(re.sub(r"(0x[0-9a-fA-F]+|\d+)[uUlL]*", r"\1", text), {"__builtins__": {}})


def parse_header() -> tuple[dict, dict]:
    """({enum name: {member: value}}, {constant: value}) of the header."""
    src = re.sub(r"//[^\n]*", "", HEADER.read_text())
    enums = {}
    for name, body in re.findall(r"enum\s+(\w+)\s*:\s*\w+\s*\{(.*?)\};", src, re.S):
        members, value = {}, -1
        for item in filter(None, (i.strip() for i in body.split(","))):
            key, _, expr = (p.strip() for p in item.partition("="))
            value = _int(expr) if expr else value + 1
            members[key] = value
        enums[name] = members
    consts = {k: _int(v) for k, v in re.findall(r"static const \w+\s+(\w+)\s*=\s*([^;{]+);", src)}
    return enums, consts


ENUMS, CONSTS = parse_header()


def test_the_header_parses():
    assert {"RecordType", "CallKind", "DelayWhere", "DeviceSource", "GpuActivityKind", "AccessMode",
            "BufferEvent", "MetaRole"} <= set(ENUMS)
    assert CONSTS["CHUNK_SIZE"] == 64 * 1024 and CONSTS["NONE32"] == 0xFFFFFFFF


def test_record_types():
    rec = {k: v for k, v in ENUMS["RecordType"].items()}
    # the sentinel counts the types: a type added to the header moves it, and the loader must follow
    assert rec["REC_COUNT"] == max(v for k, v in rec.items() if k != "REC_COUNT") + 1
    for name, value in rec.items():
        assert getattr(tf, name) == value, name
    assert tf.MAX_RECORD_TYPE == tf.REC_COUNT - 1
    assert set(tf.RECORD_DTYPES) == set(range(1, tf.REC_COUNT))  # every type but NONE has its layout


def test_call_kinds_both_ways():
    header = {v: k.removeprefix("K_").lower() for k, v in ENUMS["CallKind"].items()}
    assert tf.CALL_KINDS == header


@pytest.mark.parametrize("enum", ["DelayWhere", "DeviceSource", "GpuActivityKind", "AccessMode", "BufferEvent"])
def test_small_enums(enum):
    for name, value in ENUMS[enum].items():
        assert getattr(tf, name) == value, name


def test_cuda_ops_both_ways():
    header = {v: k.removeprefix("CUDA_").lower() for k, v in ENUMS["CudaOp"].items()}
    assert tf.CUDA_OPS == header


def test_meta_roles():
    roles = {v: k.removeprefix("ROLE_").lower() for k, v in ENUMS["MetaRole"].items() if v > 0}
    assert tf.META_ROLES == [roles[i] for i in sorted(roles)]


def test_constants_and_flag_bits():
    python_side = [k for k in CONSTS if hasattr(tf, k)]
    # every flag bit and shift the loader reads is named in the header and here alike
    assert {"CALL_FAILED", "CALL_DECLINED", "CALL_META_PARENT", "DEVICE_SOURCE_SHIFT",
            "DEVICE_START_ESTIMATED", "DEVICE_END_LATE", "DELAY_WHERE_SHIFT", "FORMAT_VERSION",
            "HEADER_SIZE", "RECORD_SIZE", "CHUNK_MAGIC", "STRING_PIECE", "NONE32"} <= set(python_side)
    for name in python_side:
        assert getattr(tf, name) == CONSTS[name], name
    assert tf.FILE_MAGIC == b"GGMLTRC\0"


DOCS = Path(__file__).resolve().parents[2] / "docs" / "dataframes.md"


def documented_frames() -> dict:
    """{frame: {column: dtype}} from the column tables of docs/dataframes.md (a row may name
    several columns of one dtype: "t_begin, t_end, duration")."""
    out, frame = {}, None
    for line in DOCS.read_text().splitlines():
        if line.startswith("## "):
            frame = line[3:].strip()
        elif frame and line.startswith("| ") and not line.startswith("| column"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            for name in cells[0].split(","):
                out.setdefault(frame, {})[name.strip()] = cells[1]
    return out


def test_the_dataframe_docs_match_the_schema():
    docs = documented_frames()
    for frame, columns in {**FRAMES, **ANALYSIS_FRAMES}.items():  # the race findings too
        assert docs.get(frame) == columns, frame  # same columns and dtypes (the docs group some)


def test_every_call_kind_has_its_groups_and_colour():
    """analysis/kinds.py: one table of kinds; a kind the header adds must be given a row."""
    from ggml_trace.analysis.kinds import GPU_KINDS, KINDS, kinds_in

    assert set(KINDS) == set(tf.CALL_KINDS.values()) | set(GPU_KINDS)
    assert all(len(colour) == 7 and colour.startswith("#") for _, colour in KINDS.values())
    # the groups the loader and the race analysis rest on
    assert set(kinds_in("async")) <= set(kinds_in("copy")) & set(kinds_in("enqueue"))
    assert kinds_in("event") == [k for k in kinds_in("sync") if k.startswith("event_")]
