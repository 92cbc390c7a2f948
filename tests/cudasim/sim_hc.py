"""The heterogeneous-calibration tree on the simulated CUDA kernels equals the CPU path's, on tiny inputs.

Binary splits with the label criteria (and with the log-loss gain of the boosted trees) are decided on
the host from the histogram; the histogram and the routing run on the 'cuda' backend here (numpy inputs
copied to the simulated device) and on 'cpu'. (The per-node maps are ``local_maps`` fits, whose GPU
path takes a few hundred simulated launches: too slow here.) Run by ``tests/test_kernels_cudasim.py``.
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
    n_values = np.array([5, 4, 3])
    codes = np.stack([rng.integers(0, k, n) for k in n_values], axis=1).astype(np.int8)
    f = rng.uniform(0.1, 0.6, n)
    rate = np.where(codes[:, 0] >= 3, 0.6, 0.2) * np.where(codes[:, 1] == 2, 1.4, 1.0)
    y = (rng.random(n) < rate).astype(np.float64)
    w = rng.uniform(0.5, 1.5, n)
    return codes, f, y, w, n_values


@pytest.mark.parametrize("criterion", ["entropy", "gini", "gain"])
def test_label_tree_on_the_simulator_equals_the_cpu_tree(criterion):
    codes, f, y, w, n_values = tiny_problem()
    base = {
        "leaf_map": "shift",
        "criterion": criterion,
        "max_depth": 2,
        "min_node_size": 20.0,
        "min_child_size": 10.0,
        "penalty": 1.0,
        "n_views": 1,
        "mvce_bin_size": 1,
        "mvce_p": 2.0,
        "seed": 0,
        "split_mode": "binary",
        "ordinal": (True, False, False),
    }
    rare = np.array([-1, -1, -1])
    cpu_nodes, cpu_leaf = grow_tree(codes, f, y, w, n_values, rare, GrowConfig(**base, backend="cpu"))
    sim_nodes, sim_leaf = grow_tree(codes, f, y, w, n_values, rare, GrowConfig(**base, backend="cuda"))
    assert len(cpu_nodes.feature) >= 5  # the tree did split twice
    assert cpu_nodes.feature == sim_nodes.feature
    assert all(
        np.array_equal(a, b) for a, b in zip(cpu_nodes.child_table, sim_nodes.child_table, strict=True)
    )
    assert_allclose(sim_nodes.values, cpu_nodes.values, rtol=1e-12, atol=1e-14)
    assert_array_equal(sim_leaf, cpu_leaf)
