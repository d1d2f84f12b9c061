"""Repeated traced runs of a llama.cpp Vulkan build, each compared with the CPU-only output of the
same prompt and seed (greedy sampling), with the race analysis of each trace.

    python -m tracer.vulkan_runs --bin build/llama-b10524-vulkan/bin --model build/models/tiny-qwen35.gguf \
        --runs 20 --out DIR [--no-device-timing] [--visible-devices 0] [-- extra llama-completion args]

writes DIR/run-NNN.ggmltrace, DIR/run-NNN.txt (the output) and DIR/summary.json, and prints the summary.
llama-completion prints through a logger thread that llama.cpp leaks at exit, so the last lines can
be lost; the hooks drain it at exit (native_hooks/startup.cpp), so every run, the reference too, is
traced. A run counts as complete when its log shows the final performance print ("graphs reused");
only complete runs are compared, and an incomplete one is counted, never retried.
"""
import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from .hooks import libraries_first

PROMPT = "the of and"
FINAL_LINE = "graphs reused"  # the last line llama-completion logs before it exits


def completion_args(model, n_predict, extra):
    return ["-m", str(model), "-n", str(n_predict), "-p", PROMPT, "--temp", "0", "--seed", "1", "-no-cnv",
            *extra]


def build_env(bin_dir: Path, **extra) -> dict:
    """The environment for the build's programs: its bin directory first on the library path, so that
    a build moved from where it was built (its RUNPATH) still loads its own ggml."""
    return dict(libraries_first(bin_dir.resolve()), **extra)


def reference(bin_dir: Path, model, n_predict: int, out_dir: Path) -> bytes:
    """The output with every device disabled (`-dev none`: CPU only), traced so that its log is
    drained at exit."""
    exe = str(bin_dir / "llama-completion")
    cmd = [sys.executable, "-m", "ggml_trace.tracer.cli", "record", "--no-nvml", "-o",
           str(out_dir / "reference.ggmltrace"), "--", exe, *completion_args(model, n_predict, ["-dev", "none"])]
    (out_dir / "reference.ggmltrace").unlink(missing_ok=True)
    r = subprocess.run(cmd, capture_output=True, timeout=300, env=build_env(bin_dir))
    if r.returncode != 0:
        raise RuntimeError(f"the CPU reference run failed ({r.returncode}): {r.stderr[-2000:]!r}")
    if FINAL_LINE.encode() not in r.stderr:
        raise RuntimeError(f"the CPU reference run's log stops before its end: {r.stderr[-2000:]!r}")
    return r.stdout


def verdicts(trace: Path) -> list:
    """The races of one trace, each as (a tensor, b tensor, verdict, basis)."""
    from .. import analysis
    rep = analysis.races(analysis.load(str(trace)))
    return [{"a": r["a"]["tensor"], "b": r["b"]["tensor"], "a_backend": r["a"]["backend"],
             "b_backend": r["b"]["backend"], "verdict": r["verdict"], "basis": r["basis"],
             "margin_us": r["margin_us"], "count": r["count"]} for r in rep.to_json()["races"]]


def run(bin_dir, model, runs: int = 20, out_dir=None, device_timing: bool = True, n_predict: int = 16,
        visible_devices: str = "0", extra=(), timeout: float = 300) -> dict:
    # absolute: the summary names them, wherever it is read
    bin_dir, out_dir, model = Path(bin_dir).resolve(), Path(out_dir).resolve(), Path(model).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    ref = reference(bin_dir, model, n_predict, out_dir)
    (out_dir / "reference.txt").write_bytes(ref)
    exe = str(bin_dir / "llama-completion")
    cli = [sys.executable, "-m", "ggml_trace.tracer.cli", "record"]
    env = build_env(bin_dir, GGML_VK_VISIBLE_DEVICES=visible_devices)
    rows: list[dict] = []
    for i in range(runs):
        trace = out_dir / f"run-{i:03d}.ggmltrace"
        trace.unlink(missing_ok=True)
        cmd = [*cli, *(["--device-timing"] if device_timing else []), "--no-nvml", "-o", str(trace), "--",
               exe, *completion_args(model, n_predict, ["-ngl", "99", "-nkvo", *extra])]
        r = subprocess.run(cmd, capture_output=True, timeout=timeout, env=env)
        (out_dir / f"run-{i:03d}.txt").write_bytes(r.stdout)
        (out_dir / f"run-{i:03d}.log").write_bytes(r.stderr)
        if r.returncode != 0:  # a crash is a finding, never a skipped run
            rows.append({"run": i, "returncode": r.returncode, "complete": False, "crashed": True})
        elif FINAL_LINE.encode() not in r.stderr:  # its log stops before its end: not comparable
            rows.append({"run": i, "returncode": 0, "complete": False, "crashed": False})
        else:
            rows.append({"run": i, "returncode": 0, "complete": True, "crashed": False,
                         "corrupt": r.stdout != ref, "races": verdicts(trace), "trace": str(trace)})
    done = [x for x in rows if x["complete"]]
    corrupt = [x for x in done if x["corrupt"]]
    summary = {
        "bin": str(bin_dir), "model": str(model), "device_timing": device_timing,
        "complete_runs": len(done), "incomplete_runs": sum(not x["complete"] and not x["crashed"] for x in rows),
        "crashed_runs": sum(x["crashed"] for x in rows),
        "corrupt_runs": len(corrupt),
        "verdicts_corrupt": dict(Counter(_pair_verdict(x) for x in corrupt)),
        "verdicts_clean": dict(Counter(_pair_verdict(x) for x in done if not x["corrupt"])),
        "runs": rows,
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _pair_verdict(row) -> str:
    """The verdict of the #23321 race (Vulkan copy of model.input_embed against a CPU write), or
    'none' / 'other races' when the trace has no such race."""
    for r in row["races"]:
        if r["a"] == "model.input_embed" or r["b"] == "model.input_embed":
            return r["verdict"]
    return "other races" if row["races"] else "none"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the build's bin directory (llama-completion, hooks)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", required=True)
    ap.add_argument("-n", "--n-predict", type=int, default=16)
    ap.add_argument("--no-device-timing", action="store_true")
    ap.add_argument("--visible-devices", default="0", help="GGML_VK_VISIBLE_DEVICES (default 0)")
    ap.add_argument("extra", nargs="*", help="more llama-completion arguments, after --")
    a = ap.parse_args(argv)
    s = run(a.bin, a.model, a.runs, a.out, not a.no_device_timing, a.n_predict, a.visible_devices, a.extra)
    print(json.dumps({k: v for k, v in s.items() if k != "runs"}, indent=1))
    return 1 if s["crashed_runs"] else 0


if __name__ == "__main__":
    sys.exit(main())
