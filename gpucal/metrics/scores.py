"""Scores over all rows: log-loss, Brier, ROC AUC, and the true calibration error of simulations.

None of these bins anything. Log-loss and Brier mix calibration with discrimination; AUC is pure
ranking (any increasing map leaves it unchanged) and sees no calibration at all; TCE needs the true
probability, so it exists only in simulations.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpucal._backend import array_namespace
from gpucal._params import validate_params
from gpucal._validation import (
    check_consistent_length,
    check_not_empty,
    check_probabilities,
    check_same_index,
    check_sample_weight,
)
from gpucal.metrics._inputs import accepts_dask, check_rows
from gpucal.metrics.binned import NORM


@accepts_dask
def log_loss(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    r"""Weighted binary log-loss (cross-entropy), with probabilities clipped like scikit-learn.

    .. math::

        \mathrm{LL} = -\frac{1}{W} \sum_i w_i \big( y_i \log \tilde p_i + (1 - y_i) \log(1 - \tilde p_i) \big)
        \qquad \tilde p_i = \min(\max(p_i, \varepsilon), 1 - \varepsilon)

    with :math:`\varepsilon` the float64 machine epsilon, as ``sklearn.metrics.log_loss``. Bins nothing: a
    proper scoring rule that rewards calibration and discrimination together. Soft labels are allowed.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.

    Returns
    -------
    float
    """
    rows = check_rows(y_true, y_prob, sample_weight)
    xp = rows.xp
    eps = float(np.finfo(np.float64).eps)
    p = xp.clip(rows.p, eps, 1.0 - eps)
    loss = -(rows.y * xp.log(p) + (1.0 - rows.y) * xp.log1p(-p))
    return float(rows.weights() @ loss) / rows.total_weight


@accepts_dask
def brier(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    r"""Weighted Brier score: mean squared difference between probability and label.

    .. math::

        \mathrm{BS} = \frac{1}{W} \sum_i w_i (p_i - y_i)^2

    Source: Brier (1950); ``sklearn.metrics.brier_score_loss``. Bins nothing; a proper scoring rule
    mixing calibration and discrimination.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.

    Returns
    -------
    float
    """
    rows = check_rows(y_true, y_prob, sample_weight)
    diff = rows.p - rows.y
    return float(rows.weights() @ (diff * diff)) / rows.total_weight


@accepts_dask
def roc_auc(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    r"""Weighted area under the ROC curve; tied probabilities count one half.

    With positive weight :math:`w_i^+ = w_i y_i` and negative weight :math:`w_j^- = w_j (1 - y_j)`:

    .. math::

        \mathrm{AUC} = \frac{\sum_{i,j} w_i^+ w_j^- \big( [p_i > p_j] + \tfrac12 [p_i = p_j] \big)}
                            {\sum_i w_i^+ \, \sum_j w_j^-}

    the probability that a random positive outranks a random negative. Computed by one sort and prefix
    sums over groups of tied probabilities (:math:`O(n \log n)`); equal to
    ``sklearn.metrics.roc_auc_score`` (trapezoids on the ROC curve) up to rounding. Binning calibrators
    create ties, and ties matter: they are scored one half, never broken by row order. Bins nothing and
    sees no calibration: any increasing map of ``p`` leaves it unchanged. A soft label counts as that
    fraction of a positive row and the rest of a negative one.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities (any score works the same way, only the order matters).
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        When the rows hold no positive or no negative weight: AUC is undefined with one class.
    """
    rows = check_rows(y_true, y_prob, sample_weight)
    xp = rows.xp
    order = xp.argsort(rows.p)
    p_sorted = rows.p[order]
    w_sorted = rows.weights()[order]
    y_sorted = rows.y[order]
    zero = xp.zeros(1, dtype=xp.float64)
    cum_pos = xp.concatenate([zero, xp.cumsum(w_sorted * y_sorted)])
    cum_neg = xp.concatenate([zero, xp.cumsum(w_sorted * (1.0 - y_sorted))])
    total_pos, total_neg = float(cum_pos[-1]), float(cum_neg[-1])
    if total_pos <= 0 or total_neg <= 0:
        missing = "positive" if total_pos <= 0 else "negative"
        msg = f"roc_auc: y_true has only one class (no {missing} weight); ROC AUC is undefined"
        raise ValueError(msg)
    new_tie = xp.concatenate([xp.ones(1, dtype=bool), p_sorted[1:] != p_sorted[:-1]])
    starts = xp.flatnonzero(new_tie)
    ends = xp.concatenate([starts[1:], xp.asarray([rows.n])])
    pos_in_tie = cum_pos[ends] - cum_pos[starts]
    neg_in_tie = cum_neg[ends] - cum_neg[starts]
    wins = float(xp.sum(pos_in_tie * (cum_neg[starts] + 0.5 * neg_in_tie)))
    return wins / (total_pos * total_neg)


@validate_params(p=NORM)
@accepts_dask
def tce(p_true: Any, y_prob: Any, *, p: float = 2.0, sample_weight: Any = None) -> float:
    r"""True calibration error against known true probabilities (simulations only).

    .. math::

        \mathrm{TCE}_p = \Big( \frac{1}{W} \sum_i w_i \, |\eta_i - p_i|^p \Big)^{1/p},
        \qquad \eta_i = \mathbb{E}[Y \mid X = x_i]

    the sample estimate of MBCT (Huang et al., WWW 2022) Eq. 1 :math:`(\mathbb{E}_X |E[Y|X] - h(X)|^p)^{1/p}`;
    ``p = inf`` gives the largest gap over rows of positive weight. Needs :math:`\eta`, which real data
    never has: it is the reference the other metrics are judged against in a simulation. It sees every
    error, per row.

    Parameters
    ----------
    p_true : array-like of shape (n,)
        True probabilities :math:`\eta_i` in [0, 1].
    y_prob : array-like of shape (n,)
        Predicted probabilities.
    p : float, default 2
        The norm, in ``[1, inf]``.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights (e.g. a quadrature rule's weights).

    Returns
    -------
    float
    """
    check_same_index(p_true=p_true, y_prob=y_prob, sample_weight=sample_weight)
    eta = check_probabilities(p_true, "p_true")
    prob = check_probabilities(y_prob, "y_prob")
    xp = array_namespace(eta, prob)
    n = check_consistent_length(p_true=eta, y_prob=prob)
    check_not_empty(n, "p_true")
    w = check_sample_weight(sample_weight, n, xp=xp)
    gap = xp.abs(eta - prob)
    if math.isinf(p):
        return float(gap[w > 0].max())
    return (float(w @ gap**p) / float(w.sum())) ** (1.0 / p)
