"""`ggml-trace sweep --backend rpc`: a ggml-rpc-server on loopback beside virtual devices, each way
round, on b10531 (a synchronous RPC client) and b11434 (an asynchronous one, one sender a server):
the program's own input-on-receiver race found on the virtual device that receives, none where
RPC0 receives (its buffer writes queue behind its graphs), and device-side delays on RPC0 that are
sized through the server (docs/sweep.md, docs/races.md rule 9, docs/delay.md)."""
import json

import pytest

from ggml_trace import analysis
from ggml_trace.tracer import programs
from support import ggml_trace

BUILDS = ["b10531", "b11434"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep-rpc")
    r = ggml_trace("sweep", "--backend", "rpc", "--quick", *[a for b in BUILDS for a in ("--build", b)],
                   "--pattern", "input-on-receiver", "--pattern", "chain", "-o", out, timeout=900)
    return r, json.loads((out / "sweep.json").read_text())


def test_rpc_sets_each_way_round_without_a_pinned_buffer_on_rpc(swept):
    r, d = swept
    assert r.returncode == 1, r.stderr[-3000:]
    assert all(c["verdict"] != "ERROR" for c in d["cells"]), [c["error"] for c in d["cells"] if c["error"]]
    assert {c["device_set"] for c in d["cells"]} == {"RPC0+VDEV", "VDEV+RPC0"}
    assert {c["build"] for c in d["cells"]} == set(BUILDS)
    # pinned is the first device's host buffer type, and RPC has none
    assert not [c for c in d["cells"] if c["devices"][0] == "RPC0" and c["buffer"] == "pinned"]
    assert all(c["runs"] == 2 for c in d["cells"])


def test_the_receivers_race_is_found_on_the_virtual_device_and_not_on_rpc(swept):
    _, d = swept
    by = {(c["pattern"], c["device_set"], c["build"], c["buffer"], c["parallel"]): c for c in d["cells"]}
    for build in BUILDS:
        # the program writes u (ggml_backend_tensor_set) while the previous graph's split may still read it
        vdev = by[("input-on-receiver", "RPC0+VDEV", build, "pageable", 1)]
        assert vdev["verdict"] in ("RED", "RACE"), vdev
        assert any(r["backends"] == ["VDEV0", "VDEV0"] and r["tensors"] == ["u", "u"] for r in vdev["races"]), vdev
    # where RPC0 receives, the write goes through the same sender as the graph before it and the
    # server runs them in order: no race (before rule 9, b11434's four cells were RACE)
    rpc = [c for c in d["cells"] if c["pattern"] == "input-on-receiver" and c["device_set"] == "VDEV+RPC0"]
    assert len(rpc) == 8 and all(c["verdict"] == "GREEN" and not c["races"] for c in rpc), rpc
    assert all(c["verdict"] == "GREEN" for c in d["cells"] if c["pattern"] == "chain")


def test_a_delay_on_rpc_is_work_on_the_server_sized_through_it_and_not_traced(tmp_path):
    exe = programs.program("b11434", "ggml-trace-scenarios")
    traces = {}
    with programs.rpc_server("b11434") as endpoint:
        for name, delay in (("plain", []), ("delayed", ["--delay", "RPC0:graph_compute:5000"])):
            traces[name] = out = tmp_path / f"{name}.ggmltrace"
            r = ggml_trace("record", "--build", "b11434", "--virtual-devices", "1", *delay, "-o", out, "--", exe,
                           "chain", "--device", "VDEV0", "--device", "RPC0", "--rpc", endpoint, "--seed", "1",
                           "--buffer", "pageable", "--parallel", "0", timeout=300)
            assert r.returncode == 0, r.stderr[-3000:]
    t = analysis.load(traces["delayed"])
    assert len(t.delays) >= 1 and set(t.delays["where"].astype(str)) == {"work"}
    (sized,) = [v for k, v in t.meta.items() if k.startswith("delay.work.")]
    # a product timed only until RPC's synchronize returned (the graph sent) came out at 0.4 us on
    # 2048 x 2048; read back, the first size that takes 50 us on the server's CPU is taken
    n, us = sized.split("products of ")[1].split("x")[0], float(sized.split(": ")[1].split(" us each")[0])
    assert int(n) < 2048 and us >= 50, sized
    # the products' buffer, its weights and the read-backs that sized them are the hooks' own calls,
    # not the program's: the delayed trace holds the same buffer calls as the plain one

    def buffer_calls(trace):
        c = analysis.load(trace).calls
        c = c[c["kind"].astype(str).str.startswith("buf_")]
        return c.groupby([c["kind"].astype(str), c["backend"].astype(str).str[:4]]).size().to_dict()

    assert buffer_calls(traces["delayed"]) == buffer_calls(traces["plain"])
