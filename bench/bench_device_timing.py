"""How close the device times of the committed H200 traces (tests/data) come to CUPTI's, and how
close the injected delays come to what was asked: the figures the tests leave to measurement
(tests/traces/test_gpu_traces.py, test_delay_h200.py and test_tp_proof_h200.py check only what must
hold, e.g. that the watcher never puts an end before CUPTI's).

- the event watcher against CUPTI, per timed trace: the medians and 95th percentiles of the start
  and end differences, and the share of operations whose watcher end is within 20 us of CUPTI's;
- the ends the watcher saw late (-ngl 2 -nkvo, every core busy) against those it saw on time;
- the stream delays (a host function on the stream): their error against the request, (stall -
  requested) / requested; the spin kernel's; the spin kernel's calibration runs;
- the tensor-parallel scratch race's margin in the correct run.

usage: python bench/bench_device_timing.py [--json]
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")

TIMED = ["cuda-b10531-layer-2gpu-timed", "cuda-b10531-simple-1gpu-timed", "cuda-b11434-layer-2gpu-timed"]
DELAYS = ["cuda-b10531-delay-graph5", "cuda-b10531-delay-graphs4-12"]


def trace(name: str):
    from ggml_trace import analysis

    return analysis.load(os.path.join(DATA, f"{name}.ggmltrace"))


def watcher_against_cupti() -> dict:
    from ggml_trace.analysis.device_timing import accuracy, compare_sources

    out = {}
    for name in TIMED:
        t = trace(name)
        a = accuracy(compare_sources(t))
        d = t.device
        cu = d[d["source"] == "cupti"].set_index("call_id")
        ev = d[d["source"] == "events"].set_index("call_id")
        both = cu.merge(ev[["t_end"]], left_index=True, right_index=True, suffixes=("", "_ev"))
        a["end_within_20us_share"] = float(((both["t_end_ev"] - both["t_end"]).abs() <= 20_000).mean())
        out[name] = a
    diff = compare_sources(trace("cuda-b11434-partial-nkvo-1gpu-timed"))
    out["cuda-b11434-partial-nkvo-1gpu-timed"] = {"late": accuracy(diff[diff["end_late"]]),
                                                  "on_time": accuracy(diff[~diff["end_late"]])}
    return out


def delays() -> dict:
    from ggml_trace.analysis.delay import delay_stalls

    out = {}
    for name in DELAYS:
        s = delay_stalls(trace(name))
        out[name] = {"delays": len(s), "error_median": float(np.median(s["error"])),
                     "error_max": float(s["error"].max())}
    t = trace("cuda-b10531-spin-delay-graphs5-7")
    s = delay_stalls(t)
    spin = t.gpu[t.gpu["name"].astype(str) == "ggml_trace_spin"]
    calibration = spin[spin["call_id"].isna()]
    out["cuda-b10531-spin-delay-graphs5-7"] = {
        "delays": len(s), "error_abs_max": float(s["error"].abs().max()),
        "calibration_spin_us": [(int(e) - int(b)) / 1000 for b, e in zip(calibration["t_begin"], calibration["t_end"])]}
    return out


def tensor_parallel_margin() -> dict:
    from ggml_trace.analysis.races import races

    f = races(trace("cuda-b10531-tp-2gpu-cupti-none")).findings
    return {"scratch_race_margin_us": [float(m) / 1000 for m in f["margin_ns"].dropna()]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON document instead of the text")
    args = ap.parse_args()
    res = {"watcher_against_cupti": watcher_against_cupti(), "delays": delays(),
           "tensor_parallel": tensor_parallel_margin()}
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    for name, a in res["watcher_against_cupti"].items():
        if "late" in a:
            print(f"{name}: ends seen late: median {a['late']['end_median_us']:.1f} us off CUPTI's "
                  f"({a['late']['operations']} operations); on time: {a['on_time']['end_median_us']:.1f} us "
                  f"({a['on_time']['operations']})")
        else:
            print(f"{name}: {a['operations']} operations; end median {a['end_median_us']:.1f} us "
                  f"(p95 {a['end_p95_us']:.1f}), start median {a['start_median_us']:.1f} us "
                  f"(p95 {a['start_p95_us']:.1f}); ends within 20 us: {100 * a['end_within_20us_share']:.0f} %")
    for name, d in res["delays"].items():
        print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in d.items()))
    print("tensor parallel, correct run: scratch race margin (us):", res["tensor_parallel"]["scratch_race_margin_us"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
