"""ggml-trace: trace capture and timeline analysis for ggml's backend scheduler.

The package's parts are the repository's own folders, mapped by pyproject.toml's package-dir:
`ggml_trace.tracer` (capture control, the `ggml-trace` command) is tracer/, `ggml_trace.analysis`
(load, judge, show) is analysis/, and `ggml_trace.source` holds what the hooks are built from
(native_hooks/, CMakeLists.txt, scenarios/, scripts/). It is used installed: `pip install -e .` in
a checkout (`make setup`), a wheel, or bench/gpu/install_here.sh on a host without either.
"""
try:
    from importlib.metadata import version as _version

    __version__ = _version("ggml-trace")
except Exception:  # not installed: ggml_trace/ alone on sys.path
    __version__ = "0+checkout"
