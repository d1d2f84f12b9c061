"""Load a ggml-trace file into a Trace: one pandas DataFrame per kind of thing (see
docs/dataframes.md for every column), built by analysis/frames.py from the records
analysis/trace_file.py reads (or, for a trace larger than memory, a range of its graphs that
window_index.py reads: load_graphs, iter_windows), and the readers of a loaded trace that other
modules share (best_device_intervals, backend_labels; recorded_env, from meta.py, is importable
here too).
What a trace holds in counts is summary.py's summarize(trace), above this module: it judges.
"""
from __future__ import annotations

import json
import os
import threading

import numpy as np
import pandas as pd

from .arrays import frame_of, kind_ids, lookup, pick_lifetime
from .cuda_frames import cuda_frame, node_reads_frame
from .frames import SOURCE_PRIORITY, Loader, backend_labels
from .kinds import SCHED_KINDS
from .meta import recorded_env
from .raw_trace import RawTrace, RingWindow
from .trace_file import display_path, read_trace_file
from .trace_format import FILE_SNAPSHOT
from .window_index import TAIL_NS, WINDOW_RECORDS, Window, index_trace, plan_windows, read_ahead, read_window

__all__ = ["Trace", "FRAME_NEEDS", "load", "load_raw", "load_graphs", "iter_windows", "GraphRangeError", "best_device_intervals",
           "recorded_env", "backend_labels"]


# -- the Trace --------------------------------------------------------------------------------

# The frames of a Trace and the frames each is built after (the Loader keeps, from building
# those, the state it needs: backend codes, buffer lifetimes, call rows, access sides).
FRAME_NEEDS: dict[str, tuple[str, ...]] = {
    "threads": (), "backends": (), "buffers": ("backends",), "calls": ("backends",),
    "accesses": ("buffers", "calls"), "allocations": ("buffers", "calls"), "copies": ("buffers", "calls"),
    "splits": ("copies",), "sync": ("calls",), "marks": ("calls",), "gpu": ("calls",), "device": ("gpu",),
    "gpu_samples": (), "delays": ("device",), "cuda": ("calls",), "node_reads": ("buffers", "calls"),
}


class Trace:
    """A loaded trace: one DataFrame per kind of thing (see docs/dataframes.md). A trace that
    load() read builds each frame when it is first touched: an analysis pays only for the frames
    it reads."""

    threads: pd.DataFrame
    backends: pd.DataFrame
    buffers: pd.DataFrame
    calls: pd.DataFrame
    splits: pd.DataFrame
    copies: pd.DataFrame
    sync: pd.DataFrame
    accesses: pd.DataFrame
    allocations: pd.DataFrame
    marks: pd.DataFrame
    device: pd.DataFrame
    gpu: pd.DataFrame
    gpu_samples: pd.DataFrame
    delays: pd.DataFrame
    cuda: pd.DataFrame        # CUDA streams mode: ggml-cuda's runtime calls
    node_reads: pd.DataFrame  # CUDA streams mode: every source each split node reads
    # set only on traces read together (together.py): each process, their time axis, the traces
    processes: pd.DataFrame
    clock: str
    parts: list[Trace]

    def __init__(self, path: str, header: dict, meta: dict, strings: dict[int, str],
                 warnings: list[str], nvml: dict | None = None, loader: Loader | None = None,
                 **frames: pd.DataFrame):
        self.path = path
        self.display_path = display_path(path)  # printable (a name that is not UTF-8 escaped)
        self.damage: list[str] = []        # the warnings that say records were lost
        self.closed = True                 # the writer closed the file (the program ended)
        self.not_attached: str | None = None  # why the capture never attached, if it did not
        self.ring: RingWindow | None = None  # a flight recorder's file: the window it holds (analysis/ring.py)
        self.header = header
        self.meta = meta
        self.strings = strings
        self.warnings = warnings
        self.nvml = nvml
        self._loader = loader              # builds the frames not given here, when first touched
        self._lock = threading.RLock()
        for name, df in frames.items():
            setattr(self, name, df)

    def __getattr__(self, name: str):
        # Called only for an attribute not set yet: a frame still to build.
        loader = self.__dict__.get("_loader")
        if name not in FRAME_NEEDS or loader is None:
            raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")
        with self._lock:
            if name not in self.__dict__:
                for need in FRAME_NEEDS[name]:
                    getattr(self, need)
                try:
                    frame = _build_frame(loader, self, name)
                except AttributeError as e:  # not "no such frame": getattr(trace, name, None) would hide it
                    raise RuntimeError(f"building the {name} frame of {self.display_path}: {e}") from e
                setattr(self, name, frame)
                if all(f in self.__dict__ for f in FRAME_NEEDS):
                    self._loader = None  # every frame built: the records can go
        return self.__dict__[name]

    def __getstate__(self) -> dict:
        self.frames()  # a copy (pickle, copy.copy) carries frames, not the records and a lock
        return {k: v for k, v in self.__dict__.items() if k not in ("_loader", "_lock")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _loader=None, _lock=threading.RLock())

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(FRAME_NEEDS))

    def access_calls(self) -> np.ndarray:
        """The row in `calls` of each row of `accesses` (-1: no such call): the join every analysis
        of accesses needs, which the load makes once."""
        rows = self.__dict__.get("_access_calls")
        if rows is None:
            _ = self.calls  # built first: the lookup is by the calls' ids
            loader = self.__dict__.get("_loader")
            rows = (loader.access_calls() if loader is not None else
                    lookup(self.calls["call_id"].to_numpy(np.uint64), self.accesses["call_id"].to_numpy(np.uint64)))
            self._access_calls = rows
        return rows

    def access_columns(self) -> pd.DataFrame:
        """The columns of `accesses` that come from the access records themselves (buffer,
        offset, size, end, mode, tensor, node), without the columns joined from their calls: what
        an analysis of the accesses reads. Before the frame is built, they are built alone (and
        the frame, if touched later, reuses them)."""
        loader = self.__dict__.get("_loader")
        if loader is None or "accesses" in self.__dict__:
            return self.accesses[list(Loader.RECORD_COLUMNS)]
        _ = self.buffers, self.calls  # built first: the lifetimes their buffers are matched to; the calls' ends
        with self._lock:
            return frame_of(loader.access_record_columns())

    def access_lifetimes(self) -> np.ndarray:
        """The row in `buffers` of each access's buffer lifetime (-1: a pointer without buffer
        records, or host memory in no known buffer), matched at the access's call's end (the
        latest lifetime for an access without a call): the load matches them with the accesses'
        buffers, and every analysis by lifetime reuses them."""
        rows = self.__dict__.get("_access_lifetimes")
        loader = self.__dict__.get("_loader")
        if rows is None and loader is not None:
            self.access_columns()  # a loaded trace matches them here
            rows = self._access_lifetimes = loader.a_lifetime
        if rows is None:  # a trace made of frames (traces read together): match them on the frames
            a, bf = self.accesses, self.buffers
            t_end = a["t_end"].to_numpy(np.int64, na_value=np.iinfo(np.int64).max)
            buffer = a["buffer"].to_numpy(np.uint64)
            rows = pick_lifetime(bf["buffer"].to_numpy(np.uint64), bf["first_seen"].to_numpy(np.int64), buffer, t_end)
            rows[buffer == 0] = -1
            self._access_lifetimes = rows
        return rows

    def frames(self) -> dict[str, pd.DataFrame]:
        """Every frame, by name (building those not built yet)."""
        return {name: getattr(self, name) for name in FRAME_NEEDS}

    def banner(self) -> str:
        """One line for the top of a timeline or report: what is wrong with this trace, or ""."""
        parts = []
        if self.not_attached:
            parts.append(f"the capture never attached: {self.not_attached}")
        if self.damage:
            parts.append(f"damaged file, data lost ({len(self.damage)} problem(s)): "
                         + self.damage[0].split(": ", 1)[-1])
        if self.header.get("file_flags", 0) & FILE_SNAPSHOT:
            parts.append("a snapshot taken while the program ran")
        elif not self.closed:
            parts.append("the trace was not closed (the program crashed, was killed or is "
                         "still running)")
        return "; ".join(parts)

    def __repr__(self) -> str:
        return (f"<Trace {self.path!r}: {len(self.calls)} calls, {len(self.accesses)} accesses, "
                f"{len(self.backends)} backends, {len(self.buffers)} buffers>")


def best_device_intervals(device: pd.DataFrame) -> pd.DataFrame:
    """The rows of `trace.device` from the best source each call has (SOURCE_PRIORITY): one
    view of when work ran, where a virtual device, CUPTI and the event watcher all saw it."""
    if len(device) == 0 or device["source"].nunique() <= 1:
        return device
    prio = (device["source"].astype(object).map(SOURCE_PRIORITY)
            .fillna(len(SOURCE_PRIORITY)).to_numpy(np.int64))
    best = pd.Series(prio).groupby(device["call_id"].to_numpy()).transform("min").to_numpy()
    return device[prio == best]


def _nvml(meta: dict, warnings: list[str]) -> dict | None:
    """The GPUs' NVML metadata that `ggml-trace record` stores as JSON under META "nvml"."""
    text = meta.get("nvml")
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as e:
        warnings.append(f"META nvml is not valid JSON ({e}); trace.nvml is None")
        return None


def _not_attached(raw: RawTrace, meta: dict) -> str | None:
    """Why the capture never attached, if it did not: the hooks refused the program's ggml
    (META disabled), or no scheduler ever ran while tracing."""
    why = meta.get("disabled")
    if why is not None:
        return f"the hooks refused this program's ggml: {why or 'no reason recorded'}"
    sched = np.isin(raw.calls["kind"], kind_ids(SCHED_KINDS))
    if not sched.any():
        return ("no ggml backend scheduler ran while tracing (the program never created one, "
                "or capture was paused throughout)")
    return None


def load(path: str | os.PathLike, strict: bool = True) -> Trace:
    """Load a trace file. Damaged records raise TraceFormatError; strict=False drops them and
    says so in trace.warnings / trace.damage (see docs/dataframes.md, "Warnings")."""
    return load_raw(read_trace_file(path, strict=strict))


def load_raw(raw: RawTrace) -> Trace:
    """The Trace of records already read (read_trace_file, or a window of a larger trace:
    analysis/window_index.py); its frames are built when first touched."""
    ld = Loader(raw)
    meta, warnings = ld.meta(), list(raw.warnings)
    not_attached = _not_attached(raw, meta)
    if not_attached:
        warnings.append(f"{display_path(raw.path)}: the capture never attached: {not_attached}")
    t = Trace(raw.path, raw.header, meta, raw.strings, warnings, _nvml(meta, warnings), loader=ld)
    t.damage, t.closed, t.not_attached = list(raw.damage), raw.closed, not_attached
    t.ring = raw.ring
    return t


def _build_frame(ld: Loader, t: Trace, name: str) -> pd.DataFrame:
    """One frame of `t` from its loader (the frames it needs are built)."""
    if name == "copies":
        return ld.copies(t.calls)
    if name == "splits":
        return ld.splits(t.calls, t.copies)
    if name in ("sync", "marks"):
        return getattr(ld, name)(t.calls)
    if name == "gpu":
        return ld.gpu_activity(t.meta)
    if name == "device":
        device = ld.device(t.calls)
        return pd.concat([device, ld.cupti_device(t.gpu)], ignore_index=True) if len(t.gpu) else device
    if name == "delays":
        return ld.delays(t.calls, t.device)
    if name == "gpu_samples":
        return ld.gpu_samples()
    if name == "cuda":
        return cuda_frame(ld)
    if name == "node_reads":
        return node_reads_frame(ld)
    if name == "accesses":
        frame = ld.accesses()
        t._access_lifetimes = ld.a_lifetime  # matched on the way: kept for the analyses
        return frame
    return getattr(ld, name)()  # threads, backends, buffers, calls, accesses, allocations


# -- a trace larger than memory, loaded a range of graphs at a time (window_index.py reads it) --

class GraphRangeError(ValueError):
    """A range of graphs the trace does not have."""


def load_graphs(path, first: int | None, last: int | None, strict: bool = True):
    """The trace's scheduler graphs `first` to `last` (graph numbers as in its frames; None: open)
    as a loaded trace, read in bounded memory: the calls that began from the first one's start to
    the next one's after `last`, what belongs to them, the GPU activity of that time, and the
    whole run's threads, backends and buffers."""
    index = index_trace(path, strict=strict)
    ids = index.graph_ids
    lo = first if first is not None else 0
    hi = last if last is not None else np.iinfo(np.int64).max
    at = np.flatnonzero((ids >= lo) & (ids <= hi))
    asked = f"{'' if first is None else first}:{'' if last is None else last}"
    if len(at) == 0:
        have = f"graphs {ids.min()} to {ids.max()}" if len(ids) else "no scheduler graphs"
        raise GraphRangeError(f"no graph in {asked} in this trace (it has {have})")
    i0, i1 = int(at.min()), int(at.max()) + 1
    starts = index.graph_start_ns
    w = Window(0, i0, i1, int(starts[i0]), int(starts[i0]), int(starts[i1]) if i1 < len(ids) else 1 << 62)
    trace = load_raw(read_window(index, w, strict))
    trace.warnings.append(f"{display_path(path)}: graphs {asked} only ({i1 - i0} of {len(ids)}), "
                          "read in bounded memory (--graphs)")
    return trace


def iter_windows(path, records: int = WINDOW_RECORDS, context: int = 0, strict: bool = True):
    """(Window, Trace) for each window of a trace, for work of your own on a trace larger than
    memory: a window's frames hold the calls that began in it (and in its `context` graphs before
    it) and what belongs to them; threads, backends and buffers are the whole run's."""
    index = index_trace(path, strict=strict)
    for w, raw in read_ahead(index, plan_windows(index, records, context), strict,
                             tail_ns=0 if context == 0 else TAIL_NS):
        yield w, load_raw(raw)
