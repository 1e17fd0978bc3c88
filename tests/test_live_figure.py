"""``widgets.LiveFigure``: a figure's front-end model opens with the whole figure, and one that stops answering is
replaced. The browser side of it is in tests/test_browser.py (a page slowed down until anywidget gives up on the
figures' JavaScript)."""

import time

import comm
import ipywidgets as W
import plotly.graph_objects as go
import pytest
from plotly.subplots import make_subplots

from widgets import Dashboard
from widgets.live_figure import LiveFigure
from workbench.replay import ReplaySession

from .test_widgets import DEMO_DB


class OpenedComm:
    """A kernel comm stand-in that keeps what it was opened with, every message and whether it was closed."""

    kernel = "Truthy"

    def __init__(self, opened, **kwargs):
        self.comm_id = f"model-{len(opened)}"
        self.kwargs = kwargs
        self.sent = []
        self.closed = False
        opened.append(self)

    def open(self, *a, **k):
        pass

    def on_msg(self, *a, **k):
        pass

    def send(self, data=None, metadata=None, buffers=None):
        self.sent.append(data or {})

    def close(self, *a, **k):
        self.closed = True


@pytest.fixture
def opened(monkeypatch):
    log = []
    monkeypatch.setattr(comm, "create_comm", lambda **kw: OpenedComm(log, **kw))
    return log


def subplots():
    fig = make_subplots(rows=1, cols=2, subplot_titles=("left title", "right title"))
    fig.update_layout(height=321, template="plotly_white")
    fig.add_scatter(x=[1, 2], y=[3, 4], row=1, col=2)
    return fig


def models_of(log, widget):
    return [c for c in log if c.comm_id == widget.model_id]


def view_reports(fig, edit_id):
    """What a view's report (plotly's trace deltas, after drawing and after each trace edit) looks like when it
    reaches the kernel; a figure without traces has no deltas."""
    fig.set_state({"_js2py_traceDeltas": {"trace_deltas": [], "trace_edit_id": edit_id}})


def test_a_plain_figure_widget_opens_its_model_empty_and_a_live_figure_whole(opened):
    plain = go.FigureWidget(subplots())
    state = opened[-1].kwargs["data"]["state"]
    # why LiveFigure exists: plotly fills the widget after ipywidgets opened its model
    assert state["_widget_layout"] == {} and state["_widget_data"] == []

    live = LiveFigure(subplots())
    (model,) = models_of(opened, live)
    state = model.kwargs["data"]["state"]
    assert [a["text"] for a in state["_widget_layout"]["annotations"]] == ["left title", "right title"]
    assert state["_widget_layout"]["height"] == 321
    assert [list(t["y"]) for t in state["_widget_data"]] == [[3, 4]]
    assert state["_widget_data"][0]["uid"] == live.data[0].uid
    assert state["_last_trace_edit_id"] == live._last_trace_edit_id
    assert model.sent == [], "nothing needs sending after the model opened whole"
    plain.close()
    live.close()


def wait_for(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)
    return cond()


def test_a_front_end_that_does_not_draw_an_edit_gets_a_new_model_shown_in_its_box(opened):
    fig = LiveFigure(subplots())
    fig.answer_timeout_s = 0.2
    around = W.VBox([W.HTML("above"), fig.box, W.HTML("below")])
    first = models_of(opened, fig)[0]
    # a view of a model that lost its messages reports the state it was created with, and nothing later
    view_reports(fig, 0)
    assert fig.front_end_listens() is None
    assert not [m for m in first.sent if any(k.startswith("_py2js") for k in m.get("state", {}))], "nothing sent"
    time.sleep(0.3)
    assert fig.reopens == 0, "nothing was awaited: no edit was sent"
    fig.data[0].y = [5, 6]
    assert fig.front_end_listens() is False
    assert wait_for(lambda: fig.reopens == 1)
    assert first.closed and fig.model_id != first.comm_id
    state = models_of(opened, fig)[0].kwargs["data"]["state"]
    assert [a["text"] for a in state["_widget_layout"]["annotations"]] == ["left title", "right title"]
    assert [list(t["y"]) for t in state["_widget_data"]] == [[5, 6]], "the new model holds the edit"
    assert state["_last_trace_edit_id"] == fig._last_trace_edit_id
    # the figure's box names the new model, so the browser draws it; its neighbours are left as they are
    box_updates = [m["state"]["children"] for m in models_of(opened, fig.box)[0].sent if "children" in m["state"]]
    assert box_updates == [[f"IPY_MODEL_{fig.model_id}"]]
    assert not [m for m in models_of(opened, around)[0].sent if "children" in m.get("state", {})]
    assert fig._repr_mimebundle_() is not None  # still displayable on its own

    # the new model's view draws the next edit: it listens, and nothing is checked any more
    view_reports(fig, fig._last_trace_edit_id)
    fig.data[0].y = [7, 8]
    view_reports(fig, fig._last_trace_edit_id)
    assert fig.front_end_listens() is True
    fig.data[0].y = [9, 10]  # not drawn (yet): no longer awaited
    time.sleep(0.5)
    assert fig.reopens == 1 and not models_of(opened, fig)[0].closed
    fig.close()


def test_a_view_that_reports_after_edits_were_sent_must_draw_them(opened):
    fig = LiveFigure(subplots())
    fig.answer_timeout_s = 0.2
    fig.data[0].y = [5, 6]  # no view yet: nothing awaited
    time.sleep(0.3)
    assert fig.reopens == 0
    view_reports(fig, 0)  # drawn from the model's creation state, the edit not applied
    assert fig.front_end_listens() is False
    assert wait_for(lambda: fig.reopens == 1)
    fig.close()


def test_a_front_end_that_draws_edits_keeps_its_model(opened):
    fig = LiveFigure(subplots())
    fig.answer_timeout_s = 0.2
    first = fig.model_id
    view_reports(fig, fig._last_trace_edit_id)
    fig.data[0].y = [5, 6]
    view_reports(fig, fig._last_trace_edit_id)
    assert fig.front_end_listens() is True
    time.sleep(0.5)
    assert fig.model_id == first and fig.reopens == 0
    fig.close()


def test_a_front_end_that_never_listens_is_replaced_a_bounded_number_of_times(opened):
    fig = LiveFigure(subplots())
    fig.answer_timeout_s = 0.05
    for i in range(fig.max_reopens + 2):
        view_reports(fig, 0)
        fig.data[0].y = [i, i]
        time.sleep(0.3)
    assert fig.reopens == fig.max_reopens
    fig.close()


def test_the_dashboards_figures_are_laid_out_in_their_boxes(opened):
    dash = Dashboard.replay(DEMO_DB, autopump=False)
    dash.attach(ReplaySession(DEMO_DB))
    for fig, container in (
        (dash.throughput.fig, dash.widget),
        (dash.cost_model.fig, dash.tabs),
        (dash.decisions.fig, dash.decisions.widget),
        (dash.decisions.importance_fig, dash.decisions.widget),
        (dash.timeline.fig, dash.timeline.widget),
    ):
        assert isinstance(fig, LiveFigure) and fig.box.children == (fig,)
        assert fig.box in container.children and fig not in container.children
    dash.close()
    assert dash.throughput.fig.box.comm is None, "closing the dashboard closes the figures' boxes"


def test_a_closed_figure_is_not_opened_again_by_a_pending_check(opened):
    fig = LiveFigure(subplots())
    fig.answer_timeout_s = 0.2
    models = len(opened)
    view_reports(fig, 0)
    fig.data[0].y = [5, 6]
    fig.close()
    time.sleep(0.6)
    assert fig.comm is None and fig.box.comm is None and fig.reopens == 0
    assert len(opened) == models, "no model opened since"
