"""Running one tuner on one workload in a fresh process: the workbench CLI or MetaSchedule's ``tune_tir``.

Shared by ``measure_throughput.py`` and ``performance.py``. Every run gets the
same target dict (``mcpu`` and ``num-cores`` included), the same trial budget
and batch size, and ``TVM_NUM_THREADS``, ``OMP_NUM_THREADS`` and
``OPENBLAS_NUM_THREADS`` = the target's core count; the caller runs the quiet
check of the benchmark protocol (``_quiet.py``) before each run. Each run
returns its counts, its best latency, its wall time (process start included)
and a timeline: one ``(seconds since the process was launched, latency_ms or
None)`` per measured candidate, so that time-to-quality can be read off it.

MetaSchedule runs in one of two configurations (``fast``):

* stock: ``LocalBuilder`` with its default build function (fresh workers per
  batch, each importing every tensor intrinsic) and a long ``build_timeout`` so
  that builds do not fail (the stock 30 s times out on a 2-core machine and
  the failure is silently recorded as 1e10 s);
* fastbuild: the same builder given a build function that skips the
  tensor-intrinsics import.

Its best program's trace is written to ``<work_dir>/best_trace.json`` for the
re-measurement step; the workbench's is in its records store.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MS_SCRIPT = textwrap.dedent("""
    import json, logging, sys, time
    t0 = time.time()
    import tvm
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms
    from workbench.workloads import registry
    cfg = json.loads(sys.argv[1])
    w = registry().get(cfg["workload"])
    target = tvm.target.Target(cfg["target"])

    def fast_build(mod, target, _params):
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
        mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
        return tvm.tirx.build(mod, target=target)

    timeline, errors = [], {"build": 0, "run": 0}

    @derived_object
    class Timeline(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            now = time.time() - cfg["launched_at"]
            for b, r in zip(builder_results, runner_results):
                errors["build"] += b.error_msg is not None
                errors["run"] += b.error_msg is None and r.error_msg is not None
                secs = [float(x) for x in r.run_secs] if r.run_secs is not None else []
                ok = b.error_msg is None and r.error_msg is None and secs and min(secs) < 1e9
                timeline.append([now, sorted(secs)[len(secs) // 2] * 1e3 if ok else None])

    builder = ms.builder.LocalBuilder(timeout_sec=cfg["build_timeout"],
                                      f_build=fast_build if cfg["fast"] else None)
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    t1 = time.time()
    db = ms.tune_tir(mod=w.mod, target=target, work_dir=cfg["work_dir"], max_trials_global=cfg["trials"],
                     num_trials_per_iter=cfg["per_round"], builder=builder, seed=cfg["seed"],
                     measure_callbacks=ms.MeasureCallback.create("default") + [Timeline()])
    t2 = time.time()
    recs = db.get_all_tuning_records()
    secs = [[float(x) for x in r.run_secs] if r.run_secs is not None else [1e10] for r in recs]
    ok = [(sorted(s)[len(s) // 2], r) for s, r in zip(secs, recs) if min(s) < 1e9]
    best = min(ok, key=lambda x: x[0]) if ok else None
    if best is not None:
        with open(cfg["work_dir"] + "/best_trace.json", "w") as f:
            f.write(tvm.ir.save_json(best[1].trace.as_json()))
    print(json.dumps({"measured": len(recs), "ok": len(ok), "failed": len(recs) - len(ok),
                      "build_errors": errors["build"], "run_errors": errors["run"],
                      "best_latency_ms": None if best is None else best[0] * 1e3, "timeline": timeline,
                      "tuning_seconds": t2 - t1, "process_seconds": t2 - t0}))
""")


def _env(target: dict) -> dict:
    """Every thread pool of the tuner's process (and of the workers it starts, which inherit it) sized to the
    target's core count: ``TVM_NUM_THREADS``, ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` (``_quiet.py``)."""
    from _quiet import thread_env

    return thread_env(int(target["num-cores"]))


def _last_json(p: subprocess.CompletedProcess, who: str) -> dict:
    if p.returncode != 0:
        raise RuntimeError(f"{who} failed (rc {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_ms(
    workload: str,
    target: dict,
    trials: int,
    per_round: int,
    fast: bool,
    build_timeout: float,
    work_dir: str,
    seed: int = 0,
) -> dict:
    """MetaSchedule ``tune_tir`` in a fresh process; its JSON database stays in ``work_dir``, which starts empty:
    tune_tir resumes from a database it finds there, and a second benchmark run would otherwise hand
    MetaSchedule the first run's measurements as a warm start."""
    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(work_dir, exist_ok=True)
    t = time.time()
    cfg = {
        "workload": workload,
        "target": target,
        "trials": trials,
        "per_round": per_round,
        "fast": fast,
        "build_timeout": build_timeout,
        "work_dir": work_dir,
        "seed": seed,
        "launched_at": t,
    }
    p = subprocess.run(
        [sys.executable, "-c", MS_SCRIPT, json.dumps(cfg)], capture_output=True, text=True, env=_env(target), cwd=ROOT
    )
    out = _last_json(p, f"MetaSchedule on {workload}")
    out["wall_seconds"] = time.time() - t
    out["best_trace"] = os.path.join(work_dir, "best_trace.json") if out["best_latency_ms"] is not None else None
    return out


def workbench_timeline(db: str, launched_at: float) -> list:
    """(seconds since launch, latency_ms or None) per measured candidate, in measurement order."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT measured_at, latency_ms, error_class FROM records ORDER BY id").fetchall()
    finally:
        con.close()
    return [[m - launched_at, lat if err is None else None] for m, lat, err in rows]


def workbench_noise_waits(db: str) -> float:
    """Seconds the session spent waiting for a quiet machine (its ``measurement_noise`` waits), part of its wall."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT data FROM events WHERE kind = 'measurement_noise'").fetchall()
    finally:
        con.close()
    return sum(float(json.loads(d).get("waited_s") or 0.0) for (d,) in rows)


def run_workbench(
    workload: str,
    target: dict,
    trials: int,
    per_round: int,
    db: str,
    seed: int = 0,
    strategy: str = "pre-transformed",
    preset: str = "quick",
) -> dict:
    """``workbench tune`` in a fresh process; its records store is ``db``, removed first with its WAL files."""
    from workbench.store import remove_store

    remove_store(db)
    t = time.time()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "workbench.cli",
            "tune",
            workload,
            "--trials",
            str(trials),
            "--target",
            json.dumps(target),
            "--db",
            db,
            "--strategy",
            strategy,
            "--preset",
            preset,
            "--seed",
            str(seed),
            "--trials-per-round",
            str(per_round),
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=_env(target),
        cwd=ROOT,
    )
    wall = time.time() - t
    s = _last_json(p, f"workbench on {workload}")
    return {
        "measured": s["trials"],
        "ok": s["trials"] - s["errors"],
        "failed": s["errors"],
        "best_latency_ms": s["best_latency_ms"],
        "tuning_seconds": s["tuning_seconds"],
        "wall_seconds": wall,
        "naive_latency_ms": s["naive_latency_ms"],
        "verified": s["verified"],
        "db": db,
        "timeline": workbench_timeline(db, t),
        "noise_waited_s": workbench_noise_waits(db),
    }
