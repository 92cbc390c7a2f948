"""The numba CPU twin of :func:`gpucal.kernels.pav_chunks.chunk_blocks`: one parallel task per chunk."""

from __future__ import annotations

from gpucal.kernels.jit import numba, parallel_rows
from gpucal.kernels.pav_walk import walk_chunk


@parallel_rows("x")
def chunk_blocks_cpu(x, y, w, bounds, tie_eps, blocks, counts):  # pragma: no cover - compiled
    """Walk chunk ``c`` (rows ``bounds[c]:bounds[c + 1]``) into ``blocks``; ``counts[c]``: its blocks."""
    for c in numba.prange(counts.shape[0]):
        counts[c] = walk_chunk(x, y, w, bounds[c], bounds[c + 1], tie_eps, blocks)
