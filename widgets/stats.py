"""Small statistics for the views: rank agreement (defined once, in ``workbench.analysis``, which the report and
the offline benchmark share) and point decimation."""

from __future__ import annotations

import numpy as np

from workbench.analysis import kendall_tau, pairwise_accuracy, spearman, topk_recall

__all__ = ["decimate", "kendall_tau", "pairwise_accuracy", "spearman", "topk_recall"]


def decimate(n: int, cap: int) -> np.ndarray:
    """Indices of at most ``cap`` of ``n`` points: the newest half exactly, the older ones evenly thinned.

    The newest points are where a live user looks; the old cloud only needs its shape.
    """
    if n <= cap:
        return np.arange(n)
    recent = cap // 2
    old = np.linspace(0, n - recent - 1, cap - recent).round().astype(int)
    return np.unique(np.concatenate([old, np.arange(n - recent, n)]))
