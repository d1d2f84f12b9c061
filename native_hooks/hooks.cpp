// The interposed entry points: ggml_backend_sched_*, ggml_backend_dev_init and
// ggml_backend_buffer_free (applications call them across the library boundary, so LD_PRELOAD can
// interpose them); the registration of each scheduler's backends, whose vtables are then hooked
// (vtable_hooks.h); the ggmltrace_* control API; and the entry points of device-side observers
// built as libraries of their own (observer_api.h). Start-up: startup.cpp.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "capture.h"
#include "delay.h"
#include "comm.h"
#include "cupti_mode.h"
#include "ggml_api.h"
#include "host_writes.h"
#include "meta.h"
#include "observer_api.h"
#include "registry.h"
#include "startup.h"
#include "trace_writer.h"
#include "vtable_hooks.h"

using namespace ggml_trace;

namespace {

// ---------------------------------------------------------------- schedulers

std::atomic<uint32_t> g_next_graph{0};

// Scheduler slots: CallRec.sched is a slot, one byte (0xff: outside any scheduler), so at most
// MAX_SCHEDS schedulers are traced alive at once. ggml_backend_sched_free gives its slot back for
// the next ggml_backend_sched_new: a program that makes and frees any number of schedulers in turn
// has every one traced. The loader tells a slot's successive schedulers apart by the sched_free
// records between them (docs/trace-format.md, "Scheduler slots").
const int MAX_SCHEDS = 255;
std::atomic<ggml_backend_sched_t> g_scheds[MAX_SCHEDS];
// A slot taken by a sched_new still registering its backends: matches no scheduler.
ggml_backend_sched_t const SLOT_CLAIMED = (ggml_backend_sched_t) (uintptr_t) 1;
std::atomic<bool> g_warned_full{false};

// Called on every scheduler entry point (once per graph compute, not per split): a scan of the
// slots, no lock.
// The slot of the scheduler this thread's ggml_backend_sched_new is making (-1: none): ggml's
// sched_new resets the scheduler it makes before returning it.
thread_local int t_new_slot = -1;

uint8_t sched_index(ggml_backend_sched_t sched) {
    for (int i = 0; i < MAX_SCHEDS; i++) {
        if (g_scheds[i].load(std::memory_order_acquire) == sched) {
            return (uint8_t) i;
        }
    }
    return t_new_slot >= 0 ? (uint8_t) t_new_slot : 0xff;
}

// The lowest free slot, now claimed (SLOT_CLAIMED), or -1 when MAX_SCHEDS schedulers are alive.
int claim_slot() {
    for (int i = 0; i < MAX_SCHEDS; i++) {
        ggml_backend_sched_t expect = nullptr;
        if (g_scheds[i].compare_exchange_strong(expect, SLOT_CLAIMED, std::memory_order_acq_rel)) {
            return i;
        }
    }
    return -1;
}

// ---------------------------------------------------------------- registration

void write_backend_record(BackendEntry & e, ggml_backend_t backend) {
    ggml_backend_dev_t dev = g_api.backend_get_device(backend);
    // interned before the slot is taken: interning writes STRING records, and a fill writes none
    uint64_t name = intern(g_api.backend_name(backend));
    uint64_t device_name = dev ? intern(g_api.dev_name(dev)) : 0;
    uint64_t device_description = dev ? intern(g_api.dev_description(dev)) : 0;
    emit_kept_record<BackendRec>(REC_BACKEND, [&](BackendRec & r) {
        r.backend = e.index;
        r.ptr = (uint64_t) (uintptr_t) backend;
        r.device_ptr = (uint64_t) (uintptr_t) dev;
        r.name = name;
        if (dev) {
            r.device_name = device_name;
            r.device_description = device_description;
            r.device_type = (uint8_t) g_api.dev_type(dev);
            r.has_events = dev->iface.event_new != nullptr;
        }
        r.has_async = has_async(e.orig);
        r.t = now_ticks();
    });
}

// Checks every struct first, then patches: all or nothing.
bool register_backends(ggml_backend_t * backends, ggml_backend_buffer_type_t * bufts, int n) {
    char why[256];
    for (int i = 0; i < n; i++) {
        ggml_backend_buffer_type_t buft = bufts ? bufts[i] : g_api.backend_get_default_buffer_type(backends[i]);
        if (!check_backend_layout(backends[i], why, sizeof(why)) ||
            (buft && !check_buffer_type_layout(buft, why, sizeof(why)))) {
            disable(why);
            return false;
        }
    }
    // backends seen for the first time, with their own vtables: their device-side delays are sized
    // after the lock is released (sizing allocates through vtables the hooks may have patched)
    struct Fresh {
        ggml_backend_t backend;
        uint32_t index;
        ggml_backend_i own;
    };
    std::vector<Fresh> fresh;
    {
        std::lock_guard<std::mutex> lock(g_patch_mutex);
        for (int i = 0; i < n; i++) {
            ggml_backend_t b = backends[i];
            bool is_new;
            BackendEntry * e = add_backend(b, &is_new);
            if (!e) {
                fprintf(stderr, "ggml-trace: too many backends; backend %s is not traced\n", g_api.backend_name(b));
                continue;
            }
            e->refs++;
            if (is_new) {
                fresh.push_back({b, e->index, b->iface});
                patch_backend(b);
                write_backend_record(*e, b);
            }
            ggml_backend_dev_t dev = b->device;
            if (dev) {
                DeviceEntry * d = add_device(dev, e->index, &is_new);
                if (d) {
                    d->refs++;
                    if (is_new) {
                        patch_device(dev);
                    }
                }
            }
            ggml_backend_buffer_type_t buft = bufts ? bufts[i] : g_api.backend_get_default_buffer_type(b);
            if (buft) {
                BuftEntry * t = add_buft(buft, &is_new);
                if (t) {
                    t->refs++;
                    if (is_new) {
                        patch_buffer_type(buft);
                    }
                }
            }
        }
    }
    for (const Fresh & f : fresh) {
        delay_prepare(f.backend, f.index, f.own);  // idle still: nothing of the program's is queued on it yet
    }
    return true;
}

void unregister_backends(ggml_backend_t * backends, ggml_backend_buffer_type_t * bufts, int n) {
    std::lock_guard<std::mutex> lock(g_patch_mutex);
    for (int i = 0; i < n; i++) {
        ggml_backend_t b = backends[i];
        BackendEntry * e = find_backend(b);
        if (e && --e->refs == 0) {
            b->iface = e->orig;
            e->backend.store(nullptr, std::memory_order_release);
        }
        DeviceEntry * d = b->device ? find_device(b->device) : nullptr;
        if (d && --d->refs == 0) {
            b->device->iface = d->orig;
            d->device.store(nullptr, std::memory_order_release);
        }
        BuftEntry * t = bufts[i] ? find_buft(bufts[i]) : nullptr;
        if (t && --t->refs == 0) {
            bufts[i]->iface = t->orig;
            t->buft.store(nullptr, std::memory_order_release);
        }
    }
    // Buffer vtables stay patched (the hooks pass calls straight through when not capturing): ggml
    // offers no safe way to know which of those structs are still alive.
}

// The backends and buffer types of each scheduler, to undo the patches at sched_free.
struct SchedObjects {
    int n;
    ggml_backend_t backends[MAX_BACKENDS];
    ggml_backend_buffer_type_t bufts[MAX_BACKENDS];
};
SchedObjects g_sched_objects[MAX_SCHEDS];

struct ScopedGraph {  // marks the calling thread as inside one scheduler graph compute
    ThreadContext saved;
    bool owner;
    ScopedGraph(ggml_backend_sched_t sched) : saved(thread_context()), owner(saved.active != sched) {
        if (owner) {
            ThreadContext & t = thread_context();
            t.active = sched;
            t.sched = sched_index(sched);
            t.graph = g_next_graph.fetch_add(1);
            t.split = 0;
        }
    }
    ~ScopedGraph() {
        if (owner) {
            thread_context() = saved;
        }
    }
};

}  // namespace

// ---------------------------------------------------------------- interposed entry points

extern "C" {

ggml_backend_sched_t ggml_backend_sched_new(ggml_backend_t * backends, ggml_backend_buffer_type_t * bufts, int n_backends,
                                            size_t graph_size, bool parallel, bool op_offload) {
    bool on = active();
    if (!g_api.sched_new) {
        fprintf(stderr, "ggml-trace: cannot find the real ggml_backend_sched_new\n");
        abort();
    }
    if (on) {
        comm_patch_registries();  // programs that make their backends without ggml_backend_dev_init
    }
    Call c(K_SCHED_NEW);
    // The slot is taken first, so that the calls ggml's sched_new makes on the new scheduler have it.
    int idx = on ? claim_slot() : -1;
    if (on && idx < 0 && !g_warned_full.exchange(true)) {
        fprintf(stderr, "ggml-trace: more than %d schedulers alive at once; the next ones are not traced "
                        "until one is freed\n", MAX_SCHEDS);
    }
    t_new_slot = idx;
    ggml_backend_sched_t sched = g_api.sched_new(backends, bufts, n_backends, graph_size, parallel, op_offload);
    t_new_slot = -1;
    if (!on || !sched || idx < 0) {
        if (idx >= 0) {
            g_scheds[idx].store(nullptr, std::memory_order_release);
        }
        return sched;
    }
    SchedObjects & so = g_sched_objects[idx];  // the slot's own until it is given back
    so.n = n_backends;
    for (int i = 0; i < n_backends; i++) {
        so.backends[i] = backends[i];
        so.bufts[i] = bufts ? bufts[i] : g_api.backend_get_default_buffer_type(backends[i]);
    }
    so.n = meta_expand(so.backends, so.bufts, n_backends, MAX_BACKENDS);
    if (!register_backends(so.backends, so.bufts, so.n)) {
        g_scheds[idx].store(nullptr, std::memory_order_release);
        return sched;
    }
    g_scheds[idx].store(sched, std::memory_order_release);
    if (capturing()) {
        c.r.sched = (uint8_t) idx;
        c.r.obj = (uint64_t) (uintptr_t) sched;
        c.r.arg = (uint64_t) n_backends | ((uint64_t) g_api.sched_get_n_copies(sched) << 32);
        c.r.flags = parallel ? CALL_SCHED_PARALLEL : 0;
        c.commit();
    }
    return sched;
}

void ggml_backend_sched_free(ggml_backend_sched_t sched) {
    active();
    uint8_t idx = sched ? sched_index(sched) : 0xff;
    if (idx == 0xff) {
        return g_api.sched_free(sched);
    }
    host_writes_forget();
    Call c(K_SCHED_FREE);
    c.r.sched = idx;
    g_api.sched_free(sched);
    cupti_flush();  // while CUDA is still up: programs free their schedulers before exiting
    // Written even while ggmltrace_stop has paused capture, and ended (t_end) before the slot is
    // given back: the loader tells the slot's schedulers apart by these records, so everything
    // the next scheduler on this slot does must come after this one's t_end.
    if (g_capture_state.load() == CaptureState::ACTIVE) {
        c.commit();
        SchedObjects & so = g_sched_objects[idx];
        unregister_backends(so.backends, so.bufts, so.n);
    }
    g_scheds[idx].store(nullptr, std::memory_order_release);
}

enum ggml_status ggml_backend_sched_graph_compute_async(ggml_backend_sched_t sched, ggml_cgraph * graph) {
    if (!active() || !capturing() || thread_context().active == sched) {
        return g_api.sched_graph_compute_async(sched, graph);
    }
    host_writes_before_compute(graph);  // inputs written since the last compute, before this one
    maybe_clock_sync();
    ScopedGraph scope(sched);
    Call c(K_SCHED_GRAPH_COMPUTE);
    enum ggml_status st = g_api.sched_graph_compute_async(sched, graph);
    c.r.obj = (uint64_t) (uintptr_t) graph;
    c.r.arg = (uint64_t) g_api.sched_get_n_splits(sched);
    c.r.flags = st == GGML_STATUS_SUCCESS ? 0 : CALL_FAILED;
    c.commit();
    host_writes_after_compute(graph);
    return st;
}

enum ggml_status ggml_backend_sched_graph_compute(ggml_backend_sched_t sched, ggml_cgraph * graph) {
    // ggml implements this as compute_async + synchronize; that inner call may not come back
    // through us (a call inside the same library), so the scope is opened here too.
    if (!active() || !capturing() || thread_context().active == sched) {
        return g_api.sched_graph_compute(sched, graph);
    }
    host_writes_before_compute(graph);  // inputs written since the last compute, before this one
    maybe_clock_sync();
    ScopedGraph scope(sched);
    Call c(K_SCHED_GRAPH_COMPUTE);
    enum ggml_status st = g_api.sched_graph_compute(sched, graph);
    c.r.obj = (uint64_t) (uintptr_t) graph;
    c.r.arg = (uint64_t) g_api.sched_get_n_splits(sched);
    c.r.flags = (st == GGML_STATUS_SUCCESS ? 0 : CALL_FAILED) | CALL_SYNC_COMPUTE;
    c.commit();
    host_writes_after_compute(graph);
    return st;
}

bool ggml_backend_sched_alloc_graph(ggml_backend_sched_t sched, ggml_cgraph * graph) {
    if (!active() || !capturing()) {
        return g_api.sched_alloc_graph(sched, graph);
    }
    host_writes_forget();  // the scheduler may reallocate its buffers
    Call c(K_SCHED_ALLOC_GRAPH);
    c.r.sched = sched_index(sched);
    bool ok = g_api.sched_alloc_graph(sched, graph);
    c.r.obj = (uint64_t) (uintptr_t) graph;
    c.r.arg = (uint64_t) g_api.graph_n_nodes(graph);
    c.r.flags = ok ? 0 : CALL_FAILED;
    if (ok) {
        emit_placements(c.id(), graph);
    }
    c.commit();
    return ok;
}

bool ggml_backend_sched_reserve(ggml_backend_sched_t sched, ggml_cgraph * graph) {
    if (!active() || !capturing()) {
        return g_api.sched_reserve(sched, graph);
    }
    host_writes_forget();  // the scheduler may reallocate its buffers
    Call c(K_SCHED_RESERVE);
    c.r.sched = sched_index(sched);
    bool ok = g_api.sched_reserve(sched, graph);
    c.r.arg = (uint64_t) g_api.graph_n_nodes(graph);
    c.r.flags = ok ? 0 : CALL_FAILED;
    c.commit();
    return ok;
}

void ggml_backend_sched_synchronize(ggml_backend_sched_t sched) {
    if (!active() || !capturing()) {
        return g_api.sched_synchronize(sched);
    }
    host_writes_before_wait();
    Call c(K_SCHED_SYNCHRONIZE);
    c.r.sched = sched_index(sched);
    g_api.sched_synchronize(sched);
    c.commit();
    host_writes_after_wait();
}

void ggml_backend_sched_reset(ggml_backend_sched_t sched) {
    if (!active() || !capturing()) {
        return g_api.sched_reset(sched);
    }
    host_writes_forget();  // the scheduler may reallocate its buffers
    Call c(K_SCHED_RESET);
    c.r.sched = sched_index(sched);
    g_api.sched_reset(sched);
    c.commit();
}

// Backends made outside a scheduler (ggml-rpc-server's, for one) are traced from their creation.
ggml_backend_t ggml_backend_dev_init(ggml_backend_dev_t device, const char * params) {
    bool on = active();
    if (on) {
        comm_patch_registries();  // before a meta backend's communicator is made
    }
    ggml_backend_t backend = g_api.dev_init(device, params);
    if (on && backend) {
        // a meta backend with its simple backends: its buffers are filled before any scheduler exists
        ggml_backend_t all[1 + 16];
        ggml_backend_buffer_type_t bufts[1 + 16];
        all[0] = backend;
        bufts[0] = g_api.backend_get_default_buffer_type(backend);
        register_backends(all, bufts, meta_expand(all, bufts, 1, 1 + 16));
    }
    return backend;
}

void ggml_backend_buffer_free(ggml_backend_buffer_t buffer) {
    if (!active() || !buffer) {
        return g_api.buffer_free(buffer);
    }
    bool known;
    {
        std::lock_guard<std::mutex> lock(g_patch_mutex);
        known = find_buffer(buffer) != nullptr;
        remove_buffer(buffer);
    }
    if (known && capturing()) {
        host_writes_forget();
        Call c(K_BUF_FREE);
        c.r.backend = backend_of_buffer(buffer);
        c.r.obj = (uint64_t) (uintptr_t) buffer;
        c.r.arg = buffer->size;
        emit_kept_record<BufferRec>(REC_BUFFER, [&](BufferRec & r) {
            r.event = BUF_FREED;
            r.thread = thread_index();
            r.t = now_ticks();
            r.ptr = (uint64_t) (uintptr_t) buffer;
            r.size = buffer->size;
        });
        c.commit();
    }
    g_api.buffer_free(buffer);
}

// ---------------------------------------------------------------- control API (ctypes)

int ggmltrace_active(void) { return writer_ready() ? 1 : 0; }

void ggmltrace_start(void) { g_capture_on.store(true); }

void ggmltrace_stop(void) { g_capture_on.store(false); }

const char * ggmltrace_output_path(void) { return writer_ready() ? writer_path() : ""; }

uint64_t ggmltrace_now(void) { return now_ticks(); }

void ggmltrace_mark(const char * name) {
    if (!user_capturing()) {
        return;
    }
    Call c(K_USER_MARK);
    c.r.obj = intern(name);
    c.commit();
}

void ggmltrace_range(const char * name, uint64_t t_begin) {
    if (!user_capturing()) {
        return;
    }
    Call c(K_USER_RANGE);
    c.r.t_begin = t_begin;
    c.r.obj = intern(name);
    c.commit();
}

void ggmltrace_flush(void) {
    if (writer_ready()) {
        writer_flush();
    }
}

void ggmltrace_close(void) { writer_close(); }

// ---------------------------------------------------------------- observers in other libraries

uint32_t ggmltrace_backend_index(struct ggml_backend * backend) {
    BackendEntry * e = find_backend(backend);
    return e ? e->index : NONE32;
}

void ggmltrace_current_call(uint64_t * call_id, uint32_t * graph, int32_t * split) {
    const CallContext & c = current_call();
    *call_id = c.call_id;
    *graph = c.graph;
    *split = c.split;
}

void ggmltrace_device_exec(uint8_t source, uint32_t backend, uint32_t graph, int32_t split, uint64_t call_id,
                           uint64_t t_begin, uint64_t t_end, uint64_t arg) {
    write_device_exec(source, 0, backend, graph, split, call_id, t_begin, t_end, arg);
}

}  // extern "C"
