// Tables of the ggml objects whose vtables the hooks patched, and their original vtables.
//
// Lookups run on every hooked call, so they are lock-free: small arrays scanned linearly
// (backends, devices, buffer types) and an open-addressing table (buffers). Insertions and
// removals happen on rare paths and take `g_patch_mutex`.
#pragma once
#include <atomic>
#include <mutex>

#include "ggml-backend-impl.h"

namespace ggml_trace {

const int MAX_BACKENDS = 64;
const int MAX_DEVICES  = 64;
const int MAX_BUFTS    = 128;

struct BackendEntry {
    std::atomic<ggml_backend_t> backend{nullptr};  // null when unused or freed
    ggml_backend_i orig;
    uint32_t index;   // stable index used in the trace
    int refs;         // schedulers using it
};

struct DeviceEntry {
    std::atomic<ggml_backend_dev_t> device{nullptr};
    ggml_backend_device_i orig;
    uint32_t backend;  // first backend index seen on this device
    int refs;
};

struct BuftEntry {
    std::atomic<ggml_backend_buffer_type_t> buft{nullptr};
    ggml_backend_buffer_type_i orig;
    int refs;
};

extern std::mutex g_patch_mutex;

BackendEntry * find_backend(ggml_backend_t backend);
DeviceEntry * find_device(ggml_backend_dev_t device);
BuftEntry * find_buft(ggml_backend_buffer_type_t buft);
uint32_t backend_index_of_device(ggml_backend_dev_t device);

// Registration (caller holds g_patch_mutex). Returns the entry; `is_new` tells if it was added.
BackendEntry * add_backend(ggml_backend_t backend, bool * is_new);
DeviceEntry * add_device(ggml_backend_dev_t device, uint32_t backend_index, bool * is_new);
BuftEntry * add_buft(ggml_backend_buffer_type_t buft, bool * is_new);

// Buffers: original vtable by buffer pointer.
const ggml_backend_buffer_i * find_buffer(ggml_backend_buffer_t buffer);
bool add_buffer(ggml_backend_buffer_t buffer);       // caller holds g_patch_mutex
void remove_buffer(ggml_backend_buffer_t buffer);    // caller holds g_patch_mutex

}  // namespace ggml_trace
