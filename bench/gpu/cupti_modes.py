"""What each CUPTI mode recorded, from traces of the same run (bench/gpu/cupti_modes.sh):
GPU activity by kind, how much of it is tied to a traced call, and how many of the CUDA backend's
splits got a CUPTI device interval. Prints one JSON object per trace."""
import json
import sys

from ggml_trace.analysis import load


def describe(path: str) -> dict:
    t = load(path)
    g, dev, s = t.gpu, t.device, t.splits
    cuda = s[s["backend"].astype(str).str.startswith("CUDA")]
    timed = dev[(dev["source"] == "cupti") & (dev["kind"] == "graph_compute")]
    return {
        "trace": path, "mode": t.meta.get("cupti.mode", "kernels (before modes)"),
        "driver_api": t.meta.get("cupti.driver_api"),
        "activity": {str(k): int(n) for k, n in g["kind"].value_counts().items()},
        "tied": round(float(g["call_id"].notna().mean()), 4) if len(g) else None,
        "cuda_splits": int(len(cuda)),
        "cuda_splits_with_cupti_interval": int(cuda["call_id"].isin(timed["call_id"]).sum()),
        "graph_records_on_graph_compute": int((g["kind"] == "graph").sum() and
                                              (g[g["kind"] == "graph"]["call_kind"] == "graph_compute").sum()),
    }


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(json.dumps(describe(p)))
