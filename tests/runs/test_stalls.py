"""`ggml-trace stalls`: what each host-blocking call waited for and whether any access needed it, on
scheduler scenarios over virtual devices (the committed H200 Vulkan traces:
tests/traces/test_stalls_h200.py)."""
import pandas as pd

from ggml_trace.analysis import load
from ggml_trace.analysis.stalls import STALL_COLUMNS, stalls, totals
from support import DATA, stall_waits
from ggml_trace.tracer import scenario


def test_the_pipeline_fixs_waits_are_needed_and_name_the_tensor(tmp_path):
    """b11434-ppfix: before each later iteration's CPU split the host waits on the event recorded
    after VDEV0's copy of e; each of those waits orders the CPU's write of e after that read."""
    r = scenario.run("pipeline-input-reuse", build="b11434-ppfix", runs=1, latency_us="2000,0", out_dir=tmp_path)
    t = load(r.traces[0])
    s = stalls(t)
    assert list(s.columns) == list(STALL_COLUMNS)
    fix = stall_waits(s, "event_synchronize")
    fix = fix[(fix["backend"] == "VDEV0") & (fix["split"] == 0)]
    assert len(fix) == 7
    assert fix["needed"].all() and not fix["avoidable"].any()
    assert fix["conflict"].str.contains(r"VDEV0 cpy_tensor_async \(graph \d+\) reads e before CPU split 0").all()
    # each returned only after that copy had ended on VDEV0; VDEV0 is 2 ms an operation behind, so
    # nearly every one began while the copy was still running
    dev = t.device
    copies = dev[(dev["backend"] == "VDEV0") & (dev["kind"] == "cpy_tensor_async")].set_index("graph")["t_end"]
    read = fix["conflict"].str.extract(r"VDEV0 cpy_tensor_async \(graph (\d+)\)")[0].astype(int)
    copy_end = copies.loc[read].to_numpy()
    assert (fix["t_end"].to_numpy() >= copy_end).all()
    assert (fix["t_begin"].to_numpy() < copy_end).sum() >= 5
    # the program's last wait on VDEV1 is needed: it reads the results VDEV1 copied into host memory
    last = stall_waits(s)[stall_waits(s)["backend"] == "VDEV1"].iloc[-1]
    assert last["needed"] and "reads on the host" in last["conflict"]


def test_draining_every_queue_before_every_split_is_mostly_avoidable(tmp_path):
    """b11434-ppsync synchronizes every backend before every split: each of those waits, taken on its
    own, could go (the next one drains the same work before anything touches it), and the analysis
    says so; only the program's own waits for its results are needed."""
    fixed = stalls(load(scenario.run("pipeline-input-reuse", build="b11434-ppfix", runs=1, latency_us="2000,0",
                                     out_dir=tmp_path / "fix").traces[0]))
    blunt = stalls(load(scenario.run("pipeline-input-reuse", build="b11434-ppsync", runs=1, latency_us="2000,0",
                                     out_dir=tmp_path / "sync").traces[0]))
    tf, tb = totals(fixed), totals(blunt)
    assert tb["avoidable_calls"] > 2 * tf["avoidable_calls"]
    assert tb["avoidable_blocked_ns"] > 0  # they blocked the host (for how long: bench/bench_stall_figures.py)
    sync = stall_waits(blunt, "synchronize")
    inside = sync[sync["graph"].notna()]
    assert len(inside) >= 8 * 3 * 2 and inside["avoidable"].all(), inside[~inside["avoidable"]]["conflict"].tolist()
    # those that found VDEV0's work still running (2 ms an operation) blocked until it had ended
    drained = inside[(inside["pending"] > 0) & inside["waited_end"].notna()]
    assert len(drained) > 0 and (drained["t_end"] >= drained["waited_end"]).all()


def test_the_23321_fixs_synchronize_is_needed(tmp_path):
    """b10531 synchronizes VDEV0 before the input-less CPU split: that wait orders VDEV0's read of h
    before the CPU's write of z over the same bytes."""
    r = scenario.run("inputless-reuse", build="b10531", runs=1, out_dir=tmp_path)
    s = stalls(load(r.traces[0]))
    w = stall_waits(s, "synchronize")
    w = w[(w["backend"] == "VDEV0") & (w["split"] == 2)]
    assert len(w) == 1
    assert w.iloc[0]["needed"] and "reads h before CPU split 2 (graph 0) writes z" in w.iloc[0]["conflict"]


def test_leaving_out_calls_by_their_buffers_changes_no_answer(tmp_path, monkeypatch):
    """Calls whose buffers cannot meet the other side's are left out before the join (BUFFER_BITS):
    the frame is the same as when every call's accesses are joined, on traces with needed and
    avoidable waits, conflicts named, and the CPU's waits for results read on the host."""
    from ggml_trace.analysis import stalls as module
    runs = [scenario.run("pipeline-input-reuse", build=b, runs=1, latency_us="2000,0", out_dir=tmp_path / b).traces[0]
            for b in ("b11434-ppfix", "b11434-ppsync")]
    paths = [*runs, DATA / "vulkan-nvidia-b11434-ppfix-h200.ggmltrace", DATA / "vulkan-nvidia-b10531-h200.ggmltrace"]
    seen = pd.Series(dtype=bool)
    for path in paths:
        assert module._Model(load(path)).writes_of is not None  # the buffers as bits, where they are few
        with_bits = stalls(load(path))
        monkeypatch.setattr(module, "BUFFER_BITS", 0)
        without = stalls(load(path))
        monkeypatch.undo()
        pd.testing.assert_frame_equal(with_bits, without)
        seen = pd.concat([seen, with_bits["needed"].dropna().astype(bool)])
    assert seen.any() and not seen.all()
