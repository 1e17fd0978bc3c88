"""``TuningSession``: one workload, searched round by round, every step an event.

A round: the controller picks a layout strategy; that strategy's evolutionary
search (TVM's ``EvolutionarySearch``: sampled annotations of the sketches plus
the best measured programs, evolved with TVM's mutators under the shared cost
model, then eps-greedy selection) proposes a batch; the batch is built in
parallel, timed one by one, every new best is verified against the workload's
reference, every record is written to the store before it is announced, and
the cost model is retrained on all data.

``run()`` blocks; ``start()`` runs the same loop in a background thread;
``pause()``, ``resume()`` and ``stop()`` take effect between candidates.
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np

from . import cost_model as cm
from . import interfaces, layouts, measure, noise, presets, space, tvm_env
from .controller import StrategyController, make_policy
from .errors import WorkbenchError
from .events import Event
from .lifecycle import SessionLifecycle
from .store import RecordStore, program_hash, release_session_lock, session_lock
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


# The loop's phases, timed per round: the evolutionary search, feature extraction + prediction of its
# proposals, compilation, timing + verification (with the noise checks), replaying measured programs into
# the other strategies' searches, retraining the cost model.
PHASES = ("search", "features", "build", "measure", "cross_seed", "train")


class TuningSession(SessionLifecycle):
    def __init__(self, workload, target="host", trials: int = 64, preset="quick", seed: int = 0,
                 db: str | RecordStore = DEFAULT_DB, strategy="auto", builder_workers: int | None = None,
                 runner=None, _resume: dict | None = None, model=None, **preset_overrides):
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
            self.strategies, _mode_for(strategy, self.strategies),
            make_policy(self.preset.controller_policy, self.preset.controller_c, self.preset.controller_lam, seed))
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
        self.best: dict | None = None  # overall best record (verified)
        self.best_by_strategy: dict = {}
        self.naive_latency_ms: float | None = None
        self._elapsed_offset = 0.0
        # Wall seconds per phase of the loop in this process (the profile behind "where does a round go").
        self.phase_seconds: dict = {k: 0.0 for k in PHASES}
        if _resume is None:
            self.session_id = self.store.create_session(
                workload=self.workload.name, spec=self.workload.spec(), target=self.target_dict,
                preset=self.preset.name, preset_params=self.preset.to_dict(), seed=seed, trials=trials,
                strategies=self.strategies, strategy_arg=_strategy_arg(strategy), versions=tvm_env.library_versions())
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
    def resume(cls, db, session_id: int | None = None, workload: str | None = None, trials: int | None = None,
               **kw) -> "TuningSession":
        """Continue a stopped or killed session from its store; no measured record is lost."""
        store = db if isinstance(db, RecordStore) else RecordStore(db)
        if session_id is None:
            sessions = [s for s in store.sessions() if workload is None or s["workload"] == workload]
            if not sessions:
                raise WorkbenchError(f"no session{' for ' + workload if workload else ''} to resume in {store.path!r}")
            row = sessions[-1]
        else:
            row = store.session(session_id)
        kw.setdefault("strategy", row["strategy_arg"])
        overrides = {k: (tuple(v) if isinstance(v, list) else v) for k, v in row["preset_params"].items() if k != "name"}
        preset = presets.Preset(name=row["preset"], **overrides)
        return cls(row["spec"], target=row["target"], trials=trials or row["trials"], preset=preset,
                   seed=row["seed"], db=store, _resume=row, **kw)

    @property
    def _thread_name(self) -> str:
        return self.workload.name

    def pause(self) -> None:
        if self._running.is_set() and self.status == "running":
            self._running.clear()

    def resume_running(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stop.set()
        self._running.set()

    @property
    def cost_model(self):
        """The shared cost model (``PackSumXGB``: ``predict``, ``feature_importance``, ``n_samples``); None before start."""
        return getattr(self, "model", None)

    def records(self, with_trace: bool = False):
        """Measured candidates of this session as a pandas DataFrame."""
        return self.store.records(session_id=self.session_id, with_trace=with_trace)

    def summary(self) -> dict:
        rec = self.records()
        ok = rec[rec["error_class"].isna()] if len(rec) else rec
        per = {}
        for s in self.strategies:
            sub = rec[rec["strategy"] == s] if len(rec) else rec
            b = self.best_by_strategy.get(s)  # verified bests only; restored from the store on resume
            per[s] = {"best_latency_ms": b["latency_ms"] if b else None, "trials": int(len(sub)),
                      "verified": bool(b and b["verified"])}
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
            "speedup_vs_naive": (self.naive_latency_ms / best["latency_ms"]) if (best and self.naive_latency_ms) else None,
            "verified": bool(best and best["verified"]),
            "tuning_seconds": round(self._elapsed(), 2),
            "phase_seconds": {k: round(v, 2) for k, v in self.phase_seconds.items()},
            "noisy": int(rec["noisy"].sum()) if len(rec) else 0,
            "best_spread": best.get("confirm_spread") if best else None,
            "strategies": per,
            "status": self.status,
            "db": self.db_path,
        }

    # ------------------------------------------------------------------ internals
    def _elapsed(self) -> float:
        return self._elapsed_offset + (time.time() - self._t0 if getattr(self, "_t0", None) else 0.0)

    def _emit(self, kind: str, **data) -> Event:
        t = time.time()
        ev = Event(kind, self.session_id, t, self._elapsed(), data)
        ev.id = self.store.add_event(self.session_id, kind, t, ev.elapsed, data)
        self._bus.emit(ev)
        return ev

    def _set_status(self, status: str) -> None:
        self.status = status
        self.store.update_session(self.session_id, status=status)

    def _loop(self) -> None:
        try:
            self.open()
            self._search()
            self._finish()
        except BaseException as e:  # noqa: BLE001 - recorded, then re-raised by run()
            self.error = e
            self._set_status("failed")
            try:
                self._emit("failed", message=f"{type(e).__name__}: {e}")
            except Exception:
                pass
        finally:
            self._teardown()

    def _best_ms(self):
        return self.best["latency_ms"] if self.best else None

    def _setup(self) -> None:
        from tvm.s_tir import meta_schedule as ms

        tvm_env.setup()
        w = self.workload
        self.target = tvm_env.make_target(self.target_dict)
        p = self.preset
        self.model = self._shared_model if self._shared_model is not None else cm.PackSumXGB(
            seed=self.seed, max_rounds=p.xgb_max_rounds, early_stop=p.xgb_early_stop, warmup=p.warmup_samples,
            nthread=tvm_env.available_cores())
        self.featurizer = cm.Featurizer(space.tune_context(w, self.target, "no-rewrite", p, self.seed, search=False,
                                                           threads=tvm_env.available_cores()),
                                        strategy_onehot=p.strategy_onehot)
        self._ctx_strategy: dict = {}
        self.search_model = cm.search_cost_model(self.model, self.featurizer, self._strategy_of_ctx)
        self.builder = self._shared_builder or measure.make_builder(self.target_dict, p, workers=self.builder_workers)
        # RPC server health arrives on this (the tuning) thread, so it is stored and emitted like any event.
        self.runner = measure.make_runner(self.runner_spec, self.target_dict, p,
                                          on_health=lambda d: self._emit("runner_health", **d))
        self.inputs = w.make_inputs(seed=1234)
        self.out_shape = w.arg_shapes[-1]
        self._measured_hashes: set = set()
        self._seed_copies: set = set()  # hashes of programs offered by _offer_seeds (see _propose)
        self._seed_pool: list = []  # (mean run seconds, source strategy, trace, run_secs) of every measured program
        self._seeds_tried: dict = {s: set() for s in self.strategies}  # pool indices replayed into s (or failing)
        self._seeds_in: dict = {s: set() for s in self.strategies}  # pool indices in s's search database
        self.contexts = {}
        self.ms_dbs = {}
        prior = self.store.traces(self.session_id) if self._resumed else []
        if prior:
            self._elapsed_offset = self.store.records(session_id=self.session_id)["elapsed_s"].max()
            self._t0 = time.time()
        self._emit("session_started", workload=w.name, spec=w.spec(), flops=w.flops, target=self.target_dict,
                   trials=self.trials, preset=p.name, seed=self.seed, strategies=self.strategies,
                   mode=self.controller.mode, db=self.db_path, resumed=self._resumed, trials_done=len(prior),
                   reference=w.reference_kind, weight_indices=w.weight_indices)
        for s in self.strategies:
            ctx = space.tune_context(w, self.target, s, p, self.seed + layouts.STRATEGY_INDEX[s])
            self._ctx_strategy[ctx.task_name] = s
            db = ms.database.MemoryDatabase()
            ctx.pre_tuning(max_trials=1 << 30, num_trials_per_iter=p.trials_per_round,
                           design_spaces=ctx.generate_design_space(), database=db, cost_model=self.search_model)
            self.contexts[s] = ctx
            self.ms_dbs[s] = (db, db.commit_workload(w.mod))
        self._baseline_and_reference()
        self.noise = noise.NoiseGuard(noise.NoisePolicy(mode=p.noise, confirm_rounds=p.confirm_rounds), self.runner,
                                      self.builder, self._emit, self._stop.is_set, gate=self.measurement_gate)
        self._artifacts: dict = {}  # record id -> (artifact path, arg shapes) of the incumbents, for re-measurement
        with self.measurement_gate:
            self.noise.start()
        if prior:
            self._restore(prior)

    def _strategy_of_ctx(self, ctx) -> str:
        return self._ctx_strategy[str(ctx.task_name)]

    def _baseline_and_reference(self) -> None:
        w = self.workload
        known = self.naive_latency_ms is not None
        naive_ms, self.reference = measure.naive_and_reference(w, self.builder, self.runner, self.inputs,
                                                               timeout=NAIVE_TIMEOUT, need_latency=not known)
        if not known:
            self.naive_latency_ms = naive_ms
            self.store.update_session(self.session_id, naive_latency_ms=naive_ms)
            self._emit("baseline_measured", naive_latency_ms=naive_ms, reference=w.reference_kind)

    def _restore(self, prior) -> None:
        """Rebuild search state from stored records: search databases, cost model, bests, counters."""
        from tvm.s_tir import meta_schedule as ms

        width = cm.N_FEATURES
        for strategy, feats, lat, h in self.store.training_rows(self.workload.name):
            # Rows written by a workbench with another strategy set have another width: not comparable.
            if strategy in self.strategies and feats is not None and feats.shape[1] == width:
                self.model.add(feats, lat, self.workload.name)
        rec = self.store.records(session_id=self.session_id)
        self.trials_done = len(rec)
        self.round = int(rec["round"].max()) if len(rec) else 0
        for row in prior:
            self._measured_hashes.add(row["mod_hash"])
            if row["error_class"] is None and row["latency_ms"] is not None and row["strategy"] in self.ms_dbs:
                sch = space.schedule_from_trace_json(self.workload, row["trace"])
                db, wl = self.ms_dbs[row["strategy"]]
                args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
                run_secs = [float(x) for x in json.loads(row["run_secs"])]
                db.commit_tuning_record(ms.database.TuningRecord(sch.trace, wl, run_secs, self.target, args))
                self._seed_pool.append((float(np.mean(run_secs)), row["strategy"], sch.trace, run_secs))
        for s in self.strategies:
            b = self.store.best(self.workload.name, s)
            if b is not None and b["session_id"] == self.session_id:
                self.best_by_strategy[s] = b
                if self.best is None or b["latency_ms"] < self.best["latency_ms"]:
                    self.best = b
        for s in self.strategies:
            sub = rec[rec["strategy"] == s]
            if len(sub):
                ok = sub[sub["error_class"].isna()]
                self.controller.observe(s, ok["latency_ms"].min() / 1e3 if len(ok) else None, None, int(len(sub)))
        self.model.train()

    def _offer_seeds(self, strategy: str) -> None:
        """Before ``strategy``'s search runs, put the best programs measured under the other strategies into
        its search database.

        All strategies share the workload's sketches and differ only in postprocessors, so a trace
        (postprocs removed) replays under another strategy's postprocs as a *different* program of the
        same loop structure. Its record in that strategy's search database makes the program a seed of
        the next initial population there; without this an arm picked late by the controller restarts
        from its own few measurements (what the first reduced AL-Ansor run showed). The latency attached
        is the one measured under its source: a ranking hint for seed selection only; the cost model
        never sees these rows. A trace that does not replay (e.g. ``packed`` needs a tiled output-channel
        axis) is skipped, because TVM's search aborts on a seed it cannot postprocess.

        The search seeds its population from the database's top ``population * init_measured_ratio``
        records only, so only that many of the others' best programs are replayed, when the strategy
        is about to search: the same seeds as replaying every program the moment it is measured, at a
        fraction of the replays (each is a schedule replay plus postprocessing).
        """
        if not self.preset.cross_seed or len(self.ms_dbs) < 2:
            return
        from tvm.s_tir import meta_schedule as ms
        from tvm.s_tir.schedule import Schedule

        db, wl = self.ms_dbs[strategy]
        want = max(1, math.ceil(self.preset.population * self.preset.init_measured_ratio))
        tried, kept = self._seeds_tried[strategy], self._seeds_in[strategy]
        order = sorted((i for i, e in enumerate(self._seed_pool) if e[1] != strategy),
                       key=lambda i: self._seed_pool[i][0])
        n = 0
        for i in order:
            if n >= want:
                break
            if i in kept:
                n += 1
                continue
            if i in tried:
                continue
            tried.add(i)
            _, _, trace, run_secs = self._seed_pool[i]
            sch = Schedule(self.workload.mod)
            try:
                trace.apply_to_schedule(sch, remove_postproc=True)
                if not space._postprocess(sch, self.contexts[strategy]):
                    continue
            except Exception:  # noqa: BLE001 - not replayable under this strategy: not a seed for it
                continue
            args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
            db.commit_tuning_record(ms.database.TuningRecord(sch.trace, wl, run_secs, self.target, args))
            self._seed_copies.add(program_hash(sch.mod))
            kept.add(i)
            n += 1

    def _teardown(self) -> None:
        release_session_lock(self._lock)
        self._lock = None
        guard = getattr(self, "noise", None)
        if guard is not None:
            guard.close()
            for path, _shapes in self._artifacts.values():
                self.builder.discard(path)
            self._artifacts.clear()
        for name in ("builder", "runner"):
            obj = getattr(self, name, None)
            if obj is not None and not (name == "runner" and obj is self.runner_spec) \
                    and obj is not self._shared_builder:  # the caller's own runner / shared builder
                try:
                    obj.close()
                except Exception:
                    pass
        for ctx in getattr(self, "contexts", {}).values():
            try:
                ctx.post_tuning()
            except Exception:
                pass

    def _wait_if_paused(self) -> bool:
        """Blocks while paused; returns False if the session should stop."""
        if not self._running.is_set():
            self._set_status("paused")
            self._emit("paused", trials_done=self.trials_done)
            with self.measurement_gate.suspended():  # paused mid-round: a live view may draw meanwhile
                self._running.wait()
            if not self._stop.is_set():
                self._set_status("running")
                self._emit("resumed", trials_done=self.trials_done)
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
        self._set_status("running")
        self._setup()

    def close(self) -> None:
        """What ``run()`` does after its last round: final status and event; own pools and contexts released."""
        try:
            self._finish()
        finally:
            self._teardown()

    def _finish(self) -> None:
        status = "stopped" if self._stop.is_set() else "finished"
        self._set_status(status)
        self._emit(status, trials_done=self.trials_done, best_latency_ms=self._best_ms(), summary=self.summary())

    def step(self) -> bool:
        """One round (up to trials_per_round candidates); False when none was run: budget spent, stopped, or
        every strategy exhausted."""
        while self.trials_done < self.trials:
            if not self._wait_if_paused():
                return False
            decision = self.controller.choose()
            if decision is None:
                self._emit("controller_decision", round=self.round + 1, strategy=None, chosen_by="controller",
                           mode=self.controller.mode, scores={}, reason="every strategy is exhausted or pruned", pruned=[])
                return False
            self.round += 1
            n = min(self.preset.trials_per_round, self.trials - self.trials_done)
            self._emit("controller_decision", round=self.round, strategy=decision.strategy, chosen_by=decision.chosen_by,
                       mode=decision.mode, scores=_finite(decision.scores), reason=decision.reason, pruned=[])
            self._emit("round_started", round=self.round, strategy=decision.strategy, chosen_by=decision.chosen_by,
                       reason=_finite(decision.scores), n=n)
            measured = self._round(decision.strategy, decision.chosen_by, n)
            if measured is None:
                self.controller.mark_exhausted(decision.strategy)
                continue
            return True
        return False

    def _propose(self, strategy: str, n: int):
        """Up to n candidates never measured before, from the strategy's evolutionary search."""
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        ctx = self.contexts[strategy]
        out, copies = [], []
        for _ in range(3):  # a search round can return only already-measured programs; retry a little
            cands = ctx.generate_measure_candidates()
            if not cands:
                break
            for c in cands:
                h = program_hash(c.sch.mod)
                if h in self._measured_hashes or any(h == o[1] for o in out + copies):
                    continue
                if h in self._seed_copies:
                    # Another strategy's program replayed as is: the model ranks these seeds high, and
                    # measuring them took a quarter of an adaptive session's trials (first AL-Ansor rerun).
                    # They steer the search; only its new programs are measured, unless it has no other.
                    copies.append((c, h))
                    continue
                out.append((c, h))
                if len(out) >= n:
                    break
            if len(out) >= n:
                break
            if out:
                break
        if not out:
            out = copies[:n]
        strip = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)
        return [(c, h, strip(c.sch.mod)) for c, h in out]

    def _round(self, strategy: str, chosen_by: str, n: int):
        from tvm.s_tir import meta_schedule as ms

        w = self.workload
        ctx = self.contexts[strategy]
        round_phases = {k: 0.0 for k in PHASES}
        t = time.time()
        self._offer_seeds(strategy)
        round_phases["cross_seed"] = time.time() - t
        t_prop = time.time()
        props = self._propose(strategy, n)
        round_phases["search"] = time.time() - t_prop
        if not props:
            self._add_phases(round_phases)
            return None
        cands = [c for c, _, _ in props]
        t = time.time()
        feats = self.featurizer(ctx, cands, strategy)
        preds = self.model.predict(feats)
        round_phases["features"] = time.time() - t
        self._emit("candidates_proposed", round=self.round, strategy=strategy,
                   candidates=[{"index": i, "predicted_score": float(p), "mod_hash": h}
                               for i, (p, (_, h, _)) in enumerate(zip(preds, props))])
        t = time.time()
        builds = self.builder.build([m for _, _, m in props])
        round_phases["build"] = time.time() - t
        global_prev = self.best["latency_ms"] / 1e3 if self.best else None
        measured_c, results = [], []
        round_best = None
        errors = 0
        def measured(i, run_result=None):
            nonlocal errors, round_best
            (c, h, _), b = props[i], builds[i]
            rec = self._measure_one(strategy, chosen_by, c, h, b, float(preds[i]), feats[i], t_prop, run_result)
            measured_c.append(c)
            ok = rec["error_class"] is None
            errors += not ok
            results.append(ms.runner.RunnerResult(rec["run_secs"] if ok else None,
                                                  None if ok else (rec["error_msg"] or rec["error_class"])))
            if ok:
                round_best = min(round_best or math.inf, rec["latency_ms"] / 1e3)
                db, wl = self.ms_dbs[strategy]
                db.commit_tuning_record(ms.database.TuningRecord(c.sch.trace, wl, rec["run_secs"], self.target,
                                                                 c.args_info))
                self._seed_pool.append((float(np.mean(rec["run_secs"])), strategy, c.sch.trace, rec["run_secs"]))

        t_measure = time.time()
        try:
            with self.measurement_gate:
                slow_before = self.noise.check_probe("before round")
                first_id = self.store.last_record_id(self.session_id)
                if isinstance(self.runner, interfaces.BatchRunner):
                    self._measure_batch(props, builds, measured)
                else:
                    for i in range(len(props)):
                        if not self._wait_if_paused():
                            break
                        measured(i)
                if measured_c and self.noise.check_probe("after round"):
                    self._mark_round_noisy(first_id, "the probe was slow after the round")
                elif slow_before:
                    self._mark_round_noisy(first_id, "the probe was slow before the round and did not recover")
        finally:
            kept = {path for path, _ in self._artifacts.values()}
            for b in builds:
                if b.path not in kept:
                    self.builder.discard(b.path)
        round_phases["measure"] = time.time() - t_measure
        if measured_c:
            ctx.notify_runner_results(measured_c, results)
        t = time.time()
        trained = self.model.train()
        round_phases["train"] = time.time() - t
        self._add_phases(round_phases)
        if trained:
            self._emit("model_trained", round=self.round, n_samples=self.model.n_samples,
                       seconds=round(time.time() - t, 3), boost_rounds=self.model.last_train_rounds)
        top = sorted(preds, reverse=True)[: max(1, len(preds) // 4)]
        pruned = self.controller.observe(strategy, round_best, global_prev, len(measured_c),
                                         predicted_mean=float(np.mean(top)) if len(top) else None,
                                         model_trained=self.model.trained)
        self._emit("round_finished", round=self.round, strategy=strategy, measured=len(measured_c), errors=errors,
                   round_best_ms=None if round_best is None else round_best * 1e3, best_ms=self._best_ms(),
                   pruned=pruned, controller=self.controller.state(),
                   phase_seconds={k: round(v, 3) for k, v in round_phases.items()})
        return len(measured_c)

    def _add_phases(self, round_phases: dict) -> None:
        for k, v in round_phases.items():
            self.phase_seconds[k] += v

    def _measure_batch(self, props, builds, measured) -> None:
        """Several candidates in flight at once (an RPC runner's servers); each is recorded as it finishes."""
        built = [i for i, b in enumerate(builds) if b.path is not None]
        for i, b in enumerate(builds):
            if b.path is None:
                if not self._wait_if_paused():
                    return
                measured(i)
        if self._stop.is_set():
            return

        def proceed():  # on the runner's threads: hold new candidates while paused, none after stop
            self._running.wait()
            return not self._stop.is_set()

        def on_result(k, r):
            measured(built[k], r)
            self._wait_if_paused()

        items = [(builds[i].path, [tuple(int(x) for x in a.shape) for a in props[i][0].args_info]) for i in built]
        self.runner.run_many(items, on_result=on_result, proceed=proceed)

    def _mark_round_noisy(self, after_id: int, reason: str) -> None:
        """The probe says the machine was slow around the round's timing: every record it timed is suspect."""
        ids = self.store.mark_noisy(self.session_id, after_id)
        if ids:
            self._emit("records_marked_noisy", record_ids=ids, reason=reason)

    def _confirm(self, strategy: str, path: str, shapes: list, first_lat: float):
        """Re-measure a would-be best interleaved with the incumbents it must beat (the winner's curse:
        the minimum over many noisy timings is biased low). Returns (latency s, its samples, spread); the
        incumbents' records get their re-measured medians, so that ranking by latency stays fair."""
        if self.preset.confirm_rounds <= 0:
            return first_lat, None, None
        incumbents = {}
        for rec in (self.best_by_strategy.get(strategy), self.best):
            if rec is not None and rec["id"] in self._artifacts:
                incumbents[rec["id"]] = rec
        entries = [("candidate", path, shapes)] + [(rid, *self._artifacts[rid]) for rid in incumbents]
        samples = self.noise.confirm(entries)
        if not samples["candidate"]:
            return first_lat, None, None
        for rid, rec in incumbents.items():
            if samples[rid]:
                ms = float(np.median(samples[rid])) * 1e3
                gflops = self.workload.flops / ms / 1e6
                self.store.update_record(rid, latency_ms=ms, gflops=gflops, confirm_secs=json.dumps(samples[rid]),
                                         confirm_spread=noise.spread(samples[rid]))
                for held in {id(r): r for r in (self.best, *self.best_by_strategy.values()) if r is not None
                             and r["id"] == rid}.values():
                    held["latency_ms"], held["gflops"] = ms, gflops
                self._emit("best_remeasured", record_id=rid, strategy=rec["strategy"], latency_ms=ms, gflops=gflops,
                           samples=len(samples[rid]))
        if self.best_by_strategy:  # an incumbent re-measured slower may no longer be the fastest overall
            self.best = min(self.best_by_strategy.values(), key=lambda r: r["latency_ms"])
        c = samples["candidate"]
        return float(np.median(c)), c, noise.spread(c)

    def _keep_artifact(self, rec: dict, path: str, shapes: list) -> None:
        """Keep an incumbent's build for later re-measurement; drop builds no longer an incumbent."""
        self._artifacts[rec["id"]] = (path, shapes)
        live = {r["id"] for r in (self.best, *self.best_by_strategy.values()) if r is not None}
        for rid in [r for r in self._artifacts if r not in live]:
            old_path, _ = self._artifacts.pop(rid)
            if old_path != path:
                self.builder.discard(old_path)

    def _measure_one(self, strategy, chosen_by, c, h, b, pred, feats, t_prop, run_result=None) -> dict:
        w = self.workload
        shapes = [tuple(int(x) for x in a.shape) for a in c.args_info]
        run_secs, err_cls, err_msg, verified, noisy, reading = [], b.error_class, b.error_msg, False, False, None
        confirm_secs = confirm_spread = None
        if b.path is not None:
            if run_result is not None:
                r = run_result
            else:
                r, noisy = self.noise.time(b.path, shapes, trial=self.trials_done + 1)
            run_secs, err_cls, err_msg, reading = r.run_secs, r.error_class, r.error_msg, r.reading
        lat = float(np.median(run_secs)) if run_secs and err_cls is None else None
        s_best = self.best_by_strategy.get(strategy)
        if lat is not None and (s_best is None or lat * 1e3 < s_best["latency_ms"]):
            # A would-be best is only reported once it computes the right answer.
            kin = layouts.get(strategy).deploy_inputs(c.sch, w, self.inputs)
            out, vcls, vmsg = self.runner.compute(b.path, kin, shapes[-1])
            if out is None:
                err_cls, err_msg = vcls, vmsg
            else:
                verified, detail = measure.verify(out, self.reference)
                if not verified:
                    err_cls, err_msg = "wrong-result", detail
            if verified and err_cls is None:
                lat, confirm_secs, confirm_spread = self._confirm(strategy, b.path, shapes, lat)
                s_best = self.best_by_strategy.get(strategy)
        self.trials_done += 1
        strategy_best = verified and err_cls is None and (s_best is None or lat * 1e3 < s_best["latency_ms"])
        is_best = strategy_best and (self.best is None or lat * 1e3 < self.best["latency_ms"])
        rec = {
            "session_id": self.session_id, "workload": w.name, "trial": self.trials_done, "round": self.round,
            "strategy": strategy, "chosen_by": chosen_by, "trace": space.trace_json(c.sch),
            "decisions": space.decisions_json(c.sch.trace), "mod_hash": h, "predicted_score": pred,
            "run_secs": run_secs, "latency_ms": None if lat is None else lat * 1e3,
            "gflops": None if lat is None else w.flops / lat / 1e9, "error_class": err_cls, "error_msg": err_msg,
            "verified": verified, "is_best": is_best, "seed": self.seed, "proposed_at": t_prop,
            "measured_at": time.time(), "elapsed_s": self._elapsed(), "noisy": noisy, "noise": reading,
            "cv": noise.cv(run_secs) if err_cls is None else None, "confirm_secs": confirm_secs,
            "confirm_spread": confirm_spread,
        }
        rec["id"] = self.store.add_record(rec, feats)  # durable before anyone hears of it
        self._measured_hashes.add(h)
        self.model.add(feats, lat if err_cls is None else None, w.name)
        public = {k: v for k, v in rec.items() if k != "trace"}
        if strategy_best:
            self.best_by_strategy[strategy] = rec
        if is_best:
            self.best = rec
        if strategy_best and run_result is None:
            self._keep_artifact(rec, b.path, shapes)
        self._emit("candidate_measured", record=public, new_best=is_best, strategy_best=strategy_best)
        if is_best:
            self._emit("new_best", record_id=rec["id"], trial=rec["trial"], strategy=strategy,
                       latency_ms=rec["latency_ms"], gflops=rec["gflops"], verified=True)
        return rec


def _check_fits_in_memory(w: Workload) -> None:
    # A spec can be valid yet need more memory than the machine has for its inputs (found by a random-spec
    # test): refuse it with one line rather than fail deep in the first round.
    need = sum(math.prod(s) for s in w.arg_shapes) * 4
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have // 2:
        raise WorkbenchError(f"workload {w.name!r} needs {need / 2**30:.3g} GiB for its arguments; this machine has "
                             f"{have / 2**30:.3g} GiB of memory")


def _strategy_arg(strategy) -> str:
    if strategy is None:
        return "auto"
    return ",".join(strategy) if isinstance(strategy, (list, tuple)) else str(strategy)


def _finite(d: dict) -> dict:
    return {k: (None if (isinstance(v, float) and not math.isfinite(v)) else v) for k, v in d.items()}
