"""A hung program's blocked CUDA calls and what each waited for (analysis/waits.py), on traces made here."""
from ggml_trace.analysis import load
from ggml_trace.analysis.waits import blocked_threads, format_blocked
from ggml_trace.analysis.trace_format import CUDA_RETURNED
from tests.support.tracegen import TraceBuilder

S0, S1 = 0x10, 0x11
E1, E2 = 0xE1, 0xE2


def hung(path, *, returned=False, recorded=True):
    """Stream 1 waits for an event of stream 0, then its kernel, then an event the host synchronizes on."""
    b = TraceBuilder()
    b.thread(0, name="main")
    b.backend(0, "CUDA0", device_type=1, has_async=True, has_events=True)
    b.call("sched_graph_compute", 10, 20, sched=0, graph=0)
    c = b.call("graph_compute", 100, 200, backend=0, sched=0, graph=0, split=0)
    b.cuda("launch", 110, call_id=c, stream=S0, name="produce_kernel", node=0)
    b.cuda("event_record", 111, call_id=c, stream=S0, handle=E2)
    b.cuda("stream_wait", 112, call_id=c, stream=S1, handle=E2)
    b.cuda("launch", 113, call_id=c, stream=S1, name="spin_kernel", node=1)
    if recorded:
        b.cuda("event_record", 114, call_id=c, stream=S1, handle=E1)
    b.cuda("event_sync", 300, handle=E1)
    if returned:
        b.cuda("event_sync", 900, handle=E1, flags=CUDA_RETURNED)
    b.write(path)
    return load(path)


def test_the_chain_of_a_sync_that_never_returned(tmp_path):
    blocked = blocked_threads(hung(tmp_path / "t.ggmltrace"))
    assert [(b.thread, b.op) for b in blocked] == [(0, "event_sync")]
    chain = blocked[0].chain
    assert chain[0].startswith("on event 0xe1, recorded on CUDA0 stream 0x11 after spin_kernel, node 1")
    assert chain[1].startswith("which first waited on event 0xe2, recorded on CUDA0 stream 0x10 after "
                               "produce_kernel, node 0")
    assert len(chain) == 2
    text = format_blocked(blocked, "t", 1000)
    assert "thread 0: cudaEventSynchronize since" in text


def test_a_sync_that_returned_is_no_hang(tmp_path):
    assert blocked_threads(hung(tmp_path / "t.ggmltrace", returned=True)) == []


def test_an_event_never_recorded_ends_the_chain(tmp_path):
    blocked = blocked_threads(hung(tmp_path / "t.ggmltrace", recorded=False))
    assert blocked[0].chain == ["on event 0xe1, recorded in no call of this trace"]


def test_the_cli_says_it_and_exits_1(tmp_path):
    from ggml_trace.tracer.cli import main

    hung(tmp_path / "h.ggmltrace")
    hung(tmp_path / "ok.ggmltrace", returned=True)
    assert main(["hang", str(tmp_path / "h.ggmltrace")]) == 1
    assert main(["hang", str(tmp_path / "ok.ggmltrace")]) == 0
