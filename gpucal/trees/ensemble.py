"""The fitted MBCT model as plain arrays: a chain of multi-way trees over integer feature codes.

Node ids are global over the chain: tree ``t`` holds ids ``[tree_start[t], tree_start[t + 1])`` and its
root is ``tree_start[t]``. A split node ``m`` on feature ``j`` sends a row with code ``v`` to
``child_table[node_child_base[m] + v]``; ``-1`` there means no training row of ``m`` had ``v``, and
such a row stops at ``m`` and takes ``m``'s own map (every node, internal or leaf, carries one).

Maps, with :math:`l = \\operatorname{logit}(\\operatorname{clip}(f, \\epsilon, 1 - \\epsilon))`:

- ``"scale"`` (the paper's :math:`k_b f`, Huang et al. 2022, Sec. 4.1): :math:`f' = \\min(a f, 1)`;
- ``"shift"``: :math:`l' = l + b` (``a = 1``);
- ``"platt"``: :math:`l' = a l + b`.

Trees chain: tree ``t`` maps the output of trees ``1..t-1``.

The trees read *tree codes*: ``code_maps[j]`` sends feature ``j``'s input code (the encoder's code, or
the score bin) to its tree code. Input codes too light to ever hold a child of their own share one
"rare" tree code (``rare_codes[j]``, -1 when there is none), so a high-cardinality feature costs the
histogram only the values that can matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal.kernels import check_tree_structure, lookup_codes, predict_trees, tree_leaves
from gpucal.kernels.trees_oracle import LOGIT_HIGH, LOGIT_LOW
from gpucal.persistence import plain_numbers

if TYPE_CHECKING:
    from gpucal.trees.grow import TreeNodes

LEAF_MAPS = ("scale", "shift", "platt")
LEAF_SCALE, LEAF_SHIFT, LEAF_PLATT = range(3)
#: A loaded chain of logit maps must keep every row's logit below this (far from float overflow).
MAX_CHAIN_LOGIT = 1e300


@dataclass(frozen=True)
class TreeEnsemble:
    """A fitted chain of calibration trees (see the module docstring for the layout).

    Attributes
    ----------
    leaf_map : {"scale", "shift", "platt"}
        The map every node applies.
    feature_names : list of str
        Split features, in code-column order (the score bin last).
    n_values : int64 array of shape (d,)
        Codes per feature.
    node_feature : int32 array of shape (n_nodes,)
        Split feature of each node, -1 for a leaf.
    node_child_base : int64 array of shape (n_nodes,)
        Offset of a split node's children in ``child_table``, -1 for a leaf.
    child_table : int32 array
        Child node id per (split node, code), -1 where the node saw no row with that code.
    node_value : float64 array of shape (n_nodes, 2)
        The ``(a, b)`` of each node's map.
    node_weight : float64 array of shape (n_nodes,)
        Sum of training weights in each node.
    node_depth : int32 array of shape (n_nodes,)
        Depth of each node (roots are 0).
    tree_start : int64 array of shape (n_trees + 1,)
        First node id of each tree, then ``n_nodes``.
    code_maps : list of int32 arrays
        Per feature, the tree code of each input code.
    rare_codes : int64 array of shape (d,)
        Per feature, the tree code shared by the rare input codes, or -1.
    """

    leaf_map: str
    feature_names: list[str]
    n_values: np.ndarray
    node_feature: np.ndarray
    node_child_base: np.ndarray
    child_table: np.ndarray
    node_value: np.ndarray
    node_weight: np.ndarray
    node_depth: np.ndarray
    tree_start: np.ndarray
    code_maps: list[np.ndarray]
    rare_codes: np.ndarray

    @property
    def leaf_map_code(self) -> int:
        """``LEAF_SCALE``, ``LEAF_SHIFT`` or ``LEAF_PLATT``: the kernels' integer for ``leaf_map``."""
        return LEAF_MAPS.index(self.leaf_map)

    @property
    def n_trees(self) -> int:
        """Number of trees in the chain."""
        return len(self.tree_start) - 1

    @property
    def n_nodes(self) -> int:
        """Number of nodes over all trees."""
        return len(self.node_feature)

    def tree_nodes(self, tree: int) -> range:
        """Return the node ids of tree ``tree``."""
        return range(int(self.tree_start[tree]), int(self.tree_start[tree + 1]))

    def children(self, node: int) -> dict[int, list[int]]:
        """Return ``{child id: [codes routed to it]}`` of a split node (empty for a leaf)."""
        j = int(self.node_feature[node])
        if j < 0:
            return {}
        base = int(self.node_child_base[node])
        table = self.child_table[base : base + int(self.n_values[j])]
        out: dict[int, list[int]] = {}
        for code, child in enumerate(table.tolist()):
            if child >= 0:
                out.setdefault(child, []).append(code)
        return out

    def leaves(self, codes: Any) -> Any:
        """Return the node each row of tree codes ``codes`` stops at, per tree: int32 array of shape
        (n, n_trees) of global node ids (``gpucal.kernels.tree_leaves``)."""
        return tree_leaves(codes, self.node_feature, self.node_child_base, self.child_table, self.tree_start)

    def kernel_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Return the node arrays in ``gpucal.kernels.predict_trees`` order (feature, base, table, value,
        start)."""
        return (self.node_feature, self.node_child_base, self.child_table, self.node_value, self.tree_start)

    # ----------------------------------------------------------------------------------------------
    # Plain data

    def to_dict(self) -> dict[str, Any]:
        """Return the ensemble as JSON-ready lists."""
        return {
            "leaf_map": self.leaf_map,
            "feature_names": list(self.feature_names),
            "n_values": self.n_values.tolist(),
            "node_feature": self.node_feature.tolist(),
            "node_child_base": self.node_child_base.tolist(),
            "child_table": self.child_table.tolist(),
            "node_value": self.node_value.tolist(),
            "node_weight": self.node_weight.tolist(),
            "node_depth": self.node_depth.tolist(),
            "tree_start": self.tree_start.tolist(),
            "code_maps": [m.tolist() for m in self.code_maps],
            "rare_codes": self.rare_codes.tolist(),
        }

    @classmethod
    def from_dict(cls, data: Any) -> TreeEnsemble:
        """Build an ensemble from :meth:`to_dict` output, checking every index.

        Raises ``ValueError`` naming the field at fault.
        """
        if not isinstance(data, dict):
            msg = f"ensemble: expected an object, got {type(data).__name__}"
            raise ValueError(msg)
        expected = {
            "leaf_map",
            "feature_names",
            "n_values",
            "node_feature",
            "node_child_base",
            "child_table",
            "node_value",
            "node_weight",
            "node_depth",
            "tree_start",
            "code_maps",
            "rare_codes",
        }
        if set(data) != expected:
            msg = f"ensemble: fields {sorted(data)} differ from {sorted(expected)}"
            raise ValueError(msg)
        if data["leaf_map"] not in LEAF_MAPS:
            msg = f"ensemble.leaf_map: {data['leaf_map']!r} is not one of {LEAF_MAPS}"
            raise ValueError(msg)
        names = data["feature_names"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            msg = "ensemble.feature_names: expected a list of strings"
            raise ValueError(msg)
        ensemble = cls(
            leaf_map=data["leaf_map"],
            feature_names=names,
            n_values=_int_array(data, "n_values", np.int64),
            node_feature=_int_array(data, "node_feature", np.int32),
            node_child_base=_int_array(data, "node_child_base", np.int64),
            child_table=_int_array(data, "child_table", np.int32),
            node_value=_float_array(data, "node_value", 2),
            node_weight=_float_array(data, "node_weight", 1),
            node_depth=_int_array(data, "node_depth", np.int32),
            tree_start=_int_array(data, "tree_start", np.int64),
            code_maps=_code_maps(data),
            rare_codes=_int_array(data, "rare_codes", np.int64),
        )
        ensemble.check()
        return ensemble

    def check(self) -> None:
        """Raise ``ValueError`` unless every index points where the kernels may read."""
        n_nodes, d = self.n_nodes, len(self.feature_names)
        if self.n_values.shape != (d,) or (d and self.n_values.min() < 1):
            _fail("n_values", f"expected {d} positive counts")
        for name in ("node_child_base", "node_weight", "node_depth"):
            if getattr(self, name).shape[0] != n_nodes:
                _fail(name, f"expected {n_nodes} entries")
        if self.node_value.shape != (n_nodes, 2) or not np.isfinite(self.node_value).all():
            _fail("node_value", f"expected ({n_nodes}, 2) finite numbers")
        self._check_map_range()
        if len(self.code_maps) != d or self.rare_codes.shape != (d,):
            _fail("code_maps", f"expected one map and one rare code per feature ({d})")
        for j, (cmap, k) in enumerate(zip(self.code_maps, self.n_values.tolist(), strict=True)):
            if cmap.ndim != 1 or (cmap.size and (cmap.min() < 0 or cmap.max() >= k)):
                _fail("code_maps", f"feature {j}'s tree codes must lie in [0, {k})")
            if not -1 <= self.rare_codes[j] < k:
                _fail("rare_codes", f"feature {j}'s rare code must lie in [-1, {k})")
        ts = self.tree_start
        if ts.shape[0] < 1 or ts[0] != 0 or ts[-1] != n_nodes or (np.diff(ts) < 1).any():
            _fail("tree_start", f"expected increasing ids from 0 to {n_nodes}, one root per tree")
        split = self.node_feature >= 0
        if (self.node_feature >= d).any() or (self.node_feature < -1).any():
            _fail("node_feature", f"features must lie in [-1, {d})")
        base = self.node_child_base[split]
        width = self.n_values[self.node_feature[split]]
        n_table = self.child_table.shape[0]
        # Compared without adding: a file's n_values near 2**63 would wrap base + width below the end.
        if (base < 0).any() or (width > n_table).any() or (base > n_table - width).any():
            _fail("node_child_base", "a split node's children lie outside child_table")
        # The walks' own check: every child id in [-1, n_nodes), after its parent and in its tree, a
        # split node's children read up to the next one's base (past its own width: a leaf made of a
        # split node left children there that loaded, then failed at predict).
        check_tree_structure(d, self.node_feature, self.node_child_base, self.child_table, self.tree_start)

    def _check_map_range(self) -> None:
        """Raise unless every row's chain of maps stays a probability (scale) or a finite logit.

        A scale map :math:`\\min(a x, 1)` keeps :math:`x \\in [0, 1]` when :math:`a \\ge 0`. A logit
        map :math:`a x + b` takes :math:`|x| \\le B` to :math:`|x| \\le \\max|a| B + \\max|b|` (over the
        tree's nodes), from the clipped start :math:`B_0`; a chain whose bound overflows could reach
        an infinite logit, and then ``0 * inf`` (NaN) in the next tree. Fitted maps stay far inside.
        """
        a, b = self.node_value[:, 0], self.node_value[:, 1]
        if self.leaf_map == "scale":
            if (a < 0).any():
                _fail("node_value", "a scale map's factor is negative (it would predict below 0)")
            return
        bound = max(-LOGIT_LOW, LOGIT_HIGH)
        with np.errstate(over="ignore"):
            for start, stop in zip(self.tree_start[:-1].tolist(), self.tree_start[1:].tolist(), strict=True):
                bound = float(np.abs(a[start:stop]).max()) * bound + float(np.abs(b[start:stop]).max())
        if not bound < MAX_CHAIN_LOGIT:
            _fail("node_value", "the maps' slopes and shifts could take a row's logit past any float")


def tree_code_dtype(n_values: np.ndarray) -> np.dtype:
    """Return the smallest of int8, int16, int32 that holds every tree code (the kernels read all three)."""
    largest = int(np.max(n_values, initial=1)) - 1
    for dtype in (np.int8, np.int16):
        if largest <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int32)


def _fail(field: str, problem: str) -> None:
    msg = f"ensemble.{field}: {problem}"
    raise ValueError(msg)


def _int_array(data: dict[str, Any], name: str, dtype: Any) -> np.ndarray:
    value = data[name]
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        _fail(name, "expected a list of integers")
    arr = np.asarray(value, dtype=np.int64)
    info = np.iinfo(dtype)
    if arr.size and (arr.min() < info.min or arr.max() > info.max):
        _fail(name, f"values outside {np.dtype(dtype).name}")
    return arr.astype(dtype)


def _code_maps(data: dict[str, Any]) -> list[np.ndarray]:
    maps = data["code_maps"]
    if not isinstance(maps, list):
        _fail("code_maps", "expected a list of lists")
    return [_int_array({"code_maps": m}, "code_maps", np.int32) for m in maps]


def _float_array(data: dict[str, Any], name: str, ndim: int) -> np.ndarray:
    if not plain_numbers(data[name], ndim):
        _fail(name, f"expected a {ndim}-D list of numbers")
    try:
        arr = np.asarray(data[name], dtype=np.float64)
    except (TypeError, ValueError):
        _fail(name, "expected numbers")
    if arr.ndim != ndim and not (arr.size == 0 and ndim == 2):
        _fail(name, f"expected a {ndim}-D array")
    if arr.size == 0 and ndim == 2:
        arr = arr.reshape(0, 2)
    if not np.isfinite(arr).all():
        _fail(name, "non-finite numbers")
    return arr


def tree_code_maps(
    codes: Any, w: Any, n_values: np.ndarray, min_child_size: float
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Return, per feature, the input-to-tree code map, the rare tree code (-1: none) and the code count.

    A code whose total weight is below ``min_child_size`` can never hold a child of its own in any node,
    so all such codes share one "rare" tree code, which the growth always pools (an unseen category,
    with no weight, is rare too). This is exact, and it bounds a feature's histogram width by
    ``sum(w) / min_child_size`` however many values it has.
    """
    return code_maps_from_weights(code_weights(codes, w, n_values), n_values, min_child_size)


def code_weights(codes: Any, w: Any, n_values: np.ndarray) -> np.ndarray:
    """Return the weight of every input code, all features concatenated (feature ``j``'s ``n_values[j]``
    codes after those of the features before it): a weighted bincount per feature, so a sum over rows."""
    xp = array_namespace(codes)
    weights = []
    for j, k in enumerate(n_values.tolist()):
        col = codes[:, j].astype(xp.int64)
        weights.append(
            to_numpy(xp.bincount(col, minlength=k) if w is None else xp.bincount(col, weights=w, minlength=k))
        )
    return np.concatenate(weights).astype(np.float64) if weights else np.zeros(0)


def code_maps_from_weights(
    weights: np.ndarray, n_values: np.ndarray, min_child_size: float
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """:func:`tree_code_maps` from :func:`code_weights` (over all rows)."""
    maps, rare_codes, counts = [], [], []
    ends = np.cumsum(n_values)
    for j, k in enumerate(n_values.tolist()):
        weight = weights[ends[j] - k : ends[j]]
        keep = weight >= min_child_size if min_child_size > 0 else weight > 0
        n_keep = int(keep.sum())
        cmap = np.full(k, n_keep, dtype=np.int32)
        cmap[keep] = np.arange(n_keep, dtype=np.int32)
        has_rare = n_keep < k
        maps.append(cmap)
        rare_codes.append(n_keep if has_rare else -1)
        counts.append(n_keep + int(has_rare))
    return maps, np.asarray(rare_codes, dtype=np.int64), np.asarray(counts, dtype=np.int64)


def map_codes(codes: Any, maps: list[np.ndarray], n_values: np.ndarray) -> Any:
    """Return input codes translated to tree codes by the per-feature ``maps``."""
    xp = array_namespace(codes)
    out = xp.empty(codes.shape, dtype=tree_code_dtype(n_values))
    for j, cmap in enumerate(maps):
        lookup_codes(codes[:, j], 0, cmap, -1, out, j)
    return out


def join_trees(
    trees: list[TreeNodes],
    leaf_map: str,
    names: list[str],
    n_values: np.ndarray,
    code_maps: list[np.ndarray],
    rare_codes: np.ndarray,
) -> TreeEnsemble:
    """Concatenate trees (tree-local ids) into one ensemble with global node ids."""
    features, bases, tables, values, weights, depths, starts = [], [], [], [], [], [], [0]
    node_offset = table_offset = 0
    for nodes in trees:
        feature, base, table = nodes.routing_arrays()
        features.append(feature)
        bases.append(np.where(base >= 0, base + table_offset, -1))
        tables.append(np.where(table >= 0, table + node_offset, -1))
        values.append(nodes.values)
        weights.append(np.asarray(nodes.weight))
        depths.append(np.asarray(nodes.depth))
        node_offset += feature.shape[0]
        table_offset += table.shape[0]
        starts.append(node_offset)

    def join(parts: list[np.ndarray], dtype: Any, shape: tuple[int, ...] = (0,)) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(shape, dtype=dtype)

    return TreeEnsemble(
        leaf_map=leaf_map,
        feature_names=names,
        n_values=np.asarray(n_values, dtype=np.int64),
        node_feature=join(features, np.int32),
        node_child_base=join(bases, np.int64),
        child_table=join(tables, np.int32),
        node_value=join(values, np.float64, (0, 2)),
        node_weight=join(weights, np.float64),
        node_depth=join(depths, np.int32),
        tree_start=np.asarray(starts, dtype=np.int64),
        code_maps=code_maps,
        rare_codes=rare_codes,
    )


def predict_ensemble(
    ensemble: TreeEnsemble,
    codes: Any,
    f: Any,
    *,
    init: tuple[float, float] | None = (1.0, 0.0),
    finish: bool = True,
) -> Any:
    """Return the chain's output for tree codes ``codes`` and tree input ``f``
    (``gpucal.kernels.predict_trees``, whose ``init`` and ``finish`` these are)."""
    e = ensemble
    return predict_trees(
        codes,
        f,
        e.node_feature,
        e.node_child_base,
        e.child_table,
        e.node_value,
        e.tree_start,
        e.leaf_map_code,
        init=init,
        finish=finish,
    )
