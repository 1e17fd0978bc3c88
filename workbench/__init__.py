"""Tuning Workbench engine: Ansor-style auto-scheduling on TVM 0.27, usable without any UI."""

from .errors import WorkbenchError
from .events import Event, EventQueue
from .session import TuningSession
from .store import RecordStore
from .workloads import Workload, registry, workload_from_spec

__all__ = [
    "TuningSession",
    "RecordStore",
    "Workload",
    "Event",
    "EventQueue",
    "WorkbenchError",
    "registry",
    "workload_from_spec",
]
__version__ = "0.1.0"
