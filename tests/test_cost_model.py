"""The pack-sum XGBoost cost model on synthetic programs with a known cost."""

import numpy as np
import pandas as pd

from workbench.cost_model import PackSumXGB


def _program(rng, n_rows):
    return rng.uniform(0, 1, size=(n_rows, 8)).astype(np.float32)


def _cost(f):
    # The pack-sum model assumes a program's (normalised) throughput is a sum over its statements.
    return 1.0 / float((0.1 + f[:, 0] * 3 + f[:, 1] ** 2).sum())


def test_random_before_warmup_then_learns_the_ranking():
    rng = np.random.default_rng(0)
    m = PackSumXGB(seed=0, max_rounds=300, early_stop=30, warmup=32, nthread=1)
    progs = [_program(rng, rng.integers(1, 4)) for _ in range(400)]
    for p in progs[:20]:
        m.add(p, _cost(p) * 1e-3, "w")
    assert not m.train()  # below warm-up: no model yet
    a, b = m.predict(progs[:5]), m.predict(progs[:5])
    assert not np.allclose(a, b)  # random scores
    for p in progs[20:300]:
        m.add(p, _cost(p) * 1e-3, "w")
    assert m.train() and m.n_trainings == 1
    test = progs[300:]
    pred = m.predict(test)
    true_throughput = np.array([1 / _cost(p) for p in test])
    rho = pd.Series(pred).corr(pd.Series(true_throughput), method="spearman")
    assert rho > 0.8, rho
    # The top of the predicted ranking holds most of the truly fastest programs.
    top_pred = set(np.argsort(-pred)[:10])
    top_true = set(np.argsort(-true_throughput)[:10])
    assert len(top_pred & top_true) >= 5


def test_failures_get_zero_label_and_groups_normalise_separately():
    m = PackSumXGB(warmup=1)
    f = np.ones((1, 3), np.float32)
    m.add(f, 2e-3, "a")
    m.add(f, 1e-3, "a")
    m.add(f, None, "a")
    m.add(f, 10e-3, "b")
    y = m.labels()
    assert np.allclose(y, [0.5, 1.0, 0.0, 1.0])


def test_feature_reuse_returns_the_same_rows_and_hits_on_repeats():
    from tvm.s_tir import meta_schedule as ms

    from workbench import cost_model, presets, space, tvm_env
    from workbench.workloads import registry

    w = registry().get("matmul-128")
    schs = [s for s in (space.annotate(w, 0, seed) for seed in range(1, 8)) if s is not None][:3]
    cands = [ms.MeasureCandidate(s, ms.arg_info.ArgInfo.from_prim_func(w.mod["main"])) for s in schs]
    ctx = space.tune_context(
        w, tvm_env.make_target(tvm_env.host_target_dict()), "no-rewrite", presets.get("quick"), seed=0, search=False
    )
    plain = cost_model.Featurizer(ctx, reuse=False)(ctx, cands, "no-rewrite")
    f = cost_model.Featurizer(ctx)
    first = f(ctx, cands, "no-rewrite")
    again = f(ctx, cands + cands[:1], "no-rewrite")
    assert f.misses == len(cands) and f.hits == len(cands) + 1
    for a, b, c in zip(plain, first, again):
        assert np.array_equal(a, b) and np.array_equal(a, c)


def test_untrained_scores_only_before_training():
    m = PackSumXGB(warmup=1)
    assert len(m.untrained_scores(4)) == 4
    m.add(np.ones((1, 3), np.float32), 1e-3, "a")
    assert m.train()
    assert m.untrained_scores(4) is None
