"""Execute notebooks top to bottom on this environment's Python and keep their outputs (`make docs`),
so that a reader on GitHub sees every table and figure without running anything.

    python scripts/run_notebooks.py notebooks/*.ipynb

Each plotly figure is stored twice in its output: the interactive figure (Jupyter shows it) and a PNG
of it (GitHub's renderer shows only images), drawn afterwards, in this process, by kaleido in the
headless Chromium the set-up installs. Timing metadata is left out, so that a re-run changes only
what the traces changed.
"""
from __future__ import annotations

import base64
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


PLOTLY = "application/vnd.plotly.v1+json"


def _picture(pio, figure: dict) -> bytes:
    # kaleido's page in Chromium is sometimes not ready for the first figure (its JavaScript is
    # not defined yet): try again, a few times
    for attempt in range(3):
        try:
            return pio.to_image(figure, format="png", width=1200)
        except Exception as e:  # kaleido's JavascriptError, and what a broken browser start raises
            if attempt == 2:
                raise
            print(f"run_notebooks: drawing a figure failed ({type(e).__name__}); again", file=sys.stderr)
    raise AssertionError("unreachable")


def add_pictures(nb) -> int:
    """A PNG beside every plotly figure among the outputs; how many."""
    import plotly.io as pio

    n = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if PLOTLY in data and "image/png" not in data:
                png = _picture(pio, data[PLOTLY])
                data["image/png"] = base64.b64encode(png).decode("ascii")
                n += 1
    return n


def execute(path: Path, kernel: str, pictures: bool) -> int:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, kernel_name=kernel, timeout=600, allow_errors=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:
        cell.get("metadata", {}).pop("execution", None)
    n = add_pictures(nb) if pictures else 0
    nbformat.write(nb, path)
    return n


def main(paths: list[str]) -> int:
    browser = chromium()
    if browser:
        os.environ["BROWSER_PATH"] = browser  # where kaleido finds its browser
    else:
        print("run_notebooks: no Chromium; the figures are kept without their PNG copies", file=sys.stderr)
    with tempfile.TemporaryDirectory() as prefix:
        install_kernelspec(prefix=prefix, kernel_name=KERNEL)  # this interpreter, nothing installed outside
        os.environ["JUPYTER_PATH"] = str(Path(prefix) / "share" / "jupyter")
        for p in map(Path, paths):
            n = execute(p, KERNEL, pictures=browser is not None)
            print(f"{p}: executed, {n} figures drawn as PNG, {p.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
