r"""Row embeddings from a tree ensemble: leaf indices or exact tree SHAP values (CCL, Sec. 2.1.1).

Two representations of a row, both learnt by the base model (Lavi et al., Sec. 2.1.1):

- **leaves** (He et al. 2014): the leaf the row falls in, per tree. ``leaf_encoding="onehot"`` turns
  them into one indicator column per (tree, leaf) seen at fit, a sparse CSR matrix with one 1 per tree
  (Euclidean distance then counts the trees in which two rows part); ``"index"`` keeps the raw leaf
  numbers as they are (the paper's literal "vector of leaf indices"; distances between leaf numbers mean
  little, so prefer "onehot").
- **shap**: per-feature SHAP contributions in the margin's units, the exact tree algorithm both libraries
  implement (XGBoost ``pred_contribs=True``, LightGBM ``pred_contrib=True``), run by gpucal's kernels on
  the model's tables; the bias column (the same for every row) is dropped. Multi-class models give one
  block of features per class.

Three kinds of models: an XGBoost ``Booster`` / ``XGBModel``, a LightGBM ``Booster`` / ``LGBMModel``
(each possibly inside ``sklearn.frozen.FrozenEstimator``), and gpucal's own trees: any fitted object with
``leaves(X) -> (n, n_trees)`` (``gpucal.MBCT``); or the path of a saved one (:func:`load_model_file`).
Neither library is imported unless its model is used.

:class:`TreeEmbedding` holds the model and what the fit learnt about its leaves. An XGBoost or LightGBM
model is read once, at fit, into gpucal's own tree tables (:mod:`gpucal.ccl.tree_tables`): the leaves and
SHAP values come from ``gpucal.kernels.boosted_trees``, and ``predict`` and ``load`` need neither library (no
file
content ever reaches a native parser). It is saved as plain data (no pickle): those tables, or a gpucal
model's own JSON document, plus the leaf-to-column table.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from gpucal._validation import check_invariant
from gpucal.ccl.tree_tables import TreeTables, from_model

EMBEDDINGS = ("leaves", "shap")
LEAF_ENCODINGS = ("onehot", "index")
LIBRARIES = ("xgboost", "lightgbm", "gpucal")


def _module(obj: Any) -> str:
    return type(obj).__module__.split(".")[0]


def _require(library: str) -> Any:
    """Import an optional library, or say which extra installs it."""
    try:
        if library == "xgboost":
            import xgboost

            return xgboost
        import lightgbm

        return lightgbm
    except ImportError:
        msg = f"embedding_model: a {library} model needs the {library} package (pip install gpucal[ccl])"
        raise ImportError(msg) from None


def resolve_model(model: Any) -> tuple[str, Any]:
    """Return ``(library, model)``: the Booster of a fitted XGBoost / LightGBM model, or a gpucal tree model.

    scikit-learn wrappers are unwrapped to their Booster (``get_booster()``, ``booster_``), and
    ``FrozenEstimator`` to the model it holds. An unfitted model is an error: note that ``sklearn.clone``
    returns *unfitted* copies of scikit-learn models, so a calibrator meant to be cloned should hold the
    Booster, or the model inside ``FrozenEstimator`` (which ``clone`` leaves as it is).
    """
    if model is None:
        msg = (
            "embedding_model: ClusteredCalibrator needs a fitted tree model to embed the rows (an XGBoost or "
            "LightGBM model, gpucal's own trees such as a fitted MBCT, or the path of a saved one)"
        )
        raise ValueError(msg)
    if isinstance(model, str | os.PathLike):
        model = load_model_file(model)
    if type(model).__name__ == "FrozenEstimator" and _module(model) == "sklearn":
        model = model.estimator
    module = _module(model)
    if module == "xgboost":
        xgb = _require("xgboost")
        if isinstance(model, xgb.Booster):
            return "xgboost", model
        try:
            return "xgboost", model.get_booster()
        except Exception as error:  # xgboost raises NotFittedError (a ValueError) or XGBoostError
            raise _not_fitted(model) from error
    if module == "lightgbm":
        lgb = _require("lightgbm")
        if isinstance(model, lgb.Booster):
            return "lightgbm", model
        try:
            return "lightgbm", model.booster_
        except Exception as error:  # LGBMNotFittedError
            raise _not_fitted(model) from error
    if callable(getattr(model, "leaves", None)):
        spec = getattr(model, "_state_spec", None)
        if spec is not None and not all(hasattr(model, name) for name in spec):
            raise _not_fitted(model)
        return "gpucal", model
    msg = (
        f"embedding_model: expected an XGBoost or LightGBM model, or an object with a leaves(X) method "
        f"(gpucal.MBCT); got {type(model).__qualname__}"
    )
    raise TypeError(msg)


def load_model_file(path: str | os.PathLike[str]) -> Any:
    """Load a saved tree model: a gpucal model file, XGBoost's JSON / UBJSON, or LightGBM's model text.

    A ``.json`` file holding ``"format": "gpucal-model"`` goes to ``gpucal.load``, any other ``.json`` or
    ``.ubj`` to ``xgboost.Booster``, anything else to ``lightgbm.Booster`` (its ``save_model`` text). All
    three are data formats: nothing in the file runs. The last two are read by the libraries' own
    (native) parsers, which trust their input: this happens once, at fit, for a model the user names;
    the fitted calibrator holds gpucal's checked tables and never reads the model file again.
    """
    name = os.fspath(path)
    if not os.path.isfile(name):
        msg = f"embedding_model: no model file {name!r}"
        raise FileNotFoundError(msg)
    if name.endswith(".json"):
        from gpucal.persistence import ModelFileError, from_dict, read_document

        try:
            document = read_document(name)
        except ModelFileError as error:
            msg = f"embedding_model: {error}"
            raise ValueError(msg) from None
        if isinstance(document, dict) and document.get("format") == "gpucal-model":
            return from_dict(document)
    if name.endswith((".json", ".ubj")):
        return _require("xgboost").Booster(model_file=name)
    return _require("lightgbm").Booster(model_file=name)


def _not_fitted(model: Any) -> ValueError:
    msg = (
        f"embedding_model: the {type(model).__name__} is not fitted. sklearn.clone() returns unfitted copies "
        "of scikit-learn models: pass the Booster (get_booster(), booster_) or wrap the fitted model in "
        "sklearn.frozen.FrozenEstimator"
    )
    return ValueError(msg)


def model_feature_names(library: str, model: Any) -> list[str] | None:
    """Return the feature names the model was trained on, or None when it does not know them."""
    if library == "xgboost":
        names = model.feature_names
        return None if names is None else list(names)
    if library == "lightgbm":
        names = model.feature_name()
        # LightGBM names unnamed numpy columns Column_0, Column_1, ...
        return None if all(n == f"Column_{i}" for i, n in enumerate(names)) else list(names)
    return None


def _as_pandas(features: Any) -> Any:
    """The feature frame as pandas: what both libraries read, categoricals included."""
    import pandas as pd

    if isinstance(features, pd.DataFrame):
        return features
    if hasattr(features, "to_pandas"):  # polars, pyarrow, cudf
        return features.to_pandas()
    return pd.DataFrame(features)


class TreeEmbedding:
    """A fitted embedding: the model, the representation, and the leaf-to-column table.

    Parameters
    ----------
    library : {"xgboost", "lightgbm", "gpucal"}
        Whose model it is.
    model : TreeTables or object
        The tree tables of an XGBoost or LightGBM model, or a fitted gpucal model with ``leaves(X)``.
    embedding : {"leaves", "shap"}
        The representation.
    leaf_encoding : {"onehot", "index"}
        How leaves become columns (ignored for SHAP).
    feature_names : list of str or None
        Columns of ``X`` handed to an XGBoost / LightGBM model (None: gpucal models read ``X`` themselves).

    Attributes
    ----------
    leaf_column : numpy.ndarray of int64 or None
        One-hot leaves only: ``leaf_column[tree_offset[t] + leaf]`` is the column of that leaf, -1 for a
        leaf no fitted row reached (such a row gets no 1 for that tree; its centroid distance is still
        defined).
    tree_offset : numpy.ndarray of int64 or None
        First entry of each tree in ``leaf_column``, then its length.
    """

    def __init__(
        self,
        library: str,
        model: Any,
        embedding: str,
        leaf_encoding: str,
        feature_names: list[str] | None,
        leaf_column: np.ndarray | None = None,
        tree_offset: np.ndarray | None = None,
    ) -> None:
        self.library = library
        self.model = model
        self.embedding = embedding
        self.leaf_encoding = leaf_encoding
        self.feature_names = feature_names
        self.leaf_column = leaf_column
        self.tree_offset = tree_offset

    # ----------------------------------------------------------------------------------------------
    # Raw model outputs

    def _frame(self, X: Any) -> Any:
        """The feature columns the XGBoost / LightGBM model reads, as a pandas frame."""
        frame = _as_pandas(X)
        names = self.feature_names
        if names is None:
            return frame
        # The names are saved as text: a frame's labels are matched by their text (column 0 is "0").
        by_text: dict[str, Any] = {}
        for column in frame.columns:
            if by_text.setdefault(str(column), column) is not column:
                msg = f"X: columns {by_text[str(column)]!r} and {column!r} have the same name as text"
                raise ValueError(msg)
        missing = [c for c in names if c not in by_text]
        if missing:
            msg = f"X: the embedding model's column(s) {missing} not found; available: {list(frame.columns)}"
            raise KeyError(msg)
        return frame[[by_text[c] for c in names]]

    def _raw(self, X: Any, what: str) -> np.ndarray:
        """Leaf indices ``(n, n_trees)`` or SHAP values ``(n, n_features * n_classes)`` (bias dropped)."""
        if self.library == "gpucal":
            if what == "shap":
                msg = "embedding='shap' needs an XGBoost or LightGBM model; gpucal trees give leaves only"
                raise ValueError(msg)
            from gpucal._backend import to_numpy

            return to_numpy(self.model.leaves(X)).astype(np.int64)
        matrix = self.model.matrix(self._frame(X))
        return self.model.leaves(matrix) if what == "leaves" else self.model.shap(matrix)

    # ----------------------------------------------------------------------------------------------
    # Embedding

    def fit_transform(self, X: Any) -> Any:
        """Learn the leaf columns (one-hot leaves) from ``X`` and return its embedding."""
        if self.embedding == "leaves" and self.leaf_encoding == "onehot":
            leaves = self._raw(X, "leaves")
            offset = self.tree_offsets(leaf_widths(leaves))
            self.set_leaf_table(offset, leaf_counts(leaves, offset))
            return self._onehot(leaves)
        return self.transform(X)

    def raw_leaves(self, X: Any) -> np.ndarray:
        """Return the model's leaf of every row per tree, ``(n, n_trees)`` int64."""
        return self._raw(X, "leaves")

    def embed_leaves(self, leaves: np.ndarray) -> sp.csr_matrix:
        """Return the one-hot embedding of raw leaves, in the columns the fit learnt."""
        return self._onehot(leaves)

    @property
    def one_hot(self) -> bool:
        """Whether the embedding is one-hot leaves (whose columns the fit learns)."""
        return self.embedding == "leaves" and self.leaf_encoding == "onehot"

    @staticmethod
    def tree_offsets(widths: np.ndarray) -> np.ndarray:
        """Return each tree's first entry of the leaf table, then its length, from the trees' widths."""
        if widths.shape[0] == 0:
            msg = "embedding_model: the model has no trees, so there are no leaves to embed"
            raise ValueError(msg)
        return np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)

    def set_leaf_table(self, offset: np.ndarray, counts: np.ndarray) -> None:
        """Learn the one-hot columns: one per (tree, leaf) with rows (``counts`` from :func:`leaf_counts`,
        summed over all the fit's rows), numbered in order."""
        seen = counts > 0
        self.tree_offset = offset
        self.leaf_column = np.full(seen.shape[0], -1, dtype=np.int64)
        self.leaf_column[seen] = np.arange(int(seen.sum()))

    def transform(self, X: Any) -> Any:
        """Return the embedding of ``X``: CSR one-hot leaves, or a dense float64 matrix."""
        if self.embedding == "shap":
            return self._raw(X, "shap")
        leaves = self._raw(X, "leaves")
        if self.leaf_encoding == "index":
            return leaves.astype(np.float64)
        return self._onehot(leaves)

    def width(self) -> int:
        """Return the number of embedding columns (one-hot: the leaves seen at fit; index: the trees;
        SHAP: features times outputs)."""
        if self.one_hot:
            table = self.leaf_column
            return 0 if table is None else int(table.max(initial=-1)) + 1
        if self.library == "gpucal":
            return int(self.model.ensemble_.n_trees)
        if self.embedding == "shap":
            return int(self.model.n_outputs * self.model.n_features)
        return int(self.model.n_trees)

    def _onehot(self, leaves: np.ndarray) -> sp.csr_matrix:
        offset, table = self.tree_offset, self.leaf_column
        if offset is None or table is None:
            check_invariant(False, "one-hot leaves used before fit")
            return sp.csr_matrix((0, 0))
        n, n_trees = leaves.shape
        if n_trees != offset.shape[0] - 1:
            msg = (
                f"embedding_model: has {n_trees} trees, the calibrator was fitted with {offset.shape[0] - 1}"
            )
            raise ValueError(msg)
        widths = np.diff(offset)
        inside = (leaves >= 0) & (leaves < widths)  # a leaf id beyond the fitted range was never seen
        column = np.where(inside, table[np.where(inside, leaves + offset[:-1], 0)], -1)
        rows, trees = np.nonzero(column >= 0)
        data = np.ones(rows.shape[0], dtype=np.float64)
        n_columns = int(table.max()) + 1
        return sp.csr_matrix((data, (rows, column[rows, trees])), shape=(n, n_columns))

    # ----------------------------------------------------------------------------------------------
    # Saving as plain data

    def to_dict(self) -> dict[str, Any]:
        """Return the embedding as plain JSON data: the tables or model document, the leaf table as lists."""
        if self.library != "gpucal":
            model: Any = self.model.to_dict()
        else:
            from gpucal.persistence import to_dict
            from gpucal.registry import class_named

            if class_named(type(self.model).__name__) is not type(self.model):
                msg = (
                    f"embedding_model: a {type(self.model).__qualname__} cannot be saved; only gpucal's "
                    "registered models, XGBoost and LightGBM models can"
                )
                raise TypeError(msg)
            model = to_dict(self.model)
        return {
            "library": self.library,
            "embedding": self.embedding,
            "leaf_encoding": self.leaf_encoding,
            "feature_names": self.feature_names,
            "leaf_column": None if self.leaf_column is None else self.leaf_column.tolist(),
            "tree_offset": None if self.tree_offset is None else self.tree_offset.tolist(),
            "model": model,
        }

    @classmethod
    def from_dict(cls, data: Any) -> TreeEmbedding:
        """Rebuild from :meth:`to_dict`'s output, checking every part (``ValueError`` when wrong)."""
        keys = {"library", "embedding", "leaf_encoding", "feature_names", "leaf_column", "tree_offset"}
        keys.add("model")
        if not isinstance(data, dict) or set(data) != keys:
            msg = f"embedding_: expected an object with keys {sorted(keys)}"
            raise ValueError(msg)
        library, embedding, encoding = data["library"], data["embedding"], data["leaf_encoding"]
        if library not in LIBRARIES or embedding not in EMBEDDINGS or encoding not in LEAF_ENCODINGS:
            msg = f"embedding_: unknown library, embedding or encoding {(library, embedding, encoding)!r}"
            raise ValueError(msg)
        names = data["feature_names"]
        if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            msg = "embedding_: feature_names must be a list of strings or null"
            raise ValueError(msg)
        table = _int_list(data["leaf_column"], "leaf_column")
        offset = _int_list(data["tree_offset"], "tree_offset")
        if embedding == "leaves" and encoding == "onehot":
            if table is None or offset is None or offset[0] != 0 or offset[-1] != table.shape[0]:
                msg = "embedding_: one-hot leaves need a leaf_column table and tree offsets that match it"
                raise ValueError(msg)
            if np.any(np.diff(offset) <= 0) or table.min() < -1:
                msg = "embedding_: tree offsets must increase and leaf columns be >= -1"
                raise ValueError(msg)
        return cls(library, _load_model(library, data["model"]), embedding, encoding, names, table, offset)


def leaf_widths(leaves: np.ndarray) -> np.ndarray:
    """Return per tree one more than the largest leaf id among the rows (0 without rows)."""
    return leaves.max(axis=0, initial=-1) + 1


def leaf_counts(leaves: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Return the rows per (tree, leaf) entry of the leaf table (``offset`` from ``tree_offsets``)."""
    entries = (leaves + offset[:-1]).ravel()
    return np.bincount(entries, minlength=int(offset[-1])).astype(np.float64)


def _int_list(values: Any, name: str) -> np.ndarray | None:
    if values is None:
        return None
    integers = isinstance(values, list) and all(type(v) is int for v in values)
    if not integers:
        msg = f"embedding_: {name} must be a list of integers"
        raise ValueError(msg)
    return np.asarray(values, dtype=np.int64)


def _load_model(library: str, model: Any) -> Any:
    """Rebuild the saved model: gpucal's tree tables of an XGBoost / LightGBM model, or a gpucal model."""
    if library == "gpucal":
        from gpucal.persistence import ModelFileError, from_dict

        try:
            loaded = from_dict(model)
        except ModelFileError as error:
            msg = f"embedding_: the gpucal embedding model does not load: {error}"
            raise ValueError(msg) from None
        if not callable(getattr(loaded, "leaves", None)) or not hasattr(loaded, "ensemble_"):
            msg = f"embedding_: a {type(loaded).__name__} has no trees to embed with (MBCT and HC have)"
            raise ValueError(msg)
        return loaded
    tables = TreeTables.from_dict(model)
    if tables.library != library:
        msg = f"embedding_: the tables are of a {tables.library} model, the embedding says {library}"
        raise ValueError(msg)
    return tables


def make_embedding(
    model: Any,
    embedding: str,
    leaf_encoding: str,
    feature_cols: Sequence[Hashable] | None,
    other_cols: Sequence[Hashable],
) -> TreeEmbedding:
    """Return an unfitted :class:`TreeEmbedding` for a user's model (see :func:`resolve_model`).

    The columns of ``X`` handed to an XGBoost / LightGBM model are ``feature_cols``, else the model's own
    feature names when it knows them, else ``other_cols`` (every column but the score); gpucal models
    pick their own columns from ``X``.
    """
    library, booster = resolve_model(model)
    if embedding == "shap" and library == "gpucal":
        msg = "embedding='shap' needs an XGBoost or LightGBM model; gpucal trees give leaves only"
        raise ValueError(msg)
    if library == "gpucal":
        return TreeEmbedding(library, booster, embedding, leaf_encoding, None)
    known = model_feature_names(library, booster)
    if feature_cols is not None and known is not None and [str(c) for c in feature_cols] != known:
        # The model reads its columns by position: another order would send every row down wrong paths.
        msg = (
            f"feature_cols: {list(feature_cols)} are not the columns the {library} model was trained on, "
            f"in its order: {known}; pass feature_cols={known} (or leave it None)"
        )
        raise ValueError(msg)
    chosen = known if feature_cols is None else list(feature_cols)
    names = [str(c) for c in (other_cols if chosen is None else chosen)]
    tables = from_model(library, booster, shap=embedding == "shap")
    return TreeEmbedding(library, tables, embedding, leaf_encoding, names)
