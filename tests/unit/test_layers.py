"""The layers of the package (docs/architecture.md). analysis/: format -> read -> frames -> judge ->
show; tracer/, the control above it, stands on it: analysis never imports tracer. Every module is
placed in one layer (LAYERS, TRACER_LAYERS), and imports go down or across, never up: a module
imports, at module level or inside a function (an import inside a function only hides the
dependency, it does not remove it), in any form, only modules of its own layer or below. A module
not in the map fails the test, so that a new one gets placed. No import circles either, and the
format module imports no other module of the package. What an import loads at run time:
tests/traces/test_import_loads.py."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "ggml_trace"
FOLDERS = {"analysis": ROOT / "analysis", "tracer": ROOT / "tracer"}  # as pyproject.toml maps them
FORMAT = "analysis.trace_format"

# Each module of analysis/ in the layer of what it is for (docs/architecture.md has the same map).
LAYERS = {
    # the file format's facts, held to native_hooks/trace_format.h
    "format": ["trace_format"],
    # bytes into record arrays: what a read file is, the readers and their checks, and the
    # numpy helpers below everything (columns of records, threads, vectorised takes and lookups)
    "read": ["raw_trace", "columns", "threads", "arrays", "checks", "ring", "trace_file", "window_index"],
    # records into the frames of a Trace, and what the recorded metadata says
    "frames": ["kinds", "schema", "meta", "build_info", "frames", "cuda_frames", "load"],
    # what the frames mean: races, stalls, comparisons, allreduce paths, delays, the summary
    "judge": ["races", "race_timing", "race_report", "race_match", "reduction", "stalls", "critical_path", "compare",
              "allreduce", "delay", "together", "summary", "device_timing", "window_races", "stream_races",
              "waits"],
    # what a person sees: the interval model and its views, exports, the progress line, and the
    # modules that name everything (the package, windows.py)
    "show": ["intervals", "view_text", "timeline", "timeline_png", "export", "export_windows", "report", "compare_page",
             "progress", "windows", "__init__"],
}
# Each module of tracer/ in the layer of what it is for. tracer's layers stand among analysis'
# (ORDER): a module may import analysis up to the layer below its own.
TRACER_LAYERS = {
    # while a program is traced, inside it (the control API, the snapshots it takes) and beside it
    # (the recorder, what it appends, NVML, finding the hooks, delay rules): the format and the
    # reader, no pandas
    "recording": ["__init__", "api", "snapshots", "record", "trace_append", "nvml", "hooks", "delay_spec", "windows",
                  "outputs"],
    # programs, scenarios and builds run and recorded; races forced and reduced
    "control": ["programs", "scenario", "build_hooks", "demo", "force", "reduce", "replay_limits", "repro_cpp",
                "vulkan_runs", "record_args", "sweep"],
    # the command line, and diagnose, which runs the others' work in one command and writes its report
    "command": ["cli", "cli_common", "cli_views", "cli_record", "cli_diagnose", "diagnose", "issue", "cli_sweep",
                "sweep_program", "sweep_report"],
}
# every layer, lowest first
ORDER = ["format", "read", "recording", "frames", "judge", "show", "control", "command"]
LAYER_OF = {**{f"analysis.{m}": layer for layer, modules in LAYERS.items() for m in modules},
            **{f"tracer.{m}": layer for layer, modules in TRACER_LAYERS.items() for m in modules}}


def _module(dotted: str, modules: set[str]) -> str | None:
    """'ggml_trace.analysis.races' -> 'analysis.races', the package 'ggml_trace.analysis' ->
    'analysis.__init__'; None for what is not one of `modules`."""
    parts = dotted.split(".")
    if parts[0] != PACKAGE or len(parts) < 2:
        return None
    name = f"{parts[1]}.{parts[2]}" if len(parts) > 2 else f"{parts[1]}.__init__"
    return name if name in modules else None


def imports_of(path: Path, module: str, modules: set[str]) -> set[str]:
    """The modules of `modules` that the file of `module` ('tracer.cli') imports anywhere in it, in
    functions and `if` blocks too, in every form: `import ggml_trace.analysis.x`, `from
    ggml_trace.analysis.x import y`, `from ggml_trace.analysis import x` (x a module, else the
    package's name), `from ggml_trace import analysis`, and relative (`from . import x`, `from .x
    import y`, `from ..analysis import x`)."""
    package = module.split(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {_module(a.name, modules) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from the module's own package (level 1), or ggml_trace (level 2)
                base = ".".join([PACKAGE, package][:3 - node.level] + ([base] if base else []))
            for a in node.names:  # a module of that name, else a name the module holds
                found.add(_module(f"{base}.{a.name}", modules) or _module(base, modules))
    found.discard(None)
    return found


def import_graph(folders: dict[str, Path]) -> dict[str, set[str]]:
    """Each module of the package's folders ('analysis.races'; the package itself:
    'analysis.__init__') with the modules of them it imports."""
    files = {f"{package}.{p.stem}": p for package, folder in folders.items() for p in folder.glob("*.py")}
    return {name: imports_of(path, name, set(files)) - {name} for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each module that is on one, as the path of imports round it."""
    found, seen_on_cycle = [], set()
    for start in sorted(graph):
        if start in seen_on_cycle:
            continue
        # depth-first from start, looking for a way back to it
        stack, visited = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph[node]):
                if nxt == start:
                    found.append(path + [start])
                    seen_on_cycle.update(path)
                    stack = []
                    break
                if nxt not in visited:
                    visited.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return found


def upward_imports(graph: dict[str, set[str]], layer_of: dict[str, str]) -> list[str]:
    """Each import of a module from a higher layer, as 'a (layer) imports b (layer)'; and each
    import of tracer from analysis."""
    rank = {module: ORDER.index(layer) for module, layer in layer_of.items()}
    return [f"{m} ({layer_of[m]}) imports {i} ({layer_of[i]})" for m in sorted(graph) for i in sorted(graph[m])
            if rank[i] > rank[m] or (m.startswith("analysis.") and i.startswith("tracer."))]


def test_every_module_has_a_layer():
    modules = set(import_graph(FOLDERS))
    unplaced = sorted(modules - set(LAYER_OF))
    assert not unplaced, f"modules in no layer (place them in LAYERS or TRACER_LAYERS, tests/unit/test_layers.py): {unplaced}"
    gone = sorted(set(LAYER_OF) - modules)
    assert not gone, f"the layers name modules that are gone: {gone}"
    placed = sum(len(m) for m in LAYERS.values()) + sum(len(m) for m in TRACER_LAYERS.values())
    assert len(LAYER_OF) == placed, "a module placed in two layers"
    assert set(ORDER) == set(LAYERS) | set(TRACER_LAYERS)


def test_imports_go_down_the_layers():
    upward = upward_imports(import_graph(FOLDERS), LAYER_OF)
    assert not upward, "imports up the layers: " + "; ".join(upward)


def test_no_import_circles():
    circles = cycles(import_graph(FOLDERS))
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_format_is_a_leaf():
    graph = import_graph(FOLDERS)
    assert FORMAT in graph
    assert graph[FORMAT] == set(), f"analysis/trace_format.py imports {sorted(graph[FORMAT])}"


def plant(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    """The files ('analysis/low.py': its text) in tmp_path, as the package's folders."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return {package: tmp_path / package for package in FOLDERS}


def test_the_check_sees_a_hidden_circle(tmp_path):
    """The check itself: a circle hidden by an import inside a function, through `from . import`."""
    folders = plant(tmp_path, {"analysis/a.py": "from .b import f\n",
                               "analysis/b.py": "def f():\n    from . import a\n    return a\n",
                               "analysis/c.py": "from .a import f\n"})  # imports into the circle, not part of it
    assert cycles(import_graph(folders)) == [["analysis.a", "analysis.b", "analysis.a"]]
    (tmp_path / "analysis" / "b.py").write_text("def f():\n    return 1\n")
    assert cycles(import_graph(folders)) == []


TMP_LAYERS = {"analysis.low": "read", "analysis.high": "judge", "analysis.__init__": "show",
              "tracer.api": "recording", "tracer.cli": "command"}


@pytest.mark.parametrize("where,text,seen", [
    # in analysis/low.py (read), hidden inside a function
    ("analysis/low.py", "from . import high", "analysis.low (read) imports analysis.high (judge)"),
    ("analysis/low.py", "from .high import f", "analysis.low (read) imports analysis.high (judge)"),
    ("analysis/low.py", "import ggml_trace.analysis.high", "analysis.low (read) imports analysis.high (judge)"),
    ("analysis/low.py", "import ggml_trace.analysis.high as h", "analysis.low (read) imports analysis.high (judge)"),
    ("analysis/low.py", "from ggml_trace.analysis.high import f", "analysis.low (read) imports analysis.high (judge)"),
    ("analysis/low.py", "from ggml_trace.analysis import high", "analysis.low (read) imports analysis.high (judge)"),
    ("analysis/low.py", "from ggml_trace import analysis", "analysis.low (read) imports analysis.__init__ (show)"),
    ("analysis/low.py", "from . import load", "analysis.low (read) imports analysis.__init__ (show)"),  # a name of the package
    # analysis never imports tracer, whatever their layers
    ("analysis/high.py", "from ..tracer import api", "analysis.high (judge) imports tracer.api (recording)"),
    ("analysis/high.py", "from ggml_trace.tracer.api import mark", "analysis.high (judge) imports tracer.api (recording)"),
    # in tracer/api.py (recording: the format and the reader only)
    ("tracer/api.py", "from ..analysis import high", "tracer.api (recording) imports analysis.high (judge)"),
    ("tracer/api.py", "from ..analysis.high import f", "tracer.api (recording) imports analysis.high (judge)"),
    ("tracer/api.py", "from .. import analysis", "tracer.api (recording) imports analysis.__init__ (show)"),
    ("tracer/api.py", "from . import cli", "tracer.api (recording) imports tracer.cli (command)"),
    ("tracer/api.py", "import ggml_trace.tracer.cli", "tracer.api (recording) imports tracer.cli (command)"),
])
def test_the_check_sees_an_upward_import(tmp_path, where, text, seen):
    """The check itself: an import up the layers in each form, hidden inside a function."""
    files = {name: "def f():\n    return 1\n" for name in ("analysis/low.py", "analysis/high.py", "analysis/__init__.py",
                                                          "tracer/api.py", "tracer/cli.py")}
    folders = plant(tmp_path, files)
    assert upward_imports(import_graph(folders), TMP_LAYERS) == []
    plant(tmp_path, {where: f"def f():\n    {text}\n    return 1\n"})
    assert upward_imports(import_graph(folders), TMP_LAYERS) == [seen]


def test_the_check_lets_imports_go_down_and_across(tmp_path):
    folders = plant(tmp_path, {
        "analysis/low.py": "from ggml_trace.analysis import low\n",
        "analysis/high.py": "import ggml_trace.analysis.low\nfrom . import high\n",
        "analysis/__init__.py": "from .high import f\n",
        "tracer/api.py": "from ..analysis.low import f\nfrom .. import __version__\nimport ggml_trace\n",
        "tracer/cli.py": "from ..analysis import load, high\nfrom ggml_trace import analysis\nfrom .api import mark\n"})
    graph = import_graph(folders)
    assert graph["tracer.cli"] == {"analysis.__init__", "analysis.high", "tracer.api"}
    assert graph["tracer.api"] == {"analysis.low"}
    assert upward_imports(graph, TMP_LAYERS) == []
