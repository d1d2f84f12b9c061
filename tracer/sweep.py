"""`ggml-trace sweep`: every scheduler pattern on every device set of this machine, on each build,
run traced with device-side delays, each cell RED (a run's result wrong), RACE (results right, a
race in the traces) or GREEN, with the race named (docs/sweep.md).

A cell is one pattern (a scenario of scenarios/scenarios.cpp) on one device set, one build, one
kind of CPU buffer (pageable, or the first device's pinned host buffer type) and one scheduler
mode (parallel 0: one graph, synchronized; 1: n_copies > 1, events, graphs in a row as llama.cpp's
ubatches). Each run of a cell slows one device of the set in turn, by delay rules whose delays act
on that device's own queue alone (docs/delay.md: a copy between two asynchronous backends runs on its
source's queue, so a rule on the copies into a device would slow their writer with it), then further
runs draw seeded random delays on every device's queue. Every result is compared bit for bit with the
same graph on the CPU alone, and every trace goes through the race analysis; each run's trace records
its delays and the queue each acted on.

Layers: planning (`plan`, `device_sets`), one cell (`run_cell`, in a worker process), the sweep
(`sweep`). What is written: tracer/sweep_report.py.
"""
from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from . import programs
from .hooks import libraries_first, pinned_builds
from .record import trace_env
from .scenario import META_SCENARIOS, SCENARIOS

# Patterns and the devices each spreads over (scenarios.cpp's table; meta-allreduce: --devices).
PATTERN_DEVICES = {"inputless-reuse": 1, "cpu-async-cpu": 1, "y-graph": 2, "x-graph": 2, "random-dag": 3,
                   "pipeline": 3, "pipeline-input-reuse": 2, "user-input-stall": 3, "alloc-dep": 1, "chain": 2,
                   "ping-pong": 2, "lanes": 2, "y-merge": 2, "input-on-sender": 2, "input-on-receiver": 2,
                   "meta-allreduce": 2}
PATTERNS = list(PATTERN_DEVICES)
assert set(SCENARIOS) <= set(PATTERNS)
BACKENDS = ["vdev", "vulkan", "rpc", "cuda", "all"]
BUFFERS = ["pageable", "pinned"]
DEFAULT_SLOW_US = 3000.0  # the delay a slowed device gets before each operation (µs)
# What a run slows on its device D: delay rules (docs/delay.md), each acting where it says.
SLOWINGS = {
    "queue": "its own queue: every operation that runs there (its splits, the copies into it from the host, "
             "the copies it sends), never the queue of a device that copies into it",
    "compute": "its splits alone",
    "copies-from": "the copies it sends (src=D), on its own queue where a copy runs there",
    "copies-into": "the copies into it, by destination: a copy from another asynchronous device runs on, and "
                   "stalls, the source's queue (the copy's writer)",
}
DEFAULT_SLOWINGS = ("queue",)
DEFAULT_RUNS = 8          # a full cell: one plain run, each device slowed, then random delays
DEFAULT_TIMEOUT_S = 120.0
VERDICTS = ["RED", "RACE", "GREEN", "ERROR"]
# a race's verdict, strongest first (docs/races.md)
RACE_VERDICTS = ["manifested", "overlapped", "latent", "undetermined"]


class SweepError(ValueError):
    """Input that stops the whole sweep (no build, no pattern left to run)."""


@dataclass(frozen=True)
class DeviceSet:
    """A column of the table: the devices a pattern's device slots take in order (a pattern of
    more slots folds the rest onto the last), which tree runs them and the environment they need."""
    label: str
    devices: tuple
    tree: str          # the build's tree (programs.bin_dir name) whose scenario program runs them
    env: tuple = ()    # (name, value) pairs
    rpc_server: str = ""  # a build whose ggml-rpc-server each cell starts on loopback (its RPC0)


@dataclass(frozen=True)
class Cell:
    pattern: str
    device_set: DeviceSet
    build: str
    buffer: str         # "pageable" | "pinned" | "-" (the pattern sets its own)
    parallel: int       # 0 | 1 | -1 (the pattern sets its own)

    @property
    def name(self) -> str:
        axes = "" if self.parallel < 0 else f"-{self.buffer}-p{self.parallel}"
        return f"{self.pattern}/{self.device_set.label}-{self.build}{axes}".replace("+", "_").replace("×", "x")

    def devices(self) -> tuple:
        """The devices this cell's pattern uses: as many of the set's as it has slots."""
        return self.device_set.devices[:max(1, PATTERN_DEVICES[self.pattern])]


@dataclass(frozen=True)
class SweepOptions:
    """What to sweep (`builds`, `backend`, `patterns`: all when empty), how hard (`quick`: one run
    per slowed device; `runs`: runs per cell, default DEFAULT_RUNS), where (`out`), and the
    delays (`slow_us`, `seed`); `jobs` cells at a time; `timeout` per run; `devices` of each kind in
    a set (virtual devices; CUDA's, as GGML_CUDA_DEVICES makes them of one GPU)."""
    out: Path
    builds: tuple = ("b10531",)
    backend: str = "vdev"
    patterns: tuple = ()
    quick: bool = False
    runs: int | None = None
    slow_us: float = DEFAULT_SLOW_US
    seed: int = 0
    jobs: int = 0
    timeout: float = DEFAULT_TIMEOUT_S
    devices: int = 3  # of each kind a set has: virtual devices, CUDA's (GGML_CUDA_DEVICES)
    slowings: tuple = DEFAULT_SLOWINGS  # what a slowed device's runs slow (SLOWINGS), each in turn


@dataclass
class CellResult:
    cell: Cell
    runs: int = 0
    wrong_runs: int = 0
    verdict: str = "GREEN"
    races: list = field(default_factory=list)  # merged over the runs, strongest first
    profiles: list = field(default_factory=list)  # per run: what was slowed
    traces: list = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    devices: list = field(default_factory=list)  # what ran, where the cell learns it (a program's trace)
    detail: dict = field(default_factory=dict)   # more of the cell for sweep.json (a program's command)

    def to_json(self) -> dict:
        c = self.cell
        return {"pattern": c.pattern, "devices": self.devices or list(c.devices()), "device_set": c.device_set.label,
                "build": c.build, "buffer": c.buffer, "parallel": None if c.parallel < 0 else c.parallel,
                "runs": self.runs, "wrong_runs": self.wrong_runs, "verdict": self.verdict, "races": self.races,
                "profiles": self.profiles, "traces": self.traces, "error": self.error,
                "seconds": round(self.seconds, 2), **self.detail}


# -- planning -------------------------------------------------------------------------------------

def _trees(build: str, kind: str) -> list[str]:
    """The trees of `build` that may run `kind` devices, most specific first: bNNNNN-KIND (or
    bNNNNN-KIND-SUFFIX for a patched bNNNNN-SUFFIX, as make setup names them), then the build's own
    tree (a GPU host's build holds CUDA and Vulkan together). Only trees with hooks."""
    builds = pinned_builds()
    base, _, suffix = build.partition("-")
    names = [build] if kind == "vdev" else [f"{build}-{kind}", f"{base}-{kind}-{suffix}" if suffix else "", build]
    return [n for n in dict.fromkeys(names) if n and n in builds]


def _tree_with(build: str, kind: str, device: str, env: dict) -> str | None:
    """The first tree of `build` whose scenario program lists `device` (a name prefix) with `env`."""
    for tree in _trees(build, kind):
        if any(d.startswith(device) for d in listed_devices(tree, env)):
            return tree
    return None


def listed_devices(tree: str, env: dict | None = None) -> list[str]:
    """The devices the tree's scenario program sees (`ggml-trace-scenarios devices`), [] if none;
    asked once per tree and environment (a device set's planning asks again)."""
    return list(_listed_devices(tree, tuple(sorted((env or {}).items()))))


@functools.lru_cache(maxsize=None)
def _listed_devices(tree: str, env: tuple) -> tuple:
    exe = pinned_builds()[tree] / "ggml-trace-scenarios"
    if not exe.exists():
        return ()
    run_env = libraries_first(exe.parent, dict(os.environ, **dict(env)))
    try:
        r = subprocess.run([str(exe), "devices"], capture_output=True, text=True, timeout=60, env=run_env)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(line.split("\t")[0] for line in r.stdout.splitlines() if line.strip()) if r.returncode == 0 else ()


VDEV_ENV = (("GGML_TRACE_VDEV_HOST_COPIES", "pinned"),)  # as Vulkan: async only out of pinned host memory
VULKAN_ENV = (("GGML_VK_VISIBLE_DEVICES", "0"), ("GGML_TRACE_DEVICE_TIMING", "1"))


def _rpc_server_build(tree: str) -> str:
    """The build whose ggml-rpc-server serves `tree`'s RPC client: its own, or for a patched build
    (its libggml-base alone is patched; the protocol is its base build's) the base build's; "" if none."""
    builds = pinned_builds()
    if not (builds[tree] / "libggml-rpc.so").exists():
        return ""
    for name in (tree, tree.partition("-")[0]):
        if name in builds and (builds[name] / "ggml-rpc-server").exists():
            return name
    return ""


def device_sets(backend: str, build: str, vdevs: int = 3) -> list[DeviceSet]:
    """The columns for one build: its virtual devices; an RPC server on loopback (a CPU behind it)
    beside virtual devices, each way round; Vulkan0 beside virtual devices, each way round; CUDA's
    devices (GGML_CUDA_DEVICES makes several of one GPU); CUDA0 beside Vulkan0, each way round
    (`all`). Only what this machine has: a tree not built, or a device its program does not list,
    leaves its set out."""
    out = []
    vnames = tuple(f"VDEV{i}" for i in range(vdevs))
    own = _trees(build, "vdev") if backend in ("vdev", "all") else []
    if own:
        out.append(DeviceSet("VDEV", vnames, own[0], VDEV_ENV))
    rpc_trees = _trees(build, "vdev") if backend in ("rpc", "all") else []
    server = _rpc_server_build(rpc_trees[0]) if rpc_trees else ""
    if server:
        rpc_tree = rpc_trees[0]
        beside = tuple(f"VDEV{i}" for i in range(vdevs - 1))
        out.append(DeviceSet("RPC0+VDEV", ("RPC0", *beside), rpc_tree, VDEV_ENV, server))
        out.append(DeviceSet("VDEV+RPC0", (beside[0], "RPC0", *beside[1:]), rpc_tree, VDEV_ENV, server))
    vk = _tree_with(build, "vulkan", "Vulkan0", dict(VULKAN_ENV)) if backend in ("vulkan", "all") else None
    if vk:
        beside = tuple(f"VDEV{i}" for i in range(vdevs - 1))
        venv = VULKAN_ENV + VDEV_ENV
        out.append(DeviceSet("Vulkan0+VDEV", ("Vulkan0", *beside), vk, venv))
        out.append(DeviceSet("VDEV+Vulkan0", (beside[0], "Vulkan0", *beside[1:]), vk, venv))
    # device timing: the event watcher times CUDA's work, so that verdicts rest on device times
    cuda_env = {"GGML_CUDA_DEVICES": str(vdevs), "GGML_TRACE_DEVICE_TIMING": "1"}
    cu = _tree_with(build, "cuda", "CUDA", cuda_env) if backend in ("cuda", "all") else None
    if cu:
        cuda = tuple(n for n in listed_devices(cu, cuda_env) if n.startswith("CUDA"))
        out.append(DeviceSet(f"CUDA×{len(cuda)}", cuda, cu, tuple(cuda_env.items())))
        both = dict(VULKAN_ENV)
        if backend == "all" and any(d.startswith("Vulkan0") for d in listed_devices(cu, both)):
            out.append(DeviceSet("CUDA0+Vulkan0", ("CUDA0", "Vulkan0"), cu, tuple(both.items())))
            out.append(DeviceSet("Vulkan0+CUDA0", ("Vulkan0", "CUDA0"), cu, tuple(both.items())))
    return out


def plan(options: SweepOptions) -> tuple[list[Cell], list[str]]:
    """The cells to run, and a line for each build, pattern or device set that cannot run."""
    problems = []
    patterns = list(options.patterns) or PATTERNS
    for p in patterns:
        if p not in PATTERN_DEVICES:
            problems.append(f"unknown pattern {p!r} (known: {', '.join(PATTERNS)})")
    patterns = [p for p in patterns if p in PATTERN_DEVICES]
    if options.backend not in BACKENDS:
        raise SweepError(f"unknown backend {options.backend!r} (known: {', '.join(BACKENDS)})")
    cells = []
    for build in options.builds:
        sets = device_sets(options.backend, build, options.devices)
        if not sets:
            problems.append(f"build {build!r}: no {options.backend} devices to run on (not built here, or no such "
                            "build: `ggml-trace builds` lists them)")
            continue
        for p in patterns:
            for ds in sets:
                used = ds.devices[:max(1, PATTERN_DEVICES[p])]
                if ds.label != "VDEV" and all(d.startswith("VDEV") for d in used):
                    continue  # the set's real device is beyond this pattern's slots: the VDEV column has it
                if p in META_SCENARIOS:  # a meta device over devices of one kind: its own set-up
                    if len({d.rstrip("0123456789") for d in used}) == 1:
                        cells.append(Cell(p, ds, build, "-", -1))
                    continue
                for buffer in BUFFERS:
                    if buffer == "pinned" and used[0].startswith("RPC"):
                        continue  # pinned is the first device's host buffer type: RPC has none
                    for parallel in (0, 1):
                        cells.append(Cell(p, ds, build, buffer, parallel))
    return cells, problems


# -- one cell ---------------------------------------------------------------------------------------

def profiles(cell: Cell, options: SweepOptions) -> list[dict]:
    """What each run of the cell slows: {"name", "slow": {device: µs}, "slowing", "random", "seed"}.
    Quick: each device of the cell in turn, with each of the options' slowings (`runs`: that many
    runs, taken round). Otherwise one plain run, the same, then seeded random delays on every device's
    queue, up to `runs`."""
    devs = cell.devices()
    slowed = [{"name": _profile_name(d, s, options.slow_us), "slow": {d: options.slow_us}, "slowing": s,
               "random": False} for s in options.slowings for d in devs]
    if options.quick:
        return [slowed[i % len(slowed)] for i in range(options.runs or len(slowed))]
    runs = options.runs or DEFAULT_RUNS
    out = [{"name": "plain", "slow": {}, "slowing": None, "random": False}] + slowed
    k = 0
    while len(out) < runs:
        out.append({"name": f"random up to {options.slow_us:g} us on each queue, seed {options.seed + k}",
                    "slow": {d: options.slow_us for d in devs}, "slowing": "queue", "random": True,
                    "seed": options.seed + k})
        k += 1
    return out[:runs]


def _profile_name(device: str, slowing: str, us: float) -> str:
    what = {"queue": device, "compute": f"{device} compute", "copies-from": f"copies from {device}",
            "copies-into": f"copies into {device}, by destination"}[slowing]
    return f"{what} +{us:g} us"


def slow_rules(device: str, slowing: str, amount: str, seed: str = "") -> list[str]:
    """The delay rules that slow `device` as `slowing` says (SLOWINGS); `amount` is the rules'
    MICROSECONDS (a number, or rand:MAX with `seed` the ",seed=S" key)."""
    return [{"queue": f"*:*,queue={device}{seed}:{amount}",
             "compute": f"{device}:graph_compute{seed}:{amount}",
             "copies-from": f"*:cpy_tensor_async,src={device}{seed}:{amount}",
             "copies-into": f"{device}:cpy_tensor_async{seed}:{amount}"}[slowing]]


def _run_env(cell: Cell, profile: dict) -> tuple[dict, list[str]]:
    """(environment, delay rules) of one run: each slowed device's rules (slow_rules), virtual or
    real alike; a random run's seeds differ by device (8 × seed + the device's position)."""
    ds = cell.device_set
    env = dict(ds.env)
    vdevs = [d for d in ds.devices if d.startswith("VDEV")]
    rules = []
    if vdevs:
        env["GGML_TRACE_VIRTUAL_DEVICES"] = str(len(vdevs))
    if cell.pattern in META_SCENARIOS and any(d.startswith("CUDA") for d in ds.devices):
        # CUDA's own allreduce rounds F32 partial sums through BF16 by default (allreduce.cu), and the
        # scenario's sums are exact only in F32: its result would differ from the CPU's in every run
        env["GGML_CUDA_AR_BF16_THRESHOLD"] = "0"
    for i, (dev, us) in enumerate(profile["slow"].items()):
        amount = f"rand:{us:g}" if profile["random"] else f"{us:g}"
        seed = f",seed={8 * profile['seed'] + i}" if profile["random"] else ""
        rules += slow_rules(dev, profile.get("slowing") or "queue", amount, seed)
    return env, rules


def _result(stdout: str) -> str | None:
    for line in stdout.splitlines():
        if line.startswith("result "):
            return line.split()[1]
    return None


def _scenario_args(cell: Cell) -> list[str]:
    args = ["--seed", "1", "--devices", str(PATTERN_DEVICES[cell.pattern])]
    for d in cell.devices():
        args += ["--device", d]
    if cell.pattern in META_SCENARIOS:  # its own set-up: no buffer or scheduler mode to choose
        return args
    return args + ["--buffer", cell.buffer, "--parallel", str(cell.parallel)]


def _race_key(r: dict) -> tuple:
    return (r["class"],) + tuple(r[s][k] for s in "ab" for k in ("kind", "backend", "split", "tensor", "mode"))


def _merge_race(races: dict, r: dict, run: int, trace: str, wrong: bool) -> None:
    """One finding of one run into the cell's races (by the analysis' own key): the runs it was
    found in, the wrong ones among them, and its strongest verdict."""
    key = _race_key(r)
    m = races.get(key)
    if m is None:
        m = races[key] = {"class": r["class"], "tensors": [r["a"]["tensor"], r["b"]["tensor"]],
                          "backends": [r["a"]["backend"], r["b"]["backend"]], "verdict": r["verdict"],
                          "missing": r["missing"], "runs": [], "wrong_runs": [], "trace": trace, "race": None}
    m["runs"].append(run)
    if wrong:
        m["wrong_runs"].append(run)
    if RACE_VERDICTS.index(r["verdict"]) < RACE_VERDICTS.index(m["verdict"]):
        m["verdict"], m["trace"] = r["verdict"], trace


def run_cell(cell: Cell, options: SweepOptions) -> CellResult:
    """Every run of one cell: traced, compared with the CPU alone, its races found; with the cell's
    own RPC server running where its set has one (untraced: its CPU backend is synchronous)."""
    if not cell.device_set.rpc_server:
        return _run_cell(cell, options, [])
    with contextlib.ExitStack() as stack:
        try:
            endpoint = stack.enter_context(programs.rpc_server(cell.device_set.rpc_server))
        except RuntimeError as e:  # the server did not start
            return CellResult(cell, verdict="ERROR", error=str(e))
        return _run_cell(cell, options, ["--rpc", endpoint])


def _run_cell(cell: Cell, options: SweepOptions, extra_args: list[str]) -> CellResult:
    from .. import analysis

    t0 = time.monotonic()
    res = CellResult(cell)
    tree_bin = pinned_builds()[cell.device_set.tree]
    exe = str(tree_bin / "ggml-trace-scenarios")
    hooks = tree_bin / "libggml-trace-hooks.so"
    out_dir = Path(options.out) / "cells" / cell.name
    out_dir.mkdir(parents=True, exist_ok=True)
    base = libraries_first(tree_bin)  # the tree's own libraries first: a patched libggml-base beside
    args = _scenario_args(cell) + extra_args
    try:
        ref = subprocess.run([exe, cell.pattern, "--cpu-only", *args], capture_output=True, text=True,
                             timeout=options.timeout, env=base)
    except subprocess.TimeoutExpired:
        res.verdict, res.error = "ERROR", f"the CPU reference timed out after {options.timeout:g} s"
        return res
    expected = _result(ref.stdout)
    if ref.returncode != 0 or expected is None:
        res.verdict, res.error = "ERROR", f"the CPU reference failed ({ref.returncode}): {_last(ref.stderr)}"
        return res
    races: dict = {}
    outputs: set = set()
    for i, profile in enumerate(profiles(cell, options)):
        env, rules = _run_env(cell, profile)
        trace = out_dir / f"run-{i}.ggmltrace"
        for old in out_dir.glob(f"run-{i}.ggmltrace*"):
            old.unlink()
        try:
            run_env = trace_env(hooks, trace, base=dict(base, **env), delays=rules or None)
            r = subprocess.run([exe, cell.pattern, *args], capture_output=True, text=True, timeout=options.timeout,
                               env=run_env)
        except subprocess.TimeoutExpired:
            res.verdict, res.error = "ERROR", f"run {i} ({profile['name']}) hung: stopped after {options.timeout:g} s"
            break
        except Exception as e:  # noqa: BLE001 - a bad delay rule, a missing library: this cell's error
            res.verdict, res.error = "ERROR", f"run {i} ({profile['name']}) did not start: {e}"
            break
        got = _result(r.stdout)
        if r.returncode != 0 or got is None:
            (out_dir / f"run-{i}.stderr").write_text(r.stderr)
            res.verdict = "ERROR"
            res.error = (f"run {i} ({profile['name']}) failed ({_exit_words(r.returncode)}): {failure_cause(r.stderr)} "
                         f"(stderr: {out_dir / f'run-{i}.stderr'})")
            res.traces.append(str(trace))
            break
        wrong = got != expected
        outputs.add(got)
        res.runs += 1
        res.wrong_runs += wrong
        res.profiles.append(dict(profile, wrong=wrong))
        res.traces.append(str(trace))
        for finding in analysis.races(analysis.load(str(trace))).to_json()["races"]:
            _merge_race(races, finding, i, str(trace), wrong)
    res.races = sorted(races.values(), key=lambda m: (RACE_VERDICTS.index(m["verdict"]), -len(m["runs"])))
    if res.error is None:
        res.verdict = "RED" if res.wrong_runs else "RACE" if res.races else "GREEN"
        res.detail["outputs"] = len(outputs)  # one wrong output in every run: not a matter of timing
    res.seconds = time.monotonic() - t0
    return res


def _last(stderr: str) -> str:
    lines = [x.strip() for x in stderr.splitlines() if x.strip()]
    return lines[-1][:300] if lines else "no message"


def failure_cause(stderr: str) -> str:
    """The line of a failed run's stderr that says why: ggml's assertion or error, else the last
    (what follows an abort is a debugger's backtrace)."""
    lines = stderr.splitlines()
    for says in (lambda x: "GGML_ASSERT" in x or "GGML_ABORT" in x, lambda x: "error" in x.lower(),
                 lambda x: "failed" in x):
        for line in lines:
            if says(line):
                return line.strip()[:300]
    return _last(stderr)


def _exit_words(rc: int) -> str:
    return f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"


def _run_cell_guarded(cell: Cell, options: SweepOptions) -> CellResult:
    """run_cell, with anything unexpected this cell's error: the other cells still run."""
    try:
        return run_cell(cell, options)
    except Exception as e:  # noqa: BLE001 - one cell's failure is said in its row
        return CellResult(cell, verdict="ERROR", error=f"{type(e).__name__}: {e}")


# -- the sweep ------------------------------------------------------------------------------------

@dataclass
class SweepResult:
    options: Any  # SweepOptions, or a program sweep's (sweep_program.ProgramSweepOptions)
    cells: list
    problems: list
    seconds: float

    @property
    def exit_status(self) -> int:
        """2 when something could not run, else 1 when a cell is RED or RACE, else 0."""
        if self.problems or any(c.verdict == "ERROR" for c in self.cells):
            return 2
        return 1 if any(c.verdict in ("RED", "RACE") for c in self.cells) else 0

    def to_json(self) -> dict:
        o = asdict(self.options)
        o["out"] = str(o["out"])
        counts = {v: sum(c.verdict == v for c in self.cells) for v in VERDICTS}
        return {"options": o, "counts": counts, "problems": self.problems, "seconds": round(self.seconds, 1),
                "cells": [c.to_json() for c in self.cells]}


def sweep(options: SweepOptions, log=lambda line: None) -> SweepResult:
    """Plans the cells, runs them `options.jobs` at a time (each in a process of its own), and
    logs a line per cell as it ends."""
    t0 = time.monotonic()
    cells, problems = plan(options)
    for p in problems:
        log(f"ggml-trace sweep: {p}")
    if not cells:
        raise SweepError("nothing to run: " + ("; ".join(problems) if problems else "no cells"))
    jobs = options.jobs or os.cpu_count() or 1
    options = replace(options, out=Path(options.out).resolve())
    results: list[CellResult] = []
    width = len(str(len(cells)))
    pool = ProcessPoolExecutor(max_workers=jobs)
    try:
        futures = [pool.submit(_run_cell_guarded, c, options) for c in cells]
        for n, f in enumerate(futures, 1):
            r = f.result()
            results.append(r)
            log(f"[{n:>{width}}/{len(cells)}] {progress_words(r)}")
    except KeyboardInterrupt:  # stopped (Ctrl-C, a time limit): what is done is kept and written
        problems.append(f"interrupted after {len(results)} of {len(cells)} cells")
        log(f"ggml-trace sweep: {problems[-1]}")
        pool.shutdown(wait=False, cancel_futures=True)
    else:
        pool.shutdown()
    return SweepResult(options, results, problems, time.monotonic() - t0)


def progress_words(r: CellResult) -> str:
    c = r.cell
    axes = "" if c.parallel < 0 else f" {c.buffer} p{c.parallel}"
    what = (r.error if r.verdict == "ERROR" else f"{r.wrong_runs}/{r.runs} wrong" +
            (f"; {len(r.races)} race{'s' if len(r.races) != 1 else ''} ({r.races[0]['verdict']}: "
             f"{' / '.join(map(str, r.races[0]['tensors']))})" if r.races else ""))
    return f"{r.verdict:<5} {c.pattern} on {c.device_set.label}, {c.build}{axes}: {what}"

