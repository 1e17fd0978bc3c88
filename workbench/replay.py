"""Replay a recorded session's events as if it were running live.

For classrooms (show a tuning run without waiting for it) and for
deterministic UI tests. A ``ReplaySession`` has the parts of
``TuningSession``'s interface that views use: ``subscribe``, ``start``,
``pause``, ``resume_running``, ``stop``, ``status``, ``records()``,
``session_id``, ``store``; it re-emits the stored events in order, with the
recorded gaps divided by ``speed``.
"""

from __future__ import annotations

import threading
import time

from .errors import WorkbenchError
from .events import Event, EventBus, EventKind, Paused, Resumed, Stopped
from .lifecycle import PauseControl
from .noise import MeasurementGate
from .store import WHAT_IF_CHOSEN_BY, WHAT_IF_ROUND, RecordStore


class ReplaySession(PauseControl):
    """A recorded session played back; an ``interfaces.SessionView``."""

    replay = True
    controller = None  # a replay cannot be steered

    def __init__(self, db, session_id: int | None = None, speed: float = 10.0, max_gap: float = 2.0):
        self.store = db if isinstance(db, RecordStore) else RecordStore(db, readonly=True)
        sessions = self.store.sessions()
        if not sessions:
            raise WorkbenchError(f"{self.store.path!r} holds no session to replay")
        row = sessions[-1] if session_id is None else self.store.session(session_id)
        self.session_id = row["id"]
        self.row = row
        self.db_path = self.store.path
        self.workload_name = row["workload"]
        self.strategies = row["strategies"]
        self.trials = row["trials"]
        if speed <= 0:
            raise WorkbenchError("replay speed must be positive")
        self.speed = speed
        self.max_gap = max_gap
        self._events = self.store.session_events(self.session_id)
        self._bus = EventBus()
        self._init_pause_control()
        self._thread = None
        self._last_record_id = 0
        self.status = "created"
        # Nothing is timed in a replay: the gate is never held, so views draw whenever they like.
        self.measurement_gate = MeasurementGate()

    @property
    def workload_spec(self) -> dict:
        return self.row["spec"]

    def subscribe(self, fn):
        return self._bus.subscribe(fn)

    def start(self):
        self._thread = threading.Thread(target=self._loop, name="replay", daemon=True)
        self._thread.start()
        return self._thread

    def run(self):
        self._loop()

    def wait(self, timeout=None) -> bool:
        if self._thread:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def records(self, with_trace: bool = False):
        df = self.store.records(session_id=self.session_id, with_trace=with_trace)
        return df[df["id"] <= self._last_record_id].reset_index(drop=True) if len(df) else df

    def _trials_done(self) -> int:
        return int(
            self.store.conn.execute(
                # a person's what-if records (store.is_what_if) spend no trials
                "SELECT COUNT(*) FROM records WHERE session_id=? AND id<=? AND NOT (chosen_by=? AND round=?)",
                (self.session_id, self._last_record_id, WHAT_IF_CHOSEN_BY, WHAT_IF_ROUND),
            ).fetchone()[0]
        )

    def _loop(self):
        self.status = "running"
        prev = None
        for e in self._events:
            if self._stop.is_set():
                break
            if not self._running.is_set():
                self.status = "paused"
                self._bus.emit(
                    Event.of(
                        Paused(trials_done=self._trials_done(), replay=True), self.session_id, time.time(), e["elapsed"]
                    )
                )
                self._block_while_paused()
                if self._stop.is_set():
                    break
                self.status = "running"
                self._bus.emit(
                    Event.of(
                        Resumed(trials_done=self._trials_done(), replay=True),
                        self.session_id,
                        time.time(),
                        e["elapsed"],
                    )
                )
            if prev is not None:
                time.sleep(min(self.max_gap, max(0.0, e["elapsed"] - prev) / self.speed))
            prev = e["elapsed"]
            if e["kind"] == EventKind.CANDIDATE_MEASURED:
                self._last_record_id = e["data"]["record"]["id"]
            self._bus.emit(Event(e["kind"], self.session_id, e["time"], e["elapsed"], e["data"], e["id"]))
        if self._stop.is_set():
            self.status = "stopped"
            self._bus.emit(
                Event.of(
                    Stopped(trials_done=self._trials_done(), replay=True), self.session_id, time.time(), prev or 0.0
                )
            )
        else:
            self.status = "finished"
