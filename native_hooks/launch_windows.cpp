// ggml-trace-launch.exe HOOKS.dll PROGRAM.exe [ARGS...]: runs a Windows program with the hooks in
// it when it never calls ggml_backend_load_all() (whose GGML_BACKEND_PATH is the hooks' usual way
// in: docs/windows.md). It starts the program suspended, has a thread of the program load the hooks
// DLL (LoadLibraryW) and then call the DLL's ggml_backend_init, as ggml's loader would (imports
// interposed, virtual devices set up, the crash filter set), resumes it, and ends with its exit
// status. Its own failures say so on stderr and end with status 125 before the program runs.
#include <windows.h>
#include <psapi.h>
#include <shellapi.h>

#include <stdio.h>

#include <string>

namespace {

const int LAUNCH_FAILED = 125;

int fail(const char * what) {
    fprintf(stderr, "ggml-trace-launch: %s failed (Windows error %lu)\n", what, (unsigned long) GetLastError());
    return LAUNCH_FAILED;
}

// A word of a command line, quoted as the C runtime splits it back (CommandLineToArgvW's rules).
std::wstring quoted(const std::wstring & w) {
    if (!w.empty() && w.find_first_of(L" \t\"") == std::wstring::npos) return w;
    std::wstring out = L"\"";
    size_t backslashes = 0;
    for (wchar_t c : w) {
        if (c == L'\\') {
            backslashes++;
            continue;
        }
        out.append(c == L'"' ? backslashes * 2 + 1 : backslashes, L'\\');
        backslashes = 0;
        out += c;
    }
    out.append(backslashes * 2, L'\\');
    return out + L"\"";
}

// Runs fn(arg) on a new thread of `process` and waits for it.
bool run_in(HANDLE process, LPTHREAD_START_ROUTINE fn, void * arg) {
    HANDLE t = CreateRemoteThread(process, nullptr, 0, fn, arg, 0, nullptr);
    if (!t) return false;
    WaitForSingleObject(t, INFINITE);
    CloseHandle(t);
    return true;
}

// Where the DLL at `path` is loaded in `process` (a thread's exit code cannot carry a 64-bit address).
HMODULE module_in(HANDLE process, const wchar_t * path) {
    HMODULE ms[1024];
    DWORD bytes = 0;
    if (!EnumProcessModulesEx(process, ms, sizeof(ms), &bytes, LIST_MODULES_ALL)) return nullptr;
    for (DWORD i = 0; i < bytes / sizeof(HMODULE) && i < 1024; i++) {
        wchar_t name[MAX_PATH];
        if (GetModuleFileNameExW(process, ms[i], name, MAX_PATH) && _wcsicmp(name, path) == 0) return ms[i];
    }
    return nullptr;
}

// The offset of the DLL's ggml_backend_init from its base, read from the DLL mapped here without
// running it.
size_t init_offset(const wchar_t * path) {
    HMODULE here = LoadLibraryExW(path, nullptr, DONT_RESOLVE_DLL_REFERENCES);
    FARPROC init = here ? GetProcAddress(here, "ggml_backend_init") : nullptr;
    size_t offset = init ? (size_t) ((char *) (void *) init - (char *) here) : 0;
    if (here) FreeLibrary(here);
    return offset;
}

}  // namespace

int main() {
    int argc = 0;
    wchar_t ** argv = CommandLineToArgvW(GetCommandLineW(), &argc);
    if (!argv || argc < 3) {
        fprintf(stderr, "usage: ggml-trace-launch.exe HOOKS.dll PROGRAM.exe [ARGS...]\n");
        return LAUNCH_FAILED;
    }
    wchar_t dll[MAX_PATH];
    if (!GetFullPathNameW(argv[1], MAX_PATH, dll, nullptr)) return fail("GetFullPathNameW (the hooks' path)");
    size_t offset = init_offset(dll);
    if (!offset) return fail("finding ggml_backend_init in the hooks DLL");
    std::wstring cmd = quoted(argv[2]);
    for (int i = 3; i < argc; i++) cmd += L" " + quoted(argv[i]);

    STARTUPINFOW si = {};
    si.cb = sizeof(si);
    PROCESS_INFORMATION pi = {};
    if (!CreateProcessW(nullptr, &cmd[0], nullptr, nullptr, TRUE, CREATE_SUSPENDED, nullptr, nullptr, &si, &pi)) {
        return fail("CreateProcessW (the program)");
    }
    // the first thread to run in the new process initializes it (its DLLs, ggml's among them)
    size_t bytes = (wcslen(dll) + 1) * sizeof(wchar_t);
    void * remote = VirtualAllocEx(pi.hProcess, nullptr, bytes, MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE);
    auto load = (LPTHREAD_START_ROUTINE) (void *) GetProcAddress(GetModuleHandleW(L"kernel32.dll"), "LoadLibraryW");
    HMODULE hooks = nullptr;
    if (!remote || !WriteProcessMemory(pi.hProcess, remote, dll, bytes, nullptr) || !run_in(pi.hProcess, load, remote) ||
        !(hooks = module_in(pi.hProcess, dll)) ||
        !run_in(pi.hProcess, (LPTHREAD_START_ROUTINE) (void *) ((char *) hooks + offset), nullptr)) {
        int status = fail(hooks ? "ggml_backend_init in the program" : "loading the hooks into the program");
        TerminateProcess(pi.hProcess, LAUNCH_FAILED);
        return status;
    }
    VirtualFreeEx(pi.hProcess, remote, 0, MEM_RELEASE);
    ResumeThread(pi.hThread);
    WaitForSingleObject(pi.hProcess, INFINITE);
    DWORD code = LAUNCH_FAILED;
    GetExitCodeProcess(pi.hProcess, &code);
    return (int) code;
}
