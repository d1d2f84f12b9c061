// Device-side delay for a backend with no queue or stream delay of its own (Vulkan, Metal, RPC, ...):
// a chain of matrix products on the backend's own memory, sized to take a known time there,
// enqueued on its queue (its own graph_compute, not traced as a split) right before the selected
// operation. The queue is busy for about the time asked while the host goes on: the delay acts
// where the operation runs, as CUDA's spin kernel and the virtual devices' queue stall do, not on
// its submission. Sized once per backend, when it is first registered (idle, before any of the
// program's work), from the time a few products take there; recorded as where = "work".
#pragma once
#include <stdint.h>

#include "capture.h"
#include "ggml-backend-impl.h"
#include "trace_format.h"

namespace ggml_trace {

// Sizes the products on `backend` (trace index `index`) with its own vtable `orig`, before the
// hooks patch it. Writes META delay.work.INDEX (the size, a product's time). Does nothing for a
// backend that cannot run them (it keeps host delays).
void work_prepare(ggml_backend_t backend, uint32_t index, const ggml_backend_i & orig);
// Enqueues about `ns` of products on the backend's queue (`orig`: its original vtable); timed like
// any queued operation when device timing is on (a device_exec row for the delay call `delay`).
// False when the backend was not sized: the caller delays on the host.
bool work_delay(ggml_backend_t backend, uint32_t index, const ggml_backend_i & orig, uint64_t ns, const CallRec & delay);

}  // namespace ggml_trace
