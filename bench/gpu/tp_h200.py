"""The meta backend's allreduce scratch race on two GPUs (docs/scenarios.md, meta-allreduce).

On a host with two CUDA GPUs, from the repository root (with the package installed:
. bench/gpu/install_here.sh, as tp_proof_h200.sh does):
    python3 bench/gpu/tp_h200.py BIN_DIR MODEL OUT_DIR [--runs 10] [--delay-us 200]
BIN_DIR holds a CUDA build's llama-completion and the hook library built for it.

Runs llama-completion -sm tensor with GGML_CUDA_ALLREDUCE=none (the butterfly fallback) under
`ggml-trace record`, three ways: no delay, a delay before every allreduce-style ADD compute on the
second GPU (whose scratch buffer races), and the same delay on the first GPU (the control). Each
run's output is compared with a one-GPU run's; each trace's races are read. Writes OUT_DIR/summary.json
and prints it; keeps one trace of each way as OUT_DIR/tp-WAY.ggmltrace.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from ggml_trace.analysis import load
from ggml_trace.analysis.races import races

PROMPT = ["-n", "16", "-p", "the of and", "--temp", "0", "--seed", "1", "-no-cnv"]


def generated(stdout: str) -> str:
    return stdout.strip()


def agrees(text: str, ref: str) -> bool:
    """llama-completion can lose its last lines at exit (its logger thread): a prefix agrees."""
    return bool(text) and (ref.startswith(text) or text.startswith(ref))


def scratch_race(trace_path: Path) -> dict:
    t = load(str(trace_path), strict=False)
    f = races(t).findings
    if not len(f):
        return {"races": 0}
    verdicts = f["verdict"].astype(str).value_counts().to_dict()
    best = f.iloc[0]
    return {"races": int(len(f)), "verdicts": verdicts, "first": {
        "class": str(best["class"]), "verdict": str(best["verdict"]),
        "a": f"{best['a_backend']} {best['a_kind']} {best['a_tensor']}",
        "b": f"{best['b_backend']} {best['b_kind']} {best['b_tensor']}",
        "margin_us": None if pd.isna(best["margin_ns"]) else best["margin_ns"] / 1000.0}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--delay-us", type=int, default=200)
    ap.add_argument("--control-runs", type=int, default=None, help="runs without delay or delayed on GPU0")
    ap.add_argument("--device-timing", action="store_true", help="record with --device-timing")
    ap.add_argument("--cupti", action="store_true", help="record with --cupti (exact kernel and copy times)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    exe = str(Path(a.bin) / "llama-completion")
    hooks = str(Path(a.bin) / "libggml-trace-hooks.so")
    env = dict(os.environ, GGML_CUDA_ALLREDUCE="none")
    ref = subprocess.run([exe, "-m", a.model, *PROMPT, "-ngl", "99", "-dev", "CUDA0"], capture_output=True,
                         text=True, errors="replace", env=env, timeout=120)
    ref_text = generated(ref.stdout)
    summary = {"reference": ref_text, "runs": {}}
    ways = {"none": None, "delay-gpu1": f"CUDA1:graph_compute,op=ADD:{a.delay_us}",
            "delay-gpu0": f"CUDA0:graph_compute,op=ADD:{a.delay_us}"}
    for way, rule in ways.items():
        rows = []
        n = a.runs if way == "delay-gpu1" else (a.control_runs if a.control_runs is not None else a.runs)
        for i in range(n):
            trace = out / f"{way}-{i}.ggmltrace"
            cmd = [sys.executable, "-m", "ggml_trace.tracer.cli", "record", "--no-nvml", "--hooks", hooks, "-o", str(trace)]
            if rule:
                cmd += ["--delay", rule]
            if a.device_timing:
                cmd += ["--device-timing"]
            if a.cupti:
                cmd += ["--cupti"]
            cmd += ["--", exe, "-m", a.model, *PROMPT, "-ngl", "99", "-sm", "tensor"]
            r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env, timeout=300)
            text = generated(r.stdout)
            row = {"rc": r.returncode, "diverged": not agrees(text, ref_text), "output": text[:200]}
            row.update(scratch_race(trace) if trace.exists() else {"trace": "missing", "stderr": r.stderr[-500:]})
            rows.append(row)
            print(way, i, json.dumps(row), flush=True)
        if rows and (out / f"{way}-0.ggmltrace").exists():
            shutil.copy(out / f"{way}-0.ggmltrace", out / f"tp-{way}.ggmltrace")
        summary["runs"][way] = {
            "rule": rule, "runs": len(rows), "diverged": sum(r["diverged"] for r in rows),
            "manifested": sum(r.get("first", {}).get("verdict") == "manifested" for r in rows),
            "rows": rows}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({w: {k: v for k, v in s.items() if k != "rows"} for w, s in summary["runs"].items()},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
