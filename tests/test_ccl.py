"""Clustered calibration (CCL, issue 5): embeddings, clusters, per-cluster maps, CECE, the rejection curve.

The hand-checkable cases use an embedding model whose "leaves" are a column of the frame, so the clusters
are known in advance and each cluster's map can be compared with scikit-learn fitted on its rows alone.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import adjusted_rand_score

import gpucal
from gpucal.calibrators.dirichlet import DirichletCalibrator
from gpucal.ccl import ClusteredCalibrator
from gpucal.ccl.clustering import (
    LLOYD_MAX_ITER,
    LLOYD_TOL,
    _ward,
    elbow_candidates,
    elbow_k,
    fit_clusters,
    kmeans_plus_plus,
    lloyd,
    lloyd_sums,
    lloyd_tolerance,
)
from gpucal.ccl.model import CONSTANT, FALLBACK, FITTED
from gpucal.metrics import cece
from gpucal.metrics.rejection import rejection_curve

xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")


class ColumnLeaves:
    """A one-tree "model" whose leaf is the frame's ``leaf`` column: the clusters are known in advance."""

    def leaves(self, X):
        return np.asarray(X["leaf"], dtype=np.int32)[:, None]


def _logit(p):
    p = np.clip(np.asarray(p, dtype=float), np.finfo(float).eps, 1 - np.finfo(float).eps)
    return np.log(p) - np.log1p(-p)


def _sklearn_platt(score, y, w=None):
    """Unpenalised logistic regression on logit(score): the reference for a cluster's Platt map."""
    model = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12, max_iter=200)
    model.fit(_logit(score)[:, None], y, sample_weight=w)
    return float(model.coef_[0, 0]), float(model.intercept_[0])


def _groups(sizes, slopes, shifts, seed=0):
    """Rows in groups (leaf = group); group g's labels follow sigmoid(slope_g * logit(score) + shift_g)."""
    rng = np.random.default_rng(seed)
    leaf = np.repeat(np.arange(len(sizes)), sizes)
    score = rng.uniform(0.02, 0.98, leaf.shape[0])
    eta = np.asarray(slopes)[leaf] * _logit(score) + np.asarray(shifts)[leaf]
    y = (rng.random(leaf.shape[0]) < 1 / (1 + np.exp(-eta))).astype(float)
    return pd.DataFrame({"score": score, "leaf": leaf}), y


def _same_partition(labels, groups):
    """Each group is one cluster and each cluster one group (the numbering may differ)."""
    pairs = set(zip(groups.tolist(), labels.tolist(), strict=True))
    return len(pairs) == len(set(groups.tolist())) == len(set(labels.tolist()))


# --------------------------------------------------------------------------------------------------
# Parts and per-part parameters on hand-checkable data


def test_clusters_and_platt_per_cluster_match_sklearn():
    X, y = _groups([400, 300, 500], slopes=[0.5, 1.5, 1.0], shifts=[-1.0, 0.5, 1.0])
    w = np.random.default_rng(1).uniform(0.5, 2.0, y.shape[0])
    cal = ClusteredCalibrator(embedding_model=ColumnLeaves(), n_clusters=3, min_cluster_size=10)
    cal.fit(X, y, sample_weight=w)
    labels = cal.clusters(X)
    assert _same_partition(labels, X["leaf"].to_numpy())
    assert cal.cluster_role_.tolist() == [FITTED] * 3
    for j in range(3):
        rows = labels == j
        np.testing.assert_allclose(
            cal.params_[j], _sklearn_platt(X["score"][rows], y[rows], w[rows]), atol=1e-6
        )
        np.testing.assert_allclose(cal.cluster_weight_[j], w[rows].sum())
    # The prediction of a row is its cluster's map (Eq. 2).
    a, b = cal.params_[labels].T
    expected = 1 / (1 + np.exp(-(a * _logit(X["score"].to_numpy()) + b)))
    np.testing.assert_allclose(cal.predict(X), expected, rtol=1e-12)
    # The global map (the fallback) is the same fit on every row.
    np.testing.assert_allclose(cal.global_params_, _sklearn_platt(X["score"], y, w), atol=1e-6)


def test_integer_weights_equal_repeated_rows():
    X, y = _groups([200, 250], slopes=[0.7, 1.3], shifts=[0.3, -0.4], seed=2)
    counts = np.random.default_rng(3).integers(1, 4, y.shape[0])
    params = dict(embedding_model=ColumnLeaves(), n_clusters=2, min_cluster_size=5)
    weighted = ClusteredCalibrator(**params).fit(X, y, sample_weight=counts.astype(float))
    repeated = ClusteredCalibrator(**params).fit(X.loc[X.index.repeat(counts)], np.repeat(y, counts))
    np.testing.assert_allclose(weighted.params_, repeated.params_, atol=1e-9)


@pytest.mark.parametrize("calibrator", ["temperature", "beta"])
def test_other_local_maps_match_their_calibrators_per_cluster(calibrator):
    X, y = _groups([500, 400], slopes=[0.6, 1.4], shifts=[0.0, 0.0], seed=4)
    cal = ClusteredCalibrator(embedding_model=ColumnLeaves(), n_clusters=2, calibrator=calibrator)
    cal.fit(X, y)
    labels = cal.clusters(X)
    for j in range(2):
        rows = labels == j
        one = gpucal.make_calibrator(calibrator).fit(X["score"][rows].to_numpy(), y[rows])
        reference = one.predict(X["score"][rows].to_numpy())
        np.testing.assert_allclose(cal.predict(X)[rows], reference, atol=1e-6)


def test_homogeneous_clusters_get_the_smoothed_rate():
    X, y = _groups([300, 200, 250], slopes=[1.0, 1.0, 1.0], shifts=[0.0, 0.0, 0.0], seed=5)
    y[X["leaf"] == 1] = 0.0  # all negatives
    flat = (X["leaf"] == 2).to_numpy()
    X.loc[flat, "score"] = 0.3  # mixed labels, but every score equal: no slope to fit
    cal = ClusteredCalibrator(embedding_model=ColumnLeaves(), n_clusters=3).fit(X, y)
    labels = cal.clusters(X)
    out = cal.predict(X)
    role = {g: int(cal.cluster_role_[labels[X["leaf"] == g][0]]) for g in range(3)}
    assert role == {0: FITTED, 1: CONSTANT, 2: CONSTANT}
    # Laplace's rule: (positives + 1) / (rows + 2), never exactly 0 or 1.
    np.testing.assert_allclose(out[X["leaf"] == 1], 1 / 202)
    np.testing.assert_allclose(out[flat], (y[flat].sum() + 1) / (flat.sum() + 2))
    # The fitted cluster's map is not disturbed by the constant ones.
    rows = (X["leaf"] == 0).to_numpy()
    np.testing.assert_allclose(
        cal.params_[labels[rows][0]], _sklearn_platt(X["score"][rows], y[rows]), atol=1e-6
    )


def test_tiny_cluster_falls_back_to_the_global_map():
    X, y = _groups([400, 400, 6], slopes=[0.8, 1.2, 1.0], shifts=[0.5, -0.5, 0.0], seed=6)
    y[X["leaf"] == 2] = 1.0  # homogeneous too, but too light to trust: the fallback wins
    cal = ClusteredCalibrator(embedding_model=ColumnLeaves(), n_clusters=3, min_cluster_size=10).fit(X, y)
    labels = cal.clusters(X)
    tiny = labels[(X["leaf"] == 2).to_numpy()][0]
    assert cal.cluster_role_[tiny] == FALLBACK
    np.testing.assert_allclose(cal.params_[tiny], cal.global_params_)
    np.testing.assert_allclose(cal.global_params_, _sklearn_platt(X["score"], y), atol=1e-6)


def test_dirichlet_per_cluster_multiclass():
    rng = np.random.default_rng(7)
    leaf = np.repeat([0, 1, 2], [300, 300, 120])
    probs = rng.dirichlet([2.0, 2.0, 2.0], leaf.shape[0])
    labels = np.array([rng.choice(3, p=row) for row in probs])
    labels[leaf == 2] = 1  # one class only: a constant
    X = pd.DataFrame({"p0": probs[:, 0], "p1": probs[:, 1], "p2": probs[:, 2], "leaf": leaf})
    cal = ClusteredCalibrator(
        embedding_model=ColumnLeaves(), n_clusters=3, calibrator="dirichlet", score_col=["p0", "p1", "p2"]
    ).fit(X, labels)
    part = cal.clusters(X)
    out = cal.predict(X)
    assert out.shape == (720, 3)
    for g in (0, 1):
        rows = leaf == g
        reference = DirichletCalibrator().fit(probs[rows], labels[rows]).predict(probs[rows])
        np.testing.assert_allclose(out[rows], reference, atol=1e-9)
        assert cal.cluster_role_[part[rows][0]] == FITTED
    assert cal.cluster_role_[part[leaf == 2][0]] == CONSTANT
    np.testing.assert_allclose(out[leaf == 2], np.tile([1 / 123, 121 / 123, 1 / 123], (120, 1)))


def test_binary_dirichlet_is_per_cluster_dirichlet_on_two_columns():
    X, y = _groups([300, 350], slopes=[0.7, 1.3], shifts=[0.4, -0.2], seed=8)
    cal = ClusteredCalibrator(embedding_model=ColumnLeaves(), n_clusters=2, calibrator="dirichlet").fit(X, y)
    part = cal.clusters(X)
    for j in range(2):
        rows = part == j
        two = np.stack([1 - X["score"][rows], X["score"][rows]], axis=1)
        ref = DirichletCalibrator().fit(two, y[rows].astype(int)).predict(two)[:, 1]
        np.testing.assert_allclose(cal.predict(X)[rows], ref, atol=1e-9)


# --------------------------------------------------------------------------------------------------
# Clustering


def _blobs(k=5, n_per=120, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [30.0, 0.0], [0.0, 30.0], [30.0, 30.0], [15.0, 60.0]])[:k]
    return np.concatenate([c + rng.normal(size=(n_per, 2)) for c in centres]), np.repeat(np.arange(k), n_per)


@pytest.mark.parametrize("method", ["kmeans", "agglomerative"])
def test_elbow_picks_the_planted_number_of_clusters(method):
    Z, truth = _blobs(k=5)
    fitted = fit_clusters(
        Z, method, "elbow", k_range=(2, 12), n_init=3, max_rows=10_000, n_components=32, seed=0
    )
    assert fitted.centroids.shape == (5, 2)
    assert fitted.ks.tolist() == list(range(2, 13))
    assert np.all(np.diff(fitted.inertia)[:3] < 0)
    from gpucal.ccl.clustering import assign_clusters

    assert adjusted_rand_score(truth, assign_clusters(Z, fitted.centroids)) == 1.0


def test_elbow_rule_is_the_knee_below_the_chord():
    ks = np.arange(1, 8)
    assert elbow_k(ks, np.array([100.0, 60, 20, 15, 12, 10, 9])) == 3
    assert elbow_k(ks, np.full(7, 5.0)) == 1  # flat: nothing gained by more clusters
    assert elbow_candidates(5, 100)[[0, -1]].tolist() == [5, 100]
    assert len(elbow_candidates(5, 100)) <= 18


def test_ward_matches_sklearn_agglomerative():
    from sklearn.cluster import AgglomerativeClustering

    Z, _ = _blobs(k=4, n_per=50, seed=3)
    Z = Z + np.random.default_rng(0).normal(scale=4.0, size=Z.shape)  # overlapping: a real tree cut
    k, centroids, inertia = _ward(Z, np.array([4]))
    theirs = AgglomerativeClustering(n_clusters=4, linkage="ward").fit_predict(Z)
    ours = _ward_labels(Z, 4)
    assert adjusted_rand_score(theirs, ours) == 1.0
    # S(k) read off the merge heights equals the within-cluster sum of squares of the cut.
    sse = sum(((Z[ours == c] - Z[ours == c].mean(axis=0)) ** 2).sum() for c in range(4))
    np.testing.assert_allclose(inertia[0], sse, rtol=1e-9)
    assert k == 4
    assert centroids.shape == (4, 2)


def _ward_labels(Z, k):
    from scipy.cluster.hierarchy import fcluster, ward

    return fcluster(ward(Z), t=k, criterion="maxclust") - 1


def test_too_many_clusters_for_the_distinct_rows():
    X, y = _groups([100, 100], slopes=[1, 1], shifts=[0, 0])
    with pytest.raises(ValueError, match="only 2 distinct rows"):
        ClusteredCalibrator(embedding_model=ColumnLeaves(), n_clusters=3).fit(X, y)


def test_lloyd_matches_sklearn_kmeans_from_the_same_start():
    from sklearn.cluster import KMeans

    Z, _ = _blobs(k=4, n_per=80, seed=2)
    Z = Z + np.random.default_rng(1).normal(scale=8.0, size=Z.shape)  # overlapping: several steps
    w = np.random.default_rng(3).random(Z.shape[0]) + 0.5
    start = kmeans_plus_plus(Z, w, 4, seed=0)
    ours, inertia = lloyd(lambda c, with_inertia: lloyd_sums(Z, w, c, inertia=with_inertia), start)
    theirs = KMeans(n_clusters=4, init=start, n_init=1, tol=0.0, algorithm="lloyd").fit(Z, sample_weight=w)
    np.testing.assert_allclose(ours, theirs.cluster_centers_, rtol=1e-10)
    np.testing.assert_allclose(inertia, theirs.inertia_, rtol=1e-10)


def test_lloyd_stops_at_sklearn_kmeans_tolerance():
    from sklearn.cluster import KMeans

    Z = np.random.default_rng(4).normal(size=(3000, 3))  # one blob: many slow steps before convergence
    w = np.ones(Z.shape[0])  # scikit-learn's tolerance reads the variance without weights
    start = kmeans_plus_plus(Z, w, 8, seed=0)
    steps = []

    def sums(c, with_inertia):
        steps.append(with_inertia)
        return lloyd_sums(Z, w, c, inertia=with_inertia)

    ours, inertia = lloyd(sums, start, lloyd_tolerance(Z, w))
    theirs = KMeans(n_clusters=8, init=start, n_init=1, tol=LLOYD_TOL, algorithm="lloyd").fit(Z)
    assert len(steps) - 1 == theirs.n_iter_ < LLOYD_MAX_ITER  # stopped by the tolerance, not the limit
    exact = lloyd(lambda c, with_inertia: lloyd_sums(Z, w, c, inertia=with_inertia), start)[0]
    assert not np.allclose(ours, exact)
    np.testing.assert_allclose(ours, theirs.cluster_centers_, rtol=1e-10)
    np.testing.assert_allclose(inertia, theirs.inertia_, rtol=1e-10)


# --------------------------------------------------------------------------------------------------
# Embeddings from XGBoost, LightGBM and gpucal's own trees


@pytest.fixture(scope="module")
def tabular():
    rng = np.random.default_rng(11)
    n = 1600
    X = pd.DataFrame(rng.normal(size=(n, 4)), columns=["a", "b", "c", "d"])
    eta = 1.5 * X["a"] + X["b"] * X["c"]
    y = (rng.random(n) < 1 / (1 + np.exp(-eta.to_numpy()))).astype(int)
    return X, y


def _models(tabular):
    X, y = tabular
    fit = X.iloc[:800], y[:800]
    return {
        "xgboost": xgb.XGBClassifier(n_estimators=6, max_depth=3, n_jobs=1).fit(*fit),
        "lightgbm": lgb.LGBMClassifier(n_estimators=6, num_leaves=6, verbose=-1, n_jobs=1).fit(*fit),
    }


@pytest.fixture(scope="module")
def tree_models(tabular):
    return _models(tabular)


def _calibration_frame(tabular, model):
    X, y = tabular
    frame = X.iloc[800:].reset_index(drop=True)
    frame["score"] = model.predict_proba(X.iloc[800:])[:, 1]
    return frame, y[800:]


# gpucal computes tree SHAP in float64; XGBoost in float32 (about 1e-7 of the margin apart), LightGBM in
# float64 (the same numbers up to the order of additions).
SHAP_TOLERANCE = {"xgboost": {"rtol": 1e-5, "atol": 1e-6}, "lightgbm": {"rtol": 1e-9, "atol": 1e-12}}


def _raw_outputs(library, model, X, what):
    if library == "xgboost":
        matrix = xgb.DMatrix(X)
        return model.get_booster().predict(matrix, pred_leaf=what == "leaves", pred_contribs=what == "shap")
    return model.booster_.predict(X, pred_leaf=what == "leaves", pred_contrib=what == "shap")


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_leaf_and_shap_embeddings(library, tabular, tree_models):
    model = tree_models[library]
    frame, y = _calibration_frame(tabular, model)
    features = frame[["a", "b", "c", "d"]]
    cal = ClusteredCalibrator(embedding_model=model, n_clusters=4, n_components=1000).fit(frame, y)
    onehot = cal.embedding_.transform(frame).toarray()
    leaves = _raw_outputs(library, model, features, "leaves").astype(int)
    assert onehot.shape[0] == 800
    assert (onehot.sum(axis=1) == leaves.shape[1]).all()
    # Two rows share a one-hot row exactly when they share every leaf.
    _, by_leaves = np.unique(leaves, axis=0, return_inverse=True)
    _, by_onehot = np.unique(onehot, axis=0, return_inverse=True)
    assert adjusted_rand_score(by_leaves.ravel(), by_onehot.ravel()) == 1.0
    index = ClusteredCalibrator(embedding_model=model, n_clusters=4, leaf_encoding="index").fit(frame, y)
    np.testing.assert_array_equal(index.embedding_.transform(frame), leaves)

    shap = ClusteredCalibrator(embedding_model=model, embedding="shap", n_clusters=4).fit(frame, y)
    contribs = _raw_outputs(library, model, features, "shap")
    np.testing.assert_allclose(shap.embedding_.transform(frame), contribs[:, :-1], **SHAP_TOLERANCE[library])
    # Without a projection (4 features), the clusters are k-means of the SHAP values themselves.
    np.testing.assert_array_equal(shap.projection_, np.eye(4))
    out = shap.predict(frame)
    assert out.shape == (800,)
    assert ((out > 0) & (out < 1)).all()


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_multiclass_shap_drops_every_bias_column(library, tabular):
    X, _ = tabular
    labels = np.digitize(X["a"] + X["b"], [-0.5, 0.5])
    if library == "xgboost":
        model = xgb.XGBClassifier(n_estimators=3, max_depth=2, n_jobs=1).fit(X, labels)
    else:
        model = lgb.LGBMClassifier(n_estimators=3, num_leaves=4, verbose=-1, n_jobs=1).fit(X, labels)
    from gpucal.ccl.embeddings import make_embedding

    embedding = make_embedding(model, "shap", "onehot", None, [])
    shap = embedding.fit_transform(X)
    contribs = _raw_outputs(library, model, X, "shap").reshape(len(X), 3, 5)
    np.testing.assert_allclose(shap, contribs[:, :, :4].reshape(len(X), 12), **SHAP_TOLERANCE[library])


def _mixed_frame(n=600, seed=21):
    """Numbers with NaN and exact zeros, and a pandas category column with missing values."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "a": rng.normal(size=n),
            "b": rng.normal(size=n),
            "c": pd.Categorical(rng.choice(["v", "w", "x", "y", "z"], n)),
            "d": rng.normal(size=n),
        }
    )
    X.loc[::7, "a"] = np.nan
    X.loc[::11, "c"] = np.nan
    X.loc[::5, "d"] = 0.0
    margin = X["a"].fillna(0) + (X["c"] == "x") + X["b"] * X["d"]
    y = (margin.to_numpy() > 0.3).astype(int)
    classes = np.digitize(X["b"] + X["a"].fillna(0), [-0.5, 0.5])
    return X, y, classes


def _library_models():
    X, y, classes = _mixed_frame()
    xgb_params = {"enable_categorical": True, "tree_method": "hist", "n_jobs": 1}
    lgb_params = {"verbose": -1, "n_jobs": 1, "min_data_per_group": 5, "cat_smooth": 1.0}
    return (
        {
            "xgboost-partition": xgb.XGBClassifier(
                n_estimators=5, max_depth=4, max_cat_to_onehot=1, **xgb_params
            ),
            "xgboost-onehot": xgb.XGBClassifier(
                n_estimators=4, max_depth=3, max_cat_to_onehot=8, **xgb_params
            ),
            "xgboost-multiclass": (xgb.XGBClassifier(n_estimators=3, max_depth=3, **xgb_params), classes),
            "lightgbm": lgb.LGBMClassifier(n_estimators=5, num_leaves=8, **lgb_params),
            "lightgbm-zero-missing": lgb.LGBMClassifier(
                n_estimators=5, num_leaves=8, zero_as_missing=True, **lgb_params
            ),
            "lightgbm-multiclass": (lgb.LGBMClassifier(n_estimators=3, num_leaves=5, **lgb_params), classes),
        },
        X,
        y,
    )


@pytest.mark.parametrize(
    "name",
    [
        "xgboost-partition",
        "xgboost-onehot",
        "xgboost-multiclass",
        "lightgbm",
        "lightgbm-zero-missing",
        "lightgbm-multiclass",
    ],
)
def test_tree_tables_give_the_libraries_leaves_and_shap(name):
    """Issue 18: gpucal's own tables and kernels reproduce pred_leaf and pred_contrib(s) of each library."""
    from gpucal.ccl.embeddings import make_embedding

    models, X, y = _library_models()
    spec = models[name]
    model, labels = spec if isinstance(spec, tuple) else (spec, y)
    model.fit(X, labels)
    library = name.split("-")[0]
    n = len(X)
    if library == "xgboost":
        matrix = xgb.DMatrix(X, enable_categorical=True)
        booster = model.get_booster()
        leaves = booster.predict(matrix, pred_leaf=True)
        contribs = booster.predict(matrix, pred_contribs=True)
    else:
        leaves = model.booster_.predict(X, pred_leaf=True)
        contribs = model.booster_.predict(X, pred_contrib=True)
    n_outputs = 3 if name.endswith("multiclass") else 1
    contribs = np.asarray(contribs).reshape(n, n_outputs, 5)[:, :, :4].reshape(n, -1)
    embedding = make_embedding(model, "leaves", "index", None, [])
    np.testing.assert_array_equal(embedding.transform(X), np.asarray(leaves).reshape(n, -1))
    shap = make_embedding(model, "shap", "onehot", None, []).transform(X)
    np.testing.assert_allclose(shap, contribs, **SHAP_TOLERANCE[library])


def test_lightgbm_numeric_categories_truncate_as_lightgbm_does():
    """A number in a LightGBM categorical column is cast to a C int: -0.5 is category 0, not negative."""
    from gpucal.ccl.embeddings import make_embedding

    rng = np.random.default_rng(0)
    n = 3000
    X = pd.DataFrame({"c": rng.integers(0, 6, n).astype(float), "x": rng.normal(size=n)})
    y = (X["c"].isin([0, 2, 5]) ^ (X["x"] > 0.3)).astype(int)
    model = lgb.LGBMClassifier(n_estimators=5, num_leaves=6, verbose=-1, n_jobs=1, min_data_per_group=5)
    model.fit(X, y, categorical_feature=["c"])
    probe = [np.nan, -0.5, -0.99, -1.0, -0.0, 0.0, 0.5, 2.7, 5.99, 6.0, 2.0**31, -np.inf, np.inf]
    rows = pd.DataFrame({"c": np.repeat(probe, 2), "x": np.tile([0.0, 1.0], len(probe))})
    leaves = make_embedding(model, "leaves", "index", None, []).transform(rows)
    np.testing.assert_array_equal(leaves, model.booster_.predict(rows, pred_leaf=True))


def test_feature_cols_must_be_the_models_own_and_integer_labels_are_read():
    """The model reads its columns by position: feature_cols in another order than the model's names is
    refused. A frame of integer labels (a numpy-trained model's) is read by the labels' text."""
    rng = np.random.default_rng(1)
    values = rng.normal(size=(1500, 3))
    y = (values[:, 0] + values[:, 1] > 0).astype(int)
    named = pd.DataFrame(values, columns=["a", "b", "c"])
    model = lgb.LGBMClassifier(n_estimators=4, num_leaves=4, verbose=-1, n_jobs=1).fit(named, y)
    frame = named.assign(score=model.predict_proba(named)[:, 1])
    with pytest.raises(ValueError, match=r"in its order: \['a', 'b', 'c'\]"):
        ClusteredCalibrator(embedding_model=model, n_clusters=3, feature_cols=["c", "b", "a"]).fit(frame, y)
    plain = lgb.LGBMClassifier(n_estimators=4, num_leaves=4, verbose=-1, n_jobs=1).fit(values, y)
    numbered = pd.DataFrame(values).assign(score=plain.predict_proba(values)[:, 1])
    leaves = plain.booster_.predict(values, pred_leaf=True)
    for features in (None, [0, 1, 2]):
        fitted = ClusteredCalibrator(
            embedding_model=plain, n_clusters=3, leaf_encoding="index", feature_cols=features
        ).fit(numbered, y)
        np.testing.assert_array_equal(fitted.embedding_.transform(numbered), leaves)


def test_seeds_past_scikit_learns_range_fit(tabular, tree_models):
    """The seed parameter takes any non-negative int; scikit-learn's projection takes it modulo 2**32."""
    frame, y = _calibration_frame(tabular, tree_models["lightgbm"])
    model = tree_models["lightgbm"]
    big = ClusteredCalibrator(embedding_model=model, n_clusters=3, n_components=2, seed=2**40).fit(frame, y)
    small = ClusteredCalibrator(embedding_model=model, n_clusters=3, n_components=2, seed=0).fit(frame, y)
    np.testing.assert_array_equal(big.projection_, small.projection_)


def test_linear_trees_give_leaves_but_no_shap():
    from gpucal.ccl.embeddings import make_embedding

    X, y, _ = _mixed_frame()
    features = X[["a", "b", "d"]]
    model = lgb.LGBMClassifier(n_estimators=2, num_leaves=4, linear_tree=True, verbose=-1, n_jobs=1)
    model.fit(features, y)
    leaves = make_embedding(model, "leaves", "index", None, []).transform(features)
    np.testing.assert_array_equal(leaves, model.booster_.predict(features, pred_leaf=True))
    with pytest.raises(ValueError, match="linear trees has no tree SHAP"):
        make_embedding(model, "shap", "onehot", None, [])


def test_category_column_given_as_strings_names_the_column_and_the_fix():
    """Issue 18 (data): a LightGBM model trained on a category column, handed strings."""
    models, X, y = _library_models()
    model = models["lightgbm"].fit(X, y)
    frame = X.copy()
    frame["score"] = model.predict_proba(X)[:, 1]
    cal = ClusteredCalibrator(embedding_model=model, n_clusters=3).fit(frame, y)
    as_strings = frame.assign(c=frame["c"].astype(str))
    fix = r"X\['c'\] = X\['c'\]\.astype\(pandas\.CategoricalDtype\(\['v', 'w', 'x', 'y', 'z'\]\)\)"
    with pytest.raises(ValueError, match=rf"column 'c' has dtype (object|str).*'category' column.*{fix}"):
        cal.predict(as_strings)
    with pytest.raises(ValueError, match=r"column 'c' has dtype (object|str)"):
        ClusteredCalibrator(embedding_model=model, n_clusters=3).fit(as_strings, y)
    # Categories in another order, or a subset, are coded by the training categories.
    reordered = frame.assign(c=frame["c"].cat.reorder_categories(["z", "y", "x", "w", "v"]))
    np.testing.assert_array_equal(cal.predict(reordered), cal.predict(frame))
    numeric = ClusteredCalibrator(embedding_model=models["lightgbm"].fit(X[["a", "b", "d"]], y), n_clusters=3)
    with pytest.raises(ValueError, match=r"column 'a' is a pandas 'category' column"):
        numeric.fit(frame.assign(a=pd.Categorical(frame["a"].fillna(0).round())), y)


def _mbct_frame(tabular, n=800):
    """Scores blind to ``b * c``: MBCT's trees split on it, so their leaves are real segments."""
    X, y = tabular
    frame = X.iloc[:n].copy()
    frame["score"] = np.clip(1 / (1 + np.exp(-1.2 * frame["a"])), 0.01, 0.99)
    mbct = gpucal.MBCT(max_trees=2, max_depth=2, n_bins=4, min_node_size=40.0, validation_fraction=0.0)
    return frame, np.asarray(y[:n]), mbct.fit(frame, y[:n])


def test_gpucal_trees_as_the_embedding(tabular):
    frame, y, mbct = _mbct_frame(tabular)
    cal = ClusteredCalibrator(embedding_model=mbct, n_clusters=4).fit(frame, y)
    leaves = np.asarray(mbct.leaves(frame))
    codes = np.unique(leaves, axis=0, return_inverse=True)[1].ravel()
    assert codes.max() >= 4
    # Rows in the same leaves of every tree share their embedding, hence their cluster.
    part = cal.clusters(frame)
    for code in np.unique(codes):
        assert len(set(part[codes == code].tolist())) == 1


# --------------------------------------------------------------------------------------------------
# CECE and the rejection curve against plain loops


def test_cece_over_the_fitted_clusters_matches_a_loop(tabular, tree_models):
    frame, y = _calibration_frame(tabular, tree_models["lightgbm"])
    y = np.asarray(y, dtype=float)
    w = np.random.default_rng(12).uniform(0.2, 3.0, y.shape[0])
    cal = ClusteredCalibrator(embedding_model=tree_models["lightgbm"], n_clusters=5, calibrator="temperature")
    cal.fit(frame, y, sample_weight=w)
    bins = cal.clusters(frame)
    p = cal.predict(frame).to_numpy()
    gaps, masses = [], []
    for c in np.unique(bins):
        rows = bins == c
        gaps.append(
            abs(np.sum(w[rows] * y[rows]) / w[rows].sum() - np.sum(w[rows] * p[rows]) / w[rows].sum())
        )
        masses.append(w[rows].sum())
    gaps, share = np.array(gaps), np.array(masses) / w.sum()
    assert gaps.max() > 1e-3  # temperature has no intercept: the clusters keep a bias for CECE to see
    np.testing.assert_allclose(cece(y, p, bins, sample_weight=w), np.sum(share * gaps), rtol=1e-12)
    np.testing.assert_allclose(cece(y, p, bins, sample_weight=w, metric="mce"), gaps.max(), rtol=1e-12)
    ada = np.sqrt(np.sum(share * gaps**2))
    np.testing.assert_allclose(cece(y, p, bins, sample_weight=w, metric="ada_ece"), ada, rtol=1e-12)


def test_platt_per_cluster_zeroes_cece_on_its_own_rows(tabular, tree_models):
    """The intercept's score equation: a converged Platt fit matches each cluster's mean label."""
    frame, y = _calibration_frame(tabular, tree_models["lightgbm"])
    w = np.random.default_rng(12).uniform(0.2, 3.0, len(y))
    cal = ClusteredCalibrator(embedding_model=tree_models["lightgbm"], n_clusters=5, min_cluster_size=100.0)
    cal.fit(frame, y, sample_weight=w)
    fitted = np.isin(cal.clusters(frame), np.flatnonzero(cal.cluster_role_ == FITTED))
    assert fitted.mean() > 0.8
    p, y = cal.predict(frame).to_numpy()[fitted], np.asarray(y)[fitted]
    assert cece(y, p, cal.clusters(frame)[fitted], sample_weight=w[fitted]) < 1e-9


def test_ill_conditioned_cluster_still_gets_its_likelihood_maximum():
    """Two close distinct scores (common in leaf clusters): the slope is steep, 33.7, and still exact."""
    X, y = _groups([300], slopes=[1.0], shifts=[0.0], seed=9)
    hard = pd.DataFrame({"score": np.repeat([0.7, 0.72], [6, 34]), "leaf": 1})
    y_hard = np.ones(40)
    y_hard[[0, 6]] = 0.0
    w = np.ones(340)
    w[[300, 306]] = [2.4, 0.6]
    X, y = pd.concat([X, hard], ignore_index=True), np.concatenate([y, y_hard])
    cal = ClusteredCalibrator(embedding_model=ColumnLeaves(), n_clusters=2, min_cluster_size=10)
    cal.fit(X, y, sample_weight=w)
    j = cal.clusters(X)[-1]
    expected = _sklearn_platt(hard["score"], y_hard, w[300:])
    np.testing.assert_allclose(cal.params_[j], expected, rtol=1e-6)
    assert expected[0] > 30


def test_rejection_curve_matches_a_loop():
    rng = np.random.default_rng(13)
    p = rng.uniform(size=500)
    y = (rng.random(500) < p).astype(float)
    y[:20] = 0.3  # soft labels count as that fraction of an error
    w = rng.uniform(0.0, 2.0, 500)
    thresholds = [0.5, 0.6, 0.75, 0.9, 0.99, 1.0]
    curve = rejection_curve(y, p, thresholds=thresholds, sample_weight=w)
    for row, t in zip(curve.itertuples(), thresholds, strict=True):
        accepted = np.maximum(p, 1 - p) >= t
        error = np.where(p >= 0.5, 1 - y, y)
        assert row.rows == accepted.sum()
        np.testing.assert_allclose(row.accepted, w[accepted].sum() / w.sum(), rtol=1e-12)
        if w[accepted].sum() > 0:
            np.testing.assert_allclose(
                row.error_rate, np.sum(w * error * accepted) / w[accepted].sum(), rtol=1e-12
            )
        else:
            assert np.isnan(row.error_rate)
    matrix = rng.dirichlet([1, 1, 1], 300)
    labels = rng.integers(0, 3, 300)
    curve = rejection_curve(labels, matrix, thresholds=[0.0, 0.5])
    top = matrix.max(axis=1)
    wrong = matrix.argmax(axis=1) != labels
    np.testing.assert_allclose(curve["error_rate"], [wrong.mean(), wrong[top >= 0.5].mean()])


def test_rejection_curve_rejects_bad_thresholds():
    with pytest.raises(ValueError, match="thresholds"):
        rejection_curve([0, 1], [0.2, 0.7], thresholds=[0.5, 1.5])


def test_rejection_curve_checks_a_probability_matrix_as_it_checks_scores():
    """NaN or out-of-range probabilities, zero weights, no rows and misaligned indexes are refused on
    the matrix path as on the binary one, not turned into a table or a NaN."""
    matrix = np.array([[0.2, 0.8], [0.6, 0.4], [0.5, 0.5]])
    labels = np.array([1, 0, 1])
    for bad in (np.nan, -0.1, 1.5):
        corrupt = matrix.copy()
        corrupt[1, 0] = bad
        with pytest.raises(ValueError, match="row 1, column 0"):
            rejection_curve(labels, corrupt)
    with pytest.raises(ValueError, match="all weights are zero"):
        rejection_curve(labels, matrix, sample_weight=np.zeros(3))
    with pytest.raises(ValueError, match="no rows"):
        rejection_curve(np.array([], dtype=int), np.empty((0, 2)))
    frame = pd.DataFrame(matrix, index=[5, 6, 7])
    with pytest.raises(ValueError, match="different indexes"):
        rejection_curve(pd.Series(labels, index=[7, 6, 5]), frame)


# --------------------------------------------------------------------------------------------------
# Saving, cloning, bad input


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
@pytest.mark.parametrize("embedding", ["leaves", "shap"])
def test_save_load_round_trip(library, embedding, tabular, tree_models, tmp_path):
    model = tree_models[library]
    frame, y = _calibration_frame(tabular, model)
    calibrator = "dirichlet" if library == "xgboost" else "beta"
    cal = ClusteredCalibrator(embedding_model=model, embedding=embedding, n_clusters=4, calibrator=calibrator)
    cal.fit(frame, y)
    cal.save(tmp_path / "ccl.json")
    loaded = gpucal.load(tmp_path / "ccl.json")
    assert loaded.embedding_model is None  # the model travels in the state, as tree tables
    np.testing.assert_array_equal(loaded.predict(frame), cal.predict(frame))
    np.testing.assert_array_equal(loaded.clusters(frame), cal.clusters(frame))


def test_multiclass_save_load(tabular, tmp_path):
    X, _ = tabular
    labels = np.digitize(X["a"] + X["b"], [-0.5, 0.5])
    model = xgb.XGBClassifier(n_estimators=4, max_depth=2, n_jobs=1).fit(X.iloc[:800], labels[:800])
    frame = X.iloc[800:].reset_index(drop=True)
    probs = model.predict_proba(X.iloc[800:])
    frame[["p0", "p1", "p2"]] = probs / probs.sum(axis=1, keepdims=True)
    cal = ClusteredCalibrator(
        embedding_model=model,
        embedding="shap",
        n_clusters=3,
        calibrator="dirichlet",
        score_col=["p0", "p1", "p2"],
    ).fit(frame, labels[800:])
    out = cal.predict(frame)
    np.testing.assert_allclose(out.sum(axis=1), 1.0)
    cal.save(tmp_path / "ccl.json")
    np.testing.assert_array_equal(gpucal.load(tmp_path / "ccl.json").predict(frame), out)


def test_save_load_with_gpucal_trees(tabular, tmp_path):
    frame, y, mbct = _mbct_frame(tabular)
    cal = ClusteredCalibrator(embedding_model=mbct, n_clusters=3).fit(frame, y)
    cal.save(tmp_path / "ccl.json")
    loaded = gpucal.load(tmp_path / "ccl.json")
    assert isinstance(loaded.embedding_.model, gpucal.MBCT)
    np.testing.assert_array_equal(loaded.predict(frame), cal.predict(frame))


def test_embedded_gpucal_model_must_have_trees(tabular, tmp_path):
    """A hand-edited file may nest any registered class as the embedding model: only tree models load."""
    import json

    from gpucal.persistence import ModelFileError

    frame, y, mbct = _mbct_frame(tabular)
    ClusteredCalibrator(embedding_model=mbct, n_clusters=3).fit(frame, y).save(tmp_path / "ccl.json")
    document = json.loads((tmp_path / "ccl.json").read_text())
    platt = gpucal.PlattCalibrator().fit(frame["score"].to_numpy(), y)
    platt.save(tmp_path / "platt.json")
    document["state"]["embedding_"]["model"] = json.loads((tmp_path / "platt.json").read_text())
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(ModelFileError, match="PlattCalibrator has no trees"):
        gpucal.load(tmp_path / "bad.json")


def test_embedding_model_from_a_file(tabular, tree_models, tmp_path):
    """The command line's way in: the path of a saved XGBoost, LightGBM or gpucal model."""
    paths = {"xgboost": tmp_path / "m.json", "lightgbm": tmp_path / "m.txt"}
    tree_models["xgboost"].get_booster().save_model(paths["xgboost"])
    tree_models["lightgbm"].booster_.save_model(paths["lightgbm"])
    for library, path in paths.items():
        frame, y = _calibration_frame(tabular, tree_models[library])
        from_object = ClusteredCalibrator(embedding_model=tree_models[library], n_clusters=3).fit(frame, y)
        from_file = ClusteredCalibrator(embedding_model=str(path), n_clusters=3).fit(frame, y)
        np.testing.assert_array_equal(from_file.predict(frame), from_object.predict(frame))
        from_file.save(tmp_path / "ccl.json")
        assert gpucal.load(tmp_path / "ccl.json").embedding_model == str(path)
    frame, y, mbct = _mbct_frame(tabular)
    mbct.save(tmp_path / "mbct.json")
    from_file = ClusteredCalibrator(embedding_model=tmp_path / "mbct.json", n_clusters=3).fit(frame, y)
    from_object = ClusteredCalibrator(embedding_model=mbct, n_clusters=3).fit(frame, y)
    np.testing.assert_array_equal(from_file.predict(frame), from_object.predict(frame))


def test_corrupt_file_is_refused(tabular, tree_models, tmp_path):
    import json

    from gpucal.persistence import ModelFileError

    frame, y = _calibration_frame(tabular, tree_models["lightgbm"])
    ClusteredCalibrator(embedding_model=tree_models["lightgbm"], n_clusters=3).fit(frame, y).save(
        tmp_path / "m.json"
    )
    document = json.loads((tmp_path / "m.json").read_text())
    for key, bad, match in [
        ("cluster_role_", [0, 7, 0], "unknown role"),
        ("cluster_rate_", [[0.0], [0.5], [0.5]], "strictly between 0 and 1"),
        ("embedding_", {"library": "sklearn"}, "embedding_"),
        # Issue 18: declared sizes must be the sizes the arrays hold.
        ("elbow_", {"k": list(range(100_000)), "inertia": [1.0] * 100_000}, "elbow_"),
        ("elbow_", {"k": [2, 3], "inertia": [1.0, None]}, "elbow_"),
        ("n_classes_", 10**6, "binary scores have 2 classes"),
        ("projection_", document["state"]["projection_"] * 2, "projection_ has"),
        # A Platt map has two parameters: one per cluster was broadcast into wrong predictions.
        ("global_params_", [0.5], r"expected \(2,\) for calibrator='platt'"),
        ("cluster_weight_", [1.0], "cluster_weight_ has shape"),
    ]:
        broken = json.loads(json.dumps(document))
        broken["state"][key] = bad
        (tmp_path / "bad.json").write_text(json.dumps(broken))
        with pytest.raises(ModelFileError, match=match):
            gpucal.load(tmp_path / "bad.json")
    renamed = json.loads(json.dumps(document))
    renamed["params"]["calibrator"] = "temperature"
    (tmp_path / "bad.json").write_text(json.dumps(renamed))
    with pytest.raises(ModelFileError, match=r"expected \(1,\) for calibrator='temperature'"):
        gpucal.load(tmp_path / "bad.json")


TREE_LIBRARIES = ("xgboost", "lightgbm")
# Loads each library's saved calibrator and predicts with both libraries blocked; prints "<library> ok"
# or the library and the error, one line per library (arguments: the folder, then the libraries).
LOAD_WITHOUT_THE_LIBRARIES = """
import sys
sys.modules["xgboost"] = None  # any import of either library now fails
sys.modules["lightgbm"] = None
import numpy as np, pandas as pd, gpucal
folder = sys.argv[1]
for library in sys.argv[2:]:
    try:
        cal = gpucal.load(f"{folder}/{library}.json")
        out = cal.predict(pd.read_parquet(f"{folder}/{library}.parquet")).to_numpy()
        np.testing.assert_array_equal(out, np.load(f"{folder}/{library}.npy"))
    except Exception as error:
        print(library, type(error).__name__, str(error).replace("\\n", " "))
    else:
        print(library, "ok")
"""


@pytest.fixture(scope="module")
def loaded_without_the_libraries(tabular, tree_models, tmp_path_factory):
    """A CCL on each library's SHAP values, saved; then loaded and predicting in one subprocess with
    both libraries blocked. Return each library's saved embedding model and the subprocess's run."""
    import json
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("ccl_saved")
    saved = {}
    for library in TREE_LIBRARIES:
        frame, y = _calibration_frame(tabular, tree_models[library])
        cal = ClusteredCalibrator(embedding_model=tree_models[library], embedding="shap", n_clusters=3)
        cal.fit(frame, y).save(folder / f"{library}.json")
        saved[library] = json.loads((folder / f"{library}.json").read_text())["state"]["embedding_"]["model"]
        frame.to_parquet(folder / f"{library}.parquet")
        np.save(folder / f"{library}.npy", cal.predict(frame).to_numpy())
    command = [sys.executable, "-c", LOAD_WITHOUT_THE_LIBRARIES, str(folder), *TREE_LIBRARIES]
    return saved, subprocess.run(command, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("library", TREE_LIBRARIES)
def test_saved_file_holds_tables_and_loads_without_the_libraries(library, loaded_without_the_libraries):
    """Issue 18: load and predict import neither XGBoost nor LightGBM (both blocked in a subprocess)."""
    saved, done = loaded_without_the_libraries
    assert saved[library]["library"] == library
    assert "node_left" in saved[library]
    assert done.returncode == 0, done.stderr
    assert f"{library} ok" in done.stdout.splitlines(), done.stdout + done.stderr


def test_file_with_the_library_text_asks_for_a_refit(tabular, tree_models, tmp_path):
    """Files of gpucal before issue 18 held LightGBM's model text: refused by name, never parsed."""
    import json

    from gpucal.persistence import ModelFileError

    model = tree_models["lightgbm"]
    frame, y = _calibration_frame(tabular, model)
    ClusteredCalibrator(embedding_model=model, n_clusters=3).fit(frame, y).save(tmp_path / "m.json")
    document = json.loads((tmp_path / "m.json").read_text())
    document["state"]["embedding_"]["model"] = model.booster_.model_to_string()[:5000]
    (tmp_path / "old.json").write_text(json.dumps(document))
    with pytest.raises(ModelFileError, match=r"library.s own text.*refit"):
        gpucal.load(tmp_path / "old.json")


@pytest.mark.parametrize(
    ("field", "mutate", "match"),
    [
        ("node_left", lambda v, split: v.__setitem__(split, 10**6), "outside its tree"),
        ("node_left", lambda v, split: v.__setitem__(split, split), "not after the split"),
        ("node_right", lambda v, split: v.__setitem__(split, -5), "outside its tree"),
        ("node_feature", lambda v, split: v.__setitem__(split, 99), "features must lie"),
        ("node_cover", lambda v, split: v.__setitem__(split, 0.0), "> 0 at a split"),
        ("tree_start", lambda v, split: v.__setitem__(-1, v[-1] + 1), "tree_start"),
        ("node_threshold", lambda v, split: v.__setitem__(split, None), "finite numbers"),
        ("n_outputs", None, "every output"),
        ("categories", lambda v, split: v.__setitem__(0, ["a", "a"]), "distinct"),
        ("categories", lambda v, split: v.append(None), "categories must be"),
    ],
)
@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_corrupt_tree_tables_are_refused(library, field, mutate, match, tabular, tree_models, tmp_path):
    """Issue 18: what crashed or hung the libraries' parsers (children out of range or pointing at their own
    node, truncated tables, a million classes) is a ModelFileError at load."""
    import json

    from gpucal.persistence import ModelFileError

    model = tree_models[library]
    frame, y = _calibration_frame(tabular, model)
    ClusteredCalibrator(embedding_model=model, n_clusters=3).fit(frame, y).save(tmp_path / "m.json")
    document = json.loads((tmp_path / "m.json").read_text())
    tables = document["state"]["embedding_"]["model"]
    if mutate is None:
        tables[field] = 10**6
    else:
        split = next(m for m, f in enumerate(tables["node_feature"]) if f >= 0 and m > 0)
        mutate(tables[field], split)
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(ModelFileError, match=match):
        gpucal.load(tmp_path / "bad.json")


def test_unsaveable_embedding_model(tmp_path):
    X, y = _groups([100, 100], slopes=[1, 1], shifts=[0, 0])
    cal = ClusteredCalibrator(embedding_model=ColumnLeaves(), n_clusters=2).fit(X, y)
    with pytest.raises(TypeError, match="cannot be saved"):
        cal.save(tmp_path / "x.json")


def test_clone(tabular, tree_models):
    from sklearn.frozen import FrozenEstimator

    frame, y = _calibration_frame(tabular, tree_models["lightgbm"])
    for model in (tree_models["lightgbm"].booster_, FrozenEstimator(tree_models["lightgbm"])):
        cal = ClusteredCalibrator(embedding_model=model, n_clusters=3).fit(frame, y)
        twin = clone(cal).fit(frame, y)
        np.testing.assert_array_equal(twin.predict(frame), cal.predict(frame))
    # clone() rebuilds a scikit-learn model unfitted: the error says what to pass instead.
    cal = clone(ClusteredCalibrator(embedding_model=tree_models["xgboost"], n_clusters=3))
    with pytest.raises(ValueError, match=r"not fitted.*FrozenEstimator"):
        cal.fit(frame, y)


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({}, ValueError, "needs a fitted tree model"),
        ({"embedding_model": ColumnLeaves(), "embedding": "pca"}, ValueError, "'embedding' parameter"),
        (
            {"embedding_model": ColumnLeaves(), "embedding": "shap"},
            ValueError,
            "needs an XGBoost or LightGBM",
        ),
        ({"embedding_model": "no/such/model.json"}, FileNotFoundError, "no model file"),
        ({"embedding_model": object()}, TypeError, "leaves"),
        ({"embedding_model": ColumnLeaves(), "n_clusters": 0}, ValueError, "'n_clusters' parameter"),
        (
            {"embedding_model": ColumnLeaves(), "min_clusters": 5, "max_clusters": 3},
            ValueError,
            "min_clusters",
        ),
        ({"embedding_model": ColumnLeaves(), "calibrator": "isotonic"}, ValueError, "'calibrator' parameter"),
    ],
)
def test_bad_parameters(params, error, match):
    X, y = _groups([100, 100], slopes=[1, 1], shifts=[0, 0])
    with pytest.raises(error, match=match):
        ClusteredCalibrator(**{"n_clusters": 2, **params}).fit(X, y)


def test_bad_data(tabular, tree_models):
    frame, y = _calibration_frame(tabular, tree_models["xgboost"])
    cal = ClusteredCalibrator(embedding_model=tree_models["xgboost"], n_clusters=3)
    with pytest.raises(KeyError, match="'d'"):
        cal.fit(frame.drop(columns="d"), y)
    with pytest.raises(ValueError, match="no positive labels"):
        cal.fit(frame, np.zeros(len(frame)))
    with pytest.raises(ValueError, match="multi-class scores"):
        ClusteredCalibrator(embedding_model=ColumnLeaves(), score_col=["a", "b"]).fit(frame, y)
    fitted = cal.fit(frame, y)
    with pytest.raises(KeyError, match="score"):
        fitted.predict(frame.drop(columns="score"))


def test_numeric_features_must_be_real_numbers_at_fit_and_predict(tabular, tree_models):
    """Complex numbers, strings holding numbers and datetimes would be cast to floats without a word."""
    frame, y = _calibration_frame(tabular, tree_models["lightgbm"])
    cal = ClusteredCalibrator(embedding_model=tree_models["lightgbm"], n_clusters=3)
    with pytest.raises(ValueError, match=r"column 'a' has dtype complex128.*reads it as real numbers"):
        cal.fit(frame.assign(a=frame["a"].astype(complex)), y)
    fitted = cal.fit(frame, y)
    as_strings = frame.assign(a=frame["a"].astype(str))
    with pytest.raises(ValueError, match=r"column 'a' has dtype (object|str).*pandas\.to_numeric"):
        fitted.predict(as_strings)
    as_dates = frame.assign(a=pd.to_datetime(frame["a"].fillna(0).abs() * 1e9))
    with pytest.raises(ValueError, match=r"column 'a' has dtype datetime64"):
        fitted.predict(as_dates)


def test_feature_cols_listing_the_score_or_a_column_twice(tabular, tree_models):
    frame, y = _calibration_frame(tabular, tree_models["lightgbm"])
    columns = [c for c in frame.columns if c != "score"]
    cal = ClusteredCalibrator(embedding_model=tree_models["lightgbm"], n_clusters=3)
    with pytest.raises(ValueError, match=r"feature_cols: lists the score column 'score'"):
        cal.set_params(feature_cols=[*columns[:-1], "score"]).fit(frame, y)
    with pytest.raises(ValueError, match=r"feature_cols: duplicate column names 'a';"):
        cal.set_params(feature_cols=[*columns[:-1], "a"]).fit(frame, y)
