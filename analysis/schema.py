"""The columns and dtypes of every DataFrame a loaded trace has, and of the race analysis'
findings: the contract between the code that makes them and their readers (the exports, the
analyses, the tests), described column by column in docs/dataframes.md, which a test holds to
these tables. `frame_dtypes(trace)` reads a trace's back."""
from __future__ import annotations

FRAMES: dict[str, dict[str, str]] = {
    "threads": {"thread": "int64", "os_tid": "uint64", "name": "category"},
    "backends": {"backend": "int64", "name": "category", "device_name": "category",
                 "device_description": "category", "device_type": "category",
                 "has_async": "bool", "has_events": "bool", "ptr": "uint64",
                 "device_ptr": "uint64"},
    "buffers": {"buffer": "uint64", "generation": "int64", "base": "uint64", "size": "uint64",
                "usage": "category", "is_host": "bool", "buft_name": "category",
                "backend": "category", "first_seen": "int64", "freed": "Int64"},
    "calls": {"call_id": "uint64", "kind": "category", "thread": "int64", "t_begin": "int64",
              "t_end": "int64", "duration": "int64", "backend": "category",
              "backend2": "category", "sched": "Int64", "graph": "Int64", "split": "Int64",
              "obj": "uint64", "arg": "uint64", "failed": "bool", "declined": "bool", "meta_parent": "bool",
              "parent": "uint64", "device_index": "Int64", "meta_subgraph": "Int64",
              "role": "category"},
    "splits": {"call_id": "uint64", "sched": "Int64", "graph": "Int64", "split": "Int64",
               "backend": "category", "thread": "int64", "t_begin": "int64", "t_end": "int64",
               "duration": "int64", "n_nodes": "int64", "n_inputs": "int64"},
    "copies": {"call_id": "uint64", "kind": "category", "thread": "int64", "t_begin": "int64",
               "t_end": "int64", "duration": "int64", "sched": "Int64", "graph": "Int64",
               "split": "Int64", "bytes": "uint64", "src_buffer": "UInt64",
               "src_offset": "UInt64", "dst_buffer": "UInt64", "dst_offset": "UInt64",
               "src_tensor": "category", "dst_tensor": "category", "src_backend": "category",
               "dst_backend": "category", "async": "bool"},
    "sync": {"call_id": "uint64", "kind": "category", "thread": "int64", "t_begin": "int64",
             "t_end": "int64", "duration": "int64", "backend": "category", "event": "UInt64",
             "sched": "Int64", "graph": "Int64", "split": "Int64"},
    "accesses": {"call_id": "uint64", "kind": "category", "mode": "category",
                 "buffer": "uint64", "offset": "uint64", "size": "uint64", "end": "uint64",
                 "tensor": "category", "node": "category", "op": "Int64", "index": "Int64",
                 "backend": "category", "thread": "int64", "sched": "Int64", "graph": "Int64",
                 "split": "Int64", "t_begin": "Int64", "t_end": "Int64"},
    "allocations": {"call_id": "uint64", "sched": "Int64", "graph": "Int64", "t": "Int64",
                    "buffer": "uint64", "offset": "uint64", "size": "uint64", "end": "uint64",
                    "tensor": "category", "op": "Int64", "index": "Int64"},
    "marks": {"kind": "category", "name": "category", "thread": "int64", "t_begin": "int64",
              "t_end": "int64"},
    "gpu_samples": {"t": "int64", "device": "int64", "metric": "category", "value": "float64"},
    "device": {"call_id": "uint64", "kind": "category", "backend": "category", "graph": "Int64",
               "split": "Int64", "t_begin": "int64", "t_end": "int64", "thread": "int64",
               "source": "category", "start_estimated": "bool", "end_late": "bool"},
    "gpu": {"kind": "category", "name": "category", "device": "int64", "stream": "int64",
            "t_begin": "int64", "t_end": "int64", "copy_kind": "category", "bytes": "int64",
            "grid": "int64", "correlation": "int64", "call_id": "UInt64", "call_kind": "category",
            "backend": "category", "graph": "Int64", "split": "Int64"},
    "delays": {"call_id": "uint64", "target_call_id": "uint64", "target_kind": "category",
               "target_backend": "category", "backend": "category", "graph": "Int64", "split": "Int64",
               "thread": "int64", "t_begin": "int64", "t_end": "int64", "requested_ns": "int64", "where": "category",
               "rule": "int64", "failed": "bool", "device_begin": "Int64", "device_end": "Int64"},
    "cuda": {"seq": "int64", "t": "int64", "thread": "int64", "op": "category", "stream": "uint64",
             "handle": "uint64", "src": "uint64", "kernel": "category", "bytes": "Int64", "node": "Int64",
             "device": "int64", "captured": "bool", "driver": "bool", "returned": "bool", "failed": "bool",
             "call_id": "uint64", "call_kind": "category", "backend": "category", "graph": "Int64",
             "split": "Int64"},
    "node_reads": {"call_id": "uint64", "mode": "category", "buffer": "uint64", "offset": "uint64",
                   "size": "uint64", "end": "uint64", "tensor": "category", "node": "category",
                   "index": "Int64"},
}

# The race analysis' findings (analysis.races(trace).findings, docs/races.md): one row per
# distinct race, times in ns like every frame above; its JSON form (µs) is derived from it.
# Each side of a race (a: the earlier operation, b: the later) has these columns, as a_* and b_*.
# Names are plain objects here, not categories: findings are few and read one at a time.
FINDING_SIDE: dict[str, str] = {
    "backend": "object", "graph": "Int64", "split": "Int64", "kind": "object", "tensor": "object",
    "node": "object", "thread": "int64", "mode": "object", "t_begin_ns": "int64",
    "t_end_ns": "int64", "device": "bool", "call_id": "uint64", "role": "object",
    "queue_backend": "object", "timing": "object"}
FINDINGS: dict[str, str] = {
    "class": "category", "manifested": "bool", "inverted": "bool", "margin_ns": "Int64",
    "count": "int64", **{f"{s}_{c}": t for s in "ab" for c, t in FINDING_SIDE.items()},
    "buffer": "object", "generation": "Int64", "buffer_type": "object", "range_start": "uint64",
    "range_end": "uint64", "missing": "object", "first_graph": "Int64", "first_t_ns": "int64",
    "last_graph": "Int64", "last_t_ns": "int64", "verdict": "category", "basis": "category",
    "n_manifested": "int64", "n_latent": "int64", "n_undetermined": "int64", "n_overlapped": "int64"}

# The stalls analysis (analysis.stalls.stalls(trace), docs/stalls.md): one row per host-blocking call.
STALLS: dict[str, str] = {
    "call_id": "uint64", "kind": "object", "thread": "int64", "t_begin": "int64", "t_end": "int64",
    "blocked_ns": "int64", "backend": "object", "graph": "Int64", "split": "Int64", "boundary": "object",
    "waited_call_id": "UInt64", "waited_kind": "object", "waited_graph": "Int64", "waited_split": "Int64",
    "waited_end": "Int64", "via": "object", "pending": "int64", "needed": "boolean", "avoidable": "bool",
    "conflict": "object"}

# The frames an analysis returns rather than the loader; docs/dataframes.md is held to them too.
ANALYSIS_FRAMES: dict[str, dict[str, str]] = {"findings": FINDINGS, "stalls": STALLS}


def frame_dtypes(trace) -> dict[str, dict[str, str]]:
    """{frame: {column: dtype}} as the trace has them (to compare with FRAMES)."""
    return {f: {c: str(t) for c, t in getattr(trace, f).dtypes.items()} for f in FRAMES}
