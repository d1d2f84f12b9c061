#include "cupti_mode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_writer.h"

#ifndef GGML_TRACE_HAVE_CUPTI

namespace ggml_trace {

void cupti_start() {
    const char * v = getenv("GGML_TRACE_CUPTI");
    if (v && *v && strcmp(v, "0") != 0) {
        const char * why = "these hooks were built without CUPTI's headers (see docs/gpu.md); no GPU activity recorded";
        fprintf(stderr, "ggml-trace: CUPTI mode: %s\n", why);
        write_meta("cupti", why, strlen(why));
    }
}
bool cupti_active() { return false; }
void * cupti_library() { return nullptr; }
void cupti_need_driver_api() {}
void cupti_push(uint64_t) {}
void cupti_pop() {}
void cupti_flush() {}

}  // namespace ggml_trace

#else

#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <atomic>
#include <string>
#include <unordered_map>

namespace ggml_trace {

namespace {

// The activity record layouts of the CUPTI these hooks were compiled against.
#if CUPTI_API_VERSION >= 130000
using KernelRecord = CUpti_ActivityKernel10;
using MemcpyRecord = CUpti_ActivityMemcpy6;
using GraphRecord = CUpti_ActivityGraphTrace2;
#else
using KernelRecord = CUpti_ActivityKernel9;
using MemcpyRecord = CUpti_ActivityMemcpy5;
using GraphRecord = CUpti_ActivityGraphTrace;
#endif

const size_t BUFFER_BYTES = 8 << 20;

struct Cupti {
    decltype(&cuptiActivityRegisterCallbacks) register_callbacks;
    decltype(&cuptiActivityEnable) enable;
    decltype(&cuptiActivityFlushAll) flush_all;
    decltype(&cuptiActivityGetNextRecord) next_record;
    decltype(&cuptiActivityPushExternalCorrelationId) push;
    decltype(&cuptiActivityPopExternalCorrelationId) pop;
    decltype(&cuptiActivityRegisterTimestampCallback) register_timestamp;
    decltype(&cuptiGetResultString) result_string;
    decltype(&cuptiSetThreadIdType) set_thread_id_type;
};

Cupti g_cupti;
std::atomic<bool> g_active{false};
std::atomic<bool> g_driver_api{false};
uint64_t g_graph_name = 0;  // "CUDA graph", interned once

void fail(const char * what) {
    fprintf(stderr, "ggml-trace: CUPTI mode: %s; no GPU activity recorded\n", what);
    write_meta("cupti", what, strlen(what));
}

template <typename F> bool resolve(void * lib, F & fn, const char * name) {
    fn = (F) dlsym(lib, name);
    return fn != nullptr;
}

uint64_t monotonic_timestamp() { return monotonic_ns(); }

// Kernel names arrive mangled; Nsight shows them demangled. Only CUPTI's delivery thread uses this.
uint64_t kernel_name_id(const char * mangled) {
    static std::unordered_map<std::string, uint64_t> cache;
    if (!mangled) {
        return 0;
    }
    auto it = cache.find(mangled);
    if (it != cache.end()) {
        return it->second;
    }
    int status = 0;
    char * plain = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    uint64_t id = intern(status == 0 && plain ? plain : mangled);
    free(plain);
    cache.emplace(mangled, id);
    return id;
}

void write_activity(uint8_t kind, uint32_t device, uint64_t start, uint64_t end, uint32_t correlation,
                    uint32_t stream, uint64_t name, uint64_t bytes, uint8_t copy_kind) {
    emit_record<GpuActivityRec>(REC_GPU, [&](GpuActivityRec & r) {
        r.kind = kind;
        r.copy_kind = copy_kind;
        r.device = device;
        r.t_begin_ns = start;
        r.t_end_ns = end;
        r.correlation = correlation;
        r.stream = stream;
        r.name = name;
        r.bytes = bytes;
    });
}

void CUPTIAPI buffer_requested(uint8_t ** buffer, size_t * size, size_t * max_records) {
    *buffer = (uint8_t *) aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t * buffer, size_t, size_t valid) {
    CUpti_Activity * rec = nullptr;
    while (valid && g_cupti.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
        switch (rec->kind) {
            case CUPTI_ACTIVITY_KIND_KERNEL:
            case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
                const KernelRecord * k = (const KernelRecord *) rec;
                write_activity(GPU_KERNEL, k->deviceId, k->start, k->end, k->correlationId, k->streamId,
                               kernel_name_id(k->name), (uint64_t) k->gridX * k->gridY * k->gridZ, 0);
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMCPY: {
                const MemcpyRecord * m = (const MemcpyRecord *) rec;
                write_activity(GPU_MEMCPY, m->deviceId, m->start, m->end, m->correlationId, m->streamId, 0,
                               m->bytes, m->copyKind);
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMCPY2: {
                const CUpti_ActivityMemcpyPtoP4 * m = (const CUpti_ActivityMemcpyPtoP4 *) rec;
                write_activity(GPU_MEMCPY, m->deviceId, m->start, m->end, m->correlationId, m->streamId, 0,
                               m->bytes, m->copyKind);
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMSET: {
                const CUpti_ActivityMemset4 * m = (const CUpti_ActivityMemset4 *) rec;
                write_activity(GPU_MEMSET, m->deviceId, m->start, m->end, m->correlationId, m->streamId, 0,
                               m->bytes, 0);
                break;
            }
            case CUPTI_ACTIVITY_KIND_RUNTIME:
            case CUPTI_ACTIVITY_KIND_DRIVER: {  // NCCL launches its kernels through the driver API
                // The API call's host thread and times: the loader ties activity to traced calls
                // through these when no external correlation records came.
                const CUpti_ActivityAPI * a = (const CUpti_ActivityAPI *) rec;
                write_activity(GPU_API, 0, a->start, a->end, a->correlationId, a->threadId, a->cbid, 0, 0);
                break;
            }
            case CUPTI_ACTIVITY_KIND_GRAPH_TRACE: {  // a whole CUDA graph's execution, one record
                const GraphRecord * g = (const GraphRecord *) rec;
                write_activity(GPU_GRAPH, g->deviceId, g->start, g->end, g->correlationId, g->streamId,
                               g_graph_name, g->graphId, 0);
                break;
            }
            case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
                const CUpti_ActivityExternalCorrelation * x = (const CUpti_ActivityExternalCorrelation *) rec;
                if (x->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) {
                    write_activity(GPU_CORRELATION, 0, 0, 0, x->correlationId, 0, x->externalId, 0, 0);
                }
                break;
            }
            default:
                break;
        }
    }
    free(buffer);
}

}  // namespace

void * cupti_library() {
    static void * lib = [] {
        const char * candidates[] = {getenv("GGML_TRACE_CUPTI_LIB"), "libcupti.so", "libcupti.so.13", "libcupti.so.12",
                                     "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
                                     "/usr/local/cuda/lib64/libcupti.so"};
        for (const char * name : candidates) {
            if (name && *name) {
                if (void * h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
                    return h;
                }
            }
        }
        return (void *) nullptr;
    }();
    return lib;
}

void cupti_start() {
    const char * v = getenv("GGML_TRACE_CUPTI");
    if (!v || !*v || strcmp(v, "0") == 0) {
        return;
    }
    void * lib = cupti_library();
    if (!lib) {
        fail("libcupti.so not found (set GGML_TRACE_CUPTI_LIB to its path)");
        return;
    }
    Cupti & c = g_cupti;
    if (!resolve(lib, c.register_callbacks, "cuptiActivityRegisterCallbacks") ||
        !resolve(lib, c.enable, "cuptiActivityEnable") || !resolve(lib, c.flush_all, "cuptiActivityFlushAll") ||
        !resolve(lib, c.next_record, "cuptiActivityGetNextRecord") ||
        !resolve(lib, c.push, "cuptiActivityPushExternalCorrelationId") ||
        !resolve(lib, c.pop, "cuptiActivityPopExternalCorrelationId") ||
        !resolve(lib, c.result_string, "cuptiGetResultString")) {
        fail("libcupti lacks the activity API these hooks use");
        return;
    }
    // Our clock (CLOCK_MONOTONIC) for every timestamp CUPTI reports. A CUPTI that cannot take it
    // reports CLOCK_REALTIME (on Linux), which the loader converts through the header's anchor.
    const char * clock = "monotonic";
    if (!resolve(lib, c.register_timestamp, "cuptiActivityRegisterTimestampCallback") ||
        c.register_timestamp(monotonic_timestamp) != CUPTI_SUCCESS) {
        clock = "realtime";
    }
    write_meta("cupti.clock", clock, strlen(clock));
    // API records name the OS thread (gettid), as our THREAD records do.
    if (resolve(lib, c.set_thread_id_type, "cuptiSetThreadIdType")) {
        c.set_thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    }
    // "graphs" (the default, as Nsight Systems' --cuda-graph-trace=graph): a CUDA graph's
    // execution is one record, not one per kernel, and driver-API records come only once a
    // communicator that launches through the driver (NCCL) is made. "kernels": every kernel,
    // inside graphs too, and the driver API from the start.
    const bool kernels = strcmp(v, "kernels") == 0;
    CUptiResult res = c.register_callbacks(buffer_requested, buffer_completed);
    // External correlation records come with the runtime and driver API records they annotate.
    const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                        CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET,
                                        CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
    for (CUpti_ActivityKind k : kinds) {
        if (res == CUPTI_SUCCESS) {
            res = c.enable(k);
        }
    }
    const char * mode = "kernels";
    if (res == CUPTI_SUCCESS && !kernels) {
        g_graph_name = intern("CUDA graph");
        if (c.enable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE) == CUPTI_SUCCESS) {
            mode = "graphs";
        }  // else this CUPTI traces each kernel of a graph: what "kernels" records
    }
    if (res == CUPTI_SUCCESS && kernels) {
        res = c.enable(CUPTI_ACTIVITY_KIND_DRIVER);
        g_driver_api.store(res == CUPTI_SUCCESS);
    }
    if (res != CUPTI_SUCCESS) {
        const char * s = nullptr;
        c.result_string(res, &s);
        char why[256];
        snprintf(why, sizeof(why), "enabling activity failed: %s", s ? s : "unknown CUPTI error");
        fail(why);
        return;
    }
    write_meta("cupti", "on", 2);
    write_meta("cupti.mode", mode, strlen(mode));
    g_active.store(true, std::memory_order_release);
}

void cupti_need_driver_api() {
    if (!cupti_active() || g_driver_api.exchange(true)) {
        return;
    }
    const char * what = g_cupti.enable(CUPTI_ACTIVITY_KIND_DRIVER) == CUPTI_SUCCESS ? "on" : "failed";
    write_meta("cupti.driver_api", what, strlen(what));
}

bool cupti_active() { return g_active.load(std::memory_order_relaxed); }

void cupti_push(uint64_t call_id) { g_cupti.push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, call_id); }

void cupti_pop() {
    uint64_t id;
    g_cupti.pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
}

void cupti_flush() {
    if (cupti_active()) {
        g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    }
}

}  // namespace ggml_trace

#endif
