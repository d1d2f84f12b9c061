// The hooks' operating system on Windows (platform.h): the trace file through file mappings,
// threads through the Win32 API, ggml's symbols through the loaded modules' exports.
#include "platform.h"

#include <windows.h>
#include <psapi.h>
#include <shellapi.h>

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

namespace ggml_trace {

namespace {

int errno_of(DWORD e) {
    switch (e) {
        case ERROR_FILE_EXISTS: case ERROR_ALREADY_EXISTS: return EEXIST;
        case ERROR_DISK_FULL: case ERROR_HANDLE_DISK_FULL: return ENOSPC;
        case ERROR_ACCESS_DENIED: case ERROR_SHARING_VIOLATION: return EACCES;
        case ERROR_PATH_NOT_FOUND: case ERROR_FILE_NOT_FOUND: return ENOENT;
        case ERROR_NOT_ENOUGH_MEMORY: case ERROR_COMMITMENT_LIMIT: return ENOMEM;
        default: return EIO;
    }
}

HANDLE handle(intptr_t f) { return (HANDLE) f; }

// Shared for reading and deleting too: `ggml-trace` reads the live file, and a reader on Windows
// needs the writer to allow it.
intptr_t file_create(const char * path, bool exclusive, int * err) {
    HANDLE h = CreateFileA(path, GENERIC_READ | GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                           nullptr, exclusive ? CREATE_NEW : CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, nullptr);
    *err = h == INVALID_HANDLE_VALUE ? errno_of(GetLastError()) : 0;
    return h == INVALID_HANDLE_VALUE ? -1 : (intptr_t) h;
}

int file_write(intptr_t f, const void * buf, size_t len, uint64_t off) {
    const uint8_t * p = (const uint8_t *) buf;
    while (len > 0) {
        OVERLAPPED o{};
        o.Offset = (DWORD) off;
        o.OffsetHigh = (DWORD) (off >> 32);
        DWORD n = 0;
        if (!WriteFile(handle(f), p, (DWORD) std::min<size_t>(len, 1u << 30), &n, &o)) return errno_of(GetLastError());
        if (n == 0) return ENOSPC;
        p += n;
        off += n;
        len -= n;
    }
    return 0;
}

int file_set_size(intptr_t f, uint64_t size) {
    FILE_END_OF_FILE_INFO eof{};
    eof.EndOfFile.QuadPart = (LONGLONG) size;
    return SetFileInformationByHandle(handle(f), FileEndOfFileInfo, &eof, sizeof(eof)) ? 0 : errno_of(GetLastError());
}

int file_zero(intptr_t f, uint64_t off, uint64_t len) {
    static uint8_t zeros[64 << 10];
    while (len > 0) {
        size_t n = (size_t) std::min<uint64_t>(len, sizeof(zeros));
        if (int err = file_write(f, zeros, n, off)) return err;
        off += n;
        len -= n;
    }
    return 0;
}

// A view starts on the allocation granularity (64 KiB): the segment's view starts below it and the
// segment is returned inside. The mapping object goes at once (its views keep the section alive).
uint8_t * map(intptr_t f, uint64_t off, uint64_t len, bool writable) {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    uint64_t base = off - off % si.dwAllocationGranularity;
    uint64_t end = off + len;
    HANDLE m = CreateFileMappingA(handle(f), nullptr, writable ? PAGE_READWRITE : PAGE_READONLY, (DWORD) (end >> 32),
                                  (DWORD) end, nullptr);
    if (!m) {
        errno = errno_of(GetLastError());
        return nullptr;
    }
    void * v = MapViewOfFile(m, writable ? FILE_MAP_WRITE : FILE_MAP_READ, (DWORD) (base >> 32), (DWORD) base,
                             (SIZE_T) (end - base));
    DWORD e = GetLastError();
    CloseHandle(m);
    if (!v) {
        errno = errno_of(e);
        return nullptr;
    }
    return (uint8_t *) v + (off - base);
}

// Every page touched once here: the faults are taken before a writer reaches them.
uint8_t * file_map(intptr_t f, uint64_t off, uint64_t len) {
    uint8_t * p = map(f, off, len, true);
    for (uint64_t i = 0; p && i < len; i += 4096) {
        ((volatile uint8_t *) p)[i] = 0;  // a new segment is zeros: writing one changes nothing
    }
    return p;
}

const void * file_map_read(intptr_t f, uint64_t len) { return map(f, 0, len, false); }

void file_flush(void * p, uint64_t len) { FlushViewOfFile(p, (SIZE_T) len); }

int file_trim(intptr_t, uint64_t) { return ENOTSUP; }  // a file with mapped views cannot shrink

void file_close(intptr_t f) { CloseHandle(handle(f)); }

uint32_t process_id() { return (uint32_t) GetCurrentProcessId(); }

uint64_t thread_id() { return (uint64_t) GetCurrentThreadId(); }

// Thread descriptions (Windows 10 1607 on, Wine 5 on): looked up, so that older systems run too.
template <typename F> F kernel_fn(const char * name) {
    HMODULE k = GetModuleHandleA("kernel32.dll");
    F fn = k ? (F) (void *) GetProcAddress(k, name) : nullptr;
    if (!fn && (k = GetModuleHandleA("kernelbase.dll"))) fn = (F) (void *) GetProcAddress(k, name);
    return fn;
}

void thread_name(char * out, size_t len) {
    out[0] = 0;
    auto get = kernel_fn<HRESULT (WINAPI *)(HANDLE, PWSTR *)>("GetThreadDescription");
    PWSTR w = nullptr;
    if (get && SUCCEEDED(get(GetCurrentThread(), &w)) && w) {
        WideCharToMultiByte(CP_UTF8, 0, w, -1, out, (int) len, nullptr, nullptr);
        out[len - 1] = 0;
        LocalFree(w);
    }
}

void set_thread_name(const char * name) {
    auto set = kernel_fn<HRESULT (WINAPI *)(HANDLE, PCWSTR)>("SetThreadDescription");
    wchar_t w[64];
    if (set && MultiByteToWideChar(CP_UTF8, 0, name, -1, w, 64) > 0) {
        set(GetCurrentThread(), w);
    }
}

void set_thread_idle() { SetThreadPriority(GetCurrentThread(), THREAD_PRIORITY_IDLE); }

void on_fork_child(void (*)()) {}  // no fork

bool exiting() {
    static auto in_progress = (BOOLEAN (NTAPI *)()) (void *) GetProcAddress(GetModuleHandleA("ntdll.dll"),
                                                                           "RtlDllShutdownInProgress");
    return in_progress && in_progress();
}

HMODULE self_module() {
    HMODULE m = nullptr;
    GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                       (LPCSTR) (void *) &self_module, &m);
    return m;
}

// The process's modules in load order (the program first).
int modules(HMODULE * out, int cap) {
    DWORD bytes = 0;
    if (!EnumProcessModules(GetCurrentProcess(), out, (DWORD) (cap * sizeof(HMODULE)), &bytes)) return 0;
    return std::min<int>(cap, (int) (bytes / sizeof(HMODULE)));
}

bool name_holds(HMODULE m, const char * part) {
    char path[MAX_PATH];
    DWORD n = GetModuleFileNameA(m, path, sizeof(path));
    if (!n) return false;
    const char * file = path;
    for (const char * c = path; *c; c++) if (*c == '\\' || *c == '/') file = c + 1;
    return strstr(file, part) != nullptr;
}

// No symbol preemption on Windows: an interposed entry point's real one is simply the export of
// another module than this one (`next`).
void * find(const char * library, const char * name, bool skip_self) {
    HMODULE ms[1024];
    int n = modules(ms, 1024);
    HMODULE self = skip_self ? self_module() : nullptr;
    for (int i = 0; i < n; i++) {
        if (ms[i] == self || (library && !name_holds(ms[i], library))) continue;
        if (FARPROC p = GetProcAddress(ms[i], name)) return (void *) p;
    }
    return nullptr;
}

void * symbol(const char * name, bool next) { return find(nullptr, name, next); }

void * loaded_symbol(const char * library, const char * name) { return find(library, name, false); }

size_t command_line(char * out, size_t cap) {
    int argc = 0;
    LPWSTR * argv = CommandLineToArgvW(GetCommandLineW(), &argc);
    size_t len = 0;
    for (int i = 0; argv && i < argc; i++) {
        int n = WideCharToMultiByte(CP_UTF8, 0, argv[i], -1, out + len, (int) (cap - len), nullptr, nullptr);
        if (n <= 0) break;
        len += (size_t) n;  // with its NUL
    }
    LocalFree(argv);
    return len;
}

size_t executable(char * out, size_t cap) { return GetModuleFileNameA(nullptr, out, (DWORD) cap); }

size_t host_name(char * out, size_t cap) {
    DWORD n = (DWORD) cap;
    return GetComputerNameA(out, &n) ? n : 0;
}

char ** environment() { return _environ; }

void * aligned_alloc_(size_t alignment, size_t size) { return _aligned_malloc(size, alignment); }

}  // namespace

const Platform g_os = {
    "windows",
    file_create, file_write, file_set_size, file_zero, file_map, file_map_read, file_flush, file_trim, file_close,
    process_id, thread_id, thread_name, set_thread_name, set_thread_idle, on_fork_child, exiting,
    symbol, loaded_symbol,
    command_line, executable, host_name, environment, aligned_alloc_, _aligned_free,
};

}  // namespace ggml_trace
