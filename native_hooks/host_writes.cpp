#include "host_writes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>
#include <vector>

#include "capture.h"
#include "ggml_api.h"
#include "trace_writer.h"
#include "vtable_hooks.h"

namespace ggml_trace {

namespace {

enum class Mode { OFF, INFER, OBSERVE };
Mode g_mode = Mode::INFER;

uint64_t ptr(const void * p) { return (uint64_t) (uintptr_t) p; }

// The graph's inputs in host buffers, each once (graphs have a handful: a linear check suffices).
void host_inputs(ggml_cgraph * graph, std::vector<const ggml_tensor *> & out) {
    out.clear();
    int n = g_api.graph_n_nodes(graph);
    for (int i = 0; i < n; i++) {
        const ggml_tensor * node = g_api.graph_node(graph, i);
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            if (!node->src[j]) continue;
            const ggml_tensor * t = view_root(node->src[j]);
            if (!(t->flags & GGML_TENSOR_FLAG_INPUT) || !t->buffer || !t->data || !t->buffer->buft ||
                !g_api.buft_is_host(t->buffer->buft)) {
                continue;
            }
            bool seen = false;
            for (const ggml_tensor * o : out) seen = seen || o == t;
            if (!seen) out.push_back(t);
        }
    }
}

// Tensors a hooked call wrote since this thread's last graph compute (compared by address only).
struct Noted {
    static const int CAP = 256;
    const void * t[CAP];
    int n = 0;
    void add(const void * p) {
        if (n < CAP) t[n++] = p;
    }
    bool has(const void * p) const {
        for (int i = 0; i < n; i++) {
            if (t[i] == p) return true;
        }
        return false;
    }
};
thread_local Noted t_noted;

thread_local std::vector<const ggml_tensor *> t_inputs;  // host_inputs' answer, its storage reused

// One host_write call of `kind` on `size` bytes of `tensor` in `buffer`, written in [t_begin, now]
// (t_begin 0: now); `access(call_id)` emits its one write access.
template <typename Access>
void write_call(uint8_t kind, const void * tensor, ggml_backend_buffer_t buffer, uint64_t size, uint64_t t_begin,
                Access access) {
    Call c(kind);
    if (t_begin) c.r.t_begin = t_begin;
    c.r.obj = ptr(tensor);
    c.r.arg = size;
    c.r.backend = backend_of_buffer(buffer);
    access(c.id());
    c.commit();
}

// observe: the inputs of the last graph computed and their bytes then. Addresses only: the tensor
// structs may be gone (llama.cpp frees a graph's context before resetting the scheduler); the
// bytes stay until the scheduler reallocates or the buffer is freed (both forget first).
struct Kept {
    const void * tensor;
    ggml_backend_buffer_t buffer;
    const uint8_t * data;
    uint64_t offset;
    uint64_t name;
    std::vector<uint8_t> bytes;
};
std::mutex g_kept_mutex;
std::vector<Kept> g_kept;
size_t g_n_kept = 0;     // entries in use (the rest keep their storage for the next graph)
uint64_t g_kept_at = 0;  // when the bytes were last known to be these

void compare_kept() {
    uint64_t now = now_ticks();
    for (size_t i = 0; i < g_n_kept; i++) {
        Kept & k = g_kept[i];
        size_t n = k.bytes.size();
        if (memcmp(k.data, k.bytes.data(), n) == 0) continue;
        size_t lo = 0, hi = n;
        while (k.data[lo] == k.bytes[lo]) lo++;
        while (k.data[hi - 1] == k.bytes[hi - 1]) hi--;
        if (!t_noted.has(k.tensor)) {
            write_call(K_HOST_WRITE, k.tensor, k.buffer, hi - lo, g_kept_at, [&](uint64_t id) {
                emit_range(REC_ACCESS, ACC_WRITE, id, k.buffer, k.offset + lo, hi - lo, k.name, k.name, GGML_OP_NONE,
                           NONE32);
            });
        }
        memcpy(k.bytes.data(), k.data, n);
    }
    g_kept_at = now;
}

}  // namespace

void host_writes_init() {
    const char * v = getenv("GGML_TRACE_HOST_WRITES");
    if (!v || !*v || strcmp(v, "infer") == 0) {
        g_mode = Mode::INFER;
    } else if (strcmp(v, "observe") == 0) {
        g_mode = Mode::OBSERVE;
    } else if (strcmp(v, "off") == 0) {
        g_mode = Mode::OFF;
    } else {
        fprintf(stderr, "ggml-trace: GGML_TRACE_HOST_WRITES=%s: expected infer, observe or off\n", v);
        exit(2);
    }
}

void host_writes_noted(const ggml_tensor * t) {
    if (g_mode != Mode::OFF) t_noted.add(view_root(t));
}

void host_writes_before_compute(ggml_cgraph * graph) {
    if (g_mode == Mode::INFER) {
        host_inputs(graph, t_inputs);
        for (const ggml_tensor * t : t_inputs) {
            if (t_noted.has(t)) continue;
            write_call(K_HOST_WRITE_INFERRED, t, t->buffer, g_api.nbytes(t), 0, [&](uint64_t id) {
                emit_tensor(REC_ACCESS, ACC_WRITE, id, t, 0, NONE32);  // registers a buffer not seen yet
            });
        }
    } else if (g_mode == Mode::OBSERVE) {
        // compared now, and let go until this compute returns: inside it the scheduler may
        // reallocate the buffers, and its own waits are not the program's stores
        std::lock_guard<std::mutex> lock(g_kept_mutex);
        if (g_n_kept) compare_kept();
        g_n_kept = 0;
    }
    t_noted.n = 0;
}

void host_writes_after_compute(ggml_cgraph * graph) {
    if (g_mode != Mode::OBSERVE) return;
    host_inputs(graph, t_inputs);
    std::lock_guard<std::mutex> lock(g_kept_mutex);
    if (g_kept.size() < t_inputs.size()) g_kept.resize(t_inputs.size());
    g_n_kept = t_inputs.size();
    for (size_t i = 0; i < t_inputs.size(); i++) {
        const ggml_tensor * t = t_inputs[i];
        Kept & k = g_kept[i];
        k.tensor = t;
        k.buffer = t->buffer;
        k.data = (const uint8_t *) t->data;
        k.offset = (uint64_t) ((const char *) t->data - (const char *) g_api.buffer_get_base(t->buffer));
        k.name = tensor_name(t);
        k.bytes.resize(g_api.nbytes(t));
        memcpy(k.bytes.data(), k.data, k.bytes.size());
    }
    g_kept_at = now_ticks();
}

void host_writes_before_wait() {
    if (g_mode != Mode::OBSERVE) return;
    std::lock_guard<std::mutex> lock(g_kept_mutex);
    if (g_n_kept) compare_kept();
}

void host_writes_after_wait() {
    if (g_mode != Mode::OBSERVE) return;
    std::lock_guard<std::mutex> lock(g_kept_mutex);
    g_kept_at = now_ticks();  // a change seen later happened after the wait
}

void host_writes_forget() {
    if (g_mode != Mode::OBSERVE) return;
    std::lock_guard<std::mutex> lock(g_kept_mutex);
    if (g_n_kept) compare_kept();
    g_n_kept = 0;
}

}  // namespace ggml_trace
