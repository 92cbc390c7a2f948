"""Tree kernels in numba-cuda's simulator, against the numpy oracle and the CPU twin, on tiny inputs.

Run by ``tests/test_kernels_cudasim.py`` in a child pytest with ``NUMBA_ENABLE_CUDASIM=1`` (see
``sim_kernels.py``). Launches use 1-2 blocks of 32 threads and at most a few hundred rows, so the
grid-stride loop runs several rounds per thread.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from numba import cuda
from numpy.testing import assert_allclose, assert_array_equal

from gpucal.kernels import (
    LEAF_PLATT,
    LEAF_SCALE,
    LEAF_SHIFT,
    chain_start,
    predict_trees,
    route_rows,
    tree_leaves,
)
from tests.test_kernels_trees import HAND_CODES, hand_ensemble, random_codes, random_ensemble, shift_values

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1" and not cuda.is_available():
    msg = "run this file with NUMBA_ENABLE_CUDASIM=1 (tests/test_kernels_cudasim.py does) or on a CUDA GPU"
    raise RuntimeError(msg)

LAUNCH = {"n_blocks": 2, "threads_per_block": 32}
# log and exp in the simulator are Python's math module: the same libm as the CPU twin, up to an ulp.
RTOL = 1e-12
ATOL = 1e-15


@pytest.mark.parametrize(
    ("code_dtype", "float_dtype", "leaf_map"),
    [
        (np.int8, np.float64, LEAF_SCALE),
        (np.int16, np.float32, LEAF_SHIFT),
        (np.int32, np.float64, LEAF_PLATT),
        (np.int8, np.float32, LEAF_SCALE),
    ],
)
def test_sim_trees_match_oracle(code_dtype, float_dtype, leaf_map):
    rng = np.random.default_rng(20)
    n_values = [6, 3, 20]
    feature, base, table, value, tree_start = random_ensemble(rng, n_values, 3, 4, p_leaf=0.1)
    value = shift_values(value, leaf_map)
    codes = random_codes(rng, 150, n_values, code_dtype)
    f = rng.random(150).astype(float_dtype)
    nodes = (feature, base, table)

    leaves = tree_leaves(codes, *nodes, tree_start, backend="cuda", **LAUNCH)
    assert leaves.dtype == np.int32
    assert_array_equal(leaves, tree_leaves(codes, *nodes, tree_start, backend="oracle"))

    node_idx = rng.integers(-1, len(feature), 150).astype(np.int32)
    routed = route_rows(codes, node_idx, *nodes, backend="cuda", **LAUNCH)
    assert routed.dtype == np.int32
    assert_array_equal(routed, route_rows(codes, node_idx, *nodes, backend="oracle"))

    args = (codes, f, *nodes, value, tree_start, leaf_map)
    got = predict_trees(*args, backend="cuda", **LAUNCH)
    assert got.dtype == np.float64
    want = predict_trees(*args, backend="oracle")
    if leaf_map == LEAF_SCALE:
        assert_array_equal(got, want)
        assert_array_equal(got, predict_trees(*args, backend="cpu"))
    else:
        assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("leaf_map", [LEAF_SCALE, LEAF_PLATT])
def test_sim_hand_computed_chain(leaf_map):
    feature, base, table, tree_start = hand_ensemble()
    launch = {"n_blocks": 1, "threads_per_block": 32}
    assert_array_equal(
        tree_leaves(HAND_CODES, feature, base, table, tree_start, backend="cuda", **launch),
        [[3, 4], [3, 4], [2, 4], [0, 4]],
    )
    node_idx = np.array([0, 1, -1, 0], dtype=np.int32)
    assert_array_equal(
        route_rows(HAND_CODES, node_idx, feature, base, table, backend="cuda", **launch), [1, 3, -1, 0]
    )
    value = np.stack([(np.arange(5) + 1) / 4, np.zeros(5)], axis=1)
    f = np.array([0.5, 0.25, 0.75, 0.5])
    got = predict_trees(
        HAND_CODES, f, feature, base, table, value, tree_start, leaf_map, backend="cuda", **launch
    )
    want = predict_trees(HAND_CODES, f, feature, base, table, value, tree_start, leaf_map, backend="oracle")
    if leaf_map == LEAF_SCALE:
        assert_array_equal(got, [0.625, 0.3125, 0.703125, 0.15625])
    assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("leaf_map", [LEAF_SCALE, LEAF_SHIFT])
def test_sim_no_trees_and_no_rows(leaf_map):
    empty_int = np.empty(0, dtype=np.int32)
    nodes = (empty_int, np.empty(0, dtype=np.int64), empty_int)
    no_value, no_trees = np.empty((0, 2)), np.zeros(1, dtype=np.int64)
    codes = np.zeros((5, 2), dtype=np.int8)
    f = np.array([0.0, 0.1, 0.5, 1.0, np.nan])
    got = predict_trees(codes, f, *nodes, no_value, no_trees, leaf_map, backend="cuda", **LAUNCH)
    want = predict_trees(codes, f, *nodes, no_value, no_trees, leaf_map, backend="oracle")
    assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert tree_leaves(codes, *nodes, no_trees, backend="cuda", **LAUNCH).shape == (5, 0)
    feature, base, table, tree_start = hand_ensemble()
    none = np.empty((0, 2), dtype=np.int16)
    assert tree_leaves(none, feature, base, table, tree_start, backend="cuda").shape == (0, 2)
    assert route_rows(none, np.empty(0, np.int32), feature, base, table, backend="cuda").shape == (0,)
    value = np.ones((5, 2))
    got = predict_trees(none, np.empty(0), feature, base, table, value, tree_start, leaf_map, backend="cuda")
    assert got.shape == (0,)


@pytest.mark.parametrize("leaf_map", [LEAF_SHIFT, LEAF_PLATT])
def test_sim_initial_map_and_chain_values(leaf_map):
    rng = np.random.default_rng(21)
    n_values = [6, 3, 20]
    feature, base, table, value, tree_start = random_ensemble(rng, n_values, 3, 4, p_leaf=0.1)
    value = shift_values(value, leaf_map)
    codes = random_codes(rng, 150, n_values, np.int16)
    f = rng.random(150)
    f[:2] = [0.0, 1.0]
    nodes = (feature, base, table)
    init = (0.55, -1.25)
    start = chain_start(f, init, leaf_map, backend="cuda")
    assert_allclose(start, chain_start(f, init, leaf_map, backend="cpu"), rtol=RTOL, atol=ATOL)
    args = (codes, f, *nodes, value, tree_start, leaf_map)
    for finish in (True, False):
        got = predict_trees(*args, init=init, finish=finish, backend="cuda", **LAUNCH)
        assert_allclose(
            got, predict_trees(*args, init=init, finish=finish, backend="oracle"), rtol=RTOL, atol=ATOL
        )
        chained = (codes, start, *nodes, value, tree_start, leaf_map)
        assert_array_equal(predict_trees(*chained, init=None, finish=finish, backend="cuda", **LAUNCH), got)
