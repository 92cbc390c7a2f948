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
The driver :func:`newton_minimize` (``gpucal.calibrators._newton``) owns the tiny linear algebra and
the step control; the row passes are :func:`logistic_sums` (``gpucal.calibrators._logistic_kernels``: a
fused numba loop on the CPU; plain array code for numpy or cupy). This module is the fit itself, written
once over :class:`gpucal.rows.Rows` of :class:`ScoreBlock` (:func:`fit_logistic_rows`; arrays on one
device are one block, :func:`fit_logistic`), and the check that both classes carry weight; the names
above are importable from here too.

Targets are soft: row ``i`` has target :math:`t_i = t_- + y_i (t_+ - t_-)`, so Platt's smoothed targets
need no extra n-sized array (``targets=(t_-, t_+)``; ``(0, 1)`` is the plain maximum likelihood fit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal._backend import array_namespace
from gpucal.calibrators._logistic_kernels import (
    CHUNK_ROWS,
    EPS,
    FEATURES_BETA,
    FEATURES_BETA_AB,
    FEATURES_COLUMNS,
    FEATURES_LOGIT,
    LN2,
    as_2d,
    features_cpu,
    logistic_sums,
    n_features,
    predict_logistic,
    sigmoid,
    use_numba,
)
from gpucal.calibrators._newton import WARM_ERROR_TOL, NewtonResult, SumsFunction, newton_minimize
from gpucal.rows import LocalRows, Rows, strided_rows
from gpucal.rows.block import check_class_weights

# Fits on at least WARM_START_MIN_ROWS rows start from the fit on about WARM_START_ROWS strided rows.
WARM_START_MIN_ROWS = 1 << 18
WARM_START_ROWS = 1 << 15


# --------------------------------------------------------------------------------------------------
# Fit


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


@dataclass(frozen=True)
class ScoreBlock:
    """One block's checked score (or design matrix), labels and weights (float64, one device), and
    the feature mode its score is read with."""

    score: Any
    y: Any
    w: Any
    mode: int = FEATURES_COLUMNS

    def __len__(self) -> int:
        return int(self.score.shape[0])


def with_features(block: ScoreBlock, mode: int, backend: str) -> ScoreBlock:
    """The block as a 2-D design read under ``mode``; its log features computed once when the compiled
    loop will read it (the design costs 8 bytes per feature and row, and each Newton pass is left with
    one exp and one log per row)."""
    X = as_2d(block.score)
    if mode != FEATURES_COLUMNS and use_numba(backend, X, block.y, block.w):
        return ScoreBlock(features_cpu(X, mode), block.y, block.w, FEATURES_COLUMNS)
    return ScoreBlock(X, block.y, block.w, mode)


def strided(block: ScoreBlock, stride: int, *, row_offset: int) -> ScoreBlock:
    """The block's rows whose global index is a multiple of ``stride`` (:func:`strided_rows`)."""
    score, y, w = strided_rows(stride, row_offset, block.score, block.y, block.w)
    return ScoreBlock(score, y, w, block.mode)


def weight_sum(block: ScoreBlock) -> np.ndarray:
    """``[sum w]`` of one block."""
    return np.array([float(array_namespace(block.w).sum(block.w))])


def logistic_vector(
    block: ScoreBlock, theta: np.ndarray, backend: str, options: dict[str, Any]
) -> np.ndarray:
    """``[loss, gradient, Hessian (flattened)]`` sums of one block at ``theta``."""
    loss, grad, hess = logistic_sums(
        block.score, block.y, block.w, theta, mode=block.mode, backend=backend, **options
    )
    return np.concatenate([[loss], grad, np.asarray(hess).ravel()])


def _newton_sums(rows: Rows, backend: str, options: dict[str, Any], m: int) -> SumsFunction:
    """``theta -> (loss, gradient, Hessian)`` sums over the blocks: one pass per call."""

    def sums(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        vector = rows.sum(logistic_vector, np.asarray(theta, dtype=np.float64), backend, options)
        return float(vector[0]), vector[1 : 1 + m], vector[1 + m :].reshape(m, m)

    return sums


def fit_logistic_rows(
    rows: Rows,
    *,
    n_rows: int,
    n_columns: int,
    total_weight: float,
    label_sum: float,
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
    r"""Fit :math:`\sigma(\theta^\top x + c)` by weighted (soft-target) maximum likelihood over rows
    held anywhere: blocks of :class:`ScoreBlock`, every Newton pass a :meth:`~gpucal.rows.Rows.sum`.

    The objective is the weighted mean log-loss plus :math:`\tfrac{l_2}{2}\lVert\theta\rVert^2` (the
    intercept is not penalised). ``n_rows``, ``total_weight`` (:math:`\sum w`) and ``label_sum``
    (:math:`\sum w y`, read only for the default start) are the rows' sums; ``n_columns`` the width of
    the score. The other parameters are as in :func:`logistic_sums`; ``theta0`` defaults to zero
    coefficients and the intercept of the best constant model, :math:`\operatorname{logit}\bar t`.
    ``bounds`` is passed to :func:`newton_minimize` (one-parameter fits only).

    On at least ``WARM_START_MIN_ROWS`` rows, Newton starts from the fit on the rows whose *global*
    index is a multiple of ``n_rows // WARM_START_ROWS`` (the same subsample on one machine and over
    any partitioning). The objective is convex, so that start changes only how many full passes are
    needed (about three instead of six), not the answer.

    Returns
    -------
    LogisticFit
    """
    width = n_features(np.empty((0, n_columns)), mode)
    d = width if cols is None else len(cols)
    start, ridge = newton_start(
        d, total_weight, label_sum, fit_intercept=fit_intercept, targets=targets, l2=l2, theta0=theta0
    )
    options = {"cols": cols, "fit_intercept": fit_intercept, "targets": targets}
    m = start.shape[0]
    design = rows.map(with_features, mode, backend)
    if n_rows >= WARM_START_MIN_ROWS:
        sub = design.map(strided, n_rows // WARM_START_ROWS, offsets=True)
        sub_weight = float(sub.sum(weight_sum)[0])
        if sub_weight > 0.0:
            first = newton_minimize(
                _newton_sums(sub, backend, options, m),
                start,
                total_weight=sub_weight,
                l2=ridge,
                bounds=bounds,
                warn=False,
                error_tol=WARM_ERROR_TOL,
            )
            if first.converged:
                start = first.theta
    result = newton_minimize(
        _newton_sums(design, backend, options, m),
        start,
        total_weight=total_weight,
        l2=ridge,
        bounds=bounds,
        what=what,
    )
    intercept = float(result.theta[-1]) if fit_intercept else 0.0
    return LogisticFit(result.theta[:d].copy(), intercept, result.n_iter, result.converged)


def fit_logistic(X: Any, y: Any, w: Any, **options: Any) -> LogisticFit:
    """:func:`fit_logistic_rows` on validated float64 arrays (numpy or cupy, one device): ``X`` a score
    or a design matrix, ``y`` the labels, ``w`` the weights; ``options`` the keyword options of
    :func:`fit_logistic_rows`."""
    X2 = as_2d(X)
    xp = array_namespace(X2, y, w)
    needs_label_sum = options.get("theta0") is None and options.get("fit_intercept", True)
    return fit_logistic_rows(
        LocalRows((ScoreBlock(X2, y, w),)),
        n_rows=int(X2.shape[0]),
        n_columns=int(X2.shape[1]),
        total_weight=float(xp.sum(w)),
        label_sum=float(w @ y) if needs_label_sum else 0.0,  # a dot product: no n-sized temporary
        **options,
    )


def check_two_classes(y: Any, w: Any, name: str = "y") -> None:
    """Raise ``ValueError`` unless both classes carry weight: the likelihood has no finite maximiser.

    With one class only, the best logistic map sends every score to that class: the slope or the
    intercept runs to infinity, so the fit would return whatever the last iterate happened to be.
    """
    xp = array_namespace(y, w)
    weighted = w > 0
    check_class_weights(bool(xp.any(weighted & (y > 0))), bool(xp.any(weighted & (y < 1))), name)


# Importers read these from here: the scaling calibrators, MBCT, the models above the calibrators.
__all__ = [
    "CHUNK_ROWS",
    "EPS",
    "FEATURES_BETA",
    "FEATURES_BETA_AB",
    "FEATURES_COLUMNS",
    "FEATURES_LOGIT",
    "LN2",
    "WARM_ERROR_TOL",
    "WARM_START_MIN_ROWS",
    "WARM_START_ROWS",
    "LogisticFit",
    "NewtonResult",
    "ScoreBlock",
    "check_class_weights",
    "check_two_classes",
    "features_cpu",
    "fit_logistic",
    "fit_logistic_rows",
    "logistic_sums",
    "n_features",
    "newton_minimize",
    "newton_start",
    "predict_logistic",
    "sigmoid",
    "strided",
    "use_numba",
    "weight_sum",
    "with_features",
]
