"""Export a loaded trace for other tools: Chrome trace-event JSON (Perfetto UI, chrome://tracing)
and Parquet (one file per DataFrame). See docs/timeline.md.

Perfetto JSON layout: the traced process is one process with a track per host thread; each
backend is a process of its own ("VDEV0 · …") with an execution track, a CUPTI kernels track
when the trace has them, and one copies track per direction, the same rows as `analysis.timeline`;
NVML samples are counter tracks ("C") of a "GPU counters" process. Intervals are complete
events ("X"); where intervals on one track overlap without nesting (complete events must nest),
they become async slices ("b"/"e"). Flow arrows ("s"/"f", bp "e") link each submission to its device execution
and each event record to its waits.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from .intervals import ROW_COPIES, ROW_EXEC, ROW_KERNELS, ROW_THREAD, IntervalModel
from .schema import FRAMES
from .stream_races import WORK_OPS, event_edges, stream_operations
from .summary import summarize
from .view_text import StringTables, bar_labels

BACKEND_PID_BASE = 1_000_000_000  # backend "processes": far from any real pid
COUNTERS_PID = BACKEND_PID_BASE - 1  # the GPUs' NVML counters
STREAMS_PID = BACKEND_PID_BASE - 2  # CUDA streams mode: ggml-cuda's streams, in issue order


def _ts(ns) -> np.ndarray:
    """ns -> µs for the JSON. +0.1 ns keeps every reader on the right nanosecond whether it
    truncates or rounds µs * 1000 (printed with 4 decimals)."""
    return (np.asarray(ns, np.float64) + 0.1) / 1000.0


def _prev_active(track: np.ndarray, b: np.ndarray, e: np.ndarray) -> np.ndarray:
    """For intervals sorted by (track, begin, -end): the nearest earlier interval of the same
    track still open at my begin (end > my begin), or -1. Binary lifting over a sparse table
    of running maxima of the ends: O(n log n), whole-array steps."""
    n = len(b)
    if n == 0:
        return np.zeros(0, np.int64)
    first = np.r_[0, np.flatnonzero(track[1:] != track[:-1]) + 1]
    start = np.repeat(first, np.diff(np.r_[first, n]))
    levels = [e]
    while (1 << len(levels)) <= n:
        prev, h = levels[-1], 1 << (len(levels) - 1)
        nxt = prev.copy()
        nxt[: n - h] = np.maximum(prev[: n - h], prev[h:])
        levels.append(nxt)
    pos = np.arange(n)
    for lv in range(len(levels) - 1, -1, -1):
        step = 1 << lv
        cand = pos - step
        ok = cand >= start
        okc = np.where(ok, cand, 0)
        ok &= levels[lv][okc] <= b  # that whole block ended before my begin: skip it
        pos = np.where(ok, cand, pos)
    j = pos - 1
    found = (j >= start) & (e[np.maximum(j, 0)] > b)
    return np.where(found, j, -1)


def nesting(track: np.ndarray, b: np.ndarray, e: np.ndarray) -> np.ndarray:
    """True for the intervals that can be complete events: those left after dropping, one
    round at a time, every interval that partially overlaps its nearest open predecessor on
    its track. What is left nests properly on every track."""
    n = len(b)
    ok = np.ones(n, bool)
    if n == 0:
        return ok
    order = np.lexsort((-e, b, track))
    idx = order
    while True:
        t_, b_, e_ = track[idx], b[idx], e[idx]
        j = _prev_active(t_, b_, e_)
        bad = (j >= 0) & (e_[np.maximum(j, 0)] < e_)
        if not bad.any():
            return ok
        ok[idx[bad]] = False
        idx = idx[~bad]


def _records(df: pd.DataFrame) -> list[str]:
    """One JSON object per row (pandas' C serializer), with µs times at 4 decimals."""
    if len(df) == 0:
        return []
    text = df.to_json(orient="records", lines=True, double_precision=4, force_ascii=False)
    return text.rstrip("\n").split("\n")


def _args(model: IntervalModel, tb: StringTables, iv: pd.DataFrame) -> list[dict]:
    """Per-interval args for the Perfetto details panel (plain strings, not HTML)."""
    def pick(table, codes):
        arr = np.array(list(table) + [None], dtype=object)
        c = np.asarray(codes, np.int64)
        return arr[np.where((c >= 0) & (c < len(table)), c, len(table))]

    buf = lambda col: np.where(iv[col].to_numpy() >= 0, np.searchsorted(  # noqa: E731
        tb.buf_ptrs, iv[col].to_numpy()), -1) if len(tb.buf_ptrs) else np.full(len(iv), -1)
    tpos = (np.where(iv["thread"] >= 0, np.searchsorted(tb.thread_ids, iv["thread"].to_numpy()),
                     -1) if tb.thread_ids else np.full(len(iv), -1))
    is_copy = (iv["rtype"].to_numpy() == ROW_COPIES) | (iv["src_t"].to_numpy() >= 0) | (
        iv["dst_t"].to_numpy() >= 0) | (iv["src_buf"].to_numpy() >= 0)
    a = pd.DataFrame({
        "kind": pick(tb.kinds, iv["kind"]),
        "backend": pick(tb.backends, iv["backend"]),
        "graph": iv["graph"].where(iv["graph"] >= 0).astype("Int64").astype(object),
        "split": iv["split"].where(iv["split"] >= 0).astype("Int64").astype(object),
        "arg": iv["arg"].astype(np.int64).astype(object),
        "thread": pick(tb.threads, tpos),
        "call_id": iv["call_id"].astype(np.uint64).map(lambda x: f"0x{int(x):x}"),
        "on_device": iv["device"].astype(bool),
        "src_tensor": np.where(is_copy, pick(tb.tensors, iv["src_t"]), None),
        "dst_tensor": np.where(is_copy, pick(tb.tensors, iv["dst_t"]), None),
        "src_buffer": np.where(is_copy, pick(tb.buffers, buf("src_buf")), None),
        "dst_buffer": np.where(is_copy, pick(tb.buffers, buf("dst_buf")), None),
        "src_offset": np.where(is_copy & (iv["src_off"] >= 0), iv["src_off"].astype(np.int64)
                               .astype(object), None),
        "dst_offset": np.where(is_copy & (iv["dst_off"] >= 0), iv["dst_off"].astype(np.int64)
                               .astype(object), None),
        "event": np.where(iv["event"] >= 0, iv["event"].astype(np.int64).map(
            lambda x: f"0x{int(x):x}"), None),
        "name": pick(tb.marks, iv["mark"]),
        "reads": np.where(~is_copy & (iv["n_r"] > 0), iv["n_r"].astype(object), None),
        "writes": np.where(~is_copy & (iv["n_w"] > 0), iv["n_w"].astype(object), None),
        "bytes_read": np.where(~is_copy & (iv["n_r"] > 0), iv["b_r"].astype(np.int64)
                               .astype(object), None),
        "bytes_written": np.where(~is_copy & (iv["n_w"] > 0), iv["b_w"].astype(np.int64)
                                  .astype(object), None),
        "last_write": np.where(~is_copy, pick(tb.tensors, iv["last_w"]), None),
    })
    a = a.astype(object).where(a.notna(), None)
    recs = a.to_dict("records")
    return [{k: v for k, v in r.items() if v is not None} for r in recs]


def perfetto_events(trace) -> dict:
    """The trace as a Chrome trace-event JSON object ({"traceEvents": [...], ...})."""
    model = IntervalModel(trace)
    tb = StringTables(model, [], esc=str)
    iv = model.iv
    rows = model.rows
    pid = _pid(trace)
    exe = os.path.basename(trace.meta.get("exe", "")) or "process"
    rtype = iv["rtype"].to_numpy()
    thread = iv["thread"].to_numpy()
    group = rows["group"].to_numpy()[iv["row"].to_numpy()]
    # tracks: host threads by thread index; backend rows by row number
    th = trace.threads.set_index("thread")["os_tid"]
    tid_of_thread = {int(t): int(o) if int(o) else 1_000_000 + int(t) for t, o in th.items()}
    host = rtype == ROW_THREAD
    ev_pid = np.where(host, pid, BACKEND_PID_BASE + group)
    row = iv["row"].to_numpy()
    ev_tid = np.where(host, pd.Series(thread).map(tid_of_thread).fillna(
        pd.Series(1_000_000 + thread)).to_numpy(np.int64), 1 + row)
    t0, t1 = iv["t0"].to_numpy(), iv["t1"].to_numpy()
    track = ev_pid.astype(np.int64) * (1 << 31) + ev_tid
    ok = nesting(track, t0, t1)

    names = bar_labels(iv, tb).to_numpy(dtype=object)
    kinds = np.array(tb.kinds + ["?"], dtype=object)[np.where(iv["kind"] >= 0, iv["kind"], -1)]
    args = _args(model, tb, iv)
    base = pd.DataFrame({"name": names, "cat": kinds, "pid": ev_pid, "tid": ev_tid})
    base["args"] = args
    x = base[ok].copy()
    x.insert(1, "ph", "X")
    x["ts"] = _ts(t0[ok])
    x["dur"] = _ts(t1[ok] - t0[ok])
    bad = np.flatnonzero(~ok)
    ab = base.iloc[bad].copy()
    ab.insert(1, "ph", "b")
    ab["id"] = [f"0x{i:x}" for i in range(1, len(bad) + 1)]
    ab["ts"] = _ts(t0[bad])
    ae = ab[["name", "cat", "pid", "tid", "id"]].copy()
    ae.insert(1, "ph", "e")
    ae["ts"] = _ts(t1[bad])

    # flows: both ends must be complete events (flows bind to thread slices)
    ar = model.arrows
    ia, ib = ar["ia"].to_numpy(np.int64), ar["ib"].to_numpy(np.int64)
    keep = ok[ia] & ok[ib] if len(ar) else np.zeros(0, bool)
    ia, ib, at = ia[keep], ib[keep], ar["type"].to_numpy()[keep]
    flow_name = np.array(["submit", "event"], dtype=object)[at.astype(np.int64)]
    ids = np.arange(1, len(ia) + 1)
    fs = pd.DataFrame({"name": flow_name, "ph": "s", "cat": "flow", "id": ids,
                       "pid": ev_pid[ia], "tid": ev_tid[ia],
                       "ts": _ts((t0[ia] + t1[ia]) // 2)})
    ff = pd.DataFrame({"name": flow_name, "ph": "f", "bp": "e", "cat": "flow", "id": ids,
                       "pid": ev_pid[ib], "tid": ev_tid[ib],
                       "ts": _ts((t0[ib] + t1[ib]) // 2)})

    meta = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
             "args": {"name": f"{exe} (pid {pid})"}},
            {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
             "args": {"sort_index": 0}}]
    used_threads = sorted(set(thread[host].tolist()))
    for i, t in enumerate(used_threads):
        meta.append({"name": "thread_name", "ph": "M", "pid": pid,
                     "tid": int(tid_of_thread.get(t, 1_000_000 + t)),
                     "args": {"name": model.thread_label.get(t, f"T{t}")}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid,
                     "tid": int(tid_of_thread.get(t, 1_000_000 + t)), "args": {"sort_index": i}})
    for r in range(len(rows)):
        rt, g = int(rows["rtype"].iat[r]), int(rows["group"].iat[r])
        if rt not in (ROW_EXEC, ROW_COPIES, ROW_KERNELS) or not model.row_counts[r]:
            continue
        bpid = BACKEND_PID_BASE + g
        if not any(m["pid"] == bpid and m["name"] == "process_name" for m in meta):
            meta.append({"name": "process_name", "ph": "M", "pid": bpid, "tid": 0,
                         "args": {"name": model.group_info[model.group_names[g]]}})
            meta.append({"name": "process_sort_index", "ph": "M", "pid": bpid, "tid": 0,
                         "args": {"sort_index": 1 + g}})
        meta.append({"name": "thread_name", "ph": "M", "pid": bpid, "tid": 1 + r,
                     "args": {"name": str(rows["label"].iat[r])}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": bpid, "tid": 1 + r,
                     "args": {"sort_index": r}})
    stream_meta, stream_frames = _cuda_streams(trace, len(ia))
    meta += stream_meta
    counters = _counters(trace)
    if len(counters):
        meta.append({"name": "process_name", "ph": "M", "pid": COUNTERS_PID, "tid": 0,
                     "args": {"name": "GPU counters (NVML)"}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": COUNTERS_PID, "tid": 0,
                     "args": {"sort_index": 1 + len(model.group_names)}})
    return {"meta": meta, "frames": [x, ab, ae, fs, ff, counters, *stream_frames],
            "counts": {"complete": int(ok.sum()), "async": int(len(bad)), "flows": int(len(ia))},
            "other": {"t0_realtime_ns": int(trace.header.get("t0_realtime_ns", 0)),
                      "source": getattr(trace, "display_path", None) or str(trace.path)}}


def _cuda_streams(trace, first_flow: int) -> tuple[list[dict], list[pd.DataFrame]]:
    """CUDA streams mode (docs/cuda-streams.md): a track per CUDA stream of a "CUDA streams" process,
    each operation issued inside a split at its issue time (the host's: not when it ran), named by the
    node it computes (else its kernel, or its event), lasting until the stream's next issue; a flow
    arrow from each event record to the stream waits bound to it."""
    cu = getattr(trace, "cuda", None)
    if cu is None or len(cu) == 0:
        return [], []
    s = stream_operations(trace)
    ops = s.ops.merge(s.streams, on=["backend", "stream"], how="left")
    if len(ops) == 0:
        return [], []
    t = cu.set_index("seq")["t"].reindex(ops["seq"]).to_numpy(np.int64)
    tid = 1 + s.streams.index.to_numpy()[pd.Index(s.streams["label"]).get_indexer(ops["label"])]
    w = trace.accesses
    w = w[(w["mode"] == "write").to_numpy(bool) & w["index"].notna().to_numpy(bool)]
    names = pd.Series(w["tensor"].astype(str).to_numpy(), index=pd.MultiIndex.from_arrays(
        [w["call_id"].to_numpy(np.uint64), w["index"].astype(np.int64).to_numpy()])).groupby(level=[0, 1]).first()
    node = ops["node"].astype("float64").fillna(-1).astype(np.int64).to_numpy()
    node_name = names.reindex(pd.MultiIndex.from_arrays([ops["call_id"].to_numpy(np.uint64), node])).to_numpy(object)
    work = ops["op"].isin(WORK_OPS).to_numpy(bool)
    other = (ops["op"].astype(str) + " " + ops["handle"].map(lambda h: f"0x{int(h):x}")).to_numpy(object)
    name = np.where(work & pd.notna(node_name), node_name,
                    np.where(work, ops["kernel"].astype(object).fillna("kernel").to_numpy(object), other))
    # an operation lasts, on its track, until the stream's next issue (1 us for the last one)
    nxt = pd.Series(t).groupby(tid).shift(-1).to_numpy(np.float64)
    dur = np.where(np.isnan(nxt), 1000, nxt - t).astype(np.int64)
    x = pd.DataFrame({"name": name, "ph": "X", "cat": ops["op"].astype(str).to_numpy(object), "pid": STREAMS_PID,
                      "tid": tid, "ts": _ts(t), "dur": _ts(np.maximum(dur, 1)),
                      "args": [{"kernel": k, "graph": int(g) if pd.notna(g) else None, "split": int(sp) if pd.notna(sp)
                                else None, "captured": bool(c)} for k, g, sp, c in
                               zip(ops["kernel"].astype(object), ops["graph"], ops["split"], ops["captured"])]})
    waits, records, _ = event_edges(s.ops)
    ids = first_flow + 1 + np.arange(len(waits))
    fs = pd.DataFrame({"name": "cuda event", "ph": "s", "cat": "flow", "id": ids, "pid": STREAMS_PID,
                       "tid": tid[records], "ts": _ts(t[records])})
    ff = pd.DataFrame({"name": "cuda event", "ph": "f", "bp": "e", "cat": "flow", "id": ids, "pid": STREAMS_PID,
                       "tid": tid[waits], "ts": _ts(t[waits])})
    meta = [{"name": "process_name", "ph": "M", "pid": STREAMS_PID, "tid": 0,
             "args": {"name": "CUDA streams (issue order)"}}]
    for i, label in enumerate(s.streams["label"].tolist()):
        meta.append({"name": "thread_name", "ph": "M", "pid": STREAMS_PID, "tid": 1 + i, "args": {"name": label}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": STREAMS_PID, "tid": 1 + i,
                     "args": {"sort_index": i}})
    return meta, [x, fs, ff]


def _pid(trace) -> int:
    """The traced process id: META pid when it is a plausible number, else the header's."""
    text = str(trace.meta.get("pid", "")).strip()
    if text.isdigit() and 0 < int(text) < BACKEND_PID_BASE - 1:
        return int(text)
    pid = int(trace.header.get("pid") or 1)
    return pid if 0 < pid < BACKEND_PID_BASE - 1 else 1


def _counters(trace) -> pd.DataFrame:
    """NVML samples as counter events, one track per (GPU, metric); samples taken before the
    trace began (the sampler starts first) are left out."""
    s = getattr(trace, "gpu_samples", None)
    if s is None or len(s) == 0:
        return pd.DataFrame()
    s = s[s["t"].to_numpy() >= 0]
    return pd.DataFrame({
        "name": ("GPU" + s["device"].astype(str) + " " + s["metric"].astype(str)).to_numpy(),
        "ph": "C", "pid": COUNTERS_PID, "tid": 0, "ts": _ts(s["t"]),
        "args": [{"value": v} for v in s["value"].tolist()],
    })


def export_perfetto(trace, path) -> dict:
    """Write Chrome trace-event JSON for the Perfetto UI to `path`; returns event counts."""
    ev = perfetto_events(trace)
    lines = [json.dumps(m, ensure_ascii=False) for m in ev["meta"]]
    for f in ev["frames"]:
        lines += _records(f)
    other = json.dumps({"ggml-trace": ev["other"]}, ensure_ascii=False)
    with open(path, "w", encoding="utf-8") as out:
        out.write('{"displayTimeUnit":"ns","otherData":' + other + ',"traceEvents":[\n')
        out.write(",\n".join(lines))
        out.write("\n]}\n")
    return ev["counts"]


def export_parquet(trace, directory) -> list[Path]:
    """One Parquet file per DataFrame of the trace in `directory` (created), plus meta.json
    (meta, header, warnings, summary). Returns the paths written."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for name in FRAMES:
        df = getattr(trace, name, None)
        if df is None:
            continue
        p = d / f"{name}.parquet"
        df.to_parquet(p, index=False)
        out.append(p)
    header = {k: (v.decode("latin-1").rstrip("\0") if isinstance(v, bytes) else v)
              for k, v in trace.header.items()}
    p = d / "meta.json"
    p.write_text(json.dumps({"source": getattr(trace, "display_path", None) or str(trace.path),
                             "meta": trace.meta, "header": header,
                             "nvml": getattr(trace, "nvml", None),
                             "warnings": list(trace.warnings), "summary": summarize(trace)},
                            indent=2, default=str))
    out.append(p)
    return out
