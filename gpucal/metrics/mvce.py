"""Multi-view calibration error (MBCT): the mean bin gap over random equal-count partitions."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpucal._backend import to_numpy
from gpucal._params import Interval, validate_params
from gpucal.metrics.binned import NORM
from gpucal.metrics.inputs import CheckedRows, check_total, metric_rows
from gpucal.metrics.sums import COUNT, WP, WY, W


@validate_params(
    n_views=Interval(int, 1, None),
    bin_size=Interval(int, 1, None),
    p=NORM,
    seed=Interval(int, 0, 2**64, closed="left"),
)
def mvce(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    n_views: int = 100,
    bin_size: int = 1000,
    p: float = 2.0,
    seed: int = 0,
) -> float:
    r"""Multi-view calibration error: PCE averaged over the bins of ``r`` random partitions, l_p over views.

    View :math:`i` is a random permutation of the rows cut into :math:`t_i` equal-count bins
    :math:`D_{i,j}` (``t = max(1, n // bin_size)`` bins of ``bin_size`` to ``2 * bin_size - 1`` rows):

    .. math::

        \mathrm{MVCE} = \Big( \frac{1}{r} \sum_{i=1}^{r}
            \Big( \frac{1}{t_i} \sum_{j=1}^{t_i} \mathrm{PCE}(D_{i,j}) \Big)^{p} \Big)^{1/p}

    Source: MBCT (Huang et al., WWW 2022), Eq. 10, with the random-shuffle uniform-mass division of its
    Section 4.3; the paper evaluates with ``r = 100`` views and ``p = 2``. It sorts by nothing: each bin
    is a random sample of the rows, so for bins of ``m`` rows :math:`\mathbb{E}\,\mathrm{PCE}` is about the
    global bias when that dominates and about :math:`\sqrt{2/\pi}\,\mathrm{sd}(p - y)/\sqrt{m}` otherwise.
    It therefore sees the global bias plus a noise floor, and cannot tell a feature-blind calibrator from
    one that is right inside every segment; use :func:`field_ece` for segments.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights. Bins hold equal numbers of rows (not equal weight); each bin's PCE
        uses weighted means, and bins are averaged equally.
    n_views : int, default 100
        Number of random partitions ``r``.
    bin_size : int, default 1000
        Rows per bin (the paper's ``beta`` at evaluation; it reports 800 to 2000).
    p : float, default 2
        The norm over views, in ``[1, inf]``.
    seed : int, default 0
        Seed of the partitions: the same seed gives the same bins on the CPU and the GPU (a keyed Feistel
        permutation of the row ids in ``gpucal.kernels.view_sums``, no shuffled copies).

    Returns
    -------
    float

    Notes
    -----
    Bins of zero total weight are skipped and not counted in :math:`t_i`. Integer weights are not the same
    as repeated rows here: a repeated row can fall into several bins, a weighted row into one.
    """
    rows = metric_rows(y_true, y_prob, sample_weight)
    _, n_total = rows.offsets()
    stats = rows.sum(view_sums, n_views, bin_size, seed, n_total, offsets=True)
    check_total(stats[0, :, COUNT].sum(), stats[0, :, W].sum())
    return mvce_from_view_stats(stats, p)


def view_sums(
    block: CheckedRows, n_views: int, bin_size: int, seed: int, n_total: int, *, row_offset: int
) -> np.ndarray:
    """MVCE's ``(n_views, n_bins, 4)`` view sums of one block, its rows at their global ids: the
    counter-based views put every row in the bin it has on one machine, whatever the blocks."""
    from gpucal.kernels import view_sums as kernel_view_sums

    return to_numpy(
        kernel_view_sums(
            block.p,
            block.y,
            block.w,
            n_views=n_views,
            bin_size=bin_size,
            seed=seed,
            row_offset=row_offset,
            n_total=n_total,
        )
    )


def mvce_from_view_stats(stats: np.ndarray, p: float) -> float:
    """Return MVCE from the ``(n_views, n_bins, 4)`` sums ``count, w, w*p, w*y`` of its views."""
    weight = stats[:, :, W]
    has_weight = weight > 0
    gaps = np.where(
        has_weight, np.abs(stats[:, :, WY] - stats[:, :, WP]) / np.where(has_weight, weight, 1.0), 0.0
    )
    per_view = gaps.sum(axis=1) / has_weight.sum(axis=1)
    if math.isinf(p):
        return float(per_view.max())
    return float(np.mean(per_view**p) ** (1.0 / p))
