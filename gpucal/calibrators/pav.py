r"""Pool-adjacent-violators on aggregated statistics: weighted, increasing, with scikit-learn's ties.

Weighted isotonic regression of the labels on the score solves

.. math::

    \min_{v_1 \le v_2 \le \dots \le v_k} \sum_{j=1}^{k} W_j (\bar y_j - v_j)^2,
    \qquad W_j = \sum_{i \in G_j} w_i, \quad \bar y_j = \frac{1}{W_j} \sum_{i \in G_j} w_i y_i,

over the groups :math:`G_1, \dots, G_k` of tied scores in increasing order: only the per-group sums
:math:`W_j` and :math:`\sum w_i y_i` enter, so the same fit runs on sums from any backend. The
solution is piecewise constant on *blocks* of consecutive groups; pool-adjacent-violators (Ayer et
al. 1955; Best & Chakravarti 1990, section 3) finds them in one left-to-right pass: push each group
as a block, and while the block before has a mean at least as large, pool the two.

Ties follow scikit-learn's ``_make_unique`` exactly: rows with zero weight are dropped; rows are
visited in score order, and a row joins the current group while its score is less than
``TIE_EPS = np.finfo(np.float64).resolution`` (1e-15) above the group's *first* score, which is
the score the group keeps. Pooling equal means (``>=``) rather than only violators changes no value;
it only makes adjacent blocks strictly increasing.

Each block carries five sums (:data:`SUM_W`, :data:`SUM_WY`, :data:`SUM_WX`, :data:`X_FIRST`,
:data:`X_LAST`, laid out by ``gpucal.kernels.pav_walk``); the block's fitted value is
``SUM_WY / SUM_W`` and its weighted mean score ``SUM_WX / SUM_W`` (used by the rank-preserving
interpolation and by SIR).

Sorted rows may be walked in chunks, each from the start of a tie group, and the chunks' blocks then
pooled in order (:func:`pool_chunk_blocks`): the host does so in threads, the GPU in a thread per chunk
(``gpucal.kernels.pav_chunks``).

References
----------
.. [1] M. Ayer, H. D. Brunk, G. M. Ewing, W. T. Reid, E. Silverman, "An empirical distribution
   function for sampling with incomplete information", Annals of Mathematical Statistics 26(4),
   641-647, 1955.
.. [2] M. J. Best, N. Chakravarti, "Active set algorithms for isotonic regression; a unifying
   framework", Mathematical Programming 47, 425-439, 1990.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal.calibrators._sorted import (
    next_row,
    open_cursor,
    sorted_positives,
    sorted_runs,
    thread_count,
    tie_group_cuts,
)
from gpucal.kernels.jit import numba
from gpucal.kernels.pav_chunks import DEVICE_CHUNK_ROWS, chunk_blocks, chunk_bounds, compact_chunk_blocks
from gpucal.kernels.pav_walk import N_BLOCK_STATS, SUM_W, SUM_WX, SUM_WY, X_FIRST, X_LAST
from gpucal.kernels.value_range import value_range

# scikit-learn's tie tolerance in _make_unique (float64): scores closer than this to a group's first
# score belong to the group.
TIE_EPS = float(np.finfo(np.float64).resolution)

# Blocks allocated at first; the stack doubles when full (binary labels rarely need more).
INITIAL_BLOCKS = 1024
#: Sorted rows per chunk of the host's chunked walks, about. The counting path's chunks depend on the
#: rows only (:func:`~gpucal.kernels.pav_chunks.chunk_bounds`), so its sums are the same on every
#: machine; the argsort path's on its sorted runs too (:func:`~gpucal.calibrators._sorted.tie_group_cuts`).
WALK_CHUNK_ROWS = 1 << 18


# Inlined: a call per pushed group, returning the stack, cost the walks about 40% of their time.
@numba.njit(cache=True, inline="always")
def _push_block(blocks, top, sw, swy, swx, x_first, x_last):  # pragma: no cover - compiled
    """Push one group as a block on the stack ``blocks[:top + 1]`` and pool violators.

    Returns ``(blocks, top)``: ``blocks`` is a new, larger array when the stack was full.
    """
    top += 1
    if top == blocks.shape[0]:
        grown = np.empty((2 * blocks.shape[0], N_BLOCK_STATS))
        # Element by element: an array assigned to a slice compiles numba's shape-mismatch message.
        for b in range(top):
            for s in range(N_BLOCK_STATS):
                grown[b, s] = blocks[b, s]
        blocks = grown
    blocks[top, SUM_W] = sw
    blocks[top, SUM_WY] = swy
    blocks[top, SUM_WX] = swx
    blocks[top, X_FIRST] = x_first
    blocks[top, X_LAST] = x_last
    return blocks, _pool_top(blocks, top)


@numba.njit(cache=True, inline="always")
def _pool_top(blocks, top):  # pragma: no cover - compiled
    """Pool the top block into the one before while that one is not below it (its mean >= this
    mean); return the new top."""
    while (
        top > 0
        and blocks[top - 1, SUM_WY] / blocks[top - 1, SUM_W] >= blocks[top, SUM_WY] / blocks[top, SUM_W]
    ):
        blocks[top - 1, SUM_W] += blocks[top, SUM_W]
        blocks[top - 1, SUM_WY] += blocks[top, SUM_WY]
        blocks[top - 1, SUM_WX] += blocks[top, SUM_WX]
        blocks[top - 1, X_LAST] = blocks[top, X_LAST]
        top -= 1
    return top


@numba.njit(cache=True, nogil=True)
def _isotonic_walk(score, y, w, order, starts, stops, tie_eps):  # pragma: no cover - compiled
    """Group tied scores (scikit-learn's rule) in merged order of the runs' rows
    ``order[starts[r]:stops[r]]`` and pool them: one pass."""
    heads, ends, buf, fill, pos = open_cursor(starts, stops)
    blocks = np.empty((INITIAL_BLOCKS, N_BLOCK_STATS))
    top = np.int64(-1)  # int64, not the literal -1: the stack top keeps one type through the walk
    n = np.sum(stops - starts)
    have_group = False
    g_x = 0.0
    g_w = 0.0
    g_wy = 0.0
    for _ in range(n):
        x, yi, wi = next_row(score, y, w, order, heads, ends, buf, fill, pos)
        if wi <= 0.0:  # scikit-learn drops zero-weight rows before anything else
            continue
        if have_group and x - g_x < tie_eps:
            g_w += wi
            g_wy += wi * yi
            continue
        if have_group:
            blocks, top = _push_block(blocks, top, g_w, g_wy, g_w * g_x, g_x, g_x)
        have_group = True
        g_x = x
        g_w = wi
        g_wy = wi * yi
    if have_group:
        blocks, top = _push_block(blocks, top, g_w, g_wy, g_w * g_x, g_x, g_x)
    return blocks[: top + 1].copy()


@numba.njit(cache=True, nogil=True)
def _isotonic_counts(xs, positives, tie_eps):  # pragma: no cover - compiled
    """:func:`_isotonic_walk` for unit weights and 0/1 labels, from sorted scores and sorted positives.

    A group's weight is its row count; its positives are the entries of ``positives`` up to the
    group's last score (``positives`` is a sub-multiset of ``xs``, so the merge walk is exact).
    """
    blocks = np.empty((INITIAL_BLOCKS, N_BLOCK_STATS))
    top = np.int64(-1)  # int64, not the literal -1: the stack top keeps one type through the walk
    n = xs.shape[0]
    n_pos = positives.shape[0]
    i = 0
    j = 0
    while i < n:
        g_x = xs[i]
        k = i + 1
        while k < n and xs[k] - g_x < tie_eps:
            k += 1
        last = xs[k - 1]
        j0 = j
        while j < n_pos and positives[j] <= last:
            j += 1
        count = float(k - i)
        if j == j0 and top >= 0:
            # A group of negatives has mean 0, so _push_block would pool it into the top block at
            # once: add it there directly (the same additions), then pool as _push_block does.
            blocks[top, SUM_W] += count
            blocks[top, SUM_WX] += count * g_x
            blocks[top, X_LAST] = g_x
            top = _pool_top(blocks, top)
        else:
            blocks, top = _push_block(blocks, top, count, float(j - j0), count * g_x, g_x, g_x)
        i = k
    return blocks[: top + 1].copy()


@numba.njit(cache=True, nogil=True)
def _isotonic_distinct(xs, positives, tie_eps):  # pragma: no cover - compiled
    """:func:`_isotonic_counts` with each run of label-0 rows between two positives added to the top
    block at once; an empty array where a tie (scores closer than ``tie_eps``) would make a difference.

    The walk touches each label-0 row once, to compare it with the next positive score and add it.
    A tie changes nothing inside a run of label-0 rows (the run's groups all go to the top block)
    unless it joins a positive to its neighbour or moves the score that starts the run's last group:
    the walk checks the gaps at those places. The blocks are
    then those of :func:`_isotonic_counts` but for the rounding of their score sums (``SUM_WX``):
    pool-adjacent-violators gives the unique isotonic fit pooled into maximal runs of equal values
    whatever the order of the additions and the pooling, and every sum it compares is a count, exact
    in float64.
    """
    n = xs.shape[0]
    m = positives.shape[0]
    blocks = np.empty((INITIAL_BLOCKS, N_BLOCK_STATS))
    top = np.int64(-1)  # int64, not the literal -1: the stack top keeps one type through the walk
    start = 0  # first row of the pending run of label-0 rows
    for j in range(m + 1):
        # The run ends at the first row of the next positive's score (every positive score is in xs).
        bound = positives[j] if j < m else np.inf
        stop = start
        sum_x = 0.0
        while stop < n and xs[stop] < bound:
            sum_x += xs[stop]
            stop += 1
        if (
            (start > 0 and start < n and xs[start] - xs[start - 1] < tie_eps)
            or (stop < n and stop > 0 and xs[stop] - xs[stop - 1] < tie_eps)
            or (stop - 1 > start and xs[stop - 1] - xs[stop - 2] < tie_eps)
        ):
            return np.empty((0, N_BLOCK_STATS))
        if stop > start:
            rows = float(stop - start)
            if top < 0:
                blocks, top = _push_block(blocks, top, rows, 0.0, sum_x, xs[start], xs[stop - 1])
            else:
                blocks[top, SUM_W] += rows
                blocks[top, SUM_WX] += sum_x
                blocks[top, X_LAST] = xs[stop - 1]
                top = _pool_top(blocks, top)
        if j < m:
            x = positives[j]
            blocks, top = _push_block(blocks, top, 1.0, 1.0, x, x, x)
            start = stop + 1
    return blocks[: top + 1].copy()


@numba.njit(cache=True)
def _pool_groups(stats):  # pragma: no cover - compiled
    """Pool-adjacent-violators over already aggregated groups ``stats`` (rows in score order)."""
    blocks = np.empty((max(stats.shape[0], 1), N_BLOCK_STATS))
    top = np.int64(-1)  # int64, not the literal -1: the stack top keeps one type through the walk
    for j in range(stats.shape[0]):
        if stats[j, SUM_W] <= 0.0:
            continue
        blocks, top = _push_block(
            blocks,
            top,
            stats[j, SUM_W],
            stats[j, SUM_WY],
            stats[j, SUM_WX],
            stats[j, X_FIRST],
            stats[j, X_LAST],
        )
    return blocks[: top + 1].copy()


def walk_in_chunks(n_chunks: int, walk: Callable[[int], np.ndarray]) -> list[np.ndarray]:
    """``[walk(0), ..., walk(n_chunks - 1)]``, the block sums of each chunk of sorted rows
    (:func:`~gpucal.kernels.pav_chunks.chunk_bounds`), computed in numba's threads (``walk`` calls a
    compiled walk that releases the GIL). :func:`pool_chunk_blocks` joins them."""
    if n_chunks == 1:
        return [walk(0)]
    with ThreadPoolExecutor(max_workers=max(1, min(thread_count(), n_chunks))) as pool:
        return list(pool.map(walk, range(n_chunks)))


def pool_chunk_blocks(parts: list[np.ndarray]) -> np.ndarray:
    """The blocks of one walk over all the rows, from the blocks of its chunks (:func:`walk_in_chunks`).

    The chunks' blocks are pooled in order (:func:`_pool_groups`). A pooling of adjacent violators
    inside a chunk is one the whole walk may make, and pool-adjacent-violators reaches the same fit
    whatever the order of its poolings (Best & Chakravarti 1990, section 3; Spark MLlib fits isotonic
    regression over partitions so). Only the order of the additions in a block's sums differs: with
    unit weights and 0/1 labels every sum but ``SUM_WX`` is a count, the same.
    """
    if len(parts) == 1:
        return parts[0]
    return cast(np.ndarray, _pool_groups(np.concatenate(parts)))


@dataclass(frozen=True)
class PavBlocks:
    """The blocks of an increasing isotonic fit, in score order (host float64 arrays of length K).

    Attributes
    ----------
    x_first, x_last : numpy.ndarray
        Smallest and largest (group) score in the block.
    weight : numpy.ndarray
        Sum of the weights of the block's rows.
    mean_x : numpy.ndarray
        Weighted mean score of the block's rows (each row counted at its group's score).
    value : numpy.ndarray
        The fitted value: the weighted mean label of the block; strictly increasing along blocks.
    """

    x_first: np.ndarray
    x_last: np.ndarray
    weight: np.ndarray
    mean_x: np.ndarray
    value: np.ndarray

    @classmethod
    def from_stats(cls, blocks: np.ndarray) -> PavBlocks:
        """Build from an ``(K, N_BLOCK_STATS)`` array of block sums."""
        weight = blocks[:, SUM_W].copy()
        return cls(
            x_first=blocks[:, X_FIRST].copy(),
            x_last=blocks[:, X_LAST].copy(),
            weight=weight,
            mean_x=blocks[:, SUM_WX] / weight,
            value=blocks[:, SUM_WY] / weight,
        )


def isotonic_blocks(
    score: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    *,
    force_argsort: bool = False,
    exact_means: bool = True,
) -> PavBlocks:
    """Fit increasing weighted isotonic regression of ``y`` on ``score``; return its blocks.

    Parameters
    ----------
    score, y, w : numpy.ndarray of shape (n,)
        C-contiguous float64 host arrays; ``w >= 0`` with at least one positive weight.
    force_argsort : bool, default=False
        Take the general (argsort) path even when the counting path applies (for tests).
    exact_means : bool, default=True
        Add the blocks' score sums group by group, as every path does. False lets the counting path
        add each run of label-0 rows at once where no two scores tie (:func:`_isotonic_distinct`):
        the same blocks, with ``mean_x`` equal to rounding.

    Returns
    -------
    PavBlocks
    """
    blocks = scanned_isotonic_blocks(score, y, w, None, force_argsort=force_argsort, exact_means=exact_means)
    return cast(PavBlocks, blocks)  # None only where a scan refuses a value


def scanned_isotonic_blocks(
    score: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    scan_kind: str | None,
    *,
    force_argsort: bool = False,
    exact_means: bool = True,
) -> PavBlocks | None:
    """:func:`isotonic_blocks` of ``score`` and ``y`` read unscanned (``scan=False`` in
    ``gpucal._validation``): None when the scan of a ``scan_kind`` score (``"probability"`` or
    ``"logit"``) or of the labels would refuse a value (None: no scan). The sort gives the smallest and
    the largest score (NaN sorts last); the labels of the counting path are 0 or 1, the others are
    scanned on their own.
    """
    positives = None if force_argsort else sorted_positives(score, y, w)
    if positives is not None:
        return _counted_blocks(np.sort(score), positives, scan_kind, exact_means)
    if scan_kind is not None and not accepted_range(*value_range(y), "probability"):
        return None
    order, bounds = sorted_runs(score)
    if scan_kind is not None:
        # Each run is sorted: its first and last rows hold its smallest and largest score.
        firsts, lasts = score[order[bounds[:-1]]], score[order[bounds[1:] - 1]]
        if not accepted_range(float(firsts.min()), float(np.max(lasts)), scan_kind):
            return None
    # Chunks of the merged runs, walked in threads (the cuts depend on the rows and the runs).
    cuts = tie_group_cuts(score, order, bounds, max(1, score.shape[0] // WALK_CHUNK_ROWS), TIE_EPS)

    def chunk(k: int) -> np.ndarray:
        return _isotonic_walk(score, y, w, order, cuts[k], cuts[k + 1], TIE_EPS)

    return PavBlocks.from_stats(pool_chunk_blocks(walk_in_chunks(cuts.shape[0] - 1, chunk)))


def _counted_blocks(
    xs: np.ndarray, positives: np.ndarray, scan_kind: str | None, exact_means: bool
) -> PavBlocks | None:
    """The counting path's blocks from the sorted scores ``xs`` and the positives' sorted scores."""
    if scan_kind is not None and not accepted_range(float(xs[0]), float(xs[-1]), scan_kind):
        return None
    bounds = chunk_bounds(xs, WALK_CHUNK_ROWS, TIE_EPS)
    # A chunk's positives are those up to its last score: every positive score is one of xs.
    cuts = np.searchsorted(positives, xs[bounds[1:-1]], side="left")
    positive_bounds = np.concatenate([[0], cuts, [positives.shape[0]]])

    def chunks(walk: Callable[..., np.ndarray]) -> list[np.ndarray]:
        def chunk(c: int) -> np.ndarray:
            rows, hits = slice(bounds[c], bounds[c + 1]), slice(positive_bounds[c], positive_bounds[c + 1])
            return walk(xs[rows], positives[hits], TIE_EPS)

        return walk_in_chunks(bounds.shape[0] - 1, chunk)

    if not exact_means:
        parts = chunks(_isotonic_distinct)
        if all(part.shape[0] for part in parts):  # an empty part: a tie the run walk cannot take
            return PavBlocks.from_stats(pool_chunk_blocks(parts))
    return PavBlocks.from_stats(pool_chunk_blocks(chunks(_isotonic_counts)))


def device_sort_isotonic_blocks(score: Any, y: Any, w: Any, scan_kind: str | None) -> PavBlocks | None:
    """:func:`scanned_isotonic_blocks` of device arrays (cupy; numpy works too, for tests), pooled where
    the rows are: ``argsort`` and three gathers put the rows in score order, every chunk of
    :data:`~gpucal.kernels.pav_chunks.DEVICE_CHUNK_ROWS` rows is pooled by its own GPU thread
    (:func:`~gpucal.kernels.pav_chunks.chunk_blocks`), and only the chunks' blocks come to the host, to
    be pooled in order (:func:`pool_chunk_blocks`'s reasoning). The blocks are the host path's: the same
    groups and the same fit, only the order of the additions in a block's sums differs (every sum but
    the score sums a count, the same, with unit weights and 0/1 labels).
    """
    xp = array_namespace(score, y, w)
    if scan_kind is not None and not accepted_range(float(xp.min(y)), float(xp.max(y)), "probability"):
        return None
    order = xp.argsort(score)
    s, t, v = (xp.ascontiguousarray(a[order], dtype=xp.float64) for a in (score, y, w))
    if scan_kind is not None and not accepted_range(float(s[0]), float(s[-1]), scan_kind):
        return None
    bounds = chunk_bounds(s, DEVICE_CHUNK_ROWS, TIE_EPS)
    blocks, counts = chunk_blocks(s, t, v, bounds, tie_eps=TIE_EPS)
    stats = np.ascontiguousarray(to_numpy(compact_chunk_blocks(blocks, counts, bounds)))
    return PavBlocks.from_stats(_pool_groups(stats))


def accepted_range(low: float, high: float, scan_kind: str) -> bool:
    """Whether values whose smallest is ``low`` and largest ``high`` (NaN when some value is NaN) pass
    the scan of a ``scan_kind`` score: in [0, 1] (``"probability"``), or finite."""
    if scan_kind == "probability":
        return low >= 0.0 and high <= 1.0
    return low > -np.inf and high < np.inf


def pool_groups(stats: np.ndarray) -> PavBlocks:
    """Pool-adjacent-violators over groups given as an ``(k, N_BLOCK_STATS)`` array in score order.

    Groups with zero weight are skipped. Used by SIR, whose groups are equal-mass bins.
    """
    return PavBlocks.from_stats(_pool_groups(np.ascontiguousarray(stats, dtype=np.float64)))


@numba.njit(cache=True)
def _tie_group_starts(xs, tie_eps):  # pragma: no cover - compiled
    """Flag the distinct scores that open a tie group (scikit-learn's rule, as :func:`_isotonic_walk`)."""
    starts = np.zeros(xs.shape[0], dtype=np.bool_)
    g_x = 0.0
    for i in range(xs.shape[0]):
        if i == 0 or xs[i] - g_x >= tie_eps:
            starts[i] = True
            g_x = xs[i]
    return starts


def isotonic_blocks_from_groups(xs: np.ndarray, weight: np.ndarray, weighted_y: np.ndarray) -> PavBlocks:
    """:func:`isotonic_blocks` from rows already summed per distinct score (the distributed fit).

    ``xs`` are the distinct scores of the rows of positive weight, increasing, with their sums
    :math:`\\sum w` and :math:`\\sum w y`. Scores within ``TIE_EPS`` of a group's first score join it,
    exactly as row by row: the rule looks only at the distinct values.
    """
    xs = np.ascontiguousarray(xs, dtype=np.float64)
    starts = np.flatnonzero(_tie_group_starts(xs, TIE_EPS))
    group_x = xs[starts]
    group_w = np.add.reduceat(weight, starts)
    stats = np.empty((starts.shape[0], N_BLOCK_STATS))
    stats[:, SUM_W] = group_w
    stats[:, SUM_WY] = np.add.reduceat(weighted_y, starts)
    stats[:, SUM_WX] = group_w * group_x
    stats[:, X_FIRST] = group_x
    stats[:, X_LAST] = group_x
    return pool_groups(stats)


def clip_blocks(blocks: PavBlocks, low: float, high: float) -> PavBlocks:
    """Clip the block values to ``[low, high]`` (scikit-learn's ``y_min`` / ``y_max``) and pool equal ones.

    Clipping after the fit is what scikit-learn does; it can only make the first blocks equal to
    ``low`` or the last ones equal to ``high``, and those are pooled so values stay strictly increasing.
    """
    value = np.clip(blocks.value, low, high)
    starts = np.flatnonzero(np.concatenate([[True], value[1:] != value[:-1]]))
    if starts.shape[0] == value.shape[0]:
        return PavBlocks(blocks.x_first, blocks.x_last, blocks.weight, blocks.mean_x, value)
    ends = np.concatenate([starts[1:], [value.shape[0]]]) - 1
    weight = np.add.reduceat(blocks.weight, starts)
    return PavBlocks(
        x_first=blocks.x_first[starts],
        x_last=blocks.x_last[ends],
        weight=weight,
        mean_x=np.add.reduceat(blocks.weight * blocks.mean_x, starts) / weight,
        value=value[starts],
    )
