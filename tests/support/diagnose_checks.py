"""What the diagnose tests check in what `ggml-trace diagnose` writes, as a maintainer meets it:
ISSUE.md as GitHub renders Markdown, timeline.png as a picture (tests/runs/test_diagnose.py, and
the lavapipe case in tests/external)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from ggml_trace.analysis.timeline_png import HIGHLIGHT, ROWS_KEY
from ggml_trace.tracer import programs
from ggml_trace.tracer.issue import GITHUB_LIMIT

from . import ggml_trace

BUILD = programs.build_root()
QWEN = BUILD / "models" / "tiny-qwen35.gguf"
# llama-completion greedy on the tiny qwen35 model, fully offloaded with the KV cache on the CPU
QWEN_ARGS = ["-n", "8", "-p", "the of and", "--temp", "0", "--seed", "1", "-no-cnv", "-ngl", "99", "-nkvo"]


def needs(*paths):
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        pytest.skip(f"needs `make setup`: {', '.join(missing)}")


def diagnose(out, *args, env=None):
    r = ggml_trace("diagnose", "-o", out, *args, timeout=1200, env=env)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r, (json.loads((out / "diagnosis.json").read_text()) if (out / "diagnosis.json").exists() else None)


# -- what it writes -------------------------------------------------------------------------------

def fenced_blocks(md: str) -> tuple[list[str], bool]:
    """The fenced code blocks of a Markdown text (CommonMark: a closing fence is a line of at least
    as many backticks as the opening one, and nothing else), and whether every one is closed."""
    blocks, open_len, body = [], 0, []
    for line in md.split("\n"):
        fence = re.match(r"^(`{3,})(\w*)\s*$", line)
        if open_len:
            if fence and not fence.group(2) and len(fence.group(1)) >= open_len:
                blocks.append("\n".join(body))
                open_len, body = 0, []
            else:
                body.append(line)
        elif fence:
            open_len = len(fence.group(1))
    return blocks, open_len == 0


def prose(md: str) -> str:
    """The Markdown without its code blocks and code spans: what GitHub would read as Markdown/HTML."""
    out, open_len = [], 0
    for line in md.split("\n"):
        fence = re.match(r"^(`{3,})(\w*)\s*$", line)
        if open_len:
            if fence and not fence.group(2) and len(fence.group(1)) >= open_len:
                open_len = 0
            continue
        if fence:
            open_len = len(fence.group(1))
            continue
        out.append(re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", line))
    return "\n".join(out)


def check_issue(path: Path, *names: str) -> str:
    md = path.read_text()
    assert 0 < len(md) < GITHUB_LIMIT
    _, closed = fenced_blocks(md)
    assert closed, "a code block of ISSUE.md is not closed"
    assert md.startswith("# ")
    for name in names:
        assert name in md, name
    text = prose(md)
    # our own tags only; anything else that looks like HTML is escaped
    rest = re.sub(r"</?(details|summary|sub)>|<!--.*?-->", "", text)
    assert not re.search(r"(?<!\\)<", rest), [line for line in rest.splitlines() if re.search(r"(?<!\\)<", line)]
    assert not re.search(r"(?<![\\\w])@\w", rest)  # no mention of anyone
    for table in re.findall(r"(?:^\|.*\n?)+", text, flags=re.M):  # rows keep their columns whatever names hold
        columns = {len(re.findall(r"(?<!\\)\|", row)) for row in table.strip().split("\n")}
        assert len(columns) == 1, table
    assert os.path.expanduser("~") + "/" not in md or os.path.expanduser("~") == "/"
    return md


def check_png(path: Path) -> dict:
    """timeline.png as a picture: the rows it says it drew, the racing ones holding pixels of the
    highlight colour, the others none."""
    from PIL import Image

    img = Image.open(path)
    drawn = json.loads(img.text[ROWS_KEY])
    pixels = np.asarray(img.convert("RGB"))
    assert pixels.shape[0] > 200 and pixels.shape[1] >= 1000
    red = np.all(pixels == [int(HIGHLIGHT[i:i + 2], 16) for i in (1, 3, 5)], axis=2)
    racing = [r for r in drawn["rows"] if r["racing"]]
    assert racing, drawn
    for r in drawn["rows"]:
        top, bottom = r["band"]
        assert 0 <= top < bottom <= pixels.shape[0]
        assert red[top:bottom].any() == r["racing"], r
    return drawn
