#include "device_timing.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "ggml_api.h"
#include "registry.h"
#include "trace_writer.h"

namespace ggml_trace {

namespace {

const int POOL_EVENTS = 256;    // events per backend: two per operation in flight
const int RING = POOL_EVENTS / 2;
const double QUICK_NS = 3000;   // an event_synchronize this short found the event already past
// Keep watching this long after the last operation before sleeping, where cores are plentiful
// (on a small machine a spinning watcher takes the core the program needs).
const uint64_t SPIN_NS = 200000;
const unsigned SPIN_MIN_CORES = 8;

struct Pending {
    ggml_backend_event_t begin, end;
    uint64_t call_id, t_enqueue;
    uint32_t graph;
    int32_t split;
};

}  // namespace

struct Watcher {
    ggml_backend_dev_t dev = nullptr;
    void (*event_record)(ggml_backend_t, ggml_backend_event_t) = nullptr;
    ggml_backend_event_t (*event_new)(ggml_backend_dev_t) = nullptr;
    void (*event_free)(ggml_backend_dev_t, ggml_backend_event_t) = nullptr;
    void (*event_synchronize)(ggml_backend_dev_t, ggml_backend_event_t) = nullptr;
    uint32_t backend_index = NONE32;

    // Both guarded by `m`; the program's threads hold it for a few loads and stores only.
    std::mutex m;
    std::condition_variable cv;
    ggml_backend_event_t free_events[POOL_EVENTS];
    int n_free = 0;
    Pending ring[RING];
    uint64_t head = 0, tail = 0;  // pending = ring[head..tail)
    std::atomic<uint64_t> posted{0};  // = tail, for the watcher to spin on without the lock
    bool sleeping = false;
    // The queue waited on an event since the last timed operation: the next one records a begin
    // event. Otherwise a queue runs its operations back to back, and an operation starts when it
    // was enqueued or when the one before it ended, whichever is later: one event per operation.
    std::atomic<bool> waited{false};
    bool stop = false;     // finish what is pending, then end
    bool abandon = false;  // end now, without touching the device (process exit)
    bool ready = false;
    uint64_t untimed = 0;

    std::thread thread;
};


// ---------------------------------------------------------------- markers (Vulkan)

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

void poll_all_markers() {
    if (g_n_markers.load(std::memory_order_relaxed) == 0) {
        return;
    }
    for (int i = 0; i < MAX_BACKENDS; i++) {
        if (Markers * k = g_markers[i].load(std::memory_order_acquire)) {
            poll_markers(k);
        }
    }
}

// Sharpens the bounds between the program's own traced calls: memory loads and a sleep.
void poller_main(unsigned period_us) {
    pthread_setname_np(pthread_self(), "ggml-trace poll");
    while (!g_poller_stop.load(std::memory_order_relaxed)) {
        poll_all_markers();
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

}  // namespace

namespace {

std::atomic<bool> g_enabled{false};
std::mutex g_watchers_mutex;  // creation and removal only
std::atomic<Watcher *> g_watchers[MAX_BACKENDS];

// The watcher's own thread creates the events: some backends (CUDA) switch the calling
// thread's current device to do so, which must not happen to the program's threads.
void make_pool(Watcher * w) {
    std::lock_guard<std::mutex> lock(w->m);
    for (int i = 0; i < POOL_EVENTS; i++) {
        ggml_backend_event_t ev = w->event_new(w->dev);
        if (!ev) {
            break;
        }
        w->free_events[w->n_free++] = ev;
    }
    w->ready = true;
    w->cv.notify_all();
}

void emit(Watcher * w, const Pending & p, uint64_t t0, uint64_t t1, uint8_t flags) {
    write_device_exec(SRC_EVENTS, flags, w->backend_index, p.graph, p.split, p.call_id, t0, std::max(t0, t1));
}

void watch(Watcher * w) {
    pthread_setname_np(pthread_self(), "ggml-trace watch");
    make_pool(w);
    const uint64_t quick = (uint64_t) (QUICK_NS / writer_ns_per_tick());
    uint64_t prev_end = 0;  // when the queue's previous operation ended, or a time before it
    uint64_t last_work = monotonic_ns();
    const uint64_t spin_ns = std::thread::hardware_concurrency() >= SPIN_MIN_CORES ? SPIN_NS : 0;
    for (;;) {
        // Recently busy: watch for the next operation without taking the program's lock.
        while (w->posted.load(std::memory_order_acquire) == w->head && monotonic_ns() - last_work < spin_ns) {
            std::this_thread::yield();
        }
        Pending p;
        {
            std::unique_lock<std::mutex> lock(w->m);
            if (w->abandon) {
                break;
            }
            if (w->head == w->tail) {
                if (w->stop) {
                    break;
                }
                if (monotonic_ns() - last_work < spin_ns) {
                    continue;
                }
                // Idle: sleep until the program enqueues again (it wakes us only in this state).
                w->sleeping = true;
                w->cv.wait_for(lock, std::chrono::milliseconds(5),
                               [&] { return w->head != w->tail || w->stop || w->abandon; });
                w->sleeping = false;
                continue;
            }
            p = w->ring[w->head % RING];
        }
        // The begin event passes when the queue reaches the operation; the end event when it is done.
        uint8_t flags = DEVICE_START_ESTIMATED;
        uint64_t start = std::max(p.t_enqueue, prev_end);
        if (p.begin) {
            uint64_t a = now_ticks();
            w->event_synchronize(w->dev, p.begin);
            uint64_t b = now_ticks();
            if (b - a >= quick) {  // seen passing, not found already past
                start = b;
                flags = 0;
            }
        }
        uint64_t c = now_ticks();
        w->event_synchronize(w->dev, p.end);
        uint64_t d = now_ticks();
        if (d - c < quick) {
            flags |= DEVICE_END_LATE;
        }
        emit(w, p, start, d, flags);
        // A late end is only an upper bound: the next start must not be estimated from it
        // (a start too late could hide an overlap). The operation did end after it started.
        prev_end = (flags & DEVICE_END_LATE) ? start : d;
        last_work = monotonic_ns();
        std::lock_guard<std::mutex> lock(w->m);
        if (p.begin) {
            w->free_events[w->n_free++] = p.begin;
        }
        w->free_events[w->n_free++] = p.end;
        w->head++;
    }
}

Watcher * start_watcher(ggml_backend_t backend, uint32_t index, const ggml_backend_i & orig) {
    ggml_backend_dev_t dev = backend->device;
    if (!dev || !orig.event_record) {
        return nullptr;
    }
    const DeviceEntry * de = find_device(dev);
    const ggml_backend_device_i & di = de ? de->orig : dev->iface;
    if (!di.event_new || !di.event_free || !di.event_synchronize) {
        return nullptr;
    }
    Watcher * w = new Watcher();
    w->dev = dev;
    w->event_record = orig.event_record;
    w->event_new = di.event_new;
    w->event_free = di.event_free;
    w->event_synchronize = di.event_synchronize;
    w->backend_index = index;
    w->thread = std::thread(watch, w);
    std::unique_lock<std::mutex> lock(w->m);
    w->cv.wait(lock, [&] { return w->ready; });
    if (w->n_free < 2) {
        fprintf(stderr, "ggml-trace: device timing: %s could not create events; its work goes untimed\n",
                dev->iface.get_name ? dev->iface.get_name(dev) : "a device");
    }
    return w;
}

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

// The watcher of a backend, started on its first timed operation (nullptr: cannot be timed).
Watcher * watcher_for(ggml_backend_t backend, uint32_t index, const ggml_backend_i & orig) {
    if (index >= (uint32_t) MAX_BACKENDS) {
        return nullptr;
    }
    Watcher * w = g_watchers[index].load(std::memory_order_acquire);
    if (w) {
        return w;
    }
    std::lock_guard<std::mutex> lock(g_watchers_mutex);
    w = g_watchers[index].load(std::memory_order_relaxed);
    if (!w) {
        const char * mode = orig.event_record ? "none" : nullptr;  // no events: a synchronous backend
        if (!mode) {
        } else if (events_thread_safe(backend)) {
            w = start_watcher(backend, index, orig);
            mode = w ? "events" : "none";
        } else if (is_vulkan(backend)) {
            if (Markers * k = make_markers(backend, index, orig)) {
                g_markers[index].store(k, std::memory_order_release);
                g_n_markers++;
                start_poller();
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
        // a backend without events gets a watcher with an empty pool, so we try only once
        if (!w) {
            w = new Watcher();
            w->ready = true;
        }
        g_watchers[index].store(w, std::memory_order_release);
    }
    return w;
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
    poll_all_markers();  // the call's t_begin is taken: what has not started yet starts after it
    Watcher * w = watcher_for(backend, backend_index, orig);
    if (backend_index < (uint32_t) MAX_BACKENDS) {
        if (Markers * k = g_markers[backend_index].load(std::memory_order_acquire)) {
            std::lock_guard<std::mutex> lock(k->m);
            if (k->tail - k->head >= (uint64_t) MARK_RING) {
                k->untimed++;
                return op;
            }
            op.markers = k;
            op.seq = k->tail;
            put_marker(k, op.seq, 0);
            return op;
        }
    }
    if (!w || !w->event_record) {
        return op;
    }
    bool begin = w->waited.exchange(false, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lock(w->m);
        if (w->n_free < (begin ? 2 : 1) || w->tail - w->head >= (uint64_t) RING || w->stop) {
            w->untimed++;
            return op;
        }
        op.begin = begin ? w->free_events[--w->n_free] : nullptr;
        op.end = w->free_events[--w->n_free];
    }
    op.watcher = w;
    if (op.begin) {
        w->event_record(backend, op.begin);
    }
    return op;
}

void device_timing_end(TimedOp & op, ggml_backend_t backend, const CallRec & call) {
    if (Markers * k = op.markers) {
        std::lock_guard<std::mutex> lock(k->m);
        put_marker(k, op.seq, 1);
        k->ring[op.seq % MARK_RING] = MarkOp{call.call_id, call.t_begin, 0, 0, call.graph, call.split};
        k->tail = op.seq + 1;
        op.markers = nullptr;
    }
    if (device_timing_enabled()) {
        poll_all_markers();
    }
    Watcher * w = op.watcher;
    if (!w) {
        return;
    }
    w->event_record(backend, op.end);
    bool wake;
    {
        std::lock_guard<std::mutex> lock(w->m);
        w->ring[w->tail % RING] = Pending{op.begin, op.end, call.call_id, call.t_begin, call.graph, call.split};
        w->tail++;
        w->posted.store(w->tail, std::memory_order_release);
        wake = w->sleeping;
    }
    if (wake) {
        w->cv.notify_one();
    }
    op.watcher = nullptr;
}

void device_timing_poll() {
    if (device_timing_enabled()) {
        poll_all_markers();
    }
}

void device_timing_cancel(TimedOp & op) {
    if (Markers * k = op.markers) {
        // the before-marker is on the queue: close it with an after-marker and time nothing
        std::lock_guard<std::mutex> lock(k->m);
        put_marker(k, op.seq, 1);
        k->ring[op.seq % MARK_RING] = MarkOp{0, 0, 0, 0, NONE32, -1};
        k->tail = op.seq + 1;
        op.markers = nullptr;
    }
    Watcher * w = op.watcher;
    if (!w) {
        return;
    }
    std::lock_guard<std::mutex> lock(w->m);
    if (op.begin) {
        w->free_events[w->n_free++] = op.begin;
        w->waited.store(true, std::memory_order_relaxed);  // the begin event was not used up
    }
    w->free_events[w->n_free++] = op.end;
    op.watcher = nullptr;
}

void device_timing_waited(uint32_t backend_index) {
    if (device_timing_enabled() && backend_index < (uint32_t) MAX_BACKENDS) {
        if (Watcher * w = g_watchers[backend_index].load(std::memory_order_acquire)) {
            w->waited.store(true, std::memory_order_relaxed);
        }
    }
}

namespace {

// META device_timing.untimed.B: operations of backend B that were left untimed (watcher or markers).
template <typename Observer> void write_untimed(Observer * o) {
    uint64_t untimed;
    {
        std::lock_guard<std::mutex> lock(o->m);
        untimed = o->untimed;
    }
    if (untimed && writer_is_open()) {
        char key[48], value[32];
        snprintf(key, sizeof(key), "device_timing.untimed.%u", o->backend_index);
        int n = snprintf(value, sizeof(value), "%llu", (unsigned long long) untimed);
        write_meta(key, value, (size_t) n);
    }
}

}  // namespace

void device_timing_forget(uint32_t backend_index, ggml_backend_t backend, void (*synchronize)(ggml_backend_t)) {
    if (backend_index >= (uint32_t) MAX_BACKENDS) {
        return;
    }
    if (Markers * k = g_markers[backend_index].exchange(nullptr)) {
        // The program's thread is freeing the backend: its queue may be waited on here.
        if (synchronize) {
            synchronize(backend);
        }
        poll_markers(k);
        {
            std::lock_guard<std::mutex> lock(k->m);
            k->untimed += k->tail - k->head;
        }
        write_untimed(k);
        g_n_markers--;
        // A poller that loaded the pointer before the exchange finds nothing pending once it
        // gets the lock, so it reads no freed memory; the small struct itself is left alive.
        std::lock_guard<std::mutex> lock(k->m);
        k->head = k->tail;
        g_api.buffer_free(k->dev_buf);
        g_api.buffer_free(k->host_buf);
    }
    Watcher * w;
    {
        std::lock_guard<std::mutex> lock(g_watchers_mutex);
        w = g_watchers[backend_index].exchange(nullptr);
    }
    if (!w) {
        return;
    }
    if (w->thread.joinable()) {
        {
            std::lock_guard<std::mutex> lock(w->m);
            w->stop = true;
        }
        w->cv.notify_all();
        w->thread.join();  // the pending operations complete before the backend goes
        for (int i = 0; i < w->n_free; i++) {
            w->event_free(w->dev, w->free_events[i]);
        }
    }
    write_untimed(w);
    delete w;
}

void device_timing_shutdown() {
    if (g_poller.joinable()) {
        g_poller_stop.store(true);
        g_poller.join();
    }
    for (int i = 0; i < MAX_BACKENDS; i++) {
        if (Markers * k = g_markers[i].load(std::memory_order_acquire)) {
            poll_markers(k);  // what has passed; the rest is counted untimed
            {
                std::lock_guard<std::mutex> lock(k->m);
                k->untimed += k->tail - k->head;
                k->head = k->tail;
            }
            write_untimed(k);
        }
    }
    for (int i = 0; i < MAX_BACKENDS; i++) {
        Watcher * w = g_watchers[i].load(std::memory_order_acquire);
        if (w && w->thread.joinable()) {
            write_untimed(w);
            {
                std::lock_guard<std::mutex> lock(w->m);
                w->abandon = true;
            }
            w->cv.notify_all();
            w->thread.detach();
        }
    }
}

}  // namespace ggml_trace
