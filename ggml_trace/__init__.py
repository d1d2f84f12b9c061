"""ggml-trace: trace capture and timeline analysis for ggml's backend scheduler.

The package's parts are the repository's own folders: `ggml_trace.tracer` (capture control, the
`ggml-trace` command) is tracer/, `ggml_trace.analysis` (load, judge, show) is analysis/, and
`ggml_trace.source` holds what the hooks are built from (native_hooks/, CMakeLists.txt, scenarios/,
scripts/). A wheel carries them inside this package; run from a checkout that is on sys.path, the
checkout's folders are mapped here.
"""
from pathlib import Path as _Path

_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "tracer" / "cli.py").is_file() and (_checkout / "native_hooks").is_dir():
    __path__.append(str(_checkout))  # noqa: F821 - a package's own __path__

try:
    from importlib.metadata import version as _version

    __version__ = _version("ggml-trace")
except Exception:  # not installed: a checkout on sys.path
    __version__ = "0+checkout"
