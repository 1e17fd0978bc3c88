"""The records table: sortable, rendered from pandas into one HTML widget."""

from __future__ import annotations

import html
import threading

import ipywidgets as W
import pandas as pd

from .model import RECORDS

COLUMNS = [
    "trial",
    "round",
    "strategy",
    "chosen_by",
    "latency_ms",
    "gflops",
    "predicted_score",
    "cv",
    "noisy",
    "error_class",
    "verified",
    "is_best",
    "id",
]
SORT_KEYS = {
    "trial": "trial",
    "GFLOPS": "gflops",
    "latency": "latency_ms",
    "predicted score": "predicted_score",
    "strategy": "strategy",
    "error class": "error_class",
    "chosen by": "chosen_by",
    "cv": "cv",
    "noisy": "noisy",
}

STYLE = (
    "<style>.wb-table{border-collapse:collapse;font-size:12px}"
    ".wb-table th,.wb-table td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}"
    ".wb-table th{background:#f3f3f3;position:sticky;top:0}</style>"
)


class RecordsTable:
    def __init__(self, rows: int = 50):
        self.sort_by = W.Dropdown(
            options=list(SORT_KEYS), value="GFLOPS", description="sort by", layout=W.Layout(width="220px")
        )
        self.ascending = W.ToggleButton(value=False, description="ascending", layout=W.Layout(width="110px"))
        self.rows = W.Dropdown(
            options=[25, 50, 200, 1000], value=rows, description="rows", layout=W.Layout(width="150px")
        )
        self.html = W.HTML(layout=W.Layout(max_height="360px", overflow="auto"))
        self.widget = W.VBox([W.HBox([self.sort_by, self.ascending, self.rows]), self.html])
        self._records: list[dict] = []
        self._lock = threading.Lock()
        for w in (self.sort_by, self.ascending, self.rows):
            w.observe(lambda _c: self.render(), names="value")
        self.render()

    def frame(self) -> pd.DataFrame:
        """The displayed rows, sorted (NaN last) and cut to the row limit."""
        with self._lock:
            df = pd.DataFrame(self._records, columns=COLUMNS) if self._records else pd.DataFrame(columns=COLUMNS)
        key = SORT_KEYS[self.sort_by.value]
        df = df.sort_values(key, ascending=self.ascending.value, na_position="last", kind="stable")
        return df.head(self.rows.value).reset_index(drop=True)

    def render(self) -> None:
        df = self.frame()
        if df.empty:
            self.html.value = "<i>no measured candidates yet</i>"
            return
        shown = df.copy()
        for col, spec in (("latency_ms", "{:.4f}"), ("gflops", "{:.2f}"), ("predicted_score", "{:.3f}")):
            shown[col] = shown[col].map(lambda v, s=spec: "" if pd.isna(v) else s.format(v))
        # cv: spread of the timing repeats; noisy: the timing was disturbed (or its round's probe drifted)
        shown["cv"] = shown["cv"].map(lambda v: "" if pd.isna(v) else f"{v:.1%}")
        shown["noisy"] = shown["noisy"].map(
            lambda v: "" if v is None or pd.isna(v) or not v else "<span style='color:#e67700'>noisy</span>"
        )
        shown["error_class"] = shown["error_class"].map(
            lambda v: "" if pd.isna(v) else f"<span style='color:#c00'>{html.escape(str(v))}</span>"
        )
        self.html.value = STYLE + shown.to_html(index=False, escape=False, classes="wb-table", border=0)

    def refresh(self, model, changes: set) -> None:
        if RECORDS not in changes:
            return
        with self._lock:
            self._records = list(model.records)
        self.render()
