"""Order inside a CUDA split (docs/cuda-streams.md): which nodes of one graph_compute ran on which of
ggml-cuda's streams, what orders them, and the byte accesses that nothing orders.

The scheduler-level analysis (races.py) takes a split as one operation of its backend's queue. A CUDA
backend may run the nodes of one split on several streams (`GGML_CUDA_GRAPH_OPT=1`: the Q, K and V
branches of attention on streams of their own), ordered by CUDA events only. With a trace recorded
in CUDA streams mode (the `cuda` and `node_reads` frames), this module judges that order, in stages
that each take and return frozen values:

1. `stream_operations`: the queue operations issued inside splits (kernel launches, copies, memsets,
   event records, stream waits), each with its stream and its position on it;
2. `stream_clocks`: one vector clock per operation over the streams of its split, from the edges
   CUDA gives (rules below, one function each);
3. `node_operations`: each node of a split tied to the operation that computed it;
4. `unordered_accesses`: the pairs of conflicting byte accesses of two nodes on different streams
   that no edge orders, each classified and described in CUDA's words.

Ordering rules (docs/cuda-streams.md, "The model"):
* S1 `stream_order`: a stream runs its operations in the order they were issued;
* S2 `event_edges`: cudaStreamWaitEvent(s, e) orders s's later work after the work of the stream
  that recorded e, up to the latest cudaEventRecord(e) issued before the wait (a wait binds to the
  record at call time). Under stream capture these are the CUDA graph's dependencies, so a captured
  split is judged by the same rules, and every replay of its graph runs in that order.
Only edges inside one split are used: an event recorded in another call orders nothing here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .arrays import expand_ranges

QUEUE_OPS = ["launch", "memcpy", "memset", "event_record", "stream_wait"]
WORK_OPS = ["launch", "memcpy", "memset"]
# How two conflicting accesses of nodes on different streams relate (docs/cuda-streams.md, "Classes").
CLASSES = ["missing-dependency", "overwritten-before-read", "write-after-read", "write-write"]
CLASS_WORDS = {
    "missing-dependency": "a node reads what another node writes, on another stream, with nothing "
                          "ordering the read after the write",
    "overwritten-before-read": "a node overwrites the bytes of a tensor that a node after it, in the order "
                               "the backend runs the split's nodes, still reads: the read gets the overwrite "
                               "whatever the streams, even run one after another (CUDA_LAUNCH_BLOCKING=1), "
                               "and concurrent streams make it vary from run to run",
    "write-after-read": "a node overwrites bytes that another node, issued before it on another stream, "
                        "reads: wrong whenever the writer's stream runs ahead",
    "write-write": "two nodes on different streams write the same bytes with nothing ordering them",
}


# -- stage 1: operations -------------------------------------------------------------------------------

@dataclass(frozen=True)
class StreamOps:
    """The queue operations issued inside splits, in issue order (`ops`: one row each; columns
    call_id, backend, graph, split, seq, op, stream, handle, node, kernel, captured, comp, pos), and
    the streams (`streams`: backend, stream handle, `label` as the words name it)."""
    ops: pd.DataFrame
    streams: pd.DataFrame

    @property
    def splits(self) -> np.ndarray:
        return self.ops["call_id"].unique()


def stream_operations(trace) -> StreamOps:
    cu = trace.cuda
    inside = (cu["call_kind"] == "graph_compute").to_numpy(bool) & cu["op"].isin(QUEUE_OPS).to_numpy(bool)
    ops = cu.loc[inside, ["call_id", "backend", "graph", "split", "seq", "op", "stream", "handle", "node",
                          "kernel", "captured"]].reset_index(drop=True)
    # only the splits that issued work on a stream of their own (a CUDA graph replay issues none)
    worked = ops["op"].isin(WORK_OPS).groupby(ops["call_id"], sort=False).transform("any")
    ops = ops[worked.to_numpy(bool)].sort_values("seq", kind="stable").reset_index(drop=True)
    # comp: a stream's number inside its split (the first one used is 0), pos: 1-based place on it
    first = ops.groupby(["call_id", "stream"], sort=False)["seq"].transform("min")
    ops["comp"] = (first.groupby(ops["call_id"]).rank(method="dense").astype(np.int64) - 1).to_numpy()
    ops["pos"] = ops.groupby(["call_id", "stream"], sort=False).cumcount().to_numpy(np.int64) + 1
    streams = (ops.groupby(["backend", "stream"], observed=True, sort=False)["seq"].min()
               .reset_index().sort_values("seq", kind="stable"))
    streams["number"] = streams.groupby("backend", observed=True).cumcount()
    streams["label"] = [f"{b} stream {n} ({s:#x})" for b, n, s in
                        zip(streams["backend"].astype(str), streams["number"], streams["stream"])]
    return StreamOps(ops, streams[["backend", "stream", "number", "label"]].reset_index(drop=True))


# -- stage 2: ordering ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class StreamClocks:
    """clock[i, c]: how many operations of stream c of op i's split happen before op i (op i itself
    counted on its own stream). Operation a happens before b (same split) iff
    clock[b, comp[a]] >= pos[a]."""
    clock: np.ndarray
    bound_waits: int     # stream waits bound to a record of the same split
    unbound_waits: int   # stream waits on an event recorded elsewhere (no edge inside the split)

    def before(self, ops: pd.DataFrame, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Does op a (rows of ops) happen before op b? Elementwise, same split assumed."""
        comp = ops["comp"].to_numpy(np.int64)[a]
        pos = ops["pos"].to_numpy(np.int64)[a]
        return self.clock[b, comp] >= pos


def stream_order(ops: pd.DataFrame, clock: np.ndarray) -> np.ndarray:
    """S1: each stream runs its operations in issue order (a running maximum along the stream)."""
    keys = [ops["call_id"].to_numpy(), ops["comp"].to_numpy()]
    return pd.DataFrame(clock).groupby(keys, sort=False).cummax().to_numpy(np.int64, copy=True)


def event_edges(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, int]:
    """S2: (waiting op rows, record op rows they bind to, waits bound elsewhere): a stream wait binds
    to the latest record of its event issued before it in the same split."""
    rec = ops.index[ops["op"] == "event_record"]
    wait = ops.index[ops["op"] == "stream_wait"]
    left = pd.DataFrame({"seq": ops.loc[wait, "seq"].to_numpy(np.int64), "w": wait.to_numpy(np.int64),
                         "call_id": ops.loc[wait, "call_id"].to_numpy(), "handle": ops.loc[wait, "handle"].to_numpy()})
    right = pd.DataFrame({"seq": ops.loc[rec, "seq"].to_numpy(np.int64), "r": rec.to_numpy(np.int64),
                          "call_id": ops.loc[rec, "call_id"].to_numpy(), "handle": ops.loc[rec, "handle"].to_numpy()})
    bound = pd.merge_asof(left.sort_values("seq"), right.sort_values("seq"), on="seq", by=["call_id", "handle"],
                          allow_exact_matches=False, direction="backward")
    ok = bound["r"].notna().to_numpy(bool)
    return (bound["w"].to_numpy(np.int64)[ok], bound["r"].to_numpy(np.float64)[ok].astype(np.int64),
            int((~ok).sum()))


def stream_clocks(s: StreamOps) -> StreamClocks:
    ops = s.ops
    n = len(ops)
    k = int(ops["comp"].max()) + 1 if n else 1
    clock = np.zeros((n, k), np.int64)
    clock[np.arange(n), ops["comp"].to_numpy(np.int64)] = ops["pos"].to_numpy(np.int64)
    waits, records, unbound = event_edges(ops)
    # A shortest happens-before path enters each stream at most once: k rounds reach the fixed point.
    for _ in range(k + 1):
        clock = stream_order(ops, clock)
        if len(waits):
            clock[waits] = np.maximum(clock[waits], clock[records])
    return StreamClocks(stream_order(ops, clock), len(waits), unbound)


# -- stage 3: nodes ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeOps:
    """`accesses`: every byte access of the nodes of the analysed splits (writes and first reads
    from `accesses`, the other reads from `node_reads`), each with `row`, the operation that computed
    its node (-1: none found). `named`: nodes a launch, copy or memset named; `nodes`: nodes with
    accesses in those splits."""
    accesses: pd.DataFrame
    named: int
    nodes: int


def node_operations(trace, s: StreamOps) -> NodeOps:
    ops = s.ops
    cols = ["call_id", "index", "mode", "buffer", "offset", "end", "tensor", "node"]
    acc = trace.accesses
    acc = acc.loc[acc["call_id"].isin(s.splits).to_numpy(bool) & acc["index"].notna().to_numpy(bool), cols]
    reads = trace.node_reads
    reads = reads.loc[reads["call_id"].isin(s.splits).to_numpy(bool) & reads["index"].notna().to_numpy(bool), cols]
    both = pd.concat([acc, reads], ignore_index=True)
    both["tensor"] = both["tensor"].astype(str)
    both["node"] = both["node"].astype(str)
    both["index"] = both["index"].astype(np.int64)
    # A node no launch names (fused into the next one's kernel, or computed with it) runs with the
    # next node a launch names: its operation is that one's last.
    work = ops[ops["op"].isin(WORK_OPS).to_numpy(bool) & ops["node"].notna().to_numpy(bool)]
    named = (work.assign(index=work["node"].astype(np.int64), row=work.index.to_numpy(np.int64))
             .groupby(["call_id", "index"], sort=False)["row"].max().reset_index())
    both = both.sort_values("index", kind="stable")
    tied = pd.merge_asof(both, named.sort_values("index"), on="index", by="call_id", direction="forward")
    tied["row"] = tied["row"].fillna(-1).astype(np.int64)
    n_nodes = both[["call_id", "index"]].drop_duplicates()
    return NodeOps(tied.reset_index(drop=True), len(named), len(n_nodes))


# -- stage 4: findings ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class StreamReport:
    """What `stream_races` found: `pairs` (one row per unordered conflicting access pair), `findings`
    (pairs of the same shape grouped: the same nodes but for their layer number), and what the
    analysis covered."""
    pairs: pd.DataFrame
    findings: pd.DataFrame
    splits: int
    streams: pd.DataFrame
    operations: int
    named_nodes: int
    nodes: int
    bound_waits: int
    unbound_waits: int
    captured_splits: int

    def to_json(self) -> dict:
        return {
            "findings": [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
                         for row in self.findings.to_dict("records")],
            "splits": self.splits, "operations": self.operations, "streams": self.streams["label"].tolist(),
            "named_nodes": self.named_nodes, "nodes": self.nodes, "captured_splits": self.captured_splits,
            "bound_waits": self.bound_waits, "unbound_waits": self.unbound_waits,
        }


def _pattern(name: str) -> str:
    """A node's name with its layer number left out (llama.cpp names a layer's tensors NAME-LAYER)."""
    return re.sub(r"-\d+$", "-N", name)


def _overlapping(a: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(left, right): the pairs of rows of `a` (sorted by call_id, buffer, offset) whose byte ranges
    overlap in one buffer of one call, each pair once (left < right)."""
    group = pd.factorize(pd.MultiIndex.from_frame(a[["call_id", "buffer"]]))[0].astype(np.uint64)
    off = a["offset"].to_numpy(np.uint64)
    end = a["end"].to_numpy(np.uint64)
    if off.size and int(end.max()) >= 1 << 44:
        raise ValueError("byte offsets beyond 16 TiB in one buffer")
    key = (group << np.uint64(44)) | off
    hi = np.searchsorted(key, (group << np.uint64(44)) | end, side="left")
    i = np.arange(len(a))
    count = np.maximum(hi - i - 1, 0)
    return np.repeat(i, count), expand_ranges(i + 1, count)


def unordered_accesses(s: StreamOps, clocks: StreamClocks, nodes: NodeOps) -> pd.DataFrame:
    """Every pair of accesses of two nodes of one split, overlapping in one buffer, one at least a
    write, on different streams, with no happens-before path either way."""
    a = nodes.accesses
    a = a[a["row"] >= 0].sort_values(["call_id", "buffer", "offset"], kind="stable").reset_index(drop=True)
    if len(a) == 0:
        return a.iloc[0:0]
    off = a["offset"].to_numpy(np.uint64)
    end = a["end"].to_numpy(np.uint64)
    left, right = _overlapping(a)
    write = (a["mode"] == "write").to_numpy(bool)
    row = a["row"].to_numpy(np.int64)
    index = a["index"].to_numpy(np.int64)
    ops = s.ops
    comp = ops["comp"].to_numpy(np.int64)
    keep = (write[left] | write[right]) & (index[left] != index[right])
    keep &= comp[row[left]] != comp[row[right]]
    left, right = left[keep], right[keep]
    unordered = ~clocks.before(ops, row[left], row[right]) & ~clocks.before(ops, row[right], row[left])
    left, right = left[unordered], right[unordered]
    # w: the writing side (either, for two writes), o: the other
    swap = ~write[left]
    w = np.where(swap, right, left)
    o = np.where(swap, left, right)
    # the earlier-issued of two writes as w: the overwrite reads in issue order
    both_w = write[w] & write[o] & (ops["seq"].to_numpy()[row[o]] < ops["seq"].to_numpy()[row[w]])
    w, o = np.where(both_w, o, w), np.where(both_w, w, o)
    seq = ops["seq"].to_numpy(np.int64)
    w_first = seq[row[w]] < seq[row[o]]
    reads_its_output = a["tensor"].to_numpy(object)[o] == a["node"].to_numpy(object)[w]
    cls = np.where(write[o], "write-write",
                   np.where(reads_its_output, "missing-dependency",
                            np.where(w_first, "overwritten-before-read", "write-after-read")))
    label = dict(zip(zip(s.streams["backend"].astype(str), s.streams["stream"]), s.streams["label"]))
    backend = ops["backend"].astype(str).to_numpy(object)
    stream = ops["stream"].to_numpy(np.uint64)

    def side(x: np.ndarray, prefix: str) -> dict:
        r = row[x]
        return {f"{prefix}_index": index[x], f"{prefix}_node": a["node"].to_numpy(object)[x],
                f"{prefix}_tensor": a["tensor"].to_numpy(object)[x],
                f"{prefix}_mode": np.where(write[x], "write", "read"),
                f"{prefix}_stream": [label[(b, int(st))] for b, st in zip(backend[r], stream[r])],
                f"{prefix}_seq": seq[r], f"{prefix}_kernel": ops["kernel"].astype(object).to_numpy()[r]}

    out = pd.DataFrame({
        "class": cls, "call_id": a["call_id"].to_numpy(np.uint64)[w],
        "backend": backend[row[w]], "graph": ops["graph"].to_numpy()[row[w]], "split": ops["split"].to_numpy()[row[w]],
        "captured": ops["captured"].to_numpy(bool)[row[w]] | ops["captured"].to_numpy(bool)[row[o]],
        "buffer": a["buffer"].to_numpy(np.uint64)[w],
        "start": np.maximum(off[w], off[o]), "end": np.minimum(end[w], end[o]),
        **side(w, "w"), **side(o, "o"),
    })
    return out.sort_values(["call_id", "w_seq", "o_seq"], kind="stable").reset_index(drop=True)


def overwritten_in_issue_order(nodes: NodeOps) -> pd.DataFrame:
    """A backend runs a split's nodes in the order the hooks record them (after the call: ggml-cuda
    restores in place the order GGML_CUDA_GRAPH_OPT interleaved for the allocator). A node that writes
    over the bytes of a tensor produced earlier in the split, before a later node reads that tensor,
    overwrote it before the read in that order: wrong whatever the streams, even run one after another.
    Needs no stream of any node: one row per (writer, reader) pair. Only tensors the split produced
    (their producer found by name) are judged; a write through a view of the tensor is its update."""
    a = nodes.accesses
    reads = a[a["mode"] == "read"].reset_index(drop=True)
    writes = a[a["mode"] == "write"]
    # the producer of each read's tensor: the split's last write of that tensor before the reader
    producer = pd.merge_asof(
        reads[["call_id", "tensor", "index"]].assign(rid=np.arange(len(reads))).sort_values("index"),
        writes[["call_id", "node", "index"]].rename(columns={"node": "tensor", "index": "p"}).sort_values("p"),
        left_on="index", right_on="p", by=["call_id", "tensor"], direction="backward", allow_exact_matches=False)
    p_of_read = np.full(len(reads), np.nan)
    p_of_read[producer["rid"].to_numpy(np.int64)] = producer["p"].to_numpy(np.float64)
    both = pd.concat([writes.assign(p=-1.0), reads.assign(p=p_of_read)])
    both = both[both["p"].notna()].sort_values(["call_id", "buffer", "offset"], kind="stable").reset_index(drop=True)
    if len(both) == 0:
        return both.iloc[0:0]
    left, right = _overlapping(both)
    write = (both["mode"] == "write").to_numpy(bool)
    one = write[left] != write[right]  # a write and a read
    left, right = left[one], right[one]
    w = np.where(write[left], left, right)
    r = np.where(write[left], right, left)
    index = both["index"].to_numpy(np.int64)
    tensor = both["tensor"].to_numpy(object)
    p = both["p"].to_numpy(np.float64)
    written = both["node"].to_numpy(object)
    keep = (p[r] < index[w]) & (index[w] < index[r]) & (written[w] != tensor[r])
    w, r = w[keep], r[keep]
    through_view = np.array([str(x).startswith(str(t) + " (") for x, t in zip(written[w], tensor[r])], bool)
    w, r = w[~through_view], r[~through_view]
    off, end = both["offset"].to_numpy(np.uint64), both["end"].to_numpy(np.uint64)
    return pd.DataFrame({
        "call_id": both["call_id"].to_numpy(np.uint64)[w], "buffer": both["buffer"].to_numpy(np.uint64)[w],
        "start": np.maximum(off[w], off[r]), "end": np.minimum(end[w], end[r]),
        "tensor": tensor[r], "producer_index": p[r].astype(np.int64),
        "w_index": index[w], "w_node": written[w], "r_index": index[r], "r_node": both["node"].to_numpy(object)[r],
    }).drop_duplicates(["call_id", "w_index", "r_index", "tensor"]).reset_index(drop=True)


def group_findings(pairs: pd.DataFrame) -> pd.DataFrame:
    """Pairs of one shape (class, node names but for their layer, streams) as one finding: how many
    pairs and splits, and the first pair as its example."""
    if len(pairs) == 0:
        return pairs.assign(shape=[], pairs=[], splits=[])
    shape = (pairs["class"] + "|" + pairs["w_node"].map(_pattern) + "|" + pairs["o_tensor"].map(_pattern) + "|"
             + pairs["o_node"].map(_pattern) + "|" + pairs["w_stream"] + "|" + pairs["o_stream"])
    g = pairs.assign(shape=shape).groupby("shape", sort=False)
    first = g.head(1).set_index("shape")
    first["pairs"] = g.size()
    first["splits"] = g["call_id"].nunique()
    order = first["class"].map({c: i for i, c in enumerate(CLASSES)})
    return first.assign(_o=order).sort_values(["_o", "w_seq"], kind="stable").drop(columns="_o").reset_index()


def issue_order_pairs(s: StreamOps, nodes: NodeOps, over: pd.DataFrame) -> pd.DataFrame:
    """The overwrites in issue order (overwritten_in_issue_order) as pairs like unordered_accesses',
    with the streams of their nodes where their launches named them ("stream unknown" otherwise)."""
    if len(over) == 0:
        return pd.DataFrame()
    ops = s.ops
    first = ops.drop_duplicates("call_id").set_index("call_id")
    row = nodes.accesses.drop_duplicates(["call_id", "index"]).set_index(["call_id", "index"])["row"]
    label = dict(zip(zip(s.streams["backend"].astype(str), s.streams["stream"]), s.streams["label"]))

    def side(index: np.ndarray, node: np.ndarray, tensor: np.ndarray, mode: str, prefix: str) -> dict:
        r = row.reindex(pd.MultiIndex.from_arrays([over["call_id"].to_numpy(np.uint64), index])).fillna(-1)
        r = r.to_numpy(np.int64)
        named = r >= 0
        rr = np.maximum(r, 0)
        stream = [label.get((str(b), int(st)), "stream unknown") if ok else "stream unknown"
                  for b, st, ok in zip(ops["backend"].astype(str).to_numpy()[rr], ops["stream"].to_numpy()[rr], named)]
        return {f"{prefix}_index": index, f"{prefix}_node": node, f"{prefix}_tensor": tensor,
                f"{prefix}_mode": mode, f"{prefix}_stream": stream,
                f"{prefix}_seq": np.where(named, ops["seq"].to_numpy(np.int64)[rr], -1),
                f"{prefix}_kernel": np.where(named, ops["kernel"].astype(object).to_numpy()[rr], None)}

    cid = over["call_id"].to_numpy(np.uint64)
    return pd.DataFrame({
        "class": "overwritten-before-read", "call_id": cid,
        "backend": first["backend"].astype(str).reindex(cid).to_numpy(object),
        "graph": first["graph"].reindex(cid).to_numpy(), "split": first["split"].reindex(cid).to_numpy(),
        "captured": ops.groupby("call_id")["captured"].any().reindex(cid).to_numpy(bool),
        "buffer": over["buffer"].to_numpy(np.uint64), "start": over["start"].to_numpy(), "end": over["end"].to_numpy(),
        **side(over["w_index"].to_numpy(np.int64), over["w_node"].to_numpy(object), over["w_node"].to_numpy(object),
               "write", "w"),
        **side(over["r_index"].to_numpy(np.int64), over["r_node"].to_numpy(object), over["tensor"].to_numpy(object),
               "read", "o"),
    })


def stream_races(trace) -> StreamReport:
    """Judge the order inside every CUDA split of a trace recorded in CUDA streams mode: the overwrites
    in the order the backend runs the nodes, then what nothing orders between streams."""
    s = stream_operations(trace)
    clocks = stream_clocks(s)
    nodes = node_operations(trace, s)
    over = issue_order_pairs(s, nodes, overwritten_in_issue_order(nodes))
    streams = unordered_accesses(s, clocks, nodes)
    if len(over) and len(streams):  # a pair the issue order already shows is reported once, as that
        seen = pd.MultiIndex.from_frame(over[["call_id", "w_index", "o_index"]])
        mine = pd.MultiIndex.from_frame(streams[["call_id", "w_index", "o_index"]])
        streams = streams[~mine.isin(seen)]
    pairs = pd.concat([p for p in (over, streams) if len(p)], ignore_index=True) if len(over) or len(streams) \
        else streams
    captured = s.ops.groupby("call_id")["captured"].any()
    return StreamReport(pairs, group_findings(pairs), len(s.splits), s.streams, len(s.ops), nodes.named,
                        nodes.nodes, clocks.bound_waits, clocks.unbound_waits, int(captured.sum()))


# -- words ---------------------------------------------------------------------------------------------

def finding_words(f) -> list[str]:
    """A finding (a row of StreamReport.findings) in CUDA's words: what ran where, and the missing edge."""
    span = f"bytes [{f['start']}, {f['end']}) of buffer {f['buffer']:#x}"
    w = f"{f['w_node']} (node {f['w_index']}, {f['w_stream']})"
    o = f"{f['o_node']} (node {f['o_index']}, {f['o_stream']})"
    cls = f["class"]
    if cls == "write-write":
        what = f"{w} and {o} both write {span}"
        fix = "a cudaStreamWaitEvent of one stream on an event recorded on the other after its node"
    elif cls == "missing-dependency":
        what = f"{o} reads {f['o_tensor']} from {span}, which {w} writes"
        fix = (f"a cudaStreamWaitEvent of {f['o_stream'].split(' (')[0]} on an event recorded on "
               f"{f['w_stream'].split(' (')[0]} after {f['w_node']}")
    elif cls == "overwritten-before-read":
        what = (f"{w} writes {f['w_tensor']} over {span} before {o} reads {f['o_tensor']} there, in the order "
                f"the backend runs the split's nodes (node {f['w_index']} before node {f['o_index']})")
        fix = (f"an allocation that keeps {f['o_tensor']}'s bytes until {f['o_node']} has run: the allocator "
               "placed the nodes in another order than the backend runs them (no event can order a write "
               "issued before the read it clobbers)")
    else:
        what = (f"{w} writes {f['w_tensor']} over {span}, issued after {o} reads {f['o_tensor']} "
                f"there (issue order {f['w_seq']} vs {f['o_seq']})")
        fix = (f"a cudaStreamWaitEvent of {f['w_stream'].split(' (')[0]} on an event recorded on "
               f"{f['o_stream'].split(' (')[0]} after {f['o_node']}, or an allocation that keeps "
               f"{f['o_tensor']}'s bytes until both streams are joined")
    lines = [f"{what}" + ("." if cls == "overwritten-before-read" else ": nothing orders the two streams between them."),
             f"    why it matters: {CLASS_WORDS[cls]}",
             f"    an edge that would order them: {fix}"]
    if f["captured"]:
        lines.append("    the split was captured into a CUDA graph: every replay of that graph runs in this order")
    return lines


def format_stream_report(r: StreamReport, name: str) -> str:
    if r.splits == 0:
        return (f"{name}: no split issued CUDA work in the trace's CUDA records (record with --cuda-streams, "
                "on a CUDA backend; a split replayed from a CUDA graph issues none: its capture does)")
    head = (f"{name}: {len(r.findings)} access pattern(s) out of order ({len(r.pairs)} pair(s)) inside "
            f"{r.splits} CUDA split(s) ({r.captured_splits} captured into CUDA graphs), on "
            f"{len(r.streams)} stream(s); {r.operations} stream operations, {r.bound_waits} stream waits "
            f"bound to events of the same split; {r.named_nodes} of {r.nodes} nodes named by their launches")
    lines = [head]
    for k, f in enumerate(r.findings.to_dict("records"), 1):
        lines.append(f"[{k}] {f['class']}  x{f['pairs']} in {f['splits']} split(s)  "
                     f"(first: graph {f['graph']}, split {f['split']}, {f['backend']})")
        lines += ["    " + x for x in finding_words(f)]
    return "\n".join(lines)
