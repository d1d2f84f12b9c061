"""How long a device-side delay made of matrix products (`where = "work"`, docs/delay.md) keeps a
real Vulkan queue busy against what was asked: N recordings of `ggml-trace-scenarios inputless-reuse`
on Vulkan0 (here Mesa's lavapipe, b10531-vulkan; on a GPU host its build, NVIDIA's driver) with
`--delay Vulkan0:graph_compute,split=1:DELAY_US` and `--device-timing`. Prints the sized product's
time per run and the quantiles of the stall (docs/delay.md: the split's start bound minus the end
bound of the work before it) over the request. tests/external/test_sweep_vulkan.py checks only that
most of the delay is spent on the queue.

usage: python bench/bench_work_delay.py [--runs N] [--delay-us US] [--build B]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--delay-us", type=int, default=20_000)
    ap.add_argument("--build", default="b10531-vulkan", help="a pinned build whose Vulkan0 runs it")
    args = ap.parse_args()
    from ggml_trace import analysis
    from ggml_trace.analysis.delay import delay_stalls
    from ggml_trace.tracer import programs

    exe = programs.program(args.build, "ggml-trace-scenarios")
    tool = Path(sys.executable).parent / "ggml-trace"
    env = {**os.environ, "GGML_VK_VISIBLE_DEVICES": "0"}
    products, ratios = [], []
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.runs):
            out = Path(d) / f"{i}.ggmltrace"
            r = subprocess.run([str(tool), "record", "--build", args.build, "--no-nvml", "--device-timing",
                                "--delay", f"Vulkan0:graph_compute,split=1:{args.delay_us}", "-o", str(out), "--",
                                str(exe), "inputless-reuse", "--backend", "vulkan"],
                               env=env, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"bench_work_delay: run {i} failed ({r.returncode}): {r.stderr[-2000:]}", file=sys.stderr)
                return 2
            t = analysis.load(out)
            sized = [v for k, v in t.meta.items() if k.startswith("delay.work.")]
            products.append(float(re.search(r"([0-9.]+) us each", sized[0]).group(1)))
            (stall,) = delay_stalls(t)["stall_ns"]
            ratios.append(stall / (args.delay_us * 1000))
    q = np.quantile(ratios, [0, 0.1, 0.5, 0.9, 1])
    print(f"work delay on Vulkan0 ({args.build}), {args.runs} runs of {args.delay_us} us asked: stall / asked "
          f"min {q[0]:.2f}, p10 {q[1]:.2f}, median {q[2]:.2f}, p90 {q[3]:.2f}, max {q[4]:.2f}; "
          f"{sum(x < 1 for x in ratios)} of {args.runs} shorter than asked")
    print(f"a product as sized at start: {min(products):.0f}-{max(products):.0f} us (median {np.median(products):.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
