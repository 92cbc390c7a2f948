r"""An XGBoost or LightGBM model as gpucal's own tree tables: what CCL saves, loads and embeds with.

A model file must not be able to hurt the process that loads it, and both libraries' model parsers are
native code that trusts its input (a truncated LightGBM text segfaults the parser, an edited header
aborts it, a child index out of range segfaults, a child pointing at its own node hangs ``predict``;
XGBoost alike). So no file content ever reaches either library: at fit time the user's
model (an object in memory, trusted as the user's own) is read once into plain node arrays
(:func:`from_model`), those arrays are what the calibrator saves, and every load checks them
(``gpucal.kernels.boosted_trees.check_boosted_trees``) before gpucal's kernels walk them. ``predict`` and
``load``
import neither library.

The tables hold, per node, the split feature, threshold, decision rule, missing-value handling and
category set, the children, a leaf's value, the training mass below the node (the weights of tree
SHAP: LightGBM's row counts, XGBoost's hessian sums, as each library's SHAP uses) and the library's
own leaf id; per tree, the output (class) it adds to; per feature, the pandas categories the model
was trained with (rows are coded by them as both libraries do), and whether inputs are rounded to
float32 first (XGBoost reads float32). The node layout and the rules are those of
``gpucal.kernels.boosted_trees_oracle``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal.kernels.boosted_trees import boosted_tree_leaves, boosted_tree_shap, check_boosted_trees
from gpucal.kernels.boosted_trees_oracle import (
    DECISION_CAT_LEFT,
    DECISION_CAT_RIGHT,
    DECISION_LE,
    DECISION_LT,
    MISSING_NAN,
    MISSING_NONE,
    MISSING_ZERO,
)

TABLE_LIBRARIES = ("xgboost", "lightgbm")
NODE_FIELDS = (
    "node_feature",
    "node_threshold",
    "node_decision",
    "node_missing",
    "node_default_left",
    "node_left",
    "node_right",
    "node_cat_start",
    "cat_values",
    "node_value",
    "node_cover",
    "node_leaf_id",
    "tree_start",
)
_LIGHTGBM_MISSING = {"None": MISSING_NONE, "Zero": MISSING_ZERO, "NaN": MISSING_NAN}


@dataclass
class TreeTables:
    """A fitted tree ensemble as checked node arrays (see the module docstring).

    Attributes
    ----------
    library : {"xgboost", "lightgbm"}
        The library whose rules the nodes follow.
    n_features : int
        Features the trees read, in the model's order.
    n_outputs : int
        Outputs: classes of a multi-class model, else 1.
    tree_class : numpy.ndarray of int64, shape (n_trees,)
        The output each tree adds to.
    categories : list of (list or None)
        Per feature: the pandas categories it was trained with (a row's value is coded by its position
        among them), or None (the value is read as a number).
    float32_inputs : bool
        Whether values are rounded to float32 before the comparisons (XGBoost).
    nodes : dict of str to numpy.ndarray
        The node arrays of ``gpucal.kernels.boosted_trees.check_boosted_trees``.
    max_depth : int
        The deepest tree's depth.
    """

    library: str
    n_features: int
    n_outputs: int
    tree_class: np.ndarray
    categories: list[list[Any] | None]
    float32_inputs: bool
    nodes: dict[str, np.ndarray]
    max_depth: int

    @property
    def n_trees(self) -> int:
        """Trees in the ensemble."""
        return int(self.tree_class.shape[0])

    # ----------------------------------------------------------------------------------------------
    # Rows

    def matrix(self, frame: Any) -> np.ndarray:
        """Return the float64 feature matrix of a pandas frame whose columns are the model's features.

        Category columns are coded by the training categories, as both libraries code them, so their
        order in the frame does not matter; a column the model was trained on as pandas categories must
        be a category column, and the error names the column and the fix. A category the model never
        saw is missing (NaN), as LightGBM treats it; XGBoost 3.2 gives it its code in the frame's own
        categories (so the training category that had that code), which gpucal does not copy. A column
        read as numbers must have a real numeric dtype (int, uint, float, bool): strings, datetimes,
        objects and complex numbers are refused, naming the column, never cast.
        """
        import pandas as pd

        if frame.shape[1] != self.n_features:
            msg = f"X: the embedding model reads {self.n_features} features, {frame.shape[1]} columns given"
            raise ValueError(msg)
        out = np.empty((frame.shape[0], self.n_features), dtype=np.float64)
        for j, (name, cats) in enumerate(zip(frame.columns, self.categories, strict=True)):
            column = frame.iloc[:, j]
            is_category = isinstance(column.dtype, pd.CategoricalDtype)
            if cats is not None and not is_category:
                msg = (
                    f"X: column {name!r} has dtype {column.dtype}, but the {self.library} embedding model "
                    "was trained on it as a pandas 'category' column; convert it with its training "
                    "categories: "
                    f"X[{name!r}] = X[{name!r}].astype(pandas.CategoricalDtype({_preview(cats)}))"
                )
                raise ValueError(msg)
            if cats is None and is_category:
                msg = (
                    f"X: column {name!r} is a pandas 'category' column, but the {self.library} embedding "
                    f"model was trained on it as numbers; pass its numbers (e.g. X[{name!r}].astype(float))"
                )
                raise ValueError(msg)
            if cats is not None:
                codes = column.cat.set_categories(cats).cat.codes.to_numpy()
                out[:, j] = np.where(codes < 0, np.nan, codes)
                continue
            dtype = column.dtype
            if not pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_complex_dtype(dtype):
                # strings, datetimes, objects and complex numbers would be cast to floats without a word
                msg = (
                    f"X: column {name!r} has dtype {dtype}, but the {self.library} embedding model reads "
                    "it as real numbers (int, float or bool); pass it as numbers, e.g. "
                    f"X[{name!r}] = pandas.to_numeric(X[{name!r}])"
                )
                raise ValueError(msg)
            out[:, j] = column.to_numpy(dtype=np.float64, na_value=np.nan)
        if self.float32_inputs:
            out = out.astype(np.float32).astype(np.float64)
        return out

    def leaves(self, X: np.ndarray) -> np.ndarray:
        """Return ``(n, n_trees)`` int64: each row's leaf per tree, numbered as the library numbers it."""
        return boosted_tree_leaves(X, self.n_features, self.nodes).astype(np.int64)

    def shap(self, X: np.ndarray) -> np.ndarray:
        """Return ``(n, n_outputs * n_features)``: exact tree SHAP values per output, bias left out."""
        values = boosted_tree_shap(X, self.n_features, self.nodes, self.tree_class, self.n_outputs)
        return values.reshape(X.shape[0], -1)

    # ----------------------------------------------------------------------------------------------
    # Plain data

    def to_dict(self) -> dict[str, Any]:
        """Return the tables as plain JSON data."""
        return {
            "library": self.library,
            "n_features": self.n_features,
            "n_outputs": self.n_outputs,
            "tree_class": self.tree_class.tolist(),
            "categories": self.categories,
            "float32_inputs": self.float32_inputs,
            **{name: self.nodes[name].tolist() for name in NODE_FIELDS},
        }

    @classmethod
    def from_dict(cls, data: Any) -> TreeTables:
        """Rebuild the tables from :meth:`to_dict`'s output, checking every field (``ValueError``)."""
        if isinstance(data, str):
            msg = (
                "tree tables: the model is stored as the library's own text, as older gpucal versions "
                "wrote it; that text would go unchecked to native parsers, so it is not read: refit the "
                "calibrator with the model and save it again"
            )
            raise ValueError(msg)
        keys = {"library", "n_features", "n_outputs", "tree_class", "categories", "float32_inputs"}
        keys.update(NODE_FIELDS)
        if not isinstance(data, dict) or set(data) != keys:
            msg = f"tree tables: expected an object with keys {sorted(keys)}"
            raise ValueError(msg)
        if data["library"] not in TABLE_LIBRARIES or not isinstance(data["float32_inputs"], bool):
            msg = f"tree tables: library must be one of {TABLE_LIBRARIES}, float32_inputs a boolean"
            raise ValueError(msg)
        arrays = {name: _number_list(data[name], name) for name in NODE_FIELDS}
        n_features = _count(data["n_features"], "n_features")
        trees, max_depth = check_boosted_trees(n_features, arrays)
        tree_class = _number_list(data["tree_class"], "tree_class")
        n_outputs = _count(data["n_outputs"], "n_outputs")
        if tree_class.shape[0] != trees.tree_start.shape[0] - 1 or tree_class.dtype.kind != "i":
            msg = "tree tables: tree_class must hold one integer per tree"
            raise ValueError(msg)
        # Every output owns a tree, so the outputs are no more than the trees the file holds.
        if n_outputs > tree_class.shape[0] or not np.array_equal(np.unique(tree_class), np.arange(n_outputs)):
            msg = f"tree tables: tree_class must use every output in [0, {n_outputs}) and no other"
            raise ValueError(msg)
        categories = _categories(data["categories"], n_features)
        nodes = trees._asdict()
        return cls(
            data["library"],
            n_features,
            n_outputs,
            tree_class,
            categories,
            data["float32_inputs"],
            nodes,
            max_depth,
        )


def _preview(values: list[Any], limit: int = 10) -> str:
    shown = ", ".join(repr(v) for v in values[:limit])
    return f"[{shown}{', ...' if len(values) > limit else ''}]"


def _count(value: Any, name: str) -> int:
    if type(value) is not int or value < 1:
        msg = f"tree tables: {name} must be a positive integer, got {value!r}"
        raise ValueError(msg)
    return value


def _number_list(values: Any, name: str) -> np.ndarray:
    is_numbers = isinstance(values, list) and all(
        type(v) is int or (type(v) is float and math.isfinite(v)) for v in values
    )
    if not is_numbers:
        msg = f"tree tables: {name} must be a list of finite numbers"
        raise ValueError(msg)
    if all(type(v) is int for v in values):
        return np.asarray(values, dtype=np.int64) if values else np.zeros(0, dtype=np.int64)
    return np.asarray(values, dtype=np.float64)


def _categories(values: Any, n_features: int) -> list[list[Any] | None]:
    def plain(v: Any) -> bool:
        return isinstance(v, str) or type(v) is int or (type(v) is float and math.isfinite(v))

    ok = (
        isinstance(values, list)
        and len(values) == n_features
        and all(
            c is None or (isinstance(c, list) and all(plain(v) for v in c) and len(set(c)) == len(c))
            for c in values
        )
    )
    if not ok:
        msg = (
            f"tree tables: categories must be {n_features} entries, each null or a list of distinct strings "
            "or numbers"
        )
        raise ValueError(msg)
    return values


# --------------------------------------------------------------------------------------------------
# Reading a model (fit time only)


class _NodeTable:
    """Nodes appended in preorder: a child's id is always above its parent's."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {
            name: [] for name in NODE_FIELDS if name not in ("cat_values", "node_cat_start", "tree_start")
        }
        self.cat_values: list[int] = []
        self.cat_start: list[int] = [0]
        self.tree_start: list[int] = [0]

    def add(self, **fields: Any) -> int:
        """Append a node (``categories`` its set, children filled in later); return its id."""
        m = len(self.columns["node_feature"])
        categories = sorted(set(fields.pop("categories", ())))
        for name, column in self.columns.items():
            column.append(fields.get(name, -1 if name in ("node_left", "node_right", "node_leaf_id") else 0))
        self.cat_values.extend(categories)
        self.cat_start.append(len(self.cat_values))
        return m

    def end_tree(self) -> None:
        self.tree_start.append(len(self.columns["node_feature"]))

    def arrays(self) -> dict[str, np.ndarray]:
        out = {name: np.asarray(column) for name, column in self.columns.items()}
        out["cat_values"] = np.asarray(self.cat_values, dtype=np.int64)
        out["node_cat_start"] = np.asarray(self.cat_start, dtype=np.int64)
        out["tree_start"] = np.asarray(self.tree_start, dtype=np.int64)
        return out


def _walk_preorder(root: Any, children: Any, visit: Any) -> None:
    """Visit nodes in preorder (explicit stack); ``visit(node, parent_id, side)`` returns the new id."""
    stack = [(root, -1, "")]
    while stack:
        node, parent, side = stack.pop()
        new_id = visit(node, parent, side)
        kids = children(node)
        if kids is not None:
            stack.append((kids[1], new_id, "node_right"))
            stack.append((kids[0], new_id, "node_left"))


def _link(table: _NodeTable, parent: int, side: str, child: int) -> None:
    if parent >= 0:
        table.columns[side][parent] = child


def _from_lightgbm(booster: Any, shap: bool) -> TreeTables:
    dump = booster.dump_model()
    n_features = int(dump["max_feature_idx"]) + 1
    k = int(dump["num_tree_per_iteration"])
    table = _NodeTable()
    for tree in dump["tree_info"]:

        def visit(node: dict[str, Any], parent: int, side: str) -> int:
            if "split_feature" not in node:
                if shap and "leaf_coeff" in node:
                    msg = (
                        "embedding='shap': a LightGBM model with linear trees has no tree SHAP values "
                        "(LightGBM has none either); use embedding='leaves'"
                    )
                    raise ValueError(msg)
                m = table.add(
                    node_value=float(node["leaf_value"]),
                    node_cover=float(node.get("leaf_count", 0)),
                    node_leaf_id=int(node.get("leaf_index", 0)),
                    node_feature=-1,
                )
            elif node["decision_type"] == "==":
                m = table.add(
                    node_feature=int(node["split_feature"]),
                    node_decision=DECISION_CAT_LEFT,
                    node_cover=float(node["internal_count"]),
                    categories=[int(c) for c in str(node["threshold"]).split("||")],
                )
            else:
                m = table.add(
                    node_feature=int(node["split_feature"]),
                    node_threshold=float(node["threshold"]),
                    node_decision=DECISION_LE,
                    node_missing=_LIGHTGBM_MISSING[node["missing_type"]],
                    node_default_left=int(bool(node["default_left"])),
                    node_cover=float(node["internal_count"]),
                )
            _link(table, parent, side, m)
            return m

        def children(node: dict[str, Any]) -> Any:
            return (node["left_child"], node["right_child"]) if "split_feature" in node else None

        _walk_preorder(tree["tree_structure"], children, visit)
        table.end_tree()
    names = dump["feature_names"]
    infos = dump.get("feature_infos", {})
    categorical = [j for j, name in enumerate(names) if infos.get(name, {}).get("values")]
    pandas_categories = dump.get("pandas_categorical") or []
    categories: list[list[Any] | None] = [None] * n_features
    if pandas_categories:
        if len(pandas_categories) != len(categorical):
            msg = (
                f"embedding_model: the LightGBM model holds {len(pandas_categories)} pandas category lists "
                f"but {len(categorical)} categorical features; gpucal cannot tell which is which"
            )
            raise ValueError(msg)
        for j, cats in zip(categorical, pandas_categories, strict=True):
            categories[j] = [_plain(v) for v in cats]
    n_trees = len(dump["tree_info"])
    return _tables("lightgbm", n_features, k, np.arange(n_trees) % k, categories, False, table)


def _from_xgboost(booster: Any) -> TreeTables:
    document = json.loads(bytes(booster.save_raw("json")).decode("utf-8"))
    learner = document["learner"]
    gbm = learner["gradient_booster"]
    if gbm["name"] != "gbtree":
        msg = f"embedding_model: an XGBoost {gbm['name']!r} booster is not supported; gpucal embeds gbtree"
        raise ValueError(msg)
    model = gbm["model"]
    n_features = int(learner["learner_model_param"]["num_feature"])
    table = _NodeTable()
    for tree in model["trees"]:
        if int(tree["tree_param"].get("size_leaf_vector", "1")) > 1:
            msg = "embedding_model: XGBoost multi-output trees (vector leaves) are not supported"
            raise ValueError(msg)
        cats = dict(
            zip(
                tree.get("categories_nodes", []),
                zip(tree.get("categories_segments", []), tree.get("categories_sizes", []), strict=True),
                strict=True,
            )
        )
        left, right = tree["left_children"], tree["right_children"]

        def visit(nid: int, parent: int, side: str, tree: dict[str, Any] = tree, cats: Any = cats) -> int:
            cover = _float32(tree["sum_hessian"][nid])
            if tree["left_children"][nid] == -1:
                m = table.add(
                    node_value=_float32(tree["split_conditions"][nid]),
                    node_cover=cover,
                    node_leaf_id=nid,
                    node_feature=-1,
                )
            elif tree["split_type"][nid] == 1:
                begin, size = cats[nid]
                m = table.add(
                    node_feature=int(tree["split_indices"][nid]),
                    node_decision=DECISION_CAT_RIGHT,
                    node_missing=MISSING_NAN,
                    node_default_left=int(tree["default_left"][nid]),
                    node_cover=cover,
                    categories=[int(c) for c in tree["categories"][begin : begin + size]],
                )
            else:
                m = table.add(
                    node_feature=int(tree["split_indices"][nid]),
                    node_threshold=_float32(tree["split_conditions"][nid]),
                    node_decision=DECISION_LT,
                    node_missing=MISSING_NAN,
                    node_default_left=int(tree["default_left"][nid]),
                    node_cover=cover,
                )
            _link(table, parent, side, m)
            return m

        def children(nid: int, left: Any = left, right: Any = right) -> Any:
            return (left[nid], right[nid]) if left[nid] != -1 else None

        _walk_preorder(0, children, visit)
        table.end_tree()
    n_outputs = max(int(learner["learner_model_param"].get("num_class", "0")), 1)
    categories = _xgboost_categories(booster, learner.get("feature_types") or [], n_features)
    tree_class = np.asarray(model["tree_info"], dtype=np.int64)
    return _tables("xgboost", n_features, n_outputs, tree_class, categories, True, table)


def _xgboost_categories(booster: Any, types: list[str], n_features: int) -> list[list[Any] | None]:
    if "c" not in types:
        return [None] * n_features
    try:
        pairs = booster.get_categories(export_to_arrow=True).to_arrow()
    except (AttributeError, TypeError) as error:
        msg = "embedding_model: an XGBoost model with categorical features needs xgboost >= 3.1"
        raise ValueError(msg) from error
    return [None if arr is None else [_plain(v) for v in arr.to_pylist()] for _, arr in pairs]


def _float32(value: Any) -> float:
    """XGBoost's JSON prints float32 numbers in their shortest form: read back the float32 itself."""
    return float(np.float32(value))


def _plain(value: Any) -> Any:
    """A category as a JSON scalar (numpy scalars become Python ones)."""
    return value.item() if isinstance(value, np.generic) else value


def _tables(
    library: str,
    n_features: int,
    n_outputs: int,
    tree_class: np.ndarray,
    categories: list[list[Any] | None],
    float32_inputs: bool,
    table: _NodeTable,
) -> TreeTables:
    if len(table.tree_start) < 2:
        msg = "embedding_model: the model has no trees, so there are no leaves to embed"
        raise ValueError(msg)
    trees, max_depth = check_boosted_trees(n_features, table.arrays())
    nodes = trees._asdict()
    return TreeTables(
        library, n_features, n_outputs, tree_class, categories, float32_inputs, nodes, max_depth
    )


def from_model(library: str, booster: Any, *, shap: bool = False) -> TreeTables:
    """Read a fitted XGBoost or LightGBM ``Booster`` into :class:`TreeTables` (fit time only).

    ``shap``: the tables will give SHAP values, so a model whose leaves are not constants (LightGBM's
    linear trees) is refused; their leaf indices are still exact.
    """
    return _from_xgboost(booster) if library == "xgboost" else _from_lightgbm(booster, shap)
