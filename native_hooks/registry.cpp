#include "registry.h"

#include <stdint.h>

namespace ggml_trace {

std::mutex g_patch_mutex;

namespace {

BackendEntry g_backends[MAX_BACKENDS];
DeviceEntry g_devices[MAX_DEVICES];
BuftEntry g_bufts[MAX_BUFTS];
std::atomic<uint32_t> g_next_backend_index{0};

// Open addressing over buffer pointers. A removed slot keeps TOMBSTONE so probes continue past it.
const size_t BUFFER_SLOTS = 1 << 14;
ggml_backend_buffer_t const TOMBSTONE = (ggml_backend_buffer_t) (uintptr_t) 1;

struct BufferSlot {
    std::atomic<ggml_backend_buffer_t> buffer{nullptr};
    ggml_backend_buffer_i orig;
};

BufferSlot g_buffers[BUFFER_SLOTS];

size_t slot_of(const void * p) { return (size_t) (((uintptr_t) p >> 4) * 0x9E3779B97F4A7C15ull >> 50) % BUFFER_SLOTS; }

template <typename E, typename K> E * find_in(E * table, int n, std::atomic<K> E::*key, K k) {
    for (int i = 0; i < n; i++) {
        if ((table[i].*key).load(std::memory_order_acquire) == k) {
            return &table[i];
        }
    }
    return nullptr;
}

template <typename E, typename K> E * free_slot(E * table, int n, std::atomic<K> E::*key) {
    for (int i = 0; i < n; i++) {
        if ((table[i].*key).load(std::memory_order_relaxed) == nullptr) {
            return &table[i];
        }
    }
    return nullptr;
}

}  // namespace

BackendEntry * find_backend(ggml_backend_t b) { return find_in(g_backends, MAX_BACKENDS, &BackendEntry::backend, b); }
DeviceEntry * find_device(ggml_backend_dev_t d) { return find_in(g_devices, MAX_DEVICES, &DeviceEntry::device, d); }
BuftEntry * find_buft(ggml_backend_buffer_type_t t) { return find_in(g_bufts, MAX_BUFTS, &BuftEntry::buft, t); }

uint32_t backend_index_of_device(ggml_backend_dev_t device) {
    DeviceEntry * e = device ? find_device(device) : nullptr;
    return e ? e->backend : 0xffffffffu;
}

BackendEntry * add_backend(ggml_backend_t backend, bool * is_new) {
    BackendEntry * e = find_backend(backend);
    *is_new = e == nullptr;
    if (!e && (e = free_slot(g_backends, MAX_BACKENDS, &BackendEntry::backend))) {
        e->orig = backend->iface;
        e->index = g_next_backend_index.fetch_add(1);
        e->refs = 0;
        e->backend.store(backend, std::memory_order_release);
    }
    return e;
}

DeviceEntry * add_device(ggml_backend_dev_t device, uint32_t backend_index, bool * is_new) {
    DeviceEntry * e = find_device(device);
    *is_new = e == nullptr;
    if (!e && (e = free_slot(g_devices, MAX_DEVICES, &DeviceEntry::device))) {
        e->orig = device->iface;
        e->backend = backend_index;
        e->refs = 0;
        e->device.store(device, std::memory_order_release);
    }
    return e;
}

BuftEntry * add_buft(ggml_backend_buffer_type_t buft, bool * is_new) {
    BuftEntry * e = find_buft(buft);
    *is_new = e == nullptr;
    if (!e && (e = free_slot(g_bufts, MAX_BUFTS, &BuftEntry::buft))) {
        e->orig = buft->iface;
        e->refs = 0;
        e->buft.store(buft, std::memory_order_release);
    }
    return e;
}

const ggml_backend_buffer_i * find_buffer(ggml_backend_buffer_t buffer) {
    size_t i = slot_of(buffer);
    for (size_t n = 0; n < BUFFER_SLOTS; n++, i = (i + 1) % BUFFER_SLOTS) {
        ggml_backend_buffer_t b = g_buffers[i].buffer.load(std::memory_order_acquire);
        if (b == buffer) {
            return &g_buffers[i].orig;
        }
        if (b == nullptr) {
            return nullptr;
        }
    }
    return nullptr;
}

bool add_buffer(ggml_backend_buffer_t buffer) {
    size_t i = slot_of(buffer);
    for (size_t n = 0; n < BUFFER_SLOTS; n++, i = (i + 1) % BUFFER_SLOTS) {
        ggml_backend_buffer_t b = g_buffers[i].buffer.load(std::memory_order_relaxed);
        if (b == nullptr || b == TOMBSTONE) {
            g_buffers[i].orig = buffer->iface;  // filled before the key is published
            g_buffers[i].buffer.store(buffer, std::memory_order_release);
            return true;
        }
    }
    return false;
}

void remove_buffer(ggml_backend_buffer_t buffer) {
    size_t i = slot_of(buffer);
    for (size_t n = 0; n < BUFFER_SLOTS; n++, i = (i + 1) % BUFFER_SLOTS) {
        ggml_backend_buffer_t b = g_buffers[i].buffer.load(std::memory_order_relaxed);
        if (b == buffer) {
            g_buffers[i].buffer.store(TOMBSTONE, std::memory_order_release);
            return;
        }
        if (b == nullptr) {
            return;
        }
    }
}

}  // namespace ggml_trace
