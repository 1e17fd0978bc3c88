"""The cost model's predictions against what was measured, and how well it ranked each round."""

from __future__ import annotations

import html
import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench import analysis
from workbench.dtypes import spec_rate_unit

from .common import candidate_text, color_of
from .live_figure import LiveFigure
from .model import RECORDS, SESSION
from .stats import decimate

QUALITY = [  # round_quality column, line name, dash
    ("spearman", "Spearman ρ", "solid"),
    ("kendall", "Kendall τ", "dot"),
    ("pairwise", "pairwise accuracy", "dashdot"),
]


def round_quality(records: list[dict], topk_share: float = 0.25) -> pd.DataFrame:
    """One row per round: how well the predicted score (made before measuring) ranked the round's candidates;
    ``workbench.analysis.round_quality`` of the view's records, so the dashboard and the HTML report agree.

    - ``spearman``, ``kendall``: rank correlation (Spearman's rho, Kendall's tau-b) of predicted score and
      measured GFLOPS over the round's successfully measured candidates;
    - ``pairwise``: pairwise accuracy, over the pairs of successfully measured candidates of the round with
      different GFLOPS, the share the predicted score orders the same way (a tied score counts as wrong; 0.5 is
      a coin toss);
    - ``topk_recall`` (recall@k, ``k`` = ``topk_share`` of the round, at least 1): the share of the round's true
      top k (by measured GFLOPS) that are also among the model's top k predictions. Failed candidates, a wrong
      result included, count as 0 GFLOPS here (the model should not put them in its top k).

    Failed candidates have no throughput and are left out of the other three. A person's what-if records
    (round 0, ``workbench.whatif``) belong to no search round and are left out.
    """
    return analysis.round_quality(pd.DataFrame(records), topk_share=topk_share)


class CostModelView:
    def __init__(self, max_points: int = 400, height: int = 340):
        self.max_points = max_points
        fig = make_subplots(
            rows=1,
            cols=2,
            column_widths=[0.58, 0.42],
            horizontal_spacing=0.09,
            subplot_titles=("predicted score vs measured", "ranking quality per round"),
        )
        fig.update_layout(
            height=height,
            margin=dict(l=50, r=10, t=40, b=40),
            template="plotly_white",
            legend=dict(orientation="h", y=-0.2),
            hovermode="closest",
            uirevision="keep",
        )
        fig.update_xaxes(title_text="predicted score (higher = faster)", row=1, col=1)
        fig.update_yaxes(title_text="measured GFLOPS", row=1, col=1)
        fig.update_xaxes(title_text="round", row=1, col=2, dtick=1)
        fig.update_yaxes(range=[-1.05, 1.05], row=1, col=2)
        self.fig = LiveFigure(fig)
        self.quality = round_quality([])
        self._strategies: list[str] = []
        self._ids: list[list[int]] = []
        self._callbacks = []

    def on_select(self, fn) -> None:
        self._callbacks.append(fn)

    def _clicked(self, trace, points, _selector) -> None:
        ids = self._ids[points.trace_index] if points.trace_index < len(self._ids) else []
        if points.point_inds and ids:
            for fn in self._callbacks:
                fn(ids[points.point_inds[0]])

    def _build_traces(self, strategies) -> None:
        self.fig.data = []
        traces = [
            go.Scatter(
                name=html.escape(s),  # a stored strategy name: legend labels render plotly's HTML subset
                mode="markers",
                marker=dict(color=color_of(s, strategies), size=7, opacity=0.75),
                hovertemplate="%{text}<extra></extra>",
            )
            for s in strategies
        ]
        traces += [
            go.Scatter(name=name, mode="lines+markers", line=dict(color="#444", dash=dash))
            for _col, name, dash in QUALITY + [("topk_recall", "recall@k", "dash")]
        ]
        # one message for all of them: a browser redraws once
        n = len(strategies)
        self.fig.add_traces(traces, rows=[1] * len(traces), cols=[1] * n + [2] * (len(traces) - n))
        for tr in self.fig.data[: len(strategies)]:
            tr.on_click(self._clicked)
        self._strategies = list(strategies)
        self._ids = [[] for _ in strategies]

    def refresh(self, model, changes: set) -> None:
        unit = spec_rate_unit(model.spec)
        if SESSION in changes and self.fig.layout.yaxis.title.text != f"measured {unit}":
            self.fig.update_yaxes(title_text=f"measured {unit}", row=1, col=1)
        if SESSION in changes and model.strategies != self._strategies:
            self._build_traces(model.strategies)
        if not (changes & {RECORDS, SESSION}) or not self._strategies:
            return
        self.quality = round_quality(model.records)
        with self.fig.batch_update():
            for i, s in enumerate(self._strategies):
                pts = [
                    r
                    for r in model.records
                    if r["strategy"] == s and r.get("predicted_score") is not None and r.get("gflops") is not None
                ]
                pts = [pts[j] for j in decimate(len(pts), self.max_points)]
                t = self.fig.data[i]
                t.x = [r["predicted_score"] for r in pts]
                t.y = [r["gflops"] for r in pts]
                t.text = [candidate_text(r, unit) for r in pts]
                self._ids[i] = [r["id"] for r in pts]
            q = self.quality
            n = len(self._strategies)
            for j, col in enumerate([c for c, _name, _dash in QUALITY] + ["topk_recall"]):
                self.fig.data[n + j].x = q["round"].tolist()
                self.fig.data[n + j].y = [None if (v is None or math.isnan(v)) else v for v in q[col]]
