"""GPU metadata and counter sampling through NVML (pynvml, from the nvidia-ml-py package).

Absent NVML (no driver, no GPU), `gpu_metadata()` and `NvmlSampler` say so instead of failing:
capture works without them.
"""
import threading
import time
from array import array
from dataclasses import dataclass

import numpy as np

# What the sampler reads from every GPU, in this order.
METRICS = ("sm_clock_mhz", "mem_clock_mhz", "gpu_util_pct", "mem_util_pct", "power_w",
           "temperature_c", "memory_used_bytes")


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
                    nvlinks = sum(1 for link in range(nv.NVML_NVLINK_MAX_LINKS)
                                  if _try(nv.nvmlDeviceGetNvLinkState, a, link) == nv.NVML_FEATURE_ENABLED)
                    out["links"].append({"a": i, "b": j, "topology_level": level,
                                         "p2p_read": p2p == nv.NVML_P2P_STATUS_OK, "nvlinks_up_on_a": nvlinks})
        return out
    finally:
        nv.nvmlShutdown()


@dataclass
class Samples:
    """Counter readings in long form, one row per (time, device, metric) read successfully."""
    t_ns: np.ndarray     # int64, CLOCK_MONOTONIC
    device: np.ndarray   # uint32, NVML device index
    metric: np.ndarray   # str, one of METRICS
    value: np.ndarray    # float64

    def __len__(self) -> int:
        return len(self.t_ns)

    def between(self, t_lo: int, t_hi: int) -> "Samples":
        keep = (self.t_ns >= t_lo) & (self.t_ns <= t_hi)
        return Samples(self.t_ns[keep], self.device[keep], self.metric[keep], self.value[keep])


def _readers(nv):
    """(metrics, read(handle) -> their values) groups, in METRICS order; one NVML call may
    give several metrics."""
    def util(h):
        u = nv.nvmlDeviceGetUtilizationRates(h)
        return u.gpu, u.memory
    return [
        (("sm_clock_mhz",), lambda h: (nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),)),
        (("mem_clock_mhz",), lambda h: (nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),)),
        (("gpu_util_pct", "mem_util_pct"), util),
        (("power_w",), lambda h: (nv.nvmlDeviceGetPowerUsage(h) / 1000.0,)),  # NVML gives mW
        (("temperature_c",), lambda h: (nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),)),
        (("memory_used_bytes",), lambda h: (nv.nvmlDeviceGetMemoryInfo(h).used,)),
    ]


class NvmlSampler:
    """Reads METRICS from every GPU every `interval_ms` on a daemon thread, while in a `with`.

    Without NVML it does nothing: `available` is False and `reason` says why. A metric a GPU
    does not support is left out of its samples."""

    def __init__(self, interval_ms: float = 20.0):
        self.interval_ms = float(interval_ms)
        self.available = False
        self.reason = "not started"
        self.n_gpus = 0
        self._nv = None
        self._handles: list = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # One row per (reading, device): its time, device and every metric (NaN: not read).
        self._t = array("q")
        self._dev = array("q")
        self._val = array("d")

    def __enter__(self) -> "NvmlSampler":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        try:
            import pynvml as nv

            nv.nvmlInit()
        except Exception as e:  # ImportError, or NVMLError when no driver is loaded
            self.reason = str(e) or type(e).__name__
            return
        try:
            self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        except Exception as e:
            nv.nvmlShutdown()
            self.reason = f"cannot list the GPUs: {e}"
            return
        self._nv, self.n_gpus = nv, len(self._handles)
        self.available, self.reason = True, "ok"
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._nv is not None:
            try:
                self._nv.nvmlShutdown()
            except Exception:
                pass  # the samples are taken; a failed shutdown must not cost the recording
            self._nv = None

    def _run(self) -> None:
        nv = self._nv
        groups = _readers(nv)
        not_supported = getattr(nv, "NVMLError_NotSupported", ())
        # Groups a GPU does not support are not asked again.
        skip = [[False] * len(groups) for _ in self._handles]
        period = self.interval_ms / 1000.0
        next_t = time.monotonic()
        while True:
            for d, h in enumerate(self._handles):
                row: list[float] = []
                t = time.monotonic_ns()
                for g, (names, read) in enumerate(groups):
                    vals = (float("nan"),) * len(names)
                    if not skip[d][g]:
                        try:
                            vals = tuple(float(v) for v in read(h))
                        except not_supported:
                            skip[d][g] = True
                        except Exception:
                            pass  # a failed reading: this metric is missing this time
                    row.extend(vals)
                with self._lock:
                    self._t.append(t)
                    self._dev.append(d)
                    self._val.extend(row)
            # Keep to the grid of start + k * period; after a stall, skip the missed readings.
            next_t += period
            now = time.monotonic()
            if next_t < now:
                next_t = now + period
            if self._stop.wait(next_t - now):
                return

    def forget_before(self, t_ns: int) -> int:
        """Drops the readings taken before t_ns (CLOCK_MONOTONIC): a flight recorder keeps only
        the recent past, and hours of readings would otherwise stay in memory. Returns how
        many readings were dropped."""
        with self._lock:
            t = np.frombuffer(self._t, np.int64) if len(self._t) else np.zeros(0, np.int64)
            k = int(np.searchsorted(t, t_ns, side="left"))  # readings are appended in time order
            del t  # the array must not be exported while it shrinks
            if k:
                del self._t[:k]
                del self._dev[:k]
                del self._val[: k * len(METRICS)]
        return k

    def samples(self) -> Samples:
        """Everything read so far, in long form, without the metrics that were not read."""
        with self._lock:
            t = np.array(self._t, np.int64)
            dev = np.array(self._dev, np.uint32)
            val = np.array(self._val, np.float64)
        m = len(METRICS)
        val = val[: len(t) * m].reshape(len(t), m)
        ok = ~np.isnan(val)
        rows, cols = np.nonzero(ok)
        return Samples(t[rows], dev[rows], np.array(METRICS)[cols], val[ok])


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
