"""CUDA kernels in numba-cuda's simulator, against the numpy oracle, on tiny inputs.

Not collected by the main test run (the name does not start with ``test_``): ``NUMBA_ENABLE_CUDASIM=1``
must be set before numba is first imported, so ``tests/test_kernels_cudasim.py`` runs this file in a
child pytest process with the variable set. Launches use 1-2 blocks of 32-64 threads: the simulator
runs every thread as a Python thread (about 0.35 ms each).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from numba import cuda
from numpy.testing import assert_allclose, assert_array_equal

from gpucal.kernels import N_STATS, group_sums, view_bins, view_sums
from gpucal.kernels.pav_chunks import chunk_blocks, chunk_bounds

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1" and not cuda.is_available():
    msg = "run this file with NUMBA_ENABLE_CUDASIM=1 (tests/test_kernels_cudasim.py does) or on a CUDA GPU"
    raise RuntimeError(msg)

# Atomic float additions in another order than the oracle's bincount.
RTOL = 1e-12
ATOL = 1e-12
LAUNCH = {"n_blocks": 2, "threads_per_block": 32}
# The largest group-sum histogram held in shared memory: 48 KiB of float64 slots, N_STATS per bin.
MAX_SHARED_BINS = 48 * 1024 // 8 // N_STATS


def make_inputs(rng, n_rows, n_values, code_dtype, float_dtype, n_nodes):
    codes = np.empty((n_rows, len(n_values)), dtype=code_dtype)
    for j, k in enumerate(n_values):
        codes[:, j] = rng.integers(0, k, n_rows)
    f = rng.random(n_rows).astype(float_dtype)
    y = (rng.random(n_rows) < f).astype(float_dtype)
    w = (rng.random(n_rows) + 0.5).astype(float_dtype)
    node_idx = rng.integers(-1, n_nodes, n_rows).astype(np.int32)
    return codes, f, y, w, node_idx


def compare_group_sums(codes, f, y, w, *, force_global, **kwargs):
    got = group_sums(codes, f, y, w, backend="cuda", force_global=force_global, **LAUNCH, **kwargs)
    want = group_sums(codes, f, y, w, backend="oracle", **kwargs)
    assert got.shape == want.shape
    assert got.dtype == np.float64
    assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    return got


@pytest.mark.parametrize("force_global", [False, True])
@pytest.mark.parametrize(
    ("code_dtype", "float_dtype"),
    [(np.int8, np.float32), (np.int16, np.float64), (np.int32, np.float32), (np.int8, np.float64)],
)
def test_sim_group_sums_matches_oracle(code_dtype, float_dtype, force_global):
    rng = np.random.default_rng(0)
    codes, f, y, w, node_idx = make_inputs(rng, 300, [3, 17, 5], code_dtype, float_dtype, n_nodes=3)
    compare_group_sums(codes, f, y, w, node_idx=node_idx, n_nodes=3, force_global=force_global)


@pytest.mark.parametrize("force_global", [False, True])
@pytest.mark.parametrize(("n_rows", "n_values"), [(0, [4, 2]), (1, [4, 2]), (100, [1]), (100, [1, 1])])
def test_sim_group_sums_edge_shapes(n_rows, n_values, force_global):
    rng = np.random.default_rng(1)
    codes, f, y, w, node_idx = make_inputs(rng, n_rows, n_values, np.int8, np.float64, n_nodes=2)
    compare_group_sums(
        codes, f, y, w, node_idx=node_idx, n_nodes=2, n_values=n_values, force_global=force_global
    )


@pytest.mark.parametrize("force_global", [False, True])
def test_sim_group_sums_defaults_and_empty_nodes(force_global):
    rng = np.random.default_rng(2)
    codes, f, y, w, _ = make_inputs(rng, 200, [6, 2], np.int16, np.float64, n_nodes=1)
    compare_group_sums(codes, f, y, None, force_global=force_global)
    node_idx = rng.choice(np.array([-1, 1, 3], dtype=np.int32), 200)
    got = compare_group_sums(codes, f, y, w, node_idx=node_idx, n_nodes=5, force_global=force_global)
    assert not got[[0, 2, 4]].any()
    skipped = np.full(200, -1, dtype=np.int32)
    assert not group_sums(codes, f, y, w, node_idx=skipped, n_nodes=2, backend="cuda", **LAUNCH).any()


@pytest.mark.parametrize("n_bins", [MAX_SHARED_BINS, MAX_SHARED_BINS + 1], ids=["fits-shared", "global"])
def test_sim_group_sums_at_the_shared_memory_boundary(n_bins):
    from gpucal.kernels.group_sums_cuda import MAX_SHARED_SLOTS, shared_slots_for

    assert (shared_slots_for(n_bins * N_STATS) == MAX_SHARED_SLOTS) == (n_bins * N_STATS <= MAX_SHARED_SLOTS)
    rng = np.random.default_rng(3)
    codes, f, y, w, _ = make_inputs(rng, 400, [n_bins - 10, 10], np.int16, np.float32, n_nodes=1)
    compare_group_sums(codes, f, y, w, force_global=False)


@pytest.mark.parametrize("code_dtype", [np.int8, np.int32])
@pytest.mark.parametrize(("n_rows", "n_features"), [(1, 1), (5, 3), (300, 8), (70, 100)])
def test_sim_code_range_matches_numpy(code_dtype, n_rows, n_features):
    from gpucal.kernels.group_sums_cuda import launch_code_range

    rng = np.random.default_rng(n_rows + n_features)
    codes = rng.integers(-50, 100, (n_rows, n_features)).astype(code_dtype)
    low, high = launch_code_range(codes, n_blocks=2)
    assert low.dtype == high.dtype == np.int64
    assert_array_equal(low, codes.min(axis=0))
    assert_array_equal(high, codes.max(axis=0))


def test_sim_code_range_of_more_features_than_a_block_has_threads():
    from gpucal.kernels.group_sums_cuda import MAX_RANGE_FEATURES, launch_code_range

    codes = np.arange(3 * (MAX_RANGE_FEATURES + 1), dtype=np.int16).reshape(3, -1)
    low, high = launch_code_range(codes)
    assert_array_equal(low, codes[0])
    assert_array_equal(high, codes[2])


@pytest.mark.parametrize("force_global", [False, True])
@pytest.mark.parametrize("float_dtype", [np.float32, np.float64])
def test_sim_view_sums_matches_oracle(float_dtype, force_global):
    rng = np.random.default_rng(4)
    p = rng.random(250).astype(float_dtype)
    y = (rng.random(250) < p).astype(float_dtype)
    w = (rng.random(250) + 0.5).astype(float_dtype)
    kwargs = {"n_views": 3, "bin_size": 20, "seed": 11}
    got = view_sums(p, y, w, backend="cuda", force_global=force_global, **LAUNCH, **kwargs)
    assert_allclose(got, view_sums(p, y, w, backend="oracle", **kwargs), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("force_global", [False, True])
def test_sim_view_sums_loop_over_views_past_the_grid_height(force_global, monkeypatch):
    """A grid 2 high for 5 views (on a GPU, past 65,535): each block loops over views in y, zeroing its
    shared bins per view."""
    import gpucal.kernels.views_cuda as views_cuda

    monkeypatch.setattr(views_cuda, "MAX_GRID_Y", 2)
    rng = np.random.default_rng(5)
    p = rng.random(70)
    y = (rng.random(70) < p).astype(np.float64)
    w = rng.random(70) + 0.5
    kwargs = {"n_views": 5, "bin_size": 10, "seed": 7}
    got = view_sums(p, y, w, backend="cuda", force_global=force_global, **LAUNCH, **kwargs)
    assert_allclose(got, view_sums(p, y, w, backend="oracle", **kwargs), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("force_global", [False, True])
def test_sim_view_sums_partition_with_many_bins(force_global):
    """A partition of a large data set: 2000 bins per view (global memory), rows 500-619."""
    rng = np.random.default_rng(5)
    p, y = rng.random(120), rng.random(120)
    kwargs = {"n_views": 2, "bin_size": 5, "seed": 3, "row_offset": 500, "n_total": 10_000}
    got = view_sums(p, y, backend="cuda", force_global=force_global, **LAUNCH, **kwargs)
    assert got.shape == (2, 2000, 4)
    assert_allclose(got, view_sums(p, y, backend="oracle", **kwargs), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("n_rows", [0, 1])
def test_sim_view_sums_tiny(n_rows):
    p = np.full(n_rows, 0.25)
    got = view_sums(p, p, n_views=2, bin_size=4, seed=0, backend="cuda", **LAUNCH)
    assert_allclose(got, view_sums(p, p, n_views=2, bin_size=4, seed=0, backend="oracle"), rtol=RTOL)


def test_sim_view_bins_same_on_every_backend():
    rows = np.array([0, 5, 999, 123, 5, 640])
    kwargs = {"n_views": 3, "bin_size": 30, "seed": 2**63 + 7, "rows": rows}
    got = view_bins(1000, backend="cuda", n_blocks=1, threads_per_block=32, **kwargs)
    assert_array_equal(got, view_bins(1000, backend="oracle", **kwargs))
    assert_array_equal(got, view_bins(1000, backend="cpu", **kwargs))
    assert view_bins(1000, backend="cuda", n_views=2, bin_size=3, seed=0, rows=rows[:0]).shape == (2, 0)


@pytest.mark.parametrize(("n_rows", "chunk_rows"), [(0, 4), (1, 4), (300, 9)])
def test_sim_chunk_blocks_matches_oracle(n_rows, chunk_rows):
    """Isotonic chunks: 34 chunks over 32 threads (two grid strides), ties and zero weights."""
    rng = np.random.default_rng(n_rows)
    x = np.sort(np.round(rng.random(n_rows), 2))
    x[1::5] = np.nextafter(x[:-1:5], 1.0)  # near ties, one group with their neighbour
    x = np.sort(x)
    y = (rng.random(n_rows) < x).astype(np.float64)
    w = np.where(rng.random(n_rows) < 0.1, 0.0, rng.random(n_rows) + 0.5)
    bounds = chunk_bounds(x, chunk_rows, 1e-15)
    got_blocks, got_counts = chunk_blocks(
        x, y, w, bounds, tie_eps=1e-15, backend="cuda", n_blocks=1, threads_per_block=32
    )
    blocks, counts = chunk_blocks(x, y, w, bounds, tie_eps=1e-15, backend="oracle")
    assert_array_equal(got_counts, counts)
    for start, count in zip(bounds[:-1], counts, strict=True):
        assert_allclose(got_blocks[start : start + count], blocks[start : start + count], rtol=1e-14, atol=0)
