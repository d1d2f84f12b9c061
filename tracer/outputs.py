"""Comparing a program's outputs across runs, with the tolerances llama.cpp needs.

llama.cpp's programs print through a logger thread that they leave running at exit (upstream
llama.cpp #22142): the last few bytes of stdout can be lost. A cut tail is not a divergence; the
corruption the races here cause changes the text from the first generated tokens on. A run that
was stopped before its end (killed by a signal, crashed, ended at a time limit) printed what it
had come to, not less than its output: its text ends wherever it was stopped. So two outputs are
the same when, trailing whitespace aside, the shorter one is a prefix of the longer and at most
TAIL_BYTES shorter (non-empty), or any amount shorter when it is the output of a stopped run (Cut).
"""
from __future__ import annotations

from pathlib import Path

TAIL_BYTES = 8  # the most a cut tail may lack (the bytes of a token or two, partial characters)
NOTE = (f"stdout, byte for byte, except that a tail of up to {TAIL_BYTES} bytes missing from one of "
        "them is not counted (llama.cpp's logger thread can drop the last bytes at exit, upstream #22142), "
        "and a run that was killed, crashed or hung is compared up to where its output stopped")


class Cut(bytes):
    """The output of a run stopped before its end (killed, crashed, hung): it is the same as any
    output it is a prefix of (same_output)."""


def same_output(a, b, tail: int = TAIL_BYTES) -> bool:
    """Whether two outputs (bytes or str) are the same up to a cut tail (see the module). Two str
    (decoded, maybe with U+FFFD for bytes that were not UTF-8) are compared as characters, the tail
    counted in characters: a lost byte is at most one character, a replaced one three bytes. The
    cut one may end in U+FFFD where the cut fell inside a character: that end is not compared.
    The shorter one, when Cut, may lack any tail of the longer."""
    if isinstance(a, str) != isinstance(b, str):  # one of each: both as bytes
        a, b = (x.encode("utf-8", "surrogateescape") if isinstance(x, str) else x for x in (a, b))
    # (text, stopped) of each, the shorter first; rstrip() drops the Cut type, so it is noted before
    (short, stopped), (long, _) = sorted(((x.rstrip(), isinstance(x, Cut)) for x in (a, b)), key=lambda p: len(p[0]))
    if short == long:
        return True
    kept = short.rstrip("\ufffd") if isinstance(short, str) else short
    if stopped:
        return long.startswith(kept)
    return len(kept) > 0 and long.startswith(kept) and len(long) - len(kept) <= tail


def group_outputs(outputs: list) -> list[int]:
    """A group number per output, 0, 1, ... in order of first appearance: each output joins the
    first group whose longest output so far it is the same as (same_output), so that a stopped
    run's prefix joins the output it stopped in, and two longer outputs that differ stay apart."""
    longest: list = []
    groups: list[int] = []
    for out in outputs:
        g = next((i for i, f in enumerate(longest) if same_output(out, f)), None)
        if g is None:
            g = len(longest)
            longest.append(out)
        elif len(out) > len(longest[g]):
            longest[g] = out
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
    """What a run's output is compared by: its stdout (`run.stdout`, a file in `folder`); Cut when
    the run was stopped before its end (killed by a signal, or at the time limit); with how it
    ended (`run.exit`) added when it exited with another status than 0 (`run.failed`), so that it
    never equals a clean one."""
    out = (folder / run.stdout).read_bytes()
    if run.returncode < 0 or run.timed_out:
        return Cut(out)
    return out if not run.failed else out + f"\n[{run.exit}]".encode()
