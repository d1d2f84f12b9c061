"""The layers of analysis/ (docs/architecture.md): format -> read -> frames -> judge -> show.
Imports go one way: no module imports, at module level or inside a function, a module that
imports it back (an import inside a function only hides a circle, it does not break it), and
the format module imports no other analysis module."""
import ast
from pathlib import Path

ANALYSIS = Path(__file__).resolve().parents[1] / "analysis"
FORMAT = "trace_format"


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
