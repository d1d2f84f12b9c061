"""Time the quick virtual-device sweep that `make test` runs (tests/runs/test_sweep.py):
`ggml-trace sweep --backend vdev --quick` over b10524, b10531, b11434 and b11434-ppfix. Goal: under
5 minutes on 2 cores, set-up built. Prints the wall time, the cells and runs, and the time per run.

usage: python bench/bench_sweep.py [--jobs N]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 300.0
BUILDS = ["b10524", "b10531", "b11434", "b11434-ppfix"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=0, help="cells at a time (default: the sweep's, one per core)")
    args = ap.parse_args()
    exe = Path(sys.executable).parent / "ggml-trace"
    with tempfile.TemporaryDirectory() as d:
        cmd = [str(exe), "sweep", "--backend", "vdev", "--quick", "-o", d, *[a for b in BUILDS for a in ("--build", b)]]
        if args.jobs:
            cmd += ["--jobs", str(args.jobs)]
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.monotonic() - t0
        if r.returncode not in (0, 1):
            print(f"bench_sweep: the sweep failed ({r.returncode}): {r.stderr[-2000:]}", file=sys.stderr)
            return 2
        result = json.loads((Path(d) / "sweep.json").read_text())
    cells = result["cells"]
    runs = sum(c["runs"] for c in cells)
    print(f"quick vdev sweep, {len(BUILDS)} builds: {wall:.1f} s wall for {len(cells)} cells and {runs} runs "
          f"({1000 * wall / max(runs, 1):.0f} ms a run; verdicts {result['counts']}); goal under {GOAL_S:.0f} s: "
          f"{'met' if wall < GOAL_S else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
