r"""Platt scaling on logit hinges fitted from one pass: the series of its loss over bins of the logit.

The hinge design ``[x, (x - t_1)_+, ..., (x - t_K)_+, 1]`` is a function of the one variable :math:`x`,
linear in :math:`x` between two knots. The knots lie on the edges of the ``HISTOGRAM_BINS`` equal bins
of :math:`x` the knots were read from (:func:`gpucal.calibrators.hinge_platt.hinge_knots`), so in a bin
of centre :math:`c` every row's design is :math:`A x + B` with the bin's :math:`A_j \in \{0, 1\}` (the
knots below :math:`c`) and :math:`B_j = -t_j A_j`, and its linear predictor is
:math:`z = \alpha d + z_c`, :math:`d = x - c`, with the bin's slope :math:`\alpha = A^\top \theta` and
:math:`z_c = (A c + B)^\top \theta`. Platt scaling's series (``gpucal.calibrators.logistic``,
``_series_sums``) then sum the loss, the gradient and the Hessian of the bin's rows from its moments
:math:`\sum w d^k`, with one slope per bin instead of one in all, and the chain rule
:math:`\partial z / \partial \theta_j = A_j x + B_j` maps them to the coefficients. The linear part
:math:`-\theta^\top \sum w t x` is exact, from each bin's :math:`\sum w y` and :math:`\sum w y d`.

The answer stands where every bin's slope times half a bin's width is at most ``SERIES_MAX_REACH``, as
for Platt scaling: the terms the series leave out then weigh about 1e-15 of the sums. Otherwise it
starts the Newton passes over the rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpucal.calibrators._logistic_kernels import FEATURES_COLUMNS, binned_moments
from gpucal.calibrators._newton import NewtonResult, SumsFunction, newton_minimize
from gpucal.calibrators.logistic import (
    SERIES_MAX_REACH,
    SERIES_MOMENTS,
    SERIES_ORDER,
    ScoreBlock,
    series_terms,
)
from gpucal.calibrators.spline import HISTOGRAM_BINS

#: Moments per bin of the labelled rows in :func:`hinge_moments`: :math:`\sum w y` and :math:`\sum w y d`.
LABEL_MOMENTS = 2


def hinge_moments(block: ScoreBlock, span: tuple[float, float], backend: str = "auto") -> np.ndarray:
    r"""One block's moments per bin of its score :math:`x` (the hinge variable) over ``span``
    (``HISTOGRAM_BINS`` equal bins): ``SERIES_MOMENTS`` sums :math:`\sum w d^k` of every row, then
    :math:`\sum w y` and :math:`\sum w y d`; flat, bin by bin (:func:`binned_moments`)."""
    n_bins = HISTOGRAM_BINS

    def binned(weights: Any, n_moments: int) -> np.ndarray:
        return binned_moments(
            block.score,
            block.y,
            weights,
            mode=FEATURES_COLUMNS,
            span=span,
            n_bins=n_bins,
            backend=backend,
            n_moments=n_moments,
        )[: n_bins * n_moments]

    return np.concatenate([binned(block.w, SERIES_MOMENTS), binned(block.w * block.y, LABEL_MOMENTS)])


class HingeSeries:
    """The hinge fit's objective from :func:`hinge_moments` (module docstring): its bins' pieces."""

    def __init__(
        self, moments: np.ndarray, span: tuple[float, float], knots: np.ndarray, targets: tuple[float, float]
    ) -> None:
        n_bins = HISTOGRAM_BINS
        every = moments[: n_bins * SERIES_MOMENTS].reshape(n_bins, SERIES_MOMENTS)
        labelled = moments[n_bins * SERIES_MOMENTS :].reshape(n_bins, LABEL_MOMENTS)
        keep = every[:, 0] > 0
        width = (span[1] - span[0]) / n_bins
        self.half_width = 0.5 * width
        self.centre = span[0] + (np.flatnonzero(keep) + 0.5) * width  # as binned_moments places them
        self.moments = every[keep].T
        above = (self.centre[:, None] > knots[None, :]).astype(np.float64)
        ones, zeros = np.ones_like(self.centre), np.zeros_like(self.centre)
        # Per bin, the design is slope * x + offset: columns x, the hinges, the intercept.
        self.slope = np.column_stack([ones, above, zeros])
        self.offset = np.column_stack([zeros, -above * knots, ones])
        t_neg, t_pos = targets
        # sum w t x_j = t_- sum w x_j + (t_+ - t_-) sum w y x_j: the many tiny w t_- counted apart.
        self.linear = t_neg * self._column_sums(self.moments[0], self.moments[1]) + (
            t_pos - t_neg
        ) * self._column_sums(labelled[keep, 0], labelled[keep, 1])

    def _column_sums(self, m0: np.ndarray, m1: np.ndarray) -> np.ndarray:
        r""":math:`\sum w x_j` over the bins' rows from their :math:`\sum w` and :math:`\sum w d`."""
        return self.slope.T @ (self.centre * m0 + m1) + self.offset.T @ m0

    def sums(self, theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """The loss, gradient and Hessian sums at ``theta`` (``[a, c_1, ..., c_K, b]``)."""
        c, slope, offset = self.centre, self.slope, self.offset
        alpha = slope @ theta
        z = alpha * c + offset @ theta
        scale = [np.ones_like(alpha)]
        for k in range(1, SERIES_ORDER + 2):
            scale.append(scale[-1] * alpha / k)
        loss_terms, s0, s1, q0, q1, q2 = series_terms(z, scale, self.moments)
        grad = slope.T @ (c * s0 + s1) + offset.T @ s0 - self.linear
        mixed = slope.T @ ((c * q0 + q1)[:, None] * offset)
        hess = (
            slope.T @ ((c * c * q0 + 2.0 * c * q1 + q2)[:, None] * slope)
            + mixed
            + mixed.T
            + offset.T @ (q0[:, None] * offset)
        )
        return float(np.sum(loss_terms)) - float(theta @ self.linear), grad, hess

    def reach(self, theta: np.ndarray) -> float:
        """The largest bin's slope times half a bin's width: the series' accuracy (module docstring)."""
        return float(np.max(np.abs(self.slope @ theta))) * self.half_width if self.centre.size else 0.0


def fit_hinge_series(
    series: HingeSeries, start: np.ndarray, *, total_weight: float, ridge: np.ndarray
) -> tuple[NewtonResult, bool]:
    """Newton on the series from ``start``; returns the result and whether it stands (converged, and
    within ``SERIES_MAX_REACH``)."""
    sums: SumsFunction = series.sums
    result = newton_minimize(sums, start, total_weight=total_weight, l2=ridge, warn=False, error_tol=0.0)
    stands = result.converged and series.reach(result.theta) <= SERIES_MAX_REACH
    return result, stands


__all__ = ["LABEL_MOMENTS", "HingeSeries", "fit_hinge_series", "hinge_moments"]
