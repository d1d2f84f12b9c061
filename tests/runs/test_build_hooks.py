"""`ggml-trace build-hooks` on a build the project does not pin (docs/building.md), and which build
a trace says made it."""
import json
import os
import subprocess

import pytest

from ggml_trace.analysis import load, summarize
from support import ggml_trace
from ggml_trace.tracer import hooks as hooks_mod
from ggml_trace.tracer import programs

UNPINNED = "b10502"  # upstream, before the fix of #23321 (b10524 is the pinned one before it)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A registry of its own, so that the test leaves the user's alone."""
    home = tmp_path_factory.mktemp("config")
    return {**os.environ, "XDG_CONFIG_HOME": str(home)}


@pytest.fixture(scope="module")
def built(env):
    # ggml alone: the scenario programs need nothing more (the sdist comes from the package
    # registry, cached like the pinned ones; the objects from ccache when warm)
    r = ggml_trace("build-hooks", UNPINNED, "--targets", "ggml", env=env, timeout=3600)
    assert r.returncode == 0, r.stderr[-3000:]
    name, lib = r.stdout.strip().split("\t")
    return name, lib


def test_the_build_is_registered_by_its_upstream_number(built, env):
    name, lib = built
    assert name == UNPINNED and UNPINNED not in programs.PINNED
    for f in ("libggml-base.so", "libggml-trace-hooks.so", "ggml-trace-scenarios"):
        assert os.path.exists(os.path.join(lib, f)), f
    reg = json.loads(open(os.path.join(env["XDG_CONFIG_HOME"], "ggml-trace", "builds.json")).read())
    assert reg[hooks_mod.NAMED][UNPINNED] == lib
    r = ggml_trace("builds", env=env)
    assert f"{UNPINNED}\t{lib}/libggml-trace-hooks.so" in r.stdout


def test_a_scenario_runs_red_on_it_and_its_traces_say_which_build(built, env, tmp_path):
    r = ggml_trace("scenario", "inputless-reuse", "--build", UNPINNED, "--runs", "5", "--out", tmp_path,
                   "--json", env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert res["build"] == UNPINNED and res["corrupt_runs"] >= 4, res  # the #23321 race, before its fix
    trace = res["traces"][0]
    info = summarize(load(trace))["build"]
    assert info["llama_build"] == UNPINNED and info["hooks_build"] == UNPINNED
    s = ggml_trace("summary", trace, env=env)
    assert f"build: llama.cpp {UNPINNED}" in s.stdout


def test_errors_name_the_fix(env, tmp_path):
    r = ggml_trace("build-hooks", tmp_path, env=env)
    assert r.returncode == 2 and "not a llama.cpp source tree" in r.stderr
    r = ggml_trace("build-hooks", programs.bin_dir("b10531").parents[1] / "src" / "llama-b10531",
                   "--build-dir", tmp_path, env=env)
    assert r.returncode == 2 and "no libggml-base.so" in r.stderr and "-DBUILD_SHARED_LIBS=ON" in r.stderr
    r = ggml_trace("scenario", "inputless-reuse", "--build", "b99999", env=env)
    assert r.returncode == 2 and "ggml-trace build-hooks SOURCE --name b99999" in r.stderr


@pytest.mark.parametrize("build", ["b10524", "b10531"])
def test_a_pinned_trace_reports_its_build_and_not_this_projects_commit(build, tmp_path):
    out = tmp_path / "t.ggmltrace"
    r = ggml_trace("record", "--build", build, "-o", out, "--", programs.program(build, "llama-simple"),
                   "-m", programs.tiny_model(), "-n", "2", "the", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    info = summarize(load(out))["build"]
    assert info["llama_build"] == build and info["hooks_build"] == build
    assert info["ggml_version"] and "CPU" in info["backend_features"]
    # the sdist does not carry its commit: unknown, never a commit of the repository it sits in
    for commit in (info["ggml_commit"], info["llama_commit"]):
        if commit is not None:
            known = subprocess.run(["git", "cat-file", "-e", f"{commit.removesuffix('-dirty')}^{{commit}}"],
                                   cwd=os.path.dirname(__file__), capture_output=True)
            assert known.returncode != 0, f"{commit} is this project's commit"


@pytest.mark.parametrize("build", ["b10531", "b10531-vulkan"])
@pytest.mark.parametrize("name", ["libggml-trace-hooks.so", "libggml-trace-vdev.so"])
def test_preloaded_libraries_keep_their_thread_locals_in_static_tls(build, name):
    """The writer's per-thread state is read on every record: in the static TLS block (initial-exec)
    it sits at a fixed offset from the thread pointer; through __tls_get_addr (the default for a
    shared library) it cost ~15 ns an event."""
    lib = programs.bin_dir(build) / name
    dynamic = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
    relocs = subprocess.run(["readelf", "-r", lib], capture_output=True, text=True, check=True).stdout
    assert "STATIC_TLS" in dynamic
    assert "DTPMOD64" not in relocs and "TPOFF64" in relocs
