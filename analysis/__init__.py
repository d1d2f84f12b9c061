"""ggml-trace analysis: load a binary trace into pandas DataFrames."""
from .load import Trace, load, summarize
from .races import RaceReport, races
from .trace_file import TraceFormatError

__all__ = ["load", "Trace", "TraceFormatError", "summarize", "races", "RaceReport"]
