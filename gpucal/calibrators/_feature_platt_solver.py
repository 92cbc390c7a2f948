r"""Feature-aware Platt's fit over :class:`~gpucal.rows.Rows`: read, encode, then truncated Newton.

:func:`fit_feature_platt` is the one fit for every backend. Its first passes read and check every block
(``_feature_platt_rows.read_block``), fit the encoder over them and encode them; the whole-data checks run
on the summed label summary. Newton-CG (Jacobi-preconditioned, line-searched) then reads the rows only
through sums over blocks (``_feature_platt_rows``'s table), so on one machine (one block) it is the fit
on the arrays, and over dask partitions it takes the same steps up to the order of the additions:

- gradient of the one-hot block: :math:`\sum_{i: c_{ij}=v} w_i (p_i - y_i)` = ``WF - WY`` of
  ``group_sums(codes, f=p, y=y, w=w)``; its Hessian diagonal :math:`\sum w p (1-p)` = ``WF - WFF`` of the
  same pass (the preconditioner);
- Hessian-vector product :math:`H v = X^\top D X v`, :math:`D = w p (1 - p)`: with
  :math:`u = X v` per row, ``group_sums(codes, f=u, y=x, w=D)`` gives the one-hot block (``WF``) and,
  summed over the values of any one feature, :math:`\sum D u` (intercept) and :math:`\sum D u x` (``WFY``,
  the score's coefficient): one pass over the rows per product;
- the score and intercept entries of the gradient and diagonal, and the loss, are plain row sums.

References: S. G. Nash, "A survey of truncated-Newton methods", J. Comput. Appl. Math. 124 (2000), 45-59.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from gpucal.calibrators._feature_platt_rows import (
    block_loss,
    block_summary,
    code_weights,
    curved,
    encode_block,
    encoder_inputs,
    gradient_sums,
    hessian_sums,
    level_sums,
    line_trial,
    predicted,
    read_block,
    select_columns,
    stepped,
    strided,
)
from gpucal.encoding import FeatureEncoder
from gpucal.encoding.encoder import MAX_CROSS_LEVELS, MIN_CROSS_COUNT
from gpucal.rows import LabelSummary, LocalRows, Rows
from kernels import N_STATS, STAT_WF, STAT_WFF, STAT_WFY, STAT_WY, value_offsets

# Most conjugate-gradient steps per Newton step. Within one feature the one-hot block of the Hessian is
# diagonal, so the Jacobi preconditioner leaves only the coupling between features (and the score) to CG.
CG_MAX_ITER = 250
# Armijo constant of the backtracking line search, and the most halvings before giving up.
ARMIJO = 1e-4
MAX_HALVINGS = 40
# A trial whose objective rose by less than this (relative) counts as no rise: sums over millions of rows
# carry rounding noise far above machine epsilon, and near the optimum the Newton step is the better guide.
LOSS_RTOL = 1e-12
# The warm start (from the fit on about FeaturePlattParams.warm_start_rows strided rows) is taken to
# WARM_TOL only.
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

    @property
    def theta(self) -> np.ndarray:
        """All coefficients in one vector: ``[coef_score, intercept, coef...]``."""
        return np.r_[self.coef_score, self.intercept, self.coef]


# Entries of a gradient pass before the group sums: sum r x, sum r, sum D x^2, sum D.
N_ROW_SUMS = 4


@dataclass(frozen=True)
class FeaturePlattParams:
    """The estimator's parameters, validated (their meaning: ``FeatureAwarePlattCalibrator``'s docstring),
    and the warm start's sizes: fits on at least ``warm_start_min_rows`` rows start from the fit on about
    ``warm_start_rows`` strided rows. ``array_code``: the array code (GPU path) on numpy too (tests)."""

    score_col: Hashable
    feature_cols: Any
    categorical_cols: Any
    n_bins: int
    score_kind: str
    l2: float
    max_iter: int
    tol: float
    device: str
    warm_start_min_rows: int
    warm_start_rows: int
    interactions: Any = None
    l2_cross: float = 1.0
    min_cross_count: float = MIN_CROSS_COUNT
    max_cross_levels: int = MAX_CROSS_LEVELS
    array_code: bool = False
    what: str = "FeatureAwarePlattCalibrator"


@dataclass(frozen=True)
class FeaturePlattState:
    """What :func:`fit_feature_platt` returns: the fitted encoder and coefficients."""

    encoder: FeatureEncoder
    fit: FeaturePlattFit


def fit_feature_platt(rows: Rows, params: FeaturePlattParams) -> FeaturePlattState:
    """Fit the feature-aware Platt model on the rows of ``X, y, sample_weight`` (``gpucal.rows.as_rows``).

    Raises
    ------
    ValueError
        No rows, all weights zero, or one class only (with non-zero weight); the blocks' own checks.
    """
    whole = isinstance(rows, LocalRows) and rows.n_blocks == 1
    checked = rows.map(read_block, params.score_col, params.feature_cols, params.score_kind, whole)
    screen = params.interactions == "auto"  # every pair crossed, then screened on the first-order fit
    encoder = FeatureEncoder(
        n_bins=params.n_bins,
        categorical_cols=params.categorical_cols,
        interactions="all" if screen else params.interactions,
        min_cross_count=params.min_cross_count,
        max_cross_levels=params.max_cross_levels,
    )
    encoder = encoder.fit_rows(checked, encoder_inputs, whole)
    encoded = checked.map(encode_block, encoder, params.device, params.score_kind)
    summary = LabelSummary.of(encoded.sum(block_summary))
    summary.check_rows()
    if summary.weight <= 0:
        msg = "sample_weight: all weights are zero"
        raise ValueError(msg)
    summary.check_two_classes()
    n_first = len(encoder.feature_names_)
    theta = np.zeros(2 + int(np.sum(encoder.n_values_)))
    theta[1] = math.log(summary.mean_label / (1.0 - summary.mean_label))  # the best constant model
    if screen and encoder.interactions_:
        first = encoded.map(select_columns, np.arange(n_first))
        theta = _fit_rows(first, encoder.n_values_, n_first, theta, params, summary.n_rows, final=False).theta
        kept = screen_crosses(encoded, theta, encoder.n_codes_, n_first, params.l2_cross, params.array_code)
        encoder = encoder.keep_crosses(kept)
        columns = np.r_[np.arange(n_first), n_first + np.asarray(kept, dtype=np.int64)]
        encoded = encoded.map(select_columns, columns)
    theta = np.r_[theta, np.zeros(2 + int(np.sum(encoder.n_codes_)) - theta.shape[0])]  # crosses start at 0
    fit = _fit_rows(encoded, encoder.n_codes_, n_first, theta, params, summary.n_rows, final=True)
    return FeaturePlattState(encoder, fit)


def screen_crosses(
    rows: Rows, theta: np.ndarray, n_codes: np.ndarray, n_first: int, l2_cross: float, array_code: bool
) -> list[int]:
    r"""The crosses (indices among the columns past ``n_first``) whose one-step fit is expected to lower
    the held-out loss of the first-order model ``theta``.

    At the first-order fit, a cross level :math:`l` has gradient :math:`g_l = \sum_{i \in l} w_i (p_i -
    y_i)` and curvature :math:`h_l = \sum w_i p_i (1 - p_i)`, which is also the variance of :math:`g_l`
    if the model is right (the score test's; weights count as repeated rows). One ridge-damped Newton
    step on the cross alone sets :math:`\delta_l = -g_l / (h_l + \lambda)`; on new rows whose gradient
    has the same mean :math:`\mu_l`, it changes the loss by :math:`\mu_l \delta_l + \tfrac12 h_l
    \delta_l^2` in expectation. With :math:`\mu_l g_l` estimated without bias by :math:`g_l^2 - h_l`, a
    cross is kept when

    .. math::

        \sum_l \Big[\frac{g_l^2 - h_l}{h_l + \lambda} - \frac{h_l\, g_l^2}{2 (h_l + \lambda)^2}\Big] > 0.

    With :math:`\lambda = 0` this is :math:`\tfrac12 \chi^2 > \text{df}`, the score test at Akaike's
    penalty. One pass of group sums over the rows scores every candidate pair at once: the
    screen of AutoCross (Luo et al., KDD 2019, section 4.2: each candidate judged by a cheap fit on top of
    the current model), with the held-out split replaced by its expectation.
    """
    full = np.r_[theta, np.zeros(2 + int(np.sum(n_codes)) - theta.shape[0])]
    sums = rows.sum(level_sums, full, n_codes, array_code)
    g, h = sums[:, 0], sums[:, 1]
    damped = h + l2_cross
    gain = (g * g - h) / damped - 0.5 * h * g * g / (damped * damped)
    offsets = value_offsets(n_codes)
    return [
        c - n_first
        for c in range(n_first, len(n_codes))
        if float(gain[offsets[c] : offsets[c] + n_codes[c]].sum()) > 0.0
    ]


def _fit_rows(
    encoded: Rows,
    n_values: np.ndarray,
    n_first: int,
    theta: np.ndarray,
    params: FeaturePlattParams,
    n_rows: int,
    *,
    final: bool,
) -> FeaturePlattFit:
    """Newton-CG from ``theta`` on the encoded rows (columns past ``n_first`` are crosses, penalised by
    ``l2_cross``), warm-started on strided rows when there are many; ``final``: the fit returned to the
    user (to ``tol``, warning when it stops early), else a start for it (to ``WARM_TOL``, silently)."""
    penalties = np.r_[np.full(n_first, params.l2), np.full(len(n_values) - n_first, params.l2_cross)]
    if n_rows >= params.warm_start_min_rows:
        # Start from the fit on evenly strided rows. The penalty is not scaled down to their share of the
        # weight: a value with a handful of sampled rows would get an extreme offset, a far worse start than
        # a shrunk one. The objective is convex: the start changes how many passes over all rows are
        # needed, not the answer.
        sample = encoded.map(strided, n_rows // params.warm_start_rows, offsets=True)
        if LabelSummary.of(sample.sum(block_summary)).weight > 0.0:
            sub = _Problem(sample, n_values, penalties, params.l2, params.array_code)
            warm = _newton_cg(
                sub, theta, max_iter=params.max_iter, tol=WARM_TOL, what=params.what, warn=False
            )
            if warm.converged:
                theta = warm.theta
    problem = _Problem(encoded, n_values, penalties, params.l2, params.array_code)
    tol = params.tol if final else WARM_TOL
    return _newton_cg(problem, theta, max_iter=params.max_iter, tol=tol, what=params.what, warn=final)


class _Problem:
    """The penalised objective of one fit over rows of :class:`PlattBlock`, and what Newton-CG reads of it.

    A *row vector* (the predictor, the curvatures) lives in the blocks: :meth:`linear` gives rows of
    :class:`Predicted` blocks, :meth:`gradient` rows of :class:`Curved` ones, each pass a map or a sum.
    """

    def __init__(
        self, rows: Rows, n_values: np.ndarray, penalties: np.ndarray, l2_score: float, array_code: bool
    ) -> None:
        self.rows = rows
        self.array_code = array_code
        self.n_values = np.asarray(n_values, dtype=np.int64)
        self.offsets = value_offsets(self.n_values)
        self.n_codes = int(self.n_values.sum())
        # Each column's offsets have that column's penalty; only the intercept (the second parameter) has
        # none.
        self.ridge = np.r_[l2_score, 0.0, np.repeat(np.asarray(penalties, dtype=np.float64), self.n_values)]
        self.first = slice(0, int(self.n_values[0]))  # the codes of feature 0: every row has one
        # Codes some row of non-zero weight has; the others keep offset 0 (their gradient and Hessian are
        # the penalty's alone), and no row changes when they are left out.
        self.used = np.concatenate([[True, True], rows.sum(code_weights, self.n_values) > 0.0])

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

    def linear(self, theta: np.ndarray) -> Rows:
        """Return the rows with their predictor :math:`X \\theta` (``theta = [a, b, beta]``)."""
        return self.rows.map(predicted, theta, self.offsets, self.array_code)

    def stepped(self, at: Rows, step: np.ndarray) -> Rows:
        """Return the rows at the iterate ``at`` (:meth:`gradient`'s) with the step's :math:`X d`."""
        return at.map(stepped, step, self.offsets, self.array_code)

    def objective(self, theta: np.ndarray, z: Rows) -> float:
        """Return the penalised loss at ``theta`` whose rows ``z`` carry its predictor."""
        loss = float(z.sum(block_loss, self.array_code)[0])
        return loss + 0.5 * float(self.ridge @ (theta * theta))

    def gradient(self, theta: np.ndarray, z: Rows) -> tuple[np.ndarray, np.ndarray, Rows]:
        """Return the gradient, the Hessian diagonal and the rows with their curvatures
        :math:`D = w p (1 - p)`."""
        curvature = z.map(curved, self.n_values, self.array_code)
        flat = curvature.sum(gradient_sums)
        rx, r_sum, dxx, d_sum = flat[:N_ROW_SUMS]
        stats = flat[N_ROW_SUMS:].reshape(-1, N_STATS)
        grad = np.empty_like(theta)
        diag = np.empty_like(theta)
        grad[0], grad[1] = rx, r_sum
        grad[2:] = stats[:, STAT_WF] - stats[:, STAT_WY]
        diag[0], diag[1] = dxx, d_sum
        diag[2:] = stats[:, STAT_WF] - stats[:, STAT_WFF]
        return grad + self.ridge * theta, diag + self.ridge, curvature

    def hessian_product(self, v: np.ndarray, curvature: Rows) -> np.ndarray:
        """Return :math:`(X^\\top D X + \\Lambda) v` from one group-sum pass."""
        stats = curvature.sum(hessian_sums, v, self.offsets, self.n_values, self.array_code)
        out = np.empty_like(v)
        out[0] = stats[self.first, STAT_WFY].sum()  # sum D u x, over the values of feature 0
        out[1] = stats[self.first, STAT_WF].sum()  # sum D u
        out[2:] = stats[:, STAT_WF]
        return out + self.ridge * v


def _conjugate_gradient(
    problem: _Problem, grad: np.ndarray, diag: np.ndarray, curvature: Rows, forcing: float
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
        x_step = problem.stepped(curvature, step)
        slope = float(grad @ step)
        scale = 1.0
        for _ in range(MAX_HALVINGS):
            trial = theta + scale * step
            z_trial = x_step.map(line_trial, scale)
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


__all__ = [
    "FeaturePlattFit",
    "FeaturePlattParams",
    "FeaturePlattState",
    "fit_feature_platt",
]
