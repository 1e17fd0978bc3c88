"""Round trips with MetaSchedule's own ``JSONDatabase`` directory format.

Export writes every successfully measured record so that TVM itself can use
them (``ms.database.JSONDatabase(work_dir=DIR)`` then ``compile_tir``).
Pre-transformed records keep RewriteLayout's (annotated) weight-copy block in
their trace, as MetaSchedule's own records do: ``compile_tir`` then builds the
program with the copy inside, and ``RemoveWeightLayoutRewriteBlock`` plus the
trace's IndexMap give the kernel-only form.
Import reads records for one workload back; their layout strategy is the one whose
postprocessors reproduce the trace's program (``strategy_of_trace``), and they are
marked unverified until re-measured here.
"""

from __future__ import annotations

import json
import os
import time

from . import layouts, space, tvm_env
from .errors import WorkbenchError
from .store import RecordStore, program_hash
from .workloads import workload_from_spec


def export_store(db: str, work_dir: str) -> dict:
    """Every successful record of every session whose workload its spec rebuilds; ``{"records", "workloads",
    "skipped"}``, ``skipped`` the sessions it does not (a ``workbench model`` task: its PrimFunc comes from the
    model, not from the spec), as ``(session id, workload, why)``."""
    from tvm.s_tir import meta_schedule as ms

    tvm_env.setup()
    store = RecordStore(db, readonly=True)
    if os.path.exists(work_dir) and not os.path.isdir(work_dir):
        raise WorkbenchError(f"{work_dir!r} exists and is not a directory")
    os.makedirs(work_dir, exist_ok=True)
    msdb = ms.database.JSONDatabase(work_dir=work_dir)
    n_rec, wls, skipped = 0, set(), []
    for sess in store.sessions():
        try:
            w = workload_from_spec(sess["spec"])
        except WorkbenchError as e:
            skipped.append((sess["id"], sess["workload"], str(e)))
            continue
        target = tvm_env.make_target(sess["target"])
        wl = msdb.commit_workload(w.mod)
        for r in store.traces(sess["id"]):
            if r["error_class"] is not None or r["latency_ms"] is None:
                continue
            sch = space.schedule_from_trace_json(w, r["trace"])
            args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
            msdb.commit_tuning_record(
                ms.database.TuningRecord(sch.trace, wl, [float(x) for x in json.loads(r["run_secs"])], target, args)
            )
            n_rec += 1
            wls.add(w.name)
    return {"records": n_rec, "workloads": len(wls), "skipped": skipped}


def strategy_of_trace(workload, trace, contexts: dict) -> str | None:
    """The layout strategy whose postprocessors made ``trace``'s program: the trace's decisions replayed without
    its postprocessing, then each registered strategy's postprocessors (``contexts``: strategy name -> a
    TuneContext of it) applied, and the resulting trace compared with the given one, both after a round trip
    through the JSON form MetaSchedule stores traces in (the round trip turns a layout rewrite's boolean
    annotation into an integer and rewrites its index map, so only traces that took the same path compare
    equal; their programs' structural hashes differ even then, so the traces are compared as text). Nothing here names a strategy, so a new one in
    ``layouts.STRATEGIES`` is recognised on import too. None when no strategy reproduces the program (a record
    made by other postprocessors); the first in registry order when several do (a workload without layout-free
    weights, where they all make the same program)."""
    from tvm.s_tir.schedule import Schedule, Trace

    def via_json(t) -> str:
        sch = Schedule(workload.mod)
        Trace.apply_json_to_schedule(t.as_json(remove_postproc=False), sch)
        return str(sch.trace)

    want = via_json(trace)
    for name, ctx in contexts.items():
        sch = space.replay_under(workload, trace, ctx)  # None: its postprocessors reject it, not its maker
        if sch is not None and via_json(sch.trace) == want:
            return name
    return None


def import_dir(work_dir: str, db: str, workload) -> int:
    from tvm.s_tir import meta_schedule as ms

    tvm_env.setup()
    for f in ("database_workload.json", "database_tuning_record.json"):
        if not os.path.isfile(os.path.join(work_dir, f)):
            raise WorkbenchError(f"{work_dir!r} is not a MetaSchedule database directory (missing {f})")
    try:
        msdb = ms.database.JSONDatabase(work_dir=work_dir, allow_missing=False)
    except Exception as e:  # TVM raises plain errors on malformed files
        raise WorkbenchError(f"cannot read MetaSchedule database {work_dir!r}: {str(e).splitlines()[-1]}") from None
    if not msdb.has_workload(workload.mod):
        raise WorkbenchError(
            f"{work_dir!r} has no records for workload {workload.name!r} (no structurally equal module)"
        )
    records = msdb.get_top_k(msdb.commit_workload(workload.mod), 1 << 30)
    store = RecordStore(db)
    target = records[0].target if records and records[0].target is not None else None
    target_dict = tvm_env.host_target_dict()
    if target is not None:
        attrs = target.attrs
        target_dict = {
            "kind": target.kind.name,
            "mcpu": str(attrs["mcpu"]) if "mcpu" in attrs else target_dict["mcpu"],
            "num-cores": int(attrs["num-cores"]) if "num-cores" in attrs else target_dict["num-cores"],
        }
        if "mattr" in attrs and len(attrs["mattr"]):
            target_dict["mattr"] = [str(a) for a in attrs["mattr"]]
    from tvm.s_tir.schedule import Schedule

    from .presets import get as get_preset

    target_obj = tvm_env.make_target(target_dict)
    contexts = {
        name: space.tune_context(workload, target_obj, name, get_preset("quick"), seed=0, search=False)
        for name in layouts.STRATEGIES
    }
    # every record is read and recognised before anything is written: a bad one leaves the store as it was
    rows = []
    for i, rec in enumerate(records, 1):
        sch = Schedule(workload.mod)
        rec.trace.apply_to_schedule(sch, remove_postproc=False)
        strategy = strategy_of_trace(workload, rec.trace, contexts)
        if strategy is None:
            raise WorkbenchError(
                f"record {i} of {work_dir!r} was not made by any of the workbench's layout strategies "
                f"({', '.join(layouts.STRATEGIES)}): its program is not what their postprocessors "
                "make of its decisions; nothing was imported"
            )
        secs = [float(x) for x in rec.run_secs] if rec.run_secs is not None else []
        rows.append((i, sch, strategy, secs))
    sid = store.create_session(
        workload=workload.name,
        spec=workload.spec(),
        target=target_dict,
        preset="imported",
        preset_params={},
        seed=0,
        trials=len(records),
        strategies=sorted(layouts.STRATEGIES),
        strategy_arg="imported",
        versions=tvm_env.library_versions(),
    )
    now = time.time()
    for i, sch, strategy, secs in rows:
        lat = sorted(secs)[len(secs) // 2] if secs and min(secs) < 1e9 else None
        store.add_record(
            {
                "session_id": sid,
                "workload": workload.name,
                "trial": i,
                "round": 0,
                "strategy": strategy,
                "chosen_by": "imported",
                "trace": space.trace_json(sch),
                "decisions": space.decisions_json(sch.trace),
                "mod_hash": program_hash(sch.mod),
                "predicted_score": None,
                "run_secs": secs,
                "latency_ms": None if lat is None else lat * 1e3,
                "gflops": None if lat is None else workload.flops / lat / 1e9,
                "error_class": None if lat is not None else "imported-failure",
                "error_msg": None,
                "verified": False,
                "is_best": False,
                "seed": 0,
                "proposed_at": now,
                "measured_at": now,
                "elapsed_s": 0.0,
            },
            None,
        )
    store.update_session(sid, status="imported")
    return len(records)
