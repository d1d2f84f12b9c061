"""races() over a trace larger than memory, a graph window at a time (window_index.py reads the
windows): in this process (races_in_windows) or one Dask task per window (races_on_dask), the
findings merged into one report.

A race whose later operation lies in a window's context (the CONTEXT_GRAPHS graphs read before
it) is left to the window before (races(own_from_ns=...)). What a window cannot see: a race
between two operations more than CONTEXT_GRAPHS graphs apart. In ggml that would be work left
unsynchronised across whole graph computes; the in-memory analysis (`ggml-trace races
--no-windows`) sees it.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .load import load_raw
from .race_report import FINDING_COLUMNS, RaceReport, findings_frame
from .race_timing import BASES, LISTING_ORDER, VERDICTS, finding_verdict
from .races import races
from .trace_file import display_path
from .window_index import CONTEXT_GRAPHS, WINDOW_RECORDS, TraceIndex, Window, index_trace, plan_windows, read_ahead, read_window


@dataclass
class WindowResult:
    findings: pd.DataFrame
    pairs: pd.DataFrame
    truncated: int
    warnings: list
    damage: list
    records: int


def analyse_window(index: TraceIndex, w: Window, strict: bool = True, raw=None) -> WindowResult:
    """races() of one window; `raw`: the window's records if already read (read_window)."""
    if raw is None:
        raw = read_window(index, w, strict)
    trace = load_raw(raw)
    rep = races(trace, own_from_ns=w.own_ns if w.first_graph > 0 else None)
    findings = rep.findings.copy()
    findings["margin_ns"] = rep.latent_margin_ns  # made NA again below where not latent
    return WindowResult(findings, rep.pairs, rep.truncated, list(trace.warnings), list(trace.damage),
                        int(raw.n_records))


def races_in_windows(path, records: int = WINDOW_RECORDS, context: int = CONTEXT_GRAPHS, strict: bool = True,
                     progress=None) -> tuple[RaceReport, dict]:
    """races() over a trace of any size, a window at a time (the module's docstring).
    Returns the merged report and what was done ({"windows", "graphs", "records", ...})."""
    index = index_trace(path, progress, strict)
    plan = plan_windows(index, records, context)
    results, t_start = [], time.monotonic()
    for w, raw in read_ahead(index, plan, strict):
        results.append(analyse_window(index, w, strict, raw))
        if progress:
            progress("races", w.number + 1, len(plan), time.monotonic() - t_start)
    return _merged(index, plan, results, context)


def races_on_dask(path, address: str | None = None, records: int = WINDOW_RECORDS,
                  context: int = CONTEXT_GRAPHS, strict: bool = True) -> tuple[RaceReport, dict]:
    """races_in_windows with one Dask task per window: on a local cluster, or on the cluster at
    `address` (its workers must see the trace at the same path)."""
    from dask.distributed import Client, LocalCluster

    index = index_trace(path, strict=strict)
    plan = plan_windows(index, records, context)
    cluster = None
    if address is None:
        # One process a core already: each window's load keeps to its worker's one thread.
        cluster = LocalCluster(n_workers=min(len(plan), os.cpu_count() or 1), threads_per_worker=1,
                               processes=True, dashboard_address=None, env={"GGML_TRACE_THREADS": "1"})
    with Client(address or cluster) as client:
        shared = client.scatter(index, broadcast=True)
        futures = client.map(analyse_window, [shared] * len(plan), plan, [strict] * len(plan), pure=False)
        results = client.gather(futures)
    if cluster is not None:
        cluster.close()
    return _merged(index, plan, results, context)


def _merged(index: TraceIndex, plan: list, results: list, context: int) -> tuple[RaceReport, dict]:
    findings = merge_findings([r.findings for r in results])
    pairs = pd.concat([r.pairs for r in results], ignore_index=True) if results else pd.DataFrame()
    report = RaceReport(findings, pairs, index.operations, index.accesses, sum(r.truncated for r in results))
    shown = display_path(index.path)
    warnings = list(dict.fromkeys(w for r in results for w in r.warnings))
    if not index.closed:
        warnings.append(f"{shown}: the trace was not closed: the program crashed, was killed or is still running; "
                        "events after the last recorded one are unknown")
    if index.cut:
        warnings.append(f"{shown}: the file ends inside a chunk: it was cut; what followed is lost")
    info = {"windows": len(plan), "graphs": len(index.graph_ids), "context_graphs": context,
            "records": int(index.n_records.sum()), "largest_window_records": max((r.records for r in results),
                                                                                  default=0),
            "warnings": index.damage + warnings,
            "damage": index.damage + list(dict.fromkeys(d for r in results for d in r.damage))}
    return report, info


FINDING_KEY = ["class"] + [f"{s}_{c}" for s in "ab" for c in ("kind", "backend", "split", "tensor", "mode")]


def merge_findings(frames: list) -> pd.DataFrame:
    """One row per distinct race from the findings of several windows (races()'s own grouping):
    counts add up, per verdict too, and the verdict follows from them as in races()
    (race_timing.finding_verdict); the first and last occurrences are the earliest and latest, and
    the margin (latent only) the smallest. As in races(), the occurrence shown (sides, bytes,
    missing) is the earliest whose verdict is the merged one's, else the first."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return findings_frame()
    df = pd.concat(frames, ignore_index=True)
    key = df[FINDING_KEY].astype(object).where(df[FINDING_KEY].notna(), None)
    df["_key"] = key.apply(tuple, axis=1).factorize()[0]
    df = df.sort_values(["_key", "first_t_ns"], kind="stable")
    g = df.groupby("_key", sort=False)
    n_cols = [f"n_{v}" for v in VERDICTS]
    counts = g[n_cols].sum()
    verdict = pd.Series(np.array(VERDICTS, dtype=object)[finding_verdict(counts.to_numpy(np.int64))],
                        index=counts.index)
    # an occurrence's time is the earlier start of its two operations (races())
    shown_t = np.minimum(df["a_t_begin_ns"], df["b_t_begin_ns"])
    other = df["verdict"].astype(str).to_numpy(object) != verdict.reindex(df["_key"]).to_numpy(object)
    out = (df.assign(_other=other, _t=shown_t)
           .sort_values(["_key", "_other", "_t"], kind="stable").groupby("_key").head(1).set_index("_key"))
    first = g.head(1).set_index("_key")
    last = df.sort_values(["_key", "last_t_ns"], kind="stable").groupby("_key").tail(1).set_index("_key")
    out["count"] = g["count"].sum()
    out[n_cols] = counts
    out["verdict"] = verdict
    out["manifested"] = verdict == "manifested"
    out["inverted"] = g["inverted"].any()
    out["margin_ns"] = g["margin_ns"].min().where(verdict == "latent")
    out["basis"] = g["basis"].agg(lambda b: max(b, key=BASES.index))
    out["first_graph"] = first["first_graph"]
    out["first_t_ns"] = first["first_t_ns"]
    out["last_graph"] = last["last_graph"]
    out["last_t_ns"] = last["last_t_ns"]
    out["_sort_margin"] = out["margin_ns"].fillna(-1)
    # as races(): proven first, then overlapped, then by margin, then by time
    out["_sort_verdict"] = out["verdict"].map({VERDICTS[v]: k for v, k in LISTING_ORDER.items()}).fillna(2)
    out = out.sort_values(["_sort_verdict", "_sort_margin", "first_t_ns"], kind="stable")
    return findings_frame({c: out[c].tolist() for c in FINDING_COLUMNS})
