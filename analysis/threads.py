"""Whole-array work spread over a machine's cores.

numpy and pandas release the GIL inside the copies, takes, comparisons and hash lookups the loader
makes, so independent pieces of a load (blocks of records to transpose, columns of a frame) run
side by side in threads. One pool serves the process; GGML_TRACE_THREADS sets its size (1: all
work in the calling thread, as before there was a pool).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

MAX_THREADS = 8  # past this the loader's steps are bound by memory bandwidth, not cores
RANGE_LEAST = 1 << 18  # elements: a range shorter than this costs more to hand over than it saves

_pool: ThreadPoolExecutor | None = None
_pool_size = 0


def thread_count() -> int:
    """Threads a load may use: GGML_TRACE_THREADS, else the CPUs this process may run on (at
    most MAX_THREADS)."""
    text = os.environ.get("GGML_TRACE_THREADS", "").strip()
    if text:
        try:
            return max(1, int(text))
        except ValueError:
            raise ValueError(f"GGML_TRACE_THREADS={text!r}: expected a whole number of threads") from None
    return max(1, min(MAX_THREADS, len(os.sched_getaffinity(0))))


def _get_pool(n: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    if _pool is None or _pool_size < n:
        if _pool is not None:
            _pool.shutdown(wait=False)
        _pool = ThreadPoolExecutor(n, thread_name_prefix="ggml-trace-load")
        _pool_size = n
    return _pool


def _forget_pool() -> None:
    global _pool, _pool_size  # a forked child has none of its parent's threads
    _pool, _pool_size = None, 0


os.register_at_fork(after_in_child=_forget_pool)


def side_by_side(*jobs: Callable[[], object]) -> list:
    """Run independent callables side by side, in the pool and in the calling thread; their
    results in order. An exception in any of them is raised here once all have finished.

    The caller takes back every job the pool has not started yet, last first, and runs it
    itself: no thread waits on a job that is only queued, so jobs may call side_by_side too."""
    threads = thread_count()
    if threads <= 1 or len(jobs) <= 1:
        return [job() for job in jobs]
    pool = _get_pool(threads - 1)  # the caller is the last of the threads
    futures = [pool.submit(job) for job in jobs]
    results: list = [None] * len(jobs)
    errors = []
    for i in reversed(range(len(jobs))):
        if futures[i].cancel():  # not started: run it here
            try:
                results[i] = jobs[i]()
            except BaseException as e:  # the others may share arrays: wait for them first
                errors.append(e)
    for i, f in enumerate(futures):
        if not f.cancelled():  # (a cancelled one ran here)
            try:
                results[i] = f.result()
            except BaseException as e:
                errors.append(e)
    if errors:
        raise errors[0]
    return results


def in_ranges(n: int, job: Callable[[int, int], None], align: int = 1) -> None:
    """job(start, stop) over [0, n) cut in one range per thread, each a multiple of `align` long
    (but the last); ranges shorter than RANGE_LEAST are not worth a thread."""
    if n <= 0:
        return
    parts = max(1, min(thread_count(), n // max(RANGE_LEAST, 1)))
    step = -(-n // parts)
    step = -(-step // align) * align
    side_by_side(*[(lambda lo=lo: job(lo, min(lo + step, n))) for lo in range(0, n, step)])
