"""Run a program under the hook library and collect the trace files it writes."""
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Recording:
    returncode: int
    traces: list = field(default_factory=list)  # the file named -o, then NAME.PID of other processes

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


def trace_env(hooks: Path, output: Path, paused: bool = False, base=None) -> dict:
    """Environment that makes a program (and the programs it starts) trace into `output`."""
    env = dict(os.environ if base is None else base)
    preload = [str(hooks)] + [p for p in env.get("LD_PRELOAD", "").split(":") if p]
    env["LD_PRELOAD"] = ":".join(preload)
    env["GGML_TRACE_OUTPUT"] = str(output)
    if paused:
        env["GGML_TRACE_START_PAUSED"] = "1"
    return env


def record(cmd: list, hooks: Path, output: Path, paused: bool = False, **popen_kwargs) -> Recording:
    """Runs `cmd` to completion under the hooks; signals sent to us are passed on to it."""
    output = Path(output).resolve()
    clear_traces(output)
    env = trace_env(hooks, output, paused, popen_kwargs.pop("env", None))
    proc = subprocess.Popen(cmd, env=env, **popen_kwargs)
    forwarded = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    for s in forwarded:
        signal.signal(s, lambda signum, frame: proc.send_signal(signum))
    try:
        returncode = proc.wait()
    finally:
        for s, handler in forwarded.items():
            signal.signal(s, handler)
    return Recording(returncode, trace_files(output))
