"""A trace larger than memory as partitioned Parquet datasets (`ggml-trace export --format
parquet` of a large trace), written a graph window at a time (window_index.py reads them)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd

from .load import load_raw
from .schema import FRAMES
from .trace_file import display_path
from .window_index import WINDOW_RECORDS, index_trace, plan_windows, read_ahead


GLOBAL_FRAMES = ["threads", "backends", "buffers", "gpu_samples"]  # the whole run's, written once


def export_parquet_windows(path, directory, records: int = WINDOW_RECORDS, strict: bool = True,
                           progress=None) -> dict:
    """The trace's DataFrames as Parquet datasets that DuckDB, Dask or pyarrow read directly,
    a window of whole graphs at a time (bounded memory): DIR/FRAME/graphs=A-B/part.parquet for
    the frames of calls and what they did, DIR/FRAME.parquet for threads, backends, buffers and
    counter samples, and DIR/meta.json. Every call is in the window its host call began in;
    categorical columns are written as strings (the windows' categories differ)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    index = index_trace(path, strict=strict)
    plan = plan_windows(index, records, context=0)
    width = len(str(max(len(index.graph_ids), 1)))
    rows: dict[str, int] = {}
    meta: dict | None = None
    t_start = time.monotonic()
    for w, raw in read_ahead(index, plan, strict, tail_ns=0):
        trace = load_raw(raw)
        part = f"graphs={w.first_graph:0{width}d}-{max(w.end_graph - 1, w.first_graph):0{width}d}"
        for name in FRAMES:
            df = getattr(trace, name, None)
            if df is None or (name in GLOBAL_FRAMES and w.number > 0):
                continue
            target = d / f"{name}.parquet" if name in GLOBAL_FRAMES else d / name / part / "part.parquet"
            target.parent.mkdir(parents=True, exist_ok=True)
            _plain(df).to_parquet(target, index=False)
            rows[name] = rows.get(name, 0) + len(df)
        if meta is None:
            meta = {"source": display_path(path), "meta": trace.meta, "warnings": list(trace.warnings)}
        if progress:
            progress("export", w.number + 1, len(plan), time.monotonic() - t_start)
    info = {"windows": len(plan), "graphs": len(index.graph_ids), "rows": rows}
    (d / "meta.json").write_text(json.dumps(dict(meta or {}, **info), indent=2, default=str))
    return info


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    cats = [c for c in df.columns if isinstance(df[c].dtype, pd.CategoricalDtype)]
    return df.astype({c: "string" for c in cats}) if cats else df
