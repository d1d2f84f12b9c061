"""Every kind of interval a trace holds — the call kinds of trace_format.h (named as in
trace_format.CALL_KINDS) and CUPTI's activity kinds — with the groups the loader and the analyses
sort them into and the colour the views draw them in: one table, so that a new kind is added in
one place (a test holds it to trace_format.CALL_KINDS)."""
from __future__ import annotations

# The table's order is the order of the categories of each frame's `kind` (sync: synchronize,
# the event calls, then sched_synchronize). Groups:
#   sched    a scheduler ran while tracing (a trace without any: the capture saw no scheduler)
#   copy     moves tensor bytes between buffers or host memory (the copies frame)
#   async    a copy enqueued on a backend's queue (copies.async)
#   enqueue  puts work on an asynchronous backend's queue: the race model's queue operations
#   sync     orders work: synchronize and the event calls (the sync frame)
#   event    an event call
#   mark     a user mark or range (the marks frame)
#   gpu      CUPTI activity, on a backend's kernels rows
#   host_write  the program's own store into a graph input in host memory (docs/integrated.md)
KINDS: dict[str, tuple[tuple[str, ...], str]] = {
    # kind                 groups                              colour
    "sched_new":           (("sched",),                        "#D3CEC9"),
    "sched_free":          ((),                                "#D3CEC9"),
    "sched_graph_compute": (("sched",),                        "#9ECAE9"),
    "sched_alloc_graph":   (("sched",),                        "#BAB0AC"),
    "sched_reserve":       (("sched",),                        "#BAB0AC"),
    "sched_reset":         ((),                                "#D3CEC9"),
    "graph_compute":       (("sched", "enqueue"),              "#4C78A8"),
    "cpy_tensor_async":    (("copy", "async", "enqueue"),      "#F58518"),
    "set_tensor_async":    (("copy", "async", "enqueue"),      "#54A24B"),
    "get_tensor_async":    (("copy", "async", "enqueue"),      "#B279A2"),
    "set_tensor_2d_async": (("copy", "async", "enqueue"),      "#54A24B"),
    "get_tensor_2d_async": (("copy", "async", "enqueue"),      "#B279A2"),
    "synchronize":         (("sync",),                         "#2E8B88"),
    "event_record":        (("sync", "event", "enqueue"),      "#EECA3B"),
    "event_wait":          (("sync", "event", "enqueue"),      "#9D755D"),
    "event_synchronize":   (("sync", "event"),                 "#D8B5A5"),
    "event_new":           (("sync", "event"),                 "#E0E0E0"),
    "event_free":          (("sync", "event"),                 "#E0E0E0"),
    "sched_synchronize":   (("sync",),                         "#A3D6D2"),
    "comm_allreduce":      (("enqueue",),                      "#17BECF"),  # NCCL, CUDA's internal pipeline
    "buf_set_tensor":      (("copy",),                         "#8CD17D"),
    "buf_get_tensor":      (("copy",),                         "#D4A6C8"),
    "buf_set_tensor_2d":   (("copy",),                         "#8CD17D"),
    "buf_get_tensor_2d":   (("copy",),                         "#D4A6C8"),
    "buf_cpy_tensor":      (("copy",),                         "#FFBE7D"),
    "buf_memset_tensor":   ((),                                "#C9C9C9"),
    "buf_clear":           ((),                                "#C9C9C9"),
    "buf_alloc":           ((),                                "#C9C9C9"),
    "buf_free":            ((),                                "#C9C9C9"),
    "user_mark":           (("mark",),                         "#222222"),
    "user_range":          (("mark",),                         "#59A14F"),
    "host_write":          (("host_write",),                   "#FF9DA6"),  # the program's own store, seen
    "host_write_inferred": (("host_write",),                   "#FFC7CD"),  # ... taken as made
    "device_exec":         ((),                                "#C8C8C8"),  # drawn in its call's colour
    "delay":               ((),                                "#E45756"),  # injected on purpose (--delay)
    "kernel":              (("gpu",),                          "#4C78A8"),
    "memcpy":              (("gpu",),                          "#F58518"),
    "memset":              (("gpu",),                          "#C9C9C9"),
    "graph":               (("gpu",),                          "#72B7B2"),  # a CUDA graph's whole execution
}

OTHER_COLOR = "#C8C8C8"  # a kind this table does not know (a newer trace)


def kinds_in(group: str) -> list[str]:
    """The kinds of a group, in the table's order."""
    return [k for k, (groups, _) in KINDS.items() if group in groups]


def color_of(kind: str) -> str:
    entry = KINDS.get(kind)
    return entry[1] if entry else OTHER_COLOR


SCHED_KINDS = kinds_in("sched")
COPY_KINDS = kinds_in("copy")
ASYNC_KINDS = kinds_in("async")
ENQUEUE_KINDS = kinds_in("enqueue")
SYNC_KINDS = kinds_in("sync")
EVENT_KINDS = kinds_in("event")
MARK_KINDS = kinds_in("mark")
GPU_KINDS = kinds_in("gpu")
HOST_WRITE_KINDS = kinds_in("host_write")
KIND_COLORS = {k: color for k, (_, color) in KINDS.items()}
