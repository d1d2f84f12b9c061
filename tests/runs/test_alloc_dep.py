"""Backend API 3's allocation dependencies (graph_optimize -> params->add_alloc_dep, upstream #27301) in
real traces: the `alloc-dep` scenario's VDEV0 keeps its copy of the split input h ("VDEV0#h#0") allocated
until node c. The scheduler adds the dependency as a GGML_OP_NONE node to the graph it allocates, never
to the graphs the backends compute, so the trace shows it only through the allocator's placements; the
accesses, which the race model reads, are those of the nodes that ran (docs/scenarios.md, alloc-dep)."""
import pytest

from ggml_trace.analysis import load, races
from ggml_trace.tracer import scenario

KEPT = "VDEV0#h#0"
SPLIT_NODES = ["a", "b", "c", "out"]  # VDEV0's split, in graph order; h is kept until c


def placed(t) -> dict:
    """tensor -> (buffer, offset, end) of the graph's allocation"""
    (alloc,) = t.calls[t.calls.kind == "sched_alloc_graph"].call_id
    p = t.allocations[t.allocations.call_id == alloc]
    return {r.tensor: (r.buffer, r.offset, r.end) for r in p.itertuples()}


def overlap(x, y) -> bool:
    return x[0] == y[0] and x[1] < y[2] and y[1] < x[2]


def run(build, tmp_path, monkeypatch, deps=None):
    if deps is not None:  # the scenario sets its own only where the caller set none
        monkeypatch.setenv("GGML_TRACE_VDEV_ALLOC_DEPS", deps)
    r = scenario.run("alloc-dep", build=build, runs=3, jitter_us=2000, out_dir=tmp_path)
    assert r.corrupt_runs == 0, r.corrupt
    return r


def test_the_dependency_keeps_the_input_copy_until_c(tmp_path, monkeypatch):
    r = run("b11434", tmp_path, monkeypatch)
    for path in r.traces:
        t = load(path)
        assert t.meta["backend_api_version"] == "3"
        p = placed(t)
        # a, b and c (in place on each other) do not touch the kept copy's bytes ...
        for n in ["a", "b", "c"]:
            assert not overlap(p[n], p[KEPT]), (n, p)
        # ... and out, the first tensor allocated after c, gets them
        assert p["out"] == p[KEPT], p


def test_without_the_dependency_a_runs_in_place_on_the_copy(tmp_path, monkeypatch):
    r = run("b11434", tmp_path, monkeypatch, deps="")
    p = placed(load(r.traces[0]))
    assert p["a"] == p[KEPT] and not overlap(p["out"], p[KEPT]), p


def test_before_api_3_there_is_no_dependency(tmp_path, monkeypatch):
    # b10531: graph_optimize(backend, graph) has no params; the virtual device declares nothing
    r = run("b10531", tmp_path, monkeypatch)
    t = load(r.traces[0])
    assert t.meta["backend_api_version"] == "2"
    p = placed(t)
    assert p["a"] == p[KEPT], p


@pytest.mark.parametrize("deps", [None, ""])
def test_the_none_node_is_no_access_and_no_race(deps, tmp_path, monkeypatch):
    r = run("b11434", tmp_path, monkeypatch, deps=deps)
    for path in r.traces:
        t = load(path)
        assert races(t).findings.empty, path
        acc, p = t.accesses, placed(t)
        split = acc[(acc.kind == "graph_compute") & (acc.backend == "VDEV0")]
        # the dependency node ("VDEV0#h#0 (view)", GGML_OP_NONE) never ran: no access names it, and the
        # split's accesses are its nodes' writes and its input copy's read
        names = set(acc.tensor.dropna()) | set(acc.node.dropna())
        assert not any("(view)" in n for n in names), names
        assert set(split[split["mode"] == "write"].tensor) == set(SPLIT_NODES)
        assert list(split[split["mode"] == "read"].tensor) == [KEPT]
        # every access lies where the allocator placed its tensor: the model reads the placement that
        # the dependency forced through the accesses themselves
        for a in split.itertuples():
            assert (a.buffer, a.offset, a.end) == p[a.tensor], (a.tensor, p)
        # the kept bytes are written by the input's async copy alone
        copy_write = acc[(acc.kind == "cpy_tensor_async") & (acc["mode"] == "write")]
        assert list(copy_write.tensor) == [KEPT]
