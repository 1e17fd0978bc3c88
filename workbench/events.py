"""Events: how a session tells the world what it did.

Every state change of a session is an ``Event``: a kind from ``EventKind`` and a typed payload, one frozen
dataclass per kind (below, with what each field means). The payload is written to the records store first
(as a JSON object of its fields, optional fields left out when unset), then handed to subscribers.
Subscribers run on the tuning thread: a UI must only enqueue (see ``EventQueue``) and do its work elsewhere.

``Event.data`` is the stored form (a dict); ``Event.payload`` the typed one, rebuilt from ``data`` for
events read back from a store (unknown keys from other versions are ignored, missing ones are None).

Units: latencies are milliseconds (``*_ms``) everywhere, in events, records, the controller and the task
scheduler; raw timing samples keep TVM's seconds under names ending in ``_secs``; wall-clock durations are
seconds (``seconds``, ``elapsed_s``, ``waited_s``, ``phase_seconds``).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import ClassVar

log = logging.getLogger("workbench")


class EventKind(str, enum.Enum):
    """Every kind of event a session, a network session or a replay emits (a ``str``: compares equal to its
    value, so stored kinds and enum members mix)."""

    SESSION_STARTED = "session_started"
    BASELINE_MEASURED = "baseline_measured"
    CONTROLLER_DECISION = "controller_decision"
    ROUND_STARTED = "round_started"
    CANDIDATES_PROPOSED = "candidates_proposed"
    CANDIDATE_MEASURED = "candidate_measured"
    NEW_BEST = "new_best"
    ROUND_FINISHED = "round_finished"
    MODEL_TRAINED = "model_trained"
    PAUSED = "paused"
    RESUMED = "resumed"
    RUNNER_HEALTH = "runner_health"
    CALIBRATION = "calibration"
    MEASUREMENT_NOISE = "measurement_noise"
    RECORDS_MARKED_NOISY = "records_marked_noisy"
    BEST_REMEASURED = "best_remeasured"
    STOPPED = "stopped"
    FINISHED = "finished"
    FAILED = "failed"
    NETWORK_STARTED = "network_started"
    NETWORK_BASELINE = "network_baseline"
    TASK_CHOSEN = "task_chosen"
    NETWORK_ROUND = "network_round"
    TASK_DEAD = "task_dead"
    NETWORK_PAUSED = "network_paused"
    NETWORK_RESUMED = "network_resumed"
    NETWORK_FINISHED = "network_finished"
    NETWORK_STOPPED = "network_stopped"
    NETWORK_FAILED = "network_failed"

    def __str__(self) -> str:
        return self.value


TERMINAL_KINDS = frozenset({EventKind.STOPPED, EventKind.FINISHED, EventKind.FAILED})


def optional(default=None):
    """A payload field that is left out of the stored form while it is None."""
    return field(default=default, metadata={"optional": True})


@dataclass(frozen=True)
class Payload:
    """What an event says. Subclasses set ``KIND`` and declare their fields; ``to_data`` is the stored form."""

    KIND: ClassVar[EventKind]

    def to_data(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None and f.metadata.get("optional"):
                continue
            out[f.name] = v
        return out

    @classmethod
    def from_data(cls, data: dict) -> "Payload":
        return cls(
            **{
                f.name: data.get(f.name, f.default if f.default is not dataclasses.MISSING else None)
                for f in dataclasses.fields(cls)
            }
        )


PAYLOAD_TYPES: dict[EventKind, type[Payload]] = {}


def payload(cls):
    """Register a payload class under its ``KIND`` (one class per kind)."""
    cls = dataclass(frozen=True)(cls)
    if cls.KIND in PAYLOAD_TYPES:
        raise TypeError(f"two payload classes for {cls.KIND}")
    PAYLOAD_TYPES[cls.KIND] = cls
    return cls


# ---------------------------------------------------------------- a tuning session's events
@payload
class SessionStarted(Payload):
    KIND = EventKind.SESSION_STARTED
    workload: str
    spec: dict
    flops: float
    target: dict
    trials: int
    preset: str
    seed: int
    strategies: list
    mode: str  # "fixed" | "auto" | "round-robin"
    db: str
    resumed: bool
    trials_done: int
    reference: str = None  # "numpy" | "tvm-naive"
    weight_indices: list = None
    cost_model: str = None  # cost_model.COST_MODELS name
    prior: str = None  # what the shipped prior was trained on, when the session starts from one


@payload
class BaselineMeasured(Payload):
    KIND = EventKind.BASELINE_MEASURED
    naive_latency_ms: float | None
    reference: str


@payload
class ControllerDecision(Payload):
    KIND = EventKind.CONTROLLER_DECISION
    round: int
    strategy: str | None  # None: every strategy is exhausted or pruned
    chosen_by: str  # "controller" | "user"
    mode: str
    scores: dict  # {strategy: score}
    reason: str
    pruned: list


@payload
class RoundStarted(Payload):
    KIND = EventKind.ROUND_STARTED
    round: int
    strategy: str
    chosen_by: str
    scores: dict  # the controller's scores behind the choice
    n: int  # candidates asked of the search


@payload
class CandidatesProposed(Payload):
    KIND = EventKind.CANDIDATES_PROPOSED
    round: int
    strategy: str
    candidates: list  # [{index, predicted_score, mod_hash}]


@payload
class CandidateMeasured(Payload):
    KIND = EventKind.CANDIDATE_MEASURED
    record: dict  # the stored row without trace and features
    new_best: bool
    strategy_best: bool


@payload
class NewBest(Payload):
    KIND = EventKind.NEW_BEST
    record_id: int
    trial: int
    strategy: str
    latency_ms: float
    gflops: float
    verified: bool


@payload
class RoundFinished(Payload):
    KIND = EventKind.ROUND_FINISHED
    round: int
    strategy: str
    measured: int
    errors: int
    round_best_ms: float | None
    best_ms: float | None
    pruned: list
    controller: dict  # StrategyController.state(): what views show and what a resumed session restores
    phase_seconds: dict  # the round's wall seconds per step of the loop (session.PHASES)
    # When each step ran: [phase, start, end] in session-elapsed seconds (a timeline of the loop).
    phase_spans: list | None = optional()
    # Rule-based pruning (workbench.pruning), when enabled: this round's proposals dropped per rule, and the
    # session's running counts over every program the search scored.
    pruned_programs: dict | None = optional()
    pruning_counts: dict | None = optional()


@payload
class ModelTrained(Payload):
    KIND = EventKind.MODEL_TRAINED
    round: int
    n_samples: int
    seconds: float
    boost_rounds: int | None
    # the new model's largest gains per feature (``feature_importance()``, name -> gain), for views of a
    # recording, which have no model to ask
    feature_importance: dict | None = optional()


@payload
class Paused(Payload):
    KIND = EventKind.PAUSED
    trials_done: int
    replay: bool = optional()


@payload
class Resumed(Payload):
    KIND = EventKind.RESUMED
    trials_done: int
    replay: bool = optional()


@payload
class RunnerHealth(Payload):
    KIND = EventKind.RUNNER_HEALTH
    server: str  # "host:port"
    state: str  # "busy" | "idle" | "timeout" | "lost"
    measured: int = 0
    errors: int = 0
    timeouts: int = 0
    retried: int = 0
    in_flight: int = 0
    seconds: float = optional()
    message: str = optional()
    retrying: bool = optional()


@payload
class Calibration(Payload):
    """The calibration probe timed (workbench/noise.py); its baseline is the machine at its usual best (a low
    percentile of the session's readings)."""

    KIND = EventKind.CALIBRATION
    probe_ms: float | None
    baseline_ms: float | None
    drift: float  # fraction
    when: str  # "start" | "before round" | "after round"


@payload
class MeasurementNoise(Payload):
    """``noise.describe(data)`` says it in one line."""

    KIND = EventKind.MEASUREMENT_NOISE
    source: str  # "timing" | "probe" | "load"
    state: str  # "noisy" | "marked" | "remeasured" | "drift" | "waiting" | "quiet" | "gave-up" | "unavailable"
    trial: int = optional()
    wait_fraction: float = optional()
    other_cores: float = optional()
    processes: list = optional()  # [{pid, name, cores}]
    seconds: float = optional()  # over which the load was read
    probe_ms: float = optional()
    baseline_ms: float = optional()
    drift: float = optional()
    when: str = optional()
    why: str = optional()
    waited_s: float = optional()
    first_ms: float = optional()
    remeasured_ms: float = optional()
    message: str = optional()


@payload
class RecordsMarkedNoisy(Payload):
    KIND = EventKind.RECORDS_MARKED_NOISY
    record_ids: list
    reason: str


@payload
class BestRemeasured(Payload):
    """An incumbent best re-timed interleaved with a challenger; its record now holds that median."""

    KIND = EventKind.BEST_REMEASURED
    record_id: int
    strategy: str
    latency_ms: float
    gflops: float
    samples: int


@payload
class Stopped(Payload):
    KIND = EventKind.STOPPED
    trials_done: int
    best_latency_ms: float | None = None
    summary: dict = optional()
    replay: bool = optional()


@payload
class Finished(Payload):
    KIND = EventKind.FINISHED
    trials_done: int
    best_latency_ms: float | None = None
    summary: dict = optional()
    replay: bool = optional()


@payload
class Failed(Payload):
    """An unexpected error ended the session; records so far are kept."""

    KIND = EventKind.FAILED
    message: str


# ---------------------------------------------------------------- a network session's own events
@dataclass(frozen=True)
class NetworkPayload(Payload):
    """A network session's event: it carries the network's name and its sessions' ids (keyword-only, so each
    kind declares its own fields first)."""

    network: str = field(default=None, kw_only=True)
    session_ids: list = field(default=None, kw_only=True)


@payload
class NetworkStarted(NetworkPayload):
    KIND = EventKind.NETWORK_STARTED
    workloads: list
    weights: list
    trials: int
    preset: str
    seed: int
    target: dict
    db: str


@payload
class NetworkBaseline(NetworkPayload):
    KIND = EventKind.NETWORK_BASELINE
    naive_latency_ms: float | None
    per_task: dict


@payload
class TaskChosen(NetworkPayload):
    KIND = EventKind.TASK_CHOSEN
    round: int
    index: int
    workload: str
    reason: str  # "warm-up" | "gradient" | "tie"
    gradients: list
    n: int


@payload
class NetworkRound(NetworkPayload):
    KIND = EventKind.NETWORK_ROUND
    round: int
    index: int
    workload: str
    trials_done: int
    estimated_latency_ms: float | None  # sum of weight x latency
    naive_latency_ms: float | None
    per_task_ms: dict
    elapsed_s: float


@payload
class TaskDead(NetworkPayload):
    KIND = EventKind.TASK_DEAD
    index: int
    workload: str
    reason: str


@payload
class NetworkPaused(NetworkPayload):
    KIND = EventKind.NETWORK_PAUSED
    trials_done: int


@payload
class NetworkResumed(NetworkPayload):
    KIND = EventKind.NETWORK_RESUMED
    trials_done: int


@payload
class NetworkFinished(NetworkPayload):
    KIND = EventKind.NETWORK_FINISHED
    trials_done: int
    reason: str
    estimated_latency_ms: float | None
    summary: dict


@payload
class NetworkStopped(NetworkPayload):
    KIND = EventKind.NETWORK_STOPPED
    trials_done: int
    reason: str
    estimated_latency_ms: float | None
    summary: dict


@payload
class NetworkFailed(NetworkPayload):
    KIND = EventKind.NETWORK_FAILED
    message: str


def kind_of(kind) -> EventKind | str:
    """The ``EventKind`` of a stored kind; a kind this version does not know stays a plain string."""
    try:
        return EventKind(kind)
    except ValueError:
        return str(kind)


@dataclass
class Event:
    kind: EventKind | str
    session_id: int
    time: float
    elapsed: float
    data: dict = field(default_factory=dict)
    id: int = 0

    def __post_init__(self):
        self.kind = kind_of(self.kind)

    @classmethod
    def of(cls, p: Payload, session_id: int, time: float, elapsed: float, id: int = 0) -> "Event":
        return cls(p.KIND, session_id, time, elapsed, p.to_data(), id)

    @property
    def payload(self) -> Payload | None:
        """The typed payload (None for a kind this version does not know)."""
        t = PAYLOAD_TYPES.get(self.kind) if isinstance(self.kind, EventKind) else None
        return t.from_data(self.data or {}) if t else None


class EventBus:
    def __init__(self):
        self._subs: list = []
        self._lock = threading.Lock()

    def subscribe(self, fn):
        """Call ``fn(event)`` for every event; returns a function that unsubscribes."""
        with self._lock:
            self._subs.append(fn)

        def unsubscribe():
            with self._lock:
                if fn in self._subs:
                    self._subs.remove(fn)

        return unsubscribe

    def emit(self, event: Event) -> None:
        with self._lock:
            subs = list(self._subs)
        for fn in subs:
            try:
                fn(event)
            except Exception:  # a broken view must not stop tuning
                log.exception("event subscriber failed on %s", event.kind)


class EventQueue:
    """A thread-safe inbox: ``subscribe(q.put)`` on the tuning side, ``q.drain()`` on the UI side."""

    def __init__(self):
        self._q: queue.Queue = queue.Queue()

    def put(self, event: Event) -> None:
        self._q.put(event)

    def empty(self) -> bool:
        return self._q.empty()

    def drain(self, limit: int | None = None) -> list[Event]:
        out = []
        while limit is None or len(out) < limit:
            try:
                out.append(self._q.get_nowait())
            except queue.Empty:
                break
        return out
