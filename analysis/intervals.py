"""The interval model of a trace: every call, device interval, copy, kernel, mark and arrow on its
timeline row, and the string tables it draws its names from (see docs/timeline.md). The text the
views show of it (escaping, hover text, bar labels) is in analysis/view_text.py.

This module has no plotting dependency: the plotly timeline (analysis/timeline.py), the Perfetto
and Parquet exports (analysis/export.py) and the report page are views of it.
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd

from .arrays import cat_codes, int_values, lookup, take_filled
from .frames import DEVICE_KIND, backend_labels
from .kinds import COPY_KINDS, GPU_KINDS
from .load import best_device_intervals

MAX_LANES = 4          # nesting lanes per host thread

ROW_HEADER, ROW_THREAD, ROW_EXEC, ROW_COPIES, ROW_COUNTER, ROW_KERNELS = range(6)
NONE = -1


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


def graph_range(graphs) -> tuple[int, int]:
    if isinstance(graphs, (int, np.integer)):
        return int(graphs), int(graphs)
    if isinstance(graphs, str):
        a, _, b = graphs.partition(":")
        if not _:
            return int(a), int(a)
        return (int(a) if a.strip() else 0), (int(b) if b.strip() else 2**62)
    a, b = graphs
    return (0 if a is None else int(a)), (2**62 if b is None else int(b))


def match_backends(backends, names: list[str], table: pd.DataFrame) -> np.ndarray:
    if isinstance(backends, str):
        backends = [backends]
    dev: dict[str, set[str]] = {}
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


def counter_rows(trace, first_row: int) -> dict:
    """GPU counter rows (utilisation, clocks, memory...): each (device, metric) of
    `trace.gpu_samples` (columns t (ns), device, metric, value; NVML samples that
    `ggml-trace record` stores) gets a row of its own: `labels`, and per row a `series` dict
    (row, name, t in ns, y: the values scaled into the row, value)."""
    s = getattr(trace, "gpu_samples", None)
    if s is None or len(s) == 0:
        return {"labels": [], "series": []}
    labels, series = [], []
    for i, ((dev, metric), g) in enumerate(s.groupby(["device", "metric"], observed=True,
                                                    sort=True)):
        row = first_row + i
        v = g["value"].to_numpy(np.float64)
        top = float(np.nanmax(np.abs(v))) or 1.0
        labels.append(f"GPU{dev} {metric}")
        series.append({"row": row, "name": f"GPU{dev} {metric}", "t": g["t"].to_numpy(np.int64),
                       "y": row + 0.4 - 0.8 * v / top, "value": v})
    return {"labels": labels, "series": series}


# -- the model: every interval, row and arrow of a trace ---------------------------------------

class IntervalModel:
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
        # traces read together (analysis/together.py): a thread's index in its own process is in
        # the low 32 bits, and the process names the heading its threads sit under
        self.thread_label = {int(t): f"T{int(t) & 0xFFFFFFFF} {'' if pd.isna(n) else n} (tid {int(o)})"
                             for t, n, o in zip(th["thread"], names, th["os_tid"])}
        procs = th["process"].astype(object) if "process" in th.columns else [None] * len(th)
        self.thread_process = {int(t): p for t, p in zip(th["thread"], procs)}

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
        kind = cat_codes(calls["kind"])
        host = kind != self.kinds.index(DEVICE_KIND) if DEVICE_KIND in self.kinds else np.ones(
            len(calls), bool)
        c = calls[host]
        call_thread = c["thread"].to_numpy(np.int64)
        t0, t1 = c["t_begin"].to_numpy(np.int64), c["t_end"].to_numpy(np.int64)
        lane = np.minimum(_depth(call_thread, t0, t1), MAX_LANES - 1)
        base = {
            "call_id": c["call_id"].to_numpy(np.uint64),
            "kind": cat_codes(c["kind"]),
            "t0": t0, "t1": t1,
            "thread": call_thread,
            "backend": cat_codes(c["backend"]),
            "graph": int_values(c["graph"]),
            "split": int_values(c["split"]),
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
            "src_b": cat_codes(copies["src_backend"]), "dst_b": cat_codes(copies["dst_backend"]),
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
                                                  "mark": cat_codes(mn)}), on="call_id", how="left")
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
                              "kind": cat_codes(dev["kind"]), "backend": cat_codes(dev["backend"]),
                              "graph": int_values(dev["graph"]), "split": int_values(dev["split"]),
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
        execs["group"] = self.backend_group[int_values(execs["backend"])]
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
        group = self.backend_group[cat_codes(g["backend"])]
        by_name = np.array([self.group_index.get(f"CUDA{d}", NONE) for d in range(
            int(g["device"].max()) + 1)], np.int64)
        group = np.where(group >= 0, group, by_name[g["device"].to_numpy(np.int64)])
        names = g["name"].astype(object).where(g["name"].notna(), g["copy_kind"].astype(object))
        names = pd.Categorical(names.fillna("").astype(str))
        base = len(self.mark_names)
        self.mark_names = self.mark_names + [str(x) for x in names.categories]
        kind = self.kinds.index("kernel") + cat_codes(g["kind"])
        # the launching call's thread, for "enqueued by"
        calls = self.trace.calls
        cid = g["call_id"].fillna(0).to_numpy(np.uint64)
        thread = take_filled(calls["thread"].to_numpy(np.int64),
                       lookup(calls["call_id"].to_numpy(np.uint64), cid), NONE)
        out = pd.DataFrame({
            "call_id": cid,
            "kind": kind, "t0": g["t_begin"].to_numpy(np.int64), "t1": g["t_end"].to_numpy(np.int64),
            "thread": thread, "backend": cat_codes(g["backend"]), "graph": int_values(g["graph"]),
            "split": int_values(g["split"]),
            "arg": np.where(g["kind"] == "kernel", g["grid"], g["bytes"]).astype(np.float64),
            "rtype": ROW_KERNELS, "lane": 0, "group": group, "device": True,
            "mark": base + names.codes.astype(np.int64),
        })
        return out[out["group"] >= 0]

    def _tensor_codes(self, col: pd.Series) -> np.ndarray:
        """Codes of a tensor-name column in the tensor table (the accesses' categories)."""
        if list(col.cat.categories) != self.tensors:
            col = col.cat.set_categories(self.tensors)
        return cat_codes(col)

    def _access_summary(self) -> pd.DataFrame:
        """Per call: how many reads and writes, their bytes, and the last tensor written
        (a split's output), from trace.accesses."""
        acc = self.trace.accesses
        w = (acc["mode"] == "write").to_numpy()
        size = acc["size"].to_numpy(np.float64)
        a = pd.DataFrame({"call_id": acc["call_id"].to_numpy(np.uint64), "n_r": ~w, "n_w": w,
                          "b_r": np.where(w, 0.0, size), "b_w": np.where(w, size, 0.0)})
        out = a.groupby("call_id", sort=False).sum()
        last = pd.Series(cat_codes(acc["tensor"])[w], index=a["call_id"].to_numpy()[w])
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
            ga, gb = graph_range(graphs)
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
            want = match_backends(backends, self.group_names, self.trace.backends)
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
        rows = []
        heading = object()
        th = iv[iv["rtype"] == ROW_THREAD]
        lanes = th[["thread", "lane"]].drop_duplicates().sort_values(["thread", "lane"])
        for t, ln in zip(lanes["thread"].tolist(), lanes["lane"].tolist()):
            proc = self.thread_process.get(t)
            if proc != heading:
                rows.append((ROW_HEADER, -1, -1, -1, -1, f"Process {proc}" if proc else f"Process {pid} · {exe}"))
                heading = proc
            lab = self.thread_label.get(t, f"T{t}")
            rows.append((ROW_THREAD, t, ln, -1, -1,
                         lab if ln == 0 else f"{lab.split(' ')[0]} · depth {ln}"
                         + ("+" if ln == MAX_LANES - 1 else "")))
        if not rows:
            rows.append((ROW_HEADER, -1, -1, -1, -1, f"Process {pid} · {exe}"))
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
        self.counter_rows = counter_rows(tr, len(rows))
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
        info: dict[int, str] = {}
        for ptr, bt, us in zip(b["buffer"].tolist(), b["buft_name"].astype(object),
                               b["usage"].astype(object)):
            info.setdefault(int(ptr), f"{'' if pd.isna(bt) else bt} {'' if pd.isna(us) else us}")
        labels = [("host memory" if int(p) == 0 else f"0x{int(p):x} {info.get(int(p), '')}".strip())
                  for p in uniq.tolist()]
        return uniq, labels




def races_as_list(trace, races):
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
