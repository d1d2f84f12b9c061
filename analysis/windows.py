"""Analysing a trace larger than memory: graph windows, by job.

- window_index.py (reading): one pass over the file indexes it; the graphs are cut into windows
  of about WINDOW_RECORDS records, each read as a RawTrace (read_window, read_ahead).
- load.py: a range of graphs (load_graphs) or each window (iter_windows) as a loaded Trace.
- window_races.py: races() a window at a time, here or on Dask, the findings merged.
- summary.py: summarize_in_windows, the counts added up over windows.
- export_windows.py: partitioned Parquet datasets, a window at a time.
- progress.py: the progress line the command line prints.

This module names them all, as it did when it held them; the modules above are where they live.
It imports from every layer (docs/architecture.md), so it stands with the views, at the top.
"""
from .export_windows import GLOBAL_FRAMES, export_parquet_windows
from .load import GraphRangeError, iter_windows, load_graphs
from .progress import print_progress
from .summary import summarize_in_windows
from .window_index import (BLOCK_CHUNKS, CONTEXT_GRAPHS, TAIL_NS, WINDOW_RECORDS, TraceIndex, Window, index_trace,
                           is_large, plan_windows, read_ahead, read_window)
from .window_races import FINDING_KEY, WindowResult, analyse_window, merge_findings, races_in_windows, races_on_dask

__all__ = ["BLOCK_CHUNKS", "CONTEXT_GRAPHS", "FINDING_KEY", "GLOBAL_FRAMES", "GraphRangeError", "TAIL_NS",
           "TraceIndex", "WINDOW_RECORDS", "Window", "WindowResult", "analyse_window", "export_parquet_windows",
           "index_trace", "is_large", "iter_windows", "load_graphs", "merge_findings", "plan_windows",
           "print_progress", "races_in_windows", "races_on_dask", "read_ahead", "read_window",
           "summarize_in_windows"]
