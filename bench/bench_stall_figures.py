"""The time figures of the stall and compare analyses on the scheduler scenarios (virtual devices),
which tests/runs/test_stalls.py and tests/runs/test_compare.py leave to measurement: they check
which waits are needed, avoidable or drained running work, and the order of the critical path's
parts, not how long anything took.

- #28874 (user-input-stall, three devices, 2 ms an operation), b11434 against b11434-inputsfirst:
  the boundary stalls' blocked time, the avoidable blocked time, each part's share of the critical
  path, the devices' share of the wall time;
- two runs of one build (b11434-inputsfirst): whether compare calls any headline time significant;
- what the verified fixes cost (#23321: b10524 -> b10531; the tensor-parallel fix: b10531 ->
  b10531-tpfix): the wall time difference and whether it is beyond the noise bound, the blocked and
  avoidable blocked times;
- the pipeline race's fix against draining every queue (b11434-ppfix, b11434-ppsync): blocked and
  avoidable blocked times.
The runs of the builds compared alternate, so that a slow spell of the machine falls on both sides.

usage: python bench/bench_stall_figures.py [--runs N] [--json]   (after `make setup`)
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from ggml_trace.analysis import load
from ggml_trace.analysis.compare import compare
from ggml_trace.analysis.stalls import stalls, totals
from ggml_trace.tracer import scenario

HEADLINE = ["wall_ns", "host_blocked_ns", "avoidable_blocked_ns", "in_flight_ns"]


def runs(name: str, builds: list[str], n: int, out: Path, **kw) -> dict[str, list]:
    """n loaded runs of the scenario on each build, the builds alternating."""
    sides: dict[str, list] = {b: [] for b in builds}
    for i in range(n):
        for b in builds:
            r = scenario.run(name, build=b, runs=1, out_dir=out / f"{name}-{b}-{i}", **kw)
            sides[b] += [load(p) for p in r.traces]
    return sides


def ms(ns) -> float:
    return round(float(ns) / 1e6, 3)


def boundary_stalls_ms(t) -> float:
    """The blocked time of the waits at split boundaries that drained a cross-device copy."""
    s = stalls(t)
    w = s[(s["kind"] == "synchronize") & s["split"].isin([1, 2]) & s["via"].notna()]
    return ms(w.loc[w["waited_kind"] == "cpy_tensor_async", "blocked_ns"].sum())


def stall_28874(n: int, out: Path) -> dict:
    sides = runs("user-input-stall", ["b11434", "b11434-inputsfirst"], n, out, latency_us=2000, devices=3)
    r = compare(sides["b11434"], sides["b11434-inputsfirst"])
    d = r["diff"]
    res = {"boundary_stalls_ms": {b: [boundary_stalls_ms(t) for t in ts] for b, ts in sides.items()},
           "avoidable_blocked_ms": {s: ms(d["avoidable_blocked_ns"][s]) for s in ("a", "b")}}
    for side, build in (("a", "b11434"), ("b", "b11434-inputsfirst")):
        p = r[side]["critical_path"]
        wall = p["wall_ns"]
        res[f"critical_path_shares_{build}"] = {
            "host": round(p["host_ns"] / wall, 3), "copies": round(p["copies_ns"] / wall, 3),
            "waiting": round(p["waiting_ns"] / wall, 3), **{k: round(v / wall, 3) for k, v in p["devices"].items()}}
    res["critical_device_share_of_wall_b11434"] = round(d["critical_device_ns"]["a"] / d["wall_ns"]["a"], 3)
    one = compare(sides["b11434-inputsfirst"][:1], sides["b11434-inputsfirst"][1:2])
    res["two_runs_of_one_build_significant"] = {k: bool(one["diff"][k]["significant"]) for k in HEADLINE}
    return res


def fix_costs(n: int, out: Path) -> dict:
    res = {}
    for name, before, after, devices, latency in (("inputless-reuse", "b10524", "b10531", 3, 5000),
                                                   ("meta-allreduce", "b10531", "b10531-tpfix", 2, "0,3000")):
        sides = runs(name, [before, after], n, out, latency_us=latency, devices=devices)
        d = compare(sides[before], sides[after])["diff"]
        res[f"{before}->{after}"] = {
            "wall_ms": {s: ms(d["wall_ns"][s]) for s in ("a", "b")}, "wall_significant": bool(d["wall_ns"]["significant"]),
            "host_blocked_ms": {s: ms(d["host_blocked_ns"][s]) for s in ("a", "b")},
            "avoidable_blocked_ms": {s: ms(d["avoidable_blocked_ns"][s]) for s in ("a", "b")}}
    return res


def pipeline_fix(n: int, out: Path) -> dict:
    sides = runs("pipeline-input-reuse", ["b11434-ppfix", "b11434-ppsync"], n, out, latency_us="2000,0")
    res = {}
    for b, ts in sides.items():
        tot = [totals(stalls(t)) for t in ts]
        res[b] = {"blocked_ms": [ms(x["blocked_ns"]) for x in tot],
                  "avoidable_blocked_ms": [ms(x["avoidable_blocked_ns"]) for x in tot],
                  "avoidable_calls": [int(x["avoidable_calls"]) for x in tot]}
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs a side (default: %(default)s)")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of the text")
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="bench-stalls-"))
    try:
        res = {"28874": stall_28874(args.runs, out), "fix_costs": fix_costs(args.runs, out),
               "pipeline_fix": pipeline_fix(args.runs, out)}
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        for part, figures in res.items():
            print(part)
            for k, v in figures.items():
                print(f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
