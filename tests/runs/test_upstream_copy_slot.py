"""The copy-slot race's package for upstream (docs/upstream/copy-slot/): its test,
tests/programs/test-backend-sched-copy-slot.cpp (ggml's public API alone), on two virtual devices, RED
(exit 1) on b11434 and GREEN (exit 0) with either fix: b11434-slotfix (patches/copy-slot-wait.patch, the
host wait, stacked on the pipeline fix) and b11434 with patches/copy-slot-wait-standalone.patch (the
device-side wait proposed upstream; its libggml-base is built here, a few seconds with the compiler
cache warm). And the patch files apply, alone, to the clean pinned b11434 tree."""
import fcntl
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ggml_trace.analysis import load
from ggml_trace.tracer.record import record

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
SOURCE = ROOT / "tests" / "programs" / "test-backend-sched-copy-slot.cpp"
NAME = "test-backend-sched-copy-slot"
STANDALONE = ROOT / "patches" / "copy-slot-wait-standalone.patch"
PACKAGE = ROOT / "docs" / "upstream" / "copy-slot"
PINNED_TREE = BUILD / "src" / "llama-b11434" / "llama.cpp"
GRAPHS = 16
# VDEV1, the destination, 10 ms an operation behind: it lags more than n_copies (4) graphs even on a busy
# machine (without latency the sized matrix products alone made it lag here: RED 3 of 3 on b10531)
ENV = {"GGML_TRACE_VIRTUAL_DEVICES": "2", "GGML_TRACE_VDEV_LATENCY_US": "0,10000"}


def bin_dir(build):
    return BUILD / f"llama-{build}" / "bin"


def needs(*builds):
    missing = [b for b in builds if not (bin_dir(b) / "libggml-trace-vdev.so").exists()]
    if missing:
        pytest.skip(f"needs {', '.join(f'build/llama-{b}' for b in missing)} (make setup)")


def program(build, tmp_path):
    """The test as CMake built it beside the build's ggml (make setup), else compiled here against it."""
    built = bin_dir(build) / NAME
    if built.exists() and built.stat().st_mtime >= SOURCE.stat().st_mtime:
        return built
    src = BUILD / "src" / f"llama-{build}" / "llama.cpp" / "ggml" / "include"
    if not src.is_dir():  # a patched build's headers are its base's (the patches change no header)
        src = BUILD / "src" / f"llama-{build.split('-')[0]}" / "llama.cpp" / "ggml" / "include"
    exe = tmp_path / f"{NAME}-{build}"
    subprocess.run([os.environ.get("CXX", "c++"), "-std=c++17", "-O2", str(SOURCE), "-I", str(src), "-L",
                    str(bin_dir(build)), "-lggml", "-lggml-base", f"-Wl,-rpath,{bin_dir(build)}", "-o", str(exe)],
                   check=True)
    return exe


def run_env(build, libs_first=None):
    env = dict(os.environ, **ENV, LD_PRELOAD=str(bin_dir(build) / "libggml-trace-vdev.so"))
    if libs_first:
        env["LD_LIBRARY_PATH"] = ":".join([str(libs_first)] + [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p])
    return env


def run(exe, build, libs_first=None):
    return subprocess.run([str(exe), "-n", str(GRAPHS)], env=run_env(build, libs_first), capture_output=True,
                          text=True, timeout=300)


def assert_green(r):
    assert r.returncode == 0, (r.stdout, r.stderr[-2000:])
    assert f"GREEN: {GRAPHS} of {GRAPHS} graphs exact (parallel, 4 copies)" in r.stdout, r.stdout


@pytest.fixture(scope="module")
def standalone_base():
    """b11434's libggml-base with the standalone patch, in build/llama-b11434-slotwait/bin (no hooks there,
    so no tool lists it as a build): the pinned tree hard-linked but for ggml-backend.cpp, built as the
    project's patched trees are, so that every other file is a compiler-cache hit."""
    needs("b11434")
    out = BUILD / "llama-b11434-slotwait"
    env = dict(os.environ, TARGETS="ggml-base", CCACHE_BASEDIR=str(ROOT), CCACHE_NOHASHDIR="1",
               PATH=f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}")
    with open(BUILD / ".llama-b11434-slotwait.lock", "w") as lock:  # xdist's workers may ask at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        tree = subprocess.run([str(ROOT / "scripts" / "patched_tree.sh"), "b11434", str(STANDALONE), "slotwait"],
                              capture_output=True, text=True, check=True).stdout.strip()
        r = subprocess.run([str(ROOT / "scripts" / "build_llama.sh"), tree, str(out), "-DGGML_RPC=OFF"], env=env,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out / "bin"


def test_red_on_b11434(tmp_path):
    needs("b11434")
    exe = program("b11434", tmp_path)
    for _ in range(3):
        r = run(exe, "b11434")
        assert r.returncode == 1, (r.stdout, r.stderr[-2000:])
        assert "RED:" in r.stdout and "VDEV0 overwrote an input slot of VDEV1" in r.stdout, r.stdout
        # not any corruption: a graph holds exactly the values of the graph n_copies (or a multiple) later
        late = [(int(g), int(f)) for g, f in re.findall(r"^graph (\d+): .*\(the value of graph (\d+)\)$", r.stdout, re.M)]
        assert late and all(f > g and (f - g) % 4 == 0 for g, f in late), r.stdout


def test_green_on_b11434_slotfix(tmp_path):
    needs("b11434", "b11434-slotfix")
    exe = program("b11434-slotfix", tmp_path)
    for _ in range(3):
        assert_green(run(exe, "b11434-slotfix"))


def test_green_with_the_standalone_patch(tmp_path, standalone_base):
    exe = program("b11434", tmp_path)
    ldd = subprocess.run(["ldd", str(exe)], env=run_env("b11434", standalone_base), capture_output=True, text=True)
    assert f"{standalone_base}/libggml-base.so" in ldd.stdout, ldd.stdout
    for _ in range(3):
        assert_green(run(exe, "b11434", standalone_base))


def test_the_standalone_patch_waits_on_the_device(tmp_path, standalone_base):
    # the source's queue waits for the slot's event (an event_wait on VDEV0, once a graph after the first);
    # the host waits for it (an event_synchronize of VDEV1's event) only before the first peer copy
    exe = program("b11434", tmp_path)
    out = tmp_path / "slotwait.ggmltrace"
    r = record([str(exe), "-n", str(GRAPHS)], bin_dir("b11434") / "libggml-trace-hooks.so", out,
               env=run_env("b11434", standalone_base), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert r.returncode == 0 and r.traces, r
    sync = load(out).sync
    waits = sync[(sync.kind == "event_wait") & (sync.backend == "VDEV0")]
    host = sync[(sync.kind == "event_synchronize") & (sync.backend == "VDEV1")]
    assert len(waits) == GRAPHS - 1 and len(host) == 1, sync.groupby(["kind", "backend"]).size()


def patch_dry_run(patch, tree):
    return subprocess.run(["patch", "-p1", "--dry-run", "-s", "-f", "-i", str(patch)], cwd=tree, capture_output=True,
                          text=True)


def added_file(patch_text, path):
    """The lines a patch adds as the new file `path`."""
    part = patch_text.split(f"+++ b/{path}\n", 1)[1]
    part = part.split("\ndiff --git ", 1)[0]
    return "".join(line[1:] + "\n" for line in part.splitlines()[1:] if line.startswith("+"))


def test_the_patches_apply_alone_to_the_pinned_tree():
    if not (PINNED_TREE / "ggml" / "src" / "ggml-backend.cpp").exists():
        pytest.skip("needs build/src/llama-b11434 (make setup)")
    (fix,) = PACKAGE.glob("0001-*.patch")
    (test,) = PACKAGE.glob("0002-*.patch")
    for patch in (STANDALONE, fix, test):
        r = patch_dry_run(patch, PINNED_TREE)
        assert r.returncode == 0, (patch.name, r.stdout, r.stderr)
    # the upstream patch is the standalone one, with a commit message; its test is the project's program
    def changes(text):
        diff = text.split("\ndiff --git ", 1)[-1].split("\n-- \n", 1)[0]  # no message, no signature
        return [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changes(STANDALONE.read_text()) and changes(fix.read_text()) == changes(STANDALONE.read_text())
    text = test.read_text()
    assert added_file(text, f"tests/{NAME}.cpp") == SOURCE.read_text()
    assert f"+llama_build_and_test({NAME}.cpp)" in text


def test_the_stacked_fix_still_applies_where_slotfix_builds_it(tmp_path):
    # build/llama-b11434-slotfix (Makefile) stacks patches/copy-slot-wait.patch on pipeline-host-reads.patch
    if not (PINNED_TREE / "ggml" / "src" / "ggml-backend.cpp").exists():
        pytest.skip("needs build/src/llama-b11434 (make setup)")
    tree = tmp_path / "tree"
    (tree / "ggml" / "src").mkdir(parents=True)
    shutil.copy(PINNED_TREE / "ggml" / "src" / "ggml-backend.cpp", tree / "ggml" / "src")
    for patch in ("pipeline-host-reads.patch", "copy-slot-wait.patch"):
        r = subprocess.run(["patch", "-p1", "-s", "-f", "-i", str(ROOT / "patches" / patch)], cwd=tree,
                           capture_output=True, text=True)
        assert r.returncode == 0, (patch, r.stdout, r.stderr)
