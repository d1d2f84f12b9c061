"""The #23321 shape written by hand (support.tracegen): an async backend A queues a split that reads
bytes X of the host compute buffer, and a later split writes X (a different tensor the allocator
placed there). The race analysis' tests build their cases from these."""
from __future__ import annotations

from support.tracegen import TraceBuilder

from ggml_trace.analysis import RaceReport, load, races
from ggml_trace.analysis.trace_format import BUF_ALLOCATED

A, B, CPU, RPC = 0, 1, 2, 3             # backend indices
HBUF, DBUF = 0xB000, 0xD000             # host compute buffer, a buffer on device A
HBASE, DBASE = 0x5000_0000, 0x7000_0000
EV, EV2 = 0xE1, 0xE2
US = 1000                               # ns per us


def builder() -> TraceBuilder:
    b = TraceBuilder(hooks_build="test")
    b.thread(0, name="main")
    b.thread(1, name="VDEV0 stream")
    b.backend(A, "VDEV0", "VDEV0", device_type=1, has_async=True, has_events=True)
    b.backend(B, "VDEV1", "VDEV1", device_type=1, has_async=True, has_events=True)
    b.backend(CPU, "CPU", "CPU", device_type=0)
    b.backend(RPC, "RPC0", "RPC0", device_type=1)  # neither async nor events: synchronous
    b.buffer(HBUF, BUF_ALLOCATED, base=HBASE, size=1 << 20, usage=2, is_host=True,
             buft_name="CPU", device_ptr=0x6000_0000 + 0x100 * CPU)
    b.buffer(DBUF, BUF_ALLOCATED, base=DBASE, size=1 << 20, usage=2, buft_name="VDEV0",
             device_ptr=0x6000_0000 + 0x100 * A)
    return b


def split(b: TraceBuilder, backend: int, t: int, graph: int, index: int, accesses=(),
          dur: int = 10 * US, thread: int = 0, nodes: int | None = None) -> int:
    """A graph_compute call of `nodes` nodes (default: one per access) with accesses (mode,
    buffer, offset, size, tensor[, node])."""
    cid = b.call("graph_compute", t, t + dur, thread=thread, backend=backend, sched=0,
                 graph=graph, split=index, arg=len(accesses) if nodes is None else nodes)
    for mode, buf, off, size, tensor, *node in accesses:
        b.access(cid, mode, buf, off, size, tensor=tensor, node=node[0] if node else None,
                 op=1, index=0, thread=thread)
    return cid


def reuse_graph(b: TraceBuilder, g: int, t0: int, between=None, writer: int = CPU,
                device=None, nodes: int = 1) -> tuple[int, int]:
    """Graph g: A's split 3 (`nodes` nodes; its access is mul_mat-0's) reads inp_embd at X (host
    buffer); `between(b, t)` adds calls; then split 4 on `writer`, one node, writes ffn_out-0 over
    X. Returns (A split, writer split) call ids."""
    a = split(b, A, t0, g, 3, [("read", HBUF, 0x100, 256, "inp_embd", "mul_mat-0"),
                               ("write", DBUF, 0, 64, "mul_mat-0")], nodes=nodes)
    if device is not None:  # the device-side execution of A's split
        b.call("device_exec", t0 + device[0], t0 + device[1], thread=1, backend=A, graph=g,
               split=3, obj=a)
    if between:
        between(b, t0 + 100 * US)
    w = split(b, writer, t0 + 500 * US, g, 4, [("write", HBUF, 0x80, 512, "ffn_out-0")],
              dur=100 * US)
    return a, w


def analyse(tmp_path, b: TraceBuilder, name: str = "t.trace") -> RaceReport:
    p = tmp_path / name
    b.write(p)
    return races(load(p))


def findings(report: RaceReport) -> list[dict]:
    return report.to_json()["races"]


def latent_trace(path, meta):
    """The #23321 shape by hand: VDEV0's split 3 reads inp_embd (queued, no device timing), then
    the CPU's split 4 writes ffn_out-0 over it."""
    b = TraceBuilder(hooks_build="test")
    for k, v in meta.items():
        b.meta(k, v)
    b.thread(0, name="main")
    b.backend(0, "VDEV0", "VDEV0", device_type=1, has_async=True, has_events=True)
    b.backend(1, "CPU", "CPU", device_type=0)
    b.buffer(0xB000, BUF_ALLOCATED, base=0x5000_0000, size=1 << 20, usage=2, is_host=True, buft_name="CPU",
             device_ptr=0x6000_0100)
    for backend, t, split, mode, tensor in ((0, 0, 3, "read", "inp_embd"), (1, 500_000, 4, "write", "ffn_out-0")):
        cid = b.call("graph_compute", t, t + 10_000, backend=backend, sched=0, graph=0, split=split, arg=1)
        b.access(cid, mode, 0xB000, 0x100, 256, tensor=tensor, node=tensor, op=1, index=0)
    b.write(path)
    return path
