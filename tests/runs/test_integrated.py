"""Integrated GPUs (docs/integrated.md): a device that reads graph inputs in place from host memory,
and the program's own stores into them (llama.cpp #28056). On an integrated virtual device,
llama-completion of b11434 writes the next ubatch's inputs while the device still reads the previous
ubatch's: corrupt output, MANIFESTED races on the inputs; with our fix (b11434-ubatchsync, its own
libllama and llama-completion) clean and race-free; on a discrete virtual device race-free."""
import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ggml_trace import analysis
from ggml_trace.analysis import load
from ggml_trace.tracer import programs
from ggml_trace.tracer.vulkan_runs import FINAL_LINE
from support import ggml_trace, same_text

FIXED = "b11434-ubatchsync"  # make setup: b11434 + patches/ubatch-sync.patch (libllama)
PROMPT = "The quick brown fox jumps over the lazy dog near the old cat"  # ~75 tokens of the tiny model
# the inputs llama.cpp fills with plain stores (no ggml call sees them) and through ggml_backend_tensor_set
STORED = {"attn_inp_k_idxs", "attn_inp_v_idxs", "attn_inp_kq_mask"}
SET = {"inp_tokens", "inp_pos"}


def completion(build, *extra):
    return ["stdbuf", "-o0", str(programs.program(build, "llama-completion")), "-m", str(programs.tiny_model()),
            "-p", PROMPT, "-n", "16", "-b", "64", "-ub", "16", "--temp", "0", "--seed", "1", "-no-cnv", *extra]


@pytest.fixture(scope="module")
def cpu_only(tmp_path_factory):
    """The expected output: a run on the CPU alone, traced so that llama.cpp's logger is drained at
    exit (it loses its last lines otherwise, upstream #22142): its log ends with the final print."""
    out = tmp_path_factory.mktemp("cpu") / "cpu.ggmltrace"
    r = ggml_trace("record", "--build", "b11434", "--no-nvml", "-o", out, "--", *completion("b11434", "-dev", "none"),
                   timeout=300)
    assert r.returncode == 0 and FINAL_LINE in r.stderr, r.stderr[-2000:]
    return r.stdout


def record(build, out, *options, integrated=True, env=None):
    """llama-completion of `build` on one virtual device with 2 ms a operation, as a user runs it."""
    r = ggml_trace("record", "--build", build, "--no-nvml", "-o", out, "--virtual-devices", 1,
                   "--vdev-latency-us", 2000, *(["--vdev-integrated"] if integrated else []), *options, "--",
                   *completion(build, "-ngl", "99", "-dev", "VDEV0"), timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def input_races(path):
    """Findings where the program wrote an input that the device read in place for an earlier graph."""
    found = analysis.races(load(path)).to_json()["races"]
    return [f for f in found if f["a"]["backend"] == "VDEV0" and f["a"]["kind"] == "graph_compute"
            and f["b"]["backend"] in (None, "CPU") and f["a"]["tensor"] == f["b"]["tensor"]], found


def test_integrated_device_is_corrupt_on_b11434_and_the_race_is_named(cpu_only, tmp_path):
    wrong = 0
    for i in range(4):
        out = tmp_path / f"run-{i}.ggmltrace"
        r = record("b11434", out)
        inputs, _ = input_races(out)
        tensors = {f["a"]["tensor"] for f in inputs}
        # the stores llama.cpp makes without a ggml call are there, inferred (the default)
        assert STORED <= tensors and SET <= tensors, tensors
        kinds = {f["a"]["tensor"]: f["b"]["kind"] for f in inputs}
        assert {kinds[t] for t in STORED} == {"host_write_inferred"}
        assert {kinds[t] for t in SET} == {"buf_set_tensor"}
        k_idxs = next(f for f in inputs if f["a"]["tensor"] == "attn_inp_k_idxs")
        assert "process_ubatch" in k_idxs["missing"] and "set_inputs" in k_idxs["missing"], k_idxs["missing"]
        if not same_text(r.stdout, cpu_only):
            wrong += 1
            assert k_idxs["manifested"], k_idxs
    assert wrong >= 2


def test_observed_stores_are_the_bytes_that_changed(tmp_path):
    out = tmp_path / "observe.ggmltrace"
    record("b11434", out, "--host-writes", "observe")
    t = load(out)
    writes = t.calls[t.calls.kind == "host_write"]
    assert len(writes) and (t.calls.kind == "host_write_inferred").sum() == 0
    acc = t.accesses[t.accesses.call_id.isin(writes.call_id)]
    assert STORED <= set(acc.tensor.astype(str))
    # a window, not a point: each observed store lies between two checkpoints of the host thread
    assert (writes.t_end > writes.t_begin).all()
    # only the bytes that changed: inputs whose bytes were the same for every ubatch are not there
    assert not (set(acc.tensor.astype(str)) & {"inp_mixed_tokens", "inp_mixed_slots"})
    inputs, _ = input_races(out)
    stored = [f for f in inputs if f["a"]["tensor"] in STORED]
    assert stored and all(f["b"]["kind"] == "host_write" for f in stored)
    assert any(f["manifested"] for f in stored)
    # the bug-report page reproduces the run with the same device and mode
    page = tmp_path / "report.html"
    assert ggml_trace("report", out, "-o", page).returncode == 0
    assert "--vdev-integrated --host-writes observe" in page.read_text()


def test_the_fix_is_clean_and_race_free(cpu_only, tmp_path):
    for i, mode in enumerate(["infer", "observe", "infer"]):
        out = tmp_path / f"fixed-{i}.ggmltrace"
        r = record(FIXED, out, "--host-writes", mode)
        assert same_text(r.stdout, cpu_only), (mode, r.stdout)
        inputs, found = input_races(out)
        assert inputs == [] and found == [], found
        # not vacuous: the fixed libllama synchronized before every ubatch's inputs, and the stores
        # were still seen
        t = load(out)
        assert (t.calls.kind == "sched_synchronize").sum() >= 5
        assert t.calls.kind.isin(["host_write", "host_write_inferred"]).sum() > 0


def test_a_discrete_device_copies_its_inputs_and_is_race_free(cpu_only, tmp_path):
    out = tmp_path / "discrete.ggmltrace"
    r = record("b11434", out, integrated=False)
    assert same_text(r.stdout, cpu_only)
    inputs, found = input_races(out)
    assert found == []
    t = load(out)  # the inputs went to the device by copies the scheduler ordered
    assert (t.calls.kind == "cpy_tensor_async").sum() > 0


@pytest.mark.parametrize("build", ["b10524", "b10531"])
def test_the_pinned_builds_have_the_race_too(build, tmp_path):
    out = tmp_path / f"{build}.ggmltrace"
    record(build, out)
    inputs, _ = input_races(out)
    assert {"attn_inp_kq_mask", "inp_tokens"} <= {f["a"]["tensor"] for f in inputs}
    assert any(f["manifested"] for f in inputs)


def test_a_bad_host_writes_mode_is_refused(tmp_path):
    r = ggml_trace("record", "--build", "b11434", "--no-nvml", "-o", tmp_path / "x.ggmltrace",
                   "--host-writes", "sometimes", "--", *completion("b11434", "-dev", "none"), timeout=120)
    assert r.returncode == 2 and "--host-writes" in r.stderr


# ------------------------------------------------------------------ llama-server -np 1: the leak

REQUEST_B = "Tell me about the weather in the mountains this weekend and what I should pack for it"
REQUESTS_A = ["My bank password is hunter2 and my account number is 12345678, keep them secret please",
              "Write a short poem about the sea, the wind, the sails and the long journey home again"]


def serve(build, out, tmp_path, integrated=True):
    """llama-server of `build` with one slot, on one virtual device, traced; yields ask(prompt)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).parent / "ggml-trace"
    cmd = [str(exe), "record", "--build", build, "--no-nvml", "-o", str(out), "--virtual-devices", "1",
           "--vdev-latency-us", "2000", *(["--vdev-integrated"] if integrated else []), "--",
           str(programs.program(build, "llama-server")), "-m", str(programs.tiny_model()), "--port", str(port),
           "-np", "1", "-c", "512", "-b", "64", "-ub", "16", "-ngl", "99", "-dev", "VDEV0", "--no-webui"]
    log = open(tmp_path / f"{out.stem}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def ask(prompt):
        body = json.dumps({"prompt": prompt, "n_predict": 16, "temperature": 0, "seed": 1}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.load(r)["content"]

    @contextlib.contextmanager
    def running():
        try:
            for _ in range(600):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                        if r.status == 200:
                            break
                except OSError:
                    assert proc.poll() is None, (tmp_path / f"{out.stem}.log").read_text()[-3000:]
                    time.sleep(0.1)
            yield ask
        finally:
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=120) == 0, (tmp_path / f"{out.stem}.log").read_text()[-3000:]
            log.close()
    return running()


def answers_after(build, tmp_path, integrated=True):
    """B's answer alone (first request of a fresh server), and after each request A; the traces."""
    got, traces = {}, []
    for i, a in enumerate([None, *REQUESTS_A]):
        out = tmp_path / f"{build}-{i}.ggmltrace"
        with serve(build, out, tmp_path, integrated) as ask:
            if a is not None:
                ask(a)
            got[i] = ask(REQUEST_B)
        traces.append(out)
    return got, traces


def test_llama_server_leaks_the_previous_request_into_the_next_answer(tmp_path):
    got, traces = answers_after("b11434", tmp_path)
    # the same request B, with the same seed, answered differently depending on who asked before it
    assert got[1] != got[2], got
    for p in traces[1:]:
        inputs, _ = input_races(p)
        assert any(f["manifested"] and f["a"]["tensor"] == "attn_inp_k_idxs" for f in inputs)


def test_llama_server_with_the_fix_answers_each_request_alone(tmp_path):
    got, traces = answers_after(FIXED, tmp_path)
    assert got[0] == got[1] == got[2], got
    for p in traces:
        assert input_races(p) == ([], [])
