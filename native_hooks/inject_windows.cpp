// Windows: how the hooks get into an unmodified program (docs/windows.md). There is no LD_PRELOAD
// and no symbol preemption: a program binds each import to the DLL that exports it. ggml's own
// loader brings the hooks in instead: `ggml_backend_load_all()` (llama.cpp calls it at start-up)
// loads the DLL that GGML_BACKEND_PATH names and calls its `ggml_backend_init`, before any
// scheduler exists. There the hooks pin themselves (ggml frees a backend library it does not
// keep), point every loaded module's imports of the interposed entry points from ggml-base.dll at
// their own (hooks.cpp, as on Linux), set up the virtual devices when asked, and return a
// registry of no device. From then on the vtable patching is the same as on Linux.
#include <windows.h>
#include <psapi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend-impl.h"
#include "ggml-backend.h"

namespace {

// The entry points hooks.cpp interposes, its definitions beside ggml-base.dll's exports.
struct Interposed {
    const char * name;
    void * ours;
};

#define OURS(fn) {#fn, (void *) &fn}
const Interposed INTERPOSED[] = {
    OURS(ggml_backend_sched_new),           OURS(ggml_backend_sched_free),
    OURS(ggml_backend_sched_graph_compute), OURS(ggml_backend_sched_graph_compute_async),
    OURS(ggml_backend_sched_alloc_graph),   OURS(ggml_backend_sched_reserve),
    OURS(ggml_backend_sched_synchronize),   OURS(ggml_backend_sched_reset),
    OURS(ggml_backend_buffer_free),         OURS(ggml_backend_dev_init),
};
#undef OURS
const int N_INTERPOSED = sizeof(INTERPOSED) / sizeof(INTERPOSED[0]);

HMODULE module_holding(const char * part) {
    HMODULE ms[1024];
    DWORD bytes = 0;
    if (!EnumProcessModules(GetCurrentProcess(), ms, sizeof(ms), &bytes)) return nullptr;
    for (DWORD i = 0; i < bytes / sizeof(HMODULE) && i < 1024; i++) {
        char path[MAX_PATH];
        if (GetModuleFileNameA(ms[i], path, sizeof(path)) && strstr(path, part)) return ms[i];
    }
    return nullptr;
}

// Points `module`'s import slots that hold one of `real` at ours instead; the number patched.
int patch_imports(HMODULE module, HMODULE from, void * const * real) {
    auto * base = (uint8_t *) module;
    auto * dos = (IMAGE_DOS_HEADER *) base;
    if (dos->e_magic != IMAGE_DOS_SIGNATURE) return 0;
    auto * nt = (IMAGE_NT_HEADERS *) (base + dos->e_lfanew);
    IMAGE_DATA_DIRECTORY dir = nt->OptionalHeader.DataDirectory[IMAGE_DIRECTORY_ENTRY_IMPORT];
    if (!dir.VirtualAddress) return 0;
    char from_path[MAX_PATH];
    GetModuleFileNameA(from, from_path, sizeof(from_path));
    const char * from_name = strrchr(from_path, '\\') ? strrchr(from_path, '\\') + 1 : from_path;
    int patched = 0;
    for (auto * d = (IMAGE_IMPORT_DESCRIPTOR *) (base + dir.VirtualAddress); d->Name; d++) {
        if (_stricmp((const char *) (base + d->Name), from_name) != 0) continue;
        for (auto * slot = (IMAGE_THUNK_DATA *) (base + d->FirstThunk); slot->u1.Function; slot++) {
            for (int i = 0; i < N_INTERPOSED; i++) {
                if (real[i] && (void *) slot->u1.Function == real[i]) {
                    DWORD old;
                    VirtualProtect(&slot->u1.Function, sizeof(void *), PAGE_READWRITE, &old);
                    slot->u1.Function = (ULONG_PTR) INTERPOSED[i].ours;
                    VirtualProtect(&slot->u1.Function, sizeof(void *), old, &old);
                    patched++;
                }
            }
        }
    }
    return patched;
}

int interpose_all() {
    HMODULE ggml_base = module_holding("ggml-base");
    if (!ggml_base) {
        fprintf(stderr, "ggml-trace: no ggml-base.dll in this process; the program runs untraced\n");
        return 0;
    }
    void * real[N_INTERPOSED];
    for (int i = 0; i < N_INTERPOSED; i++) real[i] = (void *) GetProcAddress(ggml_base, INTERPOSED[i].name);
    HMODULE ms[1024];
    DWORD bytes = 0;
    EnumProcessModules(GetCurrentProcess(), ms, sizeof(ms), &bytes);
    int patched = 0;
    for (DWORD i = 0; i < bytes / sizeof(HMODULE) && i < 1024; i++) patched += patch_imports(ms[i], ggml_base, real);
    return patched;
}

// The virtual devices (GGML_TRACE_VIRTUAL_DEVICES), a DLL beside this one: set up now, while ggml
// loads its backends and before the program enumerates them.
void load_virtual_devices() {
    const char * n = getenv("GGML_TRACE_VIRTUAL_DEVICES");
    if (!n || atoi(n) <= 0) return;
    char path[MAX_PATH];
    HMODULE self = nullptr;
    GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                       (LPCSTR) (void *) &load_virtual_devices, &self);
    DWORD len = GetModuleFileNameA(self, path, sizeof(path));
    char * slash = strrchr(path, '\\');
    if (!len || !slash) return;
    snprintf(slash + 1, sizeof(path) - (size_t) (slash + 1 - path), "ggml-trace-vdev.dll");
    HMODULE vdev = LoadLibraryA(path);
    auto setup = vdev ? (void (*)()) (void *) GetProcAddress(vdev, "ggmltrace_vdev_setup") : nullptr;
    if (!setup) {
        fprintf(stderr, "ggml-trace: GGML_TRACE_VIRTUAL_DEVICES=%s, but %s could not be loaded\n", n, path);
        return;
    }
    setup();
}

// A crash: the trace on disk already holds every record written (the file's mapped pages outlive
// the process), so the program ends at once with the exception's code as its exit status, as
// Windows reports a crash, after any filter the program set has passed on it. (Under Wine the
// default would start its debugger and end the program with status 0.)
LPTOP_LEVEL_EXCEPTION_FILTER g_program_filter = nullptr;

LONG WINAPI on_crash(EXCEPTION_POINTERS * e) {
    if (g_program_filter) {
        LONG r = g_program_filter(e);
        if (r != EXCEPTION_CONTINUE_SEARCH) return r;
    }
    DWORD code = e->ExceptionRecord->ExceptionCode;
    fprintf(stderr, "ggml-trace: the program crashed (exception 0x%08lX at %p); its trace keeps what it recorded\n",
            (unsigned long) code, e->ExceptionRecord->ExceptionAddress);
    fflush(stderr);
    TerminateProcess(GetCurrentProcess(), code);
    return EXCEPTION_EXECUTE_HANDLER;
}

const char * reg_name(ggml_backend_reg_t) { return "ggml-trace"; }
size_t reg_dev_count(ggml_backend_reg_t) { return 0; }
ggml_backend_dev_t reg_dev_get(ggml_backend_reg_t, size_t) { return nullptr; }

}  // namespace

// ggml's backend entry point: the hooks' way in. A registry of no device, of the API version the
// hooks were built for: ggml refuses it when its own differs, and the hooks' layout checks then
// refuse to trace (one line; the program runs untraced).
extern "C" __declspec(dllexport) ggml_backend_reg_t ggml_backend_init(void) {
    static ggml_backend_reg_i iface = {reg_name, reg_dev_count, reg_dev_get, nullptr};
    static ggml_backend_reg reg = {GGML_BACKEND_API_VERSION, iface, nullptr};
    static bool done = false;
    if (!done) {
        done = true;
        HMODULE self = nullptr;  // pinned: ggml frees a backend library it does not keep
        GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_PIN,
                           (LPCSTR) (void *) &ggml_backend_init, &self);
        if (interpose_all() == 0) {
            fprintf(stderr, "ggml-trace: no module of this program calls ggml-base.dll's scheduler; nothing traced\n");
        }
        load_virtual_devices();
        g_program_filter = SetUnhandledExceptionFilter(on_crash);
    }
    return &reg;
}
