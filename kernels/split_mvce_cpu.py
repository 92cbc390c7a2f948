"""Numba CPU twin of the MVCE split sums: one parallel task per view, rows in a fixed order (deterministic).

The rows of the active nodes are first put in node order by a stable counting sort (``slot_order``), so
each node's rows are contiguous and its Feistel parameters are constants in the inner loops; a bin holds
the rows of one node only, so every bin still adds its rows in their input order. The rows are then taken
in blocks of ``block_rows``: a parallel pass over the block computes, once per row, the weighted residual
:math:`w_i (q_{ij} - y_i)` of every candidate column ``j`` (one logit per row, one map per candidate),
and a parallel pass over the views adds the block into each view's sums. A block's residuals (about
``BLOCK_BYTES``) stay in the cache while every view reads them. Inside a view, a node's rows go in chunks
of ``CHUNK_ROWS``, in passes as in ``gpucal.kernels.views_cpu``: the Feistel network of every row
(branch-free,
vectorised), the bins, the rare cycle walks, then the additions. The weight of a bin does not depend on
the candidate: it is added once per row and copied into every column at the end.
"""

from __future__ import annotations

import numpy as np

from gpucal.kernels._feistel import bin_of, feistel, view_keys, walk
from gpucal.kernels.jit import numba
from gpucal.kernels.trees_row import apply_map, finish_value, start_value

# Rows per chunk: the chunk's Feistel values and bins (16 bytes a row) stay in L1.
CHUNK_ROWS = 512
# Bytes of residuals per block of rows: small enough to stay in L2/L3 while all views read the block,
# large enough that the two parallel launches per block cost little (blocks of 4096 rows ran 2x slower).
BLOCK_BYTES = 4 << 20
MIN_BLOCK_ROWS = 1 << 14


def block_rows_for(n_columns: int) -> int:
    """Return the rows per block for ``n_columns`` candidate columns (``BLOCK_BYTES`` of residuals)."""
    return max(MIN_BLOCK_ROWS, BLOCK_BYTES // (8 * (n_columns + 2)))


@numba.njit(cache=True)
def slot_order(slot, n_slots):
    """Return ``(order, seg)``: the rows with ``slot >= 0`` stably sorted by slot, and slot ``s``'s range.

    Slot ``s``'s rows are ``order[seg[s]:seg[s + 1]]``, in input order (a counting sort).
    """
    seg = np.zeros(n_slots + 1, dtype=np.int64)
    for i in range(slot.shape[0]):
        s = slot[i]
        if s >= 0:
            seg[s + 1] += 1
    for s in range(n_slots):
        seg[s + 1] += seg[s]
    pos = seg[:-1].copy()
    order = np.empty(seg[n_slots], dtype=np.int64)
    for i in range(slot.shape[0]):
        s = slot[i]
        if s >= 0:
            order[pos[s]] = i
            pos[s] += 1
    return order, seg


@numba.njit(parallel=True, cache=True)
def _block_residuals(
    resid,
    weight,
    local,
    codes,
    f,
    y,
    w,
    slot,
    local_row,
    order,
    first,
    child_value,
    node_value,
    offsets,
    leaf_map,
):
    """Fill the block's residuals ``(rows, d + 1)``, weights and local row ids from rows ``order[first:]``."""
    d = codes.shape[1]
    has_w = w.shape[0] > 0
    for k in numba.prange(resid.shape[0]):
        i = order[first + k]
        s = slot[i]
        wi = np.float64(w[i]) if has_w else 1.0
        yi = np.float64(y[i])
        x = start_value(f[i], 1.0, 0.0, leaf_map)
        for j in range(d):
            v = offsets[j] + codes[i, j]
            q = finish_value(apply_map(x, child_value[s, v, 0], child_value[s, v, 1], leaf_map), leaf_map)
            resid[k, j] = wi * (q - yi)
        q = finish_value(apply_map(x, node_value[s, 0], node_value[s, 1], leaf_map), leaf_map)
        resid[k, d] = wi * (q - yi)
        weight[k] = wi
        local[k] = np.uint64(local_row[i])


@numba.njit(parallel=True, cache=True)
def _add_block(
    res_acc,
    w_acc,
    resid,
    weight,
    local,
    first,
    seg,
    slot_rows,
    slot_bins,
    slot_bin_start,
    right_bits,
    n_left,
    view_start,
    seed,
):
    """Add the block of sorted rows ``[first, first + len(resid))`` into every view's sums."""
    n_views = res_acc.shape[0]
    n_columns = resid.shape[1]
    n_slots = seg.shape[0] - 1
    stop_block = first + resid.shape[0]
    for v in numba.prange(n_views):
        keys = view_keys(seed, view_start + np.uint64(v))
        acc = res_acc[v]
        wacc = w_acc[v]
        images = np.empty(CHUNK_ROWS, dtype=np.uint64)
        bins = np.empty(CHUNK_ROWS, dtype=np.uint64)
        for s in range(n_slots):
            lo = max(seg[s], first)
            hi = min(seg[s + 1], stop_block)
            if lo >= hi:
                continue
            n_total = slot_rows[s]
            n_bins = slot_bins[s]
            rb = right_bits[s]
            nl = n_left[s]
            start = np.uint64(slot_bin_start[s])
            for c0 in range(lo - first, hi - first, CHUNK_ROWS):
                n_chunk = min(CHUNK_ROWS, hi - first - c0)
                for t in range(n_chunk):
                    images[t] = feistel(local[c0 + t], keys, rb, nl)
                for t in range(n_chunk):
                    # An image at or above n_total gets a meaningless bin here, replaced after its walk.
                    bins[t] = start + np.uint64(bin_of(images[t], n_total, n_bins))
                for t in range(n_chunk):
                    if images[t] >= n_total:
                        pi = walk(images[t], n_total, keys, rb, nl)
                        bins[t] = start + np.uint64(bin_of(pi, n_total, n_bins))
                for t in range(n_chunk):
                    # Unsigned indices: no negative-index wrap-around in the additions.
                    g = bins[t]
                    k = c0 + t
                    for j in range(n_columns):
                        acc[g, j] += resid[k, j]
                    wacc[g] += weight[k]


@numba.njit(parallel=True, cache=True)
def _assemble(res_acc, w_acc):
    """Return ``(n_views, total_bins, d + 1, 2)``: residual sums, and the bin weight in every column."""
    n_views, total_bins, n_columns = res_acc.shape
    out = np.empty((n_views, total_bins, n_columns, 2), dtype=np.float64)
    for v in numba.prange(n_views):
        for g in range(total_bins):
            wg = w_acc[v, g]
            for j in range(n_columns):
                out[v, g, j, 0] = res_acc[v, g, j]
                out[v, g, j, 1] = wg
    return out


def mvce_split_sums_cpu(
    codes,
    f,
    y,
    w,
    slot,
    local_row,
    slot_rows,
    slot_bins,
    slot_bin_start,
    right_bits,
    n_left,
    child_value,
    node_value,
    offsets,
    leaf_map,
    n_views,
    view_start,
    seed,
    total_bins,
    block_rows=None,
):
    """Return the split sums ``(n_views, total_bins, d + 1, 2)`` float64
    (``gpucal.kernels.split_mvce_oracle``).

    Arrays are C-contiguous: ``f``, ``y``, ``w`` float64 (``w`` of length 0: unit weights), ``slot``
    int32, ``local_row`` int64, the per-slot ``slot_rows``, ``slot_bins``, ``right_bits``, ``n_left``
    uint64 and ``slot_bin_start`` int64; ``view_start`` and ``seed`` are ``np.uint64``. ``block_rows``
    (default ``block_rows_for(d + 1)``) changes the memory used, never the result.
    """
    n_columns = codes.shape[1] + 1
    block_rows = block_rows_for(n_columns) if block_rows is None else int(block_rows)
    order, seg = slot_order(slot, slot_rows.shape[0])
    res_acc = np.zeros((n_views, total_bins, n_columns), dtype=np.float64)
    w_acc = np.zeros((n_views, total_bins), dtype=np.float64)
    n_kept = order.shape[0]
    size = min(block_rows, n_kept)
    resid = np.empty((size, n_columns), dtype=np.float64)
    weight = np.empty(size, dtype=np.float64)
    local = np.empty(size, dtype=np.uint64)
    for first in range(0, n_kept, block_rows):
        rows = min(block_rows, n_kept - first)
        _block_residuals(
            resid[:rows],
            weight[:rows],
            local[:rows],
            codes,
            f,
            y,
            w,
            slot,
            local_row,
            order,
            first,
            child_value,
            node_value,
            offsets,
            np.int64(leaf_map),
        )
        _add_block(
            res_acc,
            w_acc,
            resid[:rows],
            weight[:rows],
            local[:rows],
            first,
            seg,
            slot_rows,
            slot_bins,
            slot_bin_start,
            right_bits,
            n_left,
            view_start,
            seed,
        )
    return _assemble(res_acc, w_acc)
