"""numba-cuda kernels for the MVCE views (imported only on the CUDA path).

``view_sums``: a 2-D grid, ``blockIdx.y`` strides over views and a grid-stride loop over rows in x.
Each block keeps the ``(n_bins, 4)`` sums of its current view in shared memory when they fit in
``MAX_SHARED_BYTES`` (zeroed, filled with shared atomics, flushed with global atomics), else it adds
into global memory. The bin of a row is ``gpucal.kernels._feistel.row_bin``, built from the functions the CPU
twin calls (``feistel``, ``walk``, ``bin_of``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numba import cuda

from gpucal.kernels._feistel import row_bin, view_keys
from gpucal.kernels._rowmath import view_row_stats
from gpucal.kernels.group_sums_cuda import THREADS_PER_BLOCK, grid_blocks, shared_slots_for

N_VIEW_STATS = 4
# gridDim.y limit on every cc >= 3.0.
MAX_GRID_Y = 65535


@functools.cache
def make_view_sums_kernel(use_shared: bool, shared_slots: int) -> Any:
    """Return the view-sum kernel with ``use_shared`` and the shared array size frozen in as constants.

    ``kernel(p, y, w, n_views, row_offset, n_total, n_bins, seed, right_bits, n_left, out)`` adds
    into the flat float64 ``out`` of ``n_views * n_bins * 4`` slots; ``w`` of length 0 means unit weights.
    """
    slots = shared_slots if use_shared else 1

    @cuda.jit
    def view_sums_kernel(p, y, w, n_views, row_offset, n_total, n_bins, seed, right_bits, n_left, out):
        hist = cuda.shared.array(slots, dtype=np.float64)
        tid = cuda.threadIdx.x
        n_threads = cuda.blockDim.x
        view_size = np.int64(n_bins) * N_VIEW_STATS
        has_w = w.shape[0] > 0
        for v in range(cuda.blockIdx.y, n_views, cuda.gridDim.y):
            keys = view_keys(seed, v)
            view_base = v * view_size
            if use_shared:
                for s in range(tid, view_size, n_threads):
                    hist[s] = 0.0
                # This view's sums are zero before any thread adds to them.
                cuda.syncthreads()
            for i in range(cuda.grid(1), p.shape[0], cuda.gridsize(1)):
                b = np.int64(row_bin(row_offset + np.uint64(i), n_total, n_bins, keys, right_bits, n_left))
                wi = w[i] if has_w else 1.0
                s0, s1, s2, s3 = view_row_stats(p[i], y[i], wi)
                base = b * N_VIEW_STATS
                if use_shared:
                    cuda.atomic.add(hist, base, s0)
                    cuda.atomic.add(hist, base + 1, s1)
                    cuda.atomic.add(hist, base + 2, s2)
                    cuda.atomic.add(hist, base + 3, s3)
                else:
                    cuda.atomic.add(out, view_base + base, s0)
                    cuda.atomic.add(out, view_base + base + 1, s1)
                    cuda.atomic.add(out, view_base + base + 2, s2)
                    cuda.atomic.add(out, view_base + base + 3, s3)
            if use_shared:
                # Every row of this block is in the view's sums before they are flushed.
                cuda.syncthreads()
                for s in range(tid, view_size, n_threads):
                    value = hist[s]
                    if value != 0.0:
                        cuda.atomic.add(out, view_base + s, value)
                # The flush has read every slot before the next view zeroes them.
                cuda.syncthreads()

    return view_sums_kernel


@cuda.jit
def view_bins_kernel(rows, n_total, n_bins, seed, right_bits, n_left, out):
    """Write the bin of each global row id ``rows[i]`` for each view into ``out[v, i]`` (int32)."""
    for v in range(cuda.blockIdx.y, out.shape[0], cuda.gridDim.y):
        keys = view_keys(seed, v)
        for i in range(cuda.grid(1), rows.shape[0], cuda.gridsize(1)):
            out[v, i] = np.int32(row_bin(rows[i], n_total, n_bins, keys, right_bits, n_left))


def _grid(n_rows: int, n_views: int, n_blocks: int | None, threads_per_block: int) -> tuple[int, int]:
    return grid_blocks(n_rows, n_blocks, threads_per_block), max(1, min(n_views, MAX_GRID_Y))


def launch_view_sums(
    p: Any,
    y: Any,
    w: Any,
    n_views: int,
    row_offset: int,
    n_total: int,
    n_bins: int,
    seed: int,
    right_bits: int,
    n_left: int,
    out: Any,
    *,
    force_global: bool = False,
    n_blocks: int | None = None,
    threads_per_block: int = THREADS_PER_BLOCK,
) -> None:
    """Add the view sums of the device arrays into the flat device array ``out`` (``n_views*n_bins*4``)."""
    slots = 0 if force_global else shared_slots_for(n_bins * N_VIEW_STATS)
    kernel = make_view_sums_kernel(slots > 0, slots)
    grid = _grid(p.shape[0], n_views, n_blocks, threads_per_block)
    kernel[grid, threads_per_block](
        p,
        y,
        w,
        np.int64(n_views),
        np.uint64(row_offset),
        np.uint64(n_total),
        np.uint64(n_bins),
        np.uint64(seed),
        np.uint64(right_bits),
        np.uint64(n_left),
        out,
    )


def launch_view_bins(
    rows: Any,
    n_total: int,
    n_bins: int,
    seed: int,
    right_bits: int,
    n_left: int,
    out: Any,
    *,
    n_blocks: int | None = None,
    threads_per_block: int = THREADS_PER_BLOCK,
) -> None:
    """Write the ``(n_views, len(rows))`` int32 bin ids of the uint64 device array ``rows`` into ``out``."""
    grid = _grid(rows.shape[0], out.shape[0], n_blocks, threads_per_block)
    view_bins_kernel[grid, threads_per_block](
        rows,
        np.uint64(n_total),
        np.uint64(n_bins),
        np.uint64(seed),
        np.uint64(right_bits),
        np.uint64(n_left),
        out,
    )
