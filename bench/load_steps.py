"""Where a load's time goes: analysis.load's steps timed one by one on a synthetic trace (the best
of several loads in one process), for the loader's thread count (GGML_TRACE_THREADS).

usage: python bench/load_steps.py [--events N] [--repeat R]
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests")]

from ggml_trace.analysis.frames import Loader  # noqa: E402
from ggml_trace.analysis.threads import thread_count  # noqa: E402
from ggml_trace.analysis.trace_file import read_trace_file  # noqa: E402
from support.tracegen import synth_trace  # noqa: E402


def one_load(path: str) -> dict[str, float]:
    """Seconds of each step of one load, in the order analysis.load_raw runs them."""
    took: dict[str, float] = {}
    t = time.perf_counter()

    def step(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        took[name] = now - t
        t = now

    raw = read_trace_file(path)
    step("read and check records")
    ld = Loader(raw)
    ld.threads(), ld.backends(), ld.buffers()
    step("threads, backends, buffers")
    calls = ld.calls()
    step("calls")
    ld.accesses()
    step("accesses")
    ld.allocations()
    copies = ld.copies(calls)
    step("allocations, copies")
    meta = ld.meta()
    device = ld.device(calls)
    ld.gpu_activity(meta)
    step("device, gpu")
    ld.splits(calls, copies)
    ld.sync(calls)
    ld.marks(calls)
    ld.gpu_samples()
    ld.delays(calls, device)
    step("splits, sync, marks, samples, delays")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=5_000_000, help="calls + accesses")
    ap.add_argument("--repeat", type=int, default=5, help="loads; each step's best counts")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "steps.trace")
        events = synth_trace(path, args.events)
        best: dict[str, float] = {}
        for _ in range(args.repeat):
            gc.collect()
            for name, s in one_load(path).items():
                best[name] = min(best.get(name, float("inf")), s)
    print(f"{events:,} events, loader threads: {thread_count()}, best of {args.repeat} loads per step")
    for name, s in best.items():
        print(f"  {name:40s} {s * 1e3:8.1f} ms")
    total = sum(best.values())
    print(f"  {'sum':40s} {total * 1e3:8.1f} ms = {events / total:,.0f} events/s")


if __name__ == "__main__":
    main()
