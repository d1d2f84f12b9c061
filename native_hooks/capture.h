// The capture core: whether capture is on, what the calling thread is inside of, and the one way a
// host call and the bytes it touches become records. Every hook records through it: the scheduler
// entry points (hooks.cpp), the vtable hooks (vtable_hooks.cpp), the allreduce (comm.cpp). Device-
// side observers (virtual devices, the event watcher, markers, delays) name the call whose work
// they saw through current_call() and write it with write_device_exec (trace_writer.h).
#pragma once
#include <stdint.h>

#include <atomic>

#include "ggml-backend-impl.h"
#include "trace_format.h"

namespace ggml_trace {

// ---------------------------------------------------------------- state

enum class CaptureState { UNINIT, ACTIVE, DISABLED };
extern std::atomic<CaptureState> g_capture_state;  // set once by the start-up (hooks.cpp)
extern std::atomic<bool> g_capture_on;              // ggml_trace_start/stop toggle this

inline bool capturing() {
    return g_capture_state.load(std::memory_order_acquire) == CaptureState::ACTIVE &&
           g_capture_on.load(std::memory_order_relaxed);
}

// The hooks' own ggml calls on this thread (a device-side delay's products: their buffer, their
// chains, reading one back): not the program's, so not recorded. While one lives; they nest.
inline thread_local int t_own_calls = 0;
struct OwnCalls {
    OwnCalls() { t_own_calls++; }
    ~OwnCalls() { t_own_calls--; }
    OwnCalls(const OwnCalls &) = delete;
    OwnCalls & operator=(const OwnCalls &) = delete;
};

// The program's ggml does not match the hooks' build: says why and runs untraced from here on.
void disable(const char * why);

// ---------------------------------------------------------------- what a thread is inside of

// The scheduler graph and split the calling thread is running (set by the scheduler entry points).
struct ThreadContext {
    uint8_t sched = 0xff;
    uint32_t graph = NONE32;
    int32_t split = -1;
    ggml_backend_sched_t active = nullptr;  // scheduler whose graph compute is running
};
ThreadContext & thread_context();

// The host call now enqueuing work, so that work that runs later on a device names the call
// that launched it (a virtual device's worker, a delay).
struct CallContext {
    uint64_t call_id = 0;
    uint32_t graph = NONE32;
    int32_t split = -1;
};
CallContext & current_call();

// ---------------------------------------------------------------- calls and accesses

// One host call: fills a CALL record from the thread's context when made, commits it when done.
// While it lives, CUPTI correlates the kernels the call launches to it.
struct Call {
    CallRec r{};
    bool ok = true;        // the call did what was asked (hooks set it from the result)
    uint64_t result = 0;   // the call's result as an integer (a returned pointer)
    bool nested = false;   // made inside a meta backend's call
    explicit Call(uint8_t kind);
    ~Call();
    Call(const Call &) = delete;
    Call & operator=(const Call &) = delete;
    uint64_t id();
    void commit();

  private:
    bool correlated_ = false;  // pushed as CUPTI's external correlation id
    CallContext outer_;        // the call this one was made in, current again when it ends
};

// Commits a filled CALL record (a call with several records: the allreduce's, one per device).
void commit_call(CallRec & r);

// The buffer holding a tensor's bytes (a view's is its source's).
ggml_backend_buffer_t buffer_of(const ggml_tensor * t);
// A graph node that computes nothing: a view of another's bytes, or no operation at all.
bool writes_nothing(const ggml_tensor * node);
// The tensor whose bytes a view shows (a tensor that is no view: itself).
const ggml_tensor * view_root(const ggml_tensor * t);
// The interned name of a tensor; the meta backend's allreduce temporaries get one made up.
uint64_t tensor_name(const ggml_tensor * t);

// An access of `call_id` to [offset, offset + size) of `buffer` (host memory: buffer null, offset
// the address). `type` is REC_ACCESS, or REC_PLACE for where a tensor was put.
void emit_range(uint8_t type, uint8_t mode, uint64_t call_id, ggml_backend_buffer_t buffer, uint64_t offset,
                uint64_t size, uint64_t tensor_name, uint64_t node_name, uint32_t op, uint32_t index,
                uint8_t flags = 0);
// A tensor's bytes; `extra` shifts into the tensor, `size` overrides its size; `name` is the
// tensor's interned name when the caller has it already. Registers a buffer not seen before.
void emit_tensor(uint8_t type, uint8_t mode, uint64_t call_id, const ggml_tensor * t, uint64_t node_name,
                 uint32_t index, size_t extra = 0, size_t size = (size_t) -1, uint64_t name = 0, uint8_t flags = 0);
// Host memory a copy reads or writes.
void emit_host(uint8_t mode, uint64_t call_id, const void * data, size_t size);
// A split: reads every source it uses that it did not produce itself; writes every node that is
// not a pure view (views alias bytes that their producer already wrote). `per_node` (CUDA streams
// mode): every other source each node reads as well, flagged ACCESS_PER_NODE.
void emit_split_accesses(uint64_t call_id, ggml_cgraph * graph, bool per_node = false);
// Where every tensor a graph touches was put, once the scheduler allocated it (REC_PLACE).
void emit_placements(uint64_t call_id, ggml_cgraph * graph);

}  // namespace ggml_trace
