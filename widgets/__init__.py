"""Jupyter views of a tuning session: they read its events and records, and never steer the search themselves.

``Dashboard`` composes them; each view also works on its own with a ``SessionModel``.
"""

from .compare import CompareView
from .controls import ControlsView
from .costmodel import CostModelView, round_quality
from .dashboard import Dashboard
from .decisions import DecisionSpaceView, decision_table
from .inspector import CandidateInspector
from .model import SessionModel
from .sketch import SketchView
from .table import RecordsTable
from .throughput import ThroughputView
from .timeline import TimelineView, timeline_frame

__all__ = [
    "Dashboard",
    "CompareView",
    "SessionModel",
    "ThroughputView",
    "CostModelView",
    "CandidateInspector",
    "SketchView",
    "ControlsView",
    "RecordsTable",
    "DecisionSpaceView",
    "TimelineView",
    "timeline_frame",
    "decision_table",
    "round_quality",
]
