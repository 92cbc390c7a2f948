"""The fused tree-level kernels against the separate passes they replace: same arrays, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from gpucal.kernels import (
    chain_start,
    gather_rows,
    group_sums,
    node_range_sums,
    order_by_node,
    predict_leaves,
    predict_trees,
    route_and_group,
    route_rows,
)

# A root split on feature 0 (3 codes: children 1, 2, none), node 1 split on feature 1 (children 3, 4).
FEATURE = np.array([0, 1, -1, -1, -1], dtype=np.int32)
BASE = np.array([0, 3, -1, -1, -1], dtype=np.int64)
TABLE = np.array([1, 2, -1, 3, 4], dtype=np.int32)


def rows(n: int, weighted: bool) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(1)
    codes = np.stack([rng.integers(0, 3, n), rng.integers(0, 2, n)], axis=1).astype(np.int16)
    f, y = rng.random(n), (rng.random(n) < 0.3).astype(np.float64)
    w = rng.integers(1, 4, n).astype(np.float64) if weighted else None
    return codes, f, y, w


@pytest.mark.parametrize("weighted", [False, True])
def test_route_and_group_equals_route_then_stable_partition(weighted: bool) -> None:
    codes, f, y, w = rows(200_000, weighted)  # several row chunks
    node = np.zeros(len(f), dtype=np.int32)
    tree = (FEATURE, BASE, TABLE)
    *one, starts = route_and_group(codes, f, y, w, node, None, tree, 5, keep_perm=True)
    # Level 2 from the grouped rows, with the permutation carried along.
    *two, starts2 = route_and_group(*one[:5], one[5], tree, 5, keep_perm=True)
    routed = route_rows(codes, route_rows(codes, node, *tree), FEATURE, BASE, TABLE)
    order = order_by_node(routed, 5)
    expected = gather_rows(order, codes, f, y, w, routed)
    for got, want in zip(two[:5], expected, strict=True):
        assert (got is None and want is None) or np.array_equal(got, want)
    assert_array_equal(two[5], order)
    assert_array_equal(starts2, np.concatenate(([0], np.cumsum(np.bincount(routed, minlength=5)))))
    assert starts[-1] == len(f)


@pytest.mark.parametrize("weighted", [False, True])
def test_node_range_sums_equal_group_sums_bit_for_bit(weighted: bool) -> None:
    codes, f, y, w = rows(150_000, weighted)
    node = np.sort(np.random.default_rng(2).integers(0, 6, len(f))).astype(np.int32)
    starts = np.concatenate(([0], np.cumsum(np.bincount(node, minlength=6))))
    n_values = np.array([3, 2])
    batch = np.array([1, 2, 4])  # node 3's rows lie between, outside the batch
    slot = np.full(6, -1, dtype=np.int32)
    slot[batch] = np.arange(3)
    lo, hi = starts[1], starts[5]
    want = group_sums(
        codes[lo:hi],
        f[lo:hi],
        y[lo:hi],
        None if w is None else w[lo:hi],
        node_idx=slot[node[lo:hi]],
        n_nodes=3,
        n_values=n_values,
        backend="cpu",
    )
    got = node_range_sums(codes, f, y, w, starts[batch], starts[batch + 1], n_values)
    assert_array_equal(got, want)
    one = node_range_sums(codes, f, y, w, starts[[0]], starts[[1]], n_values)  # one node: row chunks
    a, b = starts[0], starts[1]
    ref = group_sums(
        codes[a:b], f[a:b], y[a:b], None if w is None else w[a:b], n_values=n_values, backend="cpu"
    )
    assert_array_equal(one, ref)


@pytest.mark.parametrize("leaf_map", [0, 1, 2])
def test_predict_leaves_equals_the_walk(leaf_map: int) -> None:
    codes, f, _, _ = rows(10_000, False)
    values = np.column_stack([np.linspace(0.5, 1.5, 5), np.linspace(-1.0, 1.0, 5)])
    start = np.array([0, 5])
    leaf = route_rows(
        codes, route_rows(codes, np.zeros(len(f), np.int32), FEATURE, BASE, TABLE), FEATURE, BASE, TABLE
    )
    x = chain_start(f, (1.3, -0.2) if leaf_map else (1.0, 0.0), leaf_map)  # the chain's values
    want = predict_trees(
        codes, x, FEATURE, BASE, TABLE, values, start, leaf_map, init=None, finish=False, backend="cpu"
    )
    assert_array_equal(predict_leaves(x, leaf, values, leaf_map), want)


@pytest.mark.parametrize("soft_labels", [False, True])
def test_unit_weights_give_the_sums_of_explicit_ones_bit_for_bit(soft_labels: bool) -> None:
    # With unit weights and 0/1 labels the CPU twin copies two of the seven sums instead of adding them.
    codes, f, y, _ = rows(150_000, False)
    if soft_labels:
        y[::7] = 0.5  # every run and chunk holds a label that is neither 0 nor 1: all seven sums added
    ones = np.ones_like(f)
    n_values = np.array([3, 2])
    chunks = [group_sums(codes, f, y, w, n_values=n_values, backend="cpu") for w in (None, ones)]
    assert_array_equal(chunks[0], chunks[1])
    starts = np.array([0, 40_000, 40_001, 90_000, 150_000])
    runs = [node_range_sums(codes, f, y, w, starts[:-1], starts[1:], n_values) for w in (None, ones)]
    assert_array_equal(runs[0], runs[1])
    np.testing.assert_allclose(runs[0].sum(axis=0), chunks[0][0], rtol=1e-12)  # every row in one run
