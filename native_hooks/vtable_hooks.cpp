// The vtable hooks, from one table (at the end of this file). A row names a vtable entry, the call
// kind it records, the function that describes the call (its object and size, the bytes it reads
// and writes) and options (how a result is judged, whether it is delayed and timed on a queue).
// One template, Hook, makes every wrapper from its row:
//
//   find the original vtable -> pass straight through when not capturing -> open the call (a
//   meta backend's as a parent) -> delay and time it on its queue -> make the original call ->
//   judge its result -> describe it -> commit.
//
// Adding a hook is one row and, where no describe function fits yet, one describe function.
#include "vtable_hooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>
#include <optional>
#include <type_traits>

#include "capture.h"
#include "cuda_calls.h"
#include "delay.h"
#include "device_timing.h"
#include "ggml_api.h"
#include "host_writes.h"
#include "meta.h"
#include "registry.h"
#include "trace_writer.h"

namespace ggml_trace {

namespace {

// ---------------------------------------------------------------- options of a row

enum : unsigned {
    FAILS = 1 << 0,      // a false, null or error result is recorded CALL_FAILED
    DECLINES = 1 << 1,   // a false result is CALL_DECLINED: nothing was enqueued, the caller falls back
    QUEUED = 1 << 2,     // enqueues work on a backend's queue: may be delayed, is timed there
    DELAYED = 1 << 3,    // may be delayed (GGML_TRACE_DELAY) but enqueues nothing to time
    DRAINS = 1 << 4,     // returns once the queue drained: the device markers can be read
    WAITS = 1 << 5,      // makes the queue wait on an event: the next operation's start is measured
    PEER_COPY = 1 << 6,  // cpy_tensor_async(src_backend, dst_backend, src, dst): the destination's
                         // vtable, but run on the source's queue when that one is asynchronous too
};

// ---------------------------------------------------------------- the original vtables

template <typename I> struct Saved {
    const I & orig;
    BackendEntry * backend = nullptr;  // a backend's entry (its trace index, for delays and timing)
};

// An object is registered before its vtable is patched, so a hook always finds its entry.
template <typename E> E & known(E * entry, const char * what, const void * object) {
    if (!entry) {
        fprintf(stderr, "ggml-trace: internal error: %s %p has no saved vtable\n", what, object);
        abort();
    }
    return *entry;
}

BackendEntry & entry_of(ggml_backend_t backend) { return known(find_backend(backend), "backend", backend); }
DeviceEntry & entry_of(ggml_backend_dev_t dev) { return known(find_device(dev), "device", dev); }

Saved<ggml_backend_buffer_i> saved(ggml_backend_buffer_t buffer) {
    return {known(find_buffer(buffer), "buffer", buffer)};
}
Saved<ggml_backend_i> saved(ggml_backend_t backend) {
    BackendEntry & e = entry_of(backend);
    return {e.orig, &e};
}
Saved<ggml_backend_device_i> saved(ggml_backend_dev_t dev) { return {entry_of(dev).orig}; }
Saved<ggml_backend_buffer_type_i> saved(ggml_backend_buffer_type_t buft) {
    return {known(find_buft(buft), "buffer type", buft).orig};
}

// The trace index of the backend a call belongs to (looked up only once capture is on).
uint32_t trace_backend(ggml_backend_buffer_t buffer, const Saved<ggml_backend_buffer_i> &) {
    return backend_of_buffer(buffer);
}
uint32_t trace_backend(ggml_backend_t, const Saved<ggml_backend_i> & s) { return s.backend->index; }
uint32_t trace_backend(ggml_backend_dev_t dev, const Saved<ggml_backend_device_i> &) { return entry_of(dev).backend; }
uint32_t trace_backend(ggml_backend_buffer_type_t buft, const Saved<ggml_backend_buffer_type_i> &) {
    return backend_index_of_device(buft->device);
}

// A call on a meta backend or a buffer of its device is the parent of the calls it makes.
void open_meta(std::optional<MetaParent> & m, uint64_t call_id, ggml_backend_t backend) { m.emplace(call_id, backend); }
void open_meta(std::optional<MetaParent> & m, uint64_t call_id, ggml_backend_buffer_t b) { m.emplace(call_id, b); }
template <typename O> void open_meta(std::optional<MetaParent> &, uint64_t, O) {}

// ---------------------------------------------------------------- judging results

bool succeeded(bool ok) { return ok; }
bool succeeded(enum ggml_status st) { return st == GGML_STATUS_SUCCESS; }
template <typename T> bool succeeded(T * p) { return p != nullptr; }
uint64_t as_integer(bool ok) { return ok; }
uint64_t as_integer(enum ggml_status st) { return (uint64_t) (int64_t) st; }
template <typename T> uint64_t as_integer(T * p) { return (uint64_t) (uintptr_t) p; }

// ---------------------------------------------------------------- what the delay rules match

// The first graph among a call's arguments, and its first and second tensors.
inline ggml_cgraph * as_graph(ggml_cgraph * g) { return g; }
template <typename T> ggml_cgraph * as_graph(T) { return nullptr; }
template <typename... A> ggml_cgraph * graph_in(A... a) {
    ggml_cgraph * g = nullptr;
    ((g = g ? g : as_graph(a)), ...);
    return g;
}
template <typename T> constexpr bool is_tensor = std::is_same_v<T, ggml_tensor *> || std::is_same_v<T, const ggml_tensor *>;
template <int N, typename... A> const ggml_tensor * tensor_in(A... a) {
    const ggml_tensor * found = nullptr;
    int seen = 0;
    auto look = [&](auto x) {
        if constexpr (is_tensor<decltype(x)>) {
            if (seen++ == N) found = x;
        }
    };
    (look(a), ...);
    (void) look;  // a call without arguments has no tensors
    return found;
}

template <typename... A> ggml_backend_t first_of(ggml_backend_t b, A...) { return b; }

// ---------------------------------------------------------------- the wrapper

template <auto Field, uint8_t Kind, auto Describe, unsigned Options> struct Hook;

template <typename I, typename R, typename O, typename... A, R (*I::*Field)(O, A...), uint8_t Kind, auto Describe,
          unsigned Options>
struct Hook<Field, Kind, Describe, Options> {
    static R call(O obj, A... a) {
        // the object whose vtable was called: the first argument, or a peer copy's destination
        O owner = obj;
        if constexpr ((Options & PEER_COPY) != 0) owner = first_of(a...);
        Saved<I> s = saved(owner);
        R (*orig)(O, A...) = s.orig.*Field;
        if (!capturing() || t_own_calls) {
            return orig(obj, a...);
        }
        if constexpr ((Options & DRAINS) != 0) host_writes_before_wait();
        Call c(Kind);
        c.nested = meta_nested();  // before this call opens a parent of its own
        std::optional<MetaParent> meta;
        open_meta(meta, c.id(), owner);
        Queue q = queue(s, obj, owner);
        TimedOp timed;
        if constexpr ((Options & (QUEUED | DELAYED)) != 0) {
            if (delay_on()) {
                delay_before(c.r, q.backend, q.entry->index, q.entry->orig, graph_in(a...), tensor_in<0>(a...),
                             tensor_in<1>(a...), (Options & PEER_COPY) ? owner : nullptr,
                             (Options & PEER_COPY) ? obj : nullptr);
            }
        }
        if constexpr ((Options & QUEUED) != 0) {
            timed = device_timing_begin(q.backend, q.entry->index, q.entry->orig);
        }
        SplitGraphScope split_graph(graph_in(a...));  // CUDA launches meanwhile name its nodes
        if constexpr (std::is_void_v<R>) {
            orig(obj, a...);
            finish(c, s, timed, q, owner, obj, a...);
        } else {
            R result = orig(obj, a...);
            c.ok = succeeded(result);
            c.result = as_integer(result);
            finish(c, s, timed, q, owner, obj, a...);
            return result;
        }
    }

  private:
    struct Queue {
        ggml_backend_t backend = nullptr;
        BackendEntry * entry = nullptr;
    };

    // The queue the work goes to: the backend's own, or for a copy between two asynchronous
    // backends the source's (CUDA issues the peer copy on the source stream and makes the
    // destination wait after it): it is delayed and timed there, as the race model orders it
    // (docs/trace-format.md, device_exec).
    static Queue queue(const Saved<I> & s, O obj, O owner) {
        if constexpr (std::is_same_v<O, ggml_backend_t>) {
            if constexpr ((Options & PEER_COPY) != 0) {
                BackendEntry * src = find_backend(obj);
                if (src && src != s.backend && has_async(src->orig)) return {obj, src};
            }
            return {owner, s.backend};
        } else {
            return {};
        }
    }

    static void finish(Call & c, const Saved<I> & s, TimedOp & timed, const Queue & q, O owner, O obj, A... a) {
        if constexpr ((Options & QUEUED) != 0) {
            if (c.ok || !(Options & DECLINES)) {
                device_timing_end(timed, q.backend, c.r);
            } else {
                device_timing_cancel(timed);  // a declined call enqueued nothing
            }
        }
        if constexpr ((Options & DRAINS) != 0) device_timing_poll();
        if constexpr ((Options & WAITS) != 0) device_timing_waited(q.entry->index);
        c.r.backend = trace_backend(owner, s);
        if (!c.ok) {
            c.r.flags = (Options & DECLINES) ? CALL_DECLINED : (Options & FAILS) ? CALL_FAILED : 0;
        }
        Describe(c, obj, a...);
        c.commit();
        if constexpr ((Options & DRAINS) != 0) host_writes_after_wait();  // later stores come after the wait
    }
};

// ---------------------------------------------------------------- describe functions
//
// Called after the original call returned, before the record is committed: set the record's
// object and size and emit what the call read and wrote.

uint64_t ptr(const void * p) { return (uint64_t) (uintptr_t) p; }

// Bytes spanned by a strided 2D copy of n rows of `size` bytes.
size_t span_2d(size_t size, size_t n_copies, size_t stride) { return n_copies ? (n_copies - 1) * stride + size : 0; }

// A buffer's set_tensor is the program's write into the buffer, seen (host_writes.h).
template <typename O> void note_host_write(const ggml_tensor * t) {
    if constexpr (std::is_same_v<O, ggml_backend_buffer_t>) host_writes_noted(t);
}

template <typename O> void set_tensor(Call & c, O, ggml_tensor * t, const void * data, size_t offset, size_t size) {
    note_host_write<O>(t);
    c.r.obj = ptr(t);
    c.r.arg = size;
    emit_host(ACC_READ, c.id(), data, size);
    emit_tensor(REC_ACCESS, ACC_WRITE, c.id(), t, 0, NONE32, offset, size);
}

template <typename O> void get_tensor(Call & c, O, const ggml_tensor * t, void * data, size_t offset, size_t size) {
    c.r.obj = ptr(t);
    c.r.arg = size;
    emit_tensor(REC_ACCESS, ACC_READ, c.id(), t, 0, NONE32, offset, size);
    emit_host(ACC_WRITE, c.id(), data, size);
}

template <typename O>
void set_tensor_2d(Call & c, O, ggml_tensor * t, const void * data, size_t offset, size_t size, size_t n_copies,
                   size_t stride_tensor, size_t stride_data) {
    note_host_write<O>(t);
    c.r.obj = ptr(t);
    c.r.arg = size * n_copies;
    emit_host(ACC_READ, c.id(), data, span_2d(size, n_copies, stride_data));
    emit_tensor(REC_ACCESS, ACC_WRITE, c.id(), t, 0, NONE32, offset, span_2d(size, n_copies, stride_tensor));
}

template <typename O>
void get_tensor_2d(Call & c, O, const ggml_tensor * t, void * data, size_t offset, size_t size, size_t n_copies,
                   size_t stride_tensor, size_t stride_data) {
    c.r.obj = ptr(t);
    c.r.arg = size * n_copies;
    emit_tensor(REC_ACCESS, ACC_READ, c.id(), t, 0, NONE32, offset, span_2d(size, n_copies, stride_tensor));
    emit_host(ACC_WRITE, c.id(), data, span_2d(size, n_copies, stride_data));
}

void memset_tensor(Call & c, ggml_backend_buffer_t, ggml_tensor * t, uint8_t value, size_t offset, size_t size) {
    host_writes_noted(t);
    c.r.obj = ptr(t);
    c.r.arg = size;
    emit_tensor(REC_ACCESS, ACC_WRITE, c.id(), t, 0, NONE32, offset, size);
}

void cpy_tensor(Call & c, ggml_backend_buffer_t, const ggml_tensor * src, ggml_tensor * dst) {
    c.r.backend2 = src->buffer ? backend_of_buffer(src->buffer) : NONE32;
    c.r.obj = ptr(dst);
    c.r.arg = g_api.nbytes(src);
    if (c.ok) {
        emit_tensor(REC_ACCESS, ACC_READ, c.id(), src, 0, NONE32);
        emit_tensor(REC_ACCESS, ACC_WRITE, c.id(), dst, 0, NONE32);
    }
}

void cpy_tensor_async(Call & c, ggml_backend_t src_backend, ggml_backend_t, const ggml_tensor * src, ggml_tensor * dst) {
    BackendEntry * se = find_backend(src_backend);
    c.r.backend2 = se ? se->index : NONE32;
    c.r.obj = ptr(dst);
    c.r.arg = g_api.nbytes(src);
    if (c.ok) {
        emit_tensor(REC_ACCESS, ACC_READ, c.id(), src, 0, NONE32);
        emit_tensor(REC_ACCESS, ACC_WRITE, c.id(), dst, 0, NONE32);
    }
}

void clear(Call & c, ggml_backend_buffer_t buffer, uint8_t value) {
    c.r.obj = ptr(buffer);
    c.r.arg = buffer->size;
    emit_range(REC_ACCESS, ACC_WRITE, c.id(), buffer, 0, buffer->size, 0, 0, NONE32, NONE32);
}

void alloc_buffer(Call & c, ggml_backend_buffer_type_t, size_t size) {
    ggml_backend_buffer_t buffer = (ggml_backend_buffer_t) (uintptr_t) c.result;
    c.r.obj = c.result;
    c.r.arg = size;
    if (buffer) {
        see_buffer(buffer, BUF_ALLOCATED);
        meta_note_alloc(buffer);
    }
}

void graph_compute(Call & c, ggml_backend_t, ggml_cgraph * graph) {
    if (c.nested) {
        meta_note_compute(graph);  // a meta backend's subgraph: its role names its temporaries
    }
    c.r.obj = ptr(graph);
    c.r.arg = (uint64_t) g_api.graph_n_nodes(graph);
    // every node's reads, for the order inside the split: only where the split issued its own work
    // (a CUDA graph's replay is judged by its capture, whose reads are the same)
    emit_split_accesses(c.id(), graph, cuda_calls_active() && cuda_split_issued_work());
    ThreadContext & t = thread_context();
    if (t.split >= 0 && !c.nested) {
        t.split++;  // the next split of this scheduler graph (this record already holds its own)
    }
}

template <typename O> void event_call(Call & c, O, ggml_backend_event_t event) { c.r.obj = ptr(event); }
void event_new(Call & c, ggml_backend_dev_t) { c.r.obj = c.result; }
void synchronize(Call &, ggml_backend_t) {}

// ---------------------------------------------------------------- the table

#define BUFFER(field) &ggml_backend_buffer_i::field
#define BACKEND(field) &ggml_backend_i::field
#define DEVICE(field) &ggml_backend_device_i::field
#define BUFFER_TYPE(field) &ggml_backend_buffer_type_i::field
using B = ggml_backend_buffer_t;
using Q = ggml_backend_t;

// Patches one vtable entry, when the object implements it, with the hook its row makes.
template <auto Field, uint8_t Kind, auto Describe, unsigned Options = 0, typename I> void row(I & vtable) {
    if (vtable.*Field) vtable.*Field = &Hook<Field, Kind, Describe, Options>::call;
}

// `free` is not on the table: buffers are freed through the exported ggml_backend_buffer_free
// (hooks.cpp), and backends recognise their own buffers by comparing it (CUDA, RPC, Metal).
void (*const BUFFER_HOOKS[])(ggml_backend_buffer_i &) = {
    //  field                   call kind               describe             options
    row<BUFFER(set_tensor),     K_BUF_SET_TENSOR,       set_tensor<B>>,
    row<BUFFER(get_tensor),     K_BUF_GET_TENSOR,       get_tensor<B>>,
    row<BUFFER(set_tensor_2d),  K_BUF_SET_TENSOR_2D,    set_tensor_2d<B>>,
    row<BUFFER(get_tensor_2d),  K_BUF_GET_TENSOR_2D,    get_tensor_2d<B>>,
    row<BUFFER(memset_tensor),  K_BUF_MEMSET_TENSOR,    memset_tensor>,
    row<BUFFER(cpy_tensor),     K_BUF_CPY_TENSOR,       cpy_tensor,          DECLINES>,
    row<BUFFER(clear),          K_BUF_CLEAR,            clear>,
};

void (*const BACKEND_HOOKS[])(ggml_backend_i &) = {
    row<BACKEND(graph_compute),       K_GRAPH_COMPUTE,       graph_compute,     FAILS | QUEUED>,
    row<BACKEND(cpy_tensor_async),    K_CPY_TENSOR_ASYNC,    cpy_tensor_async,  DECLINES | QUEUED | PEER_COPY>,
    row<BACKEND(set_tensor_async),    K_SET_TENSOR_ASYNC,    set_tensor<Q>,     QUEUED>,
    row<BACKEND(get_tensor_async),    K_GET_TENSOR_ASYNC,    get_tensor<Q>,     QUEUED>,
#ifdef GGML_TRACE_HAS_2D_ASYNC
    row<BACKEND(set_tensor_2d_async), K_SET_TENSOR_2D_ASYNC, set_tensor_2d<Q>,  QUEUED>,
    row<BACKEND(get_tensor_2d_async), K_GET_TENSOR_2D_ASYNC, get_tensor_2d<Q>,  QUEUED>,
#endif
    row<BACKEND(synchronize),         K_SYNCHRONIZE,         synchronize,       DELAYED | DRAINS>,
    row<BACKEND(event_record),        K_EVENT_RECORD,        event_call<Q>,     DELAYED>,
    row<BACKEND(event_wait),          K_EVENT_WAIT,          event_call<Q>,     DELAYED | WAITS>,
};

void (*const DEVICE_HOOKS[])(ggml_backend_device_i &) = {
    row<DEVICE(event_new),         K_EVENT_NEW,         event_new>,
    row<DEVICE(event_free),        K_EVENT_FREE,        event_call<ggml_backend_dev_t>>,
    row<DEVICE(event_synchronize), K_EVENT_SYNCHRONIZE, event_call<ggml_backend_dev_t>, DRAINS>,
};

void (*const BUFFER_TYPE_HOOKS[])(ggml_backend_buffer_type_i &) = {
    row<BUFFER_TYPE(alloc_buffer), K_BUF_ALLOC, alloc_buffer, FAILS>,
};

// How a buffer is recognised as ours: the set_tensor that the table puts in a patched vtable.
decltype(ggml_backend_buffer_i::set_tensor) table_set_tensor() {
    ggml_backend_buffer_i probe;
    memset(&probe, 0, sizeof(probe));
    probe.set_tensor = [](ggml_backend_buffer_t, ggml_tensor *, const void *, size_t, size_t) {};
    for (auto patch : BUFFER_HOOKS) patch(probe);
    return probe.set_tensor;
}
const auto BUFFER_SET_TENSOR_HOOK = table_set_tensor();

// ---------------------------------------------------------------- buffers

void write_buffer_record(ggml_backend_buffer_t buffer, uint8_t event) {
    ggml_backend_buffer_type_t buft = buffer->buft;
    uint64_t name = buft ? intern(g_api.buft_name(buft)) : 0;
    emit_kept_record<BufferRec>(REC_BUFFER, [&](BufferRec & r) {
        r.event = event;
        r.usage = (uint8_t) buffer->usage;
        r.is_host = buft ? g_api.buft_is_host(buft) : 0;
        r.thread = thread_index();
        r.t = now_ticks();
        r.ptr = ptr(buffer);
        r.base = ptr(g_api.buffer_get_base(buffer));
        r.size = buffer->size;
        r.buft_name = name;
        r.device_ptr = buft ? ptr(buft->device) : 0;
    });
}

// A buffer whose struct was freed without our seeing it (and whose address now holds another
// buffer) still has an entry but not our vtable.
bool is_patched(ggml_backend_buffer_t buffer, const ggml_backend_buffer_i * orig) {
    return orig && (orig->set_tensor == nullptr || buffer->iface.set_tensor == BUFFER_SET_TENSOR_HOOK);
}

// The backend struct is about to be deleted: forget it so that nothing writes into it later.
void backend_free_hook(ggml_backend_t backend) {
    void (*orig_free)(ggml_backend_t);
    device_timing_forget(entry_of(backend).index, backend, entry_of(backend).orig.synchronize);
    {
        std::lock_guard<std::mutex> lock(g_patch_mutex);
        BackendEntry & e = entry_of(backend);
        orig_free = e.orig.free;
        backend->iface = e.orig;
        e.backend.store(nullptr, std::memory_order_release);
    }
    orig_free(backend);
}

}  // namespace

uint32_t backend_of_buffer(ggml_backend_buffer_t buffer) {
    return buffer->buft ? backend_index_of_device(buffer->buft->device) : NONE32;
}

bool has_async(const ggml_backend_i & f) { return f.cpy_tensor_async || f.set_tensor_async || f.get_tensor_async; }

bool buffer_hooked(ggml_backend_buffer_t buffer) { return buffer->iface.set_tensor == BUFFER_SET_TENSOR_HOOK; }

void see_buffer(ggml_backend_buffer_t buffer, uint8_t event) {
    if (is_patched(buffer, find_buffer(buffer))) {
        return;
    }
    std::lock_guard<std::mutex> lock(g_patch_mutex);
    const ggml_backend_buffer_i * known = find_buffer(buffer);
    if (is_patched(buffer, known)) {
        return;
    }
    if (known) {
        remove_buffer(buffer);
    }
    char why[256];
    if (!check_buffer_layout(buffer, why, sizeof(why))) {
        disable(why);
        return;
    }
    if (!add_buffer(buffer)) {
        return;  // table full: leave this buffer untraced rather than patch without a way back
    }
    for (auto patch : BUFFER_HOOKS) patch(buffer->iface);
    write_buffer_record(buffer, event);
}

void patch_backend(ggml_backend_t backend) {
    backend->iface.free = backend_free_hook;
    for (auto patch : BACKEND_HOOKS) patch(backend->iface);
}

void patch_device(ggml_backend_dev_t device) {
    for (auto patch : DEVICE_HOOKS) patch(device->iface);
}

void patch_buffer_type(ggml_backend_buffer_type_t buft) {
    for (auto patch : BUFFER_TYPE_HOOKS) patch(buft->iface);
}

}  // namespace ggml_trace
