// ggml-trace binary trace format, version 1. Documented in docs/trace-format.md; the Python
// loader (analysis/trace_file.py) mirrors these structs as numpy dtypes. Change both together.
//
// File = 4096-byte header, then chunks of CHUNK_SIZE bytes. Each chunk belongs to one thread and
// holds a chunk header followed by 64-byte records. A record is valid once its `type` byte is
// non-zero: writers store the body first and the type last (release order), so a crash leaves
// either a whole record or a zero that ends the chunk.
#pragma once
#include <stdint.h>

namespace ggml_trace {

static const char     FILE_MAGIC[8]   = {'G', 'G', 'M', 'L', 'T', 'R', 'C', '\0'};
static const uint32_t FORMAT_VERSION  = 1;
static const uint32_t HEADER_SIZE     = 4096;
static const uint32_t RECORD_SIZE     = 64;
static const uint32_t CHUNK_SIZE      = 64 * 1024;
static const uint32_t CHUNK_MAGIC     = 0x4b4e4843;  // "CHNK"
static const uint32_t STRING_PIECE    = 48;          // payload bytes per string record

struct FileHeader {
    char     magic[8];
    uint32_t version;
    uint32_t header_size;
    uint32_t record_size;
    uint32_t chunk_size;
    uint64_t t0_monotonic_ns;     // CLOCK_MONOTONIC at open
    uint64_t t0_realtime_ns;      // CLOCK_REALTIME at the same instant
    uint64_t t0_ticks;            // record clock (ticks) at the same instant
    double   ns_per_tick;         // calibrated at open; CLOCK records refine it (see docs)
    uint32_t pid;
    uint32_t backend_api_version; // GGML_BACKEND_API_VERSION the hooks were compiled against
    char     hooks_build[64];     // ggml source the hooks were compiled against (e.g. "b10531")
    // Flight recorder (docs/trace-format.md, "Ring files"); all zero in a file written straight through.
    uint32_t file_flags;          // FILE_RING, FILE_CLOSED, FILE_SNAPSHOT
    uint32_t reserved0;
    uint64_t ring_keep_ns;        // a ring keeps at least this much of the recent past (0: size rule only)
    uint64_t ring_max_bytes;      // and grows to at most this many bytes of ring chunks
    uint64_t snapshot_ns;         // FILE_SNAPSHOT: CLOCK_MONOTONIC when the copy was taken
    uint64_t hold_until_ns;       // a ring: recycle nothing before this CLOCK_MONOTONIC time (set by a
                                  // snapshot being taken; the ring may grow to twice its size meanwhile)
};

static const uint32_t FILE_RING     = 0x1;  // chunks are recycled, oldest first; order by chunk_index
static const uint32_t FILE_CLOSED   = 0x2;  // a ring's writer closed the file (a plain file says so by its size)
static const uint32_t FILE_SNAPSHOT = 0x4;  // a copy of a file taken while its writer ran (tracer/snapshot.py)

struct ChunkHeader {              // first 64 bytes of every chunk
    uint32_t magic;
    uint32_t thread;              // thread index (see THREAD records)
    uint64_t chunk_index;         // position in the file; in a ring, the order chunks were claimed in
    uint64_t t_claim;             // record clock when the thread claimed the chunk (0: appended after the run)
    uint32_t ordinal;             // the thread's how-manieth (ring) chunk (0 = its first)
    uint8_t  region;              // CHUNK_RING (also every chunk of a plain file) or CHUNK_KEPT
    uint8_t  pad[35];
};

static const uint8_t CHUNK_RING = 0;  // recycled once older than the ring keeps
static const uint8_t CHUNK_KEPT = 1;  // never recycled: strings, metadata, threads, backends, buffers

enum RecordType : uint8_t {
    REC_NONE    = 0,  // unwritten space
    REC_STRING  = 1,  // a piece of an interned string
    REC_META    = 2,  // key/value metadata (both string ids)
    REC_THREAD  = 3,  // a host thread
    REC_BACKEND = 4,  // a backend (stream) and its device
    REC_BUFFER  = 5,  // a buffer seen, allocated or freed
    REC_CALL    = 6,  // one traced call with begin and end time
    REC_ACCESS  = 7,  // a byte range read or written by a call
    REC_PLACE   = 8,  // a tensor's placement after a scheduler allocation
    REC_CLOCK   = 9,  // a (ticks, CLOCK_MONOTONIC ns) pair to convert record times
    REC_GPU     = 10, // a GPU activity reported by CUPTI (kernel, memcpy, memset, correlation)
    REC_SAMPLE  = 11, // one reading of a GPU counter (NVML), appended by the recorder
    REC_NEST    = 12, // a call made by a meta (tensor-parallel) backend's call: parent, device, role
    REC_CUDA    = 13, // a CUDA runtime call below the backend interface (CUDA streams mode, cuda_calls.h)
    REC_COUNT,        // one past the last type: a new type goes before it (the loader is held to it)
};

enum CallKind : uint8_t {
    K_SCHED_NEW = 1, K_SCHED_FREE, K_SCHED_GRAPH_COMPUTE, K_SCHED_ALLOC_GRAPH, K_SCHED_RESERVE,
    K_SCHED_SYNCHRONIZE, K_SCHED_RESET,
    K_GRAPH_COMPUTE = 16,          // one split run on a backend
    K_CPY_TENSOR_ASYNC, K_SET_TENSOR_ASYNC, K_GET_TENSOR_ASYNC, K_SET_TENSOR_2D_ASYNC,
    K_GET_TENSOR_2D_ASYNC, K_SYNCHRONIZE, K_EVENT_RECORD, K_EVENT_WAIT,
    // A backend's own allreduce (comm.h), one record per device of the communicator, all with the
    // same t_begin/t_end (the one host call) and arg = the call's sequence number; obj = the
    // communicator; backend = that device's backend. Accepted: the device's tensor is read and
    // written in place (two accesses). flags bit1: declined (no accesses; the meta backend's
    // butterfly follows).
    K_COMM_ALLREDUCE,
    K_EVENT_NEW = 32, K_EVENT_FREE, K_EVENT_SYNCHRONIZE,
    K_BUF_SET_TENSOR = 48, K_BUF_GET_TENSOR, K_BUF_SET_TENSOR_2D, K_BUF_GET_TENSOR_2D,
    K_BUF_CPY_TENSOR, K_BUF_MEMSET_TENSOR, K_BUF_CLEAR, K_BUF_ALLOC, K_BUF_FREE,
    K_USER_MARK = 64, K_USER_RANGE,
    // The program wrote a graph input in host memory without a ggml call (host_writes.h): obj = the
    // tensor, arg = bytes; one ACCESS (write). Observed: its bytes changed inside [t_begin, t_end].
    // Inferred: no hooked call wrote it, so it is taken as written at the latest when the next graph
    // compute began (t_begin = t_end).
    K_HOST_WRITE, K_HOST_WRITE_INFERRED,
    // Work as it ran on an async backend's device (written by whoever observed it: a virtual
    // device's worker, an event watcher). obj = call_id of the host call that enqueued it;
    // flags bits 4-5 say who observed it (DeviceSource); bit 6: the start is an estimate; bit 7:
    // the end was already past when the observer looked (the end time is an upper bound).
    K_DEVICE_EXEC = 80,
    // A delay injected on purpose (GGML_TRACE_DELAY) before the call whose call_id is in obj;
    // t_begin/t_end: when the host injected it (for a host delay: the sleep itself).
    // flags bits 1-2: where it acted (DelayWhere); bit0: it could not be injected.
    // arg: rule index << 48 | requested nanoseconds. Where a queue or stream ran it, a
    // K_DEVICE_EXEC record with obj = this call's call_id says when.
    K_DELAY = 81,
};
// where a delay acted: the calling thread, a virtual device's queue, a CUDA stream, a backend's own queue
// busy with products (delay_work.h)
enum DelayWhere : uint8_t { DELAY_HOST = 0, DELAY_QUEUE = 1, DELAY_STREAM = 2, DELAY_WORK = 3 };
static const uint8_t DELAY_WHERE_SHIFT = 1;
static const int DELAY_RULE_SHIFT = 48;
// SRC_MARKERS: [t_begin, t_end] bounds the operation (it started after t_begin, ended by t_end).
enum DeviceSource : uint8_t { SRC_DEVICE = 0, SRC_EVENTS = 1, SRC_MARKERS = 2 };
static const uint8_t DEVICE_SOURCE_SHIFT = 4;
static const uint8_t DEVICE_START_ESTIMATED = 0x40;
static const uint8_t DEVICE_END_LATE = 0x80;
enum GpuActivityKind : uint8_t {
    GPU_KERNEL = 1, GPU_MEMCPY = 2, GPU_MEMSET = 3, GPU_CORRELATION = 4, GPU_API = 5,
    GPU_GRAPH = 6,  // a CUDA graph's whole execution (CUPTI's graph trace); name "CUDA graph", bytes: graph id
};

enum AccessMode : uint8_t { ACC_READ = 1, ACC_WRITE = 2 };
// AccessRec flags. A split's read that its first reads leave out (a source another node of the split
// produced, or one an earlier node already read), recorded per node in CUDA streams mode only, so
// that the order inside a split can be judged node by node.
static const uint8_t ACCESS_PER_NODE = 0x01;

enum BufferEvent : uint8_t { BUF_SEEN = 1, BUF_ALLOCATED = 2, BUF_FREED = 3 };

static const uint32_t NONE32 = 0xffffffffu;

// CallRec flags. Bit 0: the call returned failure (a delay: it could not be injected).
static const uint8_t CALL_FAILED = 0x01;
// Bit 1 of cpy_tensor_async and comm_allreduce: the backend declined it (ggml falls back).
static const uint8_t CALL_DECLINED = 0x02;
// Bit 2 of sched_new: the scheduler was made with parallel = true.
static const uint8_t CALL_SCHED_PARALLEL = 0x04;
// Bit 3 of sched_graph_compute: the synchronous entry point (ggml_backend_sched_graph_compute).
static const uint8_t CALL_SYNC_COMPUTE = 0x08;
// Bit 5: the call went to a meta backend (or a meta buffer); its work is in the calls it made on
// the simple backends (NEST records point at it), it has no accesses or queue itself.
static const uint8_t CALL_META_PARENT = 0x20;
enum MetaRole : uint8_t { ROLE_NONE = 0, ROLE_MAIN = 1, ROLE_ZERO = 2, ROLE_COPY = 3, ROLE_REDUCE = 4,
                          ROLE_IO = 5, ROLE_SYNC = 6, ROLE_OTHER = 7 };

struct StringRec {   // REC_STRING
    uint8_t  type;
    uint8_t  len;         // bytes used in `text`
    uint16_t piece;       // index of this piece
    uint32_t total_len;   // length of the whole string
    uint64_t id;          // hash of the whole string
    char     text[STRING_PIECE];
};

struct MetaRec {     // REC_META
    uint8_t  type, pad[3];
    uint32_t thread;
    uint64_t t;
    uint64_t key;         // string id
    uint64_t value;       // string id
    uint8_t  pad2[32];
};

// Record times are in ticks of the CPU's invariant time-stamp counter (one `rdtsc`, ~10 ns, where a
// clock_gettime can cost ~50 ns in a VM). CLOCK records pair ticks with CLOCK_MONOTONIC so the
// loader converts them to nanoseconds by linear interpolation. Without a TSC, ticks are ns.
struct ClockRec {    // REC_CLOCK
    uint8_t  type, pad[3];
    uint32_t thread;
    uint64_t ticks;
    uint64_t monotonic_ns;
    uint8_t  pad2[40];
};

struct ThreadRec {   // REC_THREAD
    uint8_t  type, pad[3];
    uint32_t thread;
    uint64_t t;
    uint64_t os_tid;
    uint64_t name;        // string id
    uint8_t  pad2[32];
};

struct BackendRec {  // REC_BACKEND
    uint8_t  type;
    uint8_t  device_type; // enum ggml_backend_dev_type
    uint8_t  has_async;   // backend has async copies or set/get
    uint8_t  has_events;  // device can create events
    uint32_t backend;     // backend index
    uint64_t ptr;         // ggml_backend_t
    uint64_t device_ptr;  // ggml_backend_dev_t
    uint64_t name;        // string ids
    uint64_t device_name;
    uint64_t device_description;
    uint64_t t;
    uint64_t reserved;
};

struct BufferRec {   // REC_BUFFER
    uint8_t  type;
    uint8_t  event;       // BufferEvent
    uint8_t  usage;       // enum ggml_backend_buffer_usage
    uint8_t  is_host;
    uint32_t thread;
    uint64_t t;
    uint64_t ptr;         // ggml_backend_buffer_t
    uint64_t base;
    uint64_t size;
    uint64_t buft_name;   // string id
    uint64_t device_ptr;  // device of the buffer type (0 if none)
    uint64_t reserved;
};

struct CallRec {     // REC_CALL
    uint8_t  type;
    uint8_t  kind;        // CallKind
    uint8_t  sched;       // scheduler index (0xff: outside any scheduler)
    uint8_t  flags;       // CallKind specific; bit0 = call returned failure
    uint32_t thread;
    uint64_t t_begin;
    uint64_t t_end;
    uint64_t call_id;     // unique per trace: thread << 40 | per-thread counter
    uint32_t backend;     // backend the call was issued to (a buffer call: the buffer's), or NONE32
    uint32_t backend2;    // the other backend of a backend-to-backend copy (its source), or NONE32
    uint32_t graph;       // scheduler graph sequence number, or NONE32
    int32_t  split;       // split index within the graph, or -1
    uint64_t obj;         // event handle, buffer, tensor, or string id (user ranges)
    uint64_t arg;         // bytes, nodes, or kind-specific
};

struct AccessRec {   // REC_ACCESS and REC_PLACE
    uint8_t  type;
    uint8_t  mode;        // AccessMode (REC_ACCESS); 0 for REC_PLACE
    uint8_t  flags;       // ACCESS_PER_NODE
    uint8_t  pad;
    uint32_t thread;
    uint64_t call_id;     // the call this belongs to
    uint64_t buffer;      // ggml_backend_buffer_t, or 0 when `offset` is a raw host address
    uint64_t offset;
    uint64_t size;
    uint64_t tensor;      // string id of the tensor name
    uint64_t node;        // string id of the node that reads it (reads), else = tensor
    uint32_t op;          // ggml_op of the tensor
    uint32_t index;       // node index within the split / graph, or NONE32 (copies, host memory)
};

// Times in REC_GPU and REC_SAMPLE are CLOCK_MONOTONIC nanoseconds (not ticks): CUPTI and the
// recorder's NVML sampler both read that clock.
struct GpuActivityRec {  // REC_GPU
    uint8_t  type;
    uint8_t  kind;        // GpuActivityKind
    uint8_t  copy_kind;   // CUpti_ActivityMemcpyKind (memcpy), else 0
    uint8_t  pad;
    uint32_t device;      // CUDA device ordinal
    uint64_t t_begin_ns;  // CLOCK_MONOTONIC
    uint64_t t_end_ns;
    uint32_t correlation; // CUPTI correlation id (joins a kernel/copy to its CORRELATION record)
    uint32_t stream;      // CUDA stream id; for an API record, the OS thread id of the caller
    uint64_t name;        // kernel: string id of its name. correlation: the external id (call_id).
                          // API record: its CUPTI callback id
    uint64_t bytes;       // memcpy/memset bytes; kernel: grid x*y*z
    uint64_t reserved[2];
};
struct SampleRec {   // REC_SAMPLE
    uint8_t  type, pad[3];
    uint32_t device;      // NVML device index
    uint64_t t_ns;        // CLOCK_MONOTONIC
    uint64_t metric;      // string id of the metric name (e.g. "sm_clock_mhz")
    double   value;
    uint8_t  pad2[32];
};
static_assert(sizeof(FileHeader) <= HEADER_SIZE, "header");
struct NestRec {      // REC_NEST
    uint8_t  type;
    uint8_t  role;        // MetaRole
    uint8_t  device;      // index of the simple backend within the meta backend (copies: the source's)
    uint8_t  pad;
    uint32_t thread;
    uint64_t call_id;     // the nested call
    uint64_t parent;      // call_id of the meta call that made it
    uint32_t meta_backend;// backend index of the meta backend
    int32_t  subgraph;    // meta subgraph index (computes and allreduce steps), or -1
    uint8_t  pad2[32];
};
static_assert(sizeof(NestRec) == RECORD_SIZE, "nest");

// What a CUDA record (REC_CUDA) is: the runtime (or driver) call the host made.
enum CudaOp : uint8_t {
    CUDA_LAUNCH = 1,        // a kernel launch (stream; name: the kernel's name)
    CUDA_MEMCPY = 2,        // an async copy (stream; handle: destination address, src; name: bytes)
    CUDA_MEMSET = 3,        // an async memset (stream; handle: destination address; name: bytes)
    CUDA_EVENT_RECORD = 4,  // cudaEventRecord (stream, handle: the event)
    CUDA_STREAM_WAIT = 5,   // cudaStreamWaitEvent (stream waits for handle: the event)
    CUDA_EVENT_SYNC = 6,    // cudaEventSynchronize (handle: the event): the host waits
    CUDA_STREAM_SYNC = 7,   // cudaStreamSynchronize (stream): the host waits
    CUDA_DEVICE_SYNC = 8,   // cudaDeviceSynchronize: the host waits for every stream of the device
    CUDA_CAPTURE_BEGIN = 9, // cudaStreamBeginCapture (stream)
    CUDA_CAPTURE_END = 10,  // cudaStreamEndCapture (stream)
    CUDA_GRAPH_LAUNCH = 11, // cudaGraphLaunch (stream, handle: the executable graph)
};
// CudaCallRec flags
static const uint8_t CUDA_CAPTURED = 0x01;  // its stream was capturing: a CUDA graph node, run by later launches
static const uint8_t CUDA_DRIVER = 0x02;    // a driver API call made outside any runtime call (a library's launch)
static const uint8_t CUDA_RETURNED = 0x04;  // a blocking call's return (its entry is the record before it)
static const uint8_t CUDA_FAILED = 0x08;    // the call returned an error (return records only)

struct CudaCallRec {  // REC_CUDA
    uint8_t  type;
    uint8_t  op;          // CudaOp
    uint8_t  flags;
    uint8_t  pad;
    uint32_t thread;
    uint64_t t;           // record clock (ticks) at the call's entry (CUDA_RETURNED: at its return)
    uint64_t call_id;     // the traced call in progress on this thread, or 0
    uint64_t stream;      // cudaStream_t (0: the legacy default stream), or 0 where the call has none
    uint64_t handle;      // the event, the executable graph, or a copy's or memset's destination address
    uint64_t src;         // a copy's source address
    uint64_t name;        // a launch: string id of the kernel's name; a copy or memset: bytes
    uint32_t node;        // inside a split: index of the node computed (as in ACCESS records), or NONE32
    uint32_t device;      // the calling thread's current CUDA device (physical ordinal)
};
static_assert(sizeof(CudaCallRec) == RECORD_SIZE, "cuda call");
static_assert(sizeof(GpuActivityRec) == RECORD_SIZE, "gpu activity");
static_assert(sizeof(SampleRec) == RECORD_SIZE, "sample");
static_assert(sizeof(ChunkHeader) == RECORD_SIZE, "chunk header");
static_assert(sizeof(StringRec) == RECORD_SIZE, "string");
static_assert(sizeof(MetaRec) == RECORD_SIZE, "meta");
static_assert(sizeof(ThreadRec) == RECORD_SIZE, "thread");
static_assert(sizeof(ClockRec) == RECORD_SIZE, "clock");
static_assert(sizeof(BackendRec) == RECORD_SIZE, "backend");
static_assert(sizeof(BufferRec) == RECORD_SIZE, "buffer");
static_assert(sizeof(CallRec) == RECORD_SIZE, "call");
static_assert(sizeof(AccessRec) == RECORD_SIZE, "access");

}  // namespace ggml_trace
