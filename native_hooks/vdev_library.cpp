// The virtual devices' library (libggml-trace-vdev): its entry points. See virtual_device.cpp.
#include <stdio.h>
#include <stdlib.h>

#include <atomic>
#include <mutex>

#include "ggml_api.h"
#include "observer_api.h"
#include "virtual_device.h"

using namespace ggml_trace;

namespace {

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

// Windows, where no entry point is interposed by name: the hooks call this while ggml loads its
// backends (inject_windows.cpp), before the program enumerates them.
extern "C" void ggmltrace_vdev_setup() { vdev_once(); }

// The program's enumeration of ggml's devices and registries: the virtual devices register first.
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

bool ggmltrace_vdev_delay(struct ggml_backend * backend, uint64_t ns, uint64_t call_id, uint32_t graph,
                          int32_t split) {
    return vdev_delay(backend, ns, CallContext{call_id, graph, split});
}
