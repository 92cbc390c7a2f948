"""Numpy oracle for the group-sum histogram: the reference every other form is tested against.

Layout shared by all three forms (oracle, numba CPU twin, numba-cuda kernel):

``out[node, offsets[j] + codes[i, j], stat]`` accumulates, over every row ``i`` with
``node_idx[i] == node`` and every feature ``j``, the statistics

    count, w, w*f, w*y, w*f^2, w*f*y, w*y^2

in that order (``STAT_*`` below). ``offsets = value_offsets(n_values)`` places feature ``j``'s
``n_values[j]`` bins after those of the features before it. Rows with ``node_idx < 0`` belong to no
open node and are skipped. The output is float64 whatever the input dtype; counts are exact up to
2**53 rows.
"""

from __future__ import annotations

import numpy as np

N_STATS = 7
STAT_COUNT, STAT_W, STAT_WF, STAT_WY, STAT_WFF, STAT_WFY, STAT_WYY = range(N_STATS)


def value_offsets(n_values: np.ndarray) -> np.ndarray:
    """Return the first bin of each feature in the flat histogram: ``[0, cumsum(n_values)[:-1]]``."""
    n_values = np.asarray(n_values, dtype=np.int64)
    return np.concatenate(([0], np.cumsum(n_values)[:-1])).astype(np.int64)


def group_sums_oracle(
    codes: np.ndarray,
    f: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    node_idx: np.ndarray,
    n_nodes: int,
    n_values: np.ndarray,
) -> np.ndarray:
    """Histogram of the seven statistics per (node, feature, value), by ``np.bincount``."""
    n_values = np.asarray(n_values, dtype=np.int64)
    offsets = value_offsets(n_values)
    n_bins = int(n_values.sum())
    flat = np.zeros((N_STATS, n_nodes * n_bins), dtype=np.float64)
    keep = node_idx >= 0
    f64, y64, w64 = (np.asarray(a, dtype=np.float64)[keep] for a in (f, y, w))
    weights = (
        np.ones_like(w64),
        w64,
        w64 * f64,
        w64 * y64,
        w64 * f64 * f64,
        w64 * f64 * y64,
        w64 * y64 * y64,
    )
    node = node_idx[keep].astype(np.int64)
    for j in range(codes.shape[1]):
        key = node * n_bins + offsets[j] + codes[keep, j].astype(np.int64)
        for s, weight in enumerate(weights):
            flat[s] += np.bincount(key, weights=weight, minlength=n_nodes * n_bins)
    return np.ascontiguousarray(flat.T.reshape(n_nodes, n_bins, N_STATS))
