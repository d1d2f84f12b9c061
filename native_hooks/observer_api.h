// The C entry points between the hooks (libggml-trace-hooks) and a device-side observer built as a
// library of its own (the virtual devices, libggml-trace-vdev). Each side finds the other's by
// name at run time (dlsym), so either loads without the other. Every name of the project's own
// starts with ggmltrace_ (CMakeLists.txt exports nothing else but the ggml entry points the
// libraries interpose): ggml_trace_ is taken, by a llama.cpp fork's tracer in its ggml-base.
#pragma once
#include <stdint.h>

struct ggml_backend;

extern "C" {

// Exported by the hooks.
// The trace index of a backend (0xffffffff: not traced).
uint32_t ggmltrace_backend_index(struct ggml_backend * backend);
// The host call now enqueuing work on this thread (call_id 0: none).
void ggmltrace_current_call(uint64_t * call_id, uint32_t * graph, int32_t * split);
// One record of device-side work (write_device_exec): call `call_id` (graph, split) ran on
// `backend` from t_begin to t_end (trace clock, ggmltrace_now), as `source` saw it.
void ggmltrace_device_exec(uint8_t source, uint32_t backend, uint32_t graph, int32_t split, uint64_t call_id,
                           uint64_t t_begin, uint64_t t_end, uint64_t arg);

// Exported by the virtual devices.
// Stalls a virtual device's queue `ns` after the work queued so far (the caller does not wait),
// recorded as device work of call `call_id`; false when `backend` is not a virtual device's.
bool ggmltrace_vdev_delay(struct ggml_backend * backend, uint64_t ns, uint64_t call_id, uint32_t graph,
                          int32_t split);
}
