"""Comparing sessions: best-so-far curves from stores (workbench.analysis) and the CompareView that draws them.

Stores here are written directly with ``RecordStore`` (no tuning): each record's numbers are chosen so that
the expected curves can be worked out by hand.
"""

import math
import os

import numpy as np
import pytest

from workbench import analysis
from workbench.errors import WorkbenchError
from workbench.store import RecordStore

FLOPS = 1e6  # GFLOPS = FLOPS / latency_ms / 1e6 = 1 / latency_ms


def rec(strategy, latency, verified=True, error=None, elapsed=None, round=1, score=None, **text):
    return dict(
        strategy=strategy,
        latency=latency,
        verified=verified,
        error=error,
        elapsed=elapsed,
        round=round,
        score=score,
        **text,
    )


def make_session(store, records, workload="mm", strategy_arg="auto", seed=0, preset="quick", cost_model=None, **kw):
    """A finished session with ``records`` (dicts from ``rec``), measured in order as trials 1, 2, ..."""
    params = {"name": preset} | ({"cost_model": cost_model} if cost_model else {})
    sid = store.create_session(
        workload=workload,
        spec=kw.get("spec", {"name": workload, "op": "matmul", "params": {"m": 8, "n": 8, "k": 8}}),
        target=kw.get("target", {"kind": "llvm", "num-cores": 2}),
        preset=preset,
        preset_params=params,
        seed=seed,
        trials=len(records),
        strategies=sorted({r["strategy"] for r in records}),
        strategy_arg=strategy_arg,
        versions=kw.get("versions", {"tvm": "0.27.0.post1"}),
    )
    for i, r in enumerate(records, 1):
        lat = r["latency"]
        store.add_record(
            {
                "session_id": sid,
                "workload": workload,
                "trial": i,
                "round": r["round"],
                "strategy": r["strategy"],
                "chosen_by": r.get("chosen_by", "controller"),
                "trace": r.get("trace", "{}"),
                "decisions": r.get("decisions", "[]"),
                "mod_hash": r.get("mod_hash", f"{sid}-{i}"),
                "predicted_score": r["score"],
                "run_secs": [lat / 1e3] if lat else [],
                "latency_ms": lat,
                "gflops": None if lat is None else FLOPS / lat / 1e6,
                "error_class": r["error"],
                "error_msg": r.get("error_msg"),
                "verified": r["verified"] and r["error"] is None,
                "is_best": False,
                "seed": seed,
                "proposed_at": 0.0,
                "measured_at": 0.0,
                "elapsed_s": float(i if r["elapsed"] is None else r["elapsed"]),
            },
            None,
        )
    store.update_session(sid, status=kw.get("status", "finished"), naive_latency_ms=kw.get("naive", 10.0))
    return sid


def make_store(path, sessions):
    """A store at ``path`` with one session per ``(records, settings)``; returns the session ids."""
    store = RecordStore(str(path))
    try:
        return [make_session(store, records, **settings) for records, settings in sessions]
    finally:
        store.close()


# Latencies of three seeds of one configuration and one session of another, trial by trial.
SEEDS = {
    0: [4.0, 2.0, 3.0, 1.0],
    1: [5.0, 5.0, 2.5, 2.5],
    2: [2.0, 4.0, 4.0, 0.5],
}


@pytest.fixture
def seed_stores(tmp_path):
    """a.db: seeds 0 and 1 of (mm, auto, quick); b.db: seed 2 of it and one session of (mm, packed, quick)."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    ids_a = make_store(a, [([rec("no-rewrite", x) for x in SEEDS[s]], {"seed": s}) for s in (0, 1)])
    ids_b = make_store(
        b,
        [
            ([rec("no-rewrite", x, elapsed=2.0 * i) for i, x in enumerate(SEEDS[2], 1)], {"seed": 2}),
            ([rec("packed", 3.0), rec("packed", 1.5)], {"strategy_arg": "packed"}),
        ],
    )
    return str(a), str(b), ids_a, ids_b


def test_best_so_far_is_the_running_minimum_of_verified_records(tmp_path):
    db = tmp_path / "s.db"
    [sid] = make_store(
        db,
        [
            (
                [
                    rec("no-rewrite", 9.0, verified=False),  # not verified: no curve yet
                    rec("no-rewrite", 4.0),
                    rec("packed", 1.0, verified=False),  # faster but never verified: not a best
                    rec("packed", None, error="build-error"),
                    rec("packed", 2.0),
                    rec("no-rewrite", 3.0),
                ],
                {},
            )
        ],
    )
    c = analysis.best_so_far([(str(db), sid)])
    assert c["trial"].tolist() == [2, 3, 4, 5, 6]
    assert c["best_latency_ms"].tolist() == [4.0, 4.0, 4.0, 2.0, 2.0]
    assert np.allclose(c["best_gflops"], [0.25, 0.25, 0.25, 0.5, 0.5])
    assert c["improved"].tolist() == [True, False, False, True, False]
    assert c["record_id"].tolist() == [2, 2, 2, 5, 5]
    assert c["elapsed_s"].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]
    row = c.iloc[0]
    assert (row["workload"], row["strategy_arg"], row["seed"], row["preset"], row["cost_model"]) == (
        "mm",
        "auto",
        0,
        "quick",
        "pack-sum",  # a store written before the choice existed
    )
    per = analysis.best_so_far([(str(db), sid)], per_strategy=True)
    nr, pk = per[per["strategy"] == "no-rewrite"], per[per["strategy"] == "packed"]
    assert nr["trial"].tolist() == [2, 6] and nr["best_latency_ms"].tolist() == [4.0, 3.0]
    assert pk["trial"].tolist() == [5] and pk["best_latency_ms"].tolist() == [2.0]


def test_curves_of_sessions_from_two_stores(seed_stores):
    a, b, ids_a, ids_b = seed_stores
    c = analysis.best_so_far([(a, ids_a[0]), (b, ids_b[1])])
    assert c.groupby("label").size().to_dict() == {
        f"a:{ids_a[0]} · mm · auto · seed 0 · quick/pack-sum": 4,
        f"b:{ids_b[1]} · mm · packed · seed 0 · quick/pack-sum": 2,
    }
    assert c[c["db"] == os.path.abspath(a)]["best_latency_ms"].tolist() == [4.0, 2.0, 2.0, 1.0]
    assert c[c["db"] == os.path.abspath(b)]["best_latency_ms"].tolist() == [3.0, 1.5]
    with pytest.raises(WorkbenchError, match="no session 9"):
        analysis.best_so_far([(a, 9)])
    with pytest.raises(WorkbenchError, match="does not exist"):
        analysis.best_so_far([(os.path.join(os.path.dirname(a), "missing.db"), 1)])
    with pytest.raises(WorkbenchError, match="db path, session id"):
        analysis.best_so_far([a])


def test_sessions_differing_only_by_seed_form_one_group_with_its_band(seed_stores):
    a, b, ids_a, ids_b = seed_stores
    refs = [(a, ids_a[0]), (a, ids_a[1]), (b, ids_b[0]), (b, ids_b[1])]
    g = analysis.seed_groups(analysis.best_so_far(refs), x="trial")
    assert set(g["group"]) == {"mm · auto · quick/pack-sum · seeds 0, 1, 2", "mm · packed · quick/pack-sum · seed 0"}
    auto = g[g["strategy_arg"] == "auto"]
    best = {s: np.minimum.accumulate(v) for s, v in SEEDS.items()}  # [4,2,2,1] [5,5,2.5,2.5] [2,2,2,0.5]
    stacked = np.vstack(list(best.values()))
    assert auto["trial"].tolist() == [1, 2, 3, 4] and auto["n"].tolist() == [3, 3, 3, 3]
    assert np.allclose(auto["median_latency_ms"], np.median(stacked, axis=0))
    assert np.allclose(auto["lo_latency_ms"], stacked.min(axis=0))
    assert np.allclose(auto["hi_latency_ms"], stacked.max(axis=0))
    assert np.allclose(auto["median_gflops"], np.median(1 / stacked, axis=0))
    assert np.allclose(auto["hi_gflops"], (1 / stacked).max(axis=0))
    assert auto["sessions"].iloc[0] == 3 and auto["seeds"].iloc[0] == "0, 1, 2"

    q = analysis.seed_groups(analysis.best_so_far(refs), x="trial", band="quartiles")
    qa = q[q["strategy_arg"] == "auto"]
    assert np.allclose(qa["lo_latency_ms"], np.quantile(stacked, 0.25, axis=0))
    assert np.allclose(qa["hi_latency_ms"], np.quantile(stacked, 0.75, axis=0))


def test_seed_groups_over_wall_time_sample_each_step_curve(seed_stores):
    """Seeds 0 and 1 were measured at 1, 2, 3, 4 s and seed 2 at 2, 4, 6, 8 s: at each time, each curve's last
    value; past a session's end it no longer counts."""
    a, b, ids_a, ids_b = seed_stores
    g = analysis.seed_groups(analysis.best_so_far([(a, ids_a[0]), (a, ids_a[1]), (b, ids_b[0])]), x="elapsed_s")
    assert g["elapsed_s"].tolist() == [1.0, 2.0, 3.0, 4.0, 6.0, 8.0]
    assert g["n"].tolist() == [2, 3, 3, 3, 1, 1]
    # at 3 s: seed 0 best 2.0, seed 1 best 2.5, seed 2 (at 2 s) best 2.0
    at3 = g[g["elapsed_s"] == 3.0].iloc[0]
    assert (at3["lo_latency_ms"], at3["median_latency_ms"], at3["hi_latency_ms"]) == (2.0, 2.0, 2.5)
    assert g[g["elapsed_s"] == 8.0].iloc[0]["median_latency_ms"] == 0.5
    with pytest.raises(WorkbenchError, match="x must be"):
        analysis.seed_groups(analysis.best_so_far([(a, ids_a[0])]), x="round")
    with pytest.raises(WorkbenchError, match="band must be"):
        analysis.seed_groups(analysis.best_so_far([(a, ids_a[0])]), band="stddev")


def test_list_sessions_and_picker_text(seed_stores):
    a, b, ids_a, ids_b = seed_stores
    s = analysis.list_sessions([a, b])
    assert len(s) == 4 and s["measured"].tolist() == [4, 4, 4, 2]
    assert s["best_latency_ms"].tolist() == [1.0, 2.5, 0.5, 1.5]
    info = s.iloc[3].to_dict()
    assert analysis.picker_text(info) == f"b:{ids_b[1]} · mm · packed · seed 0 · 0.7 GFLOPS"
    assert analysis.picker_text(dict(info, best_gflops=None)).endswith("no verified best")


def test_compare_series_per_session_and_per_seed_group(seed_stores):
    from widgets.compare import compare_series

    a, b, ids_a, ids_b = seed_stores
    refs = [(a, ids_a[0]), (a, ids_a[1]), (b, ids_b[0]), (b, ids_b[1])]
    lines = compare_series(refs)
    assert len(lines) == 4 and all(s["lo"] is None for s in lines)
    assert lines[0]["y"] == [0.25, 0.5, 0.5, 1.0] and lines[0]["x"] == [1, 2, 3, 4]
    lat = compare_series(refs[:1], metric="latency_ms", x="elapsed_s")
    assert lat[0]["y"] == [4.0, 2.0, 2.0, 1.0] and lat[0]["x"] == [1.0, 2.0, 3.0, 4.0]

    groups = compare_series(refs, by_seed=True)
    assert [len(g["sessions"]) for g in groups] == [3, 1]
    auto = groups[0]
    assert auto["y"] == pytest.approx([0.25, 0.5, 0.5, 1.0])  # median GFLOPS per trial of the three seeds
    assert auto["lo"] == pytest.approx([0.2, 0.2, 0.4, 0.4]) and auto["hi"] == pytest.approx([0.5, 0.5, 0.5, 2.0])
    assert auto["n"] == [3, 3, 3, 3]
    assert set(auto["sessions"]) == {
        (os.path.abspath(a), ids_a[0]),
        (os.path.abspath(a), ids_a[1]),
        (os.path.abspath(b), ids_b[0]),
    }


def test_compare_view_draws_what_compare_series_returns(seed_stores, tmp_path):
    from widgets import CompareView

    a, b, ids_a, ids_b = seed_stores
    v = CompareView([a, b])
    texts = [t for t, _v in v.picker.options]
    assert texts[0] == f"a:{ids_a[0]} · mm · auto · seed 0 · 1.0 GFLOPS" and len(texts) == 4
    assert len(v.picker.value) == 4 and len(v.fig.data) == 4  # all picked: one line each
    assert list(v.fig.data[0].y) == v.series[0]["y"]
    assert v.band.disabled

    v.by_seed.value = True  # two groups: one with a band (upper edge, filled lower edge, median), one of one
    assert not v.band.disabled
    assert len(v.series) == 2 and len(v.fig.data) == 6
    assert v.fig.data[1].fill == "tonexty" and list(v.fig.data[2].y) == pytest.approx(v.series[0]["y"])

    v.x.value = "elapsed_s"
    assert v.fig.layout.xaxis.title.text == "elapsed (s)"
    v.picker.value = ()
    assert len(v.fig.data) == 0 and "pick" in v.message.value

    v.path.value = str(tmp_path / "missing.db")
    v._load_clicked()
    assert "does not exist" in v.message.value

    only = CompareView(b, sessions=[(b, ids_b[1])])
    assert only.picker.value == ((os.path.abspath(b), ids_b[1]),) and len(only.fig.data) == 1


def test_compare_view_escapes_stored_names(tmp_path):
    from widgets import CompareView

    payload = "<img src=x onerror=alert(1)>"
    db = tmp_path / "x.db"
    make_store(db, [([rec("no-rewrite", 1.0)], {"workload": payload, "strategy_arg": payload})])
    v = CompareView(str(db))
    assert payload not in v.fig.data[0].name and "&lt;img" in v.fig.data[0].name
    assert payload not in v.fig.data[0].hovertemplate
    assert math.isclose(v.fig.data[0].y[0], 1.0)


def test_an_int8_session_counts_in_gops_in_the_picker_the_axis_and_the_session_list(tmp_path):
    from widgets import CompareView
    from widgets.sessions import session_label, session_rows, sessions_frame, sessions_html

    db = tmp_path / "q.db"
    int8 = {"name": "mm8", "op": "matmul", "dtype": "int8", "params": {"m": 8, "n": 8, "k": 8}}
    fp32_id, int8_id = make_store(db, [([rec("no-rewrite", 1.0)], {}), ([rec("no-rewrite", 1.0)], {"spec": int8})])
    v = CompareView(str(db))
    texts = [t for t, _v in v.picker.options]
    assert texts[0].endswith("GFLOPS") and texts[1].endswith(" GOPS")
    assert v.fig.layout.yaxis.title.text == "best-so-far GFLOPS / GOPS"
    v.picker.value = ((os.path.abspath(db), int8_id),)
    assert v.fig.layout.yaxis.title.text == "best-so-far GOPS"
    v.metric.value = "latency_ms"
    assert v.fig.layout.yaxis.title.text == "best-so-far latency (ms)"

    rows = session_rows(str(db))
    assert [r["rate_unit"] for r in rows] == ["GFLOPS", "GOPS"]
    assert session_label(rows[1]).endswith(" GOPS") and session_label(rows[0]).endswith(" GFLOPS")
    page = sessions_html(sessions_frame(rows))
    assert "<th>best rate</th>" in page and " GOPS</td>" in page and " GFLOPS</td>" in page
