"""What an import loads, in a fresh interpreter (this environment's Python): the format and the
reader need neither pandas nor plotly, nor does the control API inside a traced program; the
package's names are imported on first use. The layers themselves: tests/unit/test_layers.py."""
import subprocess
import sys

HEAVY = ["pandas", "plotly", "ggml_trace.analysis.races", "ggml_trace.analysis.stalls",
         "ggml_trace.analysis.timeline", "ggml_trace.analysis.report"]


def loaded_after(code: str) -> set[str]:
    """The modules of HEAVY that running `code` in a fresh interpreter (this one's) loads."""
    probe = f"import sys\n{code}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return set(r.stdout.split())


def test_the_format_and_the_reader_load_no_pandas_and_no_view():
    assert loaded_after("import ggml_trace.analysis.trace_format") == set()
    assert loaded_after("from ggml_trace.analysis import trace_file, raw_trace\n"
                        "from ggml_trace.analysis.trace_file import read_trace_file") == set()


def test_the_control_api_loads_no_pandas():
    assert loaded_after("import ggml_trace.tracer.api") == set()
    assert loaded_after("from ggml_trace import tracer\ntracer.mark('x')") == set()


def test_the_package_names_are_the_functions_whichever_module_loads_first():
    """`analysis.load` is the function though races.py imported the load module before it was
    asked for (the import system sets a loaded module on its package)."""
    code = ("import ggml_trace.analysis.races, ggml_trace.analysis.timeline\n"
            "from ggml_trace import analysis\n"
            "from ggml_trace.analysis import load, races, timeline\n"
            "assert analysis.load is load is sys.modules['ggml_trace.analysis.load'].load\n"
            "assert analysis.races is races is sys.modules['ggml_trace.analysis.races'].races\n"
            "assert analysis.timeline is timeline is sys.modules['ggml_trace.analysis.timeline'].timeline\n"
            "assert analysis.stalls is sys.modules['ggml_trace.analysis.stalls']\n"
            "assert analysis.windows.races_in_windows\n"
            "assert all(getattr(analysis, n) is not None for n in analysis.__all__)\n"
            "assert set(analysis.__all__) <= set(dir(analysis))")
    assert loaded_after(code) >= {"pandas", "plotly"}
