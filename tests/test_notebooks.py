"""Every example notebook runs top to bottom headless, tuning for real with a tiny budget."""

import glob
import os
import re
import shutil

import nbformat
import pytest
from nbclient import NotebookClient

from workbench.store import RecordStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
DEMO_DB = os.path.join(ROOT, "notebooks", "data", "demo_session.db")


def stored_records(root: str) -> int:
    """Measured records in every store under ``root``."""
    n = 0
    for db in glob.glob(os.path.join(root, "**", "*.db"), recursive=True):
        store = RecordStore(db, readonly=True)
        n += store.summary()["measured"]
        store.close()
    return n


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
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    # The notebooks keep their stores in a stable place (workbench.store.runs_path): here this test's own directory,
    # not notebooks/workbench-runs/ in the repository. Each store the notebook names already exists, holding a
    # recorded session, as after an earlier run: the notebook appends its sessions to it.
    runs = tmp_path / "workbench-runs"
    runs.mkdir()
    monkeypatch.setenv("WORKBENCH_RUNS", str(runs))
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for name in set(re.findall(r"runs_path\([\"']([^\"']+\.db)[\"']\)", code)):
        shutil.copy(DEMO_DB, runs / name)
    in_repo = os.path.exists(os.path.join(ROOT, "notebooks", "workbench-runs"))
    seeded = stored_records(str(tmp_path))
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": os.path.dirname(path)}}
    )
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert stored_records(str(tmp_path)) > seeded, "the notebook did not tune anything"
    assert in_repo or not os.path.exists(os.path.join(ROOT, "notebooks", "workbench-runs")), "it wrote into the repo"
    out_dir = os.path.join(ROOT, "test-artifacts", "notebooks")
    os.makedirs(out_dir, exist_ok=True)
    nbformat.write(nb, os.path.join(out_dir, os.path.basename(path)))
