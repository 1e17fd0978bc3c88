"""Small statistics for the views: rank agreement and point decimation (numpy/pandas only)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def spearman(x, y) -> float:
    """Spearman's rho (average ranks for ties); NaN when it is undefined (<3 points or a constant side)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3:
        return math.nan
    rx, ry = pd.Series(x).rank().to_numpy(), pd.Series(y).rank().to_numpy()
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def kendall_tau(x, y) -> float:
    """Kendall's tau-b; NaN when undefined. O(n^2), fine for one round's batch."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    if n < 3:
        return math.nan
    iu = np.triu_indices(n, k=1)
    dx = np.sign(x[:, None] - x[None, :])[iu]
    dy = np.sign(y[:, None] - y[None, :])[iu]
    n1, n2 = np.count_nonzero(dx), np.count_nonzero(dy)
    if n1 == 0 or n2 == 0:
        return math.nan
    return float((dx * dy).sum() / math.sqrt(n1 * n2))


def topk_recall(predicted, measured, k: int) -> float:
    """Share of the k truly fastest candidates that the model also put in its top k."""
    predicted, measured = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    n = len(predicted)
    if n == 0:
        return math.nan
    k = max(1, min(k, n))
    true_top = set(np.argsort(-measured, kind="stable")[:k].tolist())
    pred_top = set(np.argsort(-predicted, kind="stable")[:k].tolist())
    return len(true_top & pred_top) / k


def decimate(n: int, cap: int) -> np.ndarray:
    """Indices of at most ``cap`` of ``n`` points: the newest half exactly, the older ones evenly thinned.

    The newest points are where a live user looks; the old cloud only needs its shape.
    """
    if n <= cap:
        return np.arange(n)
    recent = cap // 2
    old = np.linspace(0, n - recent - 1, cap - recent).round().astype(int)
    return np.unique(np.concatenate([old, np.arange(n - recent, n)]))
