"""ggml-trace analysis: load a binary trace into pandas DataFrames."""
from .load import Trace, load, summarize
from .races import RaceReport, races
from .trace_file import TraceFormatError

__all__ = ["load", "Trace", "TraceFormatError", "summarize", "races", "RaceReport"]
from .timeline import timeline  # noqa: E402
from .export import export_parquet, export_perfetto  # noqa: E402
from .report import write_report  # noqa: E402

__all__ += ["timeline", "export_perfetto", "export_parquet", "write_report"]
