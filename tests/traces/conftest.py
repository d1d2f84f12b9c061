"""Tests on committed traces (tests/data/): nothing under build/, no network; the only programs they
start are this environment's Python and `ggml-trace` (tests/support/guard.py enforces it)."""
from support.guard import guarded

_guard = guarded("traces", own_programs=True)
