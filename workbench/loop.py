"""The tuning loop as named steps: decide, cross-seed, propose, predict, build, measure, verify, confirm,
record, learn.

Each step is a small object with one job and the few collaborators it needs; ``TuningSession`` composes
them into rounds (``session.TuningSession._round``) and owns only lifecycle and state. Steps share what a
search knows about itself through one ``SearchState``; the ones that tell the world something get the
session's ``emit`` (which stores an event before announcing it).

    decide      the controller picks the strategy of the round    (controller.StrategyController.choose)
    cross-seed  the other strategies' best programs into its search database         (CrossSeed)
    pair        a new best's loop nest also under the other strategies' layouts      (PairLayouts)
    propose     new programs from the strategy's evolutionary search                 (Propose)
    predict     their features and the shared cost model's scores                    (Predict)
    build       compile them in parallel                                             (Build)
    measure     time one, noise-checked                                              (Measure)
    verify      a would-be best must compute the right answer                        (Verify)
    confirm     a verified would-be best re-timed interleaved with the incumbents    (Confirm)
    record      the row written durably, then the bests updated and announced        (Record)
    learn       search database, cost model and controller fed                       (Learn)
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

import numpy as np

from . import events as ev
from . import interfaces, layouts, measure, noise, space
from .store import RecordStore, program_hash

# The loop's phases, timed per round (round_finished.phase_seconds): cross-seeding, the evolutionary search,
# feature extraction + prediction, compilation, timing (with verification, confirmation and recording),
# retraining the cost model, the next round's search run while this round built (preset ``overlap``; its
# wall time lies inside "build"), and the paired measurements of a new best (preset ``pair_layouts``).
PHASES = ("search", "features", "build", "measure", "cross_seed", "train", "search_overlapped", "pair")


@dataclass
class SearchState:
    """What the steps share about one session's search. Latencies in records are ms."""

    best: dict | None = None  # the overall best record (verified)
    best_by_strategy: dict = field(default_factory=dict)  # strategy -> its best verified record
    measured_hashes: set = field(default_factory=set)  # every program measured (never measured twice)
    pruned_hashes: set = field(default_factory=set)  # programs a pruning rule kept from being measured
    # (mean run seconds, source strategy, trace, run_secs) of every measured valid program: cross-seeding's pool
    seed_pool: list = field(default_factory=list)
    seed_copies: set = field(default_factory=set)  # hashes of programs replayed into another strategy's search
    seeds_tried: dict = field(default_factory=dict)  # strategy -> pool indices replayed into it (or failing)
    seeds_in: dict = field(default_factory=dict)  # strategy -> pool indices in its search database
    artifacts: dict = field(default_factory=dict)  # record id -> (build path, arg shapes) of the incumbents

    def best_ms(self) -> float | None:
        return self.best["latency_ms"] if self.best else None

    def incumbents(self) -> list[dict]:
        return [r for r in (self.best, *self.best_by_strategy.values()) if r is not None]


@dataclass
class Proposal:
    """One program of a round, from the search until it is recorded."""

    candidate: object  # ms.MeasureCandidate
    mod_hash: str
    deploy_mod: object  # the module that is built: weight-layout rewrite blocks stripped
    features: np.ndarray | None = None
    predicted_score: float | None = None

    @property
    def shapes(self) -> list[tuple]:
        return [tuple(int(x) for x in a.shape) for a in self.candidate.args_info]

    @classmethod
    def of_schedule(cls, sch) -> "Proposal":
        """A complete program (postprocessors applied) that no search proposed: a person's what-if variant."""
        from tvm.s_tir import meta_schedule as ms
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        candidate = ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
        return cls(candidate, program_hash(sch.mod), RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(sch.mod))


@dataclass
class Timing:
    run_secs: list
    error_class: str | None
    error_msg: str | None
    noisy: bool = False
    reading: dict | None = None

    @property
    def latency_ms(self) -> float | None:
        return float(np.median(self.run_secs)) * 1e3 if self.run_secs and self.error_class is None else None


@dataclass
class Verdict:
    """What verification and confirmation made of a timing."""

    latency_ms: float | None
    verified: bool = False
    error_class: str | None = None
    error_msg: str | None = None
    confirm_secs: list | None = None
    confirm_spread: float | None = None
    confirm_noisy: bool = False  # a disturbed timing among confirm_secs (the latency comes from them)


class CrossSeed:
    """Before a strategy searches, put the best programs measured under the other strategies into its search
    database.

    All strategies share the workload's sketches and differ only in postprocessors, so a trace (postprocs
    removed) replays under another strategy's postprocs as a *different* program of the same loop
    structure. Its record in that strategy's search database makes the program a seed of the next initial
    population there; without this an arm picked late by the controller restarts from its own few
    measurements. The latency attached is the one measured under its source: a ranking hint for seed
    selection only; the cost model never sees these rows. A trace that does not replay (e.g. ``packed``
    needs a tiled output-channel axis) is skipped, because TVM's search aborts on a seed it cannot
    postprocess. The search seeds its population from the database's top ``population *
    init_measured_ratio`` records only, so only that many of the others' best programs are replayed.
    """

    def __init__(self, workload, target, preset, contexts: dict, search_dbs: dict, state: SearchState):
        self.workload, self.target, self.preset = workload, target, preset
        self.contexts, self.search_dbs, self.state = contexts, search_dbs, state

    def __call__(self, strategy: str) -> int:
        """Replays up to the population's seed count into ``strategy``'s database; returns how many are there."""
        if not self.preset.cross_seed or len(self.search_dbs) < 2:
            return 0
        from tvm.s_tir import meta_schedule as ms

        st = self.state
        db, wl = self.search_dbs[strategy]
        want = max(1, math.ceil(self.preset.population * self.preset.init_measured_ratio))
        tried, kept = st.seeds_tried.setdefault(strategy, set()), st.seeds_in.setdefault(strategy, set())
        order = sorted((i for i, e in enumerate(st.seed_pool) if e[1] != strategy), key=lambda i: st.seed_pool[i][0])
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
            _, _, trace, run_secs = st.seed_pool[i]
            sch = space.replay_under(self.workload, trace, self.contexts[strategy])
            if sch is None:  # not replayable under this strategy: not a seed for it
                continue
            args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
            db.commit_tuning_record(ms.database.TuningRecord(sch.trace, wl, run_secs, self.target, args))
            st.seed_copies.add(program_hash(sch.mod))
            kept.add(i)
            n += 1
        return n


class PairLayouts:
    """The loop nest of a round's new best under other strategies' layouts, as programs to measure.

    Strategies differ only in postprocessors, so the trace of a program (postprocs removed) replays under
    another strategy's as the same loop nest in that strategy's weight layout (as for cross-seeding). Measured,
    such a pair compares two layouts on one program, which an arm's own best after a few rounds cannot: it
    also reflects how lucky that arm's search was. Returns ``(strategy, Proposal)`` for each target whose
    replay postprocesses and has not been measured; a target it does not replay into is left out.
    """

    def __init__(self, workload, contexts: dict, state: SearchState):
        self.workload, self.contexts, self.state = workload, contexts, state

    def __call__(self, source: Proposal, targets: list[str]) -> list[tuple[str, Proposal]]:
        out = []
        for strategy in targets:
            sch = space.replay_under(self.workload, source.candidate.sch.trace, self.contexts[strategy])
            if sch is None:  # this loop nest has no form in that layout: nothing to pair
                continue
            p = Proposal.of_schedule(sch)
            if p.mod_hash in self.state.measured_hashes or p.mod_hash in self.state.pruned_hashes:
                continue
            out.append((strategy, p))
        return out


@dataclass(frozen=True)
class PairedMeasurement:
    """A stored pairing: the loop nest of a ``source`` round's program measured in ``strategy``'s layout.
    Latencies in ms; None where that timing failed."""

    source: str
    strategy: str
    latency_ms: float | None
    source_ms: float | None


def paired_measurements(records, round_strategy: dict) -> list[PairedMeasurement]:
    """The pairings among a session's ``records`` (its ``records()`` frame, in trial order), found from what the
    store holds: a record of another strategy than its round's (``round_strategy``: round -> strategy, from the
    ``round_started`` events), with the same loop nest (decisions) as a record of the round's own strategy."""

    def valid(lat, err):
        return None if isinstance(err, str) or lat is None or not math.isfinite(lat) else float(lat)

    rows = list(
        zip(records["round"], records["strategy"], records["decisions"], records["latency_ms"], records["error_class"])
    )
    own = {(r, d): (s, valid(lat, err)) for r, s, d, lat, err in rows if round_strategy.get(r, s) == s}
    out = []
    for r, s, d, lat, err in rows:
        if round_strategy.get(r, s) != s and (r, d) in own:
            src, src_ms = own[(r, d)]
            out.append(PairedMeasurement(src, s, valid(lat, err), src_ms))
    return out


def search_batch(per_round: int) -> int:
    """How many programs one evolutionary search returns for rounds of ``per_round``: a spare share on top,
    so that the ones that cannot be measured (measured or in flight already, pruned, or another strategy's
    program seeded as is) rarely leave a round short; a short round would pay a second whole search for the
    few it lacks."""
    return per_round + max(4, per_round // 2)


class Propose:
    """Up to n programs never measured before, from a strategy's evolutionary search.

    The search returns ``search_batch(n)`` programs: the model's picks best first, then its eps-greedy random
    picks (TVM's ``EvolutionarySearch`` puts those last). A round takes the model's picks in their order and
    keeps the random share eps-greedy gives a round of n, so the spare programs change which of the model's
    picks fill in, never how much of the round explores."""

    ATTEMPTS = 3  # a search round can return only already-measured programs; retry a little

    def __init__(self, contexts: dict, state: SearchState, eps_greedy: float = 0.0):
        self.contexts, self.state, self.eps_greedy = contexts, state, eps_greedy

    def __call__(self, strategy: str, n: int, exclude=frozenset()) -> list[Proposal]:
        """``exclude``: hashes of programs in flight (built, not measured yet), not to be proposed again."""
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        ctx, st = self.contexts[strategy], self.state
        taken, copies = [], []
        seen = set(exclude)
        for _ in range(self.ATTEMPTS):
            cands = ctx.generate_measure_candidates()
            if not cands:
                break
            fresh = []  # (position, candidate, hash): new programs, in the search's order
            for i, c in enumerate(cands):
                h = program_hash(c.sch.mod)
                if h in st.measured_hashes or h in st.pruned_hashes or h in seen:
                    continue
                seen.add(h)
                if h in st.seed_copies:
                    # Another strategy's program replayed as is: the model ranks these seeds high, and
                    # measuring them would spend a large share of an adaptive session's trials on copies.
                    # They steer the search; only its new programs are measured, unless it has no other.
                    copies.append((c, h))
                    continue
                fresh.append((i, c, h))
            taken += self._pick(fresh, len(cands), n - len(taken))
            if taken:
                break
        out = [(c, h) for _i, c, h in taken] or copies[:n]
        strip = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)
        return [Proposal(c, h, strip(c.sch.mod)) for c, h in out]

    def _pick(self, fresh: list, returned: int, n: int) -> list:
        """n of the ``fresh`` (position, candidate, hash) of a search that returned ``returned`` programs: the
        model's picks first, with eps-greedy's share of n from the random tail; either side fills in for the
        other when short."""
        first_random = returned - int(returned * self.eps_greedy)
        picks = [f for f in fresh if f[0] < first_random]
        randoms = [f for f in fresh if f[0] >= first_random]
        n_random = min(int(n * self.eps_greedy), len(randoms))
        chosen = picks[: n - n_random] + randoms[:n_random]
        rest = picks[n - n_random :] + randoms[n_random:]
        chosen += rest[: n - len(chosen)]
        return sorted(chosen, key=lambda f: f[0])


class Predict:
    """Features of the proposals and the shared cost model's scores for them (filled in place); the proposals
    a pruning rule rejects are dropped (the search's epsilon-greedy picks bypass the model's pruned scores).
    Returns the proposals to build; ``dropped`` counts this call's drops per rule."""

    def __init__(self, contexts: dict, featurizer, model, state: SearchState, pruner=None):
        self.contexts, self.featurizer, self.model, self.state, self.pruner = contexts, featurizer, model, state, pruner
        self.dropped: dict = {}

    def __call__(self, strategy: str, proposals: list[Proposal]) -> list[Proposal]:
        feats = self.featurizer(self.contexts[strategy], [p.candidate for p in proposals], strategy)
        preds = self.model.predict(feats)
        for p, f, s in zip(proposals, feats, preds):
            p.features, p.predicted_score = f, float(s)
        self.dropped = {}
        if self.pruner is None or not self.pruner.enabled:
            return proposals
        kept = []
        for p, rule in zip(proposals, self.pruner.check(feats, count=False)):
            if rule is None:
                kept.append(p)
            else:
                self.dropped[rule] = self.dropped.get(rule, 0) + 1
                self.state.pruned_hashes.add(p.mod_hash)
        return kept


class Build:
    """Compile the proposals in parallel; drop builds nobody keeps."""

    def __init__(self, builder: interfaces.Builder):
        self.builder = builder

    def __call__(self, proposals: list[Proposal]) -> list[interfaces.BuildResult]:
        return self.builder.build([p.deploy_mod for p in proposals])

    def discard(self, builds, keep: set) -> None:
        for b in builds:
            if b.path not in keep:
                self.builder.discard(b.path)


class Measure:
    """Time one built program under the session's noise guard; and the probe checks around a round's timing."""

    def __init__(self, guard: noise.NoiseGuard):
        self.guard = guard

    def __call__(self, build: interfaces.BuildResult, shapes: list, trial: int, run_result=None) -> Timing:
        """``run_result``: a result a batch runner already produced for this build (timed elsewhere)."""
        if build.path is None:
            return Timing([], build.error_class, build.error_msg)
        if run_result is not None:
            r, noisy = run_result, False
        else:
            r, noisy = self.guard.time(build.path, shapes, trial=trial)
        return Timing(r.run_secs, r.error_class, r.error_msg, noisy, r.reading)

    def probe_slow(self, when: str) -> bool:
        return self.guard.check_probe(when)


class Verify:
    """A would-be best must compute the workload's reference answer (under its strategy's deploy inputs)."""

    def __init__(self, runner: interfaces.Runner, workload, inputs: list, reference):
        self.runner, self.workload, self.inputs, self.reference = runner, workload, inputs, reference

    def __call__(self, strategy: str, proposal: Proposal, path: str) -> tuple[bool, str | None, str | None]:
        """(verified, error class, error message)."""
        try:
            kin = layouts.get(strategy).deploy_inputs(proposal.candidate.sch, self.workload, self.inputs)
        except Exception as e:  # one candidate whose weights cannot be rewritten; the session goes on
            return False, "verify-error", f"weights for the {strategy} layout: {type(e).__name__}: {e}".splitlines()[0]
        out, cls, msg = self.runner.compute(path, kin, proposal.shapes[-1])
        if out is None:
            return False, cls, msg
        ok, detail = measure.verify(out, self.reference, self.workload.dtype)
        return (True, None, None) if ok else (False, "wrong-result", detail)


class Confirm:
    """The winner's curse: the minimum over many noisy timings is biased low, so a verified would-be best is
    re-measured interleaved with the incumbents it must beat; the incumbents' records get their re-measured
    medians, so that ranking by latency stays fair."""

    def __init__(self, guard: noise.NoiseGuard, rounds: int, workload, store: RecordStore, state: SearchState, emit):
        self.guard, self.rounds, self.workload, self.store, self.state, self.emit = (
            guard,
            rounds,
            workload,
            store,
            state,
            emit,
        )

    def __call__(self, strategy: str, path: str, shapes: list, first_ms: float) -> Verdict:
        st = self.state
        if self.rounds <= 0:
            return Verdict(first_ms, True)
        incumbents = {}
        for rec in (st.best_by_strategy.get(strategy), st.best):
            if rec is not None and rec["id"] in st.artifacts:
                incumbents[rec["id"]] = rec
        entries = [("candidate", path, shapes)] + [(rid, *st.artifacts[rid]) for rid in incumbents]
        confirmation = self.guard.confirm(entries)
        samples = confirmation.samples
        if not samples["candidate"]:
            return Verdict(first_ms, True)
        for rid, rec in incumbents.items():
            if samples[rid]:
                self._remeasured(rid, rec["strategy"], samples[rid], rid in confirmation.noisy)
        if st.best_by_strategy:  # an incumbent re-measured slower may no longer be the fastest overall
            st.best = min(st.best_by_strategy.values(), key=lambda r: r["latency_ms"])
        c = samples["candidate"]
        return Verdict(
            float(np.median(c)) * 1e3,
            True,
            confirm_secs=c,
            confirm_spread=noise.spread(c),
            confirm_noisy="candidate" in confirmation.noisy,
        )

    def _remeasured(self, rid: int, strategy: str, secs: list, noisy: bool) -> None:
        ms = float(np.median(secs)) * 1e3
        gflops = self.workload.flops / ms / 1e6
        self.store.update_record(
            rid,
            latency_ms=ms,
            gflops=gflops,
            confirm_secs=json.dumps(secs),
            confirm_spread=noise.spread(secs),
            noisy=noisy,
        )
        for held in {id(r): r for r in self.state.incumbents() if r["id"] == rid}.values():
            held["latency_ms"], held["gflops"], held["noisy"] = ms, gflops, noisy
        self.emit(ev.BestRemeasured(record_id=rid, strategy=strategy, latency_ms=ms, gflops=gflops, samples=len(secs)))


class Record:
    """Write a measured program's row durably, then update the bests and announce it (in that order: never
    show a record that is not stored)."""

    def __init__(self, store: RecordStore, session_id: int, workload, seed: int, state: SearchState, builder, emit):
        self.store, self.session_id, self.workload, self.seed = store, session_id, workload, seed
        self.state, self.builder, self.emit = state, builder, emit

    def is_strategy_best(self, strategy: str, latency_ms: float | None) -> bool:
        b = self.state.best_by_strategy.get(strategy)
        return latency_ms is not None and (b is None or latency_ms < b["latency_ms"])

    def __call__(
        self,
        p: Proposal,
        strategy: str,
        chosen_by: str,
        timing: Timing,
        verdict: Verdict,
        *,
        trial: int,
        round: int,
        proposed_at: float,
        elapsed_s: float,
        path: str | None,
        keep_artifact: bool,
        build_s: float | None = None,
    ) -> dict:
        w, st = self.workload, self.state
        err_cls = verdict.error_class or timing.error_class
        err_msg = verdict.error_msg if verdict.error_class else timing.error_msg
        lat = verdict.latency_ms  # a wrong result keeps its timing (shown, never a best)
        strategy_best = verdict.verified and err_cls is None and self.is_strategy_best(strategy, lat)
        is_best = strategy_best and (st.best is None or lat < st.best["latency_ms"])
        rec = {
            "session_id": self.session_id,
            "workload": w.name,
            "trial": trial,
            "round": round,
            "strategy": strategy,
            "chosen_by": chosen_by,
            "trace": space.trace_json(p.candidate.sch),
            "decisions": space.decisions_json(p.candidate.sch.trace),
            "mod_hash": p.mod_hash,
            "predicted_score": p.predicted_score,
            "run_secs": timing.run_secs,
            "latency_ms": lat,
            "gflops": None if lat is None else w.flops / lat / 1e6,
            "error_class": err_cls,
            "error_msg": err_msg,
            "verified": verdict.verified and err_cls is None,
            "is_best": is_best,
            "seed": self.seed,
            "proposed_at": proposed_at,
            "measured_at": time.time(),
            "elapsed_s": elapsed_s,
            # the latency's own samples decide: a confirmed latency is the median of the confirmation's timings
            "noisy": verdict.confirm_noisy if verdict.confirm_secs is not None else timing.noisy,
            "noise": timing.reading,
            "cv": noise.cv(timing.run_secs) if err_cls is None else None,
            "confirm_secs": verdict.confirm_secs,
            "confirm_spread": verdict.confirm_spread,
            "build_s": build_s,
        }
        rec["id"] = self.store.add_record(rec, p.features)  # durable before anyone hears of it
        st.measured_hashes.add(p.mod_hash)
        if strategy_best:
            st.best_by_strategy[strategy] = rec
        if is_best:
            st.best = rec
        if strategy_best and keep_artifact:
            self._keep_artifact(rec, path, p.shapes)
        public = {k: v for k, v in rec.items() if k != "trace"}
        self.emit(ev.CandidateMeasured(record=public, new_best=is_best, strategy_best=strategy_best))
        if is_best:
            self.emit(
                ev.NewBest(
                    record_id=rec["id"],
                    trial=trial,
                    strategy=strategy,
                    latency_ms=lat,
                    gflops=rec["gflops"],
                    verified=True,
                )
            )
        return rec

    def _keep_artifact(self, rec: dict, path: str, shapes: list) -> None:
        """Keep an incumbent's build for later re-measurement; drop builds no longer an incumbent."""
        st = self.state
        st.artifacts[rec["id"]] = (path, shapes)
        live = {r["id"] for r in st.incumbents()}
        for rid in [r for r in st.artifacts if r not in live]:
            old_path, _ = st.artifacts.pop(rid)
            if old_path != path:
                self.builder.discard(old_path)


class Learn:
    """Feed what a round measured back: each valid program into its strategy's search database and the
    cross-seeding pool, every row (errors as failures) into the cost model; after the round, the search's
    own bookkeeping, a retrained model and the controller's view of the arm."""

    def __init__(self, model, controller, search_dbs: dict, contexts: dict, target, state: SearchState):
        self.model, self.controller, self.search_dbs, self.contexts = model, controller, search_dbs, contexts
        self.target, self.state = target, state

    def record(self, strategy: str, p: Proposal, rec: dict) -> None:
        from tvm.s_tir import meta_schedule as ms

        ok = rec["error_class"] is None
        self.model.add(p.features, rec["latency_ms"] if ok else None, rec["workload"])
        if ok:
            db, wl = self.search_dbs[strategy]
            db.commit_tuning_record(
                ms.database.TuningRecord(p.candidate.sch.trace, wl, rec["run_secs"], self.target, p.candidate.args_info)
            )
            self.state.seed_pool.append(
                (float(np.mean(rec["run_secs"])), strategy, p.candidate.sch.trace, rec["run_secs"])
            )

    def round(self, strategy: str, measured: list[tuple[Proposal, dict]]) -> bool:
        """The search's bookkeeping for the round's measured programs, then retraining; True if it trained."""
        from tvm.s_tir import meta_schedule as ms

        if measured:
            results = [
                ms.runner.RunnerResult(
                    r["run_secs"] if r["error_class"] is None else None,
                    None if r["error_class"] is None else (r["error_msg"] or r["error_class"]),
                )
                for _, r in measured
            ]
            self.contexts[strategy].notify_runner_results([p.candidate for p, _ in measured], results)
        return self.model.train()

    def observe(
        self,
        strategy: str,
        round_best_ms: float | None,
        best_before_ms: float | None,
        n: int,
        proposals: list[Proposal],
    ) -> list[str]:
        """The controller's view of the arm after its round; returns the strategies it pruned."""
        preds = [p.predicted_score for p in proposals if p.predicted_score is not None]
        top = sorted(preds, reverse=True)[: max(1, len(preds) // 4)]
        return self.controller.observe(
            strategy,
            round_best_ms,
            best_before_ms,
            n,
            # only a calibrated model's scores estimate relative throughput, comparable as a mean across arms
            predicted_mean=float(np.mean(top)) if top and self.model.calibrated else None,
            model_trained=self.model.trained,
            held_bests={s: r["latency_ms"] for s, r in self.state.best_by_strategy.items()},
        )
