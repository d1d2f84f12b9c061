"""The notebooks under notebooks/: each one runs top to bottom without an error, on this
environment's Python, and the committed copies carry the outputs `make docs` stored
(scripts/run_notebooks.py), every plotly figure with a PNG that GitHub shows."""
import sys
import time
from pathlib import Path

import nbformat
import pytest
from ipykernel.kernelspec import install as install_kernelspec
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL = "ggml-trace-tests"


def test_there_are_notebooks():
    assert [p.name for p in NOTEBOOKS] == ["01-anatomy-of-a-split-schedule.ipynb",
                                          "02-hunting-a-read-after-reuse-race.ipynb", "03-two-gpus.ipynb"]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """A kernelspec that starts ipykernel on this interpreter (the venv's), found through JUPYTER_PATH:
    nothing is installed outside a temporary folder."""
    prefix = tmp_path_factory.mktemp("jupyter")
    install_kernelspec(prefix=str(prefix), kernel_name=KERNEL)
    spec = prefix / "share" / "jupyter" / "kernels" / KERNEL / "kernel.json"
    assert sys.executable in spec.read_text()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
        yield KERNEL


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, kernel):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name=kernel, timeout=300, allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.monotonic()
    client.execute()  # raises CellExecutionError, naming the cell, on the first cell that fails
    elapsed = time.monotonic() - start
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    # every notebook shows at least one plotly figure inline
    assert any("application/vnd.plotly.v1+json" in o.get("data", {}) for c in code for o in c.outputs)
    print(f"{path.name}: {elapsed:.1f} s")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebook_is_stored_executed(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.cells[0].cell_type == "markdown" and "question" in nb.cells[0].source.lower()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{path.name} is not stored executed (make docs)"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    figures = [o for c in code for o in c.outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert figures and all("image/png" in o["data"] for o in figures), f"{path.name}: a figure without its PNG"
    for i, cell in enumerate(nb.cells):
        assert "execution" not in cell.get("metadata", {}), f"cell {i} of {path.name} has timing metadata"
