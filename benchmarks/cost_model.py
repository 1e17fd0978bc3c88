"""Offline evaluation of the cost models on measured programs: how well each model ranks programs of a
workload it has never seen (leave-one-workload-out) and of workloads it has (a random split).

    python benchmarks/cost_model.py --db benchmarks/out/al_ansor-design.db [--db OTHER.db ...]

The corpus is every successful record of the given stores (the features each session stored with its
records, the strategy one-hot included; latencies in ms under each strategy's deployment). A program
measured more than once in a workload (the same ``mod_hash``) counts once, at its median latency. For each
model in ``workbench.cost_model.COST_MODELS`` and each held-out workload W:

- ``lowo``: trained on every other workload's programs, asked to rank W's;
- ``split``: trained on a seeded random 80 % of every workload's programs, W's included, asked to rank the
  other 20 % of W's (the setting of Ansor's 0.851 pairwise accuracy).

Metrics, per held-out set (then the mean over workloads):

- pairwise accuracy: over all pairs of programs with different latencies, the fraction the model orders
  like the measurements;
- recall@k: how many of the k truly fastest programs are among the model's top k, over k;
- top-k score (TenSet): the best latency measured over the best latency among the model's top k picks
  (1.0: the model's top k hold the fastest program).

Rule-based pruning (``workbench.pruning``): for each rule alone and all together, the share of each
workload's measured programs the rule rejects, the share of its fastest 10 % it rejects, whether its best
program survives, and each model's lowo top-k score when the model picks among the kept programs only.

``--holdout F`` trains every model with the preset field ``xgb_holdout`` = F (early stopping on a held-out
share of the training programs instead of the training loss). ``--validation`` is for choosing such settings:
the split setting only, by ``--folds``-fold cross-validation inside the training 80 % (each part tested in turn on
a model trained on the others, metrics averaged over the folds), so neither the page's split test programs nor
lowo's held-out workloads are looked at; it prints its table and writes
``benchmarks/out/cost_model_validation.json``, never the page. ``--train-share S`` trains each fold's model on
that share of its training programs: run at several shares, a learning curve.

A random ranking is reported beside them (its expectation: pairwise 0.5, top-k by sampling). Nothing is
timed, so the machine's load does not change the figures (the stores' latencies were measured when they
were tuned, each under its own page's protocol); the run is deterministic for a seed.

Writes ``docs/results/cost_model.md`` and ``cost_model.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(ROOT, "docs", "results")
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

KS = (1, 5, 10)


def load_corpus(dbs: list[str]) -> dict:
    """workload -> list of (features, latency_ms): successful, de-duplicated programs of every store."""
    from workbench import RecordStore

    by_hash: dict = {}
    for db in dbs:
        store = RecordStore(db, readonly=True)
        try:
            workloads = sorted({s["workload"] for s in store.sessions()})
            for w in workloads:
                for strategy, feats, lat, mod_hash in store.training_rows(w):
                    if lat is None or feats is None or not len(feats):
                        continue
                    key = (w, strategy, mod_hash)
                    by_hash.setdefault(key, [feats, []])[1].append(lat)
        finally:
            store.close()
    corpus: dict = {}
    for (w, _strategy, _h), (feats, lats) in by_hash.items():
        corpus.setdefault(w, []).append((feats, statistics.median(lats)))
    return corpus


def corpus_protocol(db: str) -> dict | None:
    """The benchmark protocol record ``corpus.py`` wrote beside the store (``<store>.protocol.json``: how and when
    its programs were measured), or None for a store made otherwise."""
    path = os.path.splitext(db)[0] + ".protocol.json"
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def pairwise_accuracy(pred: np.ndarray, lat: np.ndarray) -> float:
    """Fraction of pairs with different latencies that ``pred`` (higher = faster) orders correctly."""
    i, j = np.nonzero(lat[:, None] < lat[None, :])  # i faster than j
    if not len(i):
        return float("nan")
    return float(np.mean(pred[i] > pred[j]))


def recall_at_k(pred: np.ndarray, lat: np.ndarray, k: int) -> float:
    k = min(k, len(lat))
    return len(set(np.argsort(-pred, kind="stable")[:k]) & set(np.argsort(lat, kind="stable")[:k])) / k


def top_k_score(pred: np.ndarray, lat: np.ndarray, k: int) -> float:
    k = min(k, len(lat))
    return float(lat.min() / lat[np.argsort(-pred, kind="stable")[:k]].min())


def metrics(pred: np.ndarray, lat: np.ndarray) -> dict:
    out = {"n": len(lat), "pairwise": pairwise_accuracy(pred, lat)}
    for k in KS:
        out[f"recall@{k}"] = recall_at_k(pred, lat, k)
        out[f"top{k}"] = top_k_score(pred, lat, k)
    return out


def random_metrics(lat: np.ndarray, rng, draws: int = 200) -> dict:
    """The expected metrics of a random ranking (mean over ``draws`` shuffles)."""
    got = [metrics(rng.permutation(len(lat)).astype(float), lat) for _ in range(draws)]
    return {k: float(np.mean([g[k] for g in got])) for k in got[0]}


def corpus_machine(db: str, cores: int | None = None):
    """The pruning rules' view of the machine the store's first session was tuned for."""
    from workbench import RecordStore, pruning, tvm_env

    store = RecordStore(db, readonly=True)
    try:
        target = store.sessions()[0]["target"]
    finally:
        store.close()
    target = dict(target)
    if cores is not None:
        target["num-cores"] = cores
    tvm_env.setup()
    return pruning.Machine.of_target(tvm_env.make_target(target))


def fit(model_name: str, train: list, seed: int, nthread: int, holdout: float = 0.0):
    from workbench import cost_model, presets

    p = presets.get("quick", xgb_holdout=holdout)
    m = cost_model.make_cost_model(model_name, seed, p, nthread)
    m.warmup = 1
    for w, feats, lat in train:
        m.add(feats, lat, w)
    t0 = time.time()
    if not m.train():
        raise RuntimeError(f"{model_name}: nothing to train on")
    return m, time.time() - t0


def splits(
    corpus: dict, workloads: list[str], rng, split_fraction: float = 0.8, folds: int = 0, train_share: float = 1.0
) -> dict:
    """Workload -> [(train indices, test indices), ...], one seeded permutation per workload: the page's split
    (one pair: the first ``split_fraction`` to train, the rest to test) or, with ``folds`` > 1, that split's
    training part cut into ``folds`` parts, each tested in turn on a model trained on the others (cross-validation
    that never touches the page's test programs), trained on the first ``train_share`` of those others only (a
    learning curve: how the metrics grow with programs per workload)."""
    out = {}
    for w in workloads:
        perm = rng.permutation(len(corpus[w]))
        cut = int(round(split_fraction * len(perm)))
        if folds > 1:
            parts = np.array_split(perm[:cut], folds)
            trains = [np.concatenate(parts[:i] + parts[i + 1 :]) for i in range(folds)]
            out[w] = [(t[: max(2, int(round(train_share * len(t))))], parts[i]) for i, t in enumerate(trains)]
        else:
            out[w] = [(perm[:cut], perm[cut:])]
    return out


def _fold_mean(per_fold: list[dict]) -> dict:
    """Metrics averaged over folds; ``n`` the programs tested in all of them."""
    return {
        k: (sum(m[k] for m in per_fold) if k == "n" else float(np.mean([m[k] for m in per_fold]))) for k in per_fold[0]
    }


def evaluate(
    corpus: dict,
    models: list[str],
    seed: int,
    nthread: int,
    split_fraction: float = 0.8,
    lowo_preds: dict | None = None,
    holdout: float = 0.0,
    validation: bool = False,
    folds: int = 5,
    train_share: float = 1.0,
) -> dict:
    """Every model's lowo and split metrics. ``validation``: the split setting only, by ``folds``-fold
    cross-validation inside the training 80 % (the same seeded 80 % as without it; metrics averaged over the
    folds), so settings are chosen without looking at the programs the page's split figures are measured on, nor
    at lowo's held-out workloads; ``train_share``: each fold's model trained on that share of its training
    programs."""
    if validation and folds < 2:
        raise ValueError(f"validation needs at least 2 folds, got {folds}")  # one would test on the page's programs
    rng = np.random.default_rng(seed)
    workloads = sorted(w for w, progs in corpus.items() if len(progs) >= 20)
    # one seeded split per workload, shared by every model
    split = splits(corpus, workloads, rng, split_fraction, folds if validation else 0, train_share)
    out = {
        "workloads": {w: {"programs": len(corpus[w])} for w in workloads},
        "models": {},
        "holdout": holdout,
        "validation": validation,
        "folds": folds if validation else 0,
        "train_share": train_share if validation else 1.0,
    }
    for w in workloads:
        lat = np.array([lat for _, lat in corpus[w]])
        out["workloads"][w]["random_lowo"] = random_metrics(lat, rng)
        out["workloads"][w]["random_split"] = _fold_mean([random_metrics(lat[test], rng) for _, test in split[w]])
    for name in models:
        res = out["models"][name] = {"lowo": {}, "split": {}, "train_s": []}
        for w in workloads if not validation else ():
            train = [(v, f, lat) for v in workloads if v != w for f, lat in corpus[v]]
            m, secs = fit(name, train, seed, nthread, holdout)
            res["train_s"].append(secs)
            feats = [f for f, _ in corpus[w]]
            lat = np.array([lat for _, lat in corpus[w]])
            pred = m.predict(feats)
            res["lowo"][w] = metrics(pred, lat)
            if lowo_preds is not None:
                lowo_preds[(name, w)] = pred
        per_fold: dict = {w: [] for w in workloads}
        for f in range(len(split[workloads[0]])):
            train = [(v, corpus[v][i][0], corpus[v][i][1]) for v in workloads for i in split[v][f][0]]
            m, secs = fit(name, train, seed, nthread, holdout)
            res["train_s"].append(secs)
            for w in workloads:
                test = split[w][f][1]
                per_fold[w].append(
                    metrics(m.predict([corpus[w][i][0] for i in test]), np.array([corpus[w][i][1] for i in test]))
                )
        res["split"] = {w: _fold_mean(v) for w, v in per_fold.items()}
    return out


def rule_sets() -> dict:
    """Name -> rule names: each rule alone, then all of them."""
    from workbench import pruning

    return {**{n: (n,) for n in pruning.RULES}, "all": tuple(pruning.RULES)}


def evaluate_pruning(corpus: dict, machine, lowo_preds: dict, models: list[str], top_share: float = 0.1) -> dict:
    """What each rule set removes from every workload's measured programs, and the models' lowo top-k picks
    made among the programs it keeps (pruning before the model) vs among all of them."""
    from workbench import pruning

    workloads = sorted({w for _, w in lowo_preds})
    out = {
        "machine": {"lanes": machine.lanes, "cores": machine.cores},
        "top_share": top_share,
        "models": list(models),
        "sets": {},
    }
    for set_name, rules in rule_sets().items():
        judge = pruning.Pruner(rules, machine)
        per_w = {}
        for w in workloads:
            lat = np.array([lat for _, lat in corpus[w]])
            pruned = np.array([judge.first_violation(f) is not None for f, _ in corpus[w]])
            top = lat <= np.quantile(lat, top_share)
            kept = ~pruned
            row = {
                "pruned": float(pruned.mean()),
                "pruned_of_top": float(pruned[top].mean()),
                "best_kept_over_best": float(lat[kept].min() / lat.min()) if kept.any() else float("nan"),
            }
            for name in models:
                pred = np.asarray(lowo_preds[(name, w)], dtype=float)
                for k in KS:
                    # the model picks among the kept programs only: fewer than k kept means fewer picks
                    picks = lat[kept][np.argsort(-pred[kept], kind="stable")[:k]] if kept.any() else None
                    row[f"{name}:top{k}"] = (
                        float(lat.min() / picks.min()) if picks is not None else top_k_score(pred, lat, k)
                    )
            per_w[w] = row
        out["sets"][set_name] = per_w
    return out


def _mean(per_w: dict, key: str) -> float:
    xs = [m[key] for m in per_w.values() if not np.isnan(m[key])]
    return float(np.mean(xs)) if xs else float("nan")


def validation_table(res: dict) -> str:
    """The split metrics of a ``--validation`` run, one markdown row per model (means over workloads)."""
    cols = ["pairwise"] + [f"recall@{k}" for k in KS] + [f"top{k}" for k in KS]
    L = [
        f"validation: {res.get('folds', 1)}-fold cross-validation inside the training programs, means over the "
        f"folds, holdout {res.get('holdout', 0.0)}, each fold trained on {res.get('train_share', 1.0):.0%} of its "
        "training programs:",
        "| model | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    rnd = {w: v["random_split"] for w, v in res["workloads"].items()}
    L.append("| random | " + " | ".join(f"{_mean(rnd, c):.3f}" for c in cols) + " |")
    for name, r in res["models"].items():
        L.append(f"| {name} | " + " | ".join(f"{_mean(r['split'], c):.3f}" for c in cols) + " |")
    return "\n".join(L)


def write_report(res: dict, results: str) -> None:
    os.makedirs(results, exist_ok=True)
    with open(os.path.join(results, "cost_model.json"), "w") as f:
        json.dump(res, f, indent=1)
    cols = ["pairwise"] + [f"recall@{k}" for k in KS] + [f"top{k}" for k in KS]
    L = [
        "# Cost models, offline: ranking programs of seen and unseen workloads",
        "",
        f"Produced by `{res['command']}` at commit `{(res['git'].get('commit') or 'unknown')[:12]}`"
        + (" + uncommitted changes" if res["git"].get("dirty") else "")
        + f" on {res['date']} in {res['wall_s'] / 60:.1f} min. Nothing is timed: the figures do not depend on "
        "the machine's load. Corpus: every successful record of "
        + ", ".join(f"`{d}`" for d in res["dbs"])
        + f" ({sum(w['programs'] for w in res['workloads'].values())} distinct programs of "
        f"{len(res['workloads'])} workloads with at least 20; a program measured several times counts once, at "
        "its median latency). Definitions: `benchmarks/cost_model.py`'s docstring. Early stopping watches "
        + (
            f"a held-out {res['holdout']:.0%} of each workload's training programs (preset field `xgb_holdout`), "
            "then each model is refitted on all of them with that many trees."
            if res.get("holdout")
            else "the training loss (preset field `xgb_holdout` = 0, Ansor's way)."
        ),
        "",
    ]
    import _quiet
    from corpus import CORPUS_DRIFT_SCOPE

    for db, proto in (res.get("corpus_protocols") or {}).items():
        if proto is None:
            L += [f"How `{db}` was measured: no protocol record beside it (not a `corpus.py` store).", ""]
            continue
        how = f"`benchmarks/corpus.py --set {proto.get('set')} --trials {proto.get('trials')}`"
        L += [f"How `{db}` was measured ({how}, {len(proto.get('workloads') or [])} workloads):", ""]
        L += [_quiet.summary_markdown(dict(proto, drift_scope=proto.get("drift_scope") or CORPUS_DRIFT_SCOPE))]
    L += [
        "**lowo**: trained on the other workloads, ranking a workload it has never seen (what a prior does on a "
        "new workload's first rounds). **split**: trained on a random 80 % of every workload, ranking the other "
        "20 % (Ansor's setting: 0.851 pairwise accuracy). Means over workloads.",
        "",
        "| model | setting | " + " | ".join(cols) + " |",
        "|---|---|" + "---|" * len(cols),
    ]
    for setting in ("lowo", "split"):
        rnd = {w: v[f"random_{setting}"] for w, v in res["workloads"].items()}
        L.append(f"| random | {setting} | " + " | ".join(f"{_mean(rnd, c):.3f}" for c in cols) + " |")
        for name, r in res["models"].items():
            L.append(f"| {name} | {setting} | " + " | ".join(f"{_mean(r[setting], c):.3f}" for c in cols) + " |")
    L += [
        "",
        "### Per workload (lowo: pairwise accuracy / top-1 score)",
        "",
        "| workload | programs | " + " | ".join(res["models"]) + " | random |",
        "|---|---|" + "---|" * (len(res["models"]) + 1),
    ]
    for w, v in res["workloads"].items():
        cells = [f"{r['lowo'][w]['pairwise']:.3f} / {r['lowo'][w]['top1']:.2f}" for r in res["models"].values()]
        rnd = v["random_lowo"]
        L.append(f"| {w} | {v['programs']} | " + " | ".join(cells) + f" | {rnd['pairwise']:.3f} / {rnd['top1']:.2f} |")
    L += [
        "",
        "Training time per fit (s): "
        + ", ".join(
            f"{n} {np.median(r['train_s']):.1f} (median of {len(r['train_s'])})" for n, r in res["models"].items()
        )
        + ".",
        "",
    ]
    pr = res.get("pruning")
    if pr:
        models = pr["models"]
        L += [
            "### Rule-based pruning (workbench/pruning.py) on the measured programs",
            "",
            f"The rules judged with {pr['machine']['lanes']} SIMD lanes and {pr['machine']['cores']} cores (the "
            "machine the corpus was measured on). **pruned**: share of a workload's measured programs the rules "
            f"reject; **of top {pr['top_share']:.0%}**: share of its fastest {pr['top_share']:.0%} they reject "
            "(a good rule: near 0); **best kept**: fastest kept over fastest measured (1.000: the best survives). "
            "Then each model's lowo top-k score when its picks are made among the kept programs only (pruning "
            "before the model) - compare with the 'none' row. Means over workloads; the measured programs are "
            "what the search already chose to measure, so the share of the raw schedule space a rule removes is "
            "larger.",
            "",
            "| rules | pruned | of top | best kept | " + " | ".join(f"{m} top{k}" for m in models for k in KS) + " |",
            "|---|---|---|---|" + "---|" * (len(models) * len(KS)),
        ]
        none_cells = [f"{_mean(res['models'][m]['lowo'], f'top{k}'):.3f}" for m in models for k in KS]
        L.append("| none | 0.000 | 0.000 | 1.000 | " + " | ".join(none_cells) + " |")
        for set_name, per_w in pr["sets"].items():
            cells = [f"{_mean(per_w, f'{m}:top{k}'):.3f}" for m in models for k in KS]
            worst = max(v["best_kept_over_best"] for v in per_w.values())
            L.append(
                f"| {set_name} | {_mean(per_w, 'pruned'):.3f} | {_mean(per_w, 'pruned_of_top'):.3f} | "
                f"{_mean(per_w, 'best_kept_over_best'):.3f} (worst {worst:.3f}) | " + " | ".join(cells) + " |"
            )
        L.append("")
    analysis = os.path.join(HERE, "cost_model_analysis.md")  # the hand-written reading of the latest run
    if os.path.exists(analysis) and results == RESULTS:
        with open(analysis) as f:
            L += ["", f.read().rstrip(), ""]
    with open(os.path.join(results, "cost_model.md"), "w") as f:
        f.write("\n".join(L))


def main():
    from workbench import cost_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", action="append", required=True, help="a records store of the corpus (repeatable)")
    ap.add_argument(
        "--models", default=",".join(cost_model.COST_MODELS), help="comma list of cost_model.COST_MODELS names"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="XGBoost threads")
    ap.add_argument("--results", default=RESULTS, help="where the page goes (default docs/results)")
    ap.add_argument(
        "--holdout",
        type=float,
        default=0.0,
        help="preset field xgb_holdout for every model: the share of training programs early stopping watches",
    )
    ap.add_argument(
        "--validation",
        action="store_true",
        help="choose settings: split setting only, by --folds-fold cross-validation inside the training programs; "
        "writes benchmarks/out/cost_model_validation.json and prints its table, never the page",
    )
    ap.add_argument(
        "--folds", type=int, default=5, help="with --validation: parts of the training programs, each tested in turn"
    )
    ap.add_argument(
        "--train-share",
        type=float,
        default=1.0,
        help="with --validation: train each fold's model on this share of its training programs (a learning curve)",
    )
    ap.add_argument(
        "--cores",
        type=int,
        default=None,
        help="cores the pruning rules assume (default: the num-cores of the first store's first session)",
    )
    args = ap.parse_args()
    models = args.models.split(",")
    bad = [m for m in models if m not in cost_model.COST_MODELS]
    if bad:
        sys.exit(f"cost_model.py: unknown model {bad[0]!r}; valid: {', '.join(cost_model.COST_MODELS)}")
    if args.folds < 2:
        sys.exit(f"cost_model.py: --folds must be at least 2, got {args.folds}")
    if not 0 < args.train_share <= 1:
        sys.exit(f"cost_model.py: --train-share must be a share in (0, 1], got {args.train_share}")
    if args.train_share < 1 and not args.validation:
        sys.exit("cost_model.py: --train-share is for --validation only (the page trains on every training program)")
    if not 0 <= args.holdout < 1:
        sys.exit(f"cost_model.py: --holdout must be a share in [0, 1), got {args.holdout}")
    missing = [d for d in args.db if not os.path.exists(d)]
    if missing:
        sys.exit(f"cost_model.py: no such store {missing[0]!r}")
    import _quiet

    t0 = time.time()
    corpus = load_corpus(args.db)
    if sum(len(v) >= 20 for v in corpus.values()) < 2:
        sys.exit("cost_model.py: the stores hold fewer than two workloads with 20 measured programs each")
    lowo_preds: dict = {}
    res = evaluate(
        corpus,
        models,
        args.seed,
        args.threads,
        lowo_preds=lowo_preds,
        holdout=args.holdout,
        validation=args.validation,
        folds=args.folds,
        train_share=args.train_share,
    )
    if not args.validation:
        res["pruning"] = evaluate_pruning(corpus, corpus_machine(args.db[0], args.cores), lowo_preds, models)
    res.update(
        dbs=list(args.db),
        corpus_protocols={d: corpus_protocol(d) for d in args.db},
        command="python benchmarks/cost_model.py " + " ".join(sys.argv[1:]),
        git=_quiet.git_state(),
        date=time.strftime("%Y-%m-%d %H:%M"),
        wall_s=round(time.time() - t0, 1),
        seed=args.seed,
    )
    if args.validation:
        print(validation_table(res))
        out = os.path.join(HERE, "out", "cost_model_validation.json")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            json.dump(res, f, indent=1)
        print(f"wrote {out}")
        return
    write_report(res, args.results)
    print(f"wrote {os.path.join(args.results, 'cost_model.md')}")


if __name__ == "__main__":
    main()
