"""Execute notebooks top to bottom on this environment's Python and keep their outputs (`make docs`),
so that a reader on GitHub sees every table and figure without running anything.

    python scripts/run_notebooks.py notebooks/*.ipynb

Each plotly figure is stored twice in its output: the interactive figure (Jupyter shows it) and a PNG
of it (GitHub's renderer shows only images), drawn by kaleido in the headless Chromium the set-up
installs. Timing metadata is left out, so that a re-run changes only what the traces changed.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
from ipykernel.kernelspec import install as install_kernelspec
from nbclient import NotebookClient

KERNEL = "ggml-trace-docs"


def chromium() -> str | None:
    return next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None)


def execute(path: Path, kernel: str) -> None:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, kernel_name=kernel, timeout=600, allow_errors=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:
        cell.get("metadata", {}).pop("execution", None)
    nbformat.write(nb, path)


def main(paths: list[str]) -> int:
    browser = chromium()
    if browser:
        # plotly's renderers read PLOTLY_RENDERER; kaleido's browser discovery reads BROWSER_PATH
        os.environ["PLOTLY_RENDERER"] = "plotly_mimetype+png"
        os.environ["BROWSER_PATH"] = browser
    else:
        print("run_notebooks: no Chromium; the figures are kept without their PNG copies", file=sys.stderr)
    with tempfile.TemporaryDirectory() as prefix:
        install_kernelspec(prefix=prefix, kernel_name=KERNEL)  # this interpreter, nothing installed outside
        os.environ["JUPYTER_PATH"] = str(Path(prefix) / "share" / "jupyter")
        for p in map(Path, paths):
            execute(p, KERNEL)
            print(f"{p}: executed, {p.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
