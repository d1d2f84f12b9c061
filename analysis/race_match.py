"""One race, found again in another trace of the same program (for `ggml-trace force`).

A race's identity across runs is what the program did, not when: its class and, for each side,
the backend, call kind, split index, tensor and access mode -- the key the findings are
deduplicated by (docs/races.md), so a report holds at most one finding per identity. Call ids,
times and buffer addresses change from run to run and are not part of it; the bytes it touched,
as offsets in the buffer, are compared and reported (same_bytes) but do not decide.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .races import RaceReport

SIDE_KEY = ("backend", "kind", "split", "tensor", "mode")


def identity(race: dict) -> tuple:
    """The identity of a finding (a race as in RaceReport.to_json()["races"])."""
    return (race["class"],) + tuple(race[s][k] for s in "ab" for k in SIDE_KEY)


@dataclass
class Recurrence:
    """The race as one run showed it. found: the run has a race with the same identity;
    manifested / inverted / margin_us / verdict / basis: that finding's (docs/races.md;
    manifested only where the times prove it); target_graph: the graph asked about;
    target_manifested: whether the race's occurrence there manifested (None when it has none
    in that graph); same_bytes: whether the occurrence shown touched the same byte range of
    the same buffer type as the original."""

    found: bool
    manifested: bool = False
    inverted: bool = False
    margin_us: float | None = None
    verdict: str | None = None
    basis: str | None = None
    count: int = 0
    target_graph: int | None = None
    target_manifested: bool | None = None
    same_bytes: bool | None = None

    def to_json(self) -> dict:
        return dict(self.__dict__)


def recurrence(race: dict, trace, report: RaceReport, graph: int | None = None) -> Recurrence:
    """Looks for `race` (a finding of another trace) among the findings of `report`, the race
    analysis of `trace`; `graph`: also say whether its occurrence in that graph manifested."""
    want = identity(race)
    match = next((r for r in report.to_json()["races"] if identity(r) == want), None)
    if match is None:
        return Recurrence(False, target_graph=graph)
    out = Recurrence(True, match["manifested"], match["inverted"], match["margin_us"],
                     match["verdict"], match["basis"], match["count"], graph,
                     same_bytes=(match["range"] == race["range"]
                                 and match["buffer_type"] == race["buffer_type"]))
    if graph is not None:
        occ = occurrences(race, trace, report)
        occ = occ[occ["graph"] == graph]
        out.target_manifested = bool(occ["manifested"].any()) if len(occ) else None
    return out


def occurrences(race: dict, trace, report: RaceReport) -> pd.DataFrame:
    """Every occurrence of `race`'s identity in `report` (of `trace`): one row per racing pair
    of calls, columns a_call_id, b_call_id, graph, manifested, inverted, margin_ns."""
    p = report.pairs
    calls = trace.calls[["call_id", "backend", "kind", "split"]]
    for s in "ab":
        side = calls.rename(columns={c: f"{s}_{c}" for c in calls.columns})
        p = p.merge(side, on=f"{s}_call_id", how="left")
    keep = _eq(p["class"], race["class"])
    for s in "ab":
        for k in SIDE_KEY:
            keep = keep & _eq(p[f"{s}_{k}"], race[s][k])
    p = p[keep]
    # The occurrence's graph: the later operation's, else the earlier one's (as in the findings).
    graph = p["b_graph"].fillna(p["a_graph"])
    g = p.assign(graph=graph).groupby(["a_call_id", "b_call_id"], sort=False)
    return g.agg(graph=("graph", "first"), manifested=("manifested", "any"),
                 inverted=("inverted", "any"), margin_ns=("margin_ns", "min")).reset_index()


def _eq(series: pd.Series, value) -> np.ndarray:
    """series == value, elementwise, with None matching the missing values."""
    if value is None:
        return series.isna().to_numpy(bool)
    return (series.astype(object) == value).fillna(False).to_numpy(bool)


def merge_runs(per_run: dict) -> list[dict]:
    """The races of several runs of one program, each race once. `per_run`: {run name: its
    findings in their JSON form (RaceReport.to_json()["races"])}. Each merged race: `race`, the
    finding as the first run where it manifested showed it (else the first where it was found),
    `run` (that run's name) and `number` (its number there, as `ggml-trace races` counts), `runs`
    and `manifested_runs` (names, in the order given), `verdicts` ({verdict: runs}). The races
    found in most runs come first, then those that manifested in most."""
    merged: dict[tuple, dict] = {}
    for name, found in per_run.items():
        for number, race in enumerate(found, 1):
            m = merged.setdefault(identity(race), {"race": race, "run": name, "number": number, "runs": [],
                                                   "manifested_runs": [], "verdicts": {}})
            m["runs"].append(name)
            if race["manifested"]:
                if not m["manifested_runs"]:  # the evidence of a manifested occurrence, where there is one
                    m.update(race=race, run=name, number=number)
                m["manifested_runs"].append(name)
            m["verdicts"][race["verdict"]] = m["verdicts"].get(race["verdict"], 0) + 1
    return sorted(merged.values(), key=lambda m: (-len(m["runs"]), -len(m["manifested_runs"])))
