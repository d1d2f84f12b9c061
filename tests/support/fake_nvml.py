"""A simulated NVML (a `pynvml` module) for the sampler's tests, on machines without a GPU: two
devices; the second's power reading is not supported, the first's temperature fails every other
time. `calls` counts the readings by what was read."""
import types


def fake_pynvml(calls: dict):
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    def count(name):
        calls[name] = calls.get(name, 0) + 1

    def power(h):
        count(f"power{h}")
        if h == 1:
            raise NVMLError_NotSupported()
        return 250_500  # mW

    def temperature(h, sensor):
        count(f"temp{h}")
        if h == 0 and calls[f"temp{h}"] % 2:
            raise NVMLError("transient")  # every other reading fails
        return 40 + h

    nv.NVMLError, nv.NVMLError_NotSupported = NVMLError, NVMLError_NotSupported
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM, nv.NVML_TEMPERATURE_GPU = 1, 2, 0
    nv.nvmlInit = lambda: count("init")
    nv.nvmlShutdown = lambda: count("shutdown")
    nv.nvmlDeviceGetCount = lambda: 2
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetClockInfo = lambda h, c: {1: 1980, 2: 2619}[c] - h
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=90 + h, memory=30 + h)
    nv.nvmlDeviceGetPowerUsage = power
    nv.nvmlDeviceGetTemperature = temperature
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=(h + 1) << 30)
    return nv
