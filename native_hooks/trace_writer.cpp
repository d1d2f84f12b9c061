#include "trace_writer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stddef.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "platform.h"

namespace ggml_trace {

namespace {

const uint64_t CHUNKS_PER_SEGMENT = 64;  // 4 MiB of file per mapping
const uint64_t SEGMENT_BYTES      = CHUNKS_PER_SEGMENT * CHUNK_SIZE;
const uint64_t MAX_SEGMENTS       = 1 << 16;  // 256 GiB of trace
const uint64_t SEGMENTS_AHEAD     = 2;        // grown before writers need them (request_ahead)
const uint64_t NO_SEGMENT         = ~0ull;
const int GROW_THREADS            = 2;        // growing the file side by side (grow_claimed)
const uint64_t CLOSED             = 1ull << 62;
const size_t   STRING_CACHE       = 4096;  // per-thread cache of strings already written
const uint64_t NO_CHUNK           = ~0ull;
// Flight recorder: a ring never shrinks below this many chunks (4 MiB), so that every thread
// can own one while the others recycle.
const uint64_t RING_MIN_CHUNKS    = 64;
const uint64_t KEPT_MAX_CHUNKS    = 4096;     // 256 MiB of strings and metadata, then they go to the ring
const size_t   KEPT_STRING_SLOTS  = 1 << 20;  // ids of the strings in the kept region (8 MiB, untouched unless a ring)

// The flight recorder's state (GGML_TRACE_RING_*): ring chunks are recycled oldest-released
// first once they are older than `keep_ns` or the ring has reached `max_chunks`. Records that
// a reader needs whatever the window (strings, metadata, threads, backends, buffers) go to kept
// chunks, which are never recycled. Chunk claims take `mutex`: once per 1023 records.
struct Ring {
    bool on = false;
    // Release times are CLOCK_MONOTONIC ns, not ticks: the tick rate measured at open (over 2 ms)
    // can be off by a percent on a busy machine, and "keeps at least SECONDS" should not be.
    uint64_t keep_ns = 0;
    uint64_t max_chunks = 0;
    std::mutex mutex;
    uint64_t n_chunks = 0;          // ring positions made so far (guarded by mutex)
    // Released ring chunks in release order (guarded by mutex): position and release time (ns).
    uint64_t * fifo_pos = nullptr;
    uint64_t * fifo_t = nullptr;
    uint64_t fifo_cap = 0, fifo_head = 0, fifo_len = 0;
    std::atomic<uint64_t> next_seq{0};
    std::atomic<uint64_t> kept_chunks{0};
    std::atomic<uint64_t> kept_ids[KEPT_STRING_SLOTS];
};

struct Writer {
    intptr_t fd = -1;
    const FileHeader * header = nullptr;  // the file's header page, mapped: a snapshot's hold request
    char path[4096] = {0};
    std::atomic<uint64_t> next_chunk{0};
    std::atomic<uint64_t> mapped_segments{0};
    std::atomic<uint8_t *> segments[MAX_SEGMENTS];
    std::atomic<uint32_t> next_thread{0};
    std::atomic<bool> open{false};
    // Growth: threads that grow the file and map the next segments ahead of the writers, so that
    // no writer waits for page provisioning (~1 ms per 4 MiB) on its hot path. Guarded by
    // grow_mutex, beside the atomics the writers read without it.
    std::mutex grow_mutex;
    std::condition_variable grow_cv;    // the grow threads wait for a segment to grow
    std::condition_variable grown_cv;   // writers (and close) wait for segments to be mapped
    uint64_t ahead_target = 0;          // segments up to this one are wanted
    uint64_t claimed_segments = 0;      // segments a thread has started to grow
    int growing = 0;                    // segments being grown now
    std::atomic<bool> grow_failed{false};  // the disk is full, or mmap failed: tracing stops
    uint32_t pid = 0;
    std::atomic<uint64_t> last_sync_ticks{0};
    uint64_t sync_interval_ticks = 0;
    double ns_per_tick = 1.0;
    Ring ring;
};

Writer g_writer;

struct ThreadState {
    uint8_t * cur = nullptr;
    uint8_t * end = nullptr;
    uint8_t * kept_cur = nullptr;   // ring files: this thread's kept chunk
    uint8_t * kept_end = nullptr;
    uint64_t ring_pos = NO_CHUNK;   // ring files: the position of the ring chunk `cur` is in
    uint32_t ring_ordinal = 0;      // (ring) chunks this thread claimed so far
    uint32_t thread = NONE32;
    uint64_t calls = 0;
    uint64_t strings[STRING_CACHE] = {0};
};

thread_local ThreadState t_state;

// Gives a thread's ring chunk back when the thread ends, so that the ring can recycle it.
struct RingRelease {
    ~RingRelease();
};
thread_local RingRelease t_ring_release;

// Tracing stops: the file cannot grow (said once), and writers waiting for a segment go on
// without one. grow_mutex held.
void growth_failed(int err) {
    if (!g_writer.grow_failed.exchange(true)) {
        fprintf(stderr, "ggml-trace: cannot grow %s (%s); tracing stops here\n", g_writer.path, strerror(err));
    }
    g_writer.grown_cv.notify_all();
}

// Claims the next segment to grow (grow_mutex held), or returns NO_SEGMENT when the file must not
// grow: closed (and maybe trimmed), failed, or full. The file's size takes in the whole segment
// here, before its zeros are written: claimed in order under the lock, the size only grows, and a
// reader of the live file never sees it end inside a chunk (zeros are written a page at a time).
uint64_t claim_segment() {
    if (!g_writer.open.load(std::memory_order_acquire) || g_writer.grow_failed.load() ||
        g_writer.claimed_segments >= MAX_SEGMENTS) {
        return NO_SEGMENT;
    }
    uint64_t n = g_writer.claimed_segments;
    if (int err = g_os.file_set_size(g_writer.fd, HEADER_SIZE + (n + 1) * SEGMENT_BYTES)) {
        growth_failed(err);
        return NO_SEGMENT;
    }
    g_writer.growing++;
    g_writer.claimed_segments++;
    return n;
}

// Grows the file over segment `n` and maps it (no lock held: threads grow segments side by side),
// then publishes it. `mapped_segments` counts the segments mapped without a gap below them.
void grow_claimed(uint64_t n) {
    uint64_t off = HEADER_SIZE + n * SEGMENT_BYTES;
    // zeros written, not left sparse (platform.h): a full disk fails the growth, not a writer
    int err = g_os.file_zero(g_writer.fd, off, SEGMENT_BYTES);
    uint8_t * p = err == 0 ? g_os.file_map(g_writer.fd, off, SEGMENT_BYTES) : nullptr;
    if (p == nullptr) {
        err = err != 0 ? err : errno;
    }
    {
        std::lock_guard<std::mutex> lock(g_writer.grow_mutex);
        if (p == nullptr) {
            growth_failed(err);
        } else {
            g_writer.segments[n].store(p, std::memory_order_release);
            uint64_t m = g_writer.mapped_segments.load(std::memory_order_relaxed);
            while (m < g_writer.claimed_segments && g_writer.segments[m].load(std::memory_order_relaxed)) {
                m++;
            }
            g_writer.mapped_segments.store(m, std::memory_order_release);
        }
        g_writer.growing--;
    }
    g_writer.grown_cv.notify_all();
}

bool segment_settled(uint64_t seg) {
    return seg < g_writer.mapped_segments.load(std::memory_order_acquire) || g_writer.grow_failed.load() ||
           !g_writer.open.load(std::memory_order_acquire);
}

// A grow thread: grows the next wanted segment, side by side with the other grow threads.
void grow_ahead_main() {
    g_os.set_thread_name("ggml-trace grow");
    // Idle priority (platform.h): at the default priority two grow threads stretched 1,000-event
    // bursts to 1.7 ms, and a nice one delayed the program's wake-ups.
    g_os.set_thread_idle();
    for (;;) {
        uint64_t n;
        {
            std::unique_lock<std::mutex> lock(g_writer.grow_mutex);
            g_writer.grow_cv.wait(lock, [] {
                return g_writer.ahead_target >= g_writer.claimed_segments || !g_writer.open.load() ||
                       g_writer.grow_failed.load();
            });
            n = claim_segment();
        }
        if (n == NO_SEGMENT) {
            return;
        }
        grow_claimed(n);
    }
}

// A writer's segment. The grow threads map it: a writer that grew the file itself would stop its
// writing from overlapping the growth just when the growth falls behind.
bool wait_for_segment(uint64_t seg) {
    if (seg < g_writer.mapped_segments.load(std::memory_order_acquire)) {
        return true;
    }
    if (seg >= MAX_SEGMENTS || g_os.exiting()) {  // exiting: no grow thread is left to wait for
        return false;
    }
    std::unique_lock<std::mutex> lock(g_writer.grow_mutex);
    if (g_writer.ahead_target < seg) {
        g_writer.ahead_target = seg;
        g_writer.grow_cv.notify_all();
    }
    g_writer.grown_cv.wait(lock, [&] { return segment_settled(seg); });
    return seg < g_writer.mapped_segments.load(std::memory_order_acquire);
}

// Entering a segment, ask the grow threads for the ones up to SEGMENTS_AHEAD beyond it: they then
// grow the file without pause while writers run at full speed, and a burst of up to that many
// segments (8 MiB, ~40,000 events) waits for no growth.
void request_ahead(uint64_t chunk_index) {
    if (chunk_index % CHUNKS_PER_SEGMENT != 0) {
        return;
    }
    uint64_t wanted = chunk_index / CHUNKS_PER_SEGMENT + SEGMENTS_AHEAD;
    if (wanted < g_writer.mapped_segments.load(std::memory_order_acquire)) {
        return;
    }
    {
        std::lock_guard<std::mutex> lock(g_writer.grow_mutex);
        g_writer.ahead_target = std::max(g_writer.ahead_target, wanted);
    }
    g_writer.grow_cv.notify_all();
}

bool writing() { return g_writer.open.load(std::memory_order_acquire) && g_writer.pid == g_os.process_id(); }

// A new position at the end of the file (grown and mapped as needed), or NO_CHUNK.
uint64_t new_position() {
    uint64_t idx = g_writer.next_chunk.fetch_add(1, std::memory_order_relaxed);
    if (idx >= CLOSED || !wait_for_segment(idx / CHUNKS_PER_SEGMENT)) {
        return NO_CHUNK;
    }
    request_ahead(idx);
    return idx;
}

uint8_t * chunk_at(uint64_t pos) {
    uint8_t * seg = g_writer.segments[pos / CHUNKS_PER_SEGMENT].load(std::memory_order_acquire);
    return seg + (pos % CHUNKS_PER_SEGMENT) * CHUNK_SIZE;
}

// Publishes a chunk header: its fields first, the magic last (a reader skips a chunk without it).
uint8_t * start_chunk(uint64_t pos, uint32_t thread, uint64_t index, uint64_t t_claim, uint32_t ordinal,
                      uint8_t region) {
    uint8_t * chunk = chunk_at(pos);
    ChunkHeader * h = (ChunkHeader *) chunk;
    h->thread = thread;
    h->chunk_index = index;
    h->t_claim = t_claim;
    h->ordinal = ordinal;
    h->region = region;
    __atomic_store_n(&h->magic, CHUNK_MAGIC, __ATOMIC_RELEASE);
    return chunk;
}

bool new_chunk(ThreadState & ts) {
    if (!writing()) {
        return false;
    }
    uint64_t idx = new_position();
    if (idx == NO_CHUNK) {
        ts.cur = ts.end = nullptr;
        return false;
    }
    // (claim time and ordinal let a copy taken while the file grows leave out what came after it)
    uint8_t * chunk = start_chunk(idx, ts.thread, idx, now_ticks(), ts.ring_ordinal++, CHUNK_RING);
    ts.cur = chunk + RECORD_SIZE;
    ts.end = chunk + CHUNK_SIZE;
    return true;
}

void ring_release_locked(uint64_t pos, uint64_t t_ns) {
    Ring & ring = g_writer.ring;
    uint64_t at = (ring.fifo_head + ring.fifo_len) % ring.fifo_cap;
    ring.fifo_pos[at] = pos;
    ring.fifo_t[at] = t_ns;
    ring.fifo_len++;
}

// Ring files: the next ring chunk of a thread. The oldest released chunk is recycled when the ring
// is full or that chunk holds nothing newer than the ring keeps; otherwise the ring grows.
bool new_ring_chunk(ThreadState & ts) {
    if (!writing()) {
        return false;
    }
    (void) &t_ring_release;  // constructs it, so that it runs when the thread ends
    Ring & ring = g_writer.ring;
    uint64_t now = now_ticks();
    uint64_t now_ns = monotonic_ns();
    uint64_t pos = NO_CHUNK;
    {
        std::lock_guard<std::mutex> lock(ring.mutex);
        if (ts.ring_pos != NO_CHUNK) {
            ring_release_locked(ts.ring_pos, now_ns);
            ts.ring_pos = NO_CHUNK;
        }
        // While a snapshot is being copied, recycle nothing (up to twice the ring's size): what it
        // reads last would otherwise be gone before it gets there.
        bool hold = g_writer.header &&
                    __atomic_load_n(&g_writer.header->hold_until_ns, __ATOMIC_RELAXED) > now_ns;
        bool full = ring.n_chunks >= (hold ? 2 * ring.max_chunks : ring.max_chunks);
        if (ring.fifo_len > 0 && ring.n_chunks >= RING_MIN_CHUNKS &&
            (full || (!hold && now_ns - ring.fifo_t[ring.fifo_head] >= ring.keep_ns))) {
            pos = ring.fifo_pos[ring.fifo_head];
            ring.fifo_head = (ring.fifo_head + 1) % ring.fifo_cap;
            ring.fifo_len--;
        } else if (ring.n_chunks < ring.fifo_cap) {  // grow (past the limit only while every chunk is owned)
            ring.n_chunks++;
        } else {
            ts.cur = ts.end = nullptr;
            return false;
        }
    }
    uint8_t * chunk;
    if (pos == NO_CHUNK) {
        pos = new_position();  // fresh space reads as zeros
        if (pos == NO_CHUNK) {
            ts.cur = ts.end = nullptr;
            return false;
        }
        chunk = chunk_at(pos);
    } else {
        // Unpublish first: a reader (or a crash) in between sees an empty or unused chunk, never
        // a mix of two owners' records, nor records in a chunk without a header (damage to a reader).
        chunk = chunk_at(pos);
        __atomic_store_n(chunk + RECORD_SIZE, (uint8_t) 0, __ATOMIC_RELEASE);
        __atomic_store_n(&((ChunkHeader *) chunk)->magic, 0u, __ATOMIC_RELEASE);
        memset(chunk + RECORD_SIZE, 0, CHUNK_SIZE - RECORD_SIZE);
        __atomic_thread_fence(__ATOMIC_RELEASE);
    }
    uint64_t seq = ring.next_seq.fetch_add(1, std::memory_order_relaxed);
    start_chunk(pos, ts.thread, seq, now, ts.ring_ordinal++, CHUNK_RING);
    ts.ring_pos = pos;
    ts.cur = chunk + RECORD_SIZE;
    ts.end = chunk + CHUNK_SIZE;
    return true;
}

RingRelease::~RingRelease() {
    ThreadState & ts = t_state;
    if (ts.ring_pos == NO_CHUNK || !writing()) {
        return;
    }
    std::lock_guard<std::mutex> lock(g_writer.ring.mutex);
    ring_release_locked(ts.ring_pos, monotonic_ns());
    ts.ring_pos = NO_CHUNK;
    ts.cur = ts.end = nullptr;
}

// Ring files: each string is written once, to the kept region, by the first thread that claims its
// id, whatever the threads' caches evict later. A full table writes it again each time (readers
// keep the first copy of a string).
enum class KeptString { CLAIMED, KNOWN, TABLE_FULL };

KeptString claim_kept_string(uint64_t id) {
    std::atomic<uint64_t> * ids = g_writer.ring.kept_ids;
    for (size_t i = 0; i < 64; i++) {
        std::atomic<uint64_t> & slot = ids[(id + i) % KEPT_STRING_SLOTS];
        uint64_t seen = slot.load(std::memory_order_relaxed);
        if (seen == 0 && slot.compare_exchange_strong(seen, id, std::memory_order_relaxed)) {
            return KeptString::CLAIMED;
        }
        if (seen == id) {  // (the compare-exchange loads `seen` when another thread won the slot)
            return KeptString::KNOWN;
        }
    }
    return KeptString::TABLE_FULL;
}

void write_string_pieces(uint64_t id, const char * s, size_t len) {
    size_t n_pieces = len == 0 ? 1 : (len + STRING_PIECE - 1) / STRING_PIECE;
    for (size_t p = 0; p < n_pieces; p++) {
        size_t off = p * STRING_PIECE;
        size_t n = len - off < STRING_PIECE ? len - off : STRING_PIECE;
        bool written = emit_kept_record<StringRec>(REC_STRING, [&](StringRec & r) {
            r.len = (uint8_t) n;
            r.piece = (uint16_t) p;
            r.total_len = (uint32_t) len;
            r.id = id;
            memcpy(r.text, s + off, n);
        });
        if (!written) {
            return;
        }
    }
}

void after_fork_in_child() {
    // The mapping is shared with the parent's file: the child must not write into it.
    g_writer.open.store(false, std::memory_order_release);
    t_state.cur = t_state.end = nullptr;
    t_state.kept_cur = t_state.kept_end = nullptr;
}

// A slot in the calling thread's chunk, or nullptr if tracing stopped. It reads as zeros: new
// chunks are fresh file space (grown with zeros), recycled ring chunks are cleared first.
uint8_t * reserve_record() {
    ThreadState & ts = t_state;
    if (ts.thread == NONE32) {
        thread_index();  // a new thread: claim an index before its first chunk
    }
    if (ts.cur == ts.end && !(g_writer.ring.on ? new_ring_chunk(ts) : new_chunk(ts))) {
        return nullptr;
    }
    uint8_t * r = ts.cur;
    ts.cur += RECORD_SIZE;
    return r;
}

// Ring files: a (zeroed) slot in the calling thread's kept chunk (a ring slot once the kept region is full).
uint8_t * reserve_kept_record() {
    ThreadState & ts = t_state;
    if (!g_writer.ring.on) {
        return reserve_record();
    }
    if (ts.thread == NONE32) {
        thread_index();
    }
    if (ts.kept_cur == ts.kept_end) {
        if (!writing() ||
            g_writer.ring.kept_chunks.fetch_add(1, std::memory_order_relaxed) >= KEPT_MAX_CHUNKS) {
            return reserve_record();
        }
        uint64_t pos = new_position();
        if (pos == NO_CHUNK) {
            return nullptr;
        }
        uint64_t seq = g_writer.ring.next_seq.fetch_add(1, std::memory_order_relaxed);
        uint8_t * chunk = start_chunk(pos, ts.thread, seq, now_ticks(), 0, CHUNK_KEPT);
        ts.kept_cur = chunk + RECORD_SIZE;
        ts.kept_end = chunk + CHUNK_SIZE;
    }
    uint8_t * r = ts.kept_cur;
    ts.kept_cur += RECORD_SIZE;
    return r;
}

}  // namespace

uint8_t * detail::reserve_slot(bool kept) { return kept ? reserve_kept_record() : reserve_record(); }

bool writer_open(const char * path, const char * hooks_build, uint32_t api_version, const RingConfig & ring) {
    if (g_writer.open.load()) {
        return true;
    }
    int err = 0;
    intptr_t fd = g_os.file_create(path, false, &err);
    if (fd < 0) {
        fprintf(stderr, "ggml-trace: cannot create trace file %s: %s\n", path, strerror(err));
        return false;
    }
    FileHeader h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, FILE_MAGIC, sizeof(h.magic));
    h.version = FORMAT_VERSION;
    h.header_size = HEADER_SIZE;
    h.record_size = RECORD_SIZE;
    h.chunk_size = CHUNK_SIZE;
    // Calibrate ticks against CLOCK_MONOTONIC over 2 ms; CLOCK records refine it during the run.
    timespec real;
    ClockPair p0 = clock_pair();
    clock_gettime(CLOCK_REALTIME, &real);
    ClockPair p1;
    do {
        p1 = clock_pair();
    } while (p1.ns - p0.ns < 2000000);
    h.t0_monotonic_ns = p0.ns;
    h.t0_realtime_ns = (uint64_t) real.tv_sec * 1000000000ull + (uint64_t) real.tv_nsec;
    h.t0_ticks = p0.ticks;
    h.ns_per_tick = p1.ticks > p0.ticks ? (double) (p1.ns - p0.ns) / (double) (p1.ticks - p0.ticks) : 1.0;
    g_writer.sync_interval_ticks = (uint64_t) (50e6 / h.ns_per_tick);
    g_writer.ns_per_tick = h.ns_per_tick;
    h.pid = g_os.process_id();
    h.backend_api_version = api_version;
    snprintf(h.hooks_build, sizeof(h.hooks_build), "%s", hooks_build);
    if (ring.keep_ns > 0 || ring.max_bytes > 0) {
        uint64_t max_bytes = ring.max_bytes > 0 ? ring.max_bytes : RING_DEFAULT_MAX_BYTES;
        Ring & r = g_writer.ring;
        r.on = true;
        // keep_ns 0 (a size alone): the size rule alone recycles
        // A little more than asked (1% + 1 ms): a reader turns ticks into ns through a fitted
        // clock, good to a fraction of a millisecond, and should still find at least keep_ns.
        r.keep_ns = ring.keep_ns > 0 ? ring.keep_ns + ring.keep_ns / 100 + 1000000 : ~0ull;
        r.max_chunks = std::max(RING_MIN_CHUNKS, max_bytes / CHUNK_SIZE);
        // room for a snapshot's hold (twice the ring), and for a chunk owned by each of up to 1024
        // threads beyond that
        r.fifo_cap = 2 * r.max_chunks + 1024;
        r.fifo_pos = new uint64_t[r.fifo_cap];
        r.fifo_t = new uint64_t[r.fifo_cap];
        h.file_flags = FILE_RING;
        h.ring_keep_ns = ring.keep_ns;
        h.ring_max_bytes = r.max_chunks * CHUNK_SIZE;
    }
    char page[HEADER_SIZE];
    memset(page, 0, sizeof(page));
    memcpy(page, &h, sizeof(h));
    if ((err = g_os.file_write(fd, page, sizeof(page), 0))) {
        fprintf(stderr, "ggml-trace: cannot write trace header to %s: %s\n", path, strerror(err));
        g_os.file_close(fd);
        return false;
    }
    g_writer.fd = fd;
    if (g_writer.ring.on) {
        g_writer.header = (const FileHeader *) g_os.file_map_read(fd, HEADER_SIZE);
    }
    snprintf(g_writer.path, sizeof(g_writer.path), "%s", path);
    g_writer.pid = g_os.process_id();
    static std::once_flag atfork_once;
    std::call_once(atfork_once, [] { g_os.on_fork_child(after_fork_in_child); });
    g_writer.open.store(true, std::memory_order_release);
    for (int i = 0; i < GROW_THREADS; i++) {
        std::thread(grow_ahead_main).detach();  // they end when the writer closes
    }
    maybe_clock_sync();
    return true;
}

ClockPair clock_pair() {
    ClockPair best{};
    uint64_t best_span = UINT64_MAX;
    for (int i = 0; i < 4; i++) {
        uint64_t before = now_ticks();
        uint64_t ns = monotonic_ns();
        uint64_t after = now_ticks();
        if (after - before < best_span) {
            best_span = after - before;
            best = ClockPair{before + (after - before) / 2, ns};
        }
    }
    return best;
}

void maybe_clock_sync(uint64_t now) {
    uint64_t last = g_writer.last_sync_ticks.load(std::memory_order_relaxed);
    if (now - last < g_writer.sync_interval_ticks ||
        !g_writer.last_sync_ticks.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
        return;
    }
    ClockPair p = clock_pair();
    emit_record<ClockRec>(REC_CLOCK, [&](ClockRec & r) {
        r.thread = thread_index();
        r.monotonic_ns = p.ns;
        r.ticks = p.ticks;
    });
}

void writer_close() {
    bool exiting = g_os.exiting();
    if (g_writer.pid == g_os.process_id() && g_writer.open.load() && !exiting) {
        g_writer.last_sync_ticks.store(0);
        maybe_clock_sync();  // a last calibration point at the end of the run
    }
    if (!g_writer.open.exchange(false) || g_writer.pid != g_os.process_id()) {
        return;
    }
    // Poison the chunk counter: a thread still running gets no new chunk, and every chunk handed
    // out so far lies below `used`, so trimming the file cannot pull pages from under a writer.
    uint64_t used = g_writer.next_chunk.fetch_add(CLOSED);
    // Growths under way finish first (they must not extend the file after the trim); later ones
    // see the writer closed. Exiting (Windows), the grow threads are gone, maybe holding the lock:
    // a growth they left unfinished never maps its segment, which is not counted.
    std::unique_lock<std::mutex> grow_lock(g_writer.grow_mutex, std::defer_lock);
    if (!exiting) {
        grow_lock.lock();
        g_writer.grow_cv.notify_all();
        g_writer.grown_cv.notify_all();
        g_writer.grown_cv.wait(grow_lock, [] { return g_writer.growing == 0; });
    }
    uint64_t mapped = g_writer.mapped_segments.load() * CHUNKS_PER_SEGMENT;
    if (used > mapped) {
        used = mapped;
    }
    int err = g_os.file_trim(g_writer.fd, HEADER_SIZE + used * CHUNK_SIZE);
    if (err && err != ENOTSUP) {
        fprintf(stderr, "ggml-trace: could not trim %s: %s\n", g_writer.path, strerror(err));
    }
    // A ring has no unused chunks to tell that it was closed, nor a file that could not shrink
    // while mapped (Windows): the header says so.
    if (g_writer.ring.on || err == ENOTSUP) {
        uint32_t flags = (g_writer.ring.on ? FILE_RING : 0) | FILE_CLOSED;
        if ((err = g_os.file_write(g_writer.fd, &flags, sizeof(flags), offsetof(FileHeader, file_flags)))) {
            fprintf(stderr, "ggml-trace: could not mark %s closed: %s\n", g_writer.path, strerror(err));
        }
    }
}

bool writer_reserve(uint64_t bytes) {
    uint64_t segs = (bytes + SEGMENT_BYTES - 1) / SEGMENT_BYTES;
    return segs == 0 || wait_for_segment(segs - 1);
}

double writer_ns_per_tick() { return g_writer.ns_per_tick; }

bool writer_is_open() { return g_writer.open.load(std::memory_order_acquire); }

const char * writer_path() { return g_writer.path; }

void writer_flush() {
    uint64_t n = g_writer.mapped_segments.load(std::memory_order_acquire);
    for (uint64_t i = 0; i < n; i++) {
        g_os.file_flush(g_writer.segments[i].load(), SEGMENT_BYTES);
    }
}

uint32_t thread_index() {
    ThreadState & ts = t_state;
    if (ts.thread == NONE32) {
        ts.thread = g_writer.next_thread.fetch_add(1);
        char name[64] = {0};
        g_os.thread_name(name, sizeof(name));
        uint64_t name_id = intern(name);
        emit_kept_record<ThreadRec>(REC_THREAD, [&](ThreadRec & r) {
            r.thread = ts.thread;
            r.t = now_ticks();
            r.os_tid = g_os.thread_id();
            r.name = name_id;
        });
    }
    return ts.thread;
}

uint64_t next_call_id() {
    uint32_t thread = thread_index();
    return ((uint64_t) thread << 40) | ++t_state.calls;
}

void write_device_exec(uint8_t source, uint8_t flags, uint32_t backend, uint32_t graph, int32_t split, uint64_t obj,
                       uint64_t t_begin, uint64_t t_end, uint64_t arg) {
    emit_record<CallRec>(REC_CALL, [&](CallRec & r) {
        r.kind = K_DEVICE_EXEC;
        r.sched = 0xff;
        r.flags = (uint8_t) ((source << DEVICE_SOURCE_SHIFT) | flags);
        r.thread = thread_index();
        r.t_begin = t_begin;
        r.t_end = t_end;
        r.call_id = next_call_id();
        r.backend = backend;
        r.backend2 = NONE32;
        r.graph = graph;
        r.split = split;
        r.obj = obj;
        r.arg = arg;
    });
}

uint64_t string_id(const char * s, size_t len) {
    if (!s || len == 0) {
        return 0;
    }
    // Word-at-a-time multiply-xorshift hash: names are short and hashed on the hot path. The id is
    // opaque to readers (they map ids through STRING records), so only collisions matter.
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t) len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    if (i < len) {
        uint64_t w = 0;
        memcpy(&w, s + i, len - i);
        h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
        h ^= h >> 29;
    }
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h ? h : 1;
}

uint64_t intern(const char * s, size_t len) {
    uint64_t id = string_id(s, len);
    if (id == 0) {
        return 0;
    }
    uint64_t & slot = t_state.strings[id % STRING_CACHE];
    if (slot != id) {
        if (!g_writer.ring.on || claim_kept_string(id) != KeptString::KNOWN) {
            write_string_pieces(id, s, len);
        }
        slot = id;
    }
    return id;
}

uint64_t intern(const char * s) { return s ? intern(s, strlen(s)) : 0; }

void write_meta(const char * key, const char * value, size_t value_len) {
    uint64_t k = intern(key);
    uint64_t v = intern(value, value_len);
    emit_kept_record<MetaRec>(REC_META, [&](MetaRec & r) {
        r.thread = thread_index();
        r.t = now_ticks();
        r.key = k;
        r.value = v;
    });
}

}  // namespace ggml_trace
