"""Rows in score order: two ways, both cheaper than one big ``argsort`` followed by gathers.

*Counting path* (every weight 1, labels 0 or 1: the common case). Per-group sums are then counts:
``np.sort`` on a copy of the scores (vectorised, about 8x faster than ``argsort`` here) gives the
groups and their row counts, and ``np.sort`` of the positives' scores gives, by a merge walk, the
positives per group. Exact, with no index array (:func:`counting_sorts`).

*General path.* ``numpy.argsort`` on float64 is single-threaded and, without AVX-512, several times
slower than ``numpy.sort``; it is the one O(n log n) step of isotonic regression and equal-mass binning. The
rows are cut into one contiguous run per thread, each run is argsorted in its own thread (numpy
releases the GIL while sorting), and the numba loops that consume the rows walk the runs in merged
order (:func:`next_row`): no merged index array is ever built, so the extra memory is one int64
per row plus a small buffer per run. Isotonic regression's walk reads the merged runs in chunks, in
threads, cut where a tie group opens (:func:`tie_group_cuts`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from gpucal._backend import to_numpy
from gpucal.kernels.jit import numba

# Rows per run at the least: below this one argsort is as fast as several plus the merge.
MIN_RUN_ROWS = 1 << 20
# Rows gathered per run at a time (3 float64 each: 192 KiB per run, within L2).
GATHER_ROWS = 1 << 13


def thread_count() -> int:
    """Number of runs to sort in parallel: numba's thread count (tests patch this)."""
    return int(numba.get_num_threads())


def sorted_runs(score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(order, bounds)``: ``order[bounds[r]:bounds[r + 1]]`` lists run ``r``'s rows by score.

    Each run is a contiguous block of rows, sorted by score (ties in any order: every consumer
    treats tied rows as one group). ``order`` holds global row indices.
    """
    n = int(score.shape[0])
    n_runs = max(1, min(thread_count(), n // MIN_RUN_ROWS))
    bounds = np.linspace(0, n, n_runs + 1).astype(np.int64)
    if n_runs == 1:
        return np.argsort(score).astype(np.int64, copy=False), bounds
    order = np.empty(n, dtype=np.int64)

    def sort_run(r: int) -> None:
        lo, hi = int(bounds[r]), int(bounds[r + 1])
        order[lo:hi] = np.argsort(score[lo:hi])
        order[lo:hi] += lo

    with ThreadPoolExecutor(max_workers=n_runs) as pool:
        list(pool.map(sort_run, range(n_runs)))
    return order, bounds


@numba.njit(cache=True)
def _refill(r, score, y, w, order, heads, ends, buf, fill, pos):  # pragma: no cover - compiled
    """Gather run ``r``'s next rows (score, label, weight) into its buffer: one tight loop of loads."""
    h = heads[r]
    m = min(GATHER_ROWS, ends[r] - h)
    for k in range(m):
        i = order[h + k]
        buf[r, 0, k] = score[i]
        buf[r, 1, k] = y[i]
        buf[r, 2, k] = w[i]
    heads[r] = h + m
    fill[r] = m
    pos[r] = 0


@numba.njit(cache=True)
def open_cursor(starts, stops):  # pragma: no cover - compiled
    """Return the state ``(heads, ends, buf, fill, pos)`` that :func:`next_row` advances over the rows
    ``order[starts[r]:stops[r]]`` of each run ``r``."""
    n_runs = starts.shape[0]
    heads = starts.copy()
    ends = stops.copy()
    buf = np.empty((n_runs, 3, GATHER_ROWS))
    fill = np.zeros(n_runs, dtype=np.int64)
    pos = np.zeros(n_runs, dtype=np.int64)
    return heads, ends, buf, fill, pos


@numba.njit(cache=True)
def _first_in_run_not_below(score, order, lo, hi, value):  # pragma: no cover - compiled
    """The first position in ``[lo, hi)`` of a run (rows ``order[lo:hi]``, sorted by score) whose score
    is not below ``value`` (``hi``: none): ``gpucal.calibrators.bins``' search, read through ``order``."""
    while lo < hi:
        mid = (lo + hi) // 2
        if score[order[mid]] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def tie_group_cuts(score, order, bounds, n_chunks, tie_eps):  # pragma: no cover - compiled
    """Cut sorted runs into ``n_chunks`` chunks of about equal rows whose rows in merged order each
    start a tie group: ``cuts[k, r]:cuts[k + 1, r]`` are run ``r``'s positions in chunk ``k``.

    Chunk ``k`` holds the rows whose score is at least its cut score ``a`` and below the next cut's.
    ``a`` is first the score at fraction ``k / n_chunks`` of the longest run; while some row scores less
    than ``tie_eps`` below it, it moves to the next larger score. Then every row before the chunk scores
    at least ``tie_eps`` less than ``a``, and so does the first score of the group open before it: the
    chunk's first row opens a group whatever came before (scikit-learn's rule, the same as in one walk).
    Chunks may be empty (their cut moved past the next one's).
    """
    n_runs = bounds.shape[0] - 1
    cuts = np.empty((n_chunks + 1, n_runs), dtype=np.int64)
    cuts[0] = bounds[:-1]
    cuts[n_chunks] = bounds[1:]
    longest = np.argmax(bounds[1:] - bounds[:-1])
    length = bounds[longest + 1] - bounds[longest]
    cut = -np.inf
    for k in range(1, n_chunks):
        a = max(cut, score[order[bounds[longest] + length * k // n_chunks]])
        while a < np.inf:
            below = -np.inf  # the largest score below a
            above = np.inf  # the smallest score above a
            for r in range(n_runs):
                p = _first_in_run_not_below(score, order, bounds[r], bounds[r + 1], a)
                if p > bounds[r]:
                    below = max(below, score[order[p - 1]])
                q = _first_in_run_not_below(score, order, p, bounds[r + 1], np.nextafter(a, np.inf))
                if q < bounds[r + 1]:
                    above = min(above, score[order[q]])
            if a - below >= tie_eps:
                break
            a = above
        cut = a
        for r in range(n_runs):
            cuts[k, r] = _first_in_run_not_below(score, order, bounds[r], bounds[r + 1], a)
    return cuts


@numba.njit(cache=True, inline="always")
def next_row(score, y, w, order, heads, ends, buf, fill, pos):  # pragma: no cover - compiled
    """Return ``(score, y, w)`` of the row with the smallest score among the run heads; advance it.

    Rows are read through small per-run buffers filled by :func:`_refill`: gathering in a tight
    loop lets the CPU overlap the cache misses, which a loop that compares as it loads cannot (about
    3x faster at 1e7 rows). The caller calls this exactly ``n`` times. The heads are scanned linearly:
    there are at most as many runs as threads.
    """
    best = -1
    best_x = 0.0
    for r in range(heads.shape[0]):
        if pos[r] == fill[r] and heads[r] < ends[r]:
            _refill(r, score, y, w, order, heads, ends, buf, fill, pos)
        if pos[r] < fill[r]:
            x = buf[r, 0, pos[r]]
            if best < 0 or x < best_x:
                best = r
                best_x = x
    k = pos[best]
    pos[best] = k + 1
    return buf[best, 0, k], buf[best, 1, k], buf[best, 2, k]


@numba.njit(cache=True)
def _all_unit(w):  # pragma: no cover - compiled
    for i in range(w.shape[0]):
        if w[i] != 1.0:
            return False
    return True


@numba.njit(cache=True)
def _unit_binary_positives(score, y, w, out):  # pragma: no cover - compiled
    """Write the scores of the rows with label 1 into ``out[:k]`` and return ``k``; -1 as soon as a
    weight is not 1 or a label not 0 or 1."""
    k = 0
    for i in range(y.shape[0]):
        yi = y[i]
        if w[i] != 1.0 or (yi != 0.0 and yi != 1.0):
            return -1
        out[k] = score[i]  # kept only where the label is 1: no branch on the label
        k += yi == 1.0
    return k


def counting_sorts(
    score: np.ndarray, y: np.ndarray | None, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Return ``(sorted scores, sorted scores of the positives)`` for the counting path, or None when
    it does not apply: some weight is not 1 or some label not 0 or 1.

    One pass over the labels and weights both checks them and gathers the positives' scores.
    ``y=None`` checks the weights only and returns an empty second array (callers that sum the
    score itself need no labels).
    """
    if y is None:
        return (np.sort(score), np.empty(0)) if _all_unit(w) else None
    positives = sorted_positives(score, y, w)
    if positives is None:
        return None
    return np.sort(score), positives


def sorted_positives(score: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """Return the sorted scores of the rows with label 1, or None when the counting path does not apply
    (:func:`counting_sorts`): one pass checks the labels and weights and gathers them."""
    gathered = np.empty(y.shape[0])
    n_positive = _unit_binary_positives(score, y, w, gathered)
    if n_positive < 0:
        return None
    return np.sort(gathered[:n_positive])


def distinct_counts(
    score: np.ndarray, y: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Return ``(distinct scores, rows, positives)`` per distinct score for the counting path, or None
    when it does not apply (:func:`counting_sorts`).

    Two ``numpy.sort`` calls and a merge: exact counts, no ``argsort``.
    """
    sorts = counting_sorts(score, y, w)
    if sorts is None:
        return None
    xs, positives = sorts
    new = np.ones(xs.shape[0], dtype=bool)
    new[1:] = xs[1:] != xs[:-1]
    distinct = xs[new]
    rows = np.diff(np.append(np.flatnonzero(new), xs.shape[0])).astype(np.float64)
    hits = np.diff(np.searchsorted(positives, distinct, side="right"), prepend=0).astype(np.float64)
    return distinct, rows, hits


def host_float64(x: Any) -> np.ndarray:
    """Return ``x`` as a C-contiguous float64 numpy array (a device array is copied to the host)."""
    return np.ascontiguousarray(to_numpy(x), dtype=np.float64)


def host_weights(w: Any) -> np.ndarray:
    """:func:`host_float64` of row weights, except that a zero-stride float64 view (the unit weights of
    ``check_sample_weight``) is kept: the compiled walks read it where it is, not as n ones."""
    if isinstance(w, np.ndarray) and w.dtype == np.float64 and w.ndim == 1 and w.strides == (0,):
        return w
    return host_float64(w)
