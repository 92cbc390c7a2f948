r"""Numpy oracle for the tree kernels: routing rows through MBCT's multi-way trees and chained prediction.

Layout shared by all three forms (oracle, numba CPU twin, numba-cuda kernel); it is the one of
``gpucal.trees.ensemble.TreeEnsemble``:

- ``node_feature[m]``: split feature of node ``m``, ``-1`` for a leaf;
- ``node_child_base[m]``: offset of a split node's children in ``child_table``;
- ``child_table[node_child_base[m] + v]``: the global id of the child that holds code ``v`` of the split
  feature, or ``-1`` when node ``m`` saw no training row with ``v`` (such a row stops at ``m``);
  several codes may share one child;
- ``node_value[m] = (a, b)``: the map of node ``m`` (every node has one, internal nodes too);
- ``tree_start``: tree ``t`` holds ids ``[tree_start[t], tree_start[t + 1])``; its root is ``tree_start[t]``.

Children have larger ids than their parent (``TreeEnsemble.check``). A walk also stops at a child id that
is not above its node, so every walk ends, even on arrays that were never checked.

Prediction chains the trees. With :math:`m_t(i)` the node row :math:`i` stops at in tree :math:`t` and
:math:`(a, b)` its map:

- scale: :math:`f_t = \min(a f_{t-1}, 1)`, starting from the input :math:`f_0 = f`;
- shift and platt: :math:`l_t = a\, l_{t-1} + b` from
  :math:`l_0 = \operatorname{clip}(a_0 \operatorname{logit}(\operatorname{clip}(f, \epsilon, 1 - \epsilon))
  + b_0, \pm\operatorname{logit}(1 - \epsilon))` (the initial map :math:`(a_0, b_0)`, by default the
  identity, for which the outer clip changes nothing), output :math:`\sigma(l_T) = 1 / (1 + e^{-l_T})`.
  Shift maps have :math:`a = 1`, so both use one formula. The fit carries the chain's values :math:`l_t`
  themselves from tree to tree, so a prediction is the same chain of operations as the fit's.

:math:`\epsilon` is the float64 machine epsilon (as in ``gpucal.calibrators.logistic``) and
:math:`\operatorname{logit}(p) = \log(p / (1 - p))`: one logarithm, and ``1 - p`` is exact for
:math:`p \ge 1/2`. Every backend uses these same formulas in this same order.
"""

from __future__ import annotations

import math

import numpy as np

# Leaf maps as the kernels take them (the same numbers as gpucal.trees.ensemble).
LEAF_SCALE = 0
LEAF_SHIFT = 1
LEAF_PLATT = 2
LEAF_MAP_CODES = (LEAF_SCALE, LEAF_SHIFT, LEAF_PLATT)
# Probabilities are clipped to [EPS, 1 - EPS] before the logit: logit(0) is -36.04 instead of -inf.
EPS = float(np.finfo(np.float64).eps)
# The logits of the clipped probabilities EPS and 1 - EPS (-36.04, 36.04) by the kernels' formula: the
# range of a chain's starting value.
LOGIT_LOW = math.log(EPS / (1.0 - EPS))
LOGIT_HIGH = math.log((1.0 - EPS) / (1.0 - (1.0 - EPS)))


def route_rows_oracle(
    codes: np.ndarray,
    node_idx: np.ndarray,
    node_feature: np.ndarray,
    node_child_base: np.ndarray,
    child_table: np.ndarray,
) -> np.ndarray:
    """Move every row one level down: the child of its node that holds its code, where there is one.

    ``out[i] = child_table[node_child_base[m] + codes[i, node_feature[m]]]`` for ``m = node_idx[i] >= 0``
    when ``node_feature[m] >= 0`` and that child is ``>= 0``; otherwise ``out[i] = node_idx[i]``.
    """
    out = np.asarray(node_idx, dtype=np.int32).copy()
    rows = np.flatnonzero(out >= 0)
    node = out[rows]
    feature = node_feature[node].astype(np.int64)
    split = feature >= 0
    rows, node, feature = rows[split], node[split], feature[split]
    child = child_table[node_child_base[node] + codes[rows, feature].astype(np.int64)]
    moves = child >= 0
    out[rows[moves]] = child[moves]
    return out


def tree_leaves_oracle(
    codes: np.ndarray,
    node_feature: np.ndarray,
    node_child_base: np.ndarray,
    child_table: np.ndarray,
    tree_start: np.ndarray,
) -> np.ndarray:
    """Return the ``(n, n_trees)`` int32 id of the node each row stops at in each tree.

    All rows walk one level at a time from the root until none moves; a move must go to a larger id.
    """
    n_rows = codes.shape[0]
    n_trees = tree_start.shape[0] - 1
    out = np.empty((n_rows, n_trees), dtype=np.int32)
    for t in range(n_trees):
        node = np.full(n_rows, tree_start[t], dtype=np.int32)
        while True:
            child = route_rows_oracle(codes, node, node_feature, node_child_base, child_table)
            moves = child > node
            if not moves.any():
                break
            node[moves] = child[moves]
        out[:, t] = node
    return out


def logit_clipped(f: np.ndarray) -> np.ndarray:
    """:math:`\\log(p / (1 - p))` with :math:`p = \\operatorname{clip}(f, \\epsilon, 1 - \\epsilon)`."""
    p = np.clip(np.asarray(f, dtype=np.float64), EPS, 1.0 - EPS)
    return np.log(p / (1.0 - p))


def sigmoid(z: np.ndarray) -> np.ndarray:
    """:math:`1 / (1 + e^{-z})`; ``exp`` overflows to ``inf`` for :math:`z < -709` and the result is 0."""
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-z))


def chain_start_oracle(f: np.ndarray, a: float, b: float, leaf_map: int) -> np.ndarray:
    """The chain's starting values (module docstring) as float64: ``f`` for scale, else :math:`l_0`."""
    if leaf_map == LEAF_SCALE:
        return np.asarray(f, dtype=np.float64).copy()
    return np.clip(a * logit_clipped(f) + b, LOGIT_LOW, LOGIT_HIGH)


def predict_trees_oracle(
    codes: np.ndarray,
    f: np.ndarray,
    node_feature: np.ndarray,
    node_child_base: np.ndarray,
    child_table: np.ndarray,
    node_value: np.ndarray,
    tree_start: np.ndarray,
    leaf_map: int,
    init: tuple[float, float] | None = (1.0, 0.0),
    finish: bool = True,
) -> np.ndarray:
    """Return the chained prediction (module docstring) of every row as float64, tree after tree.

    ``init``: the initial map of ``f`` (probabilities), or None when ``f`` holds the chain's values;
    ``finish=False`` returns the chain's last values (no sigmoid).
    """
    leaves = tree_leaves_oracle(codes, node_feature, node_child_base, child_table, tree_start)
    if leaf_map == LEAF_SCALE:
        out = np.asarray(f, dtype=np.float64).copy()
        for t in range(leaves.shape[1]):
            out = np.minimum(node_value[leaves[:, t], 0] * out, 1.0)
        return out
    logit = np.asarray(f, dtype=np.float64) if init is None else chain_start_oracle(f, *init, leaf_map)
    for t in range(leaves.shape[1]):
        value = node_value[leaves[:, t]]
        logit = value[:, 0] * logit + value[:, 1]
    return sigmoid(logit) if finish else logit
