"""Variants of the search, online and side by side: cost model, rule-based pruning, search threads.

For each workload (none of them in the offline corpus of ``cost_model.py``) and seed, every variant tunes
the same budget with strategy ``no-rewrite`` into one store; each variant is a set of preset fields
(``VARIANTS``). The model and pruning variants run with one search thread (``deterministic``), so a seed
gives paired sessions that differ only in the variant; ``pack-sum on all cores`` is the default pack-sum search on every
core, for the search-threads speed-up in wall time. Each session's final best program is rebuilt from its
stored trace and re-measured, all variants of a workload interleaved in shuffled order, ``--repeats``
times (the median is its latency). Curves (best-so-far vs trials and vs wall seconds) are in-session.

The run follows the benchmark protocol (``_quiet.py``): a quiet check before every session and before the
re-measurement, the calibration probe before and after (a slow host is recorded, an unsteady one refused),
every thread pool sized to ``--threads``. ``--resume`` keeps the finished sessions of ``--db``.

    python benchmarks/search_variants.py --resume

writes docs/results/search_variants.md and search_variants.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(ROOT, "docs", "results")
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import _quiet  # noqa: E402

# Outside the AL-Ansor design store (ResNet-18 layers) that cost_model.md's offline figures come from: a
# matmul, a ResNet-50 3x3 conv and a MobileNet-V2 pointwise conv.
WORKLOADS = ["GMM.1", "resnet50.conv6", "mobilenet_v2.pw96_576_14"]
VARIANTS = {
    "pack-sum": {"cost_model": "pack-sum", "deterministic": True},
    "pack-sum + pruning": {"cost_model": "pack-sum", "deterministic": True, "pruning": "all"},
    "pairwise-rank": {"cost_model": "pairwise-rank", "deterministic": True},
    "pairwise-rank + pruning": {"cost_model": "pairwise-rank", "deterministic": True, "pruning": "all"},
    "pack-sum + prior": {"cost_model": "pack-sum", "deterministic": True, "prior": True},
    "pairwise-rank + prior": {"cost_model": "pairwise-rank", "deterministic": True, "prior": True},
    "lambdarank": {"cost_model": "lambdarank", "deterministic": True},
    "lambdarank + prior": {"cost_model": "lambdarank", "deterministic": True, "prior": True},
    "pack-sum on all cores": {"cost_model": "pack-sum", "deterministic": False},
    # the default search threads, the next round searched after this one is timed instead of while it builds
    "pack-sum on all cores without overlap": {"cost_model": "pack-sum", "deterministic": False, "overlap": False},
}
BASELINE = "pack-sum"


def parse_variants(text: str) -> list[str]:
    """A comma list of VARIANTS names (spaces around a name ignored) -> the names; ValueError for an unknown one."""
    variants = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        raise ValueError(f"unknown variant {(bad or [text])[0]!r}; valid: {', '.join(VARIANTS)}")
    return variants


def variant_of(sess) -> str | None:
    """The variant a stored session ran, from its preset fields (None: not one of ours)."""
    from workbench import pruning

    pp = sess["preset_params"]
    got = (
        pp.get("cost_model"),
        tuple(pp.get("pruning") or ()),
        bool(pp.get("deterministic")),
        bool(pp.get("prior")),
        bool(pp.get("overlap", True)),
    )
    for name, over in VARIANTS.items():
        want = (
            over["cost_model"],
            pruning.parse_rules(over.get("pruning")),
            over["deterministic"],
            bool(over.get("prior")),
            over.get("overlap", True),
        )
        if got == want and sess["strategy_arg"] == "no-rewrite":
            return name
    return None


def tune(workload, variant, trials, seed, db, target):
    from workbench import TuningSession

    s = TuningSession(
        workload, trials=trials, seed=seed, db=db, strategy="no-rewrite", target=target, **VARIANTS[variant]
    )
    s.run()
    if s.status != "finished":
        sys.exit(f"search_variants.py: session {s.session_id} ({workload}, {variant}, seed {seed}) ended {s.status}")
    return s.session_id


def collect(db, trials: int | None = None, target: dict | None = None) -> dict:
    """{(workload, seed, variant): run} of every finished session of ``db`` that ran one of the variants (with
    ``trials``/``target``: only sessions with that budget and target; a store kept by --resume may hold others,
    which are never this run's figures)."""
    from workbench import RecordStore

    store = RecordStore(db, readonly=True)
    runs = {}
    try:
        for sess in store.sessions():
            v = variant_of(sess)
            if v is None or (trials is not None and sess["trials"] != trials):
                continue
            if target is not None and sess["target"] != target:
                continue
            rec = store.records(session_id=sess["id"], with_trace=True).reset_index(drop=True)
            if len(rec) < sess["trials"]:
                continue
            best, curve = math.inf, []
            for lat, err, t in zip(rec["latency_ms"], rec["error_class"], rec["elapsed_s"]):
                if lat is not None and not isinstance(err, str) and not math.isnan(lat):
                    best = min(best, lat)
                curve.append((None if math.isinf(best) else round(best, 5), round(float(t), 2)))
            ok = rec[rec["error_class"].isna() & rec["verified"].astype(bool)]
            top = ok.loc[ok["latency_ms"].idxmin()] if len(ok) else None
            ev = [e["data"] for e in store.events(sess["id"]) if e["kind"] == "round_finished"]
            first_round = curve[min(int(sess["preset_params"].get("trials_per_round") or 8), len(curve)) - 1][0]
            runs[(sess["workload"], sess["seed"], v)] = {
                "session_id": sess["id"],
                "target": sess["target"],
                "trials": len(rec),
                "seconds": float(rec["elapsed_s"].max()),
                "curve": curve,
                "best_session_ms": float(top["latency_ms"]) if top is not None else None,
                "best_trace": top["trace"] if top is not None else None,
                "best_hash": top["mod_hash"] if top is not None else None,
                "first_round_best_ms": first_round,
                "pruning": (ev[-1].get("pruning_counts") if ev else None),
                "dropped": sum(sum((e.get("pruned_programs") or {}).values()) for e in ev),
            }
    finally:
        store.close()
    return runs


def time_to(curve, level: float) -> float | None:
    """Wall seconds until the best-so-far first reaches ``level`` ms (None: never)."""
    return next((t for b, t in curve if b is not None and b <= level), None)


def analyse(runs: dict, timed: dict, workloads, seeds) -> dict:
    from al_ansor import geomean

    out = {"per_workload": {}, "geomean_vs_baseline": {}, "wall_vs_baseline": {}}
    ratios = {v: [] for v in VARIANTS}
    walls = {v: [] for v in VARIANTS}
    for w in workloads:
        for seed in seeds:
            row = {}
            for v in VARIANTS:
                r = runs.get((w, seed, v))
                if r is None:
                    continue
                t = timed.get((w, r["best_hash"])) if r["best_hash"] else None
                row[v] = {
                    "best_ms": t["median_ms"] if t else None,
                    "spread": t["spread"] if t else None,
                    "best_session_ms": r["best_session_ms"],
                    "first_round_best_ms": r["first_round_best_ms"],
                    "seconds": round(r["seconds"], 1),
                    "pruning": r["pruning"],
                    "dropped": r["dropped"],
                }
            base = row.get(BASELINE)
            # time to within 5 % of the best any variant reached in session on this workload and seed
            reached = min(x["best_session_ms"] for x in row.values() if x["best_session_ms"])
            level = 1.05 * reached
            for v, x in row.items():
                first = x.pop("first_round_best_ms")
                x["first_round_score"] = reached / first if first else None
                x["time_to_5pct_s"] = time_to(runs[(w, seed, v)]["curve"], level)
                if base and base["best_ms"] and x["best_ms"]:
                    ratios[v].append(base["best_ms"] / x["best_ms"])
                    walls[v].append(x["seconds"] / base["seconds"])
            out["per_workload"][f"{w}|{seed}"] = row
    out["geomean_vs_baseline"] = {v: geomean(r) for v, r in ratios.items() if r}
    out["wall_vs_baseline"] = {v: geomean(r) for v, r in walls.items() if r}
    return out


def write_md(res: dict, results: str, analysis: str | None = None) -> None:
    """The page, in ``results``; the words of ``analysis`` (a Markdown file written by hand after the run) appended."""
    a = res["analysis"]
    L = [
        "# Search variants online: cost model, rule-based pruning, search threads",
        "",
        _quiet.summary_markdown(res.get("protocol")),
        f"Produced by `{res['command']}` ({res['trials']} trials per session, strategy no-rewrite, seeds "
        f"{res['seeds']}, {res['threads']} threads, {res['repeats']} interleaved re-measurement rounds of every "
        f"session's final best) on {res['date']}, {res['wall_seconds'] / 60:.0f} min. Definitions: "
        "`benchmarks/search_variants.py`'s docstring. **speed** = the pack-sum session's re-measured best over "
        "the variant's (> 1: the variant found a faster kernel); **wall** = the variant's session wall time over "
        "pack-sum's; **to 5 %** = in-session wall seconds until the best-so-far is within 5 % of the best any "
        "variant reached on that workload and seed ('-': never); **1st round** = the best any variant reached on that "
        "workload and seed (in session) over the best of this session's first round: TenSet's top-k score of the "
        "first round's picks, made by the untrained model (at random) or by the prior (1.0: the first round already "
        "held the best kernel found).",
        "",
        "| variant | speed vs pack-sum (geomean) | wall vs pack-sum (geomean) |",
        "|---|---|---|",
    ]
    for v in res.get("variants") or VARIANTS:  # the variants this run tuned (a results file without them: all)
        g, w = a["geomean_vs_baseline"].get(v), a["wall_vs_baseline"].get(v)
        L.append(f"| {v} | {'-' if g is None else f'{g:.3f}'} | {'-' if w is None else f'{w:.2f}'} |")
    L += [
        "",
        "| workload, seed | variant | best ms (re-measured, spread) | in session ms | 1st round | session s | "
        "to 5 % s | pruned (dropped / search-scored) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, row in a["per_workload"].items():
        for v, x in row.items():
            pr = x.get("pruning")
            pruned = (
                "-"
                if not pr
                else f"{x['dropped']} / "
                + ", ".join(f"{k} {n}" for k, n in pr.items() if k not in ("checked", "waived"))
                + f" of {pr['checked']} (waived {pr['waived']})"
            )
            best = "-" if x["best_ms"] is None else f"{x['best_ms']:.4f} ({100 * (x['spread'] or 0):.0f} %)"
            ttp = "-" if x["time_to_5pct_s"] is None else f"{x['time_to_5pct_s']:.0f}"
            first = "-" if x.get("first_round_score") is None else f"{x['first_round_score']:.2f}"
            L.append(
                f"| {key.replace('|', ', seed ')} | {v} | {best} | {x['best_session_ms']:.4f} | {first} | "
                f"{x['seconds']:.0f} | "
                f"{ttp} | {pruned} |"
            )
    if analysis and os.path.exists(analysis):
        with open(analysis) as f:
            L += ["", f.read().rstrip()]
    with open(os.path.join(results, "search_variants.md"), "w") as f:
        f.write("\n".join(L) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of: {', '.join(VARIANTS)}")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--db", default=os.path.join(ROOT, "benchmarks", "out", "search_variants.db"))
    ap.add_argument("--resume", action="store_true", help="keep the finished sessions of --db")
    ap.add_argument("--threads", type=int, default=_quiet.available_cores())
    ap.add_argument("--results", default=RESULTS)
    ap.add_argument(
        "--analysis",
        default=None,
        help="a Markdown file of words on the run, appended to the page (default: benchmarks/search_variants_analysis.md "
        "for the default --results, none otherwise)",
    )
    ap.add_argument("--force", action="store_true", help="run on a busy machine; the result is marked invalid")
    args = ap.parse_args()
    if args.analysis is None and os.path.abspath(args.results) == RESULTS:
        args.analysis = os.path.join(HERE, "search_variants_analysis.md")
    try:
        variants = parse_variants(args.variants)
    except ValueError as e:
        sys.exit(f"search_variants.py: {e}")
    from workbench import tvm_env
    from workbench.store import remove_store
    from workbench.workloads import registry

    workloads = args.workloads.split(",")
    for w in workloads:
        registry().get(w)
    seeds = list(range(args.seeds))
    target = tvm_env.host_target_dict(args.threads)
    _quiet.set_thread_env(args.threads)
    protocol = _quiet.Protocol("search_variants", args.threads, args.force, host_drift="record")
    protocol.start()
    t0 = time.time()
    os.makedirs(os.path.dirname(args.db), exist_ok=True)
    if not args.resume:
        remove_store(args.db)

    done = collect(args.db, args.trials, target) if os.path.exists(args.db) else {}
    for w in workloads:
        for seed in seeds:
            for v in variants:
                if (w, seed, v) in done:
                    print(f"[{time.time() - t0:6.0f}s] {w} seed {seed} {v}: kept", file=sys.stderr, flush=True)
                    continue
                protocol.phase(f"tuning {w} seed {seed} {v}")
                print(f"[{time.time() - t0:6.0f}s] {w} seed {seed} {v}", file=sys.stderr, flush=True)
                tune(w, v, args.trials, seed, args.db, target)
    runs = {
        k: r
        for k, r in collect(args.db, args.trials, target).items()
        if k[0] in workloads and k[1] in seeds and k[2] in variants
    }
    entries = {}
    for (w, _seed, _v), r in runs.items():
        if r["best_trace"]:
            entries.setdefault((w, r["best_hash"]), ((w, r["best_hash"]), w, {"trace": r["best_trace"]}))
    _quiet.quiesce()
    protocol.phase("re-measuring the bests")
    print(f"[{time.time() - t0:6.0f}s] re-measuring {len(entries)} programs x {args.repeats}", file=sys.stderr)
    from al_ansor import remeasure

    timed = remeasure(list(entries.values()), args.repeats, target)
    protocol.finish()
    res = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "command": "python benchmarks/search_variants.py " + " ".join(sys.argv[1:]),
        "git": _quiet.git_state(),
        "trials": args.trials,
        "seeds": seeds,
        "threads": args.threads,
        "repeats": args.repeats,
        "workloads": workloads,
        "variants": {v: VARIANTS[v] for v in variants},
        "target": target,
        "protocol": protocol.summary(),
        "wall_seconds": round(time.time() - t0, 1),
        "curves": {f"{w}|{s}|{v}": r["curve"] for (w, s, v), r in runs.items()},
    }
    res["analysis"] = analyse(runs, timed, workloads, seeds)
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, "search_variants.json"), "w") as f:
        json.dump(res, f, indent=1)
    write_md(res, args.results, args.analysis)
    for v, g in res["analysis"]["geomean_vs_baseline"].items():
        print(f"{v}: speed {g:.3f}x, wall {res['analysis']['wall_vs_baseline'][v]:.2f}x vs {BASELINE}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
