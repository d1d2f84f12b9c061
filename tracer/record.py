"""Run a program under the hook library and collect the trace files it writes."""
import contextlib
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import delay_spec, windows
from .hooks import HooksNotFound, VDEV_NAME
from .nvml import NvmlSampler, gpu_metadata


@dataclass
class Recording:
    returncode: int
    traces: list = field(default_factory=list)  # the file named -o, then NAME.PID of other processes
    nvml: str = ""  # what became of the GPU counters, one line ("" when not asked for)
    snapshots: list = field(default_factory=list)  # snapshots.Snapshot taken while it ran
    timed_out: bool = False  # it ran past record()'s timeout and was killed

    @property
    def crashed(self) -> bool:
        return self.returncode < 0

    def describe_exit(self) -> str:
        if self.timed_out:
            return "hung: killed at the time limit"
        crash = windows.exception_name(self.returncode)  # a Windows program's crash: its exception's code
        if crash:
            return f"crashed: {crash}"
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


SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """'256M', '1G', '512MiB', '4096' -> bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.I)
    if not m or float(m[1]) <= 0:
        raise ValueError(f"{text!r} is not a size (e.g. 256M, 1G)")
    return int(float(m[1]) * SIZE_UNITS[m[2].upper()])


def ring_env(spec: str, max_size: str | None = None) -> dict:
    """The flight recorder's settings for the hooks: `spec` is how much to keep, a time
    ('5', '5s', '0.5s': seconds) or a size ('256M'); `max_size` caps a time ring (default 1 GiB).
    ValueError says what does not parse."""
    env = {}
    t = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*s?\s*", spec)
    if t:
        if float(t[1]) <= 0:
            raise ValueError(f"--ring {spec}: the time to keep must be above 0")
        env["GGML_TRACE_RING_SECONDS"] = t[1]
        if max_size:
            env["GGML_TRACE_RING_BYTES"] = str(parse_size(max_size))
    else:
        if max_size:
            raise ValueError(f"--ring {spec} is a size already; --ring-max goes with a time")
        try:
            env["GGML_TRACE_RING_BYTES"] = str(parse_size(spec))
        except ValueError:
            raise ValueError(f"--ring {spec}: give seconds (5, 0.5s) or a size (256M, 1G)") from None
    return env


def virtual_devices_library(hooks: Path, env: dict) -> list:
    """The virtual devices' library (beside the hooks) when `env` asks for virtual devices
    (GGML_TRACE_VIRTUAL_DEVICES=N, N > 0): it is loaded only then. HooksNotFound if it is missing."""
    try:
        wanted = int(env.get("GGML_TRACE_VIRTUAL_DEVICES") or 0) > 0
    except ValueError:
        wanted = False
    if not wanted:
        return []
    lib = Path(hooks).with_name(VDEV_NAME)
    if not lib.exists():
        raise HooksNotFound(f"virtual devices need {VDEV_NAME} beside {hooks}, and there is none: rebuild the "
                            "hooks (make setup, or ggml-trace build-hooks; docs/building.md)")
    return [str(lib)]


def trace_env(hooks: Path, output: Path, paused: bool = False, base=None, delays=None) -> dict:
    """Environment that makes a program (and the programs it starts) trace into `output`.
    `delays`: delay rules to inject (docs/delay.md), in place of any GGML_TRACE_DELAY the
    environment holds; either is checked here (DelaySpecError if a rule is bad)."""
    env = dict(os.environ if base is None else base)
    if delays:
        env[delay_spec.ENV] = delay_spec.env_value(delays)
    elif env.get(delay_spec.ENV):
        delay_spec.parse([env[delay_spec.ENV]])
    if windows.is_windows_hooks(hooks):  # ggml's backend loader (or the launcher) brings them in
        env.update(windows.injection_env(hooks, output, launched=env.get(windows.LAUNCH_ENV) == "1"))
    else:
        preload = [str(hooks)] + virtual_devices_library(hooks, env)
        preload += [p for p in env.get("LD_PRELOAD", "").split(":") if p]
        env["LD_PRELOAD"] = ":".join(preload)
        env["GGML_TRACE_OUTPUT"] = str(output)
    if paused:
        env["GGML_TRACE_START_PAUSED"] = "1"
    return env


def record(cmd: list, hooks: Path, output: Path, paused: bool = False, nvml: bool = False,
           nvml_interval_ms: float = 20.0, delays=None, check: str | None = None,
           check_every: float = 1.0, on_snapshot=None, timeout: float | None = None, **popen_kwargs) -> Recording:
    """Runs `cmd` to completion under the hooks; signals sent to us are passed on to it.
    `delays`: delay rules (`--delay`), checked before anything runs (DelaySpecError).

    nvml=True samples the GPUs' counters while it runs and adds them, with the GPUs' metadata,
    to every trace file of the run.

    Snapshots of the run's traces are taken while it runs when we get SIGUSR1, and when the
    shell command `check` (run every `check_every` seconds, GGML_TRACE_PID set to the program's
    pid) starts failing; `on_snapshot(snapshot or error text, why)` hears of each.

    `timeout`: seconds after which a program still running is taken as hung and ended (SIGTERM,
    then SIGKILL); its trace keeps what it recorded, and the Recording says timed_out."""
    output = Path(output).resolve()
    env = trace_env(hooks, output, paused, popen_kwargs.pop("env", None), delays)
    if windows.is_windows_hooks(hooks) and env.get(windows.LAUNCH_ENV) == "1":
        cmd = windows.launched(cmd, hooks)
    clear_traces(output)
    sampler = NvmlSampler(nvml_interval_ms) if nvml else None
    taken: list = []  # snapshots.Snapshot
    hung: list = []
    with sampler or contextlib.nullcontext():
        proc = subprocess.Popen(cmd, env=env, **popen_kwargs)
        forwarded = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        for s in forwarded:
            signal.signal(s, lambda signum, frame: proc.send_signal(signum))
        asked = []
        old_usr1 = signal.signal(signal.SIGUSR1, lambda signum, frame: asked.append(1))
        try:
            bound = _samples_bound(env, output, sampler)
            deadline = time.monotonic() + timeout if timeout else None
            returncode = _watch(proc, output, asked, check, check_every, taken, on_snapshot, bound, deadline, hung)
        finally:
            t_end = time.monotonic_ns()
            for s, handler in forwarded.items():
                signal.signal(s, handler)
            signal.signal(signal.SIGUSR1, old_usr1)
    rec = Recording(returncode, trace_files(output), snapshots=taken, timed_out=bool(hung))
    if sampler is not None:
        rec.nvml = add_gpu_counters(rec.traces, sampler, t_end)
    return rec


SAMPLES_TRIM_EVERY_S = 5.0  # how often a flight recorder's GPU counters are cut to its window


def _counters_from_ns(path, header: dict, now_ns: int) -> int:
    """The earliest GPU counter reading (CLOCK_MONOTONIC ns) a trace file keeps at `now_ns`: a flight
    recorder keeps the recent past and so do its counters (a time ring twice its time, a size ring
    what its oldest chunk holds, less a second); a plain trace everything from its start."""
    from ..analysis.ring import is_ring, oldest_chunk_ns

    t0 = header["t0_monotonic_ns"]
    if header["ring_keep_ns"]:
        return max(t0, now_ns - 2 * header["ring_keep_ns"])
    if is_ring(header):
        try:
            oldest = oldest_chunk_ns(path, header)
        except (OSError, ValueError):
            oldest = None
        return max(t0, (oldest or t0) - 1_000_000_000)
    return t0


def _samples_bound(env: dict, output: Path, sampler: NvmlSampler | None):
    """Under a flight recorder, a function that drops the GPU counter readings no trace file of the
    run would keep (add_gpu_counters' rule, a second early). None when there is nothing to bound."""
    if sampler is None or not (env.get("GGML_TRACE_RING_SECONDS") or env.get("GGML_TRACE_RING_BYTES")):
        return None

    def trim():
        from ..analysis.trace_file import read_header
        from ..analysis.trace_format import TraceFormatError

        now = time.monotonic_ns() - 1_000_000_000
        try:
            bounds = [_counters_from_ns(path, read_header(path), now) for path in trace_files(output)]
        except (OSError, TraceFormatError):
            return  # a file still being created: next time
        if bounds:
            sampler.forget_before(min(bounds))
    return trim


def _watch(proc, output: Path, asked: list, check: str | None, every: float, taken: list, on_snapshot,
           trim_samples=None, deadline: float | None = None, hung: list | None = None) -> int:
    """Waits for `proc`; meanwhile takes the snapshots asked for (SIGUSR1, a failing check) and
    keeps a flight recorder's GPU counters to its window (`trim_samples`). Past `deadline`
    (time.monotonic()) it ends the program and appends to `hung`."""
    from . import snapshots

    def snap(why: str):
        for path in trace_files(output):
            try:
                s = snapshots.take(path)
                taken.append(s)
                if on_snapshot:
                    on_snapshot(s, why)
            except snapshots.SnapshotError as e:
                if on_snapshot:
                    on_snapshot(str(e), why)

    failing = False
    next_check = time.monotonic() + every
    next_trim = time.monotonic() + SAMPLES_TRIM_EVERY_S
    while True:
        try:
            return proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            pass
        if deadline is not None and time.monotonic() >= deadline:
            if hung is not None:
                hung.append(1)
            return _end(proc)
        if trim_samples and time.monotonic() >= next_trim:
            trim_samples()
            next_trim = time.monotonic() + SAMPLES_TRIM_EVERY_S
        if asked:
            asked.clear()
            snap("SIGUSR1")
        if check and time.monotonic() >= next_check:
            rc = _run_check(check, proc.pid, timeout=max(60.0, 10 * every))
            if rc != 0 and not failing and proc.poll() is None:
                snap(f"check failed ({rc})" if rc is not None else "check timed out")
            failing = rc != 0
            next_check = time.monotonic() + every


def _end(proc, grace_s: float = 3.0) -> int:
    """Ends a hung program: SIGTERM (a program may flush what it has), SIGKILL after `grace_s`."""
    proc.terminate()
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _run_check(check: str, pid: int, timeout: float) -> int | None:
    """The check's exit status (None: it ran past `timeout` and was killed)."""
    try:
        return subprocess.run(check, shell=True, env=dict(os.environ, GGML_TRACE_PID=str(pid)),
                              timeout=timeout, stdout=subprocess.DEVNULL).returncode
    except subprocess.TimeoutExpired:
        return None


def add_gpu_counters(traces: list, sampler: NvmlSampler, t_end_ns: int) -> str:
    """Appends the GPUs' NVML metadata (META "nvml", "nvml.status") and the counter samples
    each trace keeps (_counters_from_ns) up to t_end_ns to every trace. A trace it cannot add them to is left
    as it was. Returns one line saying what happened."""
    # Imported here: the analysis package pulls in pandas, which the program need not wait for.
    from ..analysis.trace_file import read_header

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
            t0 = _counters_from_ns(path, read_header(path), t_end_ns)
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
