"""The loader's thread pool (analysis/threads.py) and the columns it fills (analysis/columns.py):
jobs really run side by side, errors and nesting behave, and a load gives the same frames
whatever the number of threads."""
from __future__ import annotations

import threading
import time

import numpy as np
import pandas as pd
import pytest

from support.tracegen import synth_trace

from ggml_trace.analysis import load, threads
from ggml_trace.analysis.columns import Columns
from ggml_trace.analysis.schema import FRAMES
from ggml_trace.analysis.threads import in_ranges, side_by_side, thread_count
from ggml_trace.analysis.trace_format import ACCESS_DTYPE, CALL_DTYPE


def test_jobs_run_side_by_side(monkeypatch):
    monkeypatch.setenv("GGML_TRACE_THREADS", "2")
    meet = threading.Barrier(2, timeout=20)  # passes only if both jobs run at once

    def job(value):
        meet.wait()
        return value

    assert side_by_side(lambda: job("a"), lambda: job("b")) == ["a", "b"]


def test_one_thread_runs_everything_in_the_caller(monkeypatch):
    monkeypatch.setenv("GGML_TRACE_THREADS", "1")
    me = threading.get_ident()
    assert side_by_side(*[threading.get_ident] * 5) == [me] * 5
    assert thread_count() == 1


def test_bad_thread_count_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("GGML_TRACE_THREADS", "many")
    with pytest.raises(ValueError, match="GGML_TRACE_THREADS='many'"):
        thread_count()


def test_an_error_is_raised_after_every_job_ended(monkeypatch):
    monkeypatch.setenv("GGML_TRACE_THREADS", "3")
    finished = []

    def slow():
        time.sleep(0.2)
        finished.append("slow")

    def fails():
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        side_by_side(slow, fails, slow)
    assert finished == ["slow", "slow"]


def test_nested_jobs_do_not_wait_on_each_other(monkeypatch):
    """Jobs that start jobs, more of them than threads: the waiting threads run queued jobs
    themselves, so this ends (a pool whose threads only waited would hang)."""
    monkeypatch.setenv("GGML_TRACE_THREADS", "2")

    def inner(i):
        return sum(side_by_side(*[lambda j=j: i * 10 + j for j in range(4)]))

    done = []
    t = threading.Thread(target=lambda: done.append(side_by_side(*[lambda i=i: inner(i) for i in range(6)])))
    t.start()
    t.join(60)
    assert done == [[sum(i * 10 + j for j in range(4)) for i in range(6)]]


def test_ranges_cover_everything_once(monkeypatch):
    monkeypatch.setenv("GGML_TRACE_THREADS", "4")
    monkeypatch.setattr(threads, "RANGE_LEAST", 1)
    seen = np.zeros(100_003, np.int64)
    cuts = []

    def job(lo, hi):
        cuts.append((lo, hi))
        seen[lo:hi] += 1

    in_ranges(len(seen), job, align=1000)
    assert (seen == 1).all()
    assert len(cuts) == 4 and all(lo % 1000 == 0 for lo, _ in cuts)


@pytest.mark.parametrize("dtype", [CALL_DTYPE, ACCESS_DTYPE], ids=["call", "access"])
def test_columns_hold_every_field(dtype, monkeypatch):
    """Each field read from the columns equals the field of the records, also after selecting
    records by mask and by position, and after a transposition cut in several ranges."""
    monkeypatch.setenv("GGML_TRACE_THREADS", "3")
    monkeypatch.setattr(threads, "RANGE_LEAST", 1)
    rng = np.random.default_rng(7)
    recs = np.frombuffer(rng.bytes(64 * 50_000), dtype)
    cols = Columns.of_records(recs)
    mask = rng.random(len(recs)) < 0.3
    pos = rng.permutation(len(recs))[:1000]
    for name in dtype.names:
        assert np.array_equal(cols[name], recs[name]), name
        assert np.array_equal(cols[mask][name], recs[mask][name]), name
        assert np.array_equal(cols[pos][name], recs[pos][name]), name
        assert np.array_equal(cols[10:20][name], recs[10:20][name]), name
    assert cols.records().tobytes() == recs.tobytes()


def test_a_load_is_the_same_with_one_thread_or_many(tmp_path, monkeypatch):
    p = tmp_path / "syn.trace"
    synth_trace(p, 120_000, threads=3)
    monkeypatch.setattr(threads, "RANGE_LEAST", 1)  # cut even this small trace into ranges
    monkeypatch.setenv("GGML_TRACE_THREADS", "1")
    one = load(p)
    monkeypatch.setenv("GGML_TRACE_THREADS", "4")
    many = load(p)
    assert len(many.accesses) > 90_000
    for frame in FRAMES:
        pd.testing.assert_frame_equal(getattr(one, frame), getattr(many, frame), check_exact=True)
