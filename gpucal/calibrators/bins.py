r"""Shared steps of the binning calibrators: per-bin sums, equal-mass bins, bin look-up, interpolation.

Bins on a score ``p`` are right-closed intervals given by increasing edges
:math:`e_0 < e_1 < \dots < e_B`: bin :math:`b` holds :math:`e_{b-1} < p \le e_b`, the first bin also
:math:`p \le e_1` and the last also :math:`p > e_{B-1}`, so the bin id is
``searchsorted(edges[1:-1], p, side="left")``, the convention of ``sklearn.calibration.calibration_curve``
and of netcal's ``HistogramBinning.transform``. Every fit statistic is a per-bin sum

.. math::

    S_b = \Bigl(\sum_{i \in b} w_i,\ \sum_{i \in b} w_i y_i,\ \sum_{i \in b} w_i p_i\Bigr)

(histogram binning reads the first two, :func:`bin_sums`; the equal-mass walks give all three),
computed by a fused numba loop on the CPU (fixed-size row chunks summed in a fixed order, so the
result does not depend on the thread count; unit weights and 0/1 labels over at most
``MAX_COUNT_BINS`` bins counted by comparisons with the edges, :func:`_count_chunk`) and by
``searchsorted`` plus ``bincount`` on cupy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal.calibrators._sorted import (
    counting_sorts,
    host_float64,
    host_weights,
    next_row,
    open_cursor,
    sorted_runs,
)
from gpucal.kernels import readonly
from gpucal.kernels.jit import empty_rows, numba, parallel_rows
from gpucal.metrics.binning import mass_bin_of, mass_positions
from gpucal.persistence import check_span

# Columns of the per-bin sums (:func:`bin_sums` gives the first N_WEIGHT_SUMS).
BIN_W = 0
BIN_WY = 1
BIN_WP = 2
N_BIN_STATS = 3
N_WEIGHT_SUMS = 2

# Rows per partial sum; fixed so that the summation order does not depend on the thread count.
CHUNK_ROWS = 1 << 16


@numba.njit(cache=True, inline="always")
def _first_not_below(a, lo, hi, x):  # pragma: no cover - compiled
    """First index ``m`` in ``[lo, hi)`` with ``a[m] >= x`` (``hi`` if none); ``a`` increasing."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, inline="always")
def count_not_above(a, x):  # pragma: no cover - compiled
    """The number of entries of the increasing ``a`` at or below ``x``: ``searchsorted(a, x,
    side="right")`` for every ``x`` but NaN (0 here; numpy sorts NaN last)."""
    lo = 0
    hi = a.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, inline="always")
def _uniform_bin_of(x, bounds):  # pragma: no cover - compiled
    """:func:`_search_bounds` for equal-width edges, without a search: ``bounds`` is
    ``linspace(0, 1, B + 1)`` with its ends replaced by ``-inf`` and ``+inf`` (:func:`uniform_bounds`).

    Guess ``g = floor(x * B)`` and step once to the searchsorted answer: for ``x`` in [0, 1] the guess
    is within one bin of it (``linspace``'s edge ``k / B`` and the product ``x * B`` are each within
    an ulp of their exact values, so ``e_k < x <= e_{k+1}`` gives ``k - 1 <= g <= k + 1`` for
    ``B < 2**50``). No data-dependent branch: several times faster than the binary search on random
    scores (``gpucal.metrics.binning`` does the same).
    """
    last = bounds.shape[0] - 2
    # The guess reads x clamped to [0, 1] (NaN read as 0): the same guess for every x in [0, 1], and a
    # defined one for NaN and +-inf, which the step then leaves in the first or the last bin.
    inside = x if x > 0.0 else 0.0
    inside = inside if inside < 1.0 else 1.0
    g = min(max(int(inside * (last + 1)), 0), last)
    return max(g - (x <= bounds[g]) + (x > bounds[g + 1]), 0)


def uniform_bounds(n_bins: int) -> np.ndarray:
    """The ``bounds`` of :func:`_uniform_bin_of`: ``linspace(0, 1, n_bins + 1)`` with infinite ends."""
    bounds = np.linspace(0.0, 1.0, n_bins + 1)
    bounds[0] = -np.inf
    bounds[-1] = np.inf
    return bounds


@numba.njit(cache=True, inline="always")
def _search_bounds(x, bounds):  # pragma: no cover - compiled
    """The bin of ``x``, ``searchsorted(bounds[1:-1], x, side="left")``: the number of interior edges
    strictly below ``x`` (``bounds`` as :func:`bounds_of` gives them)."""
    return _first_not_below(bounds, 1, bounds.shape[0] - 1, x) - 1


@numba.njit(cache=True, inline="always")
def _in_unit_interval(x):  # pragma: no cover - compiled
    """Whether ``x`` lies in [0, 1] (False for NaN): the scan of ``gpucal._validation``'s [0, 1] checks."""
    return (x >= 0.0) & (x <= 1.0)


# What a scan refuses (:func:`_count_refused`): nothing (the values were checked), a value not in [0, 1],
# a value not finite; NaN is refused by both rules.
SCAN_NONE = 0
SCAN_PROBABILITY = 1
SCAN_FINITE = 2


def scan_rule(scan_kind: str | None) -> int:
    """The ``SCAN_*`` rule of the scan of a ``scan_kind`` score (None: no scan)."""
    if scan_kind is None:
        return SCAN_NONE
    return SCAN_PROBABILITY if scan_kind == "probability" else SCAN_FINITE


@numba.njit(cache=True, inline="always")
def _count_refused(x, start, stop, rule):  # pragma: no cover - compiled
    """The number of ``x[start:stop]`` the scan ``rule`` (``SCAN_*``) refuses."""
    n_refused = 0
    if rule == SCAN_PROBABILITY:
        for i in range(start, stop):
            n_refused += not _in_unit_interval(x[i])
    elif rule == SCAN_FINITE:
        for i in range(start, stop):
            n_refused += not (abs(x[i]) < np.inf)
    return n_refused


# Rows per block of the counting path of :func:`_bin_sums_cpu`: a block's scores and packed counts
# (16 bytes a row, 32 KB) stay in the L1 cache while every interior edge is compared with them.
COUNT_BLOCK_ROWS = 2048
# Bin counts up to which :func:`_bin_sums_cpu` tries the counting path: it compares every row with
# every interior edge, where the scatter path finds one bin per row.
MAX_COUNT_BINS = 32
# A row's packed count: 1 in the low 32 bits (the row), its label in the high 32 (a positive). Sums of
# packed counts over at most CHUNK_ROWS < 2**32 rows keep the two fields apart.
POSITIVE_SHIFT = 32
ROW_MASK = (1 << POSITIVE_SHIFT) - 1


@numba.njit(cache=True, inline="always")
def _count_chunk(p, y, start, stop, bounds, acc):  # pragma: no cover - compiled
    r"""The per-bin sums of unit-weight rows ``start:stop`` into ``acc`` by counts of comparisons, and
    the number of them whose score or label is not in [0, 1]; ``(False, 0)`` with ``acc`` untouched
    when a label is neither 0 nor 1 (NaN included).

    With :math:`G_k` the number of rows whose score is above the edge :math:`e_k` (in the module's
    numbering, :math:`G_0` all rows and :math:`G_B` none), bin :math:`b` holds :math:`G_{b-1} - G_b` rows,
    as the bin of a score is given by the interior edges strictly below it (NaN: none, the first bin, as
    :func:`_search_bounds` and :func:`_uniform_bin_of` place it); the positives likewise. Each
    :math:`G_k` is a reduction over a block of rows (edges outside, rows inside), which LLVM vectorizes,
    where the scatter's adds into the bin of each row form a read-modify-write chain when consecutive
    rows share a bin. The counts are integers, so the sums equal the scatter's exactly.
    """
    n_edges = bounds.shape[0] - 2
    above = np.zeros(n_edges, dtype=np.int64)  # above[k - 1]: G_k, packed
    packed = np.empty(COUNT_BLOCK_ROWS, dtype=np.int64)
    every = 0  # packed count of all rows
    n_outside = np.int64(0)
    for block_start in range(start, stop, COUNT_BLOCK_ROWS):
        block_stop = min(stop, block_start + COUNT_BLOCK_ROWS)
        xs = p[block_start:block_stop]
        ys = y[block_start:block_stop]
        counts = packed[: block_stop - block_start]
        n_binary = np.int64(0)
        n_positive = np.int64(0)
        for i in range(xs.shape[0]):
            yi = ys[i]
            positive = np.int64(yi == 1.0)
            n_positive += positive
            n_binary += positive | np.int64(yi == 0.0)
            n_outside += np.int64(not _in_unit_interval(xs[i]))  # a label 0 or 1 is in [0, 1]
            counts[i] = 1 + (positive << POSITIVE_SHIFT)
        if n_binary != xs.shape[0]:
            return False, 0
        every += xs.shape[0] + (n_positive << POSITIVE_SHIFT)
        for k in range(n_edges):
            edge = bounds[k + 1]
            n_above = 0
            for i in range(xs.shape[0]):
                n_above += counts[i] & -np.int64(xs[i] > edge)
            above[k] += n_above
    above_low = every  # the rows above the bin's lower edge
    for b in range(n_edges + 1):
        above_high = above[b] if b < n_edges else 0
        # No borrow: the rows above an edge are among the rows above the edge before it.
        in_bin = above_low - above_high
        acc[b, BIN_W] = float(in_bin & ROW_MASK)
        acc[b, BIN_WY] = float(in_bin >> POSITIVE_SHIFT)
        above_low = above_high
    return True, n_outside


@numba.njit(cache=True, inline="always")
def _scatter_chunk(p, y, w, start, stop, bounds, uniform, acc):  # pragma: no cover - compiled
    """Add the weights and weighted labels of rows ``start:stop`` into their bins' ``acc``, in row
    order; return the number of them whose score or label is not in [0, 1]."""
    n_outside = 0
    for i in range(start, stop):
        x = p[i]
        yi = y[i]
        wi = w[i]
        n_outside += not (_in_unit_interval(x) & _in_unit_interval(yi))
        b = _uniform_bin_of(x, bounds) if uniform else _search_bounds(x, bounds)
        acc[b, BIN_W] += wi
        acc[b, BIN_WY] += wi * yi
    return n_outside


@parallel_rows("p")
def _bin_sums_cpu(p, y, w, bounds, uniform, count):  # pragma: no cover - compiled; tested vs the array path
    """The per-bin sums of :func:`bin_sums` and the number of rows whose score or label is not in
    [0, 1] (NaN included), in one pass.

    ``count`` promises unit weights: a chunk whose labels are all 0 or 1 is then summed by
    :func:`_count_chunk`, any other by :func:`_scatter_chunk` (the same sums).
    """
    n = p.shape[0]
    n_bins = bounds.shape[0] - 1
    n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    partial = np.zeros((n_chunks, n_bins, N_WEIGHT_SUMS))
    outside = np.zeros(n_chunks, dtype=np.int64)
    for c in numba.prange(n_chunks):
        start = c * CHUNK_ROWS
        stop = min(n, start + CHUNK_ROWS)
        counted = False
        n_outside = 0
        if count:
            counted, n_outside = _count_chunk(p, y, start, stop, bounds, partial[c])
        if not counted:
            n_outside = _scatter_chunk(p, y, w, start, stop, bounds, uniform, partial[c])
        outside[c] = n_outside
    total = np.zeros((n_bins, N_WEIGHT_SUMS))
    for c in range(n_chunks):  # fixed order
        total += partial[c]
    return total, outside.sum()


def unit_weights(w: Any) -> bool:
    """Whether the weights ``w`` (numpy or cupy) are the zero-stride view of ones that
    ``check_sample_weight`` gives for None: known to be ones without reading them."""
    return w.ndim == 1 and w.shape[0] > 0 and w.strides[0] == 0 and float(w[0]) == 1.0


def bounds_of(interior: np.ndarray, uniform: bool) -> np.ndarray:
    """The interior edges with ``-inf`` and ``+inf`` around them: what the compiled bin look-ups read
    (for ``uniform``, :func:`uniform_bounds`)."""
    if uniform:
        return uniform_bounds(interior.shape[0] + 1)
    return np.concatenate([[-np.inf], np.asarray(interior, dtype=np.float64), [np.inf]])


def bin_sums(p: Any, y: Any, w: Any, interior: np.ndarray, *, uniform: bool = False) -> np.ndarray:
    """Return the ``(B, 2)`` host array of per-bin sums ``w``, ``w * y`` (columns ``BIN_W``, ``BIN_WY``).

    ``uniform=True`` promises ``interior == np.linspace(0, 1, B + 1)[1:-1]`` and takes the search-free
    path on the CPU (same bins).
    """
    return _bin_sums(p, y, w, interior, uniform, count_outside=False)[0]


def bin_sums_and_outside(
    p: Any, y: Any, w: Any, interior: np.ndarray, *, uniform: bool = False
) -> tuple[np.ndarray, int]:
    """:func:`bin_sums` and the number of rows whose ``p`` or ``y`` is not in [0, 1] (NaN and +-inf
    included), read in the same pass: the scan of unscanned scores and labels (``scan=False`` in
    ``gpucal._validation``)."""
    return _bin_sums(p, y, w, interior, uniform, count_outside=True)


def _bin_sums(
    p: Any, y: Any, w: Any, interior: np.ndarray, uniform: bool, *, count_outside: bool
) -> tuple[np.ndarray, int]:
    xp = array_namespace(p, y, w)
    interior = np.ascontiguousarray(interior, dtype=np.float64)
    if xp is np:
        count = unit_weights(w) and interior.shape[0] < MAX_COUNT_BINS
        sums, n_outside = _bin_sums_cpu(p, y, w, bounds_of(interior, uniform), uniform, count)
        return sums, int(n_outside)
    n_bins = interior.shape[0] + 1
    ids = xp.searchsorted(xp.asarray(interior), p, side="left")
    sums = [xp.bincount(ids, weights=v, minlength=n_bins) for v in (w, w * y)]
    n_outside = count_outside_unit(p, y) if count_outside else 0
    return to_numpy(xp.stack(sums, axis=1)), n_outside


def count_outside_unit(*arrays: Any) -> int:
    """The number of rows where some of ``arrays`` (numpy or cupy, one length) is not in [0, 1], NaN
    included: array code, for the device path of the compiled passes that count them."""
    xp = array_namespace(*arrays)
    inside = xp.ones(arrays[0].shape[0], dtype=bool)
    for a in arrays:
        inside &= (a >= 0) & (a <= 1)
    return int(xp.count_nonzero(~inside))


@parallel_rows("p")
def _lookup_cpu(p, bounds, values, uniform, out):  # pragma: no cover - compiled; tested vs the array path
    """``out[i] = values[bin of p[i]]``; returns the number of ``p`` not in [0, 1] (NaN included)."""
    n = p.shape[0]
    n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    outside = np.zeros(n_chunks, dtype=np.int64)
    for c in numba.prange(n_chunks):
        start = c * CHUNK_ROWS
        stop = min(n, start + CHUNK_ROWS)
        n_outside = 0
        if uniform:
            for i in range(start, stop):
                x = p[i]
                n_outside += not _in_unit_interval(x)
                out[i] = values[_uniform_bin_of(x, bounds)]
        else:
            for i in range(start, stop):
                x = p[i]
                n_outside += not _in_unit_interval(x)
                out[i] = values[_search_bounds(x, bounds)]
        outside[c] = n_outside
    return outside.sum()


def lookup_bins(p: Any, interior: np.ndarray, values: np.ndarray, *, uniform: bool = False) -> Any:
    """Return ``values[bin of p]`` per row (numpy or cupy, as ``p``); ``uniform`` as in :func:`bin_sums`."""
    return _lookup_bins(p, interior, values, uniform, count_outside=False)[0]


def lookup_bins_and_outside(
    p: Any, interior: np.ndarray, values: np.ndarray, *, uniform: bool = False
) -> tuple[Any, int]:
    """:func:`lookup_bins` and the number of ``p`` not in [0, 1] (NaN and +-inf included), read in the
    same pass: the scan of unscanned probabilities (``scan=False`` in ``gpucal._validation``)."""
    return _lookup_bins(p, interior, values, uniform, count_outside=True)


def _lookup_bins(
    p: Any, interior: np.ndarray, values: np.ndarray, uniform: bool, *, count_outside: bool
) -> tuple[Any, int]:
    xp = array_namespace(p)
    interior = np.ascontiguousarray(interior, dtype=np.float64)
    values = np.ascontiguousarray(values, dtype=np.float64)
    if xp is np:
        # First written by the parallel loop: the page faults of a fresh output are taken on every thread.
        out = empty_rows(p.shape[0])
        n_outside = _lookup_cpu(readonly(p), bounds_of(interior, uniform), values, uniform, out)
        return out, int(n_outside)
    out = xp.asarray(values)[xp.searchsorted(xp.asarray(interior), p, side="left")]
    return out, count_outside_unit(p) if count_outside else 0


# Cells of the knot index table of :func:`_knot_table` per knot (at least MIN_TABLE_CELLS, at most
# MAX_TABLE_CELLS; Venn-Abers reads its scores through it): a query
# finds its segment by one table read, checked by two comparisons, and only where its cell holds a knot
# by a binary search over the few knots of three neighbouring cells. 16 cells per knot leave about two
# thirds of the queries of a 1e7-row isotonic map on the first path (4: 40%).
TABLE_CELLS_PER_KNOT = 16
MIN_TABLE_CELLS = 64
MAX_TABLE_CELLS = 1 << 20


# Cells of the knot index table of :func:`interp_clipped` per knot, at most MAX_KEY_CELLS in all: a query
# finds its cell by integer arithmetic on its bits and its segment by a step or two from the cell's knot.
KEY_CELLS_PER_KNOT = 64
MAX_KEY_CELLS = 1 << 18
# The bits of a float64 below the sign.
MAGNITUDE_BITS = (1 << 63) - 1


@numba.njit(cache=True, inline="always")
def _ordered_key(bits):  # pragma: no cover - compiled
    """An int64 non-decreasing in the float64 value whose bits (as an int64) are ``bits``: the
    magnitude bits, negated for a negative value, halved so that the difference of two keys fits."""
    return (bits if bits >= 0 else -(bits & MAGNITUDE_BITS)) >> 1


@parallel_rows("x")
def _interp_cpu(x, x_bits, knots_x, knots_y, table, key0, shift, rule, out):  # pragma: no cover - compiled
    """``out`` of :func:`interp_clipped`; returns the number of ``x`` the scan ``rule`` (``SCAN_*``)
    refuses (a NaN is mapped as if below the first knot)."""
    n = x.shape[0]
    last = knots_x.shape[0] - 1
    x0 = knots_x[0]
    n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    refused = np.zeros(n_chunks, dtype=np.int64)
    for c in numba.prange(n_chunks):
        start = c * CHUNK_ROWS
        stop = min(n, start + CHUNK_ROWS)
        # The scan in a loop of its own over the chunk, read again from the cache by the map: inside the
        # map's branches it cost 0.027 CPU s on 1e7 rows, on its own 0.006.
        refused[c] = _count_refused(x, start, stop, rule)
        for i in range(start, stop):
            v = x[i]
            if not v > x0:
                out[i] = knots_y[0]
            elif v >= knots_x[last]:
                out[i] = knots_y[last]
            else:
                # The last knot whose key is at or below the start of v's cell, then to the segment
                # with knots_x[j] < v <= knots_x[j + 1] (back a step where that knot is not below v).
                j = table[(_ordered_key(x_bits[i]) - key0) >> shift]
                while knots_x[j] >= v:
                    j -= 1
                while knots_x[j + 1] < v:
                    j += 1
                if knots_x[j + 1] == v:
                    out[i] = knots_y[j + 1]
                    continue
                y0 = knots_y[j]
                y1 = knots_y[j + 1]
                # np.interp's formula, then kept inside the segment so rounding cannot break monotonicity.
                r = (y1 - y0) / (knots_x[j + 1] - knots_x[j]) * (v - knots_x[j]) + y0
                out[i] = min(max(r, min(y0, y1)), max(y0, y1))
    return refused.sum()


def ordered_keys(x: np.ndarray) -> np.ndarray:
    """The int64 keys of :func:`_ordered_key` of a float64 array."""
    bits = x.view(np.int64)
    return np.where(bits >= 0, bits, -(bits & MAGNITUDE_BITS)) >> 1


def _key_table(knots_x: np.ndarray) -> tuple[np.ndarray, int, int]:
    """Return ``(table, key0, shift)`` over the ordered keys of the knot range cut into cells of
    ``2**shift`` keys: ``table[g]`` is the last knot whose key is at most ``key0 + g * 2**shift``.

    Cells of equal width in keys are of equal width in log scale within each binade, so the cells
    follow knots that crowd near zero (the small probabilities of rare events).
    """
    keys = ordered_keys(knots_x)
    key0 = int(keys[0])
    span = int(keys[-1]) - key0
    target = min(KEY_CELLS_PER_KNOT * knots_x.shape[0], MAX_KEY_CELLS)
    shift = max(0, (span // target).bit_length())
    starts = key0 + (np.arange((span >> shift) + 1, dtype=np.int64) << shift)
    table = np.searchsorted(keys, starts, side="right") - 1
    return table.astype(np.int64), key0, shift


def _knot_table(knots_x: np.ndarray) -> tuple[np.ndarray, float]:
    """Return ``(table, 1 / h)``: ``table[g]`` is the last knot at or below ``knots_x[0] + g * h``."""
    n_cells = min(max(TABLE_CELLS_PER_KNOT * knots_x.shape[0], MIN_TABLE_CELLS), MAX_TABLE_CELLS)
    span = float(knots_x[-1] - knots_x[0])
    if not span > 0:  # one knot: every query is at or beyond it
        return np.zeros(2, dtype=np.int64), 0.0
    h = span / n_cells
    starts = knots_x[0] + np.arange(n_cells + 1) * h
    table = np.clip(np.searchsorted(knots_x, starts, side="right") - 1, 0, knots_x.shape[0] - 1)
    return table.astype(np.int64), 1.0 / h


def check_knot_map(
    knots_x: np.ndarray,
    knots_y: np.ndarray,
    *,
    names: tuple[str, str] = ("X_knots_", "y_knots_"),
    monotone: bool = True,
) -> None:
    """Raise ``ValueError`` unless the knots of a loaded model (attributes ``names``) describe a
    piecewise-linear map into [0, 1]: equal lengths, at least one knot, ``knots_x`` finite and strictly
    increasing, ``knots_y`` non-decreasing when ``monotone``."""
    x_name, y_name = names
    if knots_x.shape != knots_y.shape or knots_x.shape[0] == 0:
        msg = f"{x_name} has {knots_x.shape[0]} entries and {y_name} {knots_y.shape[0]}; need equal, >= 1"
        raise ValueError(msg)
    if (
        not np.all(np.isfinite(knots_x))
        or np.any(np.diff(knots_x) <= 0)
        or (monotone and np.any(np.diff(knots_y) < 0))
        or np.any(knots_y < 0)
        or np.any(knots_y > 1)
    ):
        shape = "non-decreasing " if monotone else ""
        msg = f"{x_name} must be finite and strictly increasing and {y_name} {shape}in [0, 1]"
        raise ValueError(msg)
    check_span(knots_x, x_name)


def interp_clipped(x: Any, knots_x: np.ndarray, knots_y: np.ndarray) -> Any:
    """Piecewise-linear map through the knots, constant beyond the first and last knot.

    Equal to ``np.interp(np.clip(x, knots_x[0], knots_x[-1]), knots_x, knots_y)`` up to rounding (the
    same formula); ``knots_x`` must be strictly increasing. On the CPU a table of knot indices over
    cells of equal width in the values' bits (:func:`_key_table`) replaces the binary search.
    """
    return _interp_clipped(x, knots_x, knots_y, None)[0]


def interp_clipped_and_refused(
    x: Any, knots_x: np.ndarray, knots_y: np.ndarray, scan_kind: str
) -> tuple[Any, int]:
    """:func:`interp_clipped` of scores read unscanned (``scan=False`` in ``gpucal._validation``), and
    the number of them the scan of a ``scan_kind`` score refuses (``"probability"``: not in [0, 1];
    ``"logit"``: not finite; NaN included), from the same pass."""
    return _interp_clipped(x, knots_x, knots_y, scan_kind)


def _interp_clipped(
    x: Any, knots_x: np.ndarray, knots_y: np.ndarray, scan_kind: str | None
) -> tuple[Any, int]:
    xp = array_namespace(x)
    knots_x = np.ascontiguousarray(knots_x, dtype=np.float64)
    knots_y = np.ascontiguousarray(knots_y, dtype=np.float64)
    if xp is np:
        table, key0, shift = _key_table(knots_x)
        x = readonly(np.ascontiguousarray(x))
        out = empty_rows(x.shape[0])
        rule = scan_rule(scan_kind)
        return out, int(_interp_cpu(x, x.view(np.int64), knots_x, knots_y, table, key0, shift, rule, out))
    kx, ky = xp.asarray(knots_x), xp.asarray(knots_y)
    out = xp.interp(xp.clip(x, kx[0], kx[-1]), kx, ky)
    if scan_kind is None:
        return out, 0
    ok = (x >= 0) & (x <= 1) if scan_kind == "probability" else xp.isfinite(x)
    return out, int(xp.count_nonzero(~ok))


@numba.njit(cache=True)
def _mass_walk(p, y, w, order, bounds, n_bins, total_w):  # pragma: no cover - compiled
    """Equal-mass bins in one pass over the rows in score order; see :func:`mass_bin_stats`."""
    heads, ends, buf, fill, pos = open_cursor(bounds[:-1], bounds[1:])
    stats = np.zeros((n_bins, N_BIN_STATS))
    lows = np.full(n_bins, np.inf)
    highs = np.full(n_bins, -np.inf)
    below = 0.0  # weight of the rows with a strictly smaller score
    run_w = 0.0  # weight of the rows seen so far
    b = 0
    have = False
    prev = 0.0
    for _ in range(order.shape[0]):
        x, yi, wi = next_row(p, y, w, order, heads, ends, buf, fill, pos)
        if wi <= 0.0:  # zero-weight rows are absent rows: they neither add nor move an edge
            continue
        if not have or x != prev:
            below = run_w
            b = mass_bin_of(below, total_w, n_bins)
            have = True
            prev = x
        run_w += wi
        stats[b, BIN_W] += wi
        stats[b, BIN_WY] += wi * yi
        stats[b, BIN_WP] += wi * x
        lows[b] = min(lows[b], x)
        highs[b] = max(highs[b], x)
    return stats, lows, highs


@numba.njit(cache=True)
def _mass_counts(xs, positives, n_bins, y_is_score):  # pragma: no cover - compiled
    """:func:`_mass_walk` for unit weights from sorted scores (and sorted positives for 0/1 labels)."""
    stats = np.zeros((n_bins, N_BIN_STATS))
    lows = np.full(n_bins, np.inf)
    highs = np.full(n_bins, -np.inf)
    n = xs.shape[0]
    n_pos = positives.shape[0]
    i = 0
    j = 0
    while i < n:
        x = xs[i]
        k = i + 1
        while k < n and xs[k] == x:
            k += 1
        b = min(n_bins - 1, int(np.floor(n_bins * float(i) / float(n))))
        count = float(k - i)
        stats[b, BIN_W] += count
        stats[b, BIN_WP] += count * x
        if y_is_score:
            stats[b, BIN_WY] += count * x
        else:
            j0 = j
            while j < n_pos and positives[j] <= x:
                j += 1
            stats[b, BIN_WY] += float(j - j0)
        lows[b] = min(lows[b], x)
        highs[b] = max(highs[b], x)
        i = k
    return stats, lows, highs


def mass_bin_stats(
    p: Any, y: Any, w: Any, n_bins: int, *, y_is_score: bool = False, force_argsort: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Equal-mass bins on the weighted distribution of ``p``; return the non-empty ones.

    A row goes to bin :math:`\min(B - 1, \lfloor B\, S_<(p) / W \rfloor)`, with :math:`S_<(p)` the
    weight of the rows whose score is strictly smaller and :math:`W` the total weight: the rule of
    ``gpucal.metrics`` (equal-mass ECE), under which tied scores are never split and integer weights
    equal repeated rows. Zero-weight rows are ignored. Heavy ties can leave bins empty; they are dropped.

    ``y_is_score=True`` says ``y`` is ``p`` itself (scaling-binning averages the scores), which lets
    unit-weight data take the counting path whatever the values; ``force_argsort`` takes the general
    path (for tests).

    Returns
    -------
    stats : numpy.ndarray of shape (K, 3)
        Per-bin sums ``w``, ``w * y``, ``w * p`` of the K non-empty bins, in score order.
    lows, highs : numpy.ndarray of shape (K,)
        Smallest and largest score in each of those bins.
    """
    p_h, y_h, w_h = host_float64(p), host_float64(y), host_weights(w)
    sorts = None if force_argsort else counting_sorts(p_h, None if y_is_score else y_h, w_h)
    if sorts is not None:
        stats, lows, highs = _mass_counts(*sorts, n_bins, y_is_score)
        keep = stats[:, BIN_W] > 0
        return stats[keep], lows[keep], highs[keep]
    order, bounds = sorted_runs(p_h)
    stats, lows, highs = _mass_walk(p_h, y_h, w_h, order, bounds, n_bins, float(w_h.sum()))
    keep = stats[:, BIN_W] > 0
    return stats[keep], lows[keep], highs[keep]


def mass_bin_stats_from_groups(
    xs: np.ndarray, stats: np.ndarray, n_bins: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`mass_bin_stats` from rows already summed per distinct score (the distributed fit).

    ``xs`` holds the distinct scores of the rows of positive weight, increasing, and ``stats`` their
    sums ``w``, ``w * y``, ``w * p`` (columns ``BIN_*``). The bins are those of :func:`mass_bin_stats`:
    a score's bin depends only on the weight below it, and tied rows always share one.
    """
    weight = stats[:, BIN_W]
    below = np.concatenate([[0.0], np.cumsum(weight)[:-1]])
    ids = np.minimum(np.floor(mass_positions(below, weight.sum(), n_bins)), n_bins - 1).astype(np.int64)
    binned = np.stack(
        [np.bincount(ids, weights=stats[:, j], minlength=n_bins) for j in range(N_BIN_STATS)], 1
    )
    lows = np.full(n_bins, np.inf)
    highs = np.full(n_bins, -np.inf)
    np.minimum.at(lows, ids, xs)
    np.maximum.at(highs, ids, xs)
    keep = binned[:, BIN_W] > 0
    return binned[keep], lows[keep], highs[keep]


def midpoint_edges(lows: np.ndarray, highs: np.ndarray, low: float, high: float) -> np.ndarray:
    """Edges of data-driven bins: ``low``, the midpoints between neighbouring bins, ``high``.

    The midpoint between the largest score of a bin and the smallest of the next is Kumar et al.'s
    ``get_equal_bins`` rule; every fitted row stays in its bin. When the two scores are neighbouring
    floats the midpoint rounds to one of them; bins are right-closed, so the edge then falls back to the
    lower bin's largest score.
    """
    mid = 0.5 * (highs[:-1] + lows[1:])
    mid = np.where(mid >= lows[1:], highs[:-1], mid)
    return np.concatenate([[low], mid, [high]])
