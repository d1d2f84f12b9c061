"""`ggml-trace force TRACE`: make a race from a trace manifest, on purpose (docs/force.md).

The earlier operation of the race (side a) is delayed on its own queue (a delay rule, see
docs/delay.md) for longer than it took the later operation (b) to catch up in the traced run
plus a slack; the recorded command is re-run with the recorded environment under that delay,
and each run's trace and output are checked: did the same race manifest, did the output change?
The same command is also run without the delay (the baseline), and, for the scenario programs,
on the CPU alone (their reference result), so that a changed output can be told from a
program whose output varies by itself.
"""
from __future__ import annotations

import math
import os
import shlex
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..analysis.load import recorded_env

from . import delay_spec
from . import hooks as hooks_mod
from . import windows
from .outputs import group_outputs, same_output
from .record import record

DEFAULT_RUNS = 3
BASELINE_RUNS = 2
# Added to what the traced run needs (see delay_for). The later operation is late in a re-run
# when its thread is preempted: on a loaded Linux machine a runnable thread can wait a whole time
# slice of another (CFS: several ms with two tasks per core). 10 ms, or the need itself when that
# is larger (a re-run may be slower overall), keeps the inversion from depending on luck; it
# delays one operation once per run, so it costs little.
MIN_SLACK_US = 10000.0
# When the trace cannot say when the earlier operation ran (a queue without device timing), the
# need is unknown: 10 ms is longer than any split or copy of the programs tested here.
UNTIMED_US = 10000.0
# The environment variables the hooks record (META env; native_hooks/hooks.cpp program_env).
ENV_PREFIXES = ("GGML_", "LLAMA_", "CUDA_", "HIP_", "VK_", "OMP_", "OPENBLAS_", "MESA_", "LP_")
SCENARIO_PROGRAM = "ggml-trace-scenarios"


class ForceError(RuntimeError):
    """force cannot do what it was asked; the message says why, in one line."""


@dataclass
class Recorded:
    """How the traced program was started (META cmdline, cwd, env, and delay.rules: the delays
    it ran under, which the re-runs keep)."""

    argv: list
    cwd: str
    env: dict
    hooks_build: str = ""
    rules: list = field(default_factory=list)

    @classmethod
    def from_meta(cls, meta: dict, path) -> "Recorded":
        missing = [k for k in ("cmdline", "cwd", "env") if k not in meta]
        if missing:
            raise ForceError(f"{path} does not say how to re-run its program (no META "
                             f"{', '.join(missing)}): record it again with the current hooks")
        argv = [a for a in meta["cmdline"].split("\0") if a != ""]
        if not argv:
            raise ForceError(f"{path}: META cmdline is empty")
        env = recorded_env(meta)
        rules = [r for r in meta.get("delay.rules", "").split(";") if r.strip()]
        cwd = meta["cwd"]
        if meta.get("platform") == "windows":  # its own names of itself and its folder: run here (Wine)
            try:
                argv = windows.command_here(argv)
            except RuntimeError as e:
                raise ForceError(f"{path} is a Windows program's trace: {e}") from None
            cwd = windows.host_path(cwd)
        return cls(argv, cwd, env, meta.get("hooks_build", ""), rules)

    def environment(self) -> dict:
        """This process's environment with the ggml-related variables replaced by the recorded
        ones (so that neither a stale setting here nor a missing one changes the run)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
        env.update(self.env)
        return env


def pick_race(found: list, index: int | None) -> tuple[int, dict]:
    """(1-based number, finding) to force: `index` (as `ggml-trace races` numbers them), else the
    latent race with the smallest margin, else the first overlapped or undetermined one (its order
    is not known), else the first (it manifested already)."""
    if index is not None:
        if not 1 <= index <= len(found):
            raise ForceError(f"--race {index}: the trace has {len(found)} race"
                             f"{'s' if len(found) != 1 else ''} (numbered from 1)")
        return index, found[index - 1]
    # the findings are sorted by margin already
    i = next((i for v in ("latent", "overlapped", "undetermined") for i, r in enumerate(found) if r["verdict"] == v), 0)
    return i + 1, found[i]


def delay_for(race: dict, slack_us: float | None) -> tuple[float, str]:
    """(microseconds, how they were chosen). Delaying a by d moves its start to about
    a.begin + d; b ran from b.begin to b.end, so a runs after b has finished (the inverted
    order) once d > b.end - a.begin = a's duration + the margin + b's duration. Where an async
    operation has only host times (basis "host", docs/races.md) that need is unknown."""
    a, b = race["a"], race["b"]
    if race["basis"] != "host":
        need = max(0.0, b["t_end_us"] - a["t_begin_us"])
        if need == 0:
            why = "b had ended before a began in the trace (it manifested there): no need"
        else:
            why = f"b ended {need:.0f} us after a began in the trace"
            if race["margin_us"] is not None:
                why += f" (margin {race['margin_us']:.0f} us plus both durations)"
    else:
        need = UNTIMED_US
        why = (f"no device timing in the trace, so the margin is unknown: "
               f"default {UNTIMED_US:.0f} us")
    slack = max(MIN_SLACK_US, need) if slack_us is None else slack_us
    return float(math.ceil(need + slack)), f"{why}, plus {slack:.0f} us slack"


def _glob_literal(name: str) -> str:
    """A tensor name as an fnmatch glob matching itself; the rule's separators become '?'."""
    out = "".join(f"[{c}]" if c in "*?[" else c for c in name)
    return "".join("?" if c in ",:;" else c for c in out)


def delay_rule(race: dict, us: float, every_graph: bool = False) -> str:
    """The delay rule (docs/delay.md) selecting the race's earlier operation on its backend: in
    the graph of the occurrence the race shows (its first, or first manifested, one), or in every
    graph (`every_graph`)."""
    a = race["a"]
    if a["kind"] not in delay_spec.KINDS:
        raise ForceError(f"the earlier operation is a {a['kind']} call, which delay rules cannot "
                         f"select ({', '.join(delay_spec.KINDS)})")
    if not a["backend"]:
        raise ForceError("the earlier operation has no backend to delay")
    keys = [f"graph={a['graph']}" if a["graph"] is not None and not every_graph else None,
            f"split={a['split']}" if a["split"] is not None else None,
            # a split has one compute on a backend but may have several input copies
            f"tensor={_glob_literal(a['tensor'])}" if a["kind"] != "graph_compute" and a["tensor"]
            else None]
    rule = f"{a['backend']}:{','.join([a['kind']] + [k for k in keys if k])}:{math.ceil(us)}"
    try:  # a name the syntax cannot express fails here, not in the program
        delay_spec.parse_rule(rule)
    except delay_spec.DelaySpecError as e:
        raise ForceError(f"cannot write a delay rule for the earlier operation: {e}") from None
    return rule


@dataclass
class Run:
    """One re-run: forced (with the delay) or baseline (without)."""

    name: str
    returncode: int
    stdout: str  # file holding the program's stdout
    trace: str | None
    delays: int = 0  # delays the force rule injected (trace.delays rows of that rule)
    delay_where: list = field(default_factory=list)  # where they acted: host, queue, stream
    race: dict = field(default_factory=dict)  # analysis.race_match.Recurrence.to_json()
    races: int = 0  # races of any identity in this run
    diverged_from_baseline: bool | None = None
    diverged_from_expected: bool | None = None

    @property
    def manifested(self) -> bool:
        """The occurrence in the delayed graph manifested (a race repeated every graph can
        manifest elsewhere by itself); where the run has none in that graph, any occurrence."""
        target = self.race.get("target_manifested")
        return bool(self.race.get("manifested")) if target is None else target


@dataclass
class ForceResult:
    trace: str
    verdict: str  # no-race, diverged, harmless-so-far, undetermined, not-manifested
    message: str
    race_number: int | None = None
    race: dict | None = None
    runs: int = 0
    manifested_runs: int = 0
    diverged_runs: int = 0
    undetermined_runs: int = 0  # forced runs whose times cannot prove either verdict
    delay_where: list = field(default_factory=list)  # where the delays acted: host, queue, stream
    delay_us: float | None = None
    delay_reason: str = ""
    rule: str = ""
    kept_rules: list = field(default_factory=list)  # the traced run's own delay rules, kept
    command: str | None = None
    compared_with: str = ""  # what diverged_runs counts against: "expected" or "baseline"
    diverged_from_baseline: int | None = None
    diverged_from_expected: int | None = None
    expected: str = ""  # where the expected output came from
    baseline_runs: int = 0
    baseline_manifested_runs: int = 0
    baseline_outputs: int = 0  # distinct outputs among the baseline runs
    baseline_diverged_from_expected: int | None = None
    out_dir: str = ""
    details: list = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _peer_copy(side: dict, trace) -> bool:
    """Whether a side is a cpy_tensor_async from another async backend (docs/races.md, rule 7)."""
    if side["kind"] != "cpy_tensor_async":
        return False
    from ..analysis.load import backend_labels

    calls = trace.calls
    src = calls.loc[calls["call_id"] == side["call_id"], "backend2"].astype(object)
    be = trace.backends
    asyncs = {n for n, a, e in zip(backend_labels(be), be["has_async"], be["has_events"]) if a or e}
    return len(src) == 1 and src.iloc[0] != side["backend"] and src.iloc[0] in asyncs


def _hooks_for(rec: Recorded, hooks) -> Path:
    if hooks:
        return Path(hooks)
    try:
        return hooks_mod.hooks_for(hooks_mod.ggml_program(rec.argv))
    except hooks_mod.HooksNotFound as e:
        pinned = hooks_mod.pinned_builds()
        if rec.hooks_build in pinned:
            return pinned[rec.hooks_build] / hooks_mod.HOOKS_NAME
        raise ForceError(f"{e} (or pass --hooks LIB)") from None


def _output(run_dir: Path, name: str, returncode: int) -> bytes:
    """What a run's output is compared by: its stdout, and its exit status when not 0."""
    out = (run_dir / f"{name}.stdout").read_bytes()
    return out if returncode == 0 else out + f"\n[exit status {returncode}]".encode()


def force(path, race: int | None = None, runs: int = DEFAULT_RUNS, slack_us: float | None = None,
          baseline_runs: int = BASELINE_RUNS, expect_output=None, out_dir=None, hooks=None,
          every_graph: bool = False, log=lambda line: None) -> ForceResult:
    """Forces one race of the trace at `path` (see the module docstring). `every_graph`: delay
    the earlier operation in every graph, for a race that recurs each graph and whose first
    occurrence's graph does not reach the output (a warm-up); a run then counts as manifested
    when any occurrence did. `log` receives a line per step. Raises ForceError,
    TraceFormatError or OSError."""
    # Imported here: `ggml-trace record` need not wait for pandas.
    from ..analysis import load, races
    from ..analysis import race_match

    if runs < 1 or baseline_runs < 0:
        raise ForceError("--runs must be at least 1 and --baseline-runs at least 0")
    if slack_us is not None and slack_us < 0:
        raise ForceError("--slack-us must not be negative")
    expected = Path(expect_output).read_bytes() if expect_output else None
    original = load(path)
    found = races(original).to_json()["races"]
    if not found:
        return ForceResult(str(path), "no-race", f"{path}: no race to force (the race analysis "
                           "finds no unordered conflicting accesses in it)")
    number, target = pick_race(found, race)
    rec = Recorded.from_meta(original.meta, path)
    lib = _hooks_for(rec, hooks)
    us, reason = delay_for(target, slack_us)
    if _peer_copy(target["a"], original):
        reason += ("; note: a copy from another async backend runs on its source's queue, and the "
                   "delay stalls the destination's (the trace's backend), so it may not move the copy")
    rule = delay_rule(target, us, every_graph)

    run_dir = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="ggml-trace-force-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    result = ForceResult(str(path), "", "", number, target, runs, delay_us=us, delay_reason=reason,
                         rule=rule, kept_rules=rec.rules, baseline_runs=baseline_runs,
                         out_dir=str(run_dir))
    log(f"race [{number}]: {target['missing']}")
    log(f"delay: {rule} ({reason}); runs in {run_dir}")
    if rec.rules:
        log(f"the traced run's own delay rules are kept in every run: {';'.join(rec.rules)}")

    env = rec.environment()
    if expected is not None:
        result.expected = str(expect_output)
    elif Path(rec.argv[0]).name == SCENARIO_PROGRAM and "--cpu-only" not in rec.argv:
        expected = _scenario_reference(rec, env)
        result.expected = "the scenario's result computed on the CPU alone (--cpu-only)"

    def one(name: str, forced: bool) -> Run:
        delays = rec.rules + [rule] if forced else rec.rules
        trace = run_dir / f"{name}.ggmltrace"
        with open(run_dir / f"{name}.stdout", "wb") as out, open(run_dir / f"{name}.stderr", "wb") as err:
            r = record(rec.argv, lib, trace, delays=delays or None, env=env, cwd=rec.cwd, stdout=out,
                       stderr=err, stdin=subprocess.DEVNULL)
        run = Run(name, r.returncode, str(run_dir / f"{name}.stdout"), None)
        if not r.traces:
            return run
        run.trace = str(r.traces[0])
        t = load(run.trace, strict=False)  # a run the delay made crash still tells its story
        report = races(t)
        run.races = len(report.findings)
        if forced:  # the force rule comes after the traced run's own
            mine = t.delays[t.delays["rule"] == len(rec.rules)]
            run.delays = len(mine)
            run.delay_where = sorted(set(mine["where"].astype(str)))
        graph = None if every_graph else target["a"]["graph"]
        run.race = race_match.recurrence(target, t, report, graph).to_json()
        return run

    baselines = [one(f"baseline-{i}", False) for i in range(baseline_runs)]
    base_outputs = [_output(run_dir, b.name, b.returncode) for b in baselines]
    forced = []
    for i in range(runs):
        f = one(f"forced-{i}", True)
        if f.trace and f.delays == 0:
            raise ForceError(f"the delay rule {rule!r} selected no operation in {f.trace}: the "
                             "re-run did not do what the traced run did, or the hooks cannot delay")
        out = _output(run_dir, f.name, f.returncode)
        if baselines:
            f.diverged_from_baseline = not any(same_output(out, b) for b in base_outputs)
        if expected is not None:
            f.diverged_from_expected = not same_output(out, expected)
        forced.append(f)
        log(f"{f.name}: {'manifested' if f.manifested else 'not manifested'}"
            f"{'' if f.race.get('found', True) else ' (race not found)'}"
            f"{', output diverged' if (f.diverged_from_expected or f.diverged_from_baseline) else ''}")

    result.details = [asdict(r) for r in baselines + forced]
    result.delay_where = sorted({w for f in forced for w in f.delay_where})
    result.manifested_runs = sum(f.manifested for f in forced)
    result.undetermined_runs = sum(f.race.get("verdict") == "undetermined" for f in forced)
    result.baseline_manifested_runs = sum(b.manifested for b in baselines)
    result.baseline_outputs = len(set(group_outputs(base_outputs)))
    if baselines:
        result.diverged_from_baseline = sum(bool(f.diverged_from_baseline) for f in forced)
    if expected is not None:
        result.diverged_from_expected = sum(bool(f.diverged_from_expected) for f in forced)
        result.baseline_diverged_from_expected = sum(not same_output(out, expected) for out in base_outputs)
        result.compared_with, result.diverged_runs = "expected", result.diverged_from_expected
    elif result.diverged_from_baseline is not None:  # (there were baselines)
        result.compared_with, result.diverged_runs = "baseline", result.diverged_from_baseline
    result.command = _command(rec, lib, rule, run_dir / "forced.ggmltrace")
    result.verdict = verdict(result.manifested_runs, result.diverged_runs, result.undetermined_runs)
    result.message = _message(result)
    if "host" in result.delay_where and target["a"]["thread"] == target["b"]["thread"]:
        # A host sleep holds back the calling thread, and b is called after a on that thread.
        result.message += (f"; note: the hooks could delay {target['a']['backend']} only on the "
                           "host (before the call is issued), which holds back the later operation "
                           "too, since the same thread issues it: a host delay cannot reorder them")
    return result


def verdict(manifested: int, diverged: int, undetermined: int) -> str:
    """The verdict of forced runs from their counts (docs/force.md, "Verdicts"). A race that
    manifested without changing the output is harmless so far, never "fixed"."""
    if manifested:
        return "diverged" if diverged else "harmless-so-far"
    return "undetermined" if undetermined else "not-manifested"


def _scenario_reference(rec: Recorded, env: dict) -> bytes:
    """The scenario program's result for the same graph on the CPU alone, as `ggml-trace
    scenario` compares each run with."""
    env = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    r = subprocess.run(rec.argv + ["--cpu-only"], cwd=rec.cwd, env=env, capture_output=True,
                       timeout=120)
    if r.returncode != 0:
        raise ForceError(f"the scenario's CPU-only reference failed (exit {r.returncode}): "
                         f"{r.stderr.decode(errors='replace')[-300:]}")
    return r.stdout


def _command(rec: Recorded, lib: Path, rule: str, output: Path) -> str:
    """One shell line that re-runs a forced run."""
    env = [f"{k}={v}" for k, v in rec.env.items()]
    delays = [a for r in rec.rules + [rule] for a in ("--delay", r)]
    run = ["ggml-trace", "record", "--hooks", str(lib), *delays, "-o", str(output), "--", *rec.argv]
    return f"cd {shlex.quote(rec.cwd)} && " + shlex.join((["env", *env] if env else []) + run)


def _message(r: ForceResult) -> str:
    assert r.race is not None  # every result but "no-race" has its race
    a = r.race["a"]
    what = (f"race [{r.race_number}] ({r.race['class']}: {a['backend']} {a['kind']} delayed "
            f"{r.delay_us:.0f} us)")
    if r.verdict == "undetermined":
        shown = (f"; the output differed from the {r.compared_with} output in {r.diverged_runs} of "
                 f"{r.runs}" if r.compared_with else "")
        return (f"{what}: the traces cannot tell whether it manifested in {r.undetermined_runs} of "
                f"{r.runs} runs (no device times: record the trace with --device-timing){shown}")
    if r.verdict == "not-manifested":
        return (f"{what} did not manifest in any of {r.runs} runs: the delay could not force it "
                "(a longer --slack-us may; or something not traced orders the two operations)")
    head = f"{what} manifested in {r.manifested_runs} of {r.runs} runs"
    if r.compared_with == "":
        return head + "; no baseline or expected output to compare the outputs with"
    against = ("the expected output" if r.compared_with == "expected"
               else "every output of the runs without the delay")
    if r.verdict == "diverged":
        return f"{head}; the output differed from {against} in {r.diverged_runs} of {r.runs}"
    return (f"{head}; the output never differed from {against}: harmless so far, not fixed "
            "(the bytes were overwritten, this program's output did not show it)")


def format_result(r: ForceResult) -> str:
    """The listing `ggml-trace force` prints."""
    if r.verdict == "no-race":
        return r.message
    assert r.race is not None
    lines = [r.message,
             f"race: {r.race['missing']}",
             f"delay: {r.delay_us:.0f} us ({r.delay_reason}); rule {r.rule}",
             *([f"kept in every run, as the traced run had them: {';'.join(r.kept_rules)}"]
               if r.kept_rules else []),
             f"forced runs: {r.runs}, manifested: {r.manifested_runs}"]
    if r.diverged_from_expected is not None:
        lines.append(f"  differed from the expected output ({r.expected}): "
                     f"{r.diverged_from_expected} of {r.runs}")
    if r.diverged_from_baseline is not None:
        lines.append(f"  differed from every run without the delay: {r.diverged_from_baseline} "
                     f"of {r.runs}")
    if r.baseline_runs:
        base = (f"runs without the delay: {r.baseline_runs}, race manifested in "
                f"{r.baseline_manifested_runs}, {r.baseline_outputs} distinct output"
                f"{'s' if r.baseline_outputs != 1 else ''}")
        if r.baseline_diverged_from_expected is not None:
            base += f", {r.baseline_diverged_from_expected} differed from the expected output"
        lines.append(base)
        if r.baseline_outputs > 1:
            lines.append("  (the output varies without the delay: a difference from the baseline "
                         "alone proves nothing)")
    lines.append(f"runs kept in {r.out_dir}")
    lines.append(f"reproduce: {r.command}")
    return "\n".join(lines)
