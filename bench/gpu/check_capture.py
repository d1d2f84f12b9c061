"""Per-trace figures of a capture run (bench/gpu/h200_session.sh capture ... OUT_DIR), as JSON.
From the repository root:  . bench/gpu/install_here.sh; python3 bench/gpu/check_capture.py OUT_DIR [JSON]
Loads every *.ggmltrace under OUT_DIR (or the files named) with analysis.load and prints, per trace:
calls, splits, copies, device rows by source, gpu (CUPTI) rows, race findings by verdict, warnings
and the per-backend summary. Writes them to JSON (default OUT_DIR/capture-check.json)."""
import glob
import json
import os
import sys
import time

from ggml_trace import analysis


def figures(path: str) -> dict:
    t0 = time.monotonic()
    tr = analysis.load(path)
    fig = {"file": os.path.basename(path), "bytes": os.path.getsize(path),
           "calls": len(tr.calls), "splits": len(tr.splits), "copies": len(tr.copies),
           "accesses": len(tr.accesses),
           "device_rows": len(tr.device),
           "device_by_source": ({str(k): int(v) for k, v in tr.device["source"].value_counts().items() if v}
                                if len(tr.device) else {}),
           "gpu_rows": len(tr.gpu),
           "warnings": list(tr.warnings)}
    rep = analysis.races(tr)
    fig["races"] = len(rep.findings)
    fig["race_verdicts"] = ({str(k): int(v) for k, v in rep.findings["verdict"].value_counts().items() if v}
                            if len(rep.findings) else {})
    if len(rep.findings):
        fig["race_first"] = {k: str(v) for k, v in rep.findings.iloc[0].to_dict().items()
                             if k in ("class", "verdict", "a", "b", "margin_ns", "buffer", "tensor")}
    s = analysis.summarize(tr)
    fig["graphs"] = s["graphs"]
    fig["backends"] = s["backends"]
    fig["allreduce"] = s.get("allreduce")
    fig["build"] = s.get("build")
    fig["seconds"] = round(time.monotonic() - t0, 2)
    return fig


def main() -> None:
    target = sys.argv[1]
    files = sorted(glob.glob(os.path.join(target, "*.ggmltrace"))) if os.path.isdir(target) else [target]
    out_json = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        target if os.path.isdir(target) else ".", "capture-check.json")
    result = []
    for f in files:
        try:
            fig = figures(f)
        except Exception as e:  # keep going: one bad trace must not hide the others
            fig = {"file": os.path.basename(f), "error": f"{type(e).__name__}: {e}"}
        result.append(fig)
        short = {k: fig.get(k) for k in ("file", "bytes", "calls", "splits", "copies", "device_by_source",
                                         "gpu_rows", "races", "race_verdicts", "error")}
        print(json.dumps(short, default=str))
        for w in fig.get("warnings", []):
            print("   warning:", w)
        for b in fig.get("backends", []):
            print("   backend:", json.dumps(b))
    with open(out_json, "w") as fh:
        json.dump(result, fh, indent=1, default=str)
    print("wrote", out_json)


if __name__ == "__main__":
    main()
