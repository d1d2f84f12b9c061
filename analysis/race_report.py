"""The result of the race analysis (analysis/races.py) and its words: RaceReport; the findings
frame's categories and dtypes (its columns: analysis/schema.py) and its JSON form (finding_json,
laid out as FINDING_JSON); and the text: each operation described, which ordering is missing,
what the times prove, the listing of `ggml-trace races` (see docs/races.md)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .kinds import COPY_KINDS, HOST_WRITE_KINDS
from .race_timing import BASES, EVENTS_TOLERANCE_NS, VERDICTS
from .schema import FINDING_SIDE, FINDINGS

# write-after-read: a read, then an unordered overwrite of the same bytes (appended: codes stay)
CLASSES = ["read-after-reuse", "write-after-write", "read-after-write", "write-after-read"]

# The findings frame: columns and dtypes from analysis/schema.py, its categories from here.
FINDING_COLUMNS = list(FINDINGS)
_CATEGORIES = {"class": CLASSES, "verdict": VERDICTS, "basis": BASES}
FINDING_DTYPES = {c: pd.CategoricalDtype(_CATEGORIES[c]) if t == "category" else t
                  for c, t in FINDINGS.items()}


def _json_key(column: str) -> str:
    """The JSON key of a column: its ns are given in µs there (t_begin_ns -> t_begin_us)."""
    return column[:-3] + "_us" if column.endswith("_ns") else column


# The JSON form of a finding (RaceReport.to_json(), `ggml-trace races --json`): each key and
# the findings column it is read from; a dict nests, a list is a list of columns. Columns in ns
# are given in µs (finding_json). Users' scripts read these keys: they stay as they are.
FINDING_JSON = {
    "class": "class", "manifested": "manifested", "inverted": "inverted", "margin_us": "margin_ns",
    "verdict": "verdict", "basis": "basis", "count": "count",
    "a": {_json_key(c): f"a_{c}" for c in FINDING_SIDE},
    "b": {_json_key(c): f"b_{c}" for c in FINDING_SIDE},
    "buffer": "buffer", "generation": "generation", "buffer_type": "buffer_type",
    "range": ["range_start", "range_end"], "missing": "missing",
    "first": {"graph": "first_graph", "t_us": "first_t_ns"},
    "last": {"graph": "last_graph", "t_us": "last_t_ns"},
    "occurrences": {v: f"n_{v}" for v in VERDICTS},
}


# -- the report -------------------------------------------------------------------------------

@dataclass
class RaceReport:
    """The result of races(trace).

    findings: one row per distinct race (columns and dtypes: analysis/schema.py FINDINGS, times
    in ns), manifested first, then by the smallest margin; to_json() is its JSON form. pairs:
    every racing pair of accesses found (one row per occurrence side pair). operations /
    accesses: what was analysed. truncated: windows that were cut by the safety valve (0
    normally)."""

    findings: pd.DataFrame
    pairs: pd.DataFrame
    operations: int
    accesses: int
    truncated: int = 0
    components: list = field(default_factory=list)
    # per finding: the smallest margin of its latent occurrences (ns, Int64; NA: none), which
    # `margin_ns` gives only where the verdict is latent; merging windows needs it
    latent_margin_ns: pd.api.extensions.ExtensionArray = field(
        default_factory=lambda: pd.array([], dtype="Int64"))

    def to_json(self) -> dict:
        """{"races": [...], ...}: each finding in its JSON form (finding_json)."""
        races = [finding_json(r) for r in self.findings.to_dict("records")]
        return {"races": races, "operations": self.operations, "accesses": self.accesses,
                "truncated_windows": self.truncated}

    def __repr__(self) -> str:
        return (f"<RaceReport: {len(self.findings)} races, {self.operations} operations, "
                f"{self.accesses} accesses>")


def findings_frame(columns: dict | None = None) -> pd.DataFrame:
    """The findings frame of {column: values} (arrays or lists, not indexed Series), in the
    columns and dtypes of FINDINGS; without columns, the empty frame."""
    if columns is None:
        return _EMPTY_FINDINGS.copy()
    return pd.DataFrame({c: pd.Series(columns[c], dtype=t) for c, t in FINDING_DTYPES.items()})


# Made once: building ~40 empty typed columns costs milliseconds, and every race-free window asks.
_EMPTY_FINDINGS = pd.DataFrame({c: pd.Series(dtype=t) for c, t in FINDING_DTYPES.items()})


def finding_json(row: dict, shape=FINDING_JSON):
    """One finding (a row of the findings frame, as a dict) in its JSON form, laid out as
    `shape` (FINDING_JSON): Python values, None for missing, ns columns as µs floats."""
    if isinstance(shape, dict):
        return {k: finding_json(row, v) for k, v in shape.items()}
    if isinstance(shape, list):
        return [finding_json(row, v) for v in shape]
    v = _py(row[shape])
    return v / 1000.0 if v is not None and shape.endswith("_ns") else v


def _py(v):
    """A findings value as a JSON-ready Python value (None for missing)."""
    if v is None or v is pd.NA:
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return None if v != v else float(v)
    return v


def missing_column(a: dict, b: dict, memory: list) -> list:
    """missing_words for every finding; describe_op runs once per distinct operation shape."""
    memo_op, memo_fix = {}, {}

    def op(s, i):
        k = (s["backend"][i], s["kind"][i], s["split"][i], s["thread"][i], s["role"][i],
             s["queue_backend"][i])
        if k not in memo_op:
            memo_op[k] = describe_op(dict(zip(("backend", "kind", "split", "thread", "role",
                                               "queue_backend"), k)))
        return memo_op[k]

    out = []
    for i in range(len(a["kind"])):
        if _writes_input_read_in_place(a, b, i):
            out.append(_input_words(op(a, i), op(b, i), a["graph"][i], a["tensor"][i], a["backend"][i]))
            continue
        # the fix names the queues that ran them (a peer copy runs on its source's queue)
        k = (a["queue"][i], b["queue"][i], a["queue_backend"][i] or a["backend"][i],
             b["queue_backend"][i] or b["backend"][i], a["thread"][i], b["thread"][i])
        if k not in memo_fix:
            memo_fix[k] = _fix_words(*k)
        out.append(_head_words(op(a, i), op(b, i), a["graph"][i], b["graph"][i],
                               a["mode"][i], b["mode"][i], a["tensor"][i], b["tensor"][i],
                               memory[i])
                   + "; " + memo_fix[k])
    return out


# -- words ------------------------------------------------------------------------------------

def describe_op(s: dict) -> str:
    """'VDEV0 split 3', 'CUDA0 cpy_tensor_async (input of split 4)', 'buf_set_tensor (thread 0)'."""
    be, kind, split, role = s["backend"], s["kind"], s["split"], s.get("role")
    if role is not None:  # a call a meta backend made (tensor parallelism)
        where = f" (in split {split})" if split is not None else ""
        if role == "copy" and s.get("queue_backend") not in (None, be):
            return f"{s['queue_backend']}->{be} allreduce copy{where}"
        if kind == "comm_allreduce":
            return f"{be} comm_allreduce{where}"
        return f"{be} allreduce {role}{where}" if role in ("zero", "reduce") else \
            f"{be} {kind} ({role}){where}"
    if kind == "graph_compute":
        return f"{be or 'backend ?'} split {split if split is not None else '?'}"
    if kind.startswith("buf_"):
        where = f" on a {be} buffer" if be else ""
        return f"{kind}{where} (thread {s['thread']})"
    if kind in HOST_WRITE_KINDS:
        how = "inferred" if kind == "host_write_inferred" else "observed"
        return f"the program (thread {s['thread']}, {how} store)"
    txt = f"{be} {kind}" if be else kind
    if kind in COPY_KINDS and split is not None:
        txt += f" (input of split {split})"
    return txt


def _head_words(op_a, op_b, graph_a, graph_b, mode_a, mode_b, tensor_a, tensor_b,
                memory="host memory") -> str:
    """memory: what the bytes are when a tensor has no name ("host memory", "VDEV1 device
    memory")."""
    ga = f"graph {graph_a}, " if graph_a is not None else ""
    gb = f" (graph {graph_b})" if graph_b is not None else ""
    what_a = f"{'writes' if mode_a == 'write' else 'reads'} {tensor_a or memory}"
    what_b = f"{'writes' if mode_b == 'write' else 'reads'} {tensor_b or memory}"
    return (f"nothing orders {op_a} ({ga}{what_a}) before {op_b}{gb} {what_b} "
            f"{'over' if mode_b == 'write' else 'from'} the same bytes")


_HOST_INPUT_WRITES = ("buf_set_tensor", "buf_set_tensor_2d", "buf_memset_tensor", *HOST_WRITE_KINDS)


def _writes_input_read_in_place(a: dict, b: dict, i: int) -> bool:
    """The program (a host thread) wrote a tensor that a device's split of an earlier graph read in
    place from host memory, with nothing between: the inputs of the next graph written while the
    device still works on the previous one (integrated GPUs: llama.cpp #28056)."""
    return (a["kind"][i] == "graph_compute" and bool(a["queue"][i]) and b["kind"][i] in _HOST_INPUT_WRITES
            and not b["queue"][i] and b["backend"][i] != a["backend"][i]  # host memory, not the device's
            and a["mode"][i] == "read" and a["tensor"][i] is not None
            and a["tensor"][i] == b["tensor"][i])


def _input_words(op_a, op_b, graph_a, tensor, backend) -> str:
    """`missing` for _writes_input_read_in_place: which synchronization is missing, and where
    llama.cpp would make it when the tensor is one of its graph inputs (inp_*, *_inp_*)."""
    words = (f"nothing orders {op_a} (graph {graph_a}, reads {tensor} in place from host memory) before "
             f"{op_b} writes {tensor} for a later graph: the device still works on graph {graph_a} when the "
             f"host writes the next inputs, and no split-input copy stands between them; a "
             f"ggml_backend_sched_synchronize (or synchronize on {backend}) before the inputs are written "
             "would order them")
    if tensor.startswith("inp_") or "_inp_" in tensor:
        words += ("; in llama.cpp: in llama_context::process_ubatch before res->set_inputs(), which "
                  "synchronizes there only with pipeline parallelism (llama.cpp #28056)")
    return words


def _fix_words(queue_a, queue_b, backend_a, backend_b, thread_a, thread_b) -> str:
    """The second half of `missing`: which ordering would fix the race, a whole clause."""
    if queue_a and not queue_b:
        return f"an event_synchronize or synchronize on {backend_a} between them would order them"
    if queue_a and queue_b:
        return (f"an event_record on {backend_a} after the first and an event_wait on "
                f"{backend_b} before the second, or a synchronize on {backend_a} between "
                "them, would order them")
    if thread_a != thread_b:
        return (f"they run on threads {thread_a} and {thread_b} with no traced synchronization "
                "between them (thread joins and locks are not traced)")
    return f"a synchronization between thread {thread_a} and the queue of {backend_b} would order them"


def missing_words(a: dict, b: dict) -> str:
    """Which ordering is missing between the earlier operation a and the later b, in words.
    a and b: dicts with backend, kind, split, thread, graph, mode, tensor and queue (whether the
    operation ran on an async backend's queue)."""
    if _writes_input_read_in_place({k: [v] for k, v in a.items()}, {k: [v] for k, v in b.items()}, 0):
        return _input_words(describe_op(a), describe_op(b), a["graph"], a["tensor"], a["backend"])
    return (_head_words(describe_op(a), describe_op(b), a["graph"], b["graph"], a["mode"],
                        b["mode"], a["tensor"], b["tensor"], a.get("memory", "host memory"))
            + "; " + _fix_words(a["queue"], b["queue"], a["backend"], b["backend"],
                                a["thread"], b["thread"]))


def verdict_words(r: dict) -> str:
    """What the times prove about one finding (a dict of RaceReport.to_json()), in words: the
    verdict, what it rests on, and how the occurrences divide when they differ."""
    verdict = r.get("verdict") or ("manifested" if r.get("manifested") else "latent")
    bounds = {"bounds": " (device-time bounds)",
              "events": f" (event-watcher times, ±{EVENTS_TOLERANCE_NS // 1000} us each)"}.get(r.get("basis") or "", "")
    if verdict == "manifested":
        words = ("MANIFESTED (the later operation ran entirely before the earlier one)" if r.get("inverted")
                 else "MANIFESTED (the two accesses ran at the same time)") + bounds
    elif verdict == "overlapped":
        coarse = [s for s in "ab" if "somewhere inside" in ((r.get(s) or {}).get("timing") or "")]
        who = {1: f"{''.join(coarse)}'s access lies", 2: "each access lies"}.get(len(coarse), "")
        inside = (f": {who} somewhere inside its operation's interval, so the order of the accesses themselves "
                  "is not known" if who else ": the order of the accesses themselves is not known")
        words = f"OVERLAPPED, not proven out of order (the two operations' intervals overlap{inside})" + bounds
    elif verdict == "latent":
        words = f"latent, margin {r['margin_us']:.1f} us{bounds}"
    elif r.get("basis") == "host":
        untimed = [s for s in "ab" if ((r.get(s) or {}).get("timing") or "").startswith("no device time")]
        which = f" ({' and '.join(untimed)} had no device time)" if untimed else ""
        words = ("UNDETERMINED: host times only" + which + " (when the async operation ran on its device is not "
                 "known, so latent cannot be told from manifested; record with --device-timing)")
    elif r.get("basis") == "events":
        words = (f"UNDETERMINED: the event watcher's times do not separate the two operations by more "
                 f"than its tolerance ({EVENTS_TOLERANCE_NS // 1000} us each; record with --cupti for exact times)")
    else:
        words = "UNDETERMINED: the device-time bounds do not separate the two operations"
    return words + _occurrence_words(r)


def _occurrence_words(r: dict) -> str:
    """'; of 255 occurrences: 200 latent, 55 undetermined' where the occurrences' verdicts differ."""
    occ = {v: n for v, n in (r.get("occurrences") or {}).items() if n}
    if len(occ) < 2:
        return ""
    return f"; of {sum(occ.values())} occurrences: " + ", ".join(f"{n} {v}" for v, n in occ.items())


def format_report(report: RaceReport, path: str = "") -> str:
    """The human-readable listing used by `ggml-trace races`."""
    doc = report.to_json()
    found = doc["races"]
    head = f"{path}: " if path else ""
    if not found:
        return (f"{head}no races among {report.operations} operations and "
                f"{report.accesses} accesses")
    n = {v: sum(r["verdict"] == v for r in found) for v in VERDICTS}
    counts = f"{n['manifested']} manifested, {n['latent']} latent"
    if n["overlapped"]:
        counts += f", {n['overlapped']} overlapped"
    if n["undetermined"]:
        counts += f", {n['undetermined']} undetermined"
    lines = [f"{head}{len(found)} race{'s' if len(found) != 1 else ''} ({counts}) among "
             f"{report.operations} operations and {report.accesses} accesses"]
    for i, r in enumerate(found, 1):
        timing = verdict_words(r)
        first, last = r["first"]["graph"], r["last"]["graph"]
        graphs = f"graph {first}" if first == last else f"graphs {first}..{last}"
        lines.append(f"[{i}] {r['class']}  x{r['count']} ({graphs})  {timing}")
        for s in "ab":
            d = r[s]
            lines.append(
                f"    {s}: {describe_op(d)}, graph {d['graph']}, {d['mode']}s {d['tensor']} "
                f"(node {d['node']}) [{d['t_begin_us']:.1f}, {d['t_end_us']:.1f}] us"
                f"{' on the device' if d['device'] else ''}" + (f"; {d['timing']}" if d.get("timing") else ""))
        lines.append(f"    bytes [{r['range'][0]}, {r['range'][1]}) of buffer {r['buffer']} "
                     f"({r['buffer_type']}, generation {r['generation']})")
        lines.append(f"    {r['missing']}")
    if report.truncated:
        lines.append(f"note: {report.truncated} windows of unordered accesses were too long; only "
                     "their most recent accesses were compared (see docs/races.md)")
    return "\n".join(lines)
