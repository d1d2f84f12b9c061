"""GPU metadata through NVML (pynvml, from the nvidia-ml-py package).

Absent NVML (no driver, no GPU), `gpu_metadata()` says so instead of failing: capture works
without it.
"""


def gpu_metadata() -> dict:
    """{'available': bool, 'driver', 'cuda', 'gpus': [...], 'links': [...]} or the reason it is not."""
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception as e:  # ImportError, or NVMLError when no driver is loaded
        return {"available": False, "reason": f"NVML unavailable: {e}"}
    try:
        out = {"available": True, "driver": _s(nv.nvmlSystemGetDriverVersion()),
               "cuda": nv.nvmlSystemGetCudaDriverVersion_v2(), "gpus": [], "links": []}
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        for i, h in enumerate(handles):
            out["gpus"].append({
                "index": i, "name": _s(nv.nvmlDeviceGetName(h)), "uuid": _s(nv.nvmlDeviceGetUUID(h)),
                "pci_bus_id": _s(nv.nvmlDeviceGetPciInfo(h).busId),
                "memory_total": nv.nvmlDeviceGetMemoryInfo(h).total,
                "sm_clock_max_mhz": _try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
                "mem_clock_max_mhz": _try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM),
                "power_limit_mw": _try(nv.nvmlDeviceGetPowerManagementLimit, h),
            })
        for i, a in enumerate(handles):
            for j, b in enumerate(handles):
                if i < j:
                    level = _try(nv.nvmlDeviceGetTopologyCommonAncestor, a, b)
                    p2p = _try(nv.nvmlDeviceGetP2PStatus, a, b, nv.NVML_P2P_CAPS_INDEX_READ)
                    nvlinks = sum(1 for l in range(nv.NVML_NVLINK_MAX_LINKS)
                                  if _try(nv.nvmlDeviceGetNvLinkState, a, l) == nv.NVML_FEATURE_ENABLED)
                    out["links"].append({"a": i, "b": j, "topology_level": level,
                                         "p2p_read": p2p == nv.NVML_P2P_STATUS_OK, "nvlinks_up_on_a": nvlinks})
        return out
    finally:
        nv.nvmlShutdown()


def _s(v):
    return v.decode() if isinstance(v, bytes) else v


def _try(fn, *args):
    try:
        return fn(*args)
    except Exception:
        return None


if __name__ == "__main__":
    import json

    print(json.dumps(gpu_metadata(), indent=2))
