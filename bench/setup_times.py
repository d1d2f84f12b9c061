"""Where the time of a cold `make setup` (and `make test`) goes: the minutes of each make target's
recipe, and the minutes the test suite's fixtures take to set up, by test module, so that what the
next addition costs is visible.

    python3 bench/setup_times.py                            # runs `make --trace demo`, then `make --trace setup`
    python3 bench/setup_times.py --targets test --log-dir /tmp/t     # any targets, in order; their logs kept
    python3 bench/setup_times.py --from-log demo.log --from-log setup.log   # the logs of an earlier run
    python3 bench/setup_times.py --pytest -- -n 4 tests     # pytest --durations=0 ARGS: set-ups by module

A log has one line per line of output, `EPOCH_SECONDS.NANOS LINE` (what --log-dir writes). `make
--trace` prints `Makefile:NN: update target 'X' due to: ...` (or `... target 'X' does not exist`)
before each recipe it runs; without -j it runs them one after another, so a target's time is from
its line to the next target's, or to the end. The same lines of the sub-makes that CMake runs (inside
their `make[N]: Entering directory` ... `Leaving directory`) are part of the recipe that ran them.
pytest's `--durations` lines (`12.34s setup tests/runs/test_x.py::test_y`) in any log are summed:
a test's set-up time is that of the fixtures it was the first to need, so a module's sum is what
its fixtures cost (worker time: under pytest-xdist's -n they run side by side). Standard library only.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TARGET = re.compile(r"^[^\s:]+:\d+: (?:update target '(?P<a>.+)' due to: .*|target '(?P<b>.+)' does not exist)$")
SUBMAKE = re.compile(r"^\S*make\[\d+\]: (?P<dir>Entering|Leaving) directory ")
DURATION = re.compile(r"^\s*(?P<s>\d+(?:\.\d+)?)s (?P<phase>setup|call|teardown)\s+(?P<test>\S+)")
BEFORE = "(make reading its makefiles)"


def parse_line(line: str) -> tuple[float, str]:
    """A log line: (epoch seconds, the line of output)."""
    stamp, _, text = line.rstrip("\n").partition(" ")
    return float(stamp), text


class Targets:
    """The top-level recipes of `make --trace`, line by line: seconds by target, each from its trace line to
    the next one's or to the end. Time before the first recipe, from `start`, is make's own."""

    def __init__(self, start: float | None = None):
        self.times: dict[str, float] = defaultdict(float)
        self.depth, self.current, self.since, self.last = 0, None, start, start

    def feed(self, t: float, text: str) -> str | None:
        """One line; returns the target whose recipe starts here, if one does."""
        self.last = t
        m = SUBMAKE.match(text)
        if m:
            self.depth = self.depth + 1 if m["dir"] == "Entering" else max(self.depth - 1, 0)
            return None
        m = TARGET.match(text) if self.depth == 0 else None
        if not m:
            return None
        if self.since is not None:
            self.times[self.current or BEFORE] += t - self.since
        self.current, self.since = m["a"] or m["b"], t
        return self.current

    def finish(self, end: float | None = None) -> dict[str, float]:
        stop = end if end is not None else self.last
        if self.since is not None and stop is not None:
            self.times[self.current or BEFORE] += stop - self.since
            self.since = stop
        return {k: v for k, v in self.times.items() if v > 0 or k != BEFORE}


def target_times(lines, start: float | None = None, end: float | None = None) -> dict[str, float]:
    """{target: seconds} from (time, line) pairs of `make --trace` (end: default, the last line's time)."""
    targets = Targets(start)
    for t, text in lines:
        targets.feed(t, text)
    return targets.finish(end)


def durations(texts) -> list[tuple[float, str, str]]:
    """pytest's --durations lines: [(seconds, phase, test id)]."""
    out = []
    for text in texts:
        m = DURATION.match(text)
        if m and "::" in m["test"]:
            out.append((float(m["s"]), m["phase"], m["test"]))
    return out


def setup_by_module(found) -> dict[str, float]:
    """{test module: seconds of set-up} from durations()."""
    by: dict[str, float] = defaultdict(float)
    for s, phase, test in found:
        if phase == "setup":
            by[test.split("::")[0]] += s
    return dict(by)


def table(rows: dict[str, float], title: str, min_minutes: float = 0.0, total: float | None = None) -> str:
    """Name, minutes and share of the total, the longest first; rows under min_minutes as one line."""
    total = sum(rows.values()) if total is None else total
    shown = sorted(((v, k) for k, v in rows.items() if v / 60 >= min_minutes), reverse=True)
    rest = [v for v in rows.values() if v / 60 < min_minutes]
    width = max([len(title), len("total")] + [len(k) for _, k in shown]) + 2
    out = [f"{title:<{width}}{'minutes':>9}{'share':>8}"]
    share = (lambda v: f"{100 * v / total:7.1f}%") if total > 0 else (lambda v: "      -")
    out += [f"{k:<{width}}{v / 60:9.1f}{share(v)}" for v, k in shown]
    if rest:
        name = f"{len(rest)} others, each under {min_minutes:g} min"
        out.append(f"{name:<{width}}{sum(rest) / 60:9.1f}{share(sum(rest))}")
    out.append(f"{'total':<{width}}{total / 60:9.1f}")
    return "\n".join(out)


def read_log(path: Path) -> list[tuple[float, str]]:
    with open(path, errors="replace") as f:
        return [parse_line(line) for line in f if line.strip() and line[0].isdigit()]


def run_stamped(argv: list[str], log: Path | None) -> tuple[int, float, float, list[tuple[float, str]]]:
    """Runs argv, each line of its output stamped as it arrives (and written to log): (rc, start, end, lines)."""
    lines = []
    start = time.time()
    targets = Targets(start)
    with subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as p, \
            open(log or os.devnull, "w") as f:
        assert p.stdout is not None
        for raw in p.stdout:
            t, text = time.time(), raw.decode(errors="replace").rstrip("\n")
            lines.append((t, text))
            f.write(f"{t:.9f} {text}\n")
            if (now := targets.feed(t, text)) is not None:  # progress: the recipe that runs now
                print(time.strftime("%H:%M:%S", time.localtime(t)), now, file=sys.stderr, flush=True)
        rc = p.wait()
    return rc, start, time.time(), lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", nargs="+", default=["demo", "setup"], help="make targets, run in this order")
    ap.add_argument("--from-log", action="append", type=Path, metavar="FILE", help="read a log instead of running make")
    ap.add_argument("--log-dir", type=Path, help="keep each run's log here (TARGET.log)")
    ap.add_argument("--min-minutes", type=float, default=0.0, help="targets under this, one line in the table")
    ap.add_argument("--slowest", type=int, default=10, help="how many single set-ups to list")
    ap.add_argument("--pytest", nargs=argparse.REMAINDER, help="run pytest --durations=0 with these arguments instead")
    a = ap.parse_args(argv)

    rc, totals, targets, texts = 0, {}, defaultdict(float), []
    if a.log_dir:
        a.log_dir.mkdir(parents=True, exist_ok=True)
    runs = [(p.stem, read_log(p), None, None, 0) for p in a.from_log or []]
    if not runs:
        venv = ROOT / ".venv" / "bin" / "python"
        jobs = ([("pytest", [str(venv if venv.exists() else sys.executable), "-m", "pytest", "-q", "--durations=0",
                             *a.pytest[a.pytest[:1] == ["--"]:]])] if a.pytest is not None
                else [(t, ["make", "--trace", t]) for t in a.targets])
        for name, cmd in jobs:
            code, start, end, lines = run_stamped(cmd, a.log_dir / f"{name}.log" if a.log_dir else None)
            runs.append((name, lines, start, end, code))
            if code:
                print(f"{' '.join(cmd)}: exit {code}", file=sys.stderr)
                rc = code
                break
    for name, lines, start, end, _ in runs:
        if not lines:
            continue
        for k, v in target_times(lines, start, end).items():
            targets[f"{name}: {k}" if len(runs) > 1 else k] += v  # which goal built it
        totals[name] = (end or lines[-1][0]) - (start or lines[0][0])
        texts += [text for _, text in lines]

    total = sum(totals.values())
    if targets and a.pytest is None:
        print(table(dict(targets), "make target", a.min_minutes, total))
        print("; ".join(f"make {k}: {v / 60:.1f} min" for k, v in totals.items()))
    found = durations(texts)
    if found:
        by = setup_by_module(found)
        print()
        print(table(by, "set-up by test module", 0.0))
        print(f"(worker minutes, from the {len(found)} durations pytest printed; under -n they overlap; "
              f"the whole run: {total / 60:.1f} min)")
        print("slowest set-ups:")
        for s, _, test in sorted((d for d in found if d[1] == "setup"), reverse=True)[:a.slowest]:
            print(f"  {s:8.1f} s  {test}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
