"""What a test tier may touch, enforced: an audit hook (PEP 578) sees every file the test process
opens and every program or connection it starts, and refuses those its tier rules out. The hook stays
installed for the session (they cannot be removed); it acts only while a test of a guarded tier runs.

- unit tests: no program started, no network, nothing read under build/ (where `make setup` puts
  llama.cpp and the hooks): they need no set-up beyond the virtual environment;
- tests on committed traces: no network, nothing read under build/; the only programs they may start
  are this environment's Python and `ggml-trace` (reading a committed trace as a user would).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = str(ROOT / "build") + os.sep
# this virtual environment's interpreter and the installed command, as their paths appear in argv
OWN_PROGRAMS = {sys.executable, str(Path(sys.executable).parent / "ggml-trace")}
PROGRAM_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty")


class TierViolation(RuntimeError):
    """A test did what its tier rules out."""


_active: dict | None = None  # the rules of the test running now, or None


def _path(arg) -> str | None:
    if isinstance(arg, int):
        return None
    try:
        return os.path.abspath(os.fsdecode(arg))
    except TypeError:
        return None


def _program(event: str, args: tuple) -> str:
    if event == "subprocess.Popen":  # (executable, args, cwd, env)
        argv = args[1]
        first = argv if isinstance(argv, (str, bytes, os.PathLike)) else (argv[0] if argv else args[0])
        return os.fsdecode(first) if first is not None else "?"
    return os.fsdecode(args[0]) if args and isinstance(args[0], (str, bytes, os.PathLike)) else event


def _hook(event: str, args: tuple) -> None:
    rules = _active
    if rules is None:
        return
    if event == "open":
        p = _path(args[0])
        if p and p.startswith(BUILD):
            raise TierViolation(f"{rules['tier']} tests do not read build/ ({p}): move the test to tests/runs/")
    elif event in PROGRAM_EVENTS:
        program = _program(event, args)
        if not (rules["own_programs"] and program in OWN_PROGRAMS):
            raise TierViolation(f"{rules['tier']} tests start no programs ({program}): move the test to tests/runs/")
    elif event == "socket.connect":
        raise TierViolation(f"{rules['tier']} tests use no network ({args[1]!r})")


sys.addaudithook(_hook)


def guarded(tier: str, own_programs: bool):
    """An autouse fixture for a tier's conftest.py."""

    @pytest.fixture(autouse=True)
    def _guard():
        global _active
        _active = {"tier": tier, "own_programs": own_programs}
        try:
            yield
        finally:
            _active = None

    return _guard
