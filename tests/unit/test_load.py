"""Tests of the trace loader (analysis.load / analysis.trace_file), on traces written by
tests/support/tracegen.py. The loader on the committed traces: tests/traces/test_load_traces.py; on
files of the C++ writer: tests/runs/test_load_programs.py."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from support import check_dtypes, col
from support.tracegen import TraceBuilder, string_id, synth_trace

from ggml_trace.analysis.schema import FRAMES
from ggml_trace.analysis import Trace, TraceFormatError, load, summarize
from ggml_trace.analysis.trace_file import INCOMPLETE_STRING, read_trace_file
from ggml_trace.analysis.raw_trace import TickClock
from ggml_trace.analysis.trace_format import (
    BUF_ALLOCATED, BUF_FREED, BUF_SEEN, CHUNK_SIZE, CLOCK_DTYPE, HEADER_SIZE, REC_CALL, RECORD_SIZE,
)

# A NumPy or pandas deprecation in the loader's path fails here first, before it breaks a release.
pytestmark = pytest.mark.filterwarnings("error::DeprecationWarning", "error::FutureWarning")

GPU_DEV, CPU_DEV = 0x6000_0000, 0x6000_0100
W_BUF, H_BUF, R_BUF = 0xA000, 0xB000, 0xC000  # gpu weights, host compute, reused pointer
EV = 0xE1

EXPECTED_DTYPES = FRAMES  # analysis/schema.py


def hand_made() -> tuple[TraceBuilder, dict]:
    """A small trace with known contents: one graph of two splits on CUDA0 and CPU."""
    b = TraceBuilder(hooks_build="b10531")
    b.meta("model", "tiny.gguf")
    b.meta("cmdline", "llama-simple -m tiny.gguf")
    b.thread(0, os_tid=500, name="main")
    b.thread(1, os_tid=501, name="worker")
    b.thread(1, os_tid=501, name="worker-renamed", t=5)  # latest name wins
    b.backend(0, "CUDA0", "CUDA0", "NVIDIA Test", device_type=1, has_async=True,
              has_events=True, device_ptr=GPU_DEV)
    b.backend(1, "CPU", "CPU", "Test CPU", device_type=0, device_ptr=CPU_DEV)
    b.backend(0, "DUPLICATE", device_type=1, device_ptr=GPU_DEV, t=1)  # emitted twice
    b.buffer(W_BUF, BUF_ALLOCATED, base=0x10000, size=0x1000, usage=1, buft_name="CUDA0",
             device_ptr=GPU_DEV, t=10)
    b.buffer(H_BUF, BUF_ALLOCATED, base=0x50000, size=0x2000, usage=2, is_host=True,
             buft_name="CPU", device_ptr=CPU_DEV, t=10)
    b.buffer(H_BUF, BUF_SEEN, base=0x50000, size=0x2000, usage=2, is_host=True,
             buft_name="CPU", device_ptr=CPU_DEV, t=12, thread=1)  # same lifetime
    ids = {}
    ids["sgc"] = b.call("sched_graph_compute", 1000, 5000, sched=0, graph=0, arg=10)
    ids["alloc"] = b.call("sched_alloc_graph", 900, 950, sched=0, graph=0)
    b.place(ids["alloc"], W_BUF, offset=0x40, size=64, tensor="kq", op=5, index=3)
    ids["cpy"] = b.call("cpy_tensor_async", 1100, 1200, backend=0, backend2=1, sched=0,
                        graph=0, split=0, arg=256)
    b.access(ids["cpy"], "read", H_BUF, 0x10, 256, tensor="inp_embd", op=0)
    b.access(ids["cpy"], "write", W_BUF, 0x20, 256, tensor="inp_embd#CUDA0", op=0)
    ids["gc0"] = b.call("graph_compute", 1300, 2300, backend=0, sched=0, graph=0, split=0,
                        arg=42)
    b.access(ids["gc0"], "read", W_BUF, 0x20, 256, tensor="inp_embd#CUDA0", node="mul_mat-0",
             op=27, index=0)
    b.access(ids["gc0"], "write", W_BUF, 0x400, 128, tensor="mul_mat-0", op=27, index=0)
    ids["rec"] = b.call("event_record", 2310, 2320, backend=0, sched=0, graph=0, split=0,
                        obj=EV)
    ids["wait"] = b.call("event_wait", 2400, 2410, backend=1, sched=0, graph=0, split=1, obj=EV)
    ids["gc1"] = b.call("graph_compute", 2500, 4000, backend=1, sched=0, graph=0, split=1,
                        arg=7)
    ids["set"] = b.call("buf_set_tensor", 4100, 4200, thread=1, arg=512)
    b.access(ids["set"], "read", 0, 0x50100, 512, tensor="tok", thread=1)  # raw host address
    b.access(ids["set"], "write", W_BUF, 0x800, 512, tensor="tok", thread=1)
    ids["sync"] = b.call("synchronize", 4300, 4400, backend=0)
    ids["esync"] = b.call("event_synchronize", 4500, 4600, backend=0, obj=EV)
    ids["new"] = b.call("event_new", 50, 60, backend=0, obj=0xE2, flags=1)
    ids["range"] = b.call("user_range", 10, 6000, obj="decode")
    ids["mark"] = b.call("user_mark", 70, thread=1, obj="start")
    return b, ids


@pytest.fixture
def trace(tmp_path) -> tuple[Trace, dict]:
    b, ids = hand_made()
    p = tmp_path / "t.trace"
    b.write(p, extra_zero_chunks=3)
    return load(p), ids


def test_header_and_meta(trace):
    t, _ = trace
    assert t.header["version"] == 1
    assert t.header["hooks_build"] == "b10531"
    assert t.header["t0_monotonic_ns"] == TraceBuilder().t0
    assert t.header["t0_ticks"] == TraceBuilder().t0_ticks
    assert t.header["ns_per_tick"] == 0.5
    assert t.meta == {"model": "tiny.gguf", "cmdline": "llama-simple -m tiny.gguf"}
    check_dtypes(t)


def test_threads_backends(trace):
    t, _ = trace
    assert col(t.threads, "thread") == [0, 1]
    assert col(t.threads, "os_tid") == [500, 501]
    assert col(t.threads, "name") == ["main", "worker-renamed"]
    be = t.backends
    assert col(be, "backend") == [0, 1]
    assert col(be, "name") == ["CUDA0", "CPU"]  # duplicate BackendRec ignored
    assert col(be, "device_description") == ["NVIDIA Test", "Test CPU"]
    assert col(be, "device_type") == ["gpu", "cpu"]
    assert col(be, "has_async") == [True, False]
    assert col(be, "has_events") == [True, False]
    assert col(be, "device_ptr") == [GPU_DEV, CPU_DEV]


def test_calls(trace):
    t, ids = trace
    c = t.calls
    assert len(c) == len(ids)
    assert list(c["t_begin"]) == sorted(c["t_begin"])  # time order
    row = c.set_index("call_id").loc[ids["cpy"]]
    assert row["kind"] == "cpy_tensor_async"
    assert (row["t_begin"], row["t_end"], row["duration"]) == (1100, 1200, 100)
    assert row["backend"] == "CUDA0" and row["backend2"] == "CPU"
    assert (row["sched"], row["graph"], row["split"], row["arg"]) == (0, 0, 0, 256)
    s = c.set_index("call_id").loc[ids["set"]]
    assert pd.isna(s["backend"]) and pd.isna(s["sched"]) and pd.isna(s["split"])
    assert s["thread"] == 1 and ids["set"] >> 40 == 1
    assert col(c, "failed").count(True) == 1
    assert c.set_index("call_id").loc[ids["new"], "failed"]


def test_splits_copies_sync_marks(trace):
    t, ids = trace
    sp = t.splits
    assert col(sp, "call_id") == [ids["gc0"], ids["gc1"]]
    assert col(sp, "backend") == ["CUDA0", "CPU"]
    assert col(sp, "n_nodes") == [42, 7]
    assert col(sp, "n_inputs") == [1, 0]
    assert col(sp, "duration") == [1000, 1500]

    cp = t.copies.set_index("call_id")
    assert list(cp.index) == [ids["cpy"], ids["set"]]
    a = cp.loc[ids["cpy"]]
    assert a["kind"] == "cpy_tensor_async" and a["async"]
    assert (a["bytes"], a["src_buffer"], a["src_offset"]) == (256, H_BUF, 0x10)
    assert (a["dst_buffer"], a["dst_offset"]) == (W_BUF, 0x20)
    assert (a["src_tensor"], a["dst_tensor"]) == ("inp_embd", "inp_embd#CUDA0")
    assert (a["src_backend"], a["dst_backend"]) == ("CPU", "CUDA0")
    s = cp.loc[ids["set"]]
    assert s["kind"] == "buf_set_tensor" and not s["async"]
    # raw host address 0x50100 lies in the host buffer based at 0x50000
    assert (s["src_buffer"], s["src_offset"], s["src_backend"]) == (H_BUF, 0x100, "CPU")
    assert (s["dst_buffer"], s["dst_backend"]) == (W_BUF, "CUDA0")
    assert list(t.copies["kind"].cat.categories)[0] == "cpy_tensor_async"

    sy = t.sync.set_index("call_id")
    assert list(sy["kind"]) == ["event_new", "event_record", "event_wait", "synchronize",
                                "event_synchronize"]
    assert sy.loc[ids["rec"], "event"] == EV
    assert pd.isna(sy.loc[ids["sync"], "event"])
    assert sy.loc[ids["wait"], "backend"] == "CPU"

    m = t.marks
    assert col(m, "kind") == ["user_range", "user_mark"]
    assert col(m, "name") == ["decode", "start"]
    assert col(m, "t_end") == [6000, 70]
    assert col(m, "thread") == [0, 1]


def test_accesses_and_allocations(trace):
    t, ids = trace
    ac = t.accesses
    assert len(ac) == 6
    gc = ac[ac["call_id"] == ids["gc0"]]
    assert col(gc, "mode") == ["read", "write"]
    assert col(gc, "tensor") == ["inp_embd#CUDA0", "mul_mat-0"]
    assert col(gc, "node") == ["mul_mat-0", "mul_mat-0"]
    assert col(gc, "op") == [27, 27]
    assert col(gc, "index") == [0, 0]
    assert col(gc, "end") == [0x20 + 256, 0x400 + 128]
    assert col(gc, "backend") == ["CUDA0", "CUDA0"]
    assert col(gc, "t_begin") == [1300, 1300]
    assert col(gc, "split") == [0, 0]
    host = ac[ac["call_id"] == ids["set"]].iloc[0]
    assert (host["buffer"], host["offset"], host["end"]) == (H_BUF, 0x100, 0x100 + 512)
    assert pd.isna(host["index"])  # NONE32
    al = t.allocations
    assert len(al) == 1
    r = al.iloc[0]
    assert (r["call_id"], r["t"], r["buffer"], r["offset"], r["size"], r["end"]) == (
        ids["alloc"], 950, W_BUF, 0x40, 64, 0x80)
    assert (r["tensor"], r["op"], r["index"], r["sched"], r["graph"]) == ("kq", 5, 3, 0, 0)


def test_buffers_collapse_and_backend(trace):
    t, _ = trace
    bf = t.buffers.set_index("buffer")
    assert len(bf) == 2  # ALLOCATED + SEEN of the host buffer are one lifetime
    assert bf.loc[W_BUF, "backend"] == "CUDA0" and bf.loc[W_BUF, "usage"] == "weights"
    assert bf.loc[H_BUF, "backend"] == "CPU" and bf.loc[H_BUF, "is_host"]
    assert bf.loc[H_BUF, "buft_name"] == "CPU" and bf.loc[H_BUF, "first_seen"] == 10
    assert pd.isna(bf.loc[H_BUF, "freed"])


def test_summary(trace):
    t, _ = trace
    s = summarize(t)
    assert s == summarize(t)
    assert s["graphs"] == 1
    assert s["backends"] == [
        {"name": "CUDA0", "splits": 1, "copies_in": 2, "bytes_in": 256 + 512, "syncs": 2,
         "event_records": 1, "event_waits": 0, "busy_ns": 1000},
        {"name": "CPU", "splits": 1, "copies_in": 0, "bytes_in": 0, "syncs": 0,
         "event_records": 0, "event_waits": 1, "busy_ns": 1500},
    ]


def test_buffer_generations(tmp_path):
    b = TraceBuilder()
    b.backend(0, "CPU", device_type=0, device_ptr=CPU_DEV)
    b.backend(1, "GPU", device_type=1, device_ptr=GPU_DEV)
    b.buffer(R_BUF, BUF_ALLOCATED, base=0x1000, size=100, usage=0, device_ptr=GPU_DEV, t=20)
    b.buffer(R_BUF, BUF_SEEN, base=0x1000, size=100, usage=2, device_ptr=GPU_DEV, t=25)
    b.buffer(R_BUF, BUF_FREED, base=0x1000, size=100, device_ptr=GPU_DEV, t=100)
    # Same pointer again, now a host buffer; records written out of time order on purpose.
    b.buffer(R_BUF, BUF_SEEN, base=0x8000, size=50, is_host=True, device_ptr=CPU_DEV,
             t=300, thread=1)
    b.buffer(R_BUF, BUF_ALLOCATED, base=0x8000, size=50, is_host=True, device_ptr=CPU_DEV,
             t=200)
    c1 = b.call("graph_compute", 30, 40, backend=1)
    b.access(c1, "write", R_BUF, 8, 4, tensor="x")
    c2 = b.call("graph_compute", 250, 260, backend=0)
    b.access(c2, "read", 0, 0x8010, 4, tensor="y")  # host address in generation 1
    b.access(c2, "read", R_BUF, 16, 4, tensor="z")
    b.access(c2, "read", 0, 0x1010, 4, tensor="w")  # in freed generation 0 only: not host
    # Copies pick the lifetime alive at the call: generation 0 (GPU) then 1 (CPU).
    for t0 in (50, 270):
        c = b.call("buf_cpy_tensor", t0, t0 + 5, arg=4)
        b.access(c, "read", R_BUF, 0, 4, tensor="src")
    b.write(tmp_path / "g.trace", threads=2)
    t = load(tmp_path / "g.trace")
    bf = t.buffers
    assert col(bf, "generation") == [0, 1]
    assert col(bf, "base") == [0x1000, 0x8000]
    assert col(bf, "usage") == ["compute", "any"]  # latest non-FREED record of the lifetime
    assert col(bf, "first_seen") == [20, 200]
    assert col(bf, "freed") == [100, None]
    assert col(bf, "backend") == ["GPU", "CPU"]
    ac = t.accesses
    assert col(ac, "buffer")[:4] == [R_BUF, R_BUF, R_BUF, 0]
    assert col(ac, "offset")[:4] == [8, 0x10, 16, 0x1010]
    assert col(t.copies, "src_backend") == ["GPU", "CPU"]
    check_dtypes(t)


def test_buffer_address_reused_without_free(tmp_path):
    # The writer re-announces a pointer whose struct was freed unseen: other memory, new row.
    b = TraceBuilder()
    b.buffer(0x7, BUF_ALLOCATED, base=0x1000, size=64, t=1)
    b.buffer(0x7, BUF_SEEN, base=0x1000, size=64, t=2)  # same memory: same lifetime
    b.buffer(0x7, BUF_SEEN, base=0x9000, size=128, t=3)
    b.write(tmp_path / "r.trace")
    bf = load(tmp_path / "r.trace").buffers
    assert col(bf, "generation") == [0, 1]
    assert col(bf, "base") == [0x1000, 0x9000]
    assert col(bf, "freed") == [None, None]


def test_host_address_resolution(tmp_path):
    b = TraceBuilder()
    b.backend(0, "CPU", device_type=0, device_ptr=CPU_DEV)
    b.backend(1, "GPU", device_type=1, device_ptr=GPU_DEV)
    b.buffer(0x1, base=0x1000, size=0x100, is_host=True, device_ptr=CPU_DEV)
    b.buffer(0x2, base=0x2000, size=0x100, is_host=True, device_ptr=CPU_DEV)
    b.buffer(0x3, base=0x3000, size=0x1000, is_host=False, device_ptr=GPU_DEV)  # not host
    c = b.call("buf_get_tensor", 10, 20)
    addrs = [0x1000, 0x10FF, 0x1100, 0x2080, 0x0FFF, 0x3010, 0x9000]
    for a in addrs:
        b.access(c, "write", 0, a, 1)
    # Host memory reused: a small buffer at 0x8000 until t=100, then a bigger one there.
    b.buffer(0x4, base=0x8000, size=0x10, is_host=True, device_ptr=CPU_DEV, t=0)
    b.buffer(0x4, BUF_FREED, base=0x8000, size=0x10, is_host=True, device_ptr=CPU_DEV, t=100)
    b.buffer(0x5, base=0x8000, size=0x100, is_host=True, device_ptr=CPU_DEV, t=200)
    early = b.call("buf_get_tensor", 30, 40)
    b.access(early, "write", 0, 0x8005, 1)
    b.access(early, "write", 0, 0x8050, 1)  # beyond the buffer alive at the time
    late = b.call("buf_get_tensor", 250, 260)
    b.access(late, "write", 0, 0x8050, 1)
    b.write(tmp_path / "h.trace")
    ac = load(tmp_path / "h.trace").accesses
    assert col(ac, "buffer") == [0x1, 0x1, 0, 0x2, 0, 0, 0, 0x4, 0, 0x5]
    assert col(ac, "offset") == [0, 0xFF, 0x1100, 0x80, 0x0FFF, 0x3010, 0x9000, 5, 0x8050,
                                 0x50]


def test_empty_trace_has_typed_frames(tmp_path):
    p = tmp_path / "empty.trace"
    TraceBuilder().write(p, extra_zero_chunks=2)
    t = load(p)
    for frame in EXPECTED_DTYPES:
        assert len(getattr(t, frame)) == 0
    check_dtypes(t)
    assert t.meta == {} and summarize(t) == {
        "graphs": 0, "backends": [], "allreduce": [],
        "build": {"llama_build": None, "llama_commit": None, "ggml_version": None, "ggml_commit": None,
                  "hooks_build": None, "backend_features": {}}}
    # header only, no chunk at all
    with open(p, "r+b") as f:
        f.truncate(HEADER_SIZE)
    check_dtypes(load(p))


def test_tick_clock_interpolation():
    header = {"t0_monotonic_ns": 10_000, "t0_ticks": 1_000, "ns_per_tick": 0.3}
    clocks = np.zeros(3, CLOCK_DTYPE)
    # ticks run at 2/ns for the first 1000 ns, then at 4/ns; one bad sample goes backwards.
    clocks["ticks"] = [3_000, 7_000, 6_000]
    clocks["monotonic_ns"] = [11_000, 12_000, 11_500 - 1_000]
    c = TickClock.from_trace(header, clocks)
    got = c.to_ns(np.array([1_000, 2_000, 3_000, 5_000, 7_000, 9_000, 0], np.uint64))
    # edges use the overall slope: 2000 ns over 6000 ticks
    assert got.tolist() == [0, 500, 1000, 1500, 2000, 2000 + 667, -333]
    one = TickClock.from_trace(header, np.zeros(0, CLOCK_DTYPE))
    assert one.to_ns(np.array([1_000, 2_000], np.uint64)).tolist() == [0, 300]


@pytest.mark.parametrize("ticks_per_ns, header_ns_per_tick", [(1, None), (3, 0.34), (2, 0.5)])
def test_record_clock_to_ns(tmp_path, ticks_per_ns, header_ns_per_tick):
    # (1, None): no TSC, ticks are CLOCK_MONOTONIC ns. (3, 0.34): the header's calibration is
    # off; the CLOCK records make times exact anyway.
    t0_ticks = TraceBuilder().t0 if ticks_per_ns == 1 else 10**9
    b = TraceBuilder(ticks_per_ns=ticks_per_ns, header_ns_per_tick=header_ns_per_tick,
                     t0_ticks=t0_ticks)
    b.clock(1_000_000)
    b.clock(9_000_000, thread=1)
    for t in (10, 500_000, 8_999_999, 20_000_000):
        b.call("user_mark", t)
    b.write(tmp_path / "c.trace")
    t = load(tmp_path / "c.trace")
    assert col(t.calls, "t_begin") == [10, 500_000, 8_999_999, 20_000_000]


def many_calls(n: int, threads: int = 3) -> TraceBuilder:
    b = TraceBuilder()
    for i in range(n):
        b.call("graph_compute", 10 * i, 10 * i + 5, thread=i % threads, split=i)
    return b


@pytest.mark.parametrize("cut", [
    HEADER_SIZE + 100 * RECORD_SIZE + 17,          # mid-record in the first chunk
    HEADER_SIZE + CHUNK_SIZE + 30,                 # inside the second chunk's header
    HEADER_SIZE + CHUNK_SIZE + 5 * RECORD_SIZE,    # on a record boundary
    HEADER_SIZE + 2 * CHUNK_SIZE + 777,            # mid-chunk, mid-record
    HEADER_SIZE + 5 * CHUNK_SIZE - 1,              # one byte short of the last chunk
])
def test_truncated_file_keeps_complete_records(tmp_path, cut):
    b = many_calls(4000)
    p = tmp_path / "cut.trace"
    offsets = b.write(p)
    data = p.read_bytes()
    assert len(data) > cut
    p.write_bytes(data[:cut])
    raw = read_trace_file(p)
    assert raw.truncated
    want = np.flatnonzero(offsets + RECORD_SIZE <= cut)
    got = np.sort(raw.calls["split"])
    assert got.tolist() == want.tolist()  # split = the record's position in the builder
    assert len(load(p).calls) == len(want)


def test_zero_record_ends_chunk(tmp_path):
    b = many_calls(50, threads=1)
    p = tmp_path / "z.trace"
    offsets = b.write(p)
    data = bytearray(p.read_bytes())
    o = offsets[20]
    data[o: o + RECORD_SIZE] = bytes(RECORD_SIZE)  # an unwritten record ...
    data[offsets[21]] = 0xEE  # ... followed by junk (an unknown type byte, too)
    p.write_bytes(bytes(data))
    t = load(p)
    assert col(t.calls, "split") == list(range(20))


def test_unknown_record_type(tmp_path):
    b = many_calls(10, threads=1)
    b.raw(bytes([42]) + bytes(63))
    b.call("graph_compute", 500, 600, split=99)
    p = tmp_path / "u.trace"
    b.write(p)
    with pytest.raises(TraceFormatError, match=r"u\.trace.*unknown type byte.*type 42"):
        load(p)
    t = load(p, strict=False)
    assert len(t.calls) == 11
    assert len(t.warnings) == 1 and "1 record(s)" in t.warnings[0]
    assert read_trace_file(p, strict=False).unknown_records == 1


def test_unused_chunks_are_skipped(tmp_path):
    b = many_calls(3000, threads=2)
    p = tmp_path / "pre.trace"
    b.write(p, extra_zero_chunks=4)
    data = bytearray(p.read_bytes())
    # An unused (pre-extended) chunk in the middle with a stray non-zero byte in it.
    mid = HEADER_SIZE + 2 * CHUNK_SIZE
    data[mid: mid] = bytes(CHUNK_SIZE)
    data[mid + 5 * RECORD_SIZE] = REC_CALL
    p.write_bytes(bytes(data))
    assert len(load(p).calls) == 3000


@pytest.mark.parametrize("content, message", [
    (b"", "too small"),
    (b"GGMLTRC\0" + bytes(40), "too small"),
    (b"<html>not a trace</html>" + bytes(5000), "bad magic"),
    (bytes(8192), "bad magic"),
])
def test_bad_files(tmp_path, content, message):
    p = tmp_path / "bad.trace"
    p.write_bytes(content)
    with pytest.raises(TraceFormatError, match=message) as e:
        load(p)
    assert str(p) in str(e.value)


@pytest.mark.parametrize("field, offset, value, message", [
    ("version", 8, 2, "unsupported ggml-trace format version 2"),
    ("header_size", 12, 512, "header_size is 512"),
    ("record_size", 16, 32, "record_size is 32"),
    ("chunk_size", 20, 4096, "chunk_size is 4096"),
])
def test_bad_header_fields(tmp_path, field, offset, value, message):
    p = tmp_path / "h.trace"
    many_calls(3).write(p)
    data = bytearray(p.read_bytes())
    data[offset: offset + 4] = value.to_bytes(4, "little")
    p.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match=message):
        load(p)


def test_missing_file(tmp_path):
    with pytest.raises(TraceFormatError, match="cannot read"):
        load(tmp_path / "nope.trace")


def test_strings_pieces(tmp_path):
    cmdline = "llama-cli " + " ".join(f"--opt{i}=value{i}" for i in range(30))
    cmdline = (cmdline + "x" * 300)[:300]
    b = TraceBuilder()
    b.meta("cmdline", cmdline)
    b.add_string(cmdline, force=True, thread=1)  # every piece again, from another thread
    b.meta("empty", "")
    lost = "a" * 100  # three pieces; piece 1 will be lost
    b.meta("lost", lost)
    p = tmp_path / "s.trace"
    offsets = b.write(p, threads=2)
    raw = read_trace_file(p)
    assert raw.strings[string_id(cmdline.encode())] == cmdline
    # Drop the middle piece of `lost`: find it among the string records.
    s = raw.string_recs
    i = np.flatnonzero((s["id"] == string_id(lost.encode())) & (s["piece"] == 1))
    assert len(i) == 1
    data = bytearray(p.read_bytes())
    hit = [o for o in offsets if data[o] == 1 and int.from_bytes(data[o + 8: o + 16], "little")
           == string_id(lost.encode()) and int.from_bytes(data[o + 2: o + 4], "little") == 1]
    data[hit[0]: hit[0] + RECORD_SIZE] = bytes([1]) + bytes(63)  # a string record for id 0
    p.write_bytes(bytes(data))
    t = load(p)
    assert t.meta == {"cmdline": cmdline, "empty": "", "lost": INCOMPLETE_STRING}
    assert string_id(b"") == 0 and 0 not in raw.strings
    assert len(cmdline.encode()) == 300


def test_hostile_names(tmp_path):
    names = ["<script>alert(1)</script>", "line1\nline2\r\n\ttab", "quote\"'`;DROP TABLE",
             "ünïcödé ☃ 名前", b"bad\xff\xfeutf8\xc3"]
    b = TraceBuilder()
    b.backend(0, "CPU", device_type=0, device_ptr=CPU_DEV)
    b.buffer(0x1, base=0x1000, size=0x1000, is_host=True, device_ptr=CPU_DEV)
    c = b.call("graph_compute", 0, 10, backend=0, split=0)
    for i, n in enumerate(names):
        b.access(c, "read", 0x1, i, 1, tensor=n, node=n)
    b.call("user_mark", 5, obj=names[0])
    b.write(tmp_path / "x.trace")
    t = load(tmp_path / "x.trace")
    want = names[:4] + ["bad\ufffd\ufffdutf8\ufffd"]
    assert col(t.accesses, "tensor") == want
    assert col(t.accesses, "node") == want
    assert col(t.marks, "name") == [names[0]]


def test_orphans_and_unknown_backend(tmp_path):
    b = TraceBuilder()
    b.backend(0, "CPU", device_type=0)
    b.backend(3, None, device_type=1)  # its name string is absent
    b.call("graph_compute", 20, 30, backend=3, split=1)
    c = b.call("graph_compute", 0, 10, backend=7, split=0)  # no BackendRec for 7
    b.access(c, "read", 0x99, 0, 4, tensor="t")             # buffer never announced
    b.access(12345, "write", 0x99, 4, 4, tensor="u")        # its call record was lost
    b.write(tmp_path / "o.trace")
    t = load(tmp_path / "o.trace")
    assert col(t.calls, "backend") == ["backend#7", "backend#3"]
    assert [b["name"] for b in summarize(t)["backends"]] == ["CPU", "backend#3"]
    assert summarize(t)["backends"][1]["splits"] == 1
    ac = t.accesses
    assert col(ac, "backend") == ["backend#7", None]
    assert col(ac, "t_begin") == [0, None]
    assert col(ac, "kind") == ["graph_compute", None]
    assert col(ac, "thread") == [0, 0]
    check_dtypes(t)


def test_synthetic_trace_loads(tmp_path):
    p = tmp_path / "syn.trace"
    n = synth_trace(p, 20_000, threads=3)
    t = load(p)
    assert len(t.calls) + len(t.accesses) == n
    check_dtypes(t)
    # raw host addresses in the synthetic trace all fall inside its host buffers
    assert (t.accesses["buffer"] != 0).all()
    assert summarize(t)["backends"][0]["name"] == "CUDA0"
