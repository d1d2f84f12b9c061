"""What every `ggml-trace` command that reads a trace shares: --lenient, the one error path
(a one-line message and exit 2, never a traceback), warnings said aloud, text safe for a
terminal, and output files that appear whole or not at all (docs/timeline.md, "Damaged files,
warnings and exit codes")."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import traceback
from pathlib import Path

EXIT_BAD_INPUT = 2


class TooLarge(Exception):
    """A trace too large to load whole here, for a command that needs it whole."""


def add_reading_args(p, graphs: bool = True, together: bool = False) -> None:
    """The trace argument, --lenient and --graphs, for every command that reads a trace (the
    timeline has a --graphs of its own); `together`: more traces may follow the first, read with it
    (analysis/together.py)."""
    p.add_argument("file")
    if together:
        p.add_argument("more", nargs="*", metavar="MORE",
                       help="more traces read together with the first (a client and its RPC servers, the "
                            "processes of one run): one process column, unique names, one time axis")
    p.add_argument("--lenient", action="store_true",
                   help="load a damaged trace: drop the records that fail the reader's checks "
                        "(each loss is reported) instead of refusing the file")
    if graphs:
        p.add_argument("--graphs", type=graph_range, metavar="A:B",
                       help="read only the scheduler graphs A to B (inclusive; A:, :B or one graph N) and what "
                            "they did, in bounded memory: for a trace too large to load whole")


def graph_range(text: str) -> tuple[int | None, int | None]:
    """--graphs: 'A:B', 'A-B', 'A:', ':B' or 'N' -> (A or None, B or None)."""
    import argparse

    a, sep, b = text.replace("-", ":", 1).partition(":")
    a, b = a.strip(), (b.strip() if sep else a.strip())
    if (a and not a.isdigit()) or (b and not b.isdigit()) or (a and b and int(b) < int(a)) or not (a or b):
        raise argparse.ArgumentTypeError(f"{text!r} is not a range of graphs (e.g. 120:140)")
    return (int(a) if a else None), (int(b) if b else None)


def read_in_windows(path, asked: bool = False) -> bool:
    """Whether a command reads `path` in graph windows (analysis/windows.py): asked for, or too
    large to load whole here, and not a flight recorder's file (bounded: always read whole). A
    file that cannot be read says no: the whole-trace path then says what is wrong with it."""
    from ..analysis import TraceFormatError, windows
    from ..analysis.ring import is_ring
    from ..analysis.trace_file import read_header

    try:
        return (asked or windows.is_large(path)) and not is_ring(read_header(path))
    except (OSError, TraceFormatError):
        return False


def load_trace(args):
    """The trace named on the command line, loaded whole, or only the graphs --graphs names. A
    trace too large to load here is refused with what to do instead, unless asked for whole.
    With more traces (`more`), all of them read together (analysis.together)."""
    more = getattr(args, "more", None) or []
    if more:
        from ..analysis.together import read_together

        return read_together([_load_path(path, args) for path in [args.file] + more])
    return _load_path(args.file, args)


def _load_path(path, args):
    from ..analysis import load, windows

    strict = not getattr(args, "lenient", False)
    large = read_in_windows(path)
    graphs: tuple[int | None, int | None] | str | None = getattr(args, "graphs", None)
    if isinstance(graphs, str):  # the timeline draws its --graphs of the whole trace, unless that is too large
        graphs = graph_range(graphs) if large else None
    if graphs:
        return windows.load_graphs(path, *graphs, strict=strict)
    if large and not getattr(args, "no_windows", False):
        size = os.path.getsize(path)
        raise TooLarge(f"{shown(path)}: {size / 2**20:,.0f} MiB is too large to load whole here: pick graphs with "
                       "--graphs A:B (`ggml-trace summary` counts them), or export it (`export --format parquet`)")
    return load(path, strict=strict)


def shown(path) -> str:
    """A path as printable text, whatever bytes its name has."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def printable(text) -> str:
    """Text from a trace (names come from model files) made safe for a terminal: control and
    other non-printable characters become escapes, so no escape sequence reaches it."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in s)


def say(line: str, file=None) -> None:
    """Print a line that may carry undecodable bytes (as surrogates) without failing."""
    out = file or sys.stderr
    try:
        print(line, file=out, flush=True)
    except UnicodeEncodeError:
        enc = getattr(out, "encoding", None) or "utf-8"
        print(line.encode(enc, "backslashreplace").decode(enc), file=out, flush=True)


def say_warnings(command: str, trace) -> None:
    """Every warning the loader raised, one line each on stderr."""
    for w in trace.warnings:
        say(f"ggml-trace {command}: warning: {printable(w)}")


def error_line(command: str, args, e: BaseException) -> str:
    """The one line that stands for an exception raised while a command read or analysed."""
    from ..analysis import TraceFormatError

    if isinstance(e, TraceFormatError):
        return f"ggml-trace {command}: {printable(e)}"
    where = f"{shown(args.file)}: " if getattr(args, "file", None) else ""
    if isinstance(e, OSError):
        name = f" ({shown(e.filename)})" if e.filename else ""
        return f"ggml-trace {command}: {where}{e.strerror or e}{name}"
    from ..analysis.windows import GraphRangeError

    if isinstance(e, (TooLarge, GraphRangeError)):
        return f"ggml-trace {command}: {where}{printable(e)}"
    if isinstance(e, MemoryError):
        return f"ggml-trace {command}: {where}out of memory (the trace is damaged or too large)"
    if isinstance(e, ModuleNotFoundError):  # a missing package is not a damaged trace
        return f"ggml-trace {command}: needs the Python package {(e.name or '?').split('.')[0]!r}, which is not installed"
    return (f"ggml-trace {command}: {where}cannot process this trace ({type(e).__name__}: "
            f"{printable(e)}); if the file is damaged, try --lenient; GGML_TRACE_DEBUG=1 shows "
            "the traceback")


def run_guarded(command: str, args, fn) -> int:
    """fn(args), with every failure turned into one line on stderr and exit 2."""
    try:
        return fn(args)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BrokenPipeError:
        # the reader went away (`ggml-trace races t | head`): stop as a tool killed by SIGPIPE
        # would, without an error line, and keep Python from failing again on the exit flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except BaseException as e:  # noqa: BLE001 - the point: one line, never a traceback
        if os.environ.get("GGML_TRACE_DEBUG"):
            traceback.print_exc()
        say(error_line(command, args, e))
        return EXIT_BAD_INPUT


@contextlib.contextmanager
def atomic_output(path, directory: bool = False):
    """Yields a temporary path next to `path`; on success it replaces `path` in one rename,
    on failure it is removed: no empty or half-written output is ever left behind."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    prefix = "." + path.name[:40] + ".tmp-"
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    else:
        fd, name = tempfile.mkstemp(prefix=prefix, dir=parent)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        if directory and path.is_dir():
            shutil.rmtree(path)
        os.replace(tmp, path)
        os.chmod(path, (0o777 if directory else 0o666) & ~_umask())  # mkstemp/mkdtemp: 0600/0700
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m
