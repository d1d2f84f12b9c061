"""How long the two devices of a pipeline-parallel prefill run at the same time, unpatched (b11434),
with our fix (b11434-ppfix) and with every queue drained before every split (b11434-ppsync): the
figure tests/runs/test_pipeline_parallel.py leaves to measurement (it checks only that the fix keeps
some overlap and draining keeps none). llama-completion of b11434 on each build's ggml, two virtual
devices (-sm layer), the first 2 ms an operation behind, the prompt of support.pipeline_cases;
the runs of the builds alternate, so that a slow spell of the machine falls on all of them.

usage: python bench/bench_pipeline_overlap.py [--runs N] [--keep DIR]   (after `make setup`)
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.pipeline_cases import PROMPT  # noqa: E402

from ggml_trace.analysis import load  # noqa: E402
from ggml_trace.tracer import programs  # noqa: E402

BUILDS = ["b11434", "b11434-ppfix", "b11434-ppsync"]


def overlap_ns(t, a="VDEV0", b="VDEV1") -> int:
    """How long the two devices' queues ran work at the same time (device times)."""
    d = t.device
    x = d[d.backend == a][["t_begin", "t_end"]].to_numpy()
    y = d[d.backend == b][["t_begin", "t_end"]].to_numpy()
    both = np.minimum(x[:, None, 1], y[None, :, 1]) - np.maximum(x[:, None, 0], y[None, :, 0])
    return int(np.clip(both, 0, None).sum())


def run(build: str, out: Path) -> dict:
    cmd = ["stdbuf", "-o0", str(programs.program("b11434", "llama-completion")), "-m", str(programs.tiny_model()),
           "-p", PROMPT, "-n", "32", "-b", "256", "-ub", "32", "--temp", "0", "--seed", "1", "-no-cnv", "-ngl", "99",
           "-sm", "layer", "-dev", "VDEV0,VDEV1"]
    exe = Path(sys.executable).parent / "ggml-trace"
    r = subprocess.run([str(exe), "record", "--build", build, "-o", str(out), "--virtual-devices", "2",
                        "--vdev-latency-us", "2000,0", "--", *cmd], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{build}: record failed: {r.stderr[-2000:]}")
    t = load(out)
    c = t.calls[t.calls["kind"] == "sched_graph_compute"]
    return {"overlap_ms": overlap_ns(t) / 1e6, "wall_ms": (int(c["t_end"].max()) - int(c["t_begin"].min())) / 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each build (default: %(default)s)")
    ap.add_argument("--keep", type=Path, help="keep the traces in this folder")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    folder.mkdir(parents=True, exist_ok=True)
    got: dict[str, list[dict]] = {b: [] for b in BUILDS}
    for i in range(args.runs):
        for build in BUILDS:
            got[build].append(run(build, folder / f"{build}-{i}.ggmltrace"))
    for build, rs in got.items():
        ov = [r["overlap_ms"] for r in rs]
        wall = [r["wall_ms"] for r in rs]
        print(f"{build:15s} devices overlapping: median {statistics.median(ov):7.1f} ms (min {min(ov):.1f}, "
              f"max {max(ov):.1f}); the graphs' wall time: median {statistics.median(wall):7.1f} ms")
    base = statistics.median(r["overlap_ms"] for r in got["b11434"])
    if base:
        fixed = statistics.median(r["overlap_ms"] for r in got["b11434-ppfix"])
        print(f"the fix keeps {100 * fixed / base:.0f} % of the unpatched overlap")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
