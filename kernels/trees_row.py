r"""Per-row arithmetic of the tree kernels, shared by the numba CPU twin and the numba-cuda kernels.

Each function is a plain ``numba.njit`` function with ``inline="always"``: the CPU twin inlines it and
numba-cuda compiles the same source into the kernels, so the backends cannot drift apart. Inlined, a
function that takes arrays still touches their reference counts at every call, which costs more than a
routing step: the CPU loops that route every row one level (``route_rows_cpu``,
``gpucal.kernels.node_order.route_and_group``) write :func:`route_row`'s step out, and the tests hold
them to the oracle and the CUDA kernels. The formulas are those of
``gpucal.kernels.trees_oracle``'s module docstring.

Array indices are cast to uint64 (every one is known to be >= 0 there): numba adds no negative-index
wrap-around to unsigned indices, which made the CPU walk 1.6 times faster (1 thread, 3 trees of depth 5).
"""

from __future__ import annotations

import math

import numpy as np

from gpucal.kernels.jit import numba
from gpucal.kernels.trees_oracle import EPS, LEAF_SCALE, LOGIT_HIGH, LOGIT_LOW

ONE_MINUS_EPS = 1.0 - EPS


@numba.njit(cache=True, inline="always")
def route_row(codes, i, node, node_feature, node_child_base, child_table):
    """Return the child of ``node`` holding row ``i``'s code, or ``node`` (a leaf, a ``-1`` child or node)."""
    if node < 0:
        return node
    j = node_feature[np.uint64(node)]
    if j < 0:
        return node
    child = child_table[np.uint64(node_child_base[np.uint64(node)] + codes[i, np.uint64(j)])]
    return child if child >= 0 else node


@numba.njit(cache=True, inline="always")
def walk_tree(codes, i, root, node_feature, node_child_base, child_table):
    """Return the node row ``i`` stops at, walking down from ``root`` (int64).

    The walk stops at a leaf, and at a child id not above the current node: ``-1`` (no training row had
    the code), or a malformed table, so every walk ends.
    """
    node = root
    while True:
        j = node_feature[np.uint64(node)]
        if j < 0:
            return node
        child = np.int64(child_table[np.uint64(node_child_base[np.uint64(node)] + codes[i, np.uint64(j)])])
        if child <= node:
            return node
        node = child


@numba.njit(cache=True, inline="always")
def start_value(f, a, b, leaf_map):
    """The chain's starting value: ``f`` for scale, else the initial map :math:`a \\log(p / (1 - p)) + b`
    of the clipped ``f``, clipped to the logits of the clipped probabilities (a no-op for ``a, b = 1, 0``)."""
    x = float(f)
    if leaf_map == LEAF_SCALE:
        return x
    # Comparisons rather than min/max: a NaN probability stays NaN, as with np.clip.
    if x < EPS:
        x = EPS
    if x > ONE_MINUS_EPS:
        x = ONE_MINUS_EPS
    z = a * math.log(x / (1.0 - x)) + b
    if z < LOGIT_LOW:
        z = LOGIT_LOW
    if z > LOGIT_HIGH:
        z = LOGIT_HIGH
    return z


@numba.njit(cache=True, inline="always")
def apply_map(x, a, b, leaf_map):
    """One tree's map: :math:`\\min(a x, 1)` for scale, :math:`a x + b` on the logit otherwise."""
    if leaf_map == LEAF_SCALE:
        q = a * x
        return 1.0 if q > 1.0 else q
    return a * x + b


@numba.njit(cache=True, inline="always")
def finish_value(x, leaf_map):
    """The chain's output: ``x`` for scale, :math:`1 / (1 + e^{-x})` otherwise."""
    if leaf_map == LEAF_SCALE:
        return x
    return 1.0 / (1.0 + math.exp(-x))
