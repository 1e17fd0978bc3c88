"""Ansor's gradient task scheduler: its choices, checked against hand-computed gradients."""

import math

import pytest

from workbench.scheduler import INF_COST, GradientScheduler, similarity_tag


def _warm(s, costs):
    for i, c in enumerate(costs):
        ch = s.next()
        assert ch.task == i and ch.reason == "warm-up"
        s.observe(i, c)


def test_warm_up_is_one_round_robin_pass():
    s = GradientScheduler([1, 1, 1], [1e9] * 3)
    assert [s.next().task for _ in range(3)] == [0, 1, 2]


def test_heaviest_weighted_latency_goes_first_after_warm_up():
    # No groups, no history: grad_i = w_i * (1 - alpha) * (-g_i / t_i); the largest w*g wins.
    s = GradientScheduler([1, 4, 1], [1e9] * 3)
    _warm(s, [0.010, 0.003, 0.002])
    ch = s.next()
    assert ch.reason == "gradient" and ch.task == 1  # 4*3 ms = 12 ms > 10 ms > 2 ms
    for i, g in enumerate([0.010, 0.003, 0.002]):
        w = [1, 4, 1][i]
        assert ch.gradients[i] == pytest.approx(w * 0.8 * (-g), rel=1e-3)


def test_more_rounds_make_a_task_less_attractive():
    s = GradientScheduler([1, 1], [1e9, 1e9])
    _warm(s, [0.010, 0.008])
    assert s.next().task == 0  # -8 ms vs -6.4 ms
    s.observe(0, 0.010)  # no improvement; t_0 = 2: forward gain halves
    ch = s.next()
    assert ch.task == 1
    assert ch.gradients[0] == pytest.approx(0.8 * (-0.010 / 2), rel=1e-3)


def test_backward_window_rewards_recent_progress():
    s = GradientScheduler([1, 1], [1e9, 1e9])
    _warm(s, [0.010, 0.010])
    for g in (0.009, 0.008, 0.006):  # task 0 keeps improving: rounds 2..4
        s.observe(0, g)
    for g in (0.010, 0.010, 0.010):
        s.observe(1, g)
    # t=4 for both; task 0: backward = (0.006 - 0.010)/3, forward = -0.006/4; task 1: backward 0, forward -0.010/4
    g0 = 0.2 * (0.006 - 0.010) / 3 + 0.8 * (-0.006 / 4)
    g1 = 0.8 * (-0.010 / 4)
    ch = s.next()
    assert ch.gradients[0] == pytest.approx(g0, rel=1e-3) and ch.gradients[1] == pytest.approx(g1, rel=1e-3)
    assert ch.task == (0 if g0 < g1 else 1)


def test_similarity_group_bounds_the_forward_gain():
    # Two tasks of one group, same FLOPs; task 1 is 10x slower than task 0 could make it:
    # g_next_2 = beta * C_1 / V_best = 2 * 1e9 / (1e9 / 0.001) = 2 ms, far below g_1 - g_1/t = 0 at t=1.
    tags = ["conv", "conv", None]
    s = GradientScheduler([1, 1, 1], [1e9, 1e9, 1e9], tags=tags)
    _warm(s, [0.001, 0.010, 0.004])
    ch = s.next()
    assert ch.gradients[1] == pytest.approx(0.8 * (min(0.0, 0.002) - 0.010), rel=1e-3)
    assert ch.task == 1


def test_dead_tasks_are_never_chosen():
    s = GradientScheduler([1, 1, 1], [1e9] * 3)
    _warm(s, [None, 0.005, 0.001])  # task 0 found no valid program in its warm-up round
    s.mark_dead(1)  # task 1 stopped proposing
    for _ in range(5):
        ch = s.next()
        assert ch.task == 2
        s.observe(2, 0.001)
    assert s.dead == {0, 1}
    s.mark_dead(2)
    assert s.next() is None


def test_ties_are_broken_at_random_but_reproducibly():
    def pick(seed):
        s = GradientScheduler([1] * 4, [1e9] * 4, seed=seed)
        _warm(s, [0.002] * 4)
        ch = s.next()
        assert ch.reason == "tie"
        return ch.task

    picks = [pick(seed) for seed in range(12)]
    assert [pick(seed) for seed in range(12)] == picks  # the same seed, the same pick
    assert set(picks) <= {0, 1, 2, 3} and len(set(picks)) >= 3  # spread over the tied tasks, not always one


def test_objective_is_the_weighted_sum():
    s = GradientScheduler([2, 3], [1, 1])
    _warm(s, [0.004, 0.001])
    assert s.objective() == pytest.approx(2 * 0.004 + 3 * 0.001)
    s.observe(0, 0.002)
    assert s.objective() == pytest.approx(2 * 0.002 + 3 * 0.001)
    s2 = GradientScheduler([1], [1])
    assert s2.objective() == INF_COST


def test_a_task_leaves_its_group_when_it_stays_slow():
    s = GradientScheduler([1, 1], [1e9, 1e9], tags=["g", "g"])
    _warm(s, [0.001, 0.100])
    for _ in range(5):
        s.observe(1, 0.100)
    assert s.tags[1] == "g"  # t_1 = 6, not more than 5 + t_0 = 6 yet
    s.observe(1, 0.100)  # t_1 = 7 > 6, still below 1/beta of the group's best throughput: it leaves
    assert s.tags[1] is None and s.groups["g"] == [0]


def test_similarity_tag_buckets_flops_in_log_golden_ratio():
    assert similarity_tag("conv2d:NHWC+relu", 1e9) == f"conv2d:NHWC+relu#{int(math.log(1e9 + 1, 1.618))}"
    assert similarity_tag("a", 1e9) == similarity_tag("a", 1.2e9)
    assert similarity_tag("a", 1e9) != similarity_tag("a", 4e9)


def test_rejects_mismatched_inputs():
    with pytest.raises(ValueError):
        GradientScheduler([1, 2], [1])
    with pytest.raises(ValueError):
        GradientScheduler([], [])
