"""What the test tiers share: where things are, the installed command, the pinned programs' command
lines, how outputs are compared, and the checks and helpers of more than one test module (no test
module imports another). Traces made in Python are in support.tracegen, the #23321 shape by hand in
support.race_cases, the pipeline race's prompt and finding in support.pipeline_cases, the view tests'
traces in support.view_traces, the headless browser in support.browser, a simulated NVML in
support.fake_nvml, the tier guard in support.guard."""
import contextlib
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from ggml_trace.tracer import programs
from ggml_trace.tracer.outputs import same_output

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"  # committed traces
BUILDS = programs.PINNED
API_VERSION = {"b10524": 2, "b10531": 2, "b11434": 3}


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


# -- what several tiers check ---------------------------------------------------------------------

def check_dtypes(trace) -> None:
    """Every frame of a loaded trace has the documented columns and dtypes (analysis/schema.py)."""
    from ggml_trace.analysis.schema import FRAMES

    for frame, want in FRAMES.items():
        df = getattr(trace, frame)
        got = {c: str(t) for c, t in df.dtypes.items()}
        assert got == want, frame


def record_offsets(data: bytes) -> dict:
    """File offset of every valid record of a trace file's bytes, per record type."""
    import numpy as np

    from ggml_trace.analysis.trace_file import _valid_record_mask
    from ggml_trace.analysis.trace_format import HEADER_SIZE, RECORD_DTYPES, RECORD_SIZE

    body = np.frombuffer(data, np.uint8)[HEADER_SIZE:]
    n = len(body) // RECORD_SIZE
    recs = body[: n * RECORD_SIZE].view(np.dtype((np.void, RECORD_SIZE)))
    types = body[: n * RECORD_SIZE: RECORD_SIZE].copy()
    valid, _ = _valid_record_mask(recs, types)
    return {t: HEADER_SIZE + np.flatnonzero(valid & (types == t)) * RECORD_SIZE
            for t in RECORD_DTYPES}


def cli(capsys, *argv) -> tuple[int, str, str]:
    """`ggml-trace ARGV` run in this process: (exit status, stdout, stderr)."""
    from ggml_trace.tracer.cli import main

    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_error_line(err: str, command: str) -> str:
    """The error: exactly one line that is not a warning, naming the command."""
    lines = [ln for ln in err.splitlines() if ": warning: " not in ln]
    assert len(lines) == 1 and lines[0].startswith(f"ggml-trace {command}: "), err
    assert "Traceback" not in err
    return lines[0]


@contextlib.contextmanager
def no_hang(seconds: float, what: str):
    """Fails the test if the block has not ended after `seconds` (a hang, not a slow machine: give
    far more than it takes). SIGALRM, so in the main thread only; elsewhere it only runs the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise AssertionError(f"{what} did not end within {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# -- ggml's split lists, as GGML_SCHED_DEBUG=1 -v prints them -------------------------------------

# "## SPLIT #1: RPC0[127.0.0.1:5000] # 2 inputs: [embd (   1K)] [leaf_5 (   0K)]", once the log's
# timestamps ("0.00.018.919 D ") are taken out.
SPLIT_LINE = re.compile(r"^## SPLIT #(\d+): (.+?) # (\d+) inputs(?:: (.*))?$")
LOG_PREFIX = re.compile(r"\d+\.\d+\.\d+\.\d+ [DIWE] ")
INPUT = re.compile(r"\[(.+?) \(\s*[\d.]+[KMG]?\)\]")


def logged_schedules(log: str):
    """Each split list ggml printed (at every graph split), as [(backend, [input names])]."""
    schedules, cur = [], None
    for raw in log.splitlines():
        line = LOG_PREFIX.sub("", raw).strip()
        m = SPLIT_LINE.match(line)
        if not m:
            continue
        k, backend, n, rest = int(m.group(1)), m.group(2), int(m.group(3)), m.group(4) or ""
        if k == 0:
            cur = []
            schedules.append(cur)
        names = INPUT.findall(rest)
        assert len(names) == n, line
        cur.append((backend, names))
    return schedules


def col(df, name: str) -> list:
    """A column of a DataFrame as plain Python values (missing -> None)."""
    import pandas as pd

    return [None if pd.isna(x) else x for x in df[name].astype(object).tolist()]


def stall_waits(s, kind=None):
    """The rows of a stalls frame (analysis.stalls) that are waits, of one kind if given."""
    w = s[s["kind"].isin(["synchronize", "event_synchronize"])]
    return w if kind is None else w[w["kind"] == kind]


def races_of(path) -> list:
    """The race findings of a trace file, as `ggml-trace races --json` gives them."""
    from ggml_trace import analysis

    return analysis.races(analysis.load(path)).to_json()["races"]


def warmup_clear(found):
    """Of findings (a list of their JSON forms, or a `findings` frame), those of llama.cpp's warm-up
    clear: common_init clears the KV cache (llama_memory_clear: a buf_clear of the cache's buffer)
    right after the warm-up decode and synchronizes only after it. CUDA's and Vulkan's clear wait for
    nothing queued on the backend (docs/races.md, rule 6), so the decode's reads and writes of the
    cache (cache_k_l0, cache_v_l0 (view), ...) race with the clear. A list gives a list; a frame, the
    mask of its rows."""
    if isinstance(found, list):
        return [f for f in found if f["b"]["kind"] == "buf_clear" and f["a"]["kind"] == "graph_compute"
                and str(f["a"]["tensor"]).startswith("cache_")]
    return ((found["b_kind"].astype(str) == "buf_clear") & (found["a_kind"].astype(str) == "graph_compute")
            & found["a_tensor"].astype(str).str.startswith("cache_"))


def apart_from_warmup_clear(found):
    """The findings (a list of JSON forms, or a `findings` frame, renumbered) other than the warm-up
    clear's (warmup_clear): what the traces of llama.cpp programs on CUDA and Vulkan show besides it."""
    if isinstance(found, list):
        clear = warmup_clear(found)
        return [f for f in found if f not in clear]
    return found[~warmup_clear(found).to_numpy()].reset_index(drop=True)


def reduce_json(trace, out, *extra) -> dict:
    """`ggml-trace reduce TRACE -o OUT --json` (a committed trace by its name), which must succeed."""
    import json

    r = ggml_trace("reduce", DATA / trace if not Path(trace).is_absolute() else trace, "-o", out, "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def replay_json(directory, build, runs, *extra) -> dict:
    """`ggml-trace replay DIR --build BUILD --runs RUNS --json`: its document, checked against its
    exit status (1: RED) and its run count."""
    import json

    r = ggml_trace("replay", directory, "--build", build, "--runs", runs, "--json", *extra)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert r.returncode == (1 if doc["verdict"] == "RED" else 0)
    assert doc["runs"] == runs and len(doc["traces"]) == runs
    return doc


def wait_until(condition, what: str, seconds: float = 60, poll: float = 0.01) -> None:
    """Polls `condition()` until it holds, however long that takes on a busy machine; fails after
    `seconds` (a hang, not a slow machine: give far more than it takes)."""
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after {seconds} s"
        time.sleep(poll)
