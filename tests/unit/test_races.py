"""Tests of the race analysis (analysis.races), on traces made by hand with tests/support/tracegen.py.

The scenarios follow llama.cpp issue #23321: an async backend A queues work that reads bytes X, and a
later operation on another backend writes X (a different tensor the allocator placed there)
while nothing orders it after A's work.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from support.race_cases import A, B, CPU, DBASE, DBUF, EV, EV2, HBASE, HBUF, RPC, US, analyse, builder, findings, reuse_graph, split
from support.tracegen import TraceBuilder

from ggml_trace.analysis import load, races
from ggml_trace.analysis.race_report import missing_words
from ggml_trace.analysis.races import CLEAR_WAITS_FOR_QUEUE, clear_waits_for_queue, format_report
from ggml_trace.analysis.schema import FINDINGS
from ggml_trace.analysis.trace_format import BUF_ALLOCATED, BUF_FREED
from ggml_trace.tracer.cli import main as cli


# -- the ordering rules -----------------------------------------------------------------------

def test_async_read_then_cpu_reuse_is_a_race(tmp_path):
    b = builder()
    reuse_graph(b, 12, 1_000 * US)
    r = analyse(tmp_path, b)
    (f,) = findings(r)
    assert f["class"] == "read-after-reuse"
    assert f["count"] == 1
    assert (f["a"]["backend"], f["a"]["split"], f["a"]["kind"]) == ("VDEV0", 3, "graph_compute")
    assert (f["a"]["tensor"], f["a"]["node"], f["a"]["mode"]) == ("inp_embd", "mul_mat-0", "read")
    assert (f["b"]["backend"], f["b"]["split"], f["b"]["tensor"]) == ("CPU", 4, "ffn_out-0")
    assert f["b"]["mode"] == "write" and f["a"]["graph"] == f["b"]["graph"] == 12
    assert f["buffer"] == hex(HBUF) and f["range"] == [0x100, 0x200]
    assert "inp_embd" in f["missing"] and "ffn_out-0" in f["missing"]
    assert "VDEV0 split 3" in f["missing"] and "CPU split 4" in f["missing"]
    assert f["missing"].endswith("; an event_synchronize or synchronize on VDEV0 between them would order them")
    assert len(r.findings) == 1 and len(r.pairs) == 1
    assert r.operations == 2 and r.accesses == 3


@pytest.mark.parametrize("queue_a,queue_b,thread_b", [(True, False, 0), (True, True, 0), (False, True, 0),
                                                     (False, False, 1)])
def test_the_missing_ordering_is_a_whole_sentence(queue_a, queue_b, thread_b):
    """Every variant of `missing` says what the ordering it names would do."""
    a = dict(backend="VDEV0", kind="graph_compute", split=3, thread=0, graph=1, mode="read", tensor="h",
             queue=queue_a)
    b = dict(backend="VDEV1", kind="graph_compute", split=4, thread=thread_b, graph=1, mode="write", tensor="z",
             queue=queue_b)
    words = missing_words(a, b)
    assert words.startswith("nothing orders VDEV0 split 3 (graph 1, reads h) before VDEV1 split 4 (graph 1)")
    assert words.endswith(" would order them") or words.endswith("(thread joins and locks are not traced)"), words


@pytest.mark.parametrize("tensor,llama", [("attn_inp_k_idxs", True), ("inp_tokens", True), ("x", False)])
def test_the_missing_ordering_of_an_input_read_in_place(tensor, llama):
    """A device read a graph input in host memory, and the program wrote it for a later graph (an
    integrated GPU, docs/integrated.md): the sentence names the synchronization, and llama.cpp's
    place for it only for llama.cpp's input names."""
    a = dict(backend="VDEV0", kind="graph_compute", split=0, thread=0, graph=1, mode="read", tensor=tensor,
             queue=True)
    b = dict(backend=None, kind="host_write_inferred", split=None, thread=0, graph=None, mode="write",
             tensor=tensor, queue=False)
    words = missing_words(a, b)
    assert words.startswith(f"nothing orders VDEV0 split 0 (graph 1, reads {tensor} in place from host memory) "
                            f"before the program (thread 0, inferred store) writes {tensor} for a later graph")
    assert ("process_ubatch before res->set_inputs()" in words) == llama, words
    # the device's own memory, written by the program through ggml: the general sentence
    words = missing_words(a, dict(b, backend="VDEV0", kind="buf_set_tensor"))
    assert "in place" not in words and words.endswith("would order them"), words


def test_synchronize_orders_it(tmp_path):
    b = builder()
    reuse_graph(b, 0, 0, between=lambda b, t: b.call("synchronize", t, t + 5, backend=A))
    assert findings(analyse(tmp_path, b)) == []


def test_event_record_and_synchronize_order_it(tmp_path):
    def between(b, t):
        b.call("event_record", t, t + 5, backend=A, obj=EV)
        b.call("event_synchronize", t + 50 * US, t + 60 * US, backend=A, obj=EV)
    b = builder()
    reuse_graph(b, 0, 0, between=between)
    assert findings(analyse(tmp_path, b)) == []


def test_event_synchronize_without_a_record_after_the_split_does_not(tmp_path):
    def between(b, t):  # the event was recorded before A's split was queued
        b.call("event_synchronize", t + 50 * US, t + 60 * US, backend=A, obj=EV)
    b = builder()
    b.call("event_record", 100, 200, backend=A, obj=EV)
    reuse_graph(b, 0, 1_000 * US, between=between)
    assert len(findings(analyse(tmp_path, b))) == 1


@pytest.mark.parametrize("other", [B, CPU])
def test_synchronize_on_an_unrelated_backend_does_not(tmp_path, other):
    b = builder()
    reuse_graph(b, 0, 0, between=lambda b, t: b.call("synchronize", t, t + 5, backend=other))
    (f,) = findings(analyse(tmp_path, b))
    assert f["class"] == "read-after-reuse"


def test_event_wait_orders_another_queue(tmp_path):
    def between(b, t):
        b.call("event_record", t, t + 5, backend=A, obj=EV)
        b.call("event_wait", t + 10 * US, t + 11 * US, backend=B, obj=EV)
    b = builder()
    reuse_graph(b, 0, 0, between=between, writer=B)
    assert findings(analyse(tmp_path, b)) == []


def test_without_the_wait_another_queue_races(tmp_path):
    b = builder()
    reuse_graph(b, 0, 0, between=lambda b, t: b.call("event_record", t, t + 5, backend=A,
                                                     obj=EV),
                writer=B)
    (f,) = findings(analyse(tmp_path, b))
    assert (f["a"]["backend"], f["b"]["backend"]) == ("VDEV0", "VDEV1")
    assert "event_wait on VDEV1" in f["missing"]


def test_a_wait_on_another_event_does_not_order_it(tmp_path):
    def between(b, t):
        b.call("event_record", t, t + 5, backend=A, obj=EV)
        b.call("event_wait", t + 10 * US, t + 11 * US, backend=B, obj=EV2)
    b = builder()
    reuse_graph(b, 0, 0, between=between, writer=B)
    assert len(findings(analyse(tmp_path, b))) == 1


def test_the_wait_uses_the_latest_record_before_it(tmp_path):
    def between(b, t):  # EV re-recorded on B (empty) after A's record: waiting on it orders nothing
        b.call("event_record", t, t + 5, backend=A, obj=EV)
        b.call("event_record", t + 5 * US, t + 6 * US, backend=B, obj=EV)
        b.call("event_wait", t + 10 * US, t + 11 * US, backend=B, obj=EV)
    b = builder()
    reuse_graph(b, 0, 0, between=between, writer=B)
    assert len(findings(analyse(tmp_path, b))) == 1


def test_queue_order_on_one_backend(tmp_path):
    b = builder()
    reuse_graph(b, 0, 0, writer=A)  # the writer is queued on A after the reader: FIFO
    assert findings(analyse(tmp_path, b)) == []


def test_host_work_before_the_enqueue_is_ordered(tmp_path):
    b = builder()
    split(b, CPU, 0, 0, 0, [("write", HBUF, 0x100, 256, "inp_embd")])
    split(b, A, 100 * US, 0, 1, [("read", HBUF, 0x100, 256, "inp_embd")])
    assert findings(analyse(tmp_path, b)) == []


def test_async_copy_waits_for_its_source_queue(tmp_path):
    """Rule 7: A writes t; cpy_tensor_async A -> B reads t; B's split reads the copy."""
    def graph(b, copy_src):
        split(b, A, 0, 0, 0, [("write", DBUF, 0, 256, "t")])
        cp = b.call("cpy_tensor_async", 20 * US, 21 * US, backend=B, backend2=copy_src,
                    sched=0, graph=0, split=1, arg=256)
        b.access(cp, "read", DBUF, 0, 256, tensor="t")
        b.access(cp, "write", DBUF, 0x1000, 256, tensor="VDEV1#t#0")
        split(b, B, 30 * US, 0, 1, [("read", DBUF, 0x1000, 256, "VDEV1#t#0")])
    b = builder()
    graph(b, A)
    assert findings(analyse(tmp_path, b, "ok.trace")) == []
    b = builder()  # a copy that claims a synchronous source does not wait for A
    graph(b, CPU)
    (f,) = findings(analyse(tmp_path, b, "bad.trace"))
    assert f["class"] == "read-after-write" and f["a"]["tensor"] == f["b"]["tensor"] == "t"
    assert (f["a"]["kind"], f["b"]["kind"]) == ("graph_compute", "cpy_tensor_async")


def test_a_device_to_device_copy_runs_on_the_source_queue(tmp_path):
    """Rule 7: A's later work that overwrites the copied bytes is ordered after the copy, because
    the copy runs in A's queue order; B's split after the copy waits for it."""
    b = builder()
    split(b, A, 0, 0, 0, [("write", DBUF, 0, 256, "t")])
    cp = b.call("cpy_tensor_async", 20 * US, 21 * US, backend=B, backend2=A, sched=0, graph=0, split=1, arg=256)
    b.access(cp, "read", DBUF, 0, 256, tensor="t")
    b.access(cp, "write", DBUF, 0x1000, 256, tensor="VDEV1#t#0")
    split(b, B, 30 * US, 0, 1, [("read", DBUF, 0x1000, 256, "VDEV1#t#0")])
    split(b, A, 40 * US, 0, 2, [("write", DBUF, 0, 256, "u")])  # reuses t's bytes on A
    assert findings(analyse(tmp_path, b)) == []


def test_a_declined_copy_queues_nothing(tmp_path):
    """A cpy_tensor_async without accesses was declined: it adds no ordering of its own."""
    b = builder()
    split(b, A, 0, 0, 0, [("write", DBUF, 0, 256, "t")])
    b.call("cpy_tensor_async", 20 * US, 21 * US, backend=B, backend2=A, flags=2)
    split(b, B, 30 * US, 0, 1, [("read", DBUF, 0, 256, "t")])
    (f,) = findings(analyse(tmp_path, b))
    assert f["class"] == "read-after-write"


def comm_allreduce(b: TraceBuilder, t: int, seq: int, declined: bool = False) -> None:
    """One backend allreduce call over A and B (one record per device, same arg)."""
    for be, off in ((A, 0x2000), (B, 0x3000)):
        cid = b.call("comm_allreduce", t, t + 5 * US, backend=be, obj=0xC0, arg=seq,
                     flags=2 if declined else 0)
        if not declined:
            b.access(cid, "read", DBUF, off, 64, tensor=f"attn_out@{be}")
            b.access(cid, "write", DBUF, off, 64, tensor=f"attn_out@{be}")


@pytest.mark.parametrize("declined", [False, True])
def test_a_backend_allreduce_is_a_barrier(tmp_path, declined):
    """Rule 8: after an accepted comm allreduce, B's work follows A's work enqueued before it
    (each device's part waits for every peer); a declined one orders nothing."""
    b = builder()
    split(b, A, 0, 0, 0, [("read", DBUF, 0, 256, "t")])
    comm_allreduce(b, 20 * US, 7, declined)
    split(b, B, 30 * US, 0, 1, [("write", DBUF, 0, 256, "u")])
    f = findings(analyse(tmp_path, b))
    if declined:
        assert [x["class"] for x in f] == ["read-after-reuse"]  # other tensor, same bytes
    else:
        assert f == []


def test_a_backend_allreduce_orders_only_work_before_it(tmp_path):
    """A's work enqueued after the call is not ordered before B's later work."""
    b = builder()
    comm_allreduce(b, 0, 1)
    split(b, A, 20 * US, 0, 0, [("read", DBUF, 0, 256, "t")])
    comm_allreduce(b, 40 * US, 2, declined=True)
    split(b, B, 60 * US, 0, 1, [("write", DBUF, 0, 256, "u")])
    (f,) = findings(analyse(tmp_path, b))
    assert (f["a"]["backend"], f["b"]["backend"]) == ("VDEV0", "VDEV1")


def test_write_after_write(tmp_path):
    b = builder()
    s = b.call("set_tensor_async", 0, 10, backend=A, obj=1, arg=256)
    b.access(s, "write", DBUF, 0, 256, tensor="kv")
    c = b.call("buf_set_tensor", 100, 200, backend=A, obj=1, arg=256)
    b.access(c, "write", DBUF, 0, 256, tensor="kv")
    (f,) = findings(analyse(tmp_path, b))
    assert f["class"] == "write-after-write"
    assert (f["a"]["kind"], f["b"]["kind"]) == ("set_tensor_async", "buf_set_tensor")


def test_buffer_calls_do_not_join_the_queue(tmp_path):
    """A host get of bytes A's queued split writes: the buffer call does not wait for A."""
    b = builder()
    split(b, A, 0, 0, 0, [("write", DBUF, 0, 256, "logits")])
    g = b.call("buf_get_tensor", 100 * US, 101 * US, backend=A, arg=256)
    b.access(g, "read", DBUF, 0, 256, tensor="logits")
    (f,) = findings(analyse(tmp_path, b))
    assert f["class"] == "read-after-write" and f["b"]["kind"] == "buf_get_tensor"
    b = builder()
    split(b, A, 0, 0, 0, [("write", DBUF, 0, 256, "logits")])
    b.call("synchronize", 50 * US, 60 * US, backend=A)
    g = b.call("buf_get_tensor", 100 * US, 101 * US, backend=A, arg=256)
    b.access(g, "read", DBUF, 0, 256, tensor="logits")
    assert findings(analyse(tmp_path, b, "synced.trace")) == []


def test_get_tensor_async_then_event_synchronize(tmp_path):
    """The async get writes host memory when it runs: reading it needs the host to wait."""
    def trace(wait: bool):
        b = builder()
        g = b.call("get_tensor_async", 0, 10, backend=A, arg=256)
        b.access(g, "read", DBUF, 0, 256, tensor="logits")
        b.access(g, "write", HBUF, 0x4000, 256)  # the caller's host memory (no tensor name)
        b.call("event_record", 20, 30, backend=A, obj=EV)
        if wait:
            b.call("event_synchronize", 40, 50, backend=A, obj=EV)
        c = b.call("buf_set_tensor", 100, 200, backend=A, arg=256)
        b.access(c, "read", HBUF, 0x4000, 256)
        b.access(c, "write", DBUF, 0x8000, 256, tensor="inp")
        return b
    assert findings(analyse(tmp_path, trace(True), "wait.trace")) == []
    (f,) = findings(analyse(tmp_path, trace(False), "nowait.trace"))
    assert f["class"] == "read-after-write" and f["a"]["tensor"] is None


def test_rpc_and_cpu_are_synchronous(tmp_path):
    b = builder()
    reuse_graph(b, 0, 0, writer=CPU)  # a race because A is async ...
    b2 = builder()
    split(b2, RPC, 0, 0, 3, [("read", HBUF, 0x100, 256, "inp_embd")])
    split(b2, CPU, 500 * US, 0, 4, [("write", HBUF, 0x100, 256, "ffn_out-0")])
    assert len(findings(analyse(tmp_path, b, "a.trace"))) == 1
    assert findings(analyse(tmp_path, b2, "rpc.trace")) == []  # ... and none with RPC


def clear_after_queued_read(name: str, sync: bool = False) -> TraceBuilder:
    """An async backend `name` queues a split that reads the KV cache in its own buffer, then the
    host clears that whole buffer (llama.cpp's warm-up: llama_memory_clear right after the decode),
    with a synchronize of the backend between them or not."""
    b = TraceBuilder(hooks_build="test")
    b.thread(0, name="main")
    b.backend(0, name, name, device_type=1, has_async=True, has_events=True)
    b.buffer(DBUF, BUF_ALLOCATED, base=DBASE, size=1 << 16, usage=0, buft_name=name, device_ptr=0x6000_0000)
    split(b, 0, 0, 0, 0, [("read", DBUF, 0x100, 256, "cache_k_l0", "mul_mat-0")])
    if sync:
        b.call("synchronize", 200 * US, 210 * US, backend=0)
    clear = b.call("buf_clear", 500 * US, 520 * US, backend=0, obj=DBUF, arg=1 << 16)
    b.access(clear, "write", DBUF, 0, 1 << 16)
    return b


@pytest.mark.parametrize("name,ordered", [("CUDA0", False), ("ROCm0", False), ("Vulkan0", False), ("VDEV0", True)])
def test_a_buffer_clear_waits_for_the_queue_only_on_the_backends_whose_clear_does(tmp_path, name, ordered):
    """Rule 6 per backend: CUDA's clear is a memset on cudaStreamPerThread and a synchronize of that
    stream alone, which nothing orders after ggml's non-blocking streams: the split's read and the
    clear race. The virtual devices' clear drains their streams first: nothing to report."""
    found = findings(analyse(tmp_path, clear_after_queued_read(name)))
    if ordered:
        assert found == []
    else:
        (f,) = found
        assert f["class"] == "read-after-reuse" and f["a"]["tensor"] == "cache_k_l0"
        assert (f["a"]["backend"], f["a"]["kind"]) == (name, "graph_compute")
        assert (f["b"]["backend"], f["b"]["kind"], f["b"]["mode"]) == (name, "buf_clear", "write")
        assert f["missing"].endswith(f"synchronize on {name} between them would order them"), f["missing"]
    # a synchronize of the backend before the clear orders it on every backend
    assert findings(analyse(tmp_path, clear_after_queued_read(name, sync=True), "sync.trace")) == []


def test_which_backends_clear_after_their_queue_is_read_from_one_table():
    backends = pd.DataFrame({"name": pd.Categorical(["CUDA0", "VDEV1", "Vulkan0", "RPC0[127.0.0.1:50052]", "CPU",
                                                     "MTL0", None, "VDEV0"])})
    assert clear_waits_for_queue(backends).tolist() == [False, True, False, False, False, False, False, True]
    assert {f for f, waits in CLEAR_WAITS_FOR_QUEUE.items() if waits} == {"VDEV"}


def test_cpu_only_trace_has_no_races(tmp_path):
    b = builder()
    rng = np.random.default_rng(1)
    for g in range(20):
        for s in range(6):
            off = int(rng.integers(0, 64)) * 256
            split(b, CPU if s % 2 else RPC, (g * 6 + s) * 100 * US, g, s,
                  [("read", HBUF, off, 4096, f"t{s - 1}"), ("write", HBUF, off + 128, 4096,
                                                            f"t{s}")])
        c = b.call("buf_get_tensor", (g * 6 + 6) * 100 * US - 50, (g * 6 + 6) * 100 * US - 10)
        b.access(c, "read", HBUF, 0, 1 << 16, tensor="out")
    r = analyse(tmp_path, b)
    assert findings(r) == [] and len(r.findings) == 0 and r.accesses == 20 * 13


def test_threads_without_traced_synchronization_race(tmp_path):
    b = builder()
    b.thread(2, name="other")
    split(b, CPU, 0, 0, 0, [("write", HBUF, 0, 256, "a")])
    split(b, CPU, 100 * US, 1, 0, [("read", HBUF, 0, 256, "a")], thread=2)
    (f,) = findings(analyse(tmp_path, b))
    assert (f["a"]["thread"], f["b"]["thread"]) == (0, 2) and "threads 0 and 2" in f["missing"]


def test_a_host_thread_synchronizing_the_queue_orders_another_threads_enqueue(tmp_path):
    """Thread 0 enqueues A's split; thread 2 synchronizes A, then writes: ordered."""
    b = builder()
    b.thread(2, name="other")
    split(b, A, 0, 0, 3, [("read", HBUF, 0, 256, "inp_embd")])
    b.call("synchronize", 50 * US, 60 * US, thread=2, backend=A)
    split(b, CPU, 100 * US, 0, 4, [("write", HBUF, 0, 256, "z")], thread=2)
    assert findings(analyse(tmp_path, b)) == []


# -- repetition, timing, memory -----------------------------------------------------------------

def test_repetition_is_one_finding(tmp_path):
    b = builder()
    for g in range(20):
        reuse_graph(b, g, g * 2_000 * US)
        b.call("synchronize", g * 2_000 * US + 1_000 * US, g * 2_000 * US + 1_001 * US,
               backend=A)
    r = analyse(tmp_path, b)
    (f,) = findings(r)
    assert f["count"] == 20 and len(r.pairs) == 20
    assert f["first"]["graph"] == 0 and f["last"]["graph"] == 19
    assert f["first"]["t_us"] == pytest.approx(0) and f["last"]["t_us"] == pytest.approx(38_000)


def test_different_tensors_are_different_findings(tmp_path):
    b = builder()
    for g in range(3):
        t0 = g * 2_000 * US
        split(b, A, t0, g, 3, [("read", HBUF, 0, 256, "inp_embd"),
                               ("read", HBUF, 0x1000, 256, "pos")])
        split(b, CPU, t0 + 500 * US, g, 4, [("write", HBUF, 0, 256, "z"),
                                            ("write", HBUF, 0x1000, 256, "z2")])
        b.call("synchronize", t0 + 1_000 * US, t0 + 1_001 * US, backend=A)
    fs = findings(analyse(tmp_path, b))
    assert sorted((f["a"]["tensor"], f["b"]["tensor"], f["count"]) for f in fs) == [
        ("inp_embd", "z", 3), ("pos", "z2", 3)]


def test_overlapping_execution_is_overlapped_not_manifested(tmp_path):
    """A ran during the CPU split [500, 600]: the operations overlapped, but which bytes each had
    touched when is not known: no order of the accesses is proven."""
    b = builder()
    reuse_graph(b, 0, 0, device=(450 * US, 550 * US))
    (f,) = findings(analyse(tmp_path, b))
    assert (f["verdict"], f["manifested"], f["margin_us"], f["inverted"]) == ("overlapped", False, None, False)
    assert f["a"]["device"] is True and f["a"]["t_begin_us"] == pytest.approx(450)
    assert f["b"]["device"] is False and f["b"]["t_begin_us"] == pytest.approx(500)


def test_overlapping_splits_of_many_nodes_are_overlapped_not_manifested(tmp_path):
    """A's read is one node's of three: the split overlapped the CPU's write, but the read itself
    may have ended before the write began, so nothing is proven out of order."""
    b = builder()
    reuse_graph(b, 0, 0, device=(450 * US, 550 * US), nodes=3)
    r = analyse(tmp_path, b)
    (f,) = findings(r)
    assert (f["verdict"], f["manifested"], f["inverted"], f["margin_us"]) == ("overlapped", False, False, None)
    assert f["a"]["timing"] == ("on its device, from the virtual device's own record (a split of 3 nodes: each "
                                "access lies somewhere inside)")
    assert f["b"]["timing"] == "the host call"
    out = format_report(r)
    assert "0 manifested, 0 latent, 1 overlapped" in out and "OVERLAPPED, not proven out of order" in out


def test_a_split_of_many_nodes_run_entirely_after_the_write_is_manifested(tmp_path):
    b = builder()
    reuse_graph(b, 0, 0, device=(700 * US, 750 * US), nodes=3)  # the write: [500, 600] us
    (f,) = findings(analyse(tmp_path, b))
    assert (f["verdict"], f["inverted"]) == ("manifested", True)


def test_occurrences_are_counted_per_verdict(tmp_path):
    """One finding over graphs of each verdict: the counts add up to the occurrences, the
    verdict is the strongest proven, and the listing says how they divide."""
    b = builder()
    for g, (dev, nodes) in enumerate([((100, 200), 1), ((450, 550), 3), ((450, 550), 3), ((100, 200), 1)]):
        reuse_graph(b, g, g * 2_000 * US, device=(dev[0] * US, dev[1] * US), nodes=nodes)
        b.call("synchronize", g * 2_000 * US + 1_000 * US, g * 2_000 * US + 1_001 * US, backend=A)
    r = analyse(tmp_path, b)
    row = r.findings.iloc[0]
    assert (row["count"], row["n_latent"], row["n_overlapped"], row["n_manifested"], row["n_undetermined"]) == (4, 2, 2, 0, 0)
    (f,) = findings(r)
    assert f["verdict"] == "overlapped" and f["occurrences"] == {"manifested": 0, "latent": 2, "undetermined": 0,
                                                                  "overlapped": 2}
    assert f["a"]["graph"] == 1  # the occurrence shown is one of the finding's own verdict
    assert "of 4 occurrences: 2 latent, 2 overlapped" in format_report(r)


def test_latent_with_margin(tmp_path):
    b = builder()
    reuse_graph(b, 0, 0, device=(100 * US, 200 * US))  # A done 300 us before the CPU split
    (f,) = findings(analyse(tmp_path, b))
    assert f["manifested"] is False and f["inverted"] is False
    assert f["margin_us"] == pytest.approx(300.0)


def test_inverted_order_is_manifested_and_flagged(tmp_path):
    """The device read ran 300 us after the CPU split overwrote the bytes: that is a corruption."""
    b = builder()
    reuse_graph(b, 0, 0, device=(900 * US, 950 * US))
    (f,) = findings(analyse(tmp_path, b))
    assert f["manifested"] is True and f["inverted"] is True
    assert f["margin_us"] is None


def test_findings_order_and_aggregates(tmp_path):
    b = builder()
    # graph 0: latent (margin 300); graph 1: manifested; same finding -> manifested, no margin
    reuse_graph(b, 0, 0, device=(100 * US, 200 * US))
    b.call("synchronize", 1_000 * US, 1_001 * US, backend=A)
    reuse_graph(b, 1, 2_000 * US, device=(650 * US, 750 * US))  # inverted: after the CPU split [500, 600]
    b.call("synchronize", 3_000 * US, 3_001 * US, backend=A)
    # another finding, latent with margin 50
    k = split(b, A, 4_000 * US, 2, 5, [("read", HBUF, 0x8000, 64, "k")], dur=1 * US)
    b.call("device_exec", 4_000 * US, 4_100 * US, thread=1, obj=k)
    split(b, CPU, 4_150 * US, 2, 6, [("write", HBUF, 0x8000, 64, "q")])
    r = analyse(tmp_path, b)
    fs = findings(r)
    assert [f["a"]["tensor"] for f in fs] == ["inp_embd", "k"]
    assert fs[0]["manifested"] and fs[0]["count"] == 2 and fs[0]["margin_us"] is None
    assert r.latent_margin_ns[0] == 300 * US  # graph 0's, kept for merging windows
    assert not fs[1]["manifested"] and fs[1]["margin_us"] == pytest.approx(50)
    # the manifested finding shows its manifested occurrence (graph 1), first seen in graph 0
    assert fs[0]["a"]["graph"] == fs[0]["b"]["graph"] == 1 and fs[0]["a"]["t_begin_us"] == pytest.approx(2_650)
    assert fs[0]["first"]["graph"] == 0 and fs[0]["first"]["t_us"] == pytest.approx(100)
    assert fs[0]["last"]["graph"] == 1
    assert "latent elsewhere" not in format_report(r)


def test_a_new_buffer_generation_is_other_memory(tmp_path):
    def trace(free: bool):
        b = builder()
        ptr, base = 0xC000, 0x9000_0000
        b.buffer(ptr, BUF_ALLOCATED, base=base, size=4096, is_host=True, buft_name="CPU",
                 device_ptr=0x6000_0000 + 0x100 * CPU, t=0)
        split(b, A, 10 * US, 0, 0, [("read", ptr, 0, 256, "old")])
        if free:
            b.buffer(ptr, BUF_FREED, size=4096, t=20 * US)
            b.buffer(ptr, BUF_ALLOCATED, base=base, size=4096, is_host=True, buft_name="CPU",
                     device_ptr=0x6000_0000 + 0x100 * CPU, t=30 * US)
        split(b, CPU, 100 * US, 0, 1, [("write", ptr, 0, 256, "new")])
        return b
    assert len(findings(analyse(tmp_path, trace(False), "same.trace"))) == 1
    assert findings(analyse(tmp_path, trace(True), "freed.trace")) == []


def test_unresolved_host_memory_is_ignored(tmp_path):
    b = builder()
    raw = 0x1234_0000  # in no known buffer
    split(b, A, 0, 0, 0, [("read", 0, raw, 256, "user_data")])
    split(b, CPU, 100 * US, 0, 1, [("write", 0, raw, 256, "other")])
    r = analyse(tmp_path, b)
    assert findings(r) == [] and r.accesses == 0


def test_raw_host_addresses_in_a_host_buffer_are_that_buffer(tmp_path):
    b = builder()
    split(b, A, 0, 0, 0, [("read", 0, HBASE + 0x100, 256, "inp_embd")])  # resolved to HBUF
    split(b, CPU, 100 * US, 0, 1, [("write", HBUF, 0x100, 256, "z")])
    (f,) = findings(analyse(tmp_path, b))
    assert f["buffer"] == hex(HBUF)


def test_disjoint_and_adjacent_bytes_do_not_conflict(tmp_path):
    b = builder()
    split(b, A, 0, 0, 0, [("read", HBUF, 0, 256, "a"), ("write", HBUF, 0x1000, 256, "b")])
    split(b, CPU, 100 * US, 0, 1, [("write", HBUF, 256, 256, "c"),    # adjacent
                                    ("read", HBUF, 0, 256, "a")])      # read-read
    assert findings(analyse(tmp_path, b)) == []


def test_empty_and_header_only_traces(tmp_path):
    r = analyse(tmp_path, TraceBuilder())
    assert findings(r) == [] and r.operations == 0 and r.accesses == 0
    assert list(r.findings.columns)[:5] == ["class", "manifested", "inverted", "margin_ns", "count"]


def test_the_findings_are_in_ns_and_their_json_in_us(tmp_path):
    """The frame has the schema's columns and dtypes, times in ns; the JSON is derived from it,
    the same times in µs, None where the frame has NA."""
    b = builder()
    reuse_graph(b, 0, 0, device=(100 * US + 1, 200 * US + 3))  # latent, margin 299_997 ns
    b.call("synchronize", 1_000 * US, 1_001 * US, backend=A)
    reuse_graph(b, 1, 2_000 * US, writer=RPC)  # another finding: host times only, no margin
    r = analyse(tmp_path, b)
    for frame in (r.findings, analyse(tmp_path, TraceBuilder(), "empty.trace").findings):
        assert {c: str(t) for c, t in frame.dtypes.items()} == FINDINGS
    assert list(r.findings["verdict"]) == ["undetermined", "latent"]  # no margin sorts first
    host, latent = r.findings.iloc[0], r.findings.iloc[1]
    assert latent["margin_ns"] == 299_997 and host["margin_ns"] is pd.NA
    assert (latent["a_t_begin_ns"], latent["a_t_end_ns"]) == (100_001, 200_003)
    assert latent["first_t_ns"] == latent["last_t_ns"] == 100_001
    g, f = findings(r)
    assert f["margin_us"] == 299.997 and g["margin_us"] is None and g["verdict"] == "undetermined"
    assert (f["a"]["t_begin_us"], f["a"]["t_end_us"]) == (100.001, 200.003)
    assert f["first"] == {"graph": 0, "t_us": 100.001} and f["range"] == [0x100, 0x200]
    assert g["b"]["t_begin_us"] == 2_500.0 and g["b"]["backend"] == "RPC0"


# -- the loader's device frame ------------------------------------------------------------------

def test_device_frame(tmp_path):
    b = builder()
    a, _ = reuse_graph(b, 7, 0, device=(100 * US, 200 * US))
    b.call("device_exec", 210 * US, 220 * US, thread=1, obj=a)  # a second piece of the same work
    p = tmp_path / "d.trace"
    b.write(p)
    t = load(p)
    d = t.device
    assert list(d.columns) == ["call_id", "kind", "backend", "graph", "split", "t_begin",
                               "t_end", "thread", "source", "start_estimated", "end_late"]
    assert list(d["source"]) == ["device", "device"] and not d["start_estimated"].any()
    assert list(d["call_id"]) == [a, a] and list(d["kind"]) == ["graph_compute"] * 2
    assert list(d["backend"]) == ["VDEV0"] * 2 and list(d["split"]) == [3, 3]
    assert list(d["t_begin"]) == [100 * US, 210 * US] and list(d["thread"]) == [1, 1]
    assert str(d["call_id"].dtype) == "uint64" and str(d["graph"].dtype) == "Int64"
    assert len(t.splits) == 2 and "device_exec" not in set(t.sync["kind"].astype(str))
    (f,) = findings(races(t))  # first to last device_exec of the call
    assert f["a"]["t_begin_us"] == pytest.approx(100) and f["a"]["t_end_us"] == pytest.approx(220)


# -- CLI ----------------------------------------------------------------------------------------

def test_cli_exit_codes_and_json(tmp_path, capsys):
    clean, racy, bad = tmp_path / "clean.trace", tmp_path / "racy.trace", tmp_path / "bad.trace"
    b = builder()
    reuse_graph(b, 0, 0, between=lambda b, t: b.call("synchronize", t, t + 5, backend=A))
    b.write(clean)
    b = builder()
    reuse_graph(b, 0, 0, device=(100 * US, 200 * US))
    b.write(racy)
    bad.write_bytes(b"not a trace at all" * 10)

    assert cli(["races", str(clean)]) == 0
    assert "no races" in capsys.readouterr().out
    assert cli(["races", str(racy)]) == 1
    out = capsys.readouterr().out
    assert "read-after-reuse" in out and "inp_embd" in out and "ffn_out-0" in out
    assert "latent, margin 300.0 us" in out
    assert cli(["races", str(racy), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert {"races", "operations", "accesses"} <= set(doc)
    (f,) = doc["races"]
    assert {"class", "manifested", "margin_us", "count", "a", "b", "buffer", "range",
            "missing", "first", "last"} <= set(f)
    assert {"backend", "graph", "split", "kind", "tensor", "node", "thread", "mode",
            "t_begin_us", "t_end_us"} <= set(f["a"]) and set(f["a"]) == set(f["b"])
    assert cli(["races", str(clean), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["races"] == []
    assert cli(["races", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ggml-trace races:") and "\n" not in err
    assert cli(["races", str(tmp_path / "missing.trace")]) == 2


def test_a_buffer_without_records_is_one_lifetime(tmp_path):
    b = TraceBuilder()
    b.backend(A, "VDEV0", has_async=True)
    b.backend(CPU, "CPU")
    split(b, A, 0, 0, 0, [("read", 0xF000, 0, 256, "x")])
    split(b, CPU, 100 * US, 0, 1, [("write", 0xF000, 128, 256, "y")])
    (f,) = findings(analyse(tmp_path, b))
    assert f["buffer"] == hex(0xF000) and f["generation"] is None and f["range"] == [128, 256]

# Real traces (scenarios on every pinned build, llama.cpp runs) are in tests/runs/test_races_real.py.


EVENTS = 1 << 4          # DeviceSource SRC_EVENTS in a device_exec record's flags
START_ESTIMATED, END_LATE = 0x40, 0x80


def test_the_best_observer_of_a_device_interval_decides(tmp_path):
    # The virtual device saw the read of X end before the CPU's write began (latent); the event
    # watcher, which only sees when its events passed, says later. The device's own word wins.
    b = builder()
    a, _ = reuse_graph(b, 7, 0, device=(100 * US, 200 * US))
    b.call("device_exec", 150 * US, 560 * US, thread=1, obj=a, flags=EVENTS | END_LATE)
    b.write(tmp_path / "d.trace")
    t = load(tmp_path / "d.trace")
    assert list(t.device["source"]) == ["device", "events"]
    assert list(t.device["end_late"]) == [False, True]
    (race,) = findings(races(t))
    assert not race["manifested"] and race["margin_us"] == pytest.approx(300)
    # Without the device's own record the watcher's interval is all there is: it overlaps the
    # write (from 500 us) by more than the watcher's tolerance...
    b = builder()
    a, _ = reuse_graph(b, 7, 0)
    b.call("device_exec", 150 * US, 700 * US, thread=1, obj=a, flags=EVENTS)
    (race,) = findings(analyse(tmp_path, b, "e.trace"))
    assert (race["verdict"], race["basis"]) == ("overlapped", "events")
    # ... it started after the write had ended by more than the tolerance: inverted, proven
    b = builder()
    a, _ = reuse_graph(b, 7, 0)
    b.call("device_exec", 750 * US, 800 * US, thread=1, obj=a, flags=EVENTS)
    (race,) = findings(analyse(tmp_path, b, "g.trace"))
    assert race["manifested"] and (race["verdict"], race["basis"], race["inverted"]) == ("manifested", "events", True)
    # ... but 60 us of overlap is within it: neither verdict is proven.
    b = builder()
    a, _ = reuse_graph(b, 7, 0)
    b.call("device_exec", 150 * US, 560 * US, thread=1, obj=a, flags=EVENTS)
    (race,) = findings(analyse(tmp_path, b, "f.trace"))
    assert (race["verdict"], race["basis"]) == ("undetermined", "events")
    assert "event watcher" in format_report(races(load(tmp_path / "f.trace")))


def _gpu_records(rows):
    from ggml_trace.analysis.trace_format import GPU_DTYPE, REC_GPU

    recs = np.zeros(len(rows), GPU_DTYPE)
    recs["type"] = REC_GPU
    for i, r in enumerate(rows):
        for k, v in r.items():
            recs[i][k] = v
    return recs


def test_cupti_activity_is_tied_to_the_launching_call(tmp_path):
    b = builder()
    a, _ = reuse_graph(b, 7, 0)
    t0 = b.t0
    name = b.add_string("void mul_mat_q<(ggml_type)2, 64>(char const*)")
    b.meta("cupti.clock", "monotonic")
    b.add_records(_gpu_records([
        {"kind": 1, "device": 0, "t_begin_ns": t0 + 120 * US, "t_end_ns": t0 + 150 * US,
         "correlation": 11, "stream": 7, "name": name, "bytes": 64},
        {"kind": 1, "device": 0, "t_begin_ns": t0 + 160 * US, "t_end_ns": t0 + 210 * US,
         "correlation": 12, "stream": 7, "name": name, "bytes": 64},
        {"kind": 2, "device": 0, "t_begin_ns": t0 + 300 * US, "t_end_ns": t0 + 301 * US,
         "correlation": 99, "stream": 7, "bytes": 4096, "copy_kind": 2},  # launched by no traced call
        {"kind": 4, "correlation": 11, "name": a},
        {"kind": 4, "correlation": 12, "name": a},
    ]), 1)
    b.call("device_exec", 110 * US, 215 * US, thread=1, obj=a, flags=EVENTS | START_ESTIMATED)
    b.write(tmp_path / "g.trace")
    t = load(tmp_path / "g.trace")
    g = t.gpu
    assert list(g["kind"]) == ["kernel", "kernel", "memcpy"]
    assert list(g["t_begin"]) == [120 * US, 160 * US, 300 * US]
    assert g["name"].iloc[0] == "void mul_mat_q<(ggml_type)2, 64>(char const*)"
    assert list(g["call_id"].isna()) == [False, False, True] and g["call_id"].iloc[0] == a
    assert list(g["split"].iloc[:2]) == [3, 3] and g["copy_kind"].iloc[2] == "DtoH"
    assert g["bytes"].iloc[2] == 4096 and g["grid"].iloc[0] == 64
    cu = t.device[t.device["source"] == "cupti"]
    assert list(cu["call_id"]) == [a] and list(cu["t_begin"]) == [120 * US] and list(cu["t_end"]) == [210 * US]
    assert list(cu["backend"]) == ["VDEV0"] and list(cu["kind"]) == ["graph_compute"]
    # CUPTI is preferred to the event watcher: the write at 500 us comes after 210 us (latent).
    (race,) = findings(races(t))
    assert not race["manifested"] and race["margin_us"] == pytest.approx(290)


def test_cupti_activity_without_correlation_records_goes_to_the_enclosing_call(tmp_path):
    # Some CUPTI versions send no external correlation records: the runtime API call that
    # launched the kernel (its thread and time) then names the traced call it ran inside.
    b = builder()
    b.thread(0, os_tid=4321, name="main")
    a, w = reuse_graph(b, 7, 0)          # A's split runs 0..10 us on thread 0, CPU's 500..600 us
    t0 = b.t0
    b.add_records(_gpu_records([
        {"kind": 1, "device": 0, "t_begin_ns": t0 + 20 * US, "t_end_ns": t0 + 90 * US, "correlation": 5},
        {"kind": 1, "device": 0, "t_begin_ns": t0 + 510 * US, "t_end_ns": t0 + 520 * US, "correlation": 6},
        {"kind": 1, "device": 0, "t_begin_ns": t0 + 700 * US, "t_end_ns": t0 + 710 * US, "correlation": 7},
        {"kind": 5, "t_begin_ns": t0 + 2 * US, "t_end_ns": t0 + 3 * US, "correlation": 5, "stream": 4321},
        {"kind": 5, "t_begin_ns": t0 + 550 * US, "t_end_ns": t0 + 551 * US, "correlation": 6, "stream": 4321},
        {"kind": 5, "t_begin_ns": t0 + 650 * US, "t_end_ns": t0 + 651 * US, "correlation": 7, "stream": 4321},
    ]), 1)
    b.write(tmp_path / "api.trace")
    g = load(tmp_path / "api.trace").gpu
    assert g["call_id"].iloc[0] == a and g["call_id"].iloc[1] == w
    assert pd.isna(g["call_id"].iloc[2])  # 650 us: no traced call was running
    assert list(g["backend"].iloc[:2]) == ["VDEV0", "CPU"]


@pytest.mark.parametrize("sorted_pos, groups", [(True, 9), (False, 9), (True, 1 << 17)])
def test_the_sort_of_accesses_is_the_stable_sort_of_their_packed_keys(sorted_pos, groups):
    """The analysis sorts accesses by (group, position) with two cheaper sorts where it can;
    the order must be the packed key's stable sort, ties (one call's accesses) included."""
    from ggml_trace.analysis.races import _sort_order

    rng = np.random.default_rng(7)
    n = 200_000
    pos = np.sort(rng.integers(0, n // 4, n)) if sorted_pos else rng.integers(0, n // 4, n)
    group = rng.integers(0, groups, n)
    key = (group << 20) | pos
    got = _sort_order(group, pos, key)
    assert np.array_equal(got, np.argsort(key, kind="stable"))
    assert len(np.unique(key)) < n  # with ties to keep in order
