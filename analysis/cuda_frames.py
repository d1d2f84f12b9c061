"""The frames of CUDA streams mode (docs/dataframes.md, `cuda` and `node_reads`): ggml-cuda's runtime
calls below the backend interface, and every source each node of a split reads, built from a Loader's
records (analysis/frames.py) once its calls and buffers are.

Whole-array numpy work, as the rest of the loader: no per-record Python.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .arrays import frame_of, lookup, nullable, take_filled, with_codes
from .columns import Columns
from .frames import I64_MAX, MODES, Loader
from .trace_format import (ACCESS_DTYPE, ACC_READ, ACC_WRITE, CUDA_CAPTURED, CUDA_DRIVER, CUDA_FAILED, CUDA_OPS, CUDA_RETURNED,
                           NONE32)

CUDA_OP_DTYPE = pd.CategoricalDtype(list(CUDA_OPS.values()))
# the ops whose `name` field holds bytes (a copy's, a memset's), not a kernel name
BYTES_OPS = (2, 3)


def cuda_frame(ld: Loader) -> pd.DataFrame:
    """One row per CUDA runtime call, in the order the host issued them (`seq`), with the traced
    call it was made in (call_id, and that call's backend, graph and split)."""
    r = ld.raw.cuda
    t = ld.rel(r["t"]) if len(r) else np.zeros(0, np.int64)
    # A thread's records are in the order it made the calls: a stable sort by time keeps it.
    order = np.argsort(t, kind="stable")
    r, t = r[order], t[order]
    op = r["op"].astype(np.int64)
    flags = r["flags"].astype(np.uint8)
    is_bytes = np.isin(op, BYTES_OPS)
    name_ids = np.where(is_bytes, 0, r["name"]).astype(np.uint64)
    node = r["node"].astype(np.int64)
    call_id = r["call_id"].astype(np.uint64)
    rows = lookup(ld.c_index, call_id) if len(r) else np.zeros(0, np.int64)
    cc = ld.call_columns(rows, ["kind", "backend", "graph", "split"])
    return frame_of({
        "seq": np.arange(len(r), dtype=np.int64),
        "t": t,
        "thread": r["thread"].astype(np.int64),
        "op": with_codes(op - 1, CUDA_OP_DTYPE),
        "stream": r["stream"].astype(np.uint64),
        "handle": r["handle"].astype(np.uint64),
        "src": r["src"].astype(np.uint64),
        "kernel": ld.names(name_ids),
        "bytes": nullable(r["name"].astype(np.int64), ~is_bytes),
        "node": nullable(node, node == NONE32),
        "device": r["device"].astype(np.int64),
        "captured": (flags & CUDA_CAPTURED) != 0,
        "driver": (flags & CUDA_DRIVER) != 0,
        "returned": (flags & CUDA_RETURNED) != 0,
        "failed": (flags & CUDA_FAILED) != 0,
        "call_id": call_id,
        "call_kind": cc["kind"],
        "backend": cc["backend"],
        "graph": cc["graph"],
        "split": cc["split"],
    })


def node_reads_frame(ld: Loader) -> pd.DataFrame:
    """Every source each node of a split reads that `accesses` leaves out (a source another node of
    the split produced, or one an earlier node already read): the accesses' columns, reads only."""
    a = ld.raw.node_reads if ld.raw.node_reads is not None else Columns.of_records(np.zeros(0, ACCESS_DTYPE))
    call_id = a["call_id"].astype(np.uint64)
    rows = lookup(ld.c_index, call_id)
    _, buffer, offset = ld.resolve(a["buffer"].astype(np.uint64), a["offset"].astype(np.uint64),
                                   take_filled(ld.c_t_end, rows, I64_MAX))
    size = a["size"].astype(np.uint64)
    mlut = np.full(256, -1, np.int8)
    mlut[[ACC_READ, ACC_WRITE]] = [0, 1]
    index = a["index"].astype(np.int64)
    return frame_of({
        "call_id": call_id,
        "mode": with_codes(mlut[a["mode"]], pd.CategoricalDtype(MODES)),
        "buffer": buffer,
        "offset": offset,
        "size": size,
        "end": offset + size,
        "tensor": ld.names(a["tensor"]),
        "node": ld.names(a["node"]),
        "index": nullable(index, index == NONE32),
    })
