// Device-side timing for any backend with events (GGML_TRACE_DEVICE_TIMING=1).
//
// An async backend's calls only enqueue work. After each traced enqueue the hooks record one of
// the device's own events on the backend's queue (and one before it too, when the queue has
// waited on another since); a watcher thread per backend waits for them in order and writes when
// they passed as a K_DEVICE_EXEC record (source SRC_EVENTS). The
// program's queues are never synchronized: if the watcher falls behind and its event pool runs
// dry, operations go untimed (counted in the trace's "device_timing.untimed.B" metadata, B the backend index).
#pragma once
#include <stdint.h>

#include "ggml-backend-impl.h"
#include "trace_format.h"

namespace ggml_trace {

struct TimedOp {
    struct Watcher * watcher = nullptr;  // null: this operation is not timed
    ggml_backend_event_t begin = nullptr;
    ggml_backend_event_t end = nullptr;
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

// The backend is about to be freed: time what is pending, free the events, stop the watcher.
void device_timing_forget(uint32_t backend_index);
// Process exit: stop the watchers without waiting on the device (its runtime may be gone).
void device_timing_shutdown();

}  // namespace ggml_trace
