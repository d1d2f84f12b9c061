"""Benchmark analysis.load end to end, every frame built, on a synthetic trace (calls + accesses).

usage: python bench/bench_load.py [--events N] [--threads T] [--repeat R]
"""
from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "bench")]

from ggml_trace import analysis  # noqa: E402
from peak_rss import PEAK_RSS  # noqa: E402
from support.tracegen import synth_trace  # noqa: E402


def _load_in_fresh_process(path: str) -> tuple[float, int]:
    """(seconds, peak RSS in bytes) of one load in a new interpreter. The peak is its own VmHWM:
    getrusage would count this process's RSS too (ru_maxrss survives the exec that starts it)."""
    code = ("import sys, time; from ggml_trace import analysis; "
            "t = time.perf_counter(); analysis.load(sys.argv[1]).frames(); took = time.perf_counter() - t; "
            f"print(took, {PEAK_RSS})")
    out = subprocess.run([sys.executable, "-c", code, path], check=True, capture_output=True, text=True)
    took, peak = out.stdout.split()
    return float(took), int(peak)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=5_000_000, help="calls + accesses")
    ap.add_argument("--threads", type=int, default=4, help="writer threads in the trace")
    ap.add_argument("--repeat", type=int, default=3, help="loads to time; the best counts")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.trace")
        t = time.perf_counter()
        events = synth_trace(path, args.events, threads=args.threads)
        print(f"generated {events:,} events ({os.path.getsize(path) / 2**20:.0f} MiB) "
              f"in {time.perf_counter() - t:.1f} s")
        best = float("inf")
        for i in range(args.repeat):
            gc.collect()
            t = time.perf_counter()
            trace = analysis.load(path)
            trace.frames()  # every frame (a load builds them when first touched)
            dt = time.perf_counter() - t
            assert len(trace.calls) + len(trace.accesses) == events
            del trace
            best = min(best, dt)
            print(f"  run {i + 1}: {dt:.3f} s")
        # A command (ggml-trace races, summary, ...) loads once, in a fresh process: its memory
        # is all new, and page faults cost a share of the load that repeated loads do not pay.
        fresh = sorted(_load_in_fresh_process(path) for _ in range(args.repeat))
    try:  # the thread pool (analysis/threads.py); a tree from before it has none
        from ggml_trace.analysis.threads import thread_count
        print(f"events: {events:,}, loader threads: {thread_count()}")
    except ImportError:
        print(f"events: {events:,}")
    print(f"seconds (best of {args.repeat}): {best:.3f}")
    print(f"events/s: {events / best:,.0f} (goal 20,000,000: {events / best / 20e6:.2f} of it)")
    mid, peak = fresh[len(fresh) // 2]
    print(f"fresh process, one load (median of {len(fresh)}): {mid:.3f} s, peak RSS {peak / 2**20:.0f} MiB, "
          f"{events / mid:,.0f} events/s "
          f"({events / mid / 20e6:.2f} of the goal)")
    print(f"reproduce: {sys.executable} bench/bench_load.py --events {args.events} "
          f"--threads {args.threads} --repeat {args.repeat}  (from {ROOT})")


if __name__ == "__main__":
    main()
