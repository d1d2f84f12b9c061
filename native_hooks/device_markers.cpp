// Markers (Vulkan): a ring of markers per queue in pinned host memory, set by copies the device
// runs in queue order and read by memory loads only, on the program's thread and on a poller
// thread, since Vulkan's events must not be waited on from a thread of ours (device_markers.h).
#include "device_markers.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "ggml_api.h"
#include "registry.h"
#include "trace_writer.h"

namespace ggml_trace {

namespace {

const int MARK_RING = 512;            // operations in flight per queue
const int MARK_SLOTS = 2 * MARK_RING;  // a marker before and one after each
const uint32_t MARK_BYTES = 64;        // the device-side source: MARK_BYTES of 0xA5
const unsigned DEFAULT_POLL_US = 100;

struct MarkOp {
    uint64_t call_id, t_enqueue, lo, hi;  // lo: last time seen not started; hi: when seen ended
    uint32_t graph;
    int32_t split;
};

}  // namespace

struct Markers {
    ggml_backend_t backend = nullptr;
    uint32_t backend_index = NONE32;
    void (*get_tensor_async)(ggml_backend_t, const ggml_tensor *, void *, size_t, size_t) = nullptr;
    ggml_backend_buffer_t dev_buf = nullptr, host_buf = nullptr;
    ggml_tensor src;               // MARK_BYTES of dev_buf, all 0xA5
    volatile uint32_t * slots = nullptr;  // pinned host memory, MARK_SLOTS words

    std::mutex m;  // guards everything below; held for a few loads and stores
    MarkOp ring[MARK_RING];
    uint64_t head = 0, tail = 0;   // pending = ring[head..tail); op n uses slots 2n, 2n+1 (mod)
    uint64_t untimed = 0;
};

namespace {

std::atomic<Markers *> g_markers[MAX_BACKENDS];
std::atomic<int> g_n_markers{0};
std::thread g_poller;
std::atomic<bool> g_poller_stop{false};

uint32_t & slot_of(Markers * k, uint64_t seq, int which) {
    return (uint32_t &) k->slots[(2 * seq + which) % MARK_SLOTS];
}

bool passed(Markers * k, uint64_t seq, int which) {
    return __atomic_load_n(&slot_of(k, seq, which), __ATOMIC_ACQUIRE) != 0;
}

// Reads the markers of one queue (memory loads only: no call into the backend, so any thread may
// do it) and writes the operations whose end marker has passed. Markers pass in queue order.
void poll_markers(Markers * k) {
    std::lock_guard<std::mutex> lock(k->m);
    if (k->head == k->tail) {
        return;
    }
    uint64_t t0 = now_ticks();  // a marker read as zero after t0 had not passed at t0
    uint64_t unstarted = k->tail;  // the first operation proven not started at t0
    for (uint64_t n = k->head; n < k->tail; n++) {
        if (!passed(k, n, 0)) {
            unstarted = n;
            break;
        }
        if (!passed(k, n, 1)) {  // the next operation's before-marker comes after this one
            unstarted = n + 1;
            break;
        }
    }
    for (uint64_t j = unstarted; j < k->tail; j++) {  // nor has any later one on the queue
        MarkOp & o = k->ring[j % MARK_RING];
        o.lo = std::max(o.lo, t0);
    }
    for (; k->head < k->tail; k->head++) {
        MarkOp & op = k->ring[k->head % MARK_RING];
        if (!passed(k, k->head, 1)) {
            break;
        }
        op.hi = now_ticks();  // read as set before now: it had passed by now
        if (op.call_id) {  // 0: a declined copy
            uint64_t begin = std::max(op.lo, op.t_enqueue);
            write_device_exec(SRC_MARKERS, 0, k->backend_index, op.graph, op.split, op.call_id, begin,
                              std::max(begin, op.hi));
        }
    }
}

}  // namespace

void markers_poll() {
    if (g_n_markers.load(std::memory_order_relaxed) == 0) {
        return;
    }
    for (int i = 0; i < MAX_BACKENDS; i++) {
        if (Markers * k = g_markers[i].load(std::memory_order_acquire)) {
            poll_markers(k);
        }
    }
}

namespace {

// Sharpens the bounds between the program's own traced calls: memory loads and a sleep.
void poller_main(unsigned period_us) {
    pthread_setname_np(pthread_self(), "ggml-trace poll");
    while (!g_poller_stop.load(std::memory_order_relaxed)) {
        markers_poll();
        std::this_thread::sleep_for(std::chrono::microseconds(period_us));
    }
}

ggml_backend_buffer_t alloc_untraced(ggml_backend_buffer_type_t buft, size_t size) {
    const BuftEntry * e = find_buft(buft);
    auto alloc = e ? e->orig.alloc_buffer : buft->iface.alloc_buffer;
    return alloc ? alloc(buft, size) : nullptr;
}

// Pinned host memory for the flags and a device buffer to copy them from, allocated through the
// original vtables so that they are not traced. nullptr when the backend lacks something.
Markers * make_markers(ggml_backend_t backend, uint32_t index, const ggml_backend_i & orig) {
    ggml_backend_dev_t dev = backend->device;
    if (!dev || !orig.get_tensor_async) {
        return nullptr;
    }
    const DeviceEntry * de = find_device(dev);
    const ggml_backend_device_i & di = de ? de->orig : dev->iface;
    ggml_backend_buffer_type_t host_buft = di.get_host_buffer_type ? di.get_host_buffer_type(dev) : nullptr;
    ggml_backend_buffer_type_t dev_buft = g_api.backend_get_default_buffer_type(backend);
    if (!host_buft || !dev_buft) {
        return nullptr;
    }
    ggml_backend_buffer_t hb = alloc_untraced(host_buft, MARK_SLOTS * sizeof(uint32_t));
    ggml_backend_buffer_t db = alloc_untraced(dev_buft, MARK_BYTES);
    if (!hb || !db || !db->iface.clear) {
        if (hb) g_api.buffer_free(hb);
        if (db) g_api.buffer_free(db);
        return nullptr;
    }
    db->iface.clear(db, 0xA5);
    Markers * k = new Markers();
    k->backend = backend;
    k->backend_index = index;
    k->get_tensor_async = orig.get_tensor_async;
    k->dev_buf = db;
    k->host_buf = hb;
    k->slots = (volatile uint32_t *) g_api.buffer_get_base(hb);
    memset(&k->src, 0, sizeof(k->src));
    k->src.type = GGML_TYPE_I32;
    k->src.buffer = db;
    k->src.data = g_api.buffer_get_base(db);
    k->src.ne[0] = MARK_BYTES / 4;
    k->src.ne[1] = k->src.ne[2] = k->src.ne[3] = 1;
    k->src.nb[0] = 4;
    k->src.nb[1] = k->src.nb[2] = k->src.nb[3] = MARK_BYTES;
    for (int i = 0; i < MARK_SLOTS; i++) {
        k->slots[i] = 1;  // a slot not in use reads as passed
    }
    return k;
}

// Zeroes the slot, then enqueues the copy that sets it (on the program's thread).
void put_marker(Markers * k, uint64_t seq, int which) {
    uint32_t & s = slot_of(k, seq, which);
    __atomic_store_n(&s, 0u, __ATOMIC_RELEASE);
    k->get_tensor_async(k->backend, &k->src, &s, 0, sizeof(uint32_t));
}

void start_poller() {
    static std::once_flag once;
    std::call_once(once, [] {
        const char * v = getenv("GGML_TRACE_MARKER_POLL_US");
        unsigned us = v && *v ? (unsigned) atoi(v) : DEFAULT_POLL_US;
        if (us > 0) {
            g_poller = std::thread(poller_main, us);
        }
    });
}

}  // namespace

bool markers_start(ggml_backend_t backend, uint32_t backend_index, const ggml_backend_i & orig) {
    Markers * k = make_markers(backend, backend_index, orig);
    if (!k) {
        return false;
    }
    g_markers[backend_index].store(k, std::memory_order_release);
    g_n_markers++;
    start_poller();
    return true;
}

bool markers_begin(uint32_t backend_index, TimedOp & op) {
    Markers * k = g_markers[backend_index].load(std::memory_order_acquire);
    if (!k) {
        return false;
    }
    std::lock_guard<std::mutex> lock(k->m);
    if (k->tail - k->head >= (uint64_t) MARK_RING) {
        k->untimed++;
        return true;
    }
    op.markers = k;
    op.seq = k->tail;
    put_marker(k, op.seq, 0);
    return true;
}

void markers_end(TimedOp & op, const CallRec & call) {
    Markers * k = op.markers;
    std::lock_guard<std::mutex> lock(k->m);
    put_marker(k, op.seq, 1);
    k->ring[op.seq % MARK_RING] = MarkOp{call.call_id, call.t_begin, 0, 0, call.graph, call.split};
    k->tail = op.seq + 1;
    op.markers = nullptr;
}

void markers_cancel(TimedOp & op) {
    // the before-marker is on the queue: close it with an after-marker and time nothing
    Markers * k = op.markers;
    std::lock_guard<std::mutex> lock(k->m);
    put_marker(k, op.seq, 1);
    k->ring[op.seq % MARK_RING] = MarkOp{0, 0, 0, 0, NONE32, -1};
    k->tail = op.seq + 1;
    op.markers = nullptr;
}

uint64_t markers_forget(uint32_t backend_index, ggml_backend_t backend, void (*synchronize)(ggml_backend_t)) {
    Markers * k = g_markers[backend_index].exchange(nullptr);
    if (!k) {
        return 0;
    }
    // The program's thread is freeing the backend: its queue may be waited on here.
    if (synchronize) {
        synchronize(backend);
    }
    poll_markers(k);
    uint64_t untimed;
    {
        std::lock_guard<std::mutex> lock(k->m);
        k->untimed += k->tail - k->head;
        untimed = k->untimed;
    }
    g_n_markers--;
    // A poller that loaded the pointer before the exchange finds nothing pending once it
    // gets the lock, so it reads no freed memory; the small struct itself is left alive.
    std::lock_guard<std::mutex> lock(k->m);
    k->head = k->tail;
    g_api.buffer_free(k->dev_buf);
    g_api.buffer_free(k->host_buf);
    return untimed;
}

void markers_stop_poller() {
    if (g_poller.joinable()) {
        g_poller_stop.store(true);
        g_poller.join();
    }
}

uint64_t markers_abandon(uint32_t backend_index) {
    Markers * k = g_markers[backend_index].load(std::memory_order_acquire);
    if (!k) {
        return 0;
    }
    poll_markers(k);  // what has passed; the rest is counted untimed
    std::lock_guard<std::mutex> lock(k->m);
    k->untimed += k->tail - k->head;
    k->head = k->tail;
    return k->untimed;
}

}  // namespace ggml_trace
