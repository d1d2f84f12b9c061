"""`ggml-trace sweep --program`: a real program (llama.cpp's) over a matrix of what changes its
schedule: split modes, KV offload, flash attention, batch sizes, the scheduler's copies, graph reuse,
CUDA's allreduce and graphs (docs/sweep.md, "Real configurations"). Each configuration is one cell:
`diagnose` run on it (tracer/diagnose.py: a reference on one device, traced runs compared with it,
every trace's races, the most frequent forced), its answer turned into the sweep's verdict, and its
folder (ISSUE.md, timeline.png, the traces) kept under DIR/cells.

A matrix is axes, each a list of alternatives; an alternative is words put into the command: options
(`-sm tensor`, which replaces the command's own -sm) and, before them, environment assignments
(`GGML_SCHED_MAX_COPIES=1`). Design `each`: the command as given, then each alternative alone;
`full`: every combination (an empty alternative is "as given").
"""
from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path

from .delay_spec import DelaySpecError
from .diagnose import SEVERAL_DEVICES, DiagnoseError, DiagnoseOptions, diagnose, option_value, with_options
from .hooks import HooksNotFound, ggml_program, pinned_builds
from .record_args import Program, TraceOptions
from .sweep import RACE_VERDICTS, CellResult, DeviceSet, SweepError, SweepResult, failure_cause, progress_words

DESIGNS = ["each", "full"]
DEFAULT_RUNS = 3
QUICK_RUNS = 2
AS_GIVEN = "as given"
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_AXIS_NAME = re.compile(r"^\s*([A-Za-z][\w .-]*?)\s*:(?!:)")


class MatrixError(ValueError):
    """A matrix that cannot be read: the message says where, in one line."""


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple  # alternatives, each a string of words ("" = the command as given)


# What changes llama.cpp's schedule (design `each`: the command as given, then each one alone). A
# value that does not apply (-sm row off CUDA, -np on a one-sequence program) shows as its cell's
# answer: an ERROR with the program's own words, or the same schedule.
DEFAULT_AXES = (
    Axis("split mode", ("-sm none", "-sm layer", "-sm row", "-sm tensor")),
    Axis("KV cache", ("-nkvo",)),
    Axis("flash attention", ("-fa on", "-fa off")),
    Axis("sequences", ("-np 2",)),  # --kv-unified: llama-server's; llama-completion refuses it
    Axis("batch", ("-b 8 -ub 2",)),
    Axis("a layer on the CPU", (r"-ot blk\.0\.ffn_.*=CPU",)),
    Axis("graph reuse", ("LLAMA_GRAPH_REUSE_DISABLE=1",)),
    Axis("scheduler copies", ("GGML_SCHED_MAX_COPIES=1", "GGML_SCHED_MAX_COPIES=8")),
)
CUDA_AXES = (  # only where the program's ggml has CUDA (ggml_has_cuda)
    Axis("CUDA allreduce", ("GGML_CUDA_ALLREDUCE=internal", "GGML_CUDA_ALLREDUCE=none")),
    Axis("CUDA graphs", ("GGML_CUDA_GRAPH_OPT=1", "GGML_CUDA_DISABLE_GRAPHS=1")),
)
# llama.cpp's --fit (on by default) refuses a tensor split: its common library throws this, and the
# program goes on with parameters nobody fitted (b10524, b10531, b11434: common/fit.cpp). A cell with
# -sm tensor runs with -fit off where the program carries the refusal and its command sets no --fit.
FIT_REFUSES_TENSOR = b"llama_params_fit is not implemented for SPLIT_MODE_TENSOR"
FIT_OFF = ("-fit", "off")
FALSEY = ("off", "false", "0", "disabled")  # llama.cpp's is_falsey


def parse_axis(text: str) -> Axis:
    """`NAME: ALT | ALT | ...` (the name optional): an axis of the command line's --axis. Words are
    split as a shell does; a quoted `|` is part of its word (`-ot "a|b=CPU"`)."""
    m = _AXIS_NAME.match(text)
    name, rest = (m.group(1), text[m.end():]) if m else ("", text)
    lex = shlex.shlex(rest, posix=True, punctuation_chars="|")
    lex.whitespace_split = True
    alternatives: list[list] = [[]]
    try:
        for token in lex:
            if token and set(token) == {"|"}:  # a bare `|`, or several: each one ends an alternative
                alternatives += [[] for _ in token]
            else:
                alternatives[-1].append(token)
    except ValueError as e:
        raise MatrixError(f"axis {text!r}: {e}") from None
    values = tuple(shlex.join(words) for words in alternatives)
    if not any(values):
        raise MatrixError(f"axis {text!r} has no alternative (write them as 'NAME: -sm layer | -sm tensor')")
    return Axis(name or " | ".join(v for v in values if v), values)


def load_matrix(path: Path) -> tuple[str | None, str | None, tuple]:
    """(program, design, axes) of a matrix file: JSON {"program": "...", "design": "each"|"full",
    "axes": {"NAME": ["ALT", ...], ...}}; program and design may be left out."""
    try:
        j = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MatrixError(f"{path}: not a matrix file ({e})") from None
    if not isinstance(j, dict) or not isinstance(j.get("axes"), dict) or not j["axes"]:
        raise MatrixError(f'{path}: wants {{"axes": {{"NAME": ["ALT", ...]}}}} (and optionally "program", "design")')
    axes = []
    for name, values in j["axes"].items():
        if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
            raise MatrixError(f"{path}: axis {name!r} wants a list of strings, one per alternative")
        for v in values:
            try:
                _words(v)
            except MatrixError as e:
                raise MatrixError(f"{path}: axis {name!r}: {e}") from None
        axes.append(Axis(str(name), tuple(v.strip() for v in values)))
    program, design = j.get("program"), j.get("design")
    if program is not None and not isinstance(program, str):
        raise MatrixError(f"{path}: \"program\" wants a command line, as one string")
    if design is not None and design not in DESIGNS:
        raise MatrixError(f"{path}: \"design\" is one of {', '.join(DESIGNS)}")
    return program, design, tuple(axes)


def _words(alternative: str) -> tuple[tuple, tuple]:
    """(environment assignments, options) of one alternative: the leading NAME=VALUE words are
    the environment, the rest are options."""
    try:
        words = shlex.split(alternative)
    except ValueError as e:
        raise MatrixError(f"alternative {alternative!r}: {e}") from None
    env = []
    while words and _ENV_WORD.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env.append((name, value))
    return tuple(env), tuple(words)


def configurations(axes: tuple, design: str) -> list[tuple]:
    """The alternatives of each configuration, in order (design `each`: the command as given first,
    then each non-empty alternative alone; `full`: every combination, the first axis slowest)."""
    if design == "full":
        return [tuple(v for v in combo if v) for combo in product(*(a.values for a in axes))]
    alone = [(v,) for a in axes for v in a.values if v]
    return [()] + list(dict.fromkeys(alone))


@dataclass(frozen=True)
class ProgramCell:
    """One configuration of the program, run on one build (its own ggml: build ""). It reads as a
    pattern cell does (sweep_report): `pattern` is the configuration in words."""
    config: tuple     # the alternatives, as written
    number: int       # its row, from 1
    build: str
    device_set: DeviceSet
    buffer: str = "-"
    parallel: int = -1

    @property
    def pattern(self) -> str:
        return " ".join(self.config) or AS_GIVEN

    @property
    def name(self) -> str:
        slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", self.pattern).strip("_")[:60] or "as-given"
        return f"{self.number:02d}-{slug}/{self.build or 'own'}"

    def devices(self) -> tuple:
        return ()

    def env_and_options(self) -> tuple[dict, list]:
        env: dict = {}
        options: list = []
        for alt in self.config:
            e, o = _words(alt)
            env.update(e)
            options += o
        return env, options


@dataclass(frozen=True)
class ProgramSweepOptions:
    """A program sweep: the command (`program`, words; `{bin}` stands for each build's bin folder),
    its matrix (`axes`, `design`), the builds it is traced with (columns; none: the program's own),
    and each cell's diagnosis: `runs` traced runs against a reference (`reference` arguments put into
    the command, or `reference_dev`), `max_races` forced `force_runs` times each, reduced where
    `replay_runs` > 0; `trace`: devices, timing and delays of every traced run."""
    out: Path
    program: tuple
    axes: tuple = DEFAULT_AXES
    design: str = "each"
    builds: tuple = ()
    quick: bool = False
    runs: int | None = None
    reference: str | None = None
    reference_dev: str | None = None
    max_races: int = 1
    force_runs: int = 2
    replay_runs: int = 0
    timeout: float = 600.0
    trace: TraceOptions = field(default_factory=TraceOptions)

    @property
    def runs_per_cell(self) -> int:
        return self.runs or (QUICK_RUNS if self.quick else DEFAULT_RUNS)


def command(cell: ProgramCell, options: ProgramSweepOptions) -> list[str]:
    """The command line of one cell: the program on the cell's build, its options in place of the
    command's own, its environment through `env` (which the reference runs too); with a tensor
    split, -fit off where the program's --fit refuses one (tensor_split_needs)."""
    argv = [_in_bin(w, cell.build) for w in options.program]
    env, words = cell.env_and_options()
    argv = with_options(argv, words)
    argv = with_options(argv, list(tensor_split_needs(argv)))
    return ["env", *(f"{k}={v}" for k, v in env.items()), *argv] if env else argv


def tensor_split_needs(argv: list) -> tuple:
    """What a command with `-sm tensor` needs to run its split: `-fit off` where the program's
    --fit refuses a tensor split (FIT_REFUSES_TENSOR) and the command sets no --fit of its own."""
    if option_value(argv, "-sm") not in SEVERAL_DEVICES or option_value(argv, "-fit") is not None:
        return ()
    exe = _executable(ggml_program(list(argv)))
    return FIT_OFF if exe is not None and _carries(str(exe), FIT_REFUSES_TENSOR) else ()


def tensor_split_refused(argv: list) -> str:
    """Why a tensor split cannot run, where the command itself keeps the program's --fit on, which
    refuses one; "" otherwise."""
    fit = option_value(argv, "-fit")
    if option_value(argv, "-sm") not in SEVERAL_DEVICES or fit is None or fit in FALSEY:
        return ""
    exe = _executable(ggml_program(list(argv)))
    if exe is None or not _carries(str(exe), FIT_REFUSES_TENSOR):
        return ""
    return f"the command sets --fit {fit}, and llama.cpp's --fit refuses -sm tensor (-fit off runs it)"


def _executable(program: str) -> Path | None:
    exe = shutil.which(program) if "/" not in program else program
    return Path(exe).resolve() if exe and os.path.isfile(exe) else None


@functools.lru_cache(maxsize=None)
def _carries(exe: str, text: bytes) -> bool:
    """Whether `exe` or a llama.cpp library it loads holds `text` (llama.cpp's common library is
    linked into each program, or is a shared one of its own: libllama-common, b11434)."""
    paths = [Path(exe), *(p for n, p in _loaded(exe).items() if n.startswith(("libllama", "libcommon")))]
    for path in paths:
        try:
            if text in path.read_bytes():
                return True
        except OSError:
            continue
    return False


@functools.lru_cache(maxsize=None)
def _loaded(exe: str) -> dict:
    """{library name: path} of what `exe` loads (ldd), {} when that cannot be said."""
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {m.group(1): Path(m.group(2)) for m in re.finditer(r"^\s*(\S+)\s+=>\s+(/\S+)", out, re.M)}


def _in_bin(word: str, build: str) -> str:
    """`word` with {bin} as the build's bin folder; a patched build holds its libggml-base alone
    (b11434-ppfix), so its programs are its base build's (b11434), run on the patched ggml."""
    if "{bin}" not in word or not build:
        return word
    builds = pinned_builds()
    path = word.replace("{bin}", str(builds[build]))
    base = builds.get(build.split("-")[0])
    if not Path(path).exists() and base is not None:
        return word.replace("{bin}", str(base))
    return path


def default_axes(program: tuple, builds: tuple = ()) -> tuple:
    """DEFAULT_AXES, and CUDA's where the ggml of a column has CUDA (ggml_has_cuda): each build's
    program ({bin} its bin folder), or without builds the program's own. A column whose ggml has
    none runs a CUDA variable as the command as given (ggml-cuda alone reads them)."""
    columns = [[_in_bin(w, b) for w in program] for b in builds or ("",)] if program else []
    cuda = any(ggml_has_cuda(ggml_program(argv)) for argv in columns)
    return DEFAULT_AXES + (CUDA_AXES if cuda else ())


def ggml_has_cuda(program: str) -> bool:
    """Whether the ggml that `program` loads has a CUDA backend, from its libraries: a libggml-cuda it
    loads (linked through libggml), one beside its libggml-base or beside the program (where a build
    of loadable backends, GGML_BACKEND_DL, finds them), else a "CUDA" among the backends its ggml
    registers once every loadable backend is loaded (a build's backend folder, GGML_BACKEND_DIR)."""
    exe = _executable(program)
    if exe is None:
        return False
    libs = _loaded(str(exe))
    if any(name.startswith("libggml-cuda") for name in libs):
        return True
    folders = {exe.parent} | {p.resolve().parent for n, p in libs.items() if n.startswith("libggml-base")}
    if any(any(f.glob("libggml-cuda*")) for f in folders):
        return True
    ggml = next((p for n, p in libs.items() if n.startswith("libggml.so")), None)
    return ggml is not None and "CUDA" in registered_backends(str(ggml), str(exe.parent))


_REGISTERED = """
import ctypes, sys
g = ctypes.CDLL(sys.argv[1])
if hasattr(g, "ggml_backend_load_all_from_path"):
    g.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
    g.ggml_backend_load_all_from_path(sys.argv[2].encode())
if hasattr(g, "ggml_backend_load_all"):
    g.ggml_backend_load_all()
g.ggml_backend_reg_count.restype = ctypes.c_size_t
g.ggml_backend_reg_get.restype = ctypes.c_void_p
g.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
g.ggml_backend_reg_name.restype = ctypes.c_char_p
g.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
for i in range(g.ggml_backend_reg_count()):
    print(g.ggml_backend_reg_name(g.ggml_backend_reg_get(i)).decode())
"""


@functools.lru_cache(maxsize=None)
def registered_backends(libggml: str, folder: str) -> tuple:
    """The names of the backends the ggml of `libggml` registers, its loadable ones loaded (from
    `folder`, the program's, and where that ggml looks by itself), asked in a process of its own;
    () when it cannot say."""
    try:
        r = subprocess.run([sys.executable, "-c", _REGISTERED, libggml, folder], capture_output=True, text=True,
                           timeout=120, env={k: v for k, v in os.environ.items() if not k.startswith("GGML_TRACE_")})
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(r.stdout.split()) if r.returncode == 0 else ()


def plan(options: ProgramSweepOptions) -> tuple[list[ProgramCell], list[str]]:
    """The cells (a configuration × a build), and a line for each build that cannot run."""
    problems, builds = [], []
    known = pinned_builds()
    for b in options.builds or ("",):
        if b and b not in known:
            problems.append(f"build {b!r}: no such build with hooks (`ggml-trace builds` lists them)")
        else:
            builds.append(b)
    label = Path(ggml_program(list(options.program))).name
    cells = [ProgramCell(config, n, b, DeviceSet(label, (), b))
             for n, config in enumerate(configurations(options.axes, options.design), 1) for b in builds]
    return cells, problems


def _strongest(verdicts: dict) -> str:
    return min(verdicts, key=RACE_VERDICTS.index)


def _run_number(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


def run_program_cell(cell: ProgramCell, options: ProgramSweepOptions) -> CellResult:
    """One configuration: diagnosed (its reference, its traced runs, their races, the first forced),
    and the answer as the sweep's verdict. RED: a run's output differs from the reference's (or,
    without a reference that ran, the runs differ among themselves), or a run failed where others did
    not; RACE: outputs right, a race in the traces; ERROR: no run could be traced, or every run failed."""
    t0 = time.monotonic()
    res = CellResult(cell)  # type: ignore[arg-type]  # a program cell reads as a pattern cell does
    argv = command(cell, options)
    folder = Path(options.out) / "cells" / cell.name
    res.detail = {"command": argv}
    dopt = DiagnoseOptions(folder, runs=options.runs_per_cell, reference=options.reference,
                           reference_dev=options.reference_dev, timeout=options.timeout,
                           max_races=options.max_races, force_runs=options.force_runs,
                           replay_runs=options.replay_runs,
                           trace=replace(options.trace, build=cell.build or options.trace.build))
    try:
        d = diagnose(Program.of(argv), dopt)
    except (DiagnoseError, HooksNotFound, DelaySpecError, OSError) as e:
        stderr = folder / "runs" / "run-1.stderr"  # the program's own words, where it ran
        said = failure_cause(stderr.read_text(errors="replace")) if stderr.exists() else ""
        res.verdict, res.seconds = "ERROR", time.monotonic() - t0
        res.error = _with_reason((f"the program says: {said}; " if said else "") + str(e), argv)
        return res
    res.runs = len(d.runs)
    res.traces = [str(folder / r.trace) for r in d.runs if r.trace]
    res.devices = list(d.environment.get("backends", {}))
    res.detail.update(reference=d.reference_argv, reference_failed=d.reference_failed, headline=d.headline,
                      outputs=d.outputs, issue=str(Path("cells") / cell.name / "ISSUE.md"))
    failed = [r for r in d.runs if r.failed]
    if len(failed) == len(d.runs):
        res.verdict = "ERROR"
        said = (folder / failed[0].stderr).read_text(errors="replace")
        res.error = _with_reason(f"every run failed ({failed[0].exit}): {failure_cause(said)} "
                                 f"(stderr: {folder / failed[0].stderr})", argv)
        res.seconds = time.monotonic() - t0
        return res
    if d.has_reference:
        wrong = set(d.differing_runs)
    else:  # among themselves: the runs outside the most common output
        groups = [r.output_group for r in d.runs]
        common = max(set(groups), key=groups.count)
        wrong = {r.name for r in d.runs if r.output_group != common}
    wrong |= {r.name for r in failed}
    res.wrong_runs = len(wrong)
    res.races = [_race_json(m, wrong, folder) for m in d.races]
    res.verdict = "RED" if wrong else "RACE" if res.races else "GREEN"
    res.seconds = time.monotonic() - t0
    return res


def _with_reason(error: str, argv: list) -> str:
    """`error`, after why the cell's configuration cannot run where that is known."""
    if argv and argv[0] == "env":  # the cell's variables before the program
        argv = argv[1:]
        while argv and _ENV_WORD.match(argv[0]):
            argv = argv[1:]
    why = tensor_split_refused(argv)
    return f"{why}; {error}" if why else error


def _race_json(m, wrong: set, folder: Path) -> dict:
    """A merged race of a cell's diagnosis as sweep.json says a race, with what forcing it showed."""
    r = m.race
    forced = m.force or {}
    return {"class": r["class"], "tensors": [r["a"]["tensor"], r["b"]["tensor"]],
            "backends": [r["a"]["backend"], r["b"]["backend"]], "verdict": _strongest(m.verdicts),
            "missing": r["missing"], "runs": [_run_number(n) for n in m.runs],
            "wrong_runs": [_run_number(n) for n in m.runs if n in wrong],
            "trace": str(folder / "runs" / f"{m.run}.ggmltrace"),
            "forced": forced.get("verdict"), "forced_words": forced.get("message") or m.force_error,
            "explains": m.explains}


def sweep_program(options: ProgramSweepOptions, log=lambda line: None) -> SweepResult:
    """Every cell in turn (a program may use every core and the GPU: one at a time), a line each."""
    t0 = time.monotonic()
    if not options.program:
        raise SweepError("--program wants a command line")
    options = replace(options, out=Path(options.out).resolve())
    cells, problems = plan(options)
    for p in problems:
        log(f"ggml-trace sweep: {p}")
    if not cells:
        raise SweepError("nothing to run: " + "; ".join(problems))
    results: list[CellResult] = []
    try:
        for n, cell in enumerate(cells, 1):
            r = run_program_cell(cell, options)
            results.append(r)
            log(f"[{n:>{len(str(len(cells)))}}/{len(cells)}] {progress_words(r)}")
    except KeyboardInterrupt:  # stopped: what is done is kept and written
        problems.append(f"interrupted after {len(results)} of {len(cells)} cells")
        log(f"ggml-trace sweep: {problems[-1]}")
    return SweepResult(options, results, problems, time.monotonic() - t0)
