"""Arm policies compared offline, by replaying the fixed-strategy sessions of an AL-Ansor store.

    python benchmarks/al_ansor_sim.py [--db benchmarks/out/al_ansor-design.db | --ledger DIR] [--trials 128]

For every (layer, seed) whose three fixed sessions (no-rewrite, transform-stage, pre-transformed) are in the
store, a simulated adaptive session runs the real controller (``workbench.controller``) with each policy: when
it gives arm ``s`` its k-th round, the round's programs are the k-th round (``--trials-per-round`` records, in
order) of the fixed ``s`` session, and the arm's best is the best verified latency among them. The simulated
session ends at ``--trials``; its result is the best over its arms, compared with each fixed session's best after
the same trials. What it leaves out: an adaptive session's arms share one cost model and seed each other's
searches, so its rounds are not the fixed sessions' rounds; and the latencies are the sessions' own timings,
taken at different moments on a host that may drift. A diagnosis tool for choosing what to tune next (the
policy, the warm-up), not a result: results come from ``al_ansor.py``'s interleaved re-measurement.

``--ledger``: the runs of an ``al_ansor.py`` ledger folder instead of a store (another machine's runs, whose store
is gone). A ledger keeps each run's best-so-far curve, not its records, so a round's figure is its arm's best after
that round: the same to every policy that judges arms by their bests, not to ``ucb-gain``'s per-round gains, which
is left out then.

Prints one table (Markdown) to stdout; nothing is tuned or timed.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from workbench.controller import StatelessArmPolicy  # noqa: E402

FIXED = ["no-rewrite", "transform-stage", "pre-transformed"]
# (label, policy, warm-up rounds): the policies the controller offers, and the default with longer warm-ups
POLICIES = [
    ("optimistic-best", "optimistic-best", 1),
    ("optimistic-best, warm-up 2", "optimistic-best", 2),
    ("optimistic-best, warm-up 3", "optimistic-best", 3),
    ("projected-best", "projected-best", 1),
    ("ucb-gain", "ucb-gain", 1),
    ("halving", "halving", 1),
    ("uniform (mean of 20 seeds)", "uniform", 1),
    ("level-split (a candidate, not in the controller)", "level-split", 1),
]


class LevelSplitPolicy(StatelessArmPolicy):
    """A candidate policy, tried here before anything goes into the controller: keep every arm level with the best
    and split the trials evenly among them (fewest trials first); prune an arm only once it has had ``min_trials``
    and is more than ``margin`` times slower than the best any other live arm had after as many trials. Between two
    arms within a few per cent of each other the winner is mostly search luck, which committing to one gives up.
    (Replayed over the evaluation layers it came out level with the default, so it is not in the controller.)"""

    name = "level-split"

    def __init__(self, margin: float = 1.10, min_trials: int = 16):
        self.margin, self.min_trials = margin, min_trials

    def reward(self, arms, arm, round_best_ms, global_best_prev_ms) -> None:
        pass

    def scores(self, arms, live) -> dict:
        most = max((arms[s].trials for s in live), default=0)
        return {s: 1.0 + (most - arms[s].trials) / max(most, 1) for s in live}

    def prune(self, arms, live) -> list:
        out = []
        for s in live:
            a = arms[s]
            if a.trials < self.min_trials or len(live) - len(out) <= 1:
                continue
            rivals = [arms[o].best_after(a.trials) for o in live if o != s and arms[o].history]
            if rivals and a.best_ms > self.margin * min(rivals):
                out.append(s)
        return out


CANDIDATES = {LevelSplitPolicy.name: LevelSplitPolicy}


def fixed_rounds(db: str, per_round: int) -> dict:
    """{(layer, seed): {strategy: [round best latency or None, ...]}} for the fixed sessions of ``db``."""
    sys.path.insert(0, HERE)
    import al_ansor

    from workbench import RecordStore

    out: dict = {}
    store = RecordStore(db, readonly=True)
    try:
        for (layer, seed, method), run in al_ansor.collect(db).items():
            if method not in FIXED:
                continue
            rec = store.records(session_id=run["session_id"]).sort_values("trial")
            ok = rec["error_class"].isna() & rec["verified"].astype(bool) & rec["latency_ms"].notna()
            lat = np.where(ok, rec["latency_ms"].fillna(np.inf), np.inf)
            rounds = []
            for i in range(0, len(lat), per_round):
                b = float(np.min(lat[i : i + per_round]))
                rounds.append(b if math.isfinite(b) else None)
            out.setdefault((layer, seed), {})[method] = rounds
    finally:
        store.close()
    return {k: v for k, v in out.items() if set(v) == set(FIXED)}


def ledger_rounds(ledger: str, per_round: int) -> dict:
    """``fixed_rounds`` from a ledger folder: each round's figure is the arm's best after it (None before its first
    valid program)."""
    sys.path.insert(0, HERE)
    import al_ansor

    out: dict = {}
    for (layer, seed, method), run in al_ansor.load_ledger(ledger).items():
        if method not in FIXED:
            continue
        curve = run["curve"]
        rounds = [curve[min(i + per_round, len(curve)) - 1] for i in range(0, len(curve), per_round)]
        out.setdefault((layer, seed), {})[method] = rounds
    return {k: v for k, v in out.items() if set(v) == set(FIXED)}


def best_after(rounds: list, n_rounds: int) -> float:
    xs = [x for x in rounds[:n_rounds] if x is not None]
    return min(xs) if xs else math.inf


def simulate(rounds: dict, policy: str, warmup: int, trials: int, per_round: int, seed: int = 0) -> tuple:
    """(best latency, rounds per arm) of a simulated adaptive session over the arms' recorded rounds."""
    from workbench.controller import StrategyController, make_policy

    arm_policy = CANDIDATES[policy]() if policy in CANDIDATES else make_policy(policy, seed=seed)
    c = StrategyController(list(rounds), "auto", arm_policy, warmup_rounds=warmup)
    used = {s: 0 for s in rounds}
    best = {s: math.inf for s in rounds}
    g = None
    while sum(used.values()) * per_round < trials:
        d = c.choose()
        if d is None:
            break
        s = d.strategy
        if used[s] >= len(rounds[s]):
            c.mark_exhausted(s)
            continue
        rb = rounds[s][used[s]]
        used[s] += 1
        prev = g
        if rb is not None:
            best[s] = min(best[s], rb)
            g = rb if g is None else min(g, rb)
        c.observe(s, rb, prev, per_round)
    return min(best.values()), used


def geomean(xs):
    xs = [x for x in xs if x and math.isfinite(x) and x > 0]
    return float(np.exp(np.mean(np.log(xs)))) if xs else float("nan")


def table(data: dict, trials: int, per_round: int, policies: list = POLICIES) -> str:
    n = trials // per_round
    lines = [
        f"Simulated from the fixed sessions ({len(data)} layer/seed pairs, {trials} trials, {per_round} per round): "
        "each policy's best over the per-layer best fixed strategy's best after the same trials (geomean; > 1 is "
        "slower), how often it is within 2 %, and its trials per arm (mean over pairs, " + " / ".join(FIXED) + ").",
        "",
        "| policy | vs best fixed (geomean) | within 2 % | vs " + " | vs ".join(FIXED) + " | trials per arm |",
        "|---|---|---|" + "---|" * len(FIXED) + "---|",
    ]
    for label, policy, warmup in policies:
        ratios, within, per_fixed, alloc = [], 0, {s: [] for s in FIXED}, {s: [] for s in FIXED}
        for rounds in data.values():
            finals = {s: best_after(rounds[s], n) for s in FIXED}
            seeds = range(20) if policy == "uniform" else [0]
            sims = [simulate(rounds, policy, warmup, trials, per_round, seed) for seed in seeds]
            got = geomean([b for b, _ in sims])
            r = got / min(finals.values())
            ratios.append(r)
            within += r <= 1.02
            for s in FIXED:
                per_fixed[s].append(got / finals[s])
                alloc[s].append(np.mean([u[s] for _, u in sims]) * per_round)
        lines.append(
            f"| {label} | {geomean(ratios):.3f} | {within}/{len(ratios)} | "
            + " | ".join(f"{geomean(per_fixed[s]):.3f}" for s in FIXED)
            + " | "
            + " / ".join(f"{np.mean(alloc[s]):.0f}" for s in FIXED)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--db", default=os.path.join(HERE, "out", "al_ansor-design.db"))
    src.add_argument("--ledger", help="an al_ansor.py ledger folder instead of a store")
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--trials-per-round", type=int, default=8)
    args = ap.parse_args()
    if args.ledger:
        if not os.path.isdir(args.ledger):
            sys.exit(f"al_ansor_sim.py: no ledger folder {args.ledger!r}")
        where, data = args.ledger, ledger_rounds(args.ledger, args.trials_per_round)
        policies = [p for p in POLICIES if p[1] != "ucb-gain"]
    else:
        if not os.path.exists(args.db):
            sys.exit(f"al_ansor_sim.py: no store {args.db!r} (run benchmarks/al_ansor.py first)")
        where, data, policies = args.db, fixed_rounds(args.db, args.trials_per_round), POLICIES
    if not data:
        sys.exit(f"al_ansor_sim.py: {where!r} holds no layer with all three fixed sessions")
    print(table(data, args.trials, args.trials_per_round, policies), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
