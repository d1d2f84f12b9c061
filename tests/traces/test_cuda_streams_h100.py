"""CUDA streams mode on real traces (bench/gpu/results-h100-2026-12-06-cuda-streams): b11434 with CUDA on one
H100, a random 8-layer llama decoding greedily; GGML_CUDA_GRAPH_OPT=1 on two virtual devices (wrong 20 of 20
runs, 14 distinct outputs), the same with patches/graph-opt-fork-lifetime.patch (right 20 of 20), GRAPH_OPT on
one device and two devices without it (right). The analysis must explain the wrong runs and find nothing in
the right ones."""
import json
from pathlib import Path

import pytest

from ggml_trace.analysis import load
from ggml_trace.analysis.stream_races import format_stream_report, stream_races

DATA = Path(__file__).resolve().parents[1] / "data"
WRONG = DATA / "cuda-virtual-b11434-gopt-2dev-streams.ggmltrace"
FIXED = DATA / "cuda-virtual-b11434-gopt-2dev-fix-streams.ggmltrace"
ONE_DEVICE = DATA / "cuda-virtual-b11434-gopt-1dev-streams.ggmltrace"
NO_GRAPH_OPT = DATA / "cuda-virtual-b11434-2dev-streams.ggmltrace"


@pytest.fixture(scope="module")
def wrong():
    return stream_races(load(WRONG))


def test_graph_opt_runs_the_attention_branches_on_three_streams_of_each_device(wrong):
    assert wrong.splits == 8 and wrong.captured_splits == 2
    per_backend = wrong.streams.groupby("backend", observed=True).size().to_dict()
    assert per_backend == {"CUDA0": 4, "CUDA1": 4}
    # each attention region: a fork record feeding three waits, three join records feeding stream 0;
    # 8 layers over two devices, in the four decode splits that issued work
    assert wrong.bound_waits == 96 and wrong.unbound_waits == 0


def test_the_wrong_runs_q_rope_overwrites_attn_norm_before_k_and_v_read_it(wrong):
    p = wrong.pairs
    assert set(p["class"]) == {"overwritten-before-read"}
    assert len(p) == 32  # 8 layers x (K, V) x the two splits of each device that issued work
    layer = p["o_tensor"].str.extract(r"attn_norm-(\d+)$")[0]
    assert layer.notna().all() and sorted(set(layer.astype(int))) == list(range(8))
    assert (p["w_node"].str.replace(r"-\d+$", "", regex=True) == "Qcur").all()
    assert set(p["o_node"].str.replace(r"-\d+$", "", regex=True)) == {"Kcur", "Vcur"}
    # the rope comes between attn_norm's producer and its readers in the order the backend runs them
    assert (p["w_index"] < p["o_index"]).all()
    assert (p["start"] < p["end"]).all()
    assert len(wrong.findings) == 2 and set(wrong.findings["pairs"]) == {16}
    text = format_stream_report(wrong, "wrong")
    assert "an allocation that keeps attn_norm-0's bytes until Vcur-0 has run" in text


@pytest.mark.parametrize("path, streams", [(FIXED, 8), (ONE_DEVICE, 1), (NO_GRAPH_OPT, 2)])
def test_nothing_out_of_order_in_the_right_runs(path, streams):
    r = stream_races(load(path))
    assert r.splits >= 4 and len(r.streams) == streams
    assert len(r.pairs) == 0 and len(r.findings) == 0


def test_the_fix_keeps_the_same_streams_and_events(wrong):
    fixed = stream_races(load(FIXED))
    assert (fixed.splits, fixed.bound_waits, len(fixed.streams)) == (wrong.splits, wrong.bound_waits, len(wrong.streams))


def test_the_cli_exits_1_on_the_wrong_run_and_0_on_the_fixed_one(tmp_path):
    from ggml_trace.tracer.cli import main

    assert main(["streams", str(WRONG)]) == 1
    assert main(["streams", str(FIXED)]) == 0
    assert main(["streams", str(WRONG), "--json"]) == 1


def test_perfetto_shows_every_stream_and_event_edge(tmp_path):
    from ggml_trace.analysis.export import STREAMS_PID, export_perfetto

    export_perfetto(load(WRONG), tmp_path / "w.json")
    events = [e for e in json.loads((tmp_path / "w.json").read_text())["traceEvents"] if e["pid"] == STREAMS_PID]
    assert sum(e["name"] == "thread_name" for e in events) == 8
    assert sum(e["ph"] == "s" for e in events) == sum(e["ph"] == "f" for e in events) == 96
