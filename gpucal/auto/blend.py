r"""Stacking: a convex, non-negative blend of the candidates' out-of-fold logits, with an intercept.

.. math::

    \hat p_i = \sigma\Big(b + \sum_k w_k\, \operatorname{logit} p_{ik}\Big), \qquad
    w_k \ge 0,\; \sum_k w_k = 1, \qquad
    \min_{w, b}\; \frac{\sum_i v_i \big[\log(1 + e^{z_i}) - y_i z_i\big]}{\sum_i v_i},

with :math:`p_{ik}` candidate :math:`k`'s out-of-fold prediction of row :math:`i` and :math:`v_i` its
weight. The fit starts from the best member alone (:math:`w = e_k`, :math:`b = 0`), a feasible point, and
keeps the optimiser's answer only when its loss is no higher: the blend is never worse in-sample (on the
out-of-fold rows) than its best member. Solved by SLSQP (scipy), which handles the simplex directly; each
of its evaluations is one compiled pass over the rows giving the loss and its gradient together
(:func:`loss_and_gradient`: one exponential and one logarithm per row, no temporaries), and the simplex
constraint's gradient is given (SLSQP would difference it at every step); measured in
``benchmarks/results/auto_cost_encoder.md``.

References
----------
.. [1] D. H. Wolpert, "Stacked generalization", Neural Networks 5 (1992), pp. 241-259.
.. [2] L. Breiman, "Stacked regressions", Machine Learning 24 (1996), pp. 49-64 (non-negative weights).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from gpucal.calibrators.logistic import EPS
from gpucal.kernels.jit import numba

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


@numba.njit(cache=True)
def _loss_gradient_cpu(
    member_logits: np.ndarray, y: np.ndarray, w: np.ndarray, theta: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled; tested through loss_and_gradient
    """``out[:k]``: ``sum_i w_i (p_i - y_i) l_ik``, ``out[k]``: ``sum_i w_i (p_i - y_i)``, ``out[k + 1]``:
    ``sum_i w_i (log(1 + e^z_i) - y_i z_i)``, with ``z = theta[k] + l @ theta[:k]`` and ``p = sigmoid(z)``;
    each row's ``e^-|z|`` gives both ``p`` and the softplus without overflow."""
    n_rows, n_members = member_logits.shape
    out[:] = 0.0
    for i in range(n_rows):
        z = theta[n_members]
        for k in range(n_members):
            z += member_logits[i, k] * theta[k]
        e = np.exp(-abs(z))
        if z >= 0.0:
            p = 1.0 / (1.0 + e)
            softplus = z + np.log1p(e)
        else:
            p = e / (1.0 + e)
            softplus = np.log1p(e)
        out[n_members + 1] += w[i] * (softplus - y[i] * z)
        residual = w[i] * (p - y[i])
        for k in range(n_members):
            out[k] += member_logits[i, k] * residual
        out[n_members] += residual


def loss_and_gradient(
    member_logits: np.ndarray, y: np.ndarray, w: np.ndarray, theta: np.ndarray
) -> tuple[float, np.ndarray]:
    """The blend's weighted mean log-loss at ``theta = [weights..., intercept]`` and its gradient in
    ``theta``, from one compiled pass over the rows (float64, C order)."""
    out = np.empty(member_logits.shape[1] + 2)
    _loss_gradient_cpu(
        np.ascontiguousarray(member_logits, dtype=np.float64),
        np.ascontiguousarray(y, dtype=np.float64),
        np.ascontiguousarray(w, dtype=np.float64),
        np.ascontiguousarray(theta, dtype=np.float64),
        out,
    )
    total = float(w.sum())
    return float(out[-1]) / total, out[:-1] / total


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
    member_logits, y, w = (np.ascontiguousarray(a, dtype=np.float64) for a in (member_logits, y, w))
    n_members = member_logits.shape[1]
    # Member k alone is the blend with weights e_k and intercept 0.
    member_losses = np.array(
        [loss_and_gradient(member_logits, y, w, np.eye(1, n_members + 1, k)[0])[0] for k in range(n_members)]
    )
    fit = _fit_simplex(member_logits, y, w, member_losses)
    light = (fit.weights > 0) & (fit.weights < min_member_weight)
    if not light.any():
        return fit
    # The best member alone stays a feasible start, so the refitted blend is never worse than it.
    best = int(np.argmin(member_losses))
    kept = np.union1d(np.flatnonzero(fit.weights >= min_member_weight), [best])
    refit = _fit_simplex(np.ascontiguousarray(member_logits[:, kept]), y, w, member_losses[kept])
    weights = np.zeros(member_logits.shape[1])
    weights[kept] = refit.weights
    return BlendFit(weights, refit.intercept, refit.loss)


def _fit_simplex(
    member_logits: np.ndarray, y: np.ndarray, w: np.ndarray, member_losses: np.ndarray
) -> BlendFit:
    """One SLSQP fit of the weights on the simplex and the intercept, never worse than the best member
    (``member_losses``: each member's :func:`mean_log_loss`, by :func:`loss_and_gradient`); the arrays
    are float64 and C-ordered."""
    n_members = member_logits.shape[1]
    best = int(np.argmin(member_losses))
    start = np.zeros(n_members + 1)
    start[best] = 1.0
    simplex_normal = np.r_[np.ones(n_members), 0.0]

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        return loss_and_gradient(member_logits, y, w, theta)

    result = minimize(
        objective,
        start,
        jac=True,
        method="SLSQP",
        bounds=[(0.0, 1.0)] * n_members + [(None, None)],
        constraints=[
            {"type": "eq", "fun": lambda t: t[:n_members].sum() - 1.0, "jac": lambda t: simplex_normal}
        ],
        options={"maxiter": 200, "ftol": 1e-12},
    )
    weights = np.where(result.x[:n_members] < MIN_WEIGHT, 0.0, result.x[:n_members])
    if weights.sum() > 0:
        weights = weights / weights.sum()
    intercept = float(result.x[n_members])
    loss = loss_and_gradient(member_logits, y, w, np.r_[weights, intercept])[0]
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
    "loss_and_gradient",
    "mean_log_loss",
]
