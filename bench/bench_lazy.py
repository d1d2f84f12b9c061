"""What a question costs now that a trace's frames are built when first touched: open a trace and
read `t.splits`, `ggml-trace summary`'s counts, `races` with its load, against loading every frame
(what every question paid before), on bench_races.py's synthetic trace. Each figure is the best of
R rounds, the questions interleaved in each round, each on a fresh load.

usage: python bench/bench_lazy.py [--events N] [--repeat R]
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
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "bench")]

from ggml_trace import analysis  # noqa: E402
from bench_races import build_trace  # noqa: E402

# question: (what it does after load, goal in events/s or None)
QUESTIONS = {
    "load() alone": (lambda t: None, None),  # read, check and group the records: every question pays it
    "open + t.splits": (lambda t: t.splits, None),
    "summary": (analysis.summarize, 20e6),
    "races": (analysis.races, 10e6),
    "every frame": (lambda t: t.frames(), None),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=5_000_000, help="calls + accesses (about)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the best of each counts")
    args = ap.parse_args()
    best = {q: float("inf") for q in QUESTIONS}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.ggmltrace")
        events, graphs = build_trace(path, args.events, 40, True)
        floor = float("inf")
        for _ in range(args.repeat):
            gc.collect()
            t0 = time.perf_counter()
            np.fromfile(path, np.uint8)  # the file's bytes, read once: no reader is faster
            floor = min(floor, time.perf_counter() - t0)
            for q, (ask, _goal) in QUESTIONS.items():
                gc.collect()
                t0 = time.perf_counter()
                ask(analysis.load(path))
                best[q] = min(best[q], time.perf_counter() - t0)
    print(f"events: {events:,} in {graphs} graphs; seconds from load() to the answer, best of {args.repeat}")
    print(f"{'read the bytes':16} {floor:7.3f} s  {events / floor:13,.0f} events/s (np.fromfile: the floor)")
    for q, (_ask, goal) in QUESTIONS.items():
        rate = events / best[q]
        against = f"; goal {goal:,.0f}: {rate / goal:.2f} of it" if goal else ""
        print(f"{q:16} {best[q]:7.3f} s  {rate:13,.0f} events/s{against}")
    print(f"reproduce: {sys.executable} bench/bench_lazy.py --events {args.events} --repeat {args.repeat}")


if __name__ == "__main__":
    main()
