"""The records table: sortable, rendered from pandas into one HTML widget, filtered by the decision-space brush,
and exported to CSV."""

from __future__ import annotations

import html
import json
import os
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
    "build_s",
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
    "build seconds": "build_s",
    "noisy": "noisy",
}

STYLE = (
    "<style>.wb-table{border-collapse:collapse;font-size:12px}"
    ".wb-table th,.wb-table td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}"
    ".wb-table th{background:#f3f3f3;position:sticky;top:0}</style>"
)


def records_frame(records, ids=None) -> pd.DataFrame:
    """Every field of the records, one row per record in measurement order (the table's columns first, then the
    others as they first appear); only the records whose id is in ``ids`` when it is given. Lists and dicts
    (``run_secs``, ``noise``) are JSON text, so the frame writes to CSV and reads back as plain values."""
    records = [r for r in records if ids is None or r.get("id") in ids]
    names = list(COLUMNS)
    for r in records:
        names += [k for k in r if k not in names]
    df = pd.DataFrame(records, columns=names)
    for col in df.columns:
        if df[col].map(lambda v: isinstance(v, (list, dict))).any():
            df[col] = df[col].map(lambda v: json.dumps(v) if isinstance(v, (list, dict)) else v)
    return df


def csv_path(db_path: str, session_id, filtered: bool = False) -> str:
    """Where the dashboard exports a session's records: next to its store, ``STORE-sessionN-records.csv``
    (``-brushed`` for the rows inside a decision-space brush)."""
    stem = os.path.splitext(os.path.abspath(db_path))[0]
    return f"{stem}-session{session_id}-records{'-brushed' if filtered else ''}.csv"


class RecordsTable:
    """``refresh(model, changes)`` redraws it; ``set_filter(ids)`` shows only those records (the decision-space
    brush); ``to_csv(path)`` writes every field of the shown records (all of them, or the filtered ones), as the
    "Export CSV" button does next to the session's store (``csv_path_of(filtered)`` tells where; by default next
    to the store the session's events name)."""

    def __init__(self, rows: int = 50, csv_path_of=None):
        self.sort_by = W.Dropdown(
            options=list(SORT_KEYS), value="GFLOPS", description="sort by", layout=W.Layout(width="220px")
        )
        self.ascending = W.ToggleButton(value=False, description="ascending", layout=W.Layout(width="110px"))
        self.rows = W.Dropdown(
            options=[25, 50, 200, 1000], value=rows, description="rows", layout=W.Layout(width="150px")
        )
        self.html = W.HTML(layout=W.Layout(max_height="360px", overflow="auto"))
        self.export_button = W.Button(description="Export CSV", icon="download", layout=W.Layout(width="120px"))
        self.highlight_button = W.Button(
            description="Highlight these",
            tooltip="highlight the rows shown here in the Decision space tab",
            layout=W.Layout(width="140px", display="none"),
        )
        self.export_status = W.HTML()
        self.filter_note = W.HTML()
        self.widget = W.VBox(
            [
                W.HBox([self.sort_by, self.ascending, self.rows, self.export_button, self.highlight_button]),
                self.export_status,
                self.filter_note,
                self.html,
            ]
        )
        self.csv_path_of = csv_path_of
        self.filter_ids: set | None = None  # records inside the decision-space brush; None: no brush
        self._records: list[dict] = []
        self._session = (None, None)  # (store path, session id) as the session's events say
        self._lock = threading.Lock()
        self.export_button.on_click(lambda _b: self.export())
        self.highlight_button.on_click(lambda _b: self._highlight())
        self._highlight_callbacks = []
        for w in (self.sort_by, self.ascending, self.rows):
            w.observe(lambda _c: self.render(), names="value")
        self.render()

    def frame(self) -> pd.DataFrame:
        """The displayed rows, sorted (NaN last) and cut to the row limit."""
        with self._lock:
            recs = [r for r in self._records if self.filter_ids is None or r.get("id") in self.filter_ids]
        df = pd.DataFrame(recs, columns=COLUMNS) if recs else pd.DataFrame(columns=COLUMNS)
        key = SORT_KEYS[self.sort_by.value]
        df = df.sort_values(key, ascending=self.ascending.value, na_position="last", kind="stable")
        return df.head(self.rows.value).reset_index(drop=True)

    def render(self) -> None:
        df = self.frame()
        if df.empty:
            self.html.value = (
                "<i>no measured candidates yet</i>" if self.filter_ids is None else "<i>no record inside the brush</i>"
            )
            return
        shown = df.copy()
        for col, spec in (
            ("latency_ms", "{:.4f}"),
            ("gflops", "{:.2f}"),
            ("predicted_score", "{:.3f}"),
            ("build_s", "{:.2f}"),
        ):
            shown[col] = shown[col].map(lambda v, s=spec: "" if pd.isna(v) else s.format(v))
        # cv: spread of the timing repeats; noisy: the timing was disturbed (or its round's probe drifted)
        shown["cv"] = shown["cv"].map(lambda v: "" if pd.isna(v) else f"{v:.1%}")
        shown["noisy"] = shown["noisy"].map(
            lambda v: "" if v is None or pd.isna(v) or not v else "<span style='color:#e67700'>noisy</span>"
        )
        shown["error_class"] = shown["error_class"].map(
            lambda v: "" if pd.isna(v) else f"<span style='color:#c00'>{html.escape(str(v))}</span>"
        )
        for col in shown.columns.drop(["noisy", "error_class"]):  # stored values: escaped, as to_html below is not
            shown[col] = shown[col].map(
                lambda v: "" if v is None or (isinstance(v, float) and v != v) else html.escape(str(v))
            )
        self.html.value = STYLE + shown.to_html(index=False, escape=False, classes="wb-table", border=0)

    def refresh(self, model, changes: set) -> None:
        if RECORDS not in changes:
            return
        with self._lock:
            self._records = list(model.records)
            self._session = (model.db, model.session_id)
        self.render()

    def on_highlight(self, fn) -> None:
        """Call ``fn(record ids)`` with the rows shown (sorted and cut as displayed) when "Highlight these" is
        pressed; the button appears once something listens."""
        self._highlight_callbacks.append(fn)
        self.highlight_button.layout.display = None

    def _highlight(self) -> None:
        ids = [int(i) for i in self.frame()["id"].dropna()]
        for fn in self._highlight_callbacks:
            fn(ids)

    def set_filter(self, ids, note: str | None = None) -> None:
        """Show only the records whose id is in ``ids`` (None: all of them); ``note`` says why, above the table."""
        with self._lock:
            same = (None if ids is None else set(ids)) == self.filter_ids
            self.filter_ids = None if ids is None else set(ids)
        self.filter_note.value = "" if ids is None else f"<span style='color:#0b7285'>{html.escape(note or '')}</span>"
        if not same:
            self.render()

    def records(self) -> pd.DataFrame:
        """Every field of the shown records (all, or those inside the brush), in measurement order."""
        with self._lock:
            recs, ids = list(self._records), self.filter_ids
        return records_frame(recs, ids)

    def to_csv(self, path: str) -> str:
        """Write ``records()`` to ``path`` as CSV; returns the path."""
        self.records().to_csv(path, index=False)
        return path

    def export(self) -> str | None:
        """The "Export CSV" button: write the shown records next to the session's store and say where."""
        filtered = self.filter_ids is not None
        try:
            if self.csv_path_of is not None:
                path = self.csv_path_of(filtered)
            else:
                db, sid = self._session
                path = csv_path(db, sid, filtered) if db and db != ":memory:" else None
            if path is None:
                self.export_status.value = "<span style='color:#c00'>no records store to export next to</span>"
                return None
            frame = self.records()
            frame.to_csv(path, index=False)
            n = len(frame)
        except OSError as e:
            self.export_status.value = f"<span style='color:#c00'>could not write the CSV: {html.escape(str(e))}</span>"
            return None
        what = "records inside the decision-space brush" if filtered else "records (no brush: all of them)"
        self.export_status.value = f"wrote {n} {what} to <code>{html.escape(path)}</code>"
        return path
