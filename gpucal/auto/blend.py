r"""Stacking: a convex, non-negative blend of the candidates' out-of-fold logits, with an intercept.

.. math::

    \hat p_i = \sigma\Big(b + \sum_k w_k\, \operatorname{logit} p_{ik}\Big), \qquad
    w_k \ge 0,\; \sum_k w_k = 1, \qquad
    \min_{w, b}\; \frac{\sum_i v_i \big[\log(1 + e^{z_i}) - y_i z_i\big]}{\sum_i v_i},

with :math:`p_{ik}` candidate :math:`k`'s out-of-fold prediction of row :math:`i` and :math:`v_i` its
weight. The fit starts from the best member alone (:math:`w = e_k`, :math:`b = 0`), a feasible point, and
keeps the solver's answer only when its loss is no higher: the blend is never worse in-sample (on the
out-of-fold rows) than its best member. Solved by Newton's method on the simplex (:func:`_fit_simplex`):
with :math:`x_i = (\operatorname{logit} p_{i1}, \dots, \operatorname{logit} p_{ik}, 1)` the loss's
gradient :math:`g = \sum_i v_i (\hat p_i - y_i) x_i / \sum_i v_i` and Hessian
:math:`H = \sum_i v_i \hat p_i (1 - \hat p_i) x_i x_i^\top / \sum_i v_i` come from one compiled pass
over the rows (:func:`newton_sums`), and each step minimises :math:`g^\top d + d^\top H d / 2` over the
simplex exactly (:func:`simplex_qp`, a primal active-set method on :math:`k + 1` unknowns), then halves
the step until the loss falls enough (Armijo). A handful of passes reach the minimum (the loss within
:data:`NEWTON_DECREASE_TOL`); measured against SLSQP in ``benchmarks/results/auto_cost_large.md``.

References
----------
.. [1] D. H. Wolpert, "Stacked generalization", Neural Networks 5 (1992), pp. 241-259.
.. [2] L. Breiman, "Stacked regressions", Machine Learning 24 (1996), pp. 49-64 (non-negative weights).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucal.calibrators.logistic import EPS, sigmoid, sigmoid_softplus
from gpucal.kernels.jit import map_row_chunks, numba

#: Weights below this are set to 0 (and the rest renormalised): a step halved short of a bound leaves
#: dust there.
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


def blend_predictions(members: list[np.ndarray], weights: np.ndarray, intercept: float) -> np.ndarray:
    r"""The blend's probability :math:`\sigma(b + \sum_k w_k \operatorname{logit} p_k)` per row, from
    the members' probabilities ``members`` (float64 host arrays, one per member).

    Over row chunks on every core (``gpucal.kernels.jit.map_row_chunks``): the numbers of
    ``sigmoid(blend_logit(logits(P), weights, intercept))`` on the stacked ``P`` in one call, without
    its temporaries of every row (at 1e7 rows and two members, 0.5 s of a predict's 2.3-2.8).
    """

    def blend(*chunk: np.ndarray) -> np.ndarray:
        return sigmoid(blend_logit(np.column_stack([logits(p) for p in chunk]), weights, intercept))

    return np.asarray(map_row_chunks(blend, *members))


@numba.njit(cache=True)
def _loss_gradient_cpu(
    member_logits: np.ndarray, y: np.ndarray, w: np.ndarray, theta: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled; tested through loss_and_gradient
    """``out[:k]``: ``sum_i w_i (p_i - y_i) l_ik``, ``out[k]``: ``sum_i w_i (p_i - y_i)``, ``out[k + 1]``:
    ``sum_i w_i (log(1 + e^z_i) - y_i z_i)``, with ``z = theta[k] + l @ theta[:k]`` and ``p = sigmoid(z)``;
    each row's ``e^-|z|`` gives both (:func:`sigmoid_softplus`)."""
    n_rows, n_members = member_logits.shape
    out[:] = 0.0
    for i in range(n_rows):
        z = theta[n_members]
        for k in range(n_members):
            z += member_logits[i, k] * theta[k]
        p, softplus, _ = sigmoid_softplus(z)
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


@numba.njit(cache=True)
def _member_losses_cpu(
    member_logits: np.ndarray, y: np.ndarray, w: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled; tested through member_losses
    """``out[k]``: ``sum_i w_i (log(1 + e^l_ik) - y_i l_ik)``, each member alone, row by row in order:
    the same additions as :func:`_loss_gradient_cpu` at ``theta = e_k`` (whose ``z`` is ``l_ik``
    exactly)."""
    n_rows, n_members = member_logits.shape
    out[:] = 0.0
    for i in range(n_rows):
        for k in range(n_members):
            z = member_logits[i, k]
            _, softplus, _ = sigmoid_softplus(z)
            out[k] += w[i] * (softplus - y[i] * z)


def member_losses(member_logits: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Each member's weighted mean log-loss alone, from one compiled pass over the ``(n, k)`` logits
    (float64, C order): :func:`loss_and_gradient`'s loss at ``theta = e_k``, to the last bit."""
    out = np.empty(member_logits.shape[1])
    _member_losses_cpu(member_logits, y, w, out)
    return out / float(w.sum())


def fit_blend(
    member_logits: np.ndarray, y: np.ndarray, w: np.ndarray, *, min_member_weight: float = 0.0
) -> BlendFit:
    """Fit the blend's weights and intercept on ``(n, k)`` out-of-fold logits (module docstring).

    Members whose weight comes out below ``min_member_weight`` are left out and the blend refitted on
    the others (the best member always stays): each member costs a refit on every row, for a change of
    the blend's logit of at most that weight times the member's distance to the rest. Members with
    identical logits make the optimum a segment: the Hessian's ridge (:func:`_fit_simplex`) shares each
    step's change of their total weight equally among those free, and a twin of the member the fit
    starts from is freed only when that member's weight grows.

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
    losses = member_losses(member_logits, y, w)
    fit = _fit_simplex(member_logits, y, w, losses)
    light = (fit.weights > 0) & (fit.weights < min_member_weight)
    if not light.any():
        return fit
    # The best member alone stays a feasible start, so the refitted blend is never worse than it.
    best = int(np.argmin(losses))
    kept = np.union1d(np.flatnonzero(fit.weights >= min_member_weight), [best])
    refit = _fit_simplex(np.ascontiguousarray(member_logits[:, kept]), y, w, losses[kept])
    weights = np.zeros(member_logits.shape[1])
    weights[kept] = refit.weights
    return BlendFit(weights, refit.intercept, refit.loss)


@numba.njit(cache=True)
def _newton_sums_cpu(
    member_logits: np.ndarray, y: np.ndarray, w: np.ndarray, theta: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled; tested through newton_sums
    """With ``x_i = [l_i1 .. l_ik, 1]``, ``z_i = x_i . theta`` and ``p_i = sigmoid(z_i)``: ``out[0]``:
    ``sum_i w_i (log(1 + e^z_i) - y_i z_i)``, ``out[1:k + 2]``: ``sum_i w_i (p_i - y_i) x_i``, then the
    upper triangle, row by row, of ``sum_i w_i p_i (1 - p_i) x_i x_i^T``; each row's ``e^-|z|`` gives
    ``p``, ``p (1 - p) = e^-|z| / (1 + e^-|z|)^2`` and the softplus without overflow."""
    n_rows, n_members = member_logits.shape
    size = n_members + 1
    out[:] = 0.0
    x = np.empty(size)
    x[n_members] = 1.0
    for i in range(n_rows):
        z = theta[n_members]
        for k in range(n_members):
            x[k] = member_logits[i, k]
            z += x[k] * theta[k]
        p, softplus, e = sigmoid_softplus(z)
        out[0] += w[i] * (softplus - y[i] * z)
        residual = w[i] * (p - y[i])
        curvature = w[i] * e / ((1.0 + e) * (1.0 + e))
        position = 1 + size
        # The gradient, then the Hessian's upper triangle.
        for a in range(size):
            out[1 + a] += residual * x[a]
            scaled = curvature * x[a]
            for b in range(a, size):
                out[position] += scaled * x[b]
                position += 1


def newton_sums(
    member_logits: np.ndarray, y: np.ndarray, w: np.ndarray, theta: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    r"""The blend's weighted mean log-loss at ``theta = [weights..., intercept]``, its gradient and its
    Hessian in ``theta``, from one compiled pass over the rows:

    .. math::

        \nabla = \frac{\sum_i v_i (p_i - y_i)\, x_i}{\sum_i v_i}, \qquad
        \nabla^2 = \frac{\sum_i v_i\, p_i (1 - p_i)\, x_i x_i^\top}{\sum_i v_i}, \qquad
        x_i = (\operatorname{logit} p_{i1}, \dots, \operatorname{logit} p_{ik}, 1).
    """
    member_logits, y, w, theta = (
        np.ascontiguousarray(a, dtype=np.float64) for a in (member_logits, y, w, theta)
    )
    size = member_logits.shape[1] + 1
    out = np.empty(1 + size + size * (size + 1) // 2)
    _newton_sums_cpu(member_logits, y, w, theta, out)
    total = float(w.sum())
    hessian = np.zeros((size, size))
    hessian[np.triu_indices(size)] = out[1 + size :] / total
    hessian = hessian + np.triu(hessian, 1).T
    return float(out[0]) / total, out[1 : 1 + size] / total, hessian


#: Most Newton steps of one blend fit (each one pass over the rows when its full step is taken).
MAX_NEWTON_STEPS = 50
#: A Newton step whose model decrease ``-(g.d + d.H.d / 2)`` of the mean log-loss is below this ends
#: the fit: the loss is within about this of its minimum over the simplex.
NEWTON_DECREASE_TOL = 1e-14
#: Armijo's sufficient-decrease fraction and the most halvings of one step.
ARMIJO_FRACTION = 1e-4
MAX_HALVINGS = 40


def simplex_qp(hessian: np.ndarray, linear: np.ndarray, start: np.ndarray) -> np.ndarray:
    r"""Minimise ``x.H.x / 2 + c.x`` over ``x = [w_1 .. w_k, b]`` with ``w >= 0``, ``sum(w) = 1``, ``b``
    free, by a primal active-set method from the feasible ``start``.

    The working set :math:`W` holds weights fixed at 0. Each step solves the equality-constrained
    problem on the others (its KKT system, :math:`H_{FF} x_F + \nu \mathbf 1_F = -c_F`,
    :math:`\mathbf 1_F^\top x_F = 1`; the intercept's entry of :math:`\mathbf 1` is 0). A solution with
    a negative weight is approached up to the first weight reaching 0, which joins :math:`W`; a feasible
    one is optimal when every multiplier of :math:`W`, :math:`\mu = (H x + c + \nu \mathbf 1)_W`, is
    at least 0 (to rounding), else the weight of the most negative one is freed. ``H`` must be positive
    definite on the constraint's null space (:func:`_fit_simplex` adds a ridge).
    """
    size = start.shape[0]
    n_members = size - 1
    x = start.copy()
    fixed = np.zeros(size, dtype=bool)
    fixed[:n_members] = x[:n_members] <= 0.0
    x[fixed] = 0.0
    ones = np.r_[np.ones(n_members), 0.0]
    # A multiplier this close to 0 (rounding) leaves its weight at 0: freeing it would not move x.
    tolerance = 1e-14 * max(1.0, float(np.abs(linear).max()))
    for _ in range(10 * size + 10):
        free = np.flatnonzero(~fixed)
        n_free = free.shape[0]
        kkt = np.zeros((n_free + 1, n_free + 1))
        kkt[:n_free, :n_free] = hessian[np.ix_(free, free)]
        kkt[:n_free, n_free] = ones[free]
        kkt[n_free, :n_free] = ones[free]
        solved = np.linalg.solve(kkt, np.r_[-linear[free], 1.0])
        target = np.zeros(size)
        target[free] = solved[:n_free]
        below = free[(free < n_members) & (target[free] < 0.0)]
        if below.size:
            # Walk towards the target until the first weight reaches 0.
            ratios = x[below] / (x[below] - target[below])
            first = int(np.argmin(ratios))
            x = x + ratios[first] * (target - x)
            x[below[first]] = 0.0
            fixed[below[first]] = True
            continue
        x = target
        multipliers = (hessian @ x + linear + solved[n_free] * ones)[fixed]
        if multipliers.size == 0 or multipliers.min() >= -tolerance:
            return x
        fixed[np.flatnonzero(fixed)[int(np.argmin(multipliers))]] = False
    return x


def _fit_simplex(member_logits: np.ndarray, y: np.ndarray, w: np.ndarray, losses: np.ndarray) -> BlendFit:
    r"""One fit of the weights on the simplex and the intercept by Newton's method, never worse than the
    best member (``losses``: each member's :func:`mean_log_loss`, by :func:`member_losses`);
    the arrays are float64 and C-ordered.

    Each step minimises the loss's second-order model :math:`g^\top d + d^\top H d / 2` over the
    simplex (:func:`simplex_qp`, :math:`H` plus a ridge of :math:`10^{-10} \operatorname{tr} H / (k + 1)`,
    which keeps it invertible where members are collinear) and halves the step until Armijo's
    condition holds; the loss, gradient and Hessian of each trial come from one pass
    (:func:`newton_sums`). It stops when the model decrease is below :data:`NEWTON_DECREASE_TOL`: the
    fixed point is the constrained minimum whatever the ridge.
    """
    n_members = member_logits.shape[1]
    best = int(np.argmin(losses))
    start = np.zeros(n_members + 1)
    start[best] = 1.0
    theta = start
    loss, gradient, hessian = newton_sums(member_logits, y, w, theta)
    for _ in range(MAX_NEWTON_STEPS):
        ridge = 1e-10 * max(float(np.trace(hessian)) / (n_members + 1), np.finfo(np.float64).tiny)
        curved = hessian + ridge * np.eye(n_members + 1)
        step = simplex_qp(curved, gradient - curved @ theta, theta) - theta
        slope = float(gradient @ step)
        if -(slope + 0.5 * float(step @ curved @ step)) < NEWTON_DECREASE_TOL or slope >= 0.0:
            break
        length = 1.0
        for _ in range(MAX_HALVINGS):
            trial = theta + length * step
            trial[:n_members] = np.maximum(trial[:n_members], 0.0)
            trial_loss, trial_gradient, trial_hessian = newton_sums(member_logits, y, w, trial)
            if trial_loss <= loss + ARMIJO_FRACTION * length * slope:
                break
            length *= 0.5
        else:
            break
        theta, loss, gradient, hessian = trial, trial_loss, trial_gradient, trial_hessian
    weights = np.where(theta[:n_members] < MIN_WEIGHT, 0.0, theta[:n_members])
    if weights.sum() > 0:
        weights = weights / weights.sum()
    intercept = float(theta[n_members])
    loss = loss_and_gradient(member_logits, y, w, np.r_[weights, intercept])[0]
    if not np.isfinite(loss) or weights.sum() == 0 or loss > losses[best]:
        return BlendFit(start[:n_members], 0.0, float(losses[best]))
    return BlendFit(weights, intercept, loss)


__all__ = [
    "ARMIJO_FRACTION",
    "MAX_HALVINGS",
    "MAX_NEWTON_STEPS",
    "MIN_MEMBER_WEIGHT",
    "MIN_WEIGHT",
    "NEWTON_DECREASE_TOL",
    "BlendFit",
    "blend_logit",
    "blend_predictions",
    "fit_blend",
    "logits",
    "loss_and_gradient",
    "mean_log_loss",
    "member_losses",
    "newton_sums",
    "simplex_qp",
]
