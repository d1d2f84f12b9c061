"""Unit tests: no build, no program, no network (tests/support/guard.py enforces it)."""
from support.guard import guarded

_guard = guarded("unit", own_programs=False)
