// Device-side timing (GGML_TRACE_DEVICE_TIMING=1), by one of two observers, chosen per backend:
//
// - Event watcher (backends whose event_synchronize may be called from any thread: CUDA, HIP,
//   MUSA, the virtual devices). After each traced enqueue the hooks record one of the device's
//   own events on the backend's queue (and one before it too, when the queue has waited on
//   another since); a watcher thread per backend waits for them in order and writes when they
//   passed as a K_DEVICE_EXEC record (source SRC_EVENTS).
// - Markers (Vulkan, whose event_synchronize resets command buffers of the program's pool and so
//   must not run on a second thread). Before and after each traced enqueue the hooks enqueue, on
//   the program's thread, a 4-byte device-to-host copy into pinned memory that the host zeroed
//   first (ggml-vulkan puts a full pipeline barrier before it: it runs only after everything
//   enqueued before it). Nothing but plain memory loads watch them: the program's thread at each
//   traced call and a poller thread. A marker before an operation still zero at time t proves the
//   operation had not started at t; one after it found set proves it had ended. The record
//   (source SRC_MARKERS) is a bound: the operation ran inside [t_begin, t_end].
// Other backends with events are not timed (metadata "device_timing.mode.B" = "none").
// The program's queues are never synchronized by the tracer: if an observer falls behind and its
// pool runs dry, operations go untimed (counted in the trace's "device_timing.untimed.B"
// metadata, B the backend index). "device_timing.mode.B" says which observer timed backend B.
#pragma once
#include <stdint.h>

#include "ggml-backend-impl.h"
#include "trace_format.h"

namespace ggml_trace {

struct TimedOp {
    struct Watcher * watcher = nullptr;  // null: this operation is not timed
    ggml_backend_event_t begin = nullptr;
    ggml_backend_event_t end = nullptr;
    struct Markers * markers = nullptr;  // markers mode: the queue's markers, op = its sequence
    uint64_t seq = 0;
};

void device_timing_init();   // reads GGML_TRACE_DEVICE_TIMING
bool device_timing_enabled();

// Records the begin event, if one is needed, on `backend` (index `backend_index` in the trace).
// Cheap no-op when timing is off or the backend has no events.
TimedOp device_timing_begin(ggml_backend_t backend, uint32_t backend_index, const ggml_backend_i & orig);
// Records the end event and hands both to the watcher; `call` is the host call's record.
void device_timing_end(TimedOp & op, ggml_backend_t backend, const CallRec & call);
// The operation enqueued nothing (a declined copy): return its events.
void device_timing_cancel(TimedOp & op);
// The backend's queue was told to wait on an event: the next operation's start is measured.
void device_timing_waited(uint32_t backend_index);

// The program's thread finished waiting for a queue: read the markers (memory loads only).
void device_timing_poll();

// The backend is about to be freed (on the program's thread): time what is pending, free the
// events or markers, stop the watcher. `synchronize` (the backend's own) lets markers drain.
void device_timing_forget(uint32_t backend_index, ggml_backend_t backend = nullptr,
                          void (*synchronize)(ggml_backend_t) = nullptr);
// Process exit: stop the watchers without waiting on the device (its runtime may be gone).
void device_timing_shutdown();

}  // namespace ggml_trace
