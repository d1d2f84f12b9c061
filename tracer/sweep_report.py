"""What `ggml-trace sweep` writes: DIR/sweep.json (every cell, docs/sweep.md) and DIR/sweep.md, a
table GitHub renders (a row per pattern, a column per device set and build; each table cell the
worst of its buffer × parallel cells) and, below it, every RED and RACE cell with its races named
by the ordering they lack. The page stays under GitHub's 65,536 characters: the findings are
listed until the limit, and the rest counted."""
from __future__ import annotations

import json
from pathlib import Path

from .issue import code, text
from .sweep import VERDICTS, CellResult, SweepResult

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
    """The worst verdict of a column's cells for one pattern, and how many of them had it."""
    worst = min(group, key=lambda c: ORDER[c.verdict]).verdict
    n = sum(c.verdict == worst for c in group)
    return MARK[worst] + (f" {n}/{len(group)}" if len(group) > 1 and worst != "GREEN" else "")


def markdown(result: SweepResult) -> str:
    cells = result.cells
    columns = list(dict.fromkeys((c.cell.device_set.label, c.cell.build) for c in cells))
    patterns = list(dict.fromkeys(c.cell.pattern for c in cells))
    counts = {v: sum(c.verdict == v for c in cells) for v in VERDICTS}
    o = result.options
    lines = [
        "# ggml-trace sweep",
        "",
        f"{len(cells)} cells: {counts['RED']} RED (a run's result differs from the CPU's), {counts['RACE']} RACE "
        f"(results right, a race in the traces), {counts['GREEN']} GREEN"
        + (f", {counts['ERROR']} ERROR" if counts["ERROR"] else "") + f"; {result.seconds:.0f} s.",
        "",
        f"Backend {code(o.backend)}, builds {', '.join(code(b) for b in o.builds)}"
        + (" (quick: each device slowed once)" if o.quick else "")
        + f"; a slowed device waits {o.slow_us:g} µs before each operation. Each table cell is the worst of its "
        "buffer (pageable, pinned) × parallel (0, 1) cells, with how many had it.",
        "",
    ]
    for p in result.problems:
        lines.append(f"- could not run: {text(p)}")
    if result.problems:
        lines.append("")
    head = "| pattern | " + " | ".join(f"{text(ds)}<br>{text(b)}" for ds, b in columns) + " |"
    lines += [head, "|---" * (len(columns) + 1) + "|"]
    for p in patterns:
        row = [code(p)]
        for col in columns:
            group = [c for c in cells if c.cell.pattern == p and (c.cell.device_set.label, c.cell.build) == col]
            row.append(table_cell(group) if group else "–")
        lines.append("| " + " | ".join(row) + " |")
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


def _finding_lines(c: CellResult) -> list[str]:
    cell = c.cell
    axes = _axes(c)
    head = (f"- **{c.verdict}** {code(cell.pattern)} on {text(cell.device_set.label)} "
            f"({text(', '.join(cell.devices()))}), {code(cell.build)}" + (f", {axes}" if axes else "")
            + (f": {c.wrong_runs} of {c.runs} runs wrong" if c.verdict != "ERROR" else f": {text(c.error or '')}"))
    out = [head]
    if c.verdict == "RED" and not c.races:
        out.append("  - no race in the traces: the wrong result has a cause the ordering model does not see")
    for r in c.races[:4]:
        wrong = f", {len(r['wrong_runs'])} of them wrong" if r["wrong_runs"] else ""
        out.append(f"  - {text(r['class'])} ({text(r['verdict'])}, in {len(r['runs'])} run"
                   f"{'s' if len(r['runs']) != 1 else ''}{wrong}): {text(r['missing'], 600)}")
    if len(c.races) > 4:
        out.append(f"  - and {len(c.races) - 4} more races (sweep.json)")
    return out
