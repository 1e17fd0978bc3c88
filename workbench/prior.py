"""The cost-model prior that ships with the package.

A model trained on the project's own corpus of measured programs (``benchmarks/corpus.py``: Ansor's
single-operator suite and subgraphs, tuned on one machine) and saved under ``workbench/data/`` as XGBoost
JSON, one file per cost model (``prior-<name>.json``) with a description beside it (``.meta.json``: corpus,
programs, machine, commit). A session with the preset flag ``prior`` loads it into its cost model: before the
session has measured enough to train (``warmup_samples``), the prior's scores rank the candidates instead of
random numbers; afterwards the session's own trees are fitted on top of the prior's output (XGBoost's base
margin), so the prior is refined by what this workload measures rather than replaced by it.

``python benchmarks/corpus.py --prior`` (re)trains and saves it from the corpus store.
"""

from __future__ import annotations

import json
import os

from .errors import WorkbenchError

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def model_path(model_name: str, data_dir: str | None = None) -> str:
    return os.path.join(data_dir or DATA, f"prior-{model_name}.json")


def meta_path(model_name: str, data_dir: str | None = None) -> str:
    return os.path.join(data_dir or DATA, f"prior-{model_name}.meta.json")


def available(data_dir: str | None = None) -> list[str]:
    """The cost models a prior ships for."""
    from .cost_model import COST_MODELS

    return [m for m in COST_MODELS if os.path.exists(model_path(m, data_dir))]


def load(model_name: str, data_dir: str | None = None):
    """(booster, meta) of the prior for ``model_name``; a one-line error when none ships."""
    import xgboost as xgb

    path = model_path(model_name, data_dir)
    if not os.path.exists(path):
        have = available(data_dir)
        raise WorkbenchError(
            f"no prior ships for the cost model {model_name!r}"
            + (
                f" (priors: {', '.join(have)})"
                if have
                else " (none is installed; benchmarks/corpus.py --prior makes one)"
            )
        )
    from .cost_model import N_FEATURES

    booster = xgb.Booster()
    booster.load_model(path)
    if booster.num_features() != N_FEATURES:
        raise WorkbenchError(
            f"the shipped {model_name} prior was trained on {booster.num_features()} features, this version computes "
            f"{N_FEATURES}: retrain it (benchmarks/corpus.py --prior-only)"
        )
    try:
        with open(meta_path(model_name, data_dir)) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        meta = {}
    return booster, meta


def describe(meta: dict) -> str:
    """One line for people: what the prior was trained on."""
    if not meta:
        return "prior (no description)"
    return (
        f"prior: {meta.get('programs', '?')} programs of {len(meta.get('workloads', []))} workloads "
        f"({meta.get('corpus', 'corpus')}, {meta.get('target', {}).get('mcpu', '?')})"
    )


def save(model, meta: dict, data_dir: str | None = None) -> str:
    """Write a trained cost model's booster and its description as the prior for its kind; returns the path."""
    if model.booster is None:
        raise WorkbenchError("the cost model is not trained: nothing to save as a prior")
    os.makedirs(data_dir or DATA, exist_ok=True)
    path = model_path(model.name, data_dir)
    model.booster.save_model(path)
    with open(meta_path(model.name, data_dir), "w") as f:
        json.dump(dict(meta, model=model.name), f, indent=1, sort_keys=True)
    return path
