"""Benchmark the race analysis (analysis.races) on a synthetic scheduler trace.

The trace repeats one graph: CPU and async splits in turn on CUDA0, CUDA1 (async, with events)
and the CPU; input copies (async and synchronous fallbacks), event_record/event_wait between the
two GPUs, synchronizations, an async output read, device_exec records for the queued work, and
allocator-style reuse of the compute buffers' bytes. With --race (the default) every graph also
has the #23321 pattern: a CPU split without inputs writes over host bytes that CUDA0's queued
input copy has not read yet, so the analysis has one finding, seen in every graph.

usage: python bench/bench_races.py [--events N] [--nodes K] [--repeat R] [--no-race]
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests")]

from ggml_trace import analysis  # noqa: E402
from ggml_trace.analysis.trace_format import (  # noqa: E402
    ACC_READ, ACC_WRITE, ACCESS_DTYPE, CALL_DTYPE, KIND_IDS, NONE32, REC_ACCESS, REC_CALL,
)
from support.tracegen import TraceBuilder  # noqa: E402

CUDA0, CUDA1, CPU = 0, 1, 2
HB, D0, D1, W0, W1, WH = 0xB000, 0xD000, 0xD100, 0xA000, 0xA100, 0xB100
BASES = {HB: 0x5500_0000_0000, D0: 0x7F00_0000_0000, D1: 0x7F10_0000_0000,
         W0: 0x7F20_0000_0000, W1: 0x7F30_0000_0000, WH: 0x5510_0000_0000}
EV0, EV1 = 0xE0, 0xE1
SLOT = 1 << 14     # bytes per activation tensor; the allocator cycles through 8 slots
US = 1000


class Graph:
    """One graph's calls and accesses (times relative to the graph start), to be tiled."""

    def __init__(self, b: TraceBuilder, nodes: int, race: bool):
        self.b = b
        self.calls: list[dict] = []
        self.acc: list[tuple] = []
        self.t = 0
        self.nodes = nodes
        self.outer = self.call("sched_graph_compute", dur=0, arg=6)
        self.build(race)
        self.calls[self.outer]["t_end"] = self.t + 10 * US
        self.period = self.t + 50 * US

    def name(self, s: str) -> int:
        return self.b.add_string(s)

    def call(self, kind, dur=2 * US, backend=None, backend2=None, split=None, obj=0, arg=0,
             thread=0, t=None, ref=None) -> int:
        t0 = self.t if t is None else t
        self.calls.append(dict(kind=KIND_IDS[kind], thread=thread, t_begin=t0, t_end=t0 + dur,
                               backend=NONE32 if backend is None else backend,
                               backend2=NONE32 if backend2 is None else backend2,
                               split=-1 if split is None else split, obj=obj, arg=arg, ref=ref))
        if t is None:
            self.t += dur + 1 * US
        return len(self.calls) - 1

    def access(self, call, mode, buf, off, size, tensor, node=None, index=NONE32):
        tid = self.name(tensor)
        self.acc.append((call, ACC_READ if mode == "read" else ACC_WRITE, buf, off, size, tid,
                         self.name(node) if node else tid, index))

    def device(self, call, start, dur, thread):
        """The device-side execution of a queued call (observer thread)."""
        c = self.calls[call]
        return self.call("device_exec", dur=dur, backend=c["backend"], split=c["split"],
                         thread=thread, t=start, ref=call)

    def split(self, backend, index, buf, weights, inputs=(), dur=50 * US, prefix="n"):
        """A graph_compute: node i reads the previous output and a weight, writes its output;
        outputs take the allocator's 8 slots in turn (bytes are reused within the split)."""
        c = self.call("graph_compute", dur=dur, backend=backend, split=index, arg=self.nodes)
        for name, (b, off) in inputs:
            self.access(c, "read", b, off, SLOT, name, f"{prefix}{index}.0", 0)
        for i in range(self.nodes):
            out = f"{prefix}{index}.{i}"
            if i:
                self.access(c, "read", buf, ((i - 1) % 8) * SLOT, SLOT, f"{prefix}{index}.{i - 1}",
                            out, i)
            self.access(c, "read", weights, (index * self.nodes + i) * SLOT, SLOT,
                        f"blk.{i}.w{index}", out, i)
            self.access(c, "write", buf, (i % 8) * SLOT, SLOT, out, out, i)
        return c

    def build(self, race: bool):
        last = (self.nodes - 1) % 8 * SLOT
        s = self.call("buf_set_tensor", backend=CPU, split=0, arg=SLOT)
        self.access(s, "write", HB, 8 * SLOT, SLOT, "inp_tokens")
        # split 0, CPU: embeddings
        self.split(CPU, 0, HB, WH, [("inp_tokens", (HB, 8 * SLOT))], prefix="cpu")
        # split 1, CUDA0, input from the CPU by async copy (host DMA)
        cp = self.call("cpy_tensor_async", backend=CUDA0, backend2=CPU, split=1, arg=SLOT)
        self.access(cp, "read", HB, last, SLOT, f"cpu0.{self.nodes - 1}")
        self.access(cp, "write", D0, 9 * SLOT, SLOT, "CUDA0#inp#0")
        g1 = self.split(CUDA0, 1, D0, W0, [("CUDA0#inp#0", (D0, 9 * SLOT))], prefix="c0_")
        self.call("event_record", backend=CUDA0, split=1, obj=EV0)
        t_dev0 = self.calls[cp]["t_begin"] + 20 * US
        self.device(cp, t_dev0, 5 * US, thread=1)
        self.device(g1, t_dev0 + 6 * US, 120 * US, thread=1)
        # split 2, CUDA1, waits for CUDA0, copies its output across
        self.call("event_wait", backend=CUDA1, split=2, obj=EV0)
        cp2 = self.call("cpy_tensor_async", backend=CUDA1, backend2=CUDA0, split=2, arg=SLOT)
        self.access(cp2, "read", D0, last, SLOT, f"c0_1.{self.nodes - 1}")
        self.access(cp2, "write", D1, 9 * SLOT, SLOT, "CUDA1#x#0")
        g2 = self.split(CUDA1, 2, D1, W1, [("CUDA1#x#0", (D1, 9 * SLOT))], prefix="c1_")
        self.call("event_record", backend=CUDA1, split=2, obj=EV1)
        self.device(cp2, t_dev0 + 130 * US, 5 * US, thread=2)
        self.device(g2, t_dev0 + 136 * US, 120 * US, thread=2)
        # split 3, CPU, input from CUDA1: the scheduler's fallback (synchronize, then copy)
        self.call("synchronize", dur=200 * US, backend=CUDA1, split=3)
        gt = self.call("buf_get_tensor", backend=CUDA1, split=3, arg=SLOT)
        self.access(gt, "read", D1, last, SLOT, f"c1_2.{self.nodes - 1}")
        self.access(gt, "write", HB, 9 * SLOT, SLOT, "CPU#y#0")
        self.split(CPU, 3, HB, WH, [("CPU#y#0", (HB, 9 * SLOT))], prefix="cpu")
        # split 4, CUDA0: input h from the CPU by async copy; split 5, CPU, no inputs, writes z
        cp3 = self.call("cpy_tensor_async", backend=CUDA0, backend2=CPU, split=4, arg=SLOT)
        self.access(cp3, "read", HB, last, SLOT, "h")
        self.access(cp3, "write", D0, 10 * SLOT, SLOT, "CUDA0#h#0")
        g4 = self.split(CUDA0, 4, D0, W0, [("CUDA0#h#0", (D0, 10 * SLOT))], prefix="c0_")
        self.device(cp3, self.t + 30 * US, 5 * US, thread=1)
        self.device(g4, self.t + 36 * US, 60 * US, thread=1)
        if not race:  # what the fix does: the CPU split waits for the queued copy
            self.call("synchronize", dur=100 * US, backend=CUDA0, split=5)
        z = self.call("graph_compute", dur=20 * US, backend=CPU, split=5, arg=1)
        self.access(z, "write", HB, last, SLOT, "z")
        # output: async read of the logits, then the scheduler's synchronize of every backend
        out = self.call("get_tensor_async", backend=CUDA0, split=5, arg=SLOT)
        self.access(out, "read", D0, last, SLOT, f"c0_4.{self.nodes - 1}")
        self.access(out, "write", 0, 0x10_0000, SLOT, "")  # caller memory: unresolved
        self.device(out, self.t + 100 * US, 5 * US, thread=1)
        sched_sync = self.call("sched_synchronize", dur=0)
        for be in (CUDA0, CUDA1, CPU):
            self.call("synchronize", dur=150 * US if be == CUDA0 else 1 * US, backend=be)
        self.calls[sched_sync]["t_end"] = self.t


def build_trace(path: str, events: int, nodes: int, race: bool) -> tuple[int, int]:
    b = TraceBuilder()
    for t, name in enumerate(["main", "CUDA0 stream", "CUDA1 stream"]):
        b.thread(t, name=name)
    b.backend(CUDA0, "CUDA0", "CUDA0", device_type=1, has_async=True, has_events=True)
    b.backend(CUDA1, "CUDA1", "CUDA1", device_type=1, has_async=True, has_events=True)
    b.backend(CPU, "CPU", "CPU", device_type=0)
    dev = {CUDA0: 0x6000_0000, CUDA1: 0x6000_0100, CPU: 0x6000_0200}
    for ptr, be, host, usage in ((HB, CPU, True, 2), (WH, CPU, True, 1), (D0, CUDA0, False, 2),
                                 (W0, CUDA0, False, 1), (D1, CUDA1, False, 2),
                                 (W1, CUDA1, False, 1)):
        b.buffer(ptr, base=BASES[ptr], size=1 << 30, usage=usage, is_host=host,
                 buft_name=["CUDA0", "CUDA1", "CPU"][be], device_ptr=dev[be])
    g = Graph(b, nodes, race)
    per_graph = len(g.calls) + len(g.acc)
    n_graphs = max(1, round(events / per_graph))
    for t in range(0, n_graphs * g.period + 1, 50_000_000):  # CLOCK records every 50 ms
        b.clock(t)

    # Tile the template: per graph, call ids continue each thread's counter.
    nc, na = len(g.calls), len(g.acc)
    f = {k: np.array([c[k] if c[k] is not None else -1 for c in g.calls], np.int64)
         for k in g.calls[0]}
    thread = f["thread"]
    local = np.zeros(nc, np.int64)
    per_thread = {}
    for i, th in enumerate(thread.tolist()):
        per_thread[th] = per_thread.get(th, 0) + 1
        local[i] = per_thread[th]
    n_per = np.array([per_thread[th] for th in thread.tolist()], np.int64)
    gi = np.repeat(np.arange(n_graphs), nc)
    ti = np.tile(np.arange(nc), n_graphs)
    ids = (thread[ti].astype(np.uint64) << np.uint64(40)) | (gi * n_per[ti] + local[ti]).astype(
        np.uint64)
    calls = np.zeros(nc * n_graphs, CALL_DTYPE)
    calls["type"] = REC_CALL
    calls["kind"] = f["kind"][ti]
    calls["sched"] = 0
    calls["thread"] = thread[ti]
    t0 = gi * g.period
    calls["t_begin"] = b.tick(t0 + f["t_begin"][ti])
    calls["t_end"] = b.tick(t0 + f["t_end"][ti])
    calls["call_id"] = ids
    calls["backend"] = f["backend"][ti]
    calls["backend2"] = f["backend2"][ti]
    calls["graph"] = gi
    calls["split"] = f["split"][ti]
    ref = f["ref"][ti]
    calls["obj"] = np.where(ref >= 0, ids[gi * nc + np.maximum(ref, 0)], f["obj"][ti])
    calls["arg"] = f["arg"][ti]

    a = np.array(g.acc, np.uint64)
    acc = np.zeros(na * n_graphs, ACCESS_DTYPE)
    ga = np.repeat(np.arange(n_graphs), na)
    ai = np.tile(np.arange(na), n_graphs)
    owner = ga * nc + a[ai, 0].astype(np.int64)
    acc["type"] = REC_ACCESS
    acc["mode"] = a[ai, 1]
    acc["thread"] = calls["thread"][owner]
    acc["call_id"] = ids[owner]
    acc["buffer"] = a[ai, 2]
    acc["offset"] = a[ai, 3]
    acc["size"] = a[ai, 4]
    acc["tensor"] = a[ai, 5]
    acc["node"] = a[ai, 6]
    acc["index"] = a[ai, 7]
    # Like the writer: a call's accesses come before its record, per thread.
    recs = np.concatenate([acc.view(np.dtype((np.void, 64))), calls.view(np.dtype((np.void, 64)))])
    key_call = np.concatenate([owner, gi * nc + ti])
    key_kind = np.concatenate([np.zeros(len(acc), np.int64), np.ones(len(calls), np.int64)])
    order = np.lexsort((key_kind, key_call))
    stream = np.concatenate([acc["thread"], calls["thread"]]).astype(np.int64)
    b.add_records(recs[order], stream[order])
    b.write(path)
    return len(calls) + len(acc), n_graphs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="calls + accesses (about)")
    ap.add_argument("--nodes", type=int, default=40, help="nodes per split")
    ap.add_argument("--repeat", type=int, default=3, help="runs to time; the best counts")
    ap.add_argument("--no-race", dest="race", action="store_false",
                    help="synchronize before the inputless CPU split (no race)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.ggmltrace")
        t = time.perf_counter()
        events, n_graphs = build_trace(path, args.events, args.nodes, args.race)
        print(f"generated {events:,} events, {n_graphs} graphs "
              f"({os.path.getsize(path) / 2**20:.0f} MiB) in {time.perf_counter() - t:.1f} s")
        best_total = best_races = float("inf")
        for i in range(args.repeat):
            gc.collect()
            t = time.perf_counter()
            trace = analysis.load(path)
            report = analysis.races(trace)
            total = time.perf_counter() - t
            # the analysis alone: again, on the frames the first run built (a load builds them when
            # first touched)
            t = time.perf_counter()
            analysis.races(trace)
            alone = time.perf_counter() - t
            assert len(trace.calls) + len(trace.accesses) == events
            best_total, best_races = min(best_total, total), min(best_races, alone)
            n = len(report.findings)
            counts = report.findings["count"].tolist()
            print(f"  run {i + 1}: load + races {total:.3f} s (races {alone:.3f} s): "
                  f"{n} finding(s), counts {counts}, {report.operations:,} operations, "
                  f"{report.accesses:,} accesses")
            if args.race:
                assert n == 1 and counts == [n_graphs], report.findings
            else:
                assert n == 0, report.findings
            del trace, report
    try:  # the thread pool (analysis/threads.py); a tree from before it has none
        from ggml_trace.analysis.threads import thread_count
        print(f"events: {events:,}, loader threads: {thread_count()}")
    except ImportError:
        print(f"events: {events:,}")
    print(f"seconds, races(load(path)) (best of {args.repeat}): {best_total:.3f}")
    print(f"seconds, races alone: {best_races:.3f}")
    print(f"events/s: {events / best_total:,.0f} (load + races; goal 10,000,000: "
          f"{events / best_total / 10e6:.2f} of it), {events / best_races:,.0f} (races alone)")
    print(f"reproduce: {sys.executable} bench/bench_races.py --events {args.events} "
          f"--nodes {args.nodes} --repeat {args.repeat}{'' if args.race else ' --no-race'}  "
          f"(from {ROOT})")


if __name__ == "__main__":
    main()
