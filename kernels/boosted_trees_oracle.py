r"""Pure-Python oracle for binary split trees (XGBoost's and LightGBM's): leaves and exact tree SHAP.

Layout shared with the numba twin (``gpucal.kernels.boosted_trees_cpu``); ``gpucal.ccl.tree_tables`` fills it
from either library. Trees are concatenated; tree ``t`` holds node ids ``[tree_start[t],
tree_start[t + 1])`` and its root is ``tree_start[t]``. Per node ``m``:

- ``node_feature[m]``: the feature the node tests, ``-1`` for a leaf;
- ``node_left[m]``, ``node_right[m]``: global ids of its children (``-1`` for a leaf), larger than ``m``;
- ``node_decision[m]`` and ``node_threshold[m]``, ``node_missing[m]``, ``node_default_left[m]``, the
  category set ``cat_values[node_cat_start[m] : node_cat_start[m + 1]]``: the rule of :func:`goes_left`;
- ``node_value[m]``: a leaf's output (margin units), ``node_cover[m]``: the training mass that reached
  the node (LightGBM: row count, XGBoost: hessian sum), the weights of tree SHAP;
- ``node_leaf_id[m]``: the library's own number for a leaf (``pred_leaf``), ``-1`` for a split.

The rules, as each library's prediction code applies them (LightGBM ``Tree::NumericalDecision`` /
``CategoricalDecision``, XGBoost ``GetNextNode`` / ``common::Decision``):

- ``DECISION_LE`` (LightGBM numbers): NaN becomes 0 unless the node's missing type is NaN; a missing
  value (NaN for ``MISSING_NAN``, :math:`|x| \le 10^{-35}` for ``MISSING_ZERO``) takes the default
  side; otherwise left iff :math:`x \le t`.
- ``DECISION_LT`` (XGBoost numbers, inputs rounded to float32): NaN takes the default side; else left
  iff :math:`x < t`.
- ``DECISION_CAT_LEFT`` (LightGBM categories): NaN or a value whose C int cast (truncation toward 0)
  is negative, :math:`x \le -1`, goes right; else left iff that integer is in the set (-0.5 reads
  as category 0).
- ``DECISION_CAT_RIGHT`` (XGBoost categories): NaN takes the default side; a negative value or one at
  or above :math:`2^{24}` goes left; else right iff :math:`\lfloor x \rfloor` is in the set.

Tree SHAP: :func:`shap_values_oracle` is the definition itself, the Shapley values of
:math:`v(S) = E[f(x) \mid x_S]` with the expectation over the training mass below each split
(Lundberg, Erion and Lee 2018, Algorithm 1), summed over every subset :math:`S` (exponential in the
number of features: for tests on a few features). The numba twin runs Algorithm 2 of the same paper,
the polynomial-time exact form both libraries implement.
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import NamedTuple

import numpy as np

DECISION_LE = 0
DECISION_LT = 1
DECISION_CAT_LEFT = 2
DECISION_CAT_RIGHT = 3
DECISIONS = (DECISION_LE, DECISION_LT, DECISION_CAT_LEFT, DECISION_CAT_RIGHT)
MISSING_NONE = 0
MISSING_ZERO = 1
MISSING_NAN = 2
MISSING_TYPES = (MISSING_NONE, MISSING_ZERO, MISSING_NAN)
# LightGBM's kZeroThreshold (a float 1e-35): values this close to 0 are "zero" for MISSING_ZERO.
ZERO_THRESHOLD = float(np.float32(1e-35))
# XGBoost's OutOfRangeCat: categories at or above 2^24 (and negative ones) are invalid and go left.
MAX_XGBOOST_CATEGORY = float(1 << 24)
# LightGBM casts the value to a C int: anything at or above 2^31 is no category of any set (goes right).
MAX_LIGHTGBM_CATEGORY = float(1 << 31)


class SplitTrees(NamedTuple):
    """The node arrays of binary split trees, in the kernels' dtypes (see the module docstring)."""

    node_feature: np.ndarray  # int32 (n_nodes,)
    node_threshold: np.ndarray  # float64
    node_decision: np.ndarray  # int8
    node_missing: np.ndarray  # int8
    node_default_left: np.ndarray  # int8, 0 or 1
    node_left: np.ndarray  # int32
    node_right: np.ndarray  # int32
    node_cat_start: np.ndarray  # int64 (n_nodes + 1,)
    cat_values: np.ndarray  # int64, each node's categories sorted
    node_value: np.ndarray  # float64
    node_cover: np.ndarray  # float64
    node_leaf_id: np.ndarray  # int32
    tree_start: np.ndarray  # int64 (n_trees + 1,)


def goes_left(trees: SplitTrees, m: int, x: float) -> bool:
    """Whether value ``x`` of node ``m``'s feature takes the left child (the module docstring's rules)."""
    decision = int(trees.node_decision[m])
    default_left = bool(trees.node_default_left[m])
    categories = trees.cat_values[trees.node_cat_start[m] : trees.node_cat_start[m + 1]].tolist()
    if decision == DECISION_CAT_RIGHT:
        if math.isnan(x):
            return default_left
        if x < 0 or x >= MAX_XGBOOST_CATEGORY:
            return True
        return int(x) not in categories
    if decision == DECISION_CAT_LEFT:
        # LightGBM casts to a C int first, truncating toward 0: -0.5 is category 0, -1 is negative.
        if math.isnan(x) or x <= -1 or x >= MAX_LIGHTGBM_CATEGORY:
            return False
        return int(x) in categories
    missing = int(trees.node_missing[m])
    if math.isnan(x):
        if missing == MISSING_NAN:
            return default_left
        x = 0.0
    if missing == MISSING_ZERO and -ZERO_THRESHOLD <= x <= ZERO_THRESHOLD:
        return default_left
    threshold = float(trees.node_threshold[m])
    return x <= threshold if decision == DECISION_LE else x < threshold


def _leaf_of(trees: SplitTrees, row: np.ndarray, root: int) -> int:
    m = root
    while trees.node_feature[m] >= 0:
        left = goes_left(trees, m, float(row[trees.node_feature[m]]))
        m = int(trees.node_left[m] if left else trees.node_right[m])
    return m


def leaves_oracle(X: np.ndarray, trees: SplitTrees) -> np.ndarray:
    """Return ``(n, n_trees)`` int32: the library's id of the leaf each row reaches in each tree."""
    n_trees = trees.tree_start.shape[0] - 1
    out = np.empty((X.shape[0], n_trees), dtype=np.int32)
    for i in range(X.shape[0]):
        for t in range(n_trees):
            out[i, t] = trees.node_leaf_id[_leaf_of(trees, X[i], int(trees.tree_start[t]))]
    return out


def _expected_value(trees: SplitTrees, row: np.ndarray, m: int, known: frozenset[int]) -> float:
    """:math:`E[f(x) \\mid x_S]` below node ``m`` with ``S = known`` (Lundberg et al., Algorithm 1)."""
    j = int(trees.node_feature[m])
    if j < 0:
        return float(trees.node_value[m])
    left, right = int(trees.node_left[m]), int(trees.node_right[m])
    if j in known:
        return _expected_value(trees, row, left if goes_left(trees, m, float(row[j])) else right, known)
    cover = trees.node_cover
    below = cover[left] * _expected_value(trees, row, left, known)
    below += cover[right] * _expected_value(trees, row, right, known)
    return float(below / cover[m])


def shap_values_oracle(
    X: np.ndarray, trees: SplitTrees, tree_class: np.ndarray, n_outputs: int
) -> np.ndarray:
    r"""Return ``(n, n_outputs, d)``: exact Shapley values of :math:`E[f_k(x) \mid x_S]`, by every subset.

    .. math::

        \phi_j = \sum_{S \subseteq D \setminus \{j\}} \frac{|S|!\,(d - |S| - 1)!}{d!}
        \big(v(S \cup \{j\}) - v(S)\big)

    summed over the trees of each output ``k = tree_class[t]``.
    """
    n, d = X.shape
    out = np.zeros((n, n_outputs, d))
    weight = [math.factorial(s) * math.factorial(d - s - 1) / math.factorial(d) for s in range(d)]
    for t in range(trees.tree_start.shape[0] - 1):
        root, k = int(trees.tree_start[t]), int(tree_class[t])
        for i in range(n):
            for j in range(d):
                others = [f for f in range(d) if f != j]
                for size in range(d):
                    for subset in combinations(others, size):
                        known = frozenset(subset)
                        gain = _expected_value(trees, X[i], root, known | {j})
                        gain -= _expected_value(trees, X[i], root, known)
                        out[i, k, j] += weight[size] * gain
    return out
