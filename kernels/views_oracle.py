"""Numpy oracle for the MVCE views: bin ids and per-(view, bin) sums, vectorised over rows.

This is a second, independent spelling of ``_feistel`` in array arithmetic (numpy's uint64 array
operations wrap modulo 2**64 like the compiled code), so a slip in either one shows up in the tests.
"""

from __future__ import annotations

import numpy as np

from gpucal.kernels._feistel import (
    GOLDEN_GAMMA,
    KEY_MASK,
    MIX_MUL_1,
    MIX_MUL_2,
    N_ROUNDS,
    feistel_domain,
)

N_VIEW_STATS = 4
VIEW_COUNT, VIEW_W, VIEW_WP, VIEW_WY = range(N_VIEW_STATS)
HASH_BITS = np.uint64(32)


def _mix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * MIX_MUL_1
    z = (z ^ (z >> np.uint64(27))) * MIX_MUL_2
    return z ^ (z >> np.uint64(31))


def _view_keys(seed: int, view: int) -> np.ndarray:
    gamma = np.array([view + 1], dtype=np.uint64) * GOLDEN_GAMMA
    key = _mix64(np.array([seed], dtype=np.uint64) ^ _mix64(gamma))
    steps = np.arange(1, N_ROUNDS + 1, dtype=np.uint64) * GOLDEN_GAMMA
    return _mix64(key + steps) & KEY_MASK


def _feistel(x: np.ndarray, keys: np.ndarray, right_bits: int, n_left: int) -> np.ndarray:
    shift, n_left64 = np.uint64(right_bits), np.uint64(n_left)
    left, right = x >> shift, x & ((np.uint64(1) << shift) - np.uint64(1))
    for key_left, key_right in keys.reshape(-1, 2):
        left = left + (((_mix64(right ^ key_left) >> HASH_BITS) * n_left64) >> HASH_BITS)
        left = np.where(left >= n_left64, left - n_left64, left)
        right = right ^ (_mix64(left ^ key_right) >> (np.uint64(64) - shift))
    return (left << shift) | right


def view_bins_oracle(n_total: int, n_views: int, bin_size: int, seed: int, rows: np.ndarray) -> np.ndarray:
    """Bin id of each global row id in ``rows`` for each view, shape ``(n_views, len(rows))``, int32."""
    n_bins = max(1, n_total // bin_size)
    right_bits, n_left = feistel_domain(n_total)
    rows = np.asarray(rows, dtype=np.uint64)
    out = np.empty((n_views, rows.shape[0]), dtype=np.int32)
    for v in range(n_views):
        keys = _view_keys(seed, v)
        x = _feistel(rows, keys, right_bits, n_left)
        # Cycle walking: re-encrypt only the values still outside [0, n_total).
        outside = x >= np.uint64(n_total)
        while outside.any():
            x[outside] = _feistel(x[outside], keys, right_bits, n_left)
            outside = x >= np.uint64(n_total)
        # The exact integer quotient, where the compiled backends correct a float64 estimate.
        out[v] = (x * np.uint64(n_bins)) // np.uint64(n_total)
    return out


def view_sums_oracle(
    p: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    n_views: int,
    bin_size: int,
    seed: int,
    row_offset: int,
    n_total: int,
) -> np.ndarray:
    """Per-(view, bin) sums of ``count, w, w*p, w*y`` by ``np.bincount``, shape ``(n_views, n_bins, 4)``."""
    n_bins = max(1, n_total // bin_size)
    rows = np.arange(row_offset, row_offset + p.shape[0], dtype=np.uint64)
    bins = view_bins_oracle(n_total, n_views, bin_size, seed, rows)
    p64, y64, w64 = (np.asarray(a, dtype=np.float64) for a in (p, y, w))
    out = np.zeros((n_views, n_bins, N_VIEW_STATS), dtype=np.float64)
    for v in range(n_views):
        for s, weight in enumerate((np.ones_like(w64), w64, w64 * p64, w64 * y64)):
            out[v, :, s] = np.bincount(bins[v], weights=weight, minlength=n_bins)
    return out
