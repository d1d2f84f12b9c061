// Virtual async devices: ggml devices VDEV0..N-1 that behave like GPUs to the scheduler (their
// buffers are not host buffers, so it copies across; their backends only enqueue work) while the
// work runs, later, on a worker thread per backend (a FIFO stream) with the CPU backend's kernels.
// Per-operation latency, copy bandwidth and seeded jitter emulate a slow or underclocked GPU, so the
// ordering bugs that async backends expose show up on any machine.
//
// A library of its own (libggml-trace-vdev), loaded beside the hooks only when virtual devices are
// asked for (`ggml-trace record --virtual-devices N`, or GGML_TRACE_VIRTUAL_DEVICES=N with this
// library in LD_PRELOAD): the hooks trace these devices like any other backend, and the device
// work they run is recorded through the hooks' observer entry points (observer_api.h).
// Knobs GGML_TRACE_VDEV_LATENCY_US, _BANDWIDTH_GBPS, _JITTER_US, _SEED, _THREADS, _INTEGRATED (an
// APU: the devices also accept host buffers, so the scheduler copies nothing into them from host
// memory, and their work reads host tensors in place when the queue runs it). Semantics follow
// CUDA streams: buffer calls are synchronous and unordered with the stream; events capture the work
// enqueued before the record. On backend API 3, GGML_TRACE_VDEV_ALLOC_DEPS makes them declare allocation
// dependencies from graph_optimize (be_graph_optimize). GGML_TRACE_VDEV_HOST_COPIES=pinned makes the
// devices copy asynchronously from host memory only out of their pinned host buffer type (VDEVn_Host,
// which they then offer: host memory the CPU backend uses like its own), as Vulkan does.
#include "virtual_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ggml-backend-impl.h"
#include "ggml-impl.h"
#include "ggml_api.h"
#include "platform.h"
#include "vdev_stream.h"

namespace ggml_trace {

namespace {

using namespace vdev;  // the streams the devices' work runs on (vdev_stream.h)

struct VDevice {
    int index;
    char name[16];
    char buft_name[16];
    char host_buft_name[24];
    ggml_backend_device dev;
    ggml_backend_buffer_type buft;
    ggml_backend_buffer_type host_buft;  // "pinned" host memory: is_host, the CPU backend's to use
    std::mutex streams_mutex;
    std::vector<Stream *> streams;  // of the backends alive on this device
};

VDevice g_devices[MAX_VDEVS];
int g_n_devices = 0;
ggml_backend_reg g_reg;
ggml_backend_dev_t g_cpu_dev = nullptr;

void clone(Op * op, std::unordered_map<const ggml_tensor *, size_t> & index, const ggml_tensor * t) {
    if (!t || index.count(t)) {
        return;
    }
    size_t i = op->tensors.size();
    index[t] = i;
    op->tensors.push_back(*t);
    // pointers into op->tensors are fixed up after all copies exist (the vector may grow)
    for (int j = 0; j < GGML_MAX_SRC; j++) {
        clone(op, index, t->src[j]);
    }
    clone(op, index, t->view_src);
}

// ------------------------------------------------------------------ backend

Stream * stream_of(ggml_backend_t backend) { return (Stream *) backend->context; }

bool is_pinned_host_buffer(ggml_backend_buffer_t b) {
    for (int i = 0; i < g_n_devices; i++) {
        if (b && b->buft == &g_devices[i].host_buft) {
            return true;
        }
    }
    return false;
}

bool is_vdev_buffer(ggml_backend_buffer_t b) {
    for (int i = 0; i < g_n_devices; i++) {
        if (b && b->buft == &g_devices[i].buft) {
            return true;
        }
    }
    return false;
}

const char * be_get_name(ggml_backend_t backend) { return g_devices[stream_of(backend)->device].name; }

void be_free(ggml_backend_t backend) {
    Stream * s = stream_of(backend);
    {
        VDevice & d = g_devices[s->device];
        std::lock_guard<std::mutex> lock(d.streams_mutex);
        d.streams.erase(std::find(d.streams.begin(), d.streams.end(), s));
    }
    {
        std::lock_guard<std::mutex> lock(s->m);
        s->stop = true;
    }
    s->cv_work.notify_all();
    s->worker.join();
    g_cpu.backend_free(s->cpu);
    delete s;
    delete backend;
}

void be_set_tensor_async(ggml_backend_t backend, ggml_tensor * t, const void * data, size_t offset, size_t size) {
    enqueue_copy(stream_of(backend), (char *) t->data + offset, data, size);
}

void be_get_tensor_async(ggml_backend_t backend, const ggml_tensor * t, void * data, size_t offset, size_t size) {
    enqueue_copy(stream_of(backend), data, (const char *) t->data + offset, size);
}

// Accepts copies into this device from host memory and from any virtual device. A host source is
// read when the copy runs, on this device's stream, as a GPU's DMA from host memory would (Vulkan
// does this; the race of ggml issue #23321 needs it). A copy from another device runs on the
// *source* stream, after the work queued there, and this stream waits for it, as CUDA does
// (cudaMemcpyPeerAsync on the source stream + an event the destination stream waits on).
bool be_cpy_tensor_async(ggml_backend_t src_backend, ggml_backend_t dst_backend, const ggml_tensor * src, ggml_tensor * dst) {
    if (!is_vdev_buffer(dst->buffer) || !src->buffer) {
        return false;
    }
    Stream * d = stream_of(dst_backend);
    if (g_cpu.buffer_is_host(src->buffer)) {
        if (g_knobs.pinned_host_copies && !is_pinned_host_buffer(src->buffer)) {
            return false;  // pageable memory: the scheduler copies synchronously
        }
        enqueue_copy(d, dst->data, src->data, g_cpu.nbytes(src));
        return true;
    }
    if (!is_vdev_buffer(src->buffer) || src_backend->iface.get_name != be_get_name) {
        return false;
    }
    Stream * s = stream_of(src_backend);
    enqueue_copy(s, dst->data, src->data, g_cpu.nbytes(src));
    if (s != d) {
        Op * w = new Op();
        w->kind = Op::WAIT;
        w->wait_stream = s;
        w->wait_seq = tail(s);
        enqueue(d, w);
    }
    return true;
}

void be_synchronize(ggml_backend_t backend) {
    Stream * s = stream_of(backend);
    wait_for(s, tail(s));
}

enum ggml_status be_graph_compute(ggml_backend_t backend, ggml_cgraph * cgraph) {
    Op * op = new Op();
    op->kind = Op::COMPUTE;
    int n = g_cpu.graph_n_nodes(cgraph);
    std::unordered_map<const ggml_tensor *, size_t> index;
    for (int i = 0; i < n; i++) {
        clone(op, index, g_cpu.graph_node(cgraph, i));
    }
    for (ggml_tensor & t : op->tensors) {
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            if (t.src[j]) t.src[j] = &op->tensors[index[t.src[j]]];
        }
        if (t.view_src) t.view_src = &op->tensors[index[t.view_src]];
    }
    for (int i = 0; i < n; i++) {
        op->nodes.push_back(&op->tensors[index[g_cpu.graph_node(cgraph, i)]]);
    }
    enqueue(stream_of(backend), op);
    return GGML_STATUS_SUCCESS;
}

void be_event_record(ggml_backend_t backend, ggml_backend_event_t event) {
    Event * e = (Event *) event->context;
    e->stream = stream_of(backend);
    e->seq = tail(e->stream);
}

void be_event_wait(ggml_backend_t backend, ggml_backend_event_t event) {
    Event * e = (Event *) event->context;
    if (!e->stream) {
        return;
    }
    Op * w = new Op();
    w->kind = Op::WAIT;
    w->wait_stream = e->stream;
    w->wait_seq = e->seq;
    enqueue(stream_of(backend), w);
}

#if GGML_BACKEND_API_VERSION >= 3
// Backend API 3: a backend's graph_optimize may tell the allocator that a tensor must stay allocated
// until a later node of the split (params->add_alloc_dep); the scheduler adds each such dependency
// as a GGML_OP_NONE node, with the kept tensors as srcs, to the graph it allocates (never to the
// graph it computes). GGML_TRACE_VDEV_ALLOC_DEPS="T>U[,T>U...]" makes these devices declare them:
// keep the tensor named T (a node of the split or a source of one: a split input's copy is named
// "VDEV0#x#0") allocated until the node named U, when both are in the split. Read at every call,
// so a program may set it before it allocates its graph.
const ggml_tensor * named_in(const ggml_cgraph * graph, const char * name, size_t len, bool nodes_only) {
    int n = g_cpu.graph_n_nodes((ggml_cgraph *) graph);
    for (int i = 0; i < n; i++) {
        const ggml_tensor * node = g_cpu.graph_node((ggml_cgraph *) graph, i);
        for (int j = -1; j < (nodes_only ? 0 : GGML_MAX_SRC); j++) {
            const ggml_tensor * t = j < 0 ? node : node->src[j];
            if (t && strlen(t->name) == len && strncmp(t->name, name, len) == 0) return t;
        }
    }
    return nullptr;
}

void be_graph_optimize(ggml_backend_t, ggml_cgraph * graph, ggml_backend_graph_optimize_params * params) {
    const char * spec = getenv("GGML_TRACE_VDEV_ALLOC_DEPS");
    if (!spec || !params || !params->add_alloc_dep) return;
    for (const char * p = spec; *p;) {
        const char * end = strchr(p, ',');
        size_t n = end ? (size_t) (end - p) : strlen(p);
        const char * gt = (const char *) memchr(p, '>', n);
        if (gt) {
            const ggml_tensor * keep = named_in(graph, p, (size_t) (gt - p), false);
            const ggml_tensor * until = named_in(graph, gt + 1, n - (size_t) (gt - p) - 1, true);
            if (keep && until && keep != until) {
                params->add_alloc_dep(params->user_data, (ggml_tensor *) keep, (ggml_tensor *) until);
            }
        }
        p += n + (end ? 1 : 0);
    }
}
#endif

ggml_guid_t vdev_guid() {
    static ggml_guid guid = {0x67, 0x67, 0x6d, 0x6c, 0x2d, 0x74, 0x72, 0x61, 0x63, 0x65, 0x2d, 0x76, 0x64, 0x65, 0x76, 0x00};
    return &guid;
}

// ------------------------------------------------------------------ buffers

struct BufferCtx {
    void * data;
    size_t size;
};

void buf_free(ggml_backend_buffer_t b) {
    BufferCtx * c = (BufferCtx *) b->context;
    g_os.aligned_free(c->data);
    delete c;
}
void * buf_get_base(ggml_backend_buffer_t b) { return ((BufferCtx *) b->context)->data; }
void buf_memset(ggml_backend_buffer_t, ggml_tensor * t, uint8_t v, size_t off, size_t size) { memset((char *) t->data + off, v, size); }
void buf_set(ggml_backend_buffer_t, ggml_tensor * t, const void * data, size_t off, size_t size) { memcpy((char *) t->data + off, data, size); }
void buf_get(ggml_backend_buffer_t, const ggml_tensor * t, void * data, size_t off, size_t size) { memcpy(data, (const char *) t->data + off, size); }
bool buf_cpy(ggml_backend_buffer_t, const ggml_tensor * src, ggml_tensor * dst) {
    if (!src->buffer || !(g_cpu.buffer_is_host(src->buffer) || is_vdev_buffer(src->buffer))) {
        return false;
    }
    memcpy(dst->data, src->data, g_cpu.nbytes(src));
    return true;
}
// Clearing a whole buffer waits for every stream of the device first, then clears on the host
// (docs/races.md, rule 6: the analysis orders the clear after the device's queue). Not every
// backend's clear does: CUDA's is a memset on cudaStreamPerThread that nothing orders after ggml's
// own streams, while programs clear caches without synchronizing (llama.cpp clears the KV cache
// right after its warm-up decode).
void buf_clear(ggml_backend_buffer_t b, uint8_t v) {
    VDevice & d = *(VDevice *) b->buft->context;
    {
        std::lock_guard<std::mutex> lock(d.streams_mutex);
        for (Stream * s : d.streams) {
            wait_for(s, tail(s));
        }
    }
    memset(((BufferCtx *) b->context)->data, v, b->size);
}

const char * buft_get_name(ggml_backend_buffer_type_t buft) {
    VDevice * d = (VDevice *) buft->context;
    return buft == &d->host_buft ? d->host_buft_name : d->buft_name;
}

ggml_backend_buffer_t buft_alloc(ggml_backend_buffer_type_t buft, size_t size) {
    BufferCtx * c = new BufferCtx{nullptr, size};
    if (!(c->data = g_os.aligned_alloc(64, size ? size : 64))) {
        delete c;
        return nullptr;
    }
    ggml_backend_buffer_i iface;
    memset(&iface, 0, sizeof(iface));
    iface.free_buffer = buf_free;
    iface.get_base = buf_get_base;
    iface.memset_tensor = buf_memset;
    iface.set_tensor = buf_set;
    iface.get_tensor = buf_get;
    iface.cpy_tensor = buf_cpy;
    iface.clear = buf_clear;
    return g_cpu.buffer_init(buft, iface, c, size);
}
size_t buft_alignment(ggml_backend_buffer_type_t) { return 64; }
// the device's own memory is not host memory (the point: the scheduler must copy); its pinned host buffers are
bool buft_is_host(ggml_backend_buffer_type_t buft) { return buft == &((VDevice *) buft->context)->host_buft; }

// ------------------------------------------------------------------ allreduce

// GGML_TRACE_VDEV_ALLREDUCE=1: the registry offers ggml_backend_comm_* so that the meta backend
// reduces with one call instead of its butterfly of copies and ADDs, like CUDA's internal pipeline.
// F32 contiguous tensors only; anything else is declined (the meta backend falls back).
struct Comm {
    int n = 0;
    Stream * streams[MAX_VDEVS] = {};
};

void * comm_init(ggml_backend_t * backends, size_t n) {
    if (n < 2 || n > (size_t) MAX_VDEVS) return nullptr;
    Comm * c = new Comm();
    c->n = (int) n;
    for (size_t i = 0; i < n; i++) {
        if (backends[i]->iface.get_name != be_get_name) {
            delete c;
            return nullptr;
        }
        c->streams[i] = stream_of(backends[i]);
    }
    return c;
}

void comm_free(void * ctx) { delete (Comm *) ctx; }

int64_t elements(const ggml_tensor * t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

bool contiguous_f32(const ggml_tensor * t) {
    size_t stride = sizeof(float);
    for (int d = 0; d < GGML_MAX_DIMS; d++) {
        if (t->ne[d] > 1 && t->nb[d] != stride) return false;
        stride *= (size_t) t->ne[d];
    }
    return t->type == GGML_TYPE_F32;
}

bool comm_allreduce(void * ctx, ggml_tensor ** tensors) {
    Comm * c = (Comm *) ctx;
    int64_t ne = tensors[0] ? elements(tensors[0]) : 0;
    for (int i = 0; i < c->n; i++) {
        const ggml_tensor * t = tensors[i];
        if (!t || !contiguous_f32(t) || elements(t) != ne || !is_vdev_buffer(t->buffer)) {
            return false;
        }
    }
    auto a = std::make_shared<AllReduce>();
    a->n = c->n;
    a->ne = ne;
    for (int i = 0; i < c->n; i++) {
        a->data[i] = (float *) tensors[i]->data;
        a->active[i] = (tensors[i]->flags & GGML_TENSOR_FLAG_COMPUTE) != 0;
    }
    for (int i = 0; i < c->n; i++) {
        Op * op = new Op();
        op->kind = Op::ALLREDUCE;
        op->allreduce = a;
        op->rank = i;
        CallContext none;  // no device record of its own: the per-device host records are timed by events
        enqueue(c->streams[i], op, &none);
    }
    return true;
}

void * reg_get_proc_address(ggml_backend_reg_t, const char * name) {
    if (!g_knobs.allreduce) return nullptr;
    if (strcmp(name, "ggml_backend_comm_init") == 0) return (void *) comm_init;
    if (strcmp(name, "ggml_backend_comm_free") == 0) return (void *) comm_free;
    if (strcmp(name, "ggml_backend_comm_allreduce_tensor") == 0) return (void *) comm_allreduce;
    return nullptr;
}

// ------------------------------------------------------------------ device

VDevice & vdev_of(ggml_backend_dev_t dev) { return *(VDevice *) dev->context; }

const char * dev_get_name(ggml_backend_dev_t dev) { return vdev_of(dev).name; }
const char * dev_get_description(ggml_backend_dev_t) { return "ggml-trace virtual async device"; }
void dev_get_memory(ggml_backend_dev_t, size_t * free_mem, size_t * total) { *free_mem = *total = (size_t) 64 << 30; }
enum ggml_backend_dev_type dev_get_type(ggml_backend_dev_t) {
    return g_knobs.integrated ? GGML_BACKEND_DEVICE_TYPE_IGPU : GGML_BACKEND_DEVICE_TYPE_GPU;
}
void dev_get_props(ggml_backend_dev_t dev, ggml_backend_dev_props * p) {
    memset(p, 0, sizeof(*p));
    p->name = dev_get_name(dev);
    p->description = dev_get_description(dev);
    dev_get_memory(dev, &p->memory_free, &p->memory_total);
    p->type = dev_get_type(dev);
    p->caps.async = true;
    p->caps.events = true;
}

ggml_backend_t dev_init_backend(ggml_backend_dev_t dev, const char *) {
    Stream * s = new Stream();
    s->device = vdev_of(dev).index;
    snprintf(s->name, sizeof(s->name), "%s", vdev_of(dev).name);
    s->rng.seed(g_knobs.seed * 1000003 + (uint64_t) s->device);
    s->cpu = g_cpu.cpu_init();
    g_cpu.cpu_set_n_threads(s->cpu, g_knobs.threads);
    ggml_backend_i iface;
    memset(&iface, 0, sizeof(iface));
    iface.get_name = be_get_name;
    iface.free = be_free;
    iface.set_tensor_async = be_set_tensor_async;
    iface.get_tensor_async = be_get_tensor_async;
    iface.cpy_tensor_async = be_cpy_tensor_async;
    iface.synchronize = be_synchronize;
    iface.graph_compute = be_graph_compute;
    iface.event_record = be_event_record;
    iface.event_wait = be_event_wait;
#if GGML_BACKEND_API_VERSION >= 3
    iface.graph_optimize = be_graph_optimize;
#endif
    ggml_backend_t backend = new ggml_backend{vdev_guid(), iface, dev, s};
    s->backend = backend;
    s->worker = std::thread(worker_main, s);
    VDevice & d = vdev_of(dev);
    std::lock_guard<std::mutex> lock(d.streams_mutex);
    d.streams.push_back(s);
    return backend;
}

ggml_backend_buffer_type_t dev_get_buffer_type(ggml_backend_dev_t dev) { return &vdev_of(dev).buft; }
ggml_backend_buffer_type_t dev_get_host_buffer_type(ggml_backend_dev_t dev) { return &vdev_of(dev).host_buft; }

bool dev_supports_op(ggml_backend_dev_t, const ggml_tensor * op) { return g_cpu_dev->iface.supports_op(g_cpu_dev, op); }
// An integrated device shares the host's memory: host buffers are its own too (no input copies).
bool dev_supports_buft(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft) {
    return buft == &vdev_of(dev).buft || (g_knobs.integrated && g_cpu.buft_is_host(buft));
}
bool dev_offload_op(ggml_backend_dev_t, const ggml_tensor *) { return false; }

ggml_backend_event_t dev_event_new(ggml_backend_dev_t dev) { return new ggml_backend_event{dev, new Event()}; }
void dev_event_free(ggml_backend_dev_t, ggml_backend_event_t event) {
    delete (Event *) event->context;
    delete event;
}
void dev_event_synchronize(ggml_backend_dev_t, ggml_backend_event_t event) {
    Event * e = (Event *) event->context;
    if (e->stream) {
        wait_for(e->stream, e->seq);
    }
}

const char * reg_get_name(ggml_backend_reg_t) { return "VDEV"; }
size_t reg_device_count(ggml_backend_reg_t) { return (size_t) g_n_devices; }
ggml_backend_dev_t reg_get_device(ggml_backend_reg_t, size_t i) { return &g_devices[i].dev; }

double env_num(const char * name, double fallback) {
    const char * v = getenv(name);
    return v && *v ? atof(v) : fallback;
}

template <typename T> bool resolve(T & fn, const char * name, bool next = false) {
    return resolve_symbol(fn, name, next, "virtual devices");
}

}  // namespace

bool vdev_delay(ggml_backend_t backend, uint64_t ns, const CallContext & delay_call) {
    if (g_n_devices == 0 || backend->iface.get_name != be_get_name) {
        return false;
    }
    Op * op = new Op();
    op->kind = Op::DELAY;
    op->delay_ns = ns;
    enqueue(stream_of(backend), op, &delay_call);
    return true;
}

bool setup_virtual_devices() {
    int n = (int) env_num("GGML_TRACE_VIRTUAL_DEVICES", 0);
    if (n <= 0) {
        return false;
    }
    if (n > MAX_VDEVS) {
        fprintf(stderr, "ggml-trace: at most %d virtual devices; using %d\n", MAX_VDEVS, MAX_VDEVS);
        n = MAX_VDEVS;
    }
    bool ok = resolve(g_cpu.cpu_init, "ggml_backend_cpu_init") &&
              resolve(g_cpu.cpu_set_n_threads, "ggml_backend_cpu_set_n_threads") &&
              resolve(g_cpu.graph_compute, "ggml_backend_graph_compute") &&
              resolve(g_cpu.backend_free, "ggml_backend_free") &&
              resolve(g_cpu.dev_by_type, "ggml_backend_dev_by_type", true) &&
              resolve(g_cpu.buffer_init, "ggml_backend_buffer_init") &&
              resolve(g_cpu.register_reg, "ggml_backend_register") &&
              resolve(g_cpu.buffer_is_host, "ggml_backend_buffer_is_host") &&
              resolve(g_cpu.buft_is_host, "ggml_backend_buft_is_host") &&
              resolve(g_cpu.nbytes, "ggml_nbytes") && resolve(g_cpu.graph_n_nodes, "ggml_graph_n_nodes") &&
              resolve(g_cpu.graph_node, "ggml_graph_node");
    if (!ok) {
        return false;
    }
    g_tracer.backend_index = (uint32_t (*)(ggml_backend_t)) ggml_symbol("ggmltrace_backend_index");
    g_tracer.current_call = (void (*)(uint64_t *, uint32_t *, int32_t *)) ggml_symbol("ggmltrace_current_call");
    g_tracer.device_exec = (decltype(g_tracer.device_exec)) ggml_symbol("ggmltrace_device_exec");
    if (!g_tracer.backend_index || !g_tracer.current_call || !g_tracer.device_exec) {
        g_tracer = Tracer();
        fprintf(stderr, "ggml-trace: virtual devices without the hooks (libggml-trace-hooks.so not loaded): "
                        "their work is not traced\n");
    }
    g_cpu_dev = g_cpu.dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!g_cpu_dev) {
        fprintf(stderr, "ggml-trace: virtual devices need the CPU backend; none is registered\n");
        return false;
    }
    // "A" (every device) or "A,B,..." (device i gets the i-th; missing ones the last given)
    const char * lat = getenv("GGML_TRACE_VDEV_LATENCY_US");
    double last = 0;
    for (int i = 0; i < MAX_VDEVS; i++) {
        if (lat && *lat) {
            char * end;
            last = strtod(lat, &end);
            lat = *end == ',' ? end + 1 : nullptr;
        }
        g_knobs.latency_us[i] = last;
    }
    g_knobs.bandwidth_gbps = env_num("GGML_TRACE_VDEV_BANDWIDTH_GBPS", 0);
    g_knobs.jitter_us = env_num("GGML_TRACE_VDEV_JITTER_US", 0);
    g_knobs.seed = (uint64_t) env_num("GGML_TRACE_VDEV_SEED", 0);
    g_knobs.threads = (int) env_num("GGML_TRACE_VDEV_THREADS", 1);
    g_knobs.allreduce = env_num("GGML_TRACE_VDEV_ALLREDUCE", 0) != 0;
    g_knobs.integrated = env_num("GGML_TRACE_VDEV_INTEGRATED", 0) != 0;
    const char * host_copies = getenv("GGML_TRACE_VDEV_HOST_COPIES");
    g_knobs.pinned_host_copies = host_copies && strcmp(host_copies, "pinned") == 0;

    memset(&g_reg, 0, sizeof(g_reg));
    g_reg.api_version = GGML_BACKEND_API_VERSION;
    g_reg.iface.get_name = reg_get_name;
    g_reg.iface.get_device_count = reg_device_count;
    g_reg.iface.get_device = reg_get_device;
    g_reg.iface.get_proc_address = reg_get_proc_address;
    for (int i = 0; i < n; i++) {
        VDevice & d = g_devices[i];
        d.index = i;
        snprintf(d.name, sizeof(d.name), "VDEV%d", i);
        snprintf(d.buft_name, sizeof(d.buft_name), "VDEV%d", i);
        memset(&d.buft, 0, sizeof(d.buft));
        d.buft.iface.get_name = buft_get_name;
        d.buft.iface.alloc_buffer = buft_alloc;
        d.buft.iface.get_alignment = buft_alignment;
        d.buft.iface.is_host = buft_is_host;
        d.buft.device = &d.dev;
        d.buft.context = &d;
        snprintf(d.host_buft_name, sizeof(d.host_buft_name), "VDEV%d_Host", i);
        d.host_buft = d.buft;  // the same allocator; is_host and its name tell them apart

        memset(&d.dev, 0, sizeof(d.dev));
        ggml_backend_device_i & f = d.dev.iface;
        f.get_name = dev_get_name;
        f.get_description = dev_get_description;
        f.get_memory = dev_get_memory;
        f.get_type = dev_get_type;
        f.get_props = dev_get_props;
        f.init_backend = dev_init_backend;
        f.get_buffer_type = dev_get_buffer_type;
        // offered only where it changes something: programs (llama.cpp) put their CPU buffers in it
        f.get_host_buffer_type = g_knobs.pinned_host_copies ? dev_get_host_buffer_type : nullptr;
        f.supports_op = dev_supports_op;
        f.supports_buft = dev_supports_buft;
        f.offload_op = dev_offload_op;
        f.event_new = dev_event_new;
        f.event_free = dev_event_free;
        f.event_synchronize = dev_event_synchronize;
        d.dev.reg = &g_reg;
        d.dev.context = &d;
    }
    g_n_devices = n;
    g_cpu.register_reg(&g_reg);
    return true;
}

}  // namespace ggml_trace
