"""numba-cuda kernel for the group-sum histogram (imported only on the CUDA path).

Layout after XGBoost's GPU ``hist``: a grid-stride loop; each block fills a private histogram in
shared memory (zeroed, filled with shared atomics, flushed to global memory with one atomic per
non-zero slot) when the whole ``(n_nodes, n_bins, 7)`` histogram fits in ``MAX_SHARED_BYTES``, and adds
straight into global memory with atomics otherwise. The per-row arithmetic is
``gpucal.kernels._rowmath.group_row_stats``, the function the CPU twin calls.

A thread takes one (row, feature) pair, not one row: the lanes of a warp then add into the features of
``32 / d`` consecutive rows rather than into one feature of 32 rows. A 64-bit atomic in shared memory
is a compare-and-swap loop on sm_90, and fewer lanes on the slot of a low-cardinality feature retry
less: on an H200 at 1e7 rows x 8 features, 2.5 ms against 3.3 ms in shared memory, 8.7 ms against
8.4 ms with global atomics (``benchmarks/results/gpu_group_sums.md``).

Float atomics make the order of additions, hence the last bits of the sums, vary between runs: compare
GPU results with a tolerance.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numba import cuda

from gpucal.kernels._dispatch import namespace_of, to_host
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


def grid_blocks(n_items: int, n_blocks: int | None, threads_per_block: int) -> int:
    """``n_blocks``, or by default one block per ``threads_per_block`` items, at most ``MAX_BLOCKS`` (the
    kernels' grid-stride loops do the rest)."""
    if n_blocks is None:
        n_blocks = min(MAX_BLOCKS, max(1, -(-n_items // threads_per_block)))
    return n_blocks


# The code range kernel gives each feature ``THREADS_PER_BLOCK // d`` threads of a block, so it takes
# up to this many features; wider code matrices are reduced by the array library.
MAX_RANGE_FEATURES = THREADS_PER_BLOCK


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
        for pair in range(cuda.grid(1), n * d, cuda.gridsize(1)):
            i = pair // d
            node = node_idx[i] if has_nodes else 0
            if node < 0:
                continue
            wi = w[i] if has_w else 1.0
            s0, s1, s2, s3, s4, s5, s6 = group_row_stats(f[i], y[i], wi)
            j = pair - i * d
            base = (node * n_bins + offsets[j] + codes[i, j]) * N_STATS
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
            # Every pair of this block is in the shared histogram before it is flushed.
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
    (tests run both). ``n_blocks`` defaults to one block per ``threads_per_block`` (row, feature) pairs,
    capped at ``MAX_BLOCKS``.
    """
    slots = 0 if force_global else shared_slots_for(out.shape[0])
    kernel = make_group_sums_kernel(slots > 0, slots)
    n_pairs = codes.shape[0] * codes.shape[1]
    n_blocks = grid_blocks(n_pairs, n_blocks, threads_per_block)
    kernel[n_blocks, threads_per_block](codes, f, y, w, node_idx, offsets, np.int64(n_bins), out)


@cuda.jit
def code_range_kernel(codes, low, high):
    """Lower ``low[j]`` and raise ``high[j]`` (int64) to the extremes of ``codes[:, j]``.

    The block has a multiple of ``d`` threads, so a thread keeps one feature ``j = tid % d`` and the
    threads of that feature stride over the rows together; each keeps its extremes in registers, the
    block reduces them in shared memory and one thread per feature adds them with one atomic each.
    ``low`` and ``high`` start at the first row's codes.
    """
    partial_low = cuda.shared.array(THREADS_PER_BLOCK, dtype=np.int64)
    partial_high = cuda.shared.array(THREADS_PER_BLOCK, dtype=np.int64)
    tid = cuda.threadIdx.x
    n = codes.shape[0]
    d = codes.shape[1]
    j = tid % d
    lo = np.int64(codes[0, j])
    hi = lo
    for i in range(cuda.grid(1) // d, n, cuda.gridsize(1) // d):
        code = np.int64(codes[i, j])
        lo = min(lo, code)
        hi = max(hi, code)
    partial_low[tid] = lo
    partial_high[tid] = hi
    # Every thread's extremes are in shared memory before the feature's first thread reads them.
    cuda.syncthreads()
    if tid < d:
        for t in range(tid + d, cuda.blockDim.x, d):
            lo = min(lo, partial_low[t])
            hi = max(hi, partial_high[t])
        cuda.atomic.min(low, j, lo)
        cuda.atomic.max(high, j, hi)


def launch_code_range(codes: Any, *, n_blocks: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Return the per-feature minimum and maximum of the device ``codes`` (``n, d >= 1``) as host int64.

    One pass over the codes. cupy's ``min(axis=0)`` and ``max(axis=0)`` of a row-major ``(n, d)`` matrix
    took 115 ms together at 1e7 x 8 on an H200 (this kernel 0.34 ms), and made the group sums' input
    check cost 30 times the histogram.
    """
    xp = namespace_of(codes)
    n, d = codes.shape
    if d > MAX_RANGE_FEATURES:
        return to_host(codes.min(axis=0)).astype(np.int64), to_host(codes.max(axis=0)).astype(np.int64)
    threads = d * (THREADS_PER_BLOCK // d)
    n_blocks = grid_blocks(n, n_blocks, threads // d)
    low = xp.asarray(codes[0], dtype=np.int64).copy()
    high = low.copy()
    code_range_kernel[n_blocks, threads](codes, low, high)
    return to_host(low), to_host(high)
