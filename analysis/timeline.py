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
renders labels, ticks and hover text as (a subset of) HTML.
"""
from __future__ import annotations

import base64
import html
import json
import os
import zlib

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from .load import COPY_KINDS, DEVICE_KIND, _lookup, _take, backend_labels, best_device_intervals

ROW_DETAIL = 2000      # a row with more intervals than this in view is aggregated
LOD_BINS = 1000        # aggregation bins across the view
ARROW_LIMIT = 2000     # arrows drawn when at most this many are in view
LABEL_MIN_PX = 90      # a bar gets a text label when at least this wide
LABEL_LIMIT = 600
HOVER_STEP_PX = 36     # hover points along a bar (hoverdistance is 20 px)
PLOT_WIDTH_PX = 1300   # plot width assumed when the view is computed in Python
ROW_PX = 22            # height of one row
MAX_LANES = 4          # nesting lanes per host thread
STORE_VERSION = 1

KIND_COLORS = {
    "graph_compute": "#4C78A8", "sched_graph_compute": "#9ECAE9", "sched_alloc_graph": "#BAB0AC",
    "sched_reserve": "#BAB0AC", "sched_reset": "#D3CEC9", "sched_new": "#D3CEC9",
    "sched_free": "#D3CEC9", "sched_synchronize": "#A3D6D2", "synchronize": "#2E8B88",
    "cpy_tensor_async": "#F58518", "set_tensor_async": "#54A24B", "get_tensor_async": "#B279A2",
    "set_tensor_2d_async": "#54A24B", "get_tensor_2d_async": "#B279A2",
    "buf_set_tensor": "#8CD17D", "buf_get_tensor": "#D4A6C8", "buf_set_tensor_2d": "#8CD17D",
    "buf_get_tensor_2d": "#D4A6C8", "buf_cpy_tensor": "#FFBE7D", "buf_memset_tensor": "#C9C9C9",
    "buf_clear": "#C9C9C9", "buf_alloc": "#C9C9C9", "buf_free": "#C9C9C9",
    "event_record": "#EECA3B", "event_wait": "#9D755D", "event_synchronize": "#D8B5A5",
    "event_new": "#E0E0E0", "event_free": "#E0E0E0", "user_range": "#59A14F",
    "user_mark": "#222222", "kernel": "#4C78A8", "memcpy": "#F58518", "memset": "#C9C9C9",
    "comm_allreduce": "#17BECF",  # a backend's own allreduce (NCCL, CUDA's internal pipeline)
    "delay": "#E45756",  # injected on purpose (--delay): on the host thread and where it stalled
}
GPU_KINDS = ["kernel", "memcpy", "memset"]  # CUPTI activity, on the kernels rows
SPLIT_PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#B279A2", "#EECA3B", "#72B7B2", "#FF9DA6",
                 "#9D755D", "#79706E", "#17BECF", "#BCBD22", "#8C564B"]
OTHER_COLOR = "#C8C8C8"
RACE_COLOR = "#E41A1C"
ARROW_COLORS = ["rgba(90,90,90,0.65)", "rgba(214,120,0,0.85)"]  # submission, event
ARROW_NAMES = ["submission → device", "event record → wait"]

ROW_HEADER, ROW_THREAD, ROW_EXEC, ROW_COPIES, ROW_COUNTER, ROW_KERNELS = range(6)
NONE = -1


def esc(s) -> str:
    """HTML-escape any value for plotly's pseudo-HTML text (labels, ticks, hover). Quotes
    become numeric references: plotly decodes those but shows &quot; as it is."""
    return html.escape(str(s), quote=False).replace('"', "&#34;").replace("'", "&#39;")


def _codes(series: pd.Series) -> np.ndarray:
    return np.asarray(series.cat.codes, np.int64)


def _int(series, fill: int = NONE) -> np.ndarray:
    return np.asarray(pd.Series(series).astype("Int64").fillna(fill), np.int64)


def _depth(key: np.ndarray, b: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Nesting depth of each interval among those with the same key (call stack depth of a
    thread's calls): how many intervals that started earlier are still open at its start."""
    n = len(b)
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((-e, b, key))
    k, bb = key[order], b[order]
    first = np.r_[0, np.flatnonzero(k[1:] != k[:-1]) + 1]
    grp = np.repeat(np.arange(len(first)), np.diff(np.r_[first, n]))
    rank = np.arange(n) - first[grp]
    # ends <= my begin within my key: keys folded into one sorted int64 axis
    lo = min(int(b.min()), int(e.min()))
    span = max(int(b.max()), int(e.max())) - lo + 2
    g_of = np.empty(n, np.int64)
    g_of[order] = grp
    ends = np.sort(g_of * span + (e - lo))
    closed = np.searchsorted(ends, grp * span + (bb - lo), side="right") - np.searchsorted(
        ends, grp * span, side="left")
    depth = np.empty(n, np.int64)
    depth[order] = np.maximum(rank - closed, 0)
    return depth


# -- the model: every interval, row and arrow of a trace ---------------------------------------

class _Model:
    """All intervals of a trace on their rows (filters applied), with the string tables."""

    def __init__(self, trace, window=None, graphs=None, backends=None):
        self.trace = trace
        calls = trace.calls
        gpu = getattr(trace, "gpu", None)
        self.gpu = gpu if gpu is not None else pd.DataFrame()
        self.t_end = int(max(calls["t_end"].max() if len(calls) else 0,
                             trace.device["t_end"].max() if len(trace.device) else 0,
                             self.gpu["t_end"].max() if len(self.gpu) else 0, 1))
        self.kinds = [str(k) for k in calls["kind"].cat.categories] + GPU_KINDS
        self.backend_names = [str(b) for b in calls["backend"].cat.categories]
        self.tensors = [str(t) for t in trace.accesses["tensor"].cat.categories]
        self._threads()
        self._backend_groups()
        iv = self._intervals()
        iv, self.window = self._filter(iv, window, graphs, backends)
        self._rows(iv)
        self._arrows()

    # -- string tables ------------------------------------------------------------------------
    def _threads(self):
        th = self.trace.threads
        names = th["name"].astype(object)
        self.thread_label = {int(t): f"T{int(t)} {'' if pd.isna(n) else n} (tid {int(o)})"
                             for t, n, o in zip(th["thread"], names, th["os_tid"])}

    def _backend_groups(self):
        """Backends are grouped by name (as in summary()): one group of rows per name."""
        b = self.trace.backends
        labels = backend_labels(b)
        self.group_names: list[str] = list(dict.fromkeys(labels))
        self.group_info: dict[str, str] = {}
        self.group_cpu: dict[str, bool] = {}
        for lab, (_, r) in zip(labels, b.iterrows()):  # a handful of backends
            if lab in self.group_info:
                continue
            flags = [str(r["device_type"])] + (["async"] if r["has_async"] else []) + (
                ["events"] if r["has_events"] else [])
            desc = r["device_description"]
            self.group_info[lab] = (f"{lab}" + ("" if pd.isna(desc) else f" · {desc}")
                                    + f" ({', '.join(flags)})")
            self.group_cpu[lab] = str(r["device_type"]) == "cpu"
        for name in self.backend_names:  # backend#N without a BackendRec
            if name not in self.group_info:
                self.group_names.append(name)
                self.group_info[name] = name
                self.group_cpu[name] = False
        self.group_index = {n: i for i, n in enumerate(self.group_names)}
        # backend category code -> group index
        self.backend_group = np.array([self.group_index[n] for n in self.backend_names] + [-1],
                                      np.int64)

    # -- intervals ----------------------------------------------------------------------------
    def _intervals(self) -> pd.DataFrame:
        tr = self.trace
        calls, copies, splits = tr.calls, tr.copies, tr.splits
        dev = best_device_intervals(tr.device)
        kind = _codes(calls["kind"])
        host = kind != self.kinds.index(DEVICE_KIND) if DEVICE_KIND in self.kinds else np.ones(
            len(calls), bool)
        c = calls[host]
        call_thread = c["thread"].to_numpy(np.int64)
        t0, t1 = c["t_begin"].to_numpy(np.int64), c["t_end"].to_numpy(np.int64)
        lane = np.minimum(_depth(call_thread, t0, t1), MAX_LANES - 1)
        base = {
            "call_id": c["call_id"].to_numpy(np.uint64),
            "kind": _codes(c["kind"]),
            "t0": t0, "t1": t1,
            "thread": call_thread,
            "backend": _codes(c["backend"]),
            "graph": _int(c["graph"]),
            "split": _int(c["split"]),
            "arg": c["arg"].to_numpy(np.float64),
        }
        host_iv = pd.DataFrame(base)
        host_iv["rtype"] = ROW_THREAD
        host_iv["lane"] = lane
        host_iv["group"] = NONE
        host_iv["device"] = False

        # Copy details, by call_id, for the host calls and the copies rows
        cp = pd.DataFrame({
            "call_id": copies["call_id"].to_numpy(np.uint64),
            "src_t": self._tensor_codes(copies["src_tensor"]),
            "dst_t": self._tensor_codes(copies["dst_tensor"]),
            "src_b": _codes(copies["src_backend"]), "dst_b": _codes(copies["dst_backend"]),
            "src_buf": np.asarray(copies["src_buffer"].astype("Float64").fillna(-1), np.float64),
            "dst_buf": np.asarray(copies["dst_buffer"].astype("Float64").fillna(-1), np.float64),
            "src_off": np.asarray(copies["src_offset"].astype("Float64").fillna(-1), np.float64),
            "dst_off": np.asarray(copies["dst_offset"].astype("Float64").fillna(-1), np.float64),
        })
        host_iv = host_iv.merge(cp, on="call_id", how="left")
        ev = tr.sync[["call_id", "event"]].dropna()
        host_iv = host_iv.merge(pd.DataFrame({"call_id": ev["call_id"].to_numpy(np.uint64),
                                              "event": ev["event"].to_numpy(np.float64)}),
                                on="call_id", how="left")
        marks = calls.loc[host & calls["kind"].isin(["user_mark", "user_range"]).to_numpy()]
        self.mark_names = []
        if len(marks):
            sids = marks["obj"].to_numpy(np.uint64)
            uniq = np.unique(sids)  # one lookup per distinct name
            mn = pd.Series(sids).map(dict(zip(uniq.tolist(), [tr.strings.get(int(x), "")
                                                             for x in uniq.tolist()])))
            mn = mn.astype("category")
            self.mark_names = [str(x) for x in mn.cat.categories]
            host_iv = host_iv.merge(pd.DataFrame({"call_id": marks["call_id"].to_numpy(np.uint64),
                                                  "mark": _codes(mn)}), on="call_id", how="left")
        # split inputs for graph_compute
        host_iv = host_iv.merge(pd.DataFrame({"call_id": splits["call_id"].to_numpy(np.uint64),
                                              "inputs": splits["n_inputs"].to_numpy(np.int64)}),
                                on="call_id", how="left")
        host_iv = host_iv.merge(self._access_summary(), on="call_id", how="left")

        # Device-side intervals: described by their enqueuing call
        dev_iv = pd.DataFrame({"call_id": dev["call_id"].to_numpy(np.uint64),
                               "dt0": dev["t_begin"].to_numpy(np.int64),
                               "dt1": dev["t_end"].to_numpy(np.int64)})
        dev_iv = dev_iv.drop_duplicates("call_id")
        by_call = host_iv.drop(columns=["t0", "t1", "lane", "rtype", "device"]).drop_duplicates(
            "call_id")
        dev_iv = dev_iv.merge(by_call, on="call_id", how="left")
        missing = dev_iv["kind"].isna().to_numpy()
        if missing.any():  # enqueuing call not in the trace: use the device record's own fields
            d = pd.DataFrame({"call_id": dev["call_id"].to_numpy(np.uint64),
                              "kind": _codes(dev["kind"]), "backend": _codes(dev["backend"]),
                              "graph": _int(dev["graph"]), "split": _int(dev["split"]),
                              "thread": dev["thread"].to_numpy(np.int64)}).drop_duplicates(
                "call_id").set_index("call_id")
            for col in ("kind", "backend", "graph", "split", "thread"):
                fill = dev_iv.loc[missing, "call_id"].map(d[col])
                dev_iv.loc[missing, col] = fill.to_numpy()
            dev_iv["arg"] = dev_iv["arg"].fillna(0)
        dev_iv = dev_iv.rename(columns={"dt0": "t0", "dt1": "t1"})
        dev_iv["device"] = True
        dev_ids = dev_iv["call_id"].to_numpy(np.uint64)

        # Backend rows: splits and device work on the execution row, copies per direction
        copy_codes = [self.kinds.index(k) for k in COPY_KINDS if k in self.kinds]
        gc = self.kinds.index("graph_compute")
        is_copy_h = host_iv["kind"].isin(copy_codes).to_numpy()
        in_dev = np.isin(host_iv["call_id"].to_numpy(np.uint64), dev_ids)
        sync_exec = host_iv[(host_iv["kind"].to_numpy() == gc) & ~in_dev].copy()
        sync_copy = host_iv[is_copy_h & ~in_dev].copy()
        dev_kind = dev_iv["kind"].to_numpy(np.float64)
        dev_copy = dev_iv[np.isin(dev_kind, copy_codes)].copy()
        dev_exec = dev_iv[~np.isin(dev_kind, copy_codes)].copy()
        execs = pd.concat([sync_exec, dev_exec], ignore_index=True)
        execs["rtype"] = ROW_EXEC
        execs["lane"] = 0
        execs["group"] = self.backend_group[_int(execs["backend"])]
        cps = pd.concat([sync_copy, dev_copy], ignore_index=True)
        cps["rtype"] = ROW_COPIES
        cps["lane"] = 0
        cps["group"] = self._copy_group(cps)
        out = pd.concat([host_iv, execs, cps, self._gpu_intervals()], ignore_index=True)
        for col in ("src_t", "dst_t", "src_b", "dst_b", "mark", "inputs", "kind", "backend",
                    "graph", "split", "thread", "n_r", "n_w", "last_w"):
            if col not in out:
                out[col] = NONE
            out[col] = out[col].fillna(NONE).astype(np.int64)
        for col in ("src_buf", "dst_buf", "src_off", "dst_off", "event", "b_r", "b_w"):
            if col not in out:
                out[col] = -1.0
            out[col] = out[col].fillna(-1).astype(np.float64)
        out["device"] = out["device"].astype(bool)
        out["group"] = out["group"].astype(np.int64)
        return out

    def _gpu_intervals(self) -> pd.DataFrame:
        """CUPTI's kernels, copies and memsets, on a kernels row under the backend of the call
        that launched them (else the backend named CUDA<device>); the kernel's name goes in
        the hover and on the bar."""
        g = self.gpu
        if len(g) == 0:
            return pd.DataFrame()
        group = self.backend_group[_codes(g["backend"])]
        by_name = np.array([self.group_index.get(f"CUDA{d}", NONE) for d in range(
            int(g["device"].max()) + 1)], np.int64)
        group = np.where(group >= 0, group, by_name[g["device"].to_numpy(np.int64)])
        names = g["name"].astype(object).where(g["name"].notna(), g["copy_kind"].astype(object))
        names = pd.Categorical(names.fillna("").astype(str))
        base = len(self.mark_names)
        self.mark_names = self.mark_names + [str(x) for x in names.categories]
        kind = self.kinds.index("kernel") + _codes(g["kind"])
        # the launching call's thread, for "enqueued by"
        calls = self.trace.calls
        cid = g["call_id"].fillna(0).to_numpy(np.uint64)
        thread = _take(calls["thread"].to_numpy(np.int64),
                       _lookup(calls["call_id"].to_numpy(np.uint64), cid), NONE)
        out = pd.DataFrame({
            "call_id": cid,
            "kind": kind, "t0": g["t_begin"].to_numpy(np.int64), "t1": g["t_end"].to_numpy(np.int64),
            "thread": thread, "backend": _codes(g["backend"]), "graph": _int(g["graph"]),
            "split": _int(g["split"]),
            "arg": np.where(g["kind"] == "kernel", g["grid"], g["bytes"]).astype(np.float64),
            "rtype": ROW_KERNELS, "lane": 0, "group": group, "device": True,
            "mark": base + names.codes.astype(np.int64),
        })
        return out[out["group"] >= 0]

    def _tensor_codes(self, col: pd.Series) -> np.ndarray:
        """Codes of a tensor-name column in the tensor table (the accesses' categories)."""
        if list(col.cat.categories) != self.tensors:
            col = col.cat.set_categories(self.tensors)
        return _codes(col)

    def _access_summary(self) -> pd.DataFrame:
        """Per call: how many reads and writes, their bytes, and the last tensor written
        (a split's output), from trace.accesses."""
        acc = self.trace.accesses
        w = (acc["mode"] == "write").to_numpy()
        size = acc["size"].to_numpy(np.float64)
        a = pd.DataFrame({"call_id": acc["call_id"].to_numpy(np.uint64), "n_r": ~w, "n_w": w,
                          "b_r": np.where(w, 0.0, size), "b_w": np.where(w, size, 0.0)})
        out = a.groupby("call_id", sort=False).sum()
        last = pd.Series(_codes(acc["tensor"])[w], index=a["call_id"].to_numpy()[w])
        out["last_w"] = last[~last.index.duplicated(keep="last")].reindex(out.index)
        return out.reset_index()

    def _copy_group(self, cps: pd.DataFrame) -> np.ndarray:
        """A copy goes under the backend on the device side of it (like Nsight's memcpy rows):
        the destination unless that is a CPU, else the source, else whatever is known."""
        bg = self.backend_group
        cpu = np.array([self.group_cpu[n] for n in self.group_names] + [True])
        src = bg[cps["src_b"].fillna(NONE).to_numpy(np.int64)]
        dst = bg[cps["dst_b"].fillna(NONE).to_numpy(np.int64)]
        call = bg[cps["backend"].fillna(NONE).to_numpy(np.int64)]
        g = np.where((dst >= 0) & ~cpu[dst], dst,
                     np.where((src >= 0) & ~cpu[src], src,
                              np.where(dst >= 0, dst, np.where(src >= 0, src, call))))
        return g

    # -- filters ------------------------------------------------------------------------------
    def _filter(self, iv: pd.DataFrame, window, graphs, backends):
        keep = np.ones(len(iv), bool)
        lo, hi = 0, self.t_end
        if graphs is not None:
            ga, gb = _graph_range(graphs)
            g = iv["graph"].to_numpy()
            in_g = (g >= ga) & (g <= gb)
            if in_g.any():
                lo = int(iv["t0"].to_numpy()[in_g].min())
                hi = int(iv["t1"].to_numpy()[in_g].max())
            else:
                lo, hi = 0, 0
            keep &= (g < 0) | in_g
        if window is not None:
            wa, wb = window
            if wa is not None:
                lo = max(lo, int(round(float(wa) * 1000)))
            if wb is not None:
                hi = min(hi, int(round(float(wb) * 1000)))
        if graphs is not None or window is not None:
            keep &= (iv["t1"].to_numpy() >= lo) & (iv["t0"].to_numpy() <= hi)
        if backends is not None:
            want = _match_backends(backends, self.group_names, self.trace.backends)
            if len(want) == 0:
                raise ValueError(f"no backend matches {backends!r} (backends: "
                                 f"{', '.join(self.group_names) or 'none'})")
            grp = iv["group"].to_numpy()
            b = iv["backend"].to_numpy()
            b_grp = self.backend_group[b]
            thread_row = iv["rtype"].to_numpy() == ROW_THREAD
            keep &= np.where(thread_row, (b < 0) | np.isin(b_grp, want), np.isin(grp, want))
            self.group_keep = set(want.tolist())
        else:
            self.group_keep = set(range(len(self.group_names)))
        return iv[keep].reset_index(drop=True), (lo, hi)

    # -- rows ---------------------------------------------------------------------------------
    def _rows(self, iv: pd.DataFrame):
        tr = self.trace
        pid = tr.meta.get("pid") or tr.header.get("pid", "?")
        exe = os.path.basename(tr.meta.get("exe", "")) or "process"
        rows = [(ROW_HEADER, -1, -1, -1, -1, f"Process {pid} · {exe}")]
        th = iv[iv["rtype"] == ROW_THREAD]
        lanes = th[["thread", "lane"]].drop_duplicates().sort_values(["thread", "lane"])
        for t, ln in zip(lanes["thread"].tolist(), lanes["lane"].tolist()):
            lab = self.thread_label.get(t, f"T{t}")
            rows.append((ROW_THREAD, t, ln, -1, -1,
                         lab if ln == 0 else f"{lab.split(' ')[0]} · depth {ln}"
                         + ("+" if ln == MAX_LANES - 1 else "")))
        # copies directions
        cp = iv[iv["rtype"] == ROW_COPIES]
        src_name = self._side_names(cp["src_b"].to_numpy())
        dst_name = self._side_names(cp["dst_b"].to_numpy())
        dirs = pd.Series(src_name, dtype=object) + "→" + pd.Series(dst_name, dtype=object)
        dirs = dirs.str.replace(r"\[[^\]]*\]", "", regex=True)  # RPC0[host:port] -> RPC0
        dir_codes, dir_labels = pd.factorize(dirs)
        iv["dir"] = NONE
        iv.loc[cp.index, "dir"] = dir_codes
        ex_groups = set(iv.loc[iv["rtype"] == ROW_EXEC, "group"].tolist())
        k_groups = set(iv.loc[iv["rtype"] == ROW_KERNELS, "group"].tolist())
        for g, name in enumerate(self.group_names):
            if g not in self.group_keep:
                continue
            mine = cp["group"].to_numpy() == g
            if g not in ex_groups and g not in k_groups and not mine.any():
                continue
            rows.append((ROW_HEADER, -1, -1, g, -1, self.group_info[name]))
            if g in ex_groups:
                rows.append((ROW_EXEC, -1, 0, g, -1, f"{name} execution"))
            if g in k_groups:
                rows.append((ROW_KERNELS, -1, 0, g, -1, f"{name} kernels (CUPTI)"))
            used = sorted(set(dir_codes[mine].tolist()), key=lambda d: dir_labels[d])
            for d in used:
                rows.append((ROW_COPIES, -1, 0, g, d, f"{name} copies {dir_labels[d]}"))
        self.counter_rows = _counter_rows(tr, len(rows))
        for lab in self.counter_rows["labels"]:
            rows.append((ROW_COUNTER, -1, -1, -1, -1, lab))
        self.rows = pd.DataFrame(rows, columns=["rtype", "thread", "lane", "group", "dir",
                                                "label"])
        key = self.rows.reset_index().rename(columns={"index": "row"})
        key = key[key["rtype"].isin([ROW_THREAD, ROW_EXEC, ROW_COPIES, ROW_KERNELS])]
        iv["thread_k"] = np.where(iv["rtype"] == ROW_THREAD, iv["thread"], -1)
        iv["lane_k"] = np.where(iv["rtype"] == ROW_THREAD, iv["lane"], 0)
        iv["group_k"] = np.where(iv["rtype"] == ROW_THREAD, -1, iv["group"])
        iv["dir_k"] = np.where(iv["rtype"] == ROW_COPIES, iv["dir"], -1)
        iv = iv.merge(key[["row", "rtype", "thread", "lane", "group", "dir"]].rename(
            columns={"thread": "thread_k", "lane": "lane_k", "group": "group_k",
                     "dir": "dir_k"}), on=["rtype", "thread_k", "lane_k", "group_k", "dir_k"],
            how="inner")
        iv = iv.drop(columns=["thread_k", "lane_k", "group_k", "dir_k"])
        self.iv = iv.sort_values(["row", "t0"], kind="stable").reset_index(drop=True)
        self.row_counts = np.bincount(self.iv["row"].to_numpy(), minlength=len(self.rows))

    def _side_names(self, codes: np.ndarray) -> np.ndarray:
        names = np.array(self.backend_names + ["host"], dtype=object)
        return names[np.where(codes < 0, len(self.backend_names), codes)]

    # -- arrows -------------------------------------------------------------------------------
    def _arrows(self):
        """Submission -> device execution, and event record -> wait / event_synchronize."""
        iv = self.iv
        cid = iv["call_id"].to_numpy(np.uint64)
        dev = iv["device"].to_numpy()
        on_thread = iv["rtype"].to_numpy() == ROW_THREAD
        host_pos = pd.Series(np.flatnonzero(on_thread), index=cid[on_thread])
        host_pos = host_pos[~host_pos.index.duplicated()]
        parts = []
        # one submission arrow per operation: to its execution or copy bar, not to each kernel
        d = np.flatnonzero(dev & (iv["rtype"].to_numpy() != ROW_KERNELS))
        if len(d):
            src = host_pos.reindex(cid[d]).to_numpy()
            ok = ~np.isnan(src)
            s = src[ok].astype(np.int64)
            parts.append((iv["t1"].to_numpy()[s], iv["row"].to_numpy()[s],
                          iv["t0"].to_numpy()[d[ok]], iv["row"].to_numpy()[d[ok]], 0, s, d[ok]))
        sync = self.trace.sync
        rec = sync[sync["kind"] == "event_record"].dropna(subset=["event"])
        wait = sync[sync["kind"].isin(["event_wait", "event_synchronize"])].dropna(
            subset=["event"])
        if len(rec) and len(wait):
            r = pd.DataFrame({"event": rec["event"].to_numpy(np.uint64),
                              "t": rec["t_begin"].to_numpy(np.int64),
                              "rid": rec["call_id"].to_numpy(np.uint64)}).sort_values("t")
            w = pd.DataFrame({"event": wait["event"].to_numpy(np.uint64),
                              "t": wait["t_begin"].to_numpy(np.int64),
                              "wid": wait["call_id"].to_numpy(np.uint64)}).sort_values("t")
            m = pd.merge_asof(w, r, on="t", by="event", direction="backward").dropna(
                subset=["rid"])
            # the device-side record / wait when there is one, else the host call
            dev_pos = pd.Series(np.flatnonzero(dev), index=cid[dev])
            dev_pos = dev_pos[~dev_pos.index.duplicated()]
            pos = pd.concat([host_pos, dev_pos])
            pos = pos[~pos.index.duplicated(keep="last")]
            a = pos.reindex(m["rid"].to_numpy(np.uint64)).to_numpy()
            b = pos.reindex(m["wid"].to_numpy(np.uint64)).to_numpy()
            ok = ~np.isnan(a) & ~np.isnan(b)
            a, b = a[ok].astype(np.int64), b[ok].astype(np.int64)
            parts.append((iv["t1"].to_numpy()[a], iv["row"].to_numpy()[a],
                          iv["t0"].to_numpy()[b], iv["row"].to_numpy()[b], 1, a, b))
        if parts:
            self.arrows = pd.DataFrame({
                "t0": np.concatenate([p[0] for p in parts]),
                "r0": np.concatenate([p[1] for p in parts]),
                "t1": np.concatenate([p[2] for p in parts]),
                "r1": np.concatenate([p[3] for p in parts]),
                "type": np.concatenate([np.full(len(p[0]), p[4]) for p in parts]),
                "ia": np.concatenate([p[5] for p in parts]),  # interval rows in self.iv
                "ib": np.concatenate([p[6] for p in parts]),
            }).sort_values("t0", kind="stable").reset_index(drop=True)
        else:
            self.arrows = pd.DataFrame({c: np.zeros(0, np.int64)
                                        for c in ("t0", "r0", "t1", "r1", "type", "ia", "ib")})

    # -- labels for hover, bars and buffers ---------------------------------------------------
    def buffer_table(self):
        """Distinct buffer pointers -> labels ("0x… CPU compute"); codes per interval."""
        iv = self.iv
        bufs = np.concatenate([iv["src_buf"].to_numpy(), iv["dst_buf"].to_numpy()])
        uniq = np.unique(bufs[bufs >= 0])
        b = self.trace.buffers
        info = {}
        for ptr, bt, us in zip(b["buffer"].tolist(), b["buft_name"].astype(object),
                               b["usage"].astype(object)):
            info.setdefault(int(ptr), f"{'' if pd.isna(bt) else bt} {'' if pd.isna(us) else us}")
        labels = [("host memory" if int(p) == 0 else f"0x{int(p):x} {info.get(int(p), '')}".strip())
                  for p in uniq.tolist()]
        return uniq, labels


def _graph_range(graphs) -> tuple[int, int]:
    if isinstance(graphs, (int, np.integer)):
        return int(graphs), int(graphs)
    if isinstance(graphs, str):
        a, _, b = graphs.partition(":")
        if not _:
            return int(a), int(a)
        return (int(a) if a.strip() else 0), (int(b) if b.strip() else 2**62)
    a, b = graphs
    return (0 if a is None else int(a)), (2**62 if b is None else int(b))


def _match_backends(backends, names: list[str], table: pd.DataFrame) -> np.ndarray:
    if isinstance(backends, str):
        backends = [backends]
    dev = {}
    for lab, dn in zip(backend_labels(table), table["device_name"].astype(object)):
        dev.setdefault(lab, set()).add("" if pd.isna(dn) else str(dn))
    want = []
    for i, n in enumerate(names):
        for q in backends:
            q = str(q)
            if n == q or n.startswith(q) or q in dev.get(n, ()) or n.lower() == q.lower():
                want.append(i)
                break
    return np.array(want, np.int64)


def _counter_rows(trace, first_row: int) -> dict:
    """GPU counter rows (utilisation, clocks, memory...): each (device, metric) of
    `trace.gpu_samples` (columns t (ns), device, metric, value; NVML samples that
    `ggml-trace record` stores) gets a row of its own with a line scaled to the row."""
    s = getattr(trace, "gpu_samples", None)
    if s is None or len(s) == 0:
        return {"labels": [], "traces": []}
    labels, traces = [], []
    for i, ((dev, metric), g) in enumerate(s.groupby(["device", "metric"], observed=True,
                                                    sort=True)):
        row = first_row + i
        v = g["value"].to_numpy(np.float64)
        top = float(np.nanmax(np.abs(v))) or 1.0
        labels.append(f"GPU{dev} {metric}")
        traces.append(go.Scattergl(
            x=g["t"].to_numpy(np.float64) / 1e9, y=row + 0.4 - 0.8 * v / top, mode="lines",
            line=dict(width=1.2, color="#444"), name=esc(f"GPU{dev} {metric}"), showlegend=False,
            hovertext=[esc(f"GPU{dev} {metric}: {x:g}") for x in v.tolist()] if len(v) <= 20000
            else None, hoverinfo="text" if len(v) <= 20000 else "skip"))
    return {"labels": labels, "traces": traces}


# -- colour classes ------------------------------------------------------------------------------

def _classes(model: _Model, color_by: str):
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

def _race_json(trace, races):
    """races: None -> analysis.races(trace) when that module exists; False -> none; a report
    object with to_json(), its JSON dict, or the list of races."""
    if races is False:
        return []
    if races is None:
        try:
            from .races import races as find_races
        except ImportError:
            return []
        races = find_races(trace)
    if hasattr(races, "to_json"):
        races = races.to_json()
    if isinstance(races, dict):
        races = races.get("races", [])
    return list(races or [])


def _race_layer(model: _Model, races: list[dict]):
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

def _fmt_bytes(b) -> pd.Series:
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


def _fmt_us(ns: np.ndarray) -> pd.Series:
    return pd.Series(np.asarray(ns, np.float64) / 1e3).map("{:,.3f} µs".format)


class _Tables:
    """Escaped string tables shared by the Python view and the HTML store (escape=str gives
    the raw strings, for formats that are not HTML)."""

    def __init__(self, model: _Model, class_names, esc=esc):
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


def _hover(iv: pd.DataFrame, tb: _Tables) -> pd.Series:
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
    arg = iv["arg"].astype(np.int64).astype(str)
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
    acc_txt = ("<br>" + n_r.astype(str) + " reads (" + _fmt_bytes(iv["b_r"]) + ") · "
               + n_w.astype(str) + " writes (" + _fmt_bytes(iv["b_w"]) + ")"
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
        delay_txt = ("<br>injected delay: " + _fmt_us(ns).set_axis(iv.index) + " requested (rule "
                     + pd.Series(rule.astype(np.int64), index=iv.index).astype(str) + ")")
        extra = extra + pd.Series(np.where(is_delay, delay_txt, ""), index=iv.index)
    tpos = np.searchsorted(tb.thread_ids, iv["thread"].to_numpy()) if tb.thread_ids else None
    th = pick(tb.threads, np.where(iv["thread"] >= 0, tpos if tpos is not None else -1, -1))
    when = ("<br>" + _fmt_us(iv["t0"]).set_axis(iv.index) + " → "
            + _fmt_us(iv["t1"]).set_axis(iv.index) + " ("
            + _fmt_us(iv["t1"] - iv["t0"]).set_axis(iv.index) + ")")
    who = pd.Series(np.where(iv["device"], "<br>enqueued by ", "<br>"), index=iv.index) + th
    return txt + gs + extra + who + when


def _bar_labels(iv: pd.DataFrame, tb: _Tables) -> pd.Series:
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


def _view(model: _Model, tb: _Tables, cls: np.ndarray, x0: int, x1: int,
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
    hover_txt = _hover(sub, tb).to_numpy(dtype=object)
    cb, ce = np.maximum(eb, x0), np.minimum(ee, x1)
    rep, hx = _hover_points(cb, ce, px)
    hy = row[e_idx][rep]
    ht = hover_txt[rep]
    wide = np.flatnonzero((ce - cb) >= LABEL_MIN_PX * px)[:LABEL_LIMIT]
    # labels are drawn by WebGL (above the bars; plain text, no HTML): raw strings
    raw = getattr(tb, "raw", tb)
    labels = _bar_labels(sub.iloc[wide], raw).to_numpy(dtype=object) if len(wide) else []
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
            + "<br>" + _fmt_us(rb) + " → " + _fmt_us(re_)
            + "<br>about " + pd.Series(n_in).astype(np.int64).map("{:,}".format)
            + " interval-bins (zoom in for each interval)").to_numpy(dtype=object)
        rep, agg_hx = _hover_points(rb, re_, px)
        agg_hy = a_rows[rr][rep]
        agg_ht = txt[rep]

    # arrows among exact rows
    ar = model.arrows
    arrows = {"x0": [], "y0": [], "x1": [], "y1": [], "type": []}
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
    within = np.arange(len(rep)) - np.repeat(np.cumsum(npts) - npts, npts)
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
             races=None, zoom=None, title: str | None = None) -> TimelineFigure:
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
    """
    model = _Model(trace, window=window, graphs=graphs, backends=backends)
    cls, class_names, colors = _classes(model, color_by)
    tb = _Tables(model, class_names)
    tb.raw = _Tables(model, class_names, esc=str)
    race_list = _race_json(trace, races)
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
    for t in model.counter_rows["traces"]:
        t.meta = "static"
        traces.append(t)
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


def _store(model: _Model, tb: _Tables, cls: np.ndarray, colors, width) -> dict:
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


TIMELINE_JS = r"""
(function () {
  if (window.ggmlTraceTimeline) return;
  const reg = {};
  window.ggmlTraceTimelines = reg;
  function b64(s) {
    const bin = atob(s), out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  const CTOR = {'<f8': Float64Array, '<f4': Float32Array, '<i4': Int32Array, '<i2': Int16Array,
                '<u1': Uint8Array};
  async function column(c) {
    const z = b64(c.data);
    const stream = new Blob([z]).stream().pipeThrough(new DecompressionStream('deflate'));
    const buf = await new Response(stream).arrayBuffer();
    return new CTOR[c.dtype](buf);
  }
  function us(ns) {
    return (ns / 1e3).toLocaleString('en-US', {minimumFractionDigits: 3, maximumFractionDigits: 3}) + ' µs';
  }
  const ENT = {'&lt;': '<', '&gt;': '>', '&amp;': '&', '&#34;': '"', '&#39;': "'"};
  function unescape(t) {  // bar labels are WebGL text (no HTML): back to the raw name
    return t.replace(/&lt;|&gt;|&amp;|&#34;|&#39;/g, function (m) { return ENT[m]; });
  }
  function num(x) { return Math.round(x).toLocaleString('en-US'); }
  function fmtBytes(b) {
    b = Math.max(b, 0);
    const u = Math.min(Math.floor(Math.log2(Math.max(b, 1)) / 10), 3), v = b / Math.pow(1024, u);
    return (u ? v.toFixed(1) : String(Math.round(v))) + [' B', ' KiB', ' MiB', ' GiB'][u];
  }
  async function load(id) {
    const el = document.getElementById(id + '-data');
    const s = JSON.parse(el.textContent);
    const c = {};
    for (const k of Object.keys(s.cols)) c[k] = await column(s.cols[k]);
    const a = {};
    for (const k of ['t0', 't1', 'r0', 'r1', 'type']) a[k] = await column(s.arrows[k]);
    s.c = c; s.a = a;
    return s;
  }
  function hoverText(s, i) {
    const c = s.c, k = s.kinds[c.kind[i]] || '';
    let t = '<b>' + k + '</b> ' + (c.backend[i] >= 0 ? s.backends[c.backend[i]] : '') +
            (c.device[i] ? ' · on the device' : '');
    t += '<br>' + (c.graph[i] >= 0 ? 'graph ' + c.graph[i] : '') + (c.split[i] >= 0 ? ' · split ' + c.split[i] : '');
    if (k === 'graph_compute') t += ' · ' + num(c.arg[i]) + ' nodes · ' + Math.max(c.inputs ? c.inputs[i] : 0, 0) + ' input copies';
    const st = c.src_t ? c.src_t[i] : -1, dt = c.dst_t ? c.dst_t[i] : -1;
    const sb = c.src_buf ? c.src_buf[i] : -1, db = c.dst_buf ? c.dst_buf[i] : -1;
    if (st >= 0 || dt >= 0 || sb >= 0 || db >= 0) {
      const n = c.arg[i], so = c.src_off[i], d0 = c.dst_off[i];
      t += '<br>' + num(n) + ' bytes: ' + (st >= 0 ? s.tensors[st] : '(host memory)') + ' → ' +
           (dt >= 0 ? s.tensors[dt] : '(host memory)');
      t += '<br>src ' + (sb >= 0 ? s.buffers[sb] : '') + ' [' + so + ', ' + (so + n) + ')';
      t += '<br>dst ' + (db >= 0 ? s.buffers[db] : '') + ' [' + d0 + ', ' + (d0 + n) + ')';
    }
    const nr = c.n_r ? c.n_r[i] : 0, nw = c.n_w ? c.n_w[i] : 0;
    if (!(st >= 0 || dt >= 0 || sb >= 0 || db >= 0) && nr + nw > 0) {
      const lw = c.last_w ? c.last_w[i] : -1;
      t += '<br>' + nr + ' reads (' + fmtBytes(c.b_r[i]) + ') · ' + nw + ' writes (' +
           fmtBytes(c.b_w[i]) + ')' + (lw >= 0 ? ' → ' + s.tensors[lw] : '');
    }
    if (c.event && c.event[i] >= 0) t += '<br>event 0x' + c.event[i].toString(16);
    if (c.mark && c.mark[i] >= 0) t += '<br>' + s.marks[c.mark[i]];
    t += (c.device[i] ? '<br>enqueued by ' : '<br>') + (c.thread[i] >= 0 ? s.threads[c.thread[i]] : '');
    const t0 = c.t0[i], t1 = t0 + c.dur[i];
    t += '<br>' + us(t0) + ' → ' + us(t1) + ' (' + us(c.dur[i]) + ')';
    return t;
  }
  function barLabel(s, i) {
    const c = s.c, k = s.kinds[c.kind[i]] || '';
    if (c.rtype[i] === s.rowTypes.copies) {
      const tt = c.dst_t && c.dst_t[i] >= 0 ? c.dst_t[i] : (c.src_t ? c.src_t[i] : -1);
      return (tt >= 0 ? s.tensors[tt] : '') + ' · ' + num(c.arg[i]) + ' B';
    }
    if (k === 'graph_compute' && c.split[i] >= 0) return 'split ' + c.split[i] + ' · ' + num(c.arg[i]) + ' nodes';
    if (c.rtype[i] === s.rowTypes.kernels && c.mark && c.mark[i] >= 0) return unescape(s.marks[c.mark[i]]);
    return k;
  }
  function lowerBound(a, lo, hi, x) {
    while (lo < hi) { const m = (lo + hi) >> 1; if (a[m] < x) lo = m + 1; else hi = m; }
    return lo;
  }
  function view(s, x0, x1, widthPx) {
    const cfg = s.config, c = s.c, nRows = s.rows.length, nCls = s.classes.length;
    const span = Math.max(x1 - x0, 1), px = span / widthPx;
    const segs = []; for (let k = 0; k < nCls; k++) segs.push({x: [], y: []});
    const hx = [], hy = [], ht = [], lx = [], ly = [], lt = [];
    const exactRow = new Uint8Array(nRows);
    let exact = 0, aggRows = 0;
    for (let r = 0; r < nRows; r++) {
      const a = s.rowStart[r], b = s.rowStart[r + 1];
      if (a === b) { exactRow[r] = 1; continue; }
      const lo = lowerBound(c.t0, a, b, x0 - s.rowMaxDur[r] - 1);
      const hi = lowerBound(c.t0, lo, b, x1 + 1);
      const vis = [];
      for (let i = lo; i < hi; i++) if (c.t0[i] + c.dur[i] >= x0) vis.push(i);
      if (vis.length <= cfg.rowDetail) {
        exactRow[r] = 1;
        for (const i of vis) {
          const b0 = c.t0[i], e0 = Math.max(b0 + c.dur[i], b0 + px);
          const sg = segs[c.cls[i]];
          sg.x.push(b0 / 1e9, e0 / 1e9, NaN); sg.y.push(r, r, NaN);
          const cb = Math.max(b0, x0), ce = Math.min(e0, x1);
          const np = Math.min(Math.max(Math.ceil((ce - cb) / (cfg.hoverPx * px)), 1), 200);
          const txt = hoverText(s, i);
          for (let j = 0; j < np; j++) { hx.push((cb + (ce - cb) * (j + 0.5) / np) / 1e9); hy.push(r); ht.push(txt); }
          if (ce - cb >= cfg.labelMinPx * px && lt.length < cfg.labelLimit) {
            let l = unescape(barLabel(s, i)); const m = Math.max(Math.floor((ce - cb) / px / 6.0) - 1, 1);
            if (l.length > m) l = l.slice(0, Math.max(m - 1, 1)) + '…';
            lx.push((cb + ce) / 2e9); ly.push(r); lt.push(l);
          }
        }
        exact += vis.length;
      } else {
        aggRows++;
        const nb = cfg.bins, w = span / nb;
        const busy = new Float64Array(nCls * nb), cnt = new Float64Array(nb);
        for (const i of vis) {
          const s0 = (Math.min(Math.max(c.t0[i], x0), x1) - x0) / w;
          const e0 = (Math.min(Math.max(c.t0[i] + c.dur[i], x0), x1) - x0) / w;
          const k = c.cls[i];
          let f = Math.min(Math.floor(s0), nb - 1), l = Math.min(Math.floor(e0), nb - 1);
          for (let q = f; q <= l; q++) {
            const ov = Math.min(e0, q + 1) - Math.max(s0, q);
            if (ov > 0) busy[k * nb + q] += ov;
            cnt[q] += 1;
          }
        }
        let q = 0;
        const dom = new Int32Array(nb).fill(-1);
        for (q = 0; q < nb; q++) {
          if (cnt[q] <= 0) continue;
          let best = 0, bv = -1;
          for (let k = 0; k < nCls; k++) if (busy[k * nb + q] > bv) { bv = busy[k * nb + q]; best = k; }
          dom[q] = best;
        }
        q = 0;
        while (q < nb) {
          if (dom[q] < 0) { q++; continue; }
          let e = q, n = 0, bsum = 0;
          while (e < nb && dom[e] === dom[q]) {
            n += cnt[e];
            for (let k = 0; k < nCls; k++) bsum += busy[k * nb + e];
            e++;
          }
          const rb = x0 + q * w, re = x0 + e * w;
          const sg = segs[dom[q]];
          sg.x.push(rb / 1e9, re / 1e9, NaN); sg.y.push(r, r, NaN);
          const txt = '<b>' + s.rows[r] + '</b><br>' + Math.round(100 * Math.min(bsum / (e - q), 1)) +
            '% busy · mostly ' + s.classes[dom[q]] + '<br>' + us(rb) + ' → ' + us(re) + '<br>about ' +
            num(n) + ' interval-bins (zoom in for each interval)';
          const np = Math.min(Math.max(Math.ceil((re - rb) / (cfg.hoverPx * px)), 1), 200);
          for (let j = 0; j < np; j++) { hx.push((rb + (re - rb) * (j + 0.5) / np) / 1e9); hy.push(r); ht.push(txt); }
          q = e;
        }
      }
    }
    const arrows = [{x: [], y: [], hx: [], hy: [], sym: []}, {x: [], y: [], hx: [], hy: [], sym: []}];
    let inView = [];
    const A = s.a;
    for (let i = 0; i < s.arrows.n; i++) {
      const lo = Math.min(A.t0[i], A.t1[i]), hi = Math.max(A.t0[i], A.t1[i]);
      if (hi >= x0 && lo <= x1 && exactRow[A.r0[i]] && exactRow[A.r1[i]]) inView.push(i);
    }
    const hidden = inView.length > cfg.arrowLimit ? inView.length : 0;
    if (hidden) inView = [];
    for (const i of inView) {
      const g = arrows[A.type[i]];
      g.x.push(A.t0[i] / 1e9, A.t1[i] / 1e9, NaN); g.y.push(A.r0[i], A.r1[i], NaN);
      const d = Math.sign(A.r1[i] - A.r0[i]);
      g.hx.push(A.t1[i] / 1e9); g.hy.push(A.r1[i] - d * 0.3);
      g.sym.push(A.r1[i] >= A.r0[i] ? 'triangle-down' : 'triangle-up');
    }
    return {segs, hx, hy, ht, lx, ly, lt, arrows, hidden, exact, aggRows};
  }
  function redraw(st) {
    const gd = st.gd, s = st.s, xa = gd._fullLayout.xaxis;
    const x0 = xa.range[0] * 1e9, x1 = xa.range[1] * 1e9;
    const key = x0 + ':' + x1 + ':' + xa._length;
    if (key === st.key) return;
    st.key = key;
    const v = view(s, x0, x1, Math.max(xa._length, 100));
    const data = gd.data.map(function (t) {
      const m = String(t.meta || '');
      const o = Object.assign({}, t);
      if (m.startsWith('bars:')) { const g = v.segs[+m.slice(5)]; o.x = g.x; o.y = g.y; }
      else if (m.startsWith('arrows:')) { const g = v.arrows[+m.slice(7)]; o.x = g.x; o.y = g.y; }
      else if (m.startsWith('heads:')) {
        const g = v.arrows[+m.slice(6)]; o.x = g.hx; o.y = g.hy;
        o.marker = Object.assign({}, t.marker, {symbol: g.sym});
      }
      else if (m === 'hover') { o.x = v.hx; o.y = v.hy; o.hovertext = v.ht; }
      else if (m === 'labels') { o.x = v.lx; o.y = v.ly; o.text = v.lt; }
      return o;
    });
    st.drawn = v;
    gd.dataset.exactInView = v.exact;
    gd.dataset.aggregatedRows = v.aggRows;
    const note = [];
    if (v.aggRows) note.push(v.aggRows + ' busy rows aggregated: zoom in for each interval');
    if (v.hidden) note.push(num(v.hidden) + ' arrows hidden: zoom in');
    const title = Object.assign({}, gd.layout.title, {
      text: s.title + (note.length ? '<br><sup>' + note.join(' · ') + '</sup>' : '')});
    return Plotly.react(gd, data, Object.assign({}, gd.layout, {title: title})).then(function () {
      st.lastRedraw = performance.now();
    });
  }
  window.ggmlTraceTimeline = function (id) {
    const gd = document.getElementById(id);
    const st = {gd: gd, s: null, key: null, timer: null};
    reg[id] = st;
    st.ready = load(id).then(function (s) {
      st.s = s;
      gd.dataset.intervals = s.n;
      gd.dataset.rows = s.rows.length;
      gd.on('plotly_relayout', function () {
        clearTimeout(st.timer);
        st.timer = setTimeout(function () { redraw(st); }, 60);
      });
      const xa = gd._fullLayout.xaxis;
      st.key = xa.range[0] * 1e9 + ':' + xa.range[1] * 1e9 + ':' + xa._length;
      gd.dataset.ready = '1';
      return st;
    }).catch(function (e) { console.error('ggml-trace timeline: ' + e); throw e; });
  };
})();
"""
