"""The keyed table of distinct scores: what metrics that need the rows sorted by ``p`` sum over rows.

ECCE reads a walk over the rows in score order, the debiased ECE cuts that order into equal-mass bins,
the ICI fits a LOESS on nearest-neighbour windows of it. None of them is a fixed-shape sum, but each is a
function of one table: the distinct scores ``p_j`` in increasing order and, per score, the sums over its
rows ``count_j``, ``sum w``, ``sum w*y`` and ``sum w**2``.

Tables of two sets of rows merge exactly (the union of the keys, sums added), so the table of all rows
is :meth:`gpucal.rows.Rows.reduce` of :func:`block_score_table` with :func:`merge_score_tables`, on one
machine or over dask partitions, up to the order of floating-point additions. Its size is the number of
distinct scores (at most the number of rows).

Ties: every row with the same score is one entry, so a metric read off the table does not depend on the
order of tied rows (the references' argsort does, on ties).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal._validation import check_not_empty
from gpucal.kernels.jit import numba
from gpucal.metrics.inputs import check_partition_rows
from gpucal.rows import RowBlock, as_rows


class ScoreTable(NamedTuple):
    """Distinct scores ``keys`` (increasing) and, per score, ``n_rows``, ``weight`` (``sum w``),
    ``weight_y`` (``sum w*y``) and ``weight_sq`` (``sum w**2``): float64 arrays of one length.

    With unit weights ``n_rows``, ``weight`` and ``weight_sq`` may be one and the same array.
    """

    keys: np.ndarray
    n_rows: np.ndarray
    weight: np.ndarray
    weight_y: np.ndarray
    weight_sq: np.ndarray

    @property
    def residual(self) -> np.ndarray:
        """``sum w*(y - p)`` per score."""
        return self.weight_y - self.keys * self.weight

    def positive(self) -> ScoreTable:
        """Return the table without the scores whose rows all weigh zero (rows that count as absent)."""
        keep = self.weight > 0
        if bool(keep.all()):
            return self
        return ScoreTable(*(column[keep] for column in self))


def _empty_table() -> ScoreTable:
    return ScoreTable(*(np.zeros(0) for _ in range(5)))


def _sorted_binary_unit(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(p, y)`` sorted by ``p`` for 0/1 labels and unit weights, by one integer sort.

    A non-negative float64 orders as its bit pattern, whose top (sign) bit is 0: shifted left once, the
    pattern leaves room for the label in the lowest bit, and a plain sort of ``bits << 1 | y`` (about
    six times faster than an argsort and two gathers) orders the rows by ``p`` and carries ``y`` along.
    """
    keys = (p.view(np.uint64) << np.uint64(1)) | y.astype(np.uint64)
    keys.sort()
    return (keys >> np.uint64(1)).view(np.float64), (keys & np.uint64(1)).astype(np.float64)


def _add_by_key(ids: Any, n_keys: int, values: Any) -> Any:
    """Return the sums of ``values`` per id (ids sorted, ``0..n_keys-1``)."""
    return array_namespace(values).bincount(ids, weights=values, minlength=n_keys)


@numba.njit(cache=True)
def _sorted_key_sums(p, y, w, order):  # pragma: no cover - compiled
    """One pass over the rows in score order (``order``; empty: the rows are sorted already): the
    distinct scores and, per score, the row count and the sums ``w``, ``w y``, ``w**2`` (``w`` empty:
    unit weights, and only the count and ``sum y``). Each sum adds its rows in score order, as
    ``bincount`` over the sorted rows does: the same bits."""
    n = p.shape[0]
    gathered = order.shape[0] > 0
    weighted = w.shape[0] > 0
    keys = np.empty(n)
    count = np.zeros(n)
    weight = np.zeros(n if weighted else 0)
    weight_y = np.zeros(n)
    weight_sq = np.zeros(n if weighted else 0)
    k = -1
    for i in range(n):
        r = order[i] if gathered else i
        x = p[r]
        if k < 0 or x != keys[k]:
            k += 1
            keys[k] = x
        count[k] += 1.0
        if weighted:
            wi = w[r]
            weight[k] += wi
            weight_y[k] += wi * y[r]
            weight_sq[k] += wi * wi
        else:
            weight_y[k] += y[r]
    m = k + 1
    if m == n:
        return keys, count, weight, weight_y, weight_sq
    return keys[:m].copy(), count[:m].copy(), weight[:m].copy(), weight_y[:m].copy(), weight_sq[:m].copy()


def score_table(y: Any, p: Any, w: Any) -> ScoreTable:
    """Return the :class:`ScoreTable` of checked rows (numpy or cupy; ``w`` None: unit weights)."""
    if p.shape[0] == 0:
        return _empty_table()
    if array_namespace(p) is np:
        return _host_score_table(y, p, w)
    return _array_score_table(y, p, w)


def _array_score_table(y: Any, p: Any, w: Any) -> ScoreTable:
    """:func:`score_table` in array code (cupy; numpy for the tests): a stable argsort, the gathers, then
    the sums per distinct score by ``bincount`` over the ids of the sorted rows."""
    xp = array_namespace(p)
    order = xp.argsort(p, kind="stable")
    ps, ys = p[order], y[order]
    ws = None if w is None else w[order]
    first = xp.empty(ps.shape[0], dtype=bool)
    first[0] = True
    xp.not_equal(ps[1:], ps[:-1], out=first[1:])
    if ws is None and bool(first.all()):  # no ties, unit weights: every row is a key of weight 1
        ones = xp.ones(ps.shape[0])
        columns = (ps, ones, ones, ys, ones)
    else:
        ids = xp.cumsum(first) - 1
        m = int(ids[-1]) + 1
        count = xp.bincount(ids, minlength=m).astype(xp.float64)
        if ws is None:
            columns = (ps[first], count, count, _add_by_key(ids, m, ys), count)
        else:
            weight_y, weight_sq = _add_by_key(ids, m, ws * ys), _add_by_key(ids, m, ws * ws)
            columns = (ps[first], count, _add_by_key(ids, m, ws), weight_y, weight_sq)
    return ScoreTable(*(to_numpy(c) for c in columns))


def _host_score_table(y: np.ndarray, p: np.ndarray, w: np.ndarray | None) -> ScoreTable:
    """:func:`score_table` on the host: one sort (of bit patterns, for 0/1 labels and unit weights; else
    a stable argsort), then one compiled pass in score order (:func:`_sorted_key_sums`), where gathers,
    a cumulative sum and a ``bincount`` per column each took a pass of their own (1e7 weighted rows: 3.9 s
    against 2.1 s, 1.5 s of it numpy's stable argsort)."""
    if w is None and bool(((y == 0) | (y == 1)).all()):
        ps, ys = _sorted_binary_unit(p, y)
        if bool((ps[1:] != ps[:-1]).all()):  # no ties: the sorted rows are the table
            ones = np.ones(ps.shape[0])
            return ScoreTable(ps, ones, ones, ys, ones)
        keys, count, _, weight_y, _ = _sorted_key_sums(ps, ys, np.empty(0), np.empty(0, dtype=np.int64))
        return ScoreTable(keys, count, count, weight_y, count)
    order = np.argsort(p, kind="stable")
    if w is None:
        keys, count, _, weight_y, _ = _sorted_key_sums(p, y, np.empty(0), order)
        return ScoreTable(keys, count, count, weight_y, count)
    return ScoreTable(*_sorted_key_sums(p, y, w, order))


def block_score_table(block: RowBlock) -> ScoreTable:
    """Return the :class:`ScoreTable` of one block of rows (``y_true``, ``y_prob``, ``sample_weight``)."""
    rows = check_partition_rows(block["y_true"], block["y_prob"], block["sample_weight"])
    return score_table(rows.y, rows.p, rows.w)


def merge_score_tables(*tables: ScoreTable) -> ScoreTable:
    """Return the table of the union of the tables' rows: keys merged, sums of equal keys added."""
    keys = np.concatenate([t[0] for t in tables])
    if keys.size == 0:
        return _empty_table()
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    first = np.empty(keys.shape[0], dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    ids = np.cumsum(first) - 1
    m = int(ids[-1]) + 1
    sums = [_add_by_key(ids, m, np.concatenate([t[j] for t in tables])[order]) for j in range(1, 5)]
    return ScoreTable(keys[first], *sums)


def table_of(y_true: Any, y_prob: Any, sample_weight: Any) -> ScoreTable:
    """Return the :class:`ScoreTable` of the user's rows (local or dask), checked as every metric checks.

    Rows of zero weight count as absent; an input with no rows, or with no weight, is an error.
    """
    rows = as_rows(y_true=y_true, y_prob=y_prob, sample_weight=sample_weight)
    # The rows may hand back a plain tuple (results are brought to the host field by field).
    table = ScoreTable(*rows.reduce(block_score_table, merge_score_tables))
    check_not_empty(int(table.n_rows.sum()), "y_true")
    if not table.weight.sum() > 0:
        msg = "sample_weight: all weights are zero"
        raise ValueError(msg)
    return table.positive()
