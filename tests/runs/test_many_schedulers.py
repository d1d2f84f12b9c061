"""A program with hundreds of schedulers (tests/programs/many_scheds.cpp), recorded: every scheduler
call keeps its scheduler, each scheduler has an id of its own though the hooks reuse the slots of
freed ones (docs/trace-format.md, "Scheduler slots"), and each graph compute is the scheduler's that
ran it."""
import pandas as pd
import pytest

from ggml_trace.analysis import load
from support import built_program, ggml_trace

SCHED_KINDS = {"sched_new": "new", "sched_reset": "reset", "sched_alloc_graph": "alloc",
               "sched_graph_compute": "compute", "sched_synchronize": "sync", "sched_free": "free"}


@pytest.mark.parametrize("n, mode, total", [(300, "turns", 300), (200, "alive", 300)])
def test_every_scheduler_keeps_its_id(tmp_path, n, mode, total):
    out = tmp_path / "t.ggmltrace"
    r = ggml_trace("record", "-o", out, "--", built_program("b10531", "many-scheds"), n, mode)
    assert r.returncode == 0, r.stderr
    # the program's own account: one line per scheduler call, in the order it made them
    ops = [line.split() for line in r.stdout.splitlines() if line.split()[0] in SCHED_KINDS.values()]
    assert len({k for _, k in ops}) == total
    t = load(out)
    calls = t.calls
    s = calls[calls["kind"].isin(list(SCHED_KINDS))].sort_values("t_begin", kind="stable")
    assert s["sched"].notna().all()
    # ggml's own calls inside the program's (sched_new resets, a compute synchronizes): the outer one's
    inner = (s["t_begin"] < s["t_end"].cummax().shift(fill_value=-1)).to_numpy()
    outer_at = (~inner).cumsum() - 1
    outer = s[~inner]
    assert (s["sched"].to_numpy()[inner] == outer["sched"].to_numpy()[outer_at[inner]]).all()
    s = outer
    assert [SCHED_KINDS[k] for k in s["kind"]] == [what for what, _ in ops]
    # the trace's id of each of the program's schedulers: one id per scheduler, a different one each
    pairs = pd.DataFrame({"k": [k for _, k in ops], "sched": s["sched"].to_numpy()}).drop_duplicates()
    assert pairs["k"].is_unique and pairs["sched"].is_unique and len(pairs) == total
    # each graph's splits are the scheduler's that computed it, and write its output "out<K>"
    sched_of = dict(zip(pairs["k"].astype(int), pairs["sched"]))
    computes = s[s["kind"] == "sched_graph_compute"]
    splits = t.splits
    writes = t.accesses[(t.accesses["kind"] == "graph_compute") & (t.accesses["mode"] == "write")]
    out_of = writes[writes["tensor"].astype(str).str.startswith("out")].groupby("graph")["tensor"].first()
    assert len(computes) == len(out_of)
    for g, sched in zip(computes["graph"], computes["sched"]):
        assert set(splits.loc[splits["graph"] == g, "sched"]) == {sched}
        assert sched_of[int(str(out_of[g])[3:])] == sched
