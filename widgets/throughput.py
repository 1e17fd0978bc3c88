"""Best-so-far GFLOPS (GOPS for int8 workloads) per layout strategy, against trial number and against wall time."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.dtypes import spec_rate_unit

from .common import candidate_text, color_of, label
from .live_figure import LiveFigure
from .model import RECORDS, SESSION
from .stats import decimate


NOISY_SYMBOL = "x"  # a measured point whose timing was disturbed; clean ones are faint circles


def raw_marker(records: list[dict]) -> dict:
    """Marker symbol and opacity of the raw points: a noisy timing is a darker x, so it stands out."""
    if not any(r.get("noisy") for r in records):
        return dict(symbol="circle", opacity=0.28)
    noisy = [bool(r.get("noisy")) for r in records]
    return dict(symbol=[NOISY_SYMBOL if x else "circle" for x in noisy], opacity=[0.8 if x else 0.28 for x in noisy])


class ThroughputView:
    """A plotly FigureWidget; ``refresh(model, changes)`` redraws it in one batched message.

    Per strategy: faint raw measurements (decimated to ``max_points``; a noisy
    timing is an x, see ``raw_marker``) and the exact best-so-far step curve,
    once vs trial and once vs elapsed seconds.
    Clicking a point calls every ``on_select(record_id)`` callback.
    """

    def __init__(self, max_points: int = 400, height: int = 360):
        self.max_points = max_points
        fig = make_subplots(
            rows=1,
            cols=2,
            shared_yaxes=True,
            horizontal_spacing=0.04,
            subplot_titles=("best-so-far vs trial", "best-so-far vs wall time"),
        )
        fig.update_layout(
            height=height,
            margin=dict(l=50, r=10, t=40, b=40),
            hovermode="closest",
            legend=dict(orientation="h", y=-0.18),
            template="plotly_white",
            uirevision="keep",
        )
        fig.update_xaxes(title_text="trial", row=1, col=1)
        fig.update_xaxes(title_text="elapsed (s)", row=1, col=2)
        fig.update_yaxes(title_text="GFLOPS", row=1, col=1)
        self.fig = LiveFigure(fig)
        self._strategies: list[str] = []
        self._ids: list[list[int]] = []  # record id of every displayed point, per trace
        self._callbacks = []
        self.points_sent = 0  # points in the last redraw: the cost of one update message

    def on_select(self, fn) -> None:
        self._callbacks.append(fn)

    def _clicked(self, trace, points, _selector) -> None:
        if not points.point_inds:
            return
        ids = self._ids[points.trace_index]
        rid = ids[points.point_inds[0]]
        for fn in self._callbacks:
            fn(rid)

    def _build_traces(self, strategies: list[str]) -> None:
        traces = []
        for s in strategies:
            c = color_of(s, strategies)
            for col, _xkind in ((1, "trial"), (2, "elapsed")):
                traces.append(
                    (
                        go.Scatter(
                            name=label(s),  # legend labels render plotly's HTML subset
                            legendgroup=s,
                            showlegend=False,
                            mode="markers",
                            marker=dict(color=c, size=6, opacity=0.28),
                            hovertemplate="%{text}<extra></extra>",
                        ),
                        col,
                    )
                )
                traces.append(
                    (
                        go.Scatter(
                            name=label(s),
                            legendgroup=s,
                            showlegend=col == 1,
                            mode="lines+markers",
                            line=dict(color=c, width=2.5, shape="hv"),
                            marker=dict(color=c, size=7),
                            hovertemplate="%{text}<extra>best so far</extra>",
                        ),
                        col,
                    )
                )
        with self.fig.batch_update():
            self.fig.data = []
        for tr, col in traces:
            self.fig.add_trace(tr, row=1, col=col)
        for tr in self.fig.data:
            tr.on_click(self._clicked)
        self._strategies = list(strategies)
        self._ids = [[] for _ in self.fig.data]

    def refresh(self, model, changes: set) -> None:
        if SESSION in changes:
            unit = spec_rate_unit(model.spec)
            if self.fig.layout.yaxis.title.text != unit:
                self.fig.update_yaxes(title_text=unit, row=1, col=1)
        if SESSION in changes and model.strategies != self._strategies:
            self._build_traces(model.strategies)
        if not (changes & {RECORDS, SESSION}) or not self._strategies:
            return
        unit = spec_rate_unit(model.spec)
        by_s = {s: [] for s in self._strategies}
        for r in model.records:
            by_s.setdefault(r["strategy"], []).append(r)
        sent = 0
        with self.fig.batch_update():
            for i, s in enumerate(self._strategies):
                recs = by_s.get(s, [])
                ok = [r for r in recs if r.get("gflops") is not None and r.get("error_class") is None]
                raw = [ok[j] for j in decimate(len(ok), self.max_points)]
                marker = raw_marker(raw)
                steps = list(model.best_steps.get(s, []))
                last = model.last_by_strategy.get(s)
                # extend the step curve to the strategy's latest trial so its flat tail is visible
                tail = steps + (
                    [dict(steps[-1], trial=last["trial"], elapsed_s=last["elapsed_s"])]
                    if steps and last and last["trial"] != steps[-1]["trial"]
                    else []
                )
                for k, key in enumerate(("trial", "elapsed_s")):
                    raw_t, best_t = self.fig.data[4 * i + 2 * k], self.fig.data[4 * i + 2 * k + 1]
                    raw_t.x = [r[key] for r in raw]
                    raw_t.y = [r["gflops"] for r in raw]
                    raw_t.text = [candidate_text(r, unit) for r in raw]
                    raw_t.marker.update(marker)
                    best_t.x = [r[key] for r in tail]
                    best_t.y = [r["gflops"] for r in tail]
                    best_t.text = [candidate_text(r, unit) for r in tail]
                    self._ids[4 * i + 2 * k] = [r["id"] for r in raw]
                    self._ids[4 * i + 2 * k + 1] = [r["id"] for r in tail]
                    sent += len(raw) + len(tail)
        self.points_sent = sent
