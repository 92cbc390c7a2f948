"""``chunk_blocks``: isotonic regression's pool-adjacent-violators over chunks of sorted rows, in parallel.

The rows, sorted by score, are cut into chunks that each start a tie group (:func:`chunk_bounds`), and
every chunk is pooled on its own (:func:`~gpucal.kernels.pav_walk.walk_chunk`): a chunk per CPU task or
per GPU thread. Pooling the chunks' blocks in order then gives the blocks of one walk over all the rows:
a pooling of adjacent violators inside a chunk is one the whole walk may make, and pool-adjacent-violators
reaches the same fit whatever the order of its poolings (Best & Chakravarti 1990, section 3; Spark
MLlib fits isotonic regression over partitions so). ``gpucal.calibrators.pav`` does that last pooling
on the host, over far fewer blocks than rows.

Forms: the numpy oracle (:mod:`~gpucal.kernels.pav_chunks_oracle`), the numba CPU twin (a parallel task
per chunk) and the CUDA kernel (a thread per chunk).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpucal.kernels._dispatch import check_1d, check_count, namespace_of, resolve_backend, to_host
from gpucal.kernels.pav_chunks_cpu import chunk_blocks_cpu
from gpucal.kernels.pav_chunks_oracle import chunk_blocks_oracle
from gpucal.kernels.pav_walk import N_BLOCK_STATS

__all__ = ["DEVICE_CHUNK_ROWS", "chunk_blocks", "chunk_bounds", "compact_chunk_blocks"]

#: Rows per chunk on the GPU: a thread per chunk (39,000 threads for 1e7 rows), chunks long enough that
#: their blocks are far fewer than their rows. Chosen without a GPU; the blocks take ``(n, 5)`` float64.
DEVICE_CHUNK_ROWS = 256


def chunk_bounds(x: Any, chunk_rows: int, tie_eps: float) -> Any:
    """Chunk bounds over the sorted scores ``x`` (int64, first 0, last ``len(x)``, in ``x``'s namespace).

    A chunk starts at the first row at or after each multiple of ``chunk_rows`` whose score is
    ``tie_eps`` or more above the row's before: such a row opens a tie group whatever came before it,
    since its group's first score could only be lower. The common case reads the rows at the multiples
    only; ties there send the search over every row.
    """
    xp = namespace_of(x)
    n = int(x.shape[0])
    nominal = xp.arange(chunk_rows, n, chunk_rows, dtype=xp.int64)
    opens = nominal[x[nominal] - x[nominal - 1] >= tie_eps]
    if opens.shape[0] < nominal.shape[0]:
        every = xp.flatnonzero(x[1:] - x[:-1] >= tie_eps).astype(xp.int64) + 1
        found = xp.searchsorted(every, nominal, side="left")
        opens = xp.unique(every[found[found < every.shape[0]]])
    return xp.concatenate([xp.zeros(1, dtype=xp.int64), opens, xp.full(1, n, dtype=xp.int64)])


def chunk_blocks(
    x: Any,
    y: Any,
    w: Any,
    bounds: Any,
    *,
    tie_eps: float,
    backend: str = "auto",
    n_blocks: int | None = None,
    threads_per_block: int | None = None,
) -> tuple[Any, Any]:
    """Pool each chunk of sorted rows on its own: return ``(blocks, counts)``.

    .. math::

        \\min_{v_1 \\le \\dots \\le v_k} \\sum_j W_j (\\bar y_j - v_j)^2

    over each chunk's tie groups :math:`j` (weights :math:`W_j`, mean labels :math:`\\bar y_j`).

    Parameters
    ----------
    x, y, w : float64 arrays of shape (n,)
        Scores sorted increasing, labels and weights (rows of zero weight are skipped).
    bounds : int64 array
        Chunk bounds from :func:`chunk_bounds` (each chunk starts a tie group).
    tie_eps : float
        scikit-learn's tie tolerance: a row within it above its group's first score joins the group.
    backend : {'auto', 'oracle', 'cpu', 'cuda'}, default='auto'
        'auto' is 'cuda' when the inputs are cupy arrays, else 'cpu'.
    n_blocks, threads_per_block
        CUDA launch options (tests and tuning; ignored by the other backends).

    Returns
    -------
    blocks : float64 array of shape (n, N_BLOCK_STATS)
        Chunk ``c``'s blocks in rows ``bounds[c] : bounds[c] + counts[c]``, in the layout of
        :mod:`~gpucal.kernels.pav_walk`; the other rows are not set.
    counts : int64 array of shape (len(bounds) - 1,)
    """
    backend = resolve_backend(backend, x, y, w)
    if backend in ("oracle", "cpu"):
        x, y, w, bounds = (to_host(a) for a in (x, y, w, bounds))
    n_rows = int(x.shape[0])
    for name, a in (("x", x), ("y", y), ("w", w)):
        check_1d(a, name, n_rows)
        if a.dtype != np.float64:
            msg = f"{name} must be float64. Got dtype {a.dtype} instead."
            raise TypeError(msg)
    if (
        bounds.ndim != 1
        or bounds.shape[0] < 2
        or int(bounds[0]) != 0
        or int(bounds[-1]) != n_rows
        or bool((bounds[1:] < bounds[:-1]).any())  # chunks going back would write each other's rows
    ):
        msg = f"bounds must run from 0 to len(x) = {n_rows} without going back; use chunk_bounds."
        raise ValueError(msg)
    if backend == "oracle":
        return chunk_blocks_oracle(x, y, w, bounds, tie_eps)
    xp = namespace_of(x)
    blocks = xp.empty((n_rows, N_BLOCK_STATS), dtype=xp.float64)
    counts = xp.empty(bounds.shape[0] - 1, dtype=xp.int64)
    bounds = xp.ascontiguousarray(bounds, dtype=xp.int64)
    if backend == "cpu":
        chunk_blocks_cpu(x, y, w, bounds, float(tie_eps), blocks, counts)
        return blocks, counts
    from gpucal.kernels.pav_chunks_cuda import THREADS_PER_BLOCK, launch_chunk_blocks

    launch_chunk_blocks(
        x,
        y,
        w,
        bounds,
        float(tie_eps),
        blocks,
        counts,
        n_blocks=n_blocks,
        threads_per_block=check_count(threads_per_block or THREADS_PER_BLOCK, "threads_per_block", 1),
    )
    return blocks, counts


def compact_chunk_blocks(blocks: Any, counts: Any, bounds: Any) -> Any:
    """The chunks' blocks in order, one after another: ``(sum(counts), N_BLOCK_STATS)``, in the input's
    namespace (a gather, so that the host receives the blocks, not the rows).

    Output row ``r`` of chunk ``c`` is ``blocks[r + bounds[c] - first[c]]``, ``first[c]`` the chunk's
    first output row: the shift per output row is a prefix sum of its changes at each chunk's first row
    (``cupy.repeat`` takes no device array of counts).
    """
    xp = namespace_of(blocks)
    firsts = xp.cumsum(counts) - counts
    filled = counts > 0
    shifts = (bounds[:-1] - firsts)[filled]
    changes = xp.zeros(int(counts.sum()), dtype=xp.int64)
    changes[firsts[filled]] = xp.diff(shifts, prepend=0)
    return blocks[xp.cumsum(changes) + xp.arange(changes.shape[0], dtype=xp.int64)]
