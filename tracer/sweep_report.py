"""What `ggml-trace sweep` writes: DIR/sweep.json (every cell, docs/sweep.md) and DIR/sweep.md, a
table GitHub renders (a row per pattern, a column per device set and build; each table cell the
worst of its buffer × parallel cells) and, below it, every RED and RACE cell with its races named
by the ordering they lack. The page stays under GitHub's 65,536 characters: the findings are
listed until the limit, and the rest counted."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

from .issue import code, text
from .sweep import VERDICTS, CellResult, SweepResult
from .sweep_program import ProgramSweepOptions

GITHUB_LIMIT = 65_536
PAGE_LIMIT = GITHUB_LIMIT - 4_096  # room for the closing lines
ORDER = {"ERROR": 0, "RED": 1, "RACE": 2, "GREEN": 3}  # worst first
MARK = {"RED": "🔴 RED", "RACE": "🟠 RACE", "GREEN": "🟢", "ERROR": "⚠️ ERROR"}


def write(result: SweepResult, out: Path) -> tuple[Path, Path]:
    """DIR/sweep.json and DIR/sweep.md."""
    out.mkdir(parents=True, exist_ok=True)
    j, md = out / "sweep.json", out / "sweep.md"
    j.write_text(json.dumps(result.to_json(), indent=1) + "\n")
    md.write_text(markdown(result))
    return j, md


def _axes(c: CellResult) -> str:
    return "" if c.cell.parallel < 0 else f"{c.cell.buffer}, parallel {c.cell.parallel}"


def table_cell(group: list[CellResult]) -> str:
    """The worst verdict of a column's cells for one pattern, and how many of them had it; † where
    a cell's reference failed (its runs compared only with each other)."""
    worst = min(group, key=lambda c: ORDER[c.verdict]).verdict
    n = sum(c.verdict == worst for c in group)
    return (MARK[worst] + (f" {n}/{len(group)}" if len(group) > 1 and worst != "GREEN" else "")
            + (" †" if any(_no_reference(c) for c in group) else ""))


def _no_reference(c: CellResult) -> bool:
    return bool(c.detail.get("reference_failed"))


def markdown(result: SweepResult) -> str:
    cells = result.cells
    columns = list(dict.fromkeys((c.cell.device_set.label, c.cell.build) for c in cells))
    patterns = list(dict.fromkeys(c.cell.pattern for c in cells))
    counts = {v: sum(c.verdict == v for c in cells) for v in VERDICTS}
    lines = ["# ggml-trace sweep", "",
             f"{len(cells)} cells: {counts['RED']} RED ({_red_words(result)}), {counts['RACE']} RACE "
             f"(results right, a race in the traces), {counts['GREEN']} GREEN"
             + (f", {counts['ERROR']} ERROR" if counts["ERROR"] else "") + f"; {result.seconds:.0f} s.",
             "", _how(result), ""]
    for p in result.problems:
        lines.append(f"- could not run: {text(p)}")
    if result.problems:
        lines.append("")
    rows = "configuration" if _is_program(result) else "pattern"
    head = f"| {rows} | " + " | ".join(f"{text(ds)}<br>{text(b or 'its own ggml')}" for ds, b in columns) + " |"
    lines += [head, "|---" * (len(columns) + 1) + "|"]
    for p in patterns:
        row = [code(p, table=True)]
        for col in columns:
            group = [c for c in cells if c.cell.pattern == p and (c.cell.device_set.label, c.cell.build) == col]
            row.append(table_cell(group) if group else "–")
        lines.append("| " + " | ".join(row) + " |")
    unreferenced = [c for c in cells if _no_reference(c)]
    if unreferenced:
        lines += ["", "† The reference failed: the runs were compared only with each other, which shows a "
                  "difference between runs but not a wrong output that every run shares:", ""]
        lines += [f"- {code(c.cell.pattern)} on {code(c.cell.build or 'its own ggml')}: "
                  f"{text(c.detail['reference_failed'], 300)}" for c in unreferenced[:50]]
        if len(unreferenced) > 50:
            lines.append(f"- and {len(unreferenced) - 50} more (sweep.json: `reference_failed`)")
    lines += ["", "## Findings", ""]
    listed = 0
    bad = sorted((c for c in cells if c.verdict != "GREEN"), key=lambda c: (ORDER[c.verdict], c.cell.pattern))
    for c in bad:
        block = _finding_lines(c)
        if sum(len(x) + 1 for x in lines + block) > PAGE_LIMIT:
            lines.append(f"... and {len(bad) - listed} more cells not listed here: sweep.json has every one.")
            break
        lines += block
        listed += 1
    if not bad:
        lines.append("Every cell GREEN: no wrong result and no race in any trace.")
    return "\n".join(lines) + "\n"


def _is_program(result: SweepResult) -> bool:
    return isinstance(result.options, ProgramSweepOptions)


def _red_words(result: SweepResult) -> str:
    return ("a run's output differs from its reference's, or the runs' from each other" if _is_program(result)
            else "a run's result differs from the CPU's")


def _how(result: SweepResult) -> str:
    """How the cells were run, in a line."""
    o = result.options
    builds = ", ".join(code(b) for b in o.builds)
    if _is_program(result):
        return (f"Program {code(shlex.join(o.program), 600)}" + (f", builds {builds}" if builds else "")
                + f"; each configuration diagnosed: {o.runs_per_cell} traced runs against a reference "
                f"({'its arguments: ' + code(o.reference) if o.reference else 'on one device'}), the "
                f"{o.max_races} most frequent race{'s' if o.max_races != 1 else ''} forced {o.force_runs} times. "
                f"Each cell's folder under {code('cells/')} holds its ISSUE.md.")
    return (f"Backend {code(o.backend)}, builds {builds}" + (" (quick: each device slowed once)" if o.quick else "")
            + f"; a slowed device waits {o.slow_us:g} µs before each operation "
            + ", then in other runs ".join(SLOWING_WORDS[s] for s in o.slowings)
            + ". Each table cell is the worst of its buffer (pageable, pinned) × parallel (0, 1) cells, with how many had it.")


SLOWING_WORDS = {"queue": "on its own queue (never on the queue of a device that copies into it)",
                 "compute": "of its splits", "copies-from": "of the copies it sends",
                 "copies-into": "of the copies into it, on their source's queue"}


def _finding_lines(c: CellResult) -> list[str]:
    cell = c.cell
    axes = _axes(c)
    devices = c.devices or cell.devices()
    head = (f"- **{c.verdict}** {code(cell.pattern)} on {text(cell.device_set.label)}"
            + (f" ({text(', '.join(devices))})" if devices else "") + f", {code(cell.build or 'its own ggml')}"
            + (f", {axes}" if axes else "")
            + (f": {c.wrong_runs} of {c.runs} runs wrong" if c.verdict != "ERROR" else f": {text(c.error or '')}"))
    out = [head]
    if c.detail.get("issue"):
        out.append(f"  - its diagnosis: {code(c.detail['issue'], 300)}")
    if _no_reference(c):
        out.append("  - its reference failed: the runs were compared with each other")
    if c.verdict == "RED" and not c.races:
        if c.detail.get("outputs") == 1 and c.runs > 1:  # the runs all printed one output, not the reference's
            out.append("  - no race in the traces, and every run printed the same output: a difference that does not "
                       "depend on timing (the numerics of another placement than the reference's, or a cause the "
                       "ordering model does not see)")
        else:
            out.append("  - no race in the traces: the wrong result has a cause the ordering model does not see")
    for r in c.races[:4]:
        wrong = f", {len(r['wrong_runs'])} of them wrong" if r["wrong_runs"] else ""
        forced = f"; forced: {text(r['forced'])}" if r.get("forced") else ""
        out.append(f"  - {text(r['class'])} ({text(r['verdict'])}, in {len(r['runs'])} run"
                   f"{'s' if len(r['runs']) != 1 else ''}{wrong}{forced}): {text(r['missing'], 600)}")
    if len(c.races) > 4:
        out.append(f"  - and {len(c.races) - 4} more races (sweep.json)")
    return out
