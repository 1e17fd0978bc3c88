"""AL-Ansor reproduction: adaptive layout strategy vs each fixed strategy at equal trials.

For each ResNet-18 conv layer, four methods get the same trial budget and seed:
Ansor with one fixed weight-layout strategy (no-rewrite = NO_REWRITE,
transform-stage = INSERT_TRANSFORM_STAGE, pre-transformed =
REWRITE_FOR_PRE_TRANSFORMED), and the adaptive controller choosing among those
three (plus, with --with-packed, the fixed blocked layout) with one shared
cost model. Each method's best program is then rebuilt from its stored trace
and re-measured, all methods interleaved in a shuffled order, ``--repeats``
times; the median is its latency, reported with its spread. Latency is the
*deployment* latency of the strategy: transform-stage pays its weight copy on
every call, the others do not (their transform runs once, offline).

The run follows the benchmark protocol (``_quiet.py``): a quiet check before the
start, before every tuning session and before the re-measurement (status 3 and
one line when the machine is busy; ``--force`` marks the result invalid), the
calibration probe before and after, every thread pool sized to ``--threads``.

    python benchmarks/al_ansor.py            # quick: 6 layers x 128 trials, 1 seed
    python benchmarks/al_ansor.py --full     # 11 layers x 128 trials, 3 seeds

writes docs/results/al_ansor.md, al_ansor.json and al_ansor_curves.html.
"""

from __future__ import annotations

import argparse
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

QUICK_LAYERS = ["resnet18.conv1", "resnet18.conv2", "resnet18.conv5", "resnet18.conv8", "resnet18.conv11",
                "resnet18.conv7"]
FIXED = ["no-rewrite", "transform-stage", "pre-transformed"]
PAPER = {"no-rewrite": 13.81, "transform-stage": 12.41, "pre-transformed": 16.59}  # abstract; mapping inferred


def tune(layer, method, trials, seed, db, arms, per_round, target):
    from workbench import TuningSession

    strategy = "auto:" + ",".join(arms) if method == "adaptive" else method
    s = TuningSession(layer, trials=trials, seed=seed, db=db, strategy=strategy, trials_per_round=per_round,
                      target=target)
    t = time.time()
    summ = s.run()
    rec = s.records()
    return {"session_id": s.session_id, "summary": summ, "seconds": time.time() - t,
            "alloc": rec.groupby("strategy").size().to_dict(),
            "curve": _curve(rec)}


def _curve(rec):
    best, out = math.inf, []
    for lat, err in zip(rec["latency_ms"], rec["error_class"]):
        if lat is not None and not (isinstance(err, str)) and not math.isnan(lat):
            best = min(best, lat)
        out.append(None if math.isinf(best) else best)
    return out


def collect(db, need_all=True):
    """Runs of a (possibly interrupted) benchmark store: the layers whose four methods all finished."""
    from workbench import RecordStore

    store = RecordStore(db, readonly=True)
    runs = {}
    for sess in store.sessions():
        rec = store.records(session_id=sess["id"])
        # A session whose process died after its last trial (before its status was written) is complete too.
        if sess["status"] != "finished" and len(rec) < sess["trials"]:
            continue
        m = "adaptive" if sess["strategy_arg"].startswith("auto") else sess["strategy_arg"]
        elapsed = float(rec["elapsed_s"].max()) if len(rec) else 0.0
        runs[(sess["workload"], sess["seed"], m)] = {"target": sess["target"],
            "session_id": sess["id"], "seconds": elapsed, "alloc": rec.groupby("strategy").size().to_dict(),
            "curve": _curve(rec), "trials": len(rec)}
    if not need_all:
        return runs, None, None
    complete = {}
    for (layer, seed, m) in runs:
        complete.setdefault((layer, seed), set()).add(m)
    keep = {k for k, ms_ in complete.items() if ms_ >= set(FIXED + ["adaptive"])}
    runs = {k: v for k, v in runs.items() if (k[0], k[1]) in keep}
    layers = list(dict.fromkeys(k[0] for k in runs))
    seeds = sorted({k[1] for k in runs})
    return runs, layers, seeds


def remeasure(entries, repeats, target):
    """entries: list of (key, workload, record) -> {key: {"median_ms", "spread", "n", "samples_ms"}}, the
    methods interleaved in shuffled order (one library, TVM, in one runner process)."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.s_tir import meta_schedule as ms

    from workbench import measure, noise, space
    from workbench.workloads import registry

    builder = measure.Builder(target, workers=2)
    runner = measure.Runner(target["num-cores"], number=3, repeat=3, min_repeat_ms=50)
    strip = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)
    built = {}
    try:
        mods, keys, shapes = [], [], {}
        for key, layer, rec in entries:
            w = registry().get(layer)
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
                    if r.latency_s:
                        times[k].append(r.latency_s * 1e3)
        return {k: {"median_ms": float(np.median(v)) if v else None, "spread": noise.spread(v), "n": len(v),
                    "samples_ms": [round(x, 5) for x in v]} for k, v in times.items()}
    finally:
        for p in built.values():
            builder.discard(p)
        builder.close()
        runner.close()


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return float(np.exp(np.mean(np.log(xs)))) if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--trials-per-round", type=int, default=8,
                    help="batch size for every method (small, so the adaptive controller gets rounds after warm-up)")
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--layers", default=None, help="comma list of workload names")
    ap.add_argument("--with-packed", action="store_true", help="give the adaptive controller the packed arm too")
    ap.add_argument("--db", default=os.path.join(ROOT, "benchmarks", "out", "al_ansor.db"))
    ap.add_argument("--threads", type=int, default=_quiet.available_cores(),
                    help="cores for tuning and timing (TVM_NUM_THREADS, OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, the "
                         "target's num-cores; default: all available, %(default)s)")
    ap.add_argument("--force", action="store_true",
                    help="run even when the machine is not quiet; the result is then marked invalid")
    ap.add_argument("--resume", action="store_true",
                    help="keep --db and the sessions in it that finished with --trials trials; tune the rest")
    ap.add_argument("--rerun", default=None,
                    help="with --resume: tune these methods again (comma list, e.g. adaptive after a controller change)")
    ap.add_argument("--report-only", action="store_true",
                    help="no tuning: report on the layers whose four methods all finished in --db")
    ap.add_argument("--markdown-only", action="store_true",
                    help="no tuning, no timing: rewrite al_ansor.md from al_ansor.json (e.g. after editing the analysis)")
    args = ap.parse_args()
    if args.markdown_only:
        with open(os.path.join(RESULTS, "al_ansor.json")) as f:
            _write_md(json.load(f), args)
        return

    from workbench import RecordStore, tvm_env
    from workbench.workloads import registry

    layers = args.layers.split(",") if args.layers else (
        [w.name for w in registry().network("resnet18")] if args.full else QUICK_LAYERS)
    seeds = list(range(args.seeds or (3 if args.full else 1)))
    arms = FIXED + (["packed"] if args.with_packed else [])
    methods = FIXED + ["adaptive"]
    target = tvm_env.host_target_dict(args.threads)
    t0 = time.time()
    if args.report_only:
        runs, layers, seeds = collect(args.db)
        target = next(iter(runs.values()))["target"]
    threads = int(target["num-cores"])
    _quiet.set_thread_env(threads)
    protocol = _quiet.Protocol("al_ansor", threads, args.force)
    protocol.start()
    if not args.report_only:
        os.makedirs(os.path.dirname(args.db), exist_ok=True)
        done = {}
        if args.resume and os.path.exists(args.db):
            prev, _, _ = collect(args.db, need_all=False)
            rerun = set(args.rerun.split(",")) if args.rerun else set()
            done = {k: v for k, v in prev.items() if v["trials"] == args.trials and k[2] not in rerun}
        else:
            from workbench.store import remove_store

            remove_store(args.db)
        runs = {}
        for layer in layers:
            for seed in seeds:
                for m in methods:
                    if (layer, seed, m) in done:
                        runs[(layer, seed, m)] = done[(layer, seed, m)]
                        print(f"[{time.time() - t0:7.0f}s] {layer} seed {seed} {m}: kept from {args.db}",
                              file=sys.stderr, flush=True)
                        continue
                    protocol.phase(f"tuning {layer} seed {seed} {m}")
                    print(f"[{time.time() - t0:7.0f}s] {layer} seed {seed} {m}", file=sys.stderr, flush=True)
                    runs[(layer, seed, m)] = tune(layer, m, args.trials, seed, args.db, arms, args.trials_per_round,
                                                  target)
    store = RecordStore(args.db, readonly=True)
    entries = []
    for (layer, seed, m), r in runs.items():
        recs = store.records(session_id=r["session_id"], with_trace=True)
        ok = recs[recs["error_class"].isna() & recs["verified"]]
        if len(ok):
            best = ok.loc[ok["latency_ms"].idxmin()]
            entries.append(((layer, seed, m), layer, {"trace": best["trace"], "strategy": best["strategy"]}))
            r["best_strategy"] = best["strategy"]
    _quiet.quiesce()
    protocol.phase("re-measuring the winners")
    print(f"[{time.time() - t0:7.0f}s] re-measuring {len(entries)} winners x {args.repeats}", file=sys.stderr)
    timed = remeasure(entries, args.repeats, target)
    protocol.finish()
    lat = {k: v["median_ms"] for k, v in timed.items()}

    per_layer, spread = {}, {}
    for layer in layers:
        per_layer[layer] = {m: geomean([lat.get((layer, s, m)) for s in seeds]) for m in methods}
        # the largest spread over seeds: (max - min) / median of the re-measured samples
        spread[layer] = {m: max((timed[(layer, s, m)]["spread"] for s in seeds
                                 if (layer, s, m) in timed and timed[(layer, s, m)]["spread"] is not None),
                                default=None) for m in methods}
    improvement = {}
    for f in FIXED:
        ratios = [per_layer[l][f] / per_layer[l]["adaptive"] for l in layers
                  if per_layer[l][f] and per_layer[l]["adaptive"]]
        improvement[f] = {"mean_pct": 100 * (float(np.mean(ratios)) - 1) if ratios else None,
                          "geomean_pct": 100 * (geomean(ratios) - 1) if ratios else None,
                          "wins": int(sum(r > 1.0 for r in ratios)), "layers": len(ratios)}
    best_fixed = {l: min(per_layer[l][f] for f in FIXED if per_layer[l][f]) for l in layers}
    vs_best_fixed = [best_fixed[l] / per_layer[l]["adaptive"] for l in layers if per_layer[l]["adaptive"]]
    alloc = {l: runs[(l, seeds[0], "adaptive")]["alloc"] for l in layers}
    if args.report_only:
        args.trials = max(r["trials"] for r in runs.values())
        arms = sorted({s for r in runs.values() for s in r["alloc"]}, key=lambda s: (FIXED + ["packed"]).index(s))
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"), "trials": args.trials, "trials_per_round": args.trials_per_round,
        "seeds": seeds, "layers": layers,
        "arms": arms, "repeats": args.repeats, "target": target,
        "latency_ms": {l: per_layer[l] for l in layers}, "spread": {l: spread[l] for l in layers},
        "remeasured": {f"{k[0]}|{k[1]}|{k[2]}": v for k, v in timed.items()},
        "improvement_of_adaptive": improvement,
        "adaptive_vs_best_fixed_geomean_pct": 100 * (geomean(vs_best_fixed) - 1) if vs_best_fixed else None,
        "allocation": alloc, "winner_strategy": {f"{k[0]}|{k[1]}|{k[2]}": v.get("best_strategy") for k, v in runs.items()},
        "tuning_seconds": {f"{k[0]}|{k[1]}|{k[2]}": round(v["seconds"], 1) for k, v in runs.items()},
        "curves": {f"{k[0]}|{k[1]}|{k[2]}": v["curve"] for k, v in runs.items()},
        "wall_seconds": round(time.time() - t0, 1), "command": "python " + " ".join(sys.argv),
        "protocol": protocol.summary(),
    }
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "al_ansor.json"), "w") as f:
        json.dump(result, f, indent=1)
    _write_curves_html(result)
    _write_md(result, args)


def _write_curves_html(res):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    layers = res["layers"]
    fig = make_subplots(rows=len(layers), cols=1, subplot_titles=layers)
    colors = {"no-rewrite": "#1f77b4", "transform-stage": "#ff7f0e", "pre-transformed": "#2ca02c", "adaptive": "#d62728"}
    for i, l in enumerate(layers, 1):
        for m in FIXED + ["adaptive"]:
            c = res["curves"].get(f"{l}|{res['seeds'][0]}|{m}", [])
            fig.add_trace(go.Scatter(y=c, x=list(range(1, len(c) + 1)), name=m, legendgroup=m, showlegend=i == 1,
                                     line={"color": colors[m]}), row=i, col=1)
        fig.update_yaxes(title_text="best ms", type="log", row=i, col=1)
    fig.update_layout(height=300 * len(layers), title="Best-so-far latency per method (seed 0)")
    fig.write_html(os.path.join(RESULTS, "al_ansor_curves.html"), include_plotlyjs="cdn")


def _fmt(x, d=3):
    return "-" if x is None else f"{x:.{d}f}"


def _cell(res, layer, m, bold=False):
    v = _fmt(res["latency_ms"][layer][m])
    v = f"**{v}**" if bold else v
    sp = (res.get("spread") or {}).get(layer, {}).get(m)
    return v if sp is None else f"{v} ({100 * sp:.0f}%)"


def _write_md(res, args):
    L = ["# AL-Ansor reproduction: adaptive weight-layout strategy vs fixed strategies", "",
         _quiet.summary_markdown(res.get("protocol")),
         f"Measured {res['date']} on this machine ({res['target']['mcpu']}; tuned and timed with {res['target']['num-cores']} thread(s)). "
         f"{len(res['layers'])} ResNet-18 conv layers (NHWC, batch 1), {res['trials']} trials per method and layer, "
         f"seeds {res['seeds']}, preset `quick` with {res['trials_per_round']} trials per round. Adaptive arms: {', '.join(res['arms'])}. Each method's best program "
         f"was rebuilt from its trace and re-measured {res['repeats']}x, all methods interleaved in shuffled order; "
         "the median is shown (geometric mean over seeds), with its spread ((max - min) / median; the largest over "
         "seeds) in brackets when it was recorded. Latencies are deployment latencies: transform-stage "
         "includes its weight copy on every call, the others transform weights once, offline. Produced by "
         f"`{res.get('command') or 'python ' + ' '.join(sys.argv)}` in {res['wall_seconds'] / 60:.0f} min.", "",
         "## Latency per layer (ms, lower is better)", "",
         "| layer | no-rewrite | transform-stage | pre-transformed | adaptive | adaptive's winner |", "|---|---|---|---|---|---|"]
    for l in res["layers"]:
        L.append(f"| {l} | {_cell(res, l, 'no-rewrite')} | {_cell(res, l, 'transform-stage')} | "
                 f"{_cell(res, l, 'pre-transformed')} | {_cell(res, l, 'adaptive', bold=True)} | "
                 f"{res['winner_strategy'].get(l + '|' + str(res['seeds'][0]) + '|adaptive')} |")
    L += ["", "## Improvement of adaptive over each fixed strategy", "",
          "`lat_fixed / lat_adaptive - 1`, over layers.", "",
          "| vs fixed strategy | mean | geomean | layers where adaptive is faster | paper (abstract) |", "|---|---|---|---|---|"]
    for f in FIXED:
        im = res["improvement_of_adaptive"][f]
        L.append(f"| {f} | {_fmt(im['mean_pct'], 1)} % | {_fmt(im['geomean_pct'], 1)} % | {im['wins']} / {im['layers']} | "
                 f"{PAPER[f]} % |")
    L += ["", f"Adaptive vs the best fixed strategy of each layer (an oracle that knows the winner in advance): "
          f"geomean {_fmt(res['adaptive_vs_best_fixed_geomean_pct'], 1)} %.", "",
          "The paper's three numbers are from its abstract (13.81 / 12.41 / 16.59 %); which of its three fixed "
          "strategies each belongs to is not stated there, so the mapping to rows above is our reading.", "",
          "## How the controller allocated trials (seed 0)", "", "| layer | " + " | ".join(res["arms"]) + " |",
          "|---|" + "---|" * len(res["arms"])]
    for l in res["layers"]:
        a = res["allocation"][l]
        L.append(f"| {l} | " + " | ".join(str(a.get(s, 0)) for s in res["arms"]) + " |")
    L += ["", "## Best-so-far latency (ms) at trial checkpoints (seed 0)", "",
          "Interactive curves: [al_ansor_curves.html](al_ansor_curves.html).", ""]
    checks = [c for c in (16, 32, 64, 128, 256, 512) if c <= res["trials"]]
    L += ["| layer | method | " + " | ".join(f"@{c}" for c in checks) + " |", "|---|---|" + "---|" * len(checks)]
    for l in res["layers"]:
        for m in FIXED + ["adaptive"]:
            c = res["curves"].get(f"{l}|{res['seeds'][0]}|{m}", [])
            L.append(f"| {l} | {m} | " + " | ".join(_fmt(c[k - 1] if len(c) >= k else None) for k in checks) + " |")
    # The reading of the numbers is written by a person, kept beside the script, and appended as is.
    notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "al_ansor_analysis.md")
    if os.path.exists(notes):
        with open(notes) as f:
            L += ["", f.read().rstrip()]
    with open(os.path.join(RESULTS, "al_ansor.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
