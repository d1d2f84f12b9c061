#include "capture.h"

#include <stdio.h>
#include <string.h>

#include "cupti_mode.h"
#include "ggml_api.h"
#include "meta.h"
#include "trace_writer.h"
#include "vtable_hooks.h"

#ifndef GGML_TRACE_HOOKS_BUILD
#define GGML_TRACE_HOOKS_BUILD "unknown"
#endif

namespace ggml_trace {

std::atomic<CaptureState> g_capture_state{CaptureState::UNINIT};
std::atomic<bool> g_capture_on{true};

void disable(const char * why) {
    fprintf(stderr,
            "ggml-trace: the hooks were built for ggml %s (backend API %d) and do not match this program's "
            "ggml: %s. Running untraced; rebuild the hooks against this program's ggml sources "
            "(see docs/building.md).\n",
            GGML_TRACE_HOOKS_BUILD, GGML_BACKEND_API_VERSION, why);
    g_capture_state.store(CaptureState::DISABLED);
    if (writer_is_open()) {
        write_meta("disabled", why, strlen(why));
    }
}

ThreadContext & thread_context() {
    static thread_local ThreadContext c;
    return c;
}

CallContext & current_call() {
    static thread_local CallContext c;
    return c;
}

// ---------------------------------------------------------------- calls

Call::Call(uint8_t kind) {
    const ThreadContext & t = thread_context();
    r.kind = kind;
    r.sched = t.sched;
    r.graph = t.graph;
    r.split = t.split;
    r.backend = r.backend2 = NONE32;
    r.t_begin = now_ticks();
    // work this call enqueues on a (virtual) device will name it, until it ends
    outer_ = current_call();
    current_call() = CallContext{id(), r.graph, r.split};
    if (cupti_active()) {
        cupti_push(id());
        correlated_ = true;
    }
}

Call::~Call() {
    current_call() = outer_;  // here, not in commit(): some calls end uncommitted (early returns, the allreduce)
    if (correlated_) {
        cupti_pop();
    }
}

uint64_t Call::id() {
    if (!r.call_id) {
        r.call_id = next_call_id();
    }
    return r.call_id;
}

void Call::commit() {
    r.t_end = now_ticks();
    id();
    commit_call(r);
    maybe_clock_sync(r.t_end);
}

void commit_call(CallRec & r) {
    r.thread = thread_index();
    meta_commit(r);  // a meta call's flag, or the NEST record of a call it made
    // `r` lives in its Call for the call's duration, so it is copied into the slot: every byte
    // but the type byte, which the emit stores last.
    emit_record<CallRec>(REC_CALL, [&](CallRec & out) {
        memcpy((uint8_t *) &out + 1, (const uint8_t *) &r + 1, sizeof(CallRec) - 1);
    });
}

// ---------------------------------------------------------------- accesses

ggml_backend_buffer_t buffer_of(const ggml_tensor * t) {
    if (t->buffer) {
        return t->buffer;
    }
    return t->view_src ? t->view_src->buffer : nullptr;
}

uint64_t tensor_name(const ggml_tensor * t) {
    uint64_t m = t->name[0] ? 0 : meta_unnamed(t);
    return m ? m : intern(t->name);
}

void emit_range(uint8_t type, uint8_t mode, uint64_t call_id, ggml_backend_buffer_t buffer, uint64_t offset,
                uint64_t size, uint64_t tensor_name, uint64_t node_name, uint32_t op, uint32_t index, uint8_t flags) {
    if (meta_parent_call(call_id)) {
        return;  // a meta backend's call: its simple backends' calls carry the accesses
    }
    emit_record<AccessRec>(type, [&](AccessRec & r) {
        r.mode = mode;
        r.flags = flags;
        r.thread = thread_index();
        r.call_id = call_id;
        r.buffer = (uint64_t) (uintptr_t) buffer;
        r.offset = offset;
        r.size = size;
        r.tensor = tensor_name;
        r.node = node_name;
        r.op = op;
        r.index = index;
    });
}

// The buffer this thread last registered: a split's accesses come in long runs on the same
// compute or weight buffer, and registering looks it up in a shared table.
thread_local ggml_backend_buffer_t t_last_seen = nullptr;

void emit_tensor(uint8_t type, uint8_t mode, uint64_t call_id, const ggml_tensor * t, uint64_t node_name,
                 uint32_t index, size_t extra, size_t size, uint64_t name, uint8_t flags) {
    ggml_backend_buffer_t buf = buffer_of(t);
    if (!buf || !t->data) {
        return;
    }
    // Still ours (a freed buffer's address may hold a new, unpatched one): nothing to register.
    if (buf != t_last_seen || !buffer_hooked(buf)) {
        see_buffer(buf, BUF_SEEN);
        t_last_seen = buf;
    }
    uint64_t offset = (uint64_t) ((const char *) t->data - (const char *) g_api.buffer_get_base(buf)) + extra;
    name = name ? name : tensor_name(t);
    emit_range(type, mode, call_id, buf, offset, size == (size_t) -1 ? g_api.nbytes(t) : size, name,
               node_name ? node_name : name, (uint32_t) t->op, index, flags);
}

namespace {
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

}  // namespace

bool writes_nothing(const ggml_tensor * node) {
    const ggml_op op = node->op;
    return op == GGML_OP_NONE || op == GGML_OP_VIEW || op == GGML_OP_RESHAPE || op == GGML_OP_PERMUTE ||
           op == GGML_OP_TRANSPOSE;
}

const ggml_tensor * view_root(const ggml_tensor * t) {
    while (t->view_src) {
        t = t->view_src;
    }
    return t;
}

void emit_split_accesses(uint64_t call_id, ggml_cgraph * graph, bool per_node) {
    int n = g_api.graph_n_nodes(graph);
    t_produced.clear();
    t_read.clear();
    for (int i = 0; i < n; i++) {
        ggml_tensor * node = g_api.graph_node(graph, i);
        if (writes_nothing(node)) {
            continue;
        }
        uint64_t node_name = tensor_name(node);
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            const ggml_tensor * src = node->src[j];
            if (!src) {
                continue;
            }
            bool first = !t_produced.contains(src) && !t_produced.contains(view_root(src)) && t_read.insert(src);
            if (first || per_node) {
                emit_tensor(REC_ACCESS, ACC_READ, call_id, src, node_name, (uint32_t) i, 0, (size_t) -1, 0,
                            first ? 0 : ACCESS_PER_NODE);
            }
        }
        t_produced.insert(node);
        emit_tensor(REC_ACCESS, ACC_WRITE, call_id, node, node_name, (uint32_t) i, 0, (size_t) -1, node_name);
    }
}

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

void emit_host(uint8_t mode, uint64_t call_id, const void * data, size_t size) {
    emit_range(REC_ACCESS, mode, call_id, nullptr, (uint64_t) (uintptr_t) data, size, 0, 0, NONE32, NONE32);
}

}  // namespace ggml_trace
