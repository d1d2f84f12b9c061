"""`ggml-trace sweep`: its parser and handler (the engines: sweep.py, the patterns; sweep_program.py, a
program's configurations; what they write: sweep_report.py)."""
from __future__ import annotations

import shlex
import sys
from dataclasses import replace
from pathlib import Path

from .record_args import TraceOptions, add_program_options
from .sweep import (BACKENDS, DEFAULT_SLOW_US, DEFAULT_SLOWINGS, DEFAULT_TIMEOUT_S, PATTERNS, SLOWINGS, SweepError,
                    SweepOptions, sweep)
from .sweep_program import (DESIGNS, MatrixError, ProgramSweepOptions, default_axes, load_matrix, parse_axis,
                            sweep_program)


def cmd_sweep(args) -> int:
    if args.runs is not None and args.runs < 1:
        print("ggml-trace sweep: --runs must be 1 or more", file=sys.stderr)
        return 2
    if args.program or args.matrix or args.axis:
        try:
            return run_sweep(program_options(args))
        except (MatrixError, ValueError) as e:
            print(f"ggml-trace sweep: {e}", file=sys.stderr)
            return 2
    options = SweepOptions(out=Path(args.output), builds=tuple(args.build or ["b10531"]), backend=args.backend,
                           patterns=tuple(args.pattern or ()), quick=args.quick, runs=args.runs,
                           slow_us=args.slow_us, slowings=tuple(dict.fromkeys(args.slow or DEFAULT_SLOWINGS)),
                           seed=args.seed, jobs=args.jobs,
                           devices=args.devices, timeout=args.timeout or DEFAULT_TIMEOUT_S)
    return run_sweep(options)


def program_options(args) -> ProgramSweepOptions:
    """A program sweep's options from the command line: --program and --matrix (the file's program
    and design unless given here), --axis added to the file's axes; the default matrix without any."""
    program, design, axes = load_matrix(Path(args.matrix)) if args.matrix else (None, None, ())
    program = args.program or program
    if not program:
        raise MatrixError("a program sweep wants the command: --program '...' (or \"program\" in --matrix)")
    words = tuple(shlex.split(program))
    axes = axes + tuple(parse_axis(a) for a in args.axis or ())
    trace = replace(TraceOptions.from_args(args), build=None)  # each --build is a column
    builds = tuple(args.build or ())
    return ProgramSweepOptions(out=Path(args.output), program=words, axes=axes or default_axes(words, builds),
                               design=args.design or design or "each", builds=builds,
                               quick=args.quick, runs=args.runs, reference=args.reference,
                               reference_dev=args.reference_dev, max_races=args.max_races,
                               force_runs=args.force_runs, replay_runs=args.replay_runs,
                               timeout=args.timeout if args.timeout is not None else 600.0, trace=trace)


def run_sweep(options: SweepOptions | ProgramSweepOptions) -> int:
    """The sweep, a line per cell on stderr, DIR/sweep.md and DIR/sweep.json; exit 2 when something
    could not run, 1 when a cell is RED or RACE, 0 when every one is GREEN."""
    from . import sweep_report

    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    try:
        result = sweep_program(options, log) if isinstance(options, ProgramSweepOptions) else sweep(options, log)
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
                   help="the device sets: virtual devices, Vulkan0 beside them, an RPC server on loopback beside "
                        "them, CUDA's devices, or all of them")
    p.add_argument("--pattern", action="append", help=f"repeatable (default: all): {', '.join(PATTERNS)}")
    p.add_argument("--quick", action="store_true", help="each device slowed in turn, once (a first look; CI)")
    p.add_argument("--runs", type=int, help="runs per cell: a plain one, each device slowed, then random delays "
                                            "(with --quick: each device slowed in turn, this many runs)")
    p.add_argument("--slow-us", type=float, default=DEFAULT_SLOW_US,
                   help="the delay before each operation of a slowed device (µs)")
    p.add_argument("--slow", action="append", choices=list(SLOWINGS), metavar="WHAT",
                   help="what a slowed device's runs slow, each in turn (repeatable; default: queue): queue, its "
                        "own queue alone; compute, its splits alone; copies-from, the copies it sends; copies-into, "
                        "the copies into it, which stalls their source's queue where the source is asynchronous")
    p.add_argument("--seed", type=int, default=0, help="of the random delays")
    p.add_argument("--jobs", type=int, default=0, help="cells run at a time (default: one per core)")
    p.add_argument("--devices", type=int, default=3, choices=range(2, 9), metavar="{2..8}",
                   help="devices of each kind in a set: virtual ones, CUDA's (GGML_CUDA_DEVICES; default 3)")
    p.add_argument("--timeout", type=float, help=f"seconds a run may take (default: {DEFAULT_TIMEOUT_S:g}; "
                                                 "a program's: 600)")
    g = p.add_argument_group("real configurations", "a program over a matrix of options and environment "
                             "variables, each configuration diagnosed (docs/sweep.md)")
    g.add_argument("--program", help="the command line, one string; {bin} stands for each --build's bin folder")
    g.add_argument("--axis", action="append", metavar="'NAME: ALT | ALT'",
                   help="an axis of the matrix: alternatives of options and NAME=VALUE variables, '' for "
                        "the command as given (repeatable; default: llama.cpp's schedule-changing options)")
    g.add_argument("--matrix", metavar="FILE", help='a matrix file: {"program", "design", "axes": {NAME: [ALT, ...]}}')
    g.add_argument("--design", choices=DESIGNS, help="each: the command as given, then each alternative alone "
                                                     "(default); full: every combination")
    g.add_argument("--reference", metavar="ARGS", help="arguments put into the command for each reference run")
    g.add_argument("--reference-dev", metavar="DEV", help="the device each reference runs on (default: none, "
                                                          "llama.cpp's CPU)")
    g.add_argument("--max-races", type=int, default=1, help="races forced per configuration (default: 1)")
    g.add_argument("--force-runs", type=int, default=2, help="forced runs per race (default: 2)")
    g.add_argument("--replay-runs", type=int, default=0, help="reduce each forced race and replay it this many "
                                                              "times (default: 0, not reduced)")
    add_program_options(g, build=False)
    p.set_defaults(fn=cmd_sweep)
