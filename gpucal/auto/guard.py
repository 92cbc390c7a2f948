r"""The AUC guard: a calibrator chosen by log-loss must not rank the rows worse than the raw score.

Feature-aware calibrators (and blends of them) move rows past each other, so their held-out AUC can
fall below the raw score's even when their log-loss is lower: on ``make_ctr``'s calibrated, over-confident
and monotone scenarios (features without signal) the first run of ``benchmarks/results/auto.md``
measured the default's test AUC 0.0001-0.0003 below the raw score's. The rule, on the cross-fitted rows:

.. math::

    \operatorname{AUC}\big(y,\; \sigma(b + \textstyle\sum_k w_k \operatorname{logit} p^{\mathrm{oof}}_k)\big)
    \;<\; \operatorname{AUC}(y,\; s)
    \quad\Longrightarrow\quad \text{predict with Platt scaling alone,}

with :math:`p^{\mathrm{oof}}_k` member :math:`k`'s out-of-fold prediction, :math:`(w, b)` the blend
(:math:`w = 1, b = 0` for a single calibrator), :math:`s` the raw score and both AUCs weighted by the
row weights. Platt scaling (refitted on every row) is an increasing map of the score (its slope is
positive wherever the score ranks better than chance), so its AUC on any rows is the raw score's; so is
Platt scaling on logit hinges where its slopes are positive, and the guard falls back to whichever of the
two cross-fitted better (``gpucal.auto.model.ORDER_KEEPING``), Platt scaling where the hinge map's refit
does not increase (its fit does not force the slopes positive). The
comparison is strict: any loss of ranking on the folds, however small, gives the ranking back, at the
price of the log-loss the features would have won.
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
        The prediction's out-of-fold AUC is below the raw score's.
    raw_auc, auc : float
        The raw score's and the prediction's AUC on the cross-fitted rows.
    """

    applied: bool
    raw_auc: float
    auc: float

    def report(self) -> dict[str, Any]:
        """As JSON data (``AutoCalibrator.auc_guard_``)."""
        return {"applied": self.applied, "raw_auc": self.raw_auc, "auc": self.auc}


def blend_probabilities(member_predictions: np.ndarray, weights: np.ndarray, intercept: float) -> np.ndarray:
    """The prediction of a blend from its members' probabilities; one member alone: its own."""
    if member_predictions.shape[1] == 1 and weights[0] == 1.0 and intercept == 0.0:
        return np.asarray(member_predictions[:, 0])  # not re-clipped through the logit
    members = [member_predictions[:, k] for k in range(member_predictions.shape[1])]
    return blend_predictions(members, weights, intercept)


def order_guard(
    raw_score: np.ndarray, predicted: np.ndarray, labels: np.ndarray, sample_weight: np.ndarray | None
) -> GuardResult:
    """Compare the out-of-fold AUC of a prediction with the raw score's (module docstring).

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

    Returns
    -------
    GuardResult
    """
    # AUC reads only the order: a score in [0, 1] is read as it is, any other (margins) through its
    # ranks scaled into [0, 1], ties kept, the same order.
    raw_score = np.asarray(raw_score, dtype=np.float64)
    if raw_score.size and raw_score.min() >= 0.0 and raw_score.max() <= 1.0:
        raw_ranks = raw_score
    else:
        raw_ranks = rankdata(raw_score, method="min") / raw_score.shape[0]
    raw_auc = float(roc_auc(labels, raw_ranks, sample_weight=sample_weight))
    auc = float(roc_auc(labels, predicted, sample_weight=sample_weight))
    return GuardResult(applied=auc < raw_auc, raw_auc=raw_auc, auc=auc)


def paired_gain(
    row_losses: np.ndarray, reference_row_losses: np.ndarray, weights: np.ndarray
) -> tuple[float, float]:
    """Weighted mean of ``reference - losses`` per row and its standard error (weights as row counts)."""
    diff = reference_row_losses - row_losses
    total = float(weights.sum())
    mean = float(weights @ diff / total)
    return mean, float(np.sqrt(weights @ (diff - mean) ** 2) / total)


__all__ = ["GuardResult", "blend_probabilities", "order_guard", "paired_gain"]
