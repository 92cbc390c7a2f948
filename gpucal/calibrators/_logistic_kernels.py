r"""The logistic model's passes over the rows: its features, its loss sums, its prediction.

Row ``i``'s features :math:`x_i` are a fixed map of one score column (``FEATURES_LOGIT``,
``FEATURES_BETA``, ``FEATURES_BETA_AB``) or the columns of a small design (``FEATURES_COLUMNS``).
:func:`logistic_sums` returns the loss, gradient and Hessian sums a Newton step needs and
:func:`predict_logistic` the probabilities, each from a fused numba loop on the CPU (fixed-size chunks,
so the result does not depend on the thread count) or from plain array code (numpy or cupy).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal.kernels import readonly
from gpucal.kernels.jit import empty_rows, map_row_chunks, numba, parallel_rows

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
#: Below this many rows, "auto" runs the numpy array code instead of the numba loops: their first call
#: compiles (once per machine), so a small fit stays free of it. Above it the compiled pass is the
#: cheaper: below ``PARALLEL_MIN_ROWS`` it runs serially and wakes no thread pool. One score column,
#: one thread: 16,000 rows 0.33 ms against 0.61 for numpy, 37,500 rows 0.77 against 1.86, 100,000 rows
#: 2.1 against 4.9; a design of four columns: 32,768 rows 1.2 against 2.0, 75,000 rows 2.7 against 4.9
#: (``benchmarks/results/auto_cost_encoder.md``).
NUMBA_MIN_ROWS = 1 << 15


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


@parallel_rows("out")
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
    X2 = readonly(np.ascontiguousarray(as_2d(X), dtype=np.float64))
    out = np.empty((X2.shape[0], n_features(X2, mode)), dtype=np.float64)
    return _features_cpu(X2, mode, out)


# --------------------------------------------------------------------------------------------------
# Row sums

# The numba loop keeps its sums in scalars (registers), so it is written for the full model
# z = c0 x0 + c1 x1 + c2 with at most two features and an intercept; unused parameters are 0 and
# their rows and columns of the sums are dropped on the host. Wider designs take the array path.
NUMBA_MAX_FEATURES = 2


@numba.njit(cache=True, inline="always")
def sigmoid_softplus(z):  # pragma: no cover - compiled
    """``sigmoid(z)``, ``log(1 + e^z)`` and ``e^-|z|``, from the one exponential, without overflow; the
    softplus by ``log1p`` (:func:`_sigmoid_and_loss` takes the faster ``log(1 + e)``)."""
    e = math.exp(-abs(z))
    if z >= 0.0:
        return 1.0 / (1.0 + e), z + math.log1p(e), e
    return e / (1.0 + e), math.log1p(e), e


@numba.njit(cache=True, inline="always")
def _sigmoid_and_loss(z, t, with_loss):  # pragma: no cover - compiled
    """``sigmoid(z)`` and the row's loss ``log(1 + e^z) - t z`` (0.0 without ``with_loss``), from one exp
    and one log: ``e = exp(-|z|)`` gives both."""
    e = math.exp(-abs(z))
    # log(1 + e) rather than log1p(e) (twice as fast): e <= 1, so the absolute error stays at rounding
    # level, and the loss only decides the line search.
    if z >= 0.0:
        return 1.0 / (1.0 + e), (z + math.log(1.0 + e) - t * z) if with_loss else 0.0
    return e / (1.0 + e), (math.log(1.0 + e) - t * z) if with_loss else 0.0


@parallel_rows("y")
def _logistic_sums_cpu(X, mode, y, t_neg, t_pos, w, c0, c1, c2, with_loss):
    """Return the 10 sums ``[loss, g0, g1, g2, h00, h01, h02, h11, h12, h22]`` of the model
    ``sigmoid(c0 x0 + c1 x1 + c2)`` (index 2 is the intercept); without ``with_loss`` the loss is
    not summed (NaN): the gradient and Hessian need no logarithm of the loss term."""
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
            p, row_loss = _sigmoid_and_loss(z, t, with_loss)
            if with_loss:
                loss += wi * row_loss
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
    if not with_loss:
        total[0] = np.nan
    return total


#: Most columns of a design (``FEATURES_COLUMNS``) the compiled loop of :func:`_design_sums_cpu` reads
#: beyond :data:`NUMBA_MAX_FEATURES` (Platt scaling on logit hinges: the logit and three hinges). Its
#: sums live in small arrays instead of scalars; wider designs take the array path.
NUMBA_MAX_DESIGN = 8


@parallel_rows("y")
def _design_sums_cpu(X, y, t_neg, t_pos, w, theta, fit_intercept, with_loss):
    """Return the flat ``[loss, gradient (m), Hessian (m x m)]`` sums of ``sigmoid(X theta[:d] (+
    theta[d]))`` over the rows of the design ``X`` (``m = d + fit_intercept``), in fixed chunks summed in a
    fixed order (the result does not depend on the thread count); without ``with_loss`` the loss is NaN."""
    n, d = X.shape
    m = theta.shape[0]
    n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    partial = np.zeros((n_chunks, 1 + m + m * m))
    for c in numba.prange(n_chunks):
        x = np.ones(m)  # the intercept's entry stays 1
        grad = np.zeros(m)
        hess = np.zeros((m, m))
        loss = 0.0
        for i in range(c * CHUNK_ROWS, min(n, (c + 1) * CHUNK_ROWS)):
            wi = w[i]
            if wi == 0.0:  # a zero-weight row adds nothing, even where its features are extreme
                continue
            z = theta[d] if fit_intercept else 0.0
            for j in range(d):
                x[j] = X[i, j]
                z += theta[j] * x[j]
            t = t_neg + y[i] * (t_pos - t_neg)
            p, row_loss = _sigmoid_and_loss(z, t, with_loss)
            if with_loss:
                loss += wi * row_loss
            r = wi * (p - t)
            h = wi * p * (1.0 - p)
            for j in range(m):
                grad[j] += r * x[j]
                hx = h * x[j]
                for k in range(j, m):  # the upper triangle; mirrored below
                    hess[j, k] += hx * x[k]
        partial[c, 0] = loss
        for j in range(m):
            partial[c, 1 + j] = grad[j]
            for k in range(j, m):
                partial[c, 1 + m + j * m + k] = hess[j, k]
                partial[c, 1 + m + k * m + j] = hess[j, k]
    total = np.zeros(1 + m + m * m)
    for c in range(n_chunks):  # fixed order: the result does not depend on the thread count
        for j in range(1 + m + m * m):
            total[j] += partial[c, j]
    if not with_loss:
        total[0] = np.nan
    return total


# Parts of the binned pass (:func:`binned_moments`): a fixed number, so its sums do not depend on the
# thread count; each part keeps its own bins.
MOMENT_PARTS = 16
# Rows whose features :func:`binned_moments` computes before it bins them.
MOMENT_BATCH = 512
# Columns of a bin of :func:`binned_moments` by default: sum w, sum w d, sum w d^2 (d = u - bin centre).
N_MOMENTS = 3


@numba.njit(cache=True, inline="always")
def _one_variable(X, i, mode):
    """Return row ``i``'s features and the one variable ``u`` they are functions of: the score itself
    (``FEATURES_COLUMNS``, one column) or the logit of the clipped probability (the sum of the two beta
    features, which are ``ln p`` and ``-ln(1 - p)`` up to a constant)."""
    x0, x1 = _row_features(X, i, mode)
    u = x0 if mode == FEATURES_COLUMNS or mode == FEATURES_LOGIT else x0 + x1
    return x0, x1, u


@numba.njit(parallel=True, cache=True)
def _binned_moments_cpu(X, mode, y, t_neg, t_pos, w, lo, h, inv_h, n_bins, n_moments):
    """Return the flat ``[bins (n_bins, n_moments), sum w t x0, sum w t x1, sum w t]`` of
    :func:`binned_moments`."""
    n = y.shape[0]
    part_rows = (n + MOMENT_PARTS - 1) // MOMENT_PARTS
    bins = np.zeros((MOMENT_PARTS, n_bins, n_moments))
    linear = np.zeros((MOMENT_PARTS, 3))
    for c in numba.prange(MOMENT_PARTS):
        s0 = s1 = s2 = 0.0
        features = np.empty((MOMENT_BATCH, 3))
        end = min(n, (c + 1) * part_rows)
        for start in range(c * part_rows, end, MOMENT_BATCH):
            stop = min(end, start + MOMENT_BATCH)
            # The logarithms of a batch first, then its bins: apart, the independent logarithms overlap
            # in the core instead of waiting behind the bins' read-modify-writes (0.21 -> 0.14 s of CPU
            # for 1e7 rows and 8 moments, serial).
            for i in range(start, stop):
                x0, x1, u = _one_variable(X, i, mode)
                features[i - start, 0] = x0
                features[i - start, 1] = x1
                features[i - start, 2] = u
            for i in range(start, stop):
                wi = w[i]
                if wi == 0.0:
                    continue
                x0, x1, u = features[i - start, 0], features[i - start, 1], features[i - start, 2]
                b = min(max(int((u - lo) * inv_h), 0), n_bins - 1)
                d = u - (lo + (b + 0.5) * h)
                moment = wi  # w d^k, as the left-to-right product w * d * ... * d
                for k in range(n_moments):
                    bins[c, b, k] += moment
                    moment *= d
                wt = wi * (t_neg + y[i] * (t_pos - t_neg))
                s0 += wt * x0
                s1 += wt * x1
                s2 += wt
        linear[c, 0] = s0
        linear[c, 1] = s1
        linear[c, 2] = s2
    out = np.zeros(n_bins * n_moments + 3)
    for c in range(MOMENT_PARTS):  # fixed order: the result does not depend on the thread count
        for b in range(n_bins):
            for k in range(n_moments):
                out[b * n_moments + k] += bins[c, b, k]
        for k in range(3):
            out[n_bins * n_moments + k] += linear[c, k]
    return out


def binned_moments(
    X: Any,
    y: Any,
    w: Any,
    *,
    mode: int,
    span: tuple[float, float],
    n_bins: int,
    targets: tuple[float, float] = (0.0, 1.0),
    backend: str = "auto",
    n_moments: int = N_MOMENTS,
) -> np.ndarray:
    r"""Return the moments of the one variable of a one-score design in equal bins, and its linear sums.

    Every feature of a one-score design is a function of one variable :math:`u` (the score, or the
    logit of the clipped probability), so the part of the logistic loss that depends on the
    parameters nonlinearly, :math:`\sum_i w_i \log(1 + e^{z_i})`, is a sum of a smooth function of
    :math:`u_i`; the rest, :math:`-\theta^\top \sum_i w_i t_i x_i`, needs only the *linear sums*
    :math:`\sum_i w_i t_i x_i`. This pass returns, for ``n_bins`` equal bins of
    :math:`u \in` ``span``, the sums :math:`\sum w d^k`, :math:`k = 0, \dots,` ``n_moments - 1``
    (:math:`d` = :math:`u` minus the bin's centre; values outside ``span`` count in the end bins),
    flattened, followed by :math:`[\sum w t x_0, \sum w t x_1, \sum w t]` (:math:`x_1 = 0` for
    one feature). ``backend`` as in :func:`logistic_sums`.
    """
    X2 = as_2d(X)
    lo, hi = float(span[0]), float(span[1])
    h = (hi - lo) / n_bins
    inv_h = 1.0 / h if h > 0 else 0.0
    t_neg, t_pos = float(targets[0]), float(targets[1])
    if use_numba(backend, X2, y, w):
        return _binned_moments_cpu(
            readonly(np.ascontiguousarray(X2, dtype=np.float64)),
            mode,
            readonly(np.ascontiguousarray(y, dtype=np.float64)),
            t_neg,
            t_pos,
            readonly(np.asarray(w, dtype=np.float64)),
            lo,
            h,
            inv_h,
            n_bins,
            n_moments,
        )
    xp = array_namespace(X2, y, w)
    design = features_array(X2, mode)
    x0 = design[:, 0]
    x1 = design[:, 1] if design.shape[1] > 1 else xp.zeros_like(x0)
    u = x0 if mode in (FEATURES_COLUMNS, FEATURES_LOGIT) else x0 + x1
    b = xp.clip(((u - lo) * inv_h).astype(xp.int64), 0, n_bins - 1)
    d = u - (lo + (b + 0.5) * h)
    powers = [w]
    for _ in range(n_moments - 1):
        powers.append(powers[-1] * d)
    moments = [xp.bincount(b, weights=v, minlength=n_bins) for v in powers]
    wt = w * (t_neg + y * (t_pos - t_neg))
    linear = np.array([float(wt @ x0), float(wt @ x1), float(xp.sum(wt))])
    return np.concatenate([to_numpy(xp.stack(moments, axis=1)).ravel(), linear])


def as_2d(X: Any) -> Any:
    """``X`` as a 2-D array: a 1-D score becomes one column."""
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
    with_loss: bool = True,
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
        array code otherwise. The numba loop handles at most ``NUMBA_MAX_FEATURES`` features; a design
        (``FEATURES_COLUMNS``, every column: ``cols`` None) of up to ``NUMBA_MAX_DESIGN`` columns has a
        loop of its own, which ``"auto"`` takes from ``NUMBA_MIN_ROWS`` rows too; others always take
        the array path.
    with_loss : bool, default=True
        False: the numba loop skips the loss, a logarithm per row, and returns NaN for it (the array
        path computes it anyway).

    Returns
    -------
    loss_sum : float
    grad_sum : numpy.ndarray of shape (m,)
    hess_sum : numpy.ndarray of shape (m, m)
    """
    X2 = as_2d(X)
    width = n_features(X2, mode)
    col_idx = np.arange(width, dtype=np.int64) if cols is None else np.asarray(cols, dtype=np.int64)
    theta = np.ascontiguousarray(theta, dtype=np.float64)
    if width <= NUMBA_MAX_FEATURES and use_numba(backend, X2, y, w):
        # Embed theta in the full model [x0, x1, 1]; keep the sums of the parameters in use.
        used = np.r_[col_idx, [2] if fit_intercept else []].astype(np.int64)
        full = np.zeros(3)
        full[used] = theta
        s = _logistic_sums_cpu(
            readonly(np.ascontiguousarray(X2, dtype=np.float64)),
            mode,
            readonly(np.ascontiguousarray(y, dtype=np.float64)),
            float(targets[0]),
            float(targets[1]),
            # Not made contiguous: unit weights are a zero-stride view, and a copy would cost a pass
            # and 8n bytes on every Newton step.
            readonly(np.asarray(w, dtype=np.float64)),
            full[0],
            full[1],
            full[2],
            with_loss,
        )
        grad = s[1:4]
        hess = np.array([[s[4], s[5], s[6]], [s[5], s[7], s[8]], [s[6], s[8], s[9]]])
        return float(s[0]), grad[used], hess[np.ix_(used, used)]
    wide = mode == FEATURES_COLUMNS and cols is None and NUMBA_MAX_FEATURES < width <= NUMBA_MAX_DESIGN
    if wide and use_numba(backend, X2, y, w):
        s = _design_sums_cpu(
            readonly(np.ascontiguousarray(X2, dtype=np.float64)),
            readonly(np.ascontiguousarray(y, dtype=np.float64)),
            float(targets[0]),
            float(targets[1]),
            readonly(np.asarray(w, dtype=np.float64)),  # unit weights: a zero-stride view, as above
            theta,
            fit_intercept,
            with_loss,
        )
        m = theta.shape[0]
        return float(s[0]), s[1 : 1 + m], s[1 + m :].reshape(m, m)
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

    ``"auto"`` takes numba for numpy arrays of at least ``NUMBA_MIN_ROWS`` rows.
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
# Predict


@parallel_rows("out")
def _predict_cpu(X, mode, c0, c1, c2, probability, out):
    """``out[i] = sigmoid(c0 x0 + c1 x1 + c2)``, features computed on the fly; returns the number of rows
    whose first column is not in [0, 1] (``probability``) or not finite, NaN included."""
    n = out.shape[0]
    n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    refused = np.zeros(n_chunks, dtype=np.int64)
    for c in numba.prange(n_chunks):
        end = min(n, (c + 1) * CHUNK_ROWS)
        n_refused = 0
        # A batch's linear predictors (their logarithms) first, then their sigmoids, as the binned
        # pass does (the logarithms overlap: 0.17 -> 0.15 s of CPU on 1e7 rows, serial).
        for start in range(c * CHUNK_ROWS, end, MOMENT_BATCH):
            stop = min(end, start + MOMENT_BATCH)
            for i in range(start, stop):
                x = X[i, 0]
                n_refused += not (((x >= 0.0) & (x <= 1.0)) if probability else (abs(x) < np.inf))
                x0, x1 = _row_features(X, i, mode)
                out[i] = c0 * x0 + c1 * x1 + c2
            for i in range(start, stop):
                z = out[i]
                e = math.exp(-abs(z))
                # The numerator is selected, not the division: z's sign is a coin flip to the branch
                # predictor, and a select costs no mispredictions (0.195 to 0.143 CPU s on 1e7 rows).
                out[i] = (1.0 if z >= 0.0 else e) / (1.0 + e)
        refused[c] = n_refused
    return refused.sum()


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
    return _predict_logistic(X, coef, intercept, mode, cols, backend, None)[0]


def predict_logistic_and_refused(
    score: Any, coef: Any, intercept: float, *, mode: int, scan_kind: str
) -> tuple[Any, int]:
    """:func:`predict_logistic` of a 1-D score read unscanned (``scan=False`` in ``gpucal._validation``),
    and the number of scores the scan of a ``scan_kind`` score refuses (``"probability"``: not in [0, 1];
    ``"logit"``: not finite; NaN included), from the same pass."""
    return _predict_logistic(score, coef, intercept, mode, None, "auto", scan_kind)


def _predict_logistic(
    X: Any, coef: Any, intercept: float, mode: int, cols: Any, backend: str, scan_kind: str | None
) -> tuple[Any, int]:
    X2 = as_2d(X)
    width = n_features(X2, mode)
    col_idx = np.arange(width, dtype=np.int64) if cols is None else np.asarray(cols, dtype=np.int64)
    coef = np.ascontiguousarray(coef, dtype=np.float64)
    probability = scan_kind == "probability"
    if width <= NUMBA_MAX_FEATURES and use_numba(backend, X2):
        full = np.zeros(2)
        full[col_idx] = coef
        out = empty_rows(X2.shape[0])
        n_refused = _predict_cpu(
            readonly(np.ascontiguousarray(X2, dtype=np.float64)),
            mode,
            full[0],
            full[1],
            float(intercept),
            probability,
            out,
        )
        return out, int(n_refused) if scan_kind is not None else 0
    xp = array_namespace(X2)
    out = sigmoid(features_array(X2, mode)[:, xp.asarray(col_idx)] @ xp.asarray(coef) + intercept)
    n_refused = 0
    if scan_kind is not None:
        x = X2[:, 0]
        ok = (x >= 0) & (x <= 1) if probability else xp.isfinite(x)
        n_refused = int(xp.count_nonzero(~ok))
    return out, n_refused


def sigmoid(z: Any) -> Any:
    """``1 / (1 + exp(-z))`` without overflow: ``e / (1 + e)`` or ``1 / (1 + e)`` with ``e = exp(-|z|)``.

    Over row chunks on every core for a large float64 vector (``gpucal.kernels.jit.map_row_chunks``):
    the same numbers, without five temporaries of every row (0.49 s of a 1e7-row feature-aware Platt
    predict's 0.55 in one call).
    """
    return map_row_chunks(_sigmoid_in_one_call, z)


def _sigmoid_in_one_call(z: Any) -> Any:
    xp = array_namespace(z)
    e = xp.exp(-xp.abs(z))
    return xp.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


__all__ = [
    "CHUNK_ROWS",
    "EPS",
    "FEATURES_BETA",
    "FEATURES_BETA_AB",
    "FEATURES_COLUMNS",
    "FEATURES_LOGIT",
    "LN2",
    "MOMENT_PARTS",
    "NUMBA_MAX_DESIGN",
    "NUMBA_MAX_FEATURES",
    "NUMBA_MIN_ROWS",
    "N_MOMENTS",
    "as_2d",
    "binned_moments",
    "features_array",
    "features_cpu",
    "logistic_sums",
    "n_features",
    "predict_logistic",
    "predict_logistic_and_refused",
    "sigmoid",
    "sigmoid_softplus",
    "use_numba",
]
