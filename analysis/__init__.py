"""ggml-trace analysis: load a binary trace into pandas DataFrames."""
from .load import Trace, load, summarize
from .trace_file import TraceFormatError

__all__ = ["load", "Trace", "TraceFormatError", "summarize"]
