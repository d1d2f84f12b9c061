// The hooks' operating system on Linux (platform.h).
#include "platform.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <linux/magic.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older C libraries lack the name
#endif

namespace ggml_trace {

namespace {

bool g_on_tmpfs = false;  // how a new segment's pages are best mapped writable (map_writable)

intptr_t file_create(const char * path, bool exclusive, int * err) {
    int fd = exclusive ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)
                       : open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    *err = fd < 0 ? errno : 0;
    struct statfs fs;
    if (fd >= 0 && !exclusive) {
        g_on_tmpfs = fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
    }
    return fd;
}

int file_write(intptr_t fd, const void * buf, size_t len, uint64_t off) {
    const uint8_t * p = (const uint8_t *) buf;
    while (len > 0) {
        ssize_t n = pwrite((int) fd, p, len, (off_t) off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? errno : ENOSPC;
        p += n;
        off += (uint64_t) n;
        len -= (size_t) n;
    }
    return 0;
}

int file_set_size(intptr_t fd, uint64_t size) { return ftruncate((int) fd, (off_t) size) == 0 ? 0 : errno; }

// Zeros written, not left sparse: a sparse file would SIGBUS the writer when the disk fills up.
// Written rather than fallocated: the kernel then provisions the page cache in bulk, ~1.4x faster
// than page by page through the mapping's faults.
int file_zero(intptr_t fd, uint64_t off, uint64_t len) {
    static uint8_t zeros[64 << 10];  // never written; not const, so it is .bss, not 64 KiB of the library
    while (len > 0) {
        size_t n = (size_t) std::min<uint64_t>(len, sizeof(zeros));
        int err = file_write(fd, zeros, n, off);
        if (err) return err;
        off += n;
        len -= n;
    }
    return 0;
}

// Maps a segment (its pages already in the page cache) with every page writable before any
// writer reaches it: the faults are taken here, not on the writers' hot path.
//  - tmpfs tracks no dirty pages: MAP_POPULATE maps its pages writable at once.
//  - Elsewhere a page is mapped read-only until its first write, for dirty tracking, and
//    MAP_POPULATE would leave a write fault a page. MADV_POPULATE_WRITE (Linux 5.14) takes them
//    in one call instead, a folio at a time where the file system has large folios (ext4 since
//    6.16): 4.1-4.3 GB/s of new file on this VM's ext4, against 1.8 with MAP_POPULATE and a
//    fault a page (on tmpfs, 2.2-2.4 GB/s with MAP_POPULATE, 1.9 with POPULATE_WRITE).
uint8_t * file_map(intptr_t fd, uint64_t off, uint64_t len) {
    int flags = MAP_SHARED | (g_on_tmpfs ? MAP_POPULATE : 0);
    void * p = mmap(nullptr, len, PROT_READ | PROT_WRITE, flags, (int) fd, (off_t) off);
    if (p == MAP_FAILED) {
        return nullptr;
    }
    uint8_t * seg = (uint8_t *) p;
    if (g_on_tmpfs || madvise(seg, len, MADV_POPULATE_WRITE) == 0) {
        return seg;
    }
    if (errno != EINVAL) {
        int err = errno;  // a page that cannot be written (no space, say): fail here, not in a writer
        munmap(seg, len);
        errno = err;
        return nullptr;
    }
    for (uint64_t i = 0; i < len; i += 4096) {  // kernels before 5.14: a fault a page
        __atomic_store_n(seg + i + 4095, (uint8_t) 0, __ATOMIC_RELAXED);
    }
    return seg;
}

const void * file_map_read(intptr_t fd, uint64_t len) {
    void * p = mmap(nullptr, len, PROT_READ, MAP_SHARED, (int) fd, 0);
    return p == MAP_FAILED ? nullptr : p;
}

void file_flush(void * p, uint64_t len) { msync(p, len, MS_ASYNC); }

int file_trim(intptr_t fd, uint64_t size) { return file_set_size(fd, size); }

void file_close(intptr_t fd) { close((int) fd); }

uint32_t process_id() { return (uint32_t) getpid(); }

uint64_t thread_id() { return (uint64_t) syscall(SYS_gettid); }

void thread_name(char * out, size_t len) {
    out[0] = 0;
    pthread_getname_np(pthread_self(), out, len);
}

void set_thread_name(const char * name) { pthread_setname_np(pthread_self(), name); }

// SCHED_IDLE: growth runs on CPU time the program leaves idle, and a writer that has caught up
// leaves its own while it waits. Not nice 19: the scheduler counts a CPU running only SCHED_IDLE
// threads as idle when it places a thread that wakes up, not one running a nice one, so the
// program's threads woke up behind other busy threads: on 2 cores a virtual device's worker
// started a queued copy 2.3 ms late in 14 of 60 runs (tests/test_force.py).
void set_thread_idle() {
    sched_param idle{};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
}

void on_fork_child(void (*fn)()) { pthread_atfork(nullptr, nullptr, fn); }

bool exiting() { return false; }  // exit handlers run while the other threads still do

// Where the program's libggml-base lives, for processes that loaded it with RTLD_LOCAL (Python's
// ctypes, for one), where RTLD_DEFAULT cannot see it.
void * g_ggml_base = nullptr;

int find_ggml_base(struct dl_phdr_info * info, size_t, void *) {
    if (info->dlpi_name && strstr(info->dlpi_name, "libggml-base")) {
        g_ggml_base = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
        return g_ggml_base != nullptr;
    }
    return 0;
}

void * symbol(const char * name, bool next) {
    void * p = dlsym(next ? RTLD_NEXT : RTLD_DEFAULT, name);
    if (!p) {
        if (!g_ggml_base) {
            dl_iterate_phdr(find_ggml_base, nullptr);
        }
        if (g_ggml_base) {
            p = dlsym(g_ggml_base, name);
        }
    }
    return p;
}

struct Search {
    const char * library;
    const char * name;
    void * found;
};

int search_library(struct dl_phdr_info * info, size_t, void * arg) {
    Search * s = (Search *) arg;
    if (info->dlpi_name && strstr(info->dlpi_name, s->library)) {
        if (void * h = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD)) {
            s->found = dlsym(h, s->name);
            dlclose(h);  // the program keeps it loaded: dlopen only counted another reference
            return s->found != nullptr;
        }
    }
    return 0;
}

void * loaded_symbol(const char * library, const char * name) {
    if (!library) {
        return dlsym(RTLD_DEFAULT, name);
    }
    Search s{library, name, nullptr};
    dl_iterate_phdr(search_library, &s);
    return s.found;
}

size_t read_file(const char * path, char * out, size_t cap) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        return 0;
    }
    ssize_t n = read(fd, out, cap);
    close(fd);
    return n > 0 ? (size_t) n : 0;
}

size_t command_line(char * out, size_t cap) { return read_file("/proc/self/cmdline", out, cap); }

size_t executable(char * out, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    return n > 0 ? (size_t) n : 0;
}

size_t host_name(char * out, size_t cap) { return gethostname(out, cap) == 0 ? strnlen(out, cap) : 0; }

char ** environment() { return environ; }

void * aligned_alloc_(size_t alignment, size_t size) {
    void * p = nullptr;
    return posix_memalign(&p, alignment, size) == 0 ? p : nullptr;
}

}  // namespace

const Platform g_os = {
    "linux",
    file_create, file_write, file_set_size, file_zero, file_map, file_map_read, file_flush, file_trim, file_close,
    process_id, thread_id, thread_name, set_thread_name, set_thread_idle, on_fork_child, exiting,
    symbol, loaded_symbol,
    command_line, executable, host_name, environment, aligned_alloc_, free,
};

}  // namespace ggml_trace
