"""Large arrays from the heap instead of fresh mappings (glibc only).

glibc serves an allocation above its mmap threshold (128 KiB at first, raised as such blocks are
freed, at most 32 MiB) with a fresh mapping and returns it to the system when freed. Loading a
trace makes and drops hundreds of arrays of tens to hundreds of MiB, so every one of them would
fault its pages in afresh: on the machines measured that costs ~2 us per 4 KiB page, a quarter of
the load (docs/performance.md). Served from the heap, freed arrays are reused by the next ones.
The price: up to TRIM_THRESHOLD of freed memory stays with the process instead of going back to
the system. GGML_TRACE_MALLOC=default leaves glibc's own policy alone.
"""
from __future__ import annotations

import ctypes
import os

MMAP_THRESHOLD = 1 << 30  # allocations below 1 GiB come from the heap ...
TRIM_THRESHOLD = 1 << 30  # ... and up to 1 GiB of freed heap is kept for reuse
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)


def prefer_heap() -> bool:
    """Sets glibc's thresholds (once per process; True when they were set)."""
    if os.environ.get("GGML_TRACE_MALLOC") == "default":
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc's; other C libraries keep their own policy
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
