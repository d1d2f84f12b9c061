// Event watcher: device-side timing for backends whose event_synchronize may be called from any
// thread (CUDA, HIP, MUSA, the virtual devices). After each traced enqueue the program's thread
// records one of the device's own events on the queue (and one before it too, when the queue has
// waited on another since); a watcher thread per backend waits for them in order and writes when
// they passed (source SRC_EVENTS). device_timing.cpp chooses this observer and calls it.
#pragma once
#include <stdint.h>

#include "device_timing.h"

namespace ggml_trace {

// Starts the watcher of backend `backend_index`, whose thread makes the pool of events; once per
// backend, under device_timing.cpp's lock. False when the device lacks events: it goes untimed.
bool watcher_start(ggml_backend_t backend, uint32_t backend_index, const ggml_backend_i & orig);
// Takes the events of `op` from the pool and records the begin event, if one is needed. Leaves
// `op` untimed when the backend has no watcher or the pool has run dry.
void watcher_begin(uint32_t backend_index, ggml_backend_t backend, TimedOp & op);
// Records the end event of `op` (op.watcher set) and hands both to the watcher.
void watcher_end(TimedOp & op, ggml_backend_t backend, const CallRec & call);
// The operation enqueued nothing: returns its events to the pool.
void watcher_cancel(TimedOp & op);
// The backend's queue was told to wait on an event: the next operation records a begin event.
void watcher_waited(uint32_t backend_index);

// The backend is about to be freed: the watcher times what is pending, then ends and frees its
// events. Returns how many of the backend's operations went untimed.
uint64_t watcher_forget(uint32_t backend_index);
// Process exit: the watcher ends without waiting on the device (its runtime may be gone).
// Returns how many of the backend's operations went untimed.
uint64_t watcher_abandon(uint32_t backend_index);

}  // namespace ggml_trace
