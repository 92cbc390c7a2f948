"""Numba CPU twins of the MVCE view kernels: one parallel task per view, rows in order (deterministic)."""

from __future__ import annotations

import numba
import numpy as np

from kernels._feistel import row_bin, view_key
from kernels._rowmath import view_row_stats


@numba.njit(parallel=True, cache=True)
def view_bins_cpu(rows, n_views, n_total, n_bins, seed, half_bits, half_mask):
    """Return the ``(n_views, len(rows))`` int32 bin ids of the global row ids ``rows`` (uint64)."""
    out = np.empty((n_views, rows.shape[0]), dtype=np.int32)
    for v in numba.prange(n_views):
        key = view_key(seed, v)
        for i in range(rows.shape[0]):
            out[v, i] = np.int32(row_bin(rows[i], n_total, n_bins, key, half_bits, half_mask))
    return out


@numba.njit(parallel=True, cache=True)
def view_sums_cpu(p, y, w, n_views, row_offset, n_total, n_bins, seed, half_bits, half_mask):
    """Return the ``(n_views, n_bins, 4)`` float64 sums of ``count, w, w*p, w*y``.

    Row ``i`` has global id ``row_offset + i`` (uint64); ``w`` of length 0 means unit weights.
    """
    out = np.zeros((n_views, np.int64(n_bins), 4), dtype=np.float64)
    has_w = w.shape[0] > 0
    for v in numba.prange(n_views):
        key = view_key(seed, v)
        for i in range(p.shape[0]):
            b = np.int64(row_bin(row_offset + np.uint64(i), n_total, n_bins, key, half_bits, half_mask))
            wi = w[i] if has_w else 1.0
            s0, s1, s2, s3 = view_row_stats(p[i], y[i], wi)
            out[v, b, 0] += s0
            out[v, b, 1] += s1
            out[v, b, 2] += s2
            out[v, b, 3] += s3
    return out
