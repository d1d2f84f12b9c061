"""The shell commands of README.md and docs/*.md, run as written.

Every ```sh / ```bash block of those files runs, unless the line just before its fence (blank lines
aside) says why not:

    <!-- not run in tests: needs an NVIDIA GPU -->

The reason is required. A block that runs may not hold placeholders (`...`, `PROGRAM`, `MODEL`,
`<pid ...>`): it would fail for the wrong reason; make the command concrete or mark the block.

Each command of a block (a line, with its `\\` continuations) must exit 0, unless its own comment in
the document says otherwise with `exits N`:

    ggml-trace races pp.ggmltrace   # exits 1: the race is found

The blocks of one document run in order, in one bash shell per block, from one scratch directory
per document, so that a later block reads what an earlier one wrote (traces, outputs). There,
`build/` is a folder of links to the entries of the repository's build/ (the llama.cpp builds, the
hooks, the models), except `scenarios/` and `demo/`, `tests/data` links to the committed traces, and
GGML_TRACE_BUILD_DIR points at it: the scenarios'
runs land in the scratch directory, nothing is written into the checkout. `ggml-trace` and
`python` are the project's virtual environment's.
"""
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK_TIMEOUT_S = 300

SKIP = re.compile(r"^<!--\s*not run in tests\s*(?::\s*(?P<reason>.*?))?\s*-->$")
FENCE = re.compile(r"^```(\w*)\s*$")
EXITS = re.compile(r"(?:^|\s)#[^\n]*?\bexits (\d+)\b")
PLACEHOLDER = re.compile(r"(?<![\w.])\.\.\.(?![\w.])|\.\.\./|\b(PROGRAM|MODEL|BUILD|OUT|LLAMA_SRC|NAME|SOURCE)\b|<[a-z][^>]*>")


@dataclass
class Block:
    doc: Path
    line: int                 # of the opening fence, 1-based
    text: str
    skip: str | None = None   # the reason, when not run
    marked: bool = False      # a "not run in tests" marker stands before it
    commands: list = field(default_factory=list)  # (line, command, expected exit status)

    @property
    def where(self):
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def blocks(doc: Path) -> list[Block]:
    lines = doc.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if lang in ("sh", "bash"):
            b = Block(doc, start + 1, "\n".join(lines[start + 1:j]))
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            s = SKIP.match(lines[k].strip()) if k >= 0 else None
            if s:
                b.marked, b.skip = True, (s.group("reason") or "").strip()
            b.commands = commands(lines[start + 1:j], start + 2)
            out.append(b)
        i = j + 1
    return out


def commands(lines: list[str], first: int) -> list[tuple[int, str, int]]:
    """A block's commands: its lines with their continuations joined, comments and blanks left out;
    each with the exit status its comment states (`# exits N`), else 0."""
    out, cur, at = [], "", None
    for n, line in enumerate(lines, first):
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        at = at or n
        if line.rstrip().endswith("\\"):
            cur += line.rstrip() + "\n"
            continue
        cur += line
        m = EXITS.search(cur)
        out.append((at, cur, int(m.group(1)) if m else 0))
        cur, at = "", None
    return out


ALL = [b for d in DOCS for b in blocks(d)]


def test_every_block_runs_or_says_why_not():
    bad = []
    for b in ALL:
        if b.marked and not b.skip:
            bad.append(f"{b.where}: 'not run in tests' without a reason")
        if b.skip is None:
            for n, cmd, _ in b.commands:
                code = "\n".join(line.split(" #", 1)[0] for line in cmd.splitlines())
                if PLACEHOLDER.search(code):
                    bad.append(f"{b.doc.relative_to(ROOT)}:{n}: a placeholder in a block that runs; make it "
                               f"concrete or mark the block <!-- not run in tests: REASON -->\n    {cmd}")
    assert not bad, "\n".join(bad)


def scratch_build(tmp: Path) -> Path:
    build = tmp / "build"
    build.mkdir()
    for entry in (ROOT / "build").iterdir():
        if entry.name not in ("scenarios", "demo"):  # where runs write: the scratch directory's own
            (build / entry.name).symlink_to(entry)
    # the committed traces, read by the documents' examples (read only)
    (tmp / "tests").mkdir()
    (tmp / "tests" / "data").symlink_to(ROOT / "tests" / "data")
    return build


def script(b: Block) -> str:
    """One bash script for a block: each command, then its exit status checked against the
    expected one; the first mismatch ends the block and names the command."""
    parts = []
    for n, cmd, want in b.commands:
        parts.append(cmd)
        parts.append(f'__s=$?; if [ "$__s" != {want} ]; then echo "docs-test: line {n} exited $__s, '
                     f'expected {want}" >&2; exit 97; fi')
    return "\n".join(parts) + "\n"


def run_block(b: Block, cwd: Path, env: dict) -> tuple[int, str, float]:
    t0 = time.monotonic()
    p = subprocess.Popen(["bash", "-c", script(b)], cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return -1, out.decode(errors="replace") + f"\n[timed out after {BLOCK_TIMEOUT_S} s]", time.monotonic() - t0
    return p.returncode, out.decode(errors="replace"), time.monotonic() - t0


RUN_DOCS = [d for d in DOCS if any(b.skip is None for b in blocks(d))]


@pytest.mark.skipif(not (ROOT / "build" / "models" / "tiny-llama.gguf").is_file(), reason="needs `make setup`")
@pytest.mark.parametrize("doc", RUN_DOCS, ids=[str(d.relative_to(ROOT)) for d in RUN_DOCS])
def test_documented_commands_run(doc, tmp_path):
    scratch_build(tmp_path)
    env = dict(os.environ)
    venv_bin = str(Path(sys.executable).parent)
    env.update(PATH=venv_bin + os.pathsep + env.get("PATH", ""), GGML_TRACE_BUILD_DIR=str(tmp_path / "build"),
               XDG_CONFIG_HOME=str(tmp_path / ".config"), XDG_CACHE_HOME=str(tmp_path / ".cache"),
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("VIRTUAL_ENV", None)
    for b in blocks(doc):
        if b.skip is not None:
            continue
        rc, out, took = run_block(b, tmp_path, env)
        tail = "\n".join(out.splitlines()[-40:])
        assert rc == 0, f"{b.where}: the block failed (status {rc}, {took:.1f} s):\n{b.text}\n--- output ---\n{tail}"
