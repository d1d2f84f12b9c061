"""Traces captured on real H200 GPUs (CUDA builds of b10531 and b11434, see docs/gpu.md), analysed here on a
machine without a GPU."""
import pytest

from ggml_trace import analysis
from support import DATA, apart_from_warmup_clear, check_dtypes, warmup_clear


@pytest.mark.parametrize("name", ["cuda-b10531-layer-2gpu", "cuda-b10531-big-layer-2gpu"])
def test_two_gpu_layer_split_uses_events_and_has_no_races_but_the_warmup_clear(name):
    t = analysis.load(DATA / f"{name}.ggmltrace")
    assert t.meta["hooks_build"] == "b10531-cuda"
    be = t.backends.drop_duplicates("name").set_index("name")
    assert {"CUDA0", "CUDA1", "CPU"} <= set(be.index)
    assert be.loc["CUDA0", "has_events"] and be.loc["CUDA1", "has_async"]
    assert be.loc["CUDA0", "device_description"] == "NVIDIA H200"
    s = {b["name"]: b for b in analysis.summarize(t)["backends"]}
    # the scheduler's parallel mode: an event recorded after every split, waited on before copies
    for gpu in ("CUDA0", "CUDA1"):
        assert s[gpu]["splits"] == s[gpu]["event_records"] == s[gpu]["event_waits"] == analysis.summarize(t)["graphs"]
    copies = t.copies
    assert ((copies.src_backend == "CUDA0") & (copies.dst_backend == "CUDA1")).any()
    assert copies[(copies.src_backend == "CUDA0") & (copies.dst_backend == "CUDA1")]["async"].all()
    assert apart_from_warmup_clear(analysis.races(t).to_json()["races"]) == []


def test_one_gpu_partial_offload_without_events():
    t = analysis.load(DATA / "cuda-b10531-nkvo-1gpu.ggmltrace")
    s = {b["name"]: b for b in analysis.summarize(t)["backends"]}
    assert s["CUDA0"]["splits"] == s["CPU"]["splits"] == 2 * analysis.summarize(t)["graphs"]
    assert s["CUDA0"]["event_records"] == 0 and s["CUDA0"]["syncs"] > 0  # no events: synchronize
    assert analysis.races(t).to_json()["races"] == []


def test_two_gpu_timeline_renders_with_event_arrows():
    t = analysis.load(DATA / "cuda-b10531-layer-2gpu.ggmltrace")
    fig = analysis.timeline(t)
    rows = " ".join(fig.layout.yaxis.ticktext)
    assert "CUDA0" in rows and "CUDA1" in rows
    (events,) = [tr for tr in fig.data if tr.meta == "arrows:1"]  # event record -> wait arrows
    assert len(events.x) // 3 >= analysis.summarize(t)["graphs"]  # at least one per graph


# -- device timing, CUPTI and NVML (recorded with record --device-timing --cupti) ------------------

TIMED = ["cuda-b10531-layer-2gpu-timed", "cuda-b10531-simple-1gpu-timed", "cuda-b11434-layer-2gpu-timed"]


@pytest.mark.parametrize("name", TIMED)
def test_cupti_activity_is_tied_to_the_calls_that_launched_it(name):
    t = analysis.load(DATA / f"{name}.ggmltrace")
    check_dtypes(t)  # the documented schemas, with every GPU frame filled
    assert t.meta["cupti"] == "on" and t.meta["cupti.clock"] == "monotonic"
    g = t.gpu
    assert (g["kind"] == "kernel").sum() > 500 and (g["kind"] == "memcpy").any()
    assert g["call_id"].notna().mean() > 0.95
    # kernels inside the splits (graph_compute), copies inside the copy calls
    k = g[(g["kind"] == "kernel") & g["call_id"].notna()]
    assert (k["call_kind"] == "graph_compute").mean() > 0.9
    assert k["name"].notna().all() and k["name"].astype(str).str.contains("mul_mat|rms_norm|rope").any()
    # every kernel ran on the GPU of the backend that launched it (CUDA<n> is device n)
    assert (k["backend"].astype(str) == "CUDA" + k["device"].astype(str)).all()
    assert (g["t_end"] >= g["t_begin"]).all() and g["t_begin"].min() > 0
    # ... after the call that launched it began (CUPTI's clock is the trace's), and it ended no
    # later than the event watcher saw that call's work end (the end event is recorded after the
    # work on the same stream)
    calls = t.calls.set_index("call_id")
    assert (k["t_begin"].to_numpy() >= calls.loc[k["call_id"].astype("uint64").to_numpy(), "t_begin"].to_numpy()).all()
    d = t.device
    cu = d[d["source"] == "cupti"].set_index("call_id")
    ev = d[d["source"] == "events"].set_index("call_id")
    both = cu.merge(ev[["t_end"]], left_index=True, right_index=True, suffixes=("", "_ev"))
    assert len(both) >= 30
    assert (both["t_end_ev"] >= both["t_end"]).all()


@pytest.mark.parametrize("name", TIMED)
def test_event_watcher_agrees_with_cupti(name):
    from ggml_trace.analysis.device_timing import accuracy, compare_sources

    diff = compare_sources(analysis.load(DATA / f"{name}.ggmltrace"))
    a = accuracy(diff)
    assert a["operations"] >= 60
    # the watcher never puts an end before CUPTI's (how close it comes: bench/bench_device_timing.py)
    assert (diff["d_end"] >= 0).all()
    assert set(diff["kind"].astype(str)) >= {"graph_compute", "get_tensor_async"}


def test_nvml_samples_and_metadata_of_two_gpus():
    t = analysis.load(DATA / "cuda-b10531-layer-2gpu-timed.ggmltrace")
    assert t.meta["nvml.status"] == "ok"
    gpus = t.nvml["gpus"]
    assert [x["name"] for x in gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert len({x["uuid"] for x in gpus}) == 2 and t.nvml["links"]
    s = t.gpu_samples
    assert set(s["device"]) == {0, 1}
    assert {"sm_clock_mhz", "power_w", "temperature_c", "gpu_util_pct"} <= set(s["metric"].astype(str))
    # while the program ran: none before the trace began (readings before it are not appended),
    # from before the first traced call to after the last one
    assert 0 <= s["t"].min() <= t.calls["t_begin"].min()
    assert s["t"].max() > t.calls["t_end"].max()
    sm = s[(s["metric"] == "sm_clock_mhz")]["value"]
    assert sm.between(100, 3000).all()


def test_timed_two_gpu_timeline_shows_kernels_and_counters():
    t = analysis.load(DATA / "cuda-b10531-layer-2gpu-timed.ggmltrace")
    fig = analysis.timeline(t, graphs=(3, 4))
    rows = fig.layout.meta["ggml_trace"]["rows"]
    assert {"CUDA0 kernels (CUPTI)", "CUDA1 kernels (CUPTI)", "CUDA0 execution"} <= set(rows)
    assert "GPU0 sm_clock_mhz" in rows and "GPU1 power_w" in rows
    assert apart_from_warmup_clear(analysis.races(t).to_json()["races"]) == []


@pytest.mark.parametrize("name", TIMED + ["cuda-b11434-partial-nkvo-1gpu-timed"])
def test_timed_runs_have_no_races_but_the_warmup_clear(name):
    t = analysis.load(DATA / f"{name}.ggmltrace")
    assert set(t.device["source"]) == {"events", "cupti"}
    assert apart_from_warmup_clear(analysis.races(t).to_json()["races"]) == []


@pytest.mark.parametrize("name,verdict,basis", [("cuda-b10531-layer-2gpu-timed", "latent", "device"),
                                                ("cuda-b11434-layer-2gpu-timed", "latent", "device"),
                                                ("cuda-b10531-layer-2gpu", "undetermined", "host")])
def test_the_warmup_clear_of_the_kv_cache_races_with_the_warmup_decode_on_cuda(name, verdict, basis):
    """llama.cpp clears the KV cache right after its warm-up decode and synchronizes after the clear.
    CUDA's clear is a memset on cudaStreamPerThread and a synchronize of that stream alone, which
    nothing orders after the backend's own (non-blocking) stream: the decode's accesses to the cache
    race with it (docs/races.md, rule 6). In these runs the decode had ended before the clear
    (latent), and without device timing nothing says when it ended (undetermined)."""
    t = analysis.load(DATA / f"{name}.ggmltrace")
    found = analysis.races(t).findings
    clear = found[warmup_clear(found).to_numpy()]
    assert len(clear) == len(found) > 0
    assert set(clear["verdict"].astype(str)) == {verdict} and set(clear["basis"].astype(str)) == {basis}
    # the clears of the cache's buffers, one per GPU that holds layers, in a row, then the synchronize
    calls = t.calls.sort_values("t_begin").reset_index(drop=True)
    at = sorted({int(calls.index[calls["call_id"] == c][0]) for c in clear["b_call_id"]})
    assert at == list(range(at[0], at[0] + 2)) and calls.loc[at[-1] + 1, "kind"] == "sched_synchronize"
    assert (calls.loc[at, "kind"] == "buf_clear").all()
    # each GPU's decode races with the clear of its own buffer
    assert (clear["a_backend"].astype(str) == clear["b_backend"].astype(str)).all()
    assert set(clear["a_backend"].astype(str)) == {"CUDA0", "CUDA1"}
    assert clear["missing"].str.endswith("between them would order them").all()


def test_the_watcher_flags_the_ends_it_saw_late():
    # -ngl 2 -nkvo: the CPU splits keep every core busy with the CPU backend's threads, and the
    # watcher often gets to an end event only after it passed. It says so (end_late), and then
    # its end is an upper bound; the ends it saw pass agree with CUPTI.
    from ggml_trace.analysis.device_timing import accuracy, compare_sources

    diff = compare_sources(analysis.load(DATA / "cuda-b11434-partial-nkvo-1gpu-timed.ggmltrace"))
    late = diff[diff["end_late"]]
    on_time = diff[~diff["end_late"]]
    assert len(late) >= 10 and len(on_time) >= 5
    assert (late["d_end"] >= -5_000).all()  # never before CUPTI's end (give or take 5 us)
    assert accuracy(late)["end_median_us"] > accuracy(on_time)["end_median_us"]  # by how much: bench/bench_device_timing.py


def test_report_names_the_gpus_and_the_recording_flags(tmp_path):
    t = analysis.load(DATA / "cuda-b10531-layer-2gpu-timed.ggmltrace")
    out = tmp_path / "r.html"
    analysis.write_report(t, out)
    html = out.read_text()
    for g in t.nvml["gpus"]:
        assert g["uuid"] in html and g["pci_bus_id"] in html
    # recorded before CUPTI had modes, every kernel: --cupti kernels reproduces it
    assert "NVIDIA H200" in html and "ggml-trace record --device-timing --cupti kernels -o" in html
    assert '"gpus"' not in html  # the metadata as tables, not its raw JSON


@pytest.mark.parametrize("name", ["cuda-b10531-nkvo-1gpu", "cuda-b10531-layer-2gpu", "vulkan-nvidia-b10531-h200"])
def test_a_copy_is_declined_exactly_when_the_backend_queued_nothing(name):
    """cpy_tensor_async returns false for a copy the backend cannot queue (CPU memory into CUDA, say);
    the hooks flag it declined and record no byte ranges for it (ggml copies it synchronously)."""
    t = analysis.load(DATA / f"{name}.ggmltrace")
    c = t.calls[t.calls["kind"] == "cpy_tensor_async"]
    queued = c["call_id"].isin(t.accesses["call_id"])
    assert c["declined"].any() and (c["declined"] == ~queued).all()
    assert not t.calls.loc[~t.calls["kind"].isin(["cpy_tensor_async", "comm_allreduce"]), "declined"].any()


def test_cupti_graph_mode_records_each_cuda_graph_once_and_ties_it_to_its_split():
    """The same llama-completion run on an H200 traced in both CUPTI modes (bench/gpu/cupti_modes.sh):
    graphs (the default) records each CUDA graph's execution as one activity, kernels every kernel
    inside it too; in both every activity is tied to its traced call and every CUDA split gets a
    CUPTI device interval."""
    graphs = analysis.load(DATA / "cuda-b10531-simple-1gpu-cupti-graphs.ggmltrace")
    kernels = analysis.load(DATA / "cuda-b10531-simple-1gpu-cupti-kernels.ggmltrace")
    check_dtypes(graphs)
    assert graphs.meta["cupti.mode"] == "graphs" and kernels.meta["cupti.mode"] == "kernels"
    gg, gk = graphs.gpu, kernels.gpu
    runs = gg[gg["kind"] == "graph"]
    assert len(runs) >= 10 and (runs["name"].astype(str) == "CUDA graph").all()
    assert (runs["call_kind"] == "graph_compute").all() and (runs["backend"].astype(str) == "CUDA0").all()
    assert (runs["t_end"] > runs["t_begin"]).all()
    assert (gk["kind"] == "graph").sum() == 0
    # the kernels a graph ran are not listed one by one: far fewer kernel records for the same run
    assert (gk["kind"] == "kernel").sum() > 3 * (gg["kind"] == "kernel").sum()
    for t in (graphs, kernels):
        assert t.gpu["call_id"].notna().all()
        cuda = t.splits[t.splits["backend"].astype(str) == "CUDA0"]
        timed = t.device[(t.device["source"] == "cupti") & (t.device["kind"] == "graph_compute")]
        assert len(cuda) > 10 and cuda["call_id"].isin(timed["call_id"]).all()
    # CUPTI's clock is the trace's: a graph runs after the host call that launched it began
    calls = graphs.calls.set_index("call_id")
    launched = calls.loc[runs["call_id"].astype("uint64").to_numpy(), "t_begin"].to_numpy()
    assert (runs["t_begin"].to_numpy() >= launched).all()


def test_the_report_reproduces_the_cupti_mode(tmp_path):
    import html
    import re
    import shlex

    for mode, want in (("graphs", ["--cupti"]), ("kernels", ["--cupti", "kernels"])):
        page = tmp_path / f"{mode}.html"
        t = analysis.load(DATA / f"cuda-b10531-simple-1gpu-cupti-{mode}.ggmltrace")
        analysis.write_report(t, page)
        cmd = shlex.split(html.unescape(re.search(r"Recorded with:</p><pre>(.*?)</pre>", page.read_text(), re.S)[1]))
        at = cmd.index("--cupti")
        assert cmd[at:at + len(want)] == want and (mode == "kernels" or cmd[at + 1] != "kernels"), cmd
