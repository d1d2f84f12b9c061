"""The `ggml-trace` command."""
import argparse
import json
import sys
from pathlib import Path

from . import hooks as hooks_mod
from .build_hooks import DEFAULT_TARGETS, BuildError, build_hooks, build_windows_hooks
from .cli_common import (EXIT_BAD_INPUT, add_reading_args, load_trace, printable, read_in_windows, run_guarded,
                         say, shown)
from .record_args import _latencies
from ..analysis.allreduce import describe as describe_allreduce
from ..analysis.build_info import describe as describe_build


def cmd_summary(args) -> int:
    from ..analysis.summary import summarize

    windowed = _windowed_summary(args)
    if windowed:
        s, warnings, extra = windowed
    else:
        trace = load_trace(args)
        s, warnings = summarize(trace), trace.warnings
        extra = dict(damaged=bool(trace.damage), closed=trace.closed, not_attached=trace.not_attached)
        if args.more:
            extra.update(_together_summary(trace))
    if args.json:
        print(json.dumps(dict(s, warnings=warnings, **extra), indent=2))
        return 0
    if args.more:
        print(f"{len(extra['processes'])} traces read together (times on one axis, by the {extra['clock']}):")
        for p in extra["processes"]:
            print(f"  {printable(p['label'])}: {shown(p['path'])} (host {printable(p['host'])}, "
                  f"starts at +{p['offset_ns'] / 1e6:.3f} ms)")
        for link in extra["rpc"]:
            server = printable(link["server"]) if link["server"] else "a process not among these traces"
            print(f"  {printable(link['client'])}: {printable(link['backend'])} is served by {server}")
    else:
        print(f"{shown(args.file)}: {s['graphs']} scheduler graph computes")
    print(f"build: {printable(describe_build(s['build']))}")
    cols = ["name", "splits", "copies_in", "bytes_in", "syncs", "event_records", "event_waits", "busy_ns"]
    rows = [[printable(b[c]) for c in cols] for b in s["backends"]]
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)))
    for a in s["allreduce"]:
        print(printable(describe_allreduce(a)))
    for w in warnings:  # in the summary itself: nothing is lost silently
        print(f"warning: {printable(w)}")
    return 0


def _together_summary(trace) -> dict:
    """The processes of traces read together, how their clocks were aligned, and the RPC links."""
    from ..analysis.together import rpc_links

    links = rpc_links(trace).astype(object).where(lambda d: d.notna(), None)
    return dict(processes=trace.processes.to_dict("records"), clock=trace.clock,
                rpc=links.to_dict("records"))


def _windowed_summary(args):
    """(summary, warnings, extra JSON fields) counted in graph windows for a trace too large to
    load whole here (or with --windows); None otherwise."""
    from ..analysis import windows

    if args.graphs or args.more or not read_in_windows(args.file, args.windows):
        return None
    if not args.windows:
        say(f"ggml-trace summary: {shown(args.file)} is large: counting it in graph windows")
    s, info = windows.summarize_in_windows(args.file, strict=not args.lenient, progress=windows.print_progress)
    return s, info["warnings"], dict(damaged=bool(info["damage"]), windows=info["windows"])


def _us(v) -> str:
    return ",".join(f"{x:g}" for x in v) if isinstance(v, list) else f"{v:g}"


def cmd_scenario(args) -> int:
    from . import scenario

    try:
        r = scenario.run(args.name, build=args.build, runs=args.runs, latency_us=args.latency_us,
                         jitter_us=args.jitter_us, seed=args.seed, out_dir=args.out,
                         backend=args.backend, **({"devices": args.devices} if args.devices else {}))
    except (ValueError, RuntimeError, FileNotFoundError) as e:
        print(f"ggml-trace scenario: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(r.to_json(), indent=2))
    else:
        timing = ("real Vulkan device" if r.backend == "vulkan"
                  else f"latency {_us(r.latency_us)} us, jitter {r.jitter_us:g} us")
        print(f"{r.scenario} on {r.build}: {r.corrupt_runs} of {r.runs} runs corrupt "
              f"({timing}, seeds {r.seed}..{r.seed + r.runs - 1})")
        print(f"traces: {Path(r.traces[0]).parent}/" if r.traces else "no traces")
    return 0


def cmd_races(args) -> int:
    from ..analysis.races import format_report, races

    name = shown(args.file)
    windowed = _windowed(args)
    if windowed:
        report, warnings, damage = windowed
    else:
        trace = load_trace(args)
        if trace.not_attached:  # a green CI job on an empty trace would hide that nothing was traced
            say(f"ggml-trace races: {name}: nothing to analyse: the capture never attached: "
                f"{printable(trace.not_attached)}")
            return EXIT_BAD_INPUT
        report = races(trace)
        warnings, damage = trace.warnings, trace.damage
    for w in warnings:
        say(f"ggml-trace races: warning: {printable(w)}")
    if args.json:
        print(json.dumps(dict(report.to_json(), warnings=warnings, damaged=bool(damage)), indent=2))
    else:
        print(format_report(report, name))
    if report.operations == 0 or report.accesses == 0:
        say(f"ggml-trace races: {name}: nothing to analyse: the trace holds "
            f"{report.operations} operations and {report.accesses} accesses")
        return EXIT_BAD_INPUT
    if damage:  # dropped records can hide races and invent them
        say(f"ggml-trace races: {name}: the analysis rests on a damaged file "
            f"({len(damage)} problem(s), see the warnings above)")
        return EXIT_BAD_INPUT
    return 1 if len(report.findings) else 0


def attached_trace(args, command: str):
    """The trace of args.file, its warnings said; None (said why) when the capture never attached."""
    trace = load_trace(args)
    for w in trace.warnings:
        say(f"ggml-trace {command}: warning: {printable(w)}")
    if trace.not_attached:
        say(f"ggml-trace {command}: {shown(args.file)}: nothing to analyse: the capture never attached: "
            f"{printable(trace.not_attached)}")
        return None
    return trace


def cmd_streams(args) -> int:
    from ..analysis.stream_races import format_stream_report, stream_races

    name = shown(args.file)
    trace = attached_trace(args, "streams")
    if trace is None:
        return EXIT_BAD_INPUT
    report = stream_races(trace)
    if args.json:
        print(json.dumps(dict(report.to_json(), warnings=trace.warnings, damaged=bool(trace.damage)), indent=2,
                         default=str))
    else:
        print(format_stream_report(report, name))
    if report.splits == 0:
        why = trace.meta.get("cuda_streams")
        say(f"ggml-trace streams: {name}: nothing to analyse: no CUDA split in the trace's CUDA records"
            + (f" (the hooks said: {printable(why)})" if why and why != "on" else ""))
        return EXIT_BAD_INPUT
    if trace.damage:  # dropped records can hide an edge and invent an unordered pair
        say(f"ggml-trace streams: {name}: the analysis rests on a damaged file ({len(trace.damage)} problem(s))")
        return EXIT_BAD_INPUT
    return 1 if len(report.findings) else 0


def cmd_hang(args) -> int:
    from ..analysis.waits import blocked_threads, format_blocked

    trace = attached_trace(args, "hang")
    if trace is None:
        return EXIT_BAD_INPUT
    if len(trace.cuda) == 0:
        say(f"ggml-trace hang: {shown(args.file)}: nothing to analyse: no CUDA records (record with --cuda-streams)")
        return EXIT_BAD_INPUT
    end = max(int(trace.cuda["t"].max()), int(trace.calls["t_end"].max()) if len(trace.calls) else 0)
    blocked = blocked_threads(trace)
    print(format_blocked(blocked, shown(args.file), end))
    return 1 if blocked else 0


def cmd_stalls(args) -> int:
    from ..analysis.stalls import stalls, totals, words

    name = shown(args.file)
    trace = attached_trace(args, "stalls")
    if trace is None:
        return EXIT_BAD_INPUT
    s = stalls(trace)
    tot = totals(s)
    per_graph, per_boundary = tot.pop("per_graph"), tot.pop("per_boundary")
    top = s.sort_values("blocked_ns", ascending=False, kind="stable").head(args.top)
    if args.json:
        def rows(df):
            return json.loads(df.to_json(orient="records"))

        print(json.dumps(dict(tot, stalls=rows(s.assign(words=[words(r) for r in s.to_dict("records")])),
                              per_graph=rows(per_graph), per_boundary=rows(per_boundary), warnings=trace.warnings,
                              damaged=bool(trace.damage)), indent=2))
        return 0
    def ms(ns):
        return f"{ns / 1e6:.3f} ms"

    print(f"{name}: the host was blocked {ms(tot['blocked_ns'])} in {tot['calls']} calls "
          f"(waits {ms(tot['wait_blocked_ns'])}, synchronous copies {ms(tot['copy_blocked_ns'])}); "
          f"avoidable: {ms(tot['avoidable_blocked_ns'])} in {tot['avoidable_calls']} waits")
    worst = per_boundary.sort_values("blocked_ns", ascending=False, kind="stable").head(args.top)
    if len(worst):
        print("where the host was blocked longest:")
        for r in worst.to_dict("records"):
            print(f"  {r['boundary']}: {ms(r['blocked_ns'])} ({ms(r['avoidable_blocked_ns'])} avoidable, "
                  f"{r['calls']} calls)")
    if len(top):
        print("longest:")
        t0 = int(trace.calls["t_begin"].min())
        for r in top.to_dict("records"):
            print(f"  {ms(r['blocked_ns'])} at +{ms(r['t_begin'] - t0)}: {printable(words(r))}")
    return 0


def _run_set(spec: str) -> list:
    """A side of `compare`: a trace, a folder of traces (*.ggmltrace), or traces joined by commas."""
    paths = []
    for part in spec.split(","):
        p = Path(part)
        paths += sorted(p.glob("*.ggmltrace")) if p.is_dir() else [p]
    return paths


def cmd_compare(args) -> int:
    from ..analysis.compare import compare, format_compare

    sides = []
    for spec in (args.a, args.b):
        paths = _run_set(spec)
        if not paths:
            say(f"ggml-trace compare: {printable(spec)}: no traces there")
            return EXIT_BAD_INPUT
        traces = []
        for p in paths:
            args.file = str(p)
            traces.append(load_trace(args))
            for w in traces[-1].warnings:
                say(f"ggml-trace compare: warning: {shown(p)}: {printable(w)}")
        sides.append(traces)
    r = compare(*sides)
    if args.output:
        from ..analysis.compare_page import write_compare_page
        write_compare_page(sides[0][0], sides[1][0], r, args.a, args.b, args.output)
        say(f"ggml-trace compare: page written to {shown(args.output)}")
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(format_compare(r, printable(args.a), printable(args.b)))
    if args.fail_if_slower is not None:
        a, b = r["a"]["totals"]["wall_ns"], r["b"]["totals"]["wall_ns"]
        if b > a * (1 + args.fail_if_slower / 100.0):
            say(f"ggml-trace compare: B took {b / a - 1:+.1%} the wall time of A, more than "
                f"{args.fail_if_slower:g} % slower")
            return 1
    return 0


def _windowed(args):
    """(report, warnings, damage) of the analysis in graph windows (analysis/windows.py) when
    asked for, or when the trace is too large to analyse whole here; None otherwise."""
    from ..analysis import windows

    if args.graphs or args.no_windows or not read_in_windows(args.file, args.dask is not None or args.windows):
        return None
    strict = not args.lenient
    if args.dask is not None:
        where = args.dask or "a local cluster"
        say(f"ggml-trace races: analysing {shown(args.file)} in graph windows on Dask ({where})")
        report, info = windows.races_on_dask(args.file, args.dask or None, args.window_records,
                                             args.context_graphs, strict)
    else:
        if not args.windows:
            say(f"ggml-trace races: {shown(args.file)} is large: analysing it in graph windows with "
                f"{args.context_graphs} graphs of context (--no-windows: all at once)")
        report, info = windows.races_in_windows(args.file, args.window_records, args.context_graphs, strict,
                                                progress=windows.print_progress)
    say(f"ggml-trace races: {info['windows']} windows over {info['graphs']} graphs and {info['records']:,} records "
        f"(largest window {info['largest_window_records']:,} records)")
    return report, info["warnings"], info["damage"]


def cmd_force(args) -> int:
    from ..analysis import TraceFormatError

    from .force import ForceError, force, format_result

    log = (lambda line: None) if args.json else (lambda line: print(f"ggml-trace force: {line}", file=sys.stderr))
    try:
        r = force(args.file, race=args.race, runs=args.runs, slack_us=args.slack_us,
                  baseline_runs=args.baseline_runs, expect_output=args.expect_output, out_dir=args.out,
                  hooks=args.hooks, every_graph=args.every_graph, log=log)
    except (ForceError, TraceFormatError, OSError) as e:
        print(f"ggml-trace force: {e}", file=sys.stderr)
        return 2
    print(json.dumps(r.to_json(), indent=2) if args.json else format_result(r))
    # manifested: the trace proves it, or it cannot tell and the output shows it
    return 1 if r.manifested_runs or (r.verdict == "undetermined" and r.diverged_runs) else 0


def cmd_reduce(args) -> int:
    from ..analysis import TraceFormatError

    from .reduce import ReduceError, format_reduction, reduce

    log = (lambda line: None) if args.json else (lambda line: print(f"ggml-trace reduce: {line}", file=sys.stderr))
    try:
        r = reduce(args.file, args.output, race=args.race, build=args.build, backend=args.backend, log=log)
    except (ReduceError, TraceFormatError, ValueError, RuntimeError, OSError) as e:
        print(f"ggml-trace reduce: {printable(str(e))}", file=sys.stderr)
        return 2
    print(json.dumps(r.to_json(), indent=2) if args.json else format_reduction(r))
    return 0


def cmd_replay(args) -> int:
    from .reduce import ReduceError, format_replay, replay

    try:
        r = replay(args.directory, args.build, runs=args.runs, backend=args.backend, seed=args.seed)
    except (ReduceError, ValueError, RuntimeError, OSError) as e:
        print(f"ggml-trace replay: {printable(str(e))}", file=sys.stderr)
        return 2
    print(json.dumps(r.to_json(), indent=2) if args.json else format_replay(r))
    return 1 if r.verdict == "RED" else 0


def cmd_builds(args) -> int:
    for name, d in hooks_mod.pinned_builds().items():
        print(f"{name}\t{d / hooks_mod.HOOKS_NAME}")
    for base, lib in hooks_mod.load_registry().items():
        print(f"registered\t{lib}\t(for {base})")
    return 0


def cmd_build_hooks(args) -> int:
    def log(line):
        print(line, file=sys.stderr)

    try:
        if args.windows:
            name, where = build_windows_hooks(args.source, name=args.name, build_dir=args.build_dir, log=log)
        else:
            name, where = build_hooks(args.source, name=args.name, build_dir=args.build_dir, targets=args.targets,
                                      log=log)
    except BuildError as e:
        print(f"ggml-trace build-hooks: {e}", file=sys.stderr)
        return 2
    print(f"{name}\t{where}")
    log(f"ggml-trace build-hooks: ready: the hooks are beside the program's DLLs in {where}: `ggml-trace record -- "
        "PROGRAM.exe ...` (docs/windows.md)" if args.windows else
        f"ggml-trace build-hooks: ready: `ggml-trace record --build {name} -- PROGRAM`, "
        f"`ggml-trace scenario NAME --build {name}`")
    return 0


def cmd_register(args) -> int:
    try:
        hooks_mod.register(args.ggml_lib_dir, args.hooks)
    except hooks_mod.HooksNotFound as e:
        print(f"ggml-trace register-build: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ggml-trace", description="Trace ggml's backend scheduler.")
    from .. import __version__
    ap.add_argument("--version", action="version", version=f"ggml-trace {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    from .cli_record import add_record_commands
    from .cli_sweep import add_sweep_command

    add_record_commands(sub)
    add_sweep_command(sub)

    p = sub.add_parser("summary", help="per-backend splits, copies, synchronizations")
    add_reading_args(p, together=True)
    p.add_argument("--windows", action="store_true",
                   help="count in graph windows, in bounded memory (the default for a trace larger than an "
                        "eighth of this machine's memory)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_summary)

    p = sub.add_parser("scenario", help="run a scheduler scenario on virtual async devices, traced")
    p.add_argument("name", help="inputless-reuse, cpu-async-cpu, ...")
    p.add_argument("--build", default="b10531", help="one of the project's builds, or one build-hooks made (default: %(default)s)")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--latency-us", type=_latencies, default="5000", metavar="US[,US...]",
                   help="virtual device latency per operation; A,B,... gives one value per device")
    p.add_argument("--devices", type=int, default=0, help="virtual devices (meta-allreduce; default 3)")
    p.add_argument("--backend", choices=["vdev", "vulkan"], default="vdev",
                   help="vdev: virtual devices; vulkan: the real Vulkan device 0 of build/llama-BUILD-vulkan "
                        "(lavapipe here), with device timing (docs/vulkan.md)")
    p.add_argument("--jitter-us", type=float, default=0.0, help="seeded random extra latency, up to this")
    p.add_argument("--seed", type=int, default=0, help="jitter seed of the first run (then +1 per run)")
    p.add_argument("--out", help="directory for the traces (default: build/scenarios/NAME-BUILD)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_scenario)

    p = sub.add_parser("races", help="conflicting accesses that no synchronization orders (exit 1 if "
                       "any; 2 if the trace is unreadable, damaged or holds nothing to analyse)")
    add_reading_args(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--windows", action="store_true",
                   help="analyse in graph windows, in bounded memory (the default for a trace larger than an "
                        "eighth of this machine's memory; docs/races.md)")
    p.add_argument("--no-windows", action="store_true", help="analyse the whole trace at once, whatever its size")
    # analysis.windows.WINDOW_RECORDS (not imported here: the CLI starts without pandas)
    p.add_argument("--window-records", type=int, default=2_000_000, metavar="N",
                   help="records a window aims at (default: %(default)s)")
    p.add_argument("--context-graphs", type=int, default=2, metavar="K",
                   help="graphs read before each window to order its operations (default: %(default)s)")
    p.add_argument("--dask", nargs="?", const="", metavar="ADDRESS",
                   help="run the windows on Dask: a local cluster, or the scheduler at ADDRESS (its workers "
                        "must see the trace at the same path)")
    p.set_defaults(fn=cmd_races)

    p = sub.add_parser("streams", help="inside CUDA splits: which node ran on which stream, and the accesses "
                       "nothing orders between streams (a trace recorded with --cuda-streams; exit 1 if any, "
                       "2 if nothing to analyse; docs/cuda-streams.md)")
    add_reading_args(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(fn=cmd_streams)

    p = sub.add_parser("hang", help="the CUDA calls a hung program's threads never returned from, and the chain of "
                       "streams and events each waited for (a trace recorded with --cuda-streams; exit 1 if any)")
    add_reading_args(p)
    p.set_defaults(fn=cmd_hang)

    p = sub.add_parser("stalls", help="every call that blocked the host: what it waited for, and whether any "
                       "access needed it (docs/stalls.md)")
    add_reading_args(p)
    p.add_argument("--json", action="store_true", help="print totals, per graph, per split boundary and every stall as JSON")
    p.add_argument("--top", type=int, default=10, metavar="N", help="stalls and split boundaries to list (default: %(default)s)")
    p.set_defaults(fn=cmd_stalls)

    p = sub.add_parser("compare", help="two traces, or two sets of runs, side by side: host-blocked time, device "
                       "busy and overlap, splits, copies, synchronizations (docs/compare.md)")
    p.add_argument("a", help="side A: a trace, a folder of traces, or traces joined by commas")
    p.add_argument("b", help="side B, the same way")
    p.add_argument("--lenient", action="store_true", help="load damaged traces, dropping what is bad")
    p.add_argument("--json", action="store_true", help="each side's totals (medians, ranges) and the differences")
    p.add_argument("-o", "--output", metavar="PAGE.html", help="also write one page with both timelines on one axis")
    p.add_argument("--fail-if-slower", type=float, metavar="PCT",
                   help="exit 1 when B's median wall time is more than PCT %% above A's")
    p.set_defaults(fn=cmd_compare, graphs=None)

    p = sub.add_parser("force", help="delay a race's earlier operation and re-run the traced program "
                       "(exit 1 if the race manifested)")
    p.add_argument("file")
    p.add_argument("--race", type=int, metavar="N", help="the race numbered N by `ggml-trace races` "
                   "(default: the latent race with the smallest margin)")
    p.add_argument("--runs", type=int, default=3, help="runs with the delay (default: %(default)s)")
    p.add_argument("--slack-us", type=float, metavar="S",
                   help="added to the delay the trace calls for (default: the larger of 10000 and that delay)")
    p.add_argument("--baseline-runs", type=int, default=2, help="runs without the delay (default: %(default)s)")
    p.add_argument("--expect-output", metavar="FILE", help="the program's correct stdout, to compare with")
    p.add_argument("--out", help="directory for the runs' traces and outputs (default: a new temporary one, kept)")
    p.add_argument("--hooks", help="hook library (default: the one built for the program's ggml)")
    p.add_argument("--every-graph", action="store_true",
                   help="delay the earlier operation in every graph, not only in the first occurrence's")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_force)

    p = sub.add_parser("reduce", help="a race of a trace as a small reproduction that runs without the model or "
                       "the GPUs (docs/reduce.md; exit 2 when it cannot keep the race)")
    p.add_argument("file")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="where the reproduction goes")
    p.add_argument("--race", type=int, metavar="N", help="the race numbered N by `ggml-trace races` (default: 1)")
    p.add_argument("--build", help="the build to confirm it on (default: the trace's, without -vulkan)")
    p.add_argument("--backend", choices=["vdev", "vulkan"], default="vdev",
                   help="confirm on virtual devices (default) or on the build's real Vulkan device")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_reduce)

    p = sub.add_parser("replay", help="run a reproduction written by `reduce` on a build: RED (exit 1) or GREEN (0)")
    p.add_argument("directory")
    p.add_argument("--build", required=True, help="a pinned or registered build (`ggml-trace builds`)")
    p.add_argument("--runs", type=int, default=20, help="default: %(default)s")
    p.add_argument("--backend", choices=["vdev", "vulkan"], default="vdev",
                   help="virtual devices (default) or the build's real Vulkan device (build/llama-BUILD-vulkan)")
    p.add_argument("--seed", type=int, default=0, help="jitter seed of the first run")
    p.add_argument("--json", action="store_true", help="runs, red_runs, manifested_runs, race_runs, verdict, ...")
    p.set_defaults(fn=cmd_replay)

    from .cli_views import add_view_commands

    add_view_commands(sub)

    from .cli_diagnose import add_diagnose_command

    add_diagnose_command(sub)

    p = sub.add_parser("builds", help="list the ggml builds that have hooks")
    p.set_defaults(fn=cmd_builds)

    p = sub.add_parser("build-hooks", help="build hooks and scenario programs for a llama.cpp build the project "
                       "does not pin, and register it by name (docs/building.md)")
    p.add_argument("source", help="llama.cpp source tree (git checkout or unpacked sdist), or an upstream build "
                   "number like b10502 (its sdist is fetched from the package registry)")
    p.add_argument("--name", help="name for --build (default: bNNNNN from the sources, else the folder name)")
    p.add_argument("--build-dir", help="an existing shared-library build of SOURCE (its folder or bin/); "
                   "default: build ggml and the llama programs into build/llama-NAME/")
    p.add_argument("--targets", help="CMake targets to build (default: %s; 'ggml' for ggml alone)"
                   % DEFAULT_TARGETS)
    p.add_argument("--windows", action="store_true",
                   help="cross-build the hooks for a Windows build with MinGW-w64: beside --build-dir's DLLs "
                        "(a Windows build's folder), else with SOURCE's ggml into build/win/llama-NAME/ (docs/windows.md)")
    p.set_defaults(fn=cmd_build_hooks)

    p = sub.add_parser("register-build", help="use HOOKS for programs that load the ggml in GGML_LIB_DIR")
    p.add_argument("ggml_lib_dir")
    p.add_argument("hooks")
    p.set_defaults(fn=cmd_register)

    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    if getattr(args, "cmd", None) and args.cmd[0] == "--":
        args.cmd = args.cmd[1:]
    args.invocation = [str(a) for a in argv]  # as given: a report says how to run it again
    return run_guarded(args.command, args, args.fn)  # one line and exit 2, never a traceback


if __name__ == "__main__":
    sys.exit(main())
