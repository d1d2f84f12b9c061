"""A trace larger than half this machine's memory, analysed by `ggml-trace races` in bounded memory.

A template of about a million events (bench_races.build_trace: the #23321 pattern, one race in
every graph) is tiled into a file of --events events (default 2*10^8, ~12 GiB): each copy's
times, graph numbers and call ids move on, written 64 MiB at a time. Then `ggml-trace races`
runs on it as a user would (it picks graph windows by itself for a file this size) and this
prints its time, its peak memory (RSS) and whether it found the race in every graph.

    .venv/bin/python bench/bench_big_trace.py [--events 200000000] [--dir /tmp] [--keep]

--trace FILE analyses a trace made before (--keep) instead; --site DIR runs the `ggml-trace races`
installed there (an earlier commit's, for a side-by-side figure: bench/gpu/install_here.sh's
install_tree). Arguments after -- go to
`ggml-trace races` (--windows: windows whatever the file's size, on a host with memory to spare).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "bench")]

from ggml_trace.analysis.trace_file import chunk_bytes, read_trace_file, records_before_first_zero  # noqa: E402
from ggml_trace.analysis.trace_format import (  # noqa: E402
    CALL_DTYPE, CHUNK_HEADER_DTYPE, CHUNK_MAGIC, CHUNK_SIZE, CLOCK_DTYPE, HEADER_SIZE, NONE32, RECORD_SIZE,
    REC_ACCESS, REC_CALL, REC_CLOCK, SLOTS_PER_CHUNK, ACCESS_DTYPE,
)
from bench_races import build_trace  # noqa: E402
from peak_rss import PEAK_RSS  # noqa: E402



def tile(template: str, out: str, events: int) -> tuple[int, int]:
    """Writes `out`: the template's records, then copies of its calls, accesses and clock points
    moved on in time, graph and call id, until `events` calls + accesses. Each copy keeps the
    template's records in each thread's order and in chunks of their thread, as the writer does
    (an access just before its call). Returns (events, graphs)."""
    raw = read_trace_file(template)
    slots, threads = _records_by_thread(template)
    types = slots[:, 0]
    per_copy = int(np.isin(types, [REC_CALL, REC_ACCESS]).sum())
    copies = max(1, -(-events // per_copy))
    calls, clocks = raw.calls, raw.clocks
    graphs = int(calls["graph"].max()) + 1
    span = int(max(calls["t_end"].max(), clocks["ticks"].max())) + 1_000_000
    span_ns = round(span * raw.header["ns_per_tick"])  # the same step on both clocks
    # call ids count per thread: copy k adds k * (the thread's highest counter + 1)
    counter = calls["call_id"] & np.uint64((1 << 40) - 1)
    step = np.zeros(int((calls["call_id"] >> np.uint64(40)).max()) + 1, np.uint64)
    np.maximum.at(step, (calls["call_id"] >> np.uint64(40)).astype(np.int64), counter + np.uint64(1))
    ids = np.sort(calls["call_id"])

    def moved(v, k):
        return v + np.uint64(k) * step[np.minimum(v >> np.uint64(40), len(step) - 1).astype(np.int64)]

    with open(template, "rb") as f:
        header = f.read(HEADER_SIZE)
    is_call, is_acc, is_clock = types == REC_CALL, types == REC_ACCESS, types == REC_CLOCK
    base = slots[is_call | is_acc | is_clock]
    base_threads = threads[is_call | is_acc | is_clock]
    kinds = base[:, 0]
    with open(out, "wb") as w:
        w.write(header)
        others = slots[~(is_call | is_acc | is_clock)]  # strings, metadata, threads, backends, buffers: once
        _write_chunks(w, others, NONE32)
        for k in range(copies):
            recs = base.copy()
            c = recs[kinds == REC_CALL].view(CALL_DTYPE)[:, 0]
            c["t_begin"] += np.uint64(k * span)
            c["t_end"] += np.uint64(k * span)
            c["graph"] += np.uint32(k * graphs)
            c["call_id"] = moved(c["call_id"], k)
            refs = np.isin(c["obj"], ids)  # device_exec and the like point at a call
            c["obj"] = np.where(refs, moved(c["obj"], k), c["obj"])
            recs[kinds == REC_CALL] = c.view(np.uint8).reshape(-1, RECORD_SIZE)
            a = recs[kinds == REC_ACCESS].view(ACCESS_DTYPE)[:, 0]
            a["call_id"] = moved(a["call_id"], k)
            recs[kinds == REC_ACCESS] = a.view(np.uint8).reshape(-1, RECORD_SIZE)
            cl = recs[kinds == REC_CLOCK].view(CLOCK_DTYPE)[:, 0]
            cl["ticks"] += np.uint64(k * span)
            cl["monotonic_ns"] += np.uint64(k * span_ns)
            recs[kinds == REC_CLOCK] = cl.view(np.uint8).reshape(-1, RECORD_SIZE)
            for t in np.unique(base_threads):
                _write_chunks(w, recs[base_threads == t], int(t))
    return copies * per_copy, copies * graphs


def _records_by_thread(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Every record of a trace file (n, 64) in file order, and the thread of its chunk."""
    data = np.fromfile(path, np.uint8)[HEADER_SIZE:]
    chunks = data[: len(data) // CHUNK_SIZE * CHUNK_SIZE].reshape(-1, SLOTS_PER_CHUNK, RECORD_SIZE)
    heads = chunks[:, 0, :].copy().view(CHUNK_HEADER_DTYPE)[:, 0]
    used = heads["magic"] == CHUNK_MAGIC
    valid = records_before_first_zero(chunks[:, 1:, 0]) & used[:, None]
    thread = np.broadcast_to(heads["thread"][:, None], valid.shape)
    return chunks[:, 1:, :][valid], thread[valid]


def _write_chunks(w, recs: np.ndarray, thread: int) -> None:
    w.write(chunk_bytes(recs, thread=thread).tobytes())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000_000)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--keep", action="store_true", help="keep the generated trace")
    ap.add_argument("--trace", help="analyse this trace (generated before with --keep) instead")
    ap.add_argument("--site", help="a folder where another checkout is installed: its `ggml-trace races` runs "
                                   "(default: this environment's)")
    ap.add_argument("races_args", nargs="*", help="more arguments for `ggml-trace races` (after --)")
    args = ap.parse_args()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if args.trace:
        from ggml_trace.analysis.windows import index_trace

        big, template = args.trace, None
        index = index_trace(big)
        events, graphs = int(index.n_records.sum()), len(index.graph_ids)  # (records: calls, accesses and the few others)
        print(f"{big}: {events:,} records, {graphs:,} graphs, {os.path.getsize(big) / 2**30:.1f} GiB", flush=True)
    else:
        template = os.path.join(args.dir, "big-template.ggmltrace")
        big = os.path.join(args.dir, "big.ggmltrace")
        t = time.perf_counter()
        build_trace(template, 1_000_000, 40, True)
        events, graphs = tile(template, big, args.events)
        size = os.path.getsize(big)
        print(f"generated {events:,} events, {graphs:,} graphs, {size / 2**30:.1f} GiB "
              f"({size / memory:.0%} of this machine's {memory / 2**30:.0f} GiB) in {time.perf_counter() - t:.0f} s",
              flush=True)
    t = time.perf_counter()
    # `ggml-trace races`, writing its own peak RSS (VmHWM) to a file at the end: getrusage would
    # count this process's RSS too (ru_maxrss survives the exec that starts the command).
    big = os.path.abspath(big)  # (the command runs from elsewhere)
    peak_file = big + ".peak"
    cmd = ("import sys; from ggml_trace.tracer.cli import main; rc = main(sys.argv[2:]); "
           f"open(sys.argv[1], 'w').write(str({PEAK_RSS})); sys.exit(rc)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [args.site, os.environ.get("PYTHONPATH")])))
    # not from a checkout: its ggml_trace/ (the current directory comes first for -c) would hide the install
    r = subprocess.run([sys.executable, "-c", cmd, peak_file, "races", big, "--json", *args.races_args],
                       stdout=subprocess.PIPE, text=True, env=env, cwd=tempfile.gettempdir())
    took = time.perf_counter() - t
    with open(peak_file) as f:
        peak = int(f.read())
    os.unlink(peak_file)
    found = [f["count"] for f in json.loads(r.stdout)["races"]] if r.stdout.strip() else None
    print(f"findings: {len(found) if found is not None else 'none'}, counts {found}")
    found = found == [graphs]
    print(f"races: exit {r.returncode} in {took:.0f} s ({events / took / 1e6:.2f} M events/s), "
          f"peak RSS {peak / 2**30:.2f} GiB (goal < 4 GiB: {'met' if peak < 4 * 2**30 else 'NOT met'}); "
          f"the race seen in all {graphs:,} graphs: {'yes' if found else 'no'} ({args.site or 'this environment'})")
    if template:
        if not args.keep:
            os.unlink(big)
        os.unlink(template)
    return 0


if __name__ == "__main__":
    sys.exit(main())
