r"""Weighted logistic regression on a small design, fitted by Newton steps from row sums.

Every scaling calibrator (Platt, temperature, beta) is a logistic model

.. math::

    \hat p_i = \sigma(\theta^\top x_i + c), \qquad
    L(\theta, c) = \frac{1}{W} \sum_i w_i \left[\log(1 + e^{z_i}) - t_i z_i\right], \quad W = \sum_i w_i,

whose features :math:`x_i` are a fixed map of one score column (``logit(p)``, ``[ln p, -ln(1-p)]``, ...)
or a small design matrix. A Newton step needs only

.. math::

    \sum_i w_i \ell_i, \qquad g = \sum_i w_i (p_i - t_i)\, x_i, \qquad
    H = \sum_i w_i\, p_i (1 - p_i)\, x_i x_i^\top,

sums over rows into arrays of a fixed shape (the design's width is 1 to 3), so one step is one pass over
the rows and the same fit runs over row blocks, GPU arrays or Dask partitions (add the partial sums).
The driver :func:`newton_minimize` owns the tiny linear algebra and the step control; the row passes
are :func:`logistic_sums` (a fused numba loop on the CPU; plain array code for numpy or cupy).

Targets are soft: row ``i`` has target :math:`t_i = t_- + y_i (t_+ - t_-)`, so Platt's smoothed targets
need no extra n-sized array (``targets=(t_-, t_+)``; ``(0, 1)`` is the plain maximum likelihood fit).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numba
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from gpucal._backend import array_namespace, to_numpy
from gpucal.rows.block import check_class_weights

# How a kernel reads the features of row i from its input X (a 2-D float64 array).
FEATURES_COLUMNS = 0  # X is the design matrix: x_i = X[i, :] (a raw margin is one column)
FEATURES_LOGIT = 1  # X[:, 0] is a probability: x_i = [logit(p_i)]
FEATURES_BETA = 2  # X[:, 0] is a probability: x_i = [ln p_i, -ln(1 - p_i)] (Kull et al. 2017, abm)
FEATURES_BETA_AB = 3  # X[:, 0] is a probability: x_i = [ln 2 p_i, -ln 2 (1 - p_i)] (betacal's "ab")
_MODE_WIDTH = {FEATURES_LOGIT: 1, FEATURES_BETA: 2, FEATURES_BETA_AB: 2}

# Probabilities are clipped to [EPS, 1 - EPS] before a logarithm, as betacal does (float64 machine
# epsilon): logit(0) becomes -36.04 and logit(1) becomes 36.04 instead of -inf and inf.
EPS = float(np.finfo(np.float64).eps)
LN2 = math.log(2.0)

# Rows per partial sum of the numba kernel. Fixed, so the summation order (and so every bit of the
# result) does not depend on the number of threads.
CHUNK_ROWS = 1 << 15
# Below this many rows, "auto" runs the numpy array code instead of the numba loop.
NUMBA_MIN_ROWS = 1 << 17

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
# Fits on at least WARM_START_MIN_ROWS rows start from the fit on about WARM_START_ROWS strided rows.
WARM_START_MIN_ROWS = 1 << 18
WARM_START_ROWS = 1 << 15


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

    def evaluate(point: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        loss_sum, grad_sum, hess_sum = sums(point)
        loss = loss_sum / total_weight + 0.5 * float(ridge @ (point * point))
        grad = grad_sum / total_weight + ridge * point
        hess = hess_sum / total_weight + np.diag(ridge)
        return loss, grad, hess

    loss, grad, hess = evaluate(theta)
    previous = math.inf  # relative size of the last step, when it was a full Newton step
    for n_iter in range(1, max_iter + 1):
        step = _newton_direction(hess, grad)
        if bounds is not None:
            step = np.clip(theta + step, bounds[0], bounds[1]) - theta
        decrement = -float(grad @ step)
        size = float(np.max(np.abs(step) / (1.0 + np.abs(theta))))
        contraction = size / previous**2 if previous > 0 else math.inf
        predicted = max(contraction, 1.0) * size * size
        if size <= STEP_TOL or decrement <= DECREMENT_TOL or predicted <= error_tol:
            return NewtonResult(theta + step, n_iter, True)
        # Backtracking line search (Armijo), halving the step; each trial is one row pass.
        scale = 1.0
        for _ in range(MAX_HALVINGS):
            trial = theta + scale * step
            trial_loss, trial_grad, trial_hess = evaluate(trial)
            tolerance = LOSS_RTOL * max(abs(loss), 1e-300)
            if math.isfinite(trial_loss) and trial_loss <= loss - ARMIJO * scale * decrement + tolerance:
                break
            scale *= 0.5
        else:
            if warn:
                _warn(what, f"no step lowered the loss after {MAX_HALVINGS} halvings")
            return NewtonResult(theta, n_iter, False)
        theta, loss, grad, hess = trial, trial_loss, trial_grad, trial_hess
        previous = size if scale == 1.0 else math.inf
    if warn:
        _warn(what, f"did not converge in {max_iter} Newton steps (separable data?)")
    return NewtonResult(theta, max_iter, False)


def _newton_direction(hess: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """Solve ``hess @ step = -grad``; a singular Hessian (a constant feature) takes the minimum-norm step."""
    try:
        step = -np.linalg.solve(hess, grad)
    except np.linalg.LinAlgError:
        step = np.full_like(grad, np.nan)
    if not np.all(np.isfinite(step)):
        step = -np.linalg.pinv(hess) @ grad
    return step


def _warn(what: str, reason: str) -> None:
    warnings.warn(f"{what}: {reason}; the parameters are the last iterate", ConvergenceWarning, stacklevel=3)


# --------------------------------------------------------------------------------------------------
# Features


def n_features(X: Any, mode: int) -> int:
    """Return the number of features a row of ``X`` yields under ``mode``."""
    return int(X.shape[1]) if mode == FEATURES_COLUMNS else _MODE_WIDTH[mode]


def features_array(X: Any, mode: int) -> Any:
    """Return the ``(n, d)`` design of ``X`` under ``mode`` (numpy or cupy; the array path)."""
    xp = array_namespace(X)
    if mode == FEATURES_COLUMNS:
        return X
    p = xp.clip(X[:, 0], EPS, 1.0 - EPS)
    if mode == FEATURES_LOGIT:
        return xp.log(p / (1.0 - p))[:, None]
    if mode == FEATURES_BETA:
        return xp.stack([xp.log(p), -xp.log(1.0 - p)], axis=1)
    return xp.stack([xp.log(p) + LN2, -(xp.log(1.0 - p) + LN2)], axis=1)


@numba.njit(cache=True, inline="always")
def _row_features(X, i, mode):
    """Return the (at most two) features of row ``i`` (the numba twin of :func:`features_array`).

    Inlined by numba (``inline="always"``): a call per row that passes an array would touch its
    reference count, which costs more than the arithmetic.
    """
    if mode == FEATURES_COLUMNS:
        return X[i, 0], X[i, 1] if X.shape[1] > 1 else 0.0
    p = min(max(X[i, 0], EPS), 1.0 - EPS)
    if mode == FEATURES_LOGIT:
        return math.log(p / (1.0 - p)), 0.0
    # log(1 - p) as betacal writes it (log1p costs twice as much; 1 - p is exact for p >= 1/2 and the
    # absolute error below is at rounding level).
    if mode == FEATURES_BETA:
        return math.log(p), -math.log(1.0 - p)
    return math.log(p) + LN2, -(math.log(1.0 - p) + LN2)


@numba.njit(parallel=True, cache=True)
def _features_cpu(X, mode, out):
    n = out.shape[0]
    n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    for c in numba.prange(n_chunks):
        for i in range(c * CHUNK_ROWS, min(n, (c + 1) * CHUNK_ROWS)):
            x0, x1 = _row_features(X, i, mode)
            out[i, 0] = x0
            if out.shape[1] > 1:
                out[i, 1] = x1
    return out


def features_cpu(X: np.ndarray, mode: int) -> np.ndarray:
    """Return the ``(n, d)`` design of ``X`` under ``mode`` from the numba loop (numpy only, d <= 2)."""
    X2 = np.ascontiguousarray(_as_2d(X), dtype=np.float64)
    out = np.empty((X2.shape[0], n_features(X2, mode)), dtype=np.float64)
    return _features_cpu(X2, mode, out)


# --------------------------------------------------------------------------------------------------
# Row sums

# The numba loop keeps its sums in scalars (registers), so it is written for the full model
# z = c0 x0 + c1 x1 + c2 with at most two features and an intercept; unused parameters are 0 and
# their rows and columns of the sums are dropped on the host. Wider designs take the array path.
NUMBA_MAX_FEATURES = 2


@numba.njit(parallel=True, cache=True)
def _logistic_sums_cpu(X, mode, y, t_neg, t_pos, w, c0, c1, c2):
    """Return the 10 sums ``[loss, g0, g1, g2, h00, h01, h02, h11, h12, h22]`` of the model
    ``sigmoid(c0 x0 + c1 x1 + c2)`` (index 2 is the intercept)."""
    n = y.shape[0]
    n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    partial = np.zeros((n_chunks, 10))
    for c in numba.prange(n_chunks):
        loss = g0 = g1 = g2 = h00 = h01 = h02 = h11 = h12 = h22 = 0.0
        for i in range(c * CHUNK_ROWS, min(n, (c + 1) * CHUNK_ROWS)):
            wi = w[i]
            if wi == 0.0:  # a zero-weight row adds nothing, even where its features are extreme
                continue
            x0, x1 = _row_features(X, i, mode)
            z = c0 * x0 + c1 * x1 + c2
            t = t_neg + y[i] * (t_pos - t_neg)
            # One exp and one log per row: e = exp(-|z|) gives both sigmoid(z) and log(1 + exp(z)).
            e = math.exp(-abs(z))
            # log(1 + e) rather than log1p(e) (twice as fast): e <= 1, so the absolute error stays
            # at rounding level, and the loss only decides the line search.
            if z >= 0.0:
                p = 1.0 / (1.0 + e)
                loss += wi * (z + math.log(1.0 + e) - t * z)
            else:
                p = e / (1.0 + e)
                loss += wi * (math.log(1.0 + e) - t * z)
            r = wi * (p - t)
            h = wi * p * (1.0 - p)
            g0 += r * x0
            g1 += r * x1
            g2 += r
            h00 += h * x0 * x0
            h01 += h * x0 * x1
            h02 += h * x0
            h11 += h * x1 * x1
            h12 += h * x1
            h22 += h
        partial[c, 0] = loss
        partial[c, 1] = g0
        partial[c, 2] = g1
        partial[c, 3] = g2
        partial[c, 4] = h00
        partial[c, 5] = h01
        partial[c, 6] = h02
        partial[c, 7] = h11
        partial[c, 8] = h12
        partial[c, 9] = h22
    total = np.zeros(10)
    for c in range(n_chunks):  # fixed order: the result does not depend on the thread count
        for j in range(10):
            total[j] += partial[c, j]
    return total


def _as_2d(X: Any) -> Any:
    return X[:, None] if X.ndim == 1 else X


def logistic_sums(
    X: Any,
    y: Any,
    w: Any,
    theta: np.ndarray,
    *,
    mode: int = FEATURES_COLUMNS,
    cols: Any = None,
    fit_intercept: bool = True,
    targets: tuple[float, float] = (0.0, 1.0),
    backend: str = "auto",
) -> tuple[float, np.ndarray, np.ndarray]:
    r"""Return the row sums :math:`\sum w\ell`, :math:`g` and :math:`H` at ``theta``.

    Parameters
    ----------
    X : array of shape (n,) or (n, D)
        Score column (``mode`` other than ``FEATURES_COLUMNS``) or design matrix; numpy or cupy.
    y : array of shape (n,)
        Labels in [0, 1].
    w : array of shape (n,)
        Row weights.
    theta : numpy.ndarray of shape (m,)
        Coefficients of the features ``cols``, then the intercept when ``fit_intercept``.
    mode : int, default=FEATURES_COLUMNS
        How features are read from ``X`` (``FEATURES_*``).
    cols : sequence of int or None, default=None
        Which features enter the model (None: all); betacal's refit drops one.
    fit_intercept : bool, default=True
        Whether the last entry of ``theta`` is an intercept.
    targets : (float, float), default=(0.0, 1.0)
        :math:`(t_-, t_+)`: the target of a row is :math:`t_- + y (t_+ - t_-)`.
    backend : {"auto", "numba", "array"}, default="auto"
        ``"numba"``: the fused CPU loop (numpy only); ``"array"``: numpy/cupy array code (the oracle,
        and the GPU path); ``"auto"``: numba for numpy arrays of at least ``NUMBA_MIN_ROWS`` rows,
        array code otherwise. The numba loop handles at most ``NUMBA_MAX_FEATURES`` features; wider
        designs always take the array path.

    Returns
    -------
    loss_sum : float
    grad_sum : numpy.ndarray of shape (m,)
    hess_sum : numpy.ndarray of shape (m, m)
    """
    X2 = _as_2d(X)
    width = n_features(X2, mode)
    col_idx = np.arange(width, dtype=np.int64) if cols is None else np.asarray(cols, dtype=np.int64)
    theta = np.ascontiguousarray(theta, dtype=np.float64)
    if width <= NUMBA_MAX_FEATURES and use_numba(backend, X2, y, w):
        # Embed theta in the full model [x0, x1, 1]; keep the sums of the parameters in use.
        used = np.r_[col_idx, [2] if fit_intercept else []].astype(np.int64)
        full = np.zeros(3)
        full[used] = theta
        s = _logistic_sums_cpu(
            np.ascontiguousarray(X2, dtype=np.float64),
            mode,
            np.ascontiguousarray(y, dtype=np.float64),
            float(targets[0]),
            float(targets[1]),
            # Not made contiguous: unit weights are a zero-stride view, and a copy would cost a pass
            # and 8n bytes on every Newton step.
            np.asarray(w, dtype=np.float64),
            full[0],
            full[1],
            full[2],
        )
        grad = s[1:4]
        hess = np.array([[s[4], s[5], s[6]], [s[5], s[7], s[8]], [s[6], s[8], s[9]]])
        return float(s[0]), grad[used], hess[np.ix_(used, used)]
    xp = array_namespace(X2, y, w)
    design = features_array(X2, mode)[:, xp.asarray(col_idx)]
    if fit_intercept:
        design = xp.concatenate([design, xp.ones((design.shape[0], 1))], axis=1)
    z = design @ xp.asarray(theta)
    t = targets[0] + y * (targets[1] - targets[0])
    p = sigmoid(z)
    loss = xp.sum(w * (xp.logaddexp(0.0, z) - t * z))
    grad = design.T @ (w * (p - t))
    hess = (design * (w * p * (1.0 - p))[:, None]).T @ design
    return float(loss), to_numpy(grad), to_numpy(hess)


def use_numba(backend: str, *arrays: Any) -> bool:
    """Resolve ``backend`` for these arrays: True for the numba loop, False for array code.

    ``"auto"`` takes numba for numpy arrays of at least ``NUMBA_MIN_ROWS`` rows: below that, waking
    the thread pool costs more than the vectorised numpy code (and much more on a busy machine).
    """
    if backend not in ("auto", "numba", "array"):
        msg = f"backend must be one of ('auto', 'numba', 'array'); got {backend!r}"
        raise ValueError(msg)
    on_gpu = array_namespace(*arrays) is not np
    if backend == "numba" and on_gpu:
        msg = "backend='numba' runs on the CPU; the arrays are cupy"
        raise TypeError(msg)
    large = int(arrays[0].shape[0]) >= NUMBA_MIN_ROWS
    return backend == "numba" or (backend == "auto" and not on_gpu and large)


# --------------------------------------------------------------------------------------------------
# Fit and predict


@dataclass(frozen=True)
class LogisticFit:
    """Result of :func:`fit_logistic`: ``sigmoid(coef @ x + intercept)``.

    Attributes
    ----------
    coef : numpy.ndarray of shape (d,)
        Coefficients of the selected features.
    intercept : float
        0.0 when fitted without one.
    n_iter : int
    converged : bool
    """

    coef: np.ndarray
    intercept: float
    n_iter: int
    converged: bool


def newton_start(
    d: int,
    total_weight: float,
    label_sum: float,
    *,
    fit_intercept: bool = True,
    targets: tuple[float, float] = (0.0, 1.0),
    l2: float = 0.0,
    theta0: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Return the Newton start and the ridge weights of :func:`fit_logistic` from two row sums.

    The start is ``theta0``, or zero coefficients and the intercept of the best constant model,
    :math:`\operatorname{logit}\bar t` with :math:`\bar t` from ``label_sum / total_weight``
    (:math:`\sum w y / \sum w`); the intercept is not penalised.
    """
    m = d + int(fit_intercept)
    if theta0 is None:
        start = np.zeros(m)
        if fit_intercept:
            mean_y = label_sum / total_weight
            mean_t = min(max(targets[0] + mean_y * (targets[1] - targets[0]), 1e-12), 1.0 - 1e-12)
            start[-1] = math.log(mean_t / (1.0 - mean_t))
    else:
        start = np.asarray(theta0, dtype=np.float64)
    ridge = np.full(m, float(l2))
    if fit_intercept:
        ridge[-1] = 0.0
    return start, ridge


def fit_logistic(
    X: Any,
    y: Any,
    w: Any,
    *,
    mode: int = FEATURES_COLUMNS,
    cols: Any = None,
    fit_intercept: bool = True,
    targets: tuple[float, float] = (0.0, 1.0),
    l2: float = 0.0,
    theta0: Any = None,
    bounds: tuple[float, float] | None = None,
    backend: str = "auto",
    what: str = "logistic fit",
) -> LogisticFit:
    r"""Fit :math:`\sigma(\theta^\top x + c)` by weighted (soft-target) maximum likelihood.

    The objective is the weighted mean log-loss plus :math:`\tfrac{l_2}{2}\lVert\theta\rVert^2` (the
    intercept is not penalised). Parameters are as in :func:`logistic_sums`; ``theta0`` defaults to
    zero coefficients and the intercept of the best constant model, :math:`\operatorname{logit}\bar t`.
    ``bounds`` is passed to :func:`newton_minimize` (one-parameter fits only).

    Returns
    -------
    LogisticFit
    """
    X2 = _as_2d(X)
    xp = array_namespace(X2, y, w)
    width = n_features(X2, mode)
    if mode != FEATURES_COLUMNS and use_numba(backend, X2, y, w):
        # Logarithms once, not once per pass: the design costs 8 bytes per feature and row, and
        # each Newton pass is left with one exp and one log per row.
        X2 = features_cpu(X2, mode)
        mode = FEATURES_COLUMNS
    d = width if cols is None else len(cols)
    total_weight = float(xp.sum(w))
    label_sum = (
        float(w @ y) if theta0 is None and fit_intercept else 0.0
    )  # a dot product: no n-sized temporary
    start, ridge = newton_start(
        d, total_weight, label_sum, fit_intercept=fit_intercept, targets=targets, l2=l2, theta0=theta0
    )
    options = {"mode": mode, "cols": cols, "fit_intercept": fit_intercept, "targets": targets}
    n_rows = int(X2.shape[0])
    if n_rows >= WARM_START_MIN_ROWS:
        # Start from the fit on an evenly strided subsample: the objective is convex, so the start
        # changes only how many full passes are needed (about three instead of six), not the answer.
        stride = n_rows // WARM_START_ROWS
        sub = (xp.ascontiguousarray(a[::stride]) for a in (X2, y, w))
        X_sub, y_sub, w_sub = sub
        sub_weight = float(xp.sum(w_sub))
        if sub_weight > 0.0:

            def sub_sums(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
                return logistic_sums(X_sub, y_sub, w_sub, theta, backend=backend, **options)

            warm = newton_minimize(
                sub_sums,
                start,
                total_weight=sub_weight,
                l2=ridge,
                bounds=bounds,
                warn=False,
                error_tol=WARM_ERROR_TOL,
            )
            if warm.converged:
                start = warm.theta

    def sums(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        return logistic_sums(X2, y, w, theta, backend=backend, **options)

    result = newton_minimize(sums, start, total_weight=total_weight, l2=ridge, bounds=bounds, what=what)
    theta = result.theta
    intercept = float(theta[-1]) if fit_intercept else 0.0
    return LogisticFit(theta[:d].copy(), intercept, result.n_iter, result.converged)


@numba.njit(parallel=True, cache=True)
def _predict_cpu(X, mode, c0, c1, c2, out):
    """``out[i] = sigmoid(c0 x0 + c1 x1 + c2)``, features computed on the fly."""
    n = out.shape[0]
    n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    for c in numba.prange(n_chunks):
        for i in range(c * CHUNK_ROWS, min(n, (c + 1) * CHUNK_ROWS)):
            x0, x1 = _row_features(X, i, mode)
            z = c0 * x0 + c1 * x1 + c2
            e = math.exp(-abs(z))
            out[i] = 1.0 / (1.0 + e) if z >= 0.0 else e / (1.0 + e)
    return out


def predict_logistic(
    X: Any,
    coef: Any,
    intercept: float,
    *,
    mode: int = FEATURES_COLUMNS,
    cols: Any = None,
    backend: str = "auto",
) -> Any:
    """Return :math:`\\sigma(\\text{coef}^\\top x + \\text{intercept})` per row (numpy or cupy, float64)."""
    X2 = _as_2d(X)
    width = n_features(X2, mode)
    col_idx = np.arange(width, dtype=np.int64) if cols is None else np.asarray(cols, dtype=np.int64)
    coef = np.ascontiguousarray(coef, dtype=np.float64)
    if width <= NUMBA_MAX_FEATURES and use_numba(backend, X2):
        full = np.zeros(2)
        full[col_idx] = coef
        out = np.empty(X2.shape[0], dtype=np.float64)
        return _predict_cpu(
            np.ascontiguousarray(X2, dtype=np.float64), mode, full[0], full[1], float(intercept), out
        )
    xp = array_namespace(X2)
    return sigmoid(features_array(X2, mode)[:, xp.asarray(col_idx)] @ xp.asarray(coef) + intercept)


def sigmoid(z: Any) -> Any:
    """``1 / (1 + exp(-z))`` without overflow: ``e / (1 + e)`` or ``1 / (1 + e)`` with ``e = exp(-|z|)``."""
    xp = array_namespace(z)
    e = xp.exp(-xp.abs(z))
    return xp.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def check_two_classes(y: Any, w: Any, name: str = "y") -> None:
    """Raise ``ValueError`` unless both classes carry weight: the likelihood has no finite maximiser.

    With one class only, the best logistic map sends every score to that class: the slope or the
    intercept runs to infinity, so the fit would return whatever the last iterate happened to be.
    """
    xp = array_namespace(y, w)
    weighted = w > 0
    check_class_weights(bool(xp.any(weighted & (y > 0))), bool(xp.any(weighted & (y < 1))), name)


# --------------------------------------------------------------------------------------------------
# Where the rows of a scaling fit live


class LogisticRows(Protocol):
    """The rows a scaling calibrator fits on, whatever holds them.

    :class:`ArrayRows` holds arrays on one device; ``gpucal.calibrators._score_rows.ScoreRows`` implements
    the same four methods over any :class:`gpucal.rows.Rows` (each a pass over the blocks: one local block,
    dask partitions held or streamed), so Platt, beta and temperature fits are written once.
    """

    def check_two_classes(self) -> None:
        """Raise ``ValueError`` unless both classes carry weight (:func:`check_two_classes`)."""

    def label_sums(self) -> tuple[float, float]:
        """Return ``(sum w, sum w*y)``."""

    def score_range(self) -> tuple[float, float]:
        """Return the smallest and largest score."""

    def fit(self, **options: Any) -> LogisticFit:
        """Fit as :func:`fit_logistic` with these keyword options."""


@dataclass(frozen=True)
class ArrayRows:
    """:class:`LogisticRows` over validated float64 arrays (numpy or cupy)."""

    score: Any
    y: Any
    w: Any

    def check_two_classes(self) -> None:
        check_two_classes(self.y, self.w)

    def label_sums(self) -> tuple[float, float]:
        return float(self.w.sum()), float(self.w @ self.y)

    def score_range(self) -> tuple[float, float]:
        xp = array_namespace(self.score)
        return float(xp.min(self.score)), float(xp.max(self.score))

    def fit(self, **options: Any) -> LogisticFit:
        return fit_logistic(self.score, self.y, self.w, **options)
