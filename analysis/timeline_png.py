"""A static picture of a race and its neighbours (`ggml-trace diagnose` writes it as timeline.png):
a view of the interval model (analysis/intervals.py) in a window around one occurrence of the race,
one labelled row per host thread and per backend queue (execution, copies), the two racing
operations filled in HIGHLIGHT and linked. GitHub shows a PNG inline in an issue, where it shows
no HTML page; matplotlib renders it offline, with no browser.

The PNG carries, as text metadata under ROWS_KEY, every row it draws with its band of pixel rows
in the image and whether a racing operation is on it: what a test or tool reads back.
"""
from __future__ import annotations

import json

import numpy as np

from .intervals import ROW_COPIES, ROW_EXEC, ROW_KERNELS, ROW_THREAD, IntervalModel
from .kinds import color_of

HIGHLIGHT = "#e41a1c"  # the racing operations' fill (no kind is drawn in it)
HIGHLIGHT_EDGE = "#7f0000"
ROWS_KEY = "ggml-trace rows"
MAX_ROWS = 32
LABEL_CHARS = 46  # a row label or name longer than this is cut (names come from model files)
WIDTH_PX, DPI = 1400, 100
ROW_IN = 0.34  # inches per row
MIN_BAR_PX = 9  # a racing operation shorter than this is drawn this wide, so that it shows


def short(text, n: int = LABEL_CHARS) -> str:
    """A name as one printable line of at most n characters."""
    s = "".join(c if c.isprintable() else "?" for c in str(text))
    return s if len(s) <= n else s[:n - 1] + "…"


def race_window(race: dict, pad: float = 0.6, min_pad_us: float = 50.0) -> tuple[float, float]:
    """(start, end) in µs since the trace start: both racing operations of the occurrence a
    finding shows, with room on each side for their neighbours."""
    ts = [float((race.get(s) or {}).get(k) or 0) for s in "ab" for k in ("t_begin_us", "t_end_us")]
    lo, hi = min(ts), max(ts)
    room = max((hi - lo) * pad, min_pad_us)
    return max(lo - room, 0.0), hi + room


def _racing(iv, race: dict | None) -> dict:
    """{"a": mask, "b": mask} of the intervals that are a race's two operations: the device-side
    interval where the finding's times are the device's, else the host call; "queued": the host
    calls that enqueued a side drawn on its device."""
    out = {"queued": np.zeros(len(iv), bool)}
    cid = iv["call_id"].to_numpy(np.uint64)
    dev = iv["device"].to_numpy(bool)
    for side in "ab":
        s = (race or {}).get(side) or {}
        mask = np.zeros(len(iv), bool)
        if s.get("call_id") is not None:
            same = cid == np.uint64(int(s["call_id"]))
            mask = same & (dev == bool(s.get("device")))
            if not mask.any():
                mask = same & (iv["rtype"].to_numpy() != ROW_THREAD) if same.any() else mask
                mask = mask if mask.any() else same
            elif s.get("device"):
                out["queued"] |= same & ~dev & (iv["rtype"].to_numpy() == ROW_THREAD)
        out[side] = mask
    return out


def _rows_drawn(model: IntervalModel, iv, race_rows: set) -> list[int]:
    """The model's rows that hold intervals in the window, in the model's order; at most MAX_ROWS,
    the racing rows kept first."""
    used = sorted(set(iv["row"].tolist()))
    if len(used) <= MAX_ROWS:
        return used
    rest = [r for r in used if r not in race_rows]
    return sorted(set(race_rows) | set(rest[:MAX_ROWS - len(race_rows)]))


def _side_words(side: dict) -> str:
    what = "writes" if side.get("mode") == "write" else "reads"
    return f"{what} {short(side.get('tensor') or 'host memory', 32)}"


def timeline_png(trace, path, race: dict | None = None, number: int = 1, window=None,
                 title: str | None = None) -> dict:
    """Draws `race` (a finding in its JSON form) of `trace` and its neighbours in `window` (µs since
    the trace start; default: race_window) into the PNG file `path`; without a race, the window
    (default: the whole trace). Returns what it drew: rows (label, pixel band, racing) and the
    window."""
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    if window is None and race:
        window = race_window(race)
    model = IntervalModel(trace, window=window)
    lo_ns, hi_ns = model.window
    iv = model.iv[model.iv["rtype"].isin([ROW_THREAD, ROW_EXEC, ROW_COPIES, ROW_KERNELS])]
    iv = iv.reset_index(drop=True)
    sides = _racing(iv, race)
    hit = sides["a"] | sides["b"]
    race_rows = set(iv.loc[hit, "row"].tolist())
    queued_rows = set(iv.loc[sides["queued"], "row"].tolist())
    rows = _rows_drawn(model, iv, race_rows | queued_rows)
    y_of = {r: i for i, r in enumerate(rows)}
    iv = iv[iv["row"].isin(rows)]
    hit = hit[iv.index.to_numpy()]
    a_mask, b_mask = sides["a"][iv.index.to_numpy()], sides["b"][iv.index.to_numpy()]
    queued = sides["queued"][iv.index.to_numpy()]

    n = max(len(rows), 1)
    height_in = 1.9 + ROW_IN * n
    labels = [short(model.rows["label"].iloc[r]) for r in rows]
    left_px = 0.25 * WIDTH_PX  # a first guess, for the minimum bar width; the labels' width decides
    with rc_context({"text.parse_math": False, "text.usetex": False, "font.size": 9}):
        fig = Figure(figsize=(WIDTH_PX / DPI, height_in), dpi=DPI)
        FigureCanvasAgg(fig)
        top_in, bottom_in = 0.75, 1.05
        fig.subplots_adjust(left=left_px / WIDTH_PX, right=0.985, top=1 - top_in / height_in,
                            bottom=bottom_in / height_in)
        ax = fig.add_subplot()
        # times from the race's earlier operation (else the window's start), in µs or ms
        ref_ns = float((race or {}).get("a", {}).get("t_begin_us") or 0) * 1e3
        unit, per = ("µs", 1e3) if hi_ns - lo_ns < 5e6 else ("ms", 1e6)
        span = max((hi_ns - lo_ns) / per, 1e-6)
        plot_px = WIDTH_PX * (0.985 - left_px / WIDTH_PX)
        min_ms = span * MIN_BAR_PX / plot_px

        t0 = (iv["t0"].to_numpy(np.float64) - ref_ns) / per
        t1 = (iv["t1"].to_numpy(np.float64) - ref_ns) / per
        y = iv["row"].map(y_of).to_numpy(np.float64)
        kinds = np.array(model.kinds + ["?"], dtype=object)[np.where(iv["kind"].to_numpy() >= 0,
                                                                     iv["kind"].to_numpy(), len(model.kinds))]
        shown_kinds = []
        for kind in dict.fromkeys(kinds[~hit].tolist()):
            m = (kinds == kind) & ~hit
            _bars(ax, t0[m], t1[m], y[m], color_of(kind), "none", 0.0)
            shown_kinds.append(kind)
        # the racing operations last, on top, at least MIN_BAR_PX wide
        if hit.any():
            w = np.maximum(t1[hit] - t0[hit], min_ms)
            _bars(ax, t0[hit], t0[hit] + w, y[hit], HIGHLIGHT, HIGHLIGHT_EDGE, 1.0, height=0.8)
            _annotate(ax, race, t0, t1, y, a_mask, b_mask, min_ms, link=not queued.any())
            _queued(ax, t0, t1, y, queued, a_mask | b_mask, iv["call_id"].to_numpy(np.uint64), min_ms)

        ax.set_ylim(n - 0.5, -0.5)
        ax.set_xlim((lo_ns - ref_ns) / per, (hi_ns - ref_ns) / per)
        ax.set_yticks(range(len(rows)), labels, fontsize=8.5)
        for tick, r in zip(ax.get_yticklabels(), rows):
            if r in race_rows:
                tick.set_color(HIGHLIGHT_EDGE)
                tick.set_fontweight("bold")
        # room on the left for the widest label, measured
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # the Agg canvas has one
        widest = max([t.get_window_extent(renderer).width for t in ax.get_yticklabels()] + [40.0])
        fig.subplots_adjust(left=min(0.45, (widest + 18) / WIDTH_PX))
        for i in range(0, len(rows), 2):  # a light band every other row
            ax.axhspan(i - 0.5, i + 0.5, color="#f4f4f4", zorder=0, lw=0)
        ax.set_xlabel(f"{unit} from the start of a (at {ref_ns / 1e6:,.3f} ms into the trace)" if race
                      else f"{unit} since the trace started")
        ax.grid(axis="x", color="#dddddd", lw=0.6, zorder=0)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        fig.suptitle(short(title or _title(race, number), 160), x=0.01, ha="left", fontsize=11,
                     fontweight="bold", y=1 - 0.12 / height_in, va="top")
        if race:
            fig.text(0.01, 1 - 0.45 / height_in, short(_subtitle(race), 220), fontsize=9, color="#444444",
                     va="top")
        handles = [Patch(facecolor=color_of(k), label=short(k, 24)) for k in shown_kinds[:10]]
        if hit.any():
            handles.insert(0, Patch(facecolor=HIGHLIGHT, edgecolor=HIGHLIGHT_EDGE, label="the racing operations"))
        if handles:
            fig.legend(handles=handles, loc="lower left", ncol=min(len(handles), 6), fontsize=8, frameon=False,
                       bbox_to_anchor=(0.01, 0.0))

        bands = _pixel_bands(ax, fig, len(rows))
        drawn = {"window_us": [lo_ns / 1e3, hi_ns / 1e3],
                 "rows": [{"label": lab, "band": band, "racing": r in race_rows}
                          for lab, band, r in zip(labels, bands, rows)]}
        fig.savefig(path, dpi=DPI, metadata={ROWS_KEY: json.dumps(drawn)})
    return drawn


def _bars(ax, b, e, y, face, edge, lw, height=0.62):
    if len(b) == 0:
        return
    from matplotlib.collections import PolyCollection

    # one polygon per bar; no antialiasing, so that a bar's colour is exactly its kind's
    x0, x1, y0, y1 = b, np.maximum(e, b), y - height / 2, y + height / 2
    verts = np.stack([np.c_[x0, y0], np.c_[x0, y1], np.c_[x1, y1], np.c_[x1, y0]], axis=1)
    ax.add_collection(PolyCollection(list(verts), facecolors=face, edgecolors=edge, linewidths=lw,
                                     antialiased=False, zorder=3 if edge == "none" else 5))


def _annotate(ax, race, t0, t1, y, a_mask, b_mask, min_ms, link=True):
    """'a: reads T' and 'b: writes U' beside the two operations, and a dotted link between them
    (`link`; where a's enqueue is drawn, its arrow says it)."""
    ends = []
    for side, mask in (("a", a_mask), ("b", b_mask)):
        if not mask.any():
            continue
        i = np.flatnonzero(mask)[0]
        x_mid = (t0[i] + max(t1[i], t0[i] + min_ms)) / 2
        ends.append((x_mid, y[i]))
        words = f"{side}: {_side_words((race or {}).get(side) or {})}"
        ax.annotate(words, (max(t1[i], t0[i] + min_ms), y[i]), xytext=(6, 0), textcoords="offset points",
                    va="center", ha="left", fontsize=8.5, color=HIGHLIGHT_EDGE, fontweight="bold", zorder=7,
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85))
    if len(ends) == 2 and link:
        (xa, ya), (xb, yb) = ends
        ax.plot([xa, xb], [ya, yb], ls=":", lw=1.6, color=HIGHLIGHT_EDGE, zorder=6)


def _queued(ax, t0, t1, y, queued, sides, cid, min_ms):
    """Where the host enqueued a racing operation that ran later on its device: an outline (not the
    highlight's fill) and an arrow to the device interval."""
    for i in np.flatnonzero(queued):
        ran = np.flatnonzero(sides & (cid == cid[i]))
        if len(ran):
            _queued_one(ax, t0, t1, y, i, ran[0], min_ms)


def _queued_one(ax, t0, t1, y, i, j, min_ms):
    w = max(t1[i] - t0[i], min_ms)
    _bars(ax, t0[i:i + 1], t0[i:i + 1] + w, y[i:i + 1], "none", HIGHLIGHT_EDGE, 1.4, height=0.8)
    ax.annotate("", xy=(t0[j], y[j]), xytext=(t0[i] + w / 2, y[i]), zorder=6,
                arrowprops=dict(arrowstyle="->", color=HIGHLIGHT_EDGE, lw=1.1, ls="--", shrinkA=4, shrinkB=4))
    ax.annotate("queued", (t0[i], y[i]), xytext=(-4, 0), textcoords="offset points", va="center", ha="right",
                fontsize=8, color=HIGHLIGHT_EDGE, zorder=7,
                bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.85))


def _title(race: dict | None, number: int) -> str:
    if not race:
        return "the trace (no race found)"
    verdict = race.get("verdict") or ("manifested" if race.get("manifested") else "latent")
    words = {"manifested": "MANIFESTED: b ran entirely before a" if race.get("inverted")
             else "MANIFESTED: a had not finished when b began",
             "latent": f"latent: a ended {race.get('margin_us') or 0:,.0f} µs before b began",
             "undetermined": "undetermined: the times do not order a and b"}.get(verdict, verdict)
    ga, gb = (race.get("a") or {}).get("graph"), (race.get("b") or {}).get("graph")
    graphs = f"graph {ga}" if ga == gb else f"graphs {ga} and {gb}"
    return f"race {number}: {race.get('class')} in {graphs} ({words})"


def _subtitle(race: dict) -> str:
    a, b = race.get("a") or {}, race.get("b") or {}
    return (f"a: {short(a.get('backend'), 20)} {a.get('kind')} {_side_words(a)}  →  "
            f"b: {short(b.get('backend'), 20)} {b.get('kind')} {_side_words(b)} over the same bytes; "
            "nothing orders b after a")


def _pixel_bands(ax, fig, n: int) -> list[list[int]]:
    """Each row's band [top, bottom) as pixel rows of the saved image (0 at the top)."""
    height = fig.get_size_inches()[1] * DPI
    out = []
    for i in range(n):
        (_, top), (_, bottom) = ax.transData.transform([(0, i - 0.5), (0, i + 0.5)])
        out.append(sorted([int(round(height - top)), int(round(height - bottom))]))
    return out
