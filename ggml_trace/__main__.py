"""`python -m ggml_trace`: the `ggml-trace` command."""
import sys

from .tracer.cli import main

sys.exit(main())
