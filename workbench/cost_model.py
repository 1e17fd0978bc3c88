"""The learned cost model: XGBoost on per-store features with Ansor's pack-sum objective.

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
    """Training data + booster. Thread-safe: the search thread predicts while the UI reads."""

    def __init__(self, seed: int = 0, max_rounds: int = 200, early_stop: int = 25, warmup: int = 16, nthread: int = 2):
        self.seed = seed
        self.max_rounds = max_rounds
        self.early_stop = early_stop
        self.warmup = warmup
        self.nthread = nthread
        self.booster = None
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
        t0 = time.time()
        rows = np.array([len(f) for f in feats])
        seg = np.repeat(np.arange(n), rows)
        X = np.concatenate(feats) if feats else np.zeros((0, 1), np.float32)
        y_rows = y[seg]
        dtrain = xgb.DMatrix(X, label=y_rows)

        def obj(preds, _d):
            pred_c = _segment_sum(preds, seg, n)
            g = ((pred_c - y) * y)[seg]
            h = y[seg]
            return g, h

        def metric(preds, _d):
            pred_c = _segment_sum(preds, seg, n)
            return "p-rmse", float(np.sqrt(np.mean((pred_c - y) ** 2)))

        params = {
            "max_depth": 10,
            "gamma": 0.001,
            "min_child_weight": 0,
            "eta": 0.2,
            "nthread": self.nthread,
            "seed": self.seed,
            "verbosity": 0,
            "base_score": 0.0,
            "tree_method": "hist",
            "disable_default_eval_metric": 1,
        }
        booster = xgb.train(
            params,
            dtrain,
            num_boost_round=self.max_rounds,
            obj=obj,
            custom_metric=metric,
            evals=[(dtrain, "train")],
            early_stopping_rounds=self.early_stop,
            verbose_eval=False,
        )
        with self._lock:
            self.booster = booster
            self.last_train_seconds = time.time() - t0
            self.last_train_rounds = booster.num_boosted_rounds()
            self.n_trainings += 1
        return True

    # ---- prediction ----
    def predict(self, feats: list[np.ndarray]) -> np.ndarray:
        """Scores, higher is better; uniform random until the model has been trained."""
        import xgboost as xgb

        n = len(feats)
        with self._lock:
            booster = self.booster
            if booster is None:
                return self._rng.uniform(0, 1, n)
        rows = np.array([len(f) for f in feats])
        if n == 0:
            return np.zeros(0)
        seg = np.repeat(np.arange(n), rows)
        X = np.concatenate(feats).astype(np.float32)
        return _segment_sum(booster.predict(xgb.DMatrix(X)), seg, n)

    def untrained_scores(self, n: int) -> np.ndarray | None:
        """The random scores ``predict`` gives n programs while there is no model yet; None once trained."""
        with self._lock:
            return self._rng.uniform(0, 1, n) if self.booster is None else None

    def feature_importance(self) -> dict:
        if self.booster is None:
            return {}
        return self.booster.get_score(importance_type="gain")


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


def search_cost_model(model: PackSumXGB, featurizer: Featurizer, strategy_of_ctx):
    """Wrap the model as a MetaSchedule ``PyCostModel`` for EvolutionarySearch.

    ``strategy_of_ctx(ctx) -> str`` tells which strategy's search is asking, so
    the one-hot is right. Training is driven by the session, not by TVM.
    """
    global _PY_COST_MODEL
    if _PY_COST_MODEL is None:
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms

        @derived_object
        class SharedCostModel(ms.cost_model.PyCostModel):
            def __init__(self, model, featurizer, strategy_of_ctx):
                super().__init__()
                self.model = model
                self.featurizer = featurizer
                self.strategy_of_ctx = strategy_of_ctx

            def load(self, path: str) -> None:
                raise NotImplementedError("the workbench retrains from its records store")

            def save(self, path: str) -> None:
                self.model.booster.save_model(path)

            def update(self, context, candidates, results) -> None:
                pass  # the session adds data and retrains once per round

            def predict(self, context, candidates):
                if self.featurizer.reuse:  # untrained: random scores, no features needed
                    scores = self.model.untrained_scores(len(candidates))
                    if scores is not None:
                        return scores.astype("float64")
                feats = self.featurizer(context, candidates, self.strategy_of_ctx(context))
                return self.model.predict(feats).astype("float64")

        _PY_COST_MODEL = SharedCostModel
    return _PY_COST_MODEL(model, featurizer, strategy_of_ctx)
