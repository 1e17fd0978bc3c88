"""Which layout strategy's search gets the next round.

Modes
  fixed        one strategy
  round-robin  strategies in turn (``--strategy all``: for comparisons)
  auto         AL-Ansor's adaptive choice: a warm-up round per strategy, then a
               discounted-UCB bandit on per-round improvement, optionally guided by
               the shared cost model's predictions; strategies that stay far behind
               are pruned
  manual       the person picks (``pick(name)``); ``auto()`` hands back

Reward of a round for strategy a: r = min(1.5, L*_prev / l_round), where L*_prev
is the best deployment latency over all strategies before the round and l_round
the best latency the round found (0 if it found nothing valid). Rewards are
discounted by gamma each round, so a strategy that stopped improving loses
priority (rewards are non-stationary). Score:

    score_a = Q_a + c * sqrt(ln N / n_a) + lam * P_a

with Q_a the discounted mean reward, n_a the discounted number of rounds, N
their sum, and P_a the mean predicted score of the strategy's last proposals
relative to the best strategy's (0 until the model is trained). A strategy with
at least ``prune_after`` rounds whose best is more than ``prune_ratio`` times the
global best is pruned (never in manual mode, and never the last one).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from .errors import WorkbenchError


@dataclass
class ArmState:
    rounds: int = 0
    disc_n: float = 0.0
    disc_reward: float = 0.0
    best_s: float = math.inf
    predicted: float | None = None
    pruned: bool = False
    exhausted: bool = False
    trials: int = 0


@dataclass
class Decision:
    strategy: str
    chosen_by: str  # "controller" | "user"
    mode: str
    scores: dict = field(default_factory=dict)
    reason: str = ""


class StrategyController:
    def __init__(self, strategies: list[str], mode: str = "auto", gamma: float = 0.8, c: float = 0.5,
                 lam: float = 0.3, prune_after: int = 3, prune_ratio: float = 1.3):
        if not strategies:
            raise WorkbenchError("the controller needs at least one strategy")
        if mode not in ("auto", "round-robin", "fixed", "manual"):
            raise WorkbenchError(f"unknown controller mode {mode!r}")
        self.strategies = list(strategies)
        self.arms = {s: ArmState() for s in strategies}
        self.mode = "fixed" if len(strategies) == 1 else mode
        self._auto_mode = self.mode if self.mode != "manual" else "auto"
        self.gamma, self.c, self.lam = gamma, c, lam
        self.prune_after, self.prune_ratio = prune_after, prune_ratio
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
                d = Decision(self._manual, "user", "manual", self.scores(live), "picked by the user")
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

    def _decide_auto(self, live) -> Decision:
        cold = [s for s in live if self.arms[s].rounds == 0]
        if cold:
            return Decision(cold[0], "controller", "auto", self.scores(live), "warm-up: every strategy gets a first round")
        scores = self.scores(live)
        best = max(live, key=lambda s: (scores[s], -self.strategies.index(s)))
        return Decision(best, "controller", "auto", scores, f"highest UCB score {scores[best]:.3f}")

    def scores(self, live=None) -> dict:
        live = live if live is not None else self.live()
        total = sum(self.arms[s].disc_n for s in live) or 1.0
        preds = [self.arms[s].predicted for s in live if self.arms[s].predicted is not None]
        pmax = max(preds) if preds else None
        out = {}
        for s in live:
            a = self.arms[s]
            if a.disc_n <= 0:
                out[s] = math.inf
                continue
            q = a.disc_reward / a.disc_n
            bonus = self.c * math.sqrt(max(0.0, math.log(max(total, 1.0))) / a.disc_n)
            guide = self.lam * (a.predicted / pmax) if (pmax and a.predicted is not None and pmax > 0) else 0.0
            out[s] = q + bonus + guide
        return out

    # ---- feedback ----
    def observe(self, strategy: str, round_best_s: float | None, global_best_prev_s: float | None,
                trials: int, predicted_mean: float | None = None, model_trained: bool = False) -> list[str]:
        """Record a finished round; returns the strategies pruned by it."""
        with self._lock:
            if global_best_prev_s is None or not math.isfinite(global_best_prev_s):
                reward = 1.0 if round_best_s else 0.0
            elif round_best_s:
                reward = min(1.5, global_best_prev_s / round_best_s)
            else:
                reward = 0.0
            for a in self.arms.values():
                a.disc_n *= self.gamma
                a.disc_reward *= self.gamma
            arm = self.arms[strategy]
            arm.disc_n += 1.0
            arm.disc_reward += reward
            arm.rounds += 1
            arm.trials += trials
            if round_best_s:
                arm.best_s = min(arm.best_s, round_best_s)
            if model_trained and predicted_mean is not None:
                arm.predicted = predicted_mean
            return self._prune()

    def mark_exhausted(self, strategy: str) -> None:
        with self._lock:
            self.arms[strategy].exhausted = True

    def _prune(self) -> list[str]:
        if self.mode != "auto":
            return []
        gbest = min(a.best_s for a in self.arms.values())
        pruned = []
        for s, a in self.arms.items():
            if a.pruned or a.rounds < self.prune_after or len(self.live()) <= 1:
                continue
            if a.best_s > self.prune_ratio * gbest:
                a.pruned = True
                pruned.append(s)
        return pruned

    def state(self) -> dict:
        with self._lock:
            return {
                "mode": self.mode,
                "manual": self._manual,
                "scores": self.scores(),
                "arms": {s: {"rounds": a.rounds, "trials": a.trials, "best_ms": a.best_s * 1e3 if math.isfinite(a.best_s) else None,
                             "pruned": a.pruned, "exhausted": a.exhausted} for s, a in self.arms.items()},
                "last": None if self.last is None else self.last.__dict__,
            }
