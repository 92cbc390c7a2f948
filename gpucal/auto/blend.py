r"""Stacking: a convex, non-negative blend of the candidates' out-of-fold logits, with an intercept.

.. math::

    \hat p_i = \sigma\Big(b + \sum_k w_k\, \operatorname{logit} p_{ik}\Big), \qquad
    w_k \ge 0,\; \sum_k w_k = 1, \qquad
    \min_{w, b}\; \frac{\sum_i v_i \big[\log(1 + e^{z_i}) - y_i z_i\big]}{\sum_i v_i},

with :math:`p_{ik}` candidate :math:`k`'s out-of-fold prediction of row :math:`i` and :math:`v_i` its
weight. The fit starts from the best member alone (:math:`w = e_k`, :math:`b = 0`), a feasible point, and
keeps the optimiser's answer only when its loss is no higher: the blend is never worse in-sample (on the
out-of-fold rows) than its best member. Solved by SLSQP (scipy), which handles the simplex directly.

References
----------
.. [1] D. H. Wolpert, "Stacked generalization", Neural Networks 5 (1992), pp. 241-259.
.. [2] L. Breiman, "Stacked regressions", Machine Learning 24 (1996), pp. 49-64 (non-negative weights).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

from gpucal.calibrators.logistic import EPS

#: Weights below this are set to 0 (and the rest renormalised): SLSQP leaves dust on the bounds.
MIN_WEIGHT = 1e-6
#: On a large calibration set, members lighter than this are dropped and the blend refitted without
#: them (:func:`fit_blend`).
MIN_MEMBER_WEIGHT = 0.05


@dataclass(frozen=True)
class BlendFit:
    """Result of :func:`fit_blend`.

    Attributes
    ----------
    weights : numpy.ndarray of shape (k,)
        Non-negative, summing to one.
    intercept : float
    loss : float
        Weighted mean log-loss of the blend on the rows it was fitted on.
    """

    weights: np.ndarray
    intercept: float
    loss: float


def logits(probabilities: np.ndarray) -> np.ndarray:
    """Logit of probabilities clipped to ``[EPS, 1 - EPS]`` (0 and 1 would be infinite)."""
    p = np.clip(probabilities, EPS, 1.0 - EPS)
    return np.log(p) - np.log1p(-p)


def mean_log_loss(z: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """Weighted mean of ``log(1 + e^z) - y z``."""
    return float(np.dot(w, np.logaddexp(0.0, z) - y * z) / w.sum())


def blend_logit(member_logits: np.ndarray, weights: np.ndarray, intercept: float) -> np.ndarray:
    """``intercept + member_logits @ weights``: the blend's logit per row."""
    return intercept + member_logits @ weights


def fit_blend(
    member_logits: np.ndarray, y: np.ndarray, w: np.ndarray, *, min_member_weight: float = 0.0
) -> BlendFit:
    """Fit the blend's weights and intercept on ``(n, k)`` out-of-fold logits (module docstring).

    Members whose weight comes out below ``min_member_weight`` are left out and the blend refitted on
    the others (the best member always stays): each member costs a refit on every row, for a change of
    the blend's logit of at most that weight times the member's distance to the rest.

    Parameters
    ----------
    member_logits : numpy.ndarray of shape (n, k)
        Out-of-fold logit of each of ``k`` candidates.
    y : numpy.ndarray of shape (n,)
        Labels in [0, 1].
    w : numpy.ndarray of shape (n,)
        Row weights (not all zero).
    min_member_weight : float, default=0.0
        The lightest weight a member may keep (``AutoCalibrator`` uses :data:`MIN_MEMBER_WEIGHT` on
        large calibration sets, where refits are the cost).

    Returns
    -------
    BlendFit
    """
    member_losses = np.array(
        [mean_log_loss(member_logits[:, k], y, w) for k in range(member_logits.shape[1])]
    )
    fit = _fit_simplex(member_logits, y, w, member_losses)
    light = (fit.weights > 0) & (fit.weights < min_member_weight)
    if not light.any():
        return fit
    # The best member alone stays a feasible start, so the refitted blend is never worse than it.
    best = int(np.argmin(member_losses))
    kept = np.union1d(np.flatnonzero(fit.weights >= min_member_weight), [best])
    refit = _fit_simplex(member_logits[:, kept], y, w, member_losses[kept])
    weights = np.zeros(member_logits.shape[1])
    weights[kept] = refit.weights
    return BlendFit(weights, refit.intercept, refit.loss)


def _fit_simplex(
    member_logits: np.ndarray, y: np.ndarray, w: np.ndarray, member_losses: np.ndarray
) -> BlendFit:
    """One SLSQP fit of the weights on the simplex and the intercept, never worse than the best member
    (``member_losses``: each member's :func:`mean_log_loss`)."""
    n_members = member_logits.shape[1]
    total = float(w.sum())
    best = int(np.argmin(member_losses))
    start = np.zeros(n_members + 1)
    start[best] = 1.0

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        z = blend_logit(member_logits, theta[:n_members], float(theta[n_members]))
        residual = w * (expit(z) - y) / total
        gradient = np.append(member_logits.T @ residual, residual.sum())
        return mean_log_loss(z, y, w), gradient

    result = minimize(
        objective,
        start,
        jac=True,
        method="SLSQP",
        bounds=[(0.0, 1.0)] * n_members + [(None, None)],
        constraints=[{"type": "eq", "fun": lambda t: t[:n_members].sum() - 1.0}],
        options={"maxiter": 200, "ftol": 1e-12},
    )
    weights = np.where(result.x[:n_members] < MIN_WEIGHT, 0.0, result.x[:n_members])
    if weights.sum() > 0:
        weights = weights / weights.sum()
    intercept = float(result.x[n_members])
    loss = mean_log_loss(blend_logit(member_logits, weights, intercept), y, w)
    if not np.isfinite(loss) or weights.sum() == 0 or loss > member_losses[best]:
        return BlendFit(start[:n_members], 0.0, float(member_losses[best]))
    return BlendFit(weights, intercept, loss)


__all__ = [
    "MIN_MEMBER_WEIGHT",
    "MIN_WEIGHT",
    "BlendFit",
    "blend_logit",
    "fit_blend",
    "logits",
    "mean_log_loss",
]
