"""Search and measurement parameters, by name.

``quick`` is sized for a 2-core machine and interactive use (the evolutionary
search, on one thread for reproducibility, is most of a round's time, so its
population is kept small); ``faithful`` uses
Ansor's published defaults (population 2048, 4 generations, mutation 0.85,
eps-greedy 0.05, 64 measurements per round, Ansor's mutation weights, its
runner settings and its XGBoost parameters).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace

from .errors import WorkbenchError


@dataclass(frozen=True)
class Preset:
    name: str
    # evolutionary search
    population: int
    generations: int
    mutate_prob: float
    eps_greedy: float
    init_measured_ratio: float
    init_min_unmeasured: int
    trials_per_round: int
    mutator_probs: tuple  # (tile size, compute location, unroll, parallel)
    # cost model
    warmup_samples: int
    xgb_max_rounds: int
    xgb_early_stop: int
    # measurement (TVM time_evaluator): `repeat` results, each the mean of >= `number`
    # runs, with `number` grown until one repeat lasts `min_repeat_ms`
    number: int
    repeat: int
    min_repeat_ms: int
    # A compile is cut off only when it hangs: long compiles (big register tiles, deep unrolling) include the
    # fastest programs of some layers (records' build_s), so a deadline tied to the median compile would drop them.
    build_timeout: float = 60.0
    # Runner processes that each time a candidate, one after the other; the faster one's median counts. Now and
    # then a process times a kernel 10 % to 3x slower than another does a moment later, and keeps that figure: on
    # a steady host two processes cut such disagreements by about three (docs/measurement.md).
    runner_processes: int = 2
    run_timeout: float = 30.0
    # Threads of TVM's EvolutionarySearch (0: every available core). It hands work to threads
    # dynamically, so with more than one the same seed no longer gives the same proposals:
    # ``deterministic`` forces one search thread, for reproducible sessions (tests, classroom demos,
    # method comparisons). The loop never searches while a kernel is timed, so the cores are free.
    search_threads: int = 0
    deterministic: bool = False
    # Search the next round while this round's programs build (in the builder's processes): its proposals come
    # from the model and search database as they were before this round was measured, and are used when the
    # controller then picks the strategy they were made for (else dropped). Never while a kernel is timed.
    # ``deterministic`` turns it off (a round's proposals then always follow everything measured before it).
    overlap: bool = True
    # Multi-strategy sessions: every measured program is also offered to the other strategies'
    # searches (replayed under their own postprocessors), so an arm starts from the best found by any.
    cross_seed: bool = True
    # Multi-strategy sessions in auto mode: a round's new best is also measured under the other strategies'
    # layouts, the same loop nest, and credited to their arms (controller: "Paired layouts").
    pair_layouts: bool = False
    # Measurement noise (docs/measurement.md): "wait" for a quiet machine and re-time a disturbed candidate,
    # "mark" it noisy only, or "off"; and how many interleaved rounds re-measure a would-be best against
    # the incumbents before it is declared best (0: none).
    noise: str = "wait"
    confirm_rounds: int = 3
    # Multi-strategy sessions in auto mode: the controller's arm policy (controller.POLICIES) and its
    # exploration weight c and model-guidance weight lam (None: the policy's own default).
    controller_policy: str = "optimistic-best"
    controller_c: float | None = None
    controller_lam: float | None = None
    # Rounds every arm gets before the policy chooses (the warm-up, arms in turn): one 8-trial round's best
    # decides little when the strategies are within a few per cent of each other.
    controller_warmup_rounds: int = 1
    # The strategy one-hot in the shared cost model's features (off only for the AL-Ansor ablation).
    strategy_onehot: bool = True
    # One cost model shared by every strategy's search (AL-Ansor); False: one model per strategy, each
    # trained on its own strategy's programs only (the ablation; cost_model.PerStrategyModels).
    shared_cost_model: bool = True
    # The cost model (cost_model.COST_MODELS): "pack-sum" regression (Ansor's), "pairwise-rank" or "lambdarank".
    cost_model: str = "pack-sum"
    # Start the cost model from the prior shipped for it (workbench.prior): it ranks the first rounds.
    prior: bool = False
    # Features computed once per program and none while the model is untrained (cost_model.Featurizer).
    feature_reuse: bool = True
    # Share of each workload's measured programs the cost model holds out of a fit to decide how many trees to
    # keep (then refitted on all of them); 0: early stopping watches the training loss, as Ansor's does.
    xgb_holdout: float = 0.0
    # Rule-based pruning of the schedule space (workbench.pruning.RULES; () none): programs breaking a rule
    # get the search's lowest score and are not measured.
    pruning: tuple = ()

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def overlaps(self) -> bool:
        """Whether the next round is searched while this one builds."""
        return self.overlap and not self.deterministic

    def effective_search_threads(self, available: int) -> int:
        """The evolutionary search's thread count on a machine with ``available`` cores."""
        if self.deterministic:
            return 1
        return max(1, min(self.search_threads or available, available))


PRESETS = {
    "quick": Preset(
        "quick",
        population=128,
        generations=3,
        mutate_prob=0.85,
        eps_greedy=0.05,
        init_measured_ratio=0.2,
        init_min_unmeasured=32,
        trials_per_round=16,
        mutator_probs=(0.90, 0.05, 0.03, 0.02),
        warmup_samples=16,
        xgb_max_rounds=200,
        xgb_early_stop=25,
        number=1,
        repeat=3,
        min_repeat_ms=30,
    ),
    "faithful": Preset(
        "faithful",
        population=2048,
        generations=4,
        mutate_prob=0.85,
        eps_greedy=0.05,
        init_measured_ratio=0.2,
        init_min_unmeasured=50,
        trials_per_round=64,
        mutator_probs=(0.90, 0.05, 0.04, 0.01),
        warmup_samples=64,
        xgb_max_rounds=10000,
        xgb_early_stop=50,
        number=3,
        repeat=1,
        min_repeat_ms=100,
    ),
}


# The default noise mode of a named preset, when set: e.g. "mark" on a shared CI machine, where waiting for a quiet
# machine only slows the run (the test suite sets it; its noise tests ask for "wait" explicitly). A resumed
# session keeps the mode it was started with.
NOISE_ENV = "WORKBENCH_NOISE"
# "1": named presets default to ``deterministic`` (one search thread), e.g. for a benchmark that compares the
# same seeded session run two ways (benchmarks/live_dashboard.py: headless and in the browser).
DETERMINISTIC_ENV = "WORKBENCH_DETERMINISTIC"


# Other fields a named preset takes from the environment, as a JSON object: e.g. on a CI machine that checks what
# the workbench does, not how fast it tunes, '{"min_repeat_ms": 10, "confirm_rounds": 1}' shortens every timing
# (the test suite sets it). Values a caller passes (a session's own arguments) win; a session's store keeps the
# values it ran with.
OVERRIDES_ENV = "WORKBENCH_PRESET_OVERRIDES"


def _env_overrides() -> dict:
    raw = os.environ.get(OVERRIDES_ENV, "").strip()
    if not raw:
        return {}
    import json

    try:
        got = json.loads(raw)
    except ValueError as e:
        raise WorkbenchError(f"{OVERRIDES_ENV} must be a JSON object of preset fields: {e}") from None
    if not isinstance(got, dict):
        raise WorkbenchError(f"{OVERRIDES_ENV} must be a JSON object of preset fields, got {raw!r}")
    fields = set(Preset.__dataclass_fields__) - {"name"}
    unknown = sorted(set(got) - fields)
    if unknown:
        raise WorkbenchError(
            f"{OVERRIDES_ENV}: unknown preset field(s) {', '.join(unknown)}; valid: {', '.join(sorted(fields))}"
        )
    return {k: tuple(v) if isinstance(v, list) else v for k, v in got.items()}


def get(name, **overrides) -> Preset:
    """The preset ``name`` (or a ``Preset``) with ``overrides`` applied (for a named preset, the environment's
    overrides first); ``WorkbenchError`` (one line) for an unknown preset, field or setting."""
    fields = set(Preset.__dataclass_fields__) - {"name"}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise WorkbenchError(
            f"unknown preset field(s) or session option(s) {', '.join(unknown)}; preset fields: {', '.join(sorted(fields))}"
        )
    if isinstance(name, Preset):
        p = name
    elif name in PRESETS:
        p = PRESETS[name]
        for k, v in _env_overrides().items():
            overrides.setdefault(k, v)
        if os.environ.get(NOISE_ENV) and "noise" not in overrides:
            overrides["noise"] = os.environ[NOISE_ENV]
        if os.environ.get(DETERMINISTIC_ENV) == "1" and "deterministic" not in overrides:
            overrides["deterministic"] = True
    else:
        raise WorkbenchError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}")
    p = replace(p, **overrides) if overrides else p
    if p.noise not in ("wait", "mark", "off"):
        raise WorkbenchError(
            f"noise must be one of wait, mark, off; got {p.noise!r}"
            + (f" (from {NOISE_ENV})" if os.environ.get(NOISE_ENV) == p.noise else "")
        )
    from .controller import POLICIES

    if p.controller_policy not in POLICIES:
        raise WorkbenchError(f"unknown controller policy {p.controller_policy!r}; valid: {', '.join(POLICIES)}")
    t = p.search_threads
    if isinstance(t, bool) or not isinstance(t, int) or t < 0:
        raise WorkbenchError(f"search_threads must be a non-negative integer (0: every core), got {t!r}")
    from .cost_model import COST_MODELS

    if p.cost_model not in COST_MODELS:
        raise WorkbenchError(f"unknown cost model {p.cost_model!r}; valid: {', '.join(COST_MODELS)}")
    h = p.xgb_holdout
    if isinstance(h, bool) or not isinstance(h, (int, float)) or not 0 <= h < 1:
        raise WorkbenchError(f"xgb_holdout must be a share of the programs in [0, 1), got {h!r}")
    if not p.shared_cost_model and (p.prior or not p.strategy_onehot):
        raise WorkbenchError(
            "one cost model per strategy (shared_cost_model=False) routes programs by the strategy one-hot and "
            "has no prior: it needs strategy_onehot=True and prior=False"
        )
    if p.prior:
        from . import prior

        if p.cost_model not in prior.available():
            prior.load(p.cost_model)  # raises the one-line error naming what ships
    from .pruning import parse_rules

    rules = parse_rules(p.pruning)
    if rules != p.pruning:
        p = replace(p, pruning=rules)
    w = p.controller_warmup_rounds
    if isinstance(w, bool) or not isinstance(w, int) or w < 1:
        raise WorkbenchError(f"controller_warmup_rounds must be a positive integer, got {w!r}")
    r = p.runner_processes
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise WorkbenchError(f"runner_processes must be a positive integer, got {r!r}")
    if isinstance(p.confirm_rounds, bool) or not isinstance(p.confirm_rounds, int) or p.confirm_rounds < 0:
        raise WorkbenchError(f"confirm_rounds must be a non-negative integer, got {p.confirm_rounds!r}")
    return p
