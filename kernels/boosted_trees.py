r"""``boosted_tree_leaves``, ``boosted_tree_shap``: XGBoost's and LightGBM's binary trees, walked by gpucal.

The node arrays (layout and rules in ``gpucal.kernels.boosted_trees_oracle``) are checked on every call by
:func:`check_boosted_trees`, a pass over the nodes, not the rows: whatever the arrays hold, a walk stays
inside them and ends, and tree SHAP divides by no zero cover. ``gpucal.ccl.tree_tables`` runs the same
check when a model file is loaded, so no table from a file reaches a kernel unchecked.

Rows are float64 feature values, one column per feature the nodes index. The kernels are the numba
CPU twin and the oracle only, no CUDA kernel yet: CCL embeds its rows on the host, as it clusters them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gpucal.kernels.boosted_trees_cpu import leaves_cpu, shap_values_cpu
from gpucal.kernels.boosted_trees_oracle import (
    DECISIONS,
    MISSING_TYPES,
    SplitTrees,
    leaves_oracle,
    shap_values_oracle,
)

# Deepest tree accepted: tree SHAP keeps (D + 1)(D + 2) / 2 path entries per walk (33 153 for 256, about
# 1 MB); both libraries' defaults grow trees of depth 6 (XGBoost) or about 30 at most (LightGBM).
MAX_TREE_DEPTH = 256
_DTYPES = {
    "node_feature": np.int32,
    "node_threshold": np.float64,
    "node_decision": np.int8,
    "node_missing": np.int8,
    "node_default_left": np.int8,
    "node_left": np.int32,
    "node_right": np.int32,
    "node_cat_start": np.int64,
    "cat_values": np.int64,
    "node_value": np.float64,
    "node_cover": np.float64,
    "node_leaf_id": np.int32,
    "tree_start": np.int64,
}


def _fail(field: str, problem: str) -> None:
    msg = f"split trees {field}: {problem}"
    raise ValueError(msg)


def _as_dtype(name: str, value: Any) -> np.ndarray:
    arr = np.asarray(value)
    dtype = np.dtype(_DTYPES[name])
    if arr.ndim != 1:
        _fail(name, f"expected a 1-D array, got shape {arr.shape}")
    if dtype.kind == "i":
        if arr.size and arr.dtype.kind not in "iu":
            _fail(name, f"expected integers, got dtype {arr.dtype}")
        info = np.iinfo(dtype.type)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            _fail(name, f"values outside {dtype.name}")
    elif arr.size and not np.isfinite(arr.astype(np.float64)).all():
        _fail(name, "expected finite numbers")
    return np.ascontiguousarray(arr, dtype=dtype)


def check_boosted_trees(n_features: int, arrays: Mapping[str, Any]) -> tuple[SplitTrees, int]:
    """Return the checked node arrays in the kernels' dtypes and the deepest tree's depth.

    Raises ``ValueError`` naming the field unless: every field has its length (``n_nodes``, or
    ``n_nodes + 1`` for ``node_cat_start``); ``tree_start`` rises from 0 to ``n_nodes``, each tree
    holding a node; features lie in ``[-1, n_features)``; decisions, missing types and default sides
    are known codes; a split's two children differ, lie after it in its own tree, and every node but
    a root is the child of exactly one split (so each tree is a tree, reached once from its root); a
    leaf has no children and a leaf id in ``[0, nodes in its tree)``, a split the id ``-1``;
    thresholds, values and covers are finite, covers ``>= 0`` and ``> 0`` at splits; each node's
    categories are sorted, distinct, ``>= 0``; no tree is deeper than ``MAX_TREE_DEPTH``.
    """
    if set(arrays) != set(_DTYPES):
        _fail("fields", f"expected {sorted(_DTYPES)}, got {sorted(arrays)}")
    checked = {name: _as_dtype(name, arrays[name]) for name in _DTYPES}
    trees = SplitTrees(**checked)
    n_nodes = trees.node_feature.shape[0]
    for name in _DTYPES:
        expected = {"node_cat_start": n_nodes + 1, "cat_values": None, "tree_start": None}.get(name, n_nodes)
        if expected is not None and checked[name].shape[0] != expected:
            _fail(name, f"expected {expected} entries")
    ts = trees.tree_start
    if ts.shape[0] < 2 or ts[0] != 0 or ts[-1] != n_nodes or (np.diff(ts) < 1).any():
        _fail("tree_start", f"expected increasing ids from 0 to {n_nodes}, at least one tree")
    feature = trees.node_feature
    if (feature < -1).any() or (feature >= n_features).any():
        _fail("node_feature", f"features must lie in [-1, {n_features})")
    if (
        not np.isin(trees.node_decision, DECISIONS).all()
        or not np.isin(trees.node_missing, MISSING_TYPES).all()
    ):
        _fail("node_decision", f"decisions must be in {DECISIONS} and missing types in {MISSING_TYPES}")
    if not np.isin(trees.node_default_left, (0, 1)).all():
        _fail("node_default_left", "expected 0 or 1")
    tree_of = np.repeat(np.arange(ts.shape[0] - 1), np.diff(ts))
    tree_end = ts[1:][tree_of]
    split = feature >= 0
    ids = np.arange(n_nodes)
    left, right = trees.node_left.astype(np.int64), trees.node_right.astype(np.int64)
    if ((left != -1) | (right != -1))[~split].any():
        _fail("node_left", "a leaf has a child")
    for name, kids in (("node_left", left), ("node_right", right)):
        if ((kids <= ids) | (kids >= tree_end))[split].any():
            _fail(name, "a split's child lies outside its tree or not after the split")
    parents = np.bincount(np.concatenate([left[split], right[split]]), minlength=n_nodes)
    if (parents != np.where(np.isin(ids, ts[:-1]), 0, 1)).any():
        _fail("node_left", "every node but a root must be the child of exactly one split")
    leaf_id = trees.node_leaf_id
    if (leaf_id[split] != -1).any() or (leaf_id[~split] < 0).any():
        _fail("node_leaf_id", "leaves need ids >= 0, splits -1")
    cover = trees.node_cover
    if (cover < 0).any() or (cover[split] <= 0).any():
        _fail("node_cover", "covers must be >= 0, and > 0 at a split")
    cat_start, cats = trees.node_cat_start, trees.cat_values
    if cat_start[0] != 0 or cat_start[-1] != cats.shape[0] or (np.diff(cat_start) < 0).any():
        _fail("node_cat_start", f"expected non-decreasing offsets from 0 to {cats.shape[0]}")
    inside = np.ones(cats.shape[0], dtype=bool)  # entries that follow another of the same node
    inside[cat_start[:-1][cat_start[:-1] < cats.shape[0]]] = False
    if (cats < 0).any() or (np.diff(cats) <= 0)[inside[1:]].any():
        _fail("cat_values", "each node's categories must be distinct non-negative integers, sorted")
    max_depth = int(_node_depths(left, right, split).max(initial=0))
    if max_depth > MAX_TREE_DEPTH:
        _fail("depth", f"a tree is {max_depth} deep; at most {MAX_TREE_DEPTH} is supported")
    return trees, max_depth


def _node_depths(left: np.ndarray, right: np.ndarray, split: np.ndarray) -> np.ndarray:
    r"""Each node's depth below its root, by pointer jumping: about :math:`\log_2 D` numpy passes.

    ``depth[i]`` counts the steps to ``ancestor[i]``; each pass adds the ancestor's count and jumps to
    its ancestor. Needs checked children (after their parent, one parent each), so every chain ends.
    """
    parent = np.full(left.shape[0], -1, dtype=np.int64)
    ids = np.flatnonzero(split)
    parent[left[split]] = ids
    parent[right[split]] = ids
    depth = (parent >= 0).astype(np.int64)
    ancestor = parent
    while (ancestor >= 0).any():
        jump = ancestor >= 0
        depth[jump] += depth[ancestor[jump]]
        ancestor = np.where(jump, ancestor[np.maximum(ancestor, 0)], -1)
    return depth


def _check_rows(X: Any, n_features: int) -> np.ndarray:
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != n_features:
        msg = f"X must have shape (n, {n_features}). Got {X.shape} instead."
        raise ValueError(msg)
    return X


def _check_backend(backend: str) -> None:
    if backend not in ("oracle", "cpu"):
        msg = f"The 'backend' parameter must be one of ('oracle', 'cpu'). Got {backend!r} instead."
        raise ValueError(msg)


def boosted_tree_leaves(
    X: Any, n_features: int, arrays: Mapping[str, Any], *, backend: str = "cpu"
) -> np.ndarray:
    r"""Return the library's id of the leaf every row reaches in every tree.

    Each row walks from its tree's root, at split :math:`m` to ``node_left[m]`` when
    ``goes_left(x[node_feature[m]])`` (the rules of ``gpucal.kernels.boosted_trees_oracle``), else to
    ``node_right[m]``, until a leaf :math:`\ell`, and returns ``node_leaf_id[l]``.

    Parameters
    ----------
    X : float array of shape (n, n_features)
        Feature values (NaN for missing); read as float64.
    n_features : int
        The number of features the trees may index.
    arrays : mapping of str to array
        The node arrays (``gpucal.kernels.boosted_trees_oracle.SplitTrees``' fields), checked by
        :func:`check_boosted_trees`.
    backend : {'cpu', 'oracle'}, default='cpu'
        The numba CPU twin, or the pure-Python oracle (for tests).

    Returns
    -------
    numpy.ndarray of int32, shape (n, n_trees)
    """
    _check_backend(backend)
    trees, _ = check_boosted_trees(n_features, arrays)
    X = _check_rows(X, n_features)
    if backend == "oracle":
        return leaves_oracle(X, trees)
    out = np.empty((X.shape[0], trees.tree_start.shape[0] - 1), dtype=np.int32)
    t = trees
    return leaves_cpu(
        X, t.node_feature, t.node_threshold, t.node_decision, t.node_missing, t.node_default_left,
        t.node_left, t.node_right, t.node_cat_start, t.cat_values, t.node_leaf_id, t.tree_start, out,
    )  # fmt: skip


def boosted_tree_shap(
    X: Any,
    n_features: int,
    arrays: Mapping[str, Any],
    tree_class: Any,
    n_outputs: int,
    *,
    backend: str = "cpu",
) -> np.ndarray:
    r"""Return exact tree SHAP values: per row, output and feature, the Shapley value of the feature.

    .. math::

        \phi_{k j}(x) = \sum_{t:\ c_t = k} \sum_{S \subseteq D \setminus \{j\}}
        \frac{|S|!\,(d - |S| - 1)!}{d!} \big(E[f_t(x) \mid x_{S \cup \{j\}}] - E[f_t(x) \mid x_S]\big)

    with :math:`c_t` = ``tree_class[t]`` and the expectations over the training mass below each split
    (``node_cover``); the 'cpu' backend computes it in polynomial time (Lundberg, Erion and Lee 2018,
    Algorithm 2: what LightGBM's ``pred_contrib`` and XGBoost's ``pred_contribs`` compute, the bias
    column left out).

    Parameters
    ----------
    X : float array of shape (n, n_features)
        Feature values (NaN for missing).
    n_features : int
        The number of features.
    arrays : mapping of str to array
        The node arrays, as in :func:`boosted_tree_leaves`.
    tree_class : int array of shape (n_trees,)
        The output each tree adds to, in ``[0, n_outputs)``.
    n_outputs : int
        Outputs (classes of a multi-class model, else 1).
    backend : {'cpu', 'oracle'}, default='cpu'
        The numba CPU twin, or the exponential-time definition (for tests on a few features).

    Returns
    -------
    numpy.ndarray of float64, shape (n, n_outputs, n_features)
    """
    _check_backend(backend)
    trees, max_depth = check_boosted_trees(n_features, arrays)
    X = _check_rows(X, n_features)
    classes = np.ascontiguousarray(tree_class, dtype=np.int64)
    n_trees = trees.tree_start.shape[0] - 1
    if classes.shape != (n_trees,) or (classes < 0).any() or (classes >= n_outputs).any():
        msg = f"tree_class must hold {n_trees} outputs in [0, {n_outputs})."
        raise ValueError(msg)
    if backend == "oracle":
        return shap_values_oracle(X, trees, classes, n_outputs)
    out = np.zeros((X.shape[0], n_outputs, n_features), dtype=np.float64)
    t = trees
    return shap_values_cpu(
        X, t.node_feature, t.node_threshold, t.node_decision, t.node_missing, t.node_default_left,
        t.node_left, t.node_right, t.node_cat_start, t.cat_values, t.node_value, t.node_cover,
        t.tree_start, classes, max_depth, out,
    )  # fmt: skip
