"""An Nsight-Systems-style timeline of a loaded trace, as a plotly figure (see docs/timeline.md).

Rows, top to bottom: per process one row per host thread (more lanes when its calls nest),
then per backend its execution row (device-side intervals from `trace.device` when the backend
is async, else the split's host call) and one copies row per direction, then counter rows.

Scale: bars are WebGL line segments (go.Scattergl, NaN separators). The figure holds a
level-of-detail view of its initial range: a row with at most ROW_DETAIL intervals in view is
drawn exactly, with hover and labels; a busier row is drawn as per-pixel aggregates (occupied
time, count, dominant colour). `fig.write_html()` / `to_html()` also embed every interval in a
compact store (typed columns, gzip, base64) and a small script that redraws the view the same
way on every zoom or pan, so a file with 10^6 intervals stays small and interactive.

Every string that comes from the trace is HTML-escaped before it reaches the figure: plotly
renders labels, ticks and hover text as (a subset of) HTML. The intervals, rows and arrows come
from the model in analysis/intervals.py, their text from analysis/view_text.py; the exports share
both.
"""
from __future__ import annotations

import base64
import json
import os
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from .arrays import expand_ranges
from .intervals import ROW_HEADER, ROW_COPIES, ROW_KERNELS, IntervalModel, races_as_list
from .kinds import KIND_COLORS, OTHER_COLOR
from .stalls import stalls as stalls_of, words as stall_words
from .view_text import esc, fmt_us, StringTables, hover_text, bar_labels

ROW_DETAIL = 2000      # a row with more intervals than this in view is aggregated
LOD_BINS = 1000        # aggregation bins across the view
ARROW_LIMIT = 2000     # arrows drawn when at most this many are in view
LABEL_MIN_PX = 90      # a bar gets a text label when at least this wide
LABEL_LIMIT = 600
HOVER_STEP_PX = 36     # hover points along a bar (hoverdistance is 20 px)
PLOT_WIDTH_PX = 1300   # plot width assumed when the view is computed in Python
ROW_PX = 22            # height of one row
STORE_VERSION = 1

SPLIT_PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#B279A2", "#EECA3B", "#72B7B2", "#FF9DA6",
                 "#9D755D", "#79706E", "#17BECF", "#BCBD22", "#8C564B"]
RACE_COLOR = "#E41A1C"
ARROW_COLORS = ["rgba(90,90,90,0.65)", "rgba(214,120,0,0.85)"]  # submission, event
ARROW_NAMES = ["submission → device", "event record → wait"]


# -- colour classes ------------------------------------------------------------------------------

def _classes(model: IntervalModel, color_by: str):
    iv = model.iv
    if color_by == "kind":
        present = np.unique(iv["kind"].to_numpy())
        present = present[present >= 0]
        names = [model.kinds[k] for k in present]
        lut = np.full(len(model.kinds) + 1, 0, np.int64)
        lut[present] = np.arange(len(present))
        cls = lut[iv["kind"].to_numpy()]
        colors = [KIND_COLORS.get(n, OTHER_COLOR) for n in names]
        return cls, names, colors
    if color_by == "split":
        sp = iv["split"].to_numpy()
        top = int(sp.max()) if len(sp) else -1
        k = len(SPLIT_PALETTE)
        if top < k:
            names = [f"split {i}" for i in range(max(top + 1, 0))]
            cls = np.where(sp >= 0, sp, len(names))
        else:
            names = [f"split ≡ {i} (mod {k})" for i in range(k)]
            cls = np.where(sp >= 0, sp % k, k)
        colors = [SPLIT_PALETTE[i % k] for i in range(len(names))]
        return cls.astype(np.int64), names + ["no split"], colors + [OTHER_COLOR]
    raise ValueError(f"color_by must be 'kind' or 'split', not {color_by!r}")


# -- races -----------------------------------------------------------------------------------------

def _race_layer(model: IntervalModel, races: list[dict]):
    """Shapes, annotations and a hover trace for each race: both operations outlined in red,
    a dotted link between them, the overlap shaded when the race manifested."""
    iv = model.iv
    cid = iv["call_id"].to_numpy(np.uint64)
    dev = iv["device"].to_numpy()
    shapes, ann, hx, hy, ht = [], [], [], [], []
    for i, r in enumerate(races, 1):
        ends = []
        for side in ("a", "b"):
            s = r.get(side) or {}
            t0 = float(s.get("t_begin_us") or 0) / 1e6
            t1 = float(s.get("t_end_us") or 0) / 1e6
            want = s.get("call_id")
            hits = np.zeros(len(iv), bool)
            if want is not None:
                hits = (cid == np.uint64(int(want))) & (dev == bool(s.get("device")))
            rows = sorted(set(iv["row"].to_numpy()[hits].tolist()))
            if not rows:
                continue
            for row in rows:
                shapes.append(dict(type="rect", xref="x", yref="y", x0=t0, x1=max(t1, t0),
                                   y0=row - 0.45, y1=row + 0.45, line=dict(color=RACE_COLOR,
                                   width=2.5), fillcolor="rgba(228,26,28,0.35)", layer="above"))
            ends.append(((t0 + t1) / 2, rows[0], t0, t1, s))
        if len(ends) == 2:
            (xa, ya, a0, a1, _), (xb, yb, b0, b1, _) = ends
            shapes.append(dict(type="line", xref="x", yref="y", x0=xa, y0=ya, x1=xb, y1=yb,
                               line=dict(color=RACE_COLOR, width=2, dash="dot"), layer="above"))
            if r.get("manifested"):
                lo, hi = max(a0, b0), min(a1, b1)
                if hi >= lo:
                    shapes.append(dict(type="rect", xref="x", yref="y", x0=lo, x1=hi,
                                       y0=min(ya, yb) - 0.5, y1=max(ya, yb) + 0.5,
                                       line=dict(width=0), fillcolor="rgba(228,26,28,0.18)",
                                       layer="below"))
            ann.append(dict(x=xb, y=yb, xref="x", yref="y", text=esc(
                f"race {i}: {r.get('class')} ({r.get('verdict') or ('manifested' if r.get('manifested') else 'latent')})"),
                showarrow=False, yshift=-13, font=dict(color=RACE_COLOR, size=11),
                bgcolor="rgba(255,255,255,0.8)"))
        desc = _race_text(i, r)
        for x, y, *_ in ends:
            hx.append(x)
            hy.append(y)
            ht.append(desc)
    trace = go.Scatter(x=hx, y=hy, mode="markers", name="races", hovertext=ht,
                       hoverinfo="text", marker=dict(symbol="diamond", size=11, color=RACE_COLOR,
                                                     line=dict(color="white", width=1)),
                       meta="races", showlegend=bool(hx))
    return shapes, ann, trace


STALL_COLORS = {True: "#59A14F", False: "#F28E2B"}  # needed, avoidable
STALL_LAYER_MAX = 200  # the longest waits drawn; the rest are in `ggml-trace stalls`


def _stall_layer(model: IntervalModel, st: pd.DataFrame):
    """The host's longest waits (analysis/stalls.py): each outlined on its thread's row, green when
    an access needed it, orange when it ordered nothing; a hover point says what it waited for."""
    shapes, hx, hy, ht = [], [], [], []
    iv = model.iv
    if len(st) and len(iv):
        waits = st[st["kind"].isin(["synchronize", "event_synchronize"])]
        waits = waits.sort_values("blocked_ns", ascending=False, kind="stable").head(STALL_LAYER_MAX)
        host = iv[~iv["device"].to_numpy()]
        where = dict(zip(host["call_id"].to_numpy(np.uint64).tolist(),
                         zip(host["row"].tolist(), host["t0"].tolist(), host["t1"].tolist())))
        for r in waits.to_dict("records"):
            if int(r["call_id"]) not in where:
                continue  # outside the drawn window or rows
            row, b, e = where[int(r["call_id"])]
            needed = bool(r["needed"])
            x0, x1 = b / 1e9, e / 1e9
            shapes.append(dict(type="rect", xref="x", yref="y", x0=x0, x1=x1, y0=row - 0.48, y1=row + 0.48,
                               line=dict(color=STALL_COLORS[needed], width=2, dash="solid" if needed else "dash"),
                               fillcolor="rgba(0,0,0,0)", layer="above"))
            hx.append((x0 + x1) / 2)
            hy.append(row)
            ht.append(esc(f"host blocked {r['blocked_ns'] / 1e3:,.1f} µs at {r['boundary']}: {stall_words(r)}"))
    trace = go.Scatter(x=hx, y=hy, mode="markers", name="host stalls", hovertext=ht, hoverinfo="text",
                       marker=dict(symbol="square-open", size=9, color="#F28E2B"), meta="stalls",
                       showlegend=bool(hx))
    return shapes, trace


def _race_text(i: int, r: dict) -> str:
    def side(s):
        s = s or {}
        return esc(f"{s.get('backend')} {s.get('kind')} graph {s.get('graph')} split "
                   f"{s.get('split')} {s.get('mode')}s {s.get('tensor')} (thread "
                   f"{s.get('thread')}{', on the device' if s.get('device') else ''}) "
                   f"[{s.get('t_begin_us')}, {s.get('t_end_us')}] µs")
    rng = r.get("range") or [None, None]
    from .races import verdict_words
    timing = verdict_words(r)
    return (f"<b>race {i}: {esc(r.get('class'))}</b> ×{esc(r.get('count'))}<br>{esc(timing)}"
            f"<br>a: {side(r.get('a'))}<br>b: {side(r.get('b'))}"
            f"<br>buffer {esc(r.get('buffer'))} bytes [{esc(rng[0])}, {esc(rng[1])})"
            f"<br>{_wrap(esc(r.get('missing') or ''))}")


def _wrap(s: str, width: int = 100) -> str:
    words, lines, cur = s.split(" "), [], ""
    for w in words:
        if cur and len(cur) + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    return "<br>".join(lines + [cur])


# -- the level-of-detail view ---------------------------------------------------------------------

def _view(model: IntervalModel, tb: StringTables, cls: np.ndarray, x0: int, x1: int,
          width_px: int = PLOT_WIDTH_PX) -> dict:
    """The level-of-detail view of [x0, x1] ns: per class the segments to draw, hover points,
    labels and arrows. Mirrors the script in the HTML (TIMELINE_JS)."""
    iv = model.iv
    n_rows = len(model.rows)
    span = max(x1 - x0, 1)
    px = span / width_px  # ns per pixel
    t0, t1 = iv["t0"].to_numpy(), iv["t1"].to_numpy()
    row = iv["row"].to_numpy()
    vis = (t1 >= x0) & (t0 <= x1)
    counts = np.bincount(row[vis], minlength=n_rows)
    exact_row = counts <= ROW_DETAIL
    ex = vis & exact_row[row]
    ag = vis & ~exact_row[row]
    n_cls = int(cls.max()) + 1 if len(cls) else 0
    segs = []  # (cls, b, e, row) arrays

    # exact rows
    e_idx = np.flatnonzero(ex)
    eb, ee = t0[e_idx], np.maximum(t1[e_idx], t0[e_idx] + px)
    segs.append((cls[e_idx], eb, ee, row[e_idx]))
    sub = iv.iloc[e_idx]
    hover_txt = hover_text(sub, tb).to_numpy(dtype=object)
    cb, ce = np.maximum(eb, x0), np.minimum(ee, x1)
    rep, hx = _hover_points(cb, ce, px)
    hy = row[e_idx][rep]
    ht = hover_txt[rep]
    wide = np.flatnonzero((ce - cb) >= LABEL_MIN_PX * px)[:LABEL_LIMIT]
    # labels are drawn by WebGL (above the bars; plain text, no HTML): raw strings
    raw = getattr(tb, "raw", tb)
    labels = bar_labels(sub.iloc[wide], raw).to_numpy(dtype=object) if len(wide) else []
    lx = (cb[wide] + ce[wide]) / 2
    ly = row[e_idx][wide]
    # clip label text to the bar width (~6 px per character)
    maxc = np.maximum(((ce[wide] - cb[wide]) / px / 6.0).astype(np.int64) - 1, 1)
    labels = [s if len(s) <= m else s[: max(m - 1, 1)] + "…" for s, m in zip(labels, maxc.tolist())]

    # aggregated rows
    agg_hx, agg_hy, agg_ht = [], [], []
    a_idx = np.flatnonzero(ag)
    if len(a_idx):
        a_rows = np.unique(row[a_idx])
        nb = LOD_BINS
        w = span / nb
        rpos = np.searchsorted(a_rows, row[a_idx])
        s = (np.clip(t0[a_idx], x0, x1) - x0) / w
        e = (np.clip(t1[a_idx], x0, x1) - x0) / w
        c = cls[a_idx]
        R, C = len(a_rows), n_cls
        gk = rpos * C + c
        fs = np.minimum(np.floor(s).astype(np.int64), nb)
        fe = np.minimum(np.floor(e).astype(np.int64), nb)
        size = R * C * (nb + 1)
        ns_ = np.bincount(gk * (nb + 1) + fs, minlength=size).reshape(R, C, nb + 1)
        ss_ = np.bincount(gk * (nb + 1) + fs, weights=s, minlength=size).reshape(R, C, nb + 1)
        ne_ = np.bincount(gk * (nb + 1) + fe, minlength=size).reshape(R, C, nb + 1)
        se_ = np.bincount(gk * (nb + 1) + fe, weights=e, minlength=size).reshape(R, C, nb + 1)
        k = np.arange(nb + 1)
        # F(k) = sum_{s<k}(k-s) - sum_{e<k}(k-e): covered length before k, in bins
        cns = np.concatenate([np.zeros((R, C, 1)), np.cumsum(ns_, 2)[:, :, :-1]], 2)
        css = np.concatenate([np.zeros((R, C, 1)), np.cumsum(ss_, 2)[:, :, :-1]], 2)
        cne = np.concatenate([np.zeros((R, C, 1)), np.cumsum(ne_, 2)[:, :, :-1]], 2)
        cse = np.concatenate([np.zeros((R, C, 1)), np.cumsum(se_, 2)[:, :, :-1]], 2)
        F = (k * cns - css) - (k * cne - cse)
        busy = np.diff(F, axis=2)                       # (R, C, nb)
        started = np.cumsum(ns_, 2)[:, :, :nb]          # starts before bin end
        ended = cne[:, :, :nb]                          # ends before bin start
        cnt = (started - ended).sum(1)                  # (R, nb) intervals touching the bin
        occ = cnt > 0
        dom = np.argmax(busy + 1e-9 * (started - ended), axis=1)  # (R, nb)
        tot_busy = busy.sum(1)
        # runs of occupied bins with one dominant class
        flat_occ = occ.ravel()
        flat_dom = np.where(flat_occ, dom.ravel(), -1)
        brk = np.ones(R * nb, bool)
        brk[1:] = (flat_dom[1:] != flat_dom[:-1]) | (np.arange(1, R * nb) % nb == 0)
        starts = np.flatnonzero(brk)
        lens = np.diff(np.r_[starts, R * nb])
        keep = flat_dom[starts] >= 0
        starts, lens = starts[keep], lens[keep]
        rr, kb = starts // nb, starts % nb
        rb = x0 + kb * w
        re_ = x0 + (kb + lens) * w
        segs.append((flat_dom[starts], rb, re_, a_rows[rr]))
        # hover per run: count, occupancy
        csum_cnt = np.r_[0, np.cumsum(cnt.ravel())]
        csum_busy = np.r_[0, np.cumsum(tot_busy.ravel())]
        n_in = csum_cnt[starts + lens] - csum_cnt[starts]
        frac = (csum_busy[starts + lens] - csum_busy[starts]) / lens
        cname = np.array(tb.classes + [""], dtype=object)[flat_dom[starts]]
        rlab = np.array(tb.rows, dtype=object)[a_rows[rr]]
        txt = ("<b>" + pd.Series(rlab, dtype=object) + "</b><br>" + pd.Series(
            np.round(100 * np.clip(frac, 0, 1)).astype(np.int64)).astype(str)
            + "% busy · mostly " + pd.Series(cname, dtype=object)
            + "<br>" + fmt_us(rb) + " → " + fmt_us(re_)
            + "<br>about " + pd.Series(n_in).astype(np.int64).map("{:,}".format)
            + " interval-bins (zoom in for each interval)").to_numpy(dtype=object)
        rep, agg_hx = _hover_points(rb, re_, px)
        agg_hy = a_rows[rr][rep]
        agg_ht = txt[rep]

    # arrows among exact rows
    ar = model.arrows
    arrows: dict[str, list] = {"x0": [], "y0": [], "x1": [], "y1": [], "type": []}
    hidden_arrows = 0
    if len(ar):
        a0, a1 = ar["t0"].to_numpy(), ar["t1"].to_numpy()
        lo, hi = np.minimum(a0, a1), np.maximum(a0, a1)
        r0, r1 = ar["r0"].to_numpy().astype(np.int64), ar["r1"].to_numpy().astype(np.int64)
        inv = (hi >= x0) & (lo <= x1) & exact_row[r0] & exact_row[r1]
        if inv.sum() <= ARROW_LIMIT:
            arrows = {"x0": a0[inv], "y0": r0[inv], "x1": a1[inv], "y1": r1[inv],
                      "type": ar["type"].to_numpy()[inv]}
        else:
            hidden_arrows = int(inv.sum())
    cb_all = np.concatenate([s[0] for s in segs]) if segs else np.zeros(0, np.int64)
    return {
        "segs": (cb_all, np.concatenate([s[1] for s in segs]), np.concatenate([s[2] for s in segs]),
                 np.concatenate([s[3] for s in segs])),
        "hover": (np.concatenate([hx, np.asarray(agg_hx, np.float64)]),
                  np.concatenate([hy, np.asarray(agg_hy, np.int64)]),
                  np.concatenate([ht, np.asarray(agg_ht, dtype=object)])),
        "labels": (lx, ly, labels),
        "arrows": arrows,
        "hidden_arrows": hidden_arrows,
        "exact": int(len(e_idx)),
        "aggregated_rows": int(len(np.unique(row[a_idx]))) if len(a_idx) else 0,
    }


def _hover_points(b: np.ndarray, e: np.ndarray, px: float):
    """Hover anchors spread along each bar [b, e], one every HOVER_STEP_PX pixels (1 to 200 a
    bar): (index of the bar of each point, x of each point)."""
    npts = np.clip(np.ceil((e - b) / (HOVER_STEP_PX * px)), 1, 200).astype(np.int64)
    rep = np.repeat(np.arange(len(b)), npts)
    within = expand_ranges(np.zeros_like(npts), npts)  # 0, 1, ... along each bar
    return rep, b[rep] + (e - b)[rep] * (within + 0.5) / npts[rep]


def _segments_xy(b: np.ndarray, e: np.ndarray, r: np.ndarray):
    """(begin, end, row) -> x, y arrays for one line trace: b0 e0 NaN b1 e1 NaN ..."""
    n = len(b)
    x = np.empty(3 * n, np.float64)
    y = np.empty(3 * n, np.float32)
    x[0::3], x[1::3], x[2::3] = b / 1e9, e / 1e9, np.nan
    y[0::3], y[1::3], y[2::3] = r, r, np.nan
    return x, y


# -- the figure ------------------------------------------------------------------------------------

class TimelineFigure(go.Figure):
    """A plotly Figure with the trace's intervals attached: `write_html` and `to_html` write a
    self-contained page whose view is recomputed in the browser on every zoom (offline:
    plotly.js is embedded by default)."""

    def to_html(self, full_html: bool = True, include_plotlyjs=True, div_id=None,
                **_ignored) -> str:
        return timeline_html(self, full_html=full_html, include_plotlyjs=include_plotlyjs,
                             div_id=div_id)

    def write_html(self, file, full_html: bool = True, include_plotlyjs=True, div_id=None,
                   **_ignored):
        text = timeline_html(self, full_html=full_html, include_plotlyjs=include_plotlyjs,
                             div_id=div_id)
        if hasattr(file, "write"):
            file.write(text)
        else:
            with open(file, "w", encoding="utf-8") as f:
                f.write(text)


def timeline(trace, window=None, graphs=None, backends=None, color_by: str = "kind",
             races=None, zoom=None, title: str | None = None, stalls=None) -> TimelineFigure:
    """The trace as an Nsight-style timeline (plotly Figure; displays inline in Jupyter).

    window: (start_us, end_us) since the trace start: only intervals that overlap it are kept.
    graphs: an int, (first, last) inclusive or "A:B": only those scheduler graphs (and the
        calls with no graph that fall in their time span).
    backends: a name or names ("CPU", "VDEV0", an RPC device "RPC0"): only their rows, and on
        thread rows their calls and calls to no backend.
    color_by: "kind" (the call kind) or "split" (the split index).
    races: None runs analysis.races(trace) when that module exists; False draws none; or a race
        report, its to_json() dict, or that dict's "races" list.
    zoom: (start_us, end_us): the initial view, without dropping anything outside it.
    stalls: None runs analysis.stalls.stalls(trace) and outlines the host's longest waits (green:
        needed, orange: avoidable); False draws none; or a stalls frame.
    """
    model = IntervalModel(trace, window=window, graphs=graphs, backends=backends)
    cls, class_names, colors = _classes(model, color_by)
    tb = StringTables(model, class_names)
    tb.raw = StringTables(model, class_names, esc=str)
    race_list = races_as_list(trace, races)
    lo, hi = model.window
    if len(model.iv) and window is None and graphs is None:  # the span with activity
        a, b = int(model.iv["t0"].min()), int(model.iv["t1"].max())
        pad = (b - a) // 50
        lo, hi = max(a - pad, 0), b + pad
    if zoom is not None:
        lo = int(round(float(zoom[0]) * 1000))
        hi = int(round(float(zoom[1]) * 1000))
    hi = max(hi, lo + 1)
    v = _view(model, tb, cls, lo, hi)
    n_rows = len(model.rows)
    width = max(ROW_PX - 8, 4)

    traces = []
    # static layers first (drawn below the dynamic ones in WebGL order)
    for c in model.counter_rows["series"]:
        hover = len(c["value"]) <= 20000
        traces.append(go.Scattergl(
            x=c["t"] / 1e9, y=c["y"], mode="lines", line=dict(width=1.2, color="#444"),
            name=esc(c["name"]), showlegend=False, meta="static",
            hovertext=[esc(f"{c['name']}: {x:g}") for x in c["value"].tolist()] if hover else None,
            hoverinfo="text" if hover else "skip"))
    c_all, b_all, e_all, r_all = v["segs"]
    for ci, (name, color) in enumerate(zip(tb.classes, colors)):
        m = c_all == ci
        x, y = _segments_xy(b_all[m], e_all[m], r_all[m])
        traces.append(go.Scattergl(x=x, y=y, mode="lines", name=name, legendgroup=name,
                                   line=dict(color=color, width=width), hoverinfo="skip",
                                   connectgaps=False, meta=f"bars:{ci}"))
    ar = v["arrows"]
    for at in (0, 1):
        m = np.asarray(ar["type"]) == at
        x0a, x1a = np.asarray(ar["x0"], np.float64)[m], np.asarray(ar["x1"], np.float64)[m]
        y0a, y1a = np.asarray(ar["y0"], np.float64)[m], np.asarray(ar["y1"], np.float64)[m]
        x = np.empty(3 * len(x0a))
        y = np.empty(3 * len(x0a), np.float32)
        x[0::3], x[1::3], x[2::3] = x0a / 1e9, x1a / 1e9, np.nan
        y[0::3], y[1::3], y[2::3] = y0a, y1a, np.nan
        traces.append(go.Scattergl(x=x, y=y, mode="lines", name=ARROW_NAMES[at],
                                   line=dict(color=ARROW_COLORS[at], width=1.2),
                                   hoverinfo="skip", meta=f"arrows:{at}",
                                   visible=True, showlegend=True))
        head_y = y1a - np.sign(y1a - y0a) * 0.3
        traces.append(go.Scattergl(x=x1a / 1e9, y=head_y, mode="markers", showlegend=False,
                                   legendgroup=ARROW_NAMES[at], hoverinfo="skip",
                                   marker=dict(symbol=np.where(y1a >= y0a, "triangle-down",
                                                               "triangle-up").tolist()
                                               if len(y1a) else "triangle-down",
                                               size=7, color=ARROW_COLORS[at]),
                                   meta=f"heads:{at}"))
    hx, hy, ht = v["hover"]
    traces.append(go.Scattergl(x=hx / 1e9, y=hy.astype(np.float32), mode="markers",
                               hovertext=ht, hoverinfo="text", showlegend=False, name="",
                               marker=dict(size=ROW_PX - 4, opacity=0, color="#000"),
                               meta="hover"))
    lx, ly, lt = v["labels"]
    traces.append(go.Scattergl(x=np.asarray(lx, np.float64) / 1e9,
                               y=np.asarray(ly, np.float32), mode="text", text=list(lt),
                               textposition="middle center",
                               textfont=dict(size=10, color="#111"), hoverinfo="skip",
                               showlegend=False, name="", meta="labels"))
    shapes, ann, race_trace = _race_layer(model, race_list)
    traces.append(race_trace)
    if stalls is not False:
        st = stalls_of(trace) if stalls is None else stalls
        stall_shapes, stall_trace = _stall_layer(model, st)
        shapes += stall_shapes
        traces.append(stall_trace)

    # row bands and headers
    rt = model.rows["rtype"].to_numpy()
    for r in np.flatnonzero(rt == ROW_HEADER).tolist():
        shapes.append(dict(type="rect", xref="paper", yref="y", x0=0, x1=1, y0=r - 0.5,
                           y1=r + 0.5, fillcolor="rgba(60,80,120,0.08)", line=dict(width=0),
                           layer="below"))
    ticktext = [f"<b>{lab}</b>" if t == ROW_HEADER else lab for lab, t in zip(tb.rows, rt)]
    name = esc(os.path.basename(getattr(trace, "display_path", None)
                                or str(getattr(trace, "path", "") or "trace")))
    n_total = int(len(model.iv))
    note = []
    if v["aggregated_rows"]:
        note.append(f"{v['aggregated_rows']} busy rows aggregated: zoom in for each interval")
    if v["hidden_arrows"]:
        note.append(f"{v['hidden_arrows']:,} arrows hidden: zoom in")
    head = title if title is not None else (f"{name} — {n_total:,} intervals, {n_rows} rows"
                                            + (f", {len(race_list)} races" if race_list else ""))
    banner = trace.banner() if hasattr(trace, "banner") else ""
    if banner:  # a damaged, unclosed or empty capture says so above the rows
        head += f"<br><span style='color:#b00'>⚠ {esc(banner)}</span>"
    sub = f"<br><sup>{' · '.join(note)}</sup>" if note else ""
    fig = TimelineFigure(data=traces)
    n_legend = len(class_names) + 3
    legend_px = 22 * (1 + n_legend // 9)
    top = (58 if note else 42) + (18 if banner else 0) + legend_px
    fig.update_layout(
        title=dict(text=head + sub, x=0.01, y=1, yref="container", yanchor="top", pad=dict(t=8),
                   font=dict(size=14)),
        height=max(260, n_rows * ROW_PX + top + 60),
        margin=dict(l=10, r=20, t=top, b=50),
        plot_bgcolor="white",
        hovermode="closest", hoverdistance=20,
        hoverlabel=dict(align="left", bgcolor="white", font=dict(size=11,
                                                                  family="monospace")),
        dragmode="zoom",
        showlegend=True,
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0,
                    font=dict(size=10)),
        xaxis=dict(range=[lo / 1e9, hi / 1e9], tickformat="~s", ticksuffix="s",
                   title=dict(text="time since trace start", font=dict(size=11)),
                   showgrid=True, gridcolor="#eee", zeroline=False, showspikes=True,
                   spikemode="across", spikethickness=1, spikecolor="#999"),
        yaxis=dict(tickmode="array", tickvals=list(range(n_rows)), ticktext=ticktext,
                   range=[n_rows - 0.5, -0.5], fixedrange=True, showgrid=False,
                   zeroline=False, automargin=True, tickfont=dict(size=11)),
        shapes=shapes, annotations=ann, uirevision="ggml-trace",
        meta={"ggml_trace": {
            "version": STORE_VERSION, "intervals": n_total, "rows": list(tb.rows),
            "row_counts": model.row_counts.tolist(), "races": len(race_list),
            "exact_in_view": v["exact"], "aggregated_rows": v["aggregated_rows"],
            "color_by": color_by, "banner": banner}},
    )
    fig._ggml_store = _store(model, tb, cls, colors, width)
    fig._ggml_store["title"] = head
    return fig


# -- the store embedded in the HTML and its script -------------------------------------------------

def _col(a: np.ndarray, dtype: str) -> dict:
    raw = np.ascontiguousarray(a, dtype=dtype).tobytes()
    return {"dtype": dtype, "data": base64.b64encode(zlib.compress(raw, 6)).decode("ascii")}


def _store(model: IntervalModel, tb: StringTables, cls: np.ndarray, colors, width) -> dict:
    iv = model.iv
    n = len(iv)
    row = iv["row"].to_numpy()
    n_rows = len(model.rows)
    row_start = np.searchsorted(row, np.arange(n_rows + 1))
    t0, t1 = iv["t0"].to_numpy(), iv["t1"].to_numpy()
    dur = t1 - t0
    maxdur = np.zeros(n_rows, np.float64)
    if n:
        np.maximum.at(maxdur, row, dur.astype(np.float64))
    buf = lambda col: np.where(iv[col].to_numpy() >= 0, np.searchsorted(  # noqa: E731
        tb.buf_ptrs, iv[col].to_numpy()), -1) if len(tb.buf_ptrs) else np.full(n, -1)
    tpos = (np.where(iv["thread"] >= 0, np.searchsorted(tb.thread_ids, iv["thread"].to_numpy()),
                     -1) if tb.thread_ids else np.full(n, -1))
    cols = {
        "t0": _col(t0, "<f8"), "dur": _col(dur, "<f4"), "cls": _col(cls, "<u1"),
        "kind": _col(iv["kind"], "<i2"), "backend": _col(iv["backend"], "<i2"),
        "graph": _col(iv["graph"], "<i4"), "split": _col(iv["split"], "<i4"),
        "arg": _col(iv["arg"], "<f8"), "thread": _col(tpos, "<i2"),
        "device": _col(iv["device"], "<u1"), "rtype": _col(iv["rtype"], "<u1"),
    }
    optional = {"src_t": "<i4", "dst_t": "<i4", "inputs": "<i4", "mark": "<i4",
                "n_r": "<i4", "n_w": "<i4", "last_w": "<i4"}
    for c, dt in optional.items():
        if (iv[c].to_numpy() >= 0).any():
            cols[c] = _col(iv[c], dt)
    if (iv["src_buf"].to_numpy() >= 0).any() or (iv["dst_buf"].to_numpy() >= 0).any():
        cols["src_buf"] = _col(buf("src_buf"), "<i4")
        cols["dst_buf"] = _col(buf("dst_buf"), "<i4")
        cols["src_off"] = _col(iv["src_off"], "<f8")
        cols["dst_off"] = _col(iv["dst_off"], "<f8")
    if (iv["event"].to_numpy() >= 0).any():
        cols["event"] = _col(iv["event"], "<f8")
    if "n_r" in cols or "n_w" in cols:
        cols["b_r"] = _col(iv["b_r"].clip(lower=0), "<f8")
        cols["b_w"] = _col(iv["b_w"].clip(lower=0), "<f8")
    ar = model.arrows
    return {
        "version": STORE_VERSION, "n": int(n), "rowStart": row_start.tolist(),
        "rowMaxDur": maxdur.tolist(), "rows": tb.rows, "classes": tb.classes,
        "colors": list(colors), "kinds": tb.kinds, "backends": tb.backends,
        "tensors": tb.tensors, "buffers": tb.buffers, "threads": tb.threads, "marks": tb.marks,
        "cols": cols,
        "arrows": {"n": int(len(ar)), "t0": _col(ar["t0"], "<f8"), "t1": _col(ar["t1"], "<f8"),
                   "r0": _col(ar["r0"], "<i4"), "r1": _col(ar["r1"], "<i4"),
                   "type": _col(ar["type"], "<u1")},
        "config": {"rowDetail": ROW_DETAIL, "bins": LOD_BINS, "arrowLimit": ARROW_LIMIT,
                   "labelMinPx": LABEL_MIN_PX, "labelLimit": LABEL_LIMIT,
                   "hoverPx": HOVER_STEP_PX, "rowPx": ROW_PX, "lineWidth": width},
        "rowTypes": {"copies": ROW_COPIES, "kernels": ROW_KERNELS},
    }


def _script_json(obj) -> str:
    """JSON safe inside a <script> element."""
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=True)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def timeline_html(fig: go.Figure, full_html: bool = True, include_plotlyjs=True,
                  div_id: str | None = None) -> str:
    """Self-contained HTML of a timeline figure: plotly.js embedded (offline), the interval
    store and the level-of-detail script. Other figures are written as plain plotly HTML."""
    store = getattr(fig, "_ggml_store", None)
    div_id = div_id or "ggml-trace-timeline"
    config = {"scrollZoom": True, "displaylogo": False, "responsive": True,
              "modeBarButtonsToRemove": ["lasso2d", "select2d"],
              "toImageButtonOptions": {"format": "png", "scale": 2}}
    post = "window.ggmlTraceRendered = window.ggmlTraceRendered || performance.now();"
    if store is not None:
        post += "ggmlTraceTimeline('{plot_id}');"
    body = pio.to_html(go.Figure(fig), full_html=False, include_plotlyjs=include_plotlyjs,
                       div_id=div_id, post_script=post, config=config,
                       default_height=f"{fig.layout.height or 600}px", default_width="100%")
    pre = ""
    if store is not None:
        pre = (f'<script type="application/json" id="{div_id}-data">{_script_json(store)}'
               f"</script>\n<script>{TIMELINE_JS}</script>\n")
    div = pre + body
    if not full_html:
        return div
    title = "ggml-trace timeline"
    return ("<!doctype html>\n<html>\n<head>\n<meta charset=\"utf-8\" />\n"
            f"<title>{title}</title>\n<style>body{{margin:8px;font-family:sans-serif}}</style>\n"
            f"</head>\n<body>\n{div}\n</body>\n</html>\n")


# The script that redraws the view in the browser (package data beside this module).
TIMELINE_JS = (Path(__file__).with_name("timeline.js")).read_text(encoding="utf-8")
