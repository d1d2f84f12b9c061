// Lock-free, allocation-free trace writer over a MAP_SHARED file mapping.
//
// Every thread owns the chunk it writes into; a new chunk costs one atomic add. Background grow
// threads extend and map the file ahead of the writers (a writer that outruns them waits for its
// 4 MiB segment). Records go straight into the page cache,
// so the kernel keeps them when the process dies by SIGKILL, SIGSEGV or abort(): there is
// nothing to flush.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <type_traits>

#include "trace_format.h"

namespace ggml_trace {

inline uint64_t monotonic_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

// The record clock (see ClockRec in trace_format.h).
inline uint64_t now_ticks() {
#if defined(__x86_64__)
    return __builtin_ia32_rdtsc();
#else
    return monotonic_ns();
#endif
}

// Flight recorder (GGML_TRACE_RING_SECONDS / _BYTES): keep the recent past in a bounded file.
// Both zero: write straight through. keep_ns alone: a ring of up to RING_DEFAULT_MAX_BYTES.
struct RingConfig {
    uint64_t keep_ns = 0;    // recycle no chunk that holds anything younger than this
    uint64_t max_bytes = 0;  // and let the ring's chunks take at most this much of the file
};
static const uint64_t RING_DEFAULT_MAX_BYTES = 1ull << 30;

// Opens (creates) the trace file. `hooks_build` names the ggml source the hooks were built for.
bool writer_open(const char * path, const char * hooks_build, uint32_t api_version, const RingConfig & ring = RingConfig());
// Stops further writes and trims the file to the chunks in use. Safe to call more than once.
void writer_close();
bool writer_is_open();
// Length of a record-clock tick, as calibrated when the file was opened.
double writer_ns_per_tick();
// Grows and maps the file ahead of time, up to `bytes` of records (waits for the grow threads).
bool writer_reserve(uint64_t bytes);
const char * writer_path();
// Writes a CLOCK record if the last one is older than about 50 ms (cheap to call often: every
// call's end does, so that a program without a scheduler, an RPC server, is calibrated too).
void maybe_clock_sync(uint64_t now = now_ticks());

// A (ticks, CLOCK_MONOTONIC ns) pair taken as one moment: the clock read between two tick reads,
// the tightest of a few tries. Read one after the other, a thread preempted between the two reads
// pairs times a time slice apart, and every time calibrated on the pair shifts by as much.
struct ClockPair {
    uint64_t ticks, ns;
};
ClockPair clock_pair();

// Asks the kernel to write the mapped pages to disk (they already survive a process crash).
void writer_flush();

// Small index of the calling thread (emits a THREAD record the first time).
uint32_t thread_index();
// Unique id for a new call record of the calling thread.
uint64_t next_call_id();

namespace detail {
// A zeroed slot in the calling thread's chunk (its kept chunk: `kept`), or nullptr once tracing stopped.
uint8_t * reserve_slot(bool kept);

template <class T, class Fill>
bool emit(uint8_t type, bool kept, Fill && fill) {
    static_assert(sizeof(T) == RECORD_SIZE, "a record fills one slot");
    static_assert(std::is_trivially_copyable_v<T>, "a record is plain bytes in the file");
    // No padding of the compiler's: every byte is a named field, zero unless `fill` sets it.
    static_assert(std::has_unique_object_representations_v<T>, "a record's padding is named fields");
    uint8_t * slot = reserve_slot(kept);
    if (!slot) {
        return false;
    }
    T & rec = *reinterpret_cast<T *>(slot);  // the one cast: slots are 64-byte aligned, zeroed
    fill(rec);
    __atomic_store_n(slot, type, __ATOMIC_RELEASE);  // last: the record is whole once a reader sees its type
    return true;
}
}  // namespace detail

// The one way to write a record: fills a zeroed slot of the calling thread's chunk in place, then
// publishes its type byte last, so a reader (or a crash) never sees half a record.
//   emit_record<AccessRec>(REC_ACCESS, [&](AccessRec & r) { r.mode = mode; ... });
// `fill` sets the fields (not `type`) and writes no record itself (intern names first): one that
// moved the thread on to a new ring chunk would let the ring recycle this slot's chunk. False
// once tracing stopped (`fill` not called).
template <class T, class Fill>
bool emit_record(uint8_t type, Fill && fill) {
    return detail::emit<T>(type, false, fill);
}
// The same, for records every window of a flight recorder needs (strings, metadata, threads,
// backends, buffers): a ring never recycles them. Without a ring, as emit_record.
template <class T, class Fill>
bool emit_kept_record(uint8_t type, Fill && fill) {
    return detail::emit<T>(type, true, fill);
}

// A K_DEVICE_EXEC record, for every observer of device-side work: what call `obj` enqueued (in
// scheduler graph/split) ran on backend `backend` from t_begin to t_end, as `source` (DeviceSource)
// saw it; `flags`: DEVICE_START_ESTIMATED, DEVICE_END_LATE. Nothing is written once tracing stopped.
void write_device_exec(uint8_t source, uint8_t flags, uint32_t backend, uint32_t graph, int32_t split, uint64_t obj,
                       uint64_t t_begin, uint64_t t_end, uint64_t arg = 0);

// Interns a string and returns its id (string_id: a word-at-a-time hash of the bytes; 0 for null or empty).
uint64_t intern(const char * s, size_t len);
uint64_t intern(const char * s);
uint64_t string_id(const char * s, size_t len);

void write_meta(const char * key, const char * value, size_t value_len);

}  // namespace ggml_trace
