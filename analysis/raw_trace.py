"""What a read trace file holds: its records by type (RawTrace), the clock that turns their
ticks into nanoseconds (TickClock) and, for a flight recorder's file, the window it kept
(RingWindow). Plain data: analysis/trace_file.py fills them, checks.py and ring.py work on them
without importing the reader.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .columns import Columns
from .trace_format import CUDA_DTYPE, GPU_DTYPE, NEST_DTYPE, SAMPLE_DTYPE


@dataclass
class RingWindow:
    """What a ring file kept: times in ns since the header's t0_monotonic_ns."""
    keep_ns: int                 # the ring keeps at least this much of the recent past (0: size alone)
    max_bytes: int               # ring chunks take at most this much of the file
    start_ns: int | None         # the window's start; None when the ring never wrapped (nothing lost)
    end_ns: int | None           # the latest record time in the window
    closed: bool                 # the writer closed the file
    snapshot_ns: int | None      # a copy taken while the writer ran: when
    ring_chunks: int
    kept_chunks: int
    cut: dict                    # records cut for lying before the window, per record kind

    def describe(self) -> str:
        size = f"{self.ring_chunks} ring + {self.kept_chunks} kept chunks"
        rule = f"keeps {self.keep_ns / 1e9:g} s" if self.keep_ns else "size rule only"
        if self.start_ns is None or self.end_ns is None:
            head = f"flight recorder ({rule}, {size}): the ring never wrapped, the whole run is here"
        else:
            span = (self.end_ns - self.start_ns) / 1e9
            head = (f"flight recorder ({rule}, {size}): window of the last {span:.3f} s "
                    f"(from {self.start_ns / 1e9:.3f} s)")
        if self.snapshot_ns is not None:
            head += f"; snapshot taken at {self.snapshot_ns / 1e9:.3f} s while the program ran"
        cut = sum(self.cut.values())
        return head + (f"; {cut} records before the window left out" if cut else "")


@dataclass
class RawTrace:
    """Everything in a trace file, by record type: numpy structured arrays, and for the types
    trace_file.COLUMNAR names (calls, accesses, placements) Columns indexed the same way."""
    path: str
    header: dict
    chunks: np.ndarray          # CHUNK_HEADER_DTYPE, the used chunks in file order
    string_recs: np.ndarray     # STRING_DTYPE
    meta: np.ndarray            # META_DTYPE
    threads: np.ndarray         # THREAD_DTYPE
    backends: np.ndarray        # BACKEND_DTYPE
    buffers: np.ndarray         # BUFFER_DTYPE
    calls: Columns              # CALL_DTYPE (the most numerous types are held as columns)
    accesses: Columns           # ACCESS_DTYPE
    places: Columns             # ACCESS_DTYPE
    clocks: np.ndarray          # CLOCK_DTYPE
    gpu: np.ndarray = field(default_factory=lambda: np.zeros(0, GPU_DTYPE))
    samples: np.ndarray = field(default_factory=lambda: np.zeros(0, SAMPLE_DTYPE))
    nest: np.ndarray = field(default_factory=lambda: np.zeros(0, NEST_DTYPE))
    cuda: np.ndarray = field(default_factory=lambda: np.zeros(0, CUDA_DTYPE))  # CUDA streams mode
    node_reads: Columns | None = None  # ACCESS records flagged ACCESS_PER_NODE (CUDA streams mode)
    strings: dict[int, str] = field(default_factory=dict)
    truncated: bool = False     # the body is not a whole number of chunks (file was cut)
    unknown_records: int = 0    # records with an unknown type byte dropped (strict=False)
    warnings: list[str] = field(default_factory=list)
    damage: list[str] = field(default_factory=list)  # the warnings that say data was lost
    closed: bool = True         # no unused chunks: the writer closed (trimmed) the file
    ring: RingWindow | None = None  # a flight recorder's file: the window it holds (ring.py cuts it)

    @property
    def n_records(self) -> int:
        return sum(len(a) for a in (self.string_recs, self.meta, self.threads, self.backends,
                                    self.buffers, self.calls, self.accesses, self.places,
                                    self.clocks, self.gpu, self.samples, self.cuda))

    def clock(self) -> "TickClock":
        return TickClock.from_trace(self.header, self.clocks)


@dataclass
class TickClock:
    """Converts record times (ticks) to nanoseconds since the header's t0_monotonic_ns.

    Calibration points are the header's (t0_ticks, t0_monotonic_ns) and every CLOCK record's
    (ticks, monotonic_ns). Between two points times are interpolated linearly; outside them
    they are extrapolated with the slope over all points (the header's ns_per_tick when there
    is a single point)."""
    ticks: np.ndarray   # int64, ascending
    ns: np.ndarray      # int64, ns since t0_monotonic_ns, ascending
    slope: np.ndarray   # float64 ns per tick of each segment (len(ticks) - 1)
    edge_slope: float

    @classmethod
    def from_trace(cls, header: dict, clocks: np.ndarray) -> "TickClock":
        t0 = header["t0_monotonic_ns"]
        ticks = np.r_[np.int64(header["t0_ticks"]), clocks["ticks"].astype(np.int64)]
        ns = np.r_[np.int64(0), clocks["monotonic_ns"].astype(np.int64) - np.int64(t0)]
        order = np.lexsort((ns, ticks))
        ticks, ns = ticks[order], ns[order]
        # Keep a strictly increasing chain: a point not later in both clocks is a bad sample.
        keep = np.ones(len(ticks), bool)
        keep[1:] = (ns[1:] > np.maximum.accumulate(ns)[:-1]) & (ticks[1:] > ticks[:-1])
        ticks, ns = ticks[keep], ns[keep]
        slope = np.diff(ns) / np.diff(ticks).astype(np.float64)
        if len(ticks) > 1:
            edge = float(ns[-1] - ns[0]) / float(ticks[-1] - ticks[0])
        else:
            edge = float(header["ns_per_tick"])
            if not np.isfinite(edge) or edge <= 0:
                edge = 1.0  # no usable calibration: take ticks as nanoseconds
        return cls(ticks, ns, slope, edge)

    def to_ns(self, ticks: np.ndarray) -> np.ndarray:
        t = np.asarray(ticks).astype(np.int64)
        n = len(self.ticks)
        if n == 1:
            return self.ns[0] + np.rint((t - self.ticks[0]) * self.edge_slope).astype(np.int64)
        i = np.searchsorted(self.ticks, t, side="right") - 1  # segment; -1 / n-1: outside
        base = np.clip(i, 0, n - 1)
        inside = (i >= 0) & (i < n - 1)
        slope = np.where(inside, self.slope[np.clip(i, 0, n - 2)], self.edge_slope)
        return self.ns[base] + np.rint((t - self.ticks[base]) * slope).astype(np.int64)
