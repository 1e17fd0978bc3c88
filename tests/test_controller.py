"""The adaptive layout controller's choice logic (no TVM needed)."""

import math

import pytest

from workbench.controller import StrategyController
from workbench.errors import WorkbenchError

S = ["no-rewrite", "transform-stage", "pre-transformed"]


def _round(c, lat_ms, prev_best_ms, trials=16, pred=None, trained=False):
    d = c.choose()
    pruned = c.observe(d.strategy, None if lat_ms is None else lat_ms / 1e3,
                       None if prev_best_ms is None else prev_best_ms / 1e3, trials, pred, trained)
    return d, pruned


def test_warm_up_gives_every_strategy_one_round_in_order():
    c = StrategyController(S, "auto")
    chosen = []
    best = None
    for lat in (3.0, 2.0, 4.0):
        d, _ = _round(c, lat, best)
        chosen.append((d.strategy, d.chosen_by, d.reason.startswith("warm-up")))
        best = lat if best is None else min(best, lat)
    assert chosen == [(s, "controller", True) for s in S]


def test_ucb_exploits_the_improving_strategy_and_scores_every_arm():
    c = StrategyController(S, "auto", prune_after=100)
    best = None
    lat = {"no-rewrite": 3.0, "transform-stage": 2.0, "pre-transformed": 2.5}
    for s in S:
        d = c.choose()
        c.observe(d.strategy, lat[d.strategy] / 1e3, None if best is None else best / 1e3, 16)
        best = lat[d.strategy] if best is None else min(best, lat[d.strategy])
    picks = []
    for _ in range(6):
        d = c.choose()
        assert set(d.scores) == set(S) and all(math.isfinite(v) for v in d.scores.values())
        picks.append(d.strategy)
        # transform-stage keeps improving; the others find nothing better
        if d.strategy == "transform-stage":
            lat["transform-stage"] *= 0.9
            new = lat["transform-stage"]
        else:
            new = lat[d.strategy] * 1.05
        c.observe(d.strategy, new / 1e3, best / 1e3, 16)
        best = min(best, new)
    assert picks.count("transform-stage") >= 4


def test_exploration_bonus_revisits_a_neglected_arm():
    c = StrategyController(["a", "b"], "auto", gamma=0.8, c=2.0, prune_after=100)
    c.observe("a", 1.0, None, 16)
    c.observe("b", 1.0, 1.0, 16)
    for _ in range(8):
        c.observe("a", 1.0, 1.0, 16)  # a is played a lot, b is left alone
    assert c.choose().strategy == "b"


def test_prunes_strategies_far_behind_but_never_the_last():
    c = StrategyController(S, "auto", prune_after=2, prune_ratio=1.3)
    for _ in range(2):
        c.observe("no-rewrite", 1.0e-3, 1e-3, 16)
        c.observe("transform-stage", 2.0e-3, 1e-3, 16)
        pruned = c.observe("pre-transformed", 1.1e-3, 1e-3, 16)
    assert c.arms["transform-stage"].pruned
    assert not c.arms["pre-transformed"].pruned and not c.arms["no-rewrite"].pruned
    assert "transform-stage" not in c.live()
    solo = StrategyController(["x", "y"], "auto", prune_after=1)
    solo.observe("x", 1e-3, None, 1)
    solo.mark_exhausted("x")
    solo.observe("y", 5e-3, 1e-3, 1)  # far behind, but the only strategy left
    assert solo.live() == ["y"]


def test_manual_pick_overrides_and_auto_hands_back():
    c = StrategyController(S, "auto")
    c.pick("pre-transformed")
    for _ in range(3):
        d = c.choose()
        assert (d.strategy, d.chosen_by, d.mode) == ("pre-transformed", "user", "manual")
        c.observe(d.strategy, 1e-3, 1e-3, 16)
    c.auto()
    d = c.choose()
    assert d.chosen_by == "controller" and d.mode == "auto"
    with pytest.raises(WorkbenchError):
        c.pick("nonsense")


def test_round_robin_and_fixed_modes():
    c = StrategyController(S, "round-robin")
    assert [c.choose().strategy for _ in range(4)] == S + [S[0]]
    f = StrategyController(["no-rewrite"], "auto")
    assert f.mode == "fixed" and f.choose().strategy == "no-rewrite"


def test_model_guidance_breaks_ties_towards_predicted_gain():
    c = StrategyController(["a", "b"], "auto", lam=0.5, prune_after=100)
    c.observe("a", 1e-3, None, 16, predicted_mean=0.2, model_trained=True)
    c.observe("b", 1e-3, 1e-3, 16, predicted_mean=0.9, model_trained=True)
    s = c.scores()
    assert s["b"] > s["a"]
    assert c.choose().strategy == "b"


def test_exhausted_strategies_are_skipped_and_none_left_means_stop():
    c = StrategyController(["a", "b"], "round-robin")
    c.mark_exhausted("a")
    assert c.choose().strategy == "b"
    c.mark_exhausted("b")
    assert c.choose() is None
