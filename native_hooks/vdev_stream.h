// A virtual device's queue: a FIFO stream of operations that a worker thread runs later, in
// order, with the CPU backend's kernels, after the latency, bandwidth and jitter the knobs ask for
// (virtual_device.cpp puts ggml's backend, buffer and device vtables in front of it).
#pragma once
#include <stdint.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "capture.h"
#include "ggml-backend-impl.h"

namespace ggml_trace::vdev {

const int MAX_VDEVS = 8;

struct Knobs {
    double latency_us[MAX_VDEVS] = {};  // per device; one value in the variable means every device
    double bandwidth_gbps = 0;  // 0: copies cost only the latency
    double jitter_us = 0;
    uint64_t seed = 0;
    int threads = 1;
    bool allreduce = false;  // offer ggml_backend_comm_* (GGML_TRACE_VDEV_ALLREDUCE=1)
    bool integrated = false;  // like an APU: reads host buffers in place (GGML_TRACE_VDEV_INTEGRATED=1)
    // async copies from host memory only out of its pinned host buffers, as Vulkan's (the others are
    // declined: the scheduler copies synchronously) (GGML_TRACE_VDEV_HOST_COPIES=pinned; default: any)
    bool pinned_host_copies = false;
};
extern Knobs g_knobs;

// Functions from the program's ggml (resolved by name: the hooks do not link ggml).
struct CpuApi {
    ggml_backend_t (*cpu_init)(void);
    void (*cpu_set_n_threads)(ggml_backend_t, int);
    enum ggml_status (*graph_compute)(ggml_backend_t, struct ggml_cgraph *);
    void (*backend_free)(ggml_backend_t);
    ggml_backend_dev_t (*dev_by_type)(enum ggml_backend_dev_type);
    void (*register_reg)(ggml_backend_reg_t);
    bool (*buffer_is_host)(ggml_backend_buffer_t);
    bool (*buft_is_host)(ggml_backend_buffer_type_t);
    size_t (*nbytes)(const struct ggml_tensor *);
    int (*graph_n_nodes)(struct ggml_cgraph *);
    struct ggml_tensor * (*graph_node)(struct ggml_cgraph *, int);
    ggml_backend_buffer_t (*buffer_init)(ggml_backend_buffer_type_t, struct ggml_backend_buffer_i, void *, size_t);
};
extern CpuApi g_cpu;

// The hooks' observer entry points (observer_api.h), found at set-up; null without the hooks.
struct Tracer {
    uint32_t (*backend_index)(ggml_backend_t) = nullptr;
    void (*current_call)(uint64_t *, uint32_t *, int32_t *) = nullptr;
    void (*device_exec)(uint8_t, uint32_t, uint32_t, int32_t, uint64_t, uint64_t, uint64_t, uint64_t) = nullptr;
};
extern Tracer g_tracer;

struct Stream;

// One allreduce call that the devices run together (see comm_allreduce below).
struct AllReduce {
    std::mutex m;
    std::condition_variable cv;
    int n = 0, arrived = 0;
    bool summed = false;
    int64_t ne = 0;
    float * data[MAX_VDEVS] = {};
    bool active[MAX_VDEVS] = {};
    std::vector<float> sum;
};

struct Event {  // completes when its stream has finished the work enqueued before the record
    Stream * stream = nullptr;
    uint64_t seq = 0;
};

struct Op {
    enum Kind { COMPUTE, COPY, WAIT, DELAY, ALLREDUCE } kind;
    uint64_t seq = 0;
    // COMPUTE: private copies of the split's tensors (the scheduler may rebuild its graph before
    // the work runs, as with a real GPU that captured everything at launch)
    std::vector<ggml_tensor> tensors;
    std::vector<ggml_tensor *> nodes;
    // COPY: bytes move when the op runs, not when it is enqueued
    void * dst = nullptr;
    const void * src = nullptr;
    size_t size = 0;
    // WAIT
    Stream * wait_stream = nullptr;
    uint64_t wait_seq = 0;
    // DELAY: the queue stalls this long (an injected delay, see delay.cpp)
    uint64_t delay_ns = 0;
    // ALLREDUCE: the shared call and this device's place in it
    std::shared_ptr<AllReduce> allreduce;
    int rank = 0;
    // trace linkage
    CallContext call;
};

struct Stream {
    int device;
    char name[16];  // the device's

    ggml_backend_t cpu = nullptr;
    std::mutex m;
    std::condition_variable cv_work, cv_done;
    std::deque<Op *> ops;
    uint64_t enqueued = 0, completed = 0;
    std::atomic<uint64_t> posted{0};  // = enqueued, readable without the lock
    bool stop = false;
    std::thread worker;
    std::mt19937_64 rng;
    ggml_backend_t backend = nullptr;
};

// Runs a stream's operations until it is stopped (the stream's thread).
void worker_main(Stream * s);
// Appends an operation; `call`: the host call it belongs to (default: the one now enqueuing).
// Returns its sequence number.
uint64_t enqueue(Stream * s, Op * op, const CallContext * call = nullptr);
void enqueue_copy(Stream * s, void * dst, const void * src, size_t size);
// Waits until the stream has run operation `seq`.
void wait_for(Stream * s, uint64_t seq);
// The sequence number of the last operation enqueued.
uint64_t tail(Stream * s);

}  // namespace ggml_trace::vdev
