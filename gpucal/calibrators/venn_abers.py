r"""Venn-Abers calibration: inductive (IVAP) and cross (CVAP), with the fast precomputed tables.

The functional core :func:`venn_abers_tables` turns the sums per distinct calibration score into the
two tables of the fast IVAP; :func:`venn_abers_rows` is the fit over :class:`gpucal.rows.Rows` (one
machine or dask partitions, one pass for every fold); :class:`VennAbersCalibrator` validates, calls
it and stores the tables.
"""

from __future__ import annotations

import functools
import math
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import numpy as np
from sklearn.utils.validation import check_is_fitted

from gpucal._backend import array_namespace, to_numpy
from gpucal.calibrators._sorted import distinct_counts, host_float64, thread_count
from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, Calibrator, Constraint, Interval, Options
from gpucal.calibrators.bins import _first_not_below, _knot_table
from gpucal.calibrators.score_rows import ScoreBlock, read_score_rows
from gpucal.kernels.jit import numba
from gpucal.registry import calibration_method
from gpucal.rows import Rows, row_uniforms
from gpucal.rows.reduce import KeyedTable, check_table_size, group_sorted, max_distinct_keys, merge_tables

# The stream of ``row_uniforms`` that deals the rows to the folds of the cross variant.
FOLD_STREAM = 25
# Clip of the fold-wise probabilities before the geometric means of the cross merge (log of zero).
TINY = 1e-300
# Distinct scores from which the cross predictor's folds are fitted in parallel threads.
PARALLEL_FOLD_KEYS = 1 << 17


@numba.njit(nogil=True, cache=True)
def _query_fit_sweep(c, z):  # pragma: no cover - compiled
    r"""Isotonic fits at a unit-weight query labelled 0 and 1, inserted in every gap ``k = 0 .. m``.

    ``c`` and ``z`` (length ``m + 1``, ``c[0] = z[0] = 0``) are the cumulative weights and weighted
    labels of the ``m`` distinct calibration scores. By the min-max formula of isotonic regression the
    fit at the query in gap ``k`` is

    .. math::

        F(k) = \max_{i \le k} \min_{j \ge k} \frac{z_j - z_i + \ell}{c_j - c_i + 1},

    the slope from :math:`L_i = (c_i - 1, z_i - \ell)` to :math:`R_j = (c_j, z_j)` maximised over the
    left points and minimised over the right ones: the slope of the lower common tangent of the lower
    convex hulls of :math:`\{L_0..L_k\}` and :math:`\{R_k..R_m\}` (the cumulative sum diagram of Vovk
    et al. 2015, section 2). One left-to-right sweep keeps both hulls: the left one grows by one point
    per gap; the right one loses its leftmost point, restored from a journal of the points that point
    hid when the hull was built right to left. The tangent is found by walking down both hulls from
    their inner ends. The hulls do not depend on the label: one sweep gives both labels' fits
    (``out[0]``: label 0, ``out[1]``: label 1).
    """
    m = c.shape[0] - 1
    # The right hull of R_k..R_m, built right to left; the stack's top is its leftmost point.
    right = np.empty(m + 1, dtype=np.int64)
    hidden = np.empty(m + 1, dtype=np.int64)  # journal: the points each push hid, in pop order
    hidden_start = np.zeros(m + 1, dtype=np.int64)
    hidden_end = np.zeros(m + 1, dtype=np.int64)
    n_hidden = 0
    right[0] = m
    top_r = 0
    for k in range(m - 1, -1, -1):
        hidden_start[k] = n_hidden
        while top_r >= 1:
            j1 = right[top_r]
            j2 = right[top_r - 1]
            # j1 stays when it lies strictly below the segment from k to j2.
            if (z[j1] - z[k]) / (c[j1] - c[k]) < (z[j2] - z[j1]) / (c[j2] - c[j1]):
                break
            hidden[n_hidden] = j1
            n_hidden += 1
            top_r -= 1
        hidden_end[k] = n_hidden
        top_r += 1
        right[top_r] = k
    left = np.empty(m + 1, dtype=np.int64)
    left[0] = 0
    top_l = 0
    out = np.empty((2, m + 1))
    for k in range(m + 1):
        for label in range(2):
            a = top_l
            b = top_r
            while True:
                i0 = left[a]
                j0 = right[b]
                tangent = (z[j0] - z[i0] + label) / (c[j0] - c[i0] + 1.0)
                if a > 0:
                    i1 = left[a - 1]
                    if (z[i0] - z[i1]) / (c[i0] - c[i1]) >= tangent:  # the left point before is below
                        a -= 1
                        continue
                if b > 0:
                    j1 = right[b - 1]
                    if (z[j1] - z[j0]) / (c[j1] - c[j0]) <= tangent:  # the right point after is below
                        b -= 1
                        continue
                break
            out[label, k] = tangent
        if k == m:
            break
        # Drop R_k (the right hull's top) and bring back, last hidden first, what it hid.
        top_r -= 1
        for h in range(hidden_end[k] - 1, hidden_start[k] - 1, -1):
            top_r += 1
            right[top_r] = hidden[h]
        # Add L_{k+1} to the left hull.
        i = k + 1
        while top_l >= 1:
            i1 = left[top_l]
            i2 = left[top_l - 1]
            if (z[i1] - z[i2]) / (c[i1] - c[i2]) < (z[i] - z[i1]) / (c[i] - c[i1]):
                break
            top_l -= 1
        top_l += 1
        left[top_l] = i
    return out


@numba.njit(cache=True, inline="always")
def _position(scores, table, inv_h, v):  # pragma: no cover - compiled
    """Return ``(#{scores < v}, 1 if v is one of the scores else 0)`` (``scores`` strictly increasing).

    A table of score indices over equal cells (``bins._knot_table``) brackets the position, so the
    binary search runs over the few scores of three cells instead of all of them.
    """
    m = scores.shape[0]
    x0 = scores[0]
    if v < x0:
        return 0, 0
    if v > scores[m - 1]:
        return m, 0
    n_cells = table.shape[0] - 1
    g = min(max(int((v - x0) * inv_h), 0), n_cells - 1)
    lo = table[max(g - 1, 0)]
    hi = min(table[min(g + 2, n_cells)] + 1, m - 1)
    below = _first_not_below(scores, lo, hi + 1, v)
    return below, 1 if scores[below] == v else 0


@numba.njit(parallel=True, cache=True)
def _read_tables(s, scores, f0, f1, table, inv_h, p0, p1):  # pragma: no cover - compiled
    """``p0[i] = f0[#{scores <= s_i}]`` and ``p1[i] = f1[#{scores < s_i}]`` (``scores`` strictly increasing),
    the position found by :func:`_position`."""
    for i in numba.prange(s.shape[0]):
        below, equal = _position(scores, table, inv_h, s[i])
        p0[i] = f0[below + equal]
        p1[i] = f1[below]


@numba.njit(cache=True)
def _union_tables(scores, sizes, log_f1, log_1mf0, f0, f1, interval):  # pragma: no cover - compiled
    """The cross predictor's output for every position of a query among the folds' distinct scores.

    The union of the folds' distinct scores (``union``, ``M`` entries) is merged from the folds'
    increasing lists. A query is in class ``2 j`` (strictly between ``union[j - 1]`` and ``union[j]``)
    or ``2 j + 1`` (equal to ``union[j]``), and in each class every fold's pair is fixed:
    ``p0 = F0[#{scores <= s}]``, ``p1 = F1[#{scores < s}]``. Returns ``union`` and per class the merged
    probability from the folds' logs (``log_f1``, ``log_1mf0``; shape (1, 2 M + 1)), or with
    ``interval`` the envelope ``min p0``, ``max p1`` (shape (2, 2 M + 1)).
    """
    n_folds = sizes.shape[0]
    total = 0
    for k in range(n_folds):
        total += sizes[k]
    union = np.empty(total)
    out = np.empty((2 if interval else 1, 2 * total + 1))
    below = np.zeros(n_folds, dtype=np.int64)  # per fold: #{scores < the current union score}
    score_start = np.zeros(n_folds, dtype=np.int64)
    table_start = np.zeros(n_folds, dtype=np.int64)
    for k in range(1, n_folds):
        score_start[k] = score_start[k - 1] + sizes[k - 1]
        table_start[k] = table_start[k - 1] + sizes[k - 1] + 1
    m = 0
    while True:
        # The next union score: the least of the folds' next scores (inf when all are used up).
        u = np.inf
        for k in range(n_folds):
            if below[k] < sizes[k]:
                u = min(u, scores[score_start[k] + below[k]])
        last = u == np.inf
        for equal in range(1 if last else 2):
            sum1 = 0.0
            sum0 = 0.0
            lo = 1.0
            hi = 0.0
            for k in range(n_folds):
                lt = below[k]
                le = lt
                if equal == 1 and lt < sizes[k] and scores[score_start[k] + lt] == u:
                    le = lt + 1
                if interval:
                    lo = min(lo, f0[table_start[k] + le])
                    hi = max(hi, f1[table_start[k] + lt])
                else:
                    sum1 += log_f1[table_start[k] + lt]
                    sum0 += log_1mf0[table_start[k] + le]
            c = 2 * m + equal
            if interval:
                out[0, c] = lo
                out[1, c] = hi
            else:
                g1 = math.exp(sum1 / n_folds)
                out[0, c] = g1 / (math.exp(sum0 / n_folds) + g1)
        if last:
            break
        union[m] = u
        m += 1
        for k in range(n_folds):
            if below[k] < sizes[k] and scores[score_start[k] + below[k]] == u:
                below[k] += 1
    return union[:m], out[:, : 2 * m + 1]


@numba.njit(parallel=True, cache=True)
def _read_classes(s, union, table, inv_h, values, out):  # pragma: no cover - compiled
    """``out[r, i] = values[r, class of s_i]``: ``2 j`` strictly below ``union[j]`` (and above
    ``union[j - 1]``), ``2 j + 1`` equal to ``union[j]``; the position found by :func:`_position`."""
    for i in numba.prange(s.shape[0]):
        below, equal = _position(union, table, inv_h, s[i])
        c = 2 * below + equal
        for r in range(values.shape[0]):
            out[r, i] = values[r, c]


def venn_abers_tables(weight: np.ndarray, weighted_y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two tables of the fast IVAP from the sums per distinct calibration score (increasing order).

    Parameters
    ----------
    weight, weighted_y : numpy.ndarray of shape (m,)
        :math:`\\sum w` (positive) and :math:`\\sum w y` of the rows at each distinct calibration score.

    Returns
    -------
    F0, F1 : numpy.ndarray of shape (m + 1,)
        Entry ``k``: the isotonic fit at a unit-weight query labelled 0 (``F0``) or 1 (``F1``) whose
        score lies between the ``k``-th and the ``k + 1``-th distinct calibration score. Both are
        non-decreasing, ``F0 <= F1``, in [0, 1].
    """
    c = np.concatenate([[0.0], np.cumsum(weight)])
    z = np.concatenate([[0.0], np.cumsum(weighted_y)])
    if not (np.diff(c) > 0).all():
        # The hulls' slopes divide by gaps in c: a weight below the float spacing of the weight
        # before it (about 1e-16 of it) adds nothing to the sum, and the gap is zero.
        msg = (
            "sample_weight: a score's weight is lost in the sum of the weights before it (weights "
            "spanning about 16 orders of magnitude or more); Venn-Abers needs every weight to count"
        )
        raise ValueError(msg)
    f0, f1 = np.clip(_query_fit_sweep(c, z), 0.0, 1.0)
    return f0, f1


def venn_abers_folds(n: int, n_folds: int, seed: int, row_offset: int = 0) -> np.ndarray:
    """The fold (0 .. ``n_folds`` - 1) of rows ``row_offset .. row_offset + n - 1``.

    Row :math:`r` goes to fold :math:`\\lfloor K u_r \\rfloor` with :math:`u_r` its counter-based uniform
    (:func:`gpucal.rows.row_uniforms`), so a row's fold depends only on its global index and the seed:
    the same on one machine and over any partitioning.
    """
    u = row_uniforms(seed, FOLD_STREAM, np.arange(row_offset, row_offset + n))
    return np.minimum((u * n_folds).astype(np.int64), n_folds - 1)


def block_fold_groups(
    block: ScoreBlock, n_folds: int, seed: int, limit: int, *, row_offset: int
) -> KeyedTable:
    """Sums ``w`` and ``w*y`` per distinct score and fold of one block's rows of positive weight.

    The table's key is the score; its ``2 * n_folds`` columns are the folds' weights, then the folds'
    weighted labels (one fold of every row when ``n_folds`` is 1). With one fold, unit weights and 0/1
    labels on the host the sums are counts: two ``numpy.sort`` calls (scores, positives' scores) and a
    merge give them exactly, without an ``argsort`` and its gathers.
    """
    xp = array_namespace(block.score)
    one_fold = n_folds == 1 and xp is np and len(block) > 0
    sums = distinct_counts(block.score, block.y, block.w) if one_fold else None
    if sums is not None:
        distinct, counts, hits = sums
        check_table_size(int(distinct.shape[0]), limit, "distinct-score table")
        return KeyedTable((distinct,), np.column_stack([counts, hits]))
    fold = xp.asarray(venn_abers_folds(len(block), n_folds, seed, row_offset)) if n_folds > 1 else None
    keep = block.w > 0
    x, y, w = block.score[keep], block.y[keep], block.w[keep]
    if fold is None:
        keys, stats = group_sorted((x,), xp.stack([w, w * y], axis=1), xp)
        check_table_size(int(stats.shape[0]), limit, "distinct-score table")
        return KeyedTable(tuple(to_numpy(k) for k in keys), to_numpy(stats))
    order = xp.argsort(x)
    xs = x[order]
    new = xp.ones(xs.shape[0], dtype=bool)
    new[1:] = xs[1:] != xs[:-1]
    n_keys = int(new.sum())
    check_table_size(n_keys, limit, "distinct-score table")
    cell = fold[keep][order] * n_keys + (xp.cumsum(new) - 1)
    size = n_folds * n_keys
    stats = xp.concatenate(
        [
            xp.bincount(cell, weights=w[order], minlength=size).reshape(n_folds, n_keys),
            xp.bincount(cell, weights=(w * y)[order], minlength=size).reshape(n_folds, n_keys),
        ]
    ).T
    return KeyedTable((to_numpy(xs[new]),), to_numpy(xp.ascontiguousarray(stats)))


def _merge(*tables: KeyedTable, limit: int) -> KeyedTable:
    return merge_tables(*tables, limit=limit, what="distinct-score table")


def venn_abers_rows(
    rows: Rows, n_folds: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fit the IVAP (``n_folds`` 1) or the CVAP's fold-wise IVAPs over checked rows (:class:`ScoreBlock`).

    One pass sums ``w`` and ``w*y`` per distinct score and fold (:func:`block_fold_groups`, merged by
    key over blocks); fold :math:`k`'s IVAP is fitted on the sums of the other folds, with the distinct
    scores of positive weight there.

    Returns
    -------
    scores, F0, F1, sizes : numpy.ndarray
        The folds' distinct scores, ``F0`` and ``F1`` tables, concatenated in fold order; ``sizes[k]``
        is fold ``k``'s number of distinct scores (its tables have one entry more).
    """
    limit = sys.maxsize if rows.n_blocks == 1 else max_distinct_keys()
    combine = functools.partial(_merge, limit=limit)
    table: KeyedTable = rows.reduce(block_fold_groups, combine, n_folds, seed, limit, offsets=True)
    keys, stats = table.keys[0], np.ascontiguousarray(table.stats.T)  # one row per fold and sum
    w_all, wy_all = stats[:n_folds].sum(axis=0), stats[n_folds:].sum(axis=0)

    def fold_tables(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w, wy = (w_all, wy_all) if n_folds == 1 else (w_all - stats[k], wy_all - stats[n_folds + k])
        kept = w > 0
        if not kept.any():
            msg = f"fold {k} of {n_folds}: the other folds hold no row of positive weight; use fewer folds"
            raise ValueError(msg)
        return (keys[kept], *venn_abers_tables(w[kept], wy[kept]))

    # The folds' sweeps are independent (the sweep releases the GIL): one thread each, up to numba's
    # thread count, on large tables.
    n_threads = min(n_folds, thread_count()) if keys.shape[0] >= PARALLEL_FOLD_KEYS else 1
    if n_threads > 1:
        with ThreadPoolExecutor(max_workers=n_threads) as pool:
            folds = list(pool.map(fold_tables, range(n_folds)))
    else:
        folds = [fold_tables(k) for k in range(n_folds)]
    scores, f0s, f1s = zip(*folds, strict=True)
    sizes = np.asarray([fold[0].shape[0] for fold in folds], dtype=np.int64)
    return np.concatenate(scores), np.concatenate(f0s), np.concatenate(f1s), sizes


@calibration_method("venn_abers", fits_on_dask=True)
class VennAbersCalibrator(Calibrator):
    r"""Venn-Abers calibration: the inductive (IVAP, Vovk & Petej 2014) or cross (CVAP) predictor.

    For a test score :math:`s`, add it to the calibration set once with label 0 and once with label 1,
    fit isotonic regression to each augmented set and read the fits at :math:`s`: :math:`p_0 \le p_1`
    (``predict_interval``). One of the two is the fit of the true label, which is what makes the pair
    valid (a multiprobability prediction). ``predict`` returns the merged probability

    .. math::

        p = \frac{p_1}{1 - p_0 + p_1},

    the minimiser of the worst-case log-loss over the two (Vovk & Petej 2014, section 4). The cross
    variant (``n_folds=K``) fits one IVAP per fold on the other folds' rows and merges the folds'
    pairs by the geometric means (Vovk et al. 2015, section 4):

    .. math::

        p = \frac{G(p_1)}{G(1 - p_0) + G(p_1)}, \qquad
        G(a) = \Bigl(\prod_{k=1}^{K} a_k\Bigr)^{1/K}.

    Parameters
    ----------
    n_folds : int >= 2 or None, default=None
        None: the inductive predictor on all rows. An integer: the cross predictor with that many
        folds.
    random_state : int, default=0
        Seed of the folds of the cross predictor (row :math:`r` goes to fold
        :math:`\lfloor K u_r \rfloor`, :math:`u_r` its counter-based uniform: the same folds on one
        machine and on any partitioning of the rows).
    score_col : str, default="score"
        Column of the scores when ``X`` is a dataframe.
    score_kind : {"probability", "logit"}, default="probability"
        Probabilities in [0, 1] or raw margins; the fit reads only their order.
    output_type : str, default="input"
        Family of the returned array (see ``gpucal._frames``).

    Attributes
    ----------
    scores_ : numpy.ndarray of shape (sum(fold_sizes_),)
        Each fold's distinct calibration scores (of positive weight), increasing, folds in order.
    F0_, F1_ : numpy.ndarray of shape (sum(fold_sizes_) + n_folds,)
        Each fold's tables: entry ``k`` is the fit at a test score labelled 0 (``F0_``) or 1
        (``F1_``) lying between its ``k``-th and ``k + 1``-th distinct score.
    fold_sizes_ : numpy.ndarray of int64, shape (n_folds,) or (1,)
        Number of distinct scores of each fold (one entry for the inductive predictor).

    Notes
    -----
    *The fast IVAP.* The naive algorithm runs two isotonic regressions per test score. Here both fits
    are computed once for every gap between distinct calibration scores (Vovk et al. 2015, section
    2): the fit at a query in gap :math:`k` is the slope of the lower common tangent of two convex
    hulls on the cumulative sum diagram, and one sweep over the gaps keeps both hulls, O(m) after the
    sort of the scores. Prediction reads both tables at the score's position among the distinct
    calibration scores (a cell table, then a short binary search; parallel over rows).

    *Ties.* Equal calibration scores are one point of the diagram (their weights added); a test score
    equal to a calibration score joins that point, which gives the fit of the gap after it for label
    0 and of the gap before it for label 1. So the output does not depend on row order, and integer
    weights give what repeating rows gives. This is the rule of the ``venn-abers`` package and of
    probcal (tested equal to both, with ties, to 1e-12). Only exactly equal scores are tied (isotonic
    regression in :class:`IsotonicCalibrator` also pools scores within 1e-15).

    *Weights.* The calibration rows enter with their weights; the test score with weight 1 (as in
    probcal). Rows of zero weight are dropped.

    *Cross folds.* Folds are drawn per row, not stratified, so their sizes vary by a few rows; the
    reference libraries deal stratified folds with their own generators. ``predict_interval`` of the
    cross predictor is the envelope of the folds' pairs, ``[min_k p0_k, max_k p1_k]`` (probcal's
    choice; the paper defines only the merged probability). Every fold's pair, and so the merged
    output, is constant between consecutive scores of the union of the folds' distinct scores and at
    each of them: prediction tabulates the output once per such position (one merge of the folds'
    lists) and reads it with one search per row, not one per fold. The folds' sweeps run in threads.

    *One class.* With labels of one class the fit is still defined and no error is raised: all labels 0
    give :math:`p_0 = 0` and :math:`p_1 = 1 / (1 + W_{\ge s})`, :math:`W_{\ge s}` the weight of the
    calibration rows at scores :math:`\ge s` (all labels 1: the mirror image).

    References
    ----------
    .. [1] V. Vovk, I. Petej, "Venn-Abers predictors", Proc. UAI 2014, 829-838.
    .. [2] V. Vovk, I. Petej, V. Fedorova, "Large-scale probabilistic predictors with and without
       guarantees of validity", Proc. NeurIPS 2015, 892-900 (the fast IVAP, section 2, and CVAP).

    Examples
    --------
    >>> import numpy as np
    >>> from gpucal.calibrators.venn_abers import VennAbersCalibrator
    >>> cal = VennAbersCalibrator().fit(np.array([0.1, 0.3, 0.35, 0.8]), np.array([0, 1, 0, 1]))
    >>> cal.predict_interval(np.array([0.5])).round(3).tolist()
    [[0.333, 1.0]]
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_folds": Interval(int, 2, None, allow_none=True),
        "random_state": Interval(int, 0, None),
        "score_kind": Options("probability", "logit"),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {
        "scores_": "float_array",
        "F0_": "float_array",
        "F1_": "float_array",
        "fold_sizes_": "int_array",
    }

    def __init__(
        self,
        *,
        n_folds: int | None = None,
        random_state: int = 0,
        score_col: str = "score",
        score_kind: str = "probability",
        output_type: str = "input",
    ) -> None:
        self.n_folds = n_folds
        self.random_state = random_state
        self.score_col = score_col
        self.score_kind = score_kind
        self.output_type = output_type

    def _fit(self, rows: Rows) -> None:
        blocks = read_score_rows(rows, self.score_col, self.score_kind)
        n_folds = 1 if self.n_folds is None else self.n_folds
        self.scores_, self.F0_, self.F1_, self.fold_sizes_ = venn_abers_rows(
            blocks, n_folds, self.random_state
        )

    def _fold_pairs(self, score: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(p0, p1)`` of every fold: arrays of shape (n_folds, n)."""
        s = host_float64(score)
        sizes = self.fold_sizes_
        p0 = np.empty((sizes.shape[0], s.shape[0]))
        p1 = np.empty((sizes.shape[0], s.shape[0]))
        start = 0
        for k, size in enumerate(sizes.tolist()):
            scores = np.ascontiguousarray(self.scores_[start : start + size])
            tables = slice(start + k, start + k + size + 1)
            cells, inv_h = _knot_table(scores)
            f0 = np.ascontiguousarray(self.F0_[tables])
            f1 = np.ascontiguousarray(self.F1_[tables])
            _read_tables(s, scores, f0, f1, cells, inv_h, p0[k], p1[k])
            start += size
        return p0, p1

    def _cross_read(self, score: Any, *, interval: bool) -> np.ndarray:
        """The cross predictor's merged probability (shape (1, n)) or envelope (shape (2, n)).

        Rather than each fold's tables per row (one search per fold), the output is tabulated once per
        position among every fold's distinct scores (:func:`_union_tables`), then read with one search.
        """
        s = host_float64(score)
        f0, f1 = self.F0_, self.F1_
        log_f1 = np.log(np.maximum(f1, TINY))
        log_1mf0 = np.log(np.maximum(1.0 - f0, TINY))
        union, values = _union_tables(self.scores_, self.fold_sizes_, log_f1, log_1mf0, f0, f1, interval)
        cells, inv_h = _knot_table(union)
        out = np.empty((values.shape[0], s.shape[0]))
        _read_classes(s, union, cells, inv_h, values, out)
        return out

    def _predict_scores(self, score: Any) -> Any:
        xp = array_namespace(score)
        if self.fold_sizes_.shape[0] > 1:
            return xp.asarray(self._cross_read(score, interval=False)[0])
        p0, p1 = self._fold_pairs(score)
        return xp.asarray(p1[0] / (1.0 - p0[0] + p1[0]))

    def predict_interval(self, X: Any) -> Any:
        """Return the pairs ``[p0, p1]`` of ``X``'s scores: an array of shape (n, 2).

        The inductive predictor's pair, or for the cross predictor the envelope of the folds' pairs
        (``[min_k p0_k, max_k p1_k]``). A numpy array, or a cupy array for cupy input.
        """
        check_is_fitted(self, list(self._state_spec))
        score = self._parse_input(X, allow_empty=True).score
        if self.fold_sizes_.shape[0] > 1:
            return array_namespace(score).asarray(self._cross_read(score, interval=True).T)
        p0, p1 = self._fold_pairs(score)
        return array_namespace(score).asarray(np.column_stack([p0[0], p1[0]]))

    def _check_state(self) -> None:
        """Raise ``ValueError`` unless the tables fit the fold sizes and are monotone in [0, 1]."""
        sizes, scores, f0, f1 = self.fold_sizes_, self.scores_, self.F0_, self.F1_
        n_folds = 1 if self.n_folds is None else self.n_folds
        if sizes.shape[0] != n_folds or np.any(sizes < 1):
            msg = f"fold_sizes_ must hold {n_folds} positive sizes, got {sizes.tolist()[:10]}"
            raise ValueError(msg)
        total = int(sizes.sum())
        if scores.shape[0] != total or f0.shape[0] != total + n_folds or f1.shape[0] != total + n_folds:
            msg = (
                f"scores_, F0_, F1_ have {scores.shape[0]}, {f0.shape[0]}, {f1.shape[0]} entries; "
                f"fold_sizes_ needs {total}, {total + n_folds}, {total + n_folds}"
            )
            raise ValueError(msg)
        if np.any(f0 < 0) or np.any(f1 > 1) or np.any(f0 > f1):
            msg = "F0_ and F1_ must lie in [0, 1] with F0_ <= F1_"
            raise ValueError(msg)
        start = 0
        for k, size in enumerate(sizes.tolist()):
            tables = slice(start + k, start + k + size + 1)
            if np.any(np.diff(scores[start : start + size]) <= 0):
                msg = f"scores_ of fold {k} must be strictly increasing"
                raise ValueError(msg)
            if np.any(np.diff(f0[tables]) < 0) or np.any(np.diff(f1[tables]) < 0):
                msg = f"F0_ and F1_ of fold {k} must be non-decreasing"
                raise ValueError(msg)
            start += size
