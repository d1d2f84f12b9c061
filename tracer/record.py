"""Run a program under the hook library and collect the trace files it writes."""
import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import delay_spec
from .nvml import NvmlSampler, gpu_metadata


@dataclass
class Recording:
    returncode: int
    traces: list = field(default_factory=list)  # the file named -o, then NAME.PID of other processes
    nvml: str = ""  # what became of the GPU counters, one line ("" when not asked for)

    @property
    def crashed(self) -> bool:
        return self.returncode < 0

    def describe_exit(self) -> str:
        if self.returncode >= 0:
            return f"exit status {self.returncode}"
        try:
            return f"killed by {signal.Signals(-self.returncode).name}"
        except ValueError:
            return f"killed by signal {-self.returncode}"


def trace_files(output: Path) -> list:
    """`output` if it exists, then the NAME.PID files of the other processes of the same run."""
    output = Path(output)
    others = sorted(p for p in output.parent.glob(output.name + ".*") if p.name[len(output.name) + 1:].isdigit())
    return ([output] if output.exists() else []) + others


def clear_traces(output: Path):
    """Removes the files of an earlier run: the hooks create the file exclusively and would
    otherwise write beside a stale one."""
    for old in trace_files(output):
        old.unlink(missing_ok=True)


def trace_env(hooks: Path, output: Path, paused: bool = False, base=None, delays=None) -> dict:
    """Environment that makes a program (and the programs it starts) trace into `output`.
    `delays`: delay rules to inject (docs/delay.md), in place of any GGML_TRACE_DELAY the
    environment holds; either is checked here (DelaySpecError if a rule is bad)."""
    env = dict(os.environ if base is None else base)
    if delays:
        env[delay_spec.ENV] = delay_spec.env_value(delays)
    elif env.get(delay_spec.ENV):
        delay_spec.parse([env[delay_spec.ENV]])
    preload = [str(hooks)] + [p for p in env.get("LD_PRELOAD", "").split(":") if p]
    env["LD_PRELOAD"] = ":".join(preload)
    env["GGML_TRACE_OUTPUT"] = str(output)
    if paused:
        env["GGML_TRACE_START_PAUSED"] = "1"
    return env


def record(cmd: list, hooks: Path, output: Path, paused: bool = False, nvml: bool = False,
           nvml_interval_ms: float = 20.0, delays=None, **popen_kwargs) -> Recording:
    """Runs `cmd` to completion under the hooks; signals sent to us are passed on to it.
    `delays`: delay rules (`--delay`), checked before anything runs (DelaySpecError).

    nvml=True samples the GPUs' counters while it runs and adds them, with the GPUs' metadata,
    to every trace file of the run."""
    output = Path(output).resolve()
    env = trace_env(hooks, output, paused, popen_kwargs.pop("env", None), delays)
    clear_traces(output)
    sampler = NvmlSampler(nvml_interval_ms) if nvml else None
    with sampler or contextlib.nullcontext():
        proc = subprocess.Popen(cmd, env=env, **popen_kwargs)
        forwarded = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        for s in forwarded:
            signal.signal(s, lambda signum, frame: proc.send_signal(signum))
        try:
            returncode = proc.wait()
        finally:
            t_end = time.monotonic_ns()
            for s, handler in forwarded.items():
                signal.signal(s, handler)
    rec = Recording(returncode, trace_files(output))
    if sampler is not None:
        rec.nvml = add_gpu_counters(rec.traces, sampler, t_end)
    return rec


def add_gpu_counters(traces: list, sampler: NvmlSampler, t_end_ns: int) -> str:
    """Appends the GPUs' NVML metadata (META "nvml", "nvml.status") and the counter samples
    from each file's start to t_end_ns to every trace. A trace it cannot add them to is left
    as it was. Returns one line saying what happened."""
    # Imported here: the analysis package pulls in pandas, which the program need not wait for.
    from analysis.trace_file import read_header

    from .trace_append import append

    if sampler.available:
        try:
            info = gpu_metadata()
        except Exception as e:  # a query the driver refuses: the counters are still worth keeping
            info = {"available": True, "error": str(e)}
        meta = {"nvml": json.dumps(info, default=str), "nvml.status": "ok"}
        samples = sampler.samples()
    else:
        meta = {"nvml": json.dumps({"available": False, "reason": sampler.reason}),
                "nvml.status": sampler.reason}
        samples = None
    stored, failed = 0, []
    for path in traces:
        try:
            t0 = read_header(path)["t0_monotonic_ns"]
            mine = samples.between(t0, t_end_ns) if samples is not None else None
            append(path, meta, mine)
            stored = max(stored, len(mine) if mine is not None else 0)
        except Exception as e:  # the trace matters more than the counters
            failed.append(f"{path}: {e}")
    if sampler.available:
        line = f"nvml: {sampler.n_gpus} GPUs, {stored} samples"
    else:
        line = f"nvml: unavailable: {sampler.reason}; capture continues without GPU counters"
    if failed:
        line += "; not added (trace left as it was) to " + "; ".join(failed)
    return line
