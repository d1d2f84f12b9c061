#include "ggml_api.h"

#include <stdio.h>
#include <string.h>

#include "platform.h"

namespace ggml_trace {

GgmlApi g_api;

namespace {

template <typename T> bool need(T & fn, const char * name, bool next = false) {
    return resolve_symbol(fn, name, next, "tracing (the program runs untraced)");
}

}  // namespace

void * ggml_symbol(const char * name, bool next) { return g_os.symbol(name, next); }

bool resolve_symbol_ptr(void ** fn, const char * name, bool next, const char * user) {
    *fn = ggml_symbol(name, next);
    if (!*fn) {
        fprintf(stderr, "ggml-trace: %s needs %s, which this program's ggml lacks\n", user, name);
    }
    return *fn != nullptr;
}

bool resolve_ggml_api() {
    GgmlApi & a = g_api;
    bool ok = true;
    ok &= need(a.sched_new, "ggml_backend_sched_new", true);
    ok &= need(a.sched_free, "ggml_backend_sched_free", true);
    ok &= need(a.sched_graph_compute, "ggml_backend_sched_graph_compute", true);
    ok &= need(a.sched_graph_compute_async, "ggml_backend_sched_graph_compute_async", true);
    ok &= need(a.sched_alloc_graph, "ggml_backend_sched_alloc_graph", true);
    ok &= need(a.sched_reserve, "ggml_backend_sched_reserve", true);
    ok &= need(a.sched_synchronize, "ggml_backend_sched_synchronize", true);
    ok &= need(a.sched_reset, "ggml_backend_sched_reset", true);
    ok &= need(a.buffer_free, "ggml_backend_buffer_free", true);
    ok &= need(a.dev_init, "ggml_backend_dev_init", true);
    ok &= need(a.sched_get_n_splits, "ggml_backend_sched_get_n_splits");
    ok &= need(a.sched_get_n_copies, "ggml_backend_sched_get_n_copies");
    ok &= need(a.backend_name, "ggml_backend_name");
    ok &= need(a.backend_get_device, "ggml_backend_get_device");
    ok &= need(a.backend_get_default_buffer_type, "ggml_backend_get_default_buffer_type");
    ok &= need(a.dev_name, "ggml_backend_dev_name");
    ok &= need(a.dev_description, "ggml_backend_dev_description");
    ok &= need(a.dev_type, "ggml_backend_dev_type");
    ok &= need(a.dev_backend_reg, "ggml_backend_dev_backend_reg");
    ok &= need(a.buft_name, "ggml_backend_buft_name");
    ok &= need(a.buft_get_device, "ggml_backend_buft_get_device");
    ok &= need(a.buft_is_host, "ggml_backend_buft_is_host");
    ok &= need(a.buffer_get_base, "ggml_backend_buffer_get_base");
    ok &= need(a.buffer_get_size, "ggml_backend_buffer_get_size");
    ok &= need(a.buffer_get_usage, "ggml_backend_buffer_get_usage");
    ok &= need(a.buffer_get_type, "ggml_backend_buffer_get_type");
    ok &= need(a.nbytes, "ggml_nbytes");
    ok &= need(a.graph_n_nodes, "ggml_graph_n_nodes");
    ok &= need(a.graph_node, "ggml_graph_node");
    ok &= need(a.tensor_overhead, "ggml_tensor_overhead");
    a.version = (const char * (*) (void)) ggml_symbol("ggml_version", false);
    a.commit = (const char * (*) (void)) ggml_symbol("ggml_commit", false);
    return ok;
}

bool check_tensor_layout(char * why, size_t why_len) {
    // ggml_tensor_overhead() = sizeof(struct ggml_object) (32 bytes since 2023) + sizeof(ggml_tensor)
    size_t expect = sizeof(struct ggml_tensor) + 32;
    if (g_api.tensor_overhead() != expect) {
        snprintf(why, why_len, "ggml_tensor is %zu bytes in this ggml, %zu in the hooks' headers",
                 g_api.tensor_overhead() - 32, sizeof(struct ggml_tensor));
        return false;
    }
    return true;
}

bool check_backend_layout(ggml_backend_t backend, char * why, size_t why_len) {
    ggml_backend_dev_t dev = g_api.backend_get_device(backend);
    if (backend->device != dev) {
        snprintf(why, why_len, "struct ggml_backend: the device field is not where the hooks expect it "
                               "(the backend vtable has a different number of entries)");
        return false;
    }
    if (dev) {
        ggml_backend_reg_t reg = g_api.dev_backend_reg(dev);
        if (dev->reg != reg) {
            snprintf(why, why_len, "struct ggml_backend_device: layout differs from the hooks' headers");
            return false;
        }
        if (reg && reg->api_version != GGML_BACKEND_API_VERSION) {
            snprintf(why, why_len, "backend %s has backend API version %d, the hooks were built for %d",
                     g_api.backend_name(backend), reg->api_version, GGML_BACKEND_API_VERSION);
            return false;
        }
    }
    if (backend->iface.get_name && backend->iface.get_name(backend) != g_api.backend_name(backend)) {
        snprintf(why, why_len, "struct ggml_backend_i: get_name is not the first entry");
        return false;
    }
    return true;
}

bool check_buffer_type_layout(ggml_backend_buffer_type_t buft, char * why, size_t why_len) {
    if (buft->device != g_api.buft_get_device(buft)) {
        snprintf(why, why_len, "struct ggml_backend_buffer_type: the device field is not where the hooks "
                               "expect it (the buffer-type vtable has a different number of entries)");
        return false;
    }
    return true;
}

bool check_buffer_layout(ggml_backend_buffer_t buffer, char * why, size_t why_len) {
    if (buffer->buft != g_api.buffer_get_type(buffer) || buffer->size != g_api.buffer_get_size(buffer) ||
        buffer->usage != g_api.buffer_get_usage(buffer)) {
        snprintf(why, why_len, "struct ggml_backend_buffer: fields are not where the hooks expect them "
                               "(the buffer vtable has a different number of entries)");
        return false;
    }
    return true;
}

}  // namespace ggml_trace
