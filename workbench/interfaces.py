"""The extension points of the tuning loop, and the contract each implementation keeps.

=================  ================================================  ===========================================
interface          implementations                                   chosen by
=================  ================================================  ===========================================
``Builder``        ``measure.Builder``                               ``measure.make_builder``
``Runner``         ``measure.Runner`` (local), ``rpc.RPCRunner``     ``measure.make_runner`` (``None``/``"local"``
                                                                     or ``"rpc://HOST:PORT/KEY"``)
``BatchRunner``    ``rpc.RPCRunner``                                 ``isinstance(runner, BatchRunner)``
``CostModel``      ``cost_model.PackSumXGB``,                        preset field ``cost_model`` (one model shared
                   ``cost_model.PairwiseRankXGB``, each alone or     by a session's tasks; ``shared_cost_model=
                   one per strategy (``PerStrategyModels``)          False``: one per layout strategy)
``LayoutStrategy`` the entries of ``layouts.STRATEGIES``             ``layouts.get(name)``
``SessionView``    ``TuningSession``, ``replay.ReplaySession``;      what ``widgets/`` is handed
                   read-only: ``widgets.sessions.StoredSession``
``ArmPolicy``      ``controller.POLICIES`` (in controller.py)        preset field ``controller_policy``
``PruningRule``    ``pruning.RULES``                                 preset field ``pruning``
=================  ================================================  ===========================================

They are ``typing.Protocol`` classes: an object with the members below conforms
whether or not it subclasses them (a caller may pass its own runner), and
``isinstance`` checks that the members exist, not their signatures. The
workbench's own implementations subclass them, so that a missing member is a
type-checker error. One contract suite per interface runs over every
implementation in the table: ``tests/test_contracts.py`` (``ArmPolicy``:
``tests/test_controller.py``; ``PruningRule``: ``tests/test_pruning.py``).

Units (as everywhere in the workbench, see events.py): latencies are milliseconds
(``CostModel.add``'s ``latency_ms``, ``RunResult.latency_ms``); raw timing samples keep
TVM's seconds under names ending in ``_secs`` (``RunResult.run_secs``); timeouts and
durations are seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass
class BuildResult:
    """One module's build: the built artifact's path, or why there is none.

    ``error_class`` is ``"build-error"`` (TVM rejected the module), ``"build-timeout"``
    or ``"build-crash"`` (the worker process died); ``error_msg`` is one line. ``build_s`` is how long
    compiling and exporting the artifact took, in seconds, where the builder knows it (None otherwise).
    """

    path: str | None
    error_class: str | None = None
    error_msg: str | None = None
    build_s: float | None = None


@dataclass
class RunResult:
    """One timing: ``run_secs`` (one entry per repeat, seconds each), or why there is none.

    Exactly one of ``run_secs`` (non-empty) and ``error_class`` is set. ``error_class`` is
    ``"run-error"`` (the kernel failed to load or raised), ``"run-timeout"`` or ``"run-crash"``
    (the kernel killed its process or its RPC session).
    """

    run_secs: list = field(default_factory=list)
    error_class: str | None = None
    error_msg: str | None = None
    # noise.TimingMeter's reading of this timing (wait_fraction, other_cores, wall_s); None where the runner
    # cannot take one (RPC: the kernel runs on another machine)
    reading: dict | None = None

    @property
    def latency_ms(self) -> float | None:
        """The median of ``run_secs``, in ms; None for a failed timing."""
        return float(np.median(self.run_secs)) * 1e3 if self.run_secs else None


@runtime_checkable
class Builder(Protocol):
    """Compiles candidate programs into artifacts a ``Runner`` can load.

    ``build(mods)`` takes TVM ``IRModule``s (each with one PrimFunc ``main`` whose arguments
    are the inputs then the output) and returns one ``BuildResult`` per module, in order. Beside
    each artifact it writes every argument's shape and dtype (``measure.ARGS_FILE``, read by
    ``measure.recorded_arg_types``), so that a runner given plain shapes knows the dtypes. A
    module that fails to build, runs past the builder's timeout or kills its worker gives a
    ``BuildResult`` with ``path=None`` and an error class; ``build`` itself does not raise
    for it. Modules of one call may be compiled in parallel; ``build`` returns when all are
    done.

    ``discard(path)`` deletes one artifact (and its directory); ``None`` or an artifact
    already discarded is a no-op. Artifacts live until discarded or until ``close()``.

    ``close()`` deletes every artifact not yet discarded and releases the worker processes:
    it stops them, or hands them to ``measure.WARM``, which keeps them for the next builder of
    the same kind in this process for a while and then stops them (``measure.Builder``);
    calling it again does nothing. No other method may be called after it.

    Thread-safety: every method may be called from any thread.
    """

    def build(self, mods: Sequence[Any]) -> list[BuildResult]: ...

    def discard(self, path: str | None) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Runner(Protocol):
    """Times built kernels and computes their outputs, on fixed inputs.

    ``run(path, shapes, timeout=None, number=None, repeat=None, min_repeat_ms=None)`` times the
    artifact at ``path`` (from ``Builder.build``) on arguments of ``shapes`` (every argument in
    order, the output last). An entry is a ``(shape, dtype)`` pair (``Workload.arg_types``) or a
    plain shape, whose dtype is the one the builder recorded for that argument (float32 for an
    artifact without a record: ``measure.arg_types``). Every runner fills them with the same
    seeded data of their dtypes (``measure.fixed_arguments``: uniform(-1, 1) for floats, rounded
    to bfloat16/FP8; the integer types over ``dtypes.INT_RANGES``). After one warm-up call it
    takes ``repeat`` results, each the mean of
    ``number`` calls, with ``number`` raised until one result lasts ``min_repeat_ms``
    milliseconds (TVM's ``time_evaluator``). It returns a ``RunResult`` whose ``run_secs``
    are in seconds. ``timeout`` (seconds) bounds this call only; ``None`` for any of the
    four means the runner's own setting. A kernel that fails, crashes or runs past the
    timeout gives a ``RunResult`` with an error class, never an exception.

    ``compute(path, inputs, out_shape, timeout=None)`` calls the kernel once on ``inputs``
    (NumPy arrays of the arguments' dtypes, ml_dtypes' types for bfloat16 and FP8, in argument
    order, without the output) and returns ``(output array, None, None)`` (of the output's
    dtype; ``out_shape`` is a shape or a ``(shape, dtype)`` pair, as in ``run``), or
    ``(None, error class, message)`` as ``run`` would classify the failure. The output buffer
    starts "unwritten" (``dtypes.unwritten``: NaN, or an integer type's minimum).

    ``measures_locally``: True when kernels run on this machine, so that its load disturbs
    the timings (``noise.NoiseGuard`` then watches it).

    ``close()`` releases the runner's processes and connections: it stops them, or hands an
    idle worker process to ``measure.WARM``, which keeps it for the next runner of the same
    kind in this process for a while and then stops it (``measure.Runner``); calling it again
    does nothing. No other method may be called after it.

    Errors that are no candidate's fault (an RPC runner that gets no free server) raise
    ``errors.WorkbenchError``: the session stops instead of recording failures.

    Thread-safety: calls may come from several threads; each waits for a free worker.
    """

    measures_locally: bool

    def run(
        self,
        path: str,
        shapes: Sequence[Sequence[int]],
        timeout: float | None = None,
        number: int | None = None,
        repeat: int | None = None,
        min_repeat_ms: int | None = None,
    ) -> RunResult: ...

    def compute(
        self, path: str, inputs: Sequence[np.ndarray], out_shape: Sequence[int], timeout: float | None = None
    ) -> tuple[np.ndarray | None, str | None, str | None]: ...

    def close(self) -> None: ...


@runtime_checkable
class BatchRunner(Runner, Protocol):
    """A ``Runner`` that times several kernels at once (on several machines).

    ``run_many(items, timeout=None, number=None, repeat=None, min_repeat_ms=None,
    on_result=None, proceed=None)`` times ``items`` = ``[(path, shapes), ...]`` as ``run``
    would and returns one ``RunResult`` per item, in order. ``on_result(index, RunResult)``
    is called on the calling thread as each one finishes (in completion order); it may call
    ``run`` or ``compute``. ``proceed()`` is asked, on a worker thread, before each item is
    started; it may block (a paused session), and if it returns False no further item is
    started and those items come back as ``None``.
    """

    def run_many(
        self,
        items: Sequence[tuple[str, Sequence[Sequence[int]]]],
        timeout: float | None = None,
        number: int | None = None,
        repeat: int | None = None,
        min_repeat_ms: int | None = None,
        on_result: Callable[[int, RunResult], None] | None = None,
        proceed: Callable[[], bool] | None = None,
    ) -> list[RunResult | None]: ...


@runtime_checkable
class CostModel(Protocol):
    """Learns, from measured programs, to rank unmeasured ones.

    A program is given as its feature rows: a float32 array ``(rows, cost_model.N_FEATURES)``,
    one row per buffer store (``cost_model.Featurizer``).

    ``add(feats, latency_ms, group)`` records one measured program: its latency in ms, or
    ``None`` for one that failed. Costs are compared only within a ``group`` (the workload's
    name), so one model can learn from several workloads.

    ``train()`` fits the model on everything added so far and returns True, or returns False
    and leaves the model as it was (too few samples, or none that succeeded).

    ``predict(feats_list)`` returns one score per program (a float array of that length),
    higher for a program predicted to be faster. Before the first successful ``train()``, and
    unless a prior was set (``set_prior``: a model trained on other workloads, which then
    ranks until the own data suffices), the scores are uniform random numbers in [0, 1);
    ``untrained_scores(n)`` returns n such numbers without features (the search skips
    feature extraction then), and ``None`` once the model is trained or has a prior.

    ``name``: its key in ``cost_model.COST_MODELS``. ``calibrated``: True when a score estimates the
    program's throughput relative to its workload's best (so mean scores compare across layout
    strategies, as the controller's guidance does); False when only the order of scores means something.

    ``n_samples``: programs added. ``trained``: whether ``train()`` has succeeded.
    ``last_train_rounds``: iterations of the last fit (0 before one). ``feature_importance()``:
    feature name -> importance, ``{}`` before training.

    The model holds no processes or files: it has no ``close()``.

    Thread-safety: ``predict`` and the read-only members may be called from any thread while
    another adds and trains.
    """

    name: str
    calibrated: bool

    @property
    def n_samples(self) -> int: ...

    @property
    def trained(self) -> bool: ...

    last_train_rounds: int

    def add(self, feats: np.ndarray, latency_ms: float | None, group: str) -> None: ...

    def train(self) -> bool: ...

    def predict(self, feats: Sequence[np.ndarray]) -> np.ndarray: ...

    def untrained_scores(self, n: int) -> np.ndarray | None: ...

    def feature_importance(self) -> dict: ...


@runtime_checkable
class LayoutStrategy(Protocol):
    """What happens to a workload's constant weights while it is tuned (see ``layouts``).

    ``name``: its key in ``layouts.STRATEGIES`` and in records. ``summary`` and
    ``latency_means``: one sentence each, for people (what the program does, what its measured
    latency includes).

    ``postprocs()`` returns a new list of MetaSchedule postprocessors on every call (each search
    context owns its own), applied after a sketch's decisions are filled in.

    ``deploy_inputs(sch, workload, inputs)`` returns the arguments the kernel built from the
    schedule ``sch`` expects, from the workload's own ``inputs`` (arrays of the workload's
    argument dtypes, in argument order, without the output): the same list for a strategy that
    keeps the weights' layout, the weights rewritten offline, in their own dtype, for one that
    changes it (``rewrites_offline``). It raises ``RuntimeError`` when the schedule's layout
    cannot be derived from its trace.

    Strategies are immutable values, safe to share between threads.
    """

    name: str
    summary: str
    latency_means: str
    rewrites_offline: bool

    def postprocs(self) -> list: ...

    def deploy_inputs(self, sch: Any, workload: Any, inputs: list[np.ndarray]) -> list[np.ndarray]: ...


@runtime_checkable
class Steering(Protocol):
    """How a person steers a session's layout-strategy choice (``controller.StrategyController``).

    ``pick(name)`` gives every following round to strategy ``name`` (mode becomes ``"manual"``;
    an unknown name raises ``WorkbenchError``); ``auto()`` hands the choice back; ``mode`` is the
    current mode (``"auto"``, ``"round-robin"``, ``"fixed"`` or ``"manual"``). Thread-safe: called
    from the UI thread while the session tunes.
    """

    mode: str

    def pick(self, name: str) -> None: ...

    def auto(self) -> None: ...


@runtime_checkable
class SessionView(Protocol):
    """What a view (``widgets/``) may use of a session: identity, store, events and the buttons.

    ``session_id`` and ``db_path`` say where its records and events are (views open the store
    read-only themselves); ``workload_spec`` is the workload as data; ``status`` is ``"created"``,
    ``"running"``, ``"paused"``, ``"stopped"``, ``"finished"`` or ``"failed"``; ``paused`` is True
    between ``pause()`` and ``resume_running()``; ``replay`` is True for a recorded session played
    back. ``subscribe(fn)`` calls ``fn(event)`` (an ``events.Event``) on the session's thread for
    every event from then on and returns a function that unsubscribes; events emitted before are in
    the store. ``start()`` runs the session in a background thread; ``pause()``,
    ``resume_running()`` and ``stop()`` take effect between candidates and never block;
    ``wait(timeout)`` returns True once the session's thread has ended. ``controller`` is a
    ``Steering``, or None where nobody can steer (a replay). ``measurement_gate``
    (``noise.MeasurementGate``) is held while kernels are timed: a view calls ``begin_draw()`` /
    ``end_draw()`` around a redraw and draws nothing while ``begin_draw()`` returns False.

    A *read-only* view (``read_only = True``: a session shown as its store holds it, ``widgets.sessions.
    StoredSession``) runs nothing here: ``start()`` raises ``WorkbenchError`` (one line saying how to resume it),
    ``pause()``/``resume_running()``/``stop()`` do nothing, ``measurement_gate`` and ``controller`` are None.
    """

    session_id: int
    db_path: str
    status: str
    replay: bool
    controller: Steering | None
    measurement_gate: Any

    @property
    def paused(self) -> bool: ...

    @property
    def workload_spec(self) -> dict: ...

    def subscribe(self, fn: Callable) -> Callable: ...

    def start(self) -> Any: ...

    def pause(self) -> None: ...

    def resume_running(self) -> None: ...

    def stop(self) -> None: ...

    def wait(self, timeout: float | None = None) -> bool: ...
