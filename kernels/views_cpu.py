"""Numba CPU twins of the MVCE view kernels: one parallel task per view, rows in order (deterministic).

``view_sums_cpu`` takes a view's rows in chunks of ``CHUNK_ROWS``, in passes over each chunk: the Feistel
network of every row (branch-free, so LLVM vectorises it), the bins, the rare cycle walks (their bins
recomputed), then the additions into the view's sums. Each pass is a short loop without unpredictable
branches; with the walk inside the bin loop, the whole ran about 1.4 times slower.
"""

from __future__ import annotations

import numpy as np

from gpucal.kernels._feistel import bin_of, feistel, row_bin, view_keys, walk
from gpucal.kernels._rowmath import view_row_stats
from gpucal.kernels.jit import numba, parallel_rows

# Rows per chunk: the chunk's Feistel values and bins (16 bytes a row) stay in L1.
CHUNK_ROWS = 512


@parallel_rows("rows")
def view_bins_cpu(rows, n_views, n_total, n_bins, seed, right_bits, n_left):
    """Return the ``(n_views, len(rows))`` int32 bin ids of the global row ids ``rows`` (uint64)."""
    out = np.empty((n_views, rows.shape[0]), dtype=np.int32)
    for v in numba.prange(n_views):
        keys = view_keys(seed, v)
        for i in range(rows.shape[0]):
            out[v, i] = np.int32(row_bin(rows[i], n_total, n_bins, keys, right_bits, n_left))
    return out


@parallel_rows("p")
def view_sums_cpu(p, y, w, n_views, row_offset, n_total, n_bins, seed, right_bits, n_left):
    """Return the ``(n_views, n_bins, 4)`` float64 sums of ``count, w, w*p, w*y``.

    Row ``i`` has global id ``row_offset + i`` (uint64); ``w`` of length 0 means unit weights.
    """
    out = np.zeros((n_views, np.int64(n_bins), 4), dtype=np.float64)
    has_w = w.shape[0] > 0
    n_rows = p.shape[0]
    for v in numba.prange(n_views):
        keys = view_keys(seed, v)
        sums = out[v]
        images = np.empty(CHUNK_ROWS, dtype=np.uint64)
        bins = np.empty(CHUNK_ROWS, dtype=np.uint64)
        for start in range(0, n_rows, CHUNK_ROWS):
            stop = min(start + CHUNK_ROWS, n_rows)
            first = row_offset + np.uint64(start)
            for j in range(stop - start):
                images[j] = feistel(first + np.uint64(j), keys, right_bits, n_left)
            for j in range(stop - start):
                # An image at or above n_total gets a meaningless bin here, replaced after its walk below.
                bins[j] = np.uint64(bin_of(images[j], n_total, n_bins))
            for j in range(stop - start):
                if images[j] >= n_total:
                    pi = walk(images[j], n_total, keys, right_bits, n_left)
                    bins[j] = np.uint64(bin_of(pi, n_total, n_bins))
            for i in range(start, stop):
                # An unsigned bin index: numba adds no negative-index wrap-around to the four additions.
                b = bins[i - start]
                wi = w[i] if has_w else 1.0
                s0, s1, s2, s3 = view_row_stats(p[i], y[i], wi)
                sums[b, 0] += s0
                sums[b, 1] += s1
                sums[b, 2] += s2
                sums[b, 3] += s3
    return out
