"""The progress line of the long passes over a trace larger than memory (indexing, races, the
summary, the export in windows): what they call back with, printed for the command line."""
from __future__ import annotations

import sys

_shown_at: dict[str, float] = {}  # progress: when each stage last printed


def print_progress(stage: str, done: int, total: int, elapsed: float) -> None:
    """A progress line on stderr, rewritten in place (on a terminal) at most once a second."""
    if done < total and elapsed - _shown_at.get(stage, -1.0) < 1.0:
        return
    _shown_at[stage] = elapsed if done < total else -1.0
    rate = done / elapsed if elapsed > 0 else 0
    eta = (total - done) / rate if rate > 0 else 0
    what = {"index": "chunks indexed", "races": "windows analysed", "export": "windows written",
            "summary": "windows counted"}[stage]
    tty = sys.stderr.isatty()
    end = "\n" if done >= total or not tty else ""
    sys.stderr.write(f"{chr(13) if tty else ''}ggml-trace: {done}/{total} {what} ({100 * done / max(total, 1):.0f}%, "
                     f"{elapsed:.0f} s, about {eta:.0f} s left){'   ' if tty else ''}{end}")
    sys.stderr.flush()
