// Hooks on ggml's vtables. Everything the scheduler does below its entry points (split computes,
// async copies, events, synchronize, copies through buffers, allocations) goes through vtables held
// by value in ggml's structs; each hooked entry is one row of a table in vtable_hooks.cpp, and the
// rows are patched in place into a struct once its layout has been checked (registry.h keeps the
// originals).
#pragma once
#include <stdint.h>

#include "ggml-backend-impl.h"

namespace ggml_trace {

// Patch the hooked entries the object implements (the caller holds g_patch_mutex and registered
// it). A backend's `free` is always taken, so that its entry is dropped before the struct dies.
void patch_backend(ggml_backend_t backend);
void patch_device(ggml_backend_dev_t device);
void patch_buffer_type(ggml_backend_buffer_type_t buft);

// Registers and patches a buffer the first time the hooks meet it (`event`: BUF_SEEN, BUF_ALLOCATED).
void see_buffer(ggml_backend_buffer_t buffer, uint8_t event);
// The buffer's vtable is ours (a freed buffer's address may hold a new, unpatched one).
bool buffer_hooked(ggml_backend_buffer_t buffer);
// The trace index of the backend whose device owns the buffer (NONE32 when unknown).
uint32_t backend_of_buffer(ggml_backend_buffer_t buffer);

// The backend queues work asynchronously (the race model's "async backend").
bool has_async(const ggml_backend_i & f);

}  // namespace ggml_trace
