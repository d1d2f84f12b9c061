"""Builds the DataFrames of one trace's records (a RawTrace, read by analysis/trace_file.py):
threads, backends, buffers, calls, accesses, allocations, copies, splits, sync, device, gpu,
delays, marks, gpu_samples and meta, every column as docs/dataframes.md describes it;
analysis/load.py puts them in a Trace.

Everything is computed on whole numpy arrays: names are mapped once per distinct string id,
joins are hash or sorted lookups over whole columns, never per-row Python.

Longer than the ~600 lines a module is held to: Loader alone is ~575, one class whose methods
share the arrays of one load (call rows, buffer lifetimes); cutting it would split that state.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .arrays import (categorical, frame_of, lookup, nullable, pick_lifetime, take_filled, take_rows,
                     with_codes)
from .kinds import ASYNC_KINDS, COPY_KINDS, EVENT_KINDS, MARK_KINDS, SYNC_KINDS
from .raw_trace import RawTrace
from .threads import side_by_side
from .trace_format import (
    ACC_READ, ACC_WRITE, BUF_FREED, CALL_DECLINED, CALL_DTYPE, CALL_FAILED, CALL_KINDS, CALL_META_PARENT,
    DELAY_RULE_SHIFT, DELAY_WHERE_SHIFT, DEVICE_END_LATE, DEVICE_SOURCE_SHIFT, DEVICE_START_ESTIMATED, GPU_API,
    GPU_CORRELATION, GPU_GRAPH, GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET, KIND_IDS, META_ROLES, NEST_NO_DEVICE, NONE32, SCHED_NONE, SRC_DEVICE,
    SRC_EVENTS, SRC_MARKERS,
)

MISSING_STRING = "<missing string>"  # an id that no StringRec defines

DEVICE_TYPES = ["cpu", "gpu", "igpu", "accel", "other"]  # enum ggml_backend_dev_type, then other
USAGES = ["any", "weights", "compute"]                    # enum ggml_backend_buffer_usage
MODES = ["read", "write"]

DELAY_KIND = "delay"  # a delay injected on purpose (GGML_TRACE_DELAY); obj = the delayed call
DELAY_WHERE = pd.CategoricalDtype(["host", "queue", "stream", "work"])  # flags bits 1-2
DEVICE_KIND = "device_exec"  # work as it ran on an async device; obj = the enqueuing call
# Who observed a device interval, best first: the device itself (a virtual device's worker),
# CUPTI's kernel and copy records, the event watcher (GGML_TRACE_DEVICE_TIMING), Vulkan's markers
# (bounds only: the work ran somewhere inside [t_begin, t_end]).
DEVICE_SOURCES = ["device", "events", "cupti", "markers"]  # cupti: from REC_GPU, not a record code
SOURCE_DTYPE = pd.CategoricalDtype(DEVICE_SOURCES)
# A device_exec record's DeviceSource (flags bits 4-5) -> its code in SOURCE_DTYPE; -1: unknown
SOURCE_OF_RECORD = np.full(4, -1, np.int64)
SOURCE_OF_RECORD[[SRC_DEVICE, SRC_EVENTS, SRC_MARKERS]] = [DEVICE_SOURCES.index(s) for s in ("device", "events", "markers")]
SOURCE_PRIORITY = {"device": 0, "cupti": 1, "events": 2, "markers": 3}
# CUPTI activity (REC_GPU kinds kernel, memcpy, memset) and CUpti_ActivityMemcpyKind names.
GPU_KIND_DTYPE = pd.CategoricalDtype(["kernel", "memcpy", "memset", "graph"])
# GpuActivityKind of an activity record -> its code in GPU_KIND_DTYPE (-1: not an activity)
GPU_KIND_CODE = np.full(GPU_GRAPH + 1, -1, np.int64)
GPU_KIND_CODE[[GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET, GPU_GRAPH]] = np.arange(4)
COPY_KINDS_CUPTI = ["unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"]
COPY_KIND_DTYPE = pd.CategoricalDtype(COPY_KINDS_CUPTI)

I64_MAX = np.iinfo(np.int64).max


class Loader:
    """Builds the DataFrames of one RawTrace. Methods run in order; each keeps the numpy
    arrays the later ones need (call rows, buffer lifetimes) so joins stay in numpy."""

    def __init__(self, raw: RawTrace):
        self.raw = raw
        self.clock = raw.clock()
        self.strings = raw.strings
        self.a_call: np.ndarray | None = None  # access_calls()
        self.a_own: dict | None = None  # access_record_columns()
        self.a_lifetime = None  # each access's buffer lifetime, matched with its buffer and offset

    def rel(self, ticks: np.ndarray) -> np.ndarray:
        """Record times (ticks) -> int64 ns since the header's t0_monotonic_ns."""
        return self.clock.to_ns(ticks)

    def label(self, sid: int):
        if sid == 0:
            return None
        return self.strings.get(sid, MISSING_STRING)

    def names(self, ids: np.ndarray) -> pd.Categorical:
        return categorical(ids, self.label)

    # ---------------------------------------------------------------------------------------
    def threads(self) -> pd.DataFrame:
        r = self.raw.threads
        r = take_rows(r, np.argsort(r["t"], kind="stable"))
        # A thread may be announced again (e.g. once named): the latest record wins.
        last = len(r) - 1 - np.unique(r["thread"][::-1], return_index=True)[1]
        r = take_rows(r, np.sort(last))
        r = take_rows(r, np.argsort(r["thread"], kind="stable"))
        return frame_of({
            "thread": r["thread"].astype(np.int64),
            "os_tid": r["os_tid"].astype(np.uint64),
            "name": self.names(r["name"]),
        })

    def backends(self) -> pd.DataFrame:
        r = self.raw.backends
        r = take_rows(r, np.argsort(r["t"], kind="stable"))
        r = take_rows(r, np.unique(r["backend"], return_index=True)[1])  # first; by index
        self.b_index = r["backend"].astype(np.int64)
        name = self.names(r["name"])
        dev = r["device_type"].astype(np.int64)
        df = frame_of({
            "backend": self.b_index,
            "name": name,
            "device_name": self.names(r["device_name"]),
            "device_description": self.names(r["device_description"]),
            "device_type": with_codes(np.where(dev < 4, dev, 4),
                                       pd.CategoricalDtype(DEVICE_TYPES)),
            "has_async": r["has_async"] != 0,
            "has_events": r["has_events"] != 0,
            "ptr": r["ptr"].astype(np.uint64),
            "device_ptr": r["device_ptr"].astype(np.uint64),
        })
        # One dtype for every backend-name column; indices without a BackendRec (or without a
        # name) get a placeholder so they are not confused with "no backend".
        labels = backend_labels(df)
        calls = self.raw.calls
        used = pd.unique(np.concatenate([calls["backend"], calls["backend2"]]))
        known = set(self.b_index.tolist()) | {NONE32}
        extra = sorted(int(i) for i in used.tolist() if i not in known)
        labels += [f"backend#{i}" for i in extra]
        cats = list(dict.fromkeys(labels))
        self.backend_dtype = pd.CategoricalDtype(cats)
        self.b_keys = np.array(self.b_index.tolist() + extra, np.int64)
        self.b_codes = np.array([cats.index(x) for x in labels], np.int64)
        self.b_devtype = dev
        self.b_device_ptr = r["device_ptr"].astype(np.uint64)
        return df

    def backend_codes(self, idx: np.ndarray) -> np.ndarray:
        """Codes in backend_dtype for an array of backend indices (NONE32 -> -1)."""
        idx = idx.astype(np.int64)
        if len(self.b_keys) and self.b_keys.max() < 4096:  # small indices: a lookup table
            lut = np.full(4097, -1, np.int32)
            lut[self.b_keys] = self.b_codes
            return lut[np.minimum(idx, 4096)]
        return take_filled(self.b_codes, lookup(self.b_keys, idx), -1)

    # ---------------------------------------------------------------------------------------
    def buffers(self) -> pd.DataFrame:
        r = self.raw.buffers
        order = np.lexsort((r["t"], r["ptr"]))  # per buffer, in time order (ties: file order)
        r = take_rows(r, order)
        n = len(r)
        ptr = r["ptr"]
        freed = r["event"] == BUF_FREED
        new_ptr = np.ones(n, bool)
        new_ptr[1:] = ptr[1:] != ptr[:-1]
        # A lifetime starts at a new pointer, right after a FREED record, or where a SEEN /
        # ALLOCATED record describes other memory than the one before it (the struct was freed
        # unseen and its address reused). FREED records carry only ptr and size.
        ident = ["base", "size", "is_host", "device_ptr", "buft_name"]
        changed = np.zeros(n, bool)
        for f in ident:
            changed[1:] |= r[f][1:] != r[f][:-1]
        new_lt = new_ptr.copy()
        new_lt[1:] |= freed[:-1] | (changed[1:] & ~freed[1:])
        start = np.flatnonzero(new_lt)
        last = np.r_[start[1:], n] - 1 if n else start
        lt = np.arange(len(start))
        first_of_ptr = np.maximum.accumulate(np.where(new_ptr[start], lt, 0)) if n else lt
        generation = lt - first_of_ptr
        ended = freed[last]
        # Attributes from the latest record that is not the FREED one (usage can change).
        attr = np.where(ended & (last > start), last - 1, last)
        a = take_rows(r, attr)
        is_host = a["is_host"] != 0

        # Owning backend: host memory -> the CPU backend; otherwise the one on that device.
        cpu = np.flatnonzero(self.b_devtype == 0)
        cpu_code = self.b_codes[cpu[0]] if len(cpu) else -1
        dev_code = take_filled(self.b_codes[: len(self.b_device_ptr)],
                         lookup(self.b_device_ptr, a["device_ptr"].astype(np.uint64)), -1)
        backend = np.where(is_host, cpu_code, dev_code)

        first_seen = self.rel(r["t"][start])
        freed_t = self.rel(r["t"][last])
        by_time = np.lexsort((generation, ptr[start], first_seen))

        def sel(x: np.ndarray) -> np.ndarray:  # lifetimes in first_seen order
            return x[by_time]

        self.lt_ptr = sel(ptr[start]).astype(np.uint64)
        self.lt_base = sel(a["base"]).astype(np.uint64)
        self.lt_size = sel(a["size"]).astype(np.uint64)
        self.lt_host = sel(is_host)
        self.lt_first = sel(first_seen)
        self.lt_backend = sel(backend)
        usage = a["usage"].astype(np.int64)
        return frame_of({
            "buffer": self.lt_ptr,
            "generation": sel(generation).astype(np.int64),
            "base": self.lt_base,
            "size": self.lt_size,
            "usage": with_codes(sel(np.where(usage < 3, usage, -1)),
                                 pd.CategoricalDtype(USAGES)),
            "is_host": self.lt_host,
            "buft_name": self.names(sel(a["buft_name"])),
            "backend": with_codes(self.lt_backend, self.backend_dtype),
            "first_seen": self.lt_first,
            "freed": nullable(sel(freed_t), ~sel(ended)),
        })

    def resolve(self, buffer: np.ndarray, offset: np.ndarray, t: np.ndarray):
        """Buffer lifetime of each (buffer, offset) at time t; buffer 0 means offset is a host
        address: find the host buffer containing it and rewrite (buffer, offset) in place.
        Returns (lifetime row or -1, buffer, offset)."""
        raw_addr = np.flatnonzero(buffer == 0)
        lt = pick_lifetime(self.lt_ptr, self.lt_first, buffer, t)
        lt[raw_addr] = -1
        host = np.flatnonzero(self.lt_host)
        if len(raw_addr) and len(host):
            addr = offset[raw_addr]
            bases = np.unique(self.lt_base[host])
            j = np.searchsorted(bases, addr, side="right") - 1
            cand = bases[np.maximum(j, 0)]  # the nearest host buffer base at or below addr
            h = pick_lifetime(self.lt_base[host], self.lt_first[host], cand, t[raw_addr])
            h = np.where(h >= 0, host[np.maximum(h, 0)], -1)
            hb = np.maximum(h, 0)
            base = self.lt_base[hb]
            inside = (j >= 0) & (h >= 0) & (addr >= base) & (addr - base < self.lt_size[hb])
            hit = raw_addr[inside]
            lt[hit] = h[inside]
            buffer[hit] = self.lt_ptr[h[inside]]
            offset[hit] = addr[inside] - base[inside]
        return lt, buffer, offset

    # ---------------------------------------------------------------------------------------
    def calls(self) -> pd.DataFrame:
        cols = self.raw.calls
        order = np.argsort(cols["t_begin"], kind="stable")
        fields = [name for name in CALL_DTYPE.names if name != "type"]  # type: ignore[union-attr]  # a record dtype
        # In t_begin order, a field a thread.
        r = dict(zip(fields, side_by_side(*[lambda f=f: cols[f][order] for f in fields])))
        self.c_id = r["call_id"].astype(np.uint64)
        self.c_index = pd.Index(self.c_id)  # one hash table for every lookup by call id
        kind = r["kind"].astype(np.int64)
        self.c_kindnum = kind
        known = list(CALL_KINDS.values())
        present = np.flatnonzero(np.bincount(r["kind"], minlength=256))
        extra = sorted(set(present.tolist()) - set(CALL_KINDS))
        self.kind_dtype = pd.CategoricalDtype(known + [f"kind_{k}" for k in extra])
        lut = np.full(256, -1, np.int16)  # codes as narrow as the categories allow: less to write
        lut[list(CALL_KINDS)] = np.arange(len(known))
        lut[extra] = len(known) + np.arange(len(extra))
        self.c_kind = lut[kind]
        self.c_thread = r["thread"].astype(np.int64)
        self.c_t_begin, self.c_t_end = side_by_side(lambda: self.rel(r["t_begin"]),
                                                    lambda: self.rel(r["t_end"]))
        self.c_backend = self.backend_codes(r["backend"])
        sched = sched_ids(r["sched"].astype(np.int64), r["kind"], r["t_end"])
        graph = r["graph"].astype(np.int64)
        split = r["split"].astype(np.int64)
        self.c_sched, self.c_sched_na = sched, sched == SCHED_NONE
        self.c_graph, self.c_graph_na = graph, graph == NONE32
        self.c_split, self.c_split_na = split, split < 0
        self.c_obj = r["obj"].astype(np.uint64)
        self.c_arg = r["arg"].astype(np.uint64)
        self.c_flags = r["flags"].astype(np.uint8)
        return frame_of({
            "call_id": self.c_id,
            "kind": with_codes(self.c_kind, self.kind_dtype),
            "thread": self.c_thread,
            "t_begin": self.c_t_begin,
            "t_end": self.c_t_end,
            "duration": self.c_t_end - self.c_t_begin,
            "backend": with_codes(self.c_backend, self.backend_dtype),
            "backend2": with_codes(self.backend_codes(r["backend2"]), self.backend_dtype),
            "sched": nullable(sched, self.c_sched_na),
            "graph": nullable(graph, self.c_graph_na),
            "split": nullable(split, self.c_split_na),
            "obj": self.c_obj,
            "arg": self.c_arg,
            "failed": (r["flags"] & CALL_FAILED) != 0,
            # bit1 of a copy or a backend allreduce: the backend declined it (ggml falls back)
            "declined": ((r["flags"] & CALL_DECLINED) != 0)
                        & self.kind_table(["cpy_tensor_async", "comm_allreduce"])[self.c_kind],
            **self.nesting(r["flags"]),
        })

    def nesting(self, flags: np.ndarray) -> dict:
        """Tensor parallelism (docs/tensor-parallel.md): meta_parent marks a meta backend's call
        (a range over the calls it made); a call it made has its parent's call_id, the device
        index within the meta backend, the meta subgraph and its role."""
        n = self.raw.nest
        rows = lookup(self.c_index, n["call_id"].astype(np.uint64))
        ok = rows >= 0
        rows = rows[ok]
        parent = np.zeros(len(self.c_id), np.uint64)
        parent[rows] = n["parent"].astype(np.uint64)[ok]
        device = np.full(len(self.c_id), -1, np.int64)
        device[rows] = n["device"].astype(np.int64)[ok]
        device[device == NEST_NO_DEVICE] = -1
        sub = np.full(len(self.c_id), -1, np.int64)
        sub[rows] = n["subgraph"].astype(np.int64)[ok]
        role = np.full(len(self.c_id), -1, np.int64)
        role[rows] = n["role"].astype(np.int64)[ok] - 1  # MetaRole 1.. -> category code
        role[(role < 0) | (role >= len(META_ROLES))] = -1
        self.c_meta_parent = (flags & CALL_META_PARENT) != 0
        return {
            "meta_parent": self.c_meta_parent,
            "parent": parent,
            "device_index": nullable(device, device < 0),
            "meta_subgraph": nullable(sub, sub < 0),
            "role": with_codes(role, pd.CategoricalDtype(META_ROLES)),
        }

    def call_columns(self, rows: np.ndarray, cols: list[str], t_fill: int = 0) -> dict:
        """Columns of the calls at `rows` (-1: no such call -> missing values; times that are
        missing hold t_fill under the mask)."""
        miss = rows < 0
        any_miss = bool(miss.any())
        safe = np.maximum(rows, 0) if any_miss else rows

        def take(v: np.ndarray, fill):
            if len(v) == 0:
                return np.full(len(rows), fill, v.dtype)
            x = v[safe]
            if any_miss:
                x[miss] = fill
            return x

        out = {}
        for c in cols:
            if c == "kind":
                out[c] = with_codes(take(self.c_kind, -1), self.kind_dtype)
            elif c == "backend":
                out[c] = with_codes(take(self.c_backend, -1), self.backend_dtype)
            elif c in ("sched", "graph", "split"):
                v, na = getattr(self, "c_" + c), getattr(self, f"c_{c}_na")
                out[c] = nullable(take(v, 0), take(na, True))
            elif c in ("t_begin", "t_end"):
                out[c] = nullable(take(getattr(self, "c_" + c), t_fill), miss)
        return out

    def kind_table(self, kinds: list[str]) -> np.ndarray:
        """Which kind codes (of kind_dtype) are among `kinds`: a table to index with codes; its
        extra last entry (False) is where code -1 (no call) lands."""
        table = np.zeros(len(self.kind_dtype.categories) + 1, bool)
        table[self.kind_dtype.categories.get_indexer(kinds)] = True
        table[-1] = False  # a kind absent from the categories was given -1
        return table

    def sub(self, calls: pd.DataFrame, kinds: list[str], cols: list[str]):
        """(Rows of `calls` with one of `kinds`, their positions); kind's categories = kinds."""
        rows = np.flatnonzero(self.kind_table(kinds)[self.c_kind])
        # One take of just these columns (calls[cols] would copy them first on pandas 2).
        df = calls.iloc[rows, calls.columns.get_indexer(cols)].reset_index(drop=True)
        if "kind" in df:
            df["kind"] = df["kind"].cat.set_categories(kinds)
        return df, rows

    # ---------------------------------------------------------------------------------------
    def access_calls(self) -> np.ndarray:
        """The call row of each access (-1: none), looked up once for every frame that needs it."""
        if self.a_call is None:
            self.a_call = lookup(self.c_index, self.raw.accesses["call_id"])
        return self.a_call

    # The columns of `accesses` that come from the access records themselves, not from their calls:
    # what an analysis of the accesses (races, stalls) reads. Built alone when asked first, and
    # then reused by the whole frame.
    RECORD_COLUMNS = ("buffer", "offset", "size", "end", "mode", "tensor", "node")

    def access_record_columns(self) -> dict:
        if self.a_own is None:
            a = self.raw.accesses
            # Buffer records are written before the call ends, so match lifetimes at the call's
            # end (accesses without a call: the latest lifetime).
            t_end = take_filled(self.c_t_end, self.access_calls(), I64_MAX)
            # Independent columns, side by side on the cores (each is whole-array numpy work).
            (lt, buffer, offset), tensor, node = side_by_side(
                lambda: self.resolve(a["buffer"].astype(np.uint64), a["offset"].astype(np.uint64), t_end),
                lambda: self.names(a["tensor"]),
                lambda: self.names(a["node"]))
            size = a["size"].copy()
            mlut = np.full(256, -1, np.int8)
            mlut[[ACC_READ, ACC_WRITE]] = [0, 1]
            self.a_lifetime = lt
            self.a_own = {"buffer": buffer, "offset": offset, "size": size, "end": offset + size,
                          "mode": with_codes(mlut[a["mode"]], pd.CategoricalDtype(MODES)),
                          "tensor": tensor, "node": node}
        return self.a_own

    def accesses(self) -> pd.DataFrame:
        a = self.raw.accesses
        rows = self.access_calls()
        own, cc = side_by_side(
            self.access_record_columns,
            lambda: self.call_columns(rows, ["kind", "backend", "sched", "graph", "split", "t_begin"]))
        op, index = a["op"].astype(np.int64), a["index"].astype(np.int64)
        return frame_of({
            "call_id": a["call_id"].copy(),
            "kind": cc["kind"],
            "mode": own["mode"],
            "buffer": own["buffer"],
            "offset": own["offset"],
            "size": own["size"],
            "end": own["end"],
            "tensor": own["tensor"],
            "node": own["node"],
            "op": nullable(op, op == NONE32),
            "index": nullable(index, index == NONE32),
            "backend": cc["backend"],
            "thread": a["thread"].astype(np.int64),
            "sched": cc["sched"],
            "graph": cc["graph"],
            "split": cc["split"],
            "t_begin": cc["t_begin"],
            "t_end": nullable(take_filled(self.c_t_end, rows, I64_MAX), rows < 0),
        })

    def allocations(self) -> pd.DataFrame:
        p = self.raw.places
        call_id = p["call_id"].astype(np.uint64)
        rows = lookup(self.c_index, call_id)
        cc = self.call_columns(rows, ["sched", "graph", "t_end"], t_fill=I64_MAX)
        _, buffer, offset = self.resolve(p["buffer"].astype(np.uint64),
                                         p["offset"].astype(np.uint64),
                                         cc["t_end"].to_numpy(np.int64, na_value=I64_MAX))
        size = p["size"].astype(np.uint64)
        op, index = p["op"].astype(np.int64), p["index"].astype(np.int64)
        return frame_of({
            "call_id": call_id,
            "sched": cc["sched"],
            "graph": cc["graph"],
            "t": cc["t_end"],
            "buffer": buffer,
            "offset": offset,
            "size": size,
            "end": offset + size,
            "tensor": self.names(p["tensor"]),
            "op": nullable(op, op == NONE32),
            "index": nullable(index, index == NONE32),
        })

    def copies(self, calls: pd.DataFrame) -> pd.DataFrame:
        df, rows = self.sub(calls, COPY_KINDS, ["call_id", "kind", "thread", "t_begin", "t_end",
                                                "duration", "sched", "graph", "split"])
        df["bytes"] = calls["arg"].to_numpy()[rows]
        # Source = the call's first read access, destination = its first write access.
        # pos: a call's row in df; its extra slot at the end is where call row -1 (no call) lands.
        pos = np.full(len(self.c_id) + 1, -1, np.int64)
        pos[rows] = np.arange(len(rows))
        a = self.raw.accesses
        a_call = self.access_calls()
        cand = np.flatnonzero(self.kind_table(COPY_KINDS)[take_filled(self.c_kind, a_call, -1)])  # of copy calls
        # One slot per copy and side (read: 2 * row, write: 2 * row + 1). With repeated indices
        # numpy keeps the last value assigned: assigning in reverse leaves each one's first access.
        slot = pos[a_call[cand]] * 2 + (a["mode"][cand] == ACC_WRITE)
        first = np.full(2 * len(rows), -1, np.int64)
        first[slot[::-1]] = cand[::-1]
        # Those accesses alone, resolved as the accesses frame resolves every access: a question
        # about copies does not pay for the accesses frame.
        have = np.flatnonzero(first >= 0)
        acc = first[have]
        t_end = take_filled(self.c_t_end, a_call[acc], I64_MAX)
        lt, buffer, offset = self.resolve(a["buffer"][acc].astype(np.uint64), a["offset"][acc].astype(np.uint64), t_end)
        tensor = self.names(a["tensor"][acc])
        at = np.full(2 * len(rows), -1, np.int64)  # each slot's place in `acc`
        at[have] = np.arange(len(have))
        cols = {}
        for side, where in (("src", at[0::2]), ("dst", at[1::2])):
            miss = where < 0
            cols[f"{side}_buffer"] = nullable(take_filled(buffer, where, 0), miss, "UInt64")
            cols[f"{side}_offset"] = nullable(take_filled(offset, where, 0), miss, "UInt64")
            cols[f"{side}_tensor"] = with_codes(take_filled(tensor.codes, where, -1), tensor.dtype)
            cols[f"{side}_backend"] = with_codes(take_filled(self.lt_backend, take_filled(lt, where, -1), -1),
                                                  self.backend_dtype)
        for name in ("src_buffer", "src_offset", "dst_buffer", "dst_offset", "src_tensor",
                     "dst_tensor", "src_backend", "dst_backend"):
            df[name] = cols[name]
        df["async"] = self.kind_table(ASYNC_KINDS)[self.c_kind[rows]]
        return df

    def splits(self, calls: pd.DataFrame, copies: pd.DataFrame) -> pd.DataFrame:
        df, rows = self.sub(calls, ["graph_compute"], ["call_id", "sched", "graph", "split",
                                                       "backend", "thread", "t_begin", "t_end",
                                                       "duration"])
        df["n_nodes"] = self.c_arg[rows].astype(np.int64)
        key = ["sched", "graph", "split"]
        n_in = copies[key].dropna().value_counts().rename("n_inputs").reset_index()
        df = df.merge(n_in, how="left", on=key)
        df["n_inputs"] = df["n_inputs"].fillna(0).astype(np.int64)
        return df

    def sync(self, calls: pd.DataFrame) -> pd.DataFrame:
        df, rows = self.sub(calls, SYNC_KINDS, ["call_id", "kind", "thread", "t_begin", "t_end",
                                                "duration", "backend", "sched", "graph",
                                                "split"])
        is_event = self.kind_table(EVENT_KINDS)[self.c_kind[rows]]
        df.insert(7, "event", nullable(self.c_obj[rows], ~is_event, "UInt64"))
        return df

    def device(self, calls: pd.DataFrame) -> pd.DataFrame:
        """The device_exec calls, described by the host call that enqueued the work (`obj`):
        its call_id, kind, backend, graph and split; times and thread are the device_exec's.
        Where the enqueuing call is missing, backend/graph/split are the record's own. `source`
        says who observed the interval (see DEVICE_SOURCES)."""
        rows = np.flatnonzero(self.c_kindnum == KIND_IDS[DEVICE_KIND])
        enq = lookup(self.c_index, self.c_obj[rows])
        found = enq >= 0
        src = np.where(found, enq, rows)  # where to take backend/graph/split from
        kind = np.where(found, self.c_kind[np.maximum(enq, 0)], -1)
        cols = {}
        for c in ("graph", "split"):
            v, na = getattr(self, "c_" + c), getattr(self, f"c_{c}_na")
            cols[c] = nullable(v[src], na[src])
        flags = self.c_flags[rows].astype(np.int64)  # int64 first: -1 below must fit
        source = (flags >> DEVICE_SOURCE_SHIFT) & 3
        return frame_of({
            "call_id": self.c_obj[rows],
            "kind": with_codes(kind, self.kind_dtype),
            "backend": with_codes(self.c_backend[src], self.backend_dtype),
            "graph": cols["graph"],
            "split": cols["split"],
            "t_begin": self.c_t_begin[rows],
            "t_end": self.c_t_end[rows],
            "thread": self.c_thread[rows],
            "source": with_codes(SOURCE_OF_RECORD[source], SOURCE_DTYPE),
            "start_estimated": (flags & DEVICE_START_ESTIMATED) != 0,
            "end_late": (flags & DEVICE_END_LATE) != 0,
        })

    def gpu_activity(self, meta: dict) -> pd.DataFrame:
        """CUPTI's kernels, CUDA graphs (a whole graph's execution, in the default CUPTI mode),
        copies and memsets, each tied through its correlation record to the traced call that
        launched it (call_id, with that call's kind, backend, graph, split)."""
        g = self.raw.gpu
        corr = g[g["kind"] == GPU_CORRELATION]
        api = g[g["kind"] == GPU_API]
        act = g[GPU_KIND_CODE[g["kind"].astype(np.int64)] >= 0]
        act = take_rows(act, np.argsort(act["t_begin_ns"], kind="stable"))
        # CUPTI's times are CLOCK_MONOTONIC through our timestamp callback, else CLOCK_REALTIME.
        realtime = meta.get("cupti.clock") == "realtime"
        t0 = np.int64(self.raw.header["t0_realtime_ns" if realtime else "t0_monotonic_ns"])
        a_corr = act["correlation"].astype(np.uint64)
        # The launching call: through CUPTI's external correlation records (the call ids the
        # hooks pushed) ...
        pos = lookup(corr["correlation"].astype(np.uint64), a_corr)
        hit = pos >= 0
        call_id = take_filled(corr["name"].astype(np.uint64), pos, 0)
        rows = np.where(hit, lookup(self.c_index, call_id), -1)
        # ... else through the runtime API call that launched it: the innermost traced call on
        # the same thread that was running when the API call began.
        api_pos = lookup(api["correlation"].astype(np.uint64), a_corr)
        via_api = np.flatnonzero(~hit & (api_pos >= 0))
        if len(via_api):
            pos = api_pos[via_api]
            th = self.raw.threads
            tpos = lookup(th["os_tid"].astype(np.uint64), api["stream"][pos].astype(np.uint64))
            thread = take_filled(th["thread"].astype(np.int64), tpos, -1)
            found = self.enclosing_call(thread, api["t_begin_ns"][pos].astype(np.int64) - t0)
            rows[via_api] = found
            call_id[via_api] = take_filled(self.c_id, found, 0)
            hit = rows >= 0
        cc = self.call_columns(rows, ["kind", "backend", "graph", "split"])
        kind = act["kind"].astype(np.int64)
        copy_kind = act["copy_kind"].astype(np.int64)
        is_kernel = kind == GPU_KERNEL
        named = is_kernel | (kind == GPU_GRAPH)
        copies = (kind == GPU_MEMCPY) | (kind == GPU_MEMSET)
        return frame_of({
            "kind": with_codes(GPU_KIND_CODE[kind], GPU_KIND_DTYPE),
            "name": self.names(np.where(named, act["name"], 0).astype(np.uint64)),
            "device": act["device"].astype(np.int64),
            "stream": act["stream"].astype(np.int64),
            "t_begin": act["t_begin_ns"].astype(np.int64) - t0,
            "t_end": act["t_end_ns"].astype(np.int64) - t0,
            "copy_kind": with_codes(np.where((kind == GPU_MEMCPY) & (copy_kind < len(COPY_KINDS_CUPTI)),
                                              copy_kind, -1), COPY_KIND_DTYPE),
            "bytes": np.where(copies, act["bytes"], 0).astype(np.int64),
            "grid": np.where(is_kernel, act["bytes"], 0).astype(np.int64),
            "correlation": act["correlation"].astype(np.int64),
            "call_id": nullable(call_id, ~hit, "UInt64"),
            "call_kind": cc["kind"],
            "backend": cc["backend"],
            "graph": cc["graph"],
            "split": cc["split"],
        })

    def enclosing_call(self, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Row of the innermost call of `thread` running at time `t` (-1 if none)."""
        host = self.c_kindnum != KIND_IDS[DEVICE_KIND]
        cand = np.flatnonzero(host)
        order = cand[np.lexsort((self.c_t_begin[cand], self.c_thread[cand]))]
        # (thread rank, time rank) packed in one int64 sorted like `order`: ranks, unlike raw
        # threads and times, cannot overflow the packing.
        c_thread, c_t = self.c_thread[order], self.c_t_begin[order]
        threads, times = np.unique(c_thread), np.unique(np.r_[c_t, t])
        width = np.int64(len(times) + 1)
        key = np.searchsorted(threads, c_thread).astype(np.int64) * width + np.searchsorted(times, c_t)
        qkey = np.searchsorted(threads, thread).astype(np.int64) * width + np.searchsorted(times, t)
        i = np.searchsorted(key, qkey, side="right") - 1
        out = np.full(len(t), -1, np.int64)
        todo = np.flatnonzero((thread >= 0) & (i >= 0))
        # The latest call to start before t is the innermost unless it had already ended: then
        # step back to its predecessors (API calls almost always fall in a leaf call).
        for _ in range(64):
            if len(todo) == 0:
                break
            r = order[i[todo]]
            same = self.c_thread[r] == thread[todo]
            inside = same & (self.c_t_end[r] >= t[todo])
            out[todo[inside]] = r[inside]
            i[todo] -= 1
            todo = todo[~inside & same & (i[todo] >= 0)]
        return out

    def cupti_device(self, gpu: pd.DataFrame) -> pd.DataFrame:
        """Device intervals from CUPTI: per launching call, its first activity's start to its
        last one's end (source "cupti")."""
        a = gpu[gpu["call_id"].notna()]
        ids = a["call_id"].to_numpy(np.uint64)
        uniq, inv = np.unique(ids, return_inverse=True)
        begin = np.full(len(uniq), np.iinfo(np.int64).max, np.int64)
        end = np.full(len(uniq), np.iinfo(np.int64).min, np.int64)
        np.minimum.at(begin, inv, a["t_begin"].to_numpy(np.int64))
        np.maximum.at(end, inv, a["t_end"].to_numpy(np.int64))
        rows = lookup(self.c_index, uniq)
        cc = self.call_columns(rows, ["kind", "backend", "graph", "split"])
        n = len(uniq)
        return frame_of({
            "call_id": uniq, "kind": cc["kind"], "backend": cc["backend"], "graph": cc["graph"],
            "split": cc["split"], "t_begin": begin, "t_end": end, "thread": np.full(n, -1, np.int64),
            "source": with_codes(np.full(n, DEVICE_SOURCES.index("cupti")), SOURCE_DTYPE),
            "start_estimated": np.zeros(n, bool), "end_late": np.zeros(n, bool),
        })

    def delays(self, calls: pd.DataFrame, device: pd.DataFrame) -> pd.DataFrame:
        """The injected delays, each with the call it delayed (target_*), the backend whose queue
        it acted on (`backend`: for a copy between two asynchronous backends the source's, where
        target_backend is the destination) and, where a queue or stream ran it, when that was
        (device_begin/device_end: its device_exec record)."""
        df, rows = self.sub(calls, [DELAY_KIND], ["call_id", "backend", "graph", "split",
                                                  "thread", "t_begin", "t_end"])
        target = self.c_obj[rows]
        trow = lookup(self.c_index, target)
        arg = self.c_arg[rows]
        flags = self.c_flags[rows].astype(np.int64)
        where = (flags >> DELAY_WHERE_SHIFT) & 3
        dev = device[device["kind"] == DELAY_KIND]
        drow = lookup(dev["call_id"].to_numpy(np.uint64), df["call_id"].to_numpy(np.uint64))
        miss = drow < 0
        df.insert(1, "target_call_id", target)
        tc = self.call_columns(trow, ["kind", "backend"])
        df.insert(2, "target_kind", tc["kind"])
        df.insert(3, "target_backend", tc["backend"])
        df["requested_ns"] = (arg & np.uint64((1 << DELAY_RULE_SHIFT) - 1)).astype(np.int64)
        df["where"] = with_codes(np.where(where < 4, where, -1), DELAY_WHERE)
        df["rule"] = (arg >> np.uint64(DELAY_RULE_SHIFT)).astype(np.int64)
        df["failed"] = (flags & CALL_FAILED) != 0
        df["device_begin"] = nullable(take_filled(dev["t_begin"].to_numpy(np.int64), drow, 0), miss)
        df["device_end"] = nullable(take_filled(dev["t_end"].to_numpy(np.int64), drow, 0), miss)
        return df

    def marks(self, calls: pd.DataFrame) -> pd.DataFrame:
        df, rows = self.sub(calls, MARK_KINDS, ["kind", "thread", "t_begin", "t_end"])
        df.insert(1, "name", self.names(self.c_obj[rows]))
        return df

    def meta(self) -> dict:
        m = self.raw.meta
        m = take_rows(m, np.argsort(m["t"], kind="stable"))
        # A handful of records: a plain loop is clearest. Later values win.
        return {self.label(int(k)) or "": self.label(int(v)) or ""
                for k, v in zip(m["key"].tolist(), m["value"].tolist())}

    def gpu_samples(self) -> pd.DataFrame:
        s = self.raw.samples
        s = take_rows(s, np.argsort(s["t_ns"], kind="stable"))
        # Sample times are CLOCK_MONOTONIC ns already (no tick conversion).
        t = s["t_ns"].astype(np.int64) - np.int64(self.raw.header["t0_monotonic_ns"])
        return frame_of({
            "t": t,
            "device": s["device"].astype(np.int64),
            "metric": self.names(s["metric"]),
            "value": s["value"].astype(np.float64),
        })


def backend_labels(backends: pd.DataFrame) -> list[str]:
    """The name each backend row goes by in other frames: its name, else "backend#INDEX"."""
    return [f"backend#{i}" if pd.isna(n) else str(n)
            for i, n in zip(backends["backend"].tolist(), backends["name"].astype(object))]


SCHED_FREE = KIND_IDS["sched_free"]
SLOT_STRIDE = 256  # a scheduler's id: its slot + SLOT_STRIDE * the slot's earlier sched_free records


def sched_ids(slot: np.ndarray, kind: np.ndarray, t_end: np.ndarray) -> np.ndarray:
    """Each call's scheduler id from its slot (CallRec.sched): the hooks give a freed scheduler's
    slot to the next one made, so a call's scheduler is its slot's occupant after the slot's
    sched_free records that ended before the call did (a sched_free ends before its slot is given
    back, and every call of the next occupant ends after that). id = slot + 256 * that count:
    unique per scheduler, the slot itself in a trace whose slots were never reused
    (docs/trace-format.md, "Scheduler slots"). SCHED_NONE stays."""
    frees = np.flatnonzero(kind == SCHED_FREE)
    if len(frees) == 0:
        return slot
    out = slot.copy()
    f_slot, f_t = slot[frees], t_end[frees].astype(np.uint64)
    for s in np.unique(f_slot[f_slot != SCHED_NONE]).tolist():
        on = np.flatnonzero(slot == s)
        ft = np.sort(f_t[f_slot == s])
        if len(on) and t_end[on].max() > ft[0]:  # some call after the slot's first free: reused
            out[on] += SLOT_STRIDE * np.searchsorted(ft, t_end[on].astype(np.uint64), side="left")
    return out
