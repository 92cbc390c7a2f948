"""The numpy oracle of :func:`gpucal.kernels.pav_chunks.chunk_blocks`: each chunk's ties grouped, then
pooled by pool-adjacent-violators, in plain Python (for tests)."""

from __future__ import annotations

import numpy as np

from gpucal.kernels.pav_walk import N_BLOCK_STATS, SUM_W, SUM_WX, SUM_WY, X_FIRST, X_LAST


def chunk_groups_oracle(x: np.ndarray, y: np.ndarray, w: np.ndarray, tie_eps: float) -> list[list[float]]:
    """The tie groups of sorted rows as ``[sum w, sum w*y, first score]``: rows of zero weight dropped,
    a row within ``tie_eps`` above its group's first score joins it."""
    groups: list[list[float]] = []
    for xi, yi, wi in zip(x.tolist(), y.tolist(), w.tolist(), strict=True):
        if wi <= 0.0:
            continue
        if groups and xi - groups[-1][2] < tie_eps:
            groups[-1][0] += wi
            groups[-1][1] += wi * yi
        else:
            groups.append([wi, wi * yi, xi])
    return groups


def chunk_blocks_oracle(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, bounds: np.ndarray, tie_eps: float
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(blocks, counts)``: chunk ``c``'s ``counts[c]`` blocks in ``blocks[bounds[c]:]``, the
    rest of ``blocks`` zero."""
    blocks = np.zeros((x.shape[0], N_BLOCK_STATS))
    counts = np.zeros(bounds.shape[0] - 1, dtype=np.int64)
    for c in range(counts.shape[0]):
        start, stop = int(bounds[c]), int(bounds[c + 1])
        stack: list[np.ndarray] = []
        for g_w, g_wy, g_x in chunk_groups_oracle(x[start:stop], y[start:stop], w[start:stop], tie_eps):
            block = np.zeros(N_BLOCK_STATS)
            block[[SUM_W, SUM_WY, SUM_WX, X_FIRST, X_LAST]] = g_w, g_wy, g_w * g_x, g_x, g_x
            stack.append(block)
            while len(stack) > 1 and mean_label(stack[-2]) >= mean_label(stack[-1]):
                top = stack.pop()
                stack[-1][[SUM_W, SUM_WY, SUM_WX]] += top[[SUM_W, SUM_WY, SUM_WX]]
                stack[-1][X_LAST] = top[X_LAST]
        counts[c] = len(stack)
        if stack:
            blocks[start : start + len(stack)] = stack
    return blocks, counts


def mean_label(block: np.ndarray) -> float:
    """A block's weighted mean label, its fitted value."""
    return float(block[SUM_WY] / block[SUM_W])
