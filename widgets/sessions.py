"""The sessions of one records store (``Dashboard.open``): a picker that lists them, and a stored session shown as
its store holds it, with Resume for one that no process is running."""

from __future__ import annotations

import datetime
import threading

import ipywidgets as W
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.events import Event, EventBus
from workbench.store import RecordStore, effective_status, session_writer

from .common import esc, fmt

LISTED = ["id", "workload", "strategy", "status", "trials", "best rate", "best ms", "created"]


def session_rows(db_path: str) -> list[dict]:
    """``RecordStore.session_list()`` of the store at ``db_path`` (a fresh read-only view, closed again)."""
    store = RecordStore(db_path, readonly=True)
    try:
        return store.session_list()
    finally:
        store.close()


def sessions_frame(rows: list[dict]) -> pd.DataFrame:
    """The picker's list, one row per session (``RecordStore.session_list`` rows): id, workload, strategy, status
    as it is now ("interrupted" for a session whose process died), trials done/budget, best verified throughput
    (``best rate``, in ``unit``: GOPS for an int8 workload, else GFLOPS) and latency, creation time (local), and
    whether it can be resumed."""
    out = []
    for r in rows:
        created = r.get("created_at")
        out.append(
            {
                "id": r["id"],
                "workload": r["workload"],
                "strategy": r["strategy_arg"],
                "status": r["status"],
                "trials": f"{r['trials_done']}/{r['trials']}",
                "best rate": r["best_gflops"],
                "best ms": r["best_latency_ms"],
                "created": datetime.datetime.fromtimestamp(created).strftime("%Y-%m-%d %H:%M")
                if isinstance(created, (int, float))
                else str(created),
                "resumable": bool(r["resumable"]),
                "unit": r.get("rate_unit") or "GFLOPS",
            }
        )
    return pd.DataFrame(out, columns=LISTED + ["resumable", "unit"])


def session_label(row: dict) -> str:
    """A session in one line of the dropdown (plain text: a dropdown shows its options as text)."""
    unit = row.get("rate_unit") or "GFLOPS"
    best = f" · best {fmt(row['best_gflops'], '.1f')} {unit}" if row.get("best_gflops") is not None else ""
    return (
        f"#{row['id']} · {row['workload']} · {row['strategy_arg']} · {row['status']} · "
        f"{row['trials_done']}/{row['trials']} trials{best}"
    )


def sessions_html(frame: pd.DataFrame, chosen: int | None = None) -> str:
    """The list as an HTML table, every value escaped; the chosen session in bold."""
    colors = {"running": "#2b8a3e", "paused": "#e67700", "interrupted": "#c92a2a", "failed": "#c92a2a"}
    head = "".join(f"<th>{esc(c)}</th>" for c in LISTED)
    body = []
    for r in frame.to_dict("records"):
        cells = []
        for c in LISTED:
            v = r[c]
            if c == "best rate":
                text = fmt(v, ".1f", none="")
                text = f"{text} {esc(r['unit'])}" if text else fmt(None)
            elif c == "best ms":
                text = fmt(v, ".4f")
            else:
                text = esc(v)
            if c == "status":
                text = f"<span style='color:{colors.get(v, '#333')}'>{text}</span>"
            cells.append(f"<td>{text}</td>")
        style = " style='font-weight:bold;background:#e7f5ff'" if r["id"] == chosen else ""
        body.append(f"<tr{style}>{''.join(cells)}</tr>")
    return (
        "<table class='wb-sessions' style='font-size:12px;border-collapse:collapse'>"
        f"<tr style='background:#f3f3f3'>{head}</tr>{''.join(body)}</table>"
    )


class StoredSession:
    """A session as its store holds it, for ``Dashboard.attach``: its events are read back; nothing runs here.

    ``status`` is the session's status as it is now (``workbench.store.effective_status``): "interrupted" for one
    whose process died while it ran. While another process tunes it (``writer_pid``), a subscriber also gets the
    events that process writes, polled every ``poll_seconds``, until it ends.
    """

    replay = False
    read_only = True  # the controls offer nothing to start, pause or stop
    controller = None
    measurement_gate = None
    paused = False
    poll_seconds = 1.0

    def __init__(self, db: str, session_id: int):
        store = RecordStore(db, readonly=True)
        try:
            self.row = store.session(session_id)
            self.db_path = store.path
            self.status = effective_status(store.path, self.row)
        finally:
            store.close()
        self.session_id = session_id
        self.trials = self.row["trials"]
        self.writer_pid = session_writer(self.db_path, session_id)
        self._bus = EventBus()
        self._subscribers = 0
        self._follow_thread = None
        self._stop_following = threading.Event()
        self._lock = threading.Lock()

    @property
    def workload_spec(self) -> dict:
        return self.row["spec"]

    def subscribe(self, fn):
        unsubscribe = self._bus.subscribe(fn)
        with self._lock:
            self._subscribers += 1
            following = self._follow_thread is not None and self._follow_thread.is_alive()
            if self.writer_pid is not None and not following:
                self._stop_following.clear()
                # from the newest event stored now, read before the subscriber reads the stored ones (as a dashboard
                # does after subscribing): what is written between the two reads comes twice (ids drop the second
                # copy), never not at all
                self._follow_thread = threading.Thread(
                    target=self._follow, args=(self._newest_event_id(),), name="stored-session-follow", daemon=True
                )
                self._follow_thread.start()
        done = []

        def stop():
            unsubscribe()
            with self._lock:
                if not done:
                    done.append(True)
                    self._subscribers -= 1
                    if not self._subscribers:  # no one watches any more
                        self._stop_following.set()

        return stop

    def _newest_event_id(self) -> int:
        store = RecordStore(self.db_path, readonly=True)
        try:
            r = store.conn.execute("SELECT MAX(id) FROM events WHERE session_id=?", (self.session_id,)).fetchone()
            return r[0] or 0
        finally:
            store.close()

    def _follow(self, last: int) -> None:
        store = RecordStore(self.db_path, readonly=True)
        try:
            while True:
                alive = session_writer(self.db_path, self.session_id) is not None
                for e in store.events(self.session_id, after_id=last):
                    last = e["id"]
                    self._bus.emit(Event(e["kind"], self.session_id, e["time"], e["elapsed"], e["data"], e["id"]))
                if not alive:  # its process ended: what it wrote last is read above
                    self.row = store.session(self.session_id)
                    self.status = effective_status(self.db_path, self.row)
                    self.writer_pid = None
                    return
                if self._stop_following.wait(self.poll_seconds):
                    return
        finally:
            store.close()

    def wait(self, timeout: float | None = None) -> bool:
        t = self._follow_thread
        if t is not None:
            t.join(timeout)
            return not t.is_alive()
        return True

    def start(self):
        raise WorkbenchError(
            f"session {self.session_id} is shown as stored, not run here: resume it (Dashboard.open's "
            "'Resume session', or TuningSession.resume)"
        )

    def pause(self) -> None:
        pass

    def resume_running(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def records(self, with_trace: bool = False):
        store = RecordStore(self.db_path, readonly=True)
        try:
            return store.records(session_id=self.session_id, with_trace=with_trace)
        finally:
            store.close()


class SessionPicker:
    """Lists the sessions of a store; choosing one calls ``show(session_id)``, "Resume session" calls
    ``resume(session_id, trials)`` for one that no process is running (up to the trial budget in the box)."""

    def __init__(self, db_path: str, rows: list[dict], chosen: int, show, resume):
        self.db_path = db_path
        self.show = show
        self.resume_fn = resume
        self.choice = W.Dropdown(description="session", layout=W.Layout(width="560px"))
        self.budget = W.BoundedIntText(
            value=1, min=1, max=1_000_000, description="to trials", layout=W.Layout(width="170px")
        )
        self.resume = W.Button(description="Resume session", icon="play", layout=W.Layout(width="170px"))
        self.reload = W.Button(description="Reload", icon="refresh", layout=W.Layout(width="90px"))
        self.message = W.HTML("")
        self.listing = W.HTML("", layout=W.Layout(max_height="180px", overflow="auto"))
        self.widget = W.VBox([W.HBox([self.choice, self.budget, self.resume, self.reload]), self.message, self.listing])
        self.widget.add_class("wb-sessions-picker")
        self.rows: list[dict] = []
        self.busy = False  # the dashboard's session runs in this kernel: no switching, no resuming
        self._syncing = False
        self._seen_status = None
        self._fill(rows, chosen)
        self.choice.observe(self._chosen, names="value")
        self.budget.observe(lambda _c: self._buttons(), names="value")
        self.resume.on_click(lambda _b: self._resume_clicked())
        self.reload.on_click(lambda _b: self.refresh(force=True))

    def row(self, session_id: int | None = None) -> dict | None:
        sid = self.choice.value if session_id is None else session_id
        return next((r for r in self.rows if r["id"] == sid), None)

    def can_resume(self, row: dict | None, trials: int) -> bool:
        """No process runs it, it is a tuning session, and there is something left to do up to ``trials``."""
        return bool(row and row["resumable"] and (row["status"] != "finished" or trials > row["trials_done"]))

    def _fill(self, rows: list[dict], chosen: int | None) -> None:
        self.rows = rows
        self._syncing = True
        try:
            self.choice.options = [(session_label(r), r["id"]) for r in rows]
            if chosen is not None and self.row(chosen) is not None:
                self.choice.value = chosen
            r = self.row()
            if r is not None:
                self.budget.value = max(1, r["trials"], r["trials_done"])
        finally:
            self._syncing = False
        self.listing.value = sessions_html(sessions_frame(rows), self.choice.value)
        self._buttons()

    def _buttons(self) -> None:
        r = self.row()
        self.choice.disabled = self.busy
        self.resume.disabled = self.busy or not self.can_resume(r, self.budget.value)
        if r is not None and r["writer_pid"] is not None:
            self.resume.tooltip = f"process {r['writer_pid']} is tuning this session"
        elif r is not None and not r["resumable"]:
            self.resume.tooltip = "a transfer-tuning or imported session holds records, not a search to continue"
        else:
            self.resume.tooltip = "continue this session here, up to the trial budget on the left"

    def refresh(self, status: str | None = None, busy: bool | None = None, force: bool = False) -> None:
        """List the sessions again (when the shown session's ``status`` changed, or ``force``)."""
        if busy is not None and busy != self.busy:
            self.busy = busy
            force = True
        if not force and status == self._seen_status:
            return
        self._seen_status = status
        self._fill(session_rows(self.db_path), self.choice.value)

    def _chosen(self, change) -> None:
        if self._syncing or change["new"] is None:
            return
        r = self.row()
        self.budget.value = max(1, r["trials"], r["trials_done"])
        self.listing.value = sessions_html(sessions_frame(self.rows), change["new"])
        self.message.value = ""
        try:
            self.show(change["new"])
        except WorkbenchError as e:
            self.message.value = f"<span style='color:#c92a2a'>{esc(e)}</span>"
        self._buttons()

    def _resume_clicked(self) -> None:
        self.message.value = "<i>resuming…</i>"
        try:
            self.resume_fn(self.choice.value, self.budget.value)
        except WorkbenchError as e:  # e.g. another process took it meanwhile
            self.message.value = f"<span style='color:#c92a2a'>{esc(e)}</span>"
            return
        self.message.value = ""
