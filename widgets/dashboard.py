"""``Dashboard``: every view over one session, fed by one rate-limited pump.

Threading (ipykernel >= 7): the session's subscriber runs on the tuning thread
and only puts events into an ``EventQueue``. One pump (a daemon thread, or a
test calling ``pump_once()``) drains the queue, folds the events into a
``SessionModel`` and redraws each view at most once per tick, inside
``fig.batch_update()`` / ``hold_sync()``; ticks are at most ``max_hz`` per
second. While the session times kernels (``session.measurement_gate``, a
``workbench.noise.MeasurementGate``) a tick draws nothing and leaves the events
for later: a browser redrawing a figure takes a core from the kernel being
timed. Button callbacks (which run on the kernel's shell or comm thread) only
call thread-safe session methods and ask the pump for a redraw.
"""

from __future__ import annotations

import html
import os
import threading
import time

import ipywidgets as W

from workbench.errors import WorkbenchError
from workbench.events import Event, EventQueue
from workbench.store import RecordStore
from workbench.workloads import workload_from_spec

from .controls import ControlsView
from .costmodel import CostModelView
from .decisions import DecisionSpaceView
from .inspector import CandidateInspector
from .model import STATUS, TERMINAL, SessionModel
from .sketch import SketchView
from .table import RecordsTable, csv_path
from .throughput import ThroughputView
from .timeline import TimelineView


class Dashboard:
    """Live (or replayed) view of a tuning session.

    ``Dashboard(session)`` watches an existing session (events it already
    emitted are read back from its store); ``Dashboard(session_factory=f)``
    creates one with ``f(trials=, preset=, strategy=)`` when Start is pressed.
    """

    picker = None  # Dashboard.open's SessionPicker: the sessions of its store

    def __init__(
        self,
        session=None,
        *,
        session_factory=None,
        trials: int = 64,
        preset: str = "quick",
        strategy: str = "auto",
        max_hz: float = 4.0,
        max_points: int = 400,
        autopump: bool = True,
        title: str | None = None,
    ):
        if session is None and session_factory is None:
            raise ValueError("a Dashboard needs a session or a session_factory")
        if not 0 < max_hz <= 4.0:
            raise ValueError("max_hz must be in (0, 4]: faster redraws flood the browser and gain nothing")
        self.session = None
        self.session_factory = session_factory
        self.period = 1.0 / max_hz
        self.autopump = autopump
        self.queue = EventQueue()
        self.model = SessionModel()
        self.ticks = 0  # redraws done
        self.held_ticks = 0  # ticks that drew nothing because the session was timing kernels
        self._pending: list[Event] = []  # events drained during a timing phase, not applied yet
        self._inspect: int | None = None  # a record asked for in the inspector, shown at the next tick that draws
        self._drew = False  # the last pump tick sent something to the browser
        self._lock = threading.RLock()
        self._unsubscribe = None
        self._store = None
        self._workload = None
        self._request = None  # "pause" / "stop" while the session has not acted on it yet
        self._ui_dirty = threading.Event()
        self._pump_thread = None
        self._pump_stop = threading.Event()

        self.throughput = ThroughputView(max_points=max_points)
        self.cost_model = CostModelView(max_points=max_points)
        self.table = RecordsTable(csv_path_of=self._csv_path)
        self.inspector = CandidateInspector(
            self.model, self._store_of, session_of=lambda: self.session, on_measured=lambda _rec: self._poke()
        )
        self.sketches = SketchView(self._workload_of)
        self.controls = ControlsView(
            self, trials=trials, preset=preset, strategy=strategy, can_configure=session is None
        )
        for view in (self.throughput, self.cost_model):
            view.on_select(self._select)
        self.tabs = W.Tab(
            children=[self.cost_model.fig.box, self.table.widget, self.inspector.widget, self.sketches.widget],
            titles=["Cost model", "Records", "Inspector", "Sketches"],
        )
        self.decisions = DecisionSpaceView(
            traces_of=self._traces_of, workload_of=self._workload_of, cost_model_of=self._cost_model_of, poke=self._poke
        )
        self.decisions.link(table=self.table, throughput=self.throughput)
        self.timeline = TimelineView()
        self.tabs.children = (*self.tabs.children, self.decisions.widget, self.timeline.widget)
        self.tabs.set_title(len(self.tabs.children) - 2, "Decision space")
        self.tabs.set_title(len(self.tabs.children) - 1, "Timeline")
        self.tabs.observe(self._tab_shown, names="selected_index")
        self.decisions.visible = False
        self.title = W.HTML(f"<h3 style='margin:4px 0'>{html.escape(title or 'Tuning Workbench')}</h3>")
        self.widget = W.VBox([self.title, self.controls.widget, self.throughput.fig.box, self.tabs])
        if session is not None:
            self.attach(session)

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def for_workload(
        cls,
        workload: str,
        trials: int = 64,
        db: str = "workbench.db",
        preset: str = "quick",
        strategy: str = "auto",
        seed: int = 0,
        **kw,
    ) -> "Dashboard":
        """A dashboard whose Start button creates ``TuningSession(workload, ...)`` with the chosen settings."""
        from workbench import TuningSession

        overrides = kw.pop("preset_overrides", {})

        def factory(trials, preset, strategy):
            return TuningSession(
                workload, trials=trials, preset=preset, strategy=strategy, seed=seed, db=db, **overrides
            )

        return cls(
            session_factory=factory,
            trials=trials,
            preset=preset,
            strategy=strategy,
            title=kw.pop("title", f"Tuning Workbench · {workload}"),
            **kw,
        )

    @classmethod
    def replay(
        cls, db: str, session_id: int | None = None, speed: float = 10.0, max_gap: float = 2.0, **kw
    ) -> "Dashboard":
        """A dashboard whose Start button replays a recorded session's events as if live."""
        from workbench.replay import ReplaySession

        def factory(**_settings):
            return ReplaySession(db, session_id=session_id, speed=speed, max_gap=max_gap)

        probe = ReplaySession(db, session_id=session_id)
        dash = cls(
            session_factory=factory,
            trials=probe.trials,
            strategy=probe.row["strategy_arg"],
            title=kw.pop("title", f"Replay · {probe.workload_name} · {os.path.basename(db)}"),
            **kw,
        )
        dash.controls.trials.disabled = dash.controls.preset.disabled = dash.controls.strategy_set.disabled = True
        probe.store.close()
        return dash

    @classmethod
    def open(cls, db: str, session_id: int | None = None, **kw) -> "Dashboard":
        """A dashboard over a records store: its sessions in a picker (status as it is now: "interrupted" for one
        whose process died), the chosen one (default: the latest) shown as stored, and "Resume session" for one
        that no process is running (``TuningSession.resume``, up to the trial budget beside it)."""
        from .sessions import SessionPicker, StoredSession, session_rows

        rows = session_rows(db)
        if not rows:
            raise WorkbenchError(f"{db!r} holds no session yet")
        ids = [r["id"] for r in rows]
        if session_id is None:
            session_id = ids[-1]
        elif session_id not in ids:
            raise WorkbenchError(f"no session {session_id} in {db!r}; its sessions are {ids}")
        shown = StoredSession(db, session_id)
        dash = cls(shown, title=kw.pop("title", f"Tuning Workbench · {os.path.basename(db)}"), **kw)
        dash.picker = SessionPicker(shown.db_path, rows, session_id, show=dash.show_stored, resume=dash.resume_stored)
        dash.widget.children = (dash.title, dash.picker.widget, *dash.widget.children[1:])
        return dash

    def show_stored(self, session_id: int) -> None:
        """Show session ``session_id`` of the opened store as it is stored (the picker's choice)."""
        from .sessions import StoredSession

        if self._running_here():
            raise WorkbenchError("the session shown is running here: stop it before showing another one")
        self.attach(StoredSession(self.picker.db_path, session_id))

    def resume_stored(self, session_id: int | None = None, trials: int | None = None):
        """Resume a session of the opened store in this kernel (``TuningSession.resume``: no record is lost, the
        search goes on up to ``trials``) and watch it; returns the ``TuningSession``."""
        from workbench import TuningSession

        if self._running_here():
            raise WorkbenchError("the session shown is running here: stop it before resuming another one")
        sid = self.session.session_id if session_id is None else session_id
        session = TuningSession.resume(self.picker.db_path, session_id=sid, trials=trials)
        self.attach(session)
        self.start()
        return session

    def _running_here(self) -> bool:
        s = self.session
        return s is not None and not getattr(s, "read_only", False) and self._alive(s)

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    # ------------------------------------------------------------------ session wiring
    def attach(self, session) -> None:
        """Watch ``session``; events it emitted before are read back from its store."""
        with self._lock:
            if self._unsubscribe:
                self._unsubscribe()
            self.session = session
            self.model.reset()
            self.queue.drain()
            self._pending = []
            self._store = None
            self._workload = None
            self._request = None
            self._unsubscribe = session.subscribe(self.queue.put)
            if not session.replay:  # a resumed session too: what it did before is in its store
                stored = [
                    Event(e["kind"], session.session_id, e["time"], e["elapsed"], e["data"], e["id"])
                    for e in self._store_of().session_events(session.session_id)
                ]
                # what the session emitted while its store was read is queued already, ahead of the older stored
                # events: one stream again, in the order the store gave them ids (unstored ones last)
                known = {e.id for e in stored if e.id}
                live = [e for e in self.queue.drain() if not e.id or e.id not in known]
                for e in sorted(stored + live, key=lambda e: (not e.id, e.id or 0)):
                    self.queue.put(e)
            self._ui_dirty.set()
        self.pump_once()
        if self.autopump and (not self.model.terminal or self._may_start(session)):
            # also for a session not started yet, a resumed one too (its stored events end with the earlier stop):
            # user code may call session.start() itself
            self._start_pump()

    def _store_of(self) -> RecordStore:
        """A read-only store of the attached session: views read records without touching the engine's connection."""
        if self._store is None:
            s = self.session
            self._store = RecordStore(s.db_path, readonly=True)
        return self._store

    def _traces_of(self, after_id: int = 0) -> dict:
        """Record id -> stored trace of the attached session's records after ``after_id`` (the decision space
        names decisions from them)."""
        sid = self.model.session_id
        return {} if sid is None else {r["id"]: r["trace"] for r in self._store_of().traces(sid, after_id)}

    def _cost_model_of(self):
        return getattr(self.session, "cost_model", None)

    def _csv_path(self, filtered: bool) -> str | None:
        """Where "Export CSV" writes: next to the attached session's store."""
        db = getattr(self.session, "db_path", None)
        return None if not db or self.model.session_id is None else csv_path(db, self.model.session_id, filtered)

    def _tab_shown(self, change) -> None:
        index = change["new"]
        self.decisions.visible = index is not None and self.tabs.children[index] is self.decisions.widget
        if self.decisions.visible:
            self._poke()  # draw what arrived while it was hidden

    def _workload_of(self):
        if self._workload is None:
            spec = self.model.spec
            if spec is None and self.session is not None:
                spec = self.session.workload_spec
            if spec is None:
                return None
            self._workload = workload_from_spec(spec)
        return self._workload

    # ------------------------------------------------------------------ actions (buttons and code)
    def start(self):
        """Start the attached session, or create one from the factory (a new one after a finished session)."""
        with self._lock:
            s = self.session
            if s is None or s.status in ("finished", "stopped", "failed"):
                if self.session_factory is None:
                    raise RuntimeError("this session has ended and the dashboard has no session_factory")
                c = self.controls
                s = self.session_factory(trials=c.trials.value, preset=c.preset.value, strategy=c.strategy_set.value)
                self.attach(s)
            if self._alive(s):
                return s
            s.start()
            self._ui_dirty.set()
        if self.autopump:
            self._start_pump()
        else:
            self.pump_once()
        return s

    @staticmethod
    def _alive(s) -> bool:
        return s is not None and not s.wait(0)

    @staticmethod
    def _may_start(s) -> bool:
        """A session of this process not started yet: user code may start it (a resumed one too, whose stored
        events end with its earlier stop), so the pump keeps going."""
        return s is not None and s.status == "created" and not s.replay and not getattr(s, "read_only", False)

    def pause(self) -> None:
        if self.session is not None:
            self.session.pause()
            self._request = "pause"
            self._poke()

    def resume(self) -> None:
        if self.session is not None:
            self.session.resume_running()
            self._request = None
            self._poke()

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
            self._request = "stop"
            self._poke()

    def pick(self, strategy: str) -> None:
        ctrl = self.session.controller if self.session is not None else None
        if ctrl is not None:
            ctrl.pick(strategy)
            self._poke()

    def auto(self) -> None:
        ctrl = self.session.controller if self.session is not None else None
        if ctrl is not None:
            ctrl.auto()
            self._poke()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the session ends (or ``timeout``); then draw its final state."""
        done = self.session.wait(timeout) if self.session is not None else True
        if done:
            self._stop_pump()
            # the pump may have drawn the final status while the session's thread was still alive: draw the
            # controls once more so that what was disabled for a running session is enabled again
            self._ui_dirty.set()
        self.pump_once()
        return done

    def close(self) -> None:
        self._stop_pump()
        if self._unsubscribe:
            self._unsubscribe()
        if self._store is not None:
            self._store.close()
        figures = (
            self.throughput.fig,
            self.cost_model.fig,
            self.decisions.fig,
            self.decisions.importance_fig,
            self.timeline.fig,
        )
        for w in (self.widget, *figures):
            w.close()

    def _select(self, record_id: int) -> None:
        # Showing a candidate rebuilds its program from the trace (TVM, a core for a moment) and sends its TIR:
        # like any drawing it waits for the end of a timing phase (the pump's next tick that may draw).
        self.tabs.selected_index = 2
        self._inspect = record_id
        self._poke()

    def _poke(self) -> None:
        self._ui_dirty.set()
        if self._pump_thread is None or not self._pump_thread.is_alive():
            self.pump_once()

    # ------------------------------------------------------------------ the pump
    def pump_once(self) -> int:
        """Drain the queue, fold events into the model, redraw the views that changed; returns the events applied.

        While the session times kernels (its ``measurement_gate`` is held) nothing is drawn and no event is
        applied: they wait in ``_pending`` for the first tick after the timing phase. Only the controls may be
        redrawn then, for a button just pressed. (A session paused, or waiting for a quiet machine, times nothing
        and suspends its gate meanwhile, so those are drawn as usual.)
        """
        with self._lock:
            gate = self.session.measurement_gate if self.session is not None else None
            began = gate is not None and gate.begin_draw()
            if gate is not None and not began:
                self._pending.extend(self.queue.drain())
                self._hold()
                return 0
            self._drew = False
            try:
                return self._draw()
            finally:
                if began:
                    gate.end_draw(drew=self._drew)

    def _draw(self) -> int:
        events = self._pending + self.queue.drain()
        self._pending = []
        for ev in events:
            self.model.apply(ev)
        s = self.session
        if s is not None and not self.model.terminal and s.status in TERMINAL and not self._alive(s):
            # a ReplaySession ends without a terminal event when stopped mid-way (its status is the truth), or when
            # the recorded session has none: then the store's status as it is now ("interrupted" for a dead process)
            self.model.status = s.status
            if s.replay and s.status == "finished" and self._store_of().session_status(s.session_id) == "interrupted":
                self.model.status = "interrupted"
            self.model.mark(STATUS)
        if self._inspect is not None:
            record_id, self._inspect = self._inspect, None
            self.inspector.show(record_id)
        changes = self.model.take_changes()
        if self._ui_dirty.is_set():
            self._ui_dirty.clear()
            changes.add("ui")
        if self._request == "pause" and (self.model.status != "running" or not self.session.paused):
            self._request = None
        if not changes:
            return len(events)
        self._drew = True
        self.ticks += 1
        self.throughput.refresh(self.model, changes)
        self.cost_model.refresh(self.model, changes)
        self.table.refresh(self.model, changes)
        self.decisions.refresh(self.model, changes)
        self.timeline.refresh(self.model, changes)
        self.controls.refresh(self.model, changes, self.session, self._request)
        if self.picker is not None and changes & {STATUS, "ui"}:
            self.picker.refresh(self.model.status, busy=self._running_here())
        if "session" in changes:
            self.sketches.set_strategies(self.model.strategies)
        return len(events)

    def _hold(self) -> None:
        """A tick during a timing phase: keep the events for later; redraw the controls alone for a button just
        pressed, so that it answers at once."""
        self.held_ticks += 1
        if self._ui_dirty.is_set():
            self._ui_dirty.clear()
            self.controls.refresh(self.model, {"ui"}, self.session, self._request, held=True)

    def _start_pump(self) -> None:
        if self._pump_thread is not None and self._pump_thread.is_alive():
            return
        self._pump_stop.clear()
        self._pump_thread = threading.Thread(target=self._pump_loop, name="workbench-ui-pump", daemon=True)
        self._pump_thread.start()

    def _stop_pump(self) -> None:
        self._pump_stop.set()
        t = self._pump_thread
        if t is not None and t is not threading.current_thread():
            t.join(5)
        self._pump_thread = None

    def _pump_loop(self) -> None:
        while not self._pump_stop.is_set():
            t0 = time.monotonic()
            try:
                applied = self.pump_once()
            except Exception as e:  # a drawing bug must not kill the pump: show it and keep going
                applied = 0
                self.controls.status.value = f"<b style='color:#c92a2a'>dashboard error: {html.escape(repr(e))}</b>"
            if (
                self.model.terminal
                and applied == 0
                and not self._alive(self.session)
                and not self._may_start(self.session)
            ):
                self.pump_once()  # whatever arrived between the drain and the liveness check
                self._pump_thread = None
                return
            self._pump_stop.wait(max(0.0, self.period - (time.monotonic() - t0)))
