"""One HTML page for `ggml-trace compare`: the comparison's table, then both timelines on one axis
(each from its own first graph, so that the same time reads the same on both)."""
from __future__ import annotations

import html
from pathlib import Path

from .compare import format_compare
from .critical_path import first_graph_ns
from .timeline import timeline, timeline_html


def compare_html(a, b, result: dict, label_a: str, label_b: str) -> str:
    """The page for traces `a` and `b` (loaded; the first run of each side) and compare()'s result."""
    span_us = max(result["a"]["max"]["wall_ns"], result["b"]["max"]["wall_ns"]) / 1000.0
    parts = []
    for i, (t, label) in enumerate(((a, label_a), (b, label_b))):
        start_us = (first_graph_ns(t) - int(t.calls["t_begin"].min())) / 1000.0
        fig = timeline(t, zoom=(start_us, start_us + span_us), title=f"{'AB'[i]}: {label}")
        parts.append(timeline_html(fig, full_html=False, include_plotlyjs=(i == 0), div_id=f"compare-{'ab'[i]}"))
    table = html.escape(format_compare(result, label_a, label_b))
    return ("<!doctype html>\n<html>\n<head>\n<meta charset=\"utf-8\" />\n<title>ggml-trace compare</title>\n"
            "<style>body{margin:8px;font-family:sans-serif} pre{font-size:13px}</style>\n</head>\n<body>\n"
            f"<h1>ggml-trace compare</h1>\n<pre>{table}</pre>\n"
            "<p>Both timelines start at their first scheduler graph and show the same length of time.</p>\n"
            + "\n".join(parts) + "\n</body>\n</html>\n")


def write_compare_page(a, b, result: dict, label_a: str, label_b: str, path) -> Path:
    p = Path(path)
    p.write_text(compare_html(a, b, result, label_a, label_b), encoding="utf-8")
    return p
