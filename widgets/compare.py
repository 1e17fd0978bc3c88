"""Best-so-far curves of several sessions, from one store or several, on one plot.

``compare_series`` computes what is drawn (from ``workbench.analysis``); ``CompareView`` only draws it.
"""

from __future__ import annotations

import html
import os

import ipywidgets as W
import plotly.graph_objects as go

from workbench import analysis
from workbench.errors import WorkbenchError

from .common import PALETTE
from .live_figure import LiveFigure

METRICS = {"gflops": ("best_gflops", "throughput"), "latency_ms": ("best_latency_ms", "latency (ms)")}
X_TITLES = {"trial": "trial", "elapsed_s": "elapsed (s)"}


def compare_series(
    refs, x: str = "trial", metric: str = "gflops", by_seed: bool = False, band: str = "minmax"
) -> list[dict]:
    """The lines of a comparison: one per session (``by_seed=False``) or one per group of sessions that
    differ only by seed, with a band (min-max or quartiles) around the median. Each: ``name`` (plain text),
    ``x``, ``y``, ``lo``/``hi`` (None without a band), ``n`` (sessions behind each point) and ``sessions``
    (the ``(db, session id)`` pairs drawn)."""
    if metric not in METRICS:
        raise WorkbenchError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}")
    if x not in analysis.X_AXES:
        raise WorkbenchError(f"x must be one of {', '.join(analysis.X_AXES)}, not {x!r}")
    curves = analysis.best_so_far(refs)
    if curves.empty:
        return []
    col = METRICS[metric][0]
    out = []
    if not by_seed:
        for (db, sid), c in curves.groupby(["db", "session_id"], sort=False):
            c = c.sort_values(x, kind="stable")  # a what-if shares its trial number: keep the measured order
            out.append(
                {
                    "name": c["label"].iloc[0],
                    "x": c[x].tolist(),
                    "y": c[col].tolist(),
                    "lo": None,
                    "hi": None,
                    "n": [1] * len(c),
                    "sessions": [(db, int(sid))],
                }
            )
        return out
    groups = analysis.seed_groups(curves, x=x, band=band)
    name = "gflops" if metric == "gflops" else "latency_ms"
    for g, rows in groups.groupby("group", sort=False):
        keys = rows[analysis.GROUP_FIELDS].iloc[0].tolist()
        members = curves[(curves[analysis.GROUP_FIELDS] == keys).all(axis=1)][["db", "session_id"]]
        out.append(
            {
                "name": g,
                "x": rows[x].tolist(),
                "y": rows[f"median_{name}"].tolist(),
                "lo": rows[f"lo_{name}"].tolist(),
                "hi": rows[f"hi_{name}"].tolist(),
                "n": rows["n"].astype(int).tolist(),
                "sessions": sorted({(d, int(s)) for d, s in members.itertuples(index=False)}),
            }
        )
    return out


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


class CompareView:
    """Pick sessions of one or more stores and overlay their best-so-far curves.

    ``CompareView(["a.db", "b.db"])`` lists every session of the stores (more can be added with the path box
    and Load); ``sessions=[("a.db", 1), ...]`` chooses the ones drawn first (default: up to 8).
    """

    def __init__(self, dbs=(), sessions=None, height: int = 420):
        dbs = [dbs] if isinstance(dbs, (str, os.PathLike)) else list(dbs)
        self.paths: list[str] = []
        self.units: dict[tuple, str] = {}  # (store path, session id) -> GFLOPS, or GOPS for an int8 workload
        self.path = W.Text(placeholder="path/to/store.db", description="store", layout=W.Layout(width="420px"))
        self.load = W.Button(description="Load", icon="folder-open", layout=W.Layout(width="90px"))
        self.picker = W.SelectMultiple(options=[], rows=8, description="sessions", layout=W.Layout(width="760px"))
        self.x = W.ToggleButtons(options=[("trials", "trial"), ("wall time", "elapsed_s")], value="trial")
        self.metric = W.ToggleButtons(options=[("throughput", "gflops"), ("latency", "latency_ms")], value="gflops")
        self.by_seed = W.Checkbox(value=False, description="group seeds (median and band)", indent=False)
        self.band = W.Dropdown(
            options=[("min-max", "minmax"), ("quartiles", "quartiles")],
            value="minmax",
            description="band",
            layout=W.Layout(width="180px"),
        )
        self.message = W.HTML("")
        self.fig = LiveFigure(
            layout=dict(
                height=height,
                template="plotly_white",
                margin=dict(l=55, r=10, t=20, b=40),
                hovermode="closest",
                legend=dict(orientation="h", y=-0.2),
                uirevision="keep",
            )
        )
        self.series: list[dict] = []
        self.widget = W.VBox(
            [
                W.HBox([self.path, self.load]),
                self.picker,
                W.HBox([self.x, self.metric]),
                W.HBox([self.by_seed, self.band]),
                self.message,
                self.fig.box,
            ]
        )
        self.widget.add_class("wb-compare")  # a stable hook for browser tests
        for p in dbs:
            self.add_store(p, select=sessions is None)
        if sessions is not None:
            wanted = {(os.path.abspath(os.fspath(d)), int(s)) for d, s in sessions}
            self.picker.value = tuple(v for _t, v in self.picker.options if v in wanted)
        self.load.on_click(lambda _b: self._load_clicked())
        for w in (self.picker, self.x, self.metric, self.by_seed, self.band):
            w.observe(lambda _c: self.redraw(), names="value")
        self.redraw()

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    def add_store(self, db, select: bool = False) -> None:
        """List a store's sessions in the picker (``select``: and draw them, up to 8 in all)."""
        path = os.path.abspath(os.fspath(db))
        sessions = analysis.list_sessions(path)  # a bad path raises WorkbenchError with one line
        if path not in self.paths:
            self.paths.append(path)
        for info in sessions.to_dict("records"):
            self.units[(path, int(info["session_id"]))] = info["rate_unit"]
        known = {v for _t, v in self.picker.options}
        new = [
            (analysis.picker_text(info), (path, int(info["session_id"])))
            for info in sessions.to_dict("records")
            if (path, int(info["session_id"])) not in known
        ]
        chosen = tuple(self.picker.value)
        self.picker.options = list(self.picker.options) + new
        if select:
            chosen += tuple(v for _t, v in new)[: max(0, 8 - len(chosen))]
        self.picker.value = chosen

    def _load_clicked(self) -> None:
        p = self.path.value.strip()
        if not p:
            return
        try:
            self.add_store(p)
            self.message.value = ""
        except WorkbenchError as e:
            self.message.value = f"<span style='color:#c92a2a'>{html.escape(str(e))}</span>"

    def data(self) -> list[dict]:
        """What the plot shows now (``compare_series`` of the picked sessions and settings)."""
        return compare_series(
            list(self.picker.value),
            x=self.x.value,
            metric=self.metric.value,
            by_seed=self.by_seed.value,
            band=self.band.value,
        )

    def y_title(self) -> str:
        """The metric's name; throughput in the picked sessions' unit(s) (GFLOPS, GOPS for int8 workloads)."""
        if self.metric.value != "gflops":
            return METRICS[self.metric.value][1]
        units = sorted({self.units.get(v, "GFLOPS") for v in self.picker.value}) or ["GFLOPS"]
        return " / ".join(units)

    def redraw(self) -> None:
        self.band.disabled = not self.by_seed.value
        message = ""
        try:
            self.series = self.data()
        except WorkbenchError as e:
            self.series = []
            message = f"<span style='color:#c92a2a'>{html.escape(str(e))}</span>"
        if not message and not self.picker.value:
            message = "pick one or more sessions"
        elif not message and not self.series:
            message = "no verified program in the picked sessions yet"
        traces = []
        for i, s in enumerate(self.series):
            color = PALETTE[i % len(PALETTE)]
            name = html.escape(s["name"])  # stored strings: plotly renders some HTML in names
            if s["lo"] is not None:
                band = dict(mode="lines", legendgroup=name, showlegend=False, hoverinfo="skip")
                traces.append(go.Scatter(x=s["x"], y=s["hi"], line=dict(width=0, shape="hv"), **band))
                traces.append(
                    go.Scatter(
                        x=s["x"],
                        y=s["lo"],
                        line=dict(width=0, shape="hv"),
                        fill="tonexty",
                        fillcolor=_rgba(color, 0.18),
                        **band,
                    )
                )
            traces.append(
                go.Scatter(
                    x=s["x"],
                    y=s["y"],
                    name=name,
                    legendgroup=name,
                    mode="lines",
                    line=dict(color=color, width=2.2, shape="hv"),
                    customdata=s["n"],
                    hovertemplate=name + "<br>%{x}: %{y:.4g} (%{customdata} sessions)<extra></extra>",
                )
            )
        with self.fig.batch_update():
            self.fig.data = []
            self.fig.layout.xaxis.title.text = X_TITLES[self.x.value]
            self.fig.layout.yaxis.title.text = "best-so-far " + self.y_title()
        self.fig.add_traces(traces)
        self.message.value = message
