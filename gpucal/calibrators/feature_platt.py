r"""Feature-aware Platt scaling: a logistic regression on the score's logit and one-hot feature values.

.. math::

    \hat p_i = \sigma\Big(b + a\, x_i + \sum_j \beta_{o_j + c_{ij}}\Big), \qquad
    \min_{a, b, \beta}\; \sum_i w_i \big[\log(1 + e^{z_i}) - y_i z_i\big]
        + \frac{l_2}{2}\big(a^2 + \lVert\beta\rVert^2\big),

with :math:`x_i` the logit of the score (or the raw margin), :math:`c_{ij}` the code of row ``i`` in
feature ``j`` (``gpucal.encoding.FeatureEncoder``) and :math:`o_j` the first code of feature ``j`` in the
flat coefficient vector (``kernels.value_offsets``). The linear special case of NeuCalib (one-dimensional
field embeddings, no MLP) and the strong simple baseline of ``methods.md``.

Fitted by truncated Newton (Newton-CG, Jacobi-preconditioned), where every quantity over rows is a group
sum or a plain row sum, so the same fit runs on numpy and cupy arrays (and, adding partial sums, over
Dask partitions):

- gradient of the one-hot block: :math:`\sum_{i: c_{ij}=v} w_i (p_i - y_i)` = ``WF - WY`` of
  ``group_sums(codes, f=p, y=y, w=w)``; its Hessian diagonal :math:`\sum w p (1-p)` = ``WF - WFF`` of the
  same pass (the preconditioner);
- Hessian-vector product :math:`H v = X^\top D X v`, :math:`D = w p (1 - p)`: with
  :math:`u = X v` per row, ``group_sums(codes, f=u, y=x, w=D)`` gives the one-hot block (``WF``) and,
  summed over the values of any one feature, :math:`\sum D u` (intercept) and :math:`\sum D u x` (``WFY``,
  the score's coefficient): one pass over the rows per product;
- the score and intercept entries of the gradient and diagonal, and the loss, are plain row sums (fused
  numba loops on the CPU, array code on the GPU).

The solver reads the rows only through a :class:`RowStore`: :class:`LocalRows` holds arrays on one
device, and ``gpucal.distributed.feature_platt`` holds dask partitions (each a :class:`LocalRows`) and
adds their sums, so one Newton-CG fits both and takes the same steps.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar, Protocol

import numba
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from gpucal._backend import array_namespace, is_cupy_array, resolve_device, to_numpy
from gpucal._frames import split_input, wrap_output
from gpucal._validation import check_consistent_length, check_labels, check_sample_weight
from gpucal.calibrators._base import Calibrator, Constraint, Interval, Options
from gpucal.calibrators._logistic import EPS, check_two_classes, sigmoid
from gpucal.calibrators.platt import OUTPUT_TYPE_OPTIONS, SCORE_KIND_OPTIONS
from gpucal.encoding import FeatureEncoder
from gpucal.persistence import register
from gpucal.rows._collections import any_dask
from kernels import STAT_WF, STAT_WFF, STAT_WFY, STAT_WY, group_sums, value_offsets

# Most conjugate-gradient steps per Newton step. Within one feature the one-hot block of the Hessian is
# diagonal, so the Jacobi preconditioner leaves only the coupling between features (and the score) to CG.
CG_MAX_ITER = 250
# Armijo constant of the backtracking line search, and the most halvings before giving up.
ARMIJO = 1e-4
MAX_HALVINGS = 40
# A trial whose objective rose by less than this (relative) counts as no rise: sums over millions of rows
# carry rounding noise far above machine epsilon, and near the optimum the Newton step is the better guide.
LOSS_RTOL = 1e-12
# Rows per partial sum of the numba row passes: fixed, so the result does not depend on the thread count.
CHUNK_ROWS = 1 << 15
# Test-only switch: take the array code (the GPU path) on numpy arrays too, instead of the numba loops.
FORCE_ARRAY_PATH = False
# Fits on at least WARM_START_MIN_ROWS rows start from the fit on about WARM_START_ROWS strided rows, taken
# to WARM_TOL only.
WARM_START_MIN_ROWS = 1 << 18
WARM_START_ROWS = 1 << 16
WARM_TOL = 1e-4


@dataclass(frozen=True)
class FeaturePlattFit:
    """Result of :func:`fit_feature_platt`: ``sigmoid(intercept + coef_score * x + coef[o_j + c_j] ...)``.

    Attributes
    ----------
    coef_score : float
    intercept : float
    coef : numpy.ndarray of shape (sum(n_values),)
        One coefficient per code, features in order (``value_offsets``).
    n_iter : int
        Newton steps taken.
    converged : bool
    """

    coef_score: float
    intercept: float
    coef: np.ndarray
    n_iter: int
    converged: bool


@numba.njit(parallel=True, cache=True)
def _linear_cpu(x, a, b, coef, codes, offsets, out):
    """``out[i] = a x[i] + b + sum_j coef[offsets[j] + codes[i, j]]`` (one pass, no temporaries)."""
    n_rows, n_features = codes.shape
    for i in numba.prange(n_rows):
        total = a * x[i] + b
        for j in range(n_features):
            total += coef[offsets[j] + codes[i, j]]
        out[i] = total
    return out


@numba.njit(parallel=True, cache=True)
def _loss_cpu(z, y, w):
    """``sum_i w_i (log(1 + e^z_i) - y_i z_i)``, in fixed row chunks (the same bits on any thread count)."""
    n = z.shape[0]
    n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    partial = np.zeros(n_chunks)
    for c in numba.prange(n_chunks):
        total = 0.0
        for i in range(c * CHUNK_ROWS, min(n, (c + 1) * CHUNK_ROWS)):
            zi = z[i]
            total += w[i] * (max(zi, 0.0) + math.log1p(math.exp(-abs(zi))) - y[i] * zi)
        partial[c] = total
    return partial.sum()


@numba.njit(parallel=True, cache=True)
def _gradient_rows_cpu(z, x, y, w, p, curvature):
    """Write ``p = sigmoid(z)`` and ``D = w p (1 - p)``; return ``[sum r x, sum r, sum D x^2, sum D]``."""
    n = z.shape[0]
    n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    partial = np.zeros((n_chunks, 4))
    for c in numba.prange(n_chunks):
        rx = 0.0
        r_sum = 0.0
        dxx = 0.0
        d_sum = 0.0
        for i in range(c * CHUNK_ROWS, min(n, (c + 1) * CHUNK_ROWS)):
            e = math.exp(-abs(z[i]))
            pi = 1.0 / (1.0 + e) if z[i] >= 0.0 else e / (1.0 + e)
            p[i] = pi
            r = w[i] * (pi - y[i])
            d = w[i] * pi * (1.0 - pi)
            curvature[i] = d
            rx += r * x[i]
            r_sum += r
            dxx += d * x[i] * x[i]
            d_sum += d
        partial[c, 0] = rx
        partial[c, 1] = r_sum
        partial[c, 2] = dxx
        partial[c, 3] = d_sum
    out = np.zeros(4)
    for c in range(n_chunks):  # fixed order
        for k in range(4):
            out[k] += partial[c, k]
    return out


def linear_predictor(x: Any, a: float, b: float, coef: Any, codes: Any, offsets: np.ndarray) -> Any:
    r"""Return :math:`a x_i + b + \sum_j \text{coef}[o_j + c_{ij}]` per row: the design times a vector.

    numpy: a fused numba loop; cupy: one gather per feature into a slice of ``coef`` (moved to the
    device), so no ``(n, d)`` index array is built.
    """
    xp = array_namespace(x, codes)
    if xp is np and not FORCE_ARRAY_PATH:
        out = np.empty(x.shape[0], dtype=np.float64)
        coef = np.ascontiguousarray(coef, dtype=np.float64)
        return _linear_cpu(x, float(a), float(b), coef, codes, offsets, out)
    coef = xp.asarray(coef, dtype=xp.float64)
    out = a * x + b
    for j in range(codes.shape[1]):
        out += coef[int(offsets[j]) :][codes[:, j]]
    return out


class RowStore(Protocol):
    """The passes over the rows that Newton-CG needs, wherever the rows are (one device, or partitions).

    :class:`LocalRows` holds numpy or cupy arrays; ``gpucal.distributed.feature_platt`` holds dask
    partitions, each a :class:`LocalRows`, and adds their results. Every method returning numbers
    returns a sum over rows, so the two agree up to the order of the additions. A *row vector* (the
    predictor ``z``, a step's ``X d``, the curvatures ``D``) is an array on one device, a list of
    persisted per-partition arrays on dask: the solver only hands it back to the store.
    """

    @property
    def n_rows(self) -> int:
        """Number of rows."""

    def check_two_classes(self) -> None:
        """Raise ``ValueError`` unless both classes carry weight."""

    def label_sums(self) -> tuple[float, float]:
        """Return ``(sum w, sum w y)``."""

    def strided(self, stride: int) -> RowStore:
        """Return the store of rows ``0, stride, 2 stride, ...`` (the warm start's sample)."""

    def code_weights(self, n_values: np.ndarray) -> np.ndarray:
        """Return ``sum w`` per code, features in order (flat, ``sum(n_values)`` entries)."""

    def linear(self, theta: np.ndarray, offsets: np.ndarray) -> Any:
        """Return the row vector :math:`X \\theta`."""

    def shifted(self, z: Any, scale: float, dz: Any) -> Any:
        """Return the row vector ``z + scale * dz``."""

    def loss(self, z: Any) -> float:
        r"""Return :math:`\sum_i w_i (\log(1 + e^{z_i}) - y_i z_i)`."""

    def gradient_sums(self, z: Any, n_values: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any]:
        """Return ``[sum r x, sum r, sum D x^2, sum D]`` (``r = w (p - y)``, ``D = w p (1 - p)``), the
        group sums ``(sum(n_values), N_STATS)`` of ``(f=p, y, w)``, and the row vector ``D``."""

    def hessian_sums(
        self, v: np.ndarray, offsets: np.ndarray, n_values: np.ndarray, curvature: Any
    ) -> np.ndarray:
        """Return the group sums ``(sum(n_values), N_STATS)`` of ``(f=X v, y=x, w=D)``."""


class LocalRows:
    """:class:`RowStore` over validated arrays on one device (numpy: fused numba loops; cupy: array code)."""

    def __init__(self, x: Any, codes: Any, y: Any, w: Any) -> None:
        array_namespace(x, codes, y, w)  # one device
        self.x, self.codes, self.y, self.w = x, codes, y, w
        # Unit weights arrive as a zero-stride view (check_sample_weight); the kernel takes None for them.
        unit = w.shape[0] > 0 and w.strides[0] == 0 and float(w[0]) == 1.0
        self.w_kernel = None if unit else w

    @property
    def xp(self) -> ModuleType:
        """numpy or cupy (not an attribute: a partition's store is pickled between dask workers)."""
        return array_namespace(self.x)

    @property
    def n_rows(self) -> int:
        return int(self.x.shape[0])

    def check_two_classes(self) -> None:
        check_two_classes(self.y, self.w)

    def label_sums(self) -> tuple[float, float]:
        xp = self.xp
        return float(xp.sum(self.w)), float(xp.sum(self.w * self.y))

    def strided(self, stride: int, start: int = 0) -> LocalRows:
        """Rows ``start, start + stride, ...`` (a partition starts where its global row index says)."""
        xp = self.xp
        rows = (self.x, self.codes, self.y, self.w)
        x, codes, y, w = (xp.ascontiguousarray(a[start::stride]) for a in rows)
        return LocalRows(x, codes, y, w)

    def code_weights(self, n_values: np.ndarray) -> np.ndarray:
        counts = [
            to_numpy(self.xp.bincount(self.codes[:, j], weights=self.w, minlength=int(k)))
            for j, k in enumerate(n_values)
        ]
        return np.concatenate(counts)

    def linear(self, theta: np.ndarray, offsets: np.ndarray) -> Any:
        return linear_predictor(self.x, theta[0], theta[1], theta[2:], self.codes, offsets)

    def shifted(self, z: Any, scale: float, dz: Any) -> Any:
        return z + scale * dz

    def loss(self, z: Any) -> float:
        xp = self.xp
        if xp is np and not FORCE_ARRAY_PATH:
            return float(_loss_cpu(z, self.y, self.w))
        return float(xp.sum(self.w * (xp.logaddexp(0.0, z) - self.y * z)))

    def gradient_sums(self, z: Any, n_values: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any]:
        xp = self.xp
        if xp is np and not FORCE_ARRAY_PATH:
            p, curvature = np.empty_like(z), np.empty_like(z)
            row_sums = _gradient_rows_cpu(z, self.x, self.y, self.w, p, curvature)
        else:
            p = sigmoid(z)
            residual = self.w * (p - self.y)
            curvature = self.w * p * (1.0 - p)
            row_sums = np.array(
                [
                    float(residual @ self.x),
                    float(xp.sum(residual)),
                    float(curvature @ (self.x * self.x)),
                    float(xp.sum(curvature)),
                ]
            )
        stats = to_numpy(group_sums(self.codes, p, self.y, self.w_kernel, n_values=n_values)[0])
        return row_sums, stats, curvature

    def hessian_sums(
        self, v: np.ndarray, offsets: np.ndarray, n_values: np.ndarray, curvature: Any
    ) -> np.ndarray:
        u = self.linear(v, offsets)
        return to_numpy(group_sums(self.codes, u, self.x, curvature, n_values=n_values)[0])


class _Problem:
    """The penalised objective of one fit over a :class:`RowStore`, and what Newton-CG reads of it."""

    def __init__(self, rows: RowStore, n_values: np.ndarray, l2: float) -> None:
        self.rows = rows
        self.n_values = np.asarray(n_values, dtype=np.int64)
        self.offsets = value_offsets(self.n_values)
        self.n_codes = int(self.n_values.sum())
        self.l2 = float(l2)
        # Only the intercept (the second parameter) is not penalised.
        self.ridge = np.full(2 + self.n_codes, self.l2)
        self.ridge[1] = 0.0
        self.first = slice(0, int(self.n_values[0]))  # the codes of feature 0: every row has one
        # Codes some row of non-zero weight has; the others keep offset 0 (their gradient and Hessian are
        # the penalty's alone), and no row changes when they are left out.
        self.used = np.concatenate([[True, True], rows.code_weights(self.n_values) > 0.0])

    def blocks(self) -> list[slice]:
        """The slices of ``theta`` holding each feature's offsets."""
        return [slice(2 + o, 2 + o + int(k)) for o, k in zip(self.offsets, self.n_values, strict=True)]

    def center(self, theta: np.ndarray) -> np.ndarray:
        """Move each feature's mean offset (over its used codes) into the intercept: same predictor.

        The optimum lies where every feature's offsets sum to zero (its intercept gradient is zero,
        so the penalty's gradient on each feature's offsets sums to zero), and Newton-CG keeps those
        sums (see :func:`_conjugate_gradient`), so it must start there. Every row has one used code
        per feature, so no row's predictor changes; unused codes stay 0.
        """
        theta = np.where(self.used, theta, 0.0)
        for block in self.blocks():
            used = self.used[block]
            if used.any():
                mean = float(theta[block][used].mean())
                theta[block] -= np.where(used, mean, 0.0)
                theta[1] += mean
        return theta

    def linear(self, theta: np.ndarray) -> Any:
        """Return the row vector :math:`X \\theta`: ``theta = [a, b, beta]``."""
        return self.rows.linear(theta, self.offsets)

    def shifted(self, z: Any, scale: float, dz: Any) -> Any:
        """Return the row vector ``z + scale * dz`` (a line-search trial's predictor)."""
        return self.rows.shifted(z, scale, dz)

    def objective(self, theta: np.ndarray, z: Any) -> float:
        """Return the penalised loss at ``theta`` whose row predictor is ``z``."""
        return self.rows.loss(z) + 0.5 * float(self.ridge @ (theta * theta))

    def gradient(self, theta: np.ndarray, z: Any) -> tuple[np.ndarray, np.ndarray, Any]:
        """Return the gradient, the Hessian diagonal and the row curvatures :math:`D = w p (1 - p)`."""
        (rx, r_sum, dxx, d_sum), stats, curvature = self.rows.gradient_sums(z, self.n_values)
        grad = np.empty_like(theta)
        diag = np.empty_like(theta)
        grad[0], grad[1] = rx, r_sum
        grad[2:] = stats[:, STAT_WF] - stats[:, STAT_WY]
        diag[0], diag[1] = dxx, d_sum
        diag[2:] = stats[:, STAT_WF] - stats[:, STAT_WFF]
        return grad + self.ridge * theta, diag + self.ridge, curvature

    def hessian_product(self, v: np.ndarray, curvature: Any) -> np.ndarray:
        """Return :math:`(X^\\top D X + \\Lambda) v` from one group-sum pass."""
        stats = self.rows.hessian_sums(v, self.offsets, self.n_values, curvature)
        out = np.empty_like(v)
        out[0] = stats[self.first, STAT_WFY].sum()  # sum D u x, over the values of feature 0
        out[1] = stats[self.first, STAT_WF].sum()  # sum D u
        out[2:] = stats[:, STAT_WF]
        return out + self.ridge * v


def _conjugate_gradient(
    problem: _Problem, grad: np.ndarray, diag: np.ndarray, curvature: Any, forcing: float
) -> np.ndarray:
    """Solve :math:`H d = -g` by Jacobi-preconditioned CG to a residual of ``forcing * |g|`` (norm M^-1)."""
    precond = np.where(problem.used, 1.0 / np.where(diag > 0.0, diag, 1.0), 0.0)  # unused codes: no step
    blocks = problem.blocks()

    def precondition(r: np.ndarray) -> np.ndarray:
        # M^-1 r, then the M-orthogonal projection onto "each feature's offsets sum to zero". Without it
        # the intercept and the offsets are nearly collinear (shifting one against the other changes only
        # the penalty), an eigenvalue of about l2 that costs CG dozens of steps.
        z = precond * r
        for block in blocks:
            total = precond[block].sum()
            if total > 0.0:
                z[block] -= precond[block] * (z[block].sum() / total)
        return z

    step = np.zeros_like(grad)
    residual = -grad
    z = precondition(residual)
    direction = z.copy()
    rz = float(residual @ z)
    # The residual is measured in the preconditioned norm |r|_{M^-1}: the plain norm is dominated by the
    # score's entry, whose gradient grows with the rows, while an offset's scales with its value's rows.
    target = forcing * forcing * rz
    for _n in range(CG_MAX_ITER):
        h_dir = problem.hessian_product(direction, curvature)
        curv = float(direction @ h_dir)
        if curv <= 0.0:  # only rounding can get here: H is positive definite
            break
        alpha = rz / curv
        step += alpha * direction
        residual -= alpha * h_dir
        z = precondition(residual)
        rz_next = float(residual @ z)
        if rz_next <= target:
            break
        direction = z + (rz_next / rz) * direction
        rz = rz_next
    return step


def fit_feature_platt(
    x: Any,
    codes: Any,
    n_values: Any,
    y: Any,
    w: Any,
    *,
    l2: float = 1.0,
    max_iter: int = 100,
    tol: float = 1e-8,
    what: str = "FeatureAwarePlattCalibrator",
) -> FeaturePlattFit:
    r"""Fit the feature-aware Platt model on validated arrays (numpy or cupy, one device).

    Parameters
    ----------
    x : array of shape (n,)
        The score feature: the clipped logit of a probability, or a raw margin.
    codes : int array of shape (n, d)
        Feature codes, column ``j`` in ``[0, n_values[j])``.
    n_values : int array of shape (d,)
        Codes per feature.
    y, w : arrays of shape (n,)
        Labels in [0, 1] and row weights.
    l2 : float, default=1.0
        Ridge on every coefficient but the intercept, against the summed (not averaged) loss.
    max_iter : int, default=100
        Most Newton steps.
    tol : float, default=1e-8
        Stop when every coefficient's scaled gradient :math:`|g_k| / H_{kk}`, or every entry of the
        Newton step, is at most ``tol``.

    Returns
    -------
    FeaturePlattFit
    """
    return fit_feature_platt_on(
        LocalRows(x, codes, y, w), n_values, l2=l2, max_iter=max_iter, tol=tol, what=what
    )


def fit_feature_platt_on(
    rows: RowStore,
    n_values: Any,
    *,
    l2: float = 1.0,
    max_iter: int = 100,
    tol: float = 1e-8,
    what: str = "FeatureAwarePlattCalibrator",
) -> FeaturePlattFit:
    """:func:`fit_feature_platt` on the rows of a :class:`RowStore` (one device, or dask partitions)."""
    rows.check_two_classes()
    total_weight, label_sum = rows.label_sums()
    mean_y = label_sum / total_weight
    theta = np.zeros(2 + int(np.sum(n_values)))
    theta[1] = math.log(mean_y / (1.0 - mean_y))  # the best constant model
    n_rows = rows.n_rows
    if n_rows >= WARM_START_MIN_ROWS:
        # Start from the fit on evenly strided rows. The penalty is not scaled down to their share of the
        # weight: a value with a handful of sampled rows would get an extreme offset, a far worse start than
        # a shrunk one. The objective is convex: the start changes how many passes over all rows are
        # needed, not the answer.
        sample = rows.strided(n_rows // WARM_START_ROWS)
        sub_weight, _ = sample.label_sums()
        if sub_weight > 0.0:
            sub = _Problem(sample, n_values, l2)
            warm = _newton_cg(sub, theta, max_iter=max_iter, tol=WARM_TOL, what=what, warn=False)
            if warm.converged:
                theta = np.concatenate(([warm.coef_score, warm.intercept], warm.coef))
    problem = _Problem(rows, n_values, l2)
    return _newton_cg(problem, theta, max_iter=max_iter, tol=tol, what=what, warn=True)


def _newton_cg(
    problem: _Problem, theta: np.ndarray, *, max_iter: int, tol: float, what: str, warn: bool
) -> FeaturePlattFit:
    """Minimise ``problem``'s objective from ``theta`` by line-searched, truncated Newton steps."""
    theta = problem.center(theta)
    z = problem.linear(theta)
    loss = problem.objective(theta, z)
    for n_iter in range(1, max_iter + 1):
        grad, diag, curvature = problem.gradient(theta, z)
        scaled = float(np.max(np.abs(grad) / diag))
        if scaled <= tol:
            return _result(theta, n_iter - 1, converged=True)
        # Forcing term sqrt(|g|) (Eisenstat & Walker; capped at 0.5): superlinear convergence, few CG steps
        # far from the optimum.
        step = _conjugate_gradient(problem, grad, diag, curvature, min(0.5, math.sqrt(scaled)))
        if float(np.max(np.abs(step))) <= tol:
            return _result(theta + step, n_iter, converged=True)
        x_step = problem.linear(step)
        slope = float(grad @ step)
        scale = 1.0
        for _ in range(MAX_HALVINGS):
            trial = theta + scale * step
            z_trial = problem.shifted(z, scale, x_step)
            trial_loss = problem.objective(trial, z_trial)
            allowed = loss + ARMIJO * scale * slope + LOSS_RTOL * abs(loss)
            if math.isfinite(trial_loss) and trial_loss <= allowed:
                break
            scale *= 0.5
        else:
            if warn:
                _warn(what, f"no step lowered the loss after {MAX_HALVINGS} halvings")
            return _result(theta, n_iter, converged=False)
        theta, z, loss = trial, z_trial, trial_loss
    if warn:
        _warn(what, f"did not converge in max_iter={max_iter} Newton steps")
    return _result(theta, max_iter, converged=False)


def _result(theta: np.ndarray, n_iter: int, *, converged: bool) -> FeaturePlattFit:
    return FeaturePlattFit(float(theta[0]), float(theta[1]), theta[2:].copy(), n_iter, converged)


def _warn(what: str, reason: str) -> None:
    warnings.warn(f"{what}: {reason}; returning the last iterate", ConvergenceWarning, stacklevel=3)


def score_feature(score: Any, score_kind: str) -> Any:
    """Return the model's score feature: ``logit(clip(p, eps, 1 - eps))`` or the raw margin."""
    if score_kind == "logit":
        return score
    xp = array_namespace(score)
    p = xp.clip(score, EPS, 1.0 - EPS)
    return xp.log(p / (1.0 - p))


def predict_feature_platt(
    x: Any, codes: Any, n_values: Any, coef_score: float, intercept: float, coef: Any
) -> Any:
    r"""Return :math:`\sigma(b + a x + \sum_j \beta_{o_j + c_{ij}})` per row (numpy or cupy)."""
    offsets = value_offsets(np.asarray(n_values, dtype=np.int64))
    return sigmoid(linear_predictor(x, coef_score, intercept, coef, codes, offsets))


def _on_device(a: Any, device: str) -> Any:
    """Return ``a`` on the resolved ``device`` ("cpu" or "gpu"), copying only when it is elsewhere."""
    if device == "cpu":
        return to_numpy(a)
    if is_cupy_array(a):
        return a
    import cupy

    return cupy.asarray(a)


@register
class FeatureAwarePlattCalibrator(Calibrator):
    r"""Platt scaling with a learnt offset per feature value (L2-regularised logistic regression).

    .. math::

        \hat p = \sigma\Big(b + a\, x + \sum_j \beta_j[\text{value of feature } j]\Big), \qquad
        x = \begin{cases} \log\frac{p}{1-p} & \text{score\_kind="probability"} \\
        s & \text{score\_kind="logit"} \end{cases}

    The design is ``[x, one-hot of every feature column's codes]`` plus an intercept; the fit minimises
    the weighted log-loss summed over rows plus :math:`\tfrac{l_2}{2}(a^2 + \lVert\beta\rVert^2)`
    (scikit-learn's convention: ``LogisticRegression(C=1/l2)``). Numeric features are cut into quantile
    bins, everything else is read by value (:class:`~gpucal.encoding.FeatureEncoder`). The linear special
    case of NeuCalib, and the baseline a feature-aware calibrator has to beat.

    Parameters
    ----------
    score_col : str, default="score"
        Column of ``X`` holding the score.
    feature_cols : list of hashable, str or None, default=None
        Feature columns; None means every column of ``X`` except ``score_col``.
    categorical_cols : list of hashable, str or None, default=None
        Numeric feature columns to read by value (e.g. integer IDs) instead of by quantile bins.
    n_bins : int, default=32
        Most quantile bins per numeric feature.
    score_kind : {"probability", "logit"}, default="probability"
        ``"probability"``: scores in [0, 1], used through their logit (clipped to machine epsilon first,
        as in :class:`~gpucal.calibrators.platt.PlattCalibrator`); ``"logit"``: raw margins.
    l2 : float, default=1.0
        Ridge strength on every coefficient except the intercept, against the *summed* weighted loss
        (scikit-learn's ``C = 1 / l2``). 1.0 is scikit-learn's default ``C=1``, so results match what
        users get there; it keeps the fit finite when a feature value has only one class (a separable
        value), and since the loss is a sum its effect fades as a value gathers rows: a value's offset is
        shrunk as if it had about :math:`l_2 / (p(1-p))` (4 to 20) extra rows at the global fit, so only
        rare values are pulled toward the average. Must be positive: the one-hot columns of a feature sum
        to the intercept's column, so without a penalty the offsets are not identified.
    max_iter : int, default=100
        Most Newton steps (each is one gradient pass plus a few Hessian-vector passes over the rows).
    tol : float, default=1e-8
        Stop when every coefficient's gradient divided by its Hessian diagonal (about how far it still is
        from the optimum), or every entry of the Newton step, is at most ``tol``.
    device : {"auto", "cpu", "gpu"}, default="auto"
        Where the fit and the predictions run; ``"auto"`` follows the data (cupy / cudf: GPU).
    output_type : str, default="input"
        Family of the returned predictions (see ``gpucal._frames``).

    Attributes
    ----------
    encoder_ : dict
        The fitted :class:`~gpucal.encoding.FeatureEncoder` as plain data (``FeatureEncoder.to_dict``;
        ``FeatureEncoder.from_dict(cal.encoder_)`` rebuilds it).
    coef_score_ : float
        Coefficient :math:`a` of the score's logit (or margin).
    intercept_ : float
        Intercept :math:`b`.
    coef_ : numpy.ndarray of shape (sum of the encoder's ``n_values_``,)
        One offset per code of each feature, features in order, each feature's codes from
        ``value_offsets(n_values_)`` on (its bins or categories, then its missing and unseen codes).
    n_iter_ : int
        Newton steps taken.

    See Also
    --------
    PlattCalibrator : the same model without features.

    Notes
    -----
    Equal to scikit-learn's ``LogisticRegression(C=1/l2)`` fitted on ``[x, one-hot(codes)]`` with the same
    sample weights: the tests require 1e-6 in every coefficient and prediction against its exact
    ``solver="newton-cholesky"`` (they agree to about 1e-11). Against ``solver="lbfgs"`` the predictions
    agree to 1e-6 but the coefficients only to about 1e-5, even with ``tol=1e-12``: L-BFGS's stop on the
    relative decrease of the loss (``ftol``, fixed inside scikit-learn) comes before it resolves the nearly
    flat direction "intercept up, a feature's offsets down", which only the penalty sees. The fit here
    removes that direction: every feature's offsets sum to zero at the optimum (the intercept's gradient
    is zero, so the penalty's on each feature's offsets sums to zero), so Newton-CG searches only that
    subspace.

    A code no training row has (the unseen code of a category column; the missing code when nothing was
    missing) gets offset exactly 0: its gradient is the penalty alone. Since each feature's offsets sum
    to zero, 0 is the feature's average offset, and an unseen value falls back to it.

    Sample weights enter the loss as row multiplicities: integer weights equal repeated rows. One class
    only in ``y`` raises ``ValueError``.

    References
    ----------
    .. [1] J. Platt, "Probabilistic outputs for support vector machines and comparisons to regularized
       likelihood methods", in Advances in Large Margin Classifiers, MIT Press, 1999, pp. 61-74.
    .. [2] S. G. Nash, "A survey of truncated-Newton methods", Journal of Computational and Applied
       Mathematics 124 (2000), pp. 45-59.

    Examples
    --------
    >>> import pandas as pd
    >>> X = pd.DataFrame({"score": [0.2, 0.3, 0.7, 0.8, 0.4, 0.6], "site": list("aabbab")})
    >>> cal = FeatureAwarePlattCalibrator().fit(X, [0, 1, 1, 1, 0, 0])
    >>> cal.predict(X).round(3).tolist()
    [0.301, 0.366, 0.634, 0.699, 0.423, 0.577]
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_bins": Interval(int, 1, None),
        "score_kind": SCORE_KIND_OPTIONS,
        "l2": Interval(float, 0, None, closed="neither"),
        "max_iter": Interval(int, 1, None),
        "tol": Interval(float, 0, None, closed="neither"),
        "device": Options("auto", "cpu", "gpu"),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {
        "encoder_": "json",
        "coef_score_": "float",
        "intercept_": "float",
        "coef_": "float_array",
        "n_iter_": "int",
    }

    def __init__(
        self,
        *,
        score_col: str = "score",
        feature_cols: Sequence[Hashable] | str | None = None,
        categorical_cols: Sequence[Hashable] | str | None = None,
        n_bins: int = 32,
        score_kind: str = "probability",
        l2: float = 1.0,
        max_iter: int = 100,
        tol: float = 1e-8,
        device: str = "auto",
        output_type: str = "input",
    ) -> None:
        self.score_col = score_col
        self.feature_cols = feature_cols
        self.categorical_cols = categorical_cols
        self.n_bins = n_bins
        self.score_kind = score_kind
        self.l2 = l2
        self.max_iter = max_iter
        self.tol = tol
        self.device = device
        self.output_type = output_type

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> FeatureAwarePlattCalibrator:
        """Fit on the score and feature columns of ``X``, labels ``y`` and optional row weights.

        Parameters
        ----------
        X : dataframe or dict of columns
            Holds ``score_col`` and the feature columns (pandas, polars, pyarrow, cudf), or a dask
            DataFrame of pandas or cudf partitions: then ``y`` and ``sample_weight`` are dask Series
            partitioned alike, and the fit is the single-machine one with every sum added over the
            partitions (``gpucal.distributed.feature_platt``).
        y : array-like of shape (n,)
            Labels in {0, 1}; soft labels in [0, 1] count as that fraction of a positive.
        sample_weight : array-like of shape (n,), default=None
            Non-negative row weights; None means one per row.

        Returns
        -------
        self
        """
        self._validate_params()
        if any_dask(X, y, sample_weight):
            from gpucal.distributed.feature_platt import fit_feature_platt_partitions

            encoder, fit = fit_feature_platt_partitions(self, X, y, sample_weight)
            return self._set_fitted(encoder, fit)
        split = split_input(
            X,
            score_col=self.score_col,
            feature_cols=self.feature_cols,
            score_kind=self.score_kind,
            require_features=True,
        )
        labels = check_labels(y, "y")
        n_rows = check_consistent_length(X=split.score, y=labels)
        weights = check_sample_weight(sample_weight, n_rows, xp=array_namespace(labels))
        encoder = FeatureEncoder(n_bins=self.n_bins, categorical_cols=self.categorical_cols)
        codes = encoder.fit_transform(split.features, sample_weight=sample_weight)
        device = resolve_device(self.device, split.score, codes)
        score, codes, labels, weights = (_on_device(a, device) for a in (split.score, codes, labels, weights))
        fit = fit_feature_platt(
            score_feature(score, self.score_kind),
            codes,
            encoder.n_values_,
            labels,
            weights,
            l2=float(self.l2),
            max_iter=int(self.max_iter),
            tol=float(self.tol),
        )
        return self._set_fitted(encoder, fit)

    def _set_fitted(self, encoder: FeatureEncoder, fit: FeaturePlattFit) -> FeatureAwarePlattCalibrator:
        """Store the fitted encoder and coefficients; return self."""
        self.encoder_ = encoder.to_dict()
        self._encoder = encoder
        self.coef_score_ = fit.coef_score
        self.intercept_ = fit.intercept
        self.coef_ = fit.coef
        self.n_iter_ = fit.n_iter
        return self

    def predict(self, X: Any) -> Any:
        """Return calibrated probabilities for ``X``, in ``X``'s family (pandas in, pandas Series out).

        Parameters
        ----------
        X : dataframe or dict of columns
            Holds ``score_col`` and every feature column seen in ``fit`` (other columns are ignored); a
            dask DataFrame gives a dask Series of its partitions' predictions.

        Returns
        -------
        array or Series of shape (n,)
            Calibrated probabilities in [0, 1].
        """
        lazy = self._predict_partitions(X)
        if lazy is not None:
            return lazy
        encoder = self._fitted_encoder()
        split = split_input(
            X,
            score_col=self.score_col,
            feature_cols=encoder.feature_names_,
            score_kind=self.score_kind,
            require_features=True,
            allow_empty=True,
        )
        codes = encoder.transform(split.features)
        device = resolve_device(self.device, split.score, codes)
        score, codes = (_on_device(a, device) for a in (split.score, codes))
        calibrated = predict_feature_platt(
            score_feature(score, self.score_kind),
            codes,
            encoder.n_values_,
            self.coef_score_,
            self.intercept_,
            self.coef_,
        )
        return wrap_output(calibrated, split.info, output_type=self.output_type)

    def _fitted_encoder(self) -> FeatureEncoder:
        """The encoder of ``encoder_``, rebuilt (and checked) once."""
        encoder: FeatureEncoder | None = getattr(self, "_encoder", None)
        if encoder is None:
            self._check_state()
            encoder = self._encoder
        return encoder

    def _check_state(self) -> None:
        """Check the loaded state (``gpucal.load`` calls this): a valid encoder and one offset per code."""
        encoder = FeatureEncoder.from_dict(self.encoder_)
        n_codes = int(encoder.n_values_.sum())
        coef = np.asarray(self.coef_, dtype=np.float64)
        if coef.shape != (n_codes,):
            msg = f"coef_ has {coef.shape[0]} entries; the encoder has {n_codes} codes"
            raise ValueError(msg)
        if not np.isfinite(coef).all():
            msg = "coef_ holds non-finite numbers"
            raise ValueError(msg)
        self._encoder = encoder


__all__ = [
    "FeatureAwarePlattCalibrator",
    "FeaturePlattFit",
    "fit_feature_platt",
    "linear_predictor",
    "predict_feature_platt",
    "score_feature",
]
