"""A trace larger than half this machine's memory, analysed by `ggml-trace races` in bounded memory.

A template of about a million events (bench_races.build_trace: the #23321 pattern, one race in
every graph) is tiled into a file of --events events (default 2*10^8, ~12 GiB): each copy's
times, graph numbers and call ids move on, written 64 MiB at a time. Then `ggml-trace races`
runs on it as a user would (it picks graph windows by itself for a file this size) and this
prints its time, its peak memory (RSS) and whether it found the race in every graph.

    .venv/bin/python bench/bench_big_trace.py [--events 200000000] [--dir /tmp] [--keep]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "bench")]

from analysis.trace_file import (CALL_DTYPE, CHUNK_HEADER_DTYPE, CHUNK_MAGIC, CHUNK_SIZE, CLOCK_DTYPE,  # noqa: E402
                                 HEADER_SIZE, NONE32, RECORD_SIZE, REC_ACCESS, REC_CALL, REC_CLOCK,
                                 ACCESS_DTYPE, read_trace_file)
from bench_races import build_trace  # noqa: E402

SLOTS = CHUNK_SIZE // RECORD_SIZE


def tile(template: str, out: str, events: int) -> tuple[int, int]:
    """Writes `out`: the template's records, then copies of its calls, accesses and clock points
    moved on in time, graph and call id, until `events` calls + accesses. Returns (events, graphs)."""
    raw = read_trace_file(template)
    calls, acc, clocks = raw.calls, raw.accesses, raw.clocks
    per_copy = len(calls) + len(acc)
    copies = max(1, -(-events // per_copy))
    graphs = int(calls["graph"].max()) + 1
    span = int(max(calls["t_end"].max(), clocks["ticks"].max())) + 1_000_000
    span_ns = round(span * raw.header["ns_per_tick"])  # the same step on both clocks
    # call ids count per thread: copy k adds k * (the thread's highest counter + 1)
    thread = calls["call_id"] >> np.uint64(40)
    counter = calls["call_id"] & np.uint64((1 << 40) - 1)
    step = np.zeros(int(thread.max()) + 1, np.uint64)
    np.maximum.at(step, thread.astype(np.int64), counter + np.uint64(1))
    is_ref = np.isin(calls["obj"], calls["call_id"])  # device_exec and the like point at a call

    def moved(ids, k):
        return ids + np.uint64(k) * step[(ids >> np.uint64(40)).astype(np.int64)]

    others = [getattr(raw, n) for n in ("string_recs", "meta", "threads", "backends", "buffers")]
    with open(template, "rb") as f:
        header = f.read(HEADER_SIZE)
    with open(out, "wb") as w:
        w.write(header)
        pending = [np.concatenate([o.view(np.dtype((np.void, RECORD_SIZE))) for o in others])]
        for k in range(copies):
            c = calls.copy()
            c["t_begin"] += np.uint64(k * span)
            c["t_end"] += np.uint64(k * span)
            c["graph"] += np.uint32(k * graphs)
            c["call_id"] = moved(c["call_id"], k)
            c["obj"] = np.where(is_ref, moved(c["obj"], k), c["obj"])
            a = acc.copy()
            a["call_id"] = moved(a["call_id"], k)
            cl = clocks.copy()
            cl["ticks"] += np.uint64(k * span)
            cl["monotonic_ns"] += np.uint64(k * span_ns)
            pending += [a.view(np.dtype((np.void, RECORD_SIZE))), c.view(np.dtype((np.void, RECORD_SIZE))),
                        cl.view(np.dtype((np.void, RECORD_SIZE)))]
            if sum(len(p) for p in pending) >= 1 << 20 or k == copies - 1:
                _write_chunks(w, np.concatenate(pending))
                pending = []
    return copies * per_copy, copies * graphs


def _write_chunks(w, recs: np.ndarray) -> None:
    per = SLOTS - 1
    nc = -(-len(recs) // per)
    body = np.zeros((nc, SLOTS, RECORD_SIZE), np.uint8)
    head = np.zeros(nc, CHUNK_HEADER_DTYPE)
    head["magic"] = CHUNK_MAGIC
    head["thread"] = NONE32
    body[:, 0, :] = head.view(np.uint8).reshape(nc, RECORD_SIZE)
    flat = body[:, 1:, :].reshape(-1, RECORD_SIZE)
    flat[: len(recs)] = recs.view(np.uint8).reshape(-1, RECORD_SIZE)
    body[:, 1:, :] = flat.reshape(nc, per, RECORD_SIZE)
    w.write(body.tobytes())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000_000)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--keep", action="store_true", help="keep the generated trace")
    ap.add_argument("races_args", nargs="*", help="more arguments for `ggml-trace races` (after --)")
    args = ap.parse_args()
    template = os.path.join(args.dir, "big-template.ggmltrace")
    big = os.path.join(args.dir, "big.ggmltrace")
    t = time.perf_counter()
    build_trace(template, 1_000_000, 40, True)
    events, graphs = tile(template, big, args.events)
    size = os.path.getsize(big)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    print(f"generated {events:,} events, {graphs:,} graphs, {size / 2**30:.1f} GiB "
          f"({size / memory:.0%} of this machine's {memory / 2**30:.0f} GiB) in {time.perf_counter() - t:.0f} s",
          flush=True)
    t = time.perf_counter()
    r = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ggml-trace"), "races", big, "--json", *args.races_args],
                       stdout=subprocess.PIPE, text=True)
    took = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    found = [f["count"] for f in json.loads(r.stdout)["races"]] if r.stdout.strip() else None
    print(f"findings: {len(found) if found is not None else 'none'}, counts {found}")
    found = found == [graphs]
    print(f"races: exit {r.returncode} in {took:.0f} s ({events / took / 1e6:.2f} M events/s), "
          f"peak RSS {peak / 2**30:.2f} GiB (goal < 4 GiB: {'met' if peak < 4 * 2**30 else 'NOT met'}); "
          f"the race seen in all {graphs:,} graphs: {'yes' if found else 'no'}")
    if not args.keep:
        os.unlink(big)
    os.unlink(template)
    return 0


if __name__ == "__main__":
    sys.exit(main())
