// Tensor parallelism: parent ranges for meta backend calls, NEST records for the calls they make
// on the simple backends, and names for the allreduce temporaries. See meta.h and
// docs/tensor-parallel.md.
#include "meta.h"

#include <stdio.h>
#include <string.h>

#include <atomic>
#include <initializer_list>
#include <mutex>

#include "ggml_api.h"
#include "registry.h"
#include "trace_writer.h"

namespace ggml_trace {

namespace {

const int MAX_META = 8;
const int MAX_SIMPLE = 16;  // GGML_BACKEND_META_MAX_DEVICES
const int MAX_SCRATCH = 128;

// ggml's exported meta helpers, resolved by name: builds before the meta backend lack them.
struct MetaApi {
    bool (*is_meta)(ggml_backend_t) = nullptr;
    size_t (*n_backends)(ggml_backend_t) = nullptr;
    ggml_backend_t (*simple_backend)(ggml_backend_t, size_t) = nullptr;
};
MetaApi g_meta_api;
std::once_flag g_resolve_once;

bool resolved() {
    std::call_once(g_resolve_once, [] {
        MetaApi a;
        a.is_meta = (bool (*)(ggml_backend_t)) ggml_symbol("ggml_backend_is_meta");
        a.n_backends = (size_t (*)(ggml_backend_t)) ggml_symbol("ggml_backend_meta_n_backends");
        a.simple_backend = (ggml_backend_t (*)(ggml_backend_t, size_t)) ggml_symbol("ggml_backend_meta_simple_backend");
        if (a.is_meta && a.n_backends && a.simple_backend) {
            g_meta_api = a;
        }
    });
    return g_meta_api.is_meta != nullptr;
}

struct Meta {  // one meta backend seen by a scheduler
    std::atomic<ggml_backend_t> backend{nullptr};
    ggml_backend_dev_t device = nullptr;
    int n = 0;
    ggml_backend_t simple[MAX_SIMPLE];
};
Meta g_metas[MAX_META];
std::mutex g_meta_mutex;

struct Scratch {  // an allreduce temporary buffer and its name
    std::atomic<ggml_backend_buffer_t> buffer{nullptr};
    uint64_t name = 0;
};
Scratch g_scratch[MAX_SCRATCH];

// The open parent on this thread (meta calls do not nest in one another).
struct Frame {
    uint64_t parent = 0;
    const Meta * meta = nullptr;
    uint32_t meta_index = NONE32;
    uint32_t simple_index[MAX_SIMPLE];  // trace backend index of each simple backend
    int main_count[MAX_SIMPLE];         // main computes so far per device: the subgraph index
    int allocs[MAX_SIMPLE];             // buffers allocated so far per device in this call
    uint8_t pending_role = ROLE_NONE;   // set by meta_note_compute for the next commit
};
thread_local Frame t_frame;

const Meta * meta_of_backend(ggml_backend_t b) {
    for (const Meta & m : g_metas) {
        if (b && m.backend.load(std::memory_order_acquire) == b) return &m;
    }
    return nullptr;
}

const Meta * meta_of_buffer(ggml_backend_buffer_t buf) {
    ggml_backend_dev_t dev = buf && buf->buft ? buf->buft->device : nullptr;
    for (const Meta & m : g_metas) {
        if (dev && m.backend.load(std::memory_order_acquire) && m.device == dev) return &m;
    }
    return nullptr;
}

void open_frame(uint64_t call_id, const Meta * m) {
    t_frame = Frame();
    t_frame.parent = call_id;
    t_frame.meta = m;
    BackendEntry * e = find_backend(m->backend.load());
    t_frame.meta_index = e ? e->index : NONE32;
    for (int j = 0; j < m->n; j++) {
        BackendEntry * s = find_backend(m->simple[j]);
        t_frame.simple_index[j] = s ? s->index : NONE32;
        t_frame.main_count[j] = 0;
        t_frame.allocs[j] = 0;
    }
}

int device_of(uint32_t backend_index) {
    if (!t_frame.meta || backend_index == NONE32) return -1;
    for (int j = 0; j < t_frame.meta->n; j++) {
        if (t_frame.simple_index[j] == backend_index) return j;
    }
    return -1;
}

int device_of_buffer(ggml_backend_buffer_t buf) {
    return buf && buf->buft ? device_of(backend_index_of_device(buf->buft->device)) : -1;
}

const char * role_word(uint8_t role) {
    static const char * words[] = {"?", "main", "zero", "copy", "reduce", "io", "sync", "other"};
    return role < 8 ? words[role] : "?";
}

const Scratch * scratch_of(ggml_backend_buffer_t buf) {
    for (const Scratch & s : g_scratch) {
        if (buf && s.buffer.load(std::memory_order_acquire) == buf) return &s;
    }
    return nullptr;
}

}  // namespace

int meta_expand(ggml_backend_t * backends, ggml_backend_buffer_type_t * bufts, int n, int cap) {
    if (!resolved()) {
        return n;
    }
    int out = n;
    for (int i = 0; i < n; i++) {
        ggml_backend_t b = backends[i];
        if (!g_meta_api.is_meta(b)) continue;
        std::lock_guard<std::mutex> lock(g_meta_mutex);
        Meta * m = (Meta *) meta_of_backend(b);
        for (int k = 0; !m && k < MAX_META; k++) {
            if (!g_metas[k].backend.load()) m = &g_metas[k];
        }
        if (!m) {
            fprintf(stderr, "ggml-trace: more than %d meta backends; %s is traced without its nesting\n", MAX_META,
                    g_api.backend_name(b));
            continue;
        }
        m->device = b->device;
        m->n = (int) g_meta_api.n_backends(b);
        if (m->n > MAX_SIMPLE) m->n = MAX_SIMPLE;
        for (int j = 0; j < m->n; j++) {
            m->simple[j] = g_meta_api.simple_backend(b, (size_t) j);
            if (out < cap) {
                backends[out] = m->simple[j];
                bufts[out] = g_api.backend_get_default_buffer_type(m->simple[j]);
                out++;
            }
        }
        m->backend.store(b, std::memory_order_release);
    }
    return out;
}

bool meta_nested() { return t_frame.parent != 0; }

bool meta_parent_call(uint64_t call_id) { return t_frame.parent != 0 && t_frame.parent == call_id; }

MetaParent::MetaParent(uint64_t call_id, ggml_backend_t backend) {
    const Meta * m = t_frame.parent ? nullptr : meta_of_backend(backend);
    if (m) {
        open_frame(call_id, m);
        on = true;
    }
}

MetaParent::MetaParent(uint64_t call_id, ggml_backend_buffer_t buffer) {
    const Meta * m = t_frame.parent ? nullptr : meta_of_buffer(buffer);
    if (m) {
        open_frame(call_id, m);
        on = true;
    }
}

MetaParent::~MetaParent() {
    if (on) t_frame = Frame();
}

// The allreduce's own computes are one-node graphs on unnamed tensors: an ADD of a temporary
// (reduce), or a SCALE by 0 / FILL with 0 writing the node's own bytes (zero); the rest is main.
void meta_note_compute(const ggml_cgraph * graph) {
    if (!t_frame.parent) return;
    uint8_t role = ROLE_MAIN;
    if (g_api.graph_n_nodes((ggml_cgraph *) graph) == 1) {
        const ggml_tensor * n = g_api.graph_node((ggml_cgraph *) graph, 0);
        bool unnamed = n->name[0] == '\0';
        if (unnamed && n->op == GGML_OP_ADD && n->src[1] && scratch_of(n->src[1]->buffer)) {
            role = ROLE_REDUCE;
        } else if (unnamed && (n->op == GGML_OP_SCALE || n->op == GGML_OP_FILL) && n->src[0] &&
                   n->data == n->src[0]->data) {
            role = ROLE_ZERO;
        }
    }
    t_frame.pending_role = role;
}

void meta_note_alloc(ggml_backend_buffer_t buffer) {
    if (!t_frame.parent || !buffer) return;
    int j = device_of_buffer(buffer);
    if (j < 0) return;
    // Inside a meta compute, ggml allocates only the allreduce temporaries: n_reduce_steps per
    // device, in step order (bufs[i] of ggml-backend-meta.cpp).
    char name[64];
    snprintf(name, sizeof(name), "allreduce.tmp[%d]@%s", t_frame.allocs[j]++,
             g_api.backend_name(t_frame.meta->simple[j]));
    uint64_t id = intern(name);
    std::lock_guard<std::mutex> lock(g_meta_mutex);
    Scratch * free_slot = nullptr;
    for (Scratch & s : g_scratch) {
        ggml_backend_buffer_t b = s.buffer.load();
        if (b == buffer) { s.name = id; return; }
        if (!b && !free_slot) free_slot = &s;
    }
    if (free_slot) {
        free_slot->name = id;
        free_slot->buffer.store(buffer, std::memory_order_release);
    }
}

void meta_commit(CallRec & r) {
    if (!t_frame.parent) return;
    if (r.call_id == t_frame.parent) {
        r.flags |= CALL_META_PARENT;
        return;
    }
    uint8_t role;
    int device;
    int subgraph = -1;
    switch (r.kind) {
        case K_GRAPH_COMPUTE:
            role = t_frame.pending_role ? t_frame.pending_role : ROLE_MAIN;
            device = device_of(r.backend);
            if (device >= 0) {
                if (role == ROLE_MAIN) t_frame.main_count[device]++;
                subgraph = t_frame.main_count[device] - 1;
            }
            break;
        case K_CPY_TENSOR_ASYNC:
        case K_BUF_CPY_TENSOR:
            role = ROLE_COPY;
            device = device_of(r.backend2);  // the source: its queue runs the copy
            if (device >= 0) subgraph = t_frame.main_count[device] - 1;
            break;
        case K_COMM_ALLREDUCE:
            role = ROLE_REDUCE;
            device = device_of(r.backend);
            if (device >= 0) subgraph = t_frame.main_count[device] - 1;
            break;
        case K_SET_TENSOR_ASYNC: case K_GET_TENSOR_ASYNC: case K_SET_TENSOR_2D_ASYNC: case K_GET_TENSOR_2D_ASYNC:
        case K_BUF_SET_TENSOR: case K_BUF_GET_TENSOR: case K_BUF_SET_TENSOR_2D: case K_BUF_GET_TENSOR_2D:
            role = ROLE_IO;
            device = device_of(r.backend);
            break;
        case K_SYNCHRONIZE: case K_EVENT_RECORD: case K_EVENT_WAIT: case K_EVENT_SYNCHRONIZE:
            role = ROLE_SYNC;
            device = device_of(r.backend);
            break;
        default:
            role = ROLE_OTHER;
            device = device_of(r.backend);
    }
    t_frame.pending_role = ROLE_NONE;
    emit_record<NestRec>(REC_NEST, [&](NestRec & n) {
        n.role = role;
        n.device = device < 0 ? 0xff : (uint8_t) device;
        n.thread = thread_index();
        n.call_id = r.call_id;
        n.parent = t_frame.parent;
        n.meta_backend = t_frame.meta_index;
        n.subgraph = subgraph;
    });
}

uint64_t meta_unnamed(const ggml_tensor * t) {
    if (const Scratch * s = scratch_of(t->buffer)) {
        return s->name;
    }
    // The allreduce's ADD and zeroing nodes write the bytes of the node they reduce.
    for (const ggml_tensor * of : {t->view_src, t->src[0]}) {
        if (of && of->data == t->data && of->name[0]) {
            return intern(of->name);
        }
    }
    if (t_frame.parent) {
        char name[48];
        snprintf(name, sizeof(name), "allreduce.%s", role_word(t_frame.pending_role));
        return intern(name);
    }
    return 0;
}

}  // namespace ggml_trace
