"""Numba CPU twins of the tree kernels: parallel loops over rows, each row walked on its own.

Rows are independent and each writes only its own outputs, so the result does not depend on the
thread count or schedule (bit-identical between runs). The per-row code is ``gpucal.kernels.trees_row``, the
functions the CUDA kernels call; row and node indices are unsigned (no wrap-around checks, see there).

A walk is latency-bound: each level waits for three dependent loads (the node's feature, the row's
code, the child). Two choices hide that latency, measured on the five trees MBCT fits on 1e7 rows of
the speed benchmark, one thread:

* trees one at a time, every row through one tree before the next (a row's running value waits in
  ``out``): a tree's child table stays in the core's cache, where all of them (7 MB) do not; 2.4 s to 1.7 s;
* four rows walked side by side, each a fixed number of branch-free steps (the tree's depth, from
  :func:`tree_depths_cpu`; a step at a leaf stays there): the core overlaps the four chains of loads,
  where a walk that stops at its leaf mispredicts its exit and serialises them; 1.7 s to 1.1-1.3 s.
"""

from __future__ import annotations

import numpy as np

from gpucal.kernels.jit import numba, parallel_rows
from gpucal.kernels.trees_row import apply_map, finish_value, route_row, start_value, step_down


@parallel_rows("codes")
def route_rows_cpu(codes, node_idx, node_feature, node_child_base, child_table, out):
    """Write into ``out`` (int32) the node of each row one level below ``node_idx``; return ``out``."""
    for i in numba.prange(codes.shape[0]):
        ui = np.uint64(i)
        out[ui] = route_row(codes, ui, node_idx[ui], node_feature, node_child_base, child_table)
    return out


@numba.njit(cache=True)
def tree_depths_cpu(node_feature, node_child_base, child_table, tree_start):
    """Return, per tree, a number of steps after which every walk from its root has stopped (int64).

    Nodes are visited in id order (children have larger ids): a split node reaches every child id above
    it in ``child_table`` from its ``node_child_base`` up to the next larger base of a split node. For
    the non-overlapping layout of ``TreeEnsemble`` that covers the node's own children and perhaps a
    few others, so the count is the tree's depth or more, and extra steps stay at the leaf.
    """
    n_nodes = node_feature.shape[0]
    split_bases = np.sort(node_child_base[node_feature >= 0])
    depth = np.zeros(n_nodes, dtype=np.int64)
    out = np.zeros(tree_start.shape[0] - 1, dtype=np.int64)
    for t in range(tree_start.shape[0] - 1):
        for m in range(tree_start[t], tree_start[t + 1]):
            if node_feature[m] < 0:
                continue
            start = node_child_base[m]
            k = np.searchsorted(split_bases, start, side="right")
            stop = split_bases[k] if k < split_bases.shape[0] else child_table.shape[0]
            for e in range(start, stop):
                child = child_table[e]
                if child > m and child < n_nodes and depth[child] < depth[m] + 1:
                    depth[child] = depth[m] + 1
                    if depth[child] > out[t]:
                        out[t] = depth[child]
    return out


@numba.njit(inline="always")
def _walk4(codes, i, root, steps, node_feature, node_child_base, child_table):
    """Rows ``i .. i + 3`` walked ``steps`` steps from ``root`` side by side; their four nodes."""
    a = b = c = d = root
    for _ in range(steps):
        a = step_down(codes, i, a, node_feature, node_child_base, child_table)
        b = step_down(codes, i + np.uint64(1), b, node_feature, node_child_base, child_table)
        c = step_down(codes, i + np.uint64(2), c, node_feature, node_child_base, child_table)
        d = step_down(codes, i + np.uint64(3), d, node_feature, node_child_base, child_table)
    return a, b, c, d


@numba.njit(inline="always")
def _walk1(codes, i, root, steps, node_feature, node_child_base, child_table):
    node = root
    for _ in range(steps):
        node = step_down(codes, i, node, node_feature, node_child_base, child_table)
    return node


@parallel_rows("codes")
def tree_leaves_cpu(codes, node_feature, node_child_base, child_table, tree_start, tree_depth, out):
    """Write into ``out`` (int32 ``(n, n_trees)``) the node each row stops at in each tree; return it."""
    n = codes.shape[0]
    n_quads = n // 4
    for t in range(tree_start.shape[0] - 1):
        root, steps = np.int64(tree_start[t]), tree_depth[t]
        for q in numba.prange(n_quads):
            i = np.uint64(4 * q)
            a, b, c, d = _walk4(codes, i, root, steps, node_feature, node_child_base, child_table)
            out[i, t], out[i + np.uint64(1), t] = a, b
            out[i + np.uint64(2), t], out[i + np.uint64(3), t] = c, d
        for r in range(4 * n_quads, n):
            m = _walk1(codes, np.uint64(r), root, steps, node_feature, node_child_base, child_table)
            out[np.uint64(r), t] = m
    return out


@numba.njit(inline="always")
def _apply_leaf(out, i, m, node_value, leaf_map):
    m = np.uint64(m)
    out[i] = apply_map(out[i], node_value[m, 0], node_value[m, 1], leaf_map)


@parallel_rows("codes")
def predict_trees_cpu(
    codes, f, node_feature, node_child_base, child_table, node_value, tree_start, tree_depth, leaf_map, out
):
    """Write into ``out`` (float64) the chained prediction of each row; return ``out``."""
    n = codes.shape[0]
    n_quads = n // 4
    for row in numba.prange(n):
        out[np.uint64(row)] = start_value(f[np.uint64(row)], leaf_map)
    for t in range(tree_start.shape[0] - 1):
        root, steps = np.int64(tree_start[t]), tree_depth[t]
        for q in numba.prange(n_quads):
            i = np.uint64(4 * q)
            a, b, c, d = _walk4(codes, i, root, steps, node_feature, node_child_base, child_table)
            _apply_leaf(out, i, a, node_value, leaf_map)
            _apply_leaf(out, i + np.uint64(1), b, node_value, leaf_map)
            _apply_leaf(out, i + np.uint64(2), c, node_value, leaf_map)
            _apply_leaf(out, i + np.uint64(3), d, node_value, leaf_map)
        for r in range(4 * n_quads, n):
            m = _walk1(codes, np.uint64(r), root, steps, node_feature, node_child_base, child_table)
            _apply_leaf(out, np.uint64(r), m, node_value, leaf_map)
    for row in numba.prange(n):
        out[np.uint64(row)] = finish_value(out[np.uint64(row)], leaf_map)
    return out


@parallel_rows("f")
def predict_leaves_cpu(f, leaf, node_value, leaf_map, out):
    """Write into ``out`` (float64) one tree's prediction of rows whose node is known (``leaf``); return it.

    The operations of :func:`predict_trees_cpu` for one tree, in the same order, without the walk.
    """
    for row in numba.prange(f.shape[0]):
        i = np.uint64(row)
        m = np.uint64(leaf[i])
        x = apply_map(start_value(f[i], leaf_map), node_value[m, 0], node_value[m, 1], leaf_map)
        out[i] = finish_value(x, leaf_map)
    return out
