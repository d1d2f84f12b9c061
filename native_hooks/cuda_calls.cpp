#include "cuda_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "cupti_mode.h"
#include "ggml_api.h"
#include "trace_writer.h"

#ifndef GGML_TRACE_HAVE_CUPTI

namespace ggml_trace {

void cuda_calls_start() {
    const char * v = getenv("GGML_TRACE_CUDA_STREAMS");
    if (v && *v && strcmp(v, "0") != 0) {
        const char * why = "these hooks were built without CUPTI's headers (see docs/gpu.md); no CUDA calls recorded";
        fprintf(stderr, "ggml-trace: CUDA streams mode: %s\n", why);
        write_meta("cuda_streams", why, strlen(why));
    }
}
bool cuda_calls_active() { return false; }
bool cuda_split_issued_work() { return false; }
SplitGraphScope::SplitGraphScope(ggml_cgraph *) : outer_(nullptr), active_(false) {}
SplitGraphScope::~SplitGraphScope() {}

}  // namespace ggml_trace

#else

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <atomic>
#include <unordered_map>
#include <vector>

namespace ggml_trace {

namespace {

std::atomic<bool> g_active{false};

// What reads a launch's arguments and a stream's state: the driver's functions (libcuda, opened at
// run time). Never the runtime's: a failing runtime call inside the program's own would leave its
// error for the program's next cudaGetLastError() (a library's static cudart launches through host
// functions the program's cudart does not know). Such a launch names its node only through the
// driver launch CUPTI reports inside it.
struct Driver {
    CUresult (*kernel_param_info)(CUkernel, size_t, size_t *, size_t *) = nullptr;
    CUresult (*func_param_info)(CUfunction, size_t, size_t *, size_t *) = nullptr;
    CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus *) = nullptr;
    CUresult (*ctx_get_device)(CUdevice *) = nullptr;
    CUresult (*kernel_get_function)(CUfunction *, CUkernel) = nullptr;
};
Driver g_driver;

// __cudaLaunchKernel, what CUDA 13's compiler makes of `kernel<<<...>>>`: CUPTI's headers give no
// parameter struct for it; this is its prototype's (crt/device_functions.h).
struct KernelLaunchParams {
    void * kernel;  // cudaKernel_t: a CUkernel
    dim3 grid;
    dim3 block;
    void ** args;
    size_t shared_mem;
    cudaStream_t stream;
};

// ---------------------------------------------------------------- the split being run

// The nodes of the graph this thread is running on a backend, in the order the backend runs them
// (read at its first launch: ggml-cuda may reorder a graph's nodes in place before it runs them),
// and the last one a launch named: launches come in node order.
struct NodeSpan {
    uint64_t begin, end;  // the node's bytes, as device addresses
    uint32_t index;       // its position in the graph, as ACCESS records give it
};
struct SplitState {
    ggml_cgraph * graph = nullptr;
    bool issued = false;  // a kernel, copy or memset was issued while it ran
    bool built = false;
    std::vector<NodeSpan> nodes;
    size_t cursor = 0;
};
thread_local SplitState t_split;

void build_nodes(SplitState & s) {
    s.nodes.clear();  // keeps its capacity: no allocation once the largest split was seen
    s.cursor = 0;
    s.built = true;
    int n = g_api.graph_n_nodes(s.graph);
    for (int i = 0; i < n; i++) {
        const ggml_tensor * node = g_api.graph_node(s.graph, i);
        if (writes_nothing(node) || !node->data) {
            continue;
        }
        uint64_t begin = (uint64_t) (uintptr_t) node->data;
        s.nodes.push_back({begin, begin + g_api.nbytes(node), (uint32_t) i});
    }
}

// How far past the last named node a launch may name one: nodes without a kernel of their own
// (fused into the next one's, or skipped) lie between.
const size_t NODE_WINDOW = 64;

uint32_t node_of(const uint64_t * words, size_t n_words) {
    SplitState & s = t_split;
    if (!s.graph || !n_words) {
        return NONE32;
    }
    if (!s.built) {
        build_nodes(s);
    }
    size_t last = s.cursor + NODE_WINDOW < s.nodes.size() ? s.cursor + NODE_WINDOW : s.nodes.size();
    for (size_t j = s.cursor; j < last; j++) {
        for (size_t w = 0; w < n_words; w++) {
            if (words[w] >= s.nodes[j].begin && words[w] < s.nodes[j].end) {
                s.cursor = j;
                return s.nodes[j].index;
            }
        }
    }
    return NONE32;
}

// ---------------------------------------------------------------- launches

// A kernel's parameter sizes and name, looked up once per kernel (per thread: no lock).
struct KernelInfo {
    std::vector<uint32_t> sizes;
    uint64_t name = 0;
};
thread_local std::unordered_map<const void *, KernelInfo> t_kernels;

enum class Handle { KERNEL, FUNCTION, HOST_FUNCTION };

uint64_t demangled_name(const char * mangled) {
    if (!mangled) {
        return 0;
    }
    int status = 0;
    char * plain = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    uint64_t id = intern(status == 0 && plain ? plain : mangled);
    free(plain);
    return id;
}

const KernelInfo & kernel_info(const void * handle, Handle how, const char * symbol) {
    const void * key = handle;
    auto it = t_kernels.find(key);
    if (it != t_kernels.end()) {
        return it->second;
    }
    KernelInfo info;
    info.name = demangled_name(symbol);
    // A kernel handle the driver gives no layout for: ask about its function in the current context.
    CUfunction function = nullptr;
    size_t offset = 0, size = 0;
    if (how == Handle::KERNEL && g_driver.kernel_param_info &&
        g_driver.kernel_param_info((CUkernel) handle, 0, &offset, &size) != CUDA_SUCCESS && g_driver.kernel_get_function &&
        g_driver.kernel_get_function(&function, (CUkernel) handle) == CUDA_SUCCESS) {
        how = Handle::FUNCTION;
        handle = function;
    }
    for (size_t i = 0; how != Handle::HOST_FUNCTION && i < 1024; i++) {  // until the kernel has no parameter i
        bool ok = false;
        if (how == Handle::KERNEL && g_driver.kernel_param_info) {
            ok = g_driver.kernel_param_info((CUkernel) handle, i, &offset, &size) == CUDA_SUCCESS;
        } else if (how == Handle::FUNCTION && g_driver.func_param_info) {
            ok = g_driver.func_param_info((CUfunction) handle, i, &offset, &size) == CUDA_SUCCESS;
        }
        if (!ok) {
            break;
        }
        info.sizes.push_back((uint32_t) size);
    }
    return t_kernels.emplace(key, std::move(info)).first->second;
}

// Every 8-byte word of a launch's arguments (a pointer, or one inside a struct passed by value).
const size_t MAX_WORDS = 96;
size_t argument_words(const KernelInfo & info, void ** args, uint64_t * words) {
    size_t n = 0;
    for (size_t i = 0; args && i < info.sizes.size(); i++) {
        const uint8_t * value = (const uint8_t *) args[i];
        for (size_t off = 0; value && off + 8 <= info.sizes[i] && n < MAX_WORDS; off += 8) {
            memcpy(&words[n++], value + off, 8);
        }
    }
    return n;
}

// ---------------------------------------------------------------- records

uint8_t capture_flag(uint64_t stream) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (g_driver.stream_is_capturing && g_driver.stream_is_capturing((CUstream) stream, &status) == CUDA_SUCCESS &&
        status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        return CUDA_CAPTURED;
    }
    return 0;
}

void emit_cuda(uint8_t op, uint8_t flags, uint64_t stream, uint64_t handle, uint64_t src, uint64_t name,
               uint32_t node) {
    uint32_t thread = thread_index();  // before the record: it may write the thread's own
    uint64_t call = current_call().call_id;
    CUdevice device = 0;
    if (g_driver.ctx_get_device) {
        g_driver.ctx_get_device(&device);
    }
    uint64_t t = now_ticks();
    if (op == CUDA_LAUNCH || op == CUDA_MEMCPY || op == CUDA_MEMSET) {
        t_split.issued |= t_split.graph != nullptr;
    }
    emit_record<CudaCallRec>(REC_CUDA, [&](CudaCallRec & r) {
        r.op = op;
        r.flags = flags;
        r.thread = thread;
        r.t = t;
        r.call_id = call;
        r.stream = stream;
        r.handle = handle;
        r.src = src;
        r.name = name;
        r.node = node;
        r.device = (uint32_t) device;
    });
}

uint32_t launch_node(void ** args, const KernelInfo & info) {
    uint64_t words[MAX_WORDS];
    size_t n = argument_words(info, args, words);
    return node_of(words, n);
}

// A runtime launch is recorded at its return: the driver-level launch the runtime makes inside it,
// when CUPTI reports one, names its node through the driver's CUfunction, whose parameter layout the
// driver always gives (a runtime kernel handle's it may not).
struct PendingLaunch {
    bool open = false;
    uint64_t stream = 0, name = 0;
    uint8_t flags = 0;
    uint32_t node = NONE32;
};
thread_local PendingLaunch t_launch;

void open_launch(const void * handle, Handle how, void ** args, uint64_t stream, const char * symbol) {
    const KernelInfo & info = kernel_info(handle, how, symbol);
    t_launch = {true, stream, info.name, capture_flag(stream), launch_node(args, info)};
}

void close_launch() {
    if (t_launch.open) {
        t_launch.open = false;
        emit_cuda(CUDA_LAUNCH, t_launch.flags, t_launch.stream, 0, 0, t_launch.name, t_launch.node);
    }
}

// A driver launch: inside a runtime launch it names that launch's node; alone (a library launching
// through the driver) it is a launch of its own.
void driver_launch(CUfunction f, void ** args, uint64_t stream, const char * symbol) {
    const KernelInfo & info = kernel_info(f, Handle::FUNCTION, symbol);
    if (t_launch.open) {
        if (t_launch.node == NONE32) t_launch.node = launch_node(args, info);
        return;
    }
    emit_cuda(CUDA_LAUNCH, CUDA_DRIVER | capture_flag(stream), stream, 0, 0, info.name,
              launch_node(args, info));
}

void emit_copy(uint8_t op, uint64_t stream, const void * dst, const void * src, size_t bytes) {
    uint64_t words[2] = {(uint64_t) (uintptr_t) dst, (uint64_t) (uintptr_t) src};
    emit_cuda(op, capture_flag(stream), stream, words[0], words[1], bytes, node_of(words, src ? 2 : 1));
}

uint64_t h(const void * p) { return (uint64_t) (uintptr_t) p; }

// A blocking call: a record at its entry, and one at its return (none if it never returns).
void emit_blocking(uint8_t op, const CUpti_CallbackData * d, uint64_t stream, uint64_t handle) {
    if (d->callbackSite == CUPTI_API_ENTER) {
        emit_cuda(op, 0, stream, handle, 0, 0, NONE32);
    } else {
        bool failed = d->functionReturnValue && *(const cudaError_t *) d->functionReturnValue != cudaSuccess;
        emit_cuda(op, CUDA_RETURNED | (failed ? CUDA_FAILED : 0), stream, handle, 0, 0, NONE32);
    }
}

void on_runtime(CUpti_CallbackId cbid, const CUpti_CallbackData * d) {
    const void * p = d->functionParams;
    const bool enter = d->callbackSite == CUPTI_API_ENTER;
    switch (cbid) {
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000: {
            auto a = (const cudaLaunchKernel_v7000_params *) p;
            if (enter) open_launch(a->func, Handle::HOST_FUNCTION, a->args, h(a->stream), d->symbolName);
            else close_launch();
            break;
        }
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060: {
            auto a = (const cudaLaunchKernelExC_v11060_params *) p;
            uint64_t stream = a->config ? h(a->config->stream) : 0;
            if (enter) open_launch(a->func, Handle::HOST_FUNCTION, a->args, stream, d->symbolName);
            else close_launch();
            break;
        }
#if CUPTI_API_VERSION >= 130000
        case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000:
        case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000: {
            auto a = (const KernelLaunchParams *) p;
            if (enter) open_launch(a->kernel, Handle::KERNEL, a->args, h(a->stream), d->symbolName);
            else close_launch();
            break;
        }
#endif
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020:
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000: {
            auto a = (const cudaMemcpyAsync_v3020_params *) p;
            if (enter) emit_copy(CUDA_MEMCPY, h(a->stream), a->dst, a->src, a->count);
            break;
        }
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020:
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_ptsz_v7000: {
            auto a = (const cudaMemcpy2DAsync_v3020_params *) p;
            if (enter) emit_copy(CUDA_MEMCPY, h(a->stream), a->dst, a->src, a->width * a->height);
            break;
        }
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeerAsync_v4000: {
            auto a = (const cudaMemcpyPeerAsync_v4000_params *) p;
            if (enter) emit_copy(CUDA_MEMCPY, h(a->stream), a->dst, a->src, a->count);
            break;
        }
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020:
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000: {
            auto a = (const cudaMemsetAsync_v3020_params *) p;
            if (enter) emit_copy(CUDA_MEMSET, h(a->stream), a->devPtr, nullptr, a->count);
            break;
        }
        case CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020:
        case CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_ptsz_v7000: {
            auto a = (const cudaEventRecord_v3020_params *) p;
            if (enter) emit_cuda(CUDA_EVENT_RECORD, capture_flag(h(a->stream)), h(a->stream), h(a->event), 0, 0, NONE32);
            break;
        }
        case CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010:
        case CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_ptsz_v11010: {
            auto a = (const cudaEventRecordWithFlags_v11010_params *) p;
            if (enter) emit_cuda(CUDA_EVENT_RECORD, capture_flag(h(a->stream)), h(a->stream), h(a->event), 0, 0, NONE32);
            break;
        }
        case CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020:
        case CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_ptsz_v7000: {
            auto a = (const cudaStreamWaitEvent_v3020_params *) p;
            if (enter) emit_cuda(CUDA_STREAM_WAIT, capture_flag(h(a->stream)), h(a->stream), h(a->event), 0, 0, NONE32);
            break;
        }
        case CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020:
            emit_blocking(CUDA_EVENT_SYNC, d, 0, h(((const cudaEventSynchronize_v3020_params *) p)->event));
            break;
        case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020:
        case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000:
            emit_blocking(CUDA_STREAM_SYNC, d, h(((const cudaStreamSynchronize_v3020_params *) p)->stream), 0);
            break;
        case CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020:
            emit_blocking(CUDA_DEVICE_SYNC, d, 0, 0);
            break;
        case CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_v10000:
        case CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_ptsz_v10000: {
            auto a = (const cudaStreamBeginCapture_v10000_params *) p;
            if (enter) emit_cuda(CUDA_CAPTURE_BEGIN, 0, h(a->stream), 0, 0, 0, NONE32);
            break;
        }
        case CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_v10000:
        case CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_ptsz_v10000: {
            auto a = (const cudaStreamEndCapture_v10000_params *) p;
            if (enter) emit_cuda(CUDA_CAPTURE_END, 0, h(a->stream), 0, 0, 0, NONE32);
            break;
        }
        case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000:
        case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000: {
            auto a = (const cudaGraphLaunch_v10000_params *) p;
            if (enter) emit_cuda(CUDA_GRAPH_LAUNCH, 0, h(a->stream), h(a->graphExec), 0, 0, NONE32);
            break;
        }
        default:
            break;
    }
}

// A launch through the driver: a runtime launch's own (it names that launch's node), or one no
// runtime call made (a library launching through the driver).
void on_driver(CUpti_CallbackId cbid, const CUpti_CallbackData * d) {
    const void * p = d->functionParams;
    switch (cbid) {
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: {
            auto a = (const cuLaunchKernel_params *) p;
            driver_launch(a->f, a->kernelParams, h(a->hStream), d->symbolName);
            break;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
            auto a = (const cuLaunchKernelEx_params *) p;
            uint64_t stream = a->config ? h(a->config->hStream) : 0;
            driver_launch(a->f, a->kernelParams, stream, d->symbolName);
            break;
        }
        default:
            break;
    }
}

void CUPTIAPI on_call(void *, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void * data) {
    const CUpti_CallbackData * d = (const CUpti_CallbackData *) data;
    if (!capturing() || t_own_calls) {
        return;
    }
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
        on_runtime(cbid, d);
    } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && d->callbackSite == CUPTI_API_ENTER) {
        on_driver(cbid, d);
    }
}

const CUpti_CallbackId RUNTIME_CALLS[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
#if CUPTI_API_VERSION >= 130000
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000,
#endif
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeerAsync_v4000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_ptsz_v11010,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_ptsz_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_ptsz_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
};
const CUpti_CallbackId DRIVER_CALLS[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
};

void fail(const char * what) {
    fprintf(stderr, "ggml-trace: CUDA streams mode: %s; no CUDA calls recorded\n", what);
    write_meta("cuda_streams", what, strlen(what));
}

template <typename F> void resolve(void * lib, F & fn, const char * name) { fn = lib ? (F) dlsym(lib, name) : nullptr; }

}  // namespace

void cuda_calls_start() {
    const char * v = getenv("GGML_TRACE_CUDA_STREAMS");
    if (!v || !*v || strcmp(v, "0") == 0) {
        return;
    }
    void * cupti = cupti_library();
    if (!cupti) {
        fail("libcupti.so not found (set GGML_TRACE_CUPTI_LIB to its path)");
        return;
    }
    decltype(&cuptiSubscribe) subscribe;
    decltype(&cuptiEnableCallback) enable;
    resolve(cupti, subscribe, "cuptiSubscribe");
    resolve(cupti, enable, "cuptiEnableCallback");
    if (!subscribe || !enable) {
        fail("libcupti lacks the callback API");
        return;
    }
    void * driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    resolve(driver, g_driver.kernel_param_info, "cuKernelGetParamInfo");
    resolve(driver, g_driver.func_param_info, "cuFuncGetParamInfo");
    resolve(driver, g_driver.stream_is_capturing, "cuStreamIsCapturing");
    resolve(driver, g_driver.ctx_get_device, "cuCtxGetDevice");
    resolve(driver, g_driver.kernel_get_function, "cuKernelGetFunction");
    if (!driver) {
        fail("no CUDA driver (libcuda.so.1) in this process's library path");
        return;
    }
    if (!g_driver.kernel_param_info || !g_driver.func_param_info) {
        // launches are still recorded, with their streams; only the node each computes is unknown
        const char * why = "the CUDA driver cannot describe a kernel's parameters (CUDA 12.4 or later): launches name no node";
        fprintf(stderr, "ggml-trace: CUDA streams mode: %s\n", why);
        write_meta("cuda_streams.nodes", why, strlen(why));
    }
    CUpti_SubscriberHandle subscriber;
    // One subscriber per process before CUDA 13.3: another tool's (Nsight's) refuses ours.
    CUptiResult res = subscribe(&subscriber, (CUpti_CallbackFunc) on_call, nullptr);
    for (CUpti_CallbackId id : RUNTIME_CALLS) {
        if (res == CUPTI_SUCCESS) res = enable(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id);
    }
    for (CUpti_CallbackId id : DRIVER_CALLS) {
        if (res == CUPTI_SUCCESS) res = enable(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
    }
    if (res != CUPTI_SUCCESS) {
        decltype(&cuptiGetResultString) result_string;
        resolve(cupti, result_string, "cuptiGetResultString");
        const char * text = nullptr;
        if (result_string) result_string(res, &text);
        char why[256];
        snprintf(why, sizeof(why), "subscribing to CUPTI's callbacks failed: %s (CUPTI error %d; a profiler "
                 "such as Nsight holds CUPTI's one subscriber before CUDA 13.3)", text ? text : "unknown", (int) res);
        fail(why);
        return;
    }
    write_meta("cuda_streams", "on", 2);
    g_active.store(true, std::memory_order_release);
}

bool cuda_calls_active() { return g_active.load(std::memory_order_relaxed); }

bool cuda_split_issued_work() { return t_split.issued; }

// Without the mode on, a scope touches nothing: it sits on every hooked call.
SplitGraphScope::SplitGraphScope(ggml_cgraph * graph) : outer_(t_split.graph), active_(cuda_calls_active()) {
    if (active_) {
        t_split.graph = graph;
        t_split.built = t_split.issued = false;
    }
}

SplitGraphScope::~SplitGraphScope() {
    if (active_) {
        t_split.graph = outer_;
        t_split.built = t_split.issued = false;
    }
}

}  // namespace ggml_trace

#endif
