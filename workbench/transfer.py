"""Transfer-tuning: reuse schedules tuned for some workloads on new ones of the same class.

As in Gibson & Cano (PACT'22): for every target workload, every source
schedule of the same *class* (same anchor op, data layout and epilogue, so the
trace finds the same blocks) is replayed onto the target, built, measured; the
fastest one that computes the right answer is kept, and the untuned (naive)
program is the fallback when none applies. There is no search, so the cost is
one build and one measurement per candidate.

Shapes usually differ, so tile-size decisions may no longer divide the new loop
extents. They are repaired level by level, innermost first: each factor
becomes the divisor of the remaining extent nearest to it in log space
(innermost at most 64), and the outermost level takes what is left. TVM's own
fallback would collapse every inner level to the full extent at the first
mismatch.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field

from . import layouts, measure, space, tvm_env
from .errors import WorkbenchError
from .store import RecordStore, program_hash
from .workloads import Workload, workload_from_spec

MAX_INNERMOST = 64


def _divisors(n: int) -> list[int]:
    out = set()
    for d in range(1, int(math.isqrt(n)) + 1):
        if n % d == 0:
            out.update((d, n // d))
    return sorted(out)


def repair_tiles(extent: int, factors: list[int], max_innermost: int = MAX_INNERMOST) -> list[int]:
    """Factors whose product is ``extent``, each inner one nearest (log space) to the old one."""
    if math.prod(factors) == extent and factors[-1] <= max_innermost:
        return list(factors)
    rest = extent
    new = []
    for i, f in enumerate(reversed(factors[1:])):
        cands = [d for d in _divisors(rest) if i > 0 or d <= max_innermost]
        d = min(cands, key=lambda d: (abs(math.log(d) - math.log(max(f, 1))), d))
        new.append(d)
        rest //= d
    new.append(rest)
    return list(reversed(new))


@dataclass
class SourceSchedule:
    workload: Workload
    strategy: str
    trace_json: str
    latency_ms: float
    record_id: int


@dataclass
class TransferResult:
    workload: str
    candidates: int
    valid: int
    best_latency_ms: float | None
    naive_latency_ms: float
    verified: bool
    search_seconds: float
    source: str | None  # the source workload whose schedule won (None: untuned fallback)
    source_strategy: str | None
    exact_match: bool  # the winning source has the same shape as the target
    repaired: bool  # some tile decision had to be repaired
    speedup: float
    per_candidate: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def source_bank(db: str) -> list[SourceSchedule]:
    """The best verified schedule of every (workload, strategy) in a store (Transfer-tuning's 'distilled' logs).
    A workload is its spec, not its name: two specs of one name (another shape) are two sources, each with the
    records of its own sessions."""
    store = RecordStore(db, readonly=True)
    best: dict = {}  # (spec as JSON, strategy) -> (workload, its best record)
    for sess in store.sessions():
        try:
            w = workload_from_spec(sess["spec"])
        except WorkbenchError:  # e.g. a Relax-extracted task (relax_model.RelaxTask): no generator to replay onto
            continue
        spec = json.dumps(sess["spec"], sort_keys=True)
        for strategy in sess["strategies"]:
            b = store.best(w.name, strategy, session_id=sess["id"])
            key = (spec, strategy)
            if b is not None and (key not in best or b["latency_ms"] < best[key][1]["latency_ms"]):
                best[key] = (w, b)
    bank = [SourceSchedule(w, s, b["trace"], b["latency_ms"], b["id"]) for (_spec, s), (w, b) in best.items()]
    if not bank:
        raise WorkbenchError(f"{db!r} holds no verified schedule to transfer")
    return bank


def replay_onto(target: Workload, src: SourceSchedule, tvm_target):
    """The source trace on the target workload, tile decisions repaired; (schedule, repaired) or (None, why)."""
    from tvm.s_tir.schedule import Schedule

    try:
        full = space.schedule_from_trace_json(src.workload, src.trace_json).trace
    except WorkbenchError as e:  # a stored trace that does not rebuild here: this source is skipped, not the target
        return None, f"source trace unreadable: {str(e)[:200]}"
    sch = Schedule(target.mod)
    repaired = [False]

    def provider(inst, inputs, attrs, decision):
        if inst.kind.name == "SamplePerfectTile" and decision is not None:
            extent = int(sch.get(inputs[0]).extent)
            old = [int(x) for x in decision]
            new = repair_tiles(extent, old, int(attrs[1]) if len(attrs) > 1 else MAX_INNERMOST)
            if new != old:
                repaired[0] = True
            return new if new != old else decision
        return decision

    try:
        full.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
    except Exception as e:  # the trace does not fit the target's blocks
        return None, f"replay failed: {str(e).strip().splitlines()[-1][:200]}"
    ctx = space.tune_context(target, tvm_target, src.strategy, _preset(), seed=1, search=False)
    sch.enter_postproc()
    for p in ctx.space_generator.postprocs:
        if not p.apply(sch):
            return None, f"postprocessor {type(p).__name__} rejected it"
    return sch, repaired[0]


def _preset():
    from . import presets

    return presets.get("quick")


def transfer(
    source_db: str, targets: list[Workload], target="host", db: str | None = None, on_candidate=None
) -> list[TransferResult]:
    """Apply every same-class source schedule to each target; keep the fastest verified one."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    tvm_env.setup()
    bank = source_bank(source_db)
    target_dict = tvm_env.parse_target(target)
    tvm_target = tvm_env.make_target(target_dict)
    p = _preset()
    builder = measure.make_builder(target_dict, p)
    runner = measure.make_runner(None, target_dict, p)
    out_store = RecordStore(db) if db else None
    strip = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)
    results = []
    try:
        for w in targets:
            t0 = time.time()
            inputs = w.make_inputs(seed=1234)
            naive_ms, reference = measure.naive_and_reference(w, builder, runner, inputs)
            same = [s for s in bank if s.workload.class_key == w.class_key]
            cands, notes = [], []
            for s in same:
                sch, info = replay_onto(w, s, tvm_target)
                if sch is None:
                    notes.append({"source": s.workload.name, "strategy": s.strategy, "error": info})
                else:
                    cands.append((s, sch, info))
            builds = builder.build([strip(sch.mod) for _, sch, _ in cands])
            sid = None
            if out_store is not None:
                sid = out_store.create_session(
                    workload=w.name,
                    spec=w.spec(),
                    target=target_dict,
                    preset="transfer",
                    preset_params={"source_db": source_db},
                    seed=0,
                    trials=len(cands),
                    strategies=sorted({s.strategy for s, _, _ in cands}) or ["no-rewrite"],
                    strategy_arg="transfer",
                    versions=tvm_env.library_versions(),
                )
                out_store.update_session(sid, naive_latency_ms=naive_ms)
            best = None
            try:
                for i, ((s, sch, rep), b) in enumerate(zip(cands, builds), 1):
                    shapes = [
                        tuple(int(x) for x in a.shape)
                        for a in ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
                    ]
                    err, msg, lat, ok, run_secs = b.error_class, b.error_msg, None, False, []
                    if b.path:
                        r = runner.run(b.path, shapes)
                        err, msg, lat, run_secs = r.error_class, r.error_msg, r.latency_ms, list(r.run_secs)
                    if lat is not None and (best is None or lat < best[0]):
                        kin = layouts.get(s.strategy).deploy_inputs(sch, w, inputs)
                        got, verr, vmsg = runner.compute(b.path, kin, shapes[-1])
                        ok, detail = (False, vmsg) if got is None else measure.verify(got, reference, w.dtype)
                        if ok:
                            best = (lat, s, rep)
                        else:
                            err, msg = verr or "wrong-result", detail
                    row = {
                        "source": s.workload.name,
                        "strategy": s.strategy,
                        "repaired": rep,
                        "latency_ms": lat,
                        "error_class": err,
                    }
                    notes.append(row)
                    if out_store is not None:
                        out_store.add_record(
                            {
                                "session_id": sid,
                                "workload": w.name,
                                "trial": i,
                                "round": 0,
                                "strategy": s.strategy,
                                "chosen_by": "transfer",
                                "trace": space.trace_json(sch),
                                "decisions": space.decisions_json(sch.trace),
                                "mod_hash": program_hash(sch.mod),
                                "predicted_score": None,
                                "run_secs": run_secs,
                                "latency_ms": None if lat is None or err else lat,
                                "gflops": None if lat is None or err else w.flops / lat / 1e6,
                                "error_class": err,
                                "error_msg": msg,
                                "verified": ok,
                                "is_best": False,
                                "seed": 0,
                                "proposed_at": t0,
                                "measured_at": time.time(),
                                "elapsed_s": time.time() - t0,
                            },
                            None,
                        )
                    if on_candidate:
                        on_candidate(w, row)
            finally:
                for b in builds:
                    builder.discard(b.path)
            if out_store is not None:
                out_store.update_session(sid, status="finished")
            lat = best[0] if best else None
            results.append(
                TransferResult(
                    workload=w.name,
                    candidates=len(same),
                    valid=len(cands),
                    best_latency_ms=lat,
                    naive_latency_ms=naive_ms,
                    verified=best is not None,
                    search_seconds=round(time.time() - t0, 2),
                    source=best[1].workload.name if best else None,
                    source_strategy=best[1].strategy if best else None,
                    exact_match=bool(best and best[1].workload.params == w.params),
                    repaired=bool(best and best[2]),
                    speedup=naive_ms / lat if lat else 1.0,
                    per_candidate=notes,
                )
            )
    finally:
        builder.close()
        runner.close()
    return results
