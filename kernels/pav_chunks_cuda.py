"""The CUDA kernel of :func:`gpucal.kernels.pav_chunks.chunk_blocks`: one thread per chunk of sorted rows.

Each thread walks its chunk alone (:func:`~gpucal.kernels.pav_walk.walk_chunk`), its block stack in the
chunk's own rows of ``blocks``. Chunks of :data:`~gpucal.kernels.pav_chunks.DEVICE_CHUNK_ROWS` rows give
1e7 rows some 39,000 threads (timed in ``benchmarks/results/gpu.md``, its fifth run). The threads of a
warp read 32 chunks apart, so the loads are not coalesced; a layout that reads them together may pay.
"""

from __future__ import annotations

from typing import Any

from numba import cuda

from gpucal.kernels import pav_walk

THREADS_PER_BLOCK = 128

# A device function compiled from the Python source of the CPU twin's walk (the simulator cannot hand
# its arrays to an njit function; a device function works on the GPU and in the simulator).
walk_chunk = cuda.jit(device=True)(pav_walk.walk_chunk.py_func)


@cuda.jit
def chunk_blocks_kernel(x, y, w, bounds, tie_eps, blocks, counts):  # pragma: no cover - device code
    """Walk chunk ``c`` (rows ``bounds[c]:bounds[c + 1]``) into ``blocks``; ``counts[c]``: its blocks."""
    for c in range(cuda.grid(1), counts.shape[0], cuda.gridsize(1)):
        counts[c] = walk_chunk(x, y, w, bounds[c], bounds[c + 1], tie_eps, blocks)


def launch_chunk_blocks(
    x: Any,
    y: Any,
    w: Any,
    bounds: Any,
    tie_eps: float,
    blocks: Any,
    counts: Any,
    *,
    n_blocks: int | None = None,
    threads_per_block: int = THREADS_PER_BLOCK,
) -> None:
    """Launch :func:`chunk_blocks_kernel` with a thread per chunk (``n_blocks``: fewer, grid-striding)."""
    if n_blocks is None:  # not capped like group_sums_cuda.grid_blocks: a chunk's walk is long, one each
        n_blocks = max(1, -(-counts.shape[0] // threads_per_block))
    chunk_blocks_kernel[n_blocks, threads_per_block](x, y, w, bounds, tie_eps, blocks, counts)
