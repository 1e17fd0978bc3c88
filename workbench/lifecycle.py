"""What every session shares: subscribe, run in the caller's thread or a background one, wait.

A subclass provides ``_bus`` (an ``EventBus``), ``_loop()`` (the whole tuning
run, which sets ``status`` and ``error``), ``summary()`` and ``_thread_name``.
"""

from __future__ import annotations

import threading

from .errors import WorkbenchError
from .events import EventBus


ENDED_STATUSES = ("finished", "stopped", "failed")


class PauseControl:
    """Pause, resume and stop of a loop that runs in another thread and calls ``_block_while_paused`` between its
    steps while ``paused``. A subclass sets ``status``; one in ``ENDED_STATUSES`` cannot be paused."""

    status: str = "created"

    def _init_pause_control(self) -> None:
        self._running = threading.Event()  # cleared while paused
        self._running.set()
        self._stop = threading.Event()
        self._control = threading.Lock()  # a pause and a stop asked at once: the stop wins

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def pause(self) -> None:
        """Pause after the candidate being measured (before the first round, if asked before it). Ignored once
        ``stop()`` was asked or the session has ended: a pause never outlives a stop."""
        with self._control:
            if not self._stop.is_set() and self.status not in ENDED_STATUSES:
                self._running.clear()

    def resume_running(self) -> None:
        self._running.set()

    def stop(self) -> None:
        """Stop after the candidate being measured; a paused session stops at once."""
        with self._control:
            self._stop.set()
            self._running.set()

    def _block_while_paused(self) -> None:
        """Returns when resumed or stopped."""
        while not self._running.wait(0.5):
            if self._stop.is_set():
                return


class SessionLifecycle(PauseControl):
    _thread: threading.Thread | None = None
    error: BaseException | None = None

    def _init_lifecycle(self) -> None:
        self._bus = EventBus()
        self._init_pause_control()
        self._thread = None
        self.status = "created"
        self.error = None
        self.trials_done = 0
        self.round = 0

    def subscribe(self, fn):
        """``fn(event)`` for every event of this session (called on the tuning thread)."""
        return self._bus.subscribe(fn)

    def run(self) -> dict:
        """Tune until the budget is spent or ``stop()``; returns the summary."""
        self._loop()
        if self.status == "failed" and self.error is not None:
            raise self.error
        return self.summary()

    def start(self) -> threading.Thread:
        if self._thread is not None and self._thread.is_alive():
            raise WorkbenchError("this session is already running")
        self._thread = threading.Thread(target=self._loop, name=f"tuning-{self._thread_name}", daemon=True)
        self._thread.start()
        return self._thread

    def wait(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True
