"""The pinned builds' programs and model, and an RPC server to run them against."""
import contextlib
import socket
import subprocess
import time
from pathlib import Path

from .hooks import build_root, pinned_builds
from .record import clear_traces, trace_env

PINNED = ["b10524", "b10531", "b11434"]


def bin_dir(build: str) -> Path:
    """The bin folder of a pinned build or of one `ggml-trace build-hooks` registered."""
    return pinned_builds().get(build, build_root() / f"llama-{build}" / "bin")


def program(build: str, name: str) -> Path:
    p = bin_dir(build) / name
    if not p.exists():
        fix = ("run `make setup`" if build in PINNED else
               f"run `ggml-trace build-hooks SOURCE --name {build}` with that build's llama.cpp sources "
               "(docs/building.md)")
        raise FileNotFoundError(f"{p} is missing: {fix}")
    return p


def hooks(build: str) -> Path:
    return pinned_builds()[build] / "libggml-trace-hooks.so"


def tiny_model() -> Path:
    p = build_root() / "models" / "tiny-llama.gguf"
    if not p.exists():
        raise FileNotFoundError(f"{p} is missing: run `make setup`")
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def rpc_server(build: str, trace: Path | None = None, port: int | None = None):
    """ggml-rpc-server on loopback (traced into `trace` if given); yields 'host:port'."""
    port = port or free_port()
    cmd = [str(program(build, "ggml-rpc-server")), "-H", "127.0.0.1", "-p", str(port)]
    if trace:
        clear_traces(Path(trace))
    env = trace_env(hooks(build), trace) if trace else None
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()  # one still running would hold its stderr open: reading it would never end
                err = proc.communicate()[1].decode(errors="replace")
                raise RuntimeError(f"ggml-rpc-server did not start: {err[-2000:]}")
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()  # SIGTERM: the server's trace keeps what it recorded
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
