"""The layers of analysis/ (docs/architecture.md): format -> read -> frames -> judge -> show.
Every module is placed in one layer (LAYERS), and imports go down or across, never up: a module
imports, at module level or inside a function (an import inside a function only hides the
dependency, it does not remove it), only modules of its own layer or below. A module not in the
map fails the test, so that a new one gets placed. No import circles either, and the format
module imports no other analysis module."""
import ast
from pathlib import Path

ANALYSIS = Path(__file__).resolve().parents[1] / "analysis"
FORMAT = "trace_format"

# Each module of analysis/ in the layer of what it is for (docs/architecture.md has the same map).
LAYERS = {
    # the file format's facts, held to native_hooks/trace_format.h
    "format": ["trace_format"],
    # bytes into record arrays: what a read file is, the readers and their checks, and the
    # numpy helpers below everything (columns of records, threads, vectorised takes and lookups)
    "read": ["raw_trace", "columns", "threads", "arrays", "checks", "ring", "trace_file", "window_index"],
    # records into the frames of a Trace, and what the recorded metadata says
    "frames": ["kinds", "schema", "meta", "build_info", "frames", "load"],
    # what the frames mean: races, stalls, comparisons, allreduce paths, delays, the summary
    "judge": ["races", "race_report", "race_match", "reduction", "stalls", "critical_path", "compare", "allreduce", "delay", "together",
              "summary", "device_timing", "window_races"],
    # what a person sees: the interval model and its views, exports, the progress line, and the
    # modules that name everything (the package, windows.py)
    "show": ["intervals", "view_text", "timeline", "timeline_png", "export", "export_windows", "report", "compare_page",
             "progress", "windows", "__init__"],
}
ORDER = list(LAYERS)
LAYER_OF = {module: layer for layer, modules in LAYERS.items() for module in modules}


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The modules of the same package that the file imports anywhere in it (every `from .x
    import`, `from . import x`, `import ggml_trace.analysis.x`, in functions and `if` blocks too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:  # from .x import y / from . import x
                names = [node.module] if node.module else [a.name for a in node.names]
            elif node.level == 0 and node.module:  # from ggml_trace.analysis.x import y
                names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["ggml_trace", "analysis"]:
                parts = parts[2:]
            if parts and parts[0] in modules:
                found.add(parts[0])
    return found


def import_graph(folder: Path) -> dict[str, set[str]]:
    files = {p.stem: p for p in folder.glob("*.py")}
    graph = {name: imports_of(path, set(files)) for name, path in files.items()}
    for name in graph:
        graph[name].discard(name)
    return graph


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
    """Each import of a module from a higher layer, as 'a (layer) imports b (layer)'."""
    rank = {module: ORDER.index(layer) for module, layer in layer_of.items()}
    return [f"{m} ({layer_of[m]}) imports {i} ({layer_of[i]})"
            for m in sorted(graph) for i in sorted(graph[m]) if rank[i] > rank[m]]


def test_every_module_has_a_layer():
    modules = set(import_graph(ANALYSIS))
    unplaced = sorted(modules - set(LAYER_OF))
    assert not unplaced, f"analysis/ modules in no layer (place them in LAYERS, tests/test_layers.py): {unplaced}"
    gone = sorted(set(LAYER_OF) - modules)
    assert not gone, f"LAYERS names modules analysis/ no longer has: {gone}"
    assert len(LAYER_OF) == sum(len(m) for m in LAYERS.values()), "a module placed in two layers"


def test_imports_go_down_the_layers():
    upward = upward_imports(import_graph(ANALYSIS), LAYER_OF)
    assert not upward, "imports up the layers in analysis/: " + "; ".join(upward)


def test_no_import_circles():
    circles = cycles(import_graph(ANALYSIS))
    assert not circles, "import circles in analysis/: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_format_is_a_leaf():
    graph = import_graph(ANALYSIS)
    assert FORMAT in graph
    assert graph[FORMAT] == set(), f"analysis/{FORMAT}.py imports {sorted(graph[FORMAT])}"


def test_the_check_sees_a_hidden_circle(tmp_path):
    """The check itself: a circle hidden by an import inside a function, through `from . import`."""
    (tmp_path / "a.py").write_text("from .b import f\n")
    (tmp_path / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    (tmp_path / "c.py").write_text("from .a import f\n")  # imports into the circle, not part of it
    assert cycles(import_graph(tmp_path)) == [["a", "b", "a"]]
    (tmp_path / "b.py").write_text("def f():\n    return 1\n")
    assert cycles(import_graph(tmp_path)) == []


def test_the_check_sees_an_upward_import(tmp_path):
    """The check itself: an import up the layers hidden inside a function, through `from . import`."""
    (tmp_path / "low.py").write_text("def f():\n    from . import high\n    return high\n")
    (tmp_path / "high.py").write_text("from .low import f\n")
    layer_of = {"low": "read", "high": "judge"}
    assert upward_imports(import_graph(tmp_path), layer_of) == ["low (read) imports high (judge)"]
    (tmp_path / "low.py").write_text("def f():\n    return 1\n")
    assert upward_imports(import_graph(tmp_path), layer_of) == []
