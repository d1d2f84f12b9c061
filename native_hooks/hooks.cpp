// The capture: interposed scheduler entry points and in-place patched vtables.
//
// Applications call ggml_backend_sched_* across the library boundary, so LD_PRELOAD can interpose
// them. Everything else the scheduler does (split computes, async copies, events, synchronize,
// sync copies through buffers) goes through vtables held by value in ggml's structs; we patch those
// entries in place after checking that the structs have the layout our headers say.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "comm.h"
#include "cupti_mode.h"
#include "delay.h"
#include "device_timing.h"
#include "ggml_api.h"
#include "meta.h"
#include "registry.h"
#include "trace_writer.h"
#include "virtual_device.h"

#ifndef GGML_TRACE_HOOKS_BUILD
#define GGML_TRACE_HOOKS_BUILD "unknown"
#endif

using namespace ggml_trace;

namespace {

// ---------------------------------------------------------------- state

enum class State { UNINIT, ACTIVE, DISABLED };
std::atomic<State> g_state{State::UNINIT};
std::once_flag g_init_once;
std::atomic<bool> g_capture{true};      // ggml_trace_start/stop toggle this
std::atomic<uint32_t> g_next_graph{0};
std::atomic<uint32_t> g_next_sched{0};

const int MAX_SCHEDS = 255;
std::atomic<ggml_backend_sched_t> g_scheds[MAX_SCHEDS];

// What the calling thread is inside of: which scheduler, graph and split.
struct Context {
    uint8_t sched = 0xff;
    uint32_t graph = NONE32;
    int32_t split = -1;
    ggml_backend_sched_t active = nullptr;  // scheduler whose graph compute is running
};
thread_local Context t_ctx;

bool capturing() { return g_state.load(std::memory_order_acquire) == State::ACTIVE && g_capture.load(std::memory_order_relaxed); }

void disable(const char * why) {
    fprintf(stderr,
            "ggml-trace: the hooks were built for ggml %s (backend API %d) and do not match this program's "
            "ggml: %s. Running untraced; rebuild the hooks against this program's ggml sources "
            "(see docs/building.md).\n",
            GGML_TRACE_HOOKS_BUILD, GGML_BACKEND_API_VERSION, why);
    g_state.store(State::DISABLED);
    if (writer_is_open()) {
        write_meta("disabled", why, strlen(why));
    }
}

uint8_t sched_index(ggml_backend_sched_t sched) {
    for (int i = 0; i < MAX_SCHEDS; i++) {
        if (g_scheds[i].load(std::memory_order_acquire) == sched) {
            return (uint8_t) i;
        }
    }
    return 0xff;
}

// ---------------------------------------------------------------- records

struct CallScope {  // fills and commits one CALL record
    CallRec r;
    bool correlated = false;  // pushed as CUPTI's external correlation id
    explicit CallScope(uint8_t kind) {
        memset(&r, 0, sizeof(r));
        r.kind = kind;
        r.sched = t_ctx.sched;
        r.graph = t_ctx.graph;
        r.split = t_ctx.split;
        r.backend = r.backend2 = NONE32;
        r.t_begin = now_ticks();
        // work this call enqueues on a (virtual) device will name it
        current_call() = CallContext{id(), r.graph, r.split};
        if (cupti_active()) {
            cupti_push(id());
            correlated = true;
        }
    }
    ~CallScope() {
        if (correlated) {
            cupti_pop();
        }
    }
    uint64_t id() {
        if (!r.call_id) {
            r.call_id = next_call_id();
        }
        return r.call_id;
    }
    void commit() {
        r.t_end = now_ticks();
        id();
        commit_call(r);
    }
    static void commit_call(CallRec & r) {
        r.thread = thread_index();
        meta_commit(r);  // a meta call's flag, or the NEST record of a call it made
        CallRec * out = (CallRec *) reserve_record();
        if (out) {
            memcpy((uint8_t *) out + 1, (uint8_t *) &r + 1, sizeof(r) - 1);
            commit_record(out, REC_CALL);
        }
    }
};

ggml_backend_buffer_t buffer_of(const ggml_tensor * t) {
    if (t->buffer) {
        return t->buffer;
    }
    return t->view_src ? t->view_src->buffer : nullptr;
}

void emit_range(uint8_t type, uint8_t mode, uint64_t call_id, ggml_backend_buffer_t buffer, uint64_t offset,
                uint64_t size, uint64_t tensor_name, uint64_t node_name, uint32_t op, uint32_t index) {
    if (meta_parent_call(call_id)) {
        return;  // a meta backend's call: its simple backends' calls carry the accesses
    }
    AccessRec * r = (AccessRec *) reserve_record();
    if (!r) {
        return;
    }
    r->mode = mode;
    r->thread = thread_index();
    r->call_id = call_id;
    r->buffer = (uint64_t) (uintptr_t) buffer;
    r->offset = offset;
    r->size = size;
    r->tensor = tensor_name;
    r->node = node_name;
    r->op = op;
    r->index = index;
    commit_record(r, type);
}

void see_buffer(ggml_backend_buffer_t buffer, uint8_t event);
void hook_set_tensor(ggml_backend_buffer_t buffer, ggml_tensor * t, const void * data, size_t offset, size_t size);

// The buffer this thread last registered: a split's accesses come in long runs on the same
// compute or weight buffer, and registering looks it up in a shared table.
thread_local ggml_backend_buffer_t t_last_seen = nullptr;

// The interned name of a tensor; the meta backend's allreduce temporaries have none of their own.
uint64_t tensor_name(const ggml_tensor * t) {
    uint64_t m = t->name[0] ? 0 : meta_unnamed(t);
    return m ? m : intern(t->name);
}

// A tensor's bytes as (buffer, offset, size); `extra` shifts into the tensor, `size` overrides.
// `name` is the tensor's interned name when the caller has it already.
void emit_tensor(uint8_t type, uint8_t mode, uint64_t call_id, const ggml_tensor * t, uint64_t node_name,
                 uint32_t index, size_t extra = 0, size_t size = (size_t) -1, uint64_t name = 0) {
    ggml_backend_buffer_t buf = buffer_of(t);
    if (!buf || !t->data) {
        return;
    }
    // Still ours (a freed buffer's address may hold a new, unpatched one): nothing to register.
    if (buf != t_last_seen || buf->iface.set_tensor != hook_set_tensor) {
        see_buffer(buf, BUF_SEEN);
        t_last_seen = buf;
    }
    uint64_t offset = (uint64_t) ((const char *) t->data - (const char *) g_api.buffer_get_base(buf)) + extra;
    name = name ? name : tensor_name(t);
    emit_range(type, mode, call_id, buf, offset, size == (size_t) -1 ? g_api.nbytes(t) : size, name,
               node_name ? node_name : name, (uint32_t) t->op, index);
}

void emit_host(uint8_t mode, uint64_t call_id, const void * data, size_t size) {
    emit_range(REC_ACCESS, mode, call_id, nullptr, (uint64_t) (uintptr_t) data, size, 0, 0, NONE32, NONE32);
}

// ---------------------------------------------------------------- buffer hooks

const ggml_backend_buffer_i & orig_of(ggml_backend_buffer_t buffer) {
    const ggml_backend_buffer_i * o = find_buffer(buffer);
    if (!o) {
        // Cannot happen: a buffer is registered before its vtable is patched.
        fprintf(stderr, "ggml-trace: internal error: buffer %p has no saved vtable\n", (void *) buffer);
        abort();
    }
    return *o;
}

uint32_t backend_of_buffer(ggml_backend_buffer_t buffer) {
    return buffer->buft ? backend_index_of_device(buffer->buft->device) : NONE32;
}

void hook_set_tensor(ggml_backend_buffer_t buffer, ggml_tensor * t, const void * data, size_t offset, size_t size) {
    const ggml_backend_buffer_i & orig = orig_of(buffer);
    if (!capturing()) {
        return orig.set_tensor(buffer, t, data, offset, size);
    }
    CallScope c(K_BUF_SET_TENSOR);
    MetaParent meta(c.id(), buffer);
    orig.set_tensor(buffer, t, data, offset, size);
    c.r.backend = backend_of_buffer(buffer);
    c.r.obj = (uint64_t) (uintptr_t) t;
    c.r.arg = size;
    emit_host(ACC_READ, c.id(), data, size);
    emit_tensor(REC_ACCESS, ACC_WRITE, c.id(), t, 0, NONE32, offset, size);
    c.commit();
}

void hook_get_tensor(ggml_backend_buffer_t buffer, const ggml_tensor * t, void * data, size_t offset, size_t size) {
    const ggml_backend_buffer_i & orig = orig_of(buffer);
    if (!capturing()) {
        return orig.get_tensor(buffer, t, data, offset, size);
    }
    CallScope c(K_BUF_GET_TENSOR);
    MetaParent meta(c.id(), buffer);
    orig.get_tensor(buffer, t, data, offset, size);
    c.r.backend = backend_of_buffer(buffer);
    c.r.obj = (uint64_t) (uintptr_t) t;
    c.r.arg = size;
    emit_tensor(REC_ACCESS, ACC_READ, c.id(), t, 0, NONE32, offset, size);
    emit_host(ACC_WRITE, c.id(), data, size);
    c.commit();
}

// Bytes spanned by a strided 2D copy of n rows of `size` bytes.
size_t span_2d(size_t size, size_t n_copies, size_t stride) { return n_copies ? (n_copies - 1) * stride + size : 0; }

void hook_set_tensor_2d(ggml_backend_buffer_t buffer, ggml_tensor * t, const void * data, size_t offset, size_t size,
                        size_t n_copies, size_t stride_tensor, size_t stride_data) {
    const ggml_backend_buffer_i & orig = orig_of(buffer);
    if (!capturing()) {
        return orig.set_tensor_2d(buffer, t, data, offset, size, n_copies, stride_tensor, stride_data);
    }
    CallScope c(K_BUF_SET_TENSOR_2D);
    MetaParent meta(c.id(), buffer);
    orig.set_tensor_2d(buffer, t, data, offset, size, n_copies, stride_tensor, stride_data);
    c.r.backend = backend_of_buffer(buffer);
    c.r.obj = (uint64_t) (uintptr_t) t;
    c.r.arg = size * n_copies;
    emit_host(ACC_READ, c.id(), data, span_2d(size, n_copies, stride_data));
    emit_tensor(REC_ACCESS, ACC_WRITE, c.id(), t, 0, NONE32, offset, span_2d(size, n_copies, stride_tensor));
    c.commit();
}

void hook_get_tensor_2d(ggml_backend_buffer_t buffer, const ggml_tensor * t, void * data, size_t offset, size_t size,
                        size_t n_copies, size_t stride_tensor, size_t stride_data) {
    const ggml_backend_buffer_i & orig = orig_of(buffer);
    if (!capturing()) {
        return orig.get_tensor_2d(buffer, t, data, offset, size, n_copies, stride_tensor, stride_data);
    }
    CallScope c(K_BUF_GET_TENSOR_2D);
    MetaParent meta(c.id(), buffer);
    orig.get_tensor_2d(buffer, t, data, offset, size, n_copies, stride_tensor, stride_data);
    c.r.backend = backend_of_buffer(buffer);
    c.r.obj = (uint64_t) (uintptr_t) t;
    c.r.arg = size * n_copies;
    emit_tensor(REC_ACCESS, ACC_READ, c.id(), t, 0, NONE32, offset, span_2d(size, n_copies, stride_tensor));
    emit_host(ACC_WRITE, c.id(), data, span_2d(size, n_copies, stride_data));
    c.commit();
}

void hook_memset_tensor(ggml_backend_buffer_t buffer, ggml_tensor * t, uint8_t value, size_t offset, size_t size) {
    const ggml_backend_buffer_i & orig = orig_of(buffer);
    if (!capturing()) {
        return orig.memset_tensor(buffer, t, value, offset, size);
    }
    CallScope c(K_BUF_MEMSET_TENSOR);
    MetaParent meta(c.id(), buffer);
    orig.memset_tensor(buffer, t, value, offset, size);
    c.r.backend = backend_of_buffer(buffer);
    c.r.obj = (uint64_t) (uintptr_t) t;
    c.r.arg = size;
    emit_tensor(REC_ACCESS, ACC_WRITE, c.id(), t, 0, NONE32, offset, size);
    c.commit();
}

bool hook_cpy_tensor(ggml_backend_buffer_t buffer, const ggml_tensor * src, ggml_tensor * dst) {
    const ggml_backend_buffer_i & orig = orig_of(buffer);
    if (!capturing()) {
        return orig.cpy_tensor(buffer, src, dst);
    }
    CallScope c(K_BUF_CPY_TENSOR);
    MetaParent meta(c.id(), buffer);
    bool ok = orig.cpy_tensor(buffer, src, dst);
    c.r.backend = backend_of_buffer(buffer);
    c.r.backend2 = src->buffer ? backend_of_buffer(src->buffer) : NONE32;
    c.r.obj = (uint64_t) (uintptr_t) dst;
    c.r.arg = g_api.nbytes(src);
    c.r.flags = ok ? 0 : CALL_DECLINED;  // the caller falls back to another path
    if (ok) {
        emit_tensor(REC_ACCESS, ACC_READ, c.id(), src, 0, NONE32);
        emit_tensor(REC_ACCESS, ACC_WRITE, c.id(), dst, 0, NONE32);
    }
    c.commit();
    return ok;
}

void hook_clear(ggml_backend_buffer_t buffer, uint8_t value) {
    const ggml_backend_buffer_i & orig = orig_of(buffer);
    if (!capturing()) {
        return orig.clear(buffer, value);
    }
    CallScope c(K_BUF_CLEAR);
    MetaParent meta(c.id(), buffer);
    orig.clear(buffer, value);
    c.r.backend = backend_of_buffer(buffer);
    c.r.obj = (uint64_t) (uintptr_t) buffer;
    c.r.arg = buffer->size;
    emit_range(REC_ACCESS, ACC_WRITE, c.id(), buffer, 0, buffer->size, 0, 0, NONE32, NONE32);
    c.commit();
}

void write_buffer_record(ggml_backend_buffer_t buffer, uint8_t event) {
    ggml_backend_buffer_type_t buft = buffer->buft;
    uint64_t name = buft ? intern(g_api.buft_name(buft)) : 0;
    BufferRec * r = (BufferRec *) reserve_kept_record();
    if (!r) {
        return;
    }
    r->event = event;
    r->usage = (uint8_t) buffer->usage;
    r->is_host = buft ? g_api.buft_is_host(buft) : 0;
    r->thread = thread_index();
    r->t = now_ticks();
    r->ptr = (uint64_t) (uintptr_t) buffer;
    r->base = (uint64_t) (uintptr_t) g_api.buffer_get_base(buffer);
    r->size = buffer->size;
    r->buft_name = name;
    r->device_ptr = buft ? (uint64_t) (uintptr_t) buft->device : 0;
    commit_record(r, REC_BUFFER);
}

// A buffer whose struct was freed without our seeing it (and whose address now holds another
// buffer) still has an entry but not our vtable.
bool is_patched(ggml_backend_buffer_t buffer, const ggml_backend_buffer_i * orig) {
    return orig && (orig->set_tensor == nullptr || buffer->iface.set_tensor == hook_set_tensor);
}

// Registers and patches a buffer the first time the hooks meet it.
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
    // free_buffer stays: backends recognise their own buffers by comparing it (CUDA, RPC, Metal).
    // Frees are seen through the exported ggml_backend_buffer_free instead.
    ggml_backend_buffer_i & i = buffer->iface;
    if (i.set_tensor) i.set_tensor = hook_set_tensor;
    if (i.get_tensor) i.get_tensor = hook_get_tensor;
    if (i.set_tensor_2d) i.set_tensor_2d = hook_set_tensor_2d;
    if (i.get_tensor_2d) i.get_tensor_2d = hook_get_tensor_2d;
    if (i.memset_tensor) i.memset_tensor = hook_memset_tensor;
    if (i.cpy_tensor) i.cpy_tensor = hook_cpy_tensor;
    if (i.clear) i.clear = hook_clear;
    write_buffer_record(buffer, event);
}

// ---------------------------------------------------------------- buffer type hooks

ggml_backend_buffer_t hook_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
    BuftEntry * e = find_buft(buft);
    if (!capturing()) {
        return e->orig.alloc_buffer(buft, size);
    }
    CallScope c(K_BUF_ALLOC);
    ggml_backend_buffer_t buffer = e->orig.alloc_buffer(buft, size);
    c.r.backend = backend_index_of_device(buft->device);
    c.r.obj = (uint64_t) (uintptr_t) buffer;
    c.r.arg = size;
    c.r.flags = buffer ? 0 : CALL_FAILED;
    if (buffer) {
        see_buffer(buffer, BUF_ALLOCATED);
        meta_note_alloc(buffer);
    }
    c.commit();
    return buffer;
}

// ---------------------------------------------------------------- split accesses

// Per-thread set of tensor pointers, cleared in O(1) by bumping the generation.
struct TensorSet {
    static const size_t SLOTS = 1 << 14;
    const ggml_tensor * key[SLOTS];
    uint32_t gen[SLOTS];
    uint32_t cur = 1;
    size_t used = 0;
    void clear() { cur++; used = 0; }
    size_t slot(const ggml_tensor * t) { return (((uintptr_t) t >> 4) * 0x9E3779B97F4A7C15ull >> 40) % SLOTS; }
    // Inserts t; returns false if it was already there (or the set is full: then callers may repeat).
    bool insert(const ggml_tensor * t) {
        if (used * 2 > SLOTS) {
            return true;
        }
        for (size_t i = slot(t);; i = (i + 1) % SLOTS) {
            if (gen[i] != cur) {
                gen[i] = cur;
                key[i] = t;
                used++;
                return true;
            }
            if (key[i] == t) {
                return false;
            }
        }
    }
    bool contains(const ggml_tensor * t) {
        for (size_t i = slot(t);; i = (i + 1) % SLOTS) {
            if (gen[i] != cur) {
                return false;
            }
            if (key[i] == t) {
                return true;
            }
        }
    }
};
thread_local TensorSet t_produced;
thread_local TensorSet t_read;

bool is_view_op(enum ggml_op op) {
    return op == GGML_OP_VIEW || op == GGML_OP_RESHAPE || op == GGML_OP_PERMUTE || op == GGML_OP_TRANSPOSE;
}

const ggml_tensor * view_root(const ggml_tensor * t) {
    while (t->view_src) {
        t = t->view_src;
    }
    return t;
}

// Reads: every source a split uses that it did not produce itself. Writes: every node that is
// not a pure view (views alias bytes that their producer already wrote).
void emit_split_accesses(uint64_t call_id, ggml_cgraph * graph) {
    int n = g_api.graph_n_nodes(graph);
    t_produced.clear();
    t_read.clear();
    for (int i = 0; i < n; i++) {
        ggml_tensor * node = g_api.graph_node(graph, i);
        if (is_view_op(node->op) || node->op == GGML_OP_NONE) {
            continue;
        }
        uint64_t node_name = tensor_name(node);
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            const ggml_tensor * src = node->src[j];
            if (!src || t_produced.contains(src) || t_produced.contains(view_root(src))) {
                continue;
            }
            if (t_read.insert(src)) {
                emit_tensor(REC_ACCESS, ACC_READ, call_id, src, node_name, (uint32_t) i);
            }
        }
        t_produced.insert(node);
        emit_tensor(REC_ACCESS, ACC_WRITE, call_id, node, node_name, (uint32_t) i, 0, (size_t) -1, node_name);
    }
}

// Placement of every tensor a graph touches, after the scheduler allocated it.
void emit_placements(uint64_t call_id, ggml_cgraph * graph) {
    int n = g_api.graph_n_nodes(graph);
    t_read.clear();
    for (int i = 0; i < n; i++) {
        ggml_tensor * node = g_api.graph_node(graph, i);
        for (int j = -1; j < GGML_MAX_SRC; j++) {
            const ggml_tensor * t = j < 0 ? node : node->src[j];
            if (t && t_read.insert(t)) {
                emit_tensor(REC_PLACE, 0, call_id, t, 0, (uint32_t) i);
            }
        }
    }
}

// ---------------------------------------------------------------- backend hooks

BackendEntry & entry_of(ggml_backend_t backend) {
    BackendEntry * e = find_backend(backend);
    if (!e) {
        fprintf(stderr, "ggml-trace: internal error: backend %p has no saved vtable\n", (void *) backend);
        abort();
    }
    return *e;
}

enum ggml_status hook_graph_compute(ggml_backend_t backend, ggml_cgraph * graph) {
    BackendEntry & e = entry_of(backend);
    if (!capturing()) {
        return e.orig.graph_compute(backend, graph);
    }
    bool nested = meta_nested();  // a meta backend's subgraph: not a split of the scheduler
    CallScope c(K_GRAPH_COMPUTE);
    MetaParent meta(c.id(), backend);
    if (nested) meta_note_compute(graph);
    if (delay_on()) delay_before(c.r, backend, e.index, e.orig, graph, nullptr, nullptr);
    TimedOp timed = device_timing_begin(backend, e.index, e.orig);
    enum ggml_status st = e.orig.graph_compute(backend, graph);
    device_timing_end(timed, backend, c.r);
    c.r.backend = e.index;
    c.r.obj = (uint64_t) (uintptr_t) graph;
    c.r.arg = (uint64_t) g_api.graph_n_nodes(graph);
    c.r.flags = st == GGML_STATUS_SUCCESS ? 0 : CALL_FAILED;
    emit_split_accesses(c.id(), graph);
    c.commit();
    if (t_ctx.split >= 0 && !nested) {
        t_ctx.split++;  // the next split of this scheduler graph
    }
    return st;
}

// The backend queues work asynchronously (the race model's "async backend").
static bool has_async(const ggml_backend_i & f) {
    return f.cpy_tensor_async || f.set_tensor_async || f.get_tensor_async;
}

bool hook_cpy_tensor_async(ggml_backend_t src_backend, ggml_backend_t dst_backend, const ggml_tensor * src, ggml_tensor * dst) {
    BackendEntry & e = entry_of(dst_backend);
    if (!capturing()) {
        return e.orig.cpy_tensor_async(src_backend, dst_backend, src, dst);
    }
    CallScope c(K_CPY_TENSOR_ASYNC);
    // A copy from another asynchronous backend runs on the source's queue (CUDA issues the peer copy
    // on the source stream and makes the destination wait after it): time and delay it there, as the
    // race model orders it (docs/trace-format.md, device_exec).
    BackendEntry * se = find_backend(src_backend);
    bool on_src = se && se != &e && has_async(se->orig);
    ggml_backend_t qb = on_src ? src_backend : dst_backend;
    BackendEntry & qe = on_src ? *se : e;
    if (delay_on()) delay_before(c.r, qb, qe.index, qe.orig, nullptr, src, dst, dst_backend);
    TimedOp timed = device_timing_begin(qb, qe.index, qe.orig);
    bool ok = e.orig.cpy_tensor_async(src_backend, dst_backend, src, dst);
    if (ok) {
        device_timing_end(timed, qb, c.r);
    } else {
        device_timing_cancel(timed);
    }
    c.r.backend = e.index;
    c.r.backend2 = se ? se->index : NONE32;
    c.r.obj = (uint64_t) (uintptr_t) dst;
    c.r.arg = g_api.nbytes(src);
    c.r.flags = ok ? 0 : CALL_DECLINED;  // the scheduler falls back to a sync copy
    if (ok) {
        emit_tensor(REC_ACCESS, ACC_READ, c.id(), src, 0, NONE32);
        emit_tensor(REC_ACCESS, ACC_WRITE, c.id(), dst, 0, NONE32);
    }
    c.commit();
    return ok;
}

}  // namespace

// One call of a backend's own allreduce (comm.h): a record per device, each delayed and timed on
// that device's queue. The kernels CUPTI sees during the call correlate to the first device's record.
bool ggml_trace::traced_comm_allreduce(const CommGroup & g, ggml_tensor ** tensors) {
    if (!capturing()) {
        return g.allreduce(g.ctx, tensors);
    }
    static std::atomic<uint64_t> next_seq{0};
    uint64_t seq = next_seq.fetch_add(1);
    CallScope c(K_COMM_ALLREDUCE);
    CallRec r[COMM_MAX_DEVICES];
    BackendEntry * e[COMM_MAX_DEVICES];
    TimedOp timed[COMM_MAX_DEVICES];
    for (int i = 0; i < g.n; i++) {
        r[i] = c.r;
        r[i].call_id = i == 0 ? c.id() : next_call_id();
        e[i] = find_backend(g.backends[i]);
        r[i].backend = e[i] ? e[i]->index : NONE32;
        r[i].obj = (uint64_t) (uintptr_t) g.ctx;
        r[i].arg = seq;
        if (!e[i]) continue;
        if (delay_on()) delay_before(r[i], g.backends[i], e[i]->index, e[i]->orig, nullptr, tensors[i], nullptr);
        timed[i] = device_timing_begin(g.backends[i], e[i]->index, e[i]->orig);
    }
    uint64_t t_begin = now_ticks();
    bool ok = g.allreduce(g.ctx, tensors);
    uint64_t t_end = now_ticks();
    for (int i = 0; i < g.n; i++) {
        if (ok && e[i]) {
            device_timing_end(timed[i], g.backends[i], r[i]);
        } else {
            device_timing_cancel(timed[i]);
        }
        r[i].t_begin = t_begin;
        r[i].t_end = t_end;
        r[i].flags = ok ? 0 : CALL_DECLINED;  // the meta backend's butterfly follows
        if (ok && tensors[i]) {
            emit_tensor(REC_ACCESS, ACC_READ, r[i].call_id, tensors[i], 0, NONE32);
            emit_tensor(REC_ACCESS, ACC_WRITE, r[i].call_id, tensors[i], 0, NONE32);
        }
        CallScope::commit_call(r[i]);
    }
    return ok;
}

namespace {

void hook_set_tensor_async(ggml_backend_t backend, ggml_tensor * t, const void * data, size_t offset, size_t size) {
    BackendEntry & e = entry_of(backend);
    if (!capturing()) {
        return e.orig.set_tensor_async(backend, t, data, offset, size);
    }
    CallScope c(K_SET_TENSOR_ASYNC);
    MetaParent meta(c.id(), backend);
    if (delay_on()) delay_before(c.r, backend, e.index, e.orig, nullptr, t, nullptr);
    TimedOp timed = device_timing_begin(backend, e.index, e.orig);
    e.orig.set_tensor_async(backend, t, data, offset, size);
    device_timing_end(timed, backend, c.r);
    c.r.backend = e.index;
    c.r.obj = (uint64_t) (uintptr_t) t;
    c.r.arg = size;
    emit_host(ACC_READ, c.id(), data, size);
    emit_tensor(REC_ACCESS, ACC_WRITE, c.id(), t, 0, NONE32, offset, size);
    c.commit();
}

void hook_get_tensor_async(ggml_backend_t backend, const ggml_tensor * t, void * data, size_t offset, size_t size) {
    BackendEntry & e = entry_of(backend);
    if (!capturing()) {
        return e.orig.get_tensor_async(backend, t, data, offset, size);
    }
    CallScope c(K_GET_TENSOR_ASYNC);
    MetaParent meta(c.id(), backend);
    if (delay_on()) delay_before(c.r, backend, e.index, e.orig, nullptr, t, nullptr);
    TimedOp timed = device_timing_begin(backend, e.index, e.orig);
    e.orig.get_tensor_async(backend, t, data, offset, size);
    device_timing_end(timed, backend, c.r);
    c.r.backend = e.index;
    c.r.obj = (uint64_t) (uintptr_t) t;
    c.r.arg = size;
    emit_tensor(REC_ACCESS, ACC_READ, c.id(), t, 0, NONE32, offset, size);
    emit_host(ACC_WRITE, c.id(), data, size);
    c.commit();
}

#ifdef GGML_TRACE_HAS_2D_ASYNC
void hook_set_tensor_2d_async(ggml_backend_t backend, ggml_tensor * t, const void * data, size_t offset, size_t size,
                              size_t n_copies, size_t stride_tensor, size_t stride_data) {
    BackendEntry & e = entry_of(backend);
    if (!capturing()) {
        return e.orig.set_tensor_2d_async(backend, t, data, offset, size, n_copies, stride_tensor, stride_data);
    }
    CallScope c(K_SET_TENSOR_2D_ASYNC);
    if (delay_on()) delay_before(c.r, backend, e.index, e.orig, nullptr, t, nullptr);
    TimedOp timed = device_timing_begin(backend, e.index, e.orig);
    e.orig.set_tensor_2d_async(backend, t, data, offset, size, n_copies, stride_tensor, stride_data);
    device_timing_end(timed, backend, c.r);
    c.r.backend = e.index;
    c.r.obj = (uint64_t) (uintptr_t) t;
    c.r.arg = size * n_copies;
    emit_host(ACC_READ, c.id(), data, span_2d(size, n_copies, stride_data));
    emit_tensor(REC_ACCESS, ACC_WRITE, c.id(), t, 0, NONE32, offset, span_2d(size, n_copies, stride_tensor));
    c.commit();
}

void hook_get_tensor_2d_async(ggml_backend_t backend, const ggml_tensor * t, void * data, size_t offset, size_t size,
                              size_t n_copies, size_t stride_tensor, size_t stride_data) {
    BackendEntry & e = entry_of(backend);
    if (!capturing()) {
        return e.orig.get_tensor_2d_async(backend, t, data, offset, size, n_copies, stride_tensor, stride_data);
    }
    CallScope c(K_GET_TENSOR_2D_ASYNC);
    if (delay_on()) delay_before(c.r, backend, e.index, e.orig, nullptr, t, nullptr);
    TimedOp timed = device_timing_begin(backend, e.index, e.orig);
    e.orig.get_tensor_2d_async(backend, t, data, offset, size, n_copies, stride_tensor, stride_data);
    device_timing_end(timed, backend, c.r);
    c.r.backend = e.index;
    c.r.obj = (uint64_t) (uintptr_t) t;
    c.r.arg = size * n_copies;
    emit_tensor(REC_ACCESS, ACC_READ, c.id(), t, 0, NONE32, offset, span_2d(size, n_copies, stride_tensor));
    emit_host(ACC_WRITE, c.id(), data, span_2d(size, n_copies, stride_data));
    c.commit();
}
#endif

void hook_synchronize(ggml_backend_t backend) {
    BackendEntry & e = entry_of(backend);
    if (!capturing()) {
        return e.orig.synchronize(backend);
    }
    CallScope c(K_SYNCHRONIZE);
    MetaParent meta(c.id(), backend);
    if (delay_on()) delay_before(c.r, backend, e.index, e.orig, nullptr, nullptr, nullptr);
    e.orig.synchronize(backend);
    device_timing_poll();  // the queue is drained: its markers have passed
    c.r.backend = e.index;
    c.commit();
}

void hook_event_record(ggml_backend_t backend, ggml_backend_event_t event) {
    BackendEntry & e = entry_of(backend);
    if (!capturing()) {
        return e.orig.event_record(backend, event);
    }
    CallScope c(K_EVENT_RECORD);
    if (delay_on()) delay_before(c.r, backend, e.index, e.orig, nullptr, nullptr, nullptr);
    e.orig.event_record(backend, event);
    c.r.backend = e.index;
    c.r.obj = (uint64_t) (uintptr_t) event;
    c.commit();
}

void hook_event_wait(ggml_backend_t backend, ggml_backend_event_t event) {
    BackendEntry & e = entry_of(backend);
    if (!capturing()) {
        return e.orig.event_wait(backend, event);
    }
    CallScope c(K_EVENT_WAIT);
    if (delay_on()) delay_before(c.r, backend, e.index, e.orig, nullptr, nullptr, nullptr);
    e.orig.event_wait(backend, event);
    device_timing_waited(e.index);
    c.r.backend = e.index;
    c.r.obj = (uint64_t) (uintptr_t) event;
    c.commit();
}

// The backend struct is about to be deleted: forget it so nothing writes into it later.
void hook_backend_free(ggml_backend_t backend) {
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

// ---------------------------------------------------------------- device hooks

DeviceEntry & entry_of(ggml_backend_dev_t dev) {
    DeviceEntry * e = find_device(dev);
    if (!e) {
        fprintf(stderr, "ggml-trace: internal error: device %p has no saved vtable\n", (void *) dev);
        abort();
    }
    return *e;
}

ggml_backend_event_t hook_event_new(ggml_backend_dev_t dev) {
    DeviceEntry & e = entry_of(dev);
    if (!capturing()) {
        return e.orig.event_new(dev);
    }
    CallScope c(K_EVENT_NEW);
    ggml_backend_event_t ev = e.orig.event_new(dev);
    c.r.backend = e.backend;
    c.r.obj = (uint64_t) (uintptr_t) ev;
    c.commit();
    return ev;
}

void hook_event_free(ggml_backend_dev_t dev, ggml_backend_event_t event) {
    DeviceEntry & e = entry_of(dev);
    if (!capturing()) {
        return e.orig.event_free(dev, event);
    }
    CallScope c(K_EVENT_FREE);
    e.orig.event_free(dev, event);
    c.r.backend = e.backend;
    c.r.obj = (uint64_t) (uintptr_t) event;
    c.commit();
}

void hook_event_synchronize(ggml_backend_dev_t dev, ggml_backend_event_t event) {
    DeviceEntry & e = entry_of(dev);
    if (!capturing()) {
        return e.orig.event_synchronize(dev, event);
    }
    CallScope c(K_EVENT_SYNCHRONIZE);
    e.orig.event_synchronize(dev, event);
    device_timing_poll();
    c.r.backend = e.backend;
    c.r.obj = (uint64_t) (uintptr_t) event;
    c.commit();
}

// ---------------------------------------------------------------- registration

void write_backend_record(BackendEntry & e, ggml_backend_t backend) {
    ggml_backend_dev_t dev = g_api.backend_get_device(backend);
    BackendRec r;
    memset(&r, 0, sizeof(r));
    r.backend = e.index;
    r.ptr = (uint64_t) (uintptr_t) backend;
    r.device_ptr = (uint64_t) (uintptr_t) dev;
    r.name = intern(g_api.backend_name(backend));
    if (dev) {
        r.device_name = intern(g_api.dev_name(dev));
        r.device_description = intern(g_api.dev_description(dev));
        r.device_type = (uint8_t) g_api.dev_type(dev);
        r.has_events = dev->iface.event_new != nullptr;
    }
    r.has_async = has_async(e.orig);
    r.t = now_ticks();
    BackendRec * out = (BackendRec *) reserve_kept_record();
    if (out) {
        memcpy((uint8_t *) out + 1, (uint8_t *) &r + 1, sizeof(r) - 1);
        commit_record(out, REC_BACKEND);
    }
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
            ggml_backend_i & f = b->iface;
            f.free = hook_backend_free;
            f.graph_compute = hook_graph_compute;
            if (f.cpy_tensor_async) f.cpy_tensor_async = hook_cpy_tensor_async;
            if (f.set_tensor_async) f.set_tensor_async = hook_set_tensor_async;
            if (f.get_tensor_async) f.get_tensor_async = hook_get_tensor_async;
#ifdef GGML_TRACE_HAS_2D_ASYNC
            if (f.set_tensor_2d_async) f.set_tensor_2d_async = hook_set_tensor_2d_async;
            if (f.get_tensor_2d_async) f.get_tensor_2d_async = hook_get_tensor_2d_async;
#endif
            if (f.synchronize) f.synchronize = hook_synchronize;
            if (f.event_record) f.event_record = hook_event_record;
            if (f.event_wait) f.event_wait = hook_event_wait;
            write_backend_record(*e, b);
        }
        ggml_backend_dev_t dev = b->device;
        if (dev) {
            DeviceEntry * d = add_device(dev, e->index, &is_new);
            if (d) {
                d->refs++;
                if (is_new) {
                    ggml_backend_device_i & f = dev->iface;
                    if (f.event_new) f.event_new = hook_event_new;
                    if (f.event_free) f.event_free = hook_event_free;
                    if (f.event_synchronize) f.event_synchronize = hook_event_synchronize;
                }
            }
        }
        ggml_backend_buffer_type_t buft = bufts ? bufts[i] : g_api.backend_get_default_buffer_type(b);
        if (buft) {
            BuftEntry * t = add_buft(buft, &is_new);
            if (t) {
                t->refs++;
                if (is_new && buft->iface.alloc_buffer) {
                    buft->iface.alloc_buffer = hook_alloc_buffer;
                }
            }
        }
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

// ---------------------------------------------------------------- start-up

// The environment variables that shape a ggml run (NUL-separated KEY=VALUE), to re-run it; not
// the injection itself, nor the trace's own output and delay rules (recorded apart).
size_t program_env(char * buf, size_t cap) {
    static const char * prefixes[] = {"GGML_", "LLAMA_", "CUDA_", "HIP_", "VK_", "OMP_", "OPENBLAS_", "MESA_", "LP_"};
    static const char * skip[] = {"GGML_TRACE_OUTPUT=", "GGML_TRACE_DELAY="};
    size_t len = 0;
    for (char ** e = environ; *e; e++) {
        bool keep = false;
        for (const char * p : prefixes) keep = keep || strncmp(*e, p, strlen(p)) == 0;
        for (const char * p : skip) keep = keep && strncmp(*e, p, strlen(p)) != 0;
        size_t n = strlen(*e) + 1;
        if (keep && len + n <= cap) {
            memcpy(buf + len, *e, n);
            len += n;
        }
    }
    return len;
}

void write_process_meta() {
    char buf[1 << 16];
    int fd = open("/proc/self/cmdline", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof(buf));
        close(fd);
        if (n > 0) {
            write_meta("cmdline", buf, (size_t) n);  // NUL-separated argv
        }
    }
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n > 0) {
        write_meta("exe", buf, (size_t) n);
    }
    if (getcwd(buf, sizeof(buf))) {
        write_meta("cwd", buf, strlen(buf));
    }
    write_meta("env", buf, program_env(buf, sizeof(buf)));
    snprintf(buf, sizeof(buf), "%d", (int) getpid());
    write_meta("pid", buf, strlen(buf));
    if (gethostname(buf, sizeof(buf)) == 0) {
        write_meta("hostname", buf, strnlen(buf, sizeof(buf)));
    }
    write_meta("hooks_build", GGML_TRACE_HOOKS_BUILD, strlen(GGML_TRACE_HOOKS_BUILD));
    snprintf(buf, sizeof(buf), "%d", GGML_BACKEND_API_VERSION);
    write_meta("backend_api_version", buf, strlen(buf));
}

#ifndef GGML_TRACE_SOURCE_BUILD_NUMBER
#define GGML_TRACE_SOURCE_BUILD_NUMBER "0"
#define GGML_TRACE_SOURCE_COMMIT "unknown"
#endif

// Which build made this trace: the program's ggml (version, commit), the program's llama.cpp
// build info where it links libllama-common, and the sources the hooks were built against.
void write_ggml_meta() {
    const char * v = g_api.version ? g_api.version() : "unknown";
    write_meta("ggml_version", v, strlen(v));
    const char * c = g_api.commit ? g_api.commit() : "unknown";
    write_meta("ggml_commit", c, strlen(c));
    write_meta("source.build_number", GGML_TRACE_SOURCE_BUILD_NUMBER, strlen(GGML_TRACE_SOURCE_BUILD_NUMBER));
    write_meta("source.commit", GGML_TRACE_SOURCE_COMMIT, strlen(GGML_TRACE_SOURCE_COMMIT));
    const int * number = (const int *) ggml_symbol("LLAMA_BUILD_NUMBER");
    const char * const * commit = (const char * const *) ggml_symbol("LLAMA_COMMIT");
    if (number && commit && *commit) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%d", *number);
        write_meta("llama.build_number", buf, strlen(buf));
        write_meta("llama.commit", *commit, strnlen(*commit, 64));
    }
}

// The flight recorder's settings (`ggml-trace record --ring`, which checks them): a value that
// does not parse is reported and ignored, and the file is written straight through.
RingConfig ring_config() {
    RingConfig ring;
    const char * seconds = getenv("GGML_TRACE_RING_SECONDS");
    const char * bytes = getenv("GGML_TRACE_RING_BYTES");
    char * end = nullptr;
    if (seconds && *seconds) {
        double s = strtod(seconds, &end);
        if (*end || !(s > 0) || s > 1e6) {
            fprintf(stderr, "ggml-trace: GGML_TRACE_RING_SECONDS=%s is not a number of seconds; no ring\n", seconds);
            return RingConfig();
        }
        ring.keep_ns = (uint64_t) (s * 1e9);
    }
    if (bytes && *bytes) {
        unsigned long long b = strtoull(bytes, &end, 10);
        if (*end || b == 0) {
            fprintf(stderr, "ggml-trace: GGML_TRACE_RING_BYTES=%s is not a number of bytes; no ring\n", bytes);
            return RingConfig();
        }
        ring.max_bytes = b;
    }
    return ring;
}

// Opens the trace file named by GGML_TRACE_OUTPUT. If another process of the same run already
// took that name (a program that starts another traced program), this one writes NAME.PID.
bool open_output(const char * path) {
    char alt[4200];
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
        snprintf(alt, sizeof(alt), "%s.%d", path, (int) getpid());
        path = alt;
    } else {
        close(fd);
    }
    return writer_open(path, GGML_TRACE_HOOKS_BUILD, GGML_BACKEND_API_VERSION, ring_config());
}

void at_exit() {
    device_timing_shutdown();
    cupti_flush();
    writer_close();
}

// The trace file opens on the first call that needs it: a ggml entry point, or a user mark from a
// process that has not loaded ggml yet.
std::once_flag g_writer_once;
void init_writer() {
    const char * out = getenv("GGML_TRACE_OUTPUT");
    delay_init(out && *out);  // exits when GGML_TRACE_DELAY does not parse
    if (!out || !*out) {
        return;  // loaded but not asked to trace: every hook passes straight through
    }
    const char * paused = getenv("GGML_TRACE_START_PAUSED");
    g_capture.store(!(paused && *paused == '1'));
    if (open_output(out)) {
        write_process_meta();
        delay_start();
        device_timing_init();
        cupti_start();
        atexit(at_exit);
    }
}

bool writer_ready() {
    std::call_once(g_writer_once, init_writer);
    return writer_is_open();
}

void init() {
    bool resolved = resolve_ggml_api();  // the real entry points, needed even when not tracing
    if (!writer_ready()) {
        g_state.store(State::DISABLED);
        return;
    }
    if (!resolved) {
        g_state.store(State::DISABLED);  // resolve_ggml_api said what is missing, on stderr
        const char * why = "this program's ggml lacks entry points the hooks need (named on stderr)";
        write_meta("disabled", why, strlen(why));  // so that readers can say the capture never attached
        return;
    }
    write_ggml_meta();
    char why[256];
    if (!check_tensor_layout(why, sizeof(why))) {
        disable(why);
        return;
    }
    g_state.store(State::ACTIVE);
}

bool active() {
    std::call_once(g_init_once, init);
    return g_state.load(std::memory_order_acquire) == State::ACTIVE;
}

bool user_capturing() { return writer_ready() && g_capture.load(std::memory_order_relaxed); }

struct ScopedGraph {  // marks the calling thread as inside one scheduler graph compute
    Context saved;
    bool owner;
    ScopedGraph(ggml_backend_sched_t sched) : saved(t_ctx), owner(t_ctx.active != sched) {
        if (owner) {
            t_ctx.active = sched;
            t_ctx.sched = sched_index(sched);
            t_ctx.graph = g_next_graph.fetch_add(1);
            t_ctx.split = 0;
        }
    }
    ~ScopedGraph() {
        if (owner) {
            t_ctx = saved;
        }
    }
};

// ---------------------------------------------------------------- interposed entry points

// Virtual devices join ggml's registry before the program first looks at it. The set-up itself
// enumerates devices through these same entry points, hence the re-entry guard.
std::atomic<bool> g_vdev_done{false};
std::mutex g_vdev_mutex;
thread_local bool t_in_vdev_setup = false;
void vdev_once() {
    if (g_vdev_done.load(std::memory_order_acquire) || t_in_vdev_setup) {
        return;
    }
    std::lock_guard<std::mutex> lock(g_vdev_mutex);
    if (!g_vdev_done.load()) {
        t_in_vdev_setup = true;
        setup_virtual_devices();
        t_in_vdev_setup = false;
        g_vdev_done.store(true, std::memory_order_release);
    }
}

template <typename F> F real(F & cache, const char * name) {
    if (!cache) {
        cache = (F) ggml_symbol(name, true);
        if (!cache) {
            fprintf(stderr, "ggml-trace: cannot find the real %s\n", name);
            abort();
        }
    }
    return cache;
}

}  // namespace

#define GGML_TRACE_ENUMERATION(ret, name, params, args)       \
    extern "C" ret name params {                              \
        static ret (*fn) params = nullptr;                    \
        vdev_once();                                          \
        return real(fn, #name) args;                          \
    }

GGML_TRACE_ENUMERATION(size_t, ggml_backend_dev_count, (void), ())
GGML_TRACE_ENUMERATION(ggml_backend_dev_t, ggml_backend_dev_get, (size_t i), (i))
GGML_TRACE_ENUMERATION(size_t, ggml_backend_reg_count, (void), ())
GGML_TRACE_ENUMERATION(ggml_backend_reg_t, ggml_backend_reg_get, (size_t i), (i))
GGML_TRACE_ENUMERATION(ggml_backend_reg_t, ggml_backend_reg_by_name, (const char * n), (n))
GGML_TRACE_ENUMERATION(ggml_backend_dev_t, ggml_backend_dev_by_name, (const char * n), (n))
GGML_TRACE_ENUMERATION(ggml_backend_dev_t, ggml_backend_dev_by_type, (enum ggml_backend_dev_type t), (t))
GGML_TRACE_ENUMERATION(ggml_backend_t, ggml_backend_init_by_name, (const char * n, const char * p), (n, p))
GGML_TRACE_ENUMERATION(ggml_backend_t, ggml_backend_init_by_type, (enum ggml_backend_dev_type t, const char * p), (t, p))
GGML_TRACE_ENUMERATION(ggml_backend_t, ggml_backend_init_best, (void), ())
GGML_TRACE_ENUMERATION(void, ggml_backend_load_all, (void), ())
GGML_TRACE_ENUMERATION(void, ggml_backend_load_all_from_path, (const char * d), (d))

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
    CallScope c(K_SCHED_NEW);
    ggml_backend_sched_t sched = g_api.sched_new(backends, bufts, n_backends, graph_size, parallel, op_offload);
    if (!on || !sched) {
        return sched;
    }
    uint32_t idx = g_next_sched.fetch_add(1);
    if (idx >= MAX_SCHEDS) {
        return sched;  // more schedulers than we can name: leave the rest untraced
    }
    SchedObjects & so = g_sched_objects[idx];
    so.n = n_backends;
    for (int i = 0; i < n_backends; i++) {
        so.backends[i] = backends[i];
        so.bufts[i] = bufts ? bufts[i] : g_api.backend_get_default_buffer_type(backends[i]);
    }
    so.n = meta_expand(so.backends, so.bufts, n_backends, MAX_BACKENDS);
    if (!register_backends(so.backends, so.bufts, so.n)) {
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
    CallScope c(K_SCHED_FREE);
    c.r.sched = idx;
    g_api.sched_free(sched);
    cupti_flush();  // while CUDA is still up: programs free their schedulers before exiting
    g_scheds[idx].store(nullptr, std::memory_order_release);
    if (capturing()) {
        c.commit();
    }
    if (g_state.load() == State::ACTIVE) {
        SchedObjects & so = g_sched_objects[idx];
        unregister_backends(so.backends, so.bufts, so.n);
    }
}

enum ggml_status ggml_backend_sched_graph_compute_async(ggml_backend_sched_t sched, ggml_cgraph * graph) {
    if (!active() || !capturing() || t_ctx.active == sched) {
        return g_api.sched_graph_compute_async(sched, graph);
    }
    maybe_clock_sync();
    ScopedGraph scope(sched);
    CallScope c(K_SCHED_GRAPH_COMPUTE);
    enum ggml_status st = g_api.sched_graph_compute_async(sched, graph);
    c.r.obj = (uint64_t) (uintptr_t) graph;
    c.r.arg = (uint64_t) g_api.sched_get_n_splits(sched);
    c.r.flags = st == GGML_STATUS_SUCCESS ? 0 : CALL_FAILED;
    c.commit();
    return st;
}

enum ggml_status ggml_backend_sched_graph_compute(ggml_backend_sched_t sched, ggml_cgraph * graph) {
    // ggml implements this as compute_async + synchronize; that inner call may not come back
    // through us (a call inside the same library), so the scope is opened here too.
    if (!active() || !capturing() || t_ctx.active == sched) {
        return g_api.sched_graph_compute(sched, graph);
    }
    maybe_clock_sync();
    ScopedGraph scope(sched);
    CallScope c(K_SCHED_GRAPH_COMPUTE);
    enum ggml_status st = g_api.sched_graph_compute(sched, graph);
    c.r.obj = (uint64_t) (uintptr_t) graph;
    c.r.arg = (uint64_t) g_api.sched_get_n_splits(sched);
    c.r.flags = (st == GGML_STATUS_SUCCESS ? 0 : CALL_FAILED) | CALL_SYNC_COMPUTE;
    c.commit();
    return st;
}

bool ggml_backend_sched_alloc_graph(ggml_backend_sched_t sched, ggml_cgraph * graph) {
    if (!active() || !capturing()) {
        return g_api.sched_alloc_graph(sched, graph);
    }
    CallScope c(K_SCHED_ALLOC_GRAPH);
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
    CallScope c(K_SCHED_RESERVE);
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
    CallScope c(K_SCHED_SYNCHRONIZE);
    c.r.sched = sched_index(sched);
    g_api.sched_synchronize(sched);
    c.commit();
}

void ggml_backend_sched_reset(ggml_backend_sched_t sched) {
    if (!active() || !capturing()) {
        return g_api.sched_reset(sched);
    }
    CallScope c(K_SCHED_RESET);
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
        CallScope c(K_BUF_FREE);
        c.r.backend = backend_of_buffer(buffer);
        c.r.obj = (uint64_t) (uintptr_t) buffer;
        c.r.arg = buffer->size;
        BufferRec * r = (BufferRec *) reserve_kept_record();
        if (r) {
            r->event = BUF_FREED;
            r->thread = thread_index();
            r->t = now_ticks();
            r->ptr = (uint64_t) (uintptr_t) buffer;
            r->size = buffer->size;
            commit_record(r, REC_BUFFER);
        }
        c.commit();
    }
    g_api.buffer_free(buffer);
}

// ---------------------------------------------------------------- control API (ctypes)

int ggml_trace_active(void) { return writer_ready() ? 1 : 0; }

void ggml_trace_start(void) { g_capture.store(true); }

void ggml_trace_stop(void) { g_capture.store(false); }

const char * ggml_trace_output_path(void) { return writer_ready() ? writer_path() : ""; }

uint64_t ggml_trace_now(void) { return now_ticks(); }

void ggml_trace_mark(const char * name) {
    if (!user_capturing()) {
        return;
    }
    CallScope c(K_USER_MARK);
    c.r.obj = intern(name);
    c.commit();
}

void ggml_trace_range(const char * name, uint64_t t_begin) {
    if (!user_capturing()) {
        return;
    }
    CallScope c(K_USER_RANGE);
    c.r.t_begin = t_begin;
    c.r.obj = intern(name);
    c.commit();
}

void ggml_trace_flush(void) {
    if (writer_ready()) {
        writer_flush();
    }
}

void ggml_trace_close(void) { writer_close(); }

}  // extern "C"
