r"""Numba CPU twin of the split-tree kernels: leaves and exact tree SHAP, parallel over rows.

Layout and rules: ``gpucal.kernels.boosted_trees_oracle``. Each row writes only its own outputs, so the result
does not depend on the thread count (bit-identical between runs).

Tree SHAP is Algorithm 2 of Lundberg, Erion and Lee (2018), in the order of LightGBM's
``Tree::TreeSHAP``: the recursion is a loop over an explicit stack (numba compiles no recursive
generic function), the hot child on top so it is walked first, as the recursion does. Each stack frame
holds ``(node, unique_depth, parent_path_start, zero_fraction, one_fraction, feature)``; a node's
unique path is a copy of its parent's at ``parent_path_start + unique_depth``, so the paths of one walk
need :math:`(D + 1)(D + 2) / 2` entries for trees of depth :math:`D` and the stack :math:`2 (D + 1)`.
"""

from __future__ import annotations

import math

import numpy as np

from gpucal.kernels.boosted_trees_oracle import (
    DECISION_CAT_LEFT,
    DECISION_CAT_RIGHT,
    DECISION_LE,
    MAX_LIGHTGBM_CATEGORY,
    MAX_XGBOOST_CATEGORY,
    MISSING_NAN,
    MISSING_ZERO,
    ZERO_THRESHOLD,
)
from gpucal.kernels.jit import numba

# Rows per parallel task of tree SHAP: each task allocates its path and stack buffers once.
SHAP_CHUNK_ROWS = 256


@numba.njit(cache=True, inline="always")
def _in_set(cat_values, start, stop, value):
    """Whether ``value`` is among the sorted ``cat_values[start:stop]`` (binary search)."""
    lo, hi = start, stop
    while lo < hi:
        mid = (lo + hi) // 2
        if cat_values[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo < stop and cat_values[lo] == value


@numba.njit(cache=True, inline="always")
def goes_left(x, decision, threshold, missing, default_left, cat_values, cat_start, cat_stop):
    """The rule of ``gpucal.kernels.boosted_trees_oracle.goes_left`` for one node's fields."""
    if decision == DECISION_CAT_RIGHT:
        if math.isnan(x):
            return default_left != 0
        if x < 0.0 or x >= MAX_XGBOOST_CATEGORY:
            return True
        return not _in_set(cat_values, cat_start, cat_stop, np.int64(x))
    if decision == DECISION_CAT_LEFT:
        if math.isnan(x) or x <= -1.0 or x >= MAX_LIGHTGBM_CATEGORY:
            return False
        return _in_set(cat_values, cat_start, cat_stop, np.int64(x))
    if math.isnan(x):
        if missing == MISSING_NAN:
            return default_left != 0
        x = 0.0
    if missing == MISSING_ZERO and x >= -ZERO_THRESHOLD and x <= ZERO_THRESHOLD:
        return default_left != 0
    if decision == DECISION_LE:
        return x <= threshold
    return x < threshold


@numba.njit(cache=True, inline="always")
def _child(X, i, m, feature, threshold, decision, missing, default_left, left, right, cat_start, cat_values):
    """The child of split node ``m`` that row ``i`` takes."""
    x = X[i, feature[m]]
    if goes_left(
        x, decision[m], threshold[m], missing[m], default_left[m], cat_values, cat_start[m], cat_start[m + 1]
    ):
        return left[m]
    return right[m]


@numba.njit(parallel=True, cache=True)
def leaves_cpu(
    X, feature, threshold, decision, missing, default_left, left, right, cat_start, cat_values, leaf_id,
    tree_start, out,
):  # fmt: skip
    """Write into ``out`` ``(n, n_trees)`` the library's leaf id each row reaches per tree; return ``out``.

    A walk also stops at a child id not above its node (checked tables have none), so it always ends.
    """
    n_trees = tree_start.shape[0] - 1
    for i in numba.prange(X.shape[0]):
        for t in range(n_trees):
            m = tree_start[t]
            while feature[m] >= 0:
                nxt = _child(
                    X, i, m, feature, threshold, decision, missing, default_left, left, right, cat_start,
                    cat_values,
                )  # fmt: skip
                if nxt <= m:
                    break
                m = nxt
            out[i, t] = leaf_id[m]
    return out


@numba.njit(cache=True, inline="always")
def _extend(p_feat, p_zero, p_one, p_w, s, depth, zero, one, feat):
    """ExtendPath: append ``(feat, zero, one)`` at ``s + depth`` and update the permutation weights."""
    p_feat[s + depth] = feat
    p_zero[s + depth] = zero
    p_one[s + depth] = one
    p_w[s + depth] = 1.0 if depth == 0 else 0.0
    for k in range(depth - 1, -1, -1):
        p_w[s + k + 1] += one * p_w[s + k] * (k + 1) / (depth + 1)
        p_w[s + k] = zero * p_w[s + k] * (depth - k) / (depth + 1)


@numba.njit(cache=True, inline="always")
def _unwind(p_feat, p_zero, p_one, p_w, s, depth, idx):
    """UnwindPath: remove entry ``idx`` from the path at ``s`` (of ``depth + 1`` entries)."""
    one, zero = p_one[s + idx], p_zero[s + idx]
    next_one = p_w[s + depth]
    for k in range(depth - 1, -1, -1):
        if one != 0.0:
            tmp = p_w[s + k]
            p_w[s + k] = next_one * (depth + 1) / ((k + 1) * one)
            next_one = tmp - p_w[s + k] * zero * (depth - k) / (depth + 1)
        else:
            p_w[s + k] = p_w[s + k] * (depth + 1) / (zero * (depth - k))
    for k in range(idx, depth):
        p_feat[s + k] = p_feat[s + k + 1]
        p_zero[s + k] = p_zero[s + k + 1]
        p_one[s + k] = p_one[s + k + 1]


@numba.njit(cache=True, inline="always")
def _unwound_sum(p_zero, p_one, p_w, s, depth, idx):
    """UnwoundPathSum: the total permutation weight of the path at ``s`` without entry ``idx``."""
    one, zero = p_one[s + idx], p_zero[s + idx]
    next_one = p_w[s + depth]
    total = 0.0
    if one != 0.0:
        for k in range(depth - 1, -1, -1):
            tmp = next_one * (depth + 1) / ((k + 1) * one)
            total += tmp
            next_one = p_w[s + k] - tmp * zero * (depth - k) / (depth + 1)
    else:
        for k in range(depth - 1, -1, -1):
            total += p_w[s + k] / zero / ((depth - k) / (depth + 1))
    return total


@numba.njit(parallel=True, cache=True)
def shap_values_cpu(
    X, feature, threshold, decision, missing, default_left, left, right, cat_start, cat_values, value,
    cover, tree_start, tree_class, max_depth, out,
):  # fmt: skip
    """Add into ``out`` ``(n, n_outputs, d)`` every row's tree SHAP values; return ``out``."""
    n_trees = tree_start.shape[0] - 1
    path_size = (max_depth + 1) * (max_depth + 2) // 2
    stack_size = 2 * (max_depth + 1)
    n_rows = X.shape[0]
    n_chunks = (n_rows + SHAP_CHUNK_ROWS - 1) // SHAP_CHUNK_ROWS
    for c in numba.prange(n_chunks):  # one set of buffers per chunk of rows
        p_feat = np.empty(path_size, dtype=np.int64)
        p_zero = np.empty(path_size)
        p_one = np.empty(path_size)
        p_w = np.empty(path_size)
        s_node = np.empty(stack_size, dtype=np.int64)
        s_depth = np.empty(stack_size, dtype=np.int64)
        s_start = np.empty(stack_size, dtype=np.int64)
        s_zero = np.empty(stack_size)
        s_one = np.empty(stack_size)
        s_feat = np.empty(stack_size, dtype=np.int64)
        for i in range(c * SHAP_CHUNK_ROWS, min(n_rows, (c + 1) * SHAP_CHUNK_ROWS)):
            for t in range(n_trees):
                root, k_out = tree_start[t], tree_class[t]
                if feature[root] < 0:
                    continue  # a single leaf: every contribution is 0
                s_node[0], s_depth[0], s_start[0], s_zero[0], s_one[0], s_feat[0] = root, 0, 0, 1.0, 1.0, -1
                top = 1
                while top > 0:
                    top -= 1
                    m, depth, parent = s_node[top], s_depth[top], s_start[top]
                    s = parent + depth
                    for k in range(depth):  # copy the parent's path
                        p_feat[s + k] = p_feat[parent + k]
                        p_zero[s + k] = p_zero[parent + k]
                        p_one[s + k] = p_one[parent + k]
                        p_w[s + k] = p_w[parent + k]
                    _extend(p_feat, p_zero, p_one, p_w, s, depth, s_zero[top], s_one[top], s_feat[top])
                    j = feature[m]
                    if j < 0:
                        for k in range(1, depth + 1):
                            w = _unwound_sum(p_zero, p_one, p_w, s, depth, k)
                            out[i, k_out, p_feat[s + k]] += w * (p_one[s + k] - p_zero[s + k]) * value[m]
                        continue
                    hot = _child(
                        X, i, m, feature, threshold, decision, missing, default_left, left, right, cat_start,
                        cat_values,
                    )  # fmt: skip
                    cold = right[m] if hot == left[m] else left[m]
                    incoming_zero, incoming_one = 1.0, 1.0
                    idx = 0
                    while idx <= depth and p_feat[s + idx] != j:
                        idx += 1
                    if idx <= depth:
                        incoming_zero, incoming_one = p_zero[s + idx], p_one[s + idx]
                        _unwind(p_feat, p_zero, p_one, p_w, s, depth, idx)
                        depth -= 1
                    # Cold child below the hot one on the stack: the hot subtree is walked first.
                    s_node[top], s_depth[top], s_start[top] = cold, depth + 1, s
                    s_zero[top], s_one[top], s_feat[top] = cover[cold] / cover[m] * incoming_zero, 0.0, j
                    top += 1
                    s_node[top], s_depth[top], s_start[top] = hot, depth + 1, s
                    s_zero[top], s_one[top], s_feat[top] = (
                        cover[hot] / cover[m] * incoming_zero,
                        incoming_one,
                        j,
                    )
                    top += 1
    return out
