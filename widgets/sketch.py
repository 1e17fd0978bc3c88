"""Design spaces (sketches) with their open sampling decisions, and how one annotation fills them in."""

from __future__ import annotations

import html
import re
import threading

import ipywidgets as W

from workbench import space
from workbench.layouts import STRATEGIES

SAMPLE_CALL = re.compile(r"sch\.sample_(perfect_tile|categorical|compute_location)\(")


def sampling_lines(trace_text: str) -> list[int]:
    """Line numbers of the sampling instructions in a python-form trace, in trace order."""
    return [i for i, ln in enumerate(trace_text.splitlines()) if SAMPLE_CALL.search(ln)]


def sketch_html(sketch, filled=None) -> str:
    """The unfilled trace with every open decision highlighted; with ``filled`` decisions, their values beside it."""
    lines = sketch.trace_unfilled.splitlines()
    marks = sampling_lines(sketch.trace_unfilled)
    out = []
    for i, ln in enumerate(lines):
        if i in marks:
            j = marks.index(i)
            val = "?" if filled is None or j >= len(filled) else html.escape(str(filled[j].value))
            out.append(
                f"<span style='background:#fff3bf'>{html.escape(ln)}</span>"
                f"  <b style='color:#0b7285'># decision {j}: {val}</b>"
            )
        else:
            out.append(html.escape(ln))
    return (
        "<pre style='font-size:12px;line-height:1.3;max-height:420px;overflow:auto;margin:0'>"
        + "\n".join(out)
        + "</pre>"
    )


class SketchView:
    """Loads the design spaces of a workload for one layout strategy on demand (TVM work, ~0.01-1 s)."""

    def __init__(self, workload_of, strategies=tuple(STRATEGIES)):
        self.workload_of = workload_of
        self.strategy = W.Dropdown(options=list(strategies), description="strategy", layout=W.Layout(width="260px"))
        self.load_button = W.Button(description="Load design spaces", layout=W.Layout(width="170px"))
        self.sketch = W.Dropdown(options=[], description="sketch", layout=W.Layout(width="160px"))
        self.seed = W.BoundedIntText(value=1, min=1, max=2**31 - 1, description="seed", layout=W.Layout(width="160px"))
        self.annotate_button = W.Button(description="Annotate", disabled=True, layout=W.Layout(width="100px"))
        self.summary = W.HTML("<i>press ‘Load design spaces’</i>")
        self.body = W.HTML()
        self.widget = W.VBox(
            [
                W.HBox([self.strategy, self.load_button]),
                W.HBox([self.sketch, self.seed, self.annotate_button]),
                self.summary,
                self.body,
            ]
        )
        self.sketches: list = []
        self.annotation = None  # the last annotated Schedule (None if the postprocessors rejected it)
        self._lock = threading.Lock()
        self.load_button.on_click(lambda _b: self.load())
        self.annotate_button.on_click(lambda _b: self.annotate())
        self.sketch.observe(lambda _c: self._show_unfilled(), names="value")

    def set_strategies(self, strategies) -> None:
        if list(strategies) and list(self.strategy.options) != list(strategies):
            self.strategy.options = list(strategies)

    def load(self) -> list:
        with self._lock:
            wl = self.workload_of()
            if wl is None:
                self.summary.value = "<i>no workload yet: start a session first</i>"
                return []
            self.summary.value = "<i>generating design spaces…</i>"
            self.sketches = space.design_spaces(wl, self.strategy.value)
            rows = "".join(
                f"<tr><td>{s.index}</td><td>{len(s.decisions)}</td>"
                f"<td>{html.escape(', '.join(sorted({d.kind for d in s.decisions})))}</td>"
                f"<td>{len(s.trace_unfilled.splitlines()) - 2}</td></tr>"
                for s in self.sketches
            )
            with self.widget.hold_sync():
                self.summary.value = (
                    f"<b>{html.escape(wl.name)}</b> ({html.escape(wl.describe())}) with "
                    f"<b>{html.escape(self.strategy.value)}</b>: {len(self.sketches)} sketches. A sketch fixes the loop "
                    "structure; its sampling instructions are open decisions an annotation fills in."
                    "<table style='font-size:12px'><tr><th>sketch</th><th>open decisions</th><th>kinds</th>"
                    f"<th>trace lines</th></tr>{rows}</table>"
                )
                self.sketch.options = [(f"sketch {s.index}", s.index) for s in self.sketches]
                self.sketch.value = self.sketches[0].index if self.sketches else None
                self.annotate_button.disabled = not self.sketches
            self._show_unfilled()
            return self.sketches

    def _show_unfilled(self) -> None:
        if self.sketch.value is None or not self.sketches:
            return
        self.body.value = sketch_html(self.sketches[self.sketch.value])

    def annotate(self, seed: int | None = None):
        """Fill the selected sketch's decisions at random with ``seed``; returns the Schedule or None."""
        with self._lock:
            if not self.sketches or self.sketch.value is None:
                return None
            if seed is not None:
                self.seed.value = seed
            sk = self.sketches[self.sketch.value]
            sch = space.annotate(self.workload_of(), sk.index, self.seed.value, self.strategy.value)
            self.annotation = sch
            if sch is None:
                self.body.value = (
                    f"<b style='color:#c00'>seed {self.seed.value}: the postprocessors rejected this "
                    "annotation</b> (an invalid sample, e.g. a loop that cannot be vectorized); "
                    "the search simply draws again. Try another seed."
                ) + sketch_html(sk)
                return None
            filled = space.decisions_of(sch.trace)
            self.body.value = (
                f"<b>seed {self.seed.value}</b>: every highlighted decision now has a value; "
                "the result is a complete program."
            ) + sketch_html(sk, filled)
            return sch
