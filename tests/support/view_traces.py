"""The traces the view tests share: hostile and overlapping ones written here, the real ones recorded
on the pinned builds (the CPU + RPC demo run, a virtual-device scenario with a race), and what the
views must show of any trace: its interval count, a valid trace-event export, the report's record
command."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from support.tracegen import TraceBuilder

from ggml_trace import analysis
from ggml_trace.analysis.kinds import COPY_KINDS
from ggml_trace.analysis.trace_format import BUF_ALLOCATED

REAL = ("demo", "vdev")  # the real traces record_real makes


def record_real(which: str, out: Path) -> Path:
    """Records a real trace into the empty folder `out`: "demo", the CPU + RPC0 llama-completion of
    the demo; "vdev", inputless-reuse on b10524's virtual device (a race)."""
    from ggml_trace.tracer import demo, scenario

    if which == "demo":
        assert demo.rpc_demo(out) == 0, "recording the CPU + RPC run failed"
        return out / "llama-completion.ggmltrace"
    assert which == "vdev", which
    scenario.run("inputless-reuse", build="b10524", runs=1, out_dir=out)
    return out / "run-000.ggmltrace"


def rpc_name(path: Path) -> str:
    """The RPC backend's name in a trace, e.g. 'RPC0[127.0.0.1:50185]' (the port varies)."""
    names = analysis.load(path).backends["name"].astype(str)
    return next(n for n in names if n.startswith("RPC0"))


def expected_intervals(t) -> int:
    """Counted from the DataFrames, independently of analysis.timeline: every host call, every
    split once on its backend's execution row (device-side if it ran on a device), every copy
    once on a copies row, the other device-side work (events) on the execution rows, and each
    CUPTI kernel, copy and memset once on a kernels row."""
    host = int((t.calls["kind"] != "device_exec").sum())
    dev = t.device.drop_duplicates("call_id")
    other = int((~dev["kind"].isin(["graph_compute", *COPY_KINDS])).sum())
    gpu = len(t.gpu) if hasattr(t, "gpu") else 0  # CUPTI activity, on the kernels rows
    return host + len(t.splits) + len(t.copies) + other + gpu


A, CPU = 0, 1
HBUF, DBUF = 0xB000, 0xD000
HBASE, DBASE = 0x5000_0000, 0x7000_0000
US = 1000
EVENT = 0xE1
HOSTILE = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>',
           "<img src=x onerror=\"window.__pwned=1\">", "<svg onload=alert(2)>",
           "' onmouseover='alert(3)' x='", "&lt;b&gt;entity&amp;"]


def hostile_trace(path: Path) -> Path:
    """A trace whose every name is hostile, with a race: an async device reads bytes that the
    CPU then overwrites while the device still runs (read-after-reuse, manifested)."""
    b = TraceBuilder(hooks_build="test")
    b.meta("cmdline", "\0".join(["llama-cli", "-m", HOSTILE[0], "-p", HOSTILE[1]]))
    b.meta("exe", "/bin/" + HOSTILE[3])
    b.meta("ggml_version", HOSTILE[2])
    b.meta("hostname", HOSTILE[4])
    b.thread(0, name=HOSTILE[3])
    b.thread(1, name="stream " + HOSTILE[0])
    b.backend(A, "VDEV" + HOSTILE[1], HOSTILE[0], HOSTILE[2], device_type=1, has_async=True,
              has_events=True)
    b.backend(CPU, "CPU", "CPU", HOSTILE[5], device_type=0)
    b.buffer(HBUF, BUF_ALLOCATED, base=HBASE, size=1 << 20, usage=2, is_host=True,
             buft_name="CPU" + HOSTILE[1], device_ptr=0x6000_0000 + 0x100 * CPU)
    b.buffer(DBUF, BUF_ALLOCATED, base=DBASE, size=1 << 20, usage=2, buft_name=HOSTILE[0],
             device_ptr=0x6000_0000 + 0x100 * A)
    rng = b.call("user_range", 0, 2_000 * US, obj=HOSTILE[4])
    del rng
    sgc = b.call("sched_graph_compute", 10 * US, 1_500 * US, sched=0, graph=0)
    del sgc
    a = b.call("graph_compute", 100 * US, 110 * US, backend=A, sched=0, graph=0, split=0,
               arg=2)
    b.access(a, "read", HBUF, 0x100, 256, tensor=HOSTILE[0], node=HOSTILE[2], op=1, index=0)
    b.access(a, "write", DBUF, 0, 64, tensor=HOSTILE[2], op=1, index=0)
    b.call("device_exec", 400 * US, 900 * US, thread=1, backend=A, graph=0, split=0, obj=a)
    rec = b.call("event_record", 120 * US, 125 * US, backend=A, sched=0, graph=0, split=0,
                 obj=EVENT)
    b.call("device_exec", 905 * US, 906 * US, thread=1, backend=A, graph=0, split=0, obj=rec)
    w = b.call("graph_compute", 500 * US, 600 * US, backend=CPU, sched=0, graph=0, split=1,
               arg=1)
    b.access(w, "write", HBUF, 0x80, 512, tensor=HOSTILE[1], op=1, index=0)
    b.call("event_synchronize", 1_000 * US, 1_010 * US, backend=A, obj=EVENT)
    cp = b.call("buf_get_tensor", 1_100 * US, 1_120 * US, backend=CPU, arg=512)
    b.access(cp, "read", HBUF, 0x80, 512, tensor=HOSTILE[1])
    b.access(cp, "write", 0, 0x1234_0000, 512)
    b.call("user_mark", 1_300 * US, obj=HOSTILE[2])
    b.write(path)
    return path


def overlap_trace(path: Path) -> Path:
    """Calls on one thread that overlap without nesting (a hook bug or clock skew would give
    them): complete events cannot carry them; the export must make them async."""
    b = TraceBuilder()
    b.thread(0, name="main")
    b.backend(0, "CPU", "CPU", device_type=0)
    b.call("synchronize", 0, 100, backend=0)
    b.call("synchronize", 50, 150, backend=0)   # partial overlap with the first
    b.call("sched_graph_compute", 200, 1000, sched=0, graph=0)
    b.call("graph_compute", 300, 400, backend=0, sched=0, graph=0, split=0, arg=3)
    b.call("graph_compute", 400, 400, backend=0, sched=0, graph=0, split=1, arg=0)
    b.call("synchronize", 900, 1000, backend=0)  # ends with its parent
    b.write(path)
    return path


def recorded_with(page: str) -> list[str]:
    """The report's "Recorded with" command, as words."""
    import html
    import shlex

    return shlex.split(html.unescape(re.search(r"Recorded with:</p><pre>(.*?)</pre>", page, re.S)[1]))


# -- Perfetto / Chrome trace-event JSON -----------------------------------------------------------

REQUIRED = {"X": {"name", "ph", "ts", "dur", "pid", "tid"},
            "b": {"name", "cat", "ph", "id", "ts", "pid"},
            "e": {"cat", "ph", "id", "ts", "pid"},
            "s": {"name", "cat", "ph", "id", "ts", "pid", "tid"},
            "f": {"name", "cat", "ph", "id", "ts", "pid", "tid", "bp"},
            "M": {"name", "ph", "pid", "args"},
            "C": {"name", "ph", "ts", "pid", "args"}}


def validate_trace_events(doc: dict) -> dict:
    """Checks the trace-event format rules Perfetto relies on; returns counts per phase."""
    evs = doc["traceEvents"]
    counts: dict[str, int] = {}
    for e in evs:
        ph = e.get("ph")
        assert ph in REQUIRED, e
        missing = REQUIRED[ph] - set(e)
        assert not missing, (missing, e)
        counts[ph] = counts.get(ph, 0) + 1
        if ph != "M":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        if ph == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        if ph == "f":
            assert e["bp"] == "e"
        if ph == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index",
                                 "thread_sort_index")
    ns = lambda us: int(us * 1000)  # noqa: E731  (how a truncating reader converts)
    # complete events nest on every (pid, tid)
    xs = pd.DataFrame([e for e in evs if e["ph"] == "X"])
    slices = {}
    for key, g in xs.groupby(["pid", "tid"]):
        b = g["ts"].map(ns).to_numpy()
        e = b + g["dur"].map(ns).to_numpy()
        order = np.lexsort((-e, b))
        stack = []
        for i in order.tolist():
            while stack and e[stack[-1]] <= b[i]:
                stack.pop()
            if stack:
                assert e[i] <= e[stack[-1]], f"{key}: slices overlap without nesting"
            stack.append(i)
        slices[key] = (b, e)
    # async slices pair up
    opened = {}
    for e in evs:
        if e["ph"] == "b":
            assert (e["cat"], e["id"]) not in opened
            opened[(e["cat"], e["id"])] = e["ts"]
    for e in evs:
        if e["ph"] == "e":
            assert e["ts"] >= opened.pop((e["cat"], e["id"]))
    assert not opened
    # flows pair up and bind to a slice on their track
    s = {e["id"]: e for e in evs if e["ph"] == "s"}
    f = {e["id"]: e for e in evs if e["ph"] == "f"}
    assert set(s) == set(f)
    assert len(s) == counts.get("s", 0) and len(f) == counts.get("f", 0)
    for ev in list(s.values()) + list(f.values()):
        b, e = slices[(ev["pid"], ev["tid"])]
        t = ns(ev["ts"])
        assert ((b <= t) & (t <= e)).any(), ev
    # every track is named
    named = {(e["pid"], e["tid"]) for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    procs = {e["pid"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    for e in evs:
        if e["ph"] in ("X", "s", "f"):
            assert (e["pid"], e["tid"]) in named and e["pid"] in procs
    return counts
