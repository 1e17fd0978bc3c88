"""`workbench report`: a store as one self-contained HTML file, and the cost-model quality it shows."""

import html
import json
import math
import os
import re
import sqlite3
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from workbench import analysis, cli
from workbench.report import write_report
from workbench.store import RecordStore

from .test_compare import make_store, rec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_DB = os.path.join(ROOT, "notebooks", "data", "demo_session.db")
FIGURE = re.compile(r"<script type='application/json' data-figure='([^']*)'>(.*?)</script>", re.S)


def figures(page: str) -> dict:
    return {div: json.loads(body) for div, body in FIGURE.findall(page)}


def copy_store(src: str, dst) -> str:
    """A copy made by SQLite itself (no file handle on the store's file: see workbench.store)."""
    s = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    d = sqlite3.connect(str(dst))
    s.backup(d)
    s.close()
    d.close()
    return str(dst)


def test_report_of_the_demo_store_has_its_curves_tables_tir_and_environment(tmp_path, capsys):
    from workbench.program import TunedProgram

    out = tmp_path / "demo.html"
    assert cli.main(["report", DEMO_DB, "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    page = out.read_text()
    assert "<script src" not in page and "Plotly.newPlot" in page and "plotly.js v" in page  # inlined, offline
    # the curves: per strategy, vs trial and vs wall time, exactly the best-so-far data
    [(div, fig)] = figures(page).items()
    assert div == "curve-1"
    per = analysis.best_so_far([(DEMO_DB, 1)], per_strategy=True)
    drawn = {(t["name"], t["xaxis"]): t for t in fig["data"]}
    for s, c in per.groupby("strategy"):
        assert drawn[(s, "x")]["x"] == c["trial"].tolist()
        assert drawn[(s, "x")]["y"] == pytest.approx(c["best_gflops"].tolist())
        assert drawn[(s, "x2")]["x"] == pytest.approx(c["elapsed_s"].tolist())
    assert drawn[("session best", "x")]["y"][-1] == pytest.approx(61.155132002202485)
    # the per-strategy table, the quality per round, the environment as recorded
    for text in ("no-rewrite", "packed", "25%", "controller 8", "pairwise accuracy", "Spearman", "0.27.0.post1"):
        assert text in page, text
    assert "znver3" in page and "3.2.0" in page
    # the best program's TIR, escaped
    tir = TunedProgram.from_store(DEMO_DB, "matmul-128").tir
    assert f"<pre class='tir'>{html.escape(tir)}</pre>" in page


def test_default_output_and_session_choice(tmp_path, capsys):
    db = copy_store(DEMO_DB, tmp_path / "run.db")
    assert cli.main(["report", db, "--no-tir"]) == 0
    page = (tmp_path / "run-report.html").read_text()
    assert "curve-1" in page and "Best programs" not in page

    multi = tmp_path / "multi.db"
    ids = make_store(multi, [([rec("no-rewrite", x)], {"seed": s}) for s, x in ((0, 2.0), (1, 1.0), (2, 4.0))])
    path = write_report(str(multi), str(tmp_path / "two.html"), [ids[0], ids[2]], with_tir=False)
    page = open(path).read()
    assert set(figures(page)) == {"overview", f"curve-{ids[0]}", f"curve-{ids[2]}"}
    assert f"id='session-{ids[1]}'" not in page
    overview = figures(page)["overview"]
    assert [t["y"] for t in overview["data"]] == [[0.5], [0.25]]


PAYLOAD = "</script><script>alert('x')</script><img src=x onerror=alert(1)>"


def test_a_crafted_store_cannot_inject_markup(tmp_path):
    db = tmp_path / "evil.db"
    text = {k: PAYLOAD for k in ("chosen_by", "trace", "decisions", "mod_hash", "error_msg")}
    records = [
        rec(PAYLOAD, 2.0, score=0.1, round=1, **text),
        rec(PAYLOAD, 1.0, score=0.9, round=1, **text),
        rec(PAYLOAD, 3.0, score=0.5, round=1, **text),
        rec("packed", None, error=PAYLOAD, round=2, score=0.3, **text),
    ]
    [sid] = make_store(
        db,
        [
            (
                records,
                {
                    "workload": PAYLOAD,
                    "strategy_arg": PAYLOAD,
                    "preset": PAYLOAD,
                    "cost_model": PAYLOAD,
                    "spec": {"name": PAYLOAD, "op": PAYLOAD},
                    "target": {"kind": PAYLOAD},
                    "versions": {"tvm": PAYLOAD, PAYLOAD: PAYLOAD},
                    "status": PAYLOAD,
                },
            )
        ],
    )
    s = RecordStore(str(db))
    s.add_event(sid, "model_trained", 0.0, 0.0, {"round": PAYLOAD, PAYLOAD: PAYLOAD})
    s.close()
    path = write_report(str(db), str(tmp_path / "evil.html"))
    page = open(path).read()
    assert PAYLOAD not in page and "<img" not in page and "onerror=alert(1)>" not in page
    # the only script elements are the report's own: plotly, one figure's data, the drawing code
    assert len(re.findall(r"<script", page)) == 3
    assert html.escape(PAYLOAD) in page  # shown, as text
    fig = figures(page)[f"curve-{sid}"]
    assert {t["name"] for t in fig["data"]} == {html.escape(PAYLOAD), "session best"}
    assert "its TIR could not be rebuilt" in page


def cli_run(*args):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "case,needle",
    [
        ("missing", "does not exist"),
        ("not-a-store", "not a workbench records store"),
        ("unknown-session", "no session 7"),
        ("no-output-dir", "does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, case, needle):
    args = {
        "missing": [str(tmp_path / "nope.db")],
        "not-a-store": [str(tmp_path / "notes.txt")],
        "unknown-session": [DEMO_DB, "--session", "1", "7"],
        "no-output-dir": [DEMO_DB, "-o", str(tmp_path / "no" / "r.html")],
    }[case]
    (tmp_path / "notes.txt").write_text("not a store\n")
    r = cli_run("report", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not list(tmp_path.glob("*.html"))


def test_round_quality_per_round():
    recs = pd.DataFrame(
        {
            "round": [1, 1, 1, 1, 2, 2, 2, 2, 3],
            "strategy": ["a"] * 4 + ["b"] * 4 + ["a"],
            "predicted_score": [0.1, 0.2, 0.3, 0.4, 0.4, 0.3, 0.2, 0.1, None],
            "gflops": [1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, None, 5.0],
            "error_class": [None] * 7 + ["build-error", None],
        }
    )
    events = [{"kind": "model_trained", "data": {"round": 1, "n_samples": 4}}]
    q = analysis.round_quality(recs, events)
    assert q["round"].tolist() == [1, 2]  # round 3 has no prediction
    r1, r2 = q.iloc[0], q.iloc[1]
    assert r1["spearman"] == 1.0 and r1["kendall"] == 1.0 and r1["pairwise"] == 1.0 and r1["topk_recall"] == 1.0
    assert r2["spearman"] == -1.0 and r2["pairwise"] == 0.0 and r2["n"] == 4  # the failure is out of the ranks
    assert math.isnan(r1["trained_on"]) and r2["trained_on"] == 4
    assert analysis.pairwise_accuracy([4.0, 1.0, 2.0, 3.0], [4.0, 3.0, 2.0, 1.0]) == 0.5
    assert math.isnan(analysis.pairwise_accuracy([1.0, 2.0], [3.0, 3.0]))
    assert analysis.round_quality(recs.assign(predicted_score=np.nan)).empty


def test_a_persons_what_if_is_no_trial_in_the_tables_but_can_be_the_best():
    recs = pd.DataFrame(
        {
            "id": [1, 2, 3, 4],
            "round": [1, 1, 2, 0],
            "strategy": ["a", "a", "b", "a"],
            "chosen_by": ["controller", "controller", "controller", "user"],
            "latency_ms": [2.0, 3.0, 2.5, 1.0],
            "gflops": [1.0, 0.7, 0.8, 2.0],
            "error_class": [None, None, None, None],
            "verified": [True, True, True, True],
            "predicted_score": [0.5, 0.4, 0.3, 0.9],
        }
    )
    row = {"id": 1, "workload": "w", "seed": 0, "preset": "quick", "status": "finished", "trials": 3}
    info = analysis.session_info("s.db", row, recs)
    assert (info["measured"], info["what_if"], info["best_record_id"]) == (3, 1, 4)
    table = analysis.strategy_table(recs).set_index("strategy")
    assert table.loc["a", "trials"] == 2 and table.loc["a", "share"] == pytest.approx(2 / 3)
    assert table.loc["a", "chosen_by"] == "controller 2" and table.loc["a", "best_record_id"] == 4
    assert analysis.round_quality(recs)["round"].tolist() == [1, 2]


def test_an_integer_workloads_throughput_is_in_gops_and_a_what_if_is_counted_apart(tmp_path):
    int8 = {"name": "q", "op": "matmul", "params": {"m": 8, "n": 8, "k": 8}, "dtype": "int8"}
    db = tmp_path / "q.db"
    make_store(
        db,
        [
            (
                [rec("no-rewrite", 2.0), rec("no-rewrite", 1.5), rec("no-rewrite", 1.0, round=0, chosen_by="user")],
                {"workload": "q", "spec": int8},
            ),
        ],
    )
    out = tmp_path / "q.html"
    write_report(str(db), str(out), with_tir=False)
    page = out.read_text()
    [(_, fig)] = figures(page).items()
    assert fig["layout"]["yaxis"]["title"]["text"] == "best-so-far GOPS"
    assert "best GOPS" in page and "best GFLOPS" not in page and " GOPS, no-rewrite" in page
    assert "2 of 3 trials measured, 0 errors, 1 what-if" in page
