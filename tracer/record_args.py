"""How a program is run under the hooks, as command-line options: one definition for every command
that runs programs traced (`record`, `diagnose`), and what they turn into (the hook library and
the program's environment)."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from . import hooks as hooks_mod


def _latencies(text: str) -> str:
    """argparse type of the latency options: '3000' or '0,3000' (one value per device)."""
    from .scenario import parse_latencies

    try:
        return ",".join(f"{v:g}" for v in parse_latencies(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_program_options(p) -> None:
    """The options that say which hooks, devices, timing and delays a traced program runs with."""
    p.add_argument("--hooks", help="hook library to inject (default: the one built for the program's ggml)")
    p.add_argument("--build", help="use the hooks of a pinned build, e.g. b10531")
    p.add_argument("--virtual-devices", type=int, default=0, metavar="N",
                   help="give the program N virtual async devices VDEV0..N-1 (docs/scenarios.md)")
    p.add_argument("--vdev-latency-us", type=_latencies, default="0", metavar="US[,US...]",
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
    p.add_argument("--host-writes", choices=["infer", "observe", "off"], default="infer",
                   help="the program's own stores into graph inputs in host memory, which integrated GPUs "
                        "read in place: inferred before each graph compute (default, free), observed by "
                        "comparing the inputs' bytes (exact bytes and window; costs a copy of the inputs), "
                        "or off (docs/integrated.md)")
    p.add_argument("--nvml", action=argparse.BooleanOptionalAction, default=True,
                   help="sample GPU counters through NVML into the trace (default: on; a no-op without NVML)")
    p.add_argument("--nvml-interval-ms", type=float, default=20.0, metavar="MS",
                   help="NVML sampling period (default: %(default)g)")
    p.add_argument("--device-timing", action="store_true",
                   help="time each operation on devices with events (a watcher thread per backend)")
    p.add_argument("--cupti", nargs="?", const="graphs", choices=["graphs", "kernels"],
                   help="CUDA: collect GPU activity with CUPTI, loaded at run time; graphs (the default): a CUDA "
                        "graph's execution as one record, kernels: every kernel, inside graphs too (docs/gpu.md)")
    p.add_argument("--delay", action="append", metavar="SPEC",
                   help="inject a delay before the operations SPEC selects, e.g. "
                        "'VDEV0:graph_compute,split=1:2000' (repeatable; docs/delay.md)")


def hooks_library(args) -> Path:
    """The hook library for the program of `args.cmd`: --hooks, else the build's or the one that
    matches the program's ggml. HooksNotFound says why there is none."""
    program = hooks_mod.ggml_program(args.cmd)  # the program itself, or the one a wrapper runs
    lib = Path(args.hooks) if args.hooks else hooks_mod.hooks_for(program, args.build)
    if not lib.exists():
        raise hooks_mod.HooksNotFound(f"no hook library at {lib}")
    return lib


def patched_ggml(args) -> Path | None:
    """The bin folder of --build when it is another ggml than the program's own (a patched build
    of the same sources, such as b11434-ppfix): the program is run on it."""
    return hooks_mod.ggml_dir_to_load(hooks_mod.ggml_program(args.cmd), args.build) if args.build else None


def program_env(args, base: dict | None = None) -> dict:
    """The environment the options ask for: `base` (default: ours) with the patched ggml first on
    the library path, the virtual devices, host writes and device timing variables set."""
    env = dict(os.environ if base is None else base)
    ggml_dir = patched_ggml(args)
    if ggml_dir:
        env = hooks_mod.libraries_first(ggml_dir, env)
    if args.virtual_devices:
        env.update(GGML_TRACE_VIRTUAL_DEVICES=str(args.virtual_devices),
                   GGML_TRACE_VDEV_LATENCY_US=args.vdev_latency_us,
                   GGML_TRACE_VDEV_JITTER_US=str(args.vdev_jitter_us),
                   GGML_TRACE_VDEV_BANDWIDTH_GBPS=str(args.vdev_bandwidth_gbps),
                   GGML_TRACE_VDEV_SEED=str(args.vdev_seed))
        if args.vdev_allreduce:
            env["GGML_TRACE_VDEV_ALLREDUCE"] = "1"
        if args.vdev_integrated:
            env["GGML_TRACE_VDEV_INTEGRATED"] = "1"
    if args.host_writes != "infer":
        env["GGML_TRACE_HOST_WRITES"] = args.host_writes
    # device-side timing: the event watcher and/or CUPTI (read by the hooks at start-up)
    if args.device_timing:
        env["GGML_TRACE_DEVICE_TIMING"] = "1"
    if args.cupti:
        env["GGML_TRACE_CUPTI"] = "kernels" if args.cupti == "kernels" else "1"
    return env
