"""The loop's timeline: phase spans per round into a frame, its summary, and the view drawing them."""

import pytest

from widgets.model import SessionModel
from widgets.timeline import LANES, TimelineView, overlap_summary, summary_html, timeline_frame
from workbench.events import Event

ROUNDS = [
    {
        "round": 1,
        "strategy": "no-rewrite",
        "phase_spans": [
            ["cross_seed", 0.0, 0.0],  # under a millisecond: left out
            ["search", 0.0, 1.0],
            ["features", 1.0, 1.2],
            ["search_overlapped", 1.25, 1.9],
            ["build", 1.2, 2.0],
            ["measure", 2.0, 3.0],
            ["train", 3.0, 3.1],
        ],
    },
    {
        "round": 2,
        "strategy": "no-rewrite<b>",
        "phase_spans": [["search", 3.1, 3.2], ["build", 3.3, 4.0], ["measure", 4.0, 5.0]],
    },
    {"round": 3, "strategy": "x"},  # an old event without spans
]


def test_the_frame_has_one_row_per_span_in_time_order():
    f = timeline_frame(ROUNDS)
    assert list(f.columns) == ["round", "strategy", "phase", "lane", "start", "end", "seconds"]
    assert len(f) == 9 and "cross_seed" not in set(f["phase"])
    assert f["start"].is_monotonic_increasing
    ahead = f[f["phase"] == "search_overlapped"].iloc[0]
    build = f[(f["phase"] == "build") & (f["round"] == 1)].iloc[0]
    assert build["start"] <= ahead["start"] and ahead["end"] <= build["end"]
    assert ahead["lane"] == "search ahead (while building or timing remotely)"
    assert timeline_frame([]).empty


def test_the_summary_counts_the_search_that_ran_while_building():
    s = overlap_summary(timeline_frame(ROUNDS))
    assert s["rounds"] == 2 and s["wall_s"] == pytest.approx(5.0)
    assert s["overlapped_s"] == pytest.approx(0.65)
    assert s["overlapped_share"] == pytest.approx(0.65 / (0.65 + 1.1), abs=1e-3)
    assert s["per_phase"]["measure"] == pytest.approx(2.0)
    text = summary_html(s)
    assert "ran while a round built" in text and "2 rounds over 5.0 s" in text
    assert overlap_summary(timeline_frame([]))["rounds"] == 0
    assert "no round" in summary_html(overlap_summary(timeline_frame([])))


def test_the_view_draws_a_lane_per_phase_from_round_finished_events():
    m = SessionModel()
    view = TimelineView()
    for r in ROUNDS[:2]:
        data = {
            "round": r["round"],
            "strategy": r["strategy"],
            "measured": 2,
            "errors": 0,
            "round_best_ms": 1.0,
            "best_ms": 1.0,
            "pruned": [],
            "controller": {},
            "phase_seconds": {},
            "phase_spans": r["phase_spans"],
        }
        m.apply(Event("round_finished", 1, 0.0, 0.0, data))
    view.refresh(m, m.take_changes())
    lanes = [t.y[0] for t in view.fig.data]
    order = [lab for _p, lab, _c in LANES]
    assert (
        lanes == [lab for lab in order if lab in lanes] and "search ahead (while building or timing remotely)" in lanes
    )
    build = next(t for t in view.fig.data if t.y[0] == "build")
    assert list(build.base) == [1.2, 3.3] and list(build.x) == pytest.approx([0.8, 0.7])
    assert "no-rewrite&lt;b&gt;" in str(build.customdata)  # a stored strategy name is escaped in the hover
    assert "ran while a round built" in view.header.value
