"""``gpucal.kernels.order_by_node``: the stable node order of MBCT's level passes."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from gpucal.kernels import gather_rows, order_by_node


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_counting_sort_equals_the_stable_argsort(dtype):
    rng = np.random.default_rng(0)
    node = rng.integers(0, 37, 100_003).astype(dtype)
    order = order_by_node(node, 37)
    assert_array_equal(order, order_by_node(node, 37, backend="oracle"))
    assert_array_equal(order, np.argsort(node, kind="stable"))
    # Within a node, rows keep their data order: the position in a run is the rank among the node's rows.
    sorted_nodes = node[order]
    assert (np.diff(sorted_nodes) >= 0).all()
    for m in (0, 5, 36):
        assert_array_equal(order[sorted_nodes == m], np.flatnonzero(node == m))


def test_empty_nodes_and_empty_input():
    assert_array_equal(order_by_node(np.array([3, 0, 3], dtype=np.int32), 5), [1, 0, 2])
    assert order_by_node(np.zeros(0, dtype=np.int32), 4).shape == (0,)


@pytest.mark.parametrize(
    ("node", "match"),
    [
        (np.array([0, 5]), r"\[0, n_nodes\)"),
        (np.array([-1, 0]), r"\[0, n_nodes\)"),
        (np.array([0.5]), "integer"),
    ],
)
def test_bad_node_ids_raise(node, match):
    with pytest.raises(ValueError, match=match):
        order_by_node(node, 5)


def test_take_rows_equals_fancy_indexing():
    rng = np.random.default_rng(1)
    order = rng.permutation(1000)
    codes = rng.integers(0, 9, (1000, 3)).astype(np.int16)
    f = rng.random(1000)
    got_codes, got_f, got_none = gather_rows(order, codes, f, None)
    assert_array_equal(got_codes, codes[order])
    assert_array_equal(got_f, f[order])
    assert got_none is None
