// Device timing's public API (device_timing.h): chooses an observer for each backend on its first
// timed operation (the event watcher where events may be waited on from any thread, markers for
// Vulkan, none otherwise), forwards to it, and writes the device_timing.* metadata.
#include "device_timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <mutex>

#include "device_markers.h"
#include "device_watcher.h"
#include "ggml_api.h"
#include "registry.h"
#include "trace_writer.h"

namespace ggml_trace {

namespace {

std::atomic<bool> g_enabled{false};
std::mutex g_chosen_mutex;  // choosing and forgetting only
std::atomic<bool> g_chosen[MAX_BACKENDS];  // an observer (or none) was chosen: we try only once

const char * reg_name_of(ggml_backend_t backend) {
    ggml_backend_dev_t dev = backend->device;
    ggml_backend_reg_t reg = dev && g_api.dev_backend_reg ? g_api.dev_backend_reg(dev) : nullptr;
    return reg && reg->iface.get_name ? reg->iface.get_name(reg) : "";
}

// Whose event_synchronize may run on a thread of ours while the program uses the backend:
// CUDA's (and HIP's and MUSA's, built from the same source: cudaEventSynchronize is
// thread-safe) and the virtual devices'. Not Vulkan's: it resets command buffers of the
// program's command pool, which Vulkan requires the program to synchronize externally.
bool events_thread_safe(ggml_backend_t backend) {
    const char * r = reg_name_of(backend);
    return !strcmp(r, "CUDA") || !strcmp(r, "HIP") || !strcmp(r, "ROCm") || !strcmp(r, "MUSA") || !strcmp(r, "VDEV");
}

bool is_vulkan(ggml_backend_t backend) { return !strcmp(reg_name_of(backend), "Vulkan"); }

// Chooses the observer of a backend on its first timed operation (index < MAX_BACKENDS).
void choose_observer(ggml_backend_t backend, uint32_t index, const ggml_backend_i & orig) {
    if (g_chosen[index].load(std::memory_order_acquire)) {
        return;
    }
    std::lock_guard<std::mutex> lock(g_chosen_mutex);
    if (g_chosen[index].load(std::memory_order_relaxed)) {
        return;
    }
    const char * mode = nullptr;  // no events: a synchronous backend, nothing to time or say
    if (orig.event_record) {
        mode = "none";
        if (events_thread_safe(backend)) {
            if (watcher_start(backend, index, orig)) mode = "events";
        } else if (is_vulkan(backend) && markers_start(backend, index, orig)) {
            mode = "markers";
        }
    }
    if (mode && !strcmp(mode, "none")) {
        fprintf(stderr, "ggml-trace: device timing: %s is not timed on its device (no safe observer); "
                        "its work has host times only\n", g_api.backend_name(backend));
    }
    if (mode && writer_is_open()) {
        char key[48];
        snprintf(key, sizeof(key), "device_timing.mode.%u", index);
        write_meta(key, mode, strlen(mode));
    }
    g_chosen[index].store(true, std::memory_order_release);
}

// META device_timing.untimed.B: operations of backend B that were left untimed (watcher or markers).
void write_untimed(uint32_t backend_index, uint64_t untimed) {
    if (untimed && writer_is_open()) {
        char key[48], value[32];
        snprintf(key, sizeof(key), "device_timing.untimed.%u", backend_index);
        int n = snprintf(value, sizeof(value), "%llu", (unsigned long long) untimed);
        write_meta(key, value, (size_t) n);
    }
}

}  // namespace

void device_timing_init() {
    const char * v = getenv("GGML_TRACE_DEVICE_TIMING");
    g_enabled.store(v && *v && strcmp(v, "0") != 0);
}

bool device_timing_enabled() { return g_enabled.load(std::memory_order_relaxed); }

TimedOp device_timing_begin(ggml_backend_t backend, uint32_t backend_index, const ggml_backend_i & orig) {
    TimedOp op;
    if (!device_timing_enabled()) {
        return op;
    }
    markers_poll();  // the call's t_begin is taken: what has not started yet starts after it
    if (backend_index >= (uint32_t) MAX_BACKENDS) {
        return op;
    }
    choose_observer(backend, backend_index, orig);
    if (!markers_begin(backend_index, op)) {
        watcher_begin(backend_index, backend, op);
    }
    return op;
}

void device_timing_end(TimedOp & op, ggml_backend_t backend, const CallRec & call) {
    if (op.markers) {
        markers_end(op, call);
    }
    if (device_timing_enabled()) {
        markers_poll();
    }
    if (op.watcher) {
        watcher_end(op, backend, call);
    }
}

void device_timing_poll() {
    if (device_timing_enabled()) {
        markers_poll();
    }
}

void device_timing_cancel(TimedOp & op) {
    if (op.markers) {
        markers_cancel(op);
    }
    if (op.watcher) {
        watcher_cancel(op);
    }
}

void device_timing_waited(uint32_t backend_index) {
    if (device_timing_enabled() && backend_index < (uint32_t) MAX_BACKENDS) {
        watcher_waited(backend_index);
    }
}

void device_timing_forget(uint32_t backend_index, ggml_backend_t backend, void (*synchronize)(ggml_backend_t)) {
    if (backend_index >= (uint32_t) MAX_BACKENDS) {
        return;
    }
    write_untimed(backend_index, markers_forget(backend_index, backend, synchronize));
    write_untimed(backend_index, watcher_forget(backend_index));
    std::lock_guard<std::mutex> lock(g_chosen_mutex);
    g_chosen[backend_index].store(false, std::memory_order_relaxed);  // the next backend at this index chooses again
}

void device_timing_shutdown() {
    markers_stop_poller();
    for (uint32_t i = 0; i < (uint32_t) MAX_BACKENDS; i++) {
        write_untimed(i, markers_abandon(i));
    }
    for (uint32_t i = 0; i < (uint32_t) MAX_BACKENDS; i++) {
        write_untimed(i, watcher_abandon(i));
    }
}

}  // namespace ggml_trace
