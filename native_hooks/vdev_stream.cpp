#include "vdev_stream.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <chrono>

#include "delay_rules.h"
#include "ggml-impl.h"
#include "observer_api.h"
#include "trace_writer.h"

namespace ggml_trace::vdev {

Knobs g_knobs;
CpuApi g_cpu;
Tracer g_tracer;

void wait_for(Stream * s, uint64_t seq) {
    std::unique_lock<std::mutex> lock(s->m);
    s->cv_done.wait(lock, [&] { return s->completed >= seq; });
}

namespace {

void delay(Stream * s, size_t bytes) {
    double us = g_knobs.latency_us[s->device];
    if (g_knobs.jitter_us > 0) {
        us += std::uniform_real_distribution<double>(0, g_knobs.jitter_us)(s->rng);
    }
    if (bytes && g_knobs.bandwidth_gbps > 0) {
        us += (double) bytes / (g_knobs.bandwidth_gbps * 1e3);
    }
    if (us > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(us));
    }
}

void run_compute(Stream * s, Op * op) {
    static ggml_bitset_t no_bits[1] = {0};
    static ggml_tensor * no_keys[1] = {nullptr};
    // An empty hash set: the CPU backend finds no use counts and so fuses nothing.
    ggml_cgraph g;
    memset(&g, 0, sizeof(g));
    g.size = (int) op->nodes.size();
    g.n_nodes = (int) op->nodes.size();
    g.nodes = op->nodes.data();
    g.visited_hash_set.size = 1;
    g.visited_hash_set.used = no_bits;
    g.visited_hash_set.keys = no_keys;
    g.order = GGML_CGRAPH_EVAL_ORDER_LEFT_TO_RIGHT;
    if (g_cpu.graph_compute(s->cpu, &g) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "ggml-trace: %s: a split failed on the CPU kernels\n", s->name);
    }
}

// Every device's part waits until all have arrived, so each device's later work runs after every
// device's earlier work (a barrier, as CUDA's internal pipeline and NCCL are); the last to arrive
// forms the sum, then each writes it into its own tensor. Inactive shards count as zeros.
void run_allreduce(Op * op) {
    AllReduce & a = *op->allreduce;
    {
        std::unique_lock<std::mutex> lock(a.m);
        if (++a.arrived == a.n) {
            a.sum.assign((size_t) a.ne, 0.0f);
            for (int j = 0; j < a.n; j++) {
                for (int64_t k = 0; a.active[j] && k < a.ne; k++) a.sum[k] += a.data[j][k];
            }
            a.summed = true;
            a.cv.notify_all();
        } else {
            a.cv.wait(lock, [&] { return a.summed; });
        }
    }
    memcpy(a.data[op->rank], a.sum.data(), (size_t) a.ne * sizeof(float));
}

void record_exec(Stream * s, const Op * op, uint64_t t0, uint64_t t1) {
    if (!op->call.call_id || !g_tracer.device_exec) {
        return;
    }
    uint32_t index = s->backend ? g_tracer.backend_index(s->backend) : NONE32;
    g_tracer.device_exec(SRC_DEVICE, index, op->call.graph, op->call.split, op->call.call_id, t0, t1,
                         op->kind == Op::COPY ? op->size : op->nodes.size());
}

// The host call now enqueuing work (none when the hooks are not loaded).
CallContext current_call() {
    CallContext c;
    if (g_tracer.current_call) {
        g_tracer.current_call(&c.call_id, &c.graph, &c.split);
    }
    return c;
}

}  // namespace

void worker_main(Stream * s) {
    char name[16];
    snprintf(name, sizeof(name), "%s stream", s->name);
    pthread_setname_np(pthread_self(), name);
    uint64_t done = 0;  // seq of the last op this worker finished
    for (;;) {
        Op * op;
        // An idle device picks new work up at once, as a GPU would: spin for a while before
        // sleeping (a condition-variable wake-up alone costs tens of microseconds).
        uint64_t spin_until = monotonic_ns() + 200000;
        while (s->posted.load(std::memory_order_acquire) == done && monotonic_ns() < spin_until) {
        }
        {
            std::unique_lock<std::mutex> lock(s->m);
            s->cv_work.wait(lock, [&] { return s->stop || !s->ops.empty(); });
            if (s->ops.empty()) {
                return;
            }
            op = s->ops.front();
            s->ops.pop_front();
        }
        if (op->kind == Op::WAIT) {
            wait_for(op->wait_stream, op->wait_seq);
        } else if (op->kind == Op::ALLREDUCE) {
            run_allreduce(op);
        } else if (op->kind == Op::DELAY) {
            uint64_t t0 = now_ticks();
            delay_sleep_ns(op->delay_ns);
            record_exec(s, op, t0, now_ticks());
        } else {
            delay(s, op->kind == Op::COPY ? op->size : 0);
            uint64_t t0 = now_ticks();
            if (op->kind == Op::COPY) {
                memcpy(op->dst, op->src, op->size);
            } else {
                run_compute(s, op);
            }
            record_exec(s, op, t0, now_ticks());
        }
        {
            std::lock_guard<std::mutex> lock(s->m);
            s->completed = op->seq;
        }
        done = op->seq;
        s->cv_done.notify_all();
        delete op;
    }
}

uint64_t enqueue(Stream * s, Op * op, const CallContext * call) {
    op->call = call ? *call : current_call();
    std::lock_guard<std::mutex> lock(s->m);
    op->seq = ++s->enqueued;
    s->ops.push_back(op);
    s->posted.store(op->seq, std::memory_order_release);
    s->cv_work.notify_one();
    return op->seq;
}

void enqueue_copy(Stream * s, void * dst, const void * src, size_t size) {
    Op * op = new Op();
    op->kind = Op::COPY;
    op->dst = dst;
    op->src = src;
    op->size = size;
    enqueue(s, op);
}

uint64_t tail(Stream * s) {
    std::lock_guard<std::mutex> lock(s->m);
    return s->enqueued;
}

// Deep-copies the split's nodes and every tensor they reach; data pointers stay as they are.

}  // namespace ggml_trace::vdev
