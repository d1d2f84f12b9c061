"""Which allreduce ran under tensor parallelism (docs/tensor-parallel.md, "Which allreduce ran").

The meta backend reduces partial results with the backend registry's own allreduce when the
registry offers one (CUDA: NCCL or its internal pipeline; virtual devices with
GGML_TRACE_VDEV_ALLREDUCE=1), and with its own butterfly of copies and ADDs otherwise, or per
call when the registry declines a tensor. The hooks write down what the registry answered
(META comm.init.N) and record every call (kind comm_allreduce, flags bit 1 when declined); this
module names the path from those facts, the kernels CUPTI saw, and the recorded environment.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .meta import recorded_env


def _fields(value: str) -> dict:
    return dict(p.split("=", 1) for p in value.split(";") if "=" in p)


def _hex(text: str) -> int:
    """A pointer as the hooks print it (%p: 0x..., or (nil)); 0 when it is not one."""
    try:
        return int(text, 16) & 0xFFFFFFFFFFFFFFFF
    except ValueError:
        return 0


# How ggml-cuda describes a virtual device (GGML_CUDA_DEVICES=N, several devices of one GPU): b10524
# to b10531 "NVIDIA H200 (physical device 0, virtual device 1)", b11434 "NVIDIA H200 (dev p0/v1)".
_VIRTUAL = re.compile(r"\((?:physical device \d+, virtual device \d+|dev p\d+/v\d+)\)$")


def _virtual_devices(trace, devices: str) -> list[str]:
    """The communicator's devices that ggml-cuda describes as virtual devices of one GPU."""
    names = set(devices.split(","))
    b = trace.backends
    described = b[b["name"].astype(str).isin(names)]
    return sorted(str(n) for n, d in zip(described["name"], described["device_description"].astype(str))
                  if _VIRTUAL.search(d))


def _kernel_path(trace) -> str | None:
    """The path the GPU's kernels show, when CUPTI recorded them."""
    gpu = getattr(trace, "gpu", None)
    if gpu is None or not len(gpu) or "name" not in gpu:
        return None
    names = gpu["name"].astype(str)
    if names.str.contains("nccl", case=False).any():
        return "nccl"
    if names.str.contains("ggml_cuda_ar_kernel|cuda_ar_", regex=True).any():
        return "internal"
    return None


def allreduce_paths(trace) -> list[dict]:
    """One entry per communicator (or one for a meta backend with none): registry, devices,
    path, how it was known (`evidence`), accepted and declined calls."""
    meta, calls = trace.meta, trace.calls
    comm = calls[calls["kind"] == "comm_allreduce"]
    declined = comm["declined"].to_numpy(bool)
    out = []
    inits = sorted((k for k in meta if re.fullmatch(r"comm\.init\.\d+", k)), key=lambda k: int(k.rsplit(".", 1)[1]))
    for key in inits:
        f = _fields(meta[key])
        ctx = _hex(f.get("ctx", ""))
        mine = comm["obj"].to_numpy(np.uint64) == np.uint64(ctx) if ctx else np.zeros(len(comm), bool)
        n_ok = int((mine & ~declined).sum() // max(len(f.get("devices", "").split(",")), 1))
        n_no = int((mine & declined).sum() // max(len(f.get("devices", "").split(",")), 1))
        entry = {"registry": f.get("registry", "?"), "devices": f.get("devices", ""),
                 "accepted_calls": n_ok, "declined_calls": n_no}
        if f.get("context") != "1":
            entry.update(path="butterfly", evidence="the registry made no communicator")
        elif n_ok == 0 and n_no > 0:
            entry.update(path="butterfly", evidence="the registry declined every call")
        elif n_ok == 0:
            entry.update(path="unknown", evidence="no allreduce call was recorded")
        else:
            entry.update(_accepted_path(trace, f))
            if n_no:
                entry["evidence"] += f"; {n_no} calls declined to the butterfly"
        out.append(entry)
    if not out and "comm.registries" in meta and calls["meta_parent"].any():
        out.append({"registry": "", "devices": "", "accepted_calls": 0, "declined_calls": 0,
                    "path": "butterfly",
                    "evidence": f"no registry offered an allreduce ({meta['comm.registries']})"})
    return out


def _accepted_path(trace, f: dict) -> dict:
    if f.get("registry") == "VDEV":
        return {"path": "vdev", "evidence": "virtual devices' own allreduce"}
    seen = _kernel_path(trace)
    if seen:
        return {"path": seen, "evidence": "kernels recorded by CUPTI"}
    want = recorded_env(trace.meta).get("GGML_CUDA_ALLREDUCE", "")
    virtual = _virtual_devices(trace, f.get("devices", "")) if f.get("registry") == "CUDA" else []
    if virtual and want != "internal":
        # ggml-cuda turns NCCL off when its devices are virtual devices of fewer GPUs ("NCCL
        # disabled: virtual devices in use") and falls back to the internal pipeline; calls it
        # accepted ran there (the butterfly declines every call).
        return {"path": "internal", "evidence": f"NCCL is disabled on virtual devices ({', '.join(virtual)} "
                                                "share a GPU); the internal pipeline took the calls"}
    if want in ("nccl", "internal"):
        if want == "nccl" and f.get("nccl_loaded") != "1":
            return {"path": "internal", "evidence": "GGML_CUDA_ALLREDUCE=nccl but NCCL is not in the "
                                                    "process (the build falls back to internal)"}
        return {"path": want, "evidence": f"GGML_CUDA_ALLREDUCE={want}"}
    if f.get("nccl_loaded") == "1":
        return {"path": "nccl", "evidence": "the default with NCCL in the process"}
    return {"path": "internal", "evidence": "the default without NCCL in the process"}


def describe(entry: dict) -> str:
    who = f"{entry['registry']} ({entry['devices']})" if entry["registry"] else "meta backend"
    return (f"allreduce {who}: {entry['path']} — {entry['evidence']}; "
            f"{entry['accepted_calls']} calls by the backend, {entry['declined_calls']} declined")


def held_by_delays(trace, device_index: int = 0) -> pd.DataFrame:
    """For every backend allreduce call that a delay preceded on one device: when the delay ended
    on its device and when device `device_index`'s part of the same call ended (device times, ns),
    and `after_ns`, the second minus the first. A barrier holds every part until the delayed one
    has arrived: after_ns >= 0 for every call (docs/tensor-parallel.md)."""
    calls = trace.calls
    comm = calls[calls["kind"] == "comm_allreduce"][["call_id", "arg", "device_index"]]
    part = trace.device.merge(comm[comm["device_index"] == device_index], on="call_id")
    part = part.groupby("arg")["t_end"].max()
    d = trace.delays.merge(calls[["call_id", "arg"]], left_on="target_call_id", right_on="call_id")
    d = d[d["target_kind"] == "comm_allreduce"].set_index("arg")["device_end"].dropna()
    both = part.index.intersection(d.index)
    out = pd.DataFrame({"delay_end": d.loc[both].to_numpy(np.int64),
                        "part_end": part.loc[both].to_numpy(np.int64)}, index=pd.Index(both, name="call"))
    out["after_ns"] = out["part_end"] - out["delay_end"]
    return out
