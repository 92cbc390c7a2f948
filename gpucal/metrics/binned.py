"""Calibration errors over bins of the predicted probability: the ECE family.

All of these sort (or cut) the rows by ``p`` alone, so they see miscalibration as a function of the
score and nothing else: a model that is right on average at every score level but wrong inside
segments of a feature (over-predicting one country, under-predicting another at the same score)
scores well here. Use :func:`~gpucal.metrics.field_ece` or :func:`~gpucal.metrics.segment_report` for
that. Each metric is computed from per-bin sums ``count, sum w, sum w*p, sum w*y``: equal-width bins in one
pass over the rows through ``gpucal.kernels.group_sums``, equal-mass bins cut on the table of sums per
distinct score (:func:`score_sums`), so numpy, cupy and dask inputs take the same path
(:mod:`gpucal.metrics.inputs`).

Bins: ``strategy="uniform"`` uses sklearn's equal-width edges, closed on the right like
``sklearn.calibration.calibration_curve``; ``strategy="quantile"`` uses equal-mass bins on the weighted
CDF of ``p`` with tied probabilities kept in one bin (see :mod:`gpucal.metrics.binning`). A bin of zero
total weight is skipped everywhere.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from gpucal._params import Interval, Options, validate_params
from gpucal.metrics._reduce import bin_gaps, lp_average, ratio_error
from gpucal.metrics.binning import mass_positions, table_mass_bin_sums, uniform_bin_ids
from gpucal.metrics.inputs import CheckedRows, check_total, key_limit, metric_rows
from gpucal.metrics.score_table import ScoreTable, merge_score_tables, score_table
from gpucal.metrics.sums import COUNT, WP, WY, W, group_stats
from gpucal.rows import Rows
from gpucal.rows.reduce import KeyedTable, check_table_size

N_BINS = Interval(int, 1, None)
STRATEGY = Options("uniform", "quantile")
NORM = Interval(float, 1, math.inf)
WEIGHTING = Options("mass", "equal")


def uniform_bin_sums(block: CheckedRows, n_bins: int) -> np.ndarray:
    """``(n_bins, 4)`` sums ``count, w, w*p, w*y`` of one block's equal-width probability bins."""
    return group_stats(uniform_bin_ids(block.p, n_bins), block.p, block.y, block.w, n_bins)


def block_scores(block: CheckedRows, limit: int) -> ScoreTable:
    """The :class:`~gpucal.metrics.score_table.ScoreTable` of one block (at most ``limit`` scores)."""
    table = score_table(block.y, block.p, block.w)
    check_table_size(table.keys.shape[0], limit, "distinct-score table")
    return table


def _merge_scores(*tables: ScoreTable, limit: int) -> ScoreTable:
    merged = merge_score_tables(*(ScoreTable(*t) for t in tables))
    check_table_size(merged.keys.shape[0], limit, "distinct-score table")
    return merged


def distinct_scores(rows: Rows) -> ScoreTable:
    """Return the :class:`~gpucal.metrics.score_table.ScoreTable` of all blocks, after the whole-data
    checks. Over several blocks it is capped by :func:`~gpucal.metrics.inputs.key_limit` keys."""
    limit = key_limit(rows)
    # The rows may hand back a plain tuple (results are brought to the host field by field).
    table = ScoreTable(*rows.reduce(block_scores, functools.partial(_merge_scores, limit=limit), limit))
    check_total(float(table.n_rows.sum()), float(table.weight.sum()))
    return table


def score_sums(rows: Rows) -> KeyedTable:
    """Return the sums ``count, w, w*p, w*y`` per distinct score of all blocks, scores increasing,
    after the whole-data checks.

    Exact: tied scores are one key, never split; ``w*p`` is the score times its weight.
    """
    table = distinct_scores(rows)
    stats = np.stack([table.n_rows, table.weight, table.keys * table.weight, table.weight_y], axis=1)
    return KeyedTable((table.keys,), stats)


def binned_stats(rows: Rows, n_bins: int, strategy: str) -> np.ndarray:
    """Return the ``(n_bins, 4)`` sums ``count, w, w*p, w*y`` of the probability bins of
    :func:`~gpucal.metrics.inputs.metric_rows`, after the whole-data checks.

    Equal-width bins are summed per block; equal-mass bins are cut on the table of sums per distinct
    score (:func:`distinct_scores`, :func:`~gpucal.metrics.binning.table_mass_bin_sums`), so tie groups
    are never split.
    """
    if strategy == "uniform":
        stats = rows.sum(uniform_bin_sums, n_bins)
        check_total(stats[:, COUNT].sum(), stats[:, W].sum())
        return stats
    table = distinct_scores(rows)
    return table_mass_bin_sums(table.keys, table.n_rows, table.weight, table.weight_y, n_bins)


def totals(block: CheckedRows) -> np.ndarray:
    """``[count, sum w, sum w p, sum w y]`` of one block."""
    if block.w is None:
        return np.array([block.n, block.n, float(block.xp.sum(block.p)), float(block.xp.sum(block.y))])
    return np.array([block.n, float(block.w.sum()), float(block.w @ block.p), float(block.w @ block.y)])


def pce(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    r"""Partition calibration error of one set of rows: the gap between mean prediction and mean label.

    .. math::

        \mathrm{PCE}(D) = \left| \frac{\sum_{i \in D} w_i p_i}{\sum_{i \in D} w_i}
                               - \frac{\sum_{i \in D} w_i y_i}{\sum_{i \in D} w_i} \right|

    Source: MBCT (Huang et al., WWW 2022), Eq. 4. It bins by nothing: the whole input is one bin, so it
    sees only the global bias and is blind to every error that cancels on average.

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
    float
        The gap, in [0, 1].

    Examples
    --------
    >>> pce([0, 1, 1, 0], [0.2, 0.6, 0.9, 0.3])
    0.0
    """
    count, weight, wp, wy = metric_rows(y_true, y_prob, sample_weight).sum(totals)
    check_total(count, weight)
    return abs(float(wp) - float(wy)) / float(weight)


@validate_params(n_bins=N_BINS, strategy=STRATEGY, p=NORM, weighting=WEIGHTING)
def ece(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    n_bins: int = 15,
    strategy: str = "uniform",
    p: float = 1.0,
    weighting: str = "mass",
) -> float:
    r"""Expected calibration error over bins of the predicted probability, in the l_p norm.

    With bins :math:`b = 1..B` (non-empty ones only), :math:`W_b` their weight, :math:`W = \sum_b W_b`
    and :math:`\mathrm{PCE}_b` the gap between the bin's mean label and mean prediction:

    .. math::

        \mathrm{ECE} = \Big( \sum_b a_b \, \mathrm{PCE}_b^{\,p} \Big)^{1/p}, \qquad
        a_b = \frac{W_b}{W} \ (\text{weighting="mass"}) \quad\text{or}\quad
        a_b = \frac{1}{B} \ (\text{weighting="equal"})

    and :math:`p = \infty` gives :math:`\max_b \mathrm{PCE}_b` (:func:`mce`).

    * The default (equal-width bins, ``p=1``, ``weighting="mass"``) is the classic ECE of Naeini et al.
      (2015) as written in CCL (Eq. 1) and computed by netcal's ``ECE``.
    * ``strategy="quantile", weighting="equal"`` is MBCT's :math:`\mathrm{ECE}_n` (Huang et al., WWW 2022,
      Eq. 14: rows sorted by ``p``, cut into ``n`` uniform-mass bins, bins averaged equally); the paper
      uses ``p=2``.
    * ``strategy="quantile", p=2, weighting="mass"`` is AdaECE (:func:`ada_ece`).
    * ``strategy="uniform", weighting="equal"`` is netcal's ``ACE`` (average over non-empty bins).

    It sorts by ``p``: it sees how the mean label follows the score, averaged inside each bin. It
    cannot see errors that cancel inside a bin, nor errors along a feature at a fixed score.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in {0, 1} (soft labels in [0, 1] are read as fractions of a positive).
    y_prob : array-like of shape (n,)
        Predicted probabilities of the positive class.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights; None means 1 for every row.
    n_bins : int, default 15
        Number of bins.
    strategy : {"uniform", "quantile"}, default "uniform"
        ``"uniform"``: equal-width edges ``linspace(0, 1, n_bins + 1)``, bins closed on the right as in
        sklearn's ``calibration_curve``. ``"quantile"``: equal mass on the weighted CDF of ``p``; a row
        goes to bin ``floor(n_bins * S / W)``, ``S`` the weight of the rows with a strictly smaller
        probability, so tied probabilities share a bin (row order never matters).
    p : float, default 1
        The norm, in ``[1, inf]``.
    weighting : {"mass", "equal"}, default "mass"
        Weight of a bin in the average: its share of the total weight, or the same for every non-empty bin.

    Returns
    -------
    float

    Notes
    -----
    Empty bins (zero total weight) are skipped: they are not counted in ``B``. netcal bins are closed on
    the left (``numpy.histogramdd``); the two agree except for probabilities exactly on an edge. With
    ``strategy="quantile"`` the edges differ from sklearn's ``calibration_curve`` (interpolated
    percentiles): here bins are cut on the weighted CDF, which makes integer weights equal repeated rows.

    Examples
    --------
    >>> round(ece([0, 1, 1, 0], [0.1, 0.8, 0.7, 0.4], n_bins=2), 6)
    0.25
    """
    rows = metric_rows(y_true, y_prob, sample_weight)
    gap, mass = bin_gaps(binned_stats(rows, n_bins, strategy))
    return lp_average(gap, mass, p, weighting)


@validate_params(n_bins=N_BINS, strategy=STRATEGY)
def mce(
    y_true: Any, y_prob: Any, *, sample_weight: Any = None, n_bins: int = 15, strategy: str = "uniform"
) -> float:
    r"""Maximum calibration error: the largest bin gap between mean label and mean prediction.

    .. math::

        \mathrm{MCE} = \max_{b:\, W_b > 0} \left| \bar y_b - \bar p_b \right|

    Source: Naeini et al. (2015), as written in CCL Section 1.1; netcal's ``MCE``. Sorts by ``p``. It sees
    the worst score range, however few rows it holds (a nearly empty bin can dominate); it cannot see
    errors along features. Empty bins are skipped. Parameters as in :func:`ece`.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.
    n_bins : int, default 15
        Number of bins.
    strategy : {"uniform", "quantile"}, default "uniform"
        Equal-width or equal-mass bins (see :func:`ece`).

    Returns
    -------
    float

    Examples
    --------
    >>> round(mce([0, 1, 1, 0], [0.1, 0.8, 0.7, 0.4], n_bins=2), 6)
    0.25
    """
    rows = metric_rows(y_true, y_prob, sample_weight)
    gap, _ = bin_gaps(binned_stats(rows, n_bins, strategy))
    return float(gap.max())


@validate_params(n_bins=N_BINS)
def ada_ece(y_true: Any, y_prob: Any, *, sample_weight: Any = None, n_bins: int = 15) -> float:
    r"""Adaptive ECE: equal-mass bins, bins weighted by mass, squared gaps.

    .. math::

        \mathrm{AdaECE} = \sqrt{ \frac{1}{W} \sum_b W_b \, (\bar y_b - \bar p_b)^2 }

    Source: CCL Section 1.1 (after Mukhoti et al., 2020). The same as
    ``ece(strategy="quantile", p=2, weighting="mass")``. Sorts by ``p``; equal-mass bins keep every bin
    populated, so sparse score ranges do not produce noisy bins, but each bin then spans a wide range
    where scores are rare. Blind to errors along features.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.
    n_bins : int, default 15
        Number of equal-mass bins.

    Returns
    -------
    float

    Examples
    --------
    >>> round(ada_ece([0, 1, 1, 0], [0.1, 0.8, 0.7, 0.4], n_bins=2), 6)
    0.25
    """
    return ece(
        y_true, y_prob, sample_weight=sample_weight, n_bins=n_bins, strategy="quantile", p=2, weighting="mass"
    )


@validate_params(n_bins=N_BINS, strategy=STRATEGY)
def prob_ece(
    y_true: Any, y_prob: Any, *, sample_weight: Any = None, n_bins: int = 15, strategy: str = "uniform"
) -> float:
    r"""Probability-level calibration error: summed absolute excess of positives per score bin.

    .. math::

        \text{Prob-ECE} = \frac{1}{W} \sum_b \Big| \sum_{i \in b} w_i (y_i - p_i) \Big|

    Source: Pan et al., "Field-aware Calibration" (WWW 2020). Algebraically the classic ECE
    (``ece(p=1, weighting="mass")``) on the same bins; kept under its own name because the
    field-aware papers report it. They write bins as ``[a_k, b_k)``; gpucal uses sklearn's
    right-closed bins everywhere (only a probability exactly on an edge differs). Sorts by ``p``;
    a model that predicts the base rate for every row scores 0.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.
    n_bins : int, default 15
        Number of bins.
    strategy : {"uniform", "quantile"}, default "uniform"
        Equal-width or equal-mass bins (see :func:`ece`).

    Returns
    -------
    float

    Examples
    --------
    >>> round(prob_ece([0, 1, 1, 0], [0.1, 0.8, 0.7, 0.4], n_bins=2), 6)
    0.25
    """
    rows = metric_rows(y_true, y_prob, sample_weight)
    stats = binned_stats(rows, n_bins, strategy)
    return float(np.abs(stats[:, WY] - stats[:, WP]).sum() / stats[:, W].sum())


@validate_params(n_bins=N_BINS, strategy=STRATEGY)
def cal_n(
    y_true: Any, y_prob: Any, *, sample_weight: Any = None, n_bins: int = 10, strategy: str = "quantile"
) -> float:
    r"""Cal-N: root mean square of the per-bin ratio error of predicted over observed positives.

    With :math:`P_b = \sum_{i \in b} w_i p_i`, :math:`Y_b = \sum_{i \in b} w_i y_i` and
    :math:`\mathrm{PCOC}_b = P_b / Y_b`:

    .. math::

        e_b = \begin{cases} \mathrm{PCOC}_b - 1 & \mathrm{PCOC}_b \ge 1 \\
                            1/\mathrm{PCOC}_b - 1 & \mathrm{PCOC}_b < 1 \end{cases}
            = \max\!\Big(\frac{P_b}{Y_b}, \frac{Y_b}{P_b}\Big) - 1,
        \qquad \text{Cal-N} = \sqrt{\frac{1}{B} \sum_b e_b^2}

    Source: Deng et al., "Calibrating User Response Predictions in Online Advertising" (ECML PKDD 2020). The
    papers leave the binning open ("N bins"); gpucal defaults to 10 equal-mass bins. Sorts by ``p``; a
    relative error, so low-rate bins weigh as much as high-rate ones.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.
    n_bins : int, default 10
        Number of bins ``N``.
    strategy : {"uniform", "quantile"}, default "quantile"
        Equal-width or equal-mass bins (see :func:`ece`).

    Returns
    -------
    float
        ``inf`` when some bin has positives but zero predicted mass, or predicted mass but no positive.

    Notes
    -----
    Division by zero: empty bins (zero weight) are skipped and not counted in :math:`B`; a bin with
    :math:`P_b = Y_b = 0` has error 0 (prediction and outcome agree); a bin with exactly one of them zero
    has error ``inf``, and so has Cal-N.
    """
    rows = metric_rows(y_true, y_prob, sample_weight)
    return float(cal_n_per_group(binned_stats(rows, n_bins, strategy)[np.newaxis])[0])


def cal_n_per_group(stats: np.ndarray) -> np.ndarray:
    """Return Cal-N of each group from ``(n_groups, n_bins, 4)`` sums; every group has some weight.

    Bins of zero weight are skipped (not counted in ``N``); an infinite bin error makes the group ``inf``.
    """
    has_weight = stats[:, :, W] > 0
    errors = np.where(has_weight, ratio_error(stats[:, :, WP], stats[:, :, WY]), 0.0)
    return np.sqrt((errors**2).sum(axis=1) / has_weight.sum(axis=1))


@validate_params(p=NORM, weighting=WEIGHTING, max_bins=Interval(int, 1, None, allow_none=True))
def ece_sweep(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    p: float = 1.0,
    weighting: str = "mass",
    max_bins: int | None = None,
) -> float:
    r"""ECE at the largest equal-mass bin count whose bin label means are still monotone.

    For :math:`b = 1, 2, \ldots` the rows are cut into :math:`b` equal-mass bins on ``p`` (as in
    ``ece(strategy="quantile")``); the sweep stops at the first :math:`b` whose non-empty bins' mean
    labels are not non-decreasing, and returns

    .. math::

        \mathrm{ECE}_{\mathrm{sweep}} = \mathrm{ECE}_{b^*}, \qquad
        b^* = \max\{ b : \bar y_1 \le \bar y_2 \le \dots \le \bar y_{b'} \text{ for every } b' \le b \}

    with the l_p norm and bin weighting of :func:`ece`.

    Source: Roelofs et al., "Mitigating bias in calibration error estimation" (AISTATS 2022), cited by
    MBCT Section 2 and used in its Sec. 5.3 with ``p=2``. The sweep stops at the first bin count that
    breaks monotonicity; a larger monotone count past a violation is not searched for (that search would
    cost :math:`O(n^2)`). Sorts by ``p``: the bin count adapts to how much the data can resolve, which
    lowers the bias of a fixed-bin ECE; it still sees nothing along features.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.
    p : float, default 1
        The norm, in ``[1, inf]``.
    weighting : {"mass", "equal"}, default "mass"
        Bin weighting, as in :func:`ece`.
    max_bins : int, optional
        Largest bin count tried; default: the number of rows, or the total weight when larger (integer
        weights count as repeated rows).

    Returns
    -------
    float

    Notes
    -----
    The rows are sorted once; each bin count then costs :math:`O(b \log n)` (bin edges by binary search in
    the weighted CDF, bin sums as differences of prefix sums), not a pass over the rows. Prefix sums
    round differently from the per-bin sums of :func:`ece`, so the two agree to about 1e-12, not bitwise.
    Empty bins (possible with heavy ties) are skipped in the monotonicity check and in the average. The
    sweep stops once every group of tied scores has a bin of its own (a constant prediction stops at one
    bin). Labels that never break monotonicity over distinct scores (perfectly ranked data) make it try
    every count up to ``max_bins``, :math:`O(\text{max\_bins}^2)` in all: set ``max_bins`` for such data.

    Examples
    --------
    >>> round(ece_sweep([0, 1, 1, 0], [0.1, 0.8, 0.7, 0.4]), 6)
    0.25
    """
    table = score_sums(metric_rows(y_true, y_prob, sample_weight))
    n_rows = int(table.stats[:, COUNT].sum())
    zero = np.zeros(1)
    prefix_w, prefix_wp, prefix_wy = (
        np.concatenate([zero, np.cumsum(table.stats[:, j])]) for j in (W, WP, WY)
    )
    # Integer weights count as repeated rows, whose sweep may need as many bins as their number.
    limit = max(n_rows, math.ceil(float(prefix_w[-1]))) if max_bins is None else int(max_bins)
    # Bins start at scores of positive weight only: a score whose rows weigh nothing adds nothing to
    # the bin it falls in, and as a group of its own it would never get a bin (the sweep would try
    # every count up to the limit).
    tie_start = np.flatnonzero(table.stats[:, W] > 0.0)
    return sweep_from_prefix(tie_start, prefix_w, prefix_wp, prefix_wy, limit=limit, p=p, weighting=weighting)


def sweep_from_prefix(
    tie_start: np.ndarray,
    prefix_w: np.ndarray,
    prefix_wp: np.ndarray,
    prefix_wy: np.ndarray,
    *,
    limit: int,
    p: float,
    weighting: str,
) -> float:
    """Run :func:`ece_sweep`'s sweep on prefix sums over rows sorted by ``p`` (``prefix[i]``: rows before i).

    ``tie_start`` holds the first row of every group of tied probabilities. The rows may also be
    groups already summed (one per distinct probability, as the distributed path has them): bins are
    cut only between tie groups, so the bins and their sums are the same.
    """
    below = prefix_w[tie_start]  # weight strictly below each tie group, non-decreasing
    total = float(prefix_w[-1])
    n_rows = prefix_w.shape[0] - 1
    best = _sweep_bins(1, below, tie_start, total, n_rows, prefix_w, prefix_wp, prefix_wy)
    for n_bins in range(2, limit + 1):
        if np.count_nonzero(best[:, 0] > 0) == tie_start.size:
            break  # every tie group has a bin of its own: no bin count can split the rows further
        stats = _sweep_bins(n_bins, below, tie_start, total, n_rows, prefix_w, prefix_wp, prefix_wy)
        kept = stats[stats[:, 0] > 0]
        label_mean = kept[:, 2] / kept[:, 0]
        if np.any(np.diff(label_mean) < 0):
            break
        best = stats
    kept = best[best[:, 0] > 0]
    gap = np.abs(kept[:, 2] - kept[:, 1]) / kept[:, 0]
    return lp_average(gap, kept[:, 0], p, weighting)


def _sweep_bins(
    n_bins: int,
    below: np.ndarray,
    tie_start: np.ndarray,
    total: float,
    n_rows: int,
    prefix_w: np.ndarray,
    prefix_wp: np.ndarray,
    prefix_wy: np.ndarray,
) -> np.ndarray:
    """Return ``(n_bins, 3)`` sums ``w, w*p, w*y`` of the equal-mass bins, from the prefix sums.

    Bin ``k`` starts at the first tie group with ``floor(n_bins * below / total) >= k`` (the bin-id rule of
    ``mass_bin_ids``, its snap to whole positions included); a binary search for ``k * total / n_bins``
    finds it up to rounding, and one step each way on the exact rule settles it.
    """
    k = np.arange(1, n_bins)
    group = np.searchsorted(below, k * (total / n_bins), side="left")
    n_groups = below.shape[0]

    def bin_of(g: np.ndarray) -> np.ndarray:
        positions = mass_positions(below[np.minimum(g, n_groups - 1)], total, n_bins)
        return np.minimum(np.floor(positions), n_bins - 1)

    step_back = (group > 0) & (bin_of(group - 1) >= k)
    group = group - step_back
    step_on = (group < n_groups) & (bin_of(group) < k)
    group = group + step_on
    start_row = np.where(group < n_groups, tie_start[np.minimum(group, n_groups - 1)], n_rows)
    bounds = np.concatenate([[0], start_row, [n_rows]])
    return np.stack([np.diff(prefix[bounds]) for prefix in (prefix_w, prefix_wp, prefix_wy)], axis=1)
