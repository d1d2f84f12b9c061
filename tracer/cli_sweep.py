"""`ggml-trace sweep`: its parser and handler (the engine: sweep.py; what it writes: sweep_report.py)."""
from __future__ import annotations

import sys
from pathlib import Path

from .sweep import BACKENDS, DEFAULT_SLOW_US, DEFAULT_TIMEOUT_S, PATTERNS, SweepError, SweepOptions, sweep


def cmd_sweep(args) -> int:
    if args.runs is not None and args.runs < 1:
        print("ggml-trace sweep: --runs must be 1 or more", file=sys.stderr)
        return 2
    options = SweepOptions(out=Path(args.output), builds=tuple(args.build or ["b10531"]), backend=args.backend,
                           patterns=tuple(args.pattern or ()), quick=args.quick, runs=args.runs,
                           slow_us=args.slow_us, seed=args.seed, jobs=args.jobs, timeout=args.timeout,
                           devices=args.devices)
    return run_sweep(options)


def run_sweep(options: SweepOptions) -> int:
    """The sweep, a line per cell on stderr, DIR/sweep.md and DIR/sweep.json; exit 2 when something
    could not run, 1 when a cell is RED or RACE, 0 when every one is GREEN."""
    from . import sweep_report

    try:
        result = sweep(options, log=lambda line: print(line, file=sys.stderr, flush=True))
    except SweepError as e:
        print(f"ggml-trace sweep: {e}", file=sys.stderr)
        return 2
    j, md = sweep_report.write(result, Path(options.out))
    counts = result.to_json()["counts"]
    print(f"{md}: {len(result.cells)} cells, " + ", ".join(f"{n} {v}" for v, n in counts.items() if n))
    print(f"{j}")
    return result.exit_status


def add_sweep_command(sub) -> None:
    p = sub.add_parser("sweep", help="every scheduler pattern on every device set of this machine, on each build, "
                                     "with device-side delays: RED / RACE / GREEN per cell (docs/sweep.md)")
    p.add_argument("-o", "--output", required=True, help="folder for sweep.md, sweep.json and the cells' traces")
    p.add_argument("--build", action="append", help="a build with hooks (`ggml-trace builds`); repeatable "
                                                    "(default: b10531)")
    p.add_argument("--backend", choices=BACKENDS, default="vdev",
                   help="the device sets: virtual devices, Vulkan0 beside them, CUDA's devices, or all of them")
    p.add_argument("--pattern", action="append", help=f"repeatable (default: all): {', '.join(PATTERNS)}")
    p.add_argument("--quick", action="store_true", help="each device slowed in turn, once (a first look; CI)")
    p.add_argument("--runs", type=int, help="runs per cell: a plain one, each device slowed, then random delays "
                                            "(with --quick: each device slowed in turn, this many runs)")
    p.add_argument("--slow-us", type=float, default=DEFAULT_SLOW_US,
                   help="the delay before each operation of a slowed device (µs)")
    p.add_argument("--seed", type=int, default=0, help="of the random delays")
    p.add_argument("--jobs", type=int, default=0, help="cells run at a time (default: one per core)")
    p.add_argument("--devices", type=int, default=3, choices=range(2, 9), metavar="{2..8}",
                   help="devices of each kind in a set: virtual ones, CUDA's (GGML_CUDA_DEVICES; default 3)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds a run may take")
    p.set_defaults(fn=cmd_sweep)
