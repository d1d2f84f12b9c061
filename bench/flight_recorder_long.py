"""A real llama.cpp program under the flight recorder for a long time (default 10 minutes).

llama-bench (token generation on the tiny model, on a virtual async device) runs under
`ggml-trace record --ring 5`; every 10 s this prints the trace file's size; halfway it takes a
snapshot with `ggml-trace snapshot PID`, loads it and runs the race analysis on it; at the end it
stops the program (SIGTERM, as a crash would) and reads the file it left: how much of the run the
window covers and how many events it holds.

    .venv/bin/python bench/flight_recorder_long.py [--minutes 10] [--ring 5] [--build b10531]
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from ggml_trace.analysis import load, races  # noqa: E402
from ggml_trace.tracer import programs, snapshots  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--ring", default="5")
    ap.add_argument("--build", default="b10531")
    ap.add_argument("--out", default="/tmp/ggml-trace-long")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "long.ggmltrace"
    for old in out.glob("long*"):
        old.unlink()
    bench = programs.program(args.build, "llama-bench")
    cmd = [str(ROOT / ".venv/bin/ggml-trace"), "record", "--ring", args.ring, "--virtual-devices", "1",
           "--no-nvml", "-o", str(trace), "--", str(bench), "-m", str(programs.tiny_model()), "-p", "16",
           "-n", "64", "-r", "1000000", "-ngl", "99"]
    t_start = time.monotonic()
    rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sizes, snap = [], None
    deadline = t_start + args.minutes * 60
    program = None
    while time.monotonic() < deadline and rec.poll() is None:
        time.sleep(10)
        if program is None:
            found = subprocess.run(["pgrep", "-P", str(rec.pid)], capture_output=True, text=True).stdout.split()
            program = int(found[0]) if found else None
        size = trace.stat().st_size if trace.exists() else 0
        elapsed = time.monotonic() - t_start
        sizes.append((round(elapsed), size))
        print(f"{elapsed:6.0f} s  trace file {size / 2**20:8.1f} MiB", flush=True)
        if snap is None and elapsed >= args.minutes * 30 and program:
            t0 = time.monotonic()
            s = snapshots.take(program)
            t1 = time.monotonic()
            t = load(s.path)
            t2 = time.monotonic()
            found = races(t)
            t3 = time.monotonic()
            snap = {"at_s": round(elapsed), "path": str(s.path), "chunks": s.chunks, "recycled_while_read": s.skipped,
                    "copy_s": round(t1 - t0, 3), "load_s": round(t2 - t1, 3), "races_s": round(t3 - t2, 3),
                    "window_s": round((t.ring.end_ns - t.ring.start_ns) / 1e9, 3), "calls": len(t.calls),
                    "accesses": len(t.accesses), "graphs": int((t.calls["kind"] == "sched_graph_compute").sum()),
                    "races": len(found.findings), "damage": len(t.damage)}
            print(f"snapshot: {json.dumps(snap)}", flush=True)
    if program:
        subprocess.run(["kill", "-TERM", str(program)])
    rec.wait(timeout=120)
    ran = time.monotonic() - t_start
    t = load(trace)
    w = t.ring
    result = {
        "ran_s": round(ran), "ring": args.ring, "build": args.build,
        "file_bytes_max": max(s for _, s in sizes), "file_bytes_after_1min": next((s for e, s in sizes if e >= 60), None),
        "final_bytes": trace.stat().st_size, "sizes": sizes,
        "window_s": round((w.end_ns - w.start_ns) / 1e9, 3), "window_start_s": round(w.start_ns / 1e9, 3),
        "window_end_s": round(w.end_ns / 1e9, 3), "ring_chunks": w.ring_chunks, "kept_chunks": w.kept_chunks,
        "calls_in_window": len(t.calls), "graphs_in_window": int((t.calls["kind"] == "sched_graph_compute").sum()),
        "cut": w.cut, "closed": t.closed, "damage": len(t.damage), "races_in_window": len(races(t).findings),
        "snapshot": snap,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "sizes"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
