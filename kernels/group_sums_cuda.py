"""numba-cuda kernel for the group-sum histogram (imported only on the CUDA path).

Layout after XGBoost's GPU ``hist``: a grid-stride loop over rows; each block fills a private
histogram in shared memory (zeroed, filled with shared atomics, flushed to global memory with one
atomic per non-zero slot) when the whole ``(n_nodes, n_bins, 7)`` histogram fits in
``MAX_SHARED_BYTES``, and adds straight into global memory with atomics otherwise. The per-row
arithmetic is ``gpucal.kernels._rowmath.group_row_stats``, the function the CPU twin calls.

Float atomics make the order of additions, hence the last bits of the sums, vary between runs: compare
GPU results with a tolerance.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numba import cuda

from gpucal.kernels._rowmath import group_row_stats
from gpucal.kernels.group_sums_oracle import N_STATS

# Static shared memory per block; 48 KiB is the limit without opting in to more (all cc >= 7.0).
MAX_SHARED_BYTES = 48 * 1024
MAX_SHARED_SLOTS = MAX_SHARED_BYTES // 8
# Shared histograms are allocated in power-of-two sizes from this one up, to bound the compiled variants.
MIN_SHARED_SLOTS = 256
THREADS_PER_BLOCK = 256
# Enough blocks to fill an H100 (132 SMs x 8 blocks of 256 threads); the grid-stride loop does the rest.
MAX_BLOCKS = 1024


def shared_slots_for(hist_size: int) -> int:
    """Return the shared array size (float64 slots) for ``hist_size`` slots, or 0 when they do not fit.

    Sizes are powers of two from ``MIN_SHARED_SLOTS``, capped at ``MAX_SHARED_SLOTS``, so few variants
    are compiled and a block does not reserve 48 KiB for a small histogram (occupancy).
    """
    if hist_size > MAX_SHARED_SLOTS:
        return 0
    slots = MIN_SHARED_SLOTS
    while slots < hist_size:
        slots *= 2
    return min(slots, MAX_SHARED_SLOTS)


@functools.cache
def make_group_sums_kernel(use_shared: bool, shared_slots: int) -> Any:
    """Return the group-sum kernel with ``use_shared`` and the shared array size frozen in as constants.

    ``kernel(codes, f, y, w, node_idx, offsets, n_bins, out)`` adds into the flat float64 ``out`` of
    ``n_nodes * n_bins * N_STATS`` slots; ``w`` / ``node_idx`` of length 0 mean unit weights / node 0.
    """
    slots = shared_slots if use_shared else 1

    @cuda.jit
    def group_sums_kernel(codes, f, y, w, node_idx, offsets, n_bins, out):
        hist = cuda.shared.array(slots, dtype=np.float64)
        tid = cuda.threadIdx.x
        n_threads = cuda.blockDim.x
        hist_size = out.shape[0]
        if use_shared:
            for s in range(tid, hist_size, n_threads):
                hist[s] = 0.0
            # The histogram is zero everywhere before any thread adds to it.
            cuda.syncthreads()
        n = codes.shape[0]
        d = codes.shape[1]
        has_nodes = node_idx.shape[0] > 0
        has_w = w.shape[0] > 0
        for i in range(cuda.grid(1), n, cuda.gridsize(1)):
            node = node_idx[i] if has_nodes else 0
            if node < 0:
                continue
            wi = w[i] if has_w else 1.0
            s0, s1, s2, s3, s4, s5, s6 = group_row_stats(f[i], y[i], wi)
            node_base = node * n_bins
            for j in range(d):
                base = (node_base + offsets[j] + codes[i, j]) * N_STATS
                if use_shared:
                    cuda.atomic.add(hist, base, s0)
                    cuda.atomic.add(hist, base + 1, s1)
                    cuda.atomic.add(hist, base + 2, s2)
                    cuda.atomic.add(hist, base + 3, s3)
                    cuda.atomic.add(hist, base + 4, s4)
                    cuda.atomic.add(hist, base + 5, s5)
                    cuda.atomic.add(hist, base + 6, s6)
                else:
                    cuda.atomic.add(out, base, s0)
                    cuda.atomic.add(out, base + 1, s1)
                    cuda.atomic.add(out, base + 2, s2)
                    cuda.atomic.add(out, base + 3, s3)
                    cuda.atomic.add(out, base + 4, s4)
                    cuda.atomic.add(out, base + 5, s5)
                    cuda.atomic.add(out, base + 6, s6)
        if use_shared:
            # Every row of this block is in the shared histogram before it is flushed.
            cuda.syncthreads()
            for s in range(tid, hist_size, n_threads):
                value = hist[s]
                if value != 0.0:
                    cuda.atomic.add(out, s, value)

    return group_sums_kernel


def launch_group_sums(
    codes: Any,
    f: Any,
    y: Any,
    w: Any,
    node_idx: Any,
    offsets: Any,
    n_bins: int,
    out: Any,
    *,
    force_global: bool = False,
    n_blocks: int | None = None,
    threads_per_block: int = THREADS_PER_BLOCK,
) -> None:
    """Add the group sums of the device arrays into the flat device array ``out``.

    ``force_global`` takes the global-atomic path even when the histogram fits in shared memory
    (tests run both). ``n_blocks`` defaults to one block per ``threads_per_block`` rows, capped at
    ``MAX_BLOCKS``.
    """
    slots = 0 if force_global else shared_slots_for(out.shape[0])
    kernel = make_group_sums_kernel(slots > 0, slots)
    n_rows = codes.shape[0]
    if n_blocks is None:
        n_blocks = min(MAX_BLOCKS, max(1, -(-n_rows // threads_per_block)))
    kernel[n_blocks, threads_per_block](codes, f, y, w, node_idx, offsets, np.int64(n_bins), out)
