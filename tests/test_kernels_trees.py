"""Tree kernels: the numba CPU twin against the numpy oracle, a chain computed by hand, edge cases, errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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
from gpucal.kernels.trees_cpu import split_ranges, tree_depths_cpu
from gpucal.kernels.trees_oracle import EPS, LOGIT_HIGH, LOGIT_LOW

# "shift" and "platt" go through log and exp, which numpy and libm round differently by an ulp or so;
# a few trees with |a| <= 1.5 amplify that to far below this.
RTOL = 1e-12
ATOL = 1e-15
LEAF_MAPS = (LEAF_SCALE, LEAF_SHIFT, LEAF_PLATT)


def random_ensemble(rng, n_values, n_trees, max_depth, *, max_children=4, p_leaf=0.25, p_missing=0.2):
    """Return ``(node_feature, node_child_base, child_table, node_value, tree_start)`` of random valid trees.

    Trees are grown breadth first, so children get larger ids than their parent. A split node on feature
    ``j`` has 1 to ``max_children`` children; each code goes to a random child (several codes share one:
    pooled values) or, with probability ``p_missing``, to -1, and every child holds at least one code.
    """
    n_values = np.asarray(n_values, dtype=np.int64)
    feature: list[int] = []
    base: list[int] = []
    depth: list[int] = []
    table: list[int] = []
    tree_start = [0]
    for _ in range(n_trees):
        feature.append(-1)
        base.append(-1)
        depth.append(0)
        queue = [len(feature) - 1]
        while queue:
            m = queue.pop(0)
            if depth[m] >= max_depth or rng.random() < p_leaf:
                continue
            j = int(rng.integers(0, len(n_values)))
            k = int(n_values[j])
            n_kids = int(rng.integers(1, min(k, max_children) + 1))
            kids = np.arange(len(feature), len(feature) + n_kids)
            feature.extend([-1] * n_kids)
            base.extend([-1] * n_kids)
            depth.extend([depth[m] + 1] * n_kids)
            slot = np.where(rng.random(k) < p_missing, -1, rng.integers(0, n_kids, k))
            slot[rng.permutation(k)[:n_kids]] = np.arange(n_kids)
            feature[m], base[m] = j, len(table)
            table.extend(np.where(slot >= 0, kids[np.maximum(slot, 0)], -1).tolist())
            queue.extend(kids.tolist())
        tree_start.append(len(feature))
    n_nodes = len(feature)
    value = np.stack([rng.uniform(0.5, 1.5, n_nodes), rng.normal(0.0, 0.5, n_nodes)], axis=1)
    return (
        np.asarray(feature, dtype=np.int32),
        np.asarray(base, dtype=np.int64),
        np.asarray(table, dtype=np.int32),
        value,
        np.asarray(tree_start, dtype=np.int64),
    )


def random_codes(rng, n_rows, n_values, dtype):
    codes = np.empty((n_rows, len(n_values)), dtype=dtype)
    for j, k in enumerate(n_values):
        codes[:, j] = rng.integers(0, k, n_rows)
    return codes


def shift_values(value, leaf_map):
    """Make ``node_value`` a valid map of ``leaf_map``: scale has b = 0, shift has a = 1."""
    value = value.copy()
    if leaf_map == LEAF_SCALE:
        value[:, 1] = 0.0
    if leaf_map == LEAF_SHIFT:
        value[:, 0] = 1.0
    return value


def walk_by_hand(codes_row, root, feature, base, table):
    """The node a row stops at, by a plain Python walk (a third, independent reference)."""
    node = root
    while feature[node] >= 0:
        child = table[base[node] + codes_row[feature[node]]]
        if child < 0:
            break
        node = child
    return node


# ---------------------------------------------------------------------------------------------------
# The twin against the oracle


@settings(max_examples=40, deadline=None)
@given(
    n_rows=st.integers(0, 200),
    n_values=st.lists(st.integers(1, 40), min_size=1, max_size=5),
    n_trees=st.integers(0, 4),
    max_depth=st.integers(0, 5),
    code_dtype=st.sampled_from([np.int8, np.int16, np.int32]),
    leaf_map=st.sampled_from(LEAF_MAPS),
    float32=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_cpu_twin_matches_oracle(n_rows, n_values, n_trees, max_depth, code_dtype, leaf_map, float32, seed):
    rng = np.random.default_rng(seed)
    feature, base, table, value, tree_start = random_ensemble(rng, n_values, n_trees, max_depth)
    value = shift_values(value, leaf_map)
    codes = random_codes(rng, n_rows, n_values, code_dtype)
    f = rng.random(n_rows).astype(np.float32 if float32 else np.float64)
    arrays = (feature, base, table)

    leaves = tree_leaves(codes, *arrays, tree_start, backend="cpu")
    assert leaves.dtype == np.int32
    assert leaves.shape == (n_rows, n_trees)
    assert_array_equal(leaves, tree_leaves(codes, *arrays, tree_start, backend="oracle"))
    for i in range(min(n_rows, 20)):
        for t in range(n_trees):
            assert leaves[i, t] == walk_by_hand(codes[i], tree_start[t], feature, base, table)

    node_idx = rng.integers(-1, max(1, len(feature)), n_rows).astype(np.int32) if len(feature) else None
    if node_idx is not None:
        routed = route_rows(codes, node_idx, *arrays, backend="cpu")
        assert routed.dtype == np.int32
        assert_array_equal(routed, route_rows(codes, node_idx, *arrays, backend="oracle"))

    got = predict_trees(codes, f, *arrays, value, tree_start, leaf_map, backend="cpu")
    want = predict_trees(codes, f, *arrays, value, tree_start, leaf_map, backend="oracle")
    assert got.dtype == np.float64
    assert got.shape == (n_rows,)
    if leaf_map == LEAF_SCALE:
        assert_array_equal(got, want)  # one product and one comparison per tree: exact
    else:
        assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("leaf_map", [LEAF_SHIFT, LEAF_PLATT])
def test_initial_map_starts_the_chain_and_the_chain_values_pass_between_calls(leaf_map):
    """``init`` is the initial map of the logit, clipped to the clipped probabilities' logits; a chain split
    into calls (``chain_start``, then ``init=None``; ``finish=False`` for the logits) is the one call, bit
    for bit."""
    rng = np.random.default_rng(11)
    n_values = [7, 3, 12]
    feature, base, table, value, tree_start = random_ensemble(rng, n_values, 3, 4, p_leaf=0.1)
    value = shift_values(value, leaf_map)
    codes = random_codes(rng, 3_000, n_values, np.int16)
    f = rng.random(3_000)
    f[:4] = [0.0, 1.0, 1e-300, 1.0 - 1e-17]
    nodes = (feature, base, table)
    for init in [(1.0, 0.0), (0.55, -1.25), (40.0, 3.0)]:
        start = chain_start(f, init, leaf_map)
        assert_allclose(start, chain_start(f, init, leaf_map, backend="oracle"), rtol=RTOL, atol=ATOL)
        assert start.min() >= LOGIT_LOW
        assert start.max() <= LOGIT_HIGH
        if init == (1.0, 0.0):
            assert_array_equal(start[:2], [LOGIT_LOW, LOGIT_HIGH])  # the clipped probabilities' logits
        if init == (40.0, 3.0):
            assert_array_equal(start[:2], [LOGIT_LOW, LOGIT_HIGH])  # the initial map's logit clipped
        whole = predict_trees(codes, f, *nodes, value, tree_start, leaf_map, init=init)
        want = predict_trees(codes, f, *nodes, value, tree_start, leaf_map, init=init, backend="oracle")
        assert_allclose(whole, want, rtol=RTOL, atol=ATOL)
        chained = predict_trees(codes, start, *nodes, value, tree_start, leaf_map, init=None)
        assert_array_equal(chained, whole)
        logits = predict_trees(codes, start, *nodes, value, tree_start, leaf_map, init=None, finish=False)
        assert_array_equal(
            logits, predict_trees(codes, f, *nodes, value, tree_start, leaf_map, init=init, finish=False)
        )
        assert_allclose(1.0 / (1.0 + np.exp(-logits)), whole, rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError, match="init must be two finite floats"):
        predict_trees(codes, f, *nodes, value, tree_start, LEAF_SCALE, init=(2.0, 0.0))


@pytest.mark.parametrize("leaf_map", LEAF_MAPS)
@pytest.mark.parametrize("code_dtype", [np.int8, np.int16, np.int32])
def test_deep_ensemble_with_many_rows(code_dtype, leaf_map):
    """Larger trees and enough rows for every thread; repeated runs are bit-identical."""
    rng = np.random.default_rng(10)
    n_values = [30, 7, 100, 2, 64]
    feature, base, table, value, tree_start = random_ensemble(rng, n_values, 5, 6, p_leaf=0.1)
    value = shift_values(value, leaf_map)
    codes = random_codes(rng, 20_000, n_values, code_dtype)
    f = rng.random(20_000)
    f[:3] = [0.0, 1.0, 0.5]
    args = (codes, f, feature, base, table, value, tree_start, leaf_map)
    got = predict_trees(*args, backend="cpu")
    assert_allclose(got, predict_trees(*args, backend="oracle"), rtol=RTOL, atol=ATOL)
    assert_array_equal(predict_trees(*args, backend="cpu"), got)
    assert_array_equal(predict_trees(*args), got)  # 'auto' on numpy is 'cpu'
    leaves = tree_leaves(codes, feature, base, table, tree_start, backend="cpu")
    assert_array_equal(leaves, tree_leaves(codes, feature, base, table, tree_start, backend="oracle"))
    # Rows reach several depths, and some stop early on a -1 child.
    depth_reached = np.zeros(len(feature), dtype=np.int64)
    for m in range(len(feature)):
        if feature[m] >= 0:
            kids = table[base[m] : base[m] + n_values[feature[m]]]
            depth_reached[kids[kids >= 0]] = depth_reached[m] + 1
    assert len(np.unique(depth_reached[leaves])) >= 4
    assert (feature[leaves] >= 0).any()


def test_leaf_map_numbers_are_the_ensembles():
    from gpucal.trees import ensemble as _ensemble

    assert (_ensemble.LEAF_SCALE, _ensemble.LEAF_SHIFT, _ensemble.LEAF_PLATT) == LEAF_MAPS
    assert _ensemble.LEAF_MAPS == ("scale", "shift", "platt")


def test_generator_builds_valid_ensembles():
    """The random trees have the layout TreeEnsemble.check enforces, with missing and pooled children."""
    rng = np.random.default_rng(11)
    n_values = np.array([5, 40, 3], dtype=np.int64)
    feature, base, table, value, tree_start = random_ensemble(rng, n_values, 4, 5)
    n_nodes = len(feature)
    assert value.shape == (n_nodes, 2)
    assert tree_start[0] == 0
    assert tree_start[-1] == n_nodes
    assert (np.diff(tree_start) >= 1).all()
    tree_of = np.repeat(np.arange(4), np.diff(tree_start))
    has_parent = np.zeros(n_nodes, dtype=bool)
    pooled = False
    for m in np.flatnonzero(feature >= 0):
        kids = table[base[m] : base[m] + n_values[feature[m]]]
        kids = kids[kids >= 0]
        assert (kids > m).all()
        assert (tree_of[kids] == tree_of[m]).all()
        has_parent[kids] = True
        pooled |= len(np.unique(kids)) < len(kids)
    # Every node but the roots has a parent; child ids in the table are the only references.
    assert_array_equal(np.flatnonzero(~has_parent), tree_start[:-1])
    assert n_values[feature[feature >= 0]].sum() == len(table)  # the split nodes' slices tile the table
    assert (table == -1).any()
    assert pooled


# ---------------------------------------------------------------------------------------------------
# A chain computed by hand


def hand_ensemble():
    """Two trees over codes (x0 in 0..2, x1 in 0..1).

    Tree 0: root 0 splits on x0: 0 -> node 1, 1 -> node 2, 2 -> -1 (unseen). Node 1 splits on x1:
    0 -> node 3, 1 -> node 3 (pooled). Nodes 2 and 3 are leaves. Tree 1: node 4 alone (a leaf).
    """
    feature = np.array([0, 1, -1, -1, -1], dtype=np.int32)
    base = np.array([0, 3, -1, -1, -1], dtype=np.int64)
    table = np.array([1, 2, -1, 3, 3], dtype=np.int32)
    tree_start = np.array([0, 4, 5], dtype=np.int64)
    return feature, base, table, tree_start


HAND_CODES = np.array([[0, 0], [0, 1], [1, 0], [2, 1]], dtype=np.int8)


def test_cpu_walk_steps_are_each_trees_depth():
    """tree_depths_cpu, the CPU walk's fixed step count, is each tree's depth on tiling child tables."""
    rng = np.random.default_rng(12)
    n_values = np.array([6, 30, 2], dtype=np.int64)
    feature, base, table, _, tree_start = random_ensemble(rng, n_values, 5, 6)
    depth = np.zeros(len(feature), dtype=np.int64)
    for m in np.flatnonzero(feature >= 0):  # children after parents: one pass in id order
        kids = table[base[m] : base[m] + n_values[feature[m]]]
        depth[kids[kids >= 0]] = depth[m] + 1
    expected = [depth[a:b].max() for a, b in itertools.pairwise(tree_start)]
    _, stop = split_ranges(feature, base, table.shape[0])
    assert_array_equal(tree_depths_cpu(feature, base, table, tree_start, stop), expected)
    assert max(expected) >= 3


@pytest.mark.parametrize("backend", ["oracle", "cpu"])
def test_hand_computed_chain(backend):
    feature, base, table, tree_start = hand_ensemble()
    leaves = tree_leaves(HAND_CODES, feature, base, table, tree_start, backend=backend)
    assert_array_equal(leaves, [[3, 4], [3, 4], [2, 4], [0, 4]])
    # One level from the roots, and one more; -1 rows stay.
    node_idx = np.array([0, 1, -1, 0], dtype=np.int32)
    assert_array_equal(route_rows(HAND_CODES, node_idx, feature, base, table, backend=backend), [1, 3, -1, 0])

    # scale: node maps a = (node id + 1) / 4, so each row's output is min(min(a_leaf * f, 1) * a_4, 1).
    value = np.stack([(np.arange(5) + 1) / 4, np.zeros(5)], axis=1)
    f = np.array([0.5, 0.25, 0.75, 0.5])
    got = predict_trees(HAND_CODES, f, feature, base, table, value, tree_start, LEAF_SCALE, backend=backend)
    # Row 0: 0.5 * 1.0 = 0.5, then * 1.25 = 0.625. Row 2: 0.75 * 0.75 = 0.5625, * 1.25 = 0.703125.
    # Row 3 stops at the root: 0.5 * 0.25 * 1.25 = 0.15625. Row 1: 0.25 * 1.0 * 1.25 = 0.3125.
    assert_array_equal(got, [0.625, 0.3125, 0.703125, 0.15625])
    # The clip to 1 applies after each tree: 0.6 * 2 = 1.2 -> 1, then * 0.5 = 0.5 (not 0.6).
    value_clip = value.copy()
    value_clip[4, 0] = 0.5
    value_clip[3, 0] = 2.0
    got = predict_trees(
        HAND_CODES[:1],
        np.array([0.6]),
        feature,
        base,
        table,
        value_clip,
        tree_start,
        LEAF_SCALE,
        backend=backend,
    )
    assert_array_equal(got, [0.5])

    # platt: l = a l + b per tree on logit(f); with f = 0.5 the logit is exactly 0.
    value_platt = np.array([[1.0, 0.0], [1.0, 0.0], [2.0, 1.0], [3.0, -1.0], [0.5, 0.25]])
    got = predict_trees(
        HAND_CODES,
        np.full(4, 0.5),
        feature,
        base,
        table,
        value_platt,
        tree_start,
        LEAF_PLATT,
        backend=backend,
    )
    # Rows 0, 1: 0 -> 3*0 - 1 = -1 -> 0.5*(-1) + 0.25 = -0.25. Row 2: 0 -> 1 -> 0.75. Row 3: 0 -> 0 -> 0.25.
    assert_allclose(got, 1.0 / (1.0 + np.exp(-np.array([-0.25, -0.25, 0.75, 0.25]))), rtol=1e-15)


@pytest.mark.parametrize("backend", ["oracle", "cpu"])
def test_no_trees_returns_the_input_map(backend):
    codes = np.zeros((4, 2), dtype=np.int16)
    f = np.array([0.0, 0.2, 1.0, 0.7])
    empty_int = np.empty(0, dtype=np.int32)
    arrays = (empty_int, np.empty(0, dtype=np.int64), empty_int)
    no_value, no_trees = np.empty((0, 2)), np.zeros(1, dtype=np.int64)
    assert tree_leaves(codes, *arrays, no_trees, backend=backend).shape == (4, 0)
    scale = predict_trees(codes, f, *arrays, no_value, no_trees, LEAF_SCALE, backend=backend)
    assert_array_equal(scale, f)
    for leaf_map in (LEAF_SHIFT, LEAF_PLATT):
        got = predict_trees(codes, f, *arrays, no_value, no_trees, leaf_map, backend=backend)
        p = np.clip(f, EPS, 1 - EPS)
        assert_allclose(got, 1 / (1 + np.exp(-np.log(p / (1 - p)))), rtol=1e-14)
        assert 0.0 < got[0] < 1e-15
        assert 1.0 - 1e-15 < got[2] < 1.0


@pytest.mark.parametrize("backend", ["oracle", "cpu"])
def test_empty_input(backend):
    feature, base, table, tree_start = hand_ensemble()
    codes = np.empty((0, 2), dtype=np.int8)
    assert tree_leaves(codes, feature, base, table, tree_start, backend=backend).shape == (0, 2)
    routed = route_rows(codes, np.empty(0, dtype=np.int32), feature, base, table, backend=backend)
    assert routed.shape == (0,)
    assert routed.dtype == np.int32
    value = np.ones((5, 2))
    got = predict_trees(
        codes, np.empty(0), feature, base, table, value, tree_start, LEAF_PLATT, backend=backend
    )
    assert got.shape == (0,)
    assert got.dtype == np.float64


@pytest.mark.parametrize("leaf_map", LEAF_MAPS)
def test_extreme_inputs_agree(leaf_map):
    """Probabilities 0 and 1 are clipped, NaN stays NaN, large logits saturate without warnings."""
    feature, base, table, tree_start = hand_ensemble()
    value = np.array([[1.0, 0.0], [1.0, 0.0], [40.0, 800.0], [1.0, 0.0], [40.0, -800.0]])
    value = shift_values(value, leaf_map)
    codes = np.repeat(HAND_CODES, 2, axis=0)
    f = np.array([0.0, 1.0, np.nan, 0.5, 1e-300, 1 - 1e-17, 0.3, 2.0])
    args = (codes, f, feature, base, table, value, tree_start, leaf_map)
    got = predict_trees(*args, backend="cpu")
    want = predict_trees(*args, backend="oracle")
    assert_allclose(got, want, rtol=RTOL, atol=ATOL)  # NaN positions must agree too
    assert np.isnan(got[2])
    assert np.isfinite(np.delete(got, 2)).all()


def test_other_integer_dtypes_are_converted():
    feature, base, table, tree_start = hand_ensemble()
    want = tree_leaves(HAND_CODES, feature, base, table, tree_start, backend="cpu")
    for dtype in (np.uint8, np.int64, np.uint16):
        assert_array_equal(tree_leaves(HAND_CODES.astype(dtype), feature, base, table, tree_start), want)
    # Node arrays in other integer dtypes, and Fortran-ordered codes.
    got = tree_leaves(
        np.asfortranarray(HAND_CODES),
        feature.astype(np.int64),
        base.astype(np.int32),
        table.astype(np.int16),
        tree_start.astype(np.int32),
    )
    assert_array_equal(got, want)


def test_children_outside_their_tree_or_before_their_parent_are_refused():
    """A child before its node would loop; one in a later tree was followed by the oracle and the GPU
    kernel but not by the CPU twin, which steps each tree at most its depth. Both are refused, as a
    checked ensemble refuses them."""
    codes = np.zeros((3, 1), dtype=np.int8)
    looping = (np.array([0, 0]), np.array([0, 1]), np.array([1, 0]), np.array([0, 2]))  # 0 -> 1 -> 0
    later = (np.array([0, -1, 0, -1]), np.array([0, 0, 2, 0]), np.array([1, 2, 3, 3]), np.array([0, 2, 4]))
    for feature, base, table, tree_start in (looping, later):
        for backend in ("oracle", "cpu"):
            with pytest.raises(ValueError, match="outside its tree or before it"):
                tree_leaves(codes, feature, base, table, tree_start, backend=backend)


# ---------------------------------------------------------------------------------------------------
# Input checks


def good_args():
    feature, base, table, tree_start = hand_ensemble()
    return {
        "codes": HAND_CODES,
        "f": np.full(4, 0.5),
        "node_feature": feature,
        "node_child_base": base,
        "child_table": table,
        "node_value": np.ones((5, 2)),
        "tree_start": tree_start,
        "leaf_map": LEAF_SCALE,
    }


def call_predict(**changes):
    return predict_trees(**{**good_args(), **changes}, backend="cpu")


def test_good_args_pass():
    assert call_predict().shape == (4,)


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"codes": np.zeros(4, dtype=np.int8)}, ValueError, "codes must be two-dimensional"),
        ({"codes": np.zeros((4, 2))}, TypeError, "codes must hold integer codes"),
        ({"codes": np.full((4, 2), 2**40)}, ValueError, r"codes must lie in \[0, 2147483647\]"),
        ({"f": np.full(3, 0.5)}, ValueError, "f must be one-dimensional with 4 rows"),
        ({"f": np.zeros(4, dtype=np.int64)}, TypeError, "f must hold floating-point probabilities"),
        ({"node_feature": np.zeros(5)}, TypeError, "node_feature must hold integers"),
        ({"node_feature": np.zeros((5, 1), np.int32)}, ValueError, "node_feature must be one-dimensional"),
        ({"node_feature": np.array([2, 1, -1, -1, -1])}, ValueError, r"node_feature must lie in \[-1, 2\)"),
        ({"node_feature": np.array([0, 1, -2, -1, -1])}, ValueError, r"node_feature\[2\] = -2"),
        ({"node_child_base": np.array([0, 3, -1, -1])}, ValueError, r"node_child_base must hold one offset"),
        ({"node_child_base": np.array([0, 5, -1, -1, -1])}, ValueError, "split node 1 must lie in"),
        ({"node_child_base": np.array([-1, 3, -1, -1, -1])}, ValueError, "split node 0 must lie in"),
        ({"node_child_base": np.array([3, 3, -1, -1, -1])}, ValueError, "two start at node_child_base 3"),
        ({"child_table": np.array([1, 2, -1, 3, 5])}, ValueError, r"child_table must lie in \[-1, 5\)"),
        ({"child_table": np.array([1, 2, -2, 3, 3])}, ValueError, r"child_table\[2\] = -2"),
        ({"child_table": np.array([1.0, 2.0])}, TypeError, "child_table must hold integers"),
        (
            {"node_value": np.ones((4, 2))},
            ValueError,
            r"node_value must have shape \(n_nodes, 2\) = \(5, 2\)",
        ),
        ({"node_value": np.ones(5)}, ValueError, "node_value must have shape"),
        ({"node_value": np.full((5, 2), np.inf)}, ValueError, "node_value must be finite"),
        ({"node_value": np.full((5, 2), "a")}, TypeError, "node_value must hold real numbers"),
        ({"tree_start": np.array([0, 4])}, ValueError, "tree_start must increase from 0 to n_nodes = 5"),
        ({"tree_start": np.array([1, 4, 5])}, ValueError, "tree_start must increase"),
        ({"tree_start": np.array([0, 0, 5])}, ValueError, "one root per tree"),
        ({"tree_start": np.array([], dtype=np.int64)}, ValueError, "tree_start must increase"),
        ({"tree_start": np.array([0.0, 5.0])}, TypeError, "tree_start must hold integers"),
        ({"leaf_map": 3}, ValueError, r"The 'leaf_map' parameter must be LEAF_SCALE \(0\)"),
        ({"leaf_map": "scale"}, ValueError, "Got 'scale' instead"),
        ({"leaf_map": True}, ValueError, "Got True instead"),
    ],
)
def test_predict_input_errors(changes, error, match):
    with pytest.raises(error, match=match):
        call_predict(**changes)


def test_route_and_leaves_input_errors():
    args = good_args()
    nodes = (args["node_feature"], args["node_child_base"], args["child_table"])
    with pytest.raises(ValueError, match=r"node_idx must lie in \[-1, n_nodes\) = \[-1, 5\)"):
        route_rows(HAND_CODES, np.array([0, 5, 0, 0]), *nodes)
    with pytest.raises(ValueError, match=r"node_idx must lie"):
        route_rows(HAND_CODES, np.array([0, -2, 0, 0]), *nodes)
    with pytest.raises(TypeError, match="node_idx must hold integers"):
        route_rows(HAND_CODES, np.zeros(4), *nodes)
    with pytest.raises(ValueError, match="node_idx must be one-dimensional with 4 rows"):
        route_rows(HAND_CODES, np.zeros(3, dtype=np.int32), *nodes)
    with pytest.raises(ValueError, match="codes must be two-dimensional"):
        tree_leaves(HAND_CODES[0], *nodes, args["tree_start"])
    with pytest.raises(ValueError, match="tree_start must increase"):
        tree_leaves(HAND_CODES, *nodes, np.array([0, 3, 4]))
    with pytest.raises(ValueError, match=r"The 'backend' parameter must be one of"):
        tree_leaves(HAND_CODES, *nodes, args["tree_start"], backend="gpu")
    with pytest.raises(ValueError, match=r"node_feature must lie in \[-1, 1\)"):
        tree_leaves(HAND_CODES[:, :1], *nodes, args["tree_start"])  # feature 1 does not exist
