"""AL-Ansor reproduction: the adaptive layout controller vs each fixed strategy at equal trials.

For each conv layer, every method gets the same trial budget and seed: Ansor
with one fixed weight-layout strategy (no-rewrite = NO_REWRITE, transform-stage
= INSERT_TRANSFORM_STAGE, pre-transformed = REWRITE_FOR_PRE_TRANSFORMED), and
the adaptive controller choosing among those three (plus, with --with-packed,
the blocked layout) with one shared cost model. Variants of the adaptive method
(``VARIANTS``: the previous arm policy, and the ablations "no strategy one-hot",
"lambda = 0", "uniform arm mix") are methods too, chosen with ``--methods``.

Layer sets, fixed up front: ``design`` (the quick preset's six ResNet-18
layers, where the method is developed), ``design-nchw`` (ResNet-18's stride-1
3x3 convs in NCHW: a design set where the fixed strategies stay below the
roof) and ``evaluation`` (conv layers of
other networks, both layouts, several shapes, ``EVAL_LAYERS``), reported once
per method version. Each session's best program at each checkpoint (128 and
the full budget) is rebuilt from its stored trace and re-measured, all methods
of a layer set interleaved in shuffled order, ``--repeats`` times; the median
is its latency. Then the standalone self-check: each layer's fastest program in
``--db`` timed again alone by ``workbench best DB LAYER --time`` against its
re-measured median (within 5 %; the page names the layers it could not check,
e.g. runs kept only in the ledger). Latency is the *deployment* latency of the strategy:
transform-stage pays its weight copy on every call, the others transform
weights once, offline. Improvements are reported per (layer, seed) pair with
their mean and 95 % interval (t distribution over the pairs) and geomean.

The run follows the benchmark protocol (``_quiet.py``): a quiet check before every
tuning session and before the re-measurement, the first of them starting the run
(status 3 and one line when the machine is busy; ``--force`` marks the result
invalid), the calibration probe before and after, every thread pool sized to
``--threads``; a run with nothing left to tune checks nothing.
Runs are resumable: ``--resume`` keeps every finished session in ``--db`` and
extends shorter ones to ``--trials`` (so a 128-trial run grows into the 256 one).
Every finished session is also written to the ledger (``--ledger``, default
docs/results/al_ansor_sessions/<set>/, one small JSON file per run, committed with
the code): its summary, the commit that tuned it and its best program at each
checkpoint as a trace. ``--resume`` keeps the ledger's runs too and
``--report-only`` re-measures them from their traces, so a run of many hours can
go on over several machines, whose stores do not outlive them - machines of one
kind: a ledger holding runs tuned for another target (CPU or thread count) is
refused with one line, so give each kind its own ``--ledger``.

    python benchmarks/al_ansor.py --set design --seeds 3 --resume
    python benchmarks/al_ansor.py --set evaluation --seeds 3 --trials 256 --resume
    python benchmarks/al_ansor.py --set design --methods adaptive-uniform,adaptive-lam0 --resume
    python benchmarks/al_ansor.py --set evaluation --layers vgg16.conv5_1 --tune-only --resume  # one at a time
    python benchmarks/al_ansor.py --set design --export-only  # a store tuned before the ledger, into it

writes docs/results/al_ansor_<set>.json and _curves.html, and docs/results/al_ansor.md
from every set's JSON.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import math
import os
import random
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(ROOT, "docs", "results")
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import _quiet  # noqa: E402
import _report  # noqa: E402

DESIGN_LAYERS = [
    "resnet18.conv1",
    "resnet18.conv2",
    "resnet18.conv5",
    "resnet18.conv8",
    "resnet18.conv11",
    "resnet18.conv7",
]
# Outside ResNet-18, both layouts, 1x1 / 3x3 / 5x5, strided or not (sample_workloads/al_ansor_eval.json and the
# ResNet-50 / MobileNet-V2 files).
EVAL_LAYERS = [
    "vgg16.conv5_1",
    "alexnet.conv3",
    "resnet50.conv16_nchw",
    "inception_v3.mixed5b_5x5",
    "resnet50.conv13",
    "resnet50.conv6",
    "mobilenet_v2.pw96_576_14",
]
# ResNet-18's stride-1 3x3 convs in NCHW (sample_workloads/al_ansor_design_nchw.json): where the fixed strategies
# stay below the machine's roof, so that a method has something to win while it is developed.
DESIGN_NCHW_LAYERS = [
    "resnet18.conv2_nchw",
    "resnet18.conv5_nchw",
    "resnet18.conv8_nchw",
    "resnet18.conv11_nchw",
]
SETS = {"design": DESIGN_LAYERS, "design-nchw": DESIGN_NCHW_LAYERS, "evaluation": EVAL_LAYERS}
SET_TITLES = {
    "design": "Design layers (where the method is developed)",
    "design-nchw": "Design layers in NCHW (where the fixed strategies leave room)",
    "evaluation": "Evaluation layers (reported once per method version)",
}
FIXED = ["no-rewrite", "transform-stage", "pre-transformed"]
TORCH_PYTHON = os.path.join(ROOT, ".venv-torch", "bin", "python")
# Adaptive methods: preset overrides of the session. "adaptive" is the current default method.
VARIANTS = {
    "adaptive": {},
    "adaptive-ucb-gain": {"controller_policy": "ucb-gain"},
    "adaptive-projected": {"controller_policy": "projected-best"},
    "adaptive-halving": {"controller_policy": "halving"},
    "adaptive-warm2": {"controller_warmup_rounds": 2},
    "adaptive-warm3": {"controller_warmup_rounds": 3},
    "adaptive-no-onehot": {"strategy_onehot": False},
    "adaptive-lam0": {"controller_lam": 0.0},
    "adaptive-uniform": {"controller_policy": "uniform"},
    "adaptive-no-cross-seed": {"cross_seed": False},
    "adaptive-per-strategy-models": {"shared_cost_model": False},
    "adaptive-paired": {"pair_layouts": True},
    "adaptive-paired-per-strategy-models": {"pair_layouts": True, "shared_cost_model": False},
}
PAPER = {"no-rewrite": 13.81, "transform-stage": 12.41, "pre-transformed": 16.59}  # abstract; mapping inferred


def method_of(sess) -> str | None:
    """The method a stored session ran, from its strategy and preset parameters (None: not one of ours)."""
    if not sess["strategy_arg"].startswith("auto"):
        return sess["strategy_arg"] if sess["strategy_arg"] in FIXED else None
    pp = sess["preset_params"]
    # sessions stored before the policy was a preset field ran the ucb-gain policy
    got = {
        "controller_policy": pp.get("controller_policy", "ucb-gain"),
        "controller_c": pp.get("controller_c"),
        "controller_lam": pp.get("controller_lam"),
        "strategy_onehot": pp.get("strategy_onehot", True),
        "controller_warmup_rounds": pp.get("controller_warmup_rounds", 1),
        "cross_seed": pp.get("cross_seed", True),
        "shared_cost_model": pp.get("shared_cost_model", True),
        "pair_layouts": pp.get("pair_layouts", False),
    }
    from workbench.presets import Preset

    default = {k: getattr(Preset, k) for k in got}
    for name, over in VARIANTS.items():
        if got == {**default, **over}:
            return name
    return None


def tune(layer, method, trials, seed, db, arms, per_round, target, resume_id=None):
    from workbench import TuningSession

    t = time.time()
    if resume_id is not None:
        s = TuningSession.resume(db, session_id=resume_id, trials=trials)
    else:
        strategy = "auto:" + ",".join(arms) if method in VARIANTS else method
        s = TuningSession(
            layer,
            trials=trials,
            seed=seed,
            db=db,
            strategy=strategy,
            trials_per_round=per_round,
            target=target,
            # one search thread: a seed gives the same session, and sessions stay comparable with those
            # tuned before the search used every core
            deterministic=True,
            **VARIANTS.get(method, {}),
        )
    s.run()
    if s.status != "finished":
        # a session that failed (e.g. its store could not be written) must not pass for a result
        sys.exit(f"al_ansor.py: session {s.session_id} ({layer}, {method}, seed {seed}) ended {s.status}: {s.error}")
    return s.session_id, time.time() - t


def _curve(rec):
    best, out = math.inf, []
    for lat, err in zip(rec["latency_ms"], rec["error_class"]):
        if lat is not None and not (isinstance(err, str)) and not math.isnan(lat):
            best = min(best, lat)
        out.append(None if math.isinf(best) else best)
    return out


def collect(db, ledger=None, session_id=None):
    """Every run of one of our methods: {(layer, seed, method): run}, from the sessions in ``db`` and, for the
    runs ``db`` does not hold, from the ``ledger`` folder (``export_runs``). A session whose process died after its
    last trial (before its status was written) counts as finished. ``run["best"]``: per checkpoint (``"128"``,
    ...), the best verified program among the run's first k trials (``mod_hash``, ``strategy``, in-tuning
    ``latency_ms``, ``trace``), or None; ``run["commit"]``: the commit that tuned it, when the ledger knows.
    ``session_id``: of ``db``'s sessions, only that one."""
    held = load_ledger(ledger) if ledger else {}
    runs = dict(held)
    if db and os.path.exists(db):
        for key, run in _collect_store(db, session_id).items():
            old = held.get(key)
            same = old and (old["session_id"], old["created_at"]) == (run["session_id"], run["created_at"])
            runs[key] = {**run, "commit": old.get("commit") if same else None}
    return runs


def _collect_store(db, session_id=None):
    from workbench import RecordStore

    store = RecordStore(db, readonly=True)
    runs = {}
    for sess in store.sessions():
        m = method_of(sess)
        if m is None or session_id not in (None, sess["id"]):
            continue
        rec = store.records(session_id=sess["id"]).reset_index(drop=True)
        finished = sess["status"] == "finished" or len(rec) >= sess["trials"]
        events = store.events(session_id=sess["id"])
        ev = [e for e in events if e["kind"] == "round_finished"]
        round_strategy = {e["data"]["round"]: e["data"]["strategy"] for e in events if e["kind"] == "round_started"}
        pairs = _pairs(rec, round_strategy)
        phases = {}
        pruned = {p: e["data"]["round"] for e in ev for p in (e["data"].get("pruned") or [])}
        for e in ev:
            for k, v in (e["data"].get("phase_seconds") or {}).items():
                phases[k] = phases.get(k, 0.0) + v
        runs[(sess["workload"], sess["seed"], m)] = {
            "target": sess["target"],
            "session_id": sess["id"],
            "finished": finished,
            "trials": len(rec),
            "seconds": float(rec["elapsed_s"].max()) if len(rec) else 0.0,
            # the session's elapsed time when its k-th trial was recorded: the wall time of a k-trial session
            "seconds_at": {str(k): round(float(rec["elapsed_s"].iloc[k - 1]), 1) for k in checkpoints(len(rec))}
            if len(rec)
            else {},
            "alloc": rec.groupby("strategy").size().to_dict(),
            "curve": _curve(rec),
            "phase_seconds": {k: round(v, 1) for k, v in phases.items()},
            # waits for a quiet machine (the noise guard's), part of "seconds": a host's noise, not the method's cost
            "noise_waited_s": round(
                sum(float(e["data"].get("waited_s") or 0.0) for e in events if e["kind"] == "measurement_noise"), 1
            ),
            "pruned": pruned,
            "paired": len(pairs),
            "pairs": pairs,
            "best": {str(k): _best_of(store, rec.iloc[:k]) for k in checkpoints(len(rec))} if len(rec) else {},
            "created_at": sess["created_at"],
            "versions": sess["versions"],
            "preset_params": sess["preset_params"],
            "source": "store",
        }
    return runs


def _best_of(store, head):
    ok = head[head["error_class"].isna() & head["verified"]]
    if not len(ok):
        return None
    best = ok.loc[ok["latency_ms"].idxmin()]
    return {
        "mod_hash": best["mod_hash"],
        "strategy": best["strategy"],
        "latency_ms": float(best["latency_ms"]),
        # one trace read per best: a store's traces are tens of kB per record
        "trace": store.record(int(best["id"]))["trace"],
    }


# The ledger: one small JSON file per finished run (its summary and its best program at each checkpoint, as a
# trace), kept in the repository. A benchmark store is one machine's (tens of MB, gone with the machine); the
# ledger lets a run of many sessions go on over several machines and its page be re-measured from the traces.
LEDGER = os.path.join(RESULTS, "al_ansor_sessions")


def _ledger_path(ledger, key) -> str:
    layer, seed, method = key
    return os.path.join(ledger, f"{layer}__seed{seed}__{method}.json")


def load_ledger(ledger) -> dict:
    """{(layer, seed, method): run} for every run file in ``ledger`` (missing folder: none)."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(ledger, "*.json"))):
        with open(path) as f:
            entry = json.load(f)
        runs[(entry["layer"], entry["seed"], entry["method"])] = {
            **entry["run"],
            "commit": entry.get("commit"),
            "source": "ledger",
        }
    return runs


def export_runs(runs, ledger, commit=None, tuned=()) -> list:
    """Write each finished run of ``runs`` that came from a store into ``ledger``, unless the ledger already holds
    it as it is; ``commit`` is recorded for the runs in ``tuned`` (the ones this process tuned), the run's own
    (``collect`` with the ledger keeps it for the same session) for the others. Atomic per file. Returns the paths
    written."""
    os.makedirs(ledger, exist_ok=True)
    written = []
    for key, run in sorted(runs.items()):
        if run.get("source") != "store" or not run["finished"]:
            continue
        path = _ledger_path(ledger, key)
        entry = {
            "layer": key[0],
            "seed": key[1],
            "method": key[2],
            "commit": commit if key in tuned else run.get("commit"),
            "run": {k: v for k, v in run.items() if k not in ("source", "commit")},
        }
        if os.path.exists(path):
            with open(path) as f:
                if json.load(f) == json.loads(json.dumps(entry)):
                    continue
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(entry, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        written.append(path)
    return written


def foreign_runs(runs, target) -> list:
    """The keys of ``runs`` tuned for another target than ``target`` (another CPU, or another thread count):
    their programs were searched on another machine, so a comparison with runs tuned here would not be one
    method against another."""
    return sorted(k for k, r in runs.items() if r.get("target") != target)


def stop_time(hhmm: str, now: float) -> float:
    """The next moment after ``now`` (epoch seconds) when the local clock reads ``hhmm`` ("HH:MM"), as epoch
    seconds; ValueError for anything else."""
    hh, mm = (int(x) for x in hhmm.split(":"))
    if not (0 <= hh < 24 and 0 <= mm < 60):
        raise ValueError(hhmm)
    t = time.mktime(time.localtime(now)[:3] + (hh, mm, 0, 0, 0, -1))
    return t if t > now else time.mktime(time.localtime(now + 86400)[:3] + (hh, mm, 0, 0, 0, -1))


def git_commit() -> str | None:
    """The checkout's commit, with "+dirty" when it has changes (``_quiet.git_state``); None outside git."""
    state = _quiet.git_state()
    return state["commit"] and state["commit"] + ("+dirty" if state["dirty"] else "")


def _pairs(rec, round_strategy: dict) -> list:
    """The session's paired measurements (preset pair_layouts; workbench.loop.paired_measurements): [source
    strategy, paired strategy, paired latency / source latency] each, the ratio None when either has no valid
    latency."""
    from workbench.loop import paired_measurements

    return [
        [p.source, p.strategy, round(p.latency_ms / p.source_ms, 4) if p.latency_ms and p.source_ms else None]
        for p in paired_measurements(rec, round_strategy)
    ]


def checkpoints(trials: int) -> list[int]:
    return sorted({c for c in (128, 256) if c < trials} | {trials})


def remeasure(entries, repeats, target):
    """entries: list of (key, workload, record) -> {key: {"median_ms", "spread", "n", "samples_ms"}}, the
    methods interleaved in shuffled order (one library, TVM, in two runner processes, the faster one's median
    counting, as in a tuning session)."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.s_tir import meta_schedule as ms

    from workbench import measure, noise, space
    from workbench.workloads import registry

    builder = measure.Builder(target, workers=2)
    runner = measure.Runner(target["num-cores"], number=3, repeat=3, min_repeat_ms=50, processes=2)
    strip = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)
    built = {}
    reg = registry()
    try:
        mods, keys, shapes = [], [], {}
        for key, layer, rec in entries:
            w = reg.get(layer)
            sch = space.schedule_from_trace_json(w, rec["trace"])
            mod = strip(sch.mod)
            mods.append(mod)
            keys.append(key)
            shapes[key] = [tuple(int(x) for x in a.shape) for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]
        for key, b in zip(keys, builder.build(mods)):
            built[key] = b.path
        times = {k: [] for k in keys}
        rng = random.Random(0)
        for _ in range(repeats):
            order = list(keys)
            rng.shuffle(order)
            for k in order:
                if built[k]:
                    r = runner.run(built[k], shapes[k])
                    if r.latency_ms:
                        times[k].append(r.latency_ms)
        return {
            k: {
                "median_ms": float(np.median(v)) if v else None,
                "spread": noise.spread(v),
                "n": len(v),
                "samples_ms": [round(x, 5) for x in v],
            }
            for k, v in times.items()
        }
    finally:
        for p in built.values():
            builder.discard(p)
        builder.close()
        runner.close()


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return float(np.exp(np.mean(np.log(xs)))) if xs else None


def interval(pcts):
    """mean and 95 % interval (t distribution) of per-pair improvements in %."""
    from scipy import stats

    xs = np.asarray([x for x in pcts if x is not None], float)
    if len(xs) == 0:
        return {"mean_pct": None, "ci95_pct": None, "n": 0}
    m = float(xs.mean())
    if len(xs) < 2:
        return {"mean_pct": m, "ci95_pct": None, "n": 1}
    h = float(stats.t.ppf(0.975, len(xs) - 1) * xs.std(ddof=1) / math.sqrt(len(xs)))
    return {"mean_pct": m, "ci95_pct": [m - h, m + h], "n": int(len(xs))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--set",
        choices=sorted(SETS),
        default="design",
        help="the layer set: design (where the method is developed; design-nchw: the same network's 3x3 convs in "
        "NCHW, where the fixed strategies leave room) or evaluation (reported once per method version)",
    )
    ap.add_argument("--layers", default=None, help="comma list of workload names (default: the set's layers)")
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument(
        "--trials-per-round",
        type=int,
        default=8,
        help="batch size for every method (small, so the adaptive controller gets rounds after warm-up)",
    )
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument(
        "--methods",
        default=",".join(FIXED + ["adaptive"]),
        help=f"comma list of methods to tune and report: {', '.join(FIXED + list(VARIANTS))}",
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--vendor-python",
        default=TORCH_PYTHON,
        help="python of torch's environment (make torch-env): the report times torch's oneDNN conv2d on the set's "
        "layers, alone in its own process after the re-measurement, for the headroom table; 'none' skips it "
        "(default %(default)s)",
    )
    ap.add_argument("--with-packed", action="store_true", help="give the adaptive controller the packed arm too")
    ap.add_argument("--db", default=None, help="records store (default benchmarks/out/al_ansor-<set>.db)")
    ap.add_argument(
        "--threads",
        type=int,
        default=_quiet.available_cores(),
        help="cores for tuning and timing (TVM_NUM_THREADS, OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, the "
        "target's num-cores; default: all available, %(default)s)",
    )
    ap.add_argument(
        "--force", action="store_true", help="run even when the machine is not quiet; the result is then marked invalid"
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep --db and its finished sessions; extend shorter ones to --trials; tune the rest",
    )
    ap.add_argument("--rerun", default=None, help="with --resume: tune these methods again from scratch (comma list)")
    ap.add_argument("--results", default=RESULTS, help="where the pages go (default docs/results)")
    ap.add_argument(
        "--label",
        default=None,
        help="name of this report beside the set's main one (e.g. a host): al_ansor_<set>_<label>.json, its own "
        "section of the page",
    )
    ap.add_argument(
        "--ledger",
        default=None,
        help="folder of finished runs kept in the repository, one JSON file each (default "
        "docs/results/al_ansor_sessions/<set>): every finished session is written there, and the runs --db lacks "
        "are taken from there (kept, and re-measured from their traces)",
    )
    ap.add_argument(
        "--report-only", action="store_true", help="no tuning: re-measure and report what --db and the ledger hold"
    )
    ap.add_argument(
        "--stop-by",
        default=None,
        metavar="HH:MM",
        help="start no session that would end after this local time, today's or else tomorrow's (judged by the "
        "longest session so far in this run), then stop as --tune-only does: a machine lent for a while, the rest "
        "left to --resume",
    )
    ap.add_argument(
        "--export-only",
        action="store_true",
        help="no tuning, no timing: write --db's finished runs into the ledger (e.g. a store tuned before the ledger)",
    )
    ap.add_argument(
        "--tune-only",
        action="store_true",
        help="tune into --db, then stop: no re-measurement, no page (e.g. one layer at a time, the machine free "
        "for other work between them; then --report-only)",
    )
    ap.add_argument(
        "--markdown-only",
        action="store_true",
        help="no tuning, no timing: rewrite al_ansor.md from the JSON files (e.g. after editing the analysis)",
    )
    args = ap.parse_args()
    if args.markdown_only:
        _write_md(args.results)
        return
    methods = args.methods.split(",")
    if args.label is not None and not args.label.replace("-", "").replace("_", "").isalnum():
        sys.exit(f"al_ansor.py: --label takes letters, digits, - and _ only, got {args.label!r}")
    bad = [m for m in methods if m not in FIXED and m not in VARIANTS]
    if bad:
        sys.exit(f"al_ansor.py: unknown method {bad[0]!r}; valid: {', '.join(FIXED + list(VARIANTS))}")
    stop_by = None
    if args.stop_by is not None:
        try:
            stop_by = stop_time(args.stop_by, time.time())
        except ValueError:
            sys.exit(f"al_ansor.py: --stop-by takes a local time HH:MM, got {args.stop_by!r}")
    db = args.db or os.path.join(ROOT, "benchmarks", "out", f"al_ansor-{args.set}.db")
    ledger = args.ledger or os.path.join(LEDGER, args.set)
    if args.export_only:
        if not os.path.exists(db):
            sys.exit(f"al_ansor.py: no records store {db!r} to export")
        written = export_runs(collect(db, ledger), ledger)
        print(f"al_ansor.py: {len(written)} runs written to {ledger}", file=sys.stderr)
        return

    from workbench import tvm_env
    from workbench.workloads import registry

    layers = args.layers.split(",") if args.layers else SETS[args.set]
    seeds = list(range(args.seeds))
    arms = FIXED + (["packed"] if args.with_packed else [])
    target = tvm_env.host_target_dict(args.threads)
    t0 = time.time()
    if args.report_only:
        held = collect(db, ledger)
        if not held:
            sys.exit(f"al_ansor.py: no runs in {db!r} or {ledger!r} to report")
        target = next(iter(held.values()))["target"]
        foreign = foreign_runs(held, target)
        if foreign:
            sys.exit(
                f"al_ansor.py: {db!r} and {ledger!r} hold runs tuned for different targets ({target} and "
                f"{held[foreign[0]]['target']}); report each machine's runs from a --ledger of its own"
            )
    else:
        foreign = foreign_runs(load_ledger(ledger), target)
        if foreign:
            sys.exit(
                f"al_ansor.py: the ledger {ledger!r} holds runs tuned for another target than this machine's {target} "
                f"(e.g. {'/'.join(map(str, foreign[0]))}); give this machine a --ledger of its own"
            )
    threads = int(target["num-cores"])
    _quiet.set_thread_env(threads)
    # every comparison on the page comes from one interleaved re-measurement (remeasure): a slow host is
    # recorded beside it, not refused
    protocol = _quiet.Protocol(f"al_ansor-{args.set}", threads, args.force, host_drift="record")
    if not args.report_only:
        os.makedirs(os.path.dirname(db), exist_ok=True)
        prev = {}
        if args.resume:
            rerun = set(args.rerun.split(",")) if args.rerun else set()
            prev = {k: v for k, v in collect(db, ledger).items() if k[2] not in rerun}
        else:
            from workbench.store import remove_store

            remove_store(db)
        commit = git_commit()
        longest = 0.0
        for layer, seed, m in itertools.product(layers, seeds, methods):
            old = prev.get((layer, seed, m))
            if old and old["finished"] and old["trials"] >= args.trials:
                where = db if old["source"] == "store" else ledger
                print(
                    f"[{time.time() - t0:7.0f}s] {layer} seed {seed} {m}: kept from {where}",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            if old and old["source"] == "ledger":
                # its store is another machine's: the run starts again here
                old = None
            if stop_by is not None and time.time() + longest > stop_by:
                protocol.finish()
                print(
                    f"[{time.time() - t0:7.0f}s] stopped before {args.stop_by} (--stop-by); go on with --resume",
                    file=sys.stderr,
                )
                return
            protocol.enter(f"tuning {layer} seed {seed} {m}")
            how = f"extended from {old['trials']} trials" if old else "new"
            print(f"[{time.time() - t0:7.0f}s] {layer} seed {seed} {m} ({how})", file=sys.stderr, flush=True)
            session_id, took = tune(
                layer,
                m,
                args.trials,
                seed,
                db,
                arms,
                args.trials_per_round,
                target,
                resume_id=old["session_id"] if old else None,
            )
            longest = max(longest, took)
            export_runs(collect(db, session_id=session_id), ledger, commit=commit, tuned={(layer, seed, m)})
    if args.tune_only:
        protocol.finish()
        print(f"[{time.time() - t0:7.0f}s] tuned into {db}; not re-measured (--tune-only)", file=sys.stderr)
        return
    # a report-only run has read the runs already; a tuning run reads them again, with the sessions it added
    held = held if args.report_only else collect(db, ledger)
    runs = {k: v for k, v in held.items() if k[0] in layers and k[1] in seeds and k[2] in methods}
    # The best verified program of each run at each checkpoint; one timing per distinct program.
    entries, best_at, winner = {}, {}, {}
    for (layer, seed, m), r in runs.items():
        for k in checkpoints(r["trials"]):
            best = r["best"].get(str(k))
            if best is None:
                continue
            key = (layer, best["mod_hash"])
            entries.setdefault(key, (key, layer, {"trace": best["trace"]}))
            best_at[(layer, seed, m, k)] = key
            winner[(layer, seed, m, k)] = best["strategy"]
    _quiet.quiesce()
    protocol.enter("re-measuring the winners")
    print(f"[{time.time() - t0:7.0f}s] re-measuring {len(entries)} programs x {args.repeats}", file=sys.stderr)
    timed = remeasure(list(entries.values()), args.repeats, target)
    vendor = time_vendor(layers, args.vendor_python, threads, args.repeats, protocol)
    reg = registry()
    kernels, unchecked = self_check_kernels(db, layers, timed)
    checks = []
    if kernels:
        protocol.enter("the standalone self-check")
        print(f"[{time.time() - t0:7.0f}s] standalone self-check: {len(kernels)} programs", file=sys.stderr)
        checks = _quiet.standalone_self_check(kernels, threads, ROOT)
    protocol.finish()

    result = {
        "set": args.set,
        "label": args.label,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "trials": args.trials,
        "trials_per_round": args.trials_per_round,
        "seeds": seeds,
        "layers": layers,
        "methods": methods,
        "arms": arms,
        "repeats": args.repeats,
        "target": target,
        "checkpoints": checkpoints(args.trials),
        "latency_ms": {f"{l}|{s}|{m}|{k}": timed[key]["median_ms"] for (l, s, m, k), key in best_at.items()},
        "spread": {f"{l}|{s}|{m}|{k}": timed[key]["spread"] for (l, s, m, k), key in best_at.items()},
        "winner_strategy": {f"{l}|{s}|{m}|{k}": v for (l, s, m, k), v in winner.items()},
        "allocation": {f"{l}|{s}|{m}": r["alloc"] for (l, s, m), r in runs.items()},
        "tuning_seconds": {f"{l}|{s}|{m}": round(r["seconds"], 1) for (l, s, m), r in runs.items()},
        "tuning_seconds_at": {
            f"{l}|{s}|{m}|{k}": v for (l, s, m), r in runs.items() for k, v in (r.get("seconds_at") or {}).items()
        },
        "phase_seconds": {f"{l}|{s}|{m}": r["phase_seconds"] for (l, s, m), r in runs.items()},
        "noise_waited_seconds": {f"{l}|{s}|{m}": r.get("noise_waited_s") for (l, s, m), r in runs.items()},
        "pruned": {f"{l}|{s}|{m}": r["pruned"] for (l, s, m), r in runs.items() if r["pruned"]},
        "paired": {f"{l}|{s}|{m}": r["paired"] for (l, s, m), r in runs.items() if r["paired"]},
        "pairs": {f"{l}|{s}|{m}": r["pairs"] for (l, s, m), r in runs.items() if r["pairs"]},
        "curves": {f"{l}|{s}|{m}": r["curve"] for (l, s, m), r in runs.items()},
        "tuned_at_commit": {f"{l}|{s}|{m}": r.get("commit") for (l, s, m), r in runs.items()},
        "wall_seconds": round(time.time() - t0, 1),
        "command": "python " + " ".join(sys.argv),
        "self_check": checks,
        "self_check_skipped": unchecked,
        "vendor": vendor,
        "flops": {layer: float(reg.get(layer).flops) for layer in layers},
        "peak": machine_peak(target),
        "protocol": protocol.summary(),
    }
    result["analysis"] = analyse(result)
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, f"{_report_name(result)}.json"), "w") as f:
        json.dump(result, f, indent=1)
    _write_curves_html(result, args.results)
    _write_md(args.results)


def time_vendor(layers: list, python: str, threads: int, repeats: int, protocol) -> dict:
    """torch's oneDNN conv2d on the set's layers (the faster of its two memory formats), in torch's own
    environment, one process alone on the machine after the re-measurement (``_vendor_torch.py``, as
    performance.py times it): how far the machine's vendor library gets on the same convs. Returns {"layers":
    {layer: {"median_ms", "spread", "samples", "library"}}, "torch": version, "threads"}, or {"skipped": why}."""
    from performance import conv_spec, torch_importable
    from workbench.workloads import registry

    reg = registry()
    convs = [c for c in (conv_spec(reg.get(layer)) for layer in layers) if c]
    if not convs:
        return {"skipped": "no layer of the set is a conv a vendor library computes as is"}
    if python == "none":
        return {"skipped": "--vendor-python none"}
    if not torch_importable(python):
        return {"skipped": f"torch cannot be imported from {python!r} (make torch-env creates .venv-torch)"}
    _quiet.quiesce()  # the re-measurement's runner processes have exited; their pools must have stopped spinning
    protocol.enter("timing the vendor library")
    print(f"torch oneDNN on {len(convs)} layers x {repeats}, alone in its own process", file=sys.stderr, flush=True)
    argv = [python, os.path.join(HERE, "_vendor_torch.py"), str(threads)]
    info, timed = _quiet.set_up_and_time(argv, {"convs": convs}, threads, repeats, ROOT)
    out = {}
    for name, t in timed.items():
        s = _report.summarize(t["samples"])
        out[name] = {
            "median_ms": 1e3 * s["median"],
            "spread": s["spread_pct"] / 100,
            "samples": len(t["samples"]),
            "library": "torch oneDNN " + info["formats"][name],
        }
    return {"layers": out, "torch": info.get("torch"), "threads": info.get("threads")}


def machine_peak(target: dict) -> dict | None:
    """The FMA peak performance.py measured on a machine of this target (its page's figure, with its date), or
    None when that page was made for another target: GFLOPS as a share of the roof."""
    path = os.path.join(RESULTS, "performance.json")
    try:
        with open(path) as f:
            perf = json.load(f)
        made_for = perf["target"] if isinstance(perf["target"], dict) else json.loads(perf["target"])
        same = all(made_for.get(k) == target.get(k) for k in ("kind", "mcpu", "num-cores"))
        peak = _report.publishable_peak(perf.get("peak"))
        if not same or not peak:
            return None
        return {"fma_gflops": peak, "source": f"performance.json ({perf['date']})"}
    except (OSError, KeyError, ValueError):
        return None


def self_check_kernels(db: str, layers: list, timed: dict) -> tuple[list, dict]:
    """What the standalone self-check times: per layer, the program ``workbench best DB LAYER --time`` picks (the
    store's fastest verified record), with the re-measurement's median for the same program as the table's
    figure. The second value names each layer left out and why: no store on this machine (runs kept only in the
    ledger), no verified program of the layer in it, or its best not among the programs re-measured (a run of a
    method, seed or budget this report leaves out)."""
    from workbench.store import RecordStore

    if not os.path.exists(db):
        return [], {layer: "no records store on this machine (the runs come from the ledger)" for layer in layers}
    kernels, skipped = [], {}
    store = RecordStore(db, readonly=True)
    try:
        for layer in layers:
            b = store.best(layer)
            figure = timed.get((layer, b["mod_hash"]), {}).get("median_ms") if b else None
            if b is None:
                skipped[layer] = "no verified program in the store"
            elif figure is None:
                skipped[layer] = f"the store's best (record {b['id']}) is not among the programs re-measured"
            else:
                kernels.append(
                    {"db": db, "workload": layer, "table_ms": figure, "label": f"{layer} (record {b['id']})"}
                )
    finally:
        store.close()
    return kernels, skipped


def analyse(res) -> dict:
    """Per checkpoint and adaptive method: improvement over each fixed strategy and over the per-layer best
    fixed strategy (chosen by geomean over seeds), per (layer, seed) pair; wall time over the fixed sessions'."""
    lat = res["latency_ms"]
    out = {}
    fixed = [f for f in FIXED if f in res["methods"]]
    for k in res["checkpoints"]:

        def L(l, s, m):
            return lat.get(f"{l}|{s}|{m}|{k}")

        oracle = {}
        for l in res["layers"]:
            g = {f: geomean([L(l, s, f) for s in res["seeds"]]) for f in fixed}
            g = {f: v for f, v in g.items() if v}
            oracle[l] = min(g, key=g.get) if g else None
        for m in res["methods"]:
            if m in FIXED:
                continue
            row = {}
            for ref in fixed + ["best-fixed"]:
                pcts = []
                for l in res["layers"]:
                    for s in res["seeds"]:
                        f = oracle[l] if ref == "best-fixed" else ref
                        a, b = L(l, s, m), (L(l, s, f) if f else None)
                        if a and b:
                            pcts.append(100 * (b / a - 1))
                row[ref] = {
                    **interval(pcts),
                    "geomean_pct": 100 * (geomean([1 + p / 100 for p in pcts]) - 1) if pcts else None,
                    "wins": int(sum(p > 0 for p in pcts)),
                }
            ratios = []
            for l in res["layers"]:
                for s in res["seeds"]:
                    ta = _seconds(res, l, s, m, k)
                    tf = [_seconds(res, l, s, f, k) for f in fixed]
                    tf = [t for t in tf if t]
                    if ta and tf:
                        ratios.append(ta / float(np.mean(tf)))
            row["wall_time_vs_fixed"] = geomean(ratios)
            out[f"{m}@{k}"] = row
        out[f"oracle@{k}"] = oracle
    return out


def _seconds(res, layer, seed, method, k):
    """A run's wall time at checkpoint k (its elapsed time at trial k; the whole session's for reports made
    before that was recorded)."""
    at = (res.get("tuning_seconds_at") or {}).get(f"{layer}|{seed}|{method}|{k}")
    return at if at is not None else res["tuning_seconds"].get(f"{layer}|{seed}|{method}")


def _write_curves_html(res, out_dir):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    layers = res["layers"]
    fig = make_subplots(rows=len(layers), cols=1, subplot_titles=layers)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    for i, l in enumerate(layers, 1):
        for j, m in enumerate(res["methods"]):
            c = res["curves"].get(f"{l}|{res['seeds'][0]}|{m}", [])
            fig.add_trace(
                go.Scatter(
                    y=c,
                    x=list(range(1, len(c) + 1)),
                    name=m,
                    legendgroup=m,
                    showlegend=i == 1,
                    line={"color": palette[j % len(palette)]},
                ),
                row=i,
                col=1,
            )
        fig.update_yaxes(title_text="best ms", type="log", row=i, col=1)
    fig.update_layout(height=300 * len(layers), title=f"Best-so-far latency per method (seed 0), {res['set']} layers")
    fig.write_html(os.path.join(out_dir, f"{_report_name(res)}_curves.html"), include_plotlyjs="cdn")


def _report_name(res) -> str:
    """al_ansor_<set>, or al_ansor_<set>_<label> for a labelled report beside the set's main one."""
    return f"al_ansor_{res['set']}" + (f"_{res['label']}" if res.get("label") else "")


def _fmt(x, d=3):
    return "-" if x is None else f"{x:.{d}f}"


def _pct(iv):
    if iv.get("mean_pct") is None:
        return "-"
    ci = iv.get("ci95_pct")
    return f"{iv['mean_pct']:+.1f} %" + (f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else "")


def _set_md(res) -> list:
    title = SET_TITLES[res["set"]]
    seeds, k_last = res["seeds"], res["checkpoints"][-1]
    if res.get("label"):
        title += f": {res['label']}"
    L = [
        f"## {title}",
        "",
        _quiet.summary_markdown(res.get("protocol")),
        f"Measured {res['date']} ({res['target']['mcpu']}, {res['target']['num-cores']} threads for tuning and "
        f"timing). Layers: {', '.join(res['layers'])}. {res['trials']} trials per method, layer and seed; seeds "
        f"{seeds}; preset `quick`, {res['trials_per_round']} trials per round. Adaptive arms: {', '.join(res['arms'])}. "
        f"Each run's best verified program at each checkpoint was rebuilt from its trace and re-measured "
        f"{res['repeats']}x, all programs interleaved in shuffled order; the median is shown (geomean over seeds), "
        "with each program's spread over its re-measurements ((max - min) / median; the largest over the seeds) in brackets. Produced by "
        f"`{res['command']}` in {res['wall_seconds'] / 60:.0f} min.",
        "",
    ]
    for k in res["checkpoints"]:
        L += [
            f"### Latency per layer at {k} trials (ms, lower is better)",
            "",
            "| layer | " + " | ".join(res["methods"]) + " |",
            "|---|" + "---|" * len(res["methods"]),
        ]
        for l in res["layers"]:
            cells = []
            for m in res["methods"]:
                v = geomean([res["latency_ms"].get(f"{l}|{s}|{m}|{k}") for s in seeds])
                sp = [res["spread"].get(f"{l}|{s}|{m}|{k}") for s in seeds]
                sp = max([x for x in sp if x is not None], default=None)
                cells.append(_fmt(v) + (f" ({100 * sp:.0f}%)" if sp is not None else ""))
            L.append(f"| {l} | " + " | ".join(cells) + " |")
        L += [
            "",
            f"Improvement of each adaptive method at {k} trials: `lat_ref / lat_adaptive - 1` per (layer, seed) "
            "pair, mean [95 % interval], geomean, pairs where adaptive is faster; best-fixed is the per-layer best "
            "fixed strategy (an oracle that knows it in advance); wall time is the adaptive session's over the "
            f"mean of the fixed sessions' (geomean over pairs), each at its {k}th trial.",
            "",
            "| method | vs no-rewrite | vs transform-stage | vs pre-transformed | vs best-fixed | wall time |",
            "|---|---|---|---|---|---|",
        ]
        for m in res["methods"]:
            row = res["analysis"].get(f"{m}@{k}")
            if not row:
                continue
            cells = []
            for ref in FIXED + ["best-fixed"]:
                iv = row.get(ref) or {}
                cells.append(
                    f"{_pct(iv)}; geo {_fmt(iv.get('geomean_pct'), 1)} %; {iv.get('wins', 0)}/{iv.get('n', 0)}"
                    if iv.get("n")
                    else "-"
                )
            L.append(f"| {m} | " + " | ".join(cells) + f" | {_fmt(row.get('wall_time_vs_fixed'), 2)}x |")
        L.append("")
    L += _headroom_md(res)
    L += [
        "### Trials per arm and phase times (seed 0)",
        "",
        "| layer | method | "
        + " | ".join(res["arms"])
        + " | paired | winner | seconds | search | build | measure | cross-seed | pair | train | noise wait |",
        "|---|---|" + "---|" * (len(res["arms"]) + 10),
    ]
    for l in res["layers"]:
        for m in res["methods"]:
            key = f"{l}|{seeds[0]}|{m}"
            if key not in res["allocation"]:
                continue
            a, ph = res["allocation"][key], res["phase_seconds"].get(key) or {}
            pr = (res.get("pruned") or {}).get(key, {})
            L.append(
                f"| {l} | {m} | "
                + " | ".join(str(a.get(s, 0)) + (f" (pruned r{pr[s]})" if s in pr else "") for s in res["arms"])
                + f" | {(res.get('paired') or {}).get(key, 0)}"
                + f" | {res['winner_strategy'].get(key + '|' + str(k_last))} | {_fmt(res['tuning_seconds'].get(key), 0)} | "
                + " | ".join(_fmt(ph.get(p), 0) for p in ("search", "build", "measure", "cross_seed", "pair", "train"))
                + f" | {_fmt((res.get('noise_waited_seconds') or {}).get(key), 0)} |"
            )
    L += _pairs_md(res)
    L += _self_check_md(res)
    L += [
        "",
        f"Interactive best-so-far curves: [{_report_name(res)}_curves.html]({_report_name(res)}_curves.html).",
        "",
    ]
    return L


def _headroom_md(res) -> list:
    """Per layer at the last checkpoint: the best fixed strategy (geomean over seeds) against the vendor library
    timed in the same report, with both as GFLOPS and share of the machine's FMA peak where it is known."""
    vendor = res.get("vendor")
    if not vendor:
        return []  # a report from before the vendor was timed
    if "skipped" in vendor:
        return [f"No vendor figure in this report: {vendor['skipped']}.", ""]
    k = res["checkpoints"][-1]
    peak = (res.get("peak") or {}).get("fma_gflops")
    oracle = res["analysis"].get(f"oracle@{k}") or {}
    lib = {v["library"] for v in vendor["layers"].values()}

    def perf(layer, ms):
        if not ms or not (res.get("flops") or {}).get(layer):
            return "-"
        g = res["flops"][layer] / ms / 1e6
        return f"{g:.1f}" + (f" ({100 * g / peak:.0f} %)" if peak else "")

    L = [
        f"### Headroom at {k} trials: the best fixed strategy against the vendor library",
        "",
        f"The vendor: {', '.join(sorted(lib))} (torch {vendor.get('torch')}, {vendor.get('threads')} threads, the "
        "faster of its NCHW and channels_last formats per layer), timed alone in its own process after the "
        "re-measurement, median of its samples of >= 100 ms (spread in brackets); not interleaved with the "
        "programs above, so a drift of the host's speed between the two phases moves the last column (the probe "
        "readings are above). "
        + (
            f"Share of the machine's FMA peak: {peak:.1f} GFLOPS, from {res['peak']['source']}."
            if peak
            else "No peak figure for this target."
        ),
        "",
        "| layer | best fixed strategy | its ms | its GFLOPS (% of peak) | vendor ms | vendor GFLOPS (% of peak) | "
        "best fixed / vendor latency |",
        "|---|---|---|---|---|---|---|",
    ]
    for layer in res["layers"]:
        f = oracle.get(layer)
        ms = geomean([res["latency_ms"].get(f"{layer}|{s}|{f}|{k}") for s in res["seeds"]]) if f else None
        v = vendor["layers"].get(layer) or {}
        vms = v.get("median_ms")
        L.append(
            f"| {layer} | {f or '-'} | {_fmt(ms)} | {perf(layer, ms)} | "
            + (f"{_fmt(vms)} ({100 * v['spread']:.0f}%)" if vms else "-")
            + f" | {perf(layer, vms)} | {_fmt(ms / vms if ms and vms else None, 2)}x |"
        )
    return L + [""]


def _self_check_md(res) -> list:
    """The standalone self-check, with the layers it could not check and why; a report from before it says so."""
    if "self_check" not in res:
        return ["", "No standalone self-check in this report (it predates the script's own; see the analysis below)."]
    L = []
    if res["self_check"]:
        md = _quiet.self_check_markdown(
            res["self_check"],
            what="Each layer's fastest program in the records store (the one `workbench best` picks; its table "
            "figure: the re-measurement's median for that program)",
        )
        L += ["", md.replace("## Standalone self-check", "### Standalone self-check", 1).rstrip("\n")]
    skipped = res.get("self_check_skipped") or {}
    if skipped:
        L += ["", "Not checked: " + "; ".join(f"{layer}: {why}" for layer, why in skipped.items()) + "."]
    return L


def _pairs_md(res) -> list:
    """What the paired measurements saw: per layer, method and direction (the round's strategy -> the layout its
    new best was also measured in), over every seed: how many, how many were faster than their source, the median
    latency ratio (paired / source) and how many failed."""
    groups: dict = {}
    for key, pairs in (res.get("pairs") or {}).items():
        layer, _seed, method = key.split("|")
        for src, dst, ratio in pairs:
            groups.setdefault((layer, method, src, dst), []).append(ratio)
    if not groups:
        return []
    L = [
        "",
        "### Paired layouts: a new best's loop nest under the other strategies (all seeds)",
        "",
        "| layer | method | from -> to | pairs | faster than its source | median ratio (to / from) | failed |",
        "|---|---|---|---|---|---|---|",
    ]
    for (layer, method, src, dst), ratios in sorted(groups.items()):
        ok = [x for x in ratios if x is not None]
        L.append(
            f"| {layer} | {method} | {src} -> {dst} | {len(ratios)} | {sum(x < 1 for x in ok)} | "
            f"{_fmt(float(np.median(ok)) if ok else None)} | {len(ratios) - len(ok)} |"
        )
    return L


def _write_md(out_dir):
    L = [
        "# AL-Ansor reproduction: adaptive weight-layout strategy vs fixed strategies",
        "",
        "Methods: Ansor with one fixed weight-layout strategy (no-rewrite, transform-stage, pre-transformed) and the "
        "adaptive controller over the three with one shared cost model (`adaptive`: the default arm policy, "
        "`optimistic-best`; `adaptive-projected`: `projected-best`, arms compared at equal trials; `adaptive-halving`: successive halving, 16 trials per arm, then the better half at twice as many; `adaptive-warm2` / `adaptive-warm3`: `optimistic-best` after a warm-up of two / three rounds per arm (arms in turn) instead of one; `adaptive-ucb-gain`: the first version's policy; `adaptive-no-onehot`, `adaptive-lam0`, "
        "`adaptive-uniform`, `adaptive-no-cross-seed`, `adaptive-per-strategy-models`: ablations of the design, see workbench/controller.py; "
        "`adaptive-paired`: the default with paired layouts, a round's new best also measured under the other "
        "strategies' layouts and credited to their arms (preset `pair_layouts`; the page's `paired` column counts "
        "those trials); `adaptive-paired-per-strategy-models`: both changes). Latencies are deployment "
        "latencies: transform-stage includes its weight copy on every call. The paper's abstract reports "
        f"{' / '.join(str(v) for v in PAPER.values())} % over its three fixed strategies (which number belongs to which "
        "strategy is not stated there).",
        "",
    ]
    found = False
    for name in SETS:
        main = os.path.join(out_dir, f"al_ansor_{name}.json")
        labelled = sorted(glob.glob(os.path.join(out_dir, f"al_ansor_{name}_*.json")))
        for path in ([main] if os.path.exists(main) else []) + labelled:
            with open(path) as f:
                res = json.load(f)
            if res.get("set") != name or _report_name(res) != os.path.basename(path)[: -len(".json")]:
                continue  # not a report of this script (e.g. an older file of another name)
            L += _set_md(res)
            found = True
    if not found:
        L += ["No run has been reported yet.", ""]
    # The reading of the numbers is written by a person, kept beside the script, and appended as is.
    notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "al_ansor_analysis.md")
    if os.path.exists(notes):
        with open(notes) as f:
            L += [f.read().rstrip()]
    with open(os.path.join(out_dir, "al_ansor.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
