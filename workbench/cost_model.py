"""The learned cost models: XGBoost on per-store features with Ansor's pack-sum objective (``PackSumXGB``,
the default), a pairwise ranking objective (``PairwiseRankXGB``) or its NDCG-weighted form (``LambdaRankXGB``,
LambdaMART); ``COST_MODELS`` names them for the preset field ``cost_model``.

A program is a bag of statements (one feature row per buffer store, TVM's
164-dim ``PerStoreFeature``). Its score is the *sum* of the per-row outputs; the
label is its normalised throughput ``y = min_cost / cost`` within its workload
(1 for the best program seen, 0 for failures). Loss, as in Ansor:

    L = sum_P y_P * (sum_{s in P} f(s) - y_P)^2      grad = (pred - y) * y,  hess = y

One model is shared by every layout strategy: each row carries a one-hot of the
strategy that produced the program, and costs are compared under each
strategy's deployment latency, so a single model ranks programs across
strategies (AL-Ansor). It plugs into TVM's EvolutionarySearch as a
``PyCostModel`` and is retrained from scratch on all data after every round
(XGBoost trees cannot be updated incrementally), with early stopping on the
training pack-sum RMSE.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from . import interfaces, layouts

N_STRATEGIES = len(layouts.STRATEGY_INDEX)
N_FEATURES = 164 + N_STRATEGIES  # TVM's PerStoreFeature row, then the strategy one-hot


def _segment_sum(values, seg_ids, n):
    return np.bincount(seg_ids, weights=values, minlength=n)


class PackSumXGB(interfaces.CostModel):
    """Training data + booster. Thread-safe: the search thread predicts while the UI reads.

    ``calibrated``: its scores estimate a program's throughput relative to the best of its workload (the
    regression target), so the controller may compare arms by their mean score."""

    name = "pack-sum"
    calibrated = True
    # Ansor's: deep trees, no minimum child weight (the hessian is the label, so zero for failures)
    TREE_PARAMS = {"max_depth": 10, "gamma": 0.001, "min_child_weight": 0, "eta": 0.2}

    # A hold-out with fewer programs than this decides nothing: the training loss is watched instead.
    MIN_HOLDOUT_PROGRAMS = 8

    def __init__(
        self,
        seed: int = 0,
        max_rounds: int = 200,
        early_stop: int = 25,
        warmup: int = 16,
        nthread: int = 2,
        holdout: float = 0.0,
    ):
        self.seed = seed
        self.max_rounds = max_rounds
        self.early_stop = early_stop
        # Early stopping watches the training loss when 0 (Ansor's: it only stops a fit that has stopped improving
        # on its own data); else this share of each workload's programs, drawn anew per fit, decides how many trees
        # generalise, and the model is then refitted on every program with that many.
        self.holdout = holdout
        self.warmup = warmup
        self.nthread = nthread
        self.booster = None
        # A shipped prior (workbench.prior): ranks before the own model is trained, then the own trees are
        # fitted on top of its output (XGBoost's base margin).
        self.prior = None
        self.prior_meta: dict = {}
        self._feats: list[np.ndarray] = []  # per candidate: (rows, F)
        self._cost: list[float] = []  # latency in ms; inf for failures
        self._group: list[str] = []  # workload name: labels are normalised per workload
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self.last_train_seconds = 0.0
        self.last_train_rounds = 0
        self.n_trainings = 0

    # ---- data ----
    @property
    def n_samples(self) -> int:
        return len(self._cost)

    @property
    def trained(self) -> bool:
        return self.booster is not None

    @property
    def has_prior(self) -> bool:
        return self.prior is not None

    def set_prior(self, booster, meta: dict | None = None) -> None:
        """Start from a prior trained on other workloads (``workbench.prior.load``) with the same objective."""
        with self._lock:
            self.prior, self.prior_meta = booster, dict(meta or {})

    def _prior_margin(self, X: np.ndarray):
        """The prior's per-row output for feature rows X (None without a prior)."""
        import xgboost as xgb

        if self.prior is None:
            return None
        return self.prior.predict(xgb.DMatrix(X), output_margin=True)

    def add(self, feats: np.ndarray, latency_ms: float | None, group: str) -> None:
        """One measured program: its feature rows, its latency (None for a failure) and its workload (labels
        are throughput relative to the workload's best, so the unit cancels)."""
        with self._lock:
            self._feats.append(np.asarray(feats, dtype=np.float32))
            self._cost.append(float(latency_ms) if latency_ms else float("inf"))
            self._group.append(group)

    def labels(self) -> np.ndarray:
        cost = np.array(self._cost)
        groups = np.array(self._group)
        y = np.zeros(len(cost))
        for g in set(self._group):
            m = groups == g
            best = cost[m].min()
            if np.isfinite(best):
                y[m] = np.where(np.isfinite(cost[m]), best / cost[m], 0.0)
        return y

    # ---- training ----
    def train(self) -> bool:
        import xgboost as xgb

        with self._lock:
            n = len(self._cost)
            if n < self.warmup or not np.isfinite(np.min(self._cost)):
                return False
            feats = list(self._feats)
            y = self.labels()
            groups = list(self._group)
        t0 = time.time()
        params = {
            **self.TREE_PARAMS,
            "nthread": self.nthread,
            "seed": self.seed,
            "verbosity": 0,
            "base_score": 0.0,
            "tree_method": "hist",
            "disable_default_eval_metric": 1,
        }
        dtrain, obj, metric = self._training_set(feats, y, groups)
        held = self._holdout_mask(groups)
        if held is None:
            dfit, fit_obj, dwatch, watch_metric = dtrain, obj, dtrain, metric
        else:
            fit, out = np.flatnonzero(~held), np.flatnonzero(held)
            dfit, fit_obj, _ = self._training_set([feats[i] for i in fit], y[fit], [groups[i] for i in fit])
            dwatch, _, watch_metric = self._training_set([feats[i] for i in out], y[out], [groups[i] for i in out])
        booster = xgb.train(
            params,
            dfit,
            num_boost_round=self.max_rounds,
            obj=fit_obj,
            custom_metric=watch_metric,
            evals=[(dwatch, "watch")],
            early_stopping_rounds=self.early_stop,
            verbose_eval=False,
        )
        if held is not None:
            booster = xgb.train(params, dtrain, num_boost_round=booster.best_iteration + 1, obj=obj)
        with self._lock:
            self.booster = booster
            self.last_train_seconds = time.time() - t0
            self.last_train_rounds = booster.num_boosted_rounds()
            self.n_trainings += 1
        return True

    def _training_set(self, feats: list, y: np.ndarray, groups: list):
        """The DMatrix of these programs' feature rows (on the prior's margin) with their objective and metric."""
        import xgboost as xgb

        n = len(feats)
        rows = np.array([len(f) for f in feats])
        seg = np.repeat(np.arange(n), rows)
        X = np.concatenate(feats) if feats else np.zeros((0, 1), np.float32)
        dmat = xgb.DMatrix(X, label=y[seg], base_margin=self._prior_margin(X))
        obj, metric = self._objective(seg, n, y, groups)
        return dmat, obj, metric

    def _holdout_mask(self, groups: list) -> np.ndarray | None:
        """Which programs the fit holds out to decide when to stop: ``holdout`` of each workload's, at least two
        of any workload that lends some (the ranking metrics compare pairs within a workload), None when the
        hold-out is off or would be too small to decide anything."""
        if self.holdout <= 0:
            return None
        names = np.array(groups)
        members = [np.flatnonzero(names == g) for g in dict.fromkeys(groups)]
        shares = [int(round(self.holdout * len(idx))) for idx in members]
        shares = [k if k >= 2 and len(idx) - k >= 2 else 0 for k, idx in zip(shares, members)]
        if sum(shares) < self.MIN_HOLDOUT_PROGRAMS:
            return None
        held = np.zeros(len(groups), bool)
        for idx, k in zip(members, shares):
            if k:
                held[self._rng.choice(idx, k, replace=False)] = True
        return held

    def _objective(self, seg: np.ndarray, n: int, y: np.ndarray, groups: list):
        """XGBoost's custom objective and evaluation metric over per-row predictions (``seg``: each row's
        program; ``y``, ``groups``: each program's label and workload): Ansor's pack-sum regression (a
        program's score is the sum of its rows' outputs, fitted to its label ``y``, weighted by ``y``)."""

        def obj(preds, _d):
            pred_c = _segment_sum(preds, seg, n)
            return ((pred_c - y) * y)[seg], y[seg]

        def metric(preds, _d):
            pred_c = _segment_sum(preds, seg, n)
            return "p-rmse", float(np.sqrt(np.mean((pred_c - y) ** 2)))

        return obj, metric

    # ---- prediction ----
    def predict(self, feats: list[np.ndarray]) -> np.ndarray:
        """Scores, higher is better; uniform random until the model has been trained."""
        import xgboost as xgb

        n = len(feats)
        with self._lock:
            booster, prior = self.booster, self.prior
            if booster is None and prior is None:
                return self._rng.uniform(0, 1, n)
        rows = np.array([len(f) for f in feats])
        if n == 0:
            return np.zeros(0)
        seg = np.repeat(np.arange(n), rows)
        X = np.concatenate(feats).astype(np.float32)
        margin = prior.predict(xgb.DMatrix(X), output_margin=True) if prior is not None else None
        out = margin if booster is None else booster.predict(xgb.DMatrix(X, base_margin=margin))
        return _segment_sum(out, seg, n)

    def untrained_scores(self, n: int) -> np.ndarray | None:
        """The random scores ``predict`` gives n programs while there is no model yet; None once trained."""
        with self._lock:
            return self._rng.uniform(0, 1, n) if self.booster is None and self.prior is None else None

    def feature_importance(self) -> dict:
        """The own model's gain per feature (the prior's until the own model is trained; {} without either)."""
        booster = self.booster if self.booster is not None else self.prior
        if booster is None:
            return {}
        return booster.get_score(importance_type="gain")


class PairwiseRankXGB(PackSumXGB):
    """Pack-sum features and trees with a pairwise ranking objective (RankNet's logistic loss).

    The search only uses the *order* of candidates, so the model is fitted to orders: over pairs ``(i, j)``
    of programs of one workload with ``y_i > y_j`` (failures below every success),

        L = sum log(1 + exp(-(s_i - s_j)))      s_P = sum_{rows of P} f(row)

    with ``y`` the normalised throughput as in ``PackSumXGB`` (only its order matters here). A workload
    with more than ``max_pairs`` pairs is trained on a seeded uniform sample of them, drawn anew for each
    fit. Early stopping watches the mean pair loss. Scores are logits: their order means something, their
    scale does not (``calibrated`` is False, so the controller does not compare arms by mean score)."""

    name = "pairwise-rank"
    METRIC = "pair-logloss"
    calibrated = False
    max_pairs = 200_000
    # Shallower, more regularised trees than pack-sum's: a program's hessian sums over all its pairs, and with
    # Ansor's settings the fit chased the training pairs (held-out Spearman 0.67-0.78 on a synthetic additive
    # cost, 0.84-0.89 with these); which settings suit real programs is for the offline evaluation to say.
    TREE_PARAMS = {"max_depth": 6, "gamma": 0.001, "min_child_weight": 1, "eta": 0.1, "lambda": 10.0}

    def _pairs(self, y: np.ndarray, groups: list) -> tuple[np.ndarray, np.ndarray]:
        """(better, worse) program indices of the training pairs."""
        names = np.array(groups)
        better, worse = [], []
        for g in dict.fromkeys(groups):
            idx = np.flatnonzero(names == g)
            yi = y[idx]
            i, j = np.nonzero(yi[:, None] > yi[None, :])
            if len(i) > self.max_pairs:
                keep = self._rng.choice(len(i), self.max_pairs, replace=False)
                i, j = i[keep], j[keep]
            better.append(idx[i])
            worse.append(idx[j])
        if not better:
            return np.zeros(0, int), np.zeros(0, int)
        return np.concatenate(better), np.concatenate(worse)

    def _pair_weights(self, n: int, y: np.ndarray, groups: list, bi: np.ndarray, wi: np.ndarray):
        """The training pairs' weights as a function of the programs' current scores: here every pair counts 1."""
        ones = np.ones(len(bi))
        return lambda s: ones

    def _objective(self, seg: np.ndarray, n: int, y: np.ndarray, groups: list):
        bi, wi = self._pairs(y, groups)
        weights = self._pair_weights(n, y, groups, bi, wi)

        def obj(preds, _d):
            s = _segment_sum(preds, seg, n)
            w = weights(s)
            p = 0.5 * (1.0 - np.tanh(0.5 * (s[bi] - s[wi])))  # sigmoid(s_j - s_i) = -dL/d(s_i - s_j), no overflow
            grad = np.bincount(wi, weights=w * p, minlength=n) - np.bincount(bi, weights=w * p, minlength=n)
            h = w * p * (1.0 - p)
            hess = np.bincount(bi, weights=h, minlength=n) + np.bincount(wi, weights=h, minlength=n)
            return grad[seg], np.maximum(hess, 1e-6)[seg]

        def metric(preds, _d):
            if not len(bi):
                return self.METRIC, 0.0
            s = _segment_sum(preds, seg, n)
            w = weights(s)
            return self.METRIC, float(np.sum(w * np.logaddexp(0.0, s[wi] - s[bi])) / max(np.sum(w), 1e-12))

        return obj, metric


class LambdaRankXGB(PairwiseRankXGB):
    """``PairwiseRankXGB`` with LambdaMART's weighting: each pair's gradient is scaled by how much swapping the two
    programs in the current ranking would change its NDCG (gain: the normalised throughput ``y``; discount
    1/log2(1 + rank) within the workload), so the fit spends its capacity on the top of each workload's ranking,
    where the search picks what to measure, rather than on ordering slow programs among themselves."""

    name = "lambdarank"
    METRIC = "lambda-logloss"

    def _pair_weights(self, n: int, y: np.ndarray, groups: list, bi: np.ndarray, wi: np.ndarray):
        names = np.array(groups)
        members = [np.flatnonzero(names == g) for g in dict.fromkeys(groups)]
        # the ideal DCG of each program's workload: its programs sorted by y
        idcg = np.zeros(n)
        for idx in members:
            ideal = np.sort(y[idx])[::-1]
            idcg[idx] = float(np.sum(ideal / np.log2(np.arange(2, len(idx) + 2)))) or 1.0

        def delta_ndcg(s: np.ndarray) -> np.ndarray:
            discount = np.zeros(n)
            for idx in members:
                order = idx[np.argsort(-s[idx], kind="stable")]
                discount[order] = 1.0 / np.log2(np.arange(2, len(idx) + 2))
            return np.abs((y[bi] - y[wi]) * (discount[bi] - discount[wi])) / idcg[bi]

        return delta_ndcg


class PerStrategyModels(interfaces.CostModel):
    """One model per layout strategy instead of one shared by all (the AL-Ansor ablation "no shared model",
    preset ``shared_cost_model=False``): a program goes to the model of the strategy its features' one-hot
    names (``Featurizer`` with ``strategy_onehot``); programs without a one-hot all go to one model. Each model
    labels its programs relative to its own strategy's best, so scores of different strategies are not on one
    scale (``calibrated`` is False) and each arm's search learns only from its own programs."""

    calibrated = False

    def __init__(self, make_model):
        self._make = make_model
        self._models: dict[int, PackSumXGB] = {}
        self._lock = threading.Lock()
        self.name = make_model().name
        self._rng = np.random.default_rng(0)

    def _model(self, key: int) -> PackSumXGB:
        with self._lock:
            if key not in self._models:
                self._models[key] = self._make()
            return self._models[key]

    @staticmethod
    def _key(feats: np.ndarray) -> int:
        onehot = np.asarray(feats)[0, -N_STRATEGIES:]
        hot = np.flatnonzero(onehot == 1.0)
        return int(hot[0]) if len(hot) == 1 and np.count_nonzero(onehot) == 1 else -1

    def _all(self) -> list:
        with self._lock:
            return list(self._models.values())

    @property
    def n_samples(self) -> int:
        return sum(m.n_samples for m in self._all())

    @property
    def trained(self) -> bool:
        return any(m.trained for m in self._all())

    @property
    def has_prior(self) -> bool:
        return False

    prior_meta: dict = {}

    @property
    def last_train_rounds(self) -> int:
        return max((m.last_train_rounds for m in self._all()), default=0)

    def add(self, feats: np.ndarray, latency_ms: float | None, group: str) -> None:
        self._model(self._key(feats)).add(feats, latency_ms, group)

    def train(self) -> bool:
        trained = [m.train() for m in self._all()]
        return any(trained)

    def predict(self, feats: list[np.ndarray]) -> np.ndarray:
        out = np.zeros(len(feats))
        keys = np.array([self._key(f) for f in feats], dtype=int)
        for key in set(keys.tolist()):
            idx = np.flatnonzero(keys == key)
            out[idx] = self._model(key).predict([feats[i] for i in idx])
        return out

    def untrained_scores(self, n: int) -> np.ndarray | None:
        # which strategy asks is in the features only: while no strategy's model is trained, random scores
        return None if self.trained else self._rng.uniform(0, 1, n)

    def feature_importance(self) -> dict:
        total: dict = {}
        for m in self._all():
            for k, v in m.feature_importance().items():
                total[k] = total.get(k, 0.0) + v
        return total


COST_MODELS = {m.name: m for m in (PackSumXGB, PairwiseRankXGB, LambdaRankXGB)}
DEFAULT_COST_MODEL = PackSumXGB.name


def make_cost_model(name: str | None, seed: int, preset, nthread: int, with_prior: bool = False) -> PackSumXGB:
    """The cost model called ``name`` (``COST_MODELS``; None: the default), sized by the preset's
    ``xgb_max_rounds``, ``xgb_early_stop``, ``xgb_holdout`` and ``warmup_samples``; ``with_prior``: started from the prior
    shipped for it (``workbench.prior``)."""
    name = name or DEFAULT_COST_MODEL
    if name not in COST_MODELS:
        from .errors import WorkbenchError

        raise WorkbenchError(f"unknown cost model {name!r}; valid: {', '.join(COST_MODELS)}")
    model = COST_MODELS[name](
        seed=seed,
        max_rounds=preset.xgb_max_rounds,
        early_stop=preset.xgb_early_stop,
        warmup=preset.warmup_samples,
        nthread=nthread,
        holdout=preset.xgb_holdout,
    )
    if with_prior:
        from . import prior

        model.set_prior(*prior.load(name))
    return model


def feature_names(extractor_len: int = 164) -> list[str]:
    """Column names: TVM's per-store feature indices, then the strategy one-hot."""
    return [f"f{i}" for i in range(extractor_len)] + [f"strategy={s}" for s in layouts.STRATEGY_INDEX]


class Featurizer:
    """PerStoreFeature rows plus the layout-strategy one-hot.

    ``context`` is a TuneContext used only for its thread count: features are
    extracted on all cores even when the search itself runs on one thread.
    """

    def __init__(self, context=None, cache_size: int = 20000, strategy_onehot: bool = True, reuse: bool = True):
        from tvm.s_tir import meta_schedule as ms

        # Feature reuse (off only to measure its effect, benchmarks/_profile.py): a program's features are
        # computed once and looked up by structural hash afterwards (the evolutionary search re-scores the
        # survivors of every generation and the measured elites of every round, and the session featurizes
        # the batch the search just scored), and the search extracts no features while the model is
        # untrained (its scores are then uniform random numbers anyway).
        self.reuse = reuse

        # Off: the one-hot columns stay zero, so one model ranks every strategy's programs by their loop
        # features alone (the AL-Ansor ablation "no strategy one-hot").
        self.strategy_onehot = strategy_onehot

        self.extractor = ms.feature_extractor.PerStoreFeature()
        self.context = context
        self.cache_size = cache_size
        self._cache: dict = {}  # structural hash of the program -> its PerStoreFeature rows
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def _raw(self, ctx, candidates) -> list[np.ndarray]:
        def extract(cands):
            return [f.numpy().astype(np.float32) for f in self.extractor.extract_from(self.context or ctx, cands)]

        if not self.reuse:
            return extract(candidates)
        from tvm_ffi import structural_hash

        keys = [structural_hash(c.sch.mod) for c in candidates]
        with self._lock:
            found = [self._cache.get(k) for k in keys]
        miss = [i for i, f in enumerate(found) if f is None]
        if miss:
            for i, a in zip(miss, extract([candidates[i] for i in miss])):
                found[i] = a
            with self._lock:
                if len(self._cache) + len(miss) > self.cache_size:
                    self._cache.clear()
                for i in miss:
                    self._cache[keys[i]] = found[i]
        self.hits += len(keys) - len(miss)
        self.misses += len(miss)
        return found

    def __call__(self, ctx, candidates, strategy: str) -> list[np.ndarray]:
        raw = self._raw(ctx, candidates)
        onehot = np.zeros(N_STRATEGIES, np.float32)
        if self.strategy_onehot:
            onehot[layouts.STRATEGY_INDEX[strategy]] = 1.0
        out = []
        for a in raw:
            if a.shape[0] == 0:  # a program with no stores: give it one zero row so it still has a score
                a = np.zeros((1, a.shape[1] if a.ndim == 2 else 164), np.float32)
            out.append(np.concatenate([a, np.tile(onehot, (a.shape[0], 1))], axis=1))
        return out


_PY_COST_MODEL = None


def search_cost_model(model: PackSumXGB, featurizer: Featurizer, strategy_of_ctx, pruner=None):
    """Wrap the model as a MetaSchedule ``PyCostModel`` for EvolutionarySearch.

    ``strategy_of_ctx(ctx) -> str`` tells which strategy's search is asking, so
    the one-hot is right. Training is driven by the session, not by TVM. With an
    enabled ``pruning.Pruner``, the programs it rejects score below all others.
    """
    global _PY_COST_MODEL
    if _PY_COST_MODEL is None:
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms

        @derived_object
        class SharedCostModel(ms.cost_model.PyCostModel):
            def __init__(self, model, featurizer, strategy_of_ctx, pruner):
                super().__init__()
                self.model = model
                self.featurizer = featurizer
                self.strategy_of_ctx = strategy_of_ctx
                self.pruner = pruner

            def load(self, path: str) -> None:
                raise NotImplementedError("the workbench retrains from its records store")

            def save(self, path: str) -> None:
                self.model.booster.save_model(path)

            def update(self, context, candidates, results) -> None:
                pass  # the session adds data and retrains once per round

            def predict(self, context, candidates):
                pruning = self.pruner is not None and self.pruner.enabled
                if self.featurizer.reuse and not pruning:  # untrained: random scores, no features needed
                    scores = self.model.untrained_scores(len(candidates))
                    if scores is not None:
                        return scores.astype("float64")
                feats = self.featurizer(context, candidates, self.strategy_of_ctx(context))
                scores = self.model.untrained_scores(len(candidates)) if self.featurizer.reuse else None
                scores = self.model.predict(feats) if scores is None else scores
                if pruning:
                    from .pruning import pruned_scores

                    scores = pruned_scores(scores, self.pruner.check(feats))
                return np.asarray(scores).astype("float64")

        _PY_COST_MODEL = SharedCostModel
    return _PY_COST_MODEL(model, featurizer, strategy_of_ctx, pruner)
