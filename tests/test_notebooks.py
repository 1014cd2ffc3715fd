"""The notebooks run top to bottom (on the CPU through the interpreter, on a GPU for real), draw their
plots, and are committed executed, with their outputs and plots, for readers on GitHub."""

import pathlib

import pytest

# CI installs them (the `test` extra, or `notebooks`); an image without them (the GPU machine's) skips this file
nbformat = pytest.importorskip("nbformat")
NotebookClient = pytest.importorskip("nbclient").NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def _images(notebook) -> int:
    return sum("image/png" in output.get("data", {}) for cell in notebook.cells for output in cell.get("outputs", []))


def test_there_are_three_notebooks():
    assert [p.stem for p in NOTEBOOKS] == ["gumbel_sampling", "speculative_decoding", "top_k_top_p"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_executed(path):
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code), "run the notebook and commit its outputs"
    assert not any(output.get("output_type") == "error" for cell in code for output in cell.outputs)
    assert _images(notebook) >= 2


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path):
    notebook = nbformat.read(path, as_version=4)
    # from notebooks/, as `jupyter nbconvert --execute notebooks/...` and `jupyter lab notebooks/` run them
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells for o in cell.get("outputs", []))
    assert "identical: True" in outputs
    assert _images(notebook) >= 2
