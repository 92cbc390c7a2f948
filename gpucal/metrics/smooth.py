r"""Smooth ECE: Błasiok & Nakkiran, "Smooth ECE: Principled Reliability Diagrams via Kernel Smoothing",
ICLR 2024.

Smooth the residuals :math:`r_i = p_i - y_i` with a Gaussian kernel of bandwidth :math:`\sigma`, reflected
at 0 and 1, and integrate the absolute smoothed residual against the smoothed density of ``p``:

.. math::

    \mathrm{smECE}_\sigma = \frac{\sum_t |R_\sigma(t)|}{\sum_t (D_\sigma(t) + \epsilon)}, \qquad
    R_\sigma(t) = \sum_i w_i r_i K_\sigma(t, p_i), \quad D_\sigma(t) = \sum_i w_i K_\sigma(t, p_i)

over an even mesh :math:`t` of ``max(round(10 / sigma), 200)`` points (``epsilon = 1e-4``). The paper's
bandwidth is the fixed point :math:`\sigma^* = \mathrm{smECE}_{\sigma^*}` (their Sec. 4, Thm. 9), found by
ten bisections on [0, 1] exactly as ``relplot.smECE`` finds it; :func:`smooth_ece` equals ``relplot.smECE``.

Like relplot, the kernel sums go through a grid: each row's weight is split linearly between the two
nearest of ``m`` grid points (``m = max(2000, round(20 / sigma)) // 2 + 1``), the grid is convolved with
the reflected kernel and read at the mesh by linear interpolation. The grid sums are sums over rows of a
fixed shape, so each bandwidth tried is one :meth:`gpucal.rows.Rows.sum` (one machine or dask partitions);
every bandwidth from 0.01 up shares the ``m = 1001`` grid, so most searches read the rows once.

Weights multiply the kernel sums, so integer weights equal repeated rows; the absolute ``epsilon`` makes the
value depend (slightly) on the scale of the weights, as it depends on the number of rows in relplot.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal._validation import check_not_empty
from gpucal.metrics.inputs import check_partition_rows
from gpucal.rows import RowBlock, as_rows

# relplot's constants (Błasiok & Nakkiran's reference implementation): the density floor, the smallest
# mesh, and the bandwidth under which the search stops.
DENSITY_EPS = 1e-4
MIN_MESH = 200
SIGMA_FLOOR = 1e-3
N_BISECTIONS = 10


def grid_size(sigma: float) -> int:
    """Return the number of grid points the kernel sums at bandwidth ``sigma`` use."""
    return max(2000, round(20 / sigma)) // 2 + 1


def splat(p: Any, values: Any, m: int) -> np.ndarray:
    """Return ``sum_i values_i * hat_g(p_i)`` on the grid ``g = j / (m - 1)`` (split between neighbours)."""
    xp = array_namespace(p)
    scaled = p * (m - 1)
    left = xp.clip(scaled.astype(xp.int64), 0, m - 2)
    right_share = scaled - left
    out = xp.bincount(left, weights=values - values * right_share, minlength=m)
    out[1:] += xp.bincount(left + 1, weights=values * right_share, minlength=m)[1:]
    return to_numpy(out)


def grid_sums(y: Any, p: Any, w: Any, sizes: tuple[int, ...]) -> np.ndarray:
    """Return, for each grid size ``m``, the grids of ``w * (p - y)`` then of ``w``, concatenated."""
    xp = array_namespace(p)
    weight = xp.ones(p.shape[0], dtype=xp.float64) if w is None else w
    residual = weight * (p - y)
    return np.concatenate([np.concatenate([splat(p, residual, m), splat(p, weight, m)]) for m in sizes])


def block_grid_sums(block: RowBlock, sizes: tuple[int, ...]) -> np.ndarray:
    """Return :func:`grid_sums` of one block of rows (``y_true``, ``y_prob``, ``sample_weight``), then its
    number of rows."""
    rows = check_partition_rows(block["y_true"], block["y_prob"], block["sample_weight"])
    return np.append(grid_sums(rows.y, rows.p, rows.w, sizes), rows.n)


def gaussian_taps(sigma: float, m: int) -> np.ndarray:
    """Return the Gaussian density of bandwidth ``sigma`` at ``j / (m - 1) - 1/2``, ``j = 0..m-1``."""
    offset = np.linspace(0.0, 1.0, m) - 0.5
    return np.exp(-offset * offset / (2.0 * sigma * sigma)) / (math.sqrt(2.0 * math.pi) * sigma)


def smooth_on_mesh(grid: np.ndarray, sigma: float, mesh: np.ndarray) -> np.ndarray:
    """Convolve a grid with the Gaussian reflected at both ends, then read it at ``mesh`` (interpolated).

    Reflection (mass that the kernel puts beyond 0 or 1 is folded back) keeps the boundary from biasing
    the smoothed values down; it is the kernel of the paper's Sec. 5 and of relplot.
    """
    m = grid.shape[0]
    mirrored = np.pad(grid, (m - 1, m - 1), mode="reflect")
    smoothed = np.convolve(mirrored, gaussian_taps(sigma, m), mode="valid")[m // 2 : m // 2 + m]
    cell = np.clip((mesh * (m - 1)).astype(np.int64), 0, m - 2)
    right_share = (mesh - cell / (m - 1)) * (m - 1)
    return smoothed[cell] * (1.0 - right_share) + smoothed[cell + 1] * right_share


def smece_at(grids: dict[int, np.ndarray], sigma: float) -> float:
    """Return smECE at bandwidth ``sigma`` from the summed grids of its size (``[residual, weight]``)."""
    m = grid_size(sigma)
    residual, weight = grids[m][:m], grids[m][m : 2 * m]
    mesh = np.linspace(0.0, 1.0, max(round(10 / sigma), MIN_MESH))
    smoothed_residual = smooth_on_mesh(residual, sigma, mesh)
    density = smooth_on_mesh(weight, sigma, mesh) + DENSITY_EPS
    return float(np.sum(np.abs(smoothed_residual)) / np.sum(density))


def fixed_point_bandwidth(smece: Callable[[float], float]) -> float:
    """Return the bandwidth of the paper's fixed point ``sigma = smECE_sigma``, by relplot's bisection.

    ``sigma = 1`` when ``smECE_1 > 1`` already; otherwise ten halvings of ``[0, 1]`` keeping the upper
    end below the fixed point (``smECE_sigma <= sigma``), stopping at bandwidths below ``SIGMA_FLOOR``.
    """

    def above(sigma: float) -> bool:
        return sigma < SIGMA_FLOOR or sigma < smece(sigma)

    if above(1.0):
        return 1.0
    low, high = 1.0, 0.0  # 'low' fails the test (the answer), 'high' passes it
    for _ in range(N_BISECTIONS):
        middle = (low + high) / 2
        if above(middle):
            high = middle
        else:
            low = middle
    return low


def smooth_ece_and_bandwidth(y_true: Any, y_prob: Any, sample_weight: Any = None) -> tuple[float, float]:
    """Return ``(smECE, sigma)``: the smooth ECE at the paper's bandwidth and that bandwidth."""
    rows = as_rows(y_true=y_true, y_prob=y_prob, sample_weight=sample_weight)
    grids: dict[int, np.ndarray] = {}

    def smece(sigma: float) -> float:
        m = grid_size(sigma)
        if m not in grids:  # one pass over the rows per grid size
            grids[m] = rows.sum(block_grid_sums, (m,))
            check_grid_weight(grids[m], m)
        return smece_at(grids, sigma)

    sigma = fixed_point_bandwidth(smece)
    return smece(sigma), sigma


def check_grid_weight(sums: np.ndarray, m: int) -> None:
    """Raise the errors of an input with no rows or no weight (read off :func:`block_grid_sums`' total)."""
    check_not_empty(int(sums[-1]), "y_true")
    if not sums[m : 2 * m].sum() > 0:
        msg = "sample_weight: all weights are zero"
        raise ValueError(msg)


def smooth_ece(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    r"""Smooth ECE at the paper's fixed-point bandwidth (Błasiok & Nakkiran, ICLR 2024).

    .. math::

        \mathrm{smECE} = \mathrm{smECE}_{\sigma^*}, \quad \sigma^* = \mathrm{smECE}_{\sigma^*}, \qquad
        \mathrm{smECE}_\sigma = \frac{\sum_t |\sum_i w_i (p_i - y_i) K_\sigma(t, p_i)|}
                                     {\sum_t (\sum_i w_i K_\sigma(t, p_i) + \epsilon)}

    with the Gaussian kernel reflected at 0 and 1 (module docstring). A consistent calibration measure:
    within a constant factor of the distance to the nearest calibrated predictor, continuous in the
    predictions, no bins to choose. It smooths along ``p`` alone, so it cannot see errors that cancel at
    one score across segments of a feature. Equal to ``relplot.smECE(y_prob, y_true)``.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in {0, 1} (soft labels in [0, 1] are read as fractions of a positive).
    y_prob : array-like of shape (n,)
        Predicted probabilities of the positive class.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights (they multiply the kernel sums); None means 1 for every row.

    Returns
    -------
    float
        The smooth ECE, in [0, 1].
    """
    return smooth_ece_and_bandwidth(y_true, y_prob, sample_weight)[0]
