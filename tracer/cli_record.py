"""`ggml-trace` commands that run a program traced and keep its trace: record, snapshot."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import hooks as hooks_mod
from . import snapshots, windows
from .cli_common import EXIT_BAD_INPUT, printable, say, shown
from .delay_spec import ENV as DELAY_ENV, DelaySpecError
from .record import record, ring_env
from .record_args import (CHECK_EVERY_S, RECORD_OUTPUT, Program, RecordOptions, TraceOptions, add_program_options,
                          hooks_library, patched_ggml, program_env)


def cmd_record(args) -> int:
    if not args.cmd:
        print("ggml-trace record: give the program to run after --", file=sys.stderr)
        return 2
    options = RecordOptions(args.output, TraceOptions.from_args(args), paused=args.paused, ring=args.ring,
                            ring_max=args.ring_max, check=args.check, check_every=args.check_every)
    return run_record(Program.of(args.cmd), options)


def run_record(program: Program, options: RecordOptions) -> int:
    """`ggml-trace record`: the program run under the hooks, what became of it said on stderr; its
    exit status (128 + N when killed by signal N)."""
    trace = options.trace
    try:
        lib = hooks_library(program, trace)
        ggml_dir = patched_ggml(program, trace)
    except hooks_mod.HooksNotFound as e:
        print(f"ggml-trace record: {e}", file=sys.stderr)
        return 2
    if ggml_dir:  # a patched build of the program's ggml: run the program on it
        say(f"ggml-trace: {program.cmd[0]} runs on the ggml of build {trace.build} ({ggml_dir})")
    env = program_env(trace, ggml_dir)
    if options.ring:
        try:
            env.update(ring_env(options.ring, options.ring_max))
        except ValueError as e:
            print(f"ggml-trace record: {e}", file=sys.stderr)
            return 2
    elif options.ring_max:
        print("ggml-trace record: --ring-max goes with --ring SECONDS", file=sys.stderr)
        return 2
    if options.check and options.check_every <= 0:
        print("ggml-trace record: --check-every must be above 0", file=sys.stderr)
        return 2
    try:
        rec = record(program.cmd, lib, Path(options.output), paused=options.paused, env=env, nvml=trace.nvml,
                     nvml_interval_ms=trace.nvml_interval_ms, delays=trace.delays, check=options.check,
                     check_every=options.check_every, on_snapshot=_say_snapshot)
    except DelaySpecError as e:
        print(f"ggml-trace record: {e} (see docs/delay.md)", file=sys.stderr)
        return 2
    except (hooks_mod.HooksNotFound, ValueError) as e:  # ValueError: --launch without a Windows program
        print(f"ggml-trace record: {e}", file=sys.stderr)
        return 2
    rules = ";".join(trace.delays) or env.get(DELAY_ENV, "")
    if rules:
        print(f"ggml-trace: delay rules in effect: {rules} (injected delays: trace.delays)", file=sys.stderr)
    if not rec.traces:
        launch = ("; a Windows program that never calls ggml_backend_load_all() takes the hooks only with --launch"
                  if windows.is_windows_hooks(lib) and not trace.launch else "")
        print(f"ggml-trace: {program.cmd[0]} ({rec.describe_exit()}) wrote no trace: it never created a "
              f"ggml backend scheduler, or the hooks did not match its ggml (see the message above){launch}",
              file=sys.stderr)
    for t in rec.traces:
        print(f"ggml-trace: trace written to {t} ({t.stat().st_size} bytes; program {rec.describe_exit()})",
              file=sys.stderr)
    if rec.nvml:
        print(f"ggml-trace: {rec.nvml}", file=sys.stderr)
    return rec.returncode if rec.returncode >= 0 else 128 - rec.returncode


def _say_snapshot(snap, why: str):
    if isinstance(snap, str):
        say(f"ggml-trace: {why}: no snapshot: {printable(snap)}")
    else:
        say(f"ggml-trace: {why}: snapshot {shown(snap.path)} ({snap.chunks} chunks"
            + (f", {snap.skipped} recycled while read" if snap.skipped else "") + ")")


def cmd_snapshot(args) -> int:
    source = int(args.source) if args.source.isdigit() else Path(args.source)
    try:
        snap = snapshots.take(source, args.output)
    except snapshots.SnapshotError as e:
        say(f"ggml-trace snapshot: {printable(e)}")
        return EXIT_BAD_INPUT
    _say_snapshot(snap, "snapshot")
    print(snap.path)
    return 0


def add_record_commands(sub) -> None:
    """Adds `record` and `snapshot` to the `ggml-trace` argument parser."""
    p = sub.add_parser("record", help="run a program under the hooks and write a trace")
    p.add_argument("-o", "--output", default=RECORD_OUTPUT, help="trace file (default: %(default)s)")
    add_program_options(p)
    p.add_argument("--paused", action="store_true", help="start paused; the program calls tracer.start()")
    p.add_argument("--ring", metavar="SECONDS|SIZE",
                   help="flight recorder: keep only the last SECONDS (e.g. 5) or SIZE (e.g. 256M) of the "
                        "run in a bounded file; metadata and names are always kept (docs/flight-recorder.md)")
    p.add_argument("--ring-max", metavar="SIZE", help="with --ring SECONDS: the most the ring may take (default 1G)")
    p.add_argument("--check", metavar="CMD",
                   help="shell command run every --check-every seconds while the program runs; when it "
                        "starts failing, a snapshot of the trace is kept (GGML_TRACE_PID is the program's pid)")
    p.add_argument("--check-every", type=float, default=CHECK_EVERY_S, metavar="S", help="(default: %(default)g)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS...")
    p.set_defaults(fn=cmd_record)

    p = sub.add_parser("snapshot", help="copy the trace of a running program (a flight recorder's window)")
    p.add_argument("source", help="the traced program's PID, or its trace file")
    p.add_argument("-o", "--output", help="where (default: TRACE.snapshot-N.ggmltrace beside the trace)")
    p.set_defaults(fn=cmd_snapshot)
