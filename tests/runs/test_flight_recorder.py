"""The flight recorder (`record --ring`): a bounded file that keeps the recent past, its window
cut consistently, snapshots of a running program, and what survives a crash. Written by the real
writer (tests/programs/ring_writer.cpp, several threads) and by real ggml programs under the hooks."""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from support import built_program, ggml_trace

from ggml_trace.analysis import load
from ggml_trace.analysis.ring import _window_start, oldest_chunk_ns
from ggml_trace.analysis.trace_file import read_header, read_trace_file
from ggml_trace.analysis.trace_format import CHUNK_HEADER_DTYPE, CHUNK_SIZE, HEADER_SIZE, RECORD_SIZE
from ggml_trace.analysis.trace_format import CHUNK_RING, TraceFormatError
from ggml_trace.tracer import snapshots

# The writer at full speed: its file grows by threads that run on idle CPU time only (SCHED_IDLE, so
# that tracing does not take a core from the program), and a writer that catches up waits for them.
# Beside the suite's other workers (4 on 2 cores) no core is ever idle: in one full run a writer
# got 60 chunks in 2 s and its ring never wrapped. So these run after the others, one at a time.
pytestmark = pytest.mark.serial

RING_WRITER = built_program("b10531", "ring-writer")
SCHED_LOOP = built_program("b10531", "sched-loop")


def per_thread_numbers(raw) -> dict:
    """{writer thread: its call numbers in the file, sorted}."""
    c = raw.calls
    return {int(t): np.sort(c["arg"][c["obj"] == t].astype(np.int64)) for t in np.unique(c["obj"])}


def assert_whole_window(raw, threads: int):
    """Every thread's calls in the window are an unbroken run, each with its access and its name."""
    numbers = per_thread_numbers(raw)
    assert len(numbers) == threads
    for t, n in numbers.items():
        gaps = [(int(n[i]), int(n[i + 1])) for i in np.flatnonzero(np.diff(n) != 1)[:5]]
        ring = raw.chunks[(raw.chunks["region"] == CHUNK_RING) & (raw.chunks["thread"] == t)]
        # what a failure needs to be understood: where the calls stop and resume, and the thread's chunks
        assert len(n) > 0 and not gaps, (f"thread {t}: calls missing inside the window between {gaps}; its ring "
                                         f"chunks' ordinals {sorted(ring['ordinal'].tolist())}, window {raw.ring}")
    acc = raw.accesses
    assert np.isin(acc["call_id"], raw.calls["call_id"]).all()
    # each call's access follows it in the same thread; only the newest call may lack it (still being written)
    assert len(raw.calls) - threads <= len(acc) <= len(raw.calls)
    assert all(raw.strings.get(int(s), "").startswith("tensor-") for s in acc["tensor"])


def test_a_growing_file_written_at_full_speed_by_several_threads_keeps_every_record(tmp_path):
    """Not a ring: the plain file, grown by the grow threads side by side while four threads
    write as fast as they can (on a fast machine faster than it grows, so writers wait for their
    segments): it grew to hold every record, each thread's from its first call on."""
    out = tmp_path / "plain.ggmltrace"
    r = subprocess.run([RING_WRITER, out, "0.25", "4", "0", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    written = int(r.stdout.split()[1])
    raw = read_trace_file(out)
    assert raw.closed and raw.ring is None and not raw.damage
    assert len(raw.calls) == written
    assert out.stat().st_size >= HEADER_SIZE + (len(raw.calls) + len(raw.accesses)) * RECORD_SIZE
    assert_whole_window(raw, 4)
    assert all(n[0] == 0 for n in per_thread_numbers(raw).values())  # from each thread's first call


def test_a_growing_file_never_ends_inside_a_chunk(tmp_path):
    """While the file grows, a reader (a live load, a copy) must not find it ending inside a chunk,
    which reads as a cut file: its size grows a whole segment at a time, before the segment's zeros
    are written (writing them moved it a page at a time: 70% of looks here ended inside a chunk)."""
    out = tmp_path / "sizes.ggmltrace"
    proc = subprocess.Popen([RING_WRITER, out, "0.5", "2", "0", "0", "1000"], stdout=subprocess.PIPE, text=True)
    looks, inside, sizes = 0, [], set()
    while proc.poll() is None:
        try:
            size = out.stat().st_size
        except FileNotFoundError:
            continue
        looks += 1
        sizes.add(size)
        if size > HEADER_SIZE and (size - HEADER_SIZE) % CHUNK_SIZE:
            inside.append(size)
    assert proc.wait() == 0
    assert not inside, f"{len(inside)} of {looks} looks ended inside a chunk"
    assert len({s for s in sizes if s > HEADER_SIZE}) > 1, sizes  # the looks saw it grow


def test_ring_keeps_a_bounded_whole_window_from_several_threads(tmp_path):
    out = tmp_path / "ring.ggmltrace"
    max_bytes = 8 << 20
    r = subprocess.run([RING_WRITER, out, "2", "3", "50", str(max_bytes)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    written = int(r.stdout.split()[1])
    raw = read_trace_file(out)
    assert raw.closed and raw.ring.closed and not raw.damage
    # bounded: the ring's chunks, the strings and metadata, the header; far less than was written
    assert raw.ring.ring_chunks * CHUNK_SIZE <= max_bytes
    assert out.stat().st_size <= HEADER_SIZE + max_bytes + raw.ring.kept_chunks * CHUNK_SIZE + (4 << 20)
    assert len(raw.calls) < written / 10
    assert raw.ring.start_ns is not None and raw.ring.cut  # the ring wrapped; the edge was cut
    assert_whole_window(raw, 3)
    # the newest calls are there: every thread's last call is its last number written
    assert raw.meta.size and "ring-writer" in raw.strings.values()


def test_time_rule_keeps_at_least_the_asked_for_past(tmp_path):
    """With room to spare, a ring keeps at least KEEP of the past, and not the whole run."""
    out = tmp_path / "ring.ggmltrace"
    # paced (1000 calls/ms a thread, ~0.26 GB/s in all): 0.3 s fill a fraction of the 256 MiB, so the
    # time rule recycles, not the size rule (unpaced, a fast machine fills 256 MiB in less than 0.3 s)
    r = subprocess.run([RING_WRITER, out, "3", "2", "300", str(256 << 20), "1000"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    written = int(r.stdout.split()[1])
    t = load(out)
    w = t.ring
    assert w.keep_ns == 300_000_000 and w.ring_chunks * CHUNK_SIZE < (256 << 20)
    assert w.end_ns - w.start_ns >= 0.3e9  # at least KEEP of the past
    # and not the whole run: each thread's first calls were recycled; what is kept is its last
    # calls, an unbroken run up to the last one it wrote (the threads number their calls from 0)
    raw = read_trace_file(out)
    numbers = per_thread_numbers(raw)
    assert all(n[0] > 0 for n in numbers.values())
    assert sum(int(n[-1]) + 1 for n in numbers.values()) == written
    assert_whole_window(raw, 2)
    assert "flight recorder (keeps 0.3 s" in " ".join(t.warnings)


def test_a_crash_keeps_the_window(tmp_path):
    out = tmp_path / "ring.ggmltrace"
    r = subprocess.run([RING_WRITER, out, "1", "2", "20", str(4 << 20), "0", "abort"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == -signal.SIGABRT
    raw = read_trace_file(out)
    assert not raw.closed and not raw.ring.closed
    assert any("was not closed" in w for w in raw.warnings) and not raw.damage
    assert_whole_window(raw, 2)


def threads_writing(path) -> int:
    """How many writer threads have calls in the file so far (0 while it has no header yet)."""
    try:
        return len(per_thread_numbers(read_trace_file(path)))
    except (OSError, TraceFormatError):
        return 0


def test_live_reads_and_snapshots_of_a_ring_being_recycled(tmp_path):
    """Read while three threads write and recycle it (~19 MB/s): every read and snapshot is consistent.
    A live read takes no hold (a snapshot does), so the ring keeps a second (~19 MB), longer than a
    read takes on a loaded machine; one that kept 100 ms was at times recycled whole under the
    read, which then rightly held nothing. The writer writes until its standard input ends, which
    the test ends once it has read and copied: however slow the machine, they were all taken while
    it wrote (a writer that ran a fixed time had ended before a loaded machine's third snapshot)."""
    out = tmp_path / "ring.ggmltrace"
    proc = subprocess.Popen([RING_WRITER, out, "stdin", "3", "1000", str(32 << 20), "50"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        # every thread writing and the ring recycling, whatever this machine's pace (not a fixed wait)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and threads_writing(out) < 3:
            time.sleep(0.2)
        # (not the oldest chunk's claim time: a chunk that the main thread claimed and never fills stays)
        while (recycled := read_trace_file(out).ring.start_ns is not None) is False and time.monotonic() < deadline:
            time.sleep(0.2)
        assert recycled, "the ring recycled nothing in 60 s"
        snaps = []
        for _ in range(3):
            assert_whole_window(read_trace_file(out), 3)  # strict: no damage from torn chunks
            snaps.append(snapshots.take(out))
        # the reads and copies were of a ring being written: the writer (until its input ends) still runs
        assert proc.poll() is None, f"the writer ended before its input did (exit {proc.returncode})"
        proc.stdin.close()  # each thread writes one call more, after every snapshot, and the file is closed
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    names = {s.path.name for s in snaps}
    assert names == {f"ring.snapshot-{i}.ggmltrace" for i in (1, 2, 3)}
    for s in snaps:
        raw = read_trace_file(s.path)
        assert raw.ring.snapshot_ns is not None and not raw.closed
        # the writer recycled nothing while the copy ran (FileHeader.hold_until_ns): the whole window
        assert s.skipped == 0 and raw.ring.end_ns - raw.ring.start_ns >= 0.1e9
        assert any("a snapshot taken while the program ran" in w for w in raw.warnings)
        assert_whole_window(raw, 3)
    final = read_trace_file(out)
    assert final.ring.closed
    # each snapshot is an earlier window than the final file's
    last = {t: n[-1] for t, n in per_thread_numbers(final).items()}
    for s in snaps:
        for t, n in per_thread_numbers(read_trace_file(s.path)).items():
            assert n[-1] < last[t]


def test_window_start_skips_a_gap_between_survivors():
    """A chunk recycled while a live file was read leaves a gap: the window starts after it."""
    ring = np.zeros(6, CHUNK_HEADER_DTYPE)
    ring["thread"] = [0, 0, 0, 1, 1, 1]
    ring["ordinal"] = [0, 1, 2, 4, 6, 7]     # thread 0 lost nothing; thread 1 lost 5 (and 0-3)
    ring["t_claim"] = [10, 20, 30, 40, 60, 70]
    assert _window_start(ring) == 60
    ring["ordinal"] = [0, 1, 2, 0, 1, 2]
    assert _window_start(ring) is None          # nothing lost: the whole run


def test_a_chunk_recycled_while_a_read_copies_it_is_left_out(tmp_path, monkeypatch):
    """A read is no snapshot: it can take a full chunk's header before the writer recycles it and
    its cleared records after. Such a chunk is left out (counted as lost: its thread's ordinals
    then have a gap, and the window starts after it), not kept empty, which would leave a hole
    of a chunk's records inside the window."""
    from ggml_trace.analysis import ring as ring_module
    from ggml_trace.analysis.trace_format import CHUNK_MAGIC, RECORD_SIZE

    body = np.zeros(2 * CHUNK_SIZE, np.uint8)
    for i in range(2):  # two full ring chunks of thread 0, ordinals 0 and 1
        head = np.zeros(1, CHUNK_HEADER_DTYPE)
        head["magic"], head["thread"], head["ordinal"], head["t_claim"] = CHUNK_MAGIC, 0, i, 100 + i
        chunk = body[i * CHUNK_SIZE:(i + 1) * CHUNK_SIZE]
        chunk[:RECORD_SIZE] = head.view(np.uint8)
        chunk[RECORD_SIZE::RECORD_SIZE] = 1  # every record slot holds a record (type byte 1)
    path = tmp_path / "ring.bin"
    path.write_bytes(bytes(HEADER_SIZE) + body.tobytes())
    torn = body.copy()
    torn[RECORD_SIZE:CHUNK_SIZE] = 0  # chunk 0's header taken before the recycle, its records after
    recycled = torn.copy()
    recycled[:4] = 0  # the header read after that: unpublished (magic 0)
    reads = iter([body, body, torn, recycled])  # the first pass, the two reads, the headers again
    monkeypatch.setattr(ring_module, "_read_block", lambda fd, off: next(reads))
    with open(path, "rb") as f:
        (kept, lost), = list(ring_module.settled_blocks(f.fileno()))
    heads = kept.reshape(-1, CHUNK_SIZE)[:, :RECORD_SIZE].copy().view(CHUNK_HEADER_DTYPE)[:, 0]
    assert heads["ordinal"].tolist() == [1] and lost == 1
    # the same reads with the recycle after the last one: both chunks whole
    reads = iter([body, body, body, body])
    with open(path, "rb") as f:
        (kept, lost), = list(ring_module.settled_blocks(f.fileno()))
    records = kept.reshape(2, -1, RECORD_SIZE)[:, 1:, 0]
    assert lost == 0 and (records != 0).all()


def sched_loop_record(tmp_path, *record_args):
    """`ggml-trace record ... -- sched-loop 0 forever`, its output read line by line."""
    exe = Path(sys.executable).parent / "ggml-trace"
    out = tmp_path / "loop.ggmltrace"
    proc = subprocess.Popen([str(exe), "record", "-o", str(out), *map(str, record_args), "--", str(SCHED_LOOP),
                             "0", "forever"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, out


class ComputeCounter:
    """Reads the program's "computed K" lines as they come, to the end: a reader that stopped would
    let the pipe fill, and the program would block in its next print with the ring still young
    (on a fast machine, before any chunk is older than the ring keeps)."""

    def __init__(self, proc):
        self.last = -1
        self.reached = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self.thread.start()

    def _read(self, stdout):
        for line in stdout:
            with self.reached:
                self.last = int(line.split()[1])
                self.reached.notify_all()
        with self.reached:
            self.reached.notify_all()

    def wait_for(self, n: int, timeout: float = 120) -> None:
        with self.reached:
            ok = self.reached.wait_for(lambda: self.last >= n or not self.thread.is_alive(), timeout)
        assert ok and self.last >= n, f"the program ended or stalled at compute {self.last}"

    def seen(self) -> int:
        """The last compute the program printed (after its output ended)."""
        self.thread.join(timeout=60)
        return self.last


def child_of(pid: int) -> int:
    return int(subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()[0])


def test_record_ring_on_a_real_program_with_check_signal_and_snapshot(tmp_path):
    """sched-loop (ggml's scheduler on the CPU) under --ring 0.5 for a few seconds: a failing check
    and SIGUSR1 each keep a snapshot, `ggml-trace snapshot PID` another; after SIGKILL the file
    holds the last half second or more, up to the last compute the program printed."""
    flag = tmp_path / "corrupt"
    proc, out = sched_loop_record(tmp_path, "--ring", "0.5", "--check", f"test ! -e {flag}", "--check-every",
                                  "0.2")
    try:
        counter = ComputeCounter(proc)
        counter.wait_for(2000)
        header = read_header(out)
        first_chunk = oldest_chunk_ns(out, header)
        program = child_of(proc.pid)
        r = ggml_trace("snapshot", program)
        assert r.returncode == 0, r.stderr
        by_pid = Path(r.stdout.strip())
        flag.touch()  # the check fails from now on: one snapshot, not one per check
        time.sleep(1.0)
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
        # the window must have moved on (the ring's first chunk recycled) before the kill: how soon
        # depends on how fast the loop writes on this machine
        deadline = time.monotonic() + 30
        while (moved := oldest_chunk_ns(out, header) != first_chunk) is False and time.monotonic() < deadline:
            time.sleep(0.2)
        assert moved, f"the ring recycled nothing in 30 s (the program printed up to compute {counter.last})"
        os.kill(program, signal.SIGKILL)
        err = proc.stderr.read()
        proc.wait(timeout=60)
        seen = counter.seen()  # the last "computed K" it printed
    finally:
        proc.kill()
    assert err.count("check failed (1): snapshot") == 1, err
    assert err.count("SIGUSR1: snapshot") == 1, err
    kept = sorted(tmp_path.glob("loop.snapshot-*.ggmltrace"))
    assert len(kept) == 3 and by_pid in kept
    for path in kept:
        t = load(path)
        assert t.ring.snapshot_ns is not None and len(t.splits) > 100
        r = ggml_trace("races", path)
        assert r.returncode == 0 and "no races" in r.stdout, r.stdout + r.stderr
    t = load(out)
    assert not t.closed and not t.damage
    computes = t.calls[t.calls["kind"] == "sched_graph_compute"]
    assert t.ring.end_ns - t.ring.start_ns >= 0.5e9
    assert computes["t_begin"].min() >= t.ring.start_ns
    assert len(computes) >= 100 and len(computes) < seen  # a window, not the run
    # crash safety as without a ring: every compute printed before the kill is in the file
    # (sched-loop prints "computed K" after compute K; graph ids count computes from 0 in it)
    assert computes["graph"].max() + 1 >= seen
    # a whole window: each compute in it with its split and its read-back
    graphs = set(computes["graph"])
    assert graphs <= set(t.splits["graph"]) and len(t.allocations) >= len(graphs)


def test_snapshot_from_python_inside_the_traced_process(tmp_path):
    out = tmp_path / "py.ggmltrace"
    code = ("from ggml_trace import tracer; tracer.mark('before'); print(tracer.snapshot()); tracer.mark('after')")
    r = ggml_trace("record", "--ring", "1", "-o", out, "--hooks",
                   built_program("b10531", "libggml-trace-hooks.so"), "--", sys.executable, "-c", code)
    assert r.returncode == 0, r.stderr
    snap = Path(r.stdout.strip())
    assert snap.name == "py.snapshot-1.ggmltrace"
    assert list(load(snap).marks["name"]) == ["before"]
    assert list(load(out).marks["name"]) == ["before", "after"]


@pytest.mark.parametrize("args,message", [
    (["--ring", "soon"], "give seconds (5, 0.5s) or a size (256M, 1G)"),
    (["--ring", "0"], "must be above 0"),
    (["--ring", "64M", "--ring-max", "1G"], "is a size already"),
    (["--ring-max", "1G"], "--ring-max goes with --ring SECONDS"),
])
def test_bad_ring_options_say_what_is_wrong(args, message, tmp_path):
    r = ggml_trace("record", "-o", tmp_path / "x.ggmltrace", *args, "--", SCHED_LOOP, "1")
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "x.ggmltrace").exists()


def test_snapshot_errors_are_clear(tmp_path):
    r = ggml_trace("snapshot", os.getpid())  # a process that writes no trace
    assert r.returncode != 0 and "writes no ggml-trace file" in r.stderr
    junk = tmp_path / "junk.ggmltrace"
    junk.write_bytes(b"not a trace" * 100)
    r = ggml_trace("snapshot", junk)
    assert r.returncode != 0 and "not a ggml-trace file" in r.stderr
    assert not list(tmp_path.glob("*.snapshot-*"))


def test_a_damaged_chunk_in_a_crashed_ring_is_reported_not_dropped(tmp_path):
    out = tmp_path / "ring.ggmltrace"
    subprocess.run([RING_WRITER, out, "0.5", "2", "20", str(4 << 20), "0", "abort"], capture_output=True, timeout=60)
    data = bytearray(out.read_bytes())
    heads = np.frombuffer(bytes(data[HEADER_SIZE:]), np.uint8)[::CHUNK_SIZE][: (len(data) - HEADER_SIZE) // CHUNK_SIZE]
    assert (heads == 0x43).sum() > 10  # chunks in use ("CHNK" starts with 0x43)
    at = HEADER_SIZE + 3 * CHUNK_SIZE
    data[at: at + 4] = b"XXXX"
    out.write_bytes(bytes(data))
    with pytest.raises(Exception, match="damaged header"):
        read_trace_file(out)
    raw = read_trace_file(out, strict=False)
    assert any("damaged header" in d for d in raw.damage)
