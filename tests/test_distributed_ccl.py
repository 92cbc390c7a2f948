"""ClusteredCalibrator on dask DataFrames (issue 6): one machine's clusters and maps, sums added.

The reference is ``ClusteredCalibrator.fit`` on the concatenated rows: the same number of clusters, every
row in the same cluster, centroids, maps and predictions to 1e-9 relative to ``max(|v|, 1)``. Embedding
models: gpucal's own trees (a fitted HC forest) and LightGBM (SHAP), shipped to the workers.
"""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from gpucal.ccl import ClusteredCalibrator
from gpucal.ccl.clustering import sample_rows
from gpucal.datasets import make_ctr
from gpucal.hc import HeterogeneousCalibrator

RTOL = 1e-9
N_ROWS = 3_000
FIELDS = ["region", "hour", "user_segment", "device"]


def _rows(n: int, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    frame = make_ctr(n, "heterogeneous", seed=seed)
    return frame[["score", *FIELDS]].copy(), frame["label"].to_numpy(dtype=np.float64)


@pytest.fixture(scope="module")
def data() -> tuple[pd.DataFrame, np.ndarray, np.ndarray, HeterogeneousCalibrator]:
    X_tree, y_tree = _rows(2_000, 1)
    trees = HeterogeneousCalibrator(
        mode="forest", n_trees=4, max_depth=3, min_leaf_size=40.0, categorical_cols=FIELDS
    ).fit(X_tree, y_tree)
    X, y = _rows(N_ROWS, 2)
    w = np.random.default_rng(0).random(N_ROWS) + 0.5
    return X, y, w, trees


def _dask(X: pd.DataFrame, y: np.ndarray, w: np.ndarray | None, n_parts: int) -> tuple:
    def series(v: np.ndarray) -> dd.Series:
        return dd.from_pandas(pd.Series(v, index=X.index), npartitions=n_parts)

    return dd.from_pandas(X, npartitions=n_parts), series(y), None if w is None else series(w)


def _assert_close(actual: np.ndarray, expected: np.ndarray) -> None:
    scale = np.maximum(np.abs(expected), 1.0)
    assert np.max(np.abs(actual - expected) / scale, initial=0.0) <= RTOL


def _assert_same_fit(
    two: ClusteredCalibrator, one: ClusteredCalibrator, X: pd.DataFrame, dX: dd.DataFrame
) -> None:
    assert two.n_clusters_ == one.n_clusters_ >= 3
    assert two.embedding_.to_dict() == one.embedding_.to_dict()
    _assert_close(two.projection_, one.projection_)
    _assert_close(two.centroids_, one.centroids_)
    clusters = one.clusters(X)
    np.testing.assert_array_equal(two.clusters(X), clusters)
    np.testing.assert_array_equal(two.clusters(dX).compute().to_numpy(), clusters)
    np.testing.assert_array_equal(two.cluster_role_, one.cluster_role_)
    _assert_close(two.cluster_weight_, one.cluster_weight_)
    _assert_close(two.cluster_rate_, one.cluster_rate_)
    _assert_close(two.params_, one.params_)
    _assert_close(two.global_params_, one.global_params_)
    if one.elbow_ is not None:
        assert two.elbow_["k"] == one.elbow_["k"]
        _assert_close(np.array(two.elbow_["inertia"]), np.array(one.elbow_["inertia"]))
    predicted = two.predict(dX)
    assert isinstance(predicted, dd.Series)
    _assert_close(predicted.compute().to_numpy(), np.asarray(one.predict(X)))


@pytest.mark.parametrize(
    ("params", "n_parts", "weighted"),
    [
        # One-hot leaves (wider than n_components: the SVD projection of the sample), the elbow over k.
        ({"n_clusters": "elbow", "max_clusters": 10, "n_components": 6, "max_cluster_rows": 1_000}, 4, True),
        ({"n_clusters": 5, "n_init": 2, "calibrator": "beta", "min_cluster_size": 150.0}, 4, False),
        (
            {
                "clustering": "agglomerative",
                "n_clusters": "elbow",
                "max_clusters": 8,
                "max_cluster_rows": 600,
            },
            3,
            True,
        ),
    ],
)
def test_dask_fit_with_gpucal_trees_is_the_single_machine_fit(
    client, data, params, n_parts, weighted
) -> None:  # type: ignore[no-untyped-def]
    X, y, w, trees = data
    sw = w if weighted else None
    one = ClusteredCalibrator(embedding_model=trees, **params).fit(X, y, sw)
    if "n_components" in params:  # the leaves are wider: clustered in the sample's top singular vectors
        assert one.projection_.shape[0] > one.projection_.shape[1] == params["n_components"]
    dX, dy, dw = _dask(X, y, sw, n_parts)
    two = ClusteredCalibrator(embedding_model=trees, **params).fit(dX, dy, dw)
    _assert_same_fit(two, one, X, dX)


def test_dask_fit_with_lightgbm_shap_is_the_single_machine_fit(client, data) -> None:  # type: ignore[no-untyped-def]
    lgb = pytest.importorskip("lightgbm")
    X, y, _, _ = data
    features = X[FIELDS].astype(np.float64)
    booster = lgb.LGBMClassifier(n_estimators=8, num_leaves=6, verbose=-1).fit(features, y).booster_
    frame = features.assign(score=X["score"])
    params = {"embedding_model": booster, "embedding": "shap", "n_clusters": 4}
    one = ClusteredCalibrator(**params).fit(frame, y)
    dX, dy, _ = _dask(frame, y, None, 2)
    _assert_same_fit(ClusteredCalibrator(**params).fit(dX, dy), one, frame, dX)


def test_the_clustering_sample_does_not_depend_on_the_partitioning() -> None:
    rows = np.arange(50_000)
    whole = sample_rows(rows, 50_000, 2_000, seed=3)
    pieces = np.concatenate([sample_rows(part, 50_000, 2_000, seed=3) for part in np.array_split(rows, 7)])
    np.testing.assert_array_equal(pieces, whole)
    assert 1_800 < whole.sum() < 2_200  # about max_rows rows, a Bernoulli sample
    assert sample_rows(rows[:100], 100, 2_000, seed=3).all()  # fewer rows than max_rows: all of them


def test_dask_fit_refuses_what_is_not_sums(client, data) -> None:  # type: ignore[no-untyped-def]
    X, y, _, trees = data
    dX, dy, _ = _dask(X, y, None, 2)
    with pytest.raises(NotImplementedError, match="calibrator='dirichlet' has no distributed fit"):
        ClusteredCalibrator(embedding_model=trees, calibrator="dirichlet", n_clusters=3).fit(dX, dy)
    probs = X.assign(p0=1.0 - X["score"], p1=X["score"])
    multi = dd.from_pandas(probs, npartitions=2)
    with pytest.raises(NotImplementedError, match="multi-class scores"):
        ClusteredCalibrator(
            embedding_model=trees, score_col=["p0", "p1"], calibrator="dirichlet", n_clusters=3
        ).fit(multi, dy)
    with pytest.raises(TypeError, match="y: not dask collections"):
        ClusteredCalibrator(embedding_model=trees, n_clusters=3).fit(dX, y)
    with pytest.raises(ValueError, match="no positive labels"):
        ClusteredCalibrator(embedding_model=trees, n_clusters=3).fit(dX, dy * 0.0)
