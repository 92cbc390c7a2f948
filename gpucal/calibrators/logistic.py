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
above are importable from here too. On many rows a one-feature fit reads the rows once: their moments
in narrow bins carry its loss, gradient and Hessian as power series (:func:`series_fit`).

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
    N_MOMENTS,
    as_2d,
    binned_moments,
    features_array,
    features_cpu,
    logistic_sums,
    n_features,
    predict_logistic,
    predict_logistic_and_refused,
    sigmoid,
    sigmoid_softplus,
    use_numba,
)
from gpucal.calibrators._newton import WARM_ERROR_TOL, NewtonResult, SumsFunction, newton_minimize
from gpucal.rows import LocalRows, Rows, strided_rows
from gpucal.rows.block import check_class_weights

# Fits start from a fit on a summary of the rows: one-score designs on at least SERIES_MIN_ROWS rows
# from the series or binned fit (BINNED_START_BINS bins, :func:`series_fit`, :func:`binned_start`), which
# lets the first full Newton step of relative size at most BINNED_STEP_TOL end the fit; wider designs on
# at least WARM_START_MIN_ROWS rows from the fit on about WARM_START_ROWS strided rows. The binned pass
# and the bins' solve cost about two Newton passes over 16,384 rows: below that Newton's five or six
# passes over the rows are cheaper (Platt scaling and temperature: 1.5 against 1.7 ms at 10,000 rows,
# 2.3 against 1.9 ms at 16,000, 14 against 5 ms at 150,000 on make_ctr; beta gains from 8,000 rows).
SERIES_MIN_ROWS = 1 << 14
WARM_START_MIN_ROWS = 1 << 18
WARM_START_ROWS = 1 << 15
BINNED_START_BINS = 4096
BINNED_STEP_TOL = 1e-6
# A one-feature fit is first solved on SERIES_MOMENTS moments per bin (:func:`series_fit`); its answer
# stands when the slope times half a bin's width is at most SERIES_MAX_REACH, where the terms its series
# leave out weigh at most about 1e-15 of the sums they approximate.
SERIES_MOMENTS = 8
SERIES_ORDER = SERIES_MOMENTS - 3
SERIES_MAX_REACH = 0.01


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
    l2: float | np.ndarray = 0.0,
    theta0: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Return the Newton start and the ridge weights of :func:`fit_logistic` from two row sums.

    The start is ``theta0``, or zero coefficients and the intercept of the best constant model,
    :math:`\operatorname{logit}\bar t` with :math:`\bar t` from ``label_sum / total_weight``
    (:math:`\sum w y / \sum w`); the intercept is not penalised. ``l2`` is one ridge for every
    coefficient or one per coefficient (shape ``(d,)``).
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
    ridge = np.zeros(m)
    ridge[:d] = l2
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


def with_mode(block: ScoreBlock, mode: int) -> ScoreBlock:
    """The block as a 2-D score or design read under ``mode`` (features computed in every pass)."""
    return ScoreBlock(as_2d(block.score), block.y, block.w, mode)


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


def one_variable_span(low: float, high: float, mode: int) -> tuple[float, float]:
    """The range of the one variable of a one-score design (``binned_moments``) whose scores lie in
    ``[low, high]``: the scores themselves, or the logits of the clipped probabilities."""
    if mode == FEATURES_COLUMNS:
        return low, high
    ends = features_array(np.array([[low], [high]], dtype=np.float64), mode)
    u = ends[:, 0] if mode == FEATURES_LOGIT else ends.sum(axis=1)
    return float(u[0]), float(u[1])


def block_moments(
    block: ScoreBlock,
    span: tuple[float, float],
    targets: tuple[float, float],
    backend: str,
    n_moments: int = N_MOMENTS,
) -> np.ndarray:
    """:func:`binned_moments` of one block (``BINNED_START_BINS`` bins)."""
    return binned_moments(
        block.score,
        block.y,
        block.w,
        mode=block.mode,
        span=span,
        n_bins=BINNED_START_BINS,
        targets=targets,
        backend=backend,
        n_moments=n_moments,
    )


def pseudo_rows(
    moments: np.ndarray, span: tuple[float, float], mode: int, n_moments: int = N_MOMENTS
) -> tuple[np.ndarray, np.ndarray]:
    r"""The design and weights of two points per non-empty bin of :func:`binned_moments`.

    A bin of weight :math:`W` whose one variable has weighted mean :math:`m` and standard deviation
    :math:`s` becomes the points :math:`m \pm s` of weight :math:`W/2` each: they have the bin's
    :math:`\sum w`, :math:`\sum w u` and :math:`\sum w u^2`, so a smooth function summed over them
    differs from its sum over the bin's rows by the third and higher central moments (a two-point
    quadrature). Their features are those of ``mode`` at :math:`u` (for beta,
    :math:`\ln p = -\log(1 + e^{-u})` and :math:`-\ln(1 - p) = \log(1 + e^u)`).
    """
    n_bins = BINNED_START_BINS
    stats = moments[: n_bins * n_moments].reshape(n_bins, n_moments)
    keep = stats[:, 0] > 0
    weight = stats[keep, 0]
    shift = stats[keep, 1] / weight
    spread = np.sqrt(np.maximum(stats[keep, 2] / weight - shift * shift, 0.0))
    centre = span[0] + (np.flatnonzero(keep) + 0.5) * ((span[1] - span[0]) / n_bins) + shift
    u = np.concatenate([centre - spread, centre + spread])
    if mode in (FEATURES_COLUMNS, FEATURES_LOGIT):
        design = u[:, None]
    else:
        log_p, minus_log_q = -np.logaddexp(0.0, -u), np.logaddexp(0.0, u)
        shift_ab = LN2 if mode == FEATURES_BETA_AB else 0.0
        design = np.stack([log_p + shift_ab, minus_log_q - shift_ab], axis=1)
    return design, np.concatenate([weight, weight]) / 2.0


def _binned_sums(
    design: np.ndarray, weight: np.ndarray, linear: np.ndarray, options: dict[str, Any]
) -> SumsFunction:
    r"""``theta -> (loss, gradient, Hessian)`` of the binned approximation: the pseudo rows' sums of
    :math:`w \log(1 + e^z)` (label 0, targets 0 and 1) minus the exact linear part."""
    cols = np.arange(design.shape[1]) if options["cols"] is None else np.asarray(options["cols"])
    used = np.r_[cols, [2] if options["fit_intercept"] else []].astype(np.int64)
    exact = linear[used]
    zeros = np.zeros(weight.shape[0])

    def sums(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        loss, grad, hess = logistic_sums(
            design,
            zeros,
            weight,
            theta,
            cols=options["cols"],
            fit_intercept=options["fit_intercept"],
            backend="array",
        )
        return loss - float(theta @ exact), grad - exact, hess

    return sums


def binned_start(
    design: Rows,
    mode: int,
    span: tuple[float, float],
    start: np.ndarray,
    *,
    total_weight: float,
    ridge: np.ndarray,
    bounds: tuple[float, float] | None,
    options: dict[str, Any],
    backend: str,
) -> np.ndarray:
    r"""The optimum of the binned approximation of a one-score fit's loss (``start`` if it fails).

    One pass over the rows (:func:`binned_moments`) gives each bin's moments of the one variable and
    the exact linear sums :math:`\sum w t x`; the nonlinear part of the loss is then summed over two
    points per bin (:func:`pseudo_rows`). With 4096 bins the approximation's optimum is within about
    1e-7 (relative) of the exact one, inside the region where Newton converges quadratically: one full
    pass and its step finish the fit.
    """
    moments = design.sum(block_moments, span, options["targets"], backend)
    return pseudo_row_fit(
        moments,
        N_MOMENTS,
        span,
        mode,
        start,
        total_weight=total_weight,
        ridge=ridge,
        bounds=bounds,
        options=options,
    )


def pseudo_row_fit(
    moments: np.ndarray,
    n_moments: int,
    span: tuple[float, float],
    mode: int,
    start: np.ndarray,
    *,
    total_weight: float,
    ridge: np.ndarray,
    bounds: tuple[float, float] | None,
    options: dict[str, Any],
) -> np.ndarray:
    """The optimum of the two-point approximation (:func:`pseudo_rows`) of :func:`binned_moments`'s
    bins (``n_moments`` per bin, the first three read); ``start`` if its Newton fit fails."""
    pseudo, weight = pseudo_rows(moments, span, mode, n_moments)
    result = newton_minimize(
        _binned_sums(pseudo, weight, moments[-3:], options),
        start,
        total_weight=total_weight,
        l2=ridge,
        bounds=bounds,
        warn=False,
    )
    return result.theta if result.converged else start


def sigmoid_derivatives(z: np.ndarray, count: int) -> list[np.ndarray]:
    r"""The derivatives :math:`\sigma^{(k)}(z)`, :math:`k = 0, \dots,` ``count - 1`` (``count`` <= 7).

    With :math:`s = \sigma(z)`, :math:`v = s(1 - s)` and :math:`r = 1 - 2s` (each from
    :math:`e^{-|z|}`, without cancellation): :math:`\sigma^{(1)} = v`, :math:`\sigma^{(2)} = r v`,
    :math:`\sigma^{(3)} = v(1 - 6v)`, :math:`\sigma^{(4)} = r v (1 - 12 v)`,
    :math:`\sigma^{(5)} = v(1 - 30 v + 120 v^2)`, :math:`\sigma^{(6)} = r v (1 - 60 v + 360 v^2)`
    (from :math:`v' = r v` and :math:`r' = -2v`, with :math:`r^2 = 1 - 4v`).
    """
    e = np.exp(-np.abs(z))
    inv = 1.0 / (1.0 + e)
    v = e * inv * inv
    r = np.where(z >= 0.0, e - 1.0, 1.0 - e) * inv
    every = [
        np.where(z >= 0.0, inv, e * inv),
        v,
        r * v,
        v * (1.0 - 6.0 * v),
        r * v * (1.0 - 12.0 * v),
        v * (1.0 + v * (120.0 * v - 30.0)),
        r * v * (1.0 + v * (360.0 * v - 60.0)),
    ]
    return every[:count]


def series_terms(z: np.ndarray, scale: list[Any], m: np.ndarray) -> tuple[np.ndarray, ...]:
    r"""Per bin, the series of :func:`_series_sums` for a linear predictor :math:`z_c + a d` in the bin:
    ``z`` the predictor at the bins' centres, ``scale[k]`` :math:`= a^k / k!` (one slope, or one per
    bin), ``m`` the moments :math:`M_k` (``SERIES_MOMENTS`` rows, one column per bin).

    Returns the bins' :math:`\sum w \log(1 + e^z)`, :math:`S_j = \sum w \sigma(z) d^j` (:math:`j = 0,
    1`) and :math:`Q_j = \sum w \sigma'(z) d^j` (:math:`j = 0, 1, 2`), each to ``SERIES_ORDER``."""
    order = SERIES_ORDER
    derivative = sigmoid_derivatives(z, order + 2)
    loss_terms = (np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z)))) * m[0]
    s0 = s1 = q0 = q1 = q2 = np.zeros_like(z)
    for k in range(order + 1):
        loss_terms = loss_terms + derivative[k] * (scale[k + 1] * m[k + 1])
        sig, curv = derivative[k] * scale[k], derivative[k + 1] * scale[k]
        s0, s1 = s0 + sig * m[k], s1 + sig * m[k + 1]
        q0, q1, q2 = q0 + curv * m[k], q1 + curv * m[k + 1], q2 + curv * m[k + 2]
    return loss_terms, s0, s1, q0, q1, q2


def _series_sums(moments: np.ndarray, span: tuple[float, float], options: dict[str, Any]) -> SumsFunction:
    r"""``theta -> (loss, gradient, Hessian)`` of a one-feature fit (the feature is the one variable
    :math:`u`) from ``SERIES_MOMENTS`` moments :math:`M_k = \sum w d^k` per bin of centre :math:`c`.

    In a bin, :math:`z = z_c + a d` with :math:`z_c = a c + b`, so each row's terms are power series in
    :math:`d`: :math:`\sigma(z) = \sum_k \sigma^{(k)}(z_c)\, a^k d^k / k!`, the same for
    :math:`\sigma'` and for :math:`\log(1 + e^z)` (whose derivative is :math:`\sigma`), summed over
    the bin's rows as :math:`\sum_k \text{coefficient}_k M_k`; the feature :math:`x = c + d` and
    :math:`x^2` shift the moments by one and two. The series stop at :math:`d^5` (the loss's at
    :math:`d^6`); the first term left out is :math:`\sigma^{(6)}(z_c) (a d)^6 / 6!`, at most about
    1e-15 of the row's :math:`\sigma'` scale where :math:`|a d| \le 0.01`. The linear part
    :math:`-\theta^\top \sum w t x` is exact (the linear sums)."""
    n_bins = BINNED_START_BINS
    stats = moments[: n_bins * SERIES_MOMENTS].reshape(n_bins, SERIES_MOMENTS)
    keep = stats[:, 0] > 0
    m = stats[keep].T
    c = span[0] + (np.flatnonzero(keep) + 0.5) * ((span[1] - span[0]) / n_bins)
    fit_intercept = options["fit_intercept"]
    exact = moments[-3:][[0, 2] if fit_intercept else [0]]
    order = SERIES_ORDER

    def sums(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        a = float(theta[0])
        z = a * c + (float(theta[1]) if fit_intercept else 0.0)
        scale = [a**k / math.factorial(k) for k in range(order + 2)]
        loss_terms, s0, s1, q0, q1, q2 = series_terms(z, scale, m)
        grad_x, grad_1 = float(np.sum(c * s0 + s1)), float(np.sum(s0))
        h_xx = float(np.sum(c * c * q0 + 2.0 * c * q1 + q2))
        h_x1, h_11 = float(np.sum(c * q0 + q1)), float(np.sum(q0))
        if fit_intercept:
            grad = np.array([grad_x, grad_1])
            hess = np.array([[h_xx, h_x1], [h_x1, h_11]])
        else:
            grad, hess = np.array([grad_x]), np.array([[h_xx]])
        return float(np.sum(loss_terms)) - float(theta @ exact), grad - exact, hess

    return sums


def with_targets(moments: np.ndarray, span: tuple[float, float], options: dict[str, Any]) -> np.ndarray:
    r"""``SERIES_MOMENTS`` bins of a one-feature design read with targets 0 and 1, with their linear sums
    turned into those of ``options["targets"]``: :math:`\sum w t x = t_- \sum w x + (t_+ - t_-)
    \sum w y x`, where :math:`\sum w x = \sum_{\text{bins}} (c M_0 + M_1)` (:math:`x = u`).

    Summed in one pass, the tiny :math:`w t_-` of the many negatives would each be rounded against the
    running sum (about 1e-13 of :math:`\sum w t` at 1e7 rows); counted apart, they are not.
    """
    n_bins = BINNED_START_BINS
    stats = moments[: n_bins * SERIES_MOMENTS].reshape(n_bins, SERIES_MOMENTS)
    c = span[0] + (np.arange(n_bins) + 0.5) * ((span[1] - span[0]) / n_bins)
    t_neg, t_pos = options["targets"]
    every = np.array([float(np.sum(c * stats[:, 0] + stats[:, 1])), 0.0, float(np.sum(stats[:, 0]))])
    out = moments.copy()
    out[-3:] = t_neg * every + (t_pos - t_neg) * moments[-3:]
    return out


def series_fit(
    design: Rows,
    mode: int,
    span: tuple[float, float],
    start: np.ndarray,
    *,
    total_weight: float,
    ridge: np.ndarray,
    bounds: tuple[float, float] | None,
    options: dict[str, Any],
    backend: str,
) -> NewtonResult | None:
    r"""The fit of a one-feature design from one pass over its rows; None where the series are not
    accurate enough (the rows are then read by Newton passes).

    The pass (:func:`binned_moments`, ``SERIES_MOMENTS`` moments per bin) gives every bin's moments of
    the feature :math:`u` and the linear sums; Newton runs on :func:`_series_sums` from the two-point
    fit (:func:`pseudo_row_fit`) until its steps are below ``STEP_TOL``. The answer stands where the
    slope times half a bin's width is at most ``SERIES_MAX_REACH``: the sums then equal the row sums
    to about 1e-15 (relative), the order of their rounding, so the optimum equals the row fit's to
    the accuracy the row fit has.
    """
    moments = with_targets(
        design.sum(block_moments, span, (0.0, 1.0), backend, SERIES_MOMENTS), span, options
    )
    near = pseudo_row_fit(
        moments,
        SERIES_MOMENTS,
        span,
        mode,
        start,
        total_weight=total_weight,
        ridge=ridge,
        bounds=bounds,
        options=options,
    )
    result = newton_minimize(
        _series_sums(moments, span, options),
        near,
        total_weight=total_weight,
        l2=ridge,
        bounds=bounds,
        warn=False,
        error_tol=0.0,
    )
    half_bin = 0.5 * (span[1] - span[0]) / BINNED_START_BINS
    if not result.converged or abs(float(result.theta[0])) * half_bin > SERIES_MAX_REACH:
        return None
    return result


def weight_sum(block: ScoreBlock) -> np.ndarray:
    """``[sum w]`` of one block."""
    return np.array([float(array_namespace(block.w).sum(block.w))])


def logistic_vector(
    block: ScoreBlock, theta: np.ndarray, backend: str, options: dict[str, Any], with_loss: bool = True
) -> np.ndarray:
    """``[loss, gradient, Hessian (flattened)]`` sums of one block at ``theta`` (``with_loss`` as in
    :func:`logistic_sums`)."""
    loss, grad, hess = logistic_sums(
        block.score, block.y, block.w, theta, mode=block.mode, backend=backend, with_loss=with_loss, **options
    )
    return np.concatenate([[loss], grad, np.asarray(hess).ravel()])


def _newton_sums(
    rows: Rows, backend: str, options: dict[str, Any], m: int, *, with_loss: bool = True
) -> SumsFunction:
    """``theta -> (loss, gradient, Hessian)`` sums over the blocks: one pass per call."""

    def sums(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        point = np.asarray(theta, dtype=np.float64)
        vector = rows.sum(logistic_vector, point, backend, options, with_loss)
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
    l2: float | np.ndarray = 0.0,
    theta0: Any = None,
    bounds: tuple[float, float] | None = None,
    score_range: tuple[float, float] | None = None,
    backend: str = "auto",
    what: str = "logistic fit",
) -> LogisticFit:
    r"""Fit :math:`\sigma(\theta^\top x + c)` by weighted (soft-target) maximum likelihood over rows
    held anywhere: blocks of :class:`ScoreBlock`, every Newton pass a :meth:`~gpucal.rows.Rows.sum`.

    The objective is the weighted mean log-loss plus :math:`\tfrac{l_2}{2}\lVert\theta\rVert^2` (the
    intercept is not penalised; ``l2`` may also give one ridge per coefficient, :func:`newton_start`).
    ``n_rows``, ``total_weight`` (:math:`\sum w`) and ``label_sum``
    (:math:`\sum w y`, read only for the default start) are the rows' sums; ``n_columns`` the width of
    the score. The other parameters are as in :func:`logistic_sums`; ``theta0`` defaults to zero
    coefficients and the intercept of the best constant model, :math:`\operatorname{logit}\bar t`.
    ``bounds`` is passed to :func:`newton_minimize` (one-parameter fits only). ``score_range`` is the
    smallest and largest score of a one-score design (None: unknown).

    On at least ``SERIES_MIN_ROWS`` rows, a one-feature design (Platt's logit, temperature's, a raw
    margin) with a known ``score_range`` is fitted on its bins' moments (:func:`series_fit`, one pass,
    no Newton pass over the rows) where the fitted slope keeps the series accurate; otherwise a
    one-score design with a known ``score_range`` starts from :func:`binned_start` (one pass), close
    enough that the first full pass usually ends the fit (its step is taken when its relative size is
    at most ``BINNED_STEP_TOL``; more passes follow otherwise); that pass sums no loss, which only the
    line search of the further steps reads. Other designs on at least ``WARM_START_MIN_ROWS`` rows
    start from the fit on the rows whose *global* index is a multiple of ``n_rows // WARM_START_ROWS``
    (the same subsample on one machine and over any partitioning), and take about three full passes
    instead of six. The objective is convex, so the start changes only how many full passes are
    needed, not the answer.

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
    span = None if score_range is None else one_variable_span(*score_range, mode)
    one_score = mode != FEATURES_COLUMNS or n_columns == 1
    start_tol = 0.0
    if n_rows >= SERIES_MIN_ROWS and one_score and span is not None and math.isfinite(span[1] - span[0]):
        series = None
        if width == 1 and cols is None:
            series = series_fit(
                rows.map(with_mode, mode),
                mode,
                span,
                start,
                total_weight=total_weight,
                ridge=ridge,
                bounds=bounds,
                options=options,
                backend=backend,
            )
        if series is not None:
            intercept = float(series.theta[-1]) if fit_intercept else 0.0
            return LogisticFit(series.theta[:d].copy(), intercept, series.n_iter, series.converged)
        # A one-feature design (the logit) is computed once for both passes, which then take no
        # logarithm: the feature is the one variable the binned pass reads either way.
        design = rows.map(with_features, mode, backend) if width == 1 else rows.map(with_mode, mode)
        start = binned_start(
            design,
            mode,
            span,
            start,
            total_weight=total_weight,
            ridge=ridge,
            bounds=bounds,
            options=options,
            backend=backend,
        )
        start_tol = BINNED_STEP_TOL
    else:
        design = rows.map(with_features, mode, backend)

    def minimize(over: Rows, theta: np.ndarray, weight: float, **control: Any) -> NewtonResult:
        sums = _newton_sums(over, backend, options, m)
        return newton_minimize(sums, theta, total_weight=weight, l2=ridge, bounds=bounds, **control)

    if n_rows >= WARM_START_MIN_ROWS and start_tol == 0.0:
        sub = design.map(strided, n_rows // WARM_START_ROWS, offsets=True)
        sub_weight = float(sub.sum(weight_sum)[0])
        if sub_weight > 0.0:
            first = minimize(sub, start, sub_weight, warn=False, error_tol=WARM_ERROR_TOL)
            if first.converged:
                start = first.theta
    result = minimize(
        design,
        start,
        total_weight,
        what=what,
        start_tol=start_tol,
        first_sums=_newton_sums(design, backend, options, m, with_loss=False),
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
    if "score_range" not in options and X2.shape[0] > 0:
        options["score_range"] = (float(xp.min(X2[:, 0])), float(xp.max(X2[:, 0])))
    return fit_logistic_rows(
        LocalRows((ScoreBlock(X2, y, w),)),
        n_rows=int(X2.shape[0]),
        n_columns=int(X2.shape[1]),
        total_weight=float(xp.sum(w)),
        label_sum=float(w @ y) if needs_label_sum else 0.0,  # a dot product: no n-sized temporary
        **options,
    )


def class_weights_present(y: Any, w: Any) -> tuple[bool, bool]:
    """Whether some positive label (``y > 0``) and some negative one (``y < 1``) carry weight."""
    xp = array_namespace(y, w)
    weighted = w > 0
    return bool(xp.any(weighted & (y > 0))), bool(xp.any(weighted & (y < 1)))


def check_two_classes(y: Any, w: Any, name: str = "y") -> None:
    """Raise ``ValueError`` unless both classes carry weight (:func:`class_weights_present`): the
    likelihood has no finite maximiser.

    With one class only, the best logistic map sends every score to that class: the slope or the
    intercept runs to infinity, so the fit would return whatever the last iterate happened to be.
    """
    check_class_weights(*class_weights_present(y, w), name)


# Importers read these from here: the scaling calibrators, MBCT, the models above the calibrators.
__all__ = [
    "BINNED_START_BINS",
    "BINNED_STEP_TOL",
    "CHUNK_ROWS",
    "EPS",
    "FEATURES_BETA",
    "FEATURES_BETA_AB",
    "FEATURES_COLUMNS",
    "FEATURES_LOGIT",
    "LN2",
    "SERIES_MIN_ROWS",
    "WARM_ERROR_TOL",
    "WARM_START_MIN_ROWS",
    "WARM_START_ROWS",
    "LogisticFit",
    "NewtonResult",
    "ScoreBlock",
    "binned_moments",
    "binned_start",
    "block_moments",
    "check_class_weights",
    "check_two_classes",
    "class_weights_present",
    "features_cpu",
    "fit_logistic",
    "fit_logistic_rows",
    "logistic_sums",
    "n_features",
    "newton_minimize",
    "newton_start",
    "one_variable_span",
    "predict_logistic",
    "predict_logistic_and_refused",
    "pseudo_rows",
    "sigmoid",
    "sigmoid_softplus",
    "strided",
    "use_numba",
    "weight_sum",
    "with_features",
    "with_mode",
]
