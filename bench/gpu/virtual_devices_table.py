"""The table of the runs bench/gpu/virtual_devices_h200.sh (and virtual_devices_extra.sh) made: for each
traced run, its output against the reference, the races the trace shows with their verdicts, and the
host wait that protects the pipeline's host input (as `ggml-trace stalls` names it), if any.

    python bench/gpu/virtual_devices_table.py RESULTS_DIR [RESULTS_DIR...]

A run NAME is NAME.ggmltrace with its output NAME.txt; the reference is the step's: tp-ref-1dev.txt
for tp*, pp-ref-cuda0.txt for layer-cuda*, pp-ref-vulkan0.txt for the others. Runs on any machine.
"""
import sys
from pathlib import Path

from ggml_trace import analysis
from ggml_trace.analysis.races import races
from ggml_trace.analysis.stalls import stalls


def reference(folder: Path, name: str) -> Path:
    base = folder if (folder / "pp-ref-vulkan0.txt").exists() else folder.parent / "results"
    if name.startswith("tp"):
        return base / "tp-ref-1dev.txt"
    if name.startswith("layer-cuda"):
        return base / "pp-ref-cuda0.txt"
    return base / "pp-ref-vulkan0.txt"


def protecting_wait(t) -> str:
    """The needed host wait that orders an asynchronous read of a host input before the next
    graph's CPU split writes it (the pipeline race's missing order, present)."""
    s = stalls(t)
    c = s["conflict"].astype(str)
    hit = s[s["needed"] & c.str.contains(r"cpy_tensor_async \(graph \d+\) reads .* before CPU split", regex=True)]
    if hit.empty:
        return "-"
    counts = hit.groupby([hit["kind"].astype(str), hit["backend"].astype(str)]).size()
    return "; ".join(f"{kind} on {backend} x{n}" for (kind, backend), n in counts.items())


def row(folder: Path, trace: Path) -> str:
    name = trace.stem
    out = trace.with_suffix(".txt")
    ref = reference(folder, name)
    right = "?" if not out.exists() or not ref.exists() else (
        "right" if out.read_bytes() == ref.read_bytes() else "WRONG")
    t = analysis.load(trace)
    f = races(t).findings
    verdicts = ", ".join(f"{n} {v}" for v, n in f["verdict"].value_counts().items() if n) or "none"
    tensors = ", ".join(sorted(set(f["a_tensor"].astype(str)))) if len(f) else ""
    return f"| {name} | {right} | {verdicts} | {tensors} | {protecting_wait(t)} |"


def main(folders):
    print("| run | output | races | tensors read | protecting wait |")
    print("|---|---|---|---|---|")
    for folder in map(Path, folders):
        for trace in sorted(folder.glob("*.ggmltrace")):
            print(row(folder, trace), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
