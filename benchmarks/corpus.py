"""The project's own corpus of measured programs, for the cost models' offline evaluation and prior.

    python benchmarks/corpus.py [--set reduced|full] [--trials 64] [--db benchmarks/out/corpus.db] [--resume]
    python benchmarks/corpus.py --prior-only                                # (re)train the shipped priors
    python benchmarks/cost_model.py --db benchmarks/out/corpus.db       # then: how well each model ranks them

Tunes every workload of the set in its own session (quick preset, strategy ``auto`` so that every layout
strategy contributes programs, ``deterministic`` search, seed 0) into one records store; each record keeps the
features the session computed, which is what the cost models learn from. The sets are drawn from
``sample_workloads/``: Ansor's single-operator suite (``ansor_suite.json``: 1-D/2-D/3-D, grouped, dilated,
depthwise and transposed convolutions, matmul, capsule conv, norm, softmax) and its subgraphs
(``subgraphs.json``: conv+bn+relu, transpose+batch-matmul); ``reduced`` takes the first shape of every family,
``full`` every shape. The ResNet, MobileNet-V2 and AL-Ansor evaluation layers stay outside the corpus: they are
where a prior trained on it is tried online.

The run follows the benchmark protocol (``_quiet.py``) with ``host_drift="record"``: the labels the models
learn are latencies relative to the best of the same workload, tuned within minutes, so a host that is slower
for a spell is recorded, not refused. ``--resume`` keeps the finished sessions of ``--db`` and tunes the rest.
Writes nothing under ``docs/`` (the corpus is data; the page is ``cost_model.py``'s).

``--prior`` (after tuning) or ``--prior-only`` trains every cost model of ``workbench.cost_model.COST_MODELS``
on the whole corpus and saves it as the prior the package ships (``workbench/data/prior-<model>.json`` and its
``.meta.json``: corpus, programs, workloads, target, commit; ``workbench.prior``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import _quiet  # noqa: E402

FILES = ("ansor_suite.json", "subgraphs.json")
# what a slow spell of the host does to the corpus, said beside its protocol record (cost_model.py's page)
CORPUS_DRIFT_SCOPE = (
    "the models learn each program's latency relative to the best of its own workload, all tuned within minutes in "
    "one session, so a drift between workloads does not change the labels; one within a session does"
)


def workload_names(which: str) -> list[str]:
    """The corpus workloads: every shape of the families in FILES (``full``) or the first of each (``reduced``)."""
    names = []
    for f in FILES:
        with open(os.path.join(ROOT, "sample_workloads", f)) as fh:
            data = json.load(fh)
        names += [w["name"] for w in (data if isinstance(data, list) else data["workloads"])]
    if which == "full":
        return names
    seen, out = set(), []
    for n in names:
        family = n.split(".")[0] if "." in n else n.split("-")[0]
        if family not in seen:
            seen.add(family)
            out.append(n)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=["reduced", "full"], default="reduced")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--db", default=os.path.join(HERE, "out", "corpus.db"))
    ap.add_argument("--resume", action="store_true", help="keep the finished sessions of --db, tune the rest")
    ap.add_argument("--threads", type=int, default=_quiet.available_cores())
    ap.add_argument("--force", action="store_true", help="run on a busy machine (the corpus is then marked invalid)")
    ap.add_argument("--prior", action="store_true", help="after tuning, train and save the shipped priors")
    ap.add_argument("--prior-only", action="store_true", help="no tuning: train and save the priors from --db")
    args = ap.parse_args()
    if args.prior_only:
        if not os.path.exists(args.db):
            sys.exit(f"corpus.py: no corpus store {args.db!r}; run corpus.py first")
        for path in train_priors(args.db, args.threads):
            print(f"wrote {os.path.relpath(path, ROOT)}")
        return 0
    if args.trials < 8:
        sys.exit("corpus.py: --trials must be at least 8")
    from workbench import RecordStore, TuningSession, tvm_env
    from workbench.store import remove_store

    names = workload_names(args.set)
    _quiet.set_thread_env(args.threads)
    proto = _quiet.Protocol("corpus", args.threads, args.force, host_drift="record", drift_scope=CORPUS_DRIFT_SCOPE)
    proto.start()
    if not args.resume:
        remove_store(args.db)
    os.makedirs(os.path.dirname(os.path.abspath(args.db)), exist_ok=True)
    done = set()
    if os.path.exists(args.db):
        store = RecordStore(args.db, readonly=True)
        done = {s["workload"] for s in store.sessions() if s["status"] == "finished"}
        store.close()
    target = tvm_env.host_target_dict(args.threads)
    t0 = time.time()
    for i, name in enumerate(names):
        if name in done:
            continue
        proto.phase(f"tuning {name}")
        t = time.time()
        s = TuningSession(
            name, trials=args.trials, seed=0, db=args.db, strategy="auto", target=target, deterministic=True
        )
        summ = s.run()
        print(
            f"[{time.time() - t0:7.0f}s] {i + 1}/{len(names)} {name}: {summ['trials']} trials, best "
            f"{summ.get('best_latency_ms')} ms, {time.time() - t:.0f} s",
            flush=True,
        )
    proto.finish()
    meta = dict(proto.summary(), set=args.set, trials=args.trials, workloads=names)
    with open(os.path.splitext(args.db)[0] + ".protocol.json", "w") as f:
        json.dump(meta, f, indent=1)
    print(f"corpus: {len(names)} workloads in {args.db} ({'valid' if proto.valid else 'INVALID'})")
    if args.prior:
        for path in train_priors(args.db, args.threads):
            print(f"wrote {os.path.relpath(path, ROOT)}")
    return 0


def train_priors(db: str, threads: int, data_dir: str | None = None) -> list[str]:
    """Train every cost model on the whole corpus and save each as the shipped prior; returns the paths."""
    import cost_model as offline  # benchmarks/cost_model.py: the corpus loader

    from workbench import cost_model, presets, prior, tvm_env

    corpus = offline.load_corpus([db])
    meta = {
        "corpus": os.path.basename(db),
        "workloads": sorted(corpus),
        "programs": sum(len(v) for v in corpus.values()),
        "target": tvm_env.host_target_dict(threads),
        "git": _quiet.git_state().get("commit"),
        "date": time.strftime("%Y-%m-%d"),
    }
    paths = []
    for name in cost_model.COST_MODELS:
        m = cost_model.make_cost_model(name, 0, presets.get("quick"), threads)
        m.warmup = 1
        for w, progs in corpus.items():
            for feats, lat in progs:
                m.add(feats, lat, w)
        if not m.train():
            sys.exit(f"corpus.py: the {name} prior could not be trained (no successful programs in {db!r})")
        paths.append(prior.save(m, meta, data_dir or prior.DATA))
    return paths


if __name__ == "__main__":
    sys.exit(main())
