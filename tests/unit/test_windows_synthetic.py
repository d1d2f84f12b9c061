"""The race analysis in graph windows (analysis/windows.py) on a synthetic trace with the #23321
pattern in every graph (bench/bench_races.py build_trace): the plan, the windows' calls, a cut
file, the read-ahead, the same findings as the whole trace's. The committed GPU traces:
tests/traces/test_windows.py."""
import pytest

from ggml_trace.analysis import load, races
from ggml_trace.analysis.windows import index_trace, iter_windows, plan_windows, races_in_windows


def test_a_synthetic_race_in_every_graph(windows_trace):
    path, graphs = windows_trace
    index = index_trace(path)
    plan = plan_windows(index, records=20_000)
    assert len(plan) > 10 and plan[0].first_graph == 0 and plan[-1].end_graph == graphs
    report, info = races_in_windows(path, records=20_000)
    assert report.findings["count"].tolist() == [graphs]
    assert info["largest_window_records"] < 40_000  # one window's records (and its context), not the file's
    assert report.findings.equals(races(load(path)).findings)


def test_iter_windows_covers_every_call_once(windows_trace):
    path, graphs = windows_trace
    seen = [t.calls["call_id"] for _, t in iter_windows(path, records=30_000)]
    assert len(seen) > 5
    ids = [i for s in seen for i in s.tolist()]
    assert len(ids) == len(set(ids)) and set(ids) == set(load(path).calls["call_id"].tolist())


@pytest.mark.parametrize("cut_at", [0.5, 0.75])
def test_a_cut_file_in_windows_keeps_what_the_whole_read_keeps(windows_trace, tmp_path, cut_at):
    """A file cut inside a chunk (copied while written, a full disk): the windows read its last,
    partial chunk as the whole-file reader does, every whole record in it."""
    from ggml_trace.analysis.trace_format import CHUNK_SIZE, HEADER_SIZE

    path, _ = windows_trace
    data = path.read_bytes()
    chunks = (len(data) - HEADER_SIZE) // CHUNK_SIZE
    cut = HEADER_SIZE + int(chunks * cut_at) * CHUNK_SIZE + CHUNK_SIZE // 3 + 17  # mid-chunk, mid-record
    part = tmp_path / "cut.ggmltrace"
    part.write_bytes(data[:cut])
    whole = load(part, strict=False)
    assert any("ends inside a chunk" in w for w in whole.warnings)
    def host_calls(t):  # device-side records whose host call was cut off are left out of windows
        return set(t.calls.loc[t.calls["kind"] != "device_exec", "call_id"].tolist())

    seen = set()
    for _, t in iter_windows(part, records=30_000, strict=False):
        seen |= host_calls(t)
    assert seen == host_calls(whole)
    windowed, _ = races_in_windows(part, records=20_000, strict=False)
    assert windowed.findings.equals(races(whole).findings)


def test_the_commands_window_is_the_analysis_default(capsys):
    from ggml_trace.analysis.windows import WINDOW_RECORDS
    from ggml_trace.tracer.cli import main as cli

    with pytest.raises(SystemExit):
        cli(["races", "--help"])
    assert f"(default: {WINDOW_RECORDS})" in " ".join(capsys.readouterr().out.split())


def test_reading_ahead_gives_the_windows_in_order_whatever_the_threads(windows_trace, monkeypatch):
    """The next window is read in a thread of its own (analysis/windows.py, read_ahead); with one
    thread it is read in turn. The windows and what they hold must not depend on it."""
    from ggml_trace.analysis import windows

    path, _ = windows_trace
    index = index_trace(path)
    plan = plan_windows(index, records=50_000)
    assert len(plan) > 2

    def read_all():
        return [(w.number, len(raw.calls), len(raw.accesses), int(raw.calls["call_id"].sum()))
                for w, raw in windows.read_ahead(index, plan)]

    ahead = read_all()
    monkeypatch.setenv("GGML_TRACE_THREADS", "1")
    assert read_all() == ahead
    one_by_one = [windows.read_window(index, w) for w in plan]
    assert ahead == [(w.number, len(r.calls), len(r.accesses), int(r.calls["call_id"].sum()))
                     for w, r in zip(plan, one_by_one)]
