"""Benchmark `stalls` and `compare` beside the race analysis, on bench_races.py's synthetic trace
(each analysis timed on a loaded trace, best of R, interleaved). Goal: each at least as fast per
event as races (compare reads the trace as both sides: twice the events).

usage: python bench/bench_stalls.py [--events N] [--repeat R]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "bench")]

from ggml_trace import analysis  # noqa: E402
from ggml_trace.analysis.compare import compare  # noqa: E402
from ggml_trace.analysis.stalls import stalls, totals  # noqa: E402
from bench_races import build_trace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="calls + accesses (about)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the best of each counts")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.ggmltrace")
        events, graphs = build_trace(path, args.events, 40, True)
        t, other = analysis.load(path), analysis.load(path)  # compare's two sides: two loaded runs
    jobs = {"races": lambda: analysis.races(t), "stalls": lambda: totals(stalls(t)),
            "compare": lambda: compare([t], [other])}
    best = {k: float("inf") for k in jobs}
    for _ in range(args.repeat):
        for k, fn in jobs.items():
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    print(f"events: {events:,} in {graphs} graphs; {len(stalls(t)):,} host-blocking calls")
    rate = {k: (2 if k == "compare" else 1) * events / s for k, s in best.items()}  # compare reads both sides
    for k, s in best.items():
        print(f"{k:8} {s:8.3f} s  {rate[k]:13,.0f} events/s  ({rate[k] / rate['races']:.2f}x the races' rate; "
              "goal >= 1)")
    print(f"reproduce: {sys.executable} bench/bench_stalls.py --events {args.events} --repeat {args.repeat}")


if __name__ == "__main__":
    main()
