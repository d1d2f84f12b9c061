// Virtual async devices (VDEV0..N-1): see virtual_device.cpp.
#pragma once
#include <stdint.h>

#include "capture.h"

struct ggml_backend;

namespace ggml_trace {


// If `backend` is a virtual device's: its queue stalls `ns` nanoseconds after the work queued so
// far (the caller does not wait), and the stall is recorded as device work of `delay_call`.
bool vdev_delay(struct ggml_backend * backend, uint64_t ns, const CallContext & delay_call);

// Registers GGML_TRACE_VIRTUAL_DEVICES=N devices with ggml; false when none were asked for or
// this ggml lacks what they need (said on stderr).
bool setup_virtual_devices();

}  // namespace ggml_trace
