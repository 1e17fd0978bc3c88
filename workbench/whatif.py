"""What-if: a person's variant of a candidate, built, timed, verified and stored as a record made by the user.

``TuningSession.edit_decisions(record, {index: value})`` gives a stored record's trace with some decisions
changed (``space.edit_decisions`` checks every value); ``TuningSession.measure(trace_or_schedule)`` turns a
trace into the program a layout strategy's postprocessors make of it and measures that program with the loop's
own steps (``loop.Build``, ``Measure``, ``Verify``, ``Confirm``, ``Record``): timed under the session's noise
guard, always verified against the workload's reference, re-timed beside the incumbents when it would be a best,
written durably to the store, then announced as a ``candidate_measured`` event like every record.

How a what-if record counts. It is stored with ``chosen_by = "user"`` and ``round = 0`` (it belongs to no search
round; the search's own records start at round 1, and ``chosen_by = "user"`` alone also marks search trials in a
round whose strategy the person picked). It spends none of the session's budget: ``trials_done`` counts search
trials only, also when a session is resumed from its store, and the record's ``trial`` is the number of search
trials measured before it, so the curves show it where the search stood. A verified what-if that beats the
session's best becomes the best, as any verified record does. The running search does not learn from it (its
search database and cost model belong to the tuning thread); a resumed session does, as from every stored record.

When. While the session tunes, a what-if waits for the candidate being measured (the session's ``_bench``
lock: one build or timing at a time, so that neither disturbs the other's timing), then uses the session's
own builder, runner and noise guard. Paused, it runs at once on those. Once the session has ended (finished,
stopped or failed), or before it starts, the session is reopened for this one measurement: fresh builder and
runner pools and the reference, under the session's lock in the same store; its status stays as it is.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from . import cost_model as cm
from . import events as ev
from . import loop, measure, noise, space, tvm_env
from .errors import WorkbenchError

# is_what_if and search_records are the what-if's own predicates, kept with the store so that readers without TVM
# (the HTML report, the dashboard) use the same ones
from .store import WHAT_IF_CHOSEN_BY, WHAT_IF_ROUND, release_session_lock, session_lock
from .store import is_what_if, search_records  # noqa: F401 - re-exported

CHOSEN_BY = WHAT_IF_CHOSEN_BY
ROUND = WHAT_IF_ROUND  # a what-if record belongs to no search round


@dataclass
class Tools:
    """The loop's steps a what-if uses, with what they need: the session's own or made for one measurement."""

    build: loop.Build
    time: loop.Measure
    verify: loop.Verify
    confirm: loop.Confirm
    record: loop.Record
    live: bool  # the session's own pools: the build of a new best is kept for later re-measurement


def program_of(session, program, strategy: str | None):
    """(strategy, the complete program) for ``program`` (a ``Trace`` or a ``Schedule``) under ``strategy``."""
    from tvm.s_tir.schedule import Schedule, Trace

    strategy = _strategy(session, strategy)
    if isinstance(program, Schedule):
        program = program.trace
    if not isinstance(program, Trace):
        raise WorkbenchError(
            "measure() takes a TVM schedule Trace or Schedule (e.g. session.edit_decisions(record, {1: [4, 8, 2, 2]})),"
            f" not {type(program).__name__}"
        )
    w = session.workload
    tvm_env.setup()
    ctx = space.tune_context(w, _target(session), strategy, session.preset, session.seed, search=False, threads=1)
    sch = Schedule(w.mod)
    try:
        program.apply_to_schedule(sch, remove_postproc=True)
        ok = space.postprocess(sch, ctx)
    except Exception as e:  # noqa: BLE001 - a trace of another workload, a damaged one
        raise WorkbenchError(f"this trace is not a program of {w.name}: {space._last_line(e)}") from None
    if not ok:
        raise WorkbenchError(
            f"the {strategy} postprocessors reject this program (e.g. a loop that cannot be parallelized or "
            "vectorized as annotated); nothing was measured"
        )
    return strategy, sch


def _strategy(session, strategy: str | None) -> str:
    if strategy is None:
        if len(session.strategies) == 1:
            return session.strategies[0]
        raise WorkbenchError(
            f"this session tunes several layout strategies ({', '.join(session.strategies)}): say which one's "
            "postprocessors make the program, e.g. measure(trace, strategy=record['strategy'])"
        )
    if strategy not in session.strategies:
        raise WorkbenchError(f"strategy {strategy!r} is not one of this session's ({', '.join(session.strategies)})")
    return strategy


def _target(session):
    return session.target if session.target is not None else tvm_env.make_target(session.target_dict)


def run(session, strategy: str, sch, tools: Tools, trial: int, elapsed_s: float) -> dict:
    """Build, time, verify (always), confirm (a would-be best) and record one program; returns the record."""
    p = loop.Proposal.of_schedule(sch)
    proposed_at = time.time()
    _predict(session, strategy, p)
    [b] = tools.build([p])
    try:
        with session.measurement_gate:
            timing = tools.time(b, p.shapes, trial=None)
            verdict = loop.Verdict(timing.latency_ms)
            if timing.latency_ms is not None:
                ok, cls, msg = tools.verify(strategy, p, b.path)
                if not ok:
                    verdict = loop.Verdict(timing.latency_ms, False, cls, msg)
                elif tools.record.is_strategy_best(strategy, timing.latency_ms):
                    verdict = tools.confirm(strategy, b.path, p.shapes, timing.latency_ms)
                else:
                    verdict = loop.Verdict(timing.latency_ms, True)
        return tools.record(
            p,
            strategy,
            CHOSEN_BY,
            timing,
            verdict,
            trial=trial,
            round=ROUND,
            proposed_at=proposed_at,
            elapsed_s=elapsed_s,
            path=b.path,
            keep_artifact=tools.live,
            build_s=b.build_s,
        )
    finally:
        tools.build.discard([b], keep={path for path, _ in session.state.artifacts.values()})


def _predict(session, strategy: str, p: loop.Proposal) -> None:
    """Features (stored, for the model of a resumed session) and, once the model has been trained, its score.

    A featurizer of its own, so that nothing is shared with the search thread; an untrained model is not asked
    (its random scores would consume the random state that makes a session reproducible)."""
    pre = session.preset
    ctx = space.tune_context(
        session.workload, _target(session), "no-rewrite", pre, session.seed, search=False, threads=1
    )
    featurizer = cm.Featurizer(ctx, strategy_onehot=pre.strategy_onehot, reuse=False)
    [p.features] = featurizer(ctx, [p.candidate], strategy)
    model = session.model
    if model is not None and (model.trained or model.has_prior):
        p.predicted_score = float(model.predict([p.features])[0])


def live_tools(session) -> Tools:
    return Tools(session.build, session.measure_step, session.verify, session.confirm, session.record, True)


@contextlib.contextmanager
def reopened(session):
    """The session reopened for one measurement: its lock, fresh pools, its reference, its bests; its status
    unchanged. Everything made here is closed afterwards."""
    own_lock = session_lock(session.store.path, session.session_id) if session._lock is None else None
    p, w = session.preset, session.workload
    builder = runner = guard = None
    try:
        builder = measure.make_builder(session.target_dict, p, workers=1, runner_spec=session.runner_spec)
        runner = measure.make_runner(
            session.runner_spec, session.target_dict, p, on_health=lambda d: session._emit(ev.RunnerHealth.from_data(d))
        )
        if session.inputs is None:
            session.inputs = w.make_inputs(seed=1234)
        if session.reference is None:
            _, session.reference = measure.naive_and_reference(w, builder, runner, session.inputs, need_latency=False)
        if not session.state.best_by_strategy:
            session._restore_bests()
        guard = noise.NoiseGuard(
            noise.NoisePolicy(mode=p.noise, confirm_rounds=p.confirm_rounds),
            runner,
            builder,
            session._emit,
            gate=session.measurement_gate,
        )
        st = session.state
        yield Tools(
            loop.Build(builder),
            loop.Measure(guard),
            loop.Verify(runner, w, session.inputs, session.reference),
            loop.Confirm(guard, p.confirm_rounds, w, session.store, st, session._emit),
            loop.Record(session.store, session.session_id, w, session.seed, st, builder, session._emit),
            False,
        )
    finally:
        if guard is not None:
            guard.close()
        if runner is not None and runner is not session.runner_spec:  # a runner the caller made stays open
            runner.close()
        if builder is not None:
            builder.close()
        release_session_lock(own_lock)
