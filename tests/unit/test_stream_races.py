"""The order inside a CUDA split (analysis/stream_races.py) on small traces made here: one split whose
Q, K and V branches run on streams of their own between a fork and a join, as ggml-cuda's
GGML_CUDA_GRAPH_OPT runs attention; the model must find exactly the unordered accesses planted."""
import pytest

from ggml_trace.analysis import load
from ggml_trace.analysis.stream_races import stream_races
from ggml_trace.analysis.trace_format import ACCESS_PER_NODE, CUDA_CAPTURED
from tests.support.tracegen import TraceBuilder

BUF = 0xB000
S0, S1, S2, S3 = 0x10, 0x11, 0x12, 0x13
FORK, J1, J2, J3 = 0xE0, 0xE1, 0xE2, 0xE3


def attention_split(path, *, rope_over_norm=True, join_v=True, captured=False):
    """attn_norm on stream 0; Qcur (mul_mat, rope) on stream 1, Kcur on 2, Vcur on 3, each after the
    fork event; the join on stream 0 after the three join events. rope_over_norm: Qcur's rope is
    placed over attn_norm's bytes (what an allocator that freed attn_norm after its last reader in
    the interleaved order may do); join_v=False leaves out stream 0's wait for stream 3."""
    b = TraceBuilder()
    b.thread(0, name="main")
    b.backend(0, "CUDA0", device_type=1, has_async=True, has_events=True)
    b.buffer(BUF, base=0x7F00_0000, size=1 << 12, usage=2, buft_name="CUDA0")
    c = b.call("graph_compute", 100, 1_000, backend=0, sched=0, graph=0, split=0, arg=6)
    rope = 0 if rope_over_norm else 320
    nodes = [  # index, name, written range, what it reads
        (0, "attn_norm-0", 0, []),
        (1, "Qcur-0", 64, ["attn_norm-0"]),
        (2, "Qcur_rope-0", rope, ["Qcur-0"]),
        (3, "Kcur-0", 128, ["attn_norm-0"]),
        (4, "Vcur-0", 192, ["attn_norm-0"]),
        (5, "kq-0", 256, ["Qcur_rope-0", "Kcur-0", "Vcur-0"]),
    ]
    where = {name: off for _, name, off, _ in nodes}
    for index, name, off, reads in nodes:
        for r in reads:  # every source produced inside the split: a per-node read
            b.access(c, "read", BUF, where[r], 64, tensor=r, node=name, index=index, flags=ACCESS_PER_NODE)
        b.access(c, "write", BUF, off, 64, tensor=name, index=index)
    flags = CUDA_CAPTURED if captured else 0
    t = [200]

    def cuda(op, stream, **kw):
        t[0] += 1
        b.cuda(op, t[0], call_id=c, stream=stream, flags=flags, **kw)

    cuda("launch", S0, name="rms_norm_f32", node=0)
    cuda("event_record", S0, handle=FORK)
    for s in (S1, S2, S3):
        cuda("stream_wait", s, handle=FORK)
    cuda("launch", S1, name="mul_mat_vec", node=1)
    cuda("launch", S1, name="rope_f32", node=2)
    cuda("launch", S2, name="mul_mat_vec", node=3)
    cuda("launch", S3, name="quantize_q8_1")  # a launch that names no node: the next one's
    cuda("launch", S3, name="mul_mat_vec", node=4)
    for s, e in ((S1, J1), (S2, J2), (S3, J3)):
        cuda("event_record", s, handle=e)
        if s != S3 or join_v:
            cuda("stream_wait", S0, handle=e)
    cuda("launch", S0, name="flash_attn", node=5)
    b.write(path)
    return load(path)


def test_a_branch_writing_over_the_fork_input_that_a_later_branch_reads(tmp_path):
    r = stream_races(attention_split(tmp_path / "t.ggmltrace"))
    assert r.splits == 1 and len(r.streams) == 4 and r.bound_waits == 6
    assert r.named_nodes == 6 and r.nodes == 6
    got = sorted((p["class"], p["w_node"], p["o_node"]) for p in r.pairs.to_dict("records"))
    # Qcur's rope (stream 1) is issued before Kcur and Vcur (streams 2, 3) read attn_norm there
    assert got == [("overwritten-before-read", "Qcur_rope-0", "Kcur-0"),
                   ("overwritten-before-read", "Qcur_rope-0", "Vcur-0")]
    p = r.pairs.iloc[0]
    assert (p["start"], p["end"], p["o_tensor"]) == (0, 64, "attn_norm-0")
    assert p["w_stream"].startswith("CUDA0 stream 1") and p["o_stream"].startswith("CUDA0 stream 2")


def test_the_same_split_with_its_own_bytes_for_the_rope_is_ordered(tmp_path):
    r = stream_races(attention_split(tmp_path / "t.ggmltrace", rope_over_norm=False))
    assert r.splits == 1 and len(r.pairs) == 0 and len(r.findings) == 0


def test_a_join_that_does_not_wait_for_one_branch(tmp_path):
    r = stream_races(attention_split(tmp_path / "t.ggmltrace", rope_over_norm=False, join_v=False))
    got = sorted((p["class"], p["w_node"], p["o_node"]) for p in r.pairs.to_dict("records"))
    assert got == [("missing-dependency", "Vcur-0", "kq-0")]


@pytest.mark.parametrize("captured", [False, True])
def test_the_words_name_the_streams_and_the_missing_edge(tmp_path, captured):
    from ggml_trace.analysis.stream_races import format_stream_report

    r = stream_races(attention_split(tmp_path / "t.ggmltrace", captured=captured))
    text = format_stream_report(r, "t")
    assert "overwritten-before-read" in text and "x1 in 1 split(s)" in text
    assert "Qcur_rope-0 (node 2, CUDA0 stream 1" in text and "reads attn_norm-0" in text
    # an overwrite issued before the read it clobbers: no event can order it, the allocation must
    assert "an allocation that keeps attn_norm-0's bytes until Kcur-0 has run" in text
    assert ("every replay of that graph runs in this order" in text) == captured
    assert r.captured_splits == int(captured)


def test_no_cuda_records_no_splits(tmp_path):
    b = TraceBuilder()
    b.thread(0)
    b.backend(0, "CPU")
    b.call("sched_graph_compute", 0, 10, sched=0, graph=0)
    b.write(tmp_path / "t.ggmltrace")
    r = stream_races(load(tmp_path / "t.ggmltrace"))
    assert r.splits == 0 and len(r.findings) == 0


def test_perfetto_has_a_track_per_stream_with_the_event_edges_as_flows(tmp_path):
    import json

    from ggml_trace.analysis.export import STREAMS_PID, export_perfetto

    export_perfetto(attention_split(tmp_path / "t.ggmltrace"), tmp_path / "t.json")
    events = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["pid"] == STREAMS_PID]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert sorted(v.split(" (")[0] for v in tracks.values()) == [f"CUDA0 stream {i}" for i in range(4)]
    on = {e["name"]: tracks[e["tid"]].split(" (")[0] for e in events if e["ph"] == "X"}
    assert on["attn_norm-0"] == on["kq-0"] == "CUDA0 stream 0" and on["Qcur_rope-0"] == "CUDA0 stream 1"
    assert on["Vcur-0"] == "CUDA0 stream 3" and on["quantize_q8_1"] == "CUDA0 stream 3"
    # the fork's record feeds three waits, each join record one: six arrows
    assert sum(e["ph"] == "s" for e in events) == sum(e["ph"] == "f" for e in events) == 6


def test_diagnose_says_what_nothing_orders_inside_cuda_splits(tmp_path):
    """diagnose's analysis of a run recorded with --cuda-streams carries the stream findings into its
    verdict and its words (the runs here are made up; their traces are the GRAPH_OPT shape above)."""
    from ggml_trace.tracer.diagnose import Diagnosis, Run, analyse, format_diagnosis, verdict

    runs = []
    for i, bad in enumerate((True, False, True)):
        attention_split(tmp_path / f"run-{i}.ggmltrace", rope_over_norm=bad)
        (tmp_path / f"out-{i}").write_text("the same words\n")
        (tmp_path / f"err-{i}").write_text("")
        run = Run(f"run-{i}", 0, "exit status 0", 1.0, f"out-{i}", f"err-{i}", trace=f"run-{i}.ggmltrace")
        analyse(tmp_path / f"run-{i}.ggmltrace", run)
        runs.append(run)
    assert [len(r.stream_findings) for r in runs] == [2, 0, 2] and not runs[0].races
    d = Diagnosis(str(tmp_path), [], ["prog"], str(tmp_path), runs, None, None)
    status, words = verdict(d)
    assert status == 1 and "2 access pattern(s) that nothing orders inside CUDA splits" in words
    assert "in 2 of 3 runs" in words
    d.headline = words
    text = format_diagnosis(d)
    assert "inside CUDA splits 1: overwritten-before-read in 2 of 3 runs: Qcur_rope-0" in text
    from ggml_trace.tracer.issue import write_issue

    body = write_issue(d, tmp_path)
    assert "### Inside CUDA splits" in body and "**overwritten-before-read** in 2 of 3 runs" in body
