"""``chunk_blocks``: every chunk of sorted rows pooled on its own, the numba twin against the numpy oracle;
the chunk bounds start tie groups; the compacted chunks pool to the one-walk fit."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from gpucal.calibrators import pav
from gpucal.kernels.jit import parallel_twins_only
from gpucal.kernels.pav_chunks import chunk_blocks, chunk_bounds, compact_chunk_blocks

TIE_EPS = pav.TIE_EPS


def sorted_rows(n: int, seed: int, *, decimals: int | None = None) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    x = np.sort(rng.beta(0.8, 1.5, n))
    if decimals is not None:
        x = np.round(x, decimals)
    # Near ties: scores a few ulps apart, less than the 1e-15 tolerance, are one group.
    x[1::5] = np.nextafter(x[:-1:5], 1.0)
    x = np.sort(x)
    y = (rng.random(n) < x).astype(np.float64)
    w = rng.random(n) + 0.5
    w[rng.random(n) < 0.1] = 0.0
    return x, y, w


@pytest.mark.parametrize("twins", ["serial", "parallel"])
@pytest.mark.parametrize(
    ("n", "chunk_rows", "decimals"), [(0, 8, None), (1, 8, None), (500, 7, None), (3000, 64, 2)]
)
def test_cpu_twin_equals_the_oracle(twins: str, n: int, chunk_rows: int, decimals: int | None) -> None:
    x, y, w = sorted_rows(n, n, decimals=decimals)
    bounds = chunk_bounds(x, chunk_rows, TIE_EPS)
    want_blocks, want_counts = chunk_blocks(x, y, w, bounds, tie_eps=TIE_EPS, backend="oracle")
    with parallel_twins_only() if twins == "parallel" else nullcontext():
        blocks, counts = chunk_blocks(x, y, w, bounds, tie_eps=TIE_EPS, backend="cpu")
    assert_array_equal(counts, want_counts)
    for start, count in zip(bounds[:-1], counts, strict=True):
        assert_allclose(blocks[start : start + count], want_blocks[start : start + count], rtol=1e-14, atol=0)


def test_a_chunk_of_zero_weights_has_no_block() -> None:
    x, y, w = sorted_rows(40, 1)
    w[10:20] = 0.0
    bounds = np.array([0, 10, 20, 40])
    blocks, counts = chunk_blocks(x, y, w, bounds, tie_eps=TIE_EPS, backend="cpu")
    assert counts[1] == 0
    assert counts[0] > 0
    # The compacted blocks skip the empty chunk.
    parts = [blocks[a : a + k] for a, k in zip(bounds[:-1], counts, strict=True)]
    assert_array_equal(compact_chunk_blocks(blocks, counts, bounds), np.concatenate(parts))


@pytest.mark.parametrize("decimals", [None, 2])
def test_chunk_bounds_start_tie_groups(decimals: int | None) -> None:
    x, _, _ = sorted_rows(5000, 2, decimals=decimals)
    bounds = chunk_bounds(x, 50, TIE_EPS)
    assert bounds[0] == 0
    assert bounds[-1] == x.shape[0]
    assert np.all(np.diff(bounds) > 0)
    assert np.all(pav._tie_group_starts(x, TIE_EPS)[bounds[:-1]])
    # Without ties every multiple of 50 starts a chunk; with scores rounded to 2 decimals (100 values)
    # the chunks stretch to the next new value.
    assert (bounds.shape[0] == 101) == (decimals is None)


def test_chunk_bounds_skip_scores_within_the_tolerance() -> None:
    x = np.full(100, 0.25) + np.arange(100) * 1e-18  # one tie group: within 1e-15 of its first score
    assert_array_equal(chunk_bounds(x, 10, TIE_EPS), [0, 100])
    steps = np.repeat(np.arange(10.0), 10)
    assert_array_equal(chunk_bounds(steps, 15, TIE_EPS), [0, 20, 30, 50, 60, 80, 90, 100])


@pytest.mark.parametrize("decimals", [None, 3])
def test_compacted_chunks_pool_to_the_one_walk_fit(decimals: int | None) -> None:
    x, y, w = sorted_rows(4000, 3, decimals=decimals)
    y = (y > 0).astype(np.float64)
    w = np.ones_like(w)
    bounds = chunk_bounds(x, 37, TIE_EPS)
    blocks, counts = chunk_blocks(x, y, w, bounds, tie_eps=TIE_EPS, backend="cpu")
    compact = compact_chunk_blocks(blocks, counts, bounds)
    assert compact.shape == (counts.sum(), pav.N_BLOCK_STATS)
    pooled = pav.PavBlocks.from_stats(pav._pool_groups(np.ascontiguousarray(compact)))
    one = pav.isotonic_blocks(x, y, w)
    for field in ("x_first", "x_last", "weight", "value"):
        assert_array_equal(getattr(pooled, field), getattr(one, field), err_msg=field)
    assert_allclose(pooled.mean_x, one.mean_x, rtol=1e-13, atol=0)


def test_bad_input_is_refused() -> None:
    x, y, w = sorted_rows(20, 4)
    with pytest.raises(TypeError, match="y must be float64"):
        chunk_blocks(x, y.astype(np.float32), w, np.array([0, 20]), tie_eps=TIE_EPS)
    with pytest.raises(ValueError, match="bounds must run from 0 to len"):
        chunk_blocks(x, y, w, np.array([0, 10]), tie_eps=TIE_EPS)
    with pytest.raises(ValueError, match="without going back"):  # two chunks would own rows 2..5
        chunk_blocks(x, y, w, np.array([0, 6, 2, 20]), tie_eps=TIE_EPS)
