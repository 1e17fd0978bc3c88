"""Which layout strategy's search gets the next round.

Modes
  fixed        one strategy
  round-robin  strategies in turn (``--strategy all``: for comparisons)
  auto         AL-Ansor's adaptive choice: a warm-up round per strategy (``warmup_rounds``,
               arms in turn), then the arm with the highest score under the session's arm policy
  manual       the person picks (``pick(name)``); ``auto()`` hands back

Arm policies (``Preset.controller_policy``; see ``POLICIES``)

``optimistic-best`` (default). What decides a session's result is the deployment
latency of the best program any strategy found, so an arm is scored by its own
best deployment latency ``b_a`` relative to the global best ``g``, made optimistic
by how little it has been tried::

    score_a = (g / b_a) * (1 + c * sqrt(ln R / r_a)) * (1 + lam * (P_a / P_max - 1))

with ``r_a`` the arm's rounds, ``R`` all rounds, ``P_a`` the shared cost model's
mean predicted score of the arm's last proposals (the model's labels are
throughput relative to the best program, so ``P_a`` estimates how close the arm's
next round gets to the best; the factor is 1 until the model is trained). An arm
that starts slowly keeps a bonus that shrinks only as it is tried, so it is not
starved before it gets going; nothing is pruned.

``ucb-gain``: a discounted UCB on a per-round reward ``min(1.5, L*_prev / l_round)``
(``L*_prev`` the global best before the round, ``l_round`` the round's best, 0 if
it found nothing valid), discounted by ``gamma`` each round::

    score_a = Q_a + c * sqrt(ln N / n_a) + lam * P_a / P_max

and an arm with at least ``prune_after`` rounds whose best is more than
``prune_ratio`` times the global best is pruned (never the last one).

``projected-best``: ``optimistic-best`` with the arms compared at equal trials (an arm's best projected
to the most-tried arm's trial count along that arm's own learning curve; see ProjectedBestPolicy).

``halving``: successive halving (see HalvingPolicy): every arm gets the same trials, the worse half is
pruned at equal trials, the survivors get twice as many, until one is left.

``uniform``: every live arm equally likely each round, no pruning (the ablation
"uniform arm mix": the shared model and cross-seeding without the choice).

Paired layouts (``Preset.pair_layouts``; the session's ``PairLayouts`` step). Arms compared by their own
searches' bests differ by search luck as much as by layout: after a handful of trials an arm's best says
little about its layout. When a round finds the session's new best program, the same loop nest is also
measured under the other live strategies' layouts, and the result is credited to their arms (``credit``):
a paired comparison, the layout the only difference. An arm that loses ``PAIR_PATIENCE`` pairings in a row by
more than ``PAIR_MARGIN`` is not paired again (transform-stage, which pays its weight copy on every call, is
the usual one), so pairing costs trials only where the layouts are close.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass, field
from typing import Protocol

from .errors import WorkbenchError


@dataclass
class ArmState:
    rounds: int = 0
    disc_n: float = 0.0
    disc_reward: float = 0.0
    best_ms: float = math.inf
    predicted: float | None = None
    pruned: bool = False
    exhausted: bool = False
    trials: int = 0
    # (trials so far, best so far) after each of the arm's rounds: its own learning curve
    history: list = field(default_factory=list)
    paired: int = 0  # trials credited by pairing (programs of other arms' rounds measured in this layout)
    pair_losses: int = 0  # pairings lost in a row by more than PAIR_MARGIN

    def best_after(self, n: int) -> float:
        """The arm's best after its first ``n`` trials, read off its history (its first round's best when ``n``
        is below that round's trial count; inf before any round)."""
        out = self.history[0][1] if self.history else math.inf
        for trials, best in self.history:
            if trials > n:
                break
            out = best
        return out


@dataclass
class Decision:
    strategy: str
    chosen_by: str  # "controller" | "user"
    mode: str
    scores: dict = field(default_factory=dict)
    reason: str = ""


class ArmPolicy(Protocol):
    """How the auto mode ranks strategies after warm-up.

    ``scores(arms, live)`` returns a score per live arm, higher is better: finite for an
    arm that has had a round, +inf allowed for one that has not (try it first), never
    NaN; the controller picks the highest (ties: the earlier strategy). ``reward(...)`` folds a
    finished round into ``arm`` (the controller has already updated its rounds,
    trials, best and prediction). ``prune(arms, live)`` names arms to drop now; it
    never names every live arm. ``snapshot()`` is the policy's own state beyond the
    arms as JSON data, and ``restore(snapshot)`` takes it back, so that a resumed
    session chooses as the stopped one would have. Policies hold no lock: the
    controller calls them under its own.
    """

    name: str

    def snapshot(self) -> dict: ...

    def restore(self, snapshot: dict) -> None: ...

    def reward(
        self, arms: dict, arm: ArmState, round_best_ms: float | None, global_best_prev_ms: float | None
    ) -> None: ...

    def scores(self, arms: dict, live: list) -> dict: ...

    def prune(self, arms: dict, live: list) -> list: ...


def _guide_ratio(arms: dict, live: list, s: str) -> float | None:
    preds = [arms[x].predicted for x in live if arms[x].predicted is not None]
    pmax = max(preds) if preds else None
    p = arms[s].predicted
    return (p / pmax) if (pmax and pmax > 0 and p is not None) else None


class StatelessArmPolicy:
    """A policy whose every decision follows from the arms: nothing of its own to keep across a resume."""

    def snapshot(self) -> dict:
        return {}

    def restore(self, snapshot: dict) -> None:
        pass


class OptimisticBestPolicy(StatelessArmPolicy):
    name = "optimistic-best"

    def __init__(self, c: float = 0.2, lam: float = 0.3):
        self.c, self.lam = c, lam

    def reward(self, arms, arm, round_best_ms, global_best_prev_ms) -> None:
        pass  # the score reads the arms' bests directly

    def scores(self, arms, live) -> dict:
        g = min(arms[s].best_ms for s in live) if live else math.inf
        total = sum(arms[s].rounds for s in live)
        out = {}
        for s in live:
            a = arms[s]
            if a.rounds == 0:
                out[s] = math.inf
                continue
            speed = (g / a.best_ms) if math.isfinite(a.best_ms) and math.isfinite(g) else 0.0
            bonus = self.c * math.sqrt(max(0.0, math.log(max(total, 1))) / a.rounds)
            ratio = _guide_ratio(arms, live, s)
            guide = 1.0 + self.lam * (ratio - 1.0) if ratio is not None else 1.0
            out[s] = speed * (1.0 + bonus) * guide
        return out

    def prune(self, arms, live) -> list:
        return []


class ProjectedBestPolicy(OptimisticBestPolicy):
    """``optimistic-best`` with the arms compared at equal trials: an arm's best is projected to the
    trial count of the arm tried most (the leader) by the leader's own learning curve,

        proj_a = b_a * b_lead(n_lead) / b_lead(n_a)

    with ``b_lead(n)`` the leader's best after its first ``n`` trials, so an arm that has had one round
    is judged against what the leader had after as many trials, not after all of its own."""

    name = "projected-best"

    def scores(self, arms, live) -> dict:
        tried = [s for s in live if arms[s].rounds and math.isfinite(arms[s].best_ms)]
        if not tried:
            return super().scores(arms, live)
        lead = max(tried, key=lambda s: (arms[s].trials, -arms[s].best_ms))
        la = arms[lead]
        proj = {}
        for s in live:
            a = arms[s]
            if s == lead or not math.isfinite(a.best_ms) or a.rounds == 0:
                proj[s] = a.best_ms
                continue
            then = la.best_after(a.trials)
            proj[s] = a.best_ms * la.best_ms / then if math.isfinite(then) and then > 0 else a.best_ms
        projected = {s: ArmState(rounds=arms[s].rounds, best_ms=proj[s], predicted=arms[s].predicted) for s in live}
        return super().scores(projected, live)


class UCBGainPolicy(StatelessArmPolicy):
    name = "ucb-gain"

    def __init__(
        self, gamma: float = 0.8, c: float = 0.5, lam: float = 0.3, prune_after: int = 3, prune_ratio: float = 1.3
    ):
        self.gamma, self.c, self.lam = gamma, c, lam
        self.prune_after, self.prune_ratio = prune_after, prune_ratio

    def reward(self, arms, arm, round_best_ms, global_best_prev_ms) -> None:
        if global_best_prev_ms is None or not math.isfinite(global_best_prev_ms):
            r = 1.0 if round_best_ms else 0.0
        elif round_best_ms:
            r = min(1.5, global_best_prev_ms / round_best_ms)
        else:
            r = 0.0
        for a in arms.values():
            a.disc_n *= self.gamma
            a.disc_reward *= self.gamma
        arm.disc_n += 1.0
        arm.disc_reward += r

    def scores(self, arms, live) -> dict:
        total = sum(arms[s].disc_n for s in live) or 1.0
        out = {}
        for s in live:
            a = arms[s]
            if a.disc_n <= 0:
                out[s] = math.inf
                continue
            q = a.disc_reward / a.disc_n
            bonus = self.c * math.sqrt(max(0.0, math.log(max(total, 1.0))) / a.disc_n)
            ratio = _guide_ratio(arms, live, s)
            out[s] = q + bonus + (self.lam * ratio if ratio is not None else 0.0)
        return out

    def prune(self, arms, live) -> list:
        gbest = min(a.best_ms for a in arms.values())
        out = []
        for s in live:
            a = arms[s]
            if a.rounds >= self.prune_after and len(live) - len(out) > 1 and a.best_ms > self.prune_ratio * gbest:
                out.append(s)
        return out


class HalvingPolicy:
    """Successive halving over the arms: every live arm is brought to the stage's trial quota
    (``stage_trials * 2**stage``, counting its earlier trials), then the worse half is pruned, compared at
    equal trials (each arm's best within its first ``quota`` trials), and the next stage begins; the last
    arm gets the rest of the budget. No arm is judged before it has had its fair share, and the one that
    starts slowly is compared with the others at the same trial count, not after they ran ahead."""

    name = "halving"

    def __init__(self, stage_trials: int = 16):
        if stage_trials < 1:
            raise WorkbenchError(f"stage_trials must be at least 1, got {stage_trials!r}")
        self.stage_trials = int(stage_trials)
        self.stage = 0

    def quota(self) -> int:
        return self.stage_trials * (2**self.stage)

    def snapshot(self) -> dict:
        return {"stage": self.stage}

    def restore(self, snapshot: dict) -> None:
        self.stage = int(snapshot.get("stage", self.stage))

    def reward(self, arms, arm, round_best_ms, global_best_prev_ms) -> None:
        pass

    def scores(self, arms, live) -> dict:
        if len(live) == 1:
            return {live[0]: 1.0}
        q = self.quota()
        # below the quota: the least-tried first; at it: wait for the others
        return {s: (1.0 + (q - arms[s].trials) / q) if arms[s].trials < q else 0.0 for s in live}

    def prune(self, arms, live) -> list:
        q = self.quota()
        if len(live) <= 1 or any(arms[s].trials < q for s in live):
            return []
        at_quota = {s: arms[s].best_after(q) for s in live}
        ranked = sorted(live, key=lambda s: (at_quota[s], live.index(s)))
        self.stage += 1
        return ranked[len(live) - len(live) // 2 :]


class UniformPolicy(StatelessArmPolicy):
    """Its random draws are not kept across a resume: a resumed session draws anew from its seed."""

    name = "uniform"

    def __init__(self, seed: int = 0):
        self._rng = random.Random(seed)

    def reward(self, arms, arm, round_best_ms, global_best_prev_ms) -> None:
        pass

    def scores(self, arms, live) -> dict:
        return {s: self._rng.random() for s in live}

    def prune(self, arms, live) -> list:
        return []


PAIR_MARGIN = 1.10
PAIR_PATIENCE = 2

POLICIES = {p.name: p for p in (OptimisticBestPolicy, ProjectedBestPolicy, UCBGainPolicy, HalvingPolicy, UniformPolicy)}
DEFAULT_POLICY = OptimisticBestPolicy.name


def make_policy(name: str | None = None, seed: int = 0, **params) -> ArmPolicy:
    """The arm policy called ``name`` (None: the default), built with its constructor's parameters (e.g. ``c``,
    ``lam``, ``prune_after``; parameters left None keep the policy's defaults). The one way to build a policy
    from configuration: sessions (from their preset) and tests alike."""
    name = name or DEFAULT_POLICY
    if name not in POLICIES:
        raise WorkbenchError(f"unknown controller policy {name!r}; valid: {', '.join(POLICIES)}")
    if name == UniformPolicy.name:
        return UniformPolicy(seed)
    kw = {k: v for k, v in params.items() if v is not None}
    try:
        return POLICIES[name](**kw)
    except TypeError as e:
        raise WorkbenchError(f"controller policy {name!r} does not take {', '.join(sorted(kw))}: {e}") from None


class StrategyController:
    def __init__(
        self,
        strategies: list[str],
        mode: str = "auto",
        policy: ArmPolicy | str | None = None,
        warmup_rounds: int = 1,
        **policy_params,
    ):
        """``policy``: an ArmPolicy, or a name from POLICIES / None for the default, built by ``make_policy``
        with ``policy_params``. ``warmup_rounds``: rounds every arm gets, arms in turn, before the policy
        chooses (auto mode)."""
        if not strategies:
            raise WorkbenchError("the controller needs at least one strategy")
        if isinstance(warmup_rounds, bool) or not isinstance(warmup_rounds, int) or warmup_rounds < 1:
            raise WorkbenchError(f"warmup_rounds must be a positive integer, got {warmup_rounds!r}")
        self.warmup_rounds = warmup_rounds
        if mode not in ("auto", "round-robin", "fixed", "manual"):
            raise WorkbenchError(f"unknown controller mode {mode!r}")
        if policy is None or isinstance(policy, str):
            policy = make_policy(policy, **policy_params)
        self.policy = policy
        self.strategies = list(strategies)
        self.arms = {s: ArmState() for s in strategies}
        self.mode = "fixed" if len(strategies) == 1 else mode
        self._auto_mode = self.mode if self.mode != "manual" else "auto"
        self._manual: str | None = None
        self._rr = 0
        self._lock = threading.Lock()
        self.last: Decision | None = None

    # ---- human override (called from the UI thread) ----
    def pick(self, name: str) -> None:
        if name not in self.arms:
            raise WorkbenchError(f"unknown strategy {name!r}; this session has: {', '.join(self.strategies)}")
        with self._lock:
            self._manual = name
            self.mode = "manual"

    def auto(self) -> None:
        with self._lock:
            self._manual = None
            self.mode = self._auto_mode

    # ---- choice ----
    def live(self) -> list[str]:
        return [s for s, a in self.arms.items() if not a.pruned and not a.exhausted]

    def choose(self) -> Decision | None:
        with self._lock:
            live = self.live()
            if self.mode == "manual" and self._manual:
                if self.arms[self._manual].exhausted:
                    return None if not live else self._decide_auto(live)
                d = Decision(self._manual, "user", "manual", self._scores(live), "picked by the user")
            elif not live:
                return None
            elif self.mode == "fixed":
                d = Decision(live[0], "controller", "fixed", {}, "single strategy")
            elif self.mode == "round-robin":
                s = live[self._rr % len(live)]
                self._rr += 1
                d = Decision(s, "controller", "round-robin", {}, "round-robin over all strategies")
            else:
                d = self._decide_auto(live)
            self.last = d
            return d

    def likely_next(self, current: str) -> str | None:
        """The strategy this controller will most likely choose after the round of ``current`` now running,
        without choosing (no state changes): the pick in manual and fixed mode, the next in turn for round-robin
        and the warm-up, else ``current`` (the arm just chosen usually keeps its lead for another round)."""
        with self._lock:
            live = self.live()
            if not live:
                return None
            if self.mode == "manual" and self._manual:
                return self._manual
            if self.mode == "fixed":
                return live[0]
            if self.mode == "round-robin":
                return live[self._rr % len(live)]
            warm_up = self._warm_up_arm(live, {current: 1})
            return warm_up or (current if current in live else None)

    def _warm_up_arm(self, live, pending: dict | None = None) -> str | None:
        """The arm the warm-up gives the next round (arms in turn: the least tried first, then in order), None
        once every live arm has had its warm-up rounds; ``pending``: rounds running now, counted as done."""
        rounds = {s: self.arms[s].rounds + (pending or {}).get(s, 0) for s in live}
        cold = [s for s in live if rounds[s] < self.warmup_rounds]
        return min(cold, key=lambda x: rounds[x]) if cold else None

    def _decide_auto(self, live) -> Decision:
        scores = self._scores(live)
        s = self._warm_up_arm(live)
        if s is not None:
            why = "a first round" if self.warmup_rounds == 1 else f"{self.warmup_rounds} rounds, in turn"
            return Decision(s, "controller", "auto", scores, f"warm-up: every strategy gets {why}")
        best = max(live, key=lambda s: (scores[s], -self.strategies.index(s)))
        return Decision(best, "controller", "auto", scores, f"highest {self.policy.name} score {scores[best]:.3f}")

    def _scores(self, live) -> dict:
        return self.policy.scores(self.arms, live)

    def scores(self, live=None) -> dict:
        with self._lock:
            return self._scores(live if live is not None else self.live())

    # ---- feedback ----
    def observe(
        self,
        strategy: str,
        round_best_ms: float | None,
        global_best_prev_ms: float | None,
        trials: int,
        predicted_mean: float | None = None,
        model_trained: bool = False,
        held_bests: dict | None = None,
    ) -> list[str]:
        """Record a finished round (latencies in ms, deployment latency of the strategy); returns the
        strategies pruned by it. ``held_bests``: each strategy's best latency as the session now holds it; an
        incumbent re-measured beside a challenger (the winner's curse) may have come out slower than it was
        first timed, and an arm's best follows that instead of keeping the lucky first figure."""
        with self._lock:
            for s, ms in (held_bests or {}).items():
                if s in self.arms and ms is not None and math.isfinite(ms):
                    self.arms[s].best_ms = float(ms)
            arm = self.arms[strategy]
            arm.rounds += 1
            arm.trials += trials
            if round_best_ms:
                arm.best_ms = min(arm.best_ms, round_best_ms)
            if model_trained and predicted_mean is not None:
                arm.predicted = predicted_mean
            arm.history.append((arm.trials, arm.best_ms))
            self.policy.reward(self.arms, arm, round_best_ms, global_best_prev_ms)
            if self.mode != "auto":
                return []
            pruned = self.policy.prune(self.arms, self.live())
            for s in pruned:
                self.arms[s].pruned = True
            return pruned

    def pair_targets(self, source: str) -> list[str]:
        """The strategies a program of ``source``'s round is paired into (see the module's docstring): in auto
        mode, every other live arm that has not lost its last PAIR_PATIENCE pairings."""
        with self._lock:
            if self.mode != "auto":
                return []
            return [s for s in self.live() if s != source and self.arms[s].pair_losses < PAIR_PATIENCE]

    def credit(self, strategy: str, latency_ms: float | None, source_ms: float) -> None:
        """A paired measurement: ``strategy``'s layout of a loop nest that took ``source_ms`` under the strategy
        whose round found it took ``latency_ms`` (None: it failed). Counts as one of the arm's trials, not as a
        round; lowers its best when faster."""
        with self._lock:
            arm = self.arms[strategy]
            arm.trials += 1
            arm.paired += 1
            if latency_ms:
                arm.best_ms = min(arm.best_ms, latency_ms)
            lost = latency_ms is None or latency_ms > PAIR_MARGIN * source_ms
            arm.pair_losses = arm.pair_losses + 1 if lost else 0
            arm.history.append((arm.trials, arm.best_ms))

    def mark_exhausted(self, strategy: str) -> None:
        with self._lock:
            self.arms[strategy].exhausted = True

    def state(self) -> dict:
        """What a view shows (mode, policy, scores, each arm's rounds, trials, best, ...) and all that ``restore``
        needs to go on from here (each arm's discounted counts, prediction, pairing losses and learning curve,
        the round-robin position, the policy's ``snapshot``), as JSON data; latencies in ms, None for none."""
        with self._lock:
            return {
                "mode": self.mode,
                "policy": self.policy.name,
                "manual": self._manual,
                "scores": self._scores(self.live()),
                "arms": {
                    s: {
                        "rounds": a.rounds,
                        "trials": a.trials,
                        "best_ms": _ms_or_none(a.best_ms),
                        "pruned": a.pruned,
                        "exhausted": a.exhausted,
                        "paired": a.paired,
                        "pair_losses": a.pair_losses,
                        "disc_n": a.disc_n,
                        "disc_reward": a.disc_reward,
                        "predicted": a.predicted,
                        "history": [[n, _ms_or_none(b)] for n, b in a.history],
                    }
                    for s, a in self.arms.items()
                },
                "round_robin": self._rr,
                "policy_state": self.policy.snapshot(),
                "last": None if self.last is None else self.last.__dict__,
            }

    def restore(self, state: dict) -> bool:
        """Take back the arms and the policy's state from a ``state()`` (a resumed session's last finished round);
        mode and manual pick are not taken back (a resumed session starts in its own mode). False, changing
        nothing, for a state written before it held all that (an older store)."""
        arms = state.get("arms") or {}
        if "policy_state" not in state or any("history" not in a for a in arms.values()):
            return False
        with self._lock:
            for s, a in arms.items():
                if s not in self.arms:
                    continue
                self.arms[s] = ArmState(
                    rounds=int(a["rounds"]),
                    disc_n=float(a["disc_n"]),
                    disc_reward=float(a["disc_reward"]),
                    best_ms=math.inf if a["best_ms"] is None else float(a["best_ms"]),
                    predicted=a["predicted"],
                    pruned=bool(a["pruned"]),
                    exhausted=bool(a["exhausted"]),
                    trials=int(a["trials"]),
                    history=[(int(n), math.inf if b is None else float(b)) for n, b in a["history"]],
                    paired=int(a["paired"]),
                    pair_losses=int(a["pair_losses"]),
                )
            self._rr = int(state.get("round_robin", 0))
            self.policy.restore(state["policy_state"])
        return True


def _ms_or_none(ms: float) -> float | None:
    return ms if math.isfinite(ms) else None
