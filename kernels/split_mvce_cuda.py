"""numba-cuda kernel for the MVCE split sums (imported only on the CUDA path).

A 2-D grid: a grid-stride loop over rows in x, ``blockIdx.y`` strides over views. A thread takes one row
and one view: the row's bin in its node (``gpucal.kernels._feistel.row_bin``, the functions the CPU twin
calls),
then for every candidate column the map of the row's child (``gpucal.kernels.trees_row``, as in prediction)
and
one global atomic add of :math:`w_i (q_{ij} - y_i)`; the bin's weight is added once, into column 0, and the
host copies it into the other columns. The logit of the row is taken once per (row, view); the map of
each candidate (an ``exp`` for shift and platt) is recomputed per view rather than stored, which keeps
the kernel free of scratch memory. With bins of hundreds of rows, atomics on one address are rare.

Float atomics make the order of additions, hence the last bits of the sums, vary between runs: compare
GPU results with a tolerance.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from gpucal.kernels._feistel import row_bin, view_keys
from gpucal.kernels.group_sums_cuda import THREADS_PER_BLOCK, grid_blocks
from gpucal.kernels.trees_row import apply_map, finish_value, start_value

# gridDim.y limit on every cc >= 3.0.
MAX_GRID_Y = 65535


@cuda.jit
def mvce_split_sums_kernel(
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
    out,
):
    """Add the split sums into the flat float64 ``out`` of ``n_views * total_bins * (d + 1) * 2`` slots.

    Slot ``((v * total_bins + g) * (d + 1) + j) * 2 + c``; the weight (``c = 1``) goes to column 0 only.
    """
    d = codes.shape[1]
    n_columns = d + 1
    has_w = w.shape[0] > 0
    for v in range(cuda.blockIdx.y, n_views, cuda.gridDim.y):
        keys = view_keys(seed, view_start + np.uint64(v))
        view_base = np.int64(v) * total_bins
        for i in range(cuda.grid(1), codes.shape[0], cuda.gridsize(1)):
            s = slot[i]
            if s < 0:
                continue
            b = row_bin(np.uint64(local_row[i]), slot_rows[s], slot_bins[s], keys, right_bits[s], n_left[s])
            base = (view_base + slot_bin_start[s] + b) * n_columns * 2
            wi = np.float64(w[i]) if has_w else 1.0
            yi = np.float64(y[i])
            x = start_value(f[i], 1.0, 0.0, leaf_map)
            for j in range(d):
                c = offsets[j] + codes[i, j]
                q = finish_value(apply_map(x, child_value[s, c, 0], child_value[s, c, 1], leaf_map), leaf_map)
                cuda.atomic.add(out, base + 2 * j, wi * (q - yi))
            q = finish_value(apply_map(x, node_value[s, 0], node_value[s, 1], leaf_map), leaf_map)
            cuda.atomic.add(out, base + 2 * d, wi * (q - yi))
            cuda.atomic.add(out, base + 1, wi)


def launch_mvce_split_sums(
    codes: Any,
    f: Any,
    y: Any,
    w: Any,
    slot: Any,
    local_row: Any,
    slot_rows: Any,
    slot_bins: Any,
    slot_bin_start: Any,
    right_bits: Any,
    n_left: Any,
    child_value: Any,
    node_value: Any,
    offsets: Any,
    leaf_map: int,
    n_views: int,
    view_start: int,
    seed: int,
    total_bins: int,
    out: Any,
    *,
    n_blocks: int | None = None,
    threads_per_block: int = THREADS_PER_BLOCK,
) -> None:
    """Add the split sums of the device arrays into the flat device array ``out`` (weights in column 0).

    ``n_blocks`` defaults to one block per ``threads_per_block`` rows, capped at ``MAX_BLOCKS``; the grid's
    y extent is ``min(n_views, MAX_GRID_Y)``.
    """
    n_rows = codes.shape[0]
    grid = (grid_blocks(n_rows, n_blocks, threads_per_block), max(1, min(n_views, MAX_GRID_Y)))
    mvce_split_sums_kernel[grid, threads_per_block](
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
        np.int64(leaf_map),
        np.int64(n_views),
        np.uint64(view_start),
        np.uint64(seed),
        np.int64(total_bins),
        out,
    )
