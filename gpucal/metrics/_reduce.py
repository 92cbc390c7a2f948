"""Bin-level arithmetic shared by the metrics: from per-bin sums to one number.

Rule for every binned metric: a bin whose total weight is zero (no rows, or only zero-weight rows) has
no mean and is skipped; it counts neither in a maximum nor in the number of bins of an average.
"""

from __future__ import annotations

import math

import numpy as np

from gpucal.metrics.sums import WP, WY, W


def bin_gaps(stats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(|mean_w(y) - mean_w(p)|, sum w)`` of the non-empty bins of ``(n_bins, 4)`` sums."""
    keep = stats[:, W] > 0
    kept = stats[keep]
    gap = np.abs(kept[:, WY] - kept[:, WP]) / kept[:, W]
    return gap, kept[:, W]


def lp_average(values: np.ndarray, bin_weight: np.ndarray, p: float, weighting: str) -> float:
    """Return ``(sum_b a_b * values_b^p)^(1/p)``, ``a_b`` the bin's share of the weight or ``1/B``.

    ``weighting="mass"`` takes ``a_b = W_b / W`` (the classic ECE), ``"equal"`` takes ``a_b = 1/B`` over the
    ``B`` non-empty bins (MBCT Eq. 14). ``p = inf`` gives the maximum (MCE) whatever the weighting.
    """
    if math.isinf(p):
        return float(values.max())
    share = bin_weight / bin_weight.sum() if weighting == "mass" else np.full(values.shape, 1.0 / values.size)
    if p == 1:
        return float(np.sum(share * values))
    return float(np.sum(share * values**p) ** (1.0 / p))


def ratio_error(predicted: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """Return Cal-N's per-bin error ``max(P/Y, Y/P) - 1`` (``PCOC - 1`` or ``1/PCOC - 1``).

    Division by zero: ``P = Y = 0`` is no error (0); one of them zero and the other positive is ``inf``.
    """
    out = np.zeros(predicted.shape, dtype=np.float64)
    both = (predicted > 0) & (observed > 0)
    out[both] = np.maximum(predicted[both] / observed[both], observed[both] / predicted[both]) - 1.0
    out[(predicted > 0) != (observed > 0)] = np.inf
    return out


def pcoc_ratio(predicted: float, observed: float) -> float:
    """Return ``predicted / observed``: ``inf`` when only ``observed`` is zero, ``nan`` when both are."""
    if observed > 0:
        return predicted / observed
    return math.inf if predicted > 0 else math.nan
