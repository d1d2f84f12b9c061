"""Readings of a trace's metadata (META records: what the hooks wrote down about the process)
that modules at several layers share. It imports no other analysis module: the loader and the
analyses above it both read from here."""
from __future__ import annotations


def recorded_env(meta: dict) -> dict:
    """The environment the hooks recorded (META env: NUL-separated KEY=VALUE), as a dict."""
    return dict(kv.partition("=")[::2] for kv in meta.get("env", "").split("\0") if "=" in kv)
