"""Small vectorised helpers over whole numpy arrays and pandas columns: takes and lookups by key,
nullable and categorical columns made from codes, positions within groups. The loader
(analysis/frames.py) and the analyses (races.py, intervals.py) share them; none loops over rows
in Python."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .trace_format import KIND_IDS


def union_runs(b: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [b, e) as disjoint runs (starts, ends), in time order."""
    if len(b) == 0:
        return b.astype(np.int64), e.astype(np.int64)
    o = np.argsort(b, kind="stable")
    b, e = b[o], np.maximum.accumulate(e[o])
    idx = np.flatnonzero(np.r_[True, b[1:] > e[:-1]])  # a run starts where all before it have ended
    return b[idx], np.r_[e[idx[1:] - 1], e[-1]]


def _arrow_text(p):
    """A text part as arrow: a str stays a scalar; integers are written in decimal."""
    if isinstance(p, str):
        return pa.scalar(p, pa.string())
    if isinstance(p, (pa.Array, pa.ChunkedArray)):
        return p
    p = np.asarray(p)
    return pa.array(p).cast(pa.string()) if p.dtype.kind in "iu" else pa.array(p.astype(object), pa.string())


def arrow_text(*parts) -> pa.Array:
    """Element-wise concatenation of text parts (a str, an arrow string array, or an array of text
    or of integers, all of one length) as an arrow string array: one kernel for the whole row of
    parts, where numpy's string additions make a fixed-width array per part."""
    return pc.binary_join_element_wise(*map(_arrow_text, parts), "")


def join_text(*parts) -> np.ndarray:
    """arrow_text's concatenation as an object array of str."""
    return arrow_text(*parts).to_numpy(zero_copy_only=False)


def choose_text(cond: np.ndarray, a, b) -> pa.Array:
    """Element-wise `a` where `cond`, else `b` (each a text part as arrow_text takes it)."""
    return pc.if_else(pa.array(np.asarray(cond, bool)), _arrow_text(a), _arrow_text(b))


def take_text(names, codes: np.ndarray) -> pa.Array:
    """names[codes] as an arrow string array, without a Python string per element (code -1:
    the last name, as numpy would take it)."""
    codes = np.asarray(codes, np.int64)
    return pa.array(list(names), pa.string()).take(pa.array(np.where(codes < 0, len(names) + codes, codes)))


def join_runs(text: pa.Array, starts: np.ndarray, sep: str) -> np.ndarray:
    """The text of each run [starts[k], starts[k + 1]) (the last to the end), joined with `sep`,
    as an object array of str."""
    offsets = pa.array(np.append(starts, len(text)).astype(np.int32))
    return pc.binary_join(pa.ListArray.from_arrays(offsets, text), sep).to_numpy(zero_copy_only=False)


def expand_ranges(start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The positions of ranges, one range after the other: start[k], start[k] + 1, ...,
    start[k] + count[k] - 1 for each k."""
    first = np.cumsum(count) - count  # where each range begins in the result
    return np.repeat(start - first, count) + np.arange(int(count.sum()))


def kind_ids(kinds: list[str]) -> np.ndarray:
    return np.array([KIND_IDS[k] for k in kinds], np.uint8)


def nullable(values: np.ndarray, missing: np.ndarray, dtype: str = "Int64"):
    """Nullable integer array (pandas Int64/UInt64) without going through Python objects."""
    np_dtype = np.uint64 if dtype == "UInt64" else np.int64
    return pd.arrays.IntegerArray(np.asarray(values).astype(np_dtype, copy=False),
                                  np.asarray(missing, bool))


def take_filled(values: np.ndarray, idx: np.ndarray, fill):
    """values[idx], with `fill` where idx == -1."""
    if fill < 0 and values.dtype.kind == "u":  # never put a negative int in an unsigned array
        values = values.astype(np.int64)
    if len(values) == 0:
        return np.full(len(idx), fill, dtype=values.dtype)
    if len(idx) == 0 or idx.min() >= 0:
        return values[idx]
    return np.where(idx >= 0, values[np.maximum(idx, 0)], fill).astype(values.dtype, copy=False)


def cat_codes(series: pd.Series) -> np.ndarray:
    """A categorical column's codes as int64 (-1: missing)."""
    return np.asarray(series.cat.codes, np.int64)


def codes_of(categories: pd.Index, names) -> np.ndarray:
    """The codes of those of `names` that are among a categorical column's `categories`."""
    idx = pd.Index(categories).get_indexer(list(names))
    return idx[idx >= 0]


def int_values(series, fill: int = -1) -> np.ndarray:
    """An integer column as int64 with `fill` where missing; it may also be float or object
    (a column that went through a merge or concat with missing rows)."""
    return pd.Series(series).astype("Int64").to_numpy(dtype=np.int64, na_value=fill)


def categorical(keys: np.ndarray, label_of) -> pd.Categorical:
    """Categorical of label_of(key): label_of runs once per distinct key (None -> missing)."""
    codes, uniq = pd.factorize(keys)
    labels = np.array([label_of(k) for k in uniq.tolist()], dtype=object)
    lcodes, cats = pd.factorize(labels)  # distinct keys may share a label
    if len(cats) < len(lcodes) or (lcodes < 0).any():  # shared or missing labels: codes of labels
        codes = np.asarray(lcodes, np.int64)[codes]
    # (else every key has a label of its own, in the order of the keys' first appearance: the same codes)
    return pd.Categorical.from_codes(codes, categories=cats, validate=False)


def take_rows(recs: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """recs[idx] for a structured record array, done on a raw-bytes view: numpy's per-field
    copy path for structured dtypes is ~10x slower."""
    raw = recs.view(np.dtype((np.void, recs.dtype.itemsize)))
    return raw[idx].view(recs.dtype)


def frame_of(columns: dict) -> pd.DataFrame:
    """DataFrame over freshly made arrays: copy=False skips pandas' consolidating copy."""
    return pd.DataFrame(columns, copy=False)


def with_codes(codes: np.ndarray, dtype: pd.CategoricalDtype) -> pd.Categorical:
    """Codes made by the loader's own tables (-1 or an index into dtype's categories: every
    table maps what it does not know to -1), so pandas' range check is skipped."""
    codes = np.asarray(codes)
    if codes.dtype.kind != "i":  # signed codes of any width are taken as they are
        codes = codes.astype(np.int64)
    return pd.Categorical.from_codes(codes, dtype=dtype, validate=False)


def lookup(keys, queries: np.ndarray) -> np.ndarray:
    """Row of each query in `keys` (first match), -1 where absent. `keys` may be a pd.Index made
    once for many lookups (its hash table is built on first use and kept)."""
    if len(keys) == 0:
        return np.full(len(queries), -1, np.int64)
    # Queries often come in runs (all accesses of one call): look up each run once.
    if len(queries) > 1024:
        head = np.empty(len(queries), bool)
        head[0] = True
        np.not_equal(queries[1:], queries[:-1], out=head[1:])
        n_runs = int(np.count_nonzero(head))
        if n_runs < len(queries) // 2:
            run = np.cumsum(head) - 1
            return lookup(keys, queries[head])[run]
    index = keys if isinstance(keys, pd.Index) else pd.Index(keys)
    if index.is_unique:  # hash lookup; fall back to a sorted search for duplicate keys
        return index.get_indexer(queries).astype(np.int64, copy=False)
    keys = index.to_numpy()
    order = np.argsort(keys, kind="stable")
    s = keys[order]
    pos = np.minimum(np.searchsorted(s, queries), len(s) - 1)
    return np.where(s[pos] == queries, order[pos], -1)


def stable_order(keys: np.ndarray) -> np.ndarray:
    """np.argsort(keys, kind="stable") for non-negative integer keys, as two 16-bit radix passes
    when the keys fit in 32 bits (numpy sorts 16-bit integers by radix: linear time, where a
    64-bit key takes a merge sort)."""
    if len(keys) == 0 or int(keys.max()) >= 1 << 32 or int(keys.min()) < 0:
        return np.argsort(keys, kind="stable")
    k = keys.astype(np.uint32, copy=False)
    if int(keys.max()) < 1 << 16:
        return np.argsort(k.astype(np.uint16), kind="stable")
    low = np.argsort((k & 0xFFFF).astype(np.uint16), kind="stable")
    high = (k[low] >> 16).astype(np.uint16)
    return low[np.argsort(high, kind="stable")]


def pick_lifetime(l_key, l_t, q_key, q_t) -> np.ndarray:
    """For each query: the lifetime with l_key == q_key whose start l_t is the latest <= q_t
    (the earliest of them if all start later). -1 if no lifetime has that key."""
    n = len(l_key)
    if n == 0:
        return np.full(len(q_key), -1, np.int64)
    order = np.lexsort((l_t, l_key))
    k, t = l_key[order], l_t[order]
    uk, first, count = np.unique(k, return_index=True, return_counts=True)
    qg = pd.Index(uk).get_indexer(q_key)  # a hash lookup: ~3x a binary search over few keys
    found = qg >= 0
    qg = np.maximum(qg, 0)
    if count.max() == 1:  # the usual case: every pointer has one lifetime
        return np.where(found, order[qg], -1)
    pos = first[qg]
    multi = np.flatnonzero(found & (count[qg] > 1))
    if len(multi):  # keys with several lifetimes (reused pointers): choose by time
        g = np.repeat(np.arange(len(uk)), count)
        ut = np.unique(t)
        # (group, time rank) packed in one int64 key that is sorted in `order`.
        width = len(ut) + 1
        comp = g.astype(np.int64) * width + np.searchsorted(ut, t) + 1
        qcomp = qg[multi].astype(np.int64) * width + np.searchsorted(ut, q_t[multi], "right")
        p = np.searchsorted(comp, qcomp, side="right") - 1
        pos[multi] = np.maximum(p, first[qg[multi]])
    return np.where(found, order[pos], -1)


# -- for the race analysis (analysis/races.py) ------------------------------------------------

def bit_width(x: int) -> int:
    return max(int(x), 1).bit_length()


def rank_in_group(group: np.ndarray) -> np.ndarray:
    """1-based position of each element among those with the same group, in array order."""
    n = len(group)
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(group, kind="stable")
    g = group[order]
    start = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    counts = np.diff(np.r_[start, n])
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - np.repeat(start, counts) + 1
    return rank


def last_before(e_group, e_pos, q_group, q_pos) -> np.ndarray:
    """For each query: the element with the same group whose pos is the largest < q_pos
    (-1 if none). Groups and positions are non-negative integers."""
    if len(e_group) == 0 or len(q_group) == 0:
        return np.full(len(q_group), -1, np.int64)
    shift = bit_width(max(e_pos.max(), q_pos.max()) + 1)
    ek = (e_group.astype(np.int64) << shift) | e_pos.astype(np.int64)
    order = np.argsort(ek, kind="stable")
    ks = ek[order]
    qk = (q_group.astype(np.int64) << shift) | q_pos.astype(np.int64)
    j = np.searchsorted(ks, qk, side="left") - 1
    jj = np.maximum(j, 0)
    ok = (j >= 0) & (e_group[order[jj]] == q_group)
    return np.where(ok, order[jj], -1)


def take_int(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """values[idx] (int64), -1 where idx is -1."""
    return take_filled(np.asarray(values, np.int64), np.asarray(idx, np.int64), -1)


def objects_at(table: np.ndarray, codes: np.ndarray) -> list:
    """table[codes] as a list, None where the code is -1."""
    if len(table) == 0:
        return [None] * len(codes)
    v = table[np.maximum(codes, 0)].astype(object)
    v[codes < 0] = None
    return v.tolist()


def ints_or_none(values: np.ndarray) -> list:
    """Python ints, None where negative (the NA fill)."""
    v = np.asarray(values, np.int64).astype(object)
    v[np.asarray(values) < 0] = None
    return v.tolist()
