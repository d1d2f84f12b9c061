"""`ggml-trace diagnose`: its command-line options, read once into a Program and DiagnoseOptions
(tracer/diagnose.py does the work)."""
from __future__ import annotations

import argparse

from . import diagnose as diag
from . import hooks as hooks_mod
from .cli_common import EXIT_BAD_INPUT, printable, say
from .delay_spec import DelaySpecError
from .record_args import Program, TraceOptions, add_program_options


def options_of(args: argparse.Namespace) -> diag.DiagnoseOptions:
    return diag.DiagnoseOptions(args.output, runs=args.runs, reference=args.reference,
                                reference_dev=args.reference_dev, no_reference=args.no_reference,
                                timeout=args.timeout, max_races=args.max_races, force_runs=args.force_runs,
                                replay_runs=args.replay_runs, trace=TraceOptions.from_args(args),
                                invocation=list(args.invocation))


def cmd_diagnose(args) -> int:
    def log(line):
        say(f"ggml-trace diagnose: {printable(line)}")

    try:
        d = diag.diagnose(Program.of(args.cmd), options_of(args), log)
    except (diag.DiagnoseError, hooks_mod.HooksNotFound, DelaySpecError) as e:
        say(f"ggml-trace diagnose: {printable(e)}")
        return EXIT_BAD_INPUT
    print("\n".join(printable(line) for line in diag.format_diagnosis(d).split("\n")))  # names from the trace
    return d.status


def add_diagnose_command(sub) -> None:
    """Adds `diagnose` to the `ggml-trace` argument parser."""
    p = sub.add_parser("diagnose", help="run a program N times traced and once on one device, compare the outputs, "
                       "find, force and reduce its races, and write a bug report (exit 1: a race, a wrong output, a "
                       "crash or a hang; 0: none; docs/diagnose.md)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="where the report and the runs go")
    p.add_argument("--runs", type=int, default=diag.DEFAULT_RUNS, help="traced runs (default: %(default)s)")
    ref = p.add_mutually_exclusive_group()
    ref.add_argument("--reference-dev", metavar="DEV",
                     help="the reference runs the program with -dev DEV (default: none, llama.cpp's CPU alone)")
    ref.add_argument("--reference", metavar="ARGS",
                     help="the reference runs the program with these arguments in place of the same options "
                          "(others appended), e.g. '-ngl 0' or '-dev Vulkan0 -sm none'")
    ref.add_argument("--no-reference", action="store_true",
                     help="no reference run: compare the traced runs among themselves (a program that is not llama.cpp's)")
    add_program_options(p)
    p.add_argument("--timeout", type=float, default=diag.DEFAULT_TIMEOUT_S, metavar="S",
                   help="a run still going after S seconds is taken as hung and ended (default: %(default)g)")
    p.add_argument("--max-races", type=int, default=diag.MAX_RACES, metavar="N",
                   help="races forced and reduced, the most frequent first (default: %(default)s)")
    p.add_argument("--force-runs", type=int, default=diag.FORCE_RUNS, metavar="N",
                   help="forced runs per race (default: %(default)s; 0: do not force)")
    p.add_argument("--replay-runs", type=int, default=diag.REPLAY_RUNS, metavar="N",
                   help="replays of each reduction on the run's build (default: %(default)s; 0: do not reduce)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS...")
    p.set_defaults(fn=cmd_diagnose)
