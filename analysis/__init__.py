"""ggml-trace analysis: load a binary trace into pandas DataFrames."""
from .load import Trace, load
from .summary import summarize
from .races import RaceReport, races
from . import stalls  # analysis.stalls.stalls(trace): why the host waited
from .trace_format import TraceFormatError

__all__ = ["load", "Trace", "TraceFormatError", "summarize", "races", "RaceReport",
           "timeline", "export_perfetto", "export_parquet", "write_report"]

# The views need plotly. Without it (the recorder on a bare GPU host, say) traces still load and
# analyse; the views say what is missing when called.
try:
    from .timeline import timeline
    from .export import export_parquet, export_perfetto
    from .report import write_report
except ImportError as e:
    _missing = e

    def _unavailable(*args, **kwargs):
        raise ImportError(f"the timeline, export and report views need plotly: {_missing}")

    timeline = export_parquet = export_perfetto = write_report = _unavailable
