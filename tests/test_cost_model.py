"""The pack-sum XGBoost cost model on synthetic programs with a known cost."""

import numpy as np
import pandas as pd

import pytest

from workbench import presets
from workbench.cost_model import COST_MODELS, LambdaRankXGB, PackSumXGB, PairwiseRankXGB, make_cost_model
from workbench.errors import WorkbenchError


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


def _pair_loss(m, seg, n, y, preds):
    _, metric = m._objective(seg, n, y, m._group)
    return metric(preds, None)[1]


def test_pairwise_objective_is_the_gradient_of_its_pair_loss():
    rng = np.random.default_rng(3)
    m = PairwiseRankXGB(seed=0, warmup=1)
    rows = [1, 3, 2, 1, 2]
    for r, lat in zip(rows, [2.0, 1.0, None, 4.0, 1.5]):
        m.add(np.ones((r, 2), np.float32), lat, "w")
    m.add(np.ones((1, 2), np.float32), 9.0, "other")  # alone in its group: in no pair
    rows.append(1)
    n, seg = len(rows), np.repeat(np.arange(len(rows)), rows)
    y = m.labels()
    obj, _ = m._objective(seg, n, y, m._group)
    preds = rng.normal(size=len(seg))
    grad, hess = obj(preds, None)
    eps = 1e-6
    # the loss is a mean over pairs and the gradient a sum: compare per pair
    n_pairs = sum(1 for i in range(5) for j in range(5) if y[i] > y[j])
    for k in range(len(seg)):
        up, down = preds.copy(), preds.copy()
        up[k] += eps
        down[k] -= eps
        numeric = (_pair_loss(m, seg, n, y, up) - _pair_loss(m, seg, n, y, down)) / (2 * eps) * n_pairs
        assert grad[k] == pytest.approx(numeric, abs=1e-5)
    assert np.all(hess > 0)
    assert grad[seg == 5].tolist() == [0.0]  # a program in no pair gets no gradient


def test_lambdarank_weights_each_pair_by_the_ndcg_change_of_swapping_it():
    """LambdaMART's gradient, recomputed here pair by pair from its definition: for programs b better than w of one
    workload, weight |y_b - y_w| * |1/log2(1 + rank_b) - 1/log2(1 + rank_w)| / IDCG (ranks in the current
    scores' order), times RankNet's sigmoid(s_w - s_b)."""
    rng = np.random.default_rng(5)
    m = LambdaRankXGB(seed=0, warmup=1)
    rows = [1, 2, 1, 3, 1, 2, 1]
    lats = [1.0, 1.25, 5.0, 10.0, None, 2.0, 3.0]
    groups = ["w", "w", "w", "w", "w", "v", "v"]
    for r, lat, g in zip(rows, lats, groups):
        m.add(np.ones((r, 2), np.float32), lat, g)
    n, seg = len(rows), np.repeat(np.arange(len(rows)), rows)
    y = m.labels()
    obj, metric = m._objective(seg, n, y, m._group)
    preds = rng.normal(size=len(seg))
    grad, hess = obj(preds, None)
    s = np.bincount(seg, weights=preds, minlength=n)
    expected = np.zeros(n)
    for g in set(groups):
        idx = [i for i in range(n) if groups[i] == g]
        rank = {i: r + 1 for r, i in enumerate(sorted(idx, key=lambda i: -s[i]))}
        ideal = sorted((y[i] for i in idx), reverse=True)
        idcg = sum(v / np.log2(r + 2) for r, v in enumerate(ideal))
        for b in idx:
            for w in idx:
                if y[b] > y[w]:
                    weight = abs(y[b] - y[w]) * abs(1 / np.log2(1 + rank[b]) - 1 / np.log2(1 + rank[w])) / idcg
                    p = 1 / (1 + np.exp(s[b] - s[w]))
                    expected[w] += weight * p
                    expected[b] -= weight * p
    assert grad == pytest.approx(expected[seg], abs=1e-9)  # every row of a program gets its program's gradient
    assert np.all(hess > 0)
    assert metric(preds, None)[0] == "lambda-logloss" and metric(preds, None)[1] > 0


def test_lambdarank_learns_the_order_of_the_fastest_programs():
    rng = np.random.default_rng(1)
    progs = [_program(rng, rng.integers(1, 4)) for _ in range(300)]
    m = _trained_on(LambdaRankXGB, progs[:200], "w")
    test = progs[200:]
    pred = m.predict(test)
    true_throughput = np.array([1 / _cost(p) for p in test])
    assert pd.Series(pred).corr(pd.Series(true_throughput), method="spearman") > 0.7
    # its top ten picks hold programs of the true top ten
    assert len(set(np.argsort(-pred)[:10]) & set(np.argsort(-true_throughput)[:10])) >= 3
    assert not m.calibrated


def test_pairwise_model_learns_the_order_and_samples_pairs_when_there_are_many():
    rng = np.random.default_rng(0)
    m = PairwiseRankXGB(seed=0, max_rounds=300, early_stop=30, warmup=32, nthread=1)
    m.max_pairs = 5000  # 300 programs have ~45,000 ordered pairs: a sample is trained on
    progs = [_program(rng, rng.integers(1, 4)) for _ in range(400)]
    for p in progs[:300]:
        m.add(p, _cost(p) * 1e-3, "w")
    bi, wi = m._pairs(m.labels(), m._group)
    assert len(bi) == 5000 and np.all(m.labels()[bi] > m.labels()[wi])
    assert m.train()
    test = progs[300:]
    pred = m.predict(test)
    true_throughput = np.array([1 / _cost(p) for p in test])
    assert pd.Series(pred).corr(pd.Series(true_throughput), method="spearman") > 0.8
    assert not m.calibrated and PackSumXGB.calibrated


@pytest.mark.parametrize("cls", list(COST_MODELS.values()), ids=list(COST_MODELS))
def test_a_holdout_stops_the_fit_where_held_out_programs_stop_improving(cls):
    rng = np.random.default_rng(1)
    progs = [_program(rng, rng.integers(1, 4)) for _ in range(400)]

    def trained(holdout, latency):
        m = cls(seed=0, max_rounds=300, early_stop=20, warmup=32, nthread=1, holdout=holdout)
        for p in progs[:300]:
            m.add(p, latency(p), "w")
        assert m.train()
        return m

    # Latencies unrelated to the features: the training loss keeps falling as the trees fit the noise, while the
    # held-out programs stop the fit within a few early-stopping windows.
    noise = {id(p): float(rng.lognormal(0.0, 1.0)) for p in progs}
    on_train, on_holdout = (trained(h, lambda p: noise[id(p)]) for h in (0.0, 0.2))
    assert on_holdout.last_train_rounds < min(100, on_train.last_train_rounds), (
        on_holdout.last_train_rounds,
        on_train.last_train_rounds,
    )
    # Learnable latencies: the refitted model ranks unseen programs
    m = trained(0.2, lambda p: _cost(p) * 1e-3)
    true_throughput = np.array([1 / _cost(p) for p in progs[300:]])
    rho = pd.Series(m.predict(progs[300:])).corr(pd.Series(true_throughput), method="spearman")
    assert rho > 0.8, rho


def test_the_holdout_takes_a_share_of_every_workload_and_is_off_when_too_small():
    m = PackSumXGB(seed=0, holdout=0.25)
    groups = ["a"] * 40 + ["b"] * 12 + ["c"] * 3
    held = m._holdout_mask(groups)
    g = np.array(groups)
    # a: 10 of 40, b: 3 of 12; c's one program would leave no pair to compare, so it lends none
    assert held[g == "a"].sum() == 10 and held[g == "b"].sum() == 3 and held[g == "c"].sum() == 0
    assert m._holdout_mask(["a"] * 20) is None  # 5 programs decide nothing: the training loss is watched
    assert PackSumXGB(seed=0)._holdout_mask(groups) is None  # off by default (Ansor's early stopping)

    # too small a hold-out: the fit is exactly the one without a hold-out
    rng = np.random.default_rng(0)
    progs = [_program(rng, 2) for _ in range(20)]
    models = [PackSumXGB(seed=0, max_rounds=50, warmup=1, nthread=1, holdout=h) for h in (0.0, 0.2)]
    for m in models:
        for p in progs:
            m.add(p, _cost(p) * 1e-3, "w")
        assert m.train()
    assert np.array_equal(models[0].predict(progs), models[1].predict(progs))


def test_the_holdout_is_a_preset_field():
    p = presets.get("quick", xgb_holdout=0.2)
    assert make_cost_model("pairwise-rank", 0, p, 1).holdout == 0.2
    assert make_cost_model(None, 0, presets.get("quick"), 1).holdout == 0.0
    for bad in (1.0, -0.1, "0.2", True):
        with pytest.raises(WorkbenchError, match="xgb_holdout must be a share of the programs in"):
            presets.get("quick", xgb_holdout=bad)


def test_cost_model_is_chosen_by_name_from_the_preset():
    p = presets.get("quick", cost_model="pairwise-rank")
    m = make_cost_model(p.cost_model, 0, p, 1)
    assert isinstance(m, PairwiseRankXGB) and m.warmup == p.warmup_samples and m.max_rounds == p.xgb_max_rounds
    assert type(make_cost_model(None, 0, p, 1)) is PackSumXGB
    assert set(COST_MODELS) == {"pack-sum", "pairwise-rank", "lambdarank"}
    with pytest.raises(WorkbenchError, match="unknown cost model 'lgbm'; valid: pack-sum, pairwise-rank, lambdarank"):
        presets.get("quick", cost_model="lgbm")


# ---------------------------------------------------------------- the shipped prior (workbench.prior)


def _full_program(rng):
    """A program with as many feature columns as the workbench computes (a prior is checked for that)."""
    from workbench.cost_model import N_FEATURES

    return rng.uniform(0, 1, size=(int(rng.integers(1, 4)), N_FEATURES)).astype(np.float32)


def _trained_on(cls, progs, group, **kw):
    m = cls(seed=0, max_rounds=200, early_stop=20, warmup=1, nthread=1, **kw)
    for p in progs:
        m.add(p, _cost(p) * 1e-3, group)
    assert m.train()
    return m


@pytest.mark.parametrize("cls", list(COST_MODELS.values()), ids=list(COST_MODELS))
def test_a_prior_ranks_a_new_workload_before_training_and_is_refined_after(cls, tmp_path, monkeypatch):
    from workbench import prior

    monkeypatch.setattr(prior, "DATA", str(tmp_path))
    rng = np.random.default_rng(5)
    corpus = [_full_program(rng) for _ in range(300)]
    path = prior.save(_trained_on(cls, corpus, "old"), {"programs": 300, "workloads": ["old"], "corpus": "test"})
    assert path == prior.model_path(cls.name) and prior.available() == [cls.name]
    booster, meta = prior.load(cls.name)
    assert meta["model"] == cls.name and "300 programs of 1 workloads" in prior.describe(meta)

    m = cls(seed=0, warmup=16, nthread=1)
    m.set_prior(booster, meta)
    assert m.has_prior and not m.trained and m.untrained_scores(4) is None and m.feature_importance()
    new = [_full_program(rng) for _ in range(80)]
    truth = np.array([1 / _cost(p) for p in new])
    before = m.predict(new)
    assert pd.Series(before).corr(pd.Series(truth), method="spearman") > 0.8  # ranked with no sample of its own
    for p in new[:40]:
        m.add(p, _cost(p) * 1e-3, "new")
    assert m.train() and m.trained
    after = m.predict(new[40:])
    assert pd.Series(after).corr(pd.Series(truth[40:]), method="spearman") > 0.8
    own_only = _trained_on(cls, new[:40], "new").predict(new[40:])
    assert not np.allclose(after, own_only)  # the own trees sit on top of the prior's output


def test_the_shipped_priors_load_and_rank_programs_before_any_sample_of_their_own():
    """The priors under workbench/data (benchmarks/corpus.py --prior): one per cost model, with the feature count
    this version computes and a description of their corpus; a session's model starts ranking with them."""
    from workbench import prior

    assert prior.available() == list(COST_MODELS)
    rng = np.random.default_rng(0)
    progs = [_full_program(rng) for _ in range(8)]
    for name in COST_MODELS:
        _booster, meta = prior.load(name)
        assert meta["model"] == name and meta["programs"] > 0 and len(meta["workloads"]) >= 10
        m = make_cost_model(name, 0, presets.get("quick", prior=True), 1, with_prior=True)
        assert m.has_prior and not m.trained
        scores = np.asarray(m.predict(progs))
        assert scores.shape == (8,) and np.isfinite(scores).all() and np.ptp(scores) > 0


def test_no_prior_is_a_one_line_error(tmp_path, monkeypatch):
    from workbench import prior

    monkeypatch.setattr(prior, "DATA", str(tmp_path))
    with pytest.raises(WorkbenchError, match="no prior ships for the cost model 'pack-sum'.*corpus.py --prior"):
        prior.load("pack-sum")
    with pytest.raises(WorkbenchError, match="no prior ships"):
        presets.get("quick", prior=True)
    assert make_cost_model("pack-sum", 0, presets.get("quick"), 1).has_prior is False


def test_a_prior_trained_on_other_features_is_refused(tmp_path, monkeypatch):
    from workbench import prior

    monkeypatch.setattr(prior, "DATA", str(tmp_path))
    rng = np.random.default_rng(6)
    prior.save(_trained_on(PackSumXGB, [_program(rng, 2) for _ in range(50)], "old"), {})
    with pytest.raises(WorkbenchError, match="trained on 8 features, this version computes .*retrain it"):
        prior.load("pack-sum")


def test_per_strategy_models_learn_each_strategy_from_its_own_programs_only():
    from workbench import cost_model

    def make():
        return cost_model.PackSumXGB(seed=0, max_rounds=60, early_stop=10, warmup=8, nthread=1)

    model = cost_model.PerStrategyModels(make)
    rng = np.random.default_rng(3)
    k = cost_model.N_STRATEGIES

    def program(strategy: int):
        f = rng.uniform(0, 1, size=(2, cost_model.N_FEATURES)).astype(np.float32)
        f[:, -k:] = np.eye(k, dtype=np.float32)[strategy]
        return f

    # Opposite truths: under strategy 0 a large feature 0 is fast, under strategy 1 it is slow.
    for _ in range(60):
        for s, sign in ((0, 1.0), (1, -1.0)):
            p = program(s)
            model.add(p, 1.0 / (2.0 + sign * p[:, 0].sum()), "w")
    assert model.n_samples == 120 and not model.calibrated and model.name == "pack-sum"
    assert model.untrained_scores(2) is not None and model.train() and model.trained
    test = [program(s) for s in (0, 1) for _ in range(20)]
    pred = model.predict(test)
    x = np.array([p[:, 0].sum() for p in test])
    assert np.corrcoef(pred[:20], x[:20])[0, 1] > 0.7  # strategy 0's model: faster with feature 0
    assert np.corrcoef(pred[20:], x[20:])[0, 1] < -0.7  # strategy 1's own model: the other way
    # a strategy with no programs yet gets random scores while the others are trained
    assert np.all((model.predict([program(2)]) >= 0) & (model.predict([program(2)]) < 1))


def test_one_model_per_strategy_needs_the_one_hot_and_no_prior():
    from workbench.errors import WorkbenchError

    assert presets.get("quick", shared_cost_model=False).shared_cost_model is False
    for bad in ({"strategy_onehot": False}, {"prior": True}):
        with pytest.raises(WorkbenchError, match="one cost model per strategy"):
            presets.get("quick", shared_cost_model=False, **bad)
