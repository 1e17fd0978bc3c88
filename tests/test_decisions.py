"""The decision space (parallel coordinates, brushing), what mattered, cost-model quality per round and the CSV
export, against the recorded demo session (notebooks/data/demo_session.db) and hand-made data."""

import json
import math
import os
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from widgets import Dashboard
from widgets.costmodel import round_quality
from widgets.decisions import (
    DecisionColumn,
    DecisionTable,
    brushed_mask,
    cost_model_importance,
    decision_table,
    display_values,
    feature_label,
    measured_importance,
    parse_trials,
    program_decisions,
)
from widgets.stats import topk_recall
from widgets.table import records_frame
from workbench.analysis import pairwise_accuracy
from workbench.replay import ReplaySession
from workbench.store import RecordStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_DB = os.path.join(ROOT, "notebooks", "data", "demo_session.db")


@pytest.fixture(scope="module")
def demo_records():
    store = RecordStore(DEMO_DB, readonly=True)
    df = store.records(store.sessions()[-1]["id"], with_trace=True)
    store.close()
    return df


def fed_dashboard(events, db=DEMO_DB):
    dash = Dashboard.replay(db, autopump=False)
    dash.attach(ReplaySession(db))
    for ev in events:
        dash.queue.put(ev)
    dash.pump_once()
    return dash


def encode(obj) -> str:
    """A Python structure as TVM's save_json object graph (strings, ints, lists), as a stored trace is."""
    nodes = []

    def add(o):
        if isinstance(o, bool):
            nodes.append({"type": "bool", "data": o})
        elif isinstance(o, int):
            nodes.append({"type": "int", "data": o})
        elif isinstance(o, str):
            nodes.append({"type": "ffi.String", "data": o})
        elif o is None:
            nodes.append({"type": "None"})
        else:
            nodes.append({"type": "ffi.Array", "data": [add(x) for x in o]})
        return len(nodes) - 1

    root = add(obj)
    return json.dumps({"root_index": root, "nodes": nodes})


def conv_like_trace(cache_write=True, pad_location=5, postproc=True):
    """A tiled block (2 spatial loops of 4 levels, 1 reduction loop of 2) as MetaSchedule's llvm rules write it,
    with a producer block at a sampled compute location and the parallel/vectorize postprocessing."""
    loops = lambda p, n: [f"l{p}_{i}" for i in range(n)]  # noqa: E731
    i_, j_, k_ = loops("i", 4), loops("j", 4), loops("k", 2)
    insts = [
        ["GetSBlock", [], ["pad", "main"], ["b0"]],
        ["GetSBlock", [], ["conv", "main"], ["b1"]],
        ["GetSBlock", [], ["root", "main"], ["b2"]],
        ["Annotate", ["b1", '"SSRSRS"'], ["meta_schedule.tiling_structure"], []],
        ["GetLoops", ["b1"], [], ["li", "lj", "lk"]],
        ["SamplePerfectTile", ["li"], [4, 64], ["vi0", "vi1", "vi2", "vi3"]],
        ["Split", ["li", "vi0", "vi1", "vi2", "vi3"], [True, False], i_],
        ["SamplePerfectTile", ["lj"], [4, 64], ["vj0", "vj1", "vj2", "vj3"]],
        ["Split", ["lj", "vj0", "vj1", "vj2", "vj3"], [True, False], j_],
        ["SamplePerfectTile", ["lk"], [2, 64], ["vk0", "vk1"]],
        ["Split", ["lk", "vk0", "vk1"], [True, False], k_],
        ["Reorder", [i_[0], j_[0], i_[1], j_[1], k_[0], i_[2], j_[2], k_[1], i_[3], j_[3]], [], []],
    ]
    if cache_write:
        insts += [
            ["CacheWrite", ["b1", []], [0, "global"], ["b3"]],
            ["ReverseComputeAt", ["b3", j_[1]], [1, -1], []],
        ]
    decisions = [[5, [2, 4, 4, 2]], [7, [1, 8, 2, 4]], [9, [16, 4]], [len(insts), 2]]
    insts += [
        ["SampleCategorical", [], [[0, 16, 64, 512], [1, 1, 1, 1]], ["vu"]],
        ["Annotate", ["b2", "vu"], ["meta_schedule.unroll_explicit"], []],
    ]
    if pad_location is not None:
        insts += [
            ["SampleComputeLocation", ["b0"], [], ["lpad"]],
            ["ComputeAt", ["b0", "lpad"], [1, -1], []],
        ]
        decisions.append([len(insts) - 2, pad_location])
    if postproc:
        insts += [["EnterPostproc", [], [], []], ["GetSBlock", [], ["root", "main"], ["r"]]]
        insts += [["GetChildBlocks", ["r"], [], ["c0", "c1"]]]
        if pad_location is not None and pad_location >= 0:
            # the producer sits inside the tiled nest: its outer 3 loops are the nest's, fused in parallel first
            insts += [
                ["GetLoops", ["c0"], [], loops("p", 7)],
                ["Fuse", loops("p", 3), [1], ["fp"]],
                ["Parallel", ["fp"], [], []],
                ["GetLoops", ["c1"], [], loops("c", 8)],  # 10 - 3 + 1: the tiled nest after that fuse
            ]
        else:
            # the producer is a nest of its own at the root: its parallel loop is not the tiled computation's
            insts += [
                ["GetLoops", ["c0"], [], loops("p", 4)],
                ["Fuse", loops("p", 2), [1], ["fp"]],
                ["Parallel", ["fp"], [], []],
                ["GetLoops", ["c1"], [], loops("c", 10)],
                ["Fuse", loops("c", 2), [1], ["fc"]],
                ["Parallel", ["fc"], [], []],
            ]
        last = insts[-1][3][-1] if insts[-1][0] == "GetLoops" else None
        last = last or [x for x in insts if x[0] == "GetLoops"][-1][3][-1]
        insts += [["Fuse", [last], [1], ["fv"]], ["Vectorize", ["fv"], [], []]]
    return encode([insts, decisions])


# ---------------------------------------------------------------- reading traces


def test_program_decisions_names_what_each_decision_decides():
    p = program_decisions(conv_like_trace())
    v = p.values
    assert v[("tile", "conv", 0)] == [2, 4, 4, 2] and v[("tile", "conv", 2)] == [16, 4]
    assert v[("cat", "meta_schedule.unroll_explicit")] == 2 and v[("loc", "pad")] == 5
    # the nest is i0 j0 i1 j1 k0 i2 j2 k1 i3 j3: the producer's 3-loop prefix fuse is the tiled nest's parallel loop
    assert v[("parallel",)] == 2 * 1 * 4
    assert v[("vectorize",)] == 4  # j3, the innermost loop
    assert p.sketch == ("CacheWrite", "ReverseComputeAt@3")
    assert "written back under loop 4 of 10" in p.sketch_text
    root = program_decisions(conv_like_trace(cache_write=False, pad_location=-1))
    assert root.values[("parallel",)] == 2 * 1  # the producer's own parallel loop is not counted
    assert root.values[("loc", "pad")] == -1 and root.sketch == ()
    bare = program_decisions(conv_like_trace(postproc=False))
    assert ("parallel",) not in bare.values and ("vectorize",) not in bare.values


def test_decision_table_of_the_demo_session(demo_records):
    t = decision_table(demo_records)
    assert len(t.frame) == 32 and t.frame["id"].tolist() == demo_records["id"].tolist()
    names = t.decision_names
    assert names[:2] == ["strategy", "sketch"]
    assert {"ax0.0", "ax0.3", "ax1.3", "ax2.0", "ax2.1", "unroll", "parallel", "vectorize"} <= set(names)
    # a matmul-128: every loop's tile factors multiply to 128 (log2: sum to 7)
    for loop, n in (("ax0", 4), ("ax1", 4), ("ax2", 2)):
        total = sum(t.frame[f"{loop}.{lvl}"] for lvl in range(n))
        assert np.allclose(total, 7.0)
    assert t.column("ax0.0").ticktext[0] == "1" and t.column("unroll").ticktext == ["0", "16", "64", "512"]
    strat = t.column("strategy")
    assert [strat.ticktext[int(c)] for c in t.frame["strategy"]] == demo_records["strategy"].tolist()
    # parallel/vectorize checked against the programs' TIR: T.parallel(64) for trial 3; T.parallel(128) and an
    # innermost T.vectorized(8) for trial 2; trial 16's computation stays serial and vectorizes 8
    row = t.frame.set_index("trial")
    assert 2 ** row.loc[3, "parallel"] == 64 and 2 ** row.loc[3, "vectorize"] == 1
    assert 2 ** row.loc[2, "parallel"] == 128 and 2 ** row.loc[2, "vectorize"] == 8
    assert 2 ** row.loc[16, "parallel"] == 1 and 2 ** row.loc[16, "vectorize"] == 8
    assert len(t.sketches) == 3 and any("cache write" in s for s in t.sketches)
    # without traces: the stored decisions list, named by position, same values
    by_list = decision_table(demo_records.drop(columns=["trace"]))
    assert np.allclose(by_list.frame["tile1.3"], t.frame["ax1.3"])
    assert by_list.frame["choice0"].tolist() == t.frame["unroll"].tolist()
    # loop names, when known, name the columns
    named = decision_table(demo_records, loop_names={"C": ["i", "j", "k"]})
    assert {"i.0", "j.3", "k.1"} <= set(named.decision_names)


def test_mixed_sketches_get_their_own_columns_and_missing_ones_sit_below_the_axis():
    recs = [
        {"id": 1, "trial": 1, "round": 1, "strategy": "no-rewrite", "gflops": 10.0, "error_class": None},
        {"id": 2, "trial": 2, "round": 1, "strategy": "packed", "gflops": 20.0, "error_class": None},
        {"id": 3, "trial": 3, "round": 1, "strategy": "packed", "gflops": None, "error_class": "build-error"},
    ]
    traces = {1: conv_like_trace(), 2: conv_like_trace(cache_write=False, pad_location=None)}
    t = decision_table(recs, traces)
    assert t.frame["id"].tolist() == [1, 2]  # a failed candidate has no throughput to colour or explain
    assert t.frame["sketch"].tolist() == [0, 1] and len(t.sketches) == 2
    assert t.frame["pad at"].iloc[0] == 5 and math.isnan(t.frame["pad at"].iloc[1])
    assert t.column("pad at").ticktext == ["loop 5"]
    shown = display_values(t)
    assert shown["pad at"].iloc[1] < -2  # below "inline" (-2): never mistaken for a real location
    assert shown["GFLOPS"].tolist() == [10.0, 20.0]
    assert t.column("strategy").ticktext == ["no-rewrite", "packed"]


def test_brushed_mask_and_trial_lists():
    values = pd.DataFrame({"a": [0.0, 1.0, 2.0, 3.0], "b": [5.0, 5.0, 6.0, 6.0]})
    assert brushed_mask(values, {}) is None and brushed_mask(values, {"a": None}) is None
    assert brushed_mask(values, {"a": [0.5, 2.5]}).tolist() == [False, True, True, False]
    assert brushed_mask(values, {"a": [[0, 0.5], [2.5, 3]], "b": (6, 6)}).tolist() == [False, False, False, True]
    assert parse_trials("3, 7-9;12") == [3, 7, 8, 9, 12] and parse_trials("") == []
    with pytest.raises(ValueError, match="'x'"):
        parse_trials("3, x")


# ---------------------------------------------------------------- what mattered


def synthetic_table(n=64, seed=0) -> DecisionTable:
    """Three tile decisions; only ``a`` decides the speed (x2 per doubling), the others are noise."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "id": range(n),
            "trial": range(1, n + 1),
            "round": 1,
            "a": rng.integers(0, 6, n).astype(float),
            "b": rng.integers(0, 6, n).astype(float),
            "c": rng.integers(0, 6, n).astype(float),
        }
    )
    frame["gflops"] = 10.0 * 2.0 ** frame["a"] * rng.uniform(0.97, 1.03, n)
    cols = [DecisionColumn(c, "tile", f"tile {c}", "") for c in ("a", "b", "c")]
    return DecisionTable(frame, cols, ["sketch"])


def test_importance_ranks_the_decision_that_decides_first():
    imp = measured_importance(synthetic_table())
    assert imp["decision"].iloc[0] == "a"
    assert imp["share"].iloc[0] > 0.8 and imp["share"].sum() == pytest.approx(1.0)
    # mean |SHAP| in log-GFLOPS: a spans log(2^5) = 3.5 around its mean, so its mean contribution is ~1
    assert 0.5 < imp["importance"].iloc[0] < 2.0
    assert measured_importance(synthetic_table(n=15)) is None  # not enough records
    by_group = measured_importance(synthetic_table(), by="group")
    assert by_group["decision"].iloc[0] == "tile a"
    assert measured_importance(synthetic_table(), seed=0).equals(imp)  # seeded: the same every time


def test_cost_model_feature_names():
    assert feature_label("f0") == ("float_mad", "arithmetic")
    assert feature_label("f16") == ("vectorize num", "vectorize")
    assert feature_label("f57") == ("buffer0 access=read", "buffer access")
    assert feature_label("f161") == ("outer_prod", "outer loops")
    assert feature_label("f163") == ("auto_unroll_max_step", "outer loops")
    assert feature_label("strategy=packed") == ("strategy=packed", "strategy")
    df = cost_model_importance({"f0": 1.0, "f161": 3.0})
    assert df["feature"].tolist() == ["f161", "f0"] and df["share"].tolist() == [0.75, 0.25]
    assert cost_model_importance({}).empty and cost_model_importance(None).empty


# ---------------------------------------------------------------- cost-model quality per round


def test_pairwise_accuracy_and_recall_at_k_by_hand():
    # 4 programs, 6 pairs with different GFLOPS; the score orders 5 of them right (it swaps the two slowest)
    assert pairwise_accuracy([0.9, 0.8, 0.1, 0.2], [40, 30, 20, 10]) == pytest.approx(5 / 6)
    assert pairwise_accuracy([1, 2, 3], [3, 2, 1]) == 0.0
    assert pairwise_accuracy([0.5, 0.5], [2, 1]) == 0.0  # a tie in the score is not a correct order
    assert math.isnan(pairwise_accuracy([1, 2], [3, 3]))
    # recall@2: the true top 2 are programs 0 and 1; the model's top 2 are 0 and 2
    assert topk_recall([0.9, 0.1, 0.8, 0.0], [40, 30, 20, 10], 2) == 0.5
    recs = [
        {"round": 1, "strategy": "s", "predicted_score": p, "gflops": g, "error_class": None}
        for p, g in ((0.9, 40), (0.8, 30), (0.1, 20), (0.2, 10))
    ] + [
        {"round": 2, "strategy": "s", "predicted_score": p, "gflops": g, "error_class": None}
        for p, g in ((1, 1), (2, 2))
    ]
    recs.append({"round": 2, "strategy": "s", "predicted_score": 3.0, "gflops": None, "error_class": "run-error"})
    q = round_quality(recs).set_index("round")
    assert q.loc[1, "pairwise"] == pytest.approx(5 / 6) and q.loc[1, "k"] == 1 and q.loc[1, "topk_recall"] == 1.0
    # round 2: the failure is left out of the pairs, but counts as 0 GFLOPS for recall@k (the model put it first)
    assert q.loc[2, "pairwise"] == 1.0 and q.loc[2, "topk_recall"] == 0.0
    # a wrong result keeps its timing (and so its GFLOPS) in the store, but it is a failure all the same; a
    # person's what-if (round 0) belongs to no round
    r3 = dict(round=3, strategy="s", chosen_by="controller")
    more = [{**r, "chosen_by": "controller"} for r in recs] + [
        {**r3, "predicted_score": 9.0, "gflops": 99.0, "error_class": "wrong-result"},  # the model's pick
        {**r3, "predicted_score": 1.0, "gflops": 2.0, "error_class": None},
        dict(round=0, strategy="s", chosen_by="user", predicted_score=1.0, gflops=5.0, error_class=None),
    ]
    q = round_quality(more).set_index("round")
    assert list(q.index) == [1, 2, 3] and q.loc[3, "topk_recall"] == 0.0


def test_cost_model_view_draws_pairwise_accuracy(demo_events):
    dash = fed_dashboard(demo_events)
    names = [tr.name for tr in dash.cost_model.fig.data]
    assert {"Spearman ρ", "Kendall τ", "pairwise accuracy", "recall@k"} <= set(names)
    line = dash.cost_model.fig.data[names.index("pairwise accuracy")]
    assert list(line.x) == dash.cost_model.quality["round"].tolist()
    assert all(v is None or 0 <= v <= 1 for v in line.y)


# ---------------------------------------------------------------- the view, the brush, the export


def test_brushing_a_dimension_filters_the_records_table(demo_events, tmp_path):
    dash = fed_dashboard(demo_events)
    dash.tabs.selected_index = list(dash.tabs.titles).index(
        "Decision space"
    )  # the Decision space tab: drawn when shown
    view = dash.decisions
    par = view.fig.data[0]
    labels = [d.label for d in par.dimensions]
    assert labels[:2] == ["strategy", "sketch"] and labels[-1] == "GFLOPS" and "unroll" in labels
    assert len(par.dimensions[0].values) == 32 and len(par.line.color) == 32
    assert "32</b> measured programs" in view.header.value
    gflops = np.array(par.dimensions[-1].values)
    lo = float(np.median(gflops))
    inside = {int(i) for i, g in zip(view.table.frame["id"], gflops) if g >= lo}

    par.dimensions[-1].constraintrange = [lo, float(gflops.max()) + 1]  # as the browser's brush sets it
    shown = set(dash.table.frame()["id"])
    assert shown == inside and view.brushed_ids == inside
    assert "decision-space brush: 16 of 32" in dash.table.filter_note.value
    rings = [tr for tr in dash.throughput.fig.data if tr.meta == "decision-space-highlight"]
    assert len(rings) == 2 and len(rings[0].x) == len(inside)
    out = dash.table.to_csv(str(tmp_path / "brushed.csv"))
    assert set(pd.read_csv(out)["id"]) == inside

    # a second range on a categorical axis, sent as the browser sends it (a restyle of the trace)
    unroll = labels.index("unroll")
    code = par.dimensions[unroll].values[0]
    dash.decisions.fig._js2py_restyle = {
        "style_data": {f"dimensions[{unroll}].constraintrange": [[code - 0.5, code + 0.5]]},
        "style_traces": [0],
        "source_view_id": "browser",
    }
    both = {i for i in inside if view.table.frame.set_index("id").loc[i, "unroll"] == code}
    assert set(dash.table.frame()["id"]) == both

    view.clear()  # no brush: every record again, no rings
    assert dash.table.filter_ids is None and len(dash.table.frame()) == 32
    assert all(len(tr.x) == 0 for tr in dash.throughput.fig.data if tr.meta == "decision-space-highlight")
    assert all(d.constraintrange is None for d in view.fig.data[0].dimensions)


def test_selecting_trials_highlights_them_in_the_parallel_coordinates(demo_events):
    dash = fed_dashboard(demo_events)
    dash.tabs.selected_index = list(dash.tabs.titles).index("Decision space")
    view = dash.decisions
    view.select_trials("3, 7-9")
    par = view.fig.data[0]
    sel = par.dimensions[0]
    assert sel.label == "selected" and sum(sel.values) == 4 and tuple(sel.constraintrange) == (0.5, 1.5)
    assert dash.table.filter_ids is None  # a selection highlights; only a brush filters the table
    view.select_trials("3, x")
    assert "not a trial number" in view.message.value
    dash.table.sort_by.value, dash.table.rows.value = "GFLOPS", 25
    dash.table.highlight_button.click()  # the table's shown rows: its 25 fastest
    assert view.selected_ids == set(dash.table.frame()["id"]) and sum(view.fig.data[0].dimensions[0].values) == 25
    # a box selection on the throughput curves selects there too
    raw = dash.throughput.fig.data[0]
    from plotly.callbacks import BoxSelector, Points

    view.select([])
    pts = Points(point_inds=[0, 1], xs=list(raw.x[:2]), ys=list(raw.y[:2]), trace_name=raw.name, trace_index=0)
    raw._dispatch_on_selection(pts, BoxSelector(xrange=[0, 1], yrange=[0, 1]))
    assert view.selected_ids == set(dash.throughput._ids[0][:2])
    assert view.fig.data[0].dimensions[0].label == "selected"


def test_what_matters_on_the_recorded_session(demo_events):
    dash = fed_dashboard(demo_events)
    view = dash.decisions
    assert view.importance is None  # a hidden tab does no work
    dash.tabs.selected_index = list(dash.tabs.titles).index("Decision space")
    imp = view.importance
    assert imp is not None and len(imp) >= 3 and imp["share"].sum() == pytest.approx(1.0)
    assert len(view.importance_fig.data[0].x) == min(15, len(imp))
    # a replay has no model to ask and the recording's model_trained events carry no importance
    assert "not known here" in view.importance_note.value and len(view.importance_fig.data[1].x) == 0

    class FakeModel:
        def feature_importance(self):
            return {"f161": 5.0, "f3": 1.0}

    view.cost_model_of = FakeModel
    view._importance_dirty = True
    dash._poke()
    assert list(view.importance_fig.data[1].x) == [1.0, 5.0]  # largest at the top of the bars
    assert "outer_prod (f161)" in view.importance_fig.data[1].y[-1]


def test_what_matters_needs_enough_records(demo_events):
    first = [e for e in demo_events if e.kind != "candidate_measured"][:3]
    measured = [e for e in demo_events if e.kind == "candidate_measured"][:10]
    dash = fed_dashboard(first + measured)
    dash.tabs.selected_index = list(dash.tabs.titles).index("Decision space")
    assert "not enough records yet (10 measured programs; it needs 16)" in dash.decisions.importance_note.value


def test_export_csv_writes_next_to_the_store(demo_events, tmp_path):
    db = tmp_path / "copy.db"
    shutil.copy(DEMO_DB, db)
    dash = fed_dashboard(demo_events, db=str(db))
    dash.table.export_button.click()
    path = tmp_path / "copy-session1-records.csv"
    assert (
        path.exists()
        and str(path) in dash.table.export_status.value
        and "all of them" in dash.table.export_status.value
    )
    df = pd.read_csv(path)
    assert len(df) == 32 and {"trial", "strategy", "gflops", "decisions", "run_secs", "mod_hash"} <= set(df.columns)
    assert json.loads(df["run_secs"].iloc[0])  # lists are JSON text
    dash.decisions.brush({"GFLOPS": [0, 1e9]})
    dash.table.export_button.click()
    assert (tmp_path / "copy-session1-records-brushed.csv").exists()
    assert "inside the decision-space brush" in dash.table.export_status.value
    recs = [{"id": 1, "trial": 1, "noise": {"a": 1}}, {"id": 2, "trial": 2, "extra": "x"}]
    frame = records_frame(recs)
    assert frame["noise"].iloc[0] == '{"a": 1}' and frame["extra"].iloc[1] == "x"
    assert records_frame(recs, ids={2})["id"].tolist() == [2]


def test_parallel_and_vectorize_match_the_programs(demo_records):
    """The extents read from the trace are the ones the program's TIR has (TVM replays the stored traces)."""
    from workbench import space
    from workbench.workloads import workload_from_spec

    store = RecordStore(DEMO_DB, readonly=True)
    wl = workload_from_spec(store.sessions()[-1]["spec"])
    store.close()
    for rec in demo_records[demo_records["trial"].isin([1, 2, 3, 9, 16, 17, 25, 32])].itertuples():
        p = program_decisions(rec.trace)
        tir = space.schedule_from_trace_json(wl, rec.trace).mod.script()
        parallel = [int(x) for x in re.findall(r"T\.parallel\((\d+)", tir)]
        vectorized = [int(x) for x in re.findall(r"T\.vectorized\((\d+)", tir)]
        assert p.values[("parallel",)] in parallel + [1], (rec.trial, parallel)
        assert p.values[("vectorize",)] in vectorized + [1], (rec.trial, vectorized)
