"""Bin ids on the predicted probability: equal-width (sklearn's edges) and equal-mass (weighted CDF).

Equal-width ("uniform"): edges ``np.linspace(0, 1, n_bins + 1)``; a row goes to
``np.searchsorted(edges[1:-1], p)``, exactly as ``sklearn.calibration.calibration_curve``: bins are
closed on the right, ``[0, e_1], (e_1, e_2], ..., (e_{n-1}, 1]``. On the CPU a compiled loop guesses the
bin as ``floor(p * n_bins)`` and steps to the searchsorted answer (a step is needed only on or within an
ulp of an edge, since the guess and the edges are each within an ulp of ``k / n_bins``), several times
faster than numpy's searchsorted.

Equal-mass ("quantile"): rows sorted by ``p``; with ``S_<(p)`` the weight of the rows whose probability
is strictly smaller and ``W`` the total weight, a row goes to bin
``min(n_bins - 1, floor(n_bins * S_< / W))``, the position snapped to a whole number within
:data:`MASS_EDGE_SNAP` (the sums' rounding).
Tied probabilities are never split (a tie group goes to the bin where its weight starts), so the bins do
not depend on row order and integer weights equal repeated rows; heavy ties can leave bins empty.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from gpucal._backend import array_namespace
from gpucal.kernels import readonly
from gpucal.kernels.jit import numba, parallel_rows
from gpucal.metrics.sums import COUNT, WP, WY, W, code_dtype


def uniform_edges(n_bins: int) -> np.ndarray:
    """Return sklearn's equal-width edges ``np.linspace(0, 1, n_bins + 1)``."""
    return np.linspace(0.0, 1.0, n_bins + 1)


@parallel_rows("p")
def _uniform_bin_ids_cpu(p, interior, out):  # pragma: no cover - compiled; tested against the fallback
    n_bins = interior.shape[0] + 1
    last = n_bins - 1
    for i in numba.prange(p.shape[0]):
        x = p[i]
        # Guess floor(x * n_bins) (x >= 0, so int() truncates to the floor), then step to
        # searchsorted(interior, x, side="left"): the number of interior edges strictly below x.
        b = min(int(x * n_bins), last)
        while b > 0 and x <= interior[b - 1]:
            b -= 1
        while b < last and x > interior[b]:
            b += 1
        out[i] = b


def uniform_bin_ids(p: Any, n_bins: int, *, force_fallback: bool = False) -> Any:
    """Return equal-width bin ids (narrowest int dtype), the same as sklearn's ``calibration_curve``.

    ``force_fallback=True`` takes the plain ``searchsorted`` path (the one cupy always takes); tests
    run both.
    """
    xp = array_namespace(p)
    interior = uniform_edges(n_bins)[1:-1]
    dtype = code_dtype(n_bins)
    if xp is not np or force_fallback:
        return xp.searchsorted(xp.asarray(interior), p, side="left").astype(dtype)
    out = np.empty(p.shape[0], dtype=dtype)
    _uniform_bin_ids_cpu(readonly(np.ascontiguousarray(p, dtype=np.float64)), interior, out)
    return out


#: Relative distance from a whole number within which an equal-mass position is that number. The
#: weight below a score is a running sum, and weights such as 0.1 do not add exactly: 30 rows of 0.1
#: below 300 of them read 0.0999..., a bin early. Snapped, constant weights bin as unit weights do, and
#: the paths' orders of addition (numba, cupy, dask) bin alike, while the sums' rounding stays inside
#: it: up to about 1e5 rows of such weights (a running sum errs by up to one rounding per term). Whole
#: weights add exactly; a position that is not whole sits at least 1 / W from one, outside this unless
#: the total weight W reaches about 1e11 / n_bins.
MASS_EDGE_SNAP = 1e-11


def mass_positions(below: Any, total: Any, n_bins: int) -> Any:
    """Return :math:`n_{bins} S_< / W`, snapped to a whole number within :data:`MASS_EDGE_SNAP`."""
    xp = array_namespace(below)
    q = n_bins * below / total
    whole = xp.round(q)
    return xp.where(xp.abs(q - whole) <= MASS_EDGE_SNAP * whole, whole, q)


@numba.njit(cache=True, inline="always")
def mass_bin_of(below, total, n_bins):  # pragma: no cover - compiled
    """The equal-mass bin of a score with weight ``below`` under it, of ``total``: the rule of
    :func:`mass_positions`, then ``min(n_bins - 1, floor(.))``."""
    q = n_bins * below / total
    whole = np.round(q)
    if abs(q - whole) <= MASS_EDGE_SNAP * whole:
        q = whole
    return np.int64(min(np.floor(q), n_bins - 1))


def mass_bin_ids(p: Any, w: Any, n_bins: int, groups: Any = None) -> Any:
    """Return equal-mass bin ids (int32) on the weighted CDF of ``p``, ties kept together.

    With ``groups`` (int codes) the CDF is taken inside each group, so every group gets its own
    ``n_bins`` equal-mass bins (GC-N).
    """
    xp = array_namespace(p)
    n = p.shape[0]
    if groups is None:
        order = xp.argsort(p)
        new_group = xp.zeros(n, dtype=bool)
    else:
        order = xp.lexsort(xp.stack([p, groups]))
        g_sorted = groups[order]
        new_group = xp.concatenate([xp.ones(1, dtype=bool), g_sorted[1:] != g_sorted[:-1]])
    p_sorted = p[order]
    w_sorted = xp.ones(n, dtype=xp.float64) if w is None else w[order]
    # prefix[i] = weight of the sorted rows before row i; prefix[n] = total weight.
    prefix = xp.concatenate([xp.zeros(1, dtype=xp.float64), xp.cumsum(w_sorted)])
    new_group[0] = True
    new_tie = new_group | xp.concatenate([xp.ones(1, dtype=bool), p_sorted[1:] != p_sorted[:-1]])
    tie_start = xp.flatnonzero(new_tie)[xp.cumsum(new_tie) - 1]
    group_bounds = xp.concatenate([xp.flatnonzero(new_group), xp.asarray([n])])
    group_id = xp.cumsum(new_group) - 1
    group_start = group_bounds[:-1][group_id]
    group_total = (prefix[group_bounds[1:]] - prefix[group_bounds[:-1]])[group_id]
    below = prefix[tie_start] - prefix[group_start]
    # A group of zero total weight holds only zero-weight rows: bin 0, and its sums are all zero.
    safe_total = xp.where(group_total > 0, group_total, 1.0)
    ids_sorted = xp.minimum(xp.floor(mass_positions(below, safe_total, n_bins)), n_bins - 1).astype(xp.int32)
    ids = xp.empty(n, dtype=xp.int32)
    ids[order] = ids_sorted
    return ids


def bin_ids(p: Any, w: Any, n_bins: int, strategy: str) -> Any:
    """Dispatch on ``strategy``: ``"uniform"`` (equal width) or ``"quantile"`` (equal mass)."""
    if strategy == "uniform":
        return uniform_bin_ids(p, n_bins)
    return mass_bin_ids(p, w, n_bins)


def table_mass_bins(weight: np.ndarray, n_bins: int, group_start: np.ndarray | None = None) -> np.ndarray:
    """Return the equal-mass bin of every key of a table sorted by score (inside each group of keys
    starting at ``group_start``): the rule of :func:`mass_bin_ids`, ``min(n_bins - 1, floor(n_bins S_< /
    W))``, with ``S_<`` the weight of the group's smaller scores and ``W`` the group's weight.

    A key is a distinct score, so a tie group is never split.
    """
    n = weight.shape[0]
    prefix = np.concatenate([[0.0], np.cumsum(weight)])
    starts = np.array([0]) if group_start is None else group_start
    bounds = np.concatenate([starts, [n]])
    group_id = np.repeat(np.arange(starts.shape[0]), np.diff(bounds))
    below = prefix[:-1] - prefix[starts][group_id]
    total = (prefix[bounds[1:]] - prefix[bounds[:-1]])[group_id]
    safe_total = np.where(total > 0, total, 1.0)
    return np.minimum(np.floor(mass_positions(below, safe_total, n_bins)), n_bins - 1).astype(np.int64)


@numba.njit(cache=True)
def _table_mass_bin_sums(keys, n_rows, weight, weight_y, n_bins):  # pragma: no cover - compiled
    """``(n_bins, 4)`` sums ``count, w, w*p, w*y`` of a table's keys in their equal-mass bins: the rule
    and the arithmetic of :func:`table_mass_bins` (one group) and :func:`sum_by_id`, in one pass."""
    out = np.zeros((n_bins, 4))
    total = 0.0
    for j in range(weight.shape[0]):
        total += weight[j]
    safe_total = total if total > 0 else 1.0
    below = 0.0
    for j in range(weight.shape[0]):
        b = mass_bin_of(below, safe_total, n_bins)
        out[b, COUNT] += n_rows[j]
        out[b, W] += weight[j]
        out[b, WP] += keys[j] * weight[j]
        out[b, WY] += weight_y[j]
        below += weight[j]
    return out


def table_mass_bin_sums(
    keys: np.ndarray, n_rows: np.ndarray, weight: np.ndarray, weight_y: np.ndarray, n_bins: int
) -> np.ndarray:
    """``(n_bins, 4)`` sums ``count, w, w*p, w*y`` (the ``gpucal.metrics.sums`` columns) of the
    equal-mass bins of a table of distinct scores, in one compiled pass: the numbers of
    ``sum_by_id(table_mass_bins(weight, n_bins), stats, n_bins)``, without the ``(n, 4)`` table of
    statistics and a ``bincount`` per column (2.6 s for 1e7 distinct scores)."""
    return cast(np.ndarray, _table_mass_bin_sums(keys, n_rows, weight, weight_y, n_bins))


def sum_by_id(ids: np.ndarray, stats: np.ndarray, n_ids: int) -> np.ndarray:
    """Return ``(n_ids, k)`` sums of the rows of ``(n, k)`` ``stats`` per id in ``[0, n_ids)``."""
    return np.stack(
        [np.bincount(ids, weights=stats[:, j], minlength=n_ids) for j in range(stats.shape[1])], 1
    )
