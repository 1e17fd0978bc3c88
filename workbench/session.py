"""``TuningSession``: one workload, searched round by round, every step an event.

A round is the loop's named steps (workbench/loop.py): the controller picks a
layout strategy (decide); the other strategies' best programs are offered to its
search (cross-seed); its evolutionary search (TVM's ``EvolutionarySearch``:
sampled annotations of the sketches plus the best measured programs, evolved
with TVM's mutators under the shared cost model, then eps-greedy selection)
proposes a batch (propose) that the model scores (predict); the batch is built in
parallel (build) and timed one by one (measure); a would-be best must compute the
workload's reference answer (verify) and is re-timed against the incumbents
(confirm); every record is written to the store before it is announced (record);
the search database, cost model and controller learn from the round (learn).
The session owns lifecycle (status, pause, stop, resume from a store) and state;
the steps do the work.

``run()`` blocks; ``start()`` runs the same loop in a background thread;
``pause()``, ``resume_running()`` and ``stop()`` take effect between candidates; the classmethod
``TuningSession.resume(db, ...)`` continues a stopped or killed session from its store.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time

import numpy as np

from . import cost_model as cm
from . import events as ev
from . import dtypes, interfaces, layouts, loop, measure, noise, presets, pruning, space, tvm_env, whatif
from . import prior as prior_mod
from .controller import StrategyController, make_policy
from .errors import WorkbenchError
from .lifecycle import SessionLifecycle
from .loop import PHASES  # noqa: F401 - re-exported: the phases of round_finished.phase_seconds
from .store import RecordStore, holds_a_search, release_session_lock, session_lock
from .workloads import Workload, registry, workload_from_spec

DEFAULT_DB = "workbench.db"
NAIVE_TIMEOUT = 600.0  # seconds for one call of the unscheduled program


def as_workload(w) -> Workload:
    if isinstance(w, Workload):
        return w
    if isinstance(w, dict):
        return workload_from_spec(w)
    if isinstance(w, str):
        return registry().get(w)
    raise WorkbenchError(f"a workload must be a name, a spec dict or a Workload, not {type(w).__name__}")


def _mode_for(strategy, names) -> str:
    if len(names) == 1:
        return "fixed"
    if strategy in (None, "auto") or (isinstance(strategy, str) and strategy.startswith("auto:")):
        return "auto"
    return "round-robin"


class TuningSession(SessionLifecycle):
    """One workload tuned round by round; an ``interfaces.SessionView`` for the widgets."""

    replay = False

    def __init__(
        self,
        workload,
        target="host",
        trials: int = 64,
        preset="quick",
        seed: int = 0,
        db: str | RecordStore = DEFAULT_DB,
        strategy="auto",
        builder_workers: int | None = None,
        runner=None,
        _resume: dict | None = None,
        model=None,
        **preset_overrides,
    ):
        # model: a cost_model.PackSumXGB shared with other sessions (a network session shares one across its
        # tasks); a shared builder and runner are handed to open().
        self._shared_model = model
        self._shared_builder = None
        self.workload = as_workload(workload)
        if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
            raise WorkbenchError(f"trials must be a positive integer, got {trials!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise WorkbenchError(f"seed must be an integer, got {seed!r}")
        self.target_dict = tvm_env.parse_target(target)
        self.preset = presets.get(preset, **preset_overrides)
        _check_fits_in_memory(self.workload)
        self.trials = trials
        self.seed = seed
        self.strategies = layouts.parse_strategies(strategy, self.workload)
        self.controller = StrategyController(
            self.strategies,
            _mode_for(strategy, self.strategies),
            make_policy(
                self.preset.controller_policy, seed=seed, c=self.preset.controller_c, lam=self.preset.controller_lam
            ),
            warmup_rounds=self.preset.controller_warmup_rounds,
        )
        # RPC: runner="rpc://HOST:PORT/KEY" (or any interfaces.Runner); checked before
        # a session row exists, so an unreachable tracker leaves nothing behind.
        if runner is not None and runner != "local" and isinstance(runner, str):
            from . import rpc

            rpc.check_runner(runner)
        self.runner_spec = runner
        self.store = db if isinstance(db, RecordStore) else RecordStore(db)
        self.db_path = self.store.path
        self.builder_workers = builder_workers or min(2, tvm_env.available_cores())
        self._init_lifecycle()
        # Held around each round's timing phase; a live view defers its redraws while it is (noise.MeasurementGate).
        self.measurement_gate = noise.MeasurementGate()
        # One build or timing at a time between the loop and a what-if measurement (measure()): neither may
        # disturb the other's timing. Held per candidate, so a pause never holds it.
        self._bench = threading.RLock()
        self._ahead = None  # (strategy, proposals) searched while the previous round built (preset overlap)
        self._tools_live = False  # the loop's steps and pools are open (measure() uses them)
        self.state = loop.SearchState()  # bests, measured programs, cross-seeding pool (shared by the steps)
        self.naive_latency_ms: float | None = None
        self._elapsed_offset = 0.0
        self._t0: float | None = None
        # Made by open() (TVM is imported then, not at construction): collaborators and the loop's steps.
        self.target = self.model = self.featurizer = self.search_model = None
        self.builder = self.runner = self.noise = self.inputs = self.reference = None
        self.pruner = None  # pruning.Pruner, with the search's collaborators
        self.contexts: dict = {}  # strategy -> its TuneContext (search)
        self.search_dbs: dict = {}  # strategy -> (its search's MemoryDatabase, workload entry)
        self._ctx_strategy: dict = {}  # TuneContext task name -> strategy
        self.cross_seed = self.pair = self.propose = self.predict = self.build = self.measure_step = None
        self.verify = self.confirm = self.record = self.learn = None
        # Wall seconds per phase of the loop in this process (the profile behind "where does a round go").
        self.phase_seconds: dict = {k: 0.0 for k in PHASES}
        if _resume is None:
            self.session_id = self.store.create_session(
                workload=self.workload.name,
                spec=self.workload.spec(),
                target=self.target_dict,
                preset=self.preset.name,
                preset_params=self.preset.to_dict(),
                seed=seed,
                trials=trials,
                strategies=self.strategies,
                strategy_arg=_strategy_arg(strategy),
                versions=tvm_env.library_versions(),
            )
            self._resumed = False
            self._lock = session_lock(self.store.path, self.session_id)
        else:
            self.session_id = _resume["id"]
            self._lock = session_lock(self.store.path, self.session_id)  # refused while another process tunes it
            self.naive_latency_ms = _resume.get("naive_latency_ms")
            self._resumed = True
            if trials != _resume["trials"]:
                self.store.update_session(self.session_id, trials=trials)

    # ------------------------------------------------------------------ public API
    @classmethod
    def resume(
        cls, db, session_id: int | None = None, workload: str | None = None, trials: int | None = None, **kw
    ) -> "TuningSession":
        """Continue a stopped or killed session from its store; no measured record is lost."""
        store = db if isinstance(db, RecordStore) else RecordStore(db)
        if session_id is None:
            sessions = [
                s for s in store.sessions() if (workload is None or s["workload"] == workload) and holds_a_search(s)
            ]
            if not sessions:
                raise WorkbenchError(f"no session{' for ' + workload if workload else ''} to resume in {store.path!r}")
            row = sessions[-1]
        else:
            row = store.session(session_id)
            if not holds_a_search(row):
                raise WorkbenchError(
                    f"session {session_id} of {store.path!r} holds {row['preset']} records, not a search: "
                    "nothing to resume (start a new session instead)"
                )
        kw.setdefault("strategy", row["strategy_arg"])
        overrides = {
            k: (tuple(v) if isinstance(v, list) else v) for k, v in row["preset_params"].items() if k != "name"
        }
        preset = presets.Preset(name=row["preset"], **overrides)
        return cls(
            row["spec"],
            target=row["target"],
            trials=trials or row["trials"],
            preset=preset,
            seed=row["seed"],
            db=store,
            _resume=row,
            **kw,
        )

    @property
    def _thread_name(self) -> str:
        return self.workload.name

    @property
    def cost_model(self):
        """The shared cost model (``PackSumXGB``: ``predict``, ``feature_importance``, ``n_samples``); None before start."""
        return self.model

    @property
    def workload_spec(self) -> dict:
        return self.workload.spec()

    @property
    def best(self) -> dict | None:
        """The overall best record (verified), None before one."""
        return self.state.best

    @property
    def best_by_strategy(self) -> dict:
        """Strategy -> its best verified record."""
        return self.state.best_by_strategy

    def records(self, with_trace: bool = False):
        """Measured candidates of this session as a pandas DataFrame."""
        return self.store.records(session_id=self.session_id, with_trace=with_trace)

    # ------------------------------------------------------------------ what-if (workbench/whatif.py)
    def edit_decisions(self, record, edits: dict):
        """A stored record's trace with some decisions changed, for ``measure``.

        ``record``: a record id or a record (a dict or a ``records()`` row with its ``id``) of this workload;
        ``edits``: {decision index: new setting}, indices as ``space.decisions_of`` lists them (the inspector's
        ``#``): tile factors as a list multiplying to the loop's extent, a categorical decision's candidate
        (an unroll step such as 64), a compute location (-2 inline, -1 root, else a loop). Raises
        ``space.InvalidEdit`` with one message per bad value. Replaying the trace takes a core for a moment:
        it waits, as ``measure`` does, until the loop is not timing a kernel.
        """
        with self._bench:
            return space.edit_decisions(self.workload, self._stored_schedule(record).trace, edits)

    def measure(self, trace_or_schedule, strategy: str | None = None) -> dict:
        """Build, time, verify and store a program a person made (``chosen_by = "user"``); returns its record.

        ``trace_or_schedule``: a ``Trace`` (e.g. from ``edit_decisions``) or a ``Schedule`` of this workload;
        ``strategy``: whose postprocessors make it a program (needed when the session has several). Works while
        the session tunes (after the candidate in flight), while paused and after it has ended; it spends no
        budget. Thread-safe; blocks for the build and the timing. Details in ``workbench/whatif.py``.
        """
        with self._bench:  # making the program (replay, postprocessors) takes a core too: not while timing
            strategy, sch = whatif.program_of(self, trace_or_schedule, strategy)
            if self._tools_live:
                return whatif.run(self, strategy, sch, whatif.live_tools(self), self.trials_done, self._elapsed())
            stored = self.records()
            trials = max(self.trials_done, len(whatif.search_records(stored)))
            elapsed = max([self._elapsed(), *(stored["elapsed_s"].tolist() if len(stored) else [])])
            with whatif.reopened(self) as tools:
                return whatif.run(self, strategy, sch, tools, trials, elapsed)

    def _stored_schedule(self, record):
        rid = record if isinstance(record, (int, np.integer)) and not isinstance(record, bool) else None
        if rid is None:
            try:
                rid = record["id"]
            except (TypeError, KeyError, IndexError):
                raise WorkbenchError(
                    f"a record is a record id or a record with its 'id', not {type(record).__name__}"
                ) from None
        rec = self.store.record(int(rid))
        if rec["workload"] != self.workload.name:
            raise WorkbenchError(f"record {rid} is of workload {rec['workload']!r}, not {self.workload.name!r}")
        return space.schedule_from_trace_json(self.workload, rec["trace"])

    def summary(self) -> dict:
        every = self.records()
        rec = whatif.search_records(every)  # trials, errors and per-strategy counts are the search's
        ok = rec[rec["error_class"].isna()] if len(rec) else rec
        per = {}
        for s in self.strategies:
            sub = rec[rec["strategy"] == s] if len(rec) else rec
            b = self.best_by_strategy.get(s)  # verified bests only; restored from the store on resume
            per[s] = {
                "best_latency_ms": b["latency_ms"] if b else None,
                "trials": int(len(sub)),
                "verified": bool(b and b["verified"]),
            }
        best = self.best
        best_strategy = best["strategy"] if best else None
        return {
            "workload": self.workload.name,
            "session_id": self.session_id,
            "trials": int(len(rec)),
            "errors": int(len(rec) - len(ok)),
            "best_latency_ms": best["latency_ms"] if best else None,
            "best_gflops": best["gflops"] if best else None,
            "best_strategy": best_strategy,
            "naive_latency_ms": self.naive_latency_ms,
            "speedup_vs_naive": (self.naive_latency_ms / best["latency_ms"])
            if (best and self.naive_latency_ms)
            else None,
            "verified": bool(best and best["verified"]),
            "tuning_seconds": round(self._elapsed(), 2),
            "phase_seconds": {k: round(v, 2) for k, v in self.phase_seconds.items()},
            "noisy": int(rec["noisy"].sum()) if len(rec) else 0,
            "what_if": int(len(every) - len(rec)),
            "best_spread": best.get("confirm_spread") if best else None,
            "strategies": per,
            # rule-based pruning (workbench.pruning): programs each rule kept from the search's picks
            "pruning": self.pruner.snapshot() if self.pruner is not None and self.pruner.enabled else None,
            "status": self.status,
            "db": self.db_path,
        }

    # ------------------------------------------------------------------ internals
    def _elapsed(self) -> float:
        return self._elapsed_offset + (time.time() - self._t0 if self._t0 else 0.0)

    def _emit(self, payload: ev.Payload) -> ev.Event:
        t = time.time()
        event = ev.Event.of(payload, self.session_id, t, self._elapsed())
        event.id = self.store.add_event(self.session_id, payload.KIND.value, t, event.elapsed, event.data)
        self._bus.emit(event)
        return event

    def _set_status(self, status: str) -> None:
        self.status = status
        self.store.update_session(self.session_id, status=status)

    def _record_failure(self, e: BaseException) -> None:
        """Status ``failed`` and a ``failed`` event for ``e``. The store may be what failed: then the status stays
        in memory (the store's row reads "interrupted" once the session's lock is gone) and the event reaches the
        subscribers unstored, so a view still learns that the session ended."""
        self.error = e
        self.status = "failed"
        payload = ev.Failed(message=f"{type(e).__name__}: {e}")
        try:
            self._set_status("failed")
        except Exception:
            pass
        try:
            self._emit(payload)
        except Exception:
            self._bus.emit(ev.Event.of(payload, self.session_id, time.time(), self._elapsed()))

    def _loop(self) -> None:
        try:
            self.open()
            self._search()
            self._finish()
        except BaseException as e:  # noqa: BLE001 - recorded, then re-raised by run()
            self._record_failure(e)
        finally:
            self._teardown()

    def _setup(self) -> None:
        from tvm.s_tir import meta_schedule as ms

        tvm_env.setup()
        w = self.workload
        self.target = tvm_env.make_target(self.target_dict)
        p = self.preset
        self.model = self._shared_model if self._shared_model is not None else self._new_cost_model()
        self.featurizer = cm.Featurizer(
            space.tune_context(
                w, self.target, "no-rewrite", p, self.seed, search=False, threads=tvm_env.available_cores()
            ),
            strategy_onehot=p.strategy_onehot,
            reuse=p.feature_reuse,
        )
        self.pruner = pruning.Pruner(p.pruning, pruning.Machine.of_target(self.target))
        self.search_model = cm.search_cost_model(self.model, self.featurizer, self._strategy_of_ctx, self.pruner)
        self.builder = self._shared_builder or measure.make_builder(
            self.target_dict, p, workers=self.builder_workers, runner_spec=self.runner_spec
        )
        # RPC server health arrives on this (the tuning) thread, so it is stored and emitted like any event.
        self.runner = measure.make_runner(
            self.runner_spec, self.target_dict, p, on_health=lambda d: self._emit(ev.RunnerHealth.from_data(d))
        )
        self.inputs = w.make_inputs(seed=1234)
        self.state = loop.SearchState()
        prior = self.store.traces(self.session_id) if self._resumed else []
        searched = 0
        if prior:
            stored = self.store.records(session_id=self.session_id)
            self._elapsed_offset = stored["elapsed_s"].max()
            self._t0 = time.time()
            searched = len(whatif.search_records(stored))  # what-if records spend no trials
        self._emit(
            ev.SessionStarted(
                workload=w.name,
                spec=w.spec(),
                flops=w.flops,
                target=self.target_dict,
                trials=self.trials,
                preset=p.name,
                seed=self.seed,
                strategies=self.strategies,
                mode=self.controller.mode,
                db=self.db_path,
                resumed=self._resumed,
                trials_done=searched,
                reference=w.reference_kind,
                weight_indices=w.weight_indices,
                cost_model=self.model.name,
                prior=prior_mod.describe(self.model.prior_meta) if self.model.has_prior else None,
            )
        )
        for s in self.strategies:
            ctx = space.tune_context(w, self.target, s, p, self.seed + layouts.STRATEGY_INDEX[s])
            self._ctx_strategy[ctx.task_name] = s
            db = ms.database.MemoryDatabase()
            ctx.pre_tuning(
                max_trials=1 << 30,
                num_trials_per_iter=loop.search_batch(p.trials_per_round),
                design_spaces=ctx.generate_design_space(),
                database=db,
                cost_model=self.search_model,
            )
            self.contexts[s] = ctx
            self.search_dbs[s] = (db, db.commit_workload(w.mod))
        self._baseline_and_reference()
        self.noise = noise.NoiseGuard(
            noise.NoisePolicy(mode=p.noise, confirm_rounds=p.confirm_rounds),
            self.runner,
            self.builder,
            self._emit,
            self._stop.is_set,
            gate=self.measurement_gate,
        )
        self._compose_steps()
        with self.measurement_gate:
            self.noise.start()
        if prior:
            self._restore(prior)

    def _new_cost_model(self):
        p = self.preset

        def make():
            return cm.make_cost_model(p.cost_model, self.seed, p, tvm_env.available_cores(), with_prior=p.prior)

        if p.shared_cost_model or len(self.strategies) < 2:
            return make()
        return cm.PerStrategyModels(make)

    def _compose_steps(self) -> None:
        """The loop's steps (workbench/loop.py), wired to this session's collaborators and state."""
        st, w = self.state, self.workload
        self.cross_seed = loop.CrossSeed(w, self.target, self.preset, self.contexts, self.search_dbs, st)
        self.pair = loop.PairLayouts(w, self.contexts, st)
        self.propose = loop.Propose(self.contexts, st, self.preset.eps_greedy)
        self.predict = loop.Predict(self.contexts, self.featurizer, self.model, st, self.pruner)
        self.build = loop.Build(self.builder)
        self.measure_step = loop.Measure(self.noise)
        self.verify = loop.Verify(self.runner, w, self.inputs, self.reference)
        self.confirm = loop.Confirm(self.noise, self.preset.confirm_rounds, w, self.store, st, self._emit)
        self.record = loop.Record(self.store, self.session_id, w, self.seed, st, self.builder, self._emit)
        self.learn = loop.Learn(self.model, self.controller, self.search_dbs, self.contexts, self.target, st)

    def _strategy_of_ctx(self, ctx) -> str:
        return self._ctx_strategy[str(ctx.task_name)]

    def _baseline_and_reference(self) -> None:
        w = self.workload
        known = self.naive_latency_ms is not None
        naive_ms, self.reference = measure.naive_and_reference(
            w, self.builder, self.runner, self.inputs, timeout=NAIVE_TIMEOUT, need_latency=not known
        )
        if not known:
            self.naive_latency_ms = naive_ms
            self.store.update_session(self.session_id, naive_latency_ms=naive_ms)
            self._emit(ev.BaselineMeasured(naive_latency_ms=naive_ms, reference=w.reference_kind))

    def _restore(self, prior) -> None:
        """Rebuild search state from stored records: search databases, cost model, bests, counters."""
        from tvm.s_tir import meta_schedule as ms

        st = self.state
        width = cm.N_FEATURES
        for strategy, feats, lat, h in self.store.training_rows(self.workload.name):
            # Rows written by a workbench with another strategy set have another width: not comparable.
            if strategy in self.strategies and feats is not None and feats.shape[1] == width:
                self.model.add(feats, lat, self.workload.name)
        rec = self.store.records(session_id=self.session_id)
        self.trials_done = len(whatif.search_records(rec))  # a what-if record spends no budget
        self.round = int(rec["round"].max()) if len(rec) else 0
        for row in prior:
            st.measured_hashes.add(row["mod_hash"])
            if row["error_class"] is None and row["latency_ms"] is not None and row["strategy"] in self.search_dbs:
                sch = space.schedule_from_trace_json(self.workload, row["trace"])
                db, wl = self.search_dbs[row["strategy"]]
                args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
                run_secs = [float(x) for x in json.loads(row["run_secs"])]
                db.commit_tuning_record(ms.database.TuningRecord(sch.trace, wl, run_secs, self.target, args))
                st.seed_pool.append((float(np.mean(run_secs)), row["strategy"], sch.trace, run_secs))
        self._restore_bests()
        self._restore_arms(rec)
        self.model.train()

    def _restore_arms(self, rec) -> None:
        """The controller as it was after the session's last finished round (``StrategyController.restore`` of
        that round's ``round_finished`` state), then the records of a round the stop cut short; for a store
        whose events do not hold the whole state, from the records alone: each strategy's own rounds as one
        observed round, then its pairings (loop.paired_measurements) credited in the order they were measured,
        so the arms' trials, paired counts and pairing losses are what they were."""
        events = self.store.events(self.session_id)
        round_strategy = {e["data"]["round"]: e["data"]["strategy"] for e in events if e["kind"] == "round_started"}
        finished = [e["data"] for e in events if e["kind"] == "round_finished" and e["data"].get("controller")]
        rec = whatif.search_records(rec)  # a person's what-if is no trial of an arm
        if finished and self.controller.restore(finished[-1]["controller"]):
            rec = rec[rec["round"] > finished[-1]["round"]]
        pairs = loop.paired_measurements(rec, round_strategy) if len(rec) else []
        of_own_round = np.array([round_strategy.get(r, s) == s for r, s in zip(rec["round"], rec["strategy"])], bool)
        for s in self.strategies:
            own = rec[of_own_round & (rec["strategy"] == s)]
            if len(own):
                ok = own[own["error_class"].isna()]
                self.controller.observe(s, ok["latency_ms"].min() if len(ok) else None, None, int(len(own)))
        for p in pairs:
            if p.strategy in self.controller.arms:
                self.controller.credit(p.strategy, p.latency_ms, p.source_ms if p.source_ms is not None else math.inf)

    def _restore_bests(self) -> None:
        st = self.state
        for s in self.strategies:
            b = self.store.best(self.workload.name, s, session_id=self.session_id)
            if b is not None:
                st.best_by_strategy[s] = b
                if st.best is None or b["latency_ms"] < st.best["latency_ms"]:
                    st.best = b

    def _teardown(self) -> None:
        with self._bench:  # a what-if measurement on these pools finishes first
            self._tools_live = False
            self._release()

    def _release(self) -> None:
        release_session_lock(self._lock)
        self._lock = None
        if self.noise is not None:
            self.noise.close()
            for path, _shapes in self.state.artifacts.values():
                self.builder.discard(path)
            self.state.artifacts.clear()
        for name in ("builder", "runner"):
            obj = getattr(self, name)
            if (
                obj is not None
                and not (name == "runner" and obj is self.runner_spec)
                and obj is not self._shared_builder
            ):  # the caller's own runner / shared builder
                try:
                    obj.close()
                except Exception:
                    pass
        for ctx in self.contexts.values():
            try:
                ctx.post_tuning()
            except Exception:
                pass

    def _wait_if_paused(self) -> bool:
        """Blocks while paused; returns False if the session should stop."""
        if not self._running.is_set():
            self._set_status("paused")
            self._emit(ev.Paused(trials_done=self.trials_done))
            with self.measurement_gate.suspended():  # paused mid-round: a live view may draw meanwhile
                self._block_while_paused()
            if not self._stop.is_set():
                self._set_status("running")
                self._emit(ev.Resumed(trials_done=self.trials_done))
        return not self._stop.is_set()

    def _search(self) -> None:
        while self.step():
            pass

    # Stepping, for a driver that interleaves sessions (NetworkSession): open(), step() per round, close().
    def open(self, builder=None, runner=None) -> None:
        """What ``run()`` does before its first round: status, search contexts, baseline, restored state.

        ``builder`` / ``runner``: pools shared with other sessions; the caller owns and closes them.
        """
        if builder is not None:
            self._shared_builder = builder
        if runner is not None:
            self.runner_spec = runner
        self._t0 = time.time()
        with self._bench:  # the baseline and the calibration are timings too
            self._set_status("running")
            self._setup()
            self._tools_live = True

    def close(self) -> None:
        """What ``run()`` does after its last round: final status and event; own pools and contexts released."""
        try:
            self._finish()
        finally:
            self._teardown()

    def fail(self, e: BaseException) -> None:
        """Instead of ``close()``: record ``e`` as what ended this session (status ``failed``, a ``failed``
        event), then release it. For a driver whose step of this session raised (NetworkSession); every record
        measured before is kept."""
        try:
            self._record_failure(e)
        finally:
            self._teardown()

    def abandon(self) -> None:
        """Release a session that was never opened (a driver stopped or failed before its turn): its lock, so that
        it can be resumed later; its row stays ``created``, with no records."""
        release_session_lock(self._lock)
        self._lock = None

    def grant(self, n: int) -> None:
        """Allow ``n`` more trials than measured so far (a driver sharing one budget among sessions)."""
        self.trials = self.trials_done + n

    def _finish(self) -> None:
        self._elapsed_offset, self._t0 = self._elapsed(), None  # the clock stops: a later what-if is put at the end
        status = "stopped" if self._stop.is_set() else "finished"
        self._set_status(status)
        payload = ev.Stopped if status == "stopped" else ev.Finished
        self._emit(payload(trials_done=self.trials_done, best_latency_ms=self.state.best_ms(), summary=self.summary()))

    def step(self) -> bool:
        """One round (up to trials_per_round candidates); False when none was run: budget spent, stopped, or
        every strategy exhausted."""
        while self.trials_done < self.trials:
            if not self._wait_if_paused():
                return False
            decision = self.controller.choose()  # decide
            if decision is None:
                self._emit(
                    ev.ControllerDecision(
                        round=self.round + 1,
                        strategy=None,
                        chosen_by="controller",
                        mode=self.controller.mode,
                        scores={},
                        reason="every strategy is exhausted or pruned",
                        pruned=[],
                    )
                )
                return False
            self.round += 1
            n = min(self.preset.trials_per_round, self.trials - self.trials_done)
            self._emit(
                ev.ControllerDecision(
                    round=self.round,
                    strategy=decision.strategy,
                    chosen_by=decision.chosen_by,
                    mode=decision.mode,
                    scores=_finite(decision.scores),
                    reason=decision.reason,
                    pruned=[],
                )
            )
            self._emit(
                ev.RoundStarted(
                    round=self.round,
                    strategy=decision.strategy,
                    chosen_by=decision.chosen_by,
                    scores=_finite(decision.scores),
                    n=n,
                )
            )
            if self._round(decision.strategy, decision.chosen_by, n) is None:
                self.controller.mark_exhausted(decision.strategy)
                continue
            return True
        return False

    def _round(self, strategy: str, chosen_by: str, n: int) -> int | None:
        """One round of the loop's steps for ``strategy``; the number measured, None if it proposed nothing."""
        phases = RoundClock(self._elapsed)
        with _timed(phases, "cross_seed"):
            self.cross_seed(strategy)
        t_prop = time.time()
        with _timed(phases, "search"), self._bench:  # no what-if timing while the search runs
            proposals = self._speculated(strategy, n)
            if len(proposals) < n:
                proposals += self.propose(strategy, n - len(proposals), exclude={p.mod_hash for p in proposals})
        if not proposals:
            self._add_phases(phases)
            return None
        with _timed(phases, "features"):
            proposals = self.predict(strategy, proposals)
        dropped = dict(self.predict.dropped)  # before the pairings' own predictions replace it
        self._emit(
            ev.CandidatesProposed(
                round=self.round,
                strategy=strategy,
                candidates=[
                    {"index": i, "predicted_score": p.predicted_score, "mod_hash": p.mod_hash}
                    for i, p in enumerate(proposals)
                ],
            )
        )
        measured: list = []  # (proposal, record)
        ahead = _SearchAhead(None)
        try:
            with _timed(phases, "build"):
                ahead = self._search_ahead(strategy, proposals, phases)
                with self._bench:  # no what-if timing while this round builds or a search runs
                    builds = self.build(proposals)
                    if self.runner.measures_locally:
                        ahead.join()  # on 2 cores a search takes a core from the kernel being timed
            best_before = self.state.best_ms()
            self._measure_round(strategy, chosen_by, proposals, builds, measured, t_prop, phases)
        finally:
            ahead.join()
        for p, rec in measured:  # after the search ahead: it reads the search databases these records go into
            self.learn.record(strategy, p, rec)
        if self.preset.pair_layouts:
            with _timed(phases, "pair"):
                self._pair(strategy, measured, best_before, t_prop)
        t = time.time()
        with _timed(phases, "train"):
            trained = self.learn.round(strategy, measured)
        self._add_phases(phases)
        if trained:
            self._emit(
                ev.ModelTrained(
                    round=self.round,
                    n_samples=self.model.n_samples,
                    seconds=round(time.time() - t, 3),
                    boost_rounds=self.model.last_train_rounds,
                    feature_importance=dict(
                        sorted(self.model.feature_importance().items(), key=lambda kv: -kv[1])[:20]
                    ),
                )
            )
        ok = [r["latency_ms"] for _, r in measured if r["error_class"] is None]
        round_best = min(ok) if ok else None
        pruned = self.learn.observe(strategy, round_best, best_before, len(measured), proposals)
        self._emit(
            ev.RoundFinished(
                round=self.round,
                strategy=strategy,
                measured=len(measured),
                errors=len(measured) - len(ok),
                round_best_ms=round_best,
                best_ms=self.state.best_ms(),
                pruned=pruned,
                controller=self.controller.state(),
                phase_seconds={k: round(v, 3) for k, v in phases.items()},
                phase_spans=phases.spans,
                pruned_programs=dropped if self.pruner.enabled else None,
                pruning_counts=self.pruner.snapshot() if self.pruner.enabled else None,
            )
        )
        return len(measured)

    def _pair(self, strategy: str, measured: list, best_before: float | None, t_prop: float) -> None:
        """If the round found the session's new best, measure its loop nest under the other strategies' layouts
        too (controller.pair_targets; loop.PairLayouts), within the trial budget, and credit each to its arm.
        Its features, builds and timings count as the round's "pair" phase, not as its own."""
        phases = RoundClock(self._elapsed)
        new_best = self.state.best
        if new_best is None or (best_before is not None and new_best["latency_ms"] >= best_before):
            return
        source = next((p for p, rec in measured if rec["id"] == new_best["id"]), None)
        if source is None:
            return
        source_ms = new_best["latency_ms"]
        targets = self.controller.pair_targets(strategy)[: max(0, self.trials - self.trials_done)]
        kept: list = []  # (strategy, proposal): the pairings the cost model's pruning lets through
        with _timed(phases, "features"):
            for target, p in self.pair(source, targets):
                kept += [(target, q) for q in self.predict(target, [p])]
        if not kept:
            return
        with _timed(phases, "build"), self._bench:
            builds = self.build([q for _t, q in kept])  # one parallel build for all of them
        for (target, q), b in zip(kept, builds):
            if self.trials_done >= self.trials or self._stop.is_set():
                self.build.discard([b], keep=set())
                continue
            paired: list = []
            self._measure_round(target, "controller", [q], [b], paired, t_prop, phases)
            for q, rec in paired:
                self.learn.record(target, q, rec)
                # as for a round's best: a timing counts unless it failed (only would-be bests are verified)
                ok = rec["error_class"] is None
                self.controller.credit(target, rec["latency_ms"] if ok else None, source_ms)

    def _measure_round(self, strategy, chosen_by, proposals, builds, measured: list, t_prop, phases) -> None:
        """Time, verify and record the round's built proposals into ``measured``, between two probe readings."""

        def one(i, run_result=None):
            p, b = proposals[i], builds[i]
            with self._bench:
                rec = self._measure_one(strategy, chosen_by, p, b, t_prop, run_result)
            measured.append((p, rec))

        with _timed(phases, "measure"):
            try:
                with self.measurement_gate:
                    with self._bench:
                        slow_before = self.measure_step.probe_slow("before round")
                    first_id = self.store.last_record_id(self.session_id)
                    if isinstance(self.runner, interfaces.BatchRunner):
                        self._measure_batch(proposals, builds, one)
                    else:
                        for i in range(len(proposals)):
                            if not self._wait_if_paused():
                                break
                            one(i)
                    with self._bench:
                        slow_after = bool(measured) and self.measure_step.probe_slow("after round")
                    if slow_after:
                        self._mark_round_noisy(first_id, "the probe was slow after the round")
                    elif slow_before:
                        self._mark_round_noisy(first_id, "the probe was slow before the round and did not recover")
            finally:
                self.build.discard(builds, keep={path for path, _ in self.state.artifacts.values()})

    def _measure_one(self, strategy: str, chosen_by: str, p: loop.Proposal, b, t_prop: float, run_result=None) -> dict:
        """measure → (verify → confirm, for a would-be best) → record, for one built proposal."""
        timing = self.measure_step(b, p.shapes, trial=self.trials_done + 1, run_result=run_result)
        verdict = loop.Verdict(timing.latency_ms)
        if timing.latency_ms is not None and self.record.is_strategy_best(strategy, timing.latency_ms):
            # A would-be best is only reported once it computes the right answer.
            ok, cls, msg = self.verify(strategy, p, b.path)
            if not ok:
                verdict = loop.Verdict(timing.latency_ms, False, cls, msg)
            else:
                verdict = self.confirm(strategy, b.path, p.shapes, timing.latency_ms)
        self.trials_done += 1
        return self.record(
            p,
            strategy,
            chosen_by,
            timing,
            verdict,
            trial=self.trials_done,
            round=self.round,
            proposed_at=t_prop,
            elapsed_s=self._elapsed(),
            path=b.path,
            keep_artifact=run_result is None,
            build_s=b.build_s,
        )

    def _search_ahead(self, strategy: str, proposals: list, phases: "RoundClock") -> "_SearchAhead":
        """With the preset's ``overlap``, search the next round on a thread of its own, for the strategy the
        controller will likely pick, while this round builds (in the builder's worker processes) and, when the
        runner times kernels on other machines, while it is timed. A local runner's timing waits for it."""
        left = self.trials - self.trials_done - len(proposals)
        nxt = self.controller.likely_next(strategy) if self.preset.overlaps and left > 0 else None
        if nxt is None:
            return _SearchAhead(None)
        exclude = {p.mod_hash for p in proposals}
        n = min(self.preset.trials_per_round, left)

        def search():
            with _timed(phases, "search_overlapped"):
                try:
                    self.cross_seed(nxt)
                    ahead = self.propose(nxt, n, exclude=exclude)
                    self._ahead = (nxt, ahead) if ahead else None
                except Exception:  # noqa: BLE001 - a search that fails fails again when its round runs it, and says so
                    self._ahead = None

        thread = threading.Thread(target=search, name="workbench-search-ahead", daemon=True)
        thread.start()
        return _SearchAhead(thread)

    def _speculated(self, strategy: str, n: int) -> list:
        """The proposals searched ahead for ``strategy`` while the previous round built, less any measured or
        pruned since; empty when they were made for another strategy (then they are dropped)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None or ahead[0] != strategy:
            return []
        st = self.state
        fresh = [p for p in ahead[1] if p.mod_hash not in st.measured_hashes and p.mod_hash not in st.pruned_hashes]
        return fresh[:n]

    def _add_phases(self, round_phases: dict) -> None:
        for k, v in round_phases.items():
            self.phase_seconds[k] += v

    def _measure_batch(self, proposals, builds, one) -> None:
        """Several candidates in flight at once (an RPC runner's servers); each is recorded as it finishes."""
        built = [i for i, b in enumerate(builds) if b.path is not None]
        for i, b in enumerate(builds):
            if b.path is None:
                if not self._wait_if_paused():
                    return
                one(i)
        if self._stop.is_set():
            return

        def proceed():  # on the runner's threads: hold new candidates while paused, none after stop
            self._running.wait()
            return not self._stop.is_set()

        def on_result(k, r):
            one(built[k], r)
            self._wait_if_paused()

        items = [(builds[i].path, proposals[i].shapes) for i in built]
        self.runner.run_many(items, on_result=on_result, proceed=proceed)

    def _mark_round_noisy(self, after_id: int, reason: str) -> None:
        """The probe says the machine was slow around the round's timing: every record it timed is suspect."""
        ids = self.store.mark_noisy(self.session_id, after_id)
        if ids:
            self._emit(ev.RecordsMarkedNoisy(record_ids=ids, reason=reason))


class _SearchAhead:
    """The next round's search running on its thread (or none); ``join`` waits for it, again and again."""

    def __init__(self, thread: threading.Thread | None):
        self.thread = thread

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()


@contextlib.contextmanager
def _timed(phases: "RoundClock", name: str):
    t, start = time.time(), phases.now()
    try:
        yield
    finally:
        phases[name] += time.time() - t
        phases.spans.append([name, round(start, 3), round(phases.now(), 3)])


class RoundClock(dict):
    """Wall seconds per phase of one round (loop.PHASES), and when each ran: ``spans`` holds [phase, start, end]
    in session-elapsed seconds, in the order they ended (the next round's search, run while this round builds,
    lies inside the build span)."""

    def __init__(self, now):
        super().__init__({k: 0.0 for k in loop.PHASES})
        self.now = now
        self.spans: list = []


def _check_fits_in_memory(w: Workload) -> None:
    # A spec can be valid yet need more memory than the machine has for its inputs (found by a random-spec
    # test): refuse it with one line rather than fail deep in the first round.
    need = sum(math.prod(shape) * dtypes.numpy_dtype(dtype).itemsize for shape, dtype in w.arg_types)
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have // 2:
        raise WorkbenchError(
            f"workload {w.name!r} needs {need / 2**30:.3g} GiB for its arguments; this machine has "
            f"{have / 2**30:.3g} GiB of memory"
        )


def _strategy_arg(strategy) -> str:
    if strategy is None:
        return "auto"
    return ",".join(strategy) if isinstance(strategy, (list, tuple)) else str(strategy)


def _finite(d: dict) -> dict:
    return {k: (None if (isinstance(v, float) and not math.isfinite(v)) else v) for k, v in d.items()}
