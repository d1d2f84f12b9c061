"""The text of the interval model's views (the model: analysis/intervals.py): escaping for
plotly's pseudo-HTML, the string tables shared by the Python view and the HTML store, each
interval's hover text and bar label, bytes and µs as the timeline shows them. The plotly timeline
(analysis/timeline.py) and the Perfetto and Parquet exports (analysis/export.py) use it; like the
model, it has no plotting dependency."""
from __future__ import annotations

import html

import numpy as np
import pandas as pd

from .intervals import ROW_COPIES, ROW_KERNELS, IntervalModel


def esc(s) -> str:
    """HTML-escape any value for plotly's pseudo-HTML text (labels, ticks, hover). Quotes
    become numeric references: plotly decodes those but shows &quot; as it is."""
    return html.escape(str(s), quote=False).replace('"', "&#34;").replace("'", "&#39;")


def fmt_bytes(b) -> pd.Series:
    """Bytes as B / KiB / MiB / GiB (like fmtBytes in TIMELINE_JS)."""
    index = b.index if isinstance(b, pd.Series) else None
    b = pd.Series(np.asarray(b, np.float64)).clip(lower=0)
    unit = np.minimum(np.floor(np.log2(np.maximum(b.to_numpy(), 1)) / 10), 3).astype(np.int64)
    val = b.to_numpy() / (1024.0 ** unit)
    names = np.array([" B", " KiB", " MiB", " GiB"], dtype=object)
    num = pd.Series(np.where(unit == 0, np.round(val).astype(np.int64).astype(str),
                             pd.Series(val).map("{:.1f}".format).to_numpy()), dtype=object)
    out = num + names[unit]
    return out if index is None else out.set_axis(index)


def fmt_us(ns: np.ndarray) -> pd.Series:
    return pd.Series(np.asarray(ns, np.float64) / 1e3).map("{:,.3f} µs".format)


class StringTables:
    """Escaped string tables shared by the Python view and the HTML store (escape=str gives
    the raw strings, for formats that are not HTML)."""

    raw: StringTables  # the unescaped tables, where a view sets them (the timeline's labels: plain text)

    def __init__(self, model: IntervalModel, class_names, esc=esc):
        self.kinds = [esc(k) for k in model.kinds]
        self.backends = [esc(b) for b in model.backend_names]
        self.tensors = [esc(t) for t in model.tensors]
        self.marks = [esc(m) for m in model.mark_names]
        th = sorted(model.thread_label)
        self.thread_ids = th
        self.threads = [esc(model.thread_label[t]) for t in th]
        self.buf_ptrs, buf_labels = model.buffer_table()
        self.buffers = [esc(b) for b in buf_labels]
        self.rows = [esc(r) for r in model.rows["label"]]
        self.classes = [esc(c) for c in class_names]


def hover_text(iv: pd.DataFrame, tb: StringTables) -> pd.Series:
    """Hover text of each interval (pseudo-HTML, every trace string escaped)."""
    if len(iv) == 0:
        return pd.Series([], dtype=object)

    def pick(table, codes):
        arr = np.array(list(table) + [""], dtype=object)
        c = np.asarray(codes, np.int64)
        return pd.Series(arr[np.where((c >= 0) & (c < len(table)), c, len(table))],
                         index=iv.index)

    kind = pick(tb.kinds, iv["kind"])
    dev = pd.Series(np.where(iv["device"], " · on the device", ""), index=iv.index)
    be = pick(tb.backends, iv["backend"])
    txt = "<b>" + kind + "</b> " + be + dev
    g, s = iv["graph"], iv["split"]
    gs = pd.Series(np.where(g >= 0, "<br>graph " + g.astype(str), "<br>"), index=iv.index)
    gs = gs + pd.Series(np.where(s >= 0, " · split " + s.astype(str), ""), index=iv.index)
    is_gc = kind == "graph_compute"
    arg = iv["arg"].astype(np.int64).map("{:,}".format)  # as num() in timeline.js
    inputs = iv["inputs"]
    extra = pd.Series(np.where(is_gc, " · " + arg + " nodes · " + inputs.clip(lower=0).astype(
        str) + " input copies", ""), index=iv.index)
    is_copy = iv["src_buf"].ge(0) | iv["dst_buf"].ge(0) | iv["src_t"].ge(0) | iv["dst_t"].ge(0)
    bufidx = lambda col: np.searchsorted(tb.buf_ptrs, iv[col].to_numpy()) if len(  # noqa: E731
        tb.buf_ptrs) else np.full(len(iv), -1)
    sb = pick(tb.buffers, np.where(iv["src_buf"] >= 0, bufidx("src_buf"), -1))
    db = pick(tb.buffers, np.where(iv["dst_buf"] >= 0, bufidx("dst_buf"), -1))
    nbytes = iv["arg"].astype(np.int64)
    so = iv["src_off"].astype(np.int64)
    do = iv["dst_off"].astype(np.int64)
    st = pick(tb.tensors, iv["src_t"]).replace("", "(host memory)")
    dt = pick(tb.tensors, iv["dst_t"]).replace("", "(host memory)")
    copy_txt = ("<br>" + nbytes.map("{:,}".format) + " bytes: " + st + " → " + dt
                + "<br>src " + sb + " [" + so.astype(str) + ", " + (so + nbytes).astype(str) + ")"
                + "<br>dst " + db + " [" + do.astype(str) + ", " + (do + nbytes).astype(str) + ")")
    extra = extra + pd.Series(np.where(is_copy, copy_txt, ""), index=iv.index)
    n_r, n_w = iv["n_r"].clip(lower=0), iv["n_w"].clip(lower=0)
    lw = pick(tb.tensors, iv["last_w"])
    acc_txt = ("<br>" + n_r.astype(str) + " reads (" + fmt_bytes(iv["b_r"]) + ") · "
               + n_w.astype(str) + " writes (" + fmt_bytes(iv["b_w"]) + ")"
               + pd.Series(np.where(lw != "", " → " + lw, ""), index=iv.index))
    extra = extra + pd.Series(np.where(~is_copy & ((n_r + n_w) > 0), acc_txt, ""),
                              index=iv.index)
    ev = iv["event"]
    extra = extra + pd.Series(np.where(ev >= 0, "<br>event 0x" + ev.astype(np.int64).map(
        "{:x}".format), ""), index=iv.index)
    mk = pick(tb.marks, iv["mark"])
    extra = extra + pd.Series(np.where(mk != "", "<br>" + mk, ""), index=iv.index)
    is_delay = kind == "delay"
    if is_delay.any():  # arg = rule << 48 | requested ns (docs/trace-format.md)
        a = iv["arg"].to_numpy(np.float64)
        rule = np.floor(a / 2.0 ** 48)
        ns = a - rule * 2.0 ** 48
        delay_txt = ("<br>injected delay: " + fmt_us(ns).set_axis(iv.index) + " requested (rule "
                     + pd.Series(rule.astype(np.int64), index=iv.index).astype(str) + ")")
        extra = extra + pd.Series(np.where(is_delay, delay_txt, ""), index=iv.index)
    tpos = np.searchsorted(tb.thread_ids, iv["thread"].to_numpy()) if tb.thread_ids else None
    th = pick(tb.threads, np.where(iv["thread"] >= 0, tpos if tpos is not None else -1, -1))
    when = ("<br>" + fmt_us(iv["t0"]).set_axis(iv.index) + " → "
            + fmt_us(iv["t1"]).set_axis(iv.index) + " ("
            + fmt_us(iv["t1"] - iv["t0"]).set_axis(iv.index) + ")")
    who = pd.Series(np.where(iv["device"], "<br>enqueued by ", "<br>"), index=iv.index) + th
    return txt + gs + extra + who + when


def bar_labels(iv: pd.DataFrame, tb: StringTables) -> pd.Series:
    """Text drawn inside wide bars: "split 3 · 14 nodes", "tensor · 16,384 B", the kind."""
    arr = np.array(tb.kinds + [""], dtype=object)
    k = iv["kind"].to_numpy()
    kind = pd.Series(arr[np.where(k >= 0, k, len(tb.kinds))], index=iv.index)
    split = iv["split"].astype(str)
    gc = (kind == "graph_compute") & (iv["split"] >= 0)
    lab = kind.where(~gc, "split " + split + " · " + iv["arg"].astype(np.int64).astype(str)
                     + " nodes")
    tarr = np.array(tb.tensors + [""], dtype=object)
    t = np.where(iv["dst_t"] >= 0, iv["dst_t"], iv["src_t"])
    tens = pd.Series(tarr[np.where(t >= 0, t, len(tb.tensors))], index=iv.index)
    is_copy = iv["rtype"] == ROW_COPIES
    lab = lab.where(~is_copy, tens + " · " + iv["arg"].astype(np.int64).map("{:,}".format) + " B")
    marr = np.array(tb.marks + [""], dtype=object)
    m = iv["mark"].to_numpy()
    kernel = pd.Series(marr[np.where(m >= 0, m, len(tb.marks))], index=iv.index)
    return lab.where(iv["rtype"] != ROW_KERNELS, kernel)
