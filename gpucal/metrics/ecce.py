r"""ECCE: the range of the cumulative calibration walk (Arrieta-Ibarra et al., JMLR 2022), as MCGrad uses it.

Sort the rows by ``p`` and walk the cumulative weighted residual, normalised by the total weight:

.. math::

    C_0 = 0, \qquad C_j = \frac{1}{W} \sum_{i \le j} w_i (y_i - p_i), \qquad
    \mathrm{ECCE} = \max_j C_j - \min_j C_j

(the Kuiper statistic of calibration). Under perfect calibration the walk is a martingale whose final
standard deviation is :math:`\sigma = \sqrt{\sum_i w_i^2 p_i (1 - p_i)} / W`; ``ECCE / sigma`` is
asymptotically the range of a standard Brownian motion on [0, 1], whose distribution (Feller 1951) gives
the p-value. The walk sorts by ``p`` and nothing else: a model wrong inside segments of a feature but right
on average at every score looks calibrated here (see :func:`~gpucal.metrics.multicalibration_error`).

It has no bins and no parameter. It is computed from the table of distinct scores
(``gpucal.metrics.score_table``), so it runs the same on one machine and over dask partitions; rows with
tied scores are one step of the walk (the references' argsort puts tied rows in an arbitrary order, which
can change their value on tied scores; without ties the values are equal).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from gpucal.kernels.jit import numba
from gpucal.metrics.score_table import ScoreTable, table_of

# Beyond this many standard deviations the p-value is below double precision: MCGrad reports
# ``sys.float_info.epsilon`` there, and 1 below ECCE_SIGMA_MIN; gpucal does the same so that values match.
ECCE_SIGMA_MAX = 8.26732673
ECCE_SIGMA_MIN = 1e-20
# Terms of Feller's series kept: at sigma = ECCE_SIGMA_MAX term k is below 1e-300 from k = 40 on.
_SERIES_TERMS = 64


@numba.njit(cache=True)
def _walk(keys, weight, weight_y, weight_sq):  # pragma: no cover - compiled
    # One pass over the distinct scores: the unnormalised walk's extremes (0 included), the total
    # weight and the null variance sum w^2 p (1 - p).
    walk = 0.0
    high = 0.0
    low = 0.0
    total = 0.0
    variance = 0.0
    for j in range(keys.shape[0]):
        walk += weight_y[j] - keys[j] * weight[j]
        high = max(high, walk)
        low = min(low, walk)
        total += weight[j]
        variance += weight_sq[j] * keys[j] * (1.0 - keys[j])
    return high - low, total, variance


def ecce_and_std(table: ScoreTable) -> tuple[float, float]:
    r"""Return the ECCE of a :class:`ScoreTable` of rows with positive weight and the walk's null standard
    deviation :math:`\sigma = \sqrt{\sum_i w_i^2 p_i (1 - p_i)} / W`."""
    spread, total, variance = _walk(table.keys, table.weight, table.weight_y, table.weight_sq)
    return spread / total, math.sqrt(variance) / total


def sigma_ratio(value: Any, std: Any) -> Any:
    """Return ``value / std``: ``inf`` where only ``std`` is zero, 0 where both are (MCGrad's rule)."""
    value = np.asarray(value, dtype=np.float64)
    std = np.asarray(std, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(std > 0, value / np.where(std > 0, std, 1.0), np.where(value != 0, np.inf, 0.0))
    return float(out) if out.ndim == 0 else out


def range_cdf(x: Any) -> Any:
    r"""CDF of the range (max minus min) of standard Brownian motion on [0, 1], at ``x > 0``.

    .. math::

        P(R \le x) = \sum_{k \ge 0} \Big( \frac{8}{x^2} + \frac{2}{(k + \tfrac12)^2 \pi^2} \Big)
                     \exp\Big( -\frac{2 (k + \tfrac12)^2 \pi^2}{x^2} \Big)

    (Feller, "The asymptotic distribution of the range of sums of independent random variables", Ann.
    Math. Statist. 1951), summed to double precision.
    """
    x = np.asarray(x, dtype=np.float64)
    half = np.arange(_SERIES_TERMS, dtype=np.float64)[:, None] + 0.5
    xs = x.reshape(1, -1)
    with np.errstate(under="ignore"):
        terms = (8.0 / xs**2 + 2.0 / (half**2 * math.pi**2)) * np.exp(-2.0 * half**2 * math.pi**2 / xs**2)
    out = terms.sum(axis=0).reshape(x.shape)
    return float(out) if out.ndim == 0 else out


def ecce_pvalue_from_sigma(sigma: Any) -> Any:
    """Return the p-value of ECCE values measured in null standard deviations (scalar or array).

    ``1 - range_cdf(sigma)``, with MCGrad's ends: 1 below ``ECCE_SIGMA_MIN`` and machine epsilon from
    ``ECCE_SIGMA_MAX`` on (the series is then 1 to double precision).
    """
    s = np.asarray(sigma, dtype=np.float64)
    flat = s.reshape(-1)
    out = np.full(flat.shape, 1.0)
    high = flat >= ECCE_SIGMA_MAX
    out[high] = sys.float_info.epsilon
    mid = (flat >= ECCE_SIGMA_MIN) & ~high
    if mid.any():
        out[mid] = 1.0 - range_cdf(flat[mid])
    return float(out[0]) if s.ndim == 0 else out.reshape(s.shape)


def ecce(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    r"""Estimated cumulative calibration error: the range of the cumulative residual walk in score order.

    .. math::

        \mathrm{ECCE} = \max_{0 \le j \le m} C_j - \min_{0 \le j \le m} C_j, \qquad
        C_j = \frac{1}{W} \sum_{k \le j} \sum_{i: p_i = s_k} w_i (y_i - p_i), \quad C_0 = 0

    over the distinct scores :math:`s_1 < \dots < s_m`. Source: Arrieta-Ibarra, Gujral, Tannen, Tygert &
    Xu, "Metrics of calibration for probabilistic predictions", JMLR 23 (2022), Sec. 3; equal to
    ``mcgrad.metrics.ecce`` (weighted too) on untied scores. It sorts by ``p``; it has no bins.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in {0, 1} (soft labels in [0, 1] are read as fractions of a positive).
    y_prob : array-like of shape (n,)
        Predicted probabilities of the positive class.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights; None means 1 for every row.

    Returns
    -------
    float
        The range, in [0, 1].

    Examples
    --------
    >>> round(ecce([0, 1, 0, 1], [0.1, 0.4, 0.6, 0.9]), 3)
    0.15
    """
    return ecce_and_std(table_of(y_true, y_prob, sample_weight))[0]


def ecce_sigma(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    r"""ECCE in null standard deviations: :math:`\mathrm{ECCE} / \sigma`.

    :math:`\sigma = \sqrt{\sum_i w_i^2 p_i (1 - p_i)} / W` is the standard deviation of the walk's end
    under perfect calibration (Arrieta-Ibarra et al. 2022, Sec. 3.2). Values above about 3 are unlikely
    under calibration. ``inf`` when every ``p`` is 0 or 1 and ECCE is not 0; 0 when both are 0. Equal to
    ``mcgrad.metrics.ecce_sigma``. Parameters as :func:`ecce`.

    Weights are importances here, as in MCGrad (:math:`\sum w^2` in :math:`\sigma`): scaling them all
    leaves the ratio as it is, and a row of weight 3 is not three rows (three rows give a
    :math:`\sqrt 3` larger ratio). The classical tests (:func:`spiegelhalter_z`, Hosmer-Lemeshow) read
    weights as repeated rows.
    """
    return float(sigma_ratio(*ecce_and_std(table_of(y_true, y_prob, sample_weight))))


def ecce_pvalue(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    """P-value of the test of perfect calibration by ECCE (Kuiper-type; range of Brownian motion).

    ``1 - F(ecce_sigma)``, ``F`` the CDF of the range of standard Brownian motion on [0, 1]
    (:func:`range_cdf`). Equal to ``mcgrad.metrics.ecce_pvalue``. Parameters as :func:`ecce`; weights
    are importances (:func:`ecce_sigma`).
    """
    return float(ecce_pvalue_from_sigma(ecce_sigma(y_true, y_prob, sample_weight=sample_weight)))
