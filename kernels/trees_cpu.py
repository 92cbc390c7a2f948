"""Numba CPU twins of the tree kernels: parallel loops over rows, each row walked on its own.

Rows are independent and each writes only its own outputs, so the result does not depend on the
thread count or schedule (bit-identical between runs). The per-row code is ``gpucal.kernels.trees_row``,
the functions the CUDA kernels call, but for ``route_rows_cpu``, which writes ``route_row``'s step out
(inlined, a function that takes arrays still touches their reference counts on every row); row and node
indices are unsigned (no wrap-around checks, see there).

A walk is latency-bound: each level waits for dependent loads. Three choices hide that latency,
measured on the five trees MBCT fits on 1e7 rows of the speed benchmark, one thread:

* trees one at a time, every row through one tree before the next (a row's running value waits in
  ``out``): a tree's child table stays in the core's cache, where all of them (7 MB) do not; 2.4 s to 1.7 s;
* rows walked side by side, each a fixed number of branch-free steps (the tree's depth, from
  :func:`tree_depths_cpu`; a step at a leaf stays there): the core overlaps their chains of loads,
  where a walk that stops at its leaf mispredicts its exit and serialises them; four rows: 1.7 s to
  1.1-1.3 s (eight with the entry walk below: 10-20% less than four);
* the walk goes from child-table entry to entry (:func:`walk_table_cpu`: each entry holds its child's
  feature and table base, packed), two dependent loads a level (the entry, the row's code) instead of
  three (the node's feature and base, the code, the child), in a table of ``child_table``'s size.
"""

from __future__ import annotations

import numpy as np

from gpucal.kernels.jit import numba, parallel_rows
from gpucal.kernels.trees_row import apply_map, finish_value, start_value


@parallel_rows("codes")
def route_rows_cpu(codes, node_idx, node_feature, node_child_base, child_table, out):
    """Write into ``out`` (int32) the node of each row one level below ``node_idx``; return ``out``."""
    for i in numba.prange(codes.shape[0]):
        ui = np.uint64(i)
        # route_row's step written out: a call of it here, even inlined, touches the reference counts
        # of its four arrays on every row, most of the pass's time.
        node = node_idx[ui]
        m = node
        if node >= 0:
            j = node_feature[np.uint64(node)]
            if j >= 0:
                child = child_table[np.uint64(node_child_base[np.uint64(node)] + codes[ui, np.uint64(j)])]
                if child >= 0:
                    m = child
        out[ui] = m
    return out


def split_ranges(node_feature, node_child_base, n_entries):
    """Return the split nodes ordered by ``node_child_base``, and where each one's child-table entries end.

    A split node owns the entries from its ``node_child_base`` up to the next larger base of a split node,
    or up to ``n_entries`` (the layout of ``TreeEnsemble``; the callers check that no two split nodes share
    a base). Returns ``(order, stop)``, both int64: ``order`` the split nodes' ids by increasing base,
    ``stop[m]`` the end of split node ``m``'s entries (one value per node, 0 at leaves). numpy, on the
    host: the kernels below read the result, and sorting inside a kernel would compile numba's sort.
    """
    split = np.flatnonzero(np.asarray(node_feature) >= 0)
    order = split[np.argsort(node_child_base[split])]
    stop = np.zeros(node_feature.shape[0], dtype=np.int64)
    stop[order[:-1]] = node_child_base[order[1:]]
    stop[order[-1:]] = n_entries
    return order, stop


@numba.njit(cache=True)
def tree_depths_cpu(node_feature, node_child_base, child_table, tree_start, stop):
    """Return, per tree, a number of steps after which every walk from its root has stopped (int64).

    Nodes are visited in id order (children have larger ids): a split node reaches every child id above
    it in ``child_table`` from its ``node_child_base`` up to ``stop`` (:func:`split_ranges`). For the
    non-overlapping layout of ``TreeEnsemble`` that covers the node's own children and perhaps a few
    others, so the count is the tree's depth or more, and extra steps stay at the leaf.
    """
    n_nodes = node_feature.shape[0]
    depth = np.zeros(n_nodes, dtype=np.int64)
    out = np.zeros(tree_start.shape[0] - 1, dtype=np.int64)
    for t in range(tree_start.shape[0] - 1):
        for m in range(tree_start[t], tree_start[t + 1]):
            if node_feature[m] < 0:
                continue
            for e in range(node_child_base[m], stop[m]):
                child = child_table[e]
                if child > m and child < n_nodes and depth[child] < depth[m] + 1:
                    depth[child] = depth[m] + 1
                    if depth[child] > out[t]:
                        out[t] = depth[child]
    return out


@numba.njit(cache=True)
def walk_table_cpu(node_feature, node_child_base, child_table, tree_start, order, stop, shift, out):
    """Fill ``out`` with the walk's table by arrival, one entry per entry of ``child_table`` and then one
    per tree root; return ``out`` (int32, or int64 where the packed entries need it).

    A row that arrived through entry ``e`` at a split node reads ``out[e] = (base << shift) | j``
    (``j`` the node's feature, ``base`` its ``node_child_base``) and moves to entry ``base`` plus its code
    of feature ``j``; at a node ``x`` it stays at, ``out[e] = -1 - x``: a leaf, or the parent of a ``-1``
    child or of one not above it (where :func:`gpucal.kernels.trees_row.walk_tree` stops). The split
    nodes by base and the end of each one's entries are ``order`` and ``stop`` (:func:`split_ranges`). A
    step then waits for two dependent loads, the entry and the code, where a walk over the node arrays
    waits for three (the node's feature and base, the code, the child), and the table is
    ``child_table``'s size.
    """
    n_edges = child_table.shape[0]
    out[:n_edges] = -1  # entries no split node owns: no code in range reaches them
    for r in range(order.shape[0]):
        m = order[r]
        for e in range(node_child_base[m], stop[m]):
            child = np.int64(child_table[e])
            out[e] = _arrival(child, node_feature, node_child_base, shift) if child > m else -1 - np.int64(m)
    for t in range(tree_start.shape[0] - 1):
        out[n_edges + t] = _arrival(tree_start[t], node_feature, node_child_base, shift)
    return out


@numba.njit(inline="always")
def _arrival(node, node_feature, node_child_base, shift):
    j = np.int64(node_feature[node])
    return (node_child_base[node] << shift) | j if j >= 0 else -1 - np.int64(node)


@numba.njit(inline="always")
def _step(codes, i, e, table, shift):
    """One step from entry ``e`` for row ``i``, without branches (selects compile to conditional moves)."""
    x = np.int64(table[np.uint64(e)])
    go = x >= 0
    j = x & ((np.int64(1) << shift) - 1) if go else np.int64(0)
    code = np.int64(codes[i, np.uint64(j)])
    return (x >> shift) + code if go else e


@numba.njit(inline="always")
def _node(table, child_table, e, root):
    """The node a row is at through entry ``e`` of the tree rooted at ``root``: a stop, or (after as many
    steps as :func:`tree_depths_cpu` counts, only where child ids are not above their node) the child
    or root the entry leads to."""
    x = np.int64(table[np.uint64(e)])
    if x < 0:
        return np.uint64(-1 - x)
    return np.uint64(child_table[np.uint64(e)] if e < child_table.shape[0] else root)


@numba.njit(inline="always")
def _walk8(codes, i, root, steps, table, shift):
    """Rows ``i .. i + 7`` walked ``steps`` steps from entry ``root`` side by side; their eight entries."""
    e0 = e1 = e2 = e3 = e4 = e5 = e6 = e7 = root
    for _ in range(steps):
        e0 = _step(codes, i, e0, table, shift)
        e1 = _step(codes, i + np.uint64(1), e1, table, shift)
        e2 = _step(codes, i + np.uint64(2), e2, table, shift)
        e3 = _step(codes, i + np.uint64(3), e3, table, shift)
        e4 = _step(codes, i + np.uint64(4), e4, table, shift)
        e5 = _step(codes, i + np.uint64(5), e5, table, shift)
        e6 = _step(codes, i + np.uint64(6), e6, table, shift)
        e7 = _step(codes, i + np.uint64(7), e7, table, shift)
    return e0, e1, e2, e3, e4, e5, e6, e7


@numba.njit(inline="always")
def _walk1(codes, i, root, steps, table, shift):
    e = root
    for _ in range(steps):
        e = _step(codes, i, e, table, shift)
    return e


@parallel_rows("codes")
def tree_leaves_cpu(codes, table, shift, child_table, tree_start, tree_depth, out):
    """Write into ``out`` (int32 ``(n, n_trees)``) the node each row stops at in each tree; return it.

    ``table`` from :func:`walk_table_cpu`, whose last ``n_trees`` entries are the roots.
    """
    n = codes.shape[0]
    n_groups = n // 8
    n_trees = tree_depth.shape[0]
    first_root = table.shape[0] - n_trees
    for t in range(n_trees):
        root, steps, node = np.int64(first_root + t), tree_depth[t], tree_start[t]
        for q in numba.prange(n_groups):
            i = np.uint64(8 * q)
            ends = _walk8(codes, i, root, steps, table, shift)
            for k in range(8):
                out[i + np.uint64(k), t] = _node(table, child_table, ends[k], node)
        for r in range(8 * n_groups, n):
            out[np.uint64(r), t] = _node(
                table, child_table, _walk1(codes, np.uint64(r), root, steps, table, shift), node
            )
    return out


@numba.njit(inline="always")
def _apply_leaf(out, i, m, node_value, leaf_map):
    out[i] = apply_map(out[i], node_value[m, 0], node_value[m, 1], leaf_map)


@numba.njit(inline="always")
def _apply_leaves8(out, i, ends, table, child_table, root, node_value, leaf_map):
    """:func:`_apply_leaf` for rows ``i .. i + 7`` ending at entries ``ends``, written out by hand: every
    node and map is read before the first store into ``out`` (which numba cannot prove distinct from
    ``node_value``), so the eight rows' loads overlap; 5-10% of the walk (1e7 rows, five trees)."""
    u = np.uint64
    m0, m1 = _node(table, child_table, ends[0], root), _node(table, child_table, ends[1], root)
    m2, m3 = _node(table, child_table, ends[2], root), _node(table, child_table, ends[3], root)
    m4, m5 = _node(table, child_table, ends[4], root), _node(table, child_table, ends[5], root)
    m6, m7 = _node(table, child_table, ends[6], root), _node(table, child_table, ends[7], root)
    a0, b0, a1, b1 = node_value[m0, 0], node_value[m0, 1], node_value[m1, 0], node_value[m1, 1]
    a2, b2, a3, b3 = node_value[m2, 0], node_value[m2, 1], node_value[m3, 0], node_value[m3, 1]
    a4, b4, a5, b5 = node_value[m4, 0], node_value[m4, 1], node_value[m5, 0], node_value[m5, 1]
    a6, b6, a7, b7 = node_value[m6, 0], node_value[m6, 1], node_value[m7, 0], node_value[m7, 1]
    x0, x1, x2, x3 = out[i], out[i + u(1)], out[i + u(2)], out[i + u(3)]
    x4, x5, x6, x7 = out[i + u(4)], out[i + u(5)], out[i + u(6)], out[i + u(7)]
    out[i] = apply_map(x0, a0, b0, leaf_map)
    out[i + u(1)] = apply_map(x1, a1, b1, leaf_map)
    out[i + u(2)] = apply_map(x2, a2, b2, leaf_map)
    out[i + u(3)] = apply_map(x3, a3, b3, leaf_map)
    out[i + u(4)] = apply_map(x4, a4, b4, leaf_map)
    out[i + u(5)] = apply_map(x5, a5, b5, leaf_map)
    out[i + u(6)] = apply_map(x6, a6, b6, leaf_map)
    out[i + u(7)] = apply_map(x7, a7, b7, leaf_map)


@parallel_rows("codes")
def predict_trees_cpu(
    codes,
    f,
    table,
    shift,
    child_table,
    tree_start,
    node_value,
    tree_depth,
    leaf_map,
    a,
    b,
    start,
    finish,
    out,
):
    """Write into ``out`` (float64) the chained prediction of each row; return ``out``.

    ``table`` from :func:`walk_table_cpu`, whose last ``n_trees`` entries are the roots. ``start``: whether
    the initial map ``(a, b)`` starts the chain from ``f`` (else ``f`` holds the chain's values);
    ``finish``: whether the chain's last values go through the sigmoid.
    """
    n = codes.shape[0]
    n_groups = n // 8
    n_trees = tree_depth.shape[0]
    first_root = table.shape[0] - n_trees
    if start:
        for row in numba.prange(n):
            out[np.uint64(row)] = start_value(f[np.uint64(row)], a, b, leaf_map)
    else:
        for row in numba.prange(n):
            out[np.uint64(row)] = f[np.uint64(row)]
    for t in range(n_trees):
        root, steps, node = np.int64(first_root + t), tree_depth[t], tree_start[t]
        for q in numba.prange(n_groups):
            i = np.uint64(8 * q)
            ends = _walk8(codes, i, root, steps, table, shift)
            _apply_leaves8(out, i, ends, table, child_table, node, node_value, leaf_map)
        for r in range(8 * n_groups, n):
            e = _walk1(codes, np.uint64(r), root, steps, table, shift)
            _apply_leaf(out, np.uint64(r), _node(table, child_table, e, node), node_value, leaf_map)
    if finish:
        for row in numba.prange(n):
            out[np.uint64(row)] = finish_value(out[np.uint64(row)], leaf_map)
    return out


@parallel_rows("f")
def chain_start_cpu(f, a, b, leaf_map, out):
    """Write into ``out`` (float64) the chain's starting value of each row (``start_value``); return it."""
    for row in numba.prange(f.shape[0]):
        out[np.uint64(row)] = start_value(f[np.uint64(row)], a, b, leaf_map)
    return out


@parallel_rows("x")
def predict_leaves_cpu(x, leaf, node_value, leaf_map, out):
    """Write into ``out`` (float64) one tree's map of the chain's values ``x`` of rows whose node is known
    (``leaf``); return it. The operation of :func:`predict_trees_cpu` per tree, without the walk.
    """
    for row in numba.prange(x.shape[0]):
        i = np.uint64(row)
        m = np.uint64(leaf[i])
        out[i] = apply_map(x[i], node_value[m, 0], node_value[m, 1], leaf_map)
    return out
