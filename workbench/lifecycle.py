"""What every session shares: subscribe, run in the caller's thread or a background one, wait.

A subclass provides ``_bus`` (an ``EventBus``), ``_loop()`` (the whole tuning
run, which sets ``status`` and ``error``), ``summary()`` and ``_thread_name``.
"""

from __future__ import annotations

import threading

from .errors import WorkbenchError
from .events import EventBus


class SessionLifecycle:
    _thread: threading.Thread | None = None
    status: str = "created"
    error: BaseException | None = None

    def _init_lifecycle(self) -> None:
        self._bus = EventBus()
        self._running = threading.Event()  # cleared while paused
        self._running.set()
        self._stop = threading.Event()
        self._thread = None
        self.status = "created"
        self.error = None
        self.trials_done = 0
        self.round = 0

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

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
