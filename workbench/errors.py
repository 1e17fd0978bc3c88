"""User-facing errors.

A ``WorkbenchError`` is a mistake the user can fix (bad spec, unknown workload,
unreadable store). The CLI prints its message on one line and exits with 2;
anything else is a bug and keeps its traceback.
"""


class WorkbenchError(Exception):
    """A user mistake: reported as one line, exit code 2."""


class StoreLockedError(WorkbenchError):
    """Another process holds the records store."""


class SessionRunningError(WorkbenchError):
    """The session is being tuned by another process (it holds the session's lock)."""
