"""The MVCE split-sum CUDA kernel in numba-cuda's simulator, against the numpy oracle, on tiny inputs.

Run by ``tests/test_kernels_cudasim.py`` in a child pytest with ``NUMBA_ENABLE_CUDASIM=1`` (see
``sim_kernels.py``). Launches use 1-2 blocks of 32 threads and a few hundred rows.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from numba import cuda
from numpy.testing import assert_allclose

from gpucal.kernels import LEAF_PLATT, LEAF_SCALE, LEAF_SHIFT, SPLIT_W, mvce_split_sums

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1" and not cuda.is_available():
    msg = "run this file with NUMBA_ENABLE_CUDASIM=1 (tests/test_kernels_cudasim.py does) or on a CUDA GPU"
    raise RuntimeError(msg)

# Atomic float additions in another order than the oracle's bincount.
RTOL = 1e-12
ATOL = 1e-12
LAUNCH = {"n_blocks": 2, "threads_per_block": 32}


def make_case(rng, slot_sizes, slot_bins, n_values, code_dtype, float_dtype, weights, n_skipped=20):
    slot = np.concatenate([np.full(k, s) for s, k in enumerate(slot_sizes)] + [np.full(n_skipped, -1)])
    slot = rng.permutation(slot).astype(np.int32)
    n = slot.shape[0]
    local_row = np.zeros(n, dtype=np.int64)
    for s, k in enumerate(slot_sizes):
        local_row[slot == s] = rng.permutation(k)
    codes = np.stack([rng.integers(0, k, n) for k in n_values], axis=1).astype(code_dtype)
    f = rng.random(n)
    f[:2] = [0.0, 1.0][:n]
    y = (rng.random(n) < 0.4).astype(float_dtype)
    w = (rng.random(n) + 0.5).astype(float_dtype) if weights else None
    n_slots = len(slot_sizes)
    slot_bins = np.asarray(slot_bins, dtype=np.int64)
    # Bin ranges in reverse slot order after one unused bin.
    slot_bin_start = np.zeros(n_slots, dtype=np.int64)
    at = 1
    for s in reversed(range(n_slots)):
        slot_bin_start[s] = at
        at += int(slot_bins[s])
    child_value = np.stack(
        [rng.uniform(0.5, 1.8, (n_slots, sum(n_values))), rng.normal(0, 0.5, (n_slots, sum(n_values)))],
        axis=2,
    )
    node_value = np.stack([rng.uniform(0.5, 1.8, n_slots), rng.normal(0, 0.5, n_slots)], axis=1)
    args = (
        codes,
        f.astype(float_dtype),
        y,
        w,
        slot,
        local_row,
        np.asarray(slot_sizes, dtype=np.int64),
        slot_bins,
        slot_bin_start,
        child_value,
        node_value,
    )
    return args, np.asarray(n_values, dtype=np.int64)


def compare(args, leaf_map, **kwargs):
    got = mvce_split_sums(*args, leaf_map, backend="cuda", **LAUNCH, **kwargs)
    want = mvce_split_sums(*args, leaf_map, backend="oracle", **kwargs)
    assert got.dtype == np.float64
    assert got.shape == want.shape
    assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    return got


@pytest.mark.parametrize("leaf_map", [LEAF_SCALE, LEAF_SHIFT, LEAF_PLATT])
@pytest.mark.parametrize(
    ("code_dtype", "float_dtype", "weights"),
    [(np.int8, np.float64, True), (np.int16, np.float32, True), (np.int32, np.float64, False)],
)
def test_sim_split_sums_match_oracle(leaf_map, code_dtype, float_dtype, weights):
    rng = np.random.default_rng(leaf_map)
    args, n_values = make_case(rng, [90, 1, 41], [9, 1, 50], [3, 4], code_dtype, float_dtype, weights)
    got = compare(args, leaf_map, n_views=3, view_start=2, seed=2**63 + 5, n_values=n_values)
    # The kernel adds a bin's weight once; the host copies it to every column.
    assert_allclose(got[..., SPLIT_W], np.repeat(got[..., :1, SPLIT_W], 3, axis=2), rtol=0, atol=0)


@pytest.mark.parametrize("n_rows", [0, 1])
def test_sim_split_sums_tiny(n_rows):
    rng = np.random.default_rng(5)
    args, n_values = make_case(rng, [n_rows], [2], [2], np.int8, np.float64, True, n_skipped=0)
    compare(args, LEAF_SHIFT, n_views=2, seed=1, n_values=n_values)


def test_sim_split_sums_more_views_than_one_pass(monkeypatch):
    """More views than the grid is high: blocks loop over views in y (a grid 2 high for 5 views; on a
    GPU, past 65,535 views), rows skipped with slot -1."""
    import gpucal.kernels.split_mvce_cuda as split_cuda

    monkeypatch.setattr(split_cuda, "MAX_GRID_Y", 2)
    rng = np.random.default_rng(6)
    args, n_values = make_case(rng, [30, 20], [4, 3], [2, 2, 3], np.int8, np.float64, True, n_skipped=10)
    compare(args, LEAF_SCALE, n_views=5, seed=0, n_values=n_values)
    compare(args, LEAF_PLATT, n_views=5, seed=0, n_values=n_values)
