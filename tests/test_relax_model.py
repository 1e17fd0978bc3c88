"""The Relax path: a ResNet-18-shaped nn.Module -> task extraction -> one tuning session -> whole-model build."""

import json
import subprocess
import sys

import pytest

from workbench import relax_model as rm
from workbench.errors import WorkbenchError


def test_extraction_finds_resnet_tasks_with_multiplicities():
    m = rm.resnet18(image=32, width=8, classes=10, stages=2)
    tasks = rm.extract(m)
    names = {t.task_name: t for t in tasks}
    assert "fused_conv2d_add_relu" in names  # the stem: conv + folded-BN bias + relu
    assert any(n.count("add") >= 2 for n in names)  # a residual conv: bias add + skip add
    assert "max_pool2d" in names and "mean" in names
    # stages=2: layer1's two blocks are identical, so their tasks are called twice
    assert sum(t.weight for t in tasks if t.task_name.startswith("fused_conv2d")) == 2 * 2 * 2 + 1 + 1
    assert tasks == sorted(tasks, key=lambda t: -t.weight * t.flops)
    assert tasks[0].class_key == "relax:fused_conv2d_add_relu"
    with pytest.raises(WorkbenchError):
        rm.resnet18(image=8, stages=4)


@pytest.mark.slow
def test_tiny_budget_tunes_compiles_and_matches_untuned(tmp_path):
    """`workbench model resnet18`: extract, tune the 2 biggest tasks in one session, compile with the records, compare."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "workbench.cli",
            "model",
            "resnet18",
            "--image",
            "32",
            "--width",
            "8",
            "--stages",
            "2",
            "--max-tasks",
            "2",
            "--trials",
            "8",
            "--trials-per-round",
            "4",
            "--db",
            str(tmp_path / "rx.db"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["trials"] == 8 and res["output_shape"] == [1, 1000]
    assert len(res["tuned_tasks"]) == 2  # every tuned task has a verified record and went into the database
    assert res["matches"], res["max_abs_error"]
    assert res["untuned_latency_ms"] > 0 and res["tuned_latency_ms"] > 0
    # the tuned build really used the records: exactly the tuned tasks' functions were scheduled from the database
    # (which build is faster is not asserted: at this budget either can win)
    assert res["applied"] == sorted(w.split(".", 1)[1] for w in res["tuned_tasks"])
    bad = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "model", "resnet18", "--stages", "9", "--db", str(tmp_path / "rx.db")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
