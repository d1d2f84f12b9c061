"""`make demo`: the tool's main job on its embedded default.

1. The race of llama.cpp issue #23321, reproduced on virtual async devices: the `inputless-reuse`
   scenario on llama.cpp b10524 (before the fix) and b10531 (after it), with the race verdicts and
   each run's timeline and bug-report page.
2. A real llama.cpp run on two virtual async devices: b10531's llama-simple offloading every layer
   across VDEV0 and VDEV1 (copies, events and synchronizations between them), traced, summarised
   and checked for races.

`--rpc` runs a CPU + RPC run instead of (2) (ggml-rpc-server on loopback, llama-completion with the
KV cache on the CPU); it needs b10531's llama-completion and ggml-rpc-server (`make setup`).
"""
import argparse
import os
import sys
from pathlib import Path

from .. import analysis
from ..analysis.races import verdict_words
from .hooks import build_root
from .programs import hooks, program, rpc_server, tiny_model
from .record import record
from . import scenario

RUNS = 20
VDEV_LATENCY_US = 200  # the virtual devices' latency in the real run: their work ends after the host's call


def race_demo(out_dir: Path):
    for build in ("b10524", "b10531"):
        r = scenario.run("inputless-reuse", build=build, runs=RUNS, out_dir=out_dir / f"inputless-reuse-{build}")
        print(f"\n== inputless-reuse on {build}: {r.corrupt_runs} of {r.runs} runs corrupt "
              f"(virtual device latency {r.latency_us:g} us)")
        shown = r.corrupt[0] if r.corrupt else 0
        trace_path = Path(r.traces[shown])
        trace = analysis.load(trace_path)
        found = analysis.races(trace)
        report = found.to_json()
        print(f"   race analysis of run {shown} ({'corrupt' if r.corrupt else 'correct'}): "
              f"{len(report['races'])} race(s)")
        for race in report["races"]:
            print(f"   - {race['class']} ({verdict_words(race)}): {race['missing']}")
        html = trace_path.with_suffix(".timeline.html")
        page = trace_path.with_suffix(".report.html")
        analysis.timeline(trace, races=report).write_html(str(html), include_plotlyjs=True)
        analysis.write_report(trace, str(page))
        print(f"   timeline: {html}\n   report:   {page}")


def summarise(paths) -> None:
    for path in paths:
        trace = analysis.load(path)
        s = analysis.summarize(trace)
        print(f"\n{path}: {s['graphs']} scheduler graph computes, {len(trace.calls)} calls, "
              f"{len(trace.accesses)} byte ranges")
        print(f"   {'backend':<24} {'splits':>6} {'copies in':>9} {'bytes in':>10} {'syncs':>6} {'events':>6}")
        for b in s["backends"]:
            print(f"   {b['name']:<24} {b['splits']:>6} {b['copies_in']:>9} {b['bytes_in']:>10} {b['syncs']:>6} "
                  f"{b['event_records']:>6}")
        print(f"   races: {len(analysis.races(trace).to_json()['races'])}")


def vdev_demo(out_dir: Path) -> int:
    build = "b10531"
    trace = out_dir / "llama-simple-vdev.ggmltrace"
    cmd = [str(program(build, "llama-simple")), "-m", str(tiny_model()), "-n", "16", "-ngl", "99", "the of and"]
    print(f"\n== a real llama.cpp run on two virtual async devices\n$ ggml-trace record --virtual-devices 2 "
          f"--vdev-latency-us {VDEV_LATENCY_US} -o {trace} -- {' '.join(cmd)}", flush=True)
    env = dict(os.environ, GGML_TRACE_VIRTUAL_DEVICES="2", GGML_TRACE_VDEV_LATENCY_US=str(VDEV_LATENCY_US))
    with open(out_dir / "llama-simple.log", "w") as log:
        rec = record(cmd, hooks(build), trace, stdout=log, stderr=log, env=env)
    if rec.returncode != 0 or not rec.traces:
        print(f"demo: llama-simple failed ({rec.describe_exit()}); see {out_dir / 'llama-simple.log'}", file=sys.stderr)
        return 1
    summarise([trace])
    return 0


def rpc_demo(out_dir: Path) -> int:
    build = "b10531"
    client_trace = out_dir / "llama-completion.ggmltrace"
    server_trace = out_dir / "rpc-server.ggmltrace"
    with rpc_server(build, trace=server_trace) as endpoint:
        cmd = [str(program(build, "llama-completion")), "-m", str(tiny_model()), "--rpc", endpoint,
               "-ngl", "99", "-nkvo", "-n", "16", "-p", "the of and", "--temp", "0", "--seed", "1", "-no-cnv"]
        print("\n== a real CPU + RPC run\n$ ggml-trace record -o", client_trace, "--", " ".join(cmd), flush=True)
        with open(out_dir / "llama.log", "w") as log:
            rec = record(cmd, hooks(build), client_trace, stdout=log, stderr=log)
    if rec.returncode != 0 or not rec.traces:
        print(f"demo: llama-completion failed ({rec.describe_exit()}); see {out_dir / 'llama.log'}", file=sys.stderr)
        return 1
    summarise([client_trace, server_trace])
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ggml_trace.tracer.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="where the runs go (default: build/demo)")
    ap.add_argument("--rpc", action="store_true", help="the CPU + RPC run instead of the virtual-device one")
    args = ap.parse_args(argv)
    out_dir = Path(args.out or build_root() / "demo")
    out_dir.mkdir(parents=True, exist_ok=True)
    race_demo(out_dir)
    return rpc_demo(out_dir) if args.rpc else vdev_demo(out_dir)


if __name__ == "__main__":
    sys.exit(main())
