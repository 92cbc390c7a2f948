r"""The integrated calibration index family: Austin & Steyerberg, "The Integrated Calibration Index (ICI) and
related metrics for quantifying the calibration of logistic regression models", Stat. Med. 38 (2019).

Fit the calibration curve :math:`\hat g(p)` by LOESS of ``y`` on ``p`` (local linear, tricube weights on
the ``r = ceil(frac * n)`` nearest rows), then summarise the distances :math:`d_i = |\hat g(p_i) - p_i|`:

.. math::

    \mathrm{ICI} = \frac{\sum_i w_i d_i}{\sum_i w_i}, \qquad E50, E90 = \text{median, 90th percentile of }
    d, \qquad E_{\max} = \max_i d_i

Definitions as ``probcal.metrics`` 0.4 (``ici``, ``e50``, ``e90``, ``emax``) computes them: ``frac=0.75``,
the curve fitted at ``grid_size=512`` equal-count anchors (quantiles of ``p``) and interpolated linearly in
between, tied scores fitted on their mean label, the leftmost window among equally narrow ones. Unweighted,
the values equal probcal's.

Weights count as repeated rows everywhere (the LOESS windows and fits, the anchors, the quantiles), so
integer weights give the values of the repeated rows. probcal instead fits the LOESS unweighted and uses
weights only in the final mean and quantiles, so weighted values differ from probcal's by design.

Everything is read off the table of distinct scores (``gpucal.metrics.score_table``): a LOESS window of
``r`` rows is a run of distinct scores, the first and last possibly cut. It runs the same on one machine and
over dask partitions. The fit costs ``O(anchors * distinct scores in a window)``: one compiled loop per
anchor, in parallel.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpucal._params import Interval, validate_params
from gpucal.kernels.jit import numba
from gpucal.metrics.inputs import check_repeated_rows
from gpucal.metrics.score_table import ScoreTable, table_of

FRAC = Interval(float, 0, 1, closed="right")
GRID_SIZE = Interval(int, 2, None, allow_none=True)
# A local linear fit whose normal equations' determinant is below this is singular (probcal's floor):
# its intercept is then the window's weighted mean.
_SINGULAR = 1e-300


def value_at(cum: np.ndarray, keys: np.ndarray, position: Any) -> Any:
    """Return the score at (0-based) ``position`` of the rows sorted by score, weights counting as repeats."""
    return keys[np.minimum(np.searchsorted(cum, position, side="right"), keys.size - 1)]


def positional_quantile(values: np.ndarray, weight: np.ndarray, q: float) -> float:
    """Return numpy's default (linear) quantile ``q`` of ``values`` repeated ``weight`` times."""
    order = np.argsort(values, kind="stable")
    values, cum = values[order], np.cumsum(weight[order])
    position = q * (cum[-1] - 1.0)
    below = math.floor(position)
    low, high = value_at(cum, values, below), value_at(cum, values, below + 1)
    share = position - below
    return float(low + (high - low) * share)


#: Most rows (total weight) the windows' float64 row positions count one by one.
MAX_ROW_POSITION = 2.0**53


def window_starts(cum: np.ndarray, keys: np.ndarray, anchors: np.ndarray, r: float) -> np.ndarray:
    """Return each anchor's window start: the first row position whose ``r``-row window cannot move right.

    Moving the window ``[s, s + r)`` one row right helps while the row after it is nearer the anchor than its
    first row (``x[s + r] - x0 < x0 - x[s]``); that test turns false once and stays false, so a bisection
    over positions finds the leftmost narrowest window, as probcal's two-pointer walk does.
    """
    total = float(cum[-1])
    limit = max(math.floor(total - r), 0)
    low = np.zeros(anchors.shape, dtype=np.float64)
    high = np.full(anchors.shape, float(limit))
    while True:
        open_ = low < high
        if not open_.any():
            return low
        middle = np.floor((low + high) / 2.0)
        right = value_at(cum, keys, np.minimum(middle + r, total - 1.0))
        advance = (right - anchors) < (anchors - value_at(cum, keys, middle))
        low = np.where(open_ & advance, middle + 1.0, low)
        high = np.where(open_ & ~advance, middle, high)


@numba.njit(cache=True, parallel=True)
def _loess_at(keys, cum, mean_y, anchors, starts, r):  # pragma: no cover - compiled
    # One anchor per iteration: the window is rows [start, start + r) of the sorted rows, i.e. the
    # distinct scores j whose rows [cum[j-1], cum[j]) overlap it, each counted for its overlap.
    out = np.empty(anchors.shape[0])
    for a in numba.prange(anchors.shape[0]):
        x0 = anchors[a]
        s = starts[a]
        e = s + r
        first = np.searchsorted(cum, s, side="right")
        last = min(np.searchsorted(cum, e - 1.0, side="right"), keys.shape[0] - 1)
        h = max(x0 - keys[first], keys[last] - x0)
        sw = 0.0
        swx = 0.0
        swxx = 0.0
        swy = 0.0
        swxy = 0.0
        plain = 0.0
        for j in range(first, last + 1):
            lo = cum[j - 1] if j > 0 else 0.0
            overlap = min(cum[j], e) - max(lo, s)
            if overlap <= 0.0:
                continue
            plain += overlap * mean_y[j]
            if h == 0.0:
                continue
            xc = keys[j] - x0
            u = abs(xc) / h
            tri = max(1.0 - u * u * u, 0.0)
            wt = overlap * tri * tri * tri
            sw += wt
            swx += wt * xc
            swxx += wt * xc * xc
            swy += wt * mean_y[j]
            swxy += wt * xc * mean_y[j]
        if h == 0.0:
            out[a] = plain / r  # every row of the window at the anchor: its mean label
            continue
        det = sw * swxx - swx * swx
        if abs(det) < _SINGULAR:
            out[a] = swy / max(sw, _SINGULAR)
        else:
            out[a] = (swxx * swy - swx * swxy) / det
    return out


def loess_distances(table: ScoreTable, frac: float, grid_size: int | None) -> np.ndarray:
    """Return ``|LOESS(y | p) - p|`` at each distinct score of a table of rows with positive weight."""
    keys = table.keys
    cum = np.cumsum(table.weight)
    total = float(cum[-1])
    r = min(max(float(math.ceil(frac * total)), 2.0), total)
    mean_y = table.weight_y / table.weight
    if grid_size is not None and total > grid_size:
        positions = np.linspace(0.0, 1.0, grid_size) * (total - 1.0)
        below = np.floor(positions)
        low, high = value_at(cum, keys, below), value_at(cum, keys, below + 1.0)
        anchors = np.unique(low + (high - low) * (positions - below))
    else:
        anchors = keys
    starts = window_starts(cum, keys, anchors, r)
    fit = _loess_at(keys, cum, mean_y, anchors, starts, r)
    curve = fit if anchors is keys else np.interp(keys, anchors, fit)
    return np.abs(curve - keys)


def ici_family(
    y_true: Any, y_prob: Any, sample_weight: Any, frac: float, grid_size: int | None
) -> dict[str, float]:
    """Return ``{"ici", "e50", "e90", "emax"}`` off one LOESS fit (one read of the rows)."""
    table = table_of(y_true, y_prob, sample_weight)
    total = float(table.weight.sum())
    check_repeated_rows(total, "the ICI's LOESS", sample_weight is not None)
    if total > MAX_ROW_POSITION:
        # Its windows are row positions, float64 numbers: past 2**53 one more row is no other
        # number, and the window search never ended.
        msg = (
            f"sample_weight: the ICI's LOESS reads weights as repeated rows, and these add up to {total:g}, "
            "more rows than its windows can count (2**53); pass frequencies (counts)"
        )
        raise ValueError(msg)
    d = loess_distances(table, frac, grid_size)
    weight = table.weight
    return {
        "ici": float(np.sum(weight * d) / weight.sum()),
        "e50": positional_quantile(d, weight, 0.5),
        "e90": positional_quantile(d, weight, 0.9),
        "emax": float(d.max()),
    }


_PARAMETERS = """
    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in {0, 1} (soft labels in [0, 1] are read as fractions of a positive).
    y_prob : array-like of shape (n,)
        Predicted probabilities of the positive class.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights, counted as repeated rows (frequencies, not importances: weights
        rescaled to sum to 1 are one row, refused below two); None means 1 for every row.
    frac : float, default=0.75
        Share of the rows in each LOESS window (Austin & Steyerberg's span).
    grid_size : int or None, default=512
        Fit the curve at this many equal-count anchors and interpolate; None fits at every distinct score.
"""


@validate_params(frac=FRAC, grid_size=GRID_SIZE)
def ici(
    y_true: Any, y_prob: Any, *, sample_weight: Any = None, frac: float = 0.75, grid_size: int | None = 512
) -> float:
    r"""Integrated calibration index: the weighted mean of :math:`|\hat g(p_i) - p_i|`, :math:`\hat g` the
    LOESS calibration curve (Austin & Steyerberg, Stat. Med. 2019, Sec. 2). Equal to ``probcal.metrics.ici``
    unweighted. It smooths along ``p`` alone (no bins); see the module docstring.
    """
    return ici_family(y_true, y_prob, sample_weight, frac, grid_size)["ici"]


@validate_params(frac=FRAC, grid_size=GRID_SIZE)
def e50(
    y_true: Any, y_prob: Any, *, sample_weight: Any = None, frac: float = 0.75, grid_size: int | None = 512
) -> float:
    r"""Median of :math:`|\hat g(p_i) - p_i|` over the rows (Austin & Steyerberg 2019). Equal to
    ``probcal.metrics.e50`` unweighted. See :func:`ici`.
    """
    return ici_family(y_true, y_prob, sample_weight, frac, grid_size)["e50"]


@validate_params(frac=FRAC, grid_size=GRID_SIZE)
def e90(
    y_true: Any, y_prob: Any, *, sample_weight: Any = None, frac: float = 0.75, grid_size: int | None = 512
) -> float:
    r"""90th percentile of :math:`|\hat g(p_i) - p_i|` over the rows (Austin & Steyerberg 2019). Equal to
    ``probcal.metrics.e90`` unweighted. See :func:`ici`.
    """
    return ici_family(y_true, y_prob, sample_weight, frac, grid_size)["e90"]


@validate_params(frac=FRAC, grid_size=GRID_SIZE)
def emax(
    y_true: Any, y_prob: Any, *, sample_weight: Any = None, frac: float = 0.75, grid_size: int | None = 512
) -> float:
    r"""Largest :math:`|\hat g(p_i) - p_i|` over the rows of positive weight (Austin & Steyerberg 2019).
    Equal to ``probcal.metrics.emax``. See :func:`ici`.
    """
    return ici_family(y_true, y_prob, sample_weight, frac, grid_size)["emax"]


for _metric in (ici, e50, e90, emax):
    _metric.__doc__ = (_metric.__doc__ or "") + _PARAMETERS
