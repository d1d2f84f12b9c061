// Markers: device-side timing for Vulkan, whose event_synchronize resets command buffers of the
// program's pool and so must not run on a second thread. Before and after each traced enqueue the
// program's thread enqueues a 4-byte device-to-host copy into pinned memory that the host zeroed
// first; plain memory loads see them pass, so each record (source SRC_MARKERS) bounds when the
// operation ran (device_timing.h says how). device_timing.cpp chooses this observer and calls it.
#pragma once
#include <stdint.h>

#include "device_timing.h"

namespace ggml_trace {

// Makes the markers of backend `backend_index` and starts the poller (once). False when the
// backend lacks something they need: it goes untimed.
bool markers_start(ggml_backend_t backend, uint32_t backend_index, const ggml_backend_i & orig);
// False when the backend has no markers. Otherwise puts the before-marker of `op`, or leaves `op`
// untimed when the queue has too many operations in flight.
bool markers_begin(uint32_t backend_index, TimedOp & op);
// Puts the after-marker of `op` (op.markers set); `call` is the host call's record.
void markers_end(TimedOp & op, const CallRec & call);
// The operation enqueued nothing: closes its before-marker and times nothing.
void markers_cancel(TimedOp & op);
// Reads the markers of every queue (memory loads only: any thread may).
void markers_poll();

// The backend is about to be freed (on the program's thread): `synchronize` lets its markers
// drain, then they are freed. Returns how many of its operations went untimed.
uint64_t markers_forget(uint32_t backend_index, ggml_backend_t backend, void (*synchronize)(ggml_backend_t));
// Process exit: stops the poller; then markers_abandon writes what has passed for each backend
// and returns how many of its operations went untimed (the rest).
void markers_stop_poller();
uint64_t markers_abandon(uint32_t backend_index);

}  // namespace ggml_trace
