r"""The numbers behind a reliability diagram: per-bin means, observed rates and bootstrap bands.

Pure computation, no matplotlib: :func:`reliability_curve` returns a :class:`ReliabilityCurve` that
:func:`gpucal.plot.plot_reliability` draws and that can be inspected or tested on its own.

Bins are the ones the ECE metrics use (``gpucal.metrics``): ``strategy="uniform"`` cuts ``[0, 1]`` into
equal-width bins closed on the right, exactly as ``sklearn.calibration.calibration_curve``;
``strategy="quantile"`` cuts the weighted CDF of the predictions into equal-mass bins with tied
predictions kept together. So the ECE shown in a diagram's legend is computed on the bins drawn.
A bin of zero total weight has no observed rate: it is left out of the curve, not drawn at 0.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gpucal._backend import to_numpy
from gpucal._params import Interval, Options, check_param
from gpucal.metrics.binning import bin_ids, uniform_edges
from gpucal.metrics.inputs import CheckedRows, check_rows
from gpucal.metrics.sums import COUNT, WP, WY, W, group_stats
from gpucal.plot._bootstrap import poisson_bin_sums, poisson_bin_sums_pooled

# Limits of the automatic bin count (``n_bins="auto"``): fewer than 5 bins hide the shape of the
# curve, more than 50 make a diagram unreadable whatever the amount of data.
AUTO_MIN_BINS = 5
AUTO_MAX_BINS = 50

STRATEGY = Options("uniform", "quantile")
N_BINS = Interval(int, 1, None)
N_BOOTSTRAP = Interval(int, 0, None)
CONFIDENCE = Interval(float, 0, 1, closed="neither")
SEED = Interval(int, 0, 2**64 - 1)


@dataclass(frozen=True)
class ReliabilityCurve:
    r"""Per-bin points of a reliability diagram, non-empty bins only, in increasing order of score.

    Attributes
    ----------
    bin_index : ndarray of int
        Index of each bin among the ``n_bins`` bins (gaps are the empty bins that were left out).
    lower, upper : ndarray of float
        The bin's range: its edges for ``strategy="uniform"`` (closed on the right), the smallest and
        largest prediction of a positive-weight row in it for ``strategy="quantile"``.
    mean_predicted : ndarray of float
        Weighted mean prediction in the bin, :math:`\sum w p / \sum w` (the x of the point).
    observed : ndarray of float
        Weighted observed positive rate, :math:`\sum w y / \sum w` (the y of the point).
    count : ndarray of float
        Number of rows in the bin.
    weight : ndarray of float
        Total weight of the bin (equal to ``count`` without weights).
    band_low, band_high : ndarray of float
        Bootstrap percentile band of ``observed`` at level ``confidence``; NaN when ``n_bootstrap=0``.
    n_bins : int
        Number of bins used (``"auto"`` resolved), empty ones included.
    strategy : str
        ``"uniform"`` or ``"quantile"``.
    confidence : float
        Level of the band.
    n_bootstrap : int
        Number of bootstrap replicates (0: no band).
    n_eff : float
        Kish effective sample size :math:`(\sum w)^2 / \sum w^2` (the row count without weights).
    """

    bin_index: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    mean_predicted: np.ndarray
    observed: np.ndarray
    count: np.ndarray
    weight: np.ndarray
    band_low: np.ndarray
    band_high: np.ndarray
    n_bins: int
    strategy: str
    confidence: float
    n_bootstrap: int
    n_eff: float

    def to_frame(self) -> pd.DataFrame:
        """Return the per-bin arrays as a pandas DataFrame, one row per non-empty bin."""
        return pd.DataFrame(
            {
                "bin": self.bin_index,
                "lower": self.lower,
                "upper": self.upper,
                "mean_predicted": self.mean_predicted,
                "observed": self.observed,
                "count": self.count,
                "weight": self.weight,
                "band_low": self.band_low,
                "band_high": self.band_high,
            }
        )


def auto_n_bins(n_eff: float) -> int:
    r"""Return the automatic bin count: the Rice rule on the effective sample size, kept in [5, 50].

    .. math::

        B = \min\big(50, \max(5, \lceil 2\, n_{\mathrm{eff}}^{1/3} \rceil)\big), \qquad
        n_{\mathrm{eff}} = \frac{(\sum_i w_i)^2}{\sum_i w_i^2}

    A reliability diagram is a regressogram (a histogram estimate of :math:`E[y \mid p]`); its error is
    smallest with bin widths of order :math:`n^{-1/3}`, i.e. :math:`B \propto n^{1/3}` bins (Györfi,
    Kohler, Krzyżak & Walk, *A Distribution-Free Theory of Nonparametric Regression*, Springer 2002,
    Theorem 4.3, with :math:`d = 1`). The constant 2 is the Rice rule for histograms. Weights enter
    through Kish's effective sample size, so a few heavy rows do not buy more bins than they carry
    information for. Examples: 100 rows give 10 bins, 1,000 give 20, 10,000 give 44, and 15,625 or more
    give 50.

    Parameters
    ----------
    n_eff : float
        Effective sample size (the number of rows without weights), > 0.

    Returns
    -------
    int
    """
    # The small epsilon keeps exact cubes (1000 -> 20, not 21 from 9.999999999999998 ** 3 rounding).
    rice = math.ceil(2.0 * n_eff ** (1.0 / 3.0) - 1e-9)
    return min(AUTO_MAX_BINS, max(AUTO_MIN_BINS, rice))


def check_n_bins(func_name: str, n_bins: Any) -> None:
    """Check ``n_bins``: ``"auto"`` or an int >= 1 (message in the metrics' template)."""
    if isinstance(n_bins, str) and n_bins == "auto":
        return
    if N_BINS.accepts(n_bins):
        return
    msg = (
        f"The 'n_bins' parameter of {func_name} must be an int in [1, inf) or 'auto'. Got {n_bins!r} instead."
    )
    if isinstance(n_bins, str) or (isinstance(n_bins, numbers.Real) and not isinstance(n_bins, bool)):
        raise ValueError(msg)
    raise TypeError(msg)


def check_curve_params(
    func_name: str, n_bins: Any, strategy: str, n_bootstrap: int, confidence: float, seed: int
) -> None:
    """Check the binning and bootstrap parameters shared by the curve and the plot."""
    check_n_bins(func_name, n_bins)
    check_param(func_name, "strategy", strategy, STRATEGY)
    check_param(func_name, "n_bootstrap", n_bootstrap, N_BOOTSTRAP)
    check_param(func_name, "confidence", confidence, CONFIDENCE)
    check_param(func_name, "seed", seed, SEED)


def reliability_curve(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    n_bins: int | str = "auto",
    strategy: str = "uniform",
    n_bootstrap: int = 200,
    confidence: float = 0.9,
    seed: int = 0,
) -> ReliabilityCurve:
    r"""Compute a reliability diagram: per-bin mean prediction, observed rate and its bootstrap band.

    For each non-empty bin :math:`b` (rows :math:`i \in b`, weights :math:`w_i`):

    .. math::

        \bar p_b = \frac{\sum_{i \in b} w_i p_i}{\sum_{i \in b} w_i}, \qquad
        \bar y_b = \frac{\sum_{i \in b} w_i y_i}{\sum_{i \in b} w_i}

    and the band is the percentile interval of the Poisson bootstrap of :math:`\bar y_b`: replicate
    :math:`r` gives row :math:`i` a multiplier :math:`m_{ri} \sim \mathrm{Poisson}(1)` and computes

    .. math::

        \bar y_b^{(r)} = \frac{\sum_{i \in b} m_{ri} w_i y_i}{\sum_{i \in b} m_{ri} w_i},

    the band being the :math:`(1 - c)/2` and :math:`(1 + c)/2` quantiles of :math:`\bar y_b^{(r)}` over
    replicates, :math:`c` = ``confidence`` (Hanley & MacGibbon, "Creating non-parametric bootstrap
    samples using Poisson frequencies", *Computer Methods and Programs in Biomedicine* 83(1), 2006).

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in {0, 1} (soft labels in [0, 1] are read as fractions of a positive). numpy or cupy
        arrays, pandas / polars / cudf Series, pyarrow arrays or sequences.
    y_prob : array-like of shape (n,)
        Predicted probabilities of the positive class.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights; None means 1 for every row.
    n_bins : int or "auto", default "auto"
        Number of bins; ``"auto"`` applies :func:`auto_n_bins` (Rice rule on the effective sample size,
        kept in [5, 50]).
    strategy : {"uniform", "quantile"}, default "uniform"
        ``"uniform"``: equal-width bins on [0, 1], closed on the right, as sklearn's
        ``calibration_curve``. ``"quantile"``: equal-mass bins on the weighted CDF of ``y_prob``, tied
        predictions kept in one bin (the bins of ``gpucal.metrics.ece(strategy="quantile")``).
    n_bootstrap : int, default 200
        Number of bootstrap replicates; 0 skips the band (``band_low`` and ``band_high`` are NaN).
    confidence : float, default 0.9
        Level of the band, in (0, 1).
    seed : int, default 0
        Seed of the bootstrap multipliers, in [0, 2**64); the same seed gives the same band.

    Returns
    -------
    ReliabilityCurve
        Non-empty bins only, in increasing order of score.

    Notes
    -----
    *What the band is.* The band is the sampling uncertainty of each bin's observed rate with the bins
    held fixed (quantile edges are not recomputed per replicate, and x stays at the bin's mean
    prediction). A replicate in which a bin gets zero weight is skipped for that bin.

    *Weights.* Each row is one sampling unit: its weight is multiplied by its Poisson draw. This is the
    right bootstrap for importance or down-sampling weights (a weight-10 negative kept from a 10%
    sample is one observation, not ten) and does not change when all weights are scaled. Integer
    weights that stand for repeated rows give a wider band than the expanded rows would (the point
    estimates are the same): expand such rows if that matters.

    *Cost.* Memory is ``O(n_bootstrap * n_bins)``: no ``(n_bootstrap, n)`` array is made. With unit (or
    equal) weights and 0/1 labels, the sum of Poisson(1) multipliers over a bin's ``c`` positives is
    exactly Poisson(``c``), so replicates are drawn per bin in ``O(n_bootstrap * n_bins)``. Otherwise a
    compiled loop (numba, parallel over replicates) draws each row's multiplier from a counter-based
    generator keyed by ``(seed, replicate, row)``, ``O(n * n_bootstrap)`` time. Per-bin sums are computed
    by ``gpucal.kernels.group_sums`` on the inputs' device; the bootstrap runs on the host (cupy inputs are
    copied there once).

    *Differences from sklearn.* With ``strategy="uniform"`` and no weights, ``mean_predicted`` and
    ``observed`` equal ``sklearn.calibration.calibration_curve``'s ``prob_pred`` and ``prob_true``.
    sklearn's ``"quantile"`` cuts at interpolated percentiles of the predictions; here equal-mass bins
    are cut on the weighted CDF with ties kept together, so integer weights equal repeated rows.

    Examples
    --------
    >>> curve = reliability_curve([0, 0, 1, 1], [0.1, 0.3, 0.6, 0.9], n_bins=2, n_bootstrap=0)
    >>> curve.mean_predicted.tolist(), curve.observed.tolist()
    ([0.2, 0.75], [0.0, 1.0])
    """
    check_curve_params("reliability_curve", n_bins, strategy, n_bootstrap, confidence, seed)
    rows = check_rows(y_true, y_prob, sample_weight)
    n_eff = effective_sample_size(rows)
    n_bins_used = auto_n_bins(n_eff) if n_bins == "auto" else int(n_bins)
    codes = bin_ids(rows.p, rows.w, n_bins_used, strategy)
    stats = group_stats(codes, rows.p, rows.y, rows.w, n_bins_used)
    keep = stats[:, W] > 0
    kept = stats[keep]

    host_codes = to_numpy(codes).astype(np.int32, copy=False)
    host_p = to_numpy(rows.p)
    host_w = None if rows.w is None else to_numpy(rows.w)
    if strategy == "uniform":
        edges = uniform_edges(n_bins_used)
        lower, upper = edges[:-1][keep], edges[1:][keep]
    else:
        lower, upper = _bin_ranges(host_codes, host_p, host_w, n_bins_used, keep)

    if n_bootstrap > 0:
        sums = _bootstrap_sums(host_codes, to_numpy(rows.y), host_w, n_bins_used, n_bootstrap, seed)
        band_low, band_high = _percentile_band(sums[:, keep, :], confidence)
    else:
        band_low = band_high = np.full(kept.shape[0], np.nan)

    return ReliabilityCurve(
        bin_index=np.flatnonzero(keep),
        lower=lower,
        upper=upper,
        mean_predicted=kept[:, WP] / kept[:, W],
        observed=kept[:, WY] / kept[:, W],
        count=kept[:, COUNT],
        weight=kept[:, W],
        band_low=band_low,
        band_high=band_high,
        n_bins=n_bins_used,
        strategy=strategy,
        confidence=float(confidence),
        n_bootstrap=int(n_bootstrap),
        n_eff=n_eff,
    )


def effective_sample_size(rows: CheckedRows) -> float:
    """Return Kish's :math:`(\\sum w)^2 / \\sum w^2` (the number of rows when there are no weights)."""
    if rows.w is None:
        return float(rows.n)
    total = float(rows.w.sum())
    return total * total / float((rows.w * rows.w).sum())


def _bin_ranges(
    codes: np.ndarray, p: np.ndarray, w: np.ndarray | None, n_bins: int, keep: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Return the smallest and largest prediction of the positive-weight rows of each kept bin."""
    if w is not None:
        positive = w > 0
        codes, p = codes[positive], p[positive]
    lower = np.full(n_bins, np.inf)
    upper = np.full(n_bins, -np.inf)
    np.minimum.at(lower, codes, p)
    np.maximum.at(upper, codes, p)
    return lower[keep], upper[keep]


def _bootstrap_sums(
    codes: np.ndarray,
    y: np.ndarray,
    w: np.ndarray | None,
    n_bins: int,
    n_bootstrap: int,
    seed: int,
    *,
    force_rows: bool = False,
) -> np.ndarray:
    """Return ``(n_bootstrap, n_bins, 2)`` Poisson-bootstrap sums ``sum m*w, sum m*w*y``.

    Takes the per-bin shortcut when every row has the same weight and a 0/1 label (the observed rate
    does not depend on a common weight, so it is dropped); ``force_rows=True`` forces the per-row loop
    (tests compare the two).
    """
    equal_weights = w is None or bool(w.min() == w.max())
    hard_labels = bool(np.all((y == 0) | (y == 1)))
    if equal_weights and hard_labels and not force_rows:
        n_all = np.bincount(codes, minlength=n_bins).astype(np.float64)
        n_pos = np.bincount(codes, weights=y, minlength=n_bins)
        return poisson_bin_sums_pooled(n_pos, n_all - n_pos, n_bootstrap, seed)
    weights = np.ones(codes.shape[0]) if w is None else w
    return poisson_bin_sums(codes, weights, weights * y, n_bins, n_bootstrap, seed)


def _percentile_band(sums: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Return the per-bin percentile interval of the replicates' rates ``sums[..., 1] / sums[..., 0]``."""
    weight, positive = sums[..., 0], sums[..., 1]
    rates = np.divide(positive, weight, out=np.full(weight.shape, np.nan), where=weight > 0)
    low = np.full(rates.shape[1], np.nan)
    high = np.full(rates.shape[1], np.nan)
    # A bin empty in every replicate (only possible with very few rows and replicates) has no band;
    # nanquantile would warn on it.
    has_any = (weight > 0).any(axis=0)
    if has_any.any():
        tail = (1.0 - confidence) / 2.0
        low[has_any], high[has_any] = np.nanquantile(rates[:, has_any], [tail, 1.0 - tail], axis=0)
    return low, high
