"""Pool-adjacent-violators over one chunk of sorted rows: the walk every backend of
:func:`gpucal.kernels.pav_chunks.chunk_blocks` runs (the numba CPU twin calls it as compiled code, the
CUDA kernel as a device function), with the block layout the host code reads.

A chunk's blocks are kept as a stack in the chunk's own rows of a ``(n, N_BLOCK_STATS)`` array: the
stack never holds more blocks than the groups read so far, so it never passes the chunk's last row, and
no thread needs memory of its own.
"""

from __future__ import annotations

import numpy as np

from gpucal.kernels.jit import numba

# Columns of a block row.
SUM_W = 0
SUM_WY = 1
SUM_WX = 2
X_FIRST = 3
X_LAST = 4
N_BLOCK_STATS = 5


@numba.njit(cache=True, inline="always")
def walk_chunk(x, y, w, start, stop, tie_eps, blocks):  # pragma: no cover - compiled
    """Pool-adjacent-violators over the rows ``start:stop`` of the sorted scores ``x``: write the chunk's
    blocks into ``blocks[start:start + k]`` and return ``k``.

    Rows of zero weight are skipped; a row joins the current group while its score is less than
    ``tie_eps`` above the group's first score (scikit-learn's ties), as in the host walk
    (``gpucal.calibrators.pav``). Each finished group is pushed as a block, and the top block pooled
    into the one below while that one's mean is not below it. One function, calling none: the CUDA
    kernel compiles its Python source as a device function.
    """
    top = start - 1
    have_group = False
    g_x = 0.0
    g_w = 0.0
    g_wy = 0.0
    for i in range(start, stop + 1):  # i == stop pushes the last group
        if i < stop:
            wi = np.float64(w[i])
            if wi <= 0.0:
                continue
            xi = np.float64(x[i])
            yi = np.float64(y[i])
            if have_group and xi - g_x < tie_eps:
                g_w += wi
                g_wy += wi * yi
                continue
        if have_group:
            top += 1
            blocks[top, SUM_W] = g_w
            blocks[top, SUM_WY] = g_wy
            blocks[top, SUM_WX] = g_w * g_x
            blocks[top, X_FIRST] = g_x
            blocks[top, X_LAST] = g_x
            while top > start and (
                blocks[top - 1, SUM_WY] / blocks[top - 1, SUM_W] >= blocks[top, SUM_WY] / blocks[top, SUM_W]
            ):
                blocks[top - 1, SUM_W] += blocks[top, SUM_W]
                blocks[top - 1, SUM_WY] += blocks[top, SUM_WY]
                blocks[top - 1, SUM_WX] += blocks[top, SUM_WX]
                blocks[top - 1, X_LAST] = blocks[top, X_LAST]
                top -= 1
        if i < stop:
            have_group = True
            g_x = xi
            g_w = wi
            g_wy = wi * yi
    return top - start + 1
