import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def hermetic_environment(env: dict, home: str) -> None:
    """What the user set up for themselves must not change a test's result: ggml-trace's registry
    and cache, ggml's and llama.cpp's variables (LLAMA_ARG_* become program arguments) and our own.
    The download and compiler caches stay the user's: they hold the same bytes whoever fills them."""
    user_cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    env.setdefault("PIP_CACHE_DIR", os.path.join(user_cache, "pip"))
    env.setdefault("CCACHE_DIR", os.path.join(user_cache, "ccache"))
    env.setdefault("GGML_TRACE_SDIST_CACHE",
                   os.path.join(env.get("GGML_TRACE_CACHE") or os.path.join(user_cache, "ggml-trace"), "sdist"))
    for k in [k for k in env if k.startswith(("GGML_", "LLAMA_")) and k != "GGML_TRACE_SDIST_CACHE"]:
        del env[k]
    for var in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME"):
        env[var] = os.path.join(home, var.lower())


def pytest_configure(config):
    home = tempfile.mkdtemp(prefix="ggml-trace-tests-")
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))
    hermetic_environment(os.environ, home)

from ggml_trace.tracer import programs  # noqa: E402

BUILDS = programs.PINNED
API_VERSION = {"b10524": 2, "b10531": 2, "b11434": 3}


@pytest.fixture(scope="session")
def model():
    return programs.tiny_model()


def ggml_trace(*args, **kw):
    """Runs the installed CLI, as a user would."""
    exe = Path(sys.executable).parent / "ggml-trace"
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, errors="replace", **kw)


def built_program(build, name):
    return ROOT / "build" / f"hooks-{build}" / name


def simple_cmd(build, model, *extra, n=8):
    """llama-simple prints each token with printf + fflush. llama-completion prints through an
    asynchronous logger thread that can drop the last tokens at exit, which makes it unfit for
    comparing outputs byte for byte."""
    return [str(programs.program(build, "llama-simple")), "-m", str(model), "-n", str(n), *map(str, extra), "the of and"]


def completion_cmd(build, model, *extra, n=8):
    return [str(programs.program(build, "llama-completion")), "-m", str(model), "-n", str(n), "-p", "the of and",
            "--temp", "0", "--seed", "1", "-no-cnv", *map(str, extra)]


def same_text(a: str, b: str) -> bool:
    """llama-completion prints through a logger thread, which can drop the last few bytes at exit (the
    text ends with bytes of partial characters here): equal up to such a tail. Corruption by the races
    these tests show changes the text from the first generated tokens on."""
    a, b = sorted((a.rstrip(), b.rstrip()), key=len)
    return len(a) > 0 and b.startswith(a) and len(b) - len(a) <= 8
