"""Ansor's gradient task scheduler: which task of a network gets the next round.

Pure logic (no TVM): the caller reports each task's best latency after every
round, the scheduler answers with the next task. As in
``tvm.auto_scheduler.TaskScheduler`` (the objective is the weighted sum of the
tasks' best latencies, f = sum_i w_i * g_i):

* warm-up: one round-robin pass over every task first;
* then the task with the most negative gradient

      df/dt_i ~ df/dg_i * [ alpha * (g_i(t_i) - g_i(t_i - dt)) / dt
                            + (1 - alpha) * (min(g_i - g_i / t_i, beta * C_i / max_{k in N(i)} V_k) - g_i) ]

  where t_i counts rounds of task i, dt is the backward window (3), C_i the
  task's FLOPs and V_k the best throughput (FLOP/s) of task k in i's
  similarity group N(i) (only when the group has another member);
  alpha = 0.2, beta = 2; ties (all gradients equal) are broken at random;
* a task that stops proposing new programs, or has no valid program after its
  warm-up round, is dead and never chosen again;
* a task leaves its similarity group when, after more than 5 rounds beyond
  any other member, it still runs below 1/beta of the group's best throughput.

Similarity tag: the task's class (same anchor op, layout and epilogue) plus
``int(log_1.618(flop + 1))``, Ansor's ``derive_similarity_tag``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

INF_COST = 1e10  # Ansor's "no valid program yet"


def similarity_tag(class_key: str, flops: float) -> str:
    return f"{class_key}#{int(math.log(flops + 1, 1.618))}"


@dataclass
class Choice:
    task: int
    reason: str  # "warm-up", "gradient" or "tie"
    gradients: list  # per task (None for dead tasks); empty during warm-up


class GradientScheduler:
    def __init__(
        self, weights, flops, tags=None, alpha: float = 0.2, beta: float = 2.0, backward_window: int = 3, seed: int = 0
    ):
        n = len(weights)
        if n == 0:
            raise ValueError("the scheduler needs at least one task")
        if len(flops) != n or (tags is not None and len(tags) != n):
            raise ValueError("weights, flops and tags must have one entry per task")
        self.weights = [float(w) for w in weights]
        self.flops = [float(f) for f in flops]
        self.alpha, self.beta, self.window = alpha, beta, backward_window
        self.best = [INF_COST] * n  # g_i: best latency (ms) so far
        self.rounds = [0] * n  # t_i
        self.history: list[list[float]] = [[] for _ in range(n)]  # best after each round
        self.dead: set[int] = set()
        self.tags = list(tags) if tags is not None else [None] * n
        self.groups: dict[str, list[int]] = {}
        for i, t in enumerate(self.tags):
            if t is not None:
                self.groups.setdefault(t, []).append(i)
        self._rng = random.Random(seed)
        self._warm = 0  # next task of the warm-up pass

    # ---- state ----
    @property
    def n(self) -> int:
        return len(self.weights)

    def objective(self) -> float:
        """f = sum_i w_i * g_i (ms; INF_COST counts for tasks without a valid program)."""
        return sum(w * g for w, g in zip(self.weights, self.best))

    def alive(self) -> list[int]:
        return [i for i in range(self.n) if i not in self.dead]

    def mark_dead(self, i: int) -> None:
        self.dead.add(i)

    def observe(self, i: int, best_latency_ms: float | None) -> None:
        """Task i finished a round; its best latency so far (None: still no valid program)."""
        self.rounds[i] += 1
        if best_latency_ms is not None and best_latency_ms < self.best[i]:
            self.best[i] = float(best_latency_ms)
        self.history[i].append(self.best[i])
        if self.best[i] < INF_COST:
            self._adjust_group(i)

    # ---- choice ----
    def next(self) -> Choice | None:
        """The next task to tune, or None when every task is dead."""
        while self._warm < self.n:
            i = self._warm
            self._warm += 1
            if i not in self.dead:
                return Choice(i, "warm-up", [])
        # warm-up over: tasks that never found a valid program are dead (Ansor does this after warm-up)
        for i in range(self.n):
            if self.rounds[i] > 0 and self.best[i] >= INF_COST:
                self.dead.add(i)
        alive = self.alive()
        if not alive:
            return None
        grads = [None if i in self.dead else self.gradient(i) for i in range(self.n)]
        vals = [grads[i] for i in alive]
        if max(vals) == min(vals):
            return Choice(self._rng.choice(alive), "tie", grads)
        return Choice(min(alive, key=lambda i: grads[i]), "gradient", grads)

    def gradient(self, i: int) -> float:
        g = self.best[i]
        t = self.rounds[i]
        delta = 1e-4
        moved = list(self.best)
        moved[i] -= delta
        chain = (self.objective() - sum(w * c for w, c in zip(self.weights, moved))) / delta
        h = self.history[i]
        if t - 1 < len(h) and t - 1 - self.window >= 0:
            backward = (h[t - 1] - h[t - 1 - self.window]) / self.window
        else:
            backward = 0.0
        g_next_1 = g - g / t if t > 0 else 0.0
        g_next_2 = self.beta * 1e30
        group = self.groups.get(self.tags[i]) if self.tags[i] is not None else None
        if group is not None and len(group) > 1:
            best_flops = max(self.flops[j] / self.best[j] for j in group)
            g_next_2 = self.beta * self.flops[i] / best_flops
        forward = min(g_next_1, g_next_2) - g
        return chain * (self.alpha * backward + (1 - self.alpha) * forward)

    def _adjust_group(self, i: int) -> None:
        tag = self.tags[i]
        group = self.groups.get(tag) if tag is not None else None
        if group is None or len(group) <= 1:
            return
        best_group = max(self.flops[j] / self.best[j] for j in group)
        cur = self.flops[i] / self.best[i]
        if cur < best_group / self.beta and self.rounds[i] > 5 + max(self.rounds[j] for j in group if j != i):
            group.remove(i)
            self.tags[i] = None

    def state(self) -> dict:
        return {
            "best_ms": [None if b >= INF_COST else b for b in self.best],
            "rounds": list(self.rounds),
            "dead": sorted(self.dead),
            "objective_ms": self.objective(),
            "groups": {k: list(v) for k, v in self.groups.items() if len(v) > 1},
        }
