"""Control a trace from inside a Python process that runs under the hooks.

    GGML_TRACE ... ggml-trace record -- python my_script.py
    from ggml_trace import tracer
    with tracer.range("prompt 3"):
        llm(prompt)
    tracer.mark("done")

Outside a traced process every call is a no-op, so scripts need no special casing.
"""
import contextlib
import ctypes

_lib: ctypes.CDLL | bool | None = None  # None: not looked for yet; False: no hooks in this process


def _hooks():
    """The hook library's control functions, found among the symbols already loaded."""
    global _lib
    if _lib is None:
        process = ctypes.CDLL(None)
        if not hasattr(process, "ggmltrace_active"):  # (looks the symbol up)
            _lib = False
            return None
        for name, res, args in [
            ("ggmltrace_active", ctypes.c_int, []),
            ("ggmltrace_start", None, []),
            ("ggmltrace_stop", None, []),
            ("ggmltrace_flush", None, []),
            ("ggmltrace_mark", None, [ctypes.c_char_p]),
            ("ggmltrace_now", ctypes.c_uint64, []),
            ("ggmltrace_range", None, [ctypes.c_char_p, ctypes.c_uint64]),
            ("ggmltrace_output_path", ctypes.c_char_p, []),
        ]:
            fn = getattr(process, name)
            fn.restype, fn.argtypes = res, args
        _lib = process
    return _lib or None


def is_active() -> bool:
    lib = _hooks()
    return bool(lib and lib.ggmltrace_active())


def output_path() -> str:
    lib = _hooks()
    return lib.ggmltrace_output_path().decode() if lib else ""


def start():
    """Resume recording (see `ggml-trace record --paused`)."""
    if lib := _hooks():
        lib.ggmltrace_start()


def stop():
    """Pause recording; what was recorded stays in the file."""
    if lib := _hooks():
        lib.ggmltrace_stop()


def flush():
    """Ask the kernel to write the trace to disk now (a crash of the process loses nothing anyway)."""
    if lib := _hooks():
        lib.ggmltrace_flush()


def snapshot(out: str | None = None) -> str:
    """Keeps a copy of this process's trace as it is now (a flight recorder's window), at `out`
    or TRACE.snapshot-N.ggmltrace beside the trace; returns its path ("" outside a trace)."""
    path = output_path()
    if not path:
        return ""
    from . import snapshots  # numpy and the format: only when asked

    return str(snapshots.take(path, out).path)


def mark(name: str):
    """An instant event on the calling thread's timeline."""
    if lib := _hooks():
        lib.ggmltrace_mark(name.encode())


@contextlib.contextmanager
def range(name: str):  # noqa: A001 - reads naturally as tracer.range("...")
    """A named interval on the calling thread's timeline."""
    lib = _hooks()
    begin = lib.ggmltrace_now() if lib else 0
    try:
        yield
    finally:
        if lib:
            lib.ggmltrace_range(name.encode(), begin)
