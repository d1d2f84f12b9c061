"""`ggml-trace` commands that present a trace: timeline, export, report, view."""


def add_view_commands(sub):
    """Adds the presentation subcommands to the `ggml-trace` argument parser."""
