// Event watcher: a pool of the device's events and a thread per backend that waits for them in
// order, so that the program's threads only record events and never wait on the device
// (device_watcher.h says for which backends).
#include "device_watcher.h"

#include <pthread.h>
#include <stdio.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

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

namespace {

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

}  // namespace

bool watcher_start(ggml_backend_t backend, uint32_t backend_index, const ggml_backend_i & orig) {
    Watcher * w = start_watcher(backend, backend_index, orig);
    if (!w) {
        return false;
    }
    g_watchers[backend_index].store(w, std::memory_order_release);
    return true;
}

void watcher_begin(uint32_t backend_index, ggml_backend_t backend, TimedOp & op) {
    Watcher * w = g_watchers[backend_index].load(std::memory_order_acquire);
    if (!w) {
        return;
    }
    bool begin = w->waited.exchange(false, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lock(w->m);
        if (w->n_free < (begin ? 2 : 1) || w->tail - w->head >= (uint64_t) RING || w->stop) {
            w->untimed++;
            return;
        }
        op.begin = begin ? w->free_events[--w->n_free] : nullptr;
        op.end = w->free_events[--w->n_free];
    }
    op.watcher = w;
    if (op.begin) {
        w->event_record(backend, op.begin);
    }
}

void watcher_end(TimedOp & op, ggml_backend_t backend, const CallRec & call) {
    Watcher * w = op.watcher;
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

void watcher_cancel(TimedOp & op) {
    Watcher * w = op.watcher;
    std::lock_guard<std::mutex> lock(w->m);
    if (op.begin) {
        w->free_events[w->n_free++] = op.begin;
        w->waited.store(true, std::memory_order_relaxed);  // the begin event was not used up
    }
    w->free_events[w->n_free++] = op.end;
    op.watcher = nullptr;
}

void watcher_waited(uint32_t backend_index) {
    if (Watcher * w = g_watchers[backend_index].load(std::memory_order_acquire)) {
        w->waited.store(true, std::memory_order_relaxed);
    }
}

uint64_t watcher_forget(uint32_t backend_index) {
    Watcher * w = g_watchers[backend_index].exchange(nullptr);
    if (!w) {
        return 0;
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
    uint64_t untimed;
    {
        std::lock_guard<std::mutex> lock(w->m);
        untimed = w->untimed;
    }
    delete w;
    return untimed;
}

uint64_t watcher_abandon(uint32_t backend_index) {
    Watcher * w = g_watchers[backend_index].load(std::memory_order_acquire);
    if (!w || !w->thread.joinable()) {
        return 0;
    }
    uint64_t untimed;
    {
        std::lock_guard<std::mutex> lock(w->m);
        untimed = w->untimed;
        w->abandon = true;
    }
    w->cv.notify_all();
    w->thread.detach();
    return untimed;
}

}  // namespace ggml_trace
