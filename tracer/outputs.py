"""Comparing a program's outputs across runs, with the one tolerance llama.cpp needs.

llama.cpp's programs print through a logger thread that they leave running at exit (upstream
llama.cpp #22142): the last few bytes of stdout can be lost. A cut tail is not a divergence; the
corruption the races here cause changes the text from the first generated tokens on. So two
outputs are the same when, trailing whitespace aside, the shorter one is a non-empty prefix of the
longer and at most TAIL_BYTES shorter.
"""
from __future__ import annotations

from pathlib import Path

TAIL_BYTES = 8  # the most a cut tail may lack (the bytes of a token or two, partial characters)
NOTE = (f"stdout, byte for byte, except that a tail of up to {TAIL_BYTES} bytes missing from one of "
        "them is not counted (llama.cpp's logger thread can drop the last bytes at exit, upstream #22142)")


def same_output(a, b, tail: int = TAIL_BYTES) -> bool:
    """Whether two outputs (bytes or str) are the same up to a cut tail (see the module). Two str
    (decoded, maybe with U+FFFD for bytes that were not UTF-8) are compared as characters, the tail
    counted in characters: a lost byte is at most one character, a replaced one three bytes. The
    cut one may end in U+FFFD where the cut fell inside a character: that end is not compared."""
    if isinstance(a, str) != isinstance(b, str):  # one of each: both as bytes
        a, b = (x.encode("utf-8", "surrogateescape") if isinstance(x, str) else x for x in (a, b))
    a, b = sorted((a.rstrip(), b.rstrip()), key=len)
    if a == b:
        return True
    kept = a.rstrip("\ufffd") if isinstance(a, str) else a
    return len(kept) > 0 and b.startswith(kept) and len(b) - len(kept) <= tail

def group_outputs(outputs: list) -> list[int]:
    """A group number per output, 0, 1, ... in order of first appearance: outputs in one group are
    the same (same_output) as the group's first member."""
    firsts: list = []
    groups: list[int] = []
    for out in outputs:
        g = next((i for i, f in enumerate(firsts) if same_output(out, f)), None)
        if g is None:
            g = len(firsts)
            firsts.append(out)
        groups.append(g)
    return groups


def first_difference(a: bytes, b: bytes) -> int:
    """The offset of the first byte where two outputs differ (the shorter one's length when one
    is a prefix of the other)."""
    import numpy as np

    n = min(len(a), len(b))
    diff = np.flatnonzero(np.frombuffer(a[:n], np.uint8) != np.frombuffer(b[:n], np.uint8))
    return int(diff[0]) if len(diff) else n


def output_of(folder: Path, run) -> bytes:
    """What a run's output is compared by: its stdout (`run.stdout`, a file in `folder`), and how it
    ended (`run.exit`) when that was not well (`run.failed`)."""
    out = (folder / run.stdout).read_bytes()
    return out if not run.failed else out + f"\n[{run.exit}]".encode()
