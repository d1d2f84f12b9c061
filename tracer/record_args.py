"""How a program is run under the hooks: the program (Program), the options of every command that
runs programs traced (TraceOptions: `record`'s, `diagnose`'s), their one command-line definition
(add_program_options), and what they turn into (the hook library, the patched ggml, the program's
environment). Below the command line everything takes these values, never argparse's Namespace."""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from . import hooks as hooks_mod
from . import windows

VDEV_LATENCY_US = "0"
HOST_WRITES = "infer"  # the program's own stores into graph inputs: inferred (docs/integrated.md)
NVML_INTERVAL_MS = 20.0
CHECK_EVERY_S = 1.0
RECORD_OUTPUT = "ggml-trace.ggmltrace"


@dataclass
class Program:
    """A command line to run traced, and the executable of it whose ggml is traced: the command
    itself, or the program a wrapper runs (`stdbuf -o0 PROG`). Found once, by Program.of: finding
    it runs `ldd` on the command's words."""

    cmd: list[str]
    executable: str

    @classmethod
    def of(cls, cmd) -> Program:
        cmd = [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in cmd]
        return cls(cmd, hooks_mod.ggml_program(cmd) if cmd else "")


@dataclass
class TraceOptions:
    """Which hooks, devices, timing and delays a traced program runs with (add_program_options
    says what each one does)."""

    hooks: str | None = None
    build: str | None = None
    virtual_devices: int = 0
    vdev_latency_us: str = VDEV_LATENCY_US  # '3000' or '0,3000' (one value per device)
    vdev_jitter_us: float = 0.0
    vdev_bandwidth_gbps: float = 0.0
    vdev_seed: int = 0
    vdev_allreduce: bool = False
    vdev_integrated: bool = False
    host_writes: str = HOST_WRITES
    nvml: bool = True
    nvml_interval_ms: float = NVML_INTERVAL_MS
    device_timing: bool = False
    cupti: str | None = None  # "graphs" or "kernels"
    cuda_streams: bool = False  # ggml-cuda's runtime calls below the backend interface (docs/cuda-streams.md)
    delays: list[str] = field(default_factory=list)  # --delay SPEC, each
    launch: bool = False  # a Windows program started through the launcher beside the hooks

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TraceOptions:
        """The options add_program_options parsed (the command line's side of the boundary)."""
        values = {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}
        values["delays"] = values["delays"] or []  # argparse's append leaves None when none is given
        return cls(**values)

    def arguments(self) -> list[str]:
        """These options as `ggml-trace` arguments (those that differ from the defaults), for a
        report to say how it was run."""
        out: list[str] = []
        defaults = TraceOptions()
        for f in fields(self):
            value = getattr(self, f.name)
            if value == getattr(defaults, f.name):
                continue
            if f.name == "delays":
                out += [w for spec in value for w in ("--delay", spec)]
            elif isinstance(value, bool):
                out.append(f"--{'' if value else 'no-'}{f.name.replace('_', '-')}")
            else:
                out += [f"--{f.name.replace('_', '-')}", str(value)]
        return out


@dataclass
class RecordOptions:
    """`ggml-trace record`'s options: where the trace goes, how it runs (TraceOptions) and the
    flight recorder's (docs/flight-recorder.md)."""

    output: str = RECORD_OUTPUT
    trace: TraceOptions = field(default_factory=TraceOptions)
    paused: bool = False
    ring: str | None = None
    ring_max: str | None = None
    check: str | None = None
    check_every: float = CHECK_EVERY_S


def _latencies(text: str) -> str:
    """argparse type of the latency options: '3000' or '0,3000' (one value per device)."""
    from .scenario import parse_latencies

    try:
        return ",".join(f"{v:g}" for v in parse_latencies(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_program_options(p, build: bool = True) -> None:
    """The options that say which hooks, devices, timing and delays a traced program runs with
    (TraceOptions.from_args reads them back); `build`: --build too (a command that takes several
    builds has its own)."""
    p.add_argument("--hooks", help="hook library to inject (default: the one built for the program's ggml)")
    if build:
        p.add_argument("--build", help="use the hooks of a build: the project's (b10531, b11434-ppfix, ...) or one build-hooks made")
    p.add_argument("--virtual-devices", type=int, default=0, metavar="N",
                   help="give the program N virtual async devices VDEV0..N-1 (docs/scenarios.md)")
    p.add_argument("--vdev-latency-us", type=_latencies, default=VDEV_LATENCY_US, metavar="US[,US...]",
                   help="virtual device latency per operation; A,B,... gives one value per device")
    p.add_argument("--vdev-jitter-us", type=float, default=0.0, help="seeded random extra latency, up to this")
    p.add_argument("--vdev-bandwidth-gbps", type=float, default=0.0, help="virtual device copy bandwidth (0: free)")
    p.add_argument("--vdev-seed", type=int, default=0, help="jitter seed")
    p.add_argument("--vdev-allreduce", action="store_true",
                   help="the virtual devices offer their own allreduce for tensor parallelism, as CUDA "
                        "does, instead of leaving the meta backend to its butterfly (docs/tensor-parallel.md)")
    p.add_argument("--vdev-integrated", action="store_true",
                   help="the virtual devices are integrated GPUs: they read host buffers in place, so the "
                        "scheduler copies no inputs into them (docs/integrated.md)")
    p.add_argument("--host-writes", choices=["infer", "observe", "off"], default=HOST_WRITES,
                   help="the program's own stores into graph inputs in host memory, which integrated GPUs "
                        "read in place: inferred before each graph compute (default, free), observed by "
                        "comparing the inputs' bytes (exact bytes and window; costs a copy of the inputs), "
                        "or off (docs/integrated.md)")
    p.add_argument("--nvml", action=argparse.BooleanOptionalAction, default=True,
                   help="sample GPU counters through NVML into the trace (default: on; a no-op without NVML)")
    p.add_argument("--nvml-interval-ms", type=float, default=NVML_INTERVAL_MS, metavar="MS",
                   help="NVML sampling period (default: %(default)g)")
    p.add_argument("--device-timing", action="store_true",
                   help="time each operation on devices with events (a watcher thread per backend)")
    p.add_argument("--cupti", nargs="?", const="graphs", choices=["graphs", "kernels"],
                   help="CUDA: collect GPU activity with CUPTI, loaded at run time; graphs (the default): a CUDA "
                        "graph's execution as one record, kernels: every kernel, inside graphs too (docs/gpu.md)")
    p.add_argument("--cuda-streams", action="store_true",
                   help="CUDA: record ggml-cuda's runtime calls inside each split through CUPTI's callbacks "
                        "(launches and the nodes they compute, streams, events, CUDA graph capture); judged by "
                        "`ggml-trace streams` (docs/cuda-streams.md)")
    p.add_argument("--delay", action="append", dest="delays", metavar="SPEC",
                   help="inject a delay before the operations SPEC selects, e.g. "
                        "'VDEV0:graph_compute,split=1:2000' (repeatable; docs/delay.md)")
    p.add_argument("--launch", action="store_true",
                   help="Windows: start the program through ggml-trace-launch.exe (beside the hooks), which loads "
                        "the hooks into it: for a program that never calls ggml_backend_load_all() (docs/windows.md)")


def hooks_library(program: Program, options: TraceOptions) -> Path:
    """The hook library for `program`: --hooks, else the build's or the one that matches the
    program's ggml. HooksNotFound says why there is none."""
    lib = Path(options.hooks) if options.hooks else hooks_mod.hooks_for(program.executable, options.build)
    if not lib.exists():
        raise hooks_mod.HooksNotFound(f"no hook library at {lib}")
    if options.launch and not (windows.is_windows_hooks(lib) and lib.with_name(windows.LAUNCHER).exists()):
        raise hooks_mod.HooksNotFound(f"--launch starts a Windows program through {windows.LAUNCHER} beside its hooks, "
                                      f"and there is none beside {lib} (docs/windows.md)")
    return lib


def patched_ggml(program: Program, options: TraceOptions) -> Path | None:
    """The bin folder of --build when it is another ggml than the program's own (a patched build
    of the same sources, such as b11434-ppfix): the program is run on it."""
    return hooks_mod.ggml_dir_to_load(program.executable, options.build) if options.build else None


def program_env(options: TraceOptions, ggml_dir: Path | None, base: dict | None = None) -> dict:
    """The environment the options ask for: `base` (default: ours) with `ggml_dir` (patched_ggml's
    answer) first on the library path, the virtual devices, host writes and device timing
    variables set."""
    env = dict(os.environ if base is None else base)
    if ggml_dir:
        env = hooks_mod.libraries_first(ggml_dir, env)
    if options.virtual_devices:
        env.update(GGML_TRACE_VIRTUAL_DEVICES=str(options.virtual_devices),
                   GGML_TRACE_VDEV_LATENCY_US=options.vdev_latency_us,
                   GGML_TRACE_VDEV_JITTER_US=str(options.vdev_jitter_us),
                   GGML_TRACE_VDEV_BANDWIDTH_GBPS=str(options.vdev_bandwidth_gbps),
                   GGML_TRACE_VDEV_SEED=str(options.vdev_seed))
        if options.vdev_allreduce:
            env["GGML_TRACE_VDEV_ALLREDUCE"] = "1"
        if options.vdev_integrated:
            env["GGML_TRACE_VDEV_INTEGRATED"] = "1"
    if options.host_writes != HOST_WRITES:
        env["GGML_TRACE_HOST_WRITES"] = options.host_writes
    # device-side timing: the event watcher and/or CUPTI (read by the hooks at start-up)
    if options.device_timing:
        env["GGML_TRACE_DEVICE_TIMING"] = "1"
    if options.cupti:
        env["GGML_TRACE_CUPTI"] = "kernels" if options.cupti == "kernels" else "1"
    if options.cuda_streams:
        env["GGML_TRACE_CUDA_STREAMS"] = "1"
    if options.launch:
        env[windows.LAUNCH_ENV] = "1"
    return env
