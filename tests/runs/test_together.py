"""Traces read together (analysis/together.py): a real llama-completion client and the two
ggml-rpc-server processes it offloads to, each traced into its own file."""
import json
import subprocess

import numpy as np
import pytest

from ggml_trace.analysis import load, summarize
from ggml_trace.analysis.trace_file import read_trace_file
from ggml_trace.analysis.together import load_together, read_together, rpc_links
from support import completion_cmd, ggml_trace
from ggml_trace.tracer import programs
from ggml_trace.tracer.record import record

BUILD = "b10531"
SYNC_INTERVAL_NS = 50_000_000  # native_hooks/trace_writer.cpp: a clock point at most this often


@pytest.fixture(scope="module")
def run(tmp_path_factory, model):
    out = tmp_path_factory.mktemp("together")
    servers = [out / "server-a.ggmltrace", out / "server-b.ggmltrace"]
    with programs.rpc_server(BUILD, trace=servers[0]) as a, programs.rpc_server(BUILD, trace=servers[1]) as b:
        rec = record(completion_cmd(BUILD, model, "--rpc", f"{a},{b}", "-ngl", "99"), programs.hooks(BUILD),
                     out / "client.ggmltrace", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert rec.returncode == 0
    return {"client": out / "client.ggmltrace", "servers": servers, "endpoints": [a, b]}


def paths(run):
    return [run["client"], *run["servers"]]


def test_names_stay_unique_and_say_their_process(run):
    t = load_together(paths(run))
    procs = t.processes
    assert procs["program"].tolist() == ["llama-completion", "ggml-rpc-server", "ggml-rpc-server"]
    assert procs["label"].is_unique and t.clock == "monotonic clock"
    assert set(t.calls["process"].unique()) == set(procs["label"])
    # every process has a CPU backend: each is qualified; the client's RPC backends are unique already
    cpu = sorted(n for n in t.backends["name"].unique() if n.startswith("CPU"))
    assert cpu == sorted(f"CPU @ {label}" for label in procs["label"])
    rpc = sorted(n for n in t.backends["name"].unique() if n.startswith("RPC"))
    assert rpc == sorted(f"RPC0[{e}]" for e in run["endpoints"])
    # per-process ids stay apart: each process alone numbers its calls from the same ids
    alone = [load(p) for p in paths(run)]
    assert sum(len(a.calls) for a in alone) == len(t.calls) and t.calls["call_id"].is_unique
    assert not set(alone[1].calls["call_id"]).isdisjoint(alone[2].calls["call_id"])
    # the two servers' host threads carry the same name: qualified too
    assert t.threads["name"].is_unique


def test_each_rpc_backend_is_linked_to_the_server_that_served_it(run):
    t = load_together(paths(run))
    links = rpc_links(t)
    labels = t.processes["label"].tolist()
    assert links.sort_values("endpoint")["endpoint"].tolist() == sorted(run["endpoints"])
    by_endpoint = dict(zip(links["endpoint"], links["server"]))
    assert [by_endpoint[e] for e in run["endpoints"]] == labels[1:]
    # what the client sent each server is what that server received
    s = {b["name"]: b for b in summarize(t)["backends"]}
    for endpoint, server in by_endpoint.items():
        assert s[f"RPC0[{endpoint}]"]["bytes_in"] == s[f"CPU @ {server}"]["bytes_in"] > 0


def test_times_share_one_axis(run):
    """A server computes a graph after the client sent it: on the common axis, the k-th compute of
    each server begins after the client's k-th graph_compute on that server's RPC backend began, and
    before its (k+1)-th (the client sends a token's graph only once it has the previous token's
    result). Each trace alone counts from its own start: the servers started first."""
    t = load_together(paths(run))
    assert (t.processes["offset_ns"] > 0).sum() == 2
    c = t.calls[t.calls["kind"] == "graph_compute"]
    for _, link in rpc_links(t).iterrows():
        sent = c.loc[(c["process"] == link["client"]) & (c["backend"] == link["backend"]), "t_begin"].to_numpy()
        ran = c.loc[c["process"] == link["server"], "t_begin"].to_numpy()
        assert len(sent) == len(ran) > 0
        assert (ran > sent).all(), ran - sent
        assert (ran[:-1] < sent[1:]).all(), (ran, sent)


def test_a_server_without_a_scheduler_is_calibrated_to_its_last_call(run):
    """Times line up across traces only as well as each trace's ticks are calibrated. A server has
    no scheduler and is killed, not closed: its clock points come from its calls' ends (at most
    ~50 ms apart), not from the start alone, where a 2 ms calibration extrapolated over the run
    put its times tens of µs off the client's. The bound is the writer's rule, not a measurement: it
    takes a clock point at a call's end once SYNC_INTERVAL_NS have passed since its last, so the last
    point lies within that interval (and the clocks' conversion) of the last call's end."""
    for path in paths(run):
        raw = read_trace_file(path)
        points = raw.clocks["monotonic_ns"].astype(np.int64) - int(raw.header["t0_monotonic_ns"])
        last_call = int(load(path).calls["t_end"].max())
        assert len(points) and points.max() >= last_call - SYNC_INTERVAL_NS - 10_000_000, (path.name, points, last_call)


def test_several_hosts_and_the_same_process_twice(run):
    a, b = load(run["client"]), load(run["servers"][0])
    b.meta["hostname"] = "other-host"
    t = read_together([a, b])
    assert t.clock == "wall clock" and any("wall clock" in w for w in t.warnings)
    assert all("@" in label for label in t.processes["label"])
    # a trace cut before its metadata names no host: taken as the others', not as another host
    a, b = load(run["client"]), load(run["servers"][0])
    del b.meta["hostname"]
    assert read_together([a, b]).clock == "monotonic clock"
    twice = read_together([load(run["client"]), load(run["client"])])
    assert twice.processes["label"].is_unique and len(twice.calls) == 2 * len(a.calls)
    assert twice.calls["call_id"].is_unique


def test_the_commands_read_several_traces(run, tmp_path):
    r = ggml_trace("summary", *paths(run))
    assert r.returncode == 0, r.stderr
    assert "3 traces read together" in r.stdout and r.stdout.count("is served by ggml-rpc-server:") == 2
    j = json.loads(ggml_trace("summary", "--json", *paths(run)).stdout)
    assert [p["program"] for p in j["processes"]] == ["llama-completion", "ggml-rpc-server", "ggml-rpc-server"]
    assert all(link["server"] for link in j["rpc"])
    html = tmp_path / "t.html"
    r = ggml_trace("timeline", *paths(run), "-o", html)
    assert r.returncode == 0, r.stderr
    meta = _figure_meta(html)
    headings = [r for r in meta["rows"] if r.startswith("Process ")]
    assert headings == [f"Process {p}" for p in load_together(paths(run)).processes["label"]]
    out = tmp_path / "p.json"
    r = ggml_trace("export", *paths(run), "-o", out)
    assert r.returncode == 0, r.stderr
    names = {e["args"]["name"] for e in json.loads(out.read_text())["traceEvents"] if e.get("name") == "thread_name"}
    assert any("@ ggml-rpc-server:" in n for n in names)


def _figure_meta(html):
    """The timeline's own metadata (the figure's layout.meta) from a written page."""
    text = html.read_text()
    start = text.index('"ggml_trace":') + len('"ggml_trace":')
    return json.JSONDecoder().raw_decode(text[start:])[0]
