"""Windows programs (docs/windows.md). A Windows build of ggml binds each import to the DLL that
exports it, so there is no LD_PRELOAD: the hooks come in through ggml's own backend loader, which
loads the DLL that GGML_BACKEND_PATH names when the program calls `ggml_backend_load_all()` (as
llama.cpp's programs do), or, for a program that never does, through the launcher beside them.
The program runs natively on Windows, or on Linux under Wine, whose programs see this machine's
files as drive Z:."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

HOOKS_DLL = "ggml-trace-hooks.dll"
LAUNCHER = "ggml-trace-launch.exe"  # beside the hooks: for a program that never calls ggml_backend_load_all()
LAUNCH_ENV = "GGML_TRACE_LAUNCH"     # "1": start the program through it (recorded, so force does the same)
WINE = ("wine64", "/usr/lib/wine/wine64", "wine")  # Debian puts wine64 outside PATH


def is_windows_hooks(path) -> bool:
    """Whether a hook library is the Windows one (a DLL)."""
    return Path(path).suffix.lower() == ".dll"


def is_windows_program(word: str) -> bool:
    return word.lower().endswith(".exe")


def path_for_program(path) -> str:
    """A path as a Windows program sees it: itself on Windows; under Wine, drive Z: (the root)."""
    if os.name == "nt":
        return str(Path(path).resolve())
    return "Z:" + str(Path(path).resolve()).replace("/", "\\")


def host_path(path: str) -> str:
    """A path a Windows program named, as this machine names it: itself on Windows; under Wine,
    drive Z: is the root (path_for_program's inverse)."""
    if os.name == "nt" or not re.match(r"[zZ]:\\", path):
        return path
    return "/" + path[3:].replace("\\", "/")


def command_here(argv: list) -> list:
    """A Windows program's own command line, as this machine runs it: under Wine where this is not
    Windows. RuntimeError where that needs Wine and there is none."""
    if os.name == "nt":
        return list(argv)
    runner = wine()
    if runner is None:
        raise RuntimeError("re-running a Windows program here needs Wine (wine64)")
    return [runner, host_path(argv[0]), *argv[1:]]


def injection_env(hooks, output, launched: bool = False) -> dict:
    """The variables that bring the hooks into a Windows program and name its trace (a launched
    program gets the hooks from the launcher instead)."""
    env = {"GGML_TRACE_OUTPUT": path_for_program(output)}
    if not launched:
        env["GGML_BACKEND_PATH"] = path_for_program(hooks)
    return env


def is_injection(name: str, value: str) -> bool:
    """Whether a recorded variable is the one injection_env set to bring the hooks in (as LD_PRELOAD
    does on Linux, which is not recorded): how the program was traced, not how it ran."""
    return name == "GGML_BACKEND_PATH" and value.replace("\\", "/").rsplit("/", 1)[-1].lower() == HOOKS_DLL


def launched(cmd: list, hooks) -> list:
    """`cmd` started through the launcher beside `hooks`: `LAUNCHER HOOKS PROGRAM.exe ARGS`, after
    Wine where the command runs under it. ValueError where the command holds no Windows program."""
    words = [str(w) for w in cmd]
    i = next((k for k, w in enumerate(words) if is_windows_program(w)), None)
    if i is None:
        raise ValueError(f"no Windows program (.exe) to launch in: {' '.join(words)}")
    launcher = Path(hooks).with_name(LAUNCHER)
    first = path_for_program(launcher) if i == 0 else str(launcher)  # Wine starts a Linux path
    return [*words[:i], first, path_for_program(hooks), path_for_program(words[i]), *words[i + 1:]]


def hooks_beside(program: str) -> Path | None:
    """The hooks in a Windows program's own folder (where a Windows build puts its DLLs)."""
    exe = Path(program)
    hooks = exe.with_name(HOOKS_DLL)
    return hooks if hooks.exists() else None


def wine() -> str | None:
    """Wine's loader for 64-bit programs, where this machine has one."""
    return next((found for found in map(shutil.which, WINE) if found), None)  # which() takes a path too


# The exceptions a crashed Windows program's exit status names (NTSTATUS), as the hooks' crash
# filter ends it (native_hooks/inject_windows.cpp)
EXCEPTIONS = {0xC0000005: "access violation", 0xC000001D: "illegal instruction", 0xC0000094: "integer division by zero",
              0xC00000FD: "stack overflow", 0xC0000409: "stack buffer overrun (fail fast)", 0x80000003: "breakpoint"}


def exception_name(returncode: int) -> str | None:
    """"access violation (0xC0000005)" for a Windows program's exit status that is an exception."""
    code = returncode & 0xFFFFFFFF  # the same code whether the status came signed or not
    if code in EXCEPTIONS:
        return f"{EXCEPTIONS[code]} (0x{code:08X})"
    return None
