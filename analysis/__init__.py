"""ggml-trace analysis: load a binary trace into pandas DataFrames.

The names below are imported on first use (PEP 562): importing one part of the package (the
format, the reader) loads neither pandas, the analyses nor plotly, and a host without plotly
loads and analyses traces; only the views need it. Every module is an attribute too
(`analysis.stalls.stalls(trace)`, `analysis.windows.races_in_windows(path)`).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import TYPE_CHECKING

# each public name: the module that defines it
_DEFINED_IN = {
    "load": "load", "Trace": "load",
    "TraceFormatError": "trace_format",
    "summarize": "summary",
    "races": "races", "RaceReport": "race_report",
    "timeline": "timeline",
    "export_perfetto": "export", "export_parquet": "export",
    "write_report": "report",
}

__all__ = [*_DEFINED_IN, "stalls"]

if TYPE_CHECKING:  # what static tools see; at run time __getattr__ imports each name
    from . import stalls as stalls
    from .export import export_parquet as export_parquet, export_perfetto as export_perfetto
    from .load import Trace as Trace, load as load
    from .race_report import RaceReport as RaceReport
    from .races import races as races
    from .report import write_report as write_report
    from .summary import summarize as summarize
    from .timeline import timeline as timeline
    from .trace_format import TraceFormatError as TraceFormatError


def __getattr__(name: str):
    if name in _DEFINED_IN:
        value = getattr(importlib.import_module(f".{_DEFINED_IN[name]}", __name__), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """load, races and timeline are functions named like their modules. The import system sets
    each module it loads as an attribute of its package, which would put the module where the
    function is (`analysis.load(path)`) once any module had imported it: the function stays."""

    def __setattr__(self, name: str, value) -> None:
        if name in _DEFINED_IN and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
