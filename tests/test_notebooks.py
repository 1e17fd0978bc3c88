"""Every example notebook runs top to bottom headless, tuning for real with a tiny budget."""

import glob
import os

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


def test_there_are_notebooks():
    names = {os.path.basename(p) for p in NOTEBOOKS}
    assert {
        "01_quickstart.ipynb",
        "02_adaptive_layout.ipynb",
        "03_cost_model_debugging.ipynb",
        "04_sketch_and_annotation.ipynb",
        "05_transfer_tuning.ipynb",
    } <= names


@pytest.mark.slow
@pytest.mark.timeout(700)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_runs(path, monkeypatch, tmp_path):
    # The kernel inherits this environment: a tiny budget on the small matmul, and headless mode.
    monkeypatch.setenv("WORKBENCH_TRIALS", os.environ.get("WORKBENCH_TRIALS", "8"))
    monkeypatch.setenv("WORKBENCH_WORKLOAD", os.environ.get("WORKBENCH_WORKLOAD", "matmul-128"))
    monkeypatch.delenv("WORKBENCH_INTERACTIVE", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebooks' databases land in this test's tmp dir
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": os.path.dirname(path)}}
    )
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert glob.glob(os.path.join(str(tmp_path), "workbench-*", "*.db")), "the notebook did not tune anything"
    out_dir = os.path.join(ROOT, "test-artifacts", "notebooks")
    os.makedirs(out_dir, exist_ok=True)
    nbformat.write(nb, os.path.join(out_dir, os.path.basename(path)))
