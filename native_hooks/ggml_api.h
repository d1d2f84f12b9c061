// ggml functions the hooks call, resolved at run time from the program's own libggml-base.
//
// The hook library must not link libggml: a DT_NEEDED entry would load *our* build's ggml into a
// program built against another one. Instead every function is looked up once, in the process.
#pragma once
#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace ggml_trace {

struct GgmlApi {
    // scheduler entry points we interpose (the real ones, found with RTLD_NEXT)
    ggml_backend_sched_t (*sched_new)(ggml_backend_t *, ggml_backend_buffer_type_t *, int, size_t, bool, bool);
    void (*sched_free)(ggml_backend_sched_t);
    enum ggml_status (*sched_graph_compute)(ggml_backend_sched_t, struct ggml_cgraph *);
    enum ggml_status (*sched_graph_compute_async)(ggml_backend_sched_t, struct ggml_cgraph *);
    bool (*sched_alloc_graph)(ggml_backend_sched_t, struct ggml_cgraph *);
    bool (*sched_reserve)(ggml_backend_sched_t, struct ggml_cgraph *);
    void (*sched_synchronize)(ggml_backend_sched_t);
    void (*sched_reset)(ggml_backend_sched_t);
    void (*buffer_free)(ggml_backend_buffer_t);
    ggml_backend_t (*dev_init)(ggml_backend_dev_t, const char *);

    // helpers from libggml-base
    int (*sched_get_n_splits)(ggml_backend_sched_t);
    int (*sched_get_n_copies)(ggml_backend_sched_t);
    const char * (*backend_name)(ggml_backend_t);
    ggml_backend_dev_t (*backend_get_device)(ggml_backend_t);
    ggml_backend_buffer_type_t (*backend_get_default_buffer_type)(ggml_backend_t);
    const char * (*dev_name)(ggml_backend_dev_t);
    const char * (*dev_description)(ggml_backend_dev_t);
    enum ggml_backend_dev_type (*dev_type)(ggml_backend_dev_t);
    ggml_backend_reg_t (*dev_backend_reg)(ggml_backend_dev_t);
    const char * (*buft_name)(ggml_backend_buffer_type_t);
    ggml_backend_dev_t (*buft_get_device)(ggml_backend_buffer_type_t);
    bool (*buft_is_host)(ggml_backend_buffer_type_t);
    void * (*buffer_get_base)(ggml_backend_buffer_t);
    size_t (*buffer_get_size)(ggml_backend_buffer_t);
    enum ggml_backend_buffer_usage (*buffer_get_usage)(ggml_backend_buffer_t);
    ggml_backend_buffer_type_t (*buffer_get_type)(ggml_backend_buffer_t);
    size_t (*nbytes)(const struct ggml_tensor *);
    int (*graph_n_nodes)(struct ggml_cgraph *);
    struct ggml_tensor * (*graph_node)(struct ggml_cgraph *, int);
    size_t (*tensor_overhead)(void);
    const char * (*version)(void);  // optional (older ggml has none)
    const char * (*commit)(void);   // optional
};

extern GgmlApi g_api;

// Looks a ggml function up in the process (`next`: the definition after the hooks' own, for the
// entry points the hooks interpose).
void * ggml_symbol(const char * name, bool next = false);

// ggml_symbol into `fn`; when missing, says on stderr that `user` needs it.
bool resolve_symbol_ptr(void ** fn, const char * name, bool next, const char * user);
template <typename T> bool resolve_symbol(T & fn, const char * name, bool next, const char * user) {
    void * p = nullptr;
    bool ok = resolve_symbol_ptr(&p, name, next, user);
    fn = (T) p;
    return ok;
}

// Resolves everything; false (with a message on stderr) when this ggml lacks something we need.
bool resolve_ggml_api();

// Each check compares a field read through our compiled struct layout with the value that the
// program's ggml returns through an exported accessor. A mismatch means the hooks were built for
// another ggml: the caller must not patch anything. `why` receives a short explanation.
bool check_backend_layout(ggml_backend_t backend, char * why, size_t why_len);
bool check_buffer_type_layout(ggml_backend_buffer_type_t buft, char * why, size_t why_len);
bool check_buffer_layout(ggml_backend_buffer_t buffer, char * why, size_t why_len);
bool check_tensor_layout(char * why, size_t why_len);

}  // namespace ggml_trace
