"""Damped Newton minimisation of a smooth convex loss from its sums: the driver of every scaling fit.

``newton_minimize`` takes a function returning the loss, gradient and Hessian at a point (one pass over
the rows, ``gpucal.calibrators._logistic_kernels.logistic_sums`` or a sum over row blocks) and owns the
tiny linear algebra and the step control: Armijo step halving, optional box bounds, and the stopping
rules below.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from sklearn.exceptions import ConvergenceWarning

# Newton control. A step whose largest component is below STEP_TOL * (1 + |theta|), or whose Newton
# decrement g' H^-1 g (on the mean loss) is below DECREMENT_TOL, is taken and ends the fit: Newton
# converges quadratically, so the point after that step is accurate to about the square of the step.
NEWTON_MAX_ITER = 100
STEP_TOL = 1e-9
# ... or when the error left after the step, predicted from the observed quadratic convergence, is
# below ERROR_TOL (relative); the warm start on a subsample needs only WARM_ERROR_TOL.
ERROR_TOL = 1e-10
WARM_ERROR_TOL = 1e-6
DECREMENT_TOL = 1e-20
ARMIJO = 1e-4
MAX_HALVINGS = 40
# A trial point whose mean loss rose by less than this (relative) counts as no rise: row sums of 1e7
# terms carry rounding noise far above machine epsilon, and near the optimum the Newton step is better
# than what the noisy loss can tell apart.
LOSS_RTOL = 1e-12


@dataclass(frozen=True)
class NewtonResult:
    """Outcome of :func:`newton_minimize`.

    Attributes
    ----------
    theta : numpy.ndarray
        Parameters at the end.
    n_iter : int
        Newton steps taken (each is one pass over the rows, plus one per step halving).
    converged : bool
        False when ``max_iter`` was reached or no step lowered the loss.
    """

    theta: np.ndarray
    n_iter: int
    converged: bool


SumsFunction = Callable[[np.ndarray], tuple[float, np.ndarray, np.ndarray]]
#: What a line search's trial carries beside its loss (the point, its gradient, its linear predictor).
T = TypeVar("T")


def newton_minimize(
    sums: SumsFunction,
    theta0: np.ndarray,
    *,
    total_weight: float,
    l2: np.ndarray | float = 0.0,
    bounds: tuple[float, float] | None = None,
    max_iter: int = NEWTON_MAX_ITER,
    what: str = "logistic fit",
    warn: bool = True,
    error_tol: float = ERROR_TOL,
    start_tol: float = 0.0,
    first_sums: SumsFunction | None = None,
) -> NewtonResult:
    r"""Minimise :math:`F(\theta) = S(\theta) / W + \tfrac12 \sum_j \lambda_j \theta_j^2` by damped Newton.

    Parameters
    ----------
    sums : callable
        ``sums(theta) -> (loss_sum, grad_sum, hess_sum)``: the row sums :math:`S`, :math:`\nabla S`,
        :math:`\nabla^2 S` at ``theta`` (host float64). Each call is one pass over the rows.
    theta0 : numpy.ndarray
        Starting point.
    total_weight : float
        :math:`W`, the sum of the row weights (the loss is a weighted mean, so ``l2`` does not depend
        on the number of rows and integer weights equal repeated rows).
    l2 : float or numpy.ndarray, default=0.0
        Ridge weights :math:`\lambda_j` per parameter (a scalar applies to all).
    bounds : (float, float) or None, default=None
        Box for a one-parameter problem: the Newton point is projected onto it, which is exact for
        a convex function of one variable.
    max_iter : int, default=NEWTON_MAX_ITER
        Most Newton steps.
    what : str
        Named in the ``ConvergenceWarning``.
    warn : bool, default=True
        Warn when the fit does not converge (off for the warm-start fit on a subsample).
    error_tol : float, default=ERROR_TOL
        Stop once the predicted relative error after the next full Newton step is below this.
    start_tol : float, default=0.0
        For a start known to lie where Newton converges quadratically (the optimum of a close
        approximation of the same loss): a first step whose relative size is at most this is taken
        and ends the fit, its error being of the order of its square. 0 turns the rule off.
    first_sums : callable or None, default=None
        With ``start_tol``: ``sums`` without the loss (any loss value returned is ignored), for the
        first point, whose loss is read only when its step is not taken; it is then summed by ``sums``
        (one more pass). None: ``sums`` throughout.

    Notes
    -----
    Each iteration solves :math:`H \Delta = -g` and halves :math:`\Delta` until the Armijo condition
    holds. The fit ends, after taking :math:`\Delta`, when its relative size
    :math:`r_k = \max_j |\Delta_j| / (1 + |\theta_j|)` is below ``STEP_TOL``, when the Newton
    decrement is below ``DECREMENT_TOL``, or when two consecutive full steps show quadratic
    convergence and predict an error :math:`\max(C, 1)\, r_k^2 \le` ``error_tol`` after this one,
    :math:`C = r_k / r_{k-1}^2`: this saves the last pass over the rows, whose step would be at
    rounding level.

    Returns
    -------
    NewtonResult
    """
    theta = np.array(theta0, dtype=np.float64)
    ridge = np.broadcast_to(np.asarray(l2, dtype=np.float64), theta.shape)
    if bounds is not None and theta.shape != (1,):
        msg = "bounds are only supported for one-parameter problems"
        raise ValueError(msg)

    def evaluate(point: np.ndarray, row_sums: SumsFunction = sums) -> tuple[float, np.ndarray, np.ndarray]:
        loss_sum, grad_sum, hess_sum = row_sums(point)
        loss = loss_sum / total_weight + 0.5 * float(ridge @ (point * point))
        grad = grad_sum / total_weight + ridge * point
        hess = hess_sum / total_weight + np.diag(ridge)
        return loss, grad, hess

    gradient_only = first_sums is not None and start_tol > 0.0
    loss, grad, hess = evaluate(theta, first_sums if first_sums is not None and gradient_only else sums)
    previous = math.inf  # relative size of the last step, when it was a full Newton step
    for n_iter in range(1, max_iter + 1):
        step = _newton_direction(hess, grad)
        if bounds is not None:
            step = np.clip(theta + step, bounds[0], bounds[1]) - theta
        decrement = -float(grad @ step)
        size = float(np.max(np.abs(step) / (1.0 + np.abs(theta))))
        contraction = size / previous**2 if previous > 0 else math.inf
        predicted = max(contraction, 1.0) * size * size
        first = n_iter == 1 and size <= start_tol
        if first or size <= STEP_TOL or decrement <= DECREMENT_TOL or predicted <= error_tol:
            return NewtonResult(theta + step, n_iter, True)
        if gradient_only:  # the line search compares losses
            loss = evaluate(theta, sums)[0]
            gradient_only = False
        found = armijo_backtrack(loss, -decrement, functools.partial(_trial, evaluate, theta, step))
        if found is None:
            if warn:
                warn_not_converged(what, f"no step lowered the loss after {MAX_HALVINGS} halvings")
            return NewtonResult(theta, n_iter, False)
        scale, trial_loss, (trial, trial_grad, trial_hess) = found
        theta, loss, grad, hess = trial, trial_loss, trial_grad, trial_hess
        previous = size if scale == 1.0 else math.inf
    if warn:
        warn_not_converged(what, f"did not converge in {max_iter} Newton steps (separable data?)")
    return NewtonResult(theta, max_iter, False)


def _trial(
    evaluate: Callable[[np.ndarray], tuple[float, np.ndarray, np.ndarray]],
    theta: np.ndarray,
    step: np.ndarray,
    scale: float,
) -> tuple[float, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The objective at ``theta + scale * step``, with the point, its gradient and its Hessian."""
    point = theta + scale * step
    loss, grad, hess = evaluate(point)
    return loss, (point, grad, hess)


def armijo_backtrack(
    loss: float, slope: float, trial_at: Callable[[float], tuple[float, T]]
) -> tuple[float, float, T] | None:
    r"""Backtracking line search (Armijo): the first ``scale`` of 1, 1/2, 1/4, ... (``MAX_HALVINGS``
    halvings) whose trial loss is finite and at most :math:`F + c\, s\, g^\top d` (``ARMIJO`` :math:`= c`,
    ``slope`` :math:`= g^\top d < 0`), allowing a rise of ``LOSS_RTOL`` relative to :math:`|F|` (rounding
    noise of row sums); None when no scale passes.

    ``trial_at(scale)`` returns the trial's loss and what the caller keeps of it (each call is typically
    one pass over the rows); the result is ``(scale, trial loss, that)``.
    """
    tolerance = LOSS_RTOL * max(abs(loss), 1e-300)
    scale = 1.0
    for _ in range(MAX_HALVINGS):
        trial_loss, kept = trial_at(scale)
        if math.isfinite(trial_loss) and trial_loss <= loss + ARMIJO * scale * slope + tolerance:
            return scale, trial_loss, kept
        scale *= 0.5
    return None


def _newton_direction(hess: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """Solve ``hess @ step = -grad``; a singular Hessian (a constant feature) takes the minimum-norm step."""
    try:
        step = -np.linalg.solve(hess, grad)
    except np.linalg.LinAlgError:
        step = np.full_like(grad, np.nan)
    if not np.all(np.isfinite(step)):
        step = -np.linalg.pinv(hess) @ grad
    return step


def warn_not_converged(what: str, reason: str) -> None:
    """Warn (``ConvergenceWarning``, at the fit's caller) that the fit ``what`` stopped for ``reason``."""
    warnings.warn(f"{what}: {reason}; the parameters are the last iterate", ConvergenceWarning, stacklevel=3)


__all__ = [
    "ARMIJO",
    "DECREMENT_TOL",
    "ERROR_TOL",
    "LOSS_RTOL",
    "MAX_HALVINGS",
    "NEWTON_MAX_ITER",
    "STEP_TOL",
    "WARM_ERROR_TOL",
    "NewtonResult",
    "SumsFunction",
    "armijo_backtrack",
    "newton_minimize",
    "warn_not_converged",
]
