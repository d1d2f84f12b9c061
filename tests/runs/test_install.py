"""The package as a user gets it: a wheel built from this tree, installed into a fresh virtual
environment outside the checkout, builds hooks for an existing llama.cpp build and traces it."""
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ggml_trace.tracer import programs

ROOT = Path(__file__).resolve().parents[2]


def run(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, errors="replace", **kw)
    assert r.returncode == 0, f"{cmd}: {r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the venv's bin folder, an environment with its own cache and registry, the wheel)."""
    tmp = tmp_path_factory.mktemp("install")
    # setuptools builds under tmp, not in the checkout's build/: files left there by another build
    # (a module since removed, another worktree's) would go into the wheel
    cfg = tmp / "setup.cfg"
    cfg.write_text(f"[build]\nbuild_base = {tmp / 'build'}\n[egg_info]\negg_base = {tmp}\n")
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", tmp / "dist",
         ROOT], timeout=600, env=dict(os.environ, DIST_EXTRA_CONFIG=str(cfg)))
    (wheel,) = (tmp / "dist").glob("ggml_trace-*.whl")
    run([sys.executable, "-m", "venv", tmp / "venv"], timeout=300)
    bin_dir = tmp / "venv" / "bin"
    run([bin_dir / "python", "-m", "pip", "install", "--quiet", wheel], timeout=1200)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "GGML_TRACE_BUILD_DIR")}
    env.update(XDG_CACHE_HOME=str(tmp / "cache"), XDG_CONFIG_HOME=str(tmp / "config"),
               PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    return bin_dir, env, wheel, tmp


def test_the_wheel_holds_one_package_and_the_hook_sources(installed):
    _, _, wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"ggml_trace"}
    for f in ("ggml_trace/tracer/cli.py", "ggml_trace/analysis/load.py", "ggml_trace/analysis/timeline.js",
              "ggml_trace/source/CMakeLists.txt", "ggml_trace/source/native_hooks/vtable_hooks.cpp",
              "ggml_trace/source/native_hooks/trace_format.h", "ggml_trace/source/scenarios/scenarios.cpp",
              "ggml_trace/source/scripts/build_hooks.sh", "ggml_trace/source/patches/pipeline-host-reads.patch"):
        assert f in names, f
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA"))).decode()
    assert "Provides-Extra: view" in meta and "Requires-Dist: viztracer" in meta and "extra == " in meta


def test_the_installed_command_runs_outside_the_checkout(installed):
    bin_dir, env, _, tmp = installed
    r = run([bin_dir / "ggml-trace", "--version"], env=env, cwd=tmp)
    assert r.stdout.startswith("ggml-trace 0.")
    r = run([bin_dir / "python", "-m", "ggml_trace", "--help"], env=env, cwd=tmp)
    assert "build-hooks" in r.stdout and "stalls" in r.stdout
    r = run([bin_dir / "python", "-c", "import ggml_trace.tracer.hooks as h; print(h.SOURCE_ROOT, h.CHECKOUT)"],
            env=env, cwd=tmp)
    where, checkout = r.stdout.split()
    assert "site-packages" in where and checkout == "False"


def test_build_hooks_for_an_existing_build_then_record_it(installed, model):
    """build-hooks on a pinned source tree with its existing build folder (as a user would with
    their own clone of llama.cpp): the hooks go to the user's cache, the build is registered by name
    and by its libggml-base (for its programs recorded without --build, where no hooks sit beside
    that library: here `make setup` put some there, and those are found first)."""
    bin_dir, env, _, tmp = installed
    src = programs.bin_dir("b11434").parents[1] / "src" / "llama-b11434" / "llama.cpp"
    build = programs.bin_dir("b11434").parent
    r = run([bin_dir / "ggml-trace", "build-hooks", src, "--build-dir", build, "--name", "mine"], env=env, cwd=tmp,
            timeout=1800)
    name, out = r.stdout.strip().split("\t")
    assert name == "mine" and out.startswith(str(tmp / "cache" / "ggml-trace" / "builds"))
    assert (Path(out) / "libggml-trace-hooks.so").exists() and (Path(out) / "ggml-trace-scenarios").exists()
    assert not list(build.glob("bin/libggml-trace-hooks.so.*"))  # nothing left in the user's build
    trace = tmp / "t.ggmltrace"
    run([bin_dir / "ggml-trace", "record", "--build", "mine", "--no-nvml", "-o", trace, "--",
         build / "bin" / "llama-simple", "-m", model, "-n", "4", "the of"], env=env, cwd=tmp, timeout=300)
    s = json.loads(run([bin_dir / "ggml-trace", "summary", trace, "--json"], env=env, cwd=tmp).stdout)
    assert s["build"]["hooks_build"] == "mine" and s["build"]["llama_build"] == "b11434"
    assert sum(b["splits"] for b in s["backends"]) > 0
    reg = json.loads((tmp / "config" / "ggml-trace" / "builds.json").read_text())
    assert reg[str((build / "bin" / "libggml-base.so").resolve())] == str(Path(out) / "libggml-trace-hooks.so")
    r = run([bin_dir / "ggml-trace", "scenario", "inputless-reuse", "--build", "mine", "--runs", "2", "--out",
             tmp / "sc"], env=env, cwd=tmp, timeout=600)
    assert "0 of 2 runs corrupt" in r.stdout + r.stderr
