r"""A map on every node of a grown tree, fitted top-down on the calibration rows beneath the node.

Heterogeneous calibration fits one calibration map per part (Durfee et al. 2022, Algorithm 1, lines
2-5). The parts are the leaves, but a row whose value of a split feature no tree row of that node had
stops at the split node (``gpucal.trees.ensemble``), so every node needs a map: node :math:`m`'s
map is fitted on all calibration rows whose walk passes through :math:`m`.

Levels are fitted from the root down, one grouped Newton fit of all the level's nodes per level
(:func:`~gpucal.trees.local_maps.fit_local_maps_from_sums` of the level's ``local_map_sums`` added
over the row blocks; "scale" in closed form from the level's group sums). The root gets the plain
global fit; a deeper node starts from its parent's map and, with ``penalty`` :math:`\lambda > 0`, is
pulled toward it,

.. math::

    \hat\theta_m = \arg\min_\theta \sum_{i \in m} w_i\, \ell\big(y_i, g_\theta(s_i)\big)
        + \tfrac{\lambda}{2} \lVert \theta - \hat\theta_{\mathrm{parent}(m)} \rVert^2,

so a node with few calibration rows (or a separable one) keeps close to its parent instead of running
off; a node with no calibration row keeps its parent's map.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpucal._backend import array_namespace
from gpucal.kernels import tree_leaves
from gpucal.rows import Rows
from gpucal.trees.grow import TreeNodes
from gpucal.trees.local_maps import (
    apply_local_maps,
    fit_local_maps_from_sums,
    fit_scale_maps_from_sums,
    flatten_map_sums,
    local_map_sums,
    map_design,
    part_sums,
    start_params,
    unflatten_map_sums,
)

# The kinds of local map a TreeEnsemble node can carry as (a, b): the kernels' "platt" map
# sigmoid(a logit f + b) (or "scale": min(a f, 1)). Beta has three parameters and no such form.
ENSEMBLE_KINDS = ("constant", "scale", "shift", "temperature", "platt")


def tree_parents(nodes: TreeNodes) -> np.ndarray:
    """Return each node's parent id (tree-local), -1 for the root."""
    parent = np.full(len(nodes.feature), -1, dtype=np.int64)
    for m, table in zip([m for m, j in enumerate(nodes.feature) if j >= 0], nodes.child_table, strict=True):
        children = table[table >= 0]
        parent[children] = m
    return parent


def node_ancestors(leaf: Any, depth: np.ndarray, parent: np.ndarray) -> list[Any]:
    """Return, per depth ``d``, each row's node at depth ``d`` (-1 when the row stopped above it).

    ``leaf`` is the tree-local node each row ends in (numpy or cupy).
    """
    xp = array_namespace(leaf)
    d_node, p_node = xp.asarray(depth), xp.asarray(parent)
    current = leaf.astype(xp.int64)
    levels: list[Any] = []
    for d in range(int(depth.max(initial=0)), -1, -1):
        at_d = d_node[current] == d
        levels.append(xp.where(at_d, current, -1))
        current = xp.where(at_d & (p_node[current] >= 0), p_node[current], current)
    return levels[::-1]


@dataclass(frozen=True)
class _LevelRows:
    """A block's map rows with their node at every depth (``node_ancestors``) and the map's design."""

    f: Any
    y: Any
    w: Any
    levels: list[Any]
    design_offset: tuple[Any, Any] | None


def tree_leaves_of(nodes: TreeNodes, codes: Any, backend: str) -> Any:
    """Return the tree-local node each row (tree codes ``codes``) stops at in one grown tree."""
    feature, base, table = nodes.routing_arrays()
    start = np.array([0, len(nodes.feature)], dtype=np.int64)
    return tree_leaves(codes, feature, base, table, start, backend=backend)[:, 0]


def through_tree(block: Any, nodes: TreeNodes, params: np.ndarray, kind: str, backend: str) -> Any:
    """The block (``codes, f``) with ``f`` through the maps of the nodes of one tree its rows stop at."""
    leaf = tree_leaves_of(nodes, block.codes, backend)
    return replace(block, f=apply_local_maps(block.f, leaf, params, kind))


def _level_rows(
    block: Any, nodes: TreeNodes, depth: np.ndarray, parent: np.ndarray, kind: str, backend: str
) -> _LevelRows:
    leaf = tree_leaves_of(nodes, block.codes, backend)
    design = None if kind == "scale" else map_design(block.f, kind)
    return _LevelRows(block.f, block.y, block.w, node_ancestors(leaf, depth, parent), design)


def _label_sums(block: _LevelRows) -> np.ndarray:
    """``[sum w, sum w y]`` of a block (``[n, sum y]`` unweighted)."""
    if block.w is None:
        return np.array([float(block.y.shape[0]), float(block.y.sum())])
    return np.array([float(block.w.sum()), float((block.w * block.y).sum())])


def _scale_sums(block: _LevelRows, d: int, n_parts: int, backend: str) -> np.ndarray:
    """The seven group sums per node at depth ``d`` (what the closed-form "scale" fit reads)."""
    return part_sums(block.f, block.y, block.w, block.levels[d], n_parts, backend)


def _map_sums(block: _LevelRows, d: int, theta: np.ndarray, kind: str, backend: str) -> np.ndarray:
    """``local_map_sums`` of a block grouped by the rows' nodes at depth ``d``, flattened."""
    sums = local_map_sums(
        block.f,
        block.y,
        block.w,
        block.levels[d],
        theta,
        kind,
        backend=backend,
        design_offset=block.design_offset,
    )
    return flatten_map_sums(*sums)


def fit_node_maps(rows: Rows, nodes: TreeNodes, kind: str, penalty: float, backend: str) -> np.ndarray:
    """Return ``(n_nodes, n_params)``: each node's map of ``kind``, fitted top-down (module docstring).

    Parameters
    ----------
    rows : Rows
        The calibration rows: blocks with tree ``codes``, input probabilities ``f``, labels ``y`` and
        weights ``w`` (None: unit).
    nodes : TreeNodes
        One grown tree (tree-local ids).
    kind : str
        A ``gpucal.trees.local_maps`` kind.
    penalty : float
        Ridge pulling a node's map toward its parent's (the root has none).
    backend : str
        Kernel backend of the sums.
    """
    depth = np.asarray(nodes.depth, dtype=np.int64)
    levels = rows.map(_level_rows, nodes, depth, tree_parents(nodes), kind, backend)

    def fit_level(d: int, n_parts: int, prior: np.ndarray | None, level_penalty: float) -> np.ndarray:
        start = prior
        if start is None:  # the root: the default start, which reads the label mean only
            weight, label = levels.sum(_label_sums) if kind == "constant" else (1.0, 0.0)
            mean = np.array([float(label) / float(weight)])
            start = start_params(mean, mean, None, n_parts, kind)
        if kind == "scale":
            stats = levels.sum(_scale_sums, d, n_parts, backend)
            return fit_scale_maps_from_sums(stats, start, penalty=level_penalty)

        def sums(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return unflatten_map_sums(levels.sum(_map_sums, d, theta, kind, backend), *theta.shape)

        return fit_local_maps_from_sums(sums, start, kind, penalty=level_penalty)

    return fit_node_maps_on(nodes, fit_level, penalty)


# fit_level(d, n_parts, prior, penalty): the maps of the rows' nodes at depth ``d`` (parts are tree-local
# node ids, -1 for a row that stopped above ``d``), as ``fit_local_maps`` with that prior and penalty.
LevelFit = Callable[[int, int, "np.ndarray | None", float], np.ndarray]


def fit_node_maps_on(nodes: TreeNodes, fit_level: LevelFit, penalty: float) -> np.ndarray:
    """Return ``(n_nodes, n_params)``: the top-down loop of :func:`fit_node_maps`.

    ``fit_level`` fits one depth's maps (:func:`fit_node_maps`: from sums over the rows): the root is
    one part with the default start and no ridge; depth ``d`` starts from and is pulled toward each
    node's parent map.
    """
    depth = np.asarray(nodes.depth, dtype=np.int64)
    parent = tree_parents(nodes)
    n_nodes = depth.shape[0]
    if n_nodes == 0:
        msg = "fit_node_maps: the tree has no node"
        raise ValueError(msg)
    params = np.repeat(fit_level(0, 1, None, 0.0), n_nodes, axis=0)
    for d in range(1, int(depth.max()) + 1):
        fitted = fit_level(d, n_nodes, params[np.maximum(parent, 0)], penalty)
        level = depth == d
        params[level] = fitted[level]
    return params


def ensemble_values(params: np.ndarray, kind: str) -> np.ndarray:
    """Return the ``(a, b)`` a TreeEnsemble node carries for maps of ``kind`` (``ENSEMBLE_KINDS``).

    ``constant`` :math:`c` is :math:`(0, c)`, ``shift`` :math:`d` is :math:`(1, d)`, ``temperature``
    :math:`a` is :math:`(a, 0)`, ``scale`` :math:`k` is :math:`(k, 0)` (the ensemble's scale map).
    """
    if kind not in ENSEMBLE_KINDS:
        msg = f"kind: {kind!r} maps have no (a, b) form; expected one of {ENSEMBLE_KINDS}"
        raise ValueError(msg)
    if kind == "platt":
        return params[:, :2].copy()
    zeros, ones, first = np.zeros(params.shape[0]), np.ones(params.shape[0]), params[:, 0]
    a, b = {"constant": (zeros, first), "shift": (ones, first)}.get(kind, (first, zeros))
    return np.stack([a, b], axis=1)


def apply_chain(score: Any, leaves: Any, params: np.ndarray, kind: str) -> Any:
    """Return the nested composition: tree ``t``'s node maps applied to the output of trees ``< t``."""
    out = score
    for t in range(leaves.shape[1]):
        out = apply_local_maps(out, leaves[:, t], params, kind)
    return out


def apply_average(score: Any, leaves: Any, params: np.ndarray, kind: str) -> Any:
    """Return the mean over trees of each tree's calibrated probability (the forest)."""
    xp = array_namespace(score)
    total = xp.zeros_like(score)
    for t in range(leaves.shape[1]):
        total += apply_local_maps(score, leaves[:, t], params, kind)
    return total / leaves.shape[1]
