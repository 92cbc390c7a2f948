r"""Debiased l2 calibration error: Kumar, Liang & Ma, "Verified Uncertainty Calibration" (NeurIPS 2019).

The plug-in squared ECE over-estimates :math:`E[(E[Y \mid p] - p)^2]`: a bin's squared gap carries the
variance of its label mean. The debiased estimator subtracts it bin by bin (their Sec. 5, Eq. 5):

.. math::

    \widehat{\mathrm{CE}}^2 = \sum_b \frac{n_b}{n} \Big[ (\bar p_b - \bar y_b)^2
        - \frac{\bar y_b (1 - \bar y_b)}{n_b - 1} \Big], \qquad
    \mathrm{CE} = \sqrt{\max(\widehat{\mathrm{CE}}^2, 0)}

with bins of fewer than 2 rows contributing 0. The bins are those of ``uncertainty-calibration``'s
``get_calibration_error(p, y, p=2, debias=True)``: when the scores take fewer than ``n / 4`` distinct
values (a binning calibrator's output) every distinct score is a bin; otherwise 15 equal-count bins of the
sorted scores, cut half-way between the last score of a bin and the first of the next.

Weights count as repeated rows (``n_b`` is a bin's weight, ``n`` the total), so integer weights give the
value of the repeated rows. Everything is read off the table of distinct scores
(``gpucal.metrics.score_table``): it runs the same on one machine and over dask partitions.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpucal._params import Interval, validate_params
from gpucal.metrics.inputs import check_repeated_rows
from gpucal.metrics.score_table import ScoreTable, table_of

N_BINS = Interval(int, 1, None)


def equal_count_edges(table: ScoreTable, n_bins: int) -> np.ndarray:
    """Return the right edges of ``n_bins`` equal-count bins of the sorted scores, the last one 1.0.

    Bin ``i`` holds positions ``[end_{i-1}, end_i)`` of the sorted rows, ``end_i = i * q + min(i, r)`` with
    ``n = 15 q + r`` (numpy's ``array_split``; weights count as repeated rows). Its right edge is half-way
    between its last score and the next bin's first; equal edges merge.
    """
    cum = np.cumsum(table.weight)
    total = float(cum[-1])
    n_bins = min(n_bins, max(1, math.floor(total)))
    base = math.floor(total / n_bins)
    extra = total - n_bins * base
    ends = np.array([i * base + min(i, extra) for i in range(1, n_bins)], dtype=np.float64)
    last = np.minimum(np.searchsorted(cum, ends, side="left"), cum.size - 1)
    first = np.minimum(np.searchsorted(cum, ends, side="right"), cum.size - 1)
    edges = (table.keys[last] + table.keys[first]) / 2.0
    return np.unique(np.append(edges, 1.0))


def debiased_of_table(table: ScoreTable, n_bins: int) -> float:
    """Return the debiased l2 calibration error of a :class:`ScoreTable` of rows with positive weight."""
    total = float(table.weight.sum())
    if table.keys.size < total / 4.0:
        ids = np.arange(table.keys.size)  # every distinct score is a bin
    else:
        ids = np.searchsorted(equal_count_edges(table, n_bins), table.keys, side="left")
    m = int(ids.max()) + 1
    weight = np.bincount(ids, weights=table.weight, minlength=m)
    weight_p = np.bincount(ids, weights=table.keys * table.weight, minlength=m)
    weight_y = np.bincount(ids, weights=table.weight_y, minlength=m)
    keep = weight >= 2.0
    p_mean = weight_p[keep] / weight[keep]
    y_mean = weight_y[keep] / weight[keep]
    per_bin = (p_mean - y_mean) ** 2 - y_mean * (1.0 - y_mean) / (weight[keep] - 1.0)
    squared = float(np.sum(weight[keep] / total * per_bin))
    return math.sqrt(max(squared, 0.0))


@validate_params(n_bins=N_BINS)
def ece_debiased(y_true: Any, y_prob: Any, *, sample_weight: Any = None, n_bins: int = 15) -> float:
    r"""Debiased l2 calibration error (Kumar, Liang & Ma, NeurIPS 2019, Sec. 5).

    .. math::

        \mathrm{CE} = \Big( \max\Big(0, \sum_b \frac{n_b}{n} \Big[ (\bar p_b - \bar y_b)^2
            - \frac{\bar y_b (1 - \bar y_b)}{n_b - 1} \Big] \Big) \Big)^{1/2}

    Bins: every distinct score when there are fewer than ``n / 4`` of them, else ``n_bins`` equal-count
    bins of the sorted scores (see the module docstring). Equal to
    ``calibration.get_calibration_error(y_prob, y_true, p=2, debias=True)`` of
    ``uncertainty-calibration``. It sorts by ``p``; the subtraction removes the plug-in estimate's upward
    bias, so a calibrated model scores near 0 even on few rows (it can be exactly 0).

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in {0, 1} (soft labels in [0, 1] are read as fractions of a positive).
    y_prob : array-like of shape (n,)
        Predicted probabilities of the positive class.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights, counted as repeated rows (frequencies, not importances: whether every
        distinct score is a bin depends on the total weight; weights rescaled to sum to 1 are one row,
        refused below two); None means 1 for every row.
    n_bins : int, default=15
        Number of equal-count bins for continuous scores (the reference's fixed 15).

    Returns
    -------
    float
        The debiased l2 calibration error, in [0, 1].
    """
    table = table_of(y_true, y_prob, sample_weight)
    check_repeated_rows(float(table.weight.sum()), "the debiased ECE", sample_weight is not None)
    return debiased_of_table(table, n_bins)
