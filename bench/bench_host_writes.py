"""What learning the program's own stores into graph inputs costs (docs/integrated.md): llama-completion
of b11434 on the tiny model, on one integrated virtual device without latency, traced with
--host-writes off, infer (the default) and observe, rounds interleaved so that the machine's noise
falls on every mode alike. Prints the median wall time and prompt throughput of each mode and its
ratio to `off`.

    python bench/bench_host_writes.py [--rounds 5] [--words 400] [--ubatch 64]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ggml_trace.tracer import programs

MODES = ["off", "infer", "observe"]
WORDS = "the of and to a in is it you that he was for on are with as I his they be at one have this from".split()


def run(mode: str, prompt: str, ubatch: int, out: Path) -> tuple[float, float]:
    exe = Path(sys.executable).parent / "ggml-trace"
    cmd = [str(exe), "record", "--build", "b11434", "--no-nvml", "-o", str(out), "--virtual-devices", "1",
           "--vdev-integrated", "--host-writes", mode, "--",
           str(programs.program("b11434", "llama-completion")), "-m", str(programs.tiny_model()), "-p", prompt,
           "-n", "32", "-b", str(ubatch * 4), "-ub", str(ubatch), "-c", "4096", "--temp", "0", "-no-cnv",
           "-ngl", "99", "-dev", "VDEV0"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"{mode}: exit {r.returncode}\n{r.stderr[-2000:]}")
    m = re.search(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens", r.stderr)
    return wall, (int(m.group(2)) / (float(m.group(1)) / 1e3) if m else float("nan"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--words", type=int, default=400, help="prompt words (about five tokens each with the tiny model)")
    ap.add_argument("--ubatch", type=int, default=64)
    a = ap.parse_args()
    prompt = " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(a.words))
    walls = {m: [] for m in MODES}
    tps = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.rounds):
            for mode in MODES[i % len(MODES):] + MODES[:i % len(MODES)]:  # rotate who goes first
                w, t = run(mode, prompt, a.ubatch, Path(d) / f"{mode}.ggmltrace")
                walls[mode].append(w)
                tps[mode].append(t)
        sizes = {m: os.path.getsize(Path(d) / f"{m}.ggmltrace") for m in MODES}
    base_w, base_t = statistics.median(walls["off"]), statistics.median(tps["off"])
    print(f"host writes: llama-completion b11434, tiny model, {a.words}-word prompt, -ub {a.ubatch}, "
          f"one integrated virtual device; {a.rounds} interleaved rounds, medians")
    print(f"{'mode':<8} {'wall s':>8} {'vs off':>8} {'prompt t/s':>11} {'vs off':>8} {'trace KiB':>10}")
    for m in MODES:
        w, t = statistics.median(walls[m]), statistics.median(tps[m])
        print(f"{m:<8} {w:8.3f} {w / base_w:8.3f} {t:11.0f} {t / base_t:8.3f} {sizes[m] / 1024:10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
