"""`ggml-trace diagnose`: from "my output is wrong with several devices" to a bug report, in one
command (docs/diagnose.md).

It runs the program N times traced and once untraced on one device (the reference), compares the
outputs (tracer/outputs.py), analyses every trace (races with verdicts, stalls, summary), merges the
races across runs (analysis/race_match.py), forces the most frequent ones (tracer/force.py) and
reduces them where their shape allows (tracer/reduce.py, which replays the reduction on the run's
build), says which race explains a wrong output, and writes the folder a maintainer needs: ISSUE.md
(tracer/issue.py), timeline.png (analysis/timeline_png.py), report.html (analysis/report.py), the
traces and the reproduction.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import windows
from .issue import main_race, stream_shapes, write_issue
from .outputs import NOTE as COMPARED, first_difference, group_outputs, output_of, same_output
from .record import Recording, record
from .record_args import Program, TraceOptions, hooks_library, patched_ggml, program_env

DEFAULT_RUNS = 5
DEFAULT_TIMEOUT_S = 600.0
MAX_RACES = 3  # races forced and reduced, the most frequent first
FORCE_RUNS = 3
REPLAY_RUNS = 3
DEFAULT_REFERENCE_DEV = "none"  # llama.cpp's programs: `-dev none` is the CPU alone
# split modes that cannot run on one device (llama.cpp's tensor parallelism needs a device to split
# over, and fails with `-dev none`): the reference runs unsplit, `-sm none`
SEVERAL_DEVICES = ("tensor",)
# llama.cpp's spellings of one option, so that --reference replaces either
ALIASES = [("-dev", "--device"), ("-ngl", "--gpu-layers", "--n-gpu-layers"), ("-sm", "--split-mode"),
           ("-ts", "--tensor-split"), ("-mg", "--main-gpu"), ("-ot", "--override-tensor"),
           ("-nkvo", "--no-kv-offload"), ("-fit", "--fit")]
# what the folder holds of ours, removed when a diagnosis is written again into it
OURS = ("ISSUE.md", "timeline.png", "report.html", "diagnosis.json", "runs", "repro")


class DiagnoseError(RuntimeError):
    """diagnose cannot do what it was asked; the message says why, in one line."""


@dataclass
class DiagnoseOptions:
    """What `ggml-trace diagnose` is asked (docs/diagnose.md): the folder it writes, the runs, the
    reference (`reference`: arguments put into the command; `reference_dev`: the device it runs
    on, default DEFAULT_REFERENCE_DEV; `no_reference`: none), how the traced runs run (`trace`),
    how much is forced and reduced. `invocation`: the command's own arguments as given, which the
    report shows (default: written from these options)."""

    output: str | Path
    runs: int = DEFAULT_RUNS
    reference: str | None = None
    reference_dev: str | None = None
    no_reference: bool = False
    timeout: float = DEFAULT_TIMEOUT_S
    max_races: int = MAX_RACES
    force_runs: int = FORCE_RUNS
    replay_runs: int = REPLAY_RUNS
    trace: TraceOptions = field(default_factory=TraceOptions)
    invocation: list | None = None

    def arguments(self, program: Program) -> list[str]:
        """`ggml-trace` arguments that ask for this diagnosis of `program` (as given, when known)."""
        if self.invocation:
            return list(self.invocation)
        out = ["diagnose", "-o", str(self.output)]
        defaults = DiagnoseOptions(self.output)
        for name in ("runs", "reference", "reference_dev", "timeout", "max_races", "force_runs", "replay_runs"):
            value = getattr(self, name)
            if value != getattr(defaults, name):
                out += [f"--{name.replace('_', '-')}", f"{value:g}" if isinstance(value, float) else str(value)]
        return out + (["--no-reference"] if self.no_reference else []) + self.trace.arguments() + ["--", *program.cmd]


@dataclass
class Run:
    """One run of the program: a traced one (run-N) or the reference."""

    name: str
    returncode: int
    exit: str  # in words: "exit status 0", "killed by SIGABRT", "hung: killed at the time limit"
    seconds: float
    stdout: str  # files, relative to the diagnosis folder
    stderr: str
    trace: str | None = None
    timed_out: bool = False
    output_bytes: int = 0
    output_group: int = 0  # runs with the same output (tracer/outputs.py) share it; the reference's is 0
    differs_from_reference: bool | None = None
    first_difference: int | None = None  # byte offset, where it differs from the reference
    races: list = field(default_factory=list)  # findings (JSON form)
    # unordered accesses inside CUDA splits (--cuda-streams; analysis.stream_races, findings' JSON form)
    stream_findings: list = field(default_factory=list)
    graphs: int = 0
    stalls: dict = field(default_factory=dict)  # analysis.stalls.totals
    summary: list = field(default_factory=list)  # per backend (analysis.summary)
    warnings: list = field(default_factory=list)
    analysis_error: str | None = None

    @property
    def crashed(self) -> bool:
        return self.returncode < 0 and not self.timed_out

    @property
    def failed(self) -> bool:
        return self.returncode != 0 or self.timed_out


@dataclass
class Race:
    """One race, merged across the runs (analysis.race_match.merge_runs), with what forcing and
    reducing it showed."""

    number: int
    race: dict  # the finding as its representative run showed it
    run: str  # that run
    number_in_run: int
    runs: list
    manifested_runs: list
    verdicts: dict
    manifested: bool = False  # its verdict was "manifested" (proven out of order) in a run at least
    force: dict | None = None  # the force result's JSON form, less its per-run details
    force_error: str | None = None
    forced_outputs: list = field(default_factory=list)  # per forced run: "reference", a run's name ("run-2": its wrong output), "new"
    reduction: dict | None = None  # the reduction's JSON form
    reduce_why: str | None = None  # why there is none
    explains: list = field(default_factory=list)  # the evidence that it explains the wrong output, in words


@dataclass
class Diagnosis:
    directory: str
    invocation: list  # the diagnose command's own arguments, as given
    argv: list  # the program and its arguments
    cwd: str
    runs: list
    reference: Run | None
    reference_argv: list | None
    reference_failed: str | None = None  # how the reference ended and its last line on stderr, when not well
    compared: str = COMPARED
    outputs: int = 0  # distinct outputs among the traced runs
    differing_runs: list = field(default_factory=list)  # runs whose output is not the reference's
    races: list = field(default_factory=list)
    explained_by: int | None = None  # the number of the race that explains the wrong output
    trace_for_views: str | None = None  # the run whose trace the picture and the page show
    environment: dict = field(default_factory=dict)  # what that trace says of the build and devices
    status: int = 0
    headline: str = ""
    not_covered: list = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def has_reference(self) -> bool:
        """A reference output to compare with: the reference ran and ended well. Without one, the
        traced runs are compared among themselves only, and no output is called wrong."""
        return self.reference is not None and self.reference_failed is None


# -- the reference ---------------------------------------------------------------------------------

def _aliases(option: str) -> tuple:
    name = option.split("=", 1)[0]
    return next((a for a in ALIASES if name in a), (name,))


def _is_option(word: str) -> bool:
    if not word.startswith("-") or word == "-":
        return False
    try:
        float(word)  # a negative number is a value
        return False
    except ValueError:
        return True


def with_options(argv: list, extra: list) -> list:
    """`argv` with the options of `extra` in place of the same options there (llama.cpp's
    spellings of one option count as one: -dev and --device), the others appended. An option of
    `extra` followed by a word that is no option takes that word as its value."""
    out = list(argv)
    i = 0
    while i < len(extra):
        opt = extra[i]
        has_value = _is_option(opt) and "=" not in opt and i + 1 < len(extra) and not _is_option(extra[i + 1])
        words = [opt, extra[i + 1]] if has_value else [opt]
        i += len(words)
        if not _is_option(opt):
            out += words
            continue
        names = _aliases(opt)
        at = next((j for j, w in enumerate(out[1:], 1) if w.split("=", 1)[0] in names), None)
        if at is None:
            out += words
        elif "=" in out[at]:
            out[at:at + 1] = words
        else:
            given = at + 1 < len(out) and not _is_option(out[at + 1])
            out[at:at + 1 + given] = words
    return out


def option_value(argv: list, option: str) -> str | None:
    """The value `argv` gives `option` (any of its spellings; `-sm tensor` or `--split-mode=tensor`)."""
    names = _aliases(option)
    for i, w in enumerate(argv[1:], 1):
        name, eq, value = w.partition("=")
        if name in names:
            return value if eq else argv[i + 1] if i + 1 < len(argv) else None
    return None


def reference_argv(argv: list, reference: str | None, reference_dev: str | None) -> list:
    """The reference's command line: `--reference ARGS` put into the program's arguments, else
    `-dev DEV` (default: none, llama.cpp's CPU alone), with `-sm none` in place of a split mode that
    needs several devices (SEVERAL_DEVICES)."""
    if reference is not None:
        return with_options(argv, shlex.split(reference))
    one_device = ["-dev", reference_dev or DEFAULT_REFERENCE_DEV]
    if option_value(argv, "-sm") in SEVERAL_DEVICES:
        one_device += ["-sm", "none"]
    return with_options(argv, one_device)


def _reference_env(ggml_dir: Path | None, hooks: Path) -> dict:
    """Our environment without the hooks' variables (no virtual devices, no tracing), on the
    patched ggml where --build names one (`ggml_dir`). The hooks are loaded all the same, asked to
    trace nothing: they drain llama.cpp's logger at exit, which an untraced run can cut short
    (upstream #22142: seen losing a reference's whole output)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_TRACE_")}
    if windows.is_windows_hooks(hooks):  # a Windows program: through ggml's loader (LD_PRELOAD is Linux's)
        env["GGML_BACKEND_PATH"] = windows.path_for_program(hooks)
    else:
        env["LD_PRELOAD"] = str(hooks)
    if ggml_dir:
        from .hooks import libraries_first

        env = libraries_first(ggml_dir, env)
    return env


def _run_reference(cmd: list, env: dict, out: Path, timeout: float) -> Run:
    t0 = time.monotonic()
    with open(out / "reference.stdout", "wb") as so, open(out / "reference.stderr", "wb") as se:
        proc = subprocess.Popen(cmd, env=env, stdout=so, stderr=se, stdin=subprocess.DEVNULL)
        try:
            proc.wait(timeout=timeout or None)
            rec = Recording(proc.returncode)
        except subprocess.TimeoutExpired:
            proc.kill()
            rec = Recording(proc.wait(), timed_out=True)
    return _run_of("reference", rec, out, time.monotonic() - t0)


def _last_line(path: Path) -> str:
    """The last non-empty line of a file (a program's stderr), "" when there is none."""
    lines = [x.strip() for x in path.read_bytes().decode("utf-8", "replace").splitlines() if x.strip()]
    return lines[-1][:300] if lines else ""


def _run_of(name: str, rec: Recording, out: Path, seconds: float) -> Run:
    stdout = out / f"{name}.stdout"
    return Run(name, rec.returncode, rec.describe_exit(), round(seconds, 2), f"runs/{name}.stdout",
               f"runs/{name}.stderr", timed_out=rec.timed_out, output_bytes=stdout.stat().st_size)


# -- the traced runs -------------------------------------------------------------------------------

def analyse(path: Path, run: Run) -> None:
    """The races, stalls and summary of one run's trace, into `run`."""
    from ..analysis import TraceFormatError, load, races
    from ..analysis.stalls import stalls, totals
    from ..analysis.summary import summarize

    try:
        t = load(path)
    except TraceFormatError:
        t = load(path, strict=False)  # a crash can leave a cut file: keep what is readable
    run.warnings = list(t.warnings)
    if t.not_attached:
        run.analysis_error = f"the capture never attached: {t.not_attached}"
        return
    run.races = races(t).to_json()["races"]
    if len(t.cuda):  # recorded with --cuda-streams: the order inside each CUDA split too
        from ..analysis.stream_races import stream_races
        run.stream_findings = stream_races(t).to_json()["findings"]
    run.graphs = int((t.calls["kind"] == "sched_graph_compute").sum())
    run.stalls = totals(stalls(t), breakdown=False)
    run.summary = summarize(t)["backends"]


def _run_words(run: Run) -> str:
    """The progress line of one traced run."""
    if run.differs_from_reference is None:
        out = f"output {run.output_bytes} bytes"
    elif run.differs_from_reference:
        out = f"output DIFFERS from the reference (at byte {run.first_difference})"
    else:
        out = "output as the reference" + (" as far as it went" if run.returncode < 0 or run.timed_out else "")
    if run.analysis_error:
        found = f"not analysed: {run.analysis_error}"
    elif run.races:
        n = Counter(r["verdict"] for r in run.races)
        found = f"{len(run.races)} race{'s' if len(run.races) != 1 else ''} (" + ", ".join(
            f"{k} {v}" for k, v in n.items()) + ")"
    else:
        found = "no race"
    if run.stream_findings:
        found += f"; {len(run.stream_findings)} access pattern(s) unordered inside CUDA splits"
    return f"{run.exit} in {run.seconds:.1f} s; {out}; {found}"


# -- forcing and reducing ----------------------------------------------------------------------------

def _force(m: Race, d: Diagnosis, folder: Path, options: DiagnoseOptions, log) -> None:
    from ..analysis import TraceFormatError

    from .force import ForceError, force

    trace = folder / "runs" / f"{m.run}.ggmltrace"
    expect = folder / d.reference.stdout if d.has_reference and d.reference else None
    try:
        r = force(trace, race=m.number_in_run, runs=options.force_runs, baseline_runs=0 if expect else 1,
                  expect_output=expect, out_dir=folder / "runs" / f"force-{m.number}", hooks=options.trace.hooks)
    except (ForceError, TraceFormatError, OSError) as e:
        m.force_error = str(e)
        log(f"race {m.number}: not forced: {e}")
        return
    j = r.to_json()
    details = j.pop("details")
    m.force = j
    m.forced_outputs = [_forced_output(folder, x, d) for x in details if x["name"].startswith("forced-")]
    log(f"race {m.number}: forced: {r.message}")


def _forced_output(folder: Path, detail: dict, d: Diagnosis) -> str:
    """What one forced run printed, against the outputs seen: "reference", "run-N" (the wrong
    output of that run), or "new"."""
    out = Path(detail["stdout"]).read_bytes()
    if detail["returncode"] != 0:
        out += f"\n[exit status {detail['returncode']}]".encode()
    if d.has_reference and d.reference and same_output(out, output_of(folder, d.reference)):
        return "reference"
    seen = [r for r in d.runs if r.differs_from_reference or not d.has_reference]
    return next((r.name for r in seen if same_output(out, output_of(folder, r))), "new")


def _reduce(m: Race, folder: Path, first: bool, options: DiagnoseOptions, log) -> None:
    from ..analysis import TraceFormatError

    from .reduce import ReduceError, reduce

    out = folder / ("repro" if first else f"repro-{m.number}")
    try:
        r = reduce(folder / "runs" / f"{m.run}.ggmltrace", out, race=m.number_in_run, expect_runs=options.replay_runs)
    except (ReduceError, TraceFormatError, ValueError, RuntimeError, OSError) as e:
        m.reduce_why = str(e)
        log(f"race {m.number}: not reduced: {e}")
        return
    j = r.to_json()
    j["directory"] = out.name
    j["trace"] = f"runs/{m.run}.ggmltrace"
    if j.get("standalone"):
        j["standalone"] = f"{out.name}/{Path(j['standalone']).name}"
    m.reduction = j
    expected = j["expected"]
    log(f"race {m.number}: reduced to {j['splits']} splits, {j['nodes']} nodes ({j['shape']['name']}); replayed on "
        f"{j['build']}: {expected.get('verdict')}, {expected.get('red_runs')} of {expected.get('runs')} runs wrong")


def _explains(m: Race, d: Diagnosis) -> list:
    """The evidence, in words, that race `m` explains the wrong output (none: it does not). Only a
    proof counts: the race manifested (its verdict, out of order), in the traced runs or in forced
    ones; and only against a reference output (without one, no output is known to be wrong)."""
    out: list = []
    if not d.has_reference:
        return out
    wrong = set(d.differing_runs)
    if wrong and set(m.manifested_runs) == wrong:
        out.append(f"it manifested in exactly the {len(wrong)} run{'s' if len(wrong) != 1 else ''} whose output "
                   "differed from the reference")
    f = m.force or {}
    if f.get("verdict") == "diverged" and f.get("manifested_runs"):  # force says diverged only where it manifested
        seen = sorted({o for o in m.forced_outputs if o.startswith("run-")})
        out.append(f"delaying its earlier operation made {f['diverged_runs']} of {f['runs']} forced runs print a wrong "
                   "output" + (f" ({' and '.join(s + chr(39) + 's' for s in seen)})" if seen else ""))
    return out


# -- the whole -------------------------------------------------------------------------------------

def _prepare(folder: Path) -> None:
    """An empty folder, or one a diagnosis wrote before (its files are replaced)."""
    if folder.exists():
        if not folder.is_dir():
            raise DiagnoseError(f"{folder} exists and is not a folder")
        if any(folder.iterdir()) and not (folder / "diagnosis.json").exists():
            raise DiagnoseError(f"{folder} is not empty, and holds no earlier diagnosis: give a new folder")
        for name in OURS:
            p = folder / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
        for p in folder.glob("repro-*"):
            shutil.rmtree(p, ignore_errors=True)
    (folder / "runs").mkdir(parents=True, exist_ok=True)


def diagnose(program: Program, options: DiagnoseOptions, log=lambda line: None) -> Diagnosis:
    """The diagnosis of `program` (see the module docstring), as `options` ask; `log` gets a line
    per step. Raises DiagnoseError (and HooksNotFound, DelaySpecError) when it cannot run."""
    if not program.cmd:
        raise DiagnoseError("give the program to run after --")
    if options.runs < 1:
        raise DiagnoseError("--runs must be at least 1")
    lib = hooks_library(program, options.trace)
    ggml_dir = patched_ggml(program, options.trace)
    env = program_env(options.trace, ggml_dir)
    folder = Path(options.output)
    _prepare(folder)
    runs_dir = folder / "runs"
    d = Diagnosis(str(folder), options.arguments(program), list(program.cmd), os.getcwd(), [], None, None)

    if not options.no_reference:
        d.reference_argv = reference_argv(program.cmd, options.reference, options.reference_dev)
        log(f"reference: {shlex.join(d.reference_argv)} (untraced)")
        try:
            d.reference = _run_reference(d.reference_argv, _reference_env(ggml_dir, lib), runs_dir, options.timeout)
        except OSError as e:
            raise DiagnoseError(f"the reference run did not start: {e}") from None
        log(f"reference: {d.reference.exit} in {d.reference.seconds:.1f} s, {d.reference.output_bytes} bytes of output")
        if d.reference.failed:  # its output is no reference: the runs are compared among themselves
            last = _last_line(folder / d.reference.stderr)
            d.reference_failed = d.reference.exit + (f": {last}" if last else "")
            log(f"reference failed ({d.reference_failed}): the traced runs are compared among themselves only")

    for i in range(1, options.runs + 1):
        name = f"run-{i}"
        t0 = time.monotonic()
        with open(runs_dir / f"{name}.stdout", "wb") as so, open(runs_dir / f"{name}.stderr", "wb") as se:
            try:
                rec = record(program.cmd, lib, runs_dir / f"{name}.ggmltrace", env=env, nvml=options.trace.nvml,
                             nvml_interval_ms=options.trace.nvml_interval_ms, delays=options.trace.delays,
                             stdout=so, stderr=se, stdin=subprocess.DEVNULL, timeout=options.timeout)
            except OSError as e:
                raise DiagnoseError(f"the program did not start: {e}") from None
        run = _run_of(name, rec, runs_dir, time.monotonic() - t0)
        if rec.traces:
            run.trace = f"runs/{rec.traces[0].name}"
            try:
                analyse(rec.traces[0], run)
            except Exception as e:  # noqa: BLE001 - one run's trace must not end the diagnosis
                run.analysis_error = f"{type(e).__name__}: {e}"
        else:
            run.analysis_error = "no trace: the program created no ggml scheduler, or the hooks refused its ggml"
        if d.has_reference and d.reference:
            mine, ref = output_of(folder, run), output_of(folder, d.reference)
            run.differs_from_reference = not same_output(mine, ref)
            if run.differs_from_reference:
                run.first_difference = first_difference(mine, ref)
        d.runs.append(run)
        log(f"run {i} of {options.runs}: {_run_words(run)}")

    return conclude(d, folder, options, log)


def conclude(d: Diagnosis, folder: Path, options: DiagnoseOptions, log=lambda line: None) -> Diagnosis:
    """What the runs of `d` (their outputs and traces in `folder`) show: outputs grouped, races merged,
    forced and reduced (as many as options.max_races, force_runs and replay_runs allow), the
    verdict; then the picture, the page, ISSUE.md and diagnosis.json written."""
    # a failed reference is shown as it ended, but in no group: the traced runs' groups start at 0
    compared = ([d.reference] if d.has_reference and d.reference else []) + d.runs
    for run, g in zip(compared, group_outputs([output_of(folder, r) for r in compared])):
        run.output_group = g
    if d.reference is not None and not d.has_reference:
        d.reference.output_group = -1
    d.outputs = len({r.output_group for r in d.runs})
    d.differing_runs = [r.name for r in d.runs if r.differs_from_reference]
    if not any(r.trace and not r.analysis_error for r in d.runs):
        how = ", ".join(dict.fromkeys(r.exit for r in d.runs))
        why = "; ".join(dict.fromkeys(r.analysis_error or "" for r in d.runs))
        raise DiagnoseError(f"no run left a trace to analyse (the program: {how}; {why}); see "
                            f"{folder / 'runs'}/run-1.stderr")

    from ..analysis.race_match import identity, merge_runs

    merged = merge_runs({r.name: r.races for r in d.runs if r.races})
    # where each race manifested, by its verdict there (proven out of order), not by any overlap
    verdict_in = {(r.name, identity(x)): x["verdict"] for r in d.runs for x in r.races}
    d.races = []
    for i, m in enumerate(merged, 1):
        proven = [n for n in m["runs"] if verdict_in[(n, identity(m["race"]))] == "manifested"]
        d.races.append(Race(i, m["race"], m["run"], m["number"], m["runs"], proven, m["verdicts"],
                            manifested=bool(proven)))
    for k, m in enumerate(d.races[:options.max_races]):
        log(f"race {m.number} (in {len(m.runs)} of {len(d.runs)} runs, manifested in {len(m.manifested_runs)}): "
            f"{m.race['missing']}")
        if options.force_runs > 0:
            _force(m, d, folder, options, log)
        if options.replay_runs > 0:
            _reduce(m, folder, not any(x.reduction for x in d.races[:k]), options, log)
    for m in d.races:
        m.explains = _explains(m, d)
    d.explained_by = next((m.number for m in d.races if m.explains), None)
    d.trace_for_views = _trace_for_views(d)
    d.status, d.headline = verdict(d)
    d.not_covered = not_covered(d, options)
    write_views(d, folder)
    (folder / "ISSUE.md").write_text(write_issue(d, folder), encoding="utf-8")
    (folder / "diagnosis.json").write_text(json.dumps(d.to_json(), indent=1, default=str) + "\n")
    return d


def _trace_for_views(d: Diagnosis) -> str | None:
    """The trace the picture and the page show: the main race's run (main_race), else the first
    crashed run, else the first run with a trace."""
    top = main_race(d)
    if top:
        return f"runs/{top.run}.ggmltrace"
    failed = [r for r in d.runs if r.trace and r.failed]
    ok = [r for r in d.runs if r.trace and not r.analysis_error]
    pick = (failed or ok or [None])[0]
    return pick.trace if pick else None


def verdict(d: Diagnosis) -> tuple[int, str]:
    """(exit status, the finding in one line): 1 when a race, a wrong or varying output, a crash
    or a hang was found; 0 when every run gave the reference's output and no trace has a race."""
    n = len(d.runs)
    crashed = [r for r in d.runs if r.crashed]
    hung = [r for r in d.runs if r.timed_out]
    parts = []
    if crashed:
        parts.append(f"the program crashed in {len(crashed)} of {n} runs ({crashed[0].exit})")
    if hung:
        parts.append(f"the program hung in {len(hung)} of {n} runs (killed at the time limit)")
    if d.differing_runs:
        parts.append(f"the output differed from the reference in {len(d.differing_runs)} of {n} runs")
    if d.outputs > 1:
        parts.append(f"{d.outputs} distinct outputs in {n} runs")
    if d.races:
        parts.append(f"{len(d.races)} race{'s' if len(d.races) != 1 else ''} found"
                     + (f"; race {d.explained_by} explains the wrong output" if d.explained_by else ""))
    inside = stream_shapes(d)
    if inside:
        parts.append(f"{len(inside)} access pattern(s) that nothing orders inside CUDA splits "
                     f"(ggml-trace streams), in {len({r for f in inside.values() for r in f['runs']})} of {n} runs")
    failed = [f"the reference failed ({d.reference.exit}): the runs are compared among themselves"] \
        if d.reference is not None and not d.has_reference else []
    if parts:
        return 1, "; ".join(failed + parts)
    same = "outputs identical to the reference" if d.has_reference else "outputs identical"
    return 0, "; ".join(failed + [f"no race in {n} run{'s' if n != 1 else ''}; {same}"])


def not_covered(d: Diagnosis, options: DiagnoseOptions) -> list:
    """What a diagnosis does not cover, in words (said with every answer, above all a clean one)."""
    out = [f"timings other than these {len(d.runs)} runs': a race shows only where both accesses were traced, "
           "and a latent one only as close as these runs came (`ggml-trace force` makes one manifest)",
           "synchronization the hooks do not trace (thread joins, locks): two threads that use it are "
           "reported as racing, never the reverse",
           "other prompts, models, batch sizes and devices than this command's"]
    if not options.trace.device_timing and not options.trace.virtual_devices:
        out.append("when async work ran on its device: without --device-timing, verdicts rest on host times "
                   "(undetermined)")
    if d.reference is None:
        out.append("a reference output: without one, only differences between the runs show")
    elif not d.has_reference:
        out.append(f"a reference output: the reference failed ({d.reference_failed}), so only differences "
                   "between the runs show (--reference ARGS gives it other arguments)")
    return out


def write_views(d: Diagnosis, folder: Path) -> None:
    """timeline.png and report.html of the chosen run's trace, and what it says of the build and
    the devices (d.environment)."""
    if not d.trace_for_views:
        return
    from ..analysis import load
    from ..analysis.report import write_report
    from ..analysis.timeline_png import timeline_png

    path = folder / d.trace_for_views
    try:
        t = load(path)
    except Exception:  # noqa: BLE001 - a crashed run's cut file: what can be read of it
        t = load(path, strict=False)
    m = main_race(d)
    name = Path(d.trace_for_views).name
    last = any(r.failed for r in d.runs)
    window = None if m else _graph_window(t, last)
    which = "the trace" if window is None else "its last graph before the end" if last else "one graph of it"
    timeline_png(t, folder / "timeline.png", m.race if m else None, m.number if m else 1, window=window,
                 title=None if m else f"{name}, {which} (no race found)")
    t.display_path = name  # the page names the trace, not where it lies here
    write_report(t, folder / "report.html")
    d.environment = environment(t)


def environment(t) -> dict:
    """The build, hooks, devices and recorded variables of a trace, as ISSUE.md's table shows them."""
    from ..analysis.build_info import build_info
    from ..analysis.frames import backend_labels
    from ..analysis.meta import recorded_env

    b = t.backends
    backends: dict = {}
    for name, desc, async_, events in zip(backend_labels(b), b["device_description"].astype(object),
                                          b["has_async"].tolist(), b["has_events"].tolist()):
        flags = ", ".join(w for w, on in (("async", async_), ("events", events)) if on)
        backends.setdefault(name, f"{'' if desc is None or desc != desc else desc}"
                                  + (f" ({flags})" if flags else ""))
    nvml = getattr(t, "nvml", None)
    gpus = [g.get("name") for g in nvml.get("gpus", [])] if isinstance(nvml, dict) else []
    return {"build": build_info(t.meta), "backend_api": t.meta.get("backend_api_version",
                                                                    t.header.get("backend_api_version")),
            "backends": backends, "gpus": gpus, "driver": nvml.get("driver") if isinstance(nvml, dict) else None,
            "env": {k: v for k, v in recorded_env(t.meta).items() if not k.startswith("GGML_TRACE_")
                    and not windows.is_injection(k, v)},
            "virtual_devices": {k: v for k, v in recorded_env(t.meta).items() if k.startswith("GGML_TRACE_VDEV")
                                or k == "GGML_TRACE_VIRTUAL_DEVICES"}}


def _graph_window(t, last: bool):
    """(start, end) µs of one scheduler graph compute: the last (a crash: what came just before
    it), else the middle one; None without any."""
    c = t.calls[t.calls["kind"] == "sched_graph_compute"]
    if not len(c):
        return None
    row = c.iloc[-1] if last else c.iloc[len(c) // 2]
    lo, hi = float(row["t_begin"]) / 1e3, float(row["t_end"]) / 1e3
    room = max((hi - lo) * 0.05, 20.0)
    return max(lo - room, 0.0), hi + room


def format_diagnosis(d: Diagnosis) -> str:
    """What `ggml-trace diagnose` prints: the verdict, each race forced or reduced, what was compared,
    what was written."""
    lines = [d.headline]
    if d.reference is not None and not d.has_reference:
        lines.append(f"reference: {d.reference_failed}; the traced runs compared among themselves: {d.compared}")
    elif d.reference is not None:
        lines.append(f"reference: {d.reference.exit}, {d.reference.output_bytes} bytes of output; outputs compared: "
                     f"{d.compared}")
    for m in d.races:
        lines.append(f"race {m.number}: {m.race['class']} in {len(m.runs)} of {len(d.runs)} runs (manifested in "
                     f"{len(m.manifested_runs)}): {m.race['missing']}")
        f, x = m.force, m.reduction
        if f:
            lines.append(f"  forced: {f['verdict']}: {f['message']}")
        elif m.force_error:
            lines.append(f"  not forced: {m.force_error}")
        if x:
            e = x["expected"]
            lines.append(f"  reduced ({x['shape']['name']}) to {x['splits']} splits, {x['nodes']} nodes; replayed on "
                         f"{x['build']}: {e.get('verdict')}, {e.get('red_runs')} of {e.get('runs')} runs wrong "
                         f"({x['directory']}/)")
        elif m.reduce_why:
            lines.append(f"  not reduced: {m.reduce_why}")
        if m.explains:
            lines.append(f"  explains the wrong output: {'; '.join(m.explains)}")
    from ..analysis.stream_races import finding_words

    for k, f in enumerate(stream_shapes(d).values(), 1):
        lines.append(f"inside CUDA splits {k}: {f['class']} in {len(f['runs'])} of {len(d.runs)} runs: "
                     + finding_words(f)[0])
    if d.status == 0:
        lines.append("not covered: " + "; ".join(d.not_covered))
    lines.append(f"written to {d.directory}/: ISSUE.md, timeline.png, report.html, diagnosis.json, runs/"
                 + "".join(f", {m.reduction['directory']}/" for m in d.races if m.reduction))
    return "\n".join(lines)
