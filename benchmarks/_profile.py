"""Where a workbench session's time goes: exclusive wall time per phase of one in-process ``TuningSession``.

The session itself is not changed: the phase functions are wrapped with timers
for the duration of the run. Phases (exclusive: a phase's time excludes the
phases it calls, e.g. the search's calls into the cost model count as
feature extraction and model prediction):

* search: TVM's evolutionary search (sampling, mutation, postprocessors);
* features: per-store feature extraction (for the search's cost-model queries and for the measured batch);
* predict / train: the XGBoost cost model;
* build: compiling the batch (in parallel worker processes; the session waits);
* run: timing kernels; verify: computing a would-be best's output and checking it;
* store: writing records; other: the rest of the session (set-up, the naive baseline, events, bookkeeping).

    python benchmarks/_profile.py resnet18.conv2 --trials 64 [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHANGE = (
    "The change (`workbench/cost_model.py`, `Featurizer(reuse=...)`, preset field `feature_reuse`): a program's per-store features are computed once "
    "per session and looked up by structural hash afterwards (the evolutionary search re-scores the survivors "
    "of every generation and the measured elites of every round, and the session featurized the batch the "
    "search had just scored), and the search extracts no features while the model is untrained (its scores "
    "are then random). Given the same data the scores are unchanged (tested); the two sessions still diverge "
    "after their first round, because measured latencies, the model's training labels, differ from run to "
    "run, so their best kernels differ by chance. 'before' is the same session with the switch off."
)

PHASES = ("search", "features", "predict", "train", "build", "run", "verify", "store")


class PhaseTimer:
    """Exclusive time per phase; nested phases are subtracted from their caller (per thread)."""

    def __init__(self):
        self.totals = dict.fromkeys(PHASES, 0.0)
        self.calls = dict.fromkeys(PHASES, 0)
        self._local = threading.local()
        self._lock = threading.Lock()

    def wrap(self, phase, fn):
        timer = self

        def wrapped(*a, **kw):
            stack = timer._local.__dict__.setdefault("stack", [])
            stack.append(0.0)  # time spent in nested phases
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                dt = time.perf_counter() - t0
                nested = stack.pop()
                if stack:
                    stack[-1] += dt
                with timer._lock:
                    timer.totals[phase] += dt - nested
                    timer.calls[phase] += 1

        return wrapped

    @contextlib.contextmanager
    def patched(self):
        from tvm.s_tir import meta_schedule as ms

        from workbench import cost_model, measure, store

        targets = [
            (ms.TuneContext, "generate_measure_candidates", "search"),
            (cost_model.Featurizer, "__call__", "features"),
            (cost_model.PackSumXGB, "predict", "predict"),
            (cost_model.PackSumXGB, "train", "train"),
            (measure.Builder, "build", "build"),
            (measure.Runner, "run", "run"),
            (measure.Runner, "compute", "verify"),
            (store.RecordStore, "add_record", "store"),
        ]
        saved = [(cls, name, cls.__dict__[name]) for cls, name, _ in targets]
        try:
            for cls, name, phase in targets:
                setattr(cls, name, self.wrap(phase, cls.__dict__[name]))
            yield self
        finally:
            for cls, name, fn in saved:
                setattr(cls, name, fn)


def profile_session(
    workload: str,
    trials: int,
    target: dict,
    db: str,
    seed: int = 0,
    strategy: str = "pre-transformed",
    improved: bool = True,
    **preset_overrides,
) -> dict:
    from workbench import TuningSession

    if os.path.exists(db):
        os.remove(db)
    timer = PhaseTimer()
    with timer.patched():
        t0 = time.perf_counter()
        s = TuningSession(
            workload,
            target=target,
            trials=trials,
            preset="quick",
            seed=seed,
            db=db,
            strategy=strategy,
            feature_reuse=improved,
            **preset_overrides,
        )
        summ = s.run()
        wall = time.perf_counter() - t0
    phases = {k: round(v, 3) for k, v in timer.totals.items()}
    phases["other"] = round(wall - sum(timer.totals.values()), 3)
    return {
        "workload": workload,
        "trials": trials,
        "wall_seconds": round(wall, 2),
        "phases": phases,
        "calls": timer.calls,
        "best_latency_ms": summ["best_latency_ms"],
        "errors": summ["errors"],
        "preset_overrides": preset_overrides,
        "feature_reuse": improved,
        "feature_cache": {"hits": s.featurizer.hits, "misses": s.featurizer.misses},
    }


def main():
    from workbench import tvm_env

    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--db", default="benchmarks/out/profile.db")
    ap.add_argument("--target", help="JSON target dict (default: this host)")
    ap.add_argument("--improved", type=int, choices=(0, 1), default=1, help="0: the change below switched off")
    ap.add_argument("--json")
    args = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.db)), exist_ok=True)
    target = json.loads(args.target) if args.target else tvm_env.host_target_dict()
    r = profile_session(args.workload, args.trials, target, args.db, improved=bool(args.improved))
    print(json.dumps(r, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
