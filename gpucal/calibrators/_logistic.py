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
fused numba loop on the CPU; plain array code for numpy or cupy). This module is the fit itself
(:func:`fit_logistic`), the check that both classes carry weight, and the rows a scaling fit reads
(:class:`LogisticRows`, :class:`ArrayRows`); the names above are importable from here too.

Targets are soft: row ``i`` has target :math:`t_i = t_- + y_i (t_+ - t_-)`, so Platt's smoothed targets
need no extra n-sized array (``targets=(t_-, t_+)``; ``(0, 1)`` is the plain maximum likelihood fit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

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
    X2 = as_2d(X)
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

    def sums_of(X_: Any, y_: Any, w_: Any) -> SumsFunction:
        def sums(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
            return logistic_sums(X_, y_, w_, theta, backend=backend, **options)

        return sums

    n_rows = int(X2.shape[0])
    warm = None
    if n_rows >= WARM_START_MIN_ROWS:
        stride = n_rows // WARM_START_ROWS
        X_sub, y_sub, w_sub = (xp.ascontiguousarray(a[::stride]) for a in (X2, y, w))
        warm = (sums_of(X_sub, y_sub, w_sub), float(xp.sum(w_sub)))
    full = (sums_of(X2, y, w), total_weight)
    return newton_fit(full, warm, start, ridge, d, fit_intercept=fit_intercept, bounds=bounds, what=what)


def newton_fit(
    full: tuple[SumsFunction, float],
    warm: tuple[SumsFunction, float] | None,
    start: np.ndarray,
    ridge: np.ndarray,
    d: int,
    *,
    fit_intercept: bool,
    bounds: tuple[float, float] | None,
    what: str,
) -> LogisticFit:
    """The Newton fit of :func:`fit_logistic` from its sums, wherever the rows are.

    ``full`` and ``warm`` are ``(sums, total weight)`` of every row and of the evenly strided warm-start
    rows (None: no warm start). The objective is convex, so starting from the strided rows' fit changes
    only how many full passes are needed (about three instead of six), not the answer.
    """
    if warm is not None and warm[1] > 0.0:
        first = newton_minimize(
            warm[0],
            start,
            total_weight=warm[1],
            l2=ridge,
            bounds=bounds,
            warn=False,
            error_tol=WARM_ERROR_TOL,
        )
        if first.converged:
            start = first.theta
    result = newton_minimize(full[0], start, total_weight=full[1], l2=ridge, bounds=bounds, what=what)
    intercept = float(result.theta[-1]) if fit_intercept else 0.0
    return LogisticFit(result.theta[:d].copy(), intercept, result.n_iter, result.converged)


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
    "ArrayRows",
    "LogisticFit",
    "LogisticRows",
    "NewtonResult",
    "check_class_weights",
    "check_two_classes",
    "features_cpu",
    "fit_logistic",
    "logistic_sums",
    "n_features",
    "newton_fit",
    "newton_minimize",
    "newton_start",
    "predict_logistic",
    "sigmoid",
    "use_numba",
]
