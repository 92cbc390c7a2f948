"""Group sums: numba CPU twin against the numpy oracle, edge cases, determinism and input checks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from gpucal.kernels import (
    N_STATS,
    STAT_COUNT,
    STAT_W,
    STAT_WF,
    STAT_WFF,
    STAT_WFY,
    STAT_WY,
    STAT_WYY,
    group_sums,
)
from gpucal.kernels.group_sums_cpu import (
    MAX_ROW_CHUNKS,
    PADDED_STATS,
    aligned_zeros,
    code_range,
    group_sums_cpu,
    node_run_bounds,
    row_chunk_count,
)
from gpucal.kernels.group_sums_oracle import value_offsets

# float64 sums of a few thousand O(1) terms in another order: 1e-12 relative is ~100 ulp of slack.
RTOL = 1e-12
ATOL = 1e-12
# float32 inputs are widened to float64 before any arithmetic, so the same tolerance holds.


def make_inputs(rng, n_rows, n_values, code_dtype=np.int8, float_dtype=np.float64, n_nodes=1, weights=True):
    n_values = np.asarray(n_values, dtype=np.int64)
    codes = np.empty((n_rows, len(n_values)), dtype=code_dtype)
    for j, k in enumerate(n_values):
        codes[:, j] = rng.integers(0, k, n_rows)
    f = rng.random(n_rows).astype(float_dtype)
    y = (rng.random(n_rows) < f).astype(float_dtype)
    w = (rng.random(n_rows) + 0.5).astype(float_dtype) if weights else None
    node_idx = rng.integers(-1, n_nodes, n_rows).astype(np.int32)
    return codes, f, y, w, node_idx


def both(codes, f, y, w=None, **kwargs):
    return group_sums(codes, f, y, w, backend="cpu", **kwargs), group_sums(
        codes, f, y, w, backend="oracle", **kwargs
    )


@settings(max_examples=40, deadline=None)
@given(
    n_rows=st.integers(0, 300),
    n_values=st.lists(st.integers(1, 40), min_size=1, max_size=4),
    code_dtype=st.sampled_from([np.int8, np.int16, np.int32]),
    float_dtype=st.sampled_from([np.float32, np.float64]),
    n_nodes=st.integers(1, 4),
    weights=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_cpu_twin_matches_oracle(n_rows, n_values, code_dtype, float_dtype, n_nodes, weights, seed):
    codes, f, y, w, node_idx = make_inputs(
        np.random.default_rng(seed), n_rows, n_values, code_dtype, float_dtype, n_nodes, weights
    )
    got, want = both(codes, f, y, w, node_idx=node_idx, n_nodes=n_nodes, n_values=n_values)
    assert got.shape == want.shape == (n_nodes, sum(n_values), N_STATS)
    assert got.dtype == np.float64
    assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_statistics_by_hand():
    codes = np.array([[0, 1], [1, 1], [0, 0]], dtype=np.int8)
    f = np.array([0.5, 0.25, 1.0])
    y = np.array([1.0, 0.0, 1.0])
    w = np.array([2.0, 1.0, 3.0])
    out = group_sums(codes, f, y, w, backend="cpu")
    # Feature 0 value 0 holds rows 0 and 2.
    want = [2, 5, 2 * 0.5 + 3 * 1.0, 2 + 3, 2 * 0.25 + 3, 2 * 0.5 + 3, 2 + 3]
    assert_allclose(out[0, 0], want, rtol=RTOL)
    # Feature 1 value 1 (bin 2 + 1 = 3) holds rows 0 and 1.
    assert_allclose(out[0, 3, [STAT_COUNT, STAT_W, STAT_WF, STAT_WY]], [2, 3, 1.25, 2], rtol=RTOL)
    assert (STAT_WFF, STAT_WFY, STAT_WYY) == (4, 5, 6)
    assert out[0, :, STAT_W].sum() == pytest.approx(2 * w.sum())


@pytest.mark.parametrize(
    ("n_rows", "n_values"),
    [(0, [3, 2]), (1, [3, 2]), (50, [1]), (50, [1, 1, 1]), (0, [])],
    ids=["no-rows", "one-row", "one-value", "one-value-each", "no-features"],
)
def test_edge_shapes(n_rows, n_values):
    codes, f, y, w, node_idx = make_inputs(np.random.default_rng(1), n_rows, n_values, n_nodes=2)
    got, want = both(codes, f, y, w, node_idx=node_idx, n_nodes=2, n_values=n_values)
    assert got.shape == (2, sum(n_values), N_STATS)
    assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_no_rows_without_n_values():
    out = group_sums(np.zeros((0, 3), dtype=np.int8), np.zeros(0), np.zeros(0), backend="cpu")
    assert out.shape == (1, 0, N_STATS)


def test_empty_nodes_and_skipped_rows():
    rng = np.random.default_rng(2)
    codes, f, y, w, _ = make_inputs(rng, 500, [4, 9])
    node_idx = rng.choice(np.array([-1, 0, 3], dtype=np.int32), 500)
    got, want = both(codes, f, y, w, node_idx=node_idx, n_nodes=5, n_values=[4, 9])
    assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert not got[[1, 2, 4]].any()
    assert got[:, :4, STAT_COUNT].sum() == (node_idx >= 0).sum()
    all_skipped = np.full(500, -1, dtype=np.int32)
    assert not group_sums(codes, f, y, w, node_idx=all_skipped, n_nodes=2, backend="cpu").any()


def test_defaults_equal_explicit_ones_and_node_zero():
    rng = np.random.default_rng(3)
    codes, f, y, _, _ = make_inputs(rng, 300, [6, 3])
    default = group_sums(codes, f, y, backend="cpu")
    explicit = group_sums(codes, f, y, np.ones(300), node_idx=np.zeros(300, np.int32), backend="cpu")
    assert_array_equal(default, explicit)
    assert default.shape == (1, 6 + 3, N_STATS)  # n_values from codes.max(axis=0) + 1


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.uint16])
def test_other_integer_code_dtypes_are_converted(dtype):
    rng = np.random.default_rng(4)
    codes, f, y, w, _ = make_inputs(rng, 100, [5, 7], code_dtype=np.int32)
    assert_array_equal(
        group_sums(codes.astype(dtype), f, y, w, backend="cpu"), group_sums(codes, f, y, w, backend="cpu")
    )


def test_repeated_runs_are_bit_identical():
    rng = np.random.default_rng(5)
    # Enough rows for several private row chunks.
    codes, f, y, w, node_idx = make_inputs(rng, 300_000, [3, 50, 200], code_dtype=np.int16, n_nodes=3)
    kwargs = {"node_idx": node_idx, "n_nodes": 3, "backend": "cpu"}
    assert row_chunk_count(300_000, 3 * 253) > 1
    first = group_sums(codes, f, y, w, **kwargs)
    for _ in range(3):
        assert_array_equal(group_sums(codes, f, y, w, **kwargs), first)
    assert_allclose(
        first, group_sums(codes, f, y, w, **{**kwargs, "backend": "oracle"}), rtol=1e-10, atol=1e-9
    )


@pytest.mark.parametrize("n_chunks", [0, 1, 3])
def test_schedules_agree(n_chunks):
    """The feature schedule (0 chunks) and row-chunk schedules give the oracle's sums."""
    rng = np.random.default_rng(6)
    n_values = np.array([4, 11, 2])
    codes, f, y, w, node_idx = make_inputs(rng, 1000, n_values, n_nodes=2)
    n_bins = int(n_values.sum())
    flat = group_sums_cpu(codes, f, y, w, node_idx, value_offsets(n_values), 2, n_bins, n_chunks)
    want = group_sums(codes, f, y, w, node_idx=node_idx, n_nodes=2, backend="oracle")
    assert_allclose(flat.reshape(2, n_bins, N_STATS), want, rtol=RTOL, atol=ATOL)


def test_many_groups_on_few_rows_reduce_with_the_serial_twin(monkeypatch):
    """The chunks' reduction follows the rows' twin (serial below PARALLEL_MIN_ROWS), not its table's size:
    a field of 20,000 values on 140,000 rows (two chunks, 320,000 padded cells) compiles no parallel
    kernel."""
    from gpucal.kernels import group_sums_cpu as module

    def refuse(private):
        msg = "the parallel twin ran"
        raise AssertionError(msg)

    monkeypatch.setattr(module._reduce_chunks, "parallel", refuse)
    rng = np.random.default_rng(7)
    codes, f, y, w, _ = make_inputs(rng, 140_000, [20_000], code_dtype=np.int16)
    assert row_chunk_count(140_000, 20_000) == 2
    got = group_sums(codes, f, y, w, backend="cpu")
    assert_allclose(got, group_sums(codes, f, y, w, backend="oracle"), rtol=1e-10, atol=1e-9)


def test_chunking_and_alignment():
    assert row_chunk_count(10, 100) == 1
    assert row_chunk_count(10**8, 100) == MAX_ROW_CHUNKS
    assert row_chunk_count(10**8, 10**9) == 0  # one padded copy would exceed the budget
    buf = aligned_zeros(3, 5)
    assert buf.shape == (3, 5 * PADDED_STATS)
    assert buf.ctypes.data % 64 == 0
    assert not buf.any()


def test_code_range():
    codes = np.array([[3, -2], [0, 5], [7, 1]], dtype=np.int16)
    low, high = code_range(codes)
    assert_array_equal(low, [0, -2])
    assert_array_equal(high, [7, 5])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_values": [2, 9]}, ValueError, r"codes of feature 0 must lie in \[0, n_values\[0\]\) = \[0, 2\)"),
        ({"n_values": [5]}, ValueError, "n_values must hold 2 non-negative counts"),
        (
            {"node_idx": np.array([0, 1, 2], dtype=np.int32), "n_nodes": 2},
            ValueError,
            r"node_idx must lie in \[-1, n_nodes\)",
        ),
        ({"node_idx": np.array([0, -2, 1], dtype=np.int32), "n_nodes": 2}, ValueError, r"node_idx must lie"),
        ({"node_idx": np.zeros(3)}, TypeError, "node_idx must hold integers"),
        ({"n_nodes": 0}, ValueError, r"The 'n_nodes' parameter must be an int in \[1, inf\)"),
        ({"backend": "gpu"}, ValueError, r"The 'backend' parameter must be one of"),
    ],
)
def test_input_errors(kwargs, error, match):
    codes = np.array([[0, 1], [3, 2], [1, 0]], dtype=np.int8)
    f = y = np.full(3, 0.5)
    with pytest.raises(error, match=match):
        group_sums(codes, f, y, **kwargs)


def test_shape_and_dtype_errors():
    f = y = np.full(3, 0.5)
    with pytest.raises(ValueError, match="codes must be two-dimensional"):
        group_sums(np.zeros(3, dtype=np.int8), f, y)
    with pytest.raises(TypeError, match="codes must hold integer codes"):
        group_sums(np.zeros((3, 1)), f, y)
    with pytest.raises(ValueError, match="y must be one-dimensional with 3 rows"):
        group_sums(np.zeros((3, 1), dtype=np.int8), f, np.ones(4))
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 2147483647\]"):
        group_sums(np.array([[2**40]], dtype=np.int64), f[:1], y[:1])
    with pytest.raises(ValueError, match=r"Got \[-1, 0\]"):
        group_sums(np.array([[-1], [0], [0]], dtype=np.int8), f, y)


def test_auto_backend_on_numpy_is_cpu():
    rng = np.random.default_rng(7)
    codes, f, y, w, _ = make_inputs(rng, 100, [3, 4])
    assert_array_equal(group_sums(codes, f, y, w), group_sums(codes, f, y, w, backend="cpu"))


def test_stat_order_constants():
    assert (STAT_COUNT, STAT_W, STAT_WF, STAT_WY, STAT_WFF, STAT_WFY, STAT_WYY) == tuple(range(N_STATS))


@pytest.mark.parametrize("n_nodes", [2, 7, 300])
def test_rows_grouped_by_node_take_the_node_run_schedule_and_match_the_oracle(n_nodes):
    rng = np.random.default_rng(n_nodes)
    n = 50_000
    codes = rng.integers(0, 5, (n, 3)).astype(np.int8)
    f, y, w = rng.random(n), (rng.random(n) < 0.3).astype(float), rng.random(n)
    node_idx = np.sort(rng.integers(0, n_nodes, n)).astype(np.int32)
    node_idx[rng.random(n) < 0.2] = -1  # rows of closed nodes, interleaved
    bounds = node_run_bounds(node_idx, 16)
    assert bounds[0] == 0
    assert bounds[-1] == n
    assert (np.diff(bounds) > 0).all()
    runs = [set(node_idx[a:b][node_idx[a:b] >= 0].tolist()) for a, b in itertools.pairwise(bounds)]
    assert all(not (runs[i] & runs[j]) for i in range(len(runs)) for j in range(i + 1, len(runs)))
    kwargs = {"node_idx": node_idx, "n_nodes": n_nodes, "n_values": [5, 5, 5]}
    got = group_sums(codes, f, y, w, backend="cpu", **kwargs)
    np.testing.assert_allclose(
        got, group_sums(codes, f, y, w, backend="oracle", **kwargs), rtol=1e-12, atol=1e-9
    )
    assert_array_equal(got, group_sums(codes, f, y, w, backend="cpu", **kwargs))
    shuffled = node_idx.copy()
    shuffled[:2] = [1, 0]
    assert node_run_bounds(shuffled, 16).shape == (0,)
