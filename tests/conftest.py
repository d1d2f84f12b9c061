import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from ggml_trace.tracer import programs  # noqa: E402
from ggml_trace.tracer.outputs import same_output  # noqa: E402

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
    """Outputs equal up to the tail llama-completion's logger thread can drop at exit (the library's
    rule, tracer/outputs.py). Corruption by the races these tests show changes the text from the
    first generated tokens on."""
    return same_output(a, b)
