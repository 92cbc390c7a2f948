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
from gpucal._validation import check_consistent_length, check_probabilities, check_same_index
from gpucal.metrics.binned import NORM, score_sums
from gpucal.metrics.inputs import CheckedRows, check_total, metric_rows
from gpucal.metrics.sums import WY, W
from gpucal.rows import RowBlock, as_rows
from gpucal.rows.checks import check_partition_weight


def loss_sums(block: CheckedRows, kind: str) -> np.ndarray:
    """``[count, sum w, sum w * loss]`` of one block: ``kind`` is ``"log_loss"`` or ``"brier"``."""
    xp = block.xp
    if kind == "log_loss":
        eps = float(np.finfo(np.float64).eps)
        q = xp.clip(block.p, eps, 1.0 - eps)
        loss = -(block.y * xp.log(q) + (1.0 - block.y) * xp.log1p(-q))
    else:
        diff = block.p - block.y
        loss = diff * diff
    return np.array([block.n, block.total_weight, float(block.weights() @ loss)])


def _mean_loss(kind: str, y_true: Any, y_prob: Any, sample_weight: Any) -> float:
    count, weight, loss = metric_rows(y_true, y_prob, sample_weight).sum(loss_sums, kind)
    check_total(count, weight)
    return float(loss) / float(weight)


def log_loss(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    r"""Weighted binary log-loss (cross-entropy), with probabilities clipped like scikit-learn.

    .. math::

        \mathrm{LL} = -\frac{1}{W} \sum_i w_i \big( y_i \log \tilde p_i + (1 - y_i) \log(1 - \tilde p_i) \big)
        \qquad \tilde p_i = \min(\max(p_i, \varepsilon), 1 - \varepsilon)

    with :math:`\varepsilon` the float64 machine epsilon, as ``sklearn.metrics.log_loss`` on float64 input
    (every input is read as float64 here; scikit-learn clips float32 input at float32's). Bins nothing: a
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

    Examples
    --------
    >>> round(log_loss([0, 1, 1, 0], [0.1, 0.8, 0.7, 0.4]), 6)
    0.299001
    """
    return _mean_loss("log_loss", y_true, y_prob, sample_weight)


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

    Examples
    --------
    >>> round(brier([0, 1, 1, 0], [0.1, 0.8, 0.7, 0.4]), 6)
    0.075
    """
    return _mean_loss("brier", y_true, y_prob, sample_weight)


def roc_auc(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    r"""Weighted area under the ROC curve; tied probabilities count one half.

    With positive weight :math:`w_i^+ = w_i y_i` and negative weight :math:`w_j^- = w_j (1 - y_j)`:

    .. math::

        \mathrm{AUC} = \frac{\sum_{i,j} w_i^+ w_j^- \big( [p_i > p_j] + \tfrac12 [p_i = p_j] \big)}
                            {\sum_i w_i^+ \, \sum_j w_j^-}

    the probability that a random positive outranks a random negative. Computed from the table of sums
    per distinct probability (one sort, :math:`O(n \log n)`; see :func:`gpucal.metrics.binned.score_sums`)
    and prefix sums over it; equal to
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

    Examples
    --------
    >>> roc_auc([0, 1, 1, 0], [0.1, 0.8, 0.7, 0.4])
    1.0
    """
    table = score_sums(metric_rows(y_true, y_prob, sample_weight))
    pos = table.stats[:, WY]
    neg = table.stats[:, W] - pos
    total_pos, total_neg = float(pos.sum()), float(neg.sum())
    if total_pos <= 0 or total_neg <= 0:
        missing = "positive" if total_pos <= 0 else "negative"
        msg = f"roc_auc: y_true has only one class (no {missing} weight); ROC AUC is undefined"
        raise ValueError(msg)
    # Each class's weights scaled by the power of two nearest its total (exact: the same AUC to the bit):
    # the products of tiny or huge weights underflowed to 0 (a division by zero) or overflowed (NaN).
    pos_exponent, neg_exponent = math.frexp(total_pos)[1], math.frexp(total_neg)[1]
    pos, total_pos = np.ldexp(pos, -pos_exponent), math.ldexp(total_pos, -pos_exponent)
    neg, total_neg = np.ldexp(neg, -neg_exponent), math.ldexp(total_neg, -neg_exponent)
    neg_below = np.concatenate([[0.0], np.cumsum(neg)[:-1]])
    return float(np.sum(pos * (neg_below + 0.5 * neg))) / (total_pos * total_neg)


@validate_params(p=NORM)
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

    Examples
    --------
    >>> round(tce([0.2, 0.7, 0.7, 0.3], [0.1, 0.8, 0.7, 0.4]), 6)
    0.086603
    """
    rows = as_rows(p_true=p_true, y_prob=y_prob, sample_weight=sample_weight)
    if math.isinf(p):
        count, weight, top = rows.reduce(tce_sums, _sum_sum_max, p)
        check_total(count, weight, "p_true")
        return float(top)
    count, weight, total = rows.sum(tce_sums, p)
    check_total(count, weight, "p_true")
    return (float(total) / float(weight)) ** (1.0 / p)


def tce_sums(block: RowBlock, norm: float) -> np.ndarray:
    """``[count, sum w, sum w |eta - p|^norm]`` of one block; for ``norm = inf`` the largest gap over
    rows of positive weight (``-inf`` for none) instead of the sum."""
    p_true, y_prob, sample_weight = block["p_true"], block["y_prob"], block["sample_weight"]
    check_same_index(p_true=p_true, y_prob=y_prob, sample_weight=sample_weight)
    eta = check_probabilities(p_true, "p_true")
    prob = check_probabilities(y_prob, "y_prob")
    xp = array_namespace(eta, prob)
    n = check_consistent_length(p_true=eta, y_prob=prob)
    w = (
        xp.ones(n, dtype=xp.float64)
        if sample_weight is None
        else check_partition_weight(sample_weight, n, xp)
    )
    gap = xp.abs(eta - prob)
    if math.isinf(norm):
        kept = gap[w > 0]
        top = float(kept.max()) if kept.shape[0] else -math.inf
        return np.array([n, float(w.sum()), top])
    return np.array([n, float(w.sum()), float(w @ gap**norm)])


def _sum_sum_max(*sums: np.ndarray) -> np.ndarray:
    stacked = np.stack(sums)
    return np.array([stacked[:, 0].sum(), stacked[:, 1].sum(), stacked[:, 2].max()])
