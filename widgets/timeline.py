"""When each step of the loop ran, round by round: a timeline of the phases from ``round_finished.phase_spans``.

It shows where a round's wall time goes (search, features, build, timing, training) and how much of the next
round's search ran while this round built (preset ``overlap``): those spans sit on their own lane, inside the
build spans they overlapped; with a runner that times kernels on other machines (RPC) they may reach into the
timing span too. A local runner's timing never overlaps anything else on it.
"""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from .live_figure import LiveFigure
from .model import CONTROLLER, SESSION

# (phase, lane label, colour), top lane first
LANES = [
    ("cross_seed", "cross-seed", "#adb5bd"),
    ("search", "search", "#1c7ed6"),
    ("search_overlapped", "search ahead (while building or timing remotely)", "#74c0fc"),
    ("features", "features + prediction", "#7048e8"),
    ("build", "build", "#f59f00"),
    ("measure", "timing (+ verify, record)", "#e03131"),
    ("pair", "paired layouts of a new best (build + timing)", "#e8590c"),
    ("train", "train the cost model", "#2f9e44"),
]
LABEL = {p: lab for p, lab, _c in LANES}
COLOR = {p: c for p, _l, c in LANES}
COLUMNS = ["round", "strategy", "phase", "lane", "start", "end", "seconds"]


def timeline_frame(rounds) -> pd.DataFrame:
    """One row per span of a round's phases: ``round, strategy, phase, lane, start, end, seconds`` (session-elapsed
    seconds), from the rounds' ``phase_spans`` (``rounds``: dicts with ``round``, ``strategy`` and ``phase_spans``,
    e.g. ``SessionModel.rounds.values()`` or the data of ``round_finished`` events). Spans under 1 ms are left out."""
    rows = []
    for r in rounds:
        for phase, start, end in r.get("phase_spans") or []:
            if end - start < 1e-3:
                continue
            rows.append(
                {
                    "round": r.get("round"),
                    "strategy": r.get("strategy"),
                    "phase": phase,
                    "lane": LABEL.get(phase, phase),
                    "start": float(start),
                    "end": float(end),
                    "seconds": float(end) - float(start),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(["start", "lane"], ignore_index=True)


def overlap_summary(frame: pd.DataFrame) -> dict:
    """Seconds per phase, the rounds' wall span, and the search seconds that ran inside builds."""
    if frame.empty:
        return {"rounds": 0, "wall_s": 0.0, "per_phase": {}, "overlapped_s": 0.0, "overlapped_share": None}
    per = frame.groupby("phase")["seconds"].sum().round(3).to_dict()
    wall = float(frame["end"].max() - frame["start"].min())
    ahead = float(per.get("search_overlapped", 0.0))
    searched = ahead + float(per.get("search", 0.0))
    return {
        "rounds": int(frame["round"].nunique()),
        "wall_s": round(wall, 3),
        "per_phase": per,
        "overlapped_s": round(ahead, 3),
        "overlapped_share": round(ahead / searched, 3) if searched > 0 else None,
    }


def summary_html(s: dict) -> str:
    if not s["rounds"]:
        return "<i>no round finished yet</i>"
    parts = ", ".join(f"{html.escape(LABEL.get(k, k))} {v:.1f} s" for k, v in sorted(s["per_phase"].items()))
    text = f"{s['rounds']} rounds over {s['wall_s']:.1f} s: {parts}."
    if s["overlapped_share"] is not None and s["overlapped_s"] > 0:
        text += (
            f" {s['overlapped_s']:.1f} s of search ({s['overlapped_share']:.0%} of it) ran while a round built"
            " or was timed remotely (preset <code>overlap</code>)."
        )
    return f"<span style='font-size:12px'>{text}</span>"


class TimelineView:
    """A plotly FigureWidget with one lane per phase; ``refresh(model, changes)`` redraws it when a round ends."""

    def __init__(self, height: int = 300):
        import ipywidgets as W

        self.fig = LiveFigure(
            layout=dict(
                height=height,
                template="plotly_white",
                margin=dict(l=190, r=10, t=10, b=40),
                barmode="overlay",
                showlegend=False,
                xaxis_title="session time (s)",
                yaxis=dict(categoryorder="array", categoryarray=[lab for _p, lab, _c in reversed(LANES)]),
            )
        )
        self.header = W.HTML("<i>no round finished yet</i>")
        self.widget = W.VBox([self.header, self.fig.box])
        self.frame = timeline_frame([])

    def refresh(self, model, changes: set) -> None:
        if not changes & {CONTROLLER, SESSION}:
            return
        frame = timeline_frame(model.rounds.values())
        if len(frame) == len(self.frame) and (frame.empty or frame["end"].max() == self.frame["end"].max()):
            return
        self.frame = frame
        traces = []
        for phase, lane, color in LANES:
            part = frame[frame["phase"] == phase]
            if part.empty:
                continue
            traces.append(
                go.Bar(
                    orientation="h",
                    y=[lane] * len(part),
                    base=part["start"].tolist(),
                    x=part["seconds"].tolist(),
                    marker_color=color,
                    name=lane,
                    customdata=list(zip(part["round"], part["strategy"].map(lambda s: html.escape(str(s))))),
                    hovertemplate=lane + "<br>round %{customdata[0]} (%{customdata[1]})<br>"
                    "%{base:.2f} s + %{x:.2f} s<extra></extra>",
                )
            )
        with self.fig.batch_update():
            self.fig.data = []
        self.fig.add_traces(traces)
        self.header.value = summary_html(overlap_summary(frame))
