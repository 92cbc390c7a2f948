r"""The AUC guard: a calibrator chosen by log-loss must not rank the rows worse than the raw score.

Feature-aware calibrators (and blends of them) move rows past each other, so their held-out AUC can
fall below the raw score's even when their log-loss is lower: on ``make_ctr``'s calibrated, over-confident
and monotone scenarios (features without signal) the first run of ``benchmarks/results/auto.md``
measured the default's test AUC 0.0001-0.0003 below the raw score's. The rule, on the cross-fitted rows:

.. math::

    \operatorname{AUC}_{\mathrm{fold}}\big(y,\; \sigma(b + \textstyle\sum_k w_k \operatorname{logit}
    p^{\mathrm{oof}}_k)\big) \;<\; \operatorname{AUC}_{\mathrm{fold}}(y,\; s)
    \quad\Longrightarrow\quad \text{predict with Platt scaling alone,}

with :math:`p^{\mathrm{oof}}_k` member :math:`k`'s out-of-fold prediction, :math:`(w, b)` the blend
(:math:`w = 1, b = 0` for a single calibrator), :math:`s` the raw score, and
:math:`\operatorname{AUC}_{\mathrm{fold}}` the AUC over the pairs of rows held out in the same fold
(:func:`within_fold_auc`), both weighted by the row weights. Within a fold every member is one map,
fitted on the other folds, so an increasing map of the score keeps that fold's AUC exactly; across
folds the maps differ, and the AUC of the pooled out-of-fold predictions falls below the raw score's by
that alone (beta calibration on scores whose truth is a power of them: pooled, below on 8 of 8 seeds,
and Platt scaling, worse in log-loss, replaced it on every one). Platt scaling (refitted on every row)
is an increasing map of the score (its slope is positive wherever the score ranks better than chance),
so its AUC on any rows is the raw score's; so is Platt scaling on logit hinges where its slopes are
positive, and the guard falls back to whichever of the two cross-fitted better
(``gpucal.auto.model.ORDER_KEEPING``), Platt scaling where the hinge map's refit does not increase (its
fit does not force the slopes positive). The comparison is strict: any loss of ranking within the folds,
ties a map creates included, however small, gives the ranking back, at the price of the log-loss the
features would have won.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import rankdata

from gpucal.auto.blend import blend_predictions
from gpucal.metrics import roc_auc


@dataclass(frozen=True)
class GuardResult:
    """Result of :func:`order_guard`.

    Attributes
    ----------
    applied : bool
        The prediction's within-fold AUC is below the raw score's.
    raw_auc, auc : float or None
        The raw score's and the prediction's AUC over the pairs of cross-fitted rows held out in the same
        fold (:func:`within_fold_auc`); None when no fold holds both classes.
    """

    applied: bool
    raw_auc: float | None
    auc: float | None

    def report(self) -> dict[str, Any]:
        """As JSON data (``AutoCalibrator.auc_guard_``)."""
        return {"applied": self.applied, "raw_auc": self.raw_auc, "auc": self.auc}


def blend_probabilities(member_predictions: np.ndarray, weights: np.ndarray, intercept: float) -> np.ndarray:
    """The prediction of a blend from its members' probabilities; one member alone: its own."""
    if member_predictions.shape[1] == 1 and weights[0] == 1.0 and intercept == 0.0:
        return np.asarray(member_predictions[:, 0])  # not re-clipped through the logit
    members = [member_predictions[:, k] for k in range(member_predictions.shape[1])]
    return blend_predictions(members, weights, intercept)


def within_fold_auc(
    labels: np.ndarray, score: np.ndarray, folds: np.ndarray, sample_weight: np.ndarray | None
) -> float | None:
    r"""The AUC over the pairs of rows held out in the same fold: each fold's AUC weighted by its pairs,

    .. math::

        \operatorname{AUC}_{\mathrm{fold}} = \frac{\sum_f \operatorname{AUC}_f\, P_f N_f}{\sum_f P_f N_f},

    with :math:`P_f` and :math:`N_f` fold :math:`f`'s positive and negative weight (a soft label counts as
    that fraction of a positive). None when no fold holds both classes. The weights are scaled by their
    largest first: the AUC does not depend on their scale, and the products of tiny or huge weights
    would underflow or overflow.
    """
    weights = np.ones(labels.shape[0]) if sample_weight is None else np.asarray(sample_weight, np.float64)
    largest = float(weights.max()) if weights.size else 0.0
    if largest > 0.0:
        weights = weights / largest
    concordant = pairs = 0.0
    for fold in np.unique(folds):
        rows = folds == fold
        y, w = labels[rows], weights[rows]
        positive, negative = float(w @ y), float(w @ (1.0 - y))
        if positive <= 0.0 or negative <= 0.0:  # one class: no pair to rank in this fold
            continue
        fold_pairs = positive * negative
        # No weights: roc_auc's unweighted path, which for 0/1 labels sorts integer keys instead of
        # taking the weighted stable sort.
        fold_weights = None if sample_weight is None else w
        concordant += float(roc_auc(y, score[rows], sample_weight=fold_weights)) * fold_pairs
        pairs += fold_pairs
    return concordant / pairs if pairs > 0.0 else None


def order_guard(
    raw_score: np.ndarray,
    predicted: np.ndarray,
    labels: np.ndarray,
    sample_weight: np.ndarray | None,
    folds: np.ndarray,
) -> GuardResult:
    """Compare the within-fold AUC of an out-of-fold prediction with the raw score's (module docstring).

    Parameters
    ----------
    raw_score : numpy.ndarray of shape (n,)
        The score (probability or margin: only its order counts).
    predicted : numpy.ndarray of shape (n,)
        Out-of-fold probabilities of the prediction (:func:`blend_probabilities`).
    labels : numpy.ndarray of shape (n,)
        Labels in [0, 1].
    sample_weight : numpy.ndarray of shape (n,) or None
        Row weights; None: unit weights (both AUCs then sort integer keys,
        :func:`gpucal.metrics.roc_auc`).
    folds : numpy.ndarray of shape (n,)
        The fold that held each row out.

    Returns
    -------
    GuardResult
        Not applied, and both AUCs None, when no fold holds both classes.
    """
    # AUC reads only the order: a score in [0, 1] is read as it is, any other (margins) through its
    # ranks scaled into [0, 1], ties kept, the same order.
    raw_score = np.asarray(raw_score, dtype=np.float64)
    if raw_score.size and raw_score.min() >= 0.0 and raw_score.max() <= 1.0:
        raw_ranks = raw_score
    else:
        raw_ranks = rankdata(raw_score, method="min") / raw_score.shape[0]
    raw_auc = within_fold_auc(labels, raw_ranks, folds, sample_weight)
    auc = within_fold_auc(labels, predicted, folds, sample_weight)
    applied = raw_auc is not None and auc is not None and auc < raw_auc
    return GuardResult(applied=applied, raw_auc=raw_auc, auc=auc)


def paired_gain(
    row_losses: np.ndarray, reference_row_losses: np.ndarray, weights: np.ndarray
) -> tuple[float, float]:
    """Weighted mean of ``reference - losses`` per row and its standard error (weights as row counts)."""
    diff = reference_row_losses - row_losses
    total = float(weights.sum())
    mean = float(weights @ diff / total)
    return mean, float(np.sqrt(weights @ (diff - mean) ** 2) / total)


__all__ = ["GuardResult", "blend_probabilities", "order_guard", "paired_gain", "within_fold_auc"]
