"""Capture control: `ggml-trace record`, hook discovery, and the in-process control API."""
from .api import flush, mark, range, snapshot, start, stop, is_active  # noqa: F401
