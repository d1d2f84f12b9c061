"""Every tier's set-up: `support` importable, a hermetic environment, the marker of the tests that
make docs/img's pictures, and the fixtures of more than one tier (each made per session in that
session's own temporary folder: pytest-xdist's workers never share one)."""
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from ggml_trace.tracer import programs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # `import support`: what the tiers share


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


# Where the tests marked docs_image put their pictures: GGML_TRACE_DOCS_IMG, read before the
# environment is made hermetic (which drops every GGML_* variable), and handed to pytest-xdist's
# workers, whose environment is the hermetic one.
DOCS_IMG = pytest.StashKey["str | None"]()


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: needs the machine's cores to itself (`make test` runs these after the "
                            "others, one at a time): the trace writer's grow threads run on idle CPU time only, "
                            "and a few races are set up by millisecond delays that a saturated machine's "
                            "preemptions outlast")
    config.addinivalue_line("markers", "docs_image: makes a picture of docs/img (in a temporary folder unless "
                            "GGML_TRACE_DOCS_IMG names one: `make docs` runs `pytest -m docs_image`)")
    worker = getattr(config, "workerinput", None)
    config.stash[DOCS_IMG] = worker["docs_img"] if worker else os.environ.get("GGML_TRACE_DOCS_IMG")
    home = tempfile.mkdtemp(prefix="ggml-trace-tests-")
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))
    hermetic_environment(os.environ, home)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist, on starting a worker: it is given the pictures' folder."""
    node.workerinput["docs_img"] = node.config.stash[DOCS_IMG]


@pytest.fixture(scope="session")
def model():
    return programs.tiny_model()


@pytest.fixture
def docs_img(request, tmp_path) -> Path:
    """The folder for a docs_image test's pictures: GGML_TRACE_DOCS_IMG's, else a temporary one."""
    named = request.config.stash[DOCS_IMG]
    return Path(named) if named else tmp_path / "img"


@pytest.fixture(scope="session")
def real_trace(tmp_path_factory):
    """real_trace("demo" | "vdev"): the path of a real trace (support.view_traces.record_real),
    recorded the first time a test of this session asks for it, into this session's own folder."""
    from support.view_traces import REAL, record_real

    made = {}

    def real(which: str) -> Path:
        assert which in REAL, which
        if which not in made:
            made[which] = record_real(which, tmp_path_factory.mktemp(f"recorded-{which}"))
        return made[which]

    return real


@pytest.fixture(scope="session")
def windows_trace(tmp_path_factory):
    """(path, graphs): a synthetic trace of ~200k events and 312 graphs, the #23321 pattern (one
    race) in every graph (bench/bench_races.py build_trace), for the windowed analysis."""
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    from bench_races import build_trace

    path = tmp_path_factory.mktemp("windows") / "syn.ggmltrace"
    _, graphs = build_trace(str(path), 200_000, 40, True)
    return path, graphs


@pytest.fixture(scope="session")
def vulkan_23321(tmp_path_factory):
    """(folder, document): #23321 as NVIDIA's Vulkan driver on an H200 showed it (b10524, a qwen35
    model), reduced by `ggml-trace reduce` (which confirms the reduction on b10524's programs)."""
    from support import reduce_json

    out = tmp_path_factory.mktemp("reduce") / "repro"
    return out, reduce_json("vulkan-nvidia-b10524-h200.ggmltrace", out)


@pytest.fixture(scope="session")
def pipeline_race(tmp_path_factory):
    """(folder, document): embd overwritten by the next ubatch (b11434, pipeline parallelism, NVIDIA's
    Vulkan driver on an H200), reduced by `ggml-trace reduce` (confirmed on b11434's programs)."""
    from support import reduce_json

    out = tmp_path_factory.mktemp("reduce") / "pp"
    return out, reduce_json("vulkan-nvidia-b11434-pp-h200.ggmltrace", out)
