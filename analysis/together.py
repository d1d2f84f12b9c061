"""Several traces read together: a client and its RPC servers, the processes of one run, runs on
several hosts. The result is one Trace whose frames hold every process, with names that stay
unique (docs/dataframes.md, "Traces read together"):

- every frame gains a `process` column: "PROGRAM:PID", with "@HOST" when the traces come from
  more than one host;
- a backend or thread name that more than one process uses is qualified with its process
  ("CPU @ ggml-rpc-server:4321"); names only one process uses are left alone;
- per-process ids (call_id, parent, thread, buffer, event) carry the process' index in their
  high bits, so that equal ids of two processes stay apart;
- times are on one axis: ns since the earliest trace began, by the monotonic clock when every
  trace comes from one host, else by each host's wall clock (as good as the hosts' clock sync).

RPC links: a client's RPC backend is named after its server's endpoint ("RPC0[127.0.0.1:50052]");
`rpc_links` says which process served it (the server's command line names its port).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .load import Trace, load
from .meta import recorded_env
from .trace_format import CALL_ID_THREAD_SHIFT

# Columns holding times (ns since a trace's start), ids of one process, and backend names.
TIME_COLUMNS = ("t_begin", "t_end", "t", "first_seen", "device_begin", "device_end")
CALL_ID_COLUMNS = ("call_id", "parent", "target_call_id")
BACKEND_COLUMNS = ("backend", "backend2", "src_backend", "dst_backend")
# A process' index goes above the call id's thread index (thread << 40 | counter): call ids of
# threads below 2**16 stay apart (the format allows threads up to trace_format.MAX_THREAD).
PROCESS_SHIFT = CALL_ID_THREAD_SHIFT + 16


@dataclass
class Process:
    label: str
    path: str
    host: str
    pid: int
    program: str
    offset_ns: int  # added to this trace's times to put them on the common axis


def process_of(trace: Trace) -> tuple[str, int, str]:
    """(host, pid, program) of the process that wrote `trace`, from its metadata."""
    meta = trace.meta
    host = meta.get("hostname") or "?"
    try:
        pid = int(meta.get("pid", 0))
    except ValueError:
        pid = 0
    exe = meta.get("exe") or (meta.get("cmdline") or "").split("\0")[0]
    return host, pid, os.path.basename(exe) or "?"


def _hosts(found: list[tuple[str, int, str]]) -> set:
    """The hosts the traces name (a trace cut before its metadata names none: taken as the others')."""
    return {h for h, _, _ in found if h != "?"}


def _labels(found: list[tuple[str, int, str]]) -> list[str]:
    several_hosts = len(_hosts(found)) > 1
    labels = [f"{prog}:{pid}" + (f"@{host}" if several_hosts else "") for host, pid, prog in found]
    seen: dict[str, int] = {}
    for i, label in enumerate(labels):  # the same process twice (a file and its snapshot)
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            labels[i] = f"{label}#{seen[label]}"
    return labels


def _offsets(traces: list[Trace], found: list[tuple[str, int, str]]) -> tuple[list[int], str]:
    one_host = len(_hosts(found)) <= 1
    field = "t0_monotonic_ns" if one_host else "t0_realtime_ns"
    t0 = [int(t.header.get(field, 0)) for t in traces]
    base = min(t0)
    return [t - base for t in t0], "monotonic clock" if one_host else "wall clock"


def _shared(names_per_trace: list[set]) -> set:
    counts: dict[str, int] = {}
    for names in names_per_trace:
        for n in names:
            counts[n] = counts.get(n, 0) + 1
    return {n for n, c in counts.items() if c > 1}


def _rename(col: pd.Series, shared: set, label: str) -> pd.Series:
    """A category column with the shared names qualified by `label`."""
    cat = col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")
    old = [str(c) for c in cat.cat.categories]
    new = [f"{c} @ {label}" if c in shared else c for c in old]
    if len(set(new)) < len(new):  # two names that became one: keep them apart by position
        new = [f"{n}#{i}" if new.count(n) > 1 else n for i, n in enumerate(new)]
    return cat.cat.rename_categories(new).astype(object)


def _backend_names(t: Trace) -> set:
    names: set[str] = set()
    for frame in t.frames().values():
        for c in BACKEND_COLUMNS:
            if c in frame.columns:
                names.update(str(v) for v in frame[c].dropna().unique())
    if "name" in t.backends.columns:
        names.update(str(v) for v in t.backends["name"].dropna().unique())
    return names


def _one_process(t: Trace, p: int, proc: Process, shared_backends: set, shared_threads: set) -> dict:
    """Every frame of `t` with its process column, shifted times, tagged ids and qualified names."""
    tag = np.uint64(p) << np.uint64(PROCESS_SHIFT)
    out = {}
    for name, frame in t.frames().items():
        df = frame.copy()
        for c in TIME_COLUMNS:
            if c in df.columns and proc.offset_ns:
                df[c] = df[c] + proc.offset_ns
        for c in CALL_ID_COLUMNS:
            if c in df.columns and p:
                df[c] = _tag(df[c], tag)
        if "thread" in df.columns and p:
            df["thread"] = df["thread"] + (p << 32)
        for c in ("buffer", "src_buffer", "dst_buffer", "event"):
            if c in df.columns and p and name != "gpu":
                df[c] = _tag(df[c], tag)
        for c in BACKEND_COLUMNS:
            if c in df.columns:
                df[c] = _rename(df[c], shared_backends, proc.label)
        if name == "backends":
            df["name"] = _rename(df["name"], shared_backends, proc.label)
        if name == "threads":
            df["name"] = _rename(df["name"], shared_threads, proc.label)
        df.insert(0, "process", proc.label)
        out[name] = df
    return out


def _tag(col: pd.Series, tag: np.uint64) -> pd.Series:
    """Ids with the process' index in their high bits; 0 (none) and <NA> stay as they are."""
    missing = col.isna().to_numpy()
    v = col.to_numpy(dtype=np.uint64, na_value=0)
    v = np.where(v != 0, v | tag, v)
    if col.dtype == "UInt64":
        return pd.Series(pd.arrays.IntegerArray(v, missing), index=col.index)
    return pd.Series(v, index=col.index)


def read_together(traces: list[Trace]) -> Trace:
    """One Trace holding every process of `traces` (see the module's docstring). Its `processes`
    frame lists them (label, path, host, pid, program, offset_ns), `clock` says how their times
    were put on one axis, and `parts` keeps the traces as loaded."""
    if not traces:
        raise ValueError("no traces to read together")
    found = [process_of(t) for t in traces]
    labels = _labels(found)
    offsets, clock = _offsets(traces, found)
    procs = [Process(labels[i], t.display_path, found[i][0], found[i][1], found[i][2], offsets[i])
             for i, t in enumerate(traces)]
    shared_backends = _shared([_backend_names(t) for t in traces])
    shared_threads = _shared([set(t.threads["name"].dropna().astype(str)) for t in traces])
    parts = [_one_process(t, i, procs[i], shared_backends, shared_threads) for i, t in enumerate(traces)]
    frames = {}
    for name in parts[0]:
        df = pd.concat([part[name] for part in parts], ignore_index=True)
        df["process"] = pd.Categorical(df["process"], categories=labels)
        for c, dtype in getattr(traces[0], name).dtypes.items():
            if isinstance(dtype, pd.CategoricalDtype):
                df[c] = df[c].astype("category")  # concatenated names come back as objects
        time = next((c for c in ("t_begin", "t") if c in df.columns), None)
        if time and name not in ("backends", "buffers", "threads"):
            df = df.sort_values(time, kind="stable", ignore_index=True)
        frames[name] = df
    first = traces[0]
    warnings = [w for t in traces for w in t.warnings]
    if clock == "wall clock":
        warnings.append("traces from several hosts: their times are aligned by each host's wall clock, "
                        "as good as the hosts' clock synchronisation")
    merged = Trace(" + ".join(p.path for p in procs), dict(first.header), dict(first.meta), {}, warnings,
                   None, **frames)
    merged.display_path = " + ".join(os.path.basename(p.path) for p in procs)  # a title for the views
    merged.damage = [d for t in traces for d in t.damage]
    merged.closed = all(t.closed for t in traces)
    merged.processes = pd.DataFrame([vars(p) for p in procs])
    merged.clock = clock
    merged.parts = list(traces)
    return merged


def load_together(paths: list, strict: bool = True) -> Trace:
    """Load several trace files and read them together (read_together)."""
    return read_together([load(p, strict=strict) for p in paths])


def _ports(trace: Trace) -> set[str]:
    """Ports a server process listened on, from its command line (-p/--port N)."""
    args = (trace.meta.get("cmdline") or "").split("\0")
    ports = {args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-p", "--port")}
    ports |= {a.split("=", 1)[1] for a in args if a.startswith("--port=")}
    env_port = recorded_env(trace.meta).get("GGML_RPC_PORT")
    return ports | ({env_port} if env_port else set())


def rpc_links(together: Trace) -> pd.DataFrame:
    """For each RPC backend of a client: its endpoint and the process that served it (the traced
    process whose command line names that port, on that host), or <NA> when none of the traces did."""
    rows = []
    parts, procs = together.parts, together.processes
    ports = [_ports(t) for t in parts]
    for i, t in enumerate(parts):
        for name in t.backends["name"].dropna().astype(str).unique():
            m = re.match(r"^RPC\d*\[(.+):(\d+)\]$", name)
            if not m:
                continue
            host, port = m.groups()
            local = host in ("127.0.0.1", "localhost", "::1", procs.loc[i, "host"])
            served = [j for j in range(len(parts)) if j != i and port in ports[j]
                      and (procs.loc[j, "host"] == procs.loc[i, "host"] if local else procs.loc[j, "host"] == host
                           or procs["host"].nunique() == 1)]
            rows.append({"client": procs.loc[i, "label"], "backend": name, "endpoint": f"{host}:{port}",
                         "server": procs.loc[served[0], "label"] if served else None})
    return pd.DataFrame(rows, columns=["client", "backend", "endpoint", "server"])
