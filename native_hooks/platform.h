// What the hooks ask of the operating system, as one struct of function pointers per system:
// platform_posix.cpp (Linux) and platform_windows.cpp (Windows), the build compiles one. Cold
// paths only (a file segment, a thread's first record, start-up): nothing here is per event.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace ggml_trace {

struct Platform {
    const char * name;  // "linux", "windows": recorded in every trace (META platform)

    // The trace file, as a handle (a descriptor, a HANDLE); -1 when none. Errors are errno values.
    intptr_t (*file_create)(const char * path, bool exclusive, int * err);  // truncated; exclusive: fails if it exists
    int (*file_write)(intptr_t file, const void * buf, size_t len, uint64_t off);
    int (*file_set_size)(intptr_t file, uint64_t size);  // grows with zeros (no data written)
    int (*file_zero)(intptr_t file, uint64_t off, uint64_t len);  // zeros written: the disk space taken now
    // [off, off + len) mapped writable with its pages in, or null (errno set): a writer then takes
    // no fault on its hot path
    uint8_t * (*file_map)(intptr_t file, uint64_t off, uint64_t len);
    const void * (*file_map_read)(intptr_t file, uint64_t len);  // the file's first bytes, read-only
    void (*file_flush)(void * mapped, uint64_t len);             // written back soon, not waited for
    // Shrinks the file to `size` (unused segments after the run); ENOTSUP where a file cannot
    // shrink while mapped (Windows: the header's FILE_CLOSED then says the writer closed it).
    int (*file_trim)(intptr_t file, uint64_t size);
    void (*file_close)(intptr_t file);

    // The process and its threads.
    uint32_t (*process_id)();
    uint64_t (*thread_id)();
    void (*thread_name)(char * out, size_t len);  // "" when it has none
    void (*set_thread_name)(const char * name);
    void (*set_thread_idle)();  // runs on CPU time the program leaves idle
    void (*on_fork_child)(void (*fn)());  // called in a forked child (no fork on Windows)
    // The process is ending and its other threads are gone (Windows ends them before its DLLs'
    // exit handlers run; a lock one of them held stays held): nothing may wait for them now.
    bool (*exiting)();

    // A symbol of the program's ggml (or llama.cpp); `next`: not the hooks' own, the real entry
    // point behind an interposed one.
    void * (*symbol)(const char * name, bool next);
    // `name` in a library the program has loaded whose file name holds `library` (null: any
    // library whose symbols are global), the first that has it; null when none does
    void * (*loaded_symbol)(const char * library, const char * name);

    // What a trace records of the program.
    size_t (*command_line)(char * out, size_t cap);  // its arguments, each NUL-terminated
    size_t (*executable)(char * out, size_t cap);
    size_t (*host_name)(char * out, size_t cap);
    char ** (*environment)();
    void * (*aligned_alloc)(size_t alignment, size_t size);  // freed by aligned_free
    void (*aligned_free)(void * p);
};

extern const Platform g_os;

}  // namespace ggml_trace
