"""Find the hook library that matches a program's ggml build.

The hooks read ggml's structs through the headers they were compiled with, so they must come from
the same sources as the program's libggml-base. Each build directory made by `make setup` (and by
`scripts/build_hooks.sh` for a user's checkout) holds libggml-trace-hooks.so next to its
libggml-base.so; builds elsewhere are registered in ~/.config/ggml-trace/builds.json.
"""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from . import windows

HOOKS_NAME = "libggml-trace-hooks.so"
VDEV_NAME = "libggml-trace-vdev.so"  # the virtual devices, beside the hooks (--virtual-devices)
NAMED = "named builds"  # registry key: {name: bin folder}


def _source_root() -> Path:
    """What the hooks are built from (CMakeLists.txt, native_hooks/, scenarios/, scripts/): a
    checkout's root, or the data an installed wheel carries (package ggml_trace.source)."""
    here = Path(__file__).resolve().parents[1]
    return here if (here / "native_hooks").is_dir() else here / "source"


SOURCE_ROOT = _source_root()
CHECKOUT = (SOURCE_ROOT / "Makefile").is_file()  # run from a clone of the repository


class HooksNotFound(RuntimeError):
    pass


def cache_root() -> Path:
    """The per-user cache (XDG): downloaded sources, hooks built by `ggml-trace build-hooks`."""
    base = os.environ.get("GGML_TRACE_CACHE") or Path(os.environ.get("XDG_CACHE_HOME",
                                                                      Path.home() / ".cache")) / "ggml-trace"
    return Path(base)


def build_root() -> Path:
    """Where builds, models and scenario runs live: a checkout's build/ (what `make setup` made),
    else the per-user cache; GGML_TRACE_BUILD_DIR overrides both."""
    if os.environ.get("GGML_TRACE_BUILD_DIR"):
        return Path(os.environ["GGML_TRACE_BUILD_DIR"])
    return SOURCE_ROOT / "build" if CHECKOUT else cache_root() / "builds"


def registry_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME", str(Path.home() / ".config"))
    return Path(base) / "ggml-trace" / "builds.json"


def load_registry() -> dict:
    try:
        return json.loads(registry_path().read_text())
    except (OSError, ValueError):
        return {}


def _save_registry(reg: dict) -> None:
    registry_path().parent.mkdir(parents=True, exist_ok=True)
    registry_path().write_text(json.dumps(reg, indent=2) + "\n")


def register(ggml_lib_dir: str, hooks: str):
    """Remember that programs using the libggml-base in `ggml_lib_dir` take `hooks`."""
    base = Path(ggml_lib_dir) / "libggml-base.so"
    if not base.exists():
        raise HooksNotFound(f"no libggml-base.so in {ggml_lib_dir}")
    reg = load_registry()
    reg[str(base.resolve())] = str(Path(hooks).resolve())
    _save_registry(reg)


def register_name(name: str, lib_dir) -> None:
    """Remember build NAME (`ggml-trace build-hooks`): its bin folder holds libggml-base.so, the
    hooks and the scenario programs. The folder is kept as given (made absolute, links not followed):
    a build's folder may be a link to its CMake folder, and the name shows where the user looks."""
    reg = load_registry()
    reg.setdefault(NAMED, {})[name] = os.path.abspath(lib_dir)
    _save_registry(reg)


def pinned_builds() -> dict:
    """{'b10531': Path(.../build/llama-b10531/bin), ...}: the builds `make setup` made, and those
    `ggml-trace build-hooks` registered by name (a name made both ways: the registered one)."""
    out = {}
    for d in sorted(build_root().glob("llama-*/bin")):
        if (d / HOOKS_NAME).exists():
            out[d.parent.name.removeprefix("llama-")] = d
    for name, d in load_registry().get(NAMED, {}).items():
        if (Path(d) / HOOKS_NAME).exists():
            out[name] = Path(d)
    return out


def ggml_base_of(program: str):
    """Path of the libggml-base.so that `program` loads, or None (static build, script, ...)."""
    exe = shutil.which(program) or program
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"libggml-base\.so\S*\s+=>\s+(\S+)", out)
    return Path(m.group(1)).resolve() if m else None


def libraries_first(directory, env=None) -> dict:
    """A copy of `env` (default: ours) with `directory` first on the library path: the programs started
    with it load that folder's ggml before the one their RUNPATH names."""
    env = dict(os.environ if env is None else env)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(directory), env.get("LD_LIBRARY_PATH")) if p)
    return env


def ggml_dir_to_load(program: str, build: str):
    """The bin folder of `build` when it holds a libggml-base.so other than the one `program` loads
    (a patched build of the same sources, such as b11434-ppfix): the program must load that one for
    the trace to be of that build. None when the program already loads it, or the build has none."""
    d = pinned_builds().get(build)
    if windows.is_windows_program(program) or d is None or not (d / "libggml-base.so").exists():
        return None
    own = ggml_base_of(program)
    return None if own is not None and own == (d / "libggml-base.so").resolve() else d


def ggml_program(cmd: list) -> str:
    """The program of a command line whose ggml is traced: the command itself, or the first of its
    arguments that is an executable loading a libggml-base (a wrapper's: `stdbuf -o0 PROG`,
    `env A=B PROG`, `taskset -c 0 PROG`, `numactl ... PROG`, `timeout 300 PROG`). The command itself
    when none is (a script: pass --build or --hooks)."""
    for arg in cmd:
        if windows.is_windows_program(arg):  # `wine64 PROG.exe`, or PROG.exe on Windows
            return arg
        exe = shutil.which(arg) if "/" not in arg else (arg if os.access(arg, os.X_OK) else None)
        if exe and os.path.isfile(exe) and ggml_base_of(exe) is not None:
            return arg
    return cmd[0]


def _windows_hooks_for(program: str, build: str | None) -> Path:
    """A Windows program's hooks: the pinned build's Windows tree (`make setup`: build/win/), else
    beside the program."""
    if build:
        pinned = build_root() / "win" / f"llama-{build}" / "bin" / windows.HOOKS_DLL
        if not pinned.exists():
            raise HooksNotFound(f"no Windows build {build!r} with hooks at {pinned.parent} (make setup builds "
                                "b10524, b10531 and b11434; docs/windows.md)")
        return pinned
    hooks = windows.hooks_beside(program)
    if hooks is None:
        raise HooksNotFound(f"no {windows.HOOKS_DLL} beside {program}: put the hooks built for its ggml there, "
                            "or pass --hooks (docs/windows.md)")
    return hooks


def hooks_for(program: str, build: str | None = None) -> Path:
    """The hook library for `program` (or for the pinned `build`, e.g. 'b10531')."""
    if windows.is_windows_program(program):
        return _windows_hooks_for(program, build)
    if build:
        builds = pinned_builds()
        if build not in builds:
            known = ", ".join(builds) or "none (run `make setup`)"
            raise HooksNotFound(f"no build {build!r} has hooks; known: {known}. For another llama.cpp "
                                f"build run `ggml-trace build-hooks SOURCE --name {build}` (docs/building.md)")
        return builds[build] / HOOKS_NAME
    base = ggml_base_of(program)
    if base is None:
        raise HooksNotFound(
            f"cannot tell which ggml {program!r} uses (no libggml-base.so among its libraries, nor among "
            "those of a program it runs); pass --build NAME (`ggml-trace builds` lists them) or --hooks LIB")
    beside = base.parent / HOOKS_NAME
    if beside.exists():
        return beside
    registered = load_registry().get(str(base))
    if registered and Path(registered).exists():
        return Path(registered)
    raise HooksNotFound(
        f"{program!r} uses {base}, and no hooks were built for it. Build them with "
        f"`ggml-trace build-hooks <its llama.cpp sources> --build-dir {base.parent}` (docs/building.md), "
        "or pass --hooks LIB")
