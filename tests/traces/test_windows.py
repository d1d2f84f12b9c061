"""The race analysis in graph windows (analysis/windows.py): the same findings as the analysis of
the whole trace, on real GPU traces and on a synthetic trace with a race in every graph, locally
and on a local Dask cluster; the command picks it for large files and says so."""
import json
import sys
from pathlib import Path

import pytest
from conftest import ggml_trace

from ggml_trace.analysis import TraceFormatError, load, races, summarize
from ggml_trace.analysis.windows import index_trace, iter_windows, plan_windows, races_in_windows, races_on_dask

DATA = Path(__file__).parent / "data"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """~200k events, 312 graphs, the #23321 pattern (one race) in every graph."""
    from bench_races import build_trace

    path = tmp_path_factory.mktemp("syn") / "syn.ggmltrace"
    events, graphs = build_trace(str(path), 200_000, 40, True)
    return path, graphs


@pytest.mark.parametrize("name", ["cuda-b10531-tp-2gpu-cupti-delay-gpu1", "vulkan-nvidia-b10524-h200",
                                  "cuda-b10531-tp-2gpu-delay-gpu0", "cuda-b11434-partial-nkvo-1gpu-timed"])
@pytest.mark.parametrize("records", [1, 5000])
def test_windows_find_what_the_whole_trace_shows(name, records):
    """One graph a window (records=1), and a few graphs a window."""
    path = DATA / f"{name}.ggmltrace"
    whole = races(load(path))
    windowed, info = races_in_windows(path, records=records)
    assert info["windows"] > 1 and info["graphs"] == 17
    assert windowed.findings.equals(whole.findings)


@pytest.mark.parametrize("records,context", [(1, 3), (5000, 2)])
def test_a_manifested_finding_shows_a_manifested_pair(records, context):
    """Pipeline parallelism on Vulkan (H200): each race's first occurrence (graphs 1-2) was latent
    and later ones manifested. A finding shows a manifested pair, without a margin, and its
    first graph and time stay the first occurrence's; the windows (one graph each, and a few)
    agree: with 3 graphs of context they see every occurrence."""
    path = DATA / "vulkan-nvidia-b11434-pp-h200.ggmltrace"
    whole = races(load(path))
    p = whole.pairs
    first_b = p["b_call_id"] == p["b_call_id"].min()
    assert len(p) == 12 and not p.loc[first_b, "manifested"].any()  # the first occurrences: latent
    manifested = {tuple(x) for x in p.loc[p["manifested"], ["a_call_id", "b_call_id"]].to_numpy().tolist()}
    found = whole.to_json()["races"]
    assert len(found) == 2
    for r in found:
        assert r["manifested"] and r["margin_us"] is None and r["count"] == 6
        assert (r["a"]["call_id"], r["b"]["call_id"]) in manifested
        assert r["a"]["t_end_us"] > r["b"]["t_begin_us"]  # a had not ended when b began
        assert r["b"]["graph"] == 3 and r["first"]["graph"] == 2 and r["last"]["graph"] == 4
        assert r["first"]["t_us"] < min(r["a"]["t_begin_us"], r["b"]["t_begin_us"])
    assert (whole.latent_margin_ns > 0).all()  # the latent occurrences' margins are kept
    windowed, info = races_in_windows(path, records=records, context=context)
    assert info["windows"] > 1
    assert windowed.findings.equals(whole.findings)


def test_a_synthetic_race_in_every_graph(synthetic):
    path, graphs = synthetic
    index = index_trace(path)
    plan = plan_windows(index, records=20_000)
    assert len(plan) > 10 and plan[0].first_graph == 0 and plan[-1].end_graph == graphs
    report, info = races_in_windows(path, records=20_000)
    assert report.findings["count"].tolist() == [graphs]
    assert info["largest_window_records"] < 40_000  # one window's records (and its context), not the file's
    assert report.findings.equals(races(load(path)).findings)


def test_iter_windows_covers_every_call_once(synthetic):
    path, graphs = synthetic
    seen = [t.calls["call_id"] for _, t in iter_windows(path, records=30_000)]
    assert len(seen) > 5
    ids = [i for s in seen for i in s.tolist()]
    assert len(ids) == len(set(ids)) and set(ids) == set(load(path).calls["call_id"].tolist())


def test_dask_local_cluster_gives_the_same_findings(synthetic):
    path, _ = synthetic
    local, _ = races_in_windows(path, records=50_000)
    on_dask, info = races_on_dask(path, records=50_000)
    assert info["windows"] >= 4
    assert on_dask.findings.equals(local.findings)


def test_the_command_in_windows_and_on_dask(synthetic):
    path, graphs = synthetic
    whole = ggml_trace("races", path, "--json", "--no-windows")
    for extra in (["--windows", "--window-records", "20000"], ["--dask", "--window-records", "50000"]):
        r = ggml_trace("races", path, "--json", *extra)
        assert r.returncode == whole.returncode == 1, r.stderr
        assert "windows over 312 graphs" in r.stderr
        got, want = json.loads(r.stdout)["races"], json.loads(whole.stdout)["races"]
        assert got == want and got[0]["count"] == graphs


def test_windows_refuse_a_ring_and_read_damage_as_the_whole_does(tmp_path):
    ring = tmp_path / "ring.ggmltrace"
    src = (DATA / "cuda-b10531-layer-2gpu-timed.ggmltrace").read_bytes()
    data = bytearray(src)
    data[128] = 1  # FILE_RING
    ring.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match="flight recorder's file is bounded"):
        index_trace(ring)
    bad = tmp_path / "bad.ggmltrace"
    data = bytearray(src)
    data[4096 + 64] = 200  # an unknown record type
    bad.write_bytes(bytes(data))
    r = ggml_trace("races", bad, "--windows")
    assert r.returncode == 2 and "unknown type byte" in r.stderr, r.stderr
    r = ggml_trace("races", bad, "--windows", "--lenient")  # loads the rest, and says it rests on damage
    assert r.returncode == 2 and "dropped" in r.stderr and "rests on a damaged file" in r.stderr, r.stderr


@pytest.mark.parametrize("cut_at", [0.5, 0.75])
def test_a_cut_file_in_windows_keeps_what_the_whole_read_keeps(synthetic, tmp_path, cut_at):
    """A file cut inside a chunk (copied while written, a full disk): the windows read its last,
    partial chunk as the whole-file reader does, every whole record in it."""
    from ggml_trace.analysis.trace_format import CHUNK_SIZE, HEADER_SIZE

    path, _ = synthetic
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


def test_partitioned_parquet_export_reads_back_as_the_whole_trace(tmp_path):
    """`export --format parquet --windows`: partitions of whole graphs that Dask and pyarrow read
    as datasets, the same rows as the trace's frames."""
    import dask.dataframe as dd
    import pandas as pd
    import pyarrow.dataset as pads

    path = DATA / "cuda-b10531-tp-2gpu-cupti-delay-gpu1.ggmltrace"
    out = tmp_path / "pq"
    r = ggml_trace("export", path, "--format", "parquet", "--windows", "-o", out)
    assert r.returncode == 0 and "partitions of whole graphs" in r.stderr, r.stderr
    assert len(list((out / "calls").glob("graphs=*/part.parquet"))) >= 1
    t = load(path)
    calls = dd.read_parquet(out / "calls").compute()
    assert sorted(calls["call_id"].tolist()) == sorted(t.calls["call_id"].tolist())
    for name in ("accesses", "gpu", "device", "splits"):
        whole = getattr(t, name)
        part = pads.dataset(out / name, format="parquet", partitioning="hive").to_table().to_pandas()
        plain = whole.astype({c: "string" for c in whole.columns if isinstance(whole[c].dtype, pd.CategoricalDtype)})
        key = ["call_id", "t_begin"]
        a = plain.sort_values(key).reset_index(drop=True).astype(str)
        b = part[whole.columns].sort_values(key).reset_index(drop=True).astype(str)
        assert a.equals(b), name
    assert pd.read_parquet(out / "buffers.parquet").shape[0] == len(t.buffers)
    # DuckDB reads the partitions as one table, the partition key as a column
    import duckdb

    sql = duckdb.sql(f"""SELECT graphs, kind, count(*) AS n FROM read_parquet('{out}/calls/*/*.parquet',
                         hive_partitioning = true) GROUP BY graphs, kind""").df()
    assert sql["graphs"].str.fullmatch(r"\d+-\d+").all()
    by_kind = sql.groupby("kind")["n"].sum().sort_index()
    assert by_kind.to_dict() == t.calls["kind"].astype(str).value_counts().sort_index().to_dict()


@pytest.mark.parametrize("name", ["cuda-b10531-tp-2gpu-nccl-cupti", "vulkan-nvidia-b10524-h200",
                                  "cuda-b11434-partial-nkvo-1gpu-timed"])
def test_summary_in_windows_adds_up_to_the_whole(name):
    from ggml_trace.analysis.windows import summarize_in_windows

    path = DATA / f"{name}.ggmltrace"
    whole = summarize(load(path))
    counted, info = summarize_in_windows(path, records=3000)
    assert info["windows"] > 2
    assert counted == whole
    r = ggml_trace("summary", path, "--windows", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["backends"] == whole["backends"], r.stderr


def test_graphs_option_reads_only_those_graphs(tmp_path):
    path = DATA / "cuda-b10531-tp-2gpu-cupti-delay-gpu1.ggmltrace"
    r = ggml_trace("summary", path, "--graphs", "3:5", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["graphs"] == 3, r.stderr
    assert "graphs 3:5 only (3 of 17), read in bounded memory" in r.stdout
    r = ggml_trace("races", path, "--graphs", "4", "--json")
    found = json.loads(r.stdout)["races"]
    assert r.returncode == 1 and found[0]["first"]["graph"] == found[0]["last"]["graph"] == 4
    r = ggml_trace("report", path, "--graphs", "40:50", "-o", tmp_path / "r.html")
    assert r.returncode == 2 and "no graph in 40:50 in this trace (it has graphs 0 to 16)" in r.stderr
    r = ggml_trace("summary", path, "--graphs", "5:3")
    assert r.returncode == 2 and "is not a range of graphs" in r.stderr


def test_a_trace_too_large_to_load_is_windowed_or_refused_with_advice(tmp_path):
    """GGML_TRACE_WINDOWS_ABOVE makes these small traces count as too large for this machine."""
    import os

    path = DATA / "vulkan-nvidia-b10524-h200.ggmltrace"
    env = dict(os.environ, GGML_TRACE_WINDOWS_ABOVE="1000")
    r = ggml_trace("timeline", path, "-o", tmp_path / "t.html", env=env)
    assert r.returncode == 2 and "too large to load whole here: pick graphs with --graphs" in r.stderr
    assert not (tmp_path / "t.html").exists()
    r = ggml_trace("timeline", path, "--graphs", "2:3", "-o", tmp_path / "t.html", env=env)
    assert r.returncode == 0 and (tmp_path / "t.html").exists(), r.stderr
    r = ggml_trace("summary", path, "--json", env=env)
    assert "counting it in graph windows" in r.stderr
    assert json.loads(r.stdout)["backends"] == summarize(load(path))["backends"]
    r = ggml_trace("races", path, "--json", env=env)
    assert "analysing it in graph windows" in r.stderr and r.returncode == 1
    assert json.loads(r.stdout)["races"] == races(load(path)).to_json()["races"]
    r = ggml_trace("races", path, "--no-windows", env=env)  # whole, as asked
    assert r.returncode == 1 and "graph windows" not in r.stderr


def test_the_commands_window_is_the_analysis_default(capsys):
    from ggml_trace.analysis.windows import WINDOW_RECORDS
    from ggml_trace.tracer.cli import main as cli

    with pytest.raises(SystemExit):
        cli(["races", "--help"])
    assert f"(default: {WINDOW_RECORDS})" in " ".join(capsys.readouterr().out.split())


def test_reading_ahead_gives_the_windows_in_order_whatever_the_threads(synthetic, monkeypatch):
    """The next window is read in a thread of its own (analysis/windows.py, read_ahead); with one
    thread it is read in turn. The windows and what they hold must not depend on it."""
    from ggml_trace.analysis import windows

    path, _ = synthetic
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
