"""The race analysis in graph windows (analysis/windows.py): the same findings as the analysis of
the whole trace, on real GPU traces and on a synthetic trace with a race in every graph, locally
and on a local Dask cluster; the command picks it for large files and says so. On the synthetic
trace alone: tests/unit/test_windows_synthetic.py; a Dask cluster in this process:
tests/runs/test_windows_dask.py."""
import json

import pytest
from support import DATA, apart_from_warmup_clear, ggml_trace

from ggml_trace.analysis import TraceFormatError, load, races, summarize
from ggml_trace.analysis.windows import index_trace, races_in_windows


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
    t = load(path)
    whole = races(t)
    p = whole.pairs  # but those of llama.cpp's clear of the KV cache after its warm-up, which races too
    p = p[~p["b_call_id"].isin(t.calls.loc[t.calls["kind"] == "buf_clear", "call_id"])]
    first_b = p["b_call_id"] == p["b_call_id"].min()
    assert len(p) == 12 and not p.loc[first_b, "manifested"].any()  # the first occurrences: latent
    manifested = {tuple(x) for x in p.loc[p["manifested"], ["a_call_id", "b_call_id"]].to_numpy().tolist()}
    found = apart_from_warmup_clear(whole.to_json()["races"])
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


def test_the_command_in_windows_and_on_dask(windows_trace):
    path, graphs = windows_trace
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
