"""What the times of a racing pair prove (docs/races.md, "Verdicts"): when each operation of the
race analysis ran, how finely that is known, and the verdict of each pair of operations.

Two stages, each a function returning named values: `operation_times` (per operation: its
execution interval, the bounds on its start and end, whether it is a split of many nodes) and
`pair_verdicts` (per racing pair: manifested, overlapped, latent or undetermined, and whether it
was inverted). `timing_words` says, for the operations a finding
shows, what was known of their time and, where nothing was, why.

A verdict of "manifested" is a proof that the conflicting accesses happened out of order: the later
operation ran entirely before the earlier one (inverted), so every byte was overwritten before it was
read (or read before it was written). Two operations proven to overlap prove no order of their
accesses: which bytes each had touched when is not recorded (a split's write lies somewhere inside its
call, after the call's own set-up; a copy moves its bytes over its whole interval), and runs whose
result was right overlapped as often as wrong ones (the #23321 scenario on lavapipe: 6 of 30 correct
runs overlapped). That is "overlapped".
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .arrays import lookup
from .kinds import HOST_WRITE_KINDS
from .load import best_device_intervals

# verdict: what the times prove (codes: positions; "overlapped" appended so that codes stay).
VERDICTS = ["manifested", "latent", "undetermined", "overlapped"]
MANIFESTED, LATENT, UNDETERMINED, OVERLAPPED = range(4)
# the order findings are listed in (by code): proven first, then overlapped, then the rest (by margin)
LISTING_ORDER = {MANIFESTED: 0, OVERLAPPED: 1}
# basis: what the times of the pair's operations are — "device" (each async operation measured on
# its device, or a host call), "events" (the event watcher's estimates), "bounds" (an operation
# known only to lie inside an interval: Vulkan's markers), "host" (an async operation with no
# device time at all: only its enqueue call is known). From most to least certain: a pair's is
# the max.
BASES = ["device", "events", "bounds", "host"]
DEVICE, EVENTS, BOUNDS, HOST = range(4)
# The event watcher (CUDA/HIP/MUSA, docs/gpu.md) sees an event pass when its thread wakes, and
# estimates most starts from the previous operation's end: on the H200s its ends were within
# 62-89 us of CUPTI's at p95, its starts further off. Each time it gives is taken as known to
# within this much, so a verdict that rests on it must clear it (basis "events").
EVENTS_TOLERANCE_NS = 100_000
_INF = np.iinfo(np.int64).max
# where a device interval came from (trace.device's source), as the words name it
_SOURCE_WORDS = {"device": "the virtual device's own record", "cupti": "CUPTI",
                 "events": f"the event watcher (±{EVENTS_TOLERANCE_NS // 1000} us)",
                 "markers": "marker bounds"}
_SOURCES = list(_SOURCE_WORDS)


@dataclass(frozen=True)
class OperationTimes:
    """Per operation of the analysis (arrays of one length): its execution interval (`begin`,
    `end`: its device interval if any, else its host call), whether that is `measured` on a device,
    `basis` (BASES codes), `source` (code in _SOURCES of its device interval, -1: none),
    `many_nodes` (a split whose accesses lie each in one of its many nodes: the words say so), and
    bounds on its start and end (ns; _INF: unbounded)."""
    begin: np.ndarray
    end: np.ndarray
    measured: np.ndarray
    basis: np.ndarray
    source: np.ndarray
    many_nodes: np.ndarray
    s_lo: np.ndarray
    s_hi: np.ndarray
    e_lo: np.ndarray
    e_hi: np.ndarray


def operation_times(device: pd.DataFrame | None, call_id: np.ndarray, kind: np.ndarray, kind_names: np.ndarray,
                    t_begin: np.ndarray, t_end: np.ndarray, enqueued: np.ndarray, nodes: np.ndarray) -> OperationTimes:
    """The times of each operation: `call_id`, `kind` (codes into `kind_names`), the host call
    (`t_begin`, `t_end`), whether it was `enqueued` on an async backend's queue and its `nodes`
    (a split's node count; other kinds: anything), and `device` (trace.device)."""
    n = len(call_id)
    begin, end = t_begin.astype(np.int64).copy(), t_end.astype(np.int64).copy()
    measured = np.zeros(n, bool)
    source = np.full(n, -1, np.int64)
    basis = np.where(enqueued, HOST, DEVICE)
    # the program's own store into an input happened somewhere in its window (docs/integrated.md)
    basis[np.isin(kind, _codes(kind_names, HOST_WRITE_KINDS))] = BOUNDS
    if device is not None and len(device):
        dev = best_device_intervals(device)
        src = pd.Categorical(dev["source"].astype(str), categories=_SOURCES).codes.astype(np.int64)
        d = pd.DataFrame({"call_id": dev["call_id"].to_numpy(np.uint64), "b": dev["t_begin"].to_numpy(np.int64),
                          "e": dev["t_end"].to_numpy(np.int64), "src": src})
        d = d.groupby("call_id", sort=False).agg(b=("b", "min"), e=("e", "max"), src=("src", "max"))
        rows = lookup(call_id, d.index.to_numpy(np.uint64))
        ok = rows >= 0
        r = rows[ok]
        begin[r] = d["b"].to_numpy(np.int64)[ok]
        end[r] = d["e"].to_numpy(np.int64)[ok]
        measured[r] = True
        source[r] = d["src"].to_numpy(np.int64)[ok]
        basis[r] = np.select([source[r] == _SOURCES.index("markers"), source[r] == _SOURCES.index("events")],
                             [BOUNDS, EVENTS], DEVICE)
    many_nodes = (kind == _code(kind_names, "graph_compute")) & (nodes > 1)
    exact = (basis == DEVICE) | (basis == EVENTS)
    s_lo, e_hi = begin.copy(), np.where(basis == HOST, _INF, end)
    s_hi = np.where(exact, begin, e_hi)  # it started no later than it ended
    e_lo = np.where(exact, end, s_lo)    # and ended no earlier than it started
    return OperationTimes(begin, end, measured, basis, source, many_nodes, s_lo, s_hi, e_lo, e_hi)


@dataclass(frozen=True)
class PairVerdicts:
    """Per pair of operations (a first in program order, b after it): `verdict` (VERDICTS codes),
    `basis` (the weaker of the two), `inverted` (b ran entirely before a), `margin_ns` (latent: the
    proven gap; else 0)."""
    verdict: np.ndarray
    basis: np.ndarray
    inverted: np.ndarray
    margin_ns: np.ndarray


def pair_verdicts(times: OperationTimes, a: np.ndarray, b: np.ndarray) -> PairVerdicts:
    """What the times prove of each pair (a[i], b[i]) of operations (indices into `times`). A
    verdict is given only where the bounds prove it; times from the event watcher must clear its
    tolerance once per such operation."""
    tol = np.where(times.basis == EVENTS, EVENTS_TOLERANCE_NS, 0)
    slack = tol[a] + tol[b]
    # b had ended before a began: every access of b preceded every access of a
    inverted = times.e_hi[b] < _INF - slack
    inverted &= times.e_hi[b] + np.where(inverted, slack, 0) <= times.s_lo[a]
    # a had not ended when b began: their intervals overlapped (or b ran first)
    overlapped = times.e_lo[a] - slack > times.s_hi[b]
    latent = times.e_hi[a] < _INF - slack
    latent &= times.e_hi[a] + np.where(latent, slack, 0) <= times.s_lo[b]
    verdict = np.select([inverted, overlapped, latent], [MANIFESTED, OVERLAPPED, LATENT], UNDETERMINED)
    margin = np.where(latent, times.s_lo[b] - np.minimum(times.e_hi[a] + slack, times.s_lo[b]), 0)
    return PairVerdicts(verdict, np.maximum(times.basis[a], times.basis[b]), inverted, margin)


def finding_verdict(counts: np.ndarray) -> np.ndarray:
    """The verdict of findings from their occurrences' counts per verdict (rows: findings, columns:
    VERDICTS): manifested if any occurrence proves it, else overlapped if any overlapped, latent if
    every one is, else undetermined."""
    return np.select([counts[:, MANIFESTED] > 0, counts[:, OVERLAPPED] > 0, counts.sum(axis=1) == counts[:, LATENT]],
                     [MANIFESTED, OVERLAPPED, LATENT], UNDETERMINED)


def timing_words(times: OperationTimes, o: np.ndarray, backends: list, nodes: np.ndarray, untimed: dict) -> list:
    """For operations `o` (with their backend names and node counts): what is known of
    when each ran, in words, and where nothing is, why. `untimed`: {backend name: why its work
    has no device time} (untimed_reasons)."""
    out = []
    for i, op in enumerate(o.tolist()):
        be, basis = backends[i], int(times.basis[op])
        inside = (f"a split of {int(nodes[i])} nodes: each access lies somewhere inside"
                  if times.many_nodes[op] else "")
        if basis == HOST:
            out.append(f"no device time: {untimed.get(be) or 'recorded without --device-timing'}")
        elif times.measured[op]:
            how = _SOURCE_WORDS.get(_SOURCES[int(times.source[op])], "a device record")
            if basis == BOUNDS:
                out.append(f"{how}: it ran somewhere inside [{times.begin[op] / 1e3:.1f}, {times.end[op] / 1e3:.1f}] us")
            else:
                out.append(f"on its device, from {how}" + (f" ({inside})" if inside else ""))
        elif basis == BOUNDS:
            out.append("the program's store, somewhere inside the window it was seen in")
        else:
            out.append("the host call" + (f" ({inside})" if inside else ""))
    return out


def untimed_reasons(meta: dict, backends: pd.DataFrame, labels: list) -> dict:
    """{backend name: why its queued work has no device time} from the trace's META: device timing
    off, no safe observer for that backend, or operations left untimed (more in flight than its
    observer holds). `labels`: the names of `backends`' rows, as the frames use them."""
    if not any(k.startswith("device_timing.mode.") for k in meta) and "GGML_TRACE_DEVICE_TIMING=1" not in meta.get(
            "env", ""):
        return {}
    out = {}
    for idx, name in zip(backends["backend"].tolist(), labels):
        mode = meta.get(f"device_timing.mode.{idx}")
        untimed = meta.get(f"device_timing.untimed.{idx}")
        if mode is None:
            out[name] = (f"device timing was on, but {name} never chose an observer (no operation of it was timed: "
                         "a backend without events, or calls made outside the hooked vtables)")
        elif mode == "none":
            out[name] = f"device timing was on, but {name} has no observer that is safe to use (device_timing.mode none)"
        elif untimed:
            out[name] = (f"device timing was on ({mode}), but {untimed} of {name}'s operations went untimed: more were "
                         "in flight than its observer holds (device_timing.untimed)")
    return out


def _codes(names: np.ndarray, wanted) -> list:
    return [i for i, k in enumerate(names.tolist()) if k in wanted]


def _code(names: np.ndarray, kind: str) -> int:
    c = _codes(names, [kind])
    return c[0] if c else -2
