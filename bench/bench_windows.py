"""What tracing costs a Windows program under Wine: b10531's sched-loop.exe (one small graph computed
N times through the scheduler, cross-built by `make setup`) untraced and traced, rounds alternated
side by side (this machine is shared and noisy), and the same program's Linux build the same way
for comparison. Prints the medians and the traced/untraced ratios.

usage: python bench/bench_windows.py [--graphs N] [--rounds R]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd: list, env: dict) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({r.returncode}): {r.stderr[-500:]}")
    return time.perf_counter() - t0


def main() -> None:
    from ggml_trace.tracer import windows
    from ggml_trace.tracer.record import trace_env

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    wine = windows.wine()
    win_bin = ROOT / "build" / "win" / "llama-b10531" / "bin"
    lin_bin = ROOT / "build" / "hooks-b10531"
    if wine is None or not (win_bin / "sched-loop.exe").exists():
        sys.exit("needs `make setup` (Wine and the Windows builds under build/win)")
    env = dict(os.environ, WINEPREFIX=str(ROOT / "build" / "wine"), WINEDEBUG="-all")
    out = Path(tempfile.mkdtemp()) / "t.ggmltrace"
    lin_hooks = ROOT / "build" / "llama-b10531" / "bin" / "libggml-trace-hooks.so"
    cases = {
        "windows (wine)": ([wine, str(win_bin / "sched-loop.exe"), str(a.graphs)], win_bin / windows.HOOKS_DLL),
        "linux": ([str(lin_bin / "sched-loop"), str(a.graphs)], lin_hooks),
    }
    for name, (cmd, hooks) in cases.items():
        plain, traced = [], []
        for _ in range(a.rounds):
            plain.append(timed(cmd, env))
            for f in out.parent.glob(out.name + "*"):
                f.unlink()
            traced.append(timed(cmd, trace_env(hooks, out, base=env)))
        p_med, t_med = statistics.median(plain), statistics.median(traced)
        print(f"{name:15s} {a.graphs} graphs: untraced {p_med * 1e3:7.1f} ms, traced {t_med * 1e3:7.1f} ms "
              f"(x{t_med / p_med:.2f}; +{(t_med - p_med) / a.graphs * 1e6:.1f} us a graph), medians of {a.rounds}")


if __name__ == "__main__":
    main()
