r"""Reliability diagrams without bins: the smooth (kernel) curve and the CORP isotonic curve.

* :func:`smooth_reliability_curve`: Błasiok & Nakkiran (ICLR 2024, Sec. 5), as relplot draws it. The curve
  is the kernel regression of ``y`` on ``p``, :math:`\hat\mu(t) = \sum_i w_i y_i K_\sigma(t, p_i) /
  (\sum_i w_i K_\sigma(t, p_i) + \epsilon)`, with the Gaussian kernel reflected at 0 and 1 and the bandwidth
  :math:`\sigma` of the smooth ECE (:func:`gpucal.metrics.smooth_ece`); its band is the pointwise
  percentile interval of Poisson-bootstrap replicates (relplot bags 200 resamples); ``density`` is the
  smoothed density of ``p``. Kernel sums are grid sums over rows (``gpucal.metrics.smooth``), so the curve
  and every replicate are one pass over the rows, on one machine or dask partitions.
* :func:`corp_curve`: Dimitriadis, Gneiting & Jordan, "Stable reliability diagrams for probabilistic
  classifiers", PNAS 118 (2021). The CORP curve is the (weighted) isotonic regression of ``y`` on ``p`` by
  pool-adjacent-violators: no bins, no bandwidth, optimally binned by the data itself. Its Brier score
  decomposition :math:`\bar S = \mathrm{MCB} - \mathrm{DSC} + \mathrm{UNC}` (their Eq. 3) comes with it.
  Read off the table of distinct scores, so it runs on dask partitions too.

:func:`plot_smooth_reliability` and :func:`plot_corp_reliability` draw them with matplotlib (optional).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal._params import Interval, validate_params
from gpucal.calibrators.pav import isotonic_blocks_from_groups
from gpucal.metrics.inputs import check_partition_rows
from gpucal.metrics.score_table import table_of
from gpucal.metrics.smooth import DENSITY_EPS, grid_size, smooth_ece_and_bandwidth, smooth_on_mesh, splat
from gpucal.rows import RowBlock, as_rows, poisson_one, row_uniforms

N_BOOTSTRAP = Interval(int, 0, None)
CONFIDENCE = Interval(float, 0, 1, closed="neither")
MESH_POINTS = Interval(int, 2, None)
# relplot's plotting mesh.
PLOT_MESH = 200


@dataclass(frozen=True)
class SmoothReliabilityCurve:
    """The kernel-smoothed reliability curve at the smooth ECE's bandwidth.

    Attributes
    ----------
    mesh : numpy.ndarray
        Points of [0, 1] where the curve is read.
    observed : numpy.ndarray
        Kernel regression of ``y`` on ``p`` at the mesh (the curve).
    band_low, band_high : numpy.ndarray
        Pointwise percentile band of the bootstrap curves (equal to ``observed`` without bootstrap).
    density : numpy.ndarray
        Smoothed density of ``p`` at the mesh (integrates to about 1 over [0, 1]).
    sigma : float
        The bandwidth (the smooth ECE's fixed point).
    smooth_ece : float
        The smooth ECE at that bandwidth.
    n_bootstrap : int
        Number of bootstrap replicates behind the band.
    """

    mesh: np.ndarray
    observed: np.ndarray
    band_low: np.ndarray
    band_high: np.ndarray
    density: np.ndarray
    sigma: float
    smooth_ece: float
    n_bootstrap: int


def block_label_grids(
    block: RowBlock, m: int, n_bootstrap: int, seed: int, row_offset: int = 0
) -> np.ndarray:
    """Return ``(1 + n_bootstrap, 2, m)`` grid sums of ``w * y`` and ``w``: the rows, then each replicate.

    Replicate ``b`` multiplies row ``r``'s weight by a Poisson(1) count drawn from ``(seed, b, r)``, ``r``
    the global row index, so the replicates do not depend on how the rows are cut into blocks.
    """
    rows = check_partition_rows(block["y_true"], block["y_prob"], block["sample_weight"])
    xp = array_namespace(rows.p)
    weight = xp.ones(rows.n, dtype=xp.float64) if rows.w is None else rows.w
    out = np.empty((1 + n_bootstrap, 2, m))
    out[0] = splat(rows.p, weight * rows.y, m), splat(rows.p, weight, m)
    index = np.arange(row_offset, row_offset + rows.n)
    for b in range(n_bootstrap):
        counts = xp.asarray(poisson_one(row_uniforms(seed, b, index)))
        out[1 + b] = splat(rows.p, counts * weight * rows.y, m), splat(rows.p, counts * weight, m)
    return out


@validate_params(n_bootstrap=N_BOOTSTRAP, confidence=CONFIDENCE, mesh_points=MESH_POINTS)
def smooth_reliability_curve(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    n_bootstrap: int = 200,
    confidence: float = 0.95,
    seed: int = 0,
    mesh_points: int = PLOT_MESH,
) -> SmoothReliabilityCurve:
    """Return the smooth reliability curve of Błasiok & Nakkiran (ICLR 2024), with its bootstrap band.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in {0, 1} (soft labels in [0, 1] are read as fractions of a positive).
    y_prob : array-like of shape (n,)
        Predicted probabilities of the positive class.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights; None means 1 for every row.
    n_bootstrap : int, default=200
        Poisson-bootstrap replicates behind the band (relplot's 200); 0 for no band.
    confidence : float, default=0.95
        Coverage of the pointwise percentile band.
    seed : int, default=0
        Seed of the replicates (the same band on one machine and on dask partitions).
    mesh_points : int, default=200
        Points of [0, 1] where the curve is read.

    Returns
    -------
    SmoothReliabilityCurve
    """
    value, sigma = smooth_ece_and_bandwidth(y_true, y_prob, sample_weight)
    m = grid_size(sigma)
    rows = as_rows(y_true=y_true, y_prob=y_prob, sample_weight=sample_weight)
    grids = rows.sum(block_label_grids, m, n_bootstrap, seed, offsets=True)
    mesh = np.linspace(0.0, 1.0, mesh_points)
    curves = np.empty((1 + n_bootstrap, mesh_points))
    for b in range(1 + n_bootstrap):
        density = smooth_on_mesh(grids[b, 1], sigma, mesh) + DENSITY_EPS
        curves[b] = smooth_on_mesh(grids[b, 0], sigma, mesh) / density
    weight_density = smooth_on_mesh(grids[0, 1], sigma, mesh)
    weight_density /= np.trapezoid(weight_density, mesh) if weight_density.any() else 1.0
    if n_bootstrap:
        tail = 100.0 * (1.0 - confidence) / 2.0
        band_low, band_high = np.percentile(curves[1:], [tail, 100.0 - tail], axis=0)
    else:
        band_low, band_high = curves[0].copy(), curves[0].copy()
    return SmoothReliabilityCurve(
        mesh=mesh,
        observed=curves[0],
        band_low=band_low,
        band_high=band_high,
        density=weight_density,
        sigma=sigma,
        smooth_ece=value,
        n_bootstrap=n_bootstrap,
    )


@dataclass(frozen=True)
class CorpCurve:
    r"""The CORP reliability curve (isotonic regression of ``y`` on ``p``) and its Brier decomposition.

    Attributes
    ----------
    x_first, x_last : numpy.ndarray
        Smallest and largest score of each block of the step function.
    value : numpy.ndarray
        The recalibrated probability of each block (increasing).
    weight : numpy.ndarray
        The weight of each block's rows.
    brier, mcb, dsc, unc : float
        Mean Brier score :math:`\bar S` and its CORP decomposition :math:`\bar S = \mathrm{MCB} -
        \mathrm{DSC} + \mathrm{UNC}`: miscalibration :math:`\bar S - \bar S_{\mathrm{rc}}`, discrimination
        :math:`\bar S_{\mathrm{mg}} - \bar S_{\mathrm{rc}}` and uncertainty :math:`\bar S_{\mathrm{mg}} =
        \bar y (1 - \bar y)` (``rc``: the CORP-recalibrated forecasts, ``mg``: the marginal mean).
        With soft labels ``unc`` is :math:`\bar y (1 - \bar y)` and the identity holds up to the labels'
        own variance.
    """

    x_first: np.ndarray
    x_last: np.ndarray
    value: np.ndarray
    weight: np.ndarray
    brier: float
    mcb: float
    dsc: float
    unc: float

    def predict(self, y_prob: Any) -> np.ndarray:
        """Return the CORP-recalibrated probability of scores (the step function, constant in each block)."""
        p = np.asarray(to_numpy(y_prob), dtype=np.float64)
        block = np.clip(np.searchsorted(self.x_first, p, side="right") - 1, 0, self.value.size - 1)
        return self.value[block]


def corp_curve(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> CorpCurve:
    r"""Return the CORP reliability curve (Dimitriadis, Gneiting & Jordan, PNAS 2021) and Brier decomposition.

    The curve is the weighted isotonic (pool-adjacent-violators) regression of ``y`` on ``p``; scores
    within gpucal's isotonic tie tolerance are one group, as in :class:`~gpucal.IsotonicCalibrator`.
    ``MCB = S(p) - S(rc)`` and ``DSC = S(ybar) - S(rc)``, ``S`` the weighted mean Brier score and ``rc``
    the recalibrated forecasts, are sums over the distinct scores.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in {0, 1} (soft labels in [0, 1] are read as fractions of a positive).
    y_prob : array-like of shape (n,)
        Predicted probabilities of the positive class.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights; None means 1 for every row.

    Returns
    -------
    CorpCurve
    """
    table = table_of(y_true, y_prob, sample_weight)
    blocks = isotonic_blocks_from_groups(table.keys, table.weight, table.weight_y)
    total = float(table.weight.sum())
    mean_y = float(table.weight_y.sum()) / total
    block = np.clip(np.searchsorted(blocks.x_first, table.keys, side="right") - 1, 0, blocks.value.size - 1)
    recalibrated = blocks.value[block]

    def brier_minus_labels(forecast: np.ndarray) -> float:
        # mean_w (f - y)^2 without the labels' own sum w y^2, which cancels in MCB and DSC.
        return float(np.sum(table.weight * forecast**2 - 2.0 * table.weight_y * forecast)) / total

    score_p = brier_minus_labels(table.keys)
    score_rc = brier_minus_labels(recalibrated)
    score_mg = brier_minus_labels(np.full(table.keys.shape, mean_y))
    unc = mean_y * (1.0 - mean_y)
    return CorpCurve(
        x_first=blocks.x_first,
        x_last=blocks.x_last,
        value=blocks.value,
        weight=blocks.weight,
        brier=score_p - score_mg + unc,
        mcb=score_p - score_rc,
        dsc=score_mg - score_rc,
        unc=unc,
    )


def _axes(ax: Any) -> tuple[Any, Any]:
    from gpucal.plot.reliability import _import_matplotlib

    _import_matplotlib()
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(5.0, 5.0))
        return fig, ax
    return ax.figure, ax


def _frame(ax: Any) -> None:
    ax.plot([0, 1], [0, 1], linestyle="--", color="0.5", linewidth=1)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("predicted probability")
    ax.set_ylabel("observed frequency")


def plot_smooth_reliability(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    ax: Any = None,
    color: str = "C3",
    **curve_args: Any,
) -> Any:
    """Draw the smooth reliability curve with its band and the density of ``p``; return the figure.

    ``curve_args`` go to :func:`smooth_reliability_curve` (``n_bootstrap``, ``confidence``, ``seed``).
    """
    curve = smooth_reliability_curve(y_true, y_prob, sample_weight=sample_weight, **curve_args)
    fig, ax = _axes(ax)
    _frame(ax)
    if curve.n_bootstrap:
        ax.fill_between(curve.mesh, curve.band_low, curve.band_high, color=color, alpha=0.25, linewidth=0)
    ax.plot(curve.mesh, curve.observed, color=color, label=f"smECE {curve.smooth_ece:.4f}")
    scale = 0.2 / max(float(curve.density.max()), 1e-12)  # the density as a strip along the bottom
    ax.fill_between(curve.mesh, 0.0, curve.density * scale, color="0.6", alpha=0.5, linewidth=0)
    ax.legend(loc="upper left")
    return fig


def plot_corp_reliability(
    y_true: Any, y_prob: Any, *, sample_weight: Any = None, ax: Any = None, color: str = "C0"
) -> Any:
    """Draw the CORP reliability curve (a step function) with its MCB / DSC / UNC; return the figure."""
    curve = corp_curve(y_true, y_prob, sample_weight=sample_weight)
    fig, ax = _axes(ax)
    _frame(ax)
    xs = np.column_stack([curve.x_first, curve.x_last]).reshape(-1)
    ys = np.repeat(curve.value, 2)
    ax.plot(xs, ys, color=color, label="CORP (isotonic)")
    ax.text(
        0.98,
        0.02,
        f"MCB {curve.mcb:.4f}\nDSC {curve.dsc:.4f}\nUNC {curve.unc:.4f}",
        ha="right",
        va="bottom",
        transform=ax.transAxes,
    )
    ax.legend(loc="upper left")
    return fig
