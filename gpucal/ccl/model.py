r"""``gpucal.ClusteredCalibrator``: clustered calibration, CCL (Lavi, Shapira and Rappoport, Sec. 2).

Embed every row with a tree ensemble (leaf indices or exact tree SHAP values), cluster the embeddings,
and calibrate each cluster with its own one-dimensional map (Eq. 2); a homogeneous cluster gets a
constant (Eq. 3). What the paper fixes, what it leaves open and what gpucal chose is in the class
docstring.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar, cast

import numpy as np
from sklearn.utils.validation import check_is_fitted

from gpucal._backend import array_namespace, to_numpy
from gpucal._frames import wrap_output
from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, AnyOf, Calibrator, Constraint, Interval, Options
from gpucal.calibrators.logistic import EPS
from gpucal.ccl.cluster_maps import as_matrix
from gpucal.ccl.clustering import CLUSTERINGS, assign_clusters, project
from gpucal.ccl.embeddings import EMBEDDINGS, LEAF_ENCODINGS, TreeEmbedding, make_embedding
from gpucal.ccl.fit import CCLParams, CCLState, fit_ccl, is_multiclass, read_scores
from gpucal.encoding import resolve_feature_cols
from gpucal.persistence import loadable_text, rebuilt_object, to_dict
from gpucal.registry import calibration_method
from gpucal.rows import any_dask, as_rows
from gpucal.rows.checks import check_all_dask
from gpucal.trees.local_maps import n_map_params

#: Maps fitted by grouped Newton steps (``gpucal.trees.local_maps``) and the per-cluster Dirichlet fit.
LOCAL_MAPS = ("platt", "temperature", "beta")
CALIBRATORS = (*LOCAL_MAPS, "dirichlet")
# What happened to each cluster (``cluster_role_``).
FITTED, CONSTANT, FALLBACK = 0, 1, 2
# Default rows of the clustering sample: Ward's tree needs O(n^2) memory and time; k-means takes its
# projection, starts and elbow candidates from the sample and iterates over every row.
AUTO_MAX_ROWS = {"kmeans": 10_000, "agglomerative": 5_000}


@calibration_method("ccl", fits_on_dask=True)
class ClusteredCalibrator(Calibrator):
    r"""Clustered calibration (CCL): one calibration map per cluster of learnt row embeddings.

    .. math::

        \hat p(x) = c_{\mathrm{CL}(x)}\big(f(x)\big)  \quad\text{(Eq. 2)}, \qquad
        \hat p(x) = \frac{\sum_{i \in B_j} w_i y_i + 1}{\sum_{i \in B_j} w_i + 2}
        \quad\text{for a homogeneous cluster } B_j \text{ (Eq. 3, smoothed)},

    with :math:`f` the base model's probability, :math:`\mathrm{CL}` the cluster of the row's embedding
    and :math:`c_j` the map fitted on cluster :math:`j`'s rows (Algorithm 1).

    Parameters
    ----------
    embedding_model : object or path
        The tree model whose representation is clustered: a fitted XGBoost or LightGBM model (``Booster``,
        ``XGBClassifier``, ``LGBMClassifier``, or one inside ``sklearn.frozen.FrozenEstimator``), gpucal's
        own fitted trees (any object with ``leaves(X)``, e.g. a fitted :class:`gpucal.MBCT`), or the path of
        a saved one (a gpucal model file, XGBoost's ``.json`` / ``.ubj``, LightGBM's model text; what the
        command line passes). Required: the paper embeds with the base model itself. ``sklearn.clone``
        makes unfitted copies of scikit-learn models: pass a Booster or a ``FrozenEstimator`` when the
        calibrator will be cloned.
    embedding : {"leaves", "shap"}, default="leaves"
        Leaf indices (He et al. 2014) or exact tree SHAP values (the libraries' algorithm; bias dropped).
    leaf_encoding : {"onehot", "index"}, default="onehot"
        Leaves as one indicator column per (tree, leaf) (sparse), or the raw leaf numbers.
    clustering : {"kmeans", "agglomerative"}, default="kmeans"
        k-means (gpucal's weighted Lloyd iterations over every row, each a sum of per-cluster statistics,
        started from k-means++ on the seeded sample) or Ward agglomerative clustering (fitted on the
        sample; every row goes to the nearest cluster centroid). ``gpucal.ccl.clustering``.
    n_clusters : int or "elbow", default="elbow"
        The number of clusters, or the knee of the within-cluster sum of squares over
        ``[min_clusters, max_clusters]`` (``gpucal.ccl.clustering.elbow_k``).
    min_clusters, max_clusters : int, default=2, 30
        The elbow's range (the paper tries 5 to 100 clusters).
    n_init : int, default=1
        k-means restarts (seeds ``seed``, ``seed + 1``, ...) for the chosen number of clusters, the lowest
        inertia kept (the elbow's scan runs one per candidate).
    n_components : int, default=32
        Embeddings wider than this (one-hot leaves) are clustered in the span of their top
        ``n_components`` singular vectors (``gpucal.ccl.clustering``); narrower ones (SHAP) as they are.
    max_cluster_rows : int or "auto", default="auto"
        About this many rows form the clustering sample (row :math:`r` is in it when a uniform hashed
        from ``seed`` and :math:`r` is below ``max_cluster_rows / n``: the same rows at any
        partitioning; every row when there are fewer). The sample fits the projection, k-means' starts
        and elbow candidates, and Ward's tree. "auto": 5,000 for agglomerative, 10,000 for k-means.
    calibrator : {"platt", "temperature", "beta", "dirichlet"}, default="platt"
        The map per cluster. Platt :math:`\sigma(a\,\mathrm{logit}\,p + b)`, temperature
        :math:`\sigma(a\,\mathrm{logit}\,p)`, beta :math:`\sigma(a \ln p - b \ln(1-p) + c)` are fitted for
        all clusters at once by grouped Newton steps on per-cluster sums (``gpucal.trees.local_maps``);
        Dirichlet (:class:`~gpucal.calibrators.DirichletCalibrator`, the paper's multi-class map; on binary
        scores it acts on :math:`(1 - p, p)`) by one fit per cluster. Multi-class scores (``score_col`` a
        list) take "dirichlet" only.
    min_cluster_size : float, default=50
        Clusters whose total weight is below this get the global map of the same kind (fitted on every
        row), the fallback for clusters too small to fit.
    penalty : float, default=0
        Ridge pulling each cluster's parameters toward the global map's (``penalty / 2`` times the squared
        distance, added to the cluster's summed log-loss); 0 is the paper's independent fit per cluster.
    score_col : str or list of str, default="score"
        The base model's probability column; a list of columns is a multi-class probability matrix.
    feature_cols : list of str or None, default=None
        Columns handed to an XGBoost / LightGBM embedding model; None: the model's own feature names when it
        has them, else every column but the score, the label and the weights (``gpucal.encoding.features``).
        gpucal models read their own columns. Listing the label, a score column or a column twice is refused.
    seed : int, default=0
        Seed of the clustering sample, the projection and k-means' starts.
    device : {"auto", "cpu", "gpu"}, default="auto"
        "gpu" fits the maps on the device; "auto" does so when the score is there. The clustering runs
        on the host.
    output_type : str, default="input"
        Family of binary predictions; multi-class predictions are an ``(n, K)`` array.

    Attributes
    ----------
    embedding_ : TreeEmbedding
        The embedding model and its leaf-to-column table.
    projection_ : numpy.ndarray of shape (d, c)
        Embedding columns to clustering coordinates (the identity for ``d <= n_components``).
    centroids_ : numpy.ndarray of shape (n_clusters_, c)
        Cluster centres in clustering coordinates.
    n_clusters_ : int
        Clusters used (the elbow's choice when ``n_clusters="elbow"``).
    params_ : numpy.ndarray of shape (n_clusters_, n_params)
        Each cluster's map (Platt ``(a, b)``, temperature ``(a,)`` with :math:`a = 1/T`, beta
        ``(a, b, c)``, Dirichlet ``W`` flattened then ``b``); the global map for fallback clusters.
    global_params_ : numpy.ndarray of shape (n_params,)
        The map fitted on every row (the fallback).
    cluster_role_ : numpy.ndarray of int
        Per cluster: 0 its own map, 1 a constant (homogeneous), 2 the fallback (too light).
    cluster_rate_ : numpy.ndarray of shape (n_clusters_, n_outputs)
        Smoothed observed rate per cluster (the constant of a homogeneous cluster): Laplace's
        :math:`(\sum w y + 1)/(\sum w + 2)`, per class :math:`(\sum_{y=c} w + 1)/(\sum w + K)`.
    cluster_weight_ : numpy.ndarray
        Total weight of the fitting rows per cluster.
    elbow_ : dict or None
        ``{"k": [...], "inertia": [...]}``: the elbow's curve (None when ``n_clusters`` is an int).
    n_classes_ : int

    Notes
    -----
    What the paper leaves open and gpucal chose:

    - **Homogeneous cluster** (Eq. 3): one whose rows all carry one label (one class has zero weight), or
      whose scores do not vary (weighted variance of the logit below ``1e-10``: no slope to fit). Its
      output is Laplace's smoothed rate, never exactly 0 or 1 (a constant 0 would give an infinite
      log-loss on the first positive). Clusters lighter than ``min_cluster_size`` take the fallback first.
    - **Assignment**: every row, at fit and at predict, goes to the nearest centroid, so the maps are
      fitted on the assignment they are applied with. For k-means that is its own rule; Ward has no
      ``predict``, so its clusters are represented by their means.
    - **Elbow**: the paper names the method, not the rule; gpucal takes the knee farthest below the chord
      of :math:`S(k)` (deterministic). k-means fits once per candidate :math:`k`.
    - The embedding model is saved inside the model file as data, not pickled, so a loaded calibrator
      predicts alone and cannot be handed a different (say, retrained) model by mistake. An XGBoost or
      LightGBM model is saved as gpucal's own tree tables (``gpucal.ccl.tree_tables``), read from the
      model at fit and checked at load; ``predict`` and ``load`` import neither library, and no file
      content reaches their native parsers. A gpucal model is saved as its own JSON document. The saved
      parameters hold ``embedding_model=None`` (or the path it was given): refit with a model.
    - Algorithm 1 fits the clustering on train + calibration rows (Sec. 3.1); here the clustering and the
      maps see the rows passed to ``fit``.

    CECE (Sec. 2.4) over the fitted clusters: ``gpucal.metrics.cece(y, cal.predict(X), cal.clusters(X))``.

    References
    ----------
    .. [1] T. Lavi, B. Shapira, N. Rappoport, "Calibration and Discrimination Optimization Using Clusters
       of Learned Representation", 2024.
    .. [2] X. He et al., "Practical lessons from predicting clicks on ads at Facebook", ADKDD 2014.

    Examples
    --------
    >>> import lightgbm as lgb, numpy as np, pandas as pd
    >>> from gpucal.ccl import ClusteredCalibrator
    >>> rng = np.random.default_rng(0)
    >>> X = pd.DataFrame({"a": rng.normal(size=2000), "b": rng.normal(size=2000)})
    >>> y = (X.a + rng.normal(size=2000) > 0).astype(int)
    >>> model = lgb.LGBMClassifier(n_estimators=10, num_leaves=4, verbose=-1).fit(X, y)
    >>> X["score"] = model.predict_proba(X)[:, 1]
    >>> cal = ClusteredCalibrator(embedding_model=model.booster_, n_clusters=4).fit(X, y)
    >>> cal.predict(X).shape
    (2000,)
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "embedding": Options(*EMBEDDINGS),
        "leaf_encoding": Options(*LEAF_ENCODINGS),
        "clustering": Options(*CLUSTERINGS),
        "n_clusters": AnyOf(Interval(int, 1, None), Options("elbow")),
        "min_clusters": Interval(int, 1, None),
        "max_clusters": Interval(int, 1, None),
        "n_init": Interval(int, 1, None),
        "n_components": Interval(int, 1, None),
        "max_cluster_rows": AnyOf(Interval(int, 2, None), Options("auto")),
        "calibrator": Options(*CALIBRATORS),
        "min_cluster_size": Interval(float, 0, None),
        "penalty": Interval(float, 0, None),
        "seed": Interval(int, 0, None),
        "device": Options("auto", "cpu", "gpu"),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    #: Parameters ``predict`` reads with the fitted state: refused once changed after the fit.
    _state_params: ClassVar[tuple[str, ...]] = ("calibrator",)
    _state_spec: ClassVar[dict[str, str]] = {
        "embedding_": "json",
        "projection_": "float_matrix",
        "centroids_": "float_matrix",
        "n_clusters_": "int",
        "params_": "float_matrix",
        "global_params_": "float_array",
        "cluster_role_": "int_array",
        "cluster_rate_": "float_matrix",
        "cluster_weight_": "float_array",
        "elbow_": "json",
        "n_classes_": "int",
    }

    def __init__(
        self,
        *,
        embedding_model: Any = None,
        embedding: str = "leaves",
        leaf_encoding: str = "onehot",
        clustering: str = "kmeans",
        n_clusters: int | str = "elbow",
        min_clusters: int = 2,
        max_clusters: int = 30,
        n_init: int = 1,
        n_components: int = 32,
        max_cluster_rows: int | str = "auto",
        calibrator: str = "platt",
        min_cluster_size: float = 50.0,
        penalty: float = 0.0,
        score_col: Hashable | Sequence[Hashable] = "score",
        feature_cols: Sequence[Hashable] | None = None,
        seed: int = 0,
        device: str = "auto",
        output_type: str = "input",
    ) -> None:
        self.embedding_model = embedding_model
        self.embedding = embedding
        self.leaf_encoding = leaf_encoding
        self.clustering = clustering
        self.n_clusters = n_clusters
        self.min_clusters = min_clusters
        self.max_clusters = max_clusters
        self.n_init = n_init
        self.n_components = n_components
        self.max_cluster_rows = max_cluster_rows
        self.calibrator = calibrator
        self.min_cluster_size = min_cluster_size
        self.penalty = penalty
        self.score_col = score_col
        self.feature_cols = feature_cols
        self.seed = seed
        self.device = device
        self.output_type = output_type

    # ----------------------------------------------------------------------------------------------
    # Input

    @property
    def _multiclass(self) -> bool:
        return is_multiclass(self.score_col)

    def _scores(self, X: Any, *, allow_empty: bool = False) -> tuple[Any, Any]:
        """Return ``(score, info)``: the 1-D probability or the ``(n, K)`` probability matrix."""
        return read_scores(X, self.score_col, allow_empty=allow_empty)

    # ----------------------------------------------------------------------------------------------
    # fit

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> ClusteredCalibrator:
        """Embed, cluster, and fit one map per cluster (Algorithm 1).

        Parameters
        ----------
        X : dataframe
            The score column (or the class-probability columns) and the embedding model's features. A
            dask DataFrame (with ``y`` and ``sample_weight`` dask collections too) fits over its
            partitions, binary scores with a Platt, temperature or beta map: the clusters and maps of
            one machine, its sums added (``gpucal.ccl.fit``); the embedding model is shipped to the
            workers.
        y : array-like of shape (n,)
            Labels in {0, 1} (binary; soft labels count as that fraction of a positive), or class indices in
            ``[0, K)`` (multi-class).
        sample_weight : array-like of shape (n,), optional
            Non-negative row weights (k-means, the maps and the rates use them; the Ward tree does not).

        Returns
        -------
        self
        """
        self._validate_params()
        if self.min_clusters > self.max_clusters:
            msg = f"min_clusters={self.min_clusters} is above max_clusters={self.max_clusters}"
            raise ValueError(msg)
        if self._multiclass and self.calibrator != "dirichlet":
            msg = f"calibrator={self.calibrator!r}: multi-class scores (score_col a list) take 'dirichlet'"
            raise ValueError(msg)
        given = {"X": X, "y": y, "sample_weight": sample_weight}
        distributed = any_dask(*given.values())
        if distributed:
            check_all_dask(given)  # the error names the inputs that are not dask collections
        if not distributed:
            self._scores(X)  # the input checks (sparse, empty, bad columns) word the error before pandas does
        rows = as_rows(**given)
        # The columns an XGBoost / LightGBM model reads: feature_cols checked, or every column but the
        # score, the label and the weights (when the model does not name its features).
        columns = resolve_feature_cols(
            rows, X, y, sample_weight, score_col=self.score_col, feature_cols=self.feature_cols
        )
        embedding = make_embedding(
            self.embedding_model,
            self.embedding,
            self.leaf_encoding,
            self.feature_cols,
            [] if columns is None else list(columns),
        )
        params = CCLParams(
            score_col=self.score_col,
            calibrator=self.calibrator,
            device=self.device,
            min_cluster_size=float(self.min_cluster_size),
            penalty=float(self.penalty),
            cluster_options=self._cluster_options(),
        )
        self._set_fitted(fit_ccl(rows, params, embedding))
        return self

    def _cluster_options(self) -> dict[str, Any]:
        """The keyword arguments of ``fit_clusters_on`` but the rows."""
        max_rows = (
            AUTO_MAX_ROWS[self.clustering] if self.max_cluster_rows == "auto" else self.max_cluster_rows
        )
        return {
            "method": self.clustering,
            "n_clusters": self.n_clusters,
            "k_range": (self.min_clusters, self.max_clusters),
            "n_init": self.n_init,
            "max_rows": int(max_rows),
            "n_components": self.n_components,
            "seed": self.seed,
        }

    def _set_fitted(self, state: CCLState) -> None:
        """Store the fitted embedding, clusters and maps."""
        clusters, maps = state.clusters, state.maps
        self.embedding_ = state.embedding
        self.projection_ = clusters.projection
        self.centroids_ = clusters.centroids
        self.n_clusters_ = int(clusters.centroids.shape[0])
        self.elbow_ = None
        if clusters.ks.shape[0]:
            self.elbow_ = {"k": clusters.ks.tolist(), "inertia": clusters.inertia.tolist()}
        self.params_ = np.asarray(maps.params, dtype=np.float64)
        self.global_params_ = maps.global_params
        self.cluster_weight_ = maps.weight
        self.cluster_rate_ = maps.rate
        role = np.full(self.n_clusters_, FITTED, dtype=np.int64)
        role[maps.constant] = CONSTANT
        role[maps.too_light] = FALLBACK
        self.cluster_role_ = role
        self.n_classes_ = maps.rate.shape[1] if self._multiclass else 2

    # ----------------------------------------------------------------------------------------------
    # predict

    def clusters(self, X: Any) -> Any:
        """Return the cluster of every row of ``X`` (int32, host): the bins of CECE (Sec. 2.4, Eq. 4).

        A dask DataFrame gives a dask Series of its partitions' clusters (binary scores).
        """
        check_is_fitted(self, list(self._state_spec))
        if any_dask(X):
            self._check_dask_predict()
            return X.map_partitions(_partition_clusters, self, meta=_partition_clusters(X._meta, self))
        embedded = self.embedding_.transform(X)
        if embedded.shape[1] != self.projection_.shape[0]:
            msg = f"X: embeds into {embedded.shape[1]} columns, the fit had {self.projection_.shape[0]}"
            raise ValueError(msg)
        return assign_clusters(project(embedded, self.projection_), self.centroids_)

    def predict(self, X: Any) -> Any:
        """Return calibrated probabilities (Algorithm 2): 1-D for binary scores, ``(n, K)`` for multi-class.

        Parameters
        ----------
        X : dataframe
            The score column(s) and the embedding model's features; a dask DataFrame (binary scores)
            gives a dask Series of its partitions' predictions.

        Returns
        -------
        array or Series of shape (n,), or array of shape (n, K)
        """
        check_is_fitted(self, list(self._state_spec))
        if any_dask(X):
            self._check_dask_predict()
            return self._predict_partitions(X)
        score, info = self._scores(X, allow_empty=True)
        xp = array_namespace(score)
        if score.shape[0] == 0:
            out = xp.zeros((0, self.n_classes_)) if self._multiclass else xp.zeros(0)
            return out if self._multiclass else wrap_output(out, info, output_type=self.output_type)
        part = self.clusters(X)
        calibrator = self._fitted_param("calibrator")
        if calibrator == "dirichlet":
            out = self._predict_dirichlet(to_numpy(score), part)
            if not self._multiclass:
                out = xp.asarray(out[:, 1])
        else:
            from gpucal.trees.local_maps import apply_local_maps

            part_xp = xp.asarray(part)
            out = apply_local_maps(score, part_xp, self.params_, calibrator)
            constant = xp.asarray(self.cluster_role_ == CONSTANT)[part_xp]
            out = xp.where(constant, xp.asarray(self.cluster_rate_[:, 0])[part_xp], out)
        if self._multiclass:
            return out
        return wrap_output(out, info, output_type=self.output_type)

    def _check_dask_predict(self) -> None:
        if self._multiclass:
            msg = (
                "ClusteredCalibrator: multi-class predictions are an (n, K) matrix, not a column of a dask "
                "collection's partitions; predict multi-class scores on one machine"
            )
            raise NotImplementedError(msg)

    def _predict_dirichlet(self, score: np.ndarray, part: np.ndarray) -> np.ndarray:
        from gpucal.calibrators.dirichlet import predict_dirichlet

        probs = as_matrix(score)
        log_p = np.log(np.maximum(probs, EPS))
        n_classes = probs.shape[1]
        out = np.empty_like(probs)
        for j in np.unique(part):
            rows = part == j
            if self.cluster_role_[j] == CONSTANT:
                out[rows] = self._class_rates(j)
                continue
            coef = self.params_[j, : n_classes * n_classes].reshape(n_classes, n_classes)
            out[rows] = predict_dirichlet(log_p[rows], coef, self.params_[j, n_classes * n_classes :])
        return out

    def _class_rates(self, j: int) -> np.ndarray:
        rate = self.cluster_rate_[j]
        return np.array([1.0 - rate[0], rate[0]]) if rate.shape[0] == 1 else rate

    # ----------------------------------------------------------------------------------------------
    # Saving

    def save(self, path: Any) -> None:
        """Write the fitted calibrator, its embedding model included (as data), to ``path`` as JSON.

        The embedding model lives in the fitted state; the saved parameters hold ``embedding_model=None``
        (or the path it was given), since a model object is not JSON data.
        """
        document = to_dict(self)
        model = self.embedding_model
        document["params"]["embedding_model"] = (
            os.fspath(model) if isinstance(model, str | os.PathLike) else None
        )
        text = loadable_text(self, document)
        with open(os.fspath(path), "w", encoding="utf-8") as handle:
            handle.write(text)

    def _check_state(self) -> None:
        """Rebuild the embedding from plain data and check the shapes agree."""
        self.embedding_ = rebuilt_object(self.embedding_, TreeEmbedding, "embedding_", "embedding")
        if self.embedding_.width() != self.projection_.shape[0]:
            msg = (
                f"embedding_ gives {self.embedding_.width()} columns, projection_ has "
                f"{self.projection_.shape[0]} rows"
            )
            raise ValueError(msg)
        k = self.n_clusters_
        n_columns = len(cast("Sequence[Hashable]", self.score_col)) if self._multiclass else 1
        if self._multiclass and self.n_classes_ != n_columns:
            msg = f"n_classes_ = {self.n_classes_}, but score_col names {n_columns} class columns"
            raise ValueError(msg)
        n_classes = self.n_classes_
        dirichlet = self.calibrator == "dirichlet"
        n_params = n_classes * n_classes + n_classes if dirichlet else n_map_params(self.calibrator)
        if self.global_params_.shape != (n_params,):
            msg = (
                f"global_params_ has shape {self.global_params_.shape}, expected ({n_params},) for "
                f"calibrator={self.calibrator!r}"
            )
            raise ValueError(msg)
        if self.cluster_weight_.shape != (k,):
            msg = f"cluster_weight_ has shape {self.cluster_weight_.shape}, expected ({k},)"
            raise ValueError(msg)
        if self.centroids_.shape != (k, self.projection_.shape[1]) or self.params_.shape != (k, n_params):
            msg = (
                f"centroids_ {self.centroids_.shape}, params_ {self.params_.shape} do not fit n_clusters_={k}"
            )
            raise ValueError(msg)
        n_out = self.n_classes_ if self._multiclass else 1
        if self.cluster_rate_.shape != (k, n_out) or self.cluster_role_.shape != (k,):
            msg = "cluster_rate_ / cluster_role_ do not fit n_clusters_"
            raise ValueError(msg)
        if not self._multiclass and self.n_classes_ != 2:
            msg = f"n_classes_ = {self.n_classes_}: binary scores have 2 classes"
            raise ValueError(msg)
        elbow = self.elbow_
        n_candidates = self.max_clusters - self.min_clusters + 1
        if elbow is not None and not (
            isinstance(elbow, dict)
            and set(elbow) == {"k", "inertia"}
            and all(isinstance(v, list) and len(v) <= n_candidates for v in elbow.values())
            and len(elbow["k"]) == len(elbow["inertia"])
            and all(type(v) is int for v in elbow["k"])
            and all(type(v) in (int, float) and np.isfinite(v) for v in elbow["inertia"])
        ):
            msg = (
                "elbow_: expected null or {'k': [...], 'inertia': [...]}, integers and finite numbers of "
                f"equal lengths, at most {n_candidates} (min_clusters to max_clusters)"
            )
            raise ValueError(msg)
        if not np.isin(self.cluster_role_, (FITTED, CONSTANT, FALLBACK)).all():
            msg = "cluster_role_ holds an unknown role"
            raise ValueError(msg)
        if not ((self.cluster_rate_ > 0) & (self.cluster_rate_ < 1)).all():
            msg = "cluster_rate_ must lie strictly between 0 and 1"
            raise ValueError(msg)


def _partition_clusters(X: Any, model: ClusteredCalibrator) -> Any:
    """One partition's clusters as a column of its family (``cluster``), empty partitions included."""
    score, info = model._scores(X, allow_empty=True)
    xp = array_namespace(score)
    part = model.clusters(X) if score.shape[0] else np.zeros(0, dtype=np.int32)
    return wrap_output(xp.asarray(part), info, name="cluster")


__all__ = ["ClusteredCalibrator"]
