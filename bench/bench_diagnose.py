"""Time `ggml-trace diagnose` on the #23321 case: b10524's llama-completion, the tiny qwen35 model,
`-ngl 99 -nkvo` on one virtual device (latency 5000 µs), 5 traced runs, the CPU-only reference, the
race forced (3 runs) and reduced (replayed 3 times). Goal: under 2 minutes on 2 cores, set-up built.
Prints the wall time of the whole command and of its steps (from its progress lines).

usage: python bench/bench_diagnose.py [--runs N]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 120.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    build = Path(os.environ.get("GGML_TRACE_BUILD_DIR", ROOT / "build"))
    exe = Path(sys.executable).parent / "ggml-trace"
    with tempfile.TemporaryDirectory() as d:
        cmd = [str(exe), "diagnose", "--runs", str(args.runs), "--virtual-devices", "1", "--vdev-latency-us", "5000",
               "--reference-dev", "none", "-o", f"{d}/diag", "--",
               str(build / "llama-b10524" / "bin" / "llama-completion"), "-m", str(build / "models" / "tiny-qwen35.gguf"),
               "-n", "8", "-p", "the of and", "--temp", "0", "--seed", "1", "-no-cnv", "-ngl", "99", "-nkvo"]
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        for line in p.stderr:  # each progress line with the time it came at
            print(f"{time.monotonic() - t0:7.1f} s  {line.rstrip()}")
        out = p.stdout.read()
        rc = p.wait()
        took = time.monotonic() - t0
    print(out.rstrip())
    print(f"diagnose, {args.runs} runs of the #23321 case: {took:.1f} s (exit {rc}; goal: under {GOAL_S:.0f} s) "
          f"{'OK' if took < GOAL_S else 'SLOWER THAN THE GOAL'}")
    return 0 if rc == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
