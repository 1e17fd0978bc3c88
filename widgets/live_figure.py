"""``LiveFigure``: a plotly ``FigureWidget`` that a browser draws whole, and draws again when it stopped listening.

plotly's ``FigureWidget`` is an anywidget: every figure's front-end model imports plotly's JavaScript (~5 MB) anew.
anywidget (0.9.16 and later) holds the messages for a model until that import is done, but gives it two seconds
("[anywidget] Failed to initialize model."); past that, every message to the model is dropped for good, and its
views draw the state the model was created with. plotly opens the model *before* it copies the figure into it,
so such a figure shows plotly's bare default axes and never a point. A dashboard opens five figures at once, and
on a busy 2-core machine (or a slow laptop) the import can take longer than two seconds: the dashboard's main plot
then stayed empty for the whole session.

Two remedies here:

- the model is opened only once the figure is complete, so its creation state is the whole figure: whatever a
  view draws first is right, and later edits arrive as plotly's usual messages;
- a front end that stopped listening is found and replaced. A view reports plotly's trace deltas after it drew
  the figure and after every trace edit it applied (a deaf model can still send). Once a view of the current
  model has reported, the first trace edit it has not drawn yet is awaited: when no view has drawn it after
  ``answer_timeout_s``, the model is closed and a new one opened with the figure as it is then, in the
  one-child box that shows the figure (``box``: only the figure's own view is drawn again, not its neighbours');
  once a view has drawn one, the model is known to listen and nothing more is checked. At most ``max_reopens``
  times. The check sends nothing of its own: a healthy figure costs no message and no redraw. A re-opened figure
  is drawn anew by the browser whenever the check fails, also while a session times a kernel: the noise guard
  sees that like any other load. (Trace deltas, not layout deltas: plotly's JavaScript sends its layout delta
  under a name its Python side does not know, ``_js2py_widget_layoutDelta``.)
"""

from __future__ import annotations

import threading

import ipywidgets as W
import plotly.graph_objects as go


class LiveFigure(go.FigureWidget):
    """A ``go.FigureWidget`` opened with its complete state, re-opened when its front end stops answering.

    Build the figure completely (``make_subplots``, ``update_layout``, ...) as a ``go.Figure`` and wrap it:
    ``LiveFigure(fig)``; edit it afterwards as any ``FigureWidget``. Lay out ``fig.box`` (a box holding only the
    figure), not the figure itself: a re-opened figure is shown again there.
    """

    answer_timeout_s = 10.0
    max_reopens = 3
    reopens = 0  # new front-end models opened so far (declared here: plotly refuses unknown public attributes)
    box = None

    def __init__(self, figure=None, **kwargs):
        self._open_deferred = True  # ipywidgets opens the comm inside __init__, before plotly fills the widget
        super().__init__(figure, **kwargs)
        self._open_deferred = False
        self._front_end_lock = threading.Lock()
        self._timer = None
        self._closed = False
        self._reset_front_end_state()
        self.observe(self._view_reported, names=["_js2py_traceDeltas"])
        self.observe(self._edit_sent, names=["_last_trace_edit_id"])
        self._open_complete()
        self.box = W.VBox([self])

    def open(self):
        if getattr(self, "_open_deferred", False):
            return
        super().open()

    # ------------------------------------------------------------------ opening
    def _open_complete(self, state=None) -> None:
        # what plotly's own _repr_mimebundle_ copies before a figure is shown on its own; a figure inside a
        # container never gets that call
        self._widget_layout, self._widget_data = state or self._snapshot()
        self.open()

    def _snapshot(self):
        return self.layout.to_plotly_json(), [t.to_plotly_json() for t in self.data]

    def _reset_front_end_state(self) -> None:
        self._answered = -1  # the newest trace edit a view of the current model has drawn (-1: none reported)
        self._asked = None  # the trace edit awaited; once drawn, the model is known to listen

    # ------------------------------------------------------------------ the check
    def _view_reported(self, change) -> None:
        """A view's trace deltas (plotly's message; on the kernel's comm thread)."""
        msg = change["new"]
        if not msg:
            return
        with self._front_end_lock:
            self._answered = max(self._answered, int(msg.get("trace_edit_id") or 0))
            self._await(self._last_trace_edit_id)

    def _edit_sent(self, change) -> None:
        """A trace edit about to be sent (on the thread that edits the figure)."""
        with self._front_end_lock:
            self._await(change["new"])

    def _await(self, edit_id: int) -> None:
        # one edit awaited per model: no view reported yet, or one already awaited (and perhaps drawn), is enough
        if self._answered < 0 or self._asked is not None or edit_id <= self._answered:
            return
        if self.reopens < self.max_reopens:
            self._asked = edit_id
            self._start_timer(self.answer_timeout_s)

    def _start_timer(self, delay: float) -> None:
        self._timer = threading.Timer(delay, self._check_answered)
        self._timer.daemon = True
        self._timer.start()

    def front_end_listens(self) -> bool | None:
        """True once a view of the current model has drawn an edit sent after the model opened, False while one
        is awaited, None before that is known."""
        with self._front_end_lock:
            return None if self._asked is None else self._answered >= self._asked

    def _check_answered(self) -> None:
        with self._front_end_lock:
            if self._closed or self._asked is None or self._answered >= self._asked:
                return
            try:
                state = self._snapshot()
            except RuntimeError:  # the figure changed under the copy (drawn by another thread): again, shortly
                self._start_timer(0.5)
                return
            self._reopen(state)
        self.box.send_state("children")
        # counted once the new model is whole and named by its box: whoever reads the count may use both
        self.reopens += 1

    def _reopen(self, state) -> None:
        super().close()
        # close() shadows plotly's display method with None; a figure re-opened must still display
        self.__dict__.pop("_repr_mimebundle_", None)
        # a new model id, so that the box, re-sent its children, draws the new model and not the closed one
        self._model_id = None
        self._reset_front_end_state()
        self._open_complete(state)

    def close(self):
        self._closed = True  # a check already running must not open the figure again
        timer = getattr(self, "_timer", None)  # also called by __del__, possibly of a half-built figure
        if timer is not None:
            timer.cancel()
        if self.box is not None:
            self.box.close()
        super().close()
