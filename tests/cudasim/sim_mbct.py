"""MBCT's tree growth on the simulated CUDA kernels gives the CPU path's tree, on tiny inputs.

Every row-level step of a level (histogram, MVCE sums, routing) runs on the 'cuda' backend (numpy
inputs copied to the simulated device) and on the 'cpu' backend; the decisions taken from the
histograms must be the same, node for node. Run by ``tests/test_kernels_cudasim.py``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from numba import cuda
from numpy.testing import assert_allclose, assert_array_equal

from gpucal.trees.grow import GrowConfig, grow_tree

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1" and not cuda.is_available():
    msg = "run this file with NUMBA_ENABLE_CUDASIM=1 (tests/test_kernels_cudasim.py does) or on a CUDA GPU"
    raise RuntimeError(msg)


def tiny_problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    n = 240
    n_values = np.array([2, 3, 4])
    codes = np.stack([rng.integers(0, k, n) for k in n_values], axis=1).astype(np.int8)
    f = rng.uniform(0.1, 0.6, n)
    # Segment bias on feature 0, an interaction with feature 1 inside it.
    p = np.clip(f * np.where(codes[:, 0] == 1, 1.5, 0.6) * np.where(codes[:, 1] == 2, 1.3, 1.0), 0, 1)
    y = (rng.random(n) < p).astype(np.float64)
    w = rng.uniform(0.5, 1.5, n)
    return codes, f, y, w, n_values


@pytest.mark.parametrize(("leaf_map", "criterion"), [("scale", "gain"), ("shift", "gain"), ("scale", "mvce")])
def test_tree_on_the_simulator_equals_the_cpu_tree(leaf_map, criterion):
    codes, f, y, w, n_values = tiny_problem()
    base = {
        "leaf_map": leaf_map,
        "criterion": criterion,
        "max_depth": 2,
        "min_node_size": 20.0,
        "min_child_size": 5.0,
        "penalty": 1.0,
        "n_views": 3,
        "mvce_bin_size": 10,
        "mvce_p": 2.0,
        "seed": 3,
    }
    rare = np.array([-1, -1, -1])
    cpu_nodes, cpu_leaf = grow_tree(codes, f, y, w, n_values, rare, GrowConfig(**base, backend="cpu"))
    sim_nodes, sim_leaf = grow_tree(codes, f, y, w, n_values, rare, GrowConfig(**base, backend="cuda"))
    assert len(cpu_nodes.feature) > 3  # the tree did split
    assert cpu_nodes.feature == sim_nodes.feature
    assert cpu_nodes.child_table
    assert all(
        np.array_equal(a, b) for a, b in zip(cpu_nodes.child_table, sim_nodes.child_table, strict=True)
    )
    assert_allclose(sim_nodes.values, cpu_nodes.values, rtol=1e-12, atol=1e-14)
    assert_array_equal(sim_leaf, cpu_leaf)
