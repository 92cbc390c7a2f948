"""Heterogeneous calibration: the label criteria and binary splits of the tree engine, the estimator."""

from __future__ import annotations

import itertools
import json
import sqlite3
import warnings

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import expit, logit
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression

import gpucal
from gpucal.datasets import make_ctr
from gpucal.hc import HeterogeneousCalibrator
from gpucal.kernels import N_STATS, STAT_COUNT, STAT_W, STAT_WY, value_offsets
from gpucal.metrics import log_loss, roc_auc
from gpucal.trees.grow import GrowConfig, grow_tree
from gpucal.trees.splits import CRIT_ENTROPY, CRIT_GINI, CRIT_SHIFT, choose_binary_splits, label_loss

# The paper's configuration (plain per-leaf Platt scaling), so every number has an independent reference.
PAPER = {"leaf_penalty": 0.0, "min_leaf_size": 20.0}


def threshold_frame(n: int = 4000, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """``x`` in 0..9 (one bin per value with ``n_bins=20``) shifts the label's logit at ``x >= 4``.

    logit(p) = z + 0.85 for ``x >= 4`` and z - 1.4 below (rates near 0.65 and 0.25); the score is blind to
    ``x``: logit(score) = z + N(0, 0.3^2). ``c`` is noise.
    """
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 10, n)
    c = rng.choice(np.array(["u", "v", "w"]), n)
    z = rng.normal(0.0, 1.0, n)
    p = expit(np.where(x >= 4, 0.85, -1.4) + z)
    y = (rng.random(n) < p).astype(np.float64)
    score = expit(z + rng.normal(0.0, 0.3, n))
    return pd.DataFrame({"score": score, "x": x.astype(np.float64), "c": c}), y


def sklearn_platt(score: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    model = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000)
    model.fit(logit(score)[:, None], y)
    return float(model.coef_[0, 0]), float(model.intercept_[0])


# --------------------------------------------------------------------------------------------------
# The engine: label criteria and binary splits


def entropy(w: float, wy: float) -> float:
    """Brute-force reference: the weight times the binary entropy of the rate (0 log 0 = 0)."""
    p = wy / w
    return -sum(m * np.log(q) for m, q in ((wy, p), (w - wy, 1.0 - p)) if m > 0)


def gini(w: float, wy: float) -> float:
    p = wy / w
    return w * (1.0 - p**2 - (1.0 - p) ** 2)


def random_histogram(seed: int, n_values: np.ndarray, n_nodes: int) -> np.ndarray:
    """A histogram of ``n_nodes`` nodes whose features all see the same rows (as real histograms do)."""
    rng = np.random.default_rng(seed)
    n = 300
    offsets = value_offsets(n_values)
    hist = np.zeros((n_nodes, int(n_values.sum()), N_STATS))
    for s in range(n_nodes):
        w = rng.uniform(0.5, 2.0, n)
        rate = rng.uniform(0.05, 0.95, n_values[0])
        first = rng.integers(0, n_values[0], n)
        y = (rng.random(n) < rate[first]).astype(float)
        codes = [first] + [rng.integers(0, k, n) for k in n_values[1:]]
        codes[-1][codes[-1] == n_values[-1] - 1] = 0  # the last code has no rows
        for j, col in enumerate(codes):
            for v in range(n_values[j]):
                rows = col == v
                row = hist[s, offsets[j] + v]
                row[STAT_COUNT], row[STAT_W], row[STAT_WY] = rows.sum(), w[rows].sum(), (w * y)[rows].sum()
    return hist


def brute_force_split(
    hist_feature: np.ndarray, ordinal: bool, impurity, min_child: float
) -> tuple[float, set]:
    """Least impurity over two-way splits: every threshold, or every partition of the categories.

    With a least child weight, Breiman's ordering is exact no longer: the categories are then cut at
    every threshold of their rate order only.
    """
    present = [v for v in range(hist_feature.shape[0]) if hist_feature[v, STAT_COUNT] > 0]
    if not ordinal and min_child > 0:
        present.sort(key=lambda v: hist_feature[v, STAT_WY] / hist_feature[v, STAT_W])
    if ordinal or min_child > 0:
        lefts = [set(present[: i + 1]) for i in range(len(present) - 1)]
    else:
        lefts = [
            {present[0], *rest}
            for r in range(len(present) - 1)
            for rest in itertools.combinations(present[1:], r)
        ]
    best, best_left = np.inf, set()
    for left in lefts:
        sides = [hist_feature[sorted(left)].sum(0), hist_feature[sorted(set(present) - left)].sum(0)]
        if min(s[STAT_W] for s in sides) < min_child:
            continue
        loss = sum(impurity(s[STAT_W], s[STAT_WY]) for s in sides)
        if loss < best:
            best, best_left = loss, left
    return best, best_left


@pytest.mark.parametrize(("kind", "impurity"), [(CRIT_ENTROPY, entropy), (CRIT_GINI, gini)])
@pytest.mark.parametrize("min_child", [0.0, 150.0])
def test_binary_splits_equal_a_brute_force_search_over_all_two_way_splits(kind, impurity, min_child) -> None:
    n_values = np.array([6, 5, 4])
    ordinal = np.array([True, False, False])
    hist = random_histogram(3, n_values, n_nodes=2)
    parent = np.tile([1.0, 0.0], (2, 1))
    allowed = np.ones(3, dtype=bool)
    offsets = value_offsets(n_values)
    split_loss, own_loss, side = choose_binary_splits(
        hist, offsets, n_values, ordinal, allowed, parent, kind, 0.0, min_child
    )
    for s in range(2):
        node = hist[s, : n_values[0]].sum(0)
        assert_allclose(own_loss[s], impurity(node[STAT_W], node[STAT_WY]), rtol=1e-13)
        for j in range(3):
            feature = hist[s, offsets[j] : offsets[j] + n_values[j]]
            best, left = brute_force_split(feature, bool(ordinal[j]), impurity, min_child)
            assert_allclose(split_loss[s, j], best, rtol=1e-12, err_msg=f"node {s} feature {j}")
            if np.isfinite(best):
                codes = side[s, offsets[j] : offsets[j] + n_values[j]]
                found = {v for v in range(n_values[j]) if codes[v] == codes[min(left)]}
                assert found == left
                if j == 2:
                    assert codes[-1] == -1  # a code without rows in the node: no side


def test_label_losses_are_the_weighted_entropy_and_gini_of_the_rate() -> None:
    stats = np.zeros(N_STATS)
    stats[STAT_COUNT], stats[STAT_W], stats[STAT_WY] = 10, 8.0, 2.0
    assert_allclose(label_loss(stats, CRIT_ENTROPY), -(2 * np.log(0.25) + 6 * np.log(0.75)), rtol=1e-15)
    assert_allclose(label_loss(stats, CRIT_GINI), 8 * 2 * 0.25 * 0.75, rtol=1e-15)
    stats[STAT_WY] = 0.0  # a pure node
    assert label_loss(stats, CRIT_ENTROPY) == 0.0
    assert label_loss(stats, CRIT_GINI) == 0.0


def test_categories_are_cut_in_the_order_of_their_label_rate() -> None:
    # Five categories with rates 0.1, 0.8, 0.3, 0.9, 0.5 (100 rows each). Entropy of the cuts in rate order
    # (0, 2, 4, 1, 3): {0, 2} | {4, 1, 3} 274.05, {0, 2, 4} | {1, 3} 267.81 (the best, as a brute force over
    # all 15 partitions finds), the other two higher; in code order no threshold gives it.
    rates = [0.1, 0.8, 0.3, 0.9, 0.5]
    codes = np.repeat(np.arange(5), 100).astype(np.int8)[:, None]
    y = np.concatenate([(np.arange(100) < 100 * r).astype(float) for r in rates])
    config = GrowConfig(
        leaf_map="shift",
        criterion="entropy",
        max_depth=1,
        min_node_size=2.0,
        min_child_size=1.0,
        penalty=0.0,
        n_views=1,
        mvce_bin_size=1,
        mvce_p=2.0,
        seed=0,
        split_mode="binary",
        ordinal=(False,),
    )
    nodes, leaf = grow_tree(codes, np.full(500, 0.5), y, None, np.array([5]), np.array([-1]), config)
    assert nodes.feature == [0, -1, -1]
    assert nodes.child_table[0].tolist() == [1, 2, 1, 2, 1]
    assert_array_equal(leaf, np.where(np.isin(codes[:, 0], [0, 2, 4]), 1, 2))
    # The children carry their label rate as a constant map (0, logit p).
    assert_allclose(nodes.values, [[0, logit(0.52)], [0, logit(0.3)], [0, logit(0.85)]], rtol=1e-14)
    # Read in code order (ordinal), the best threshold is {0} | {1, 2, 3, 4} (entropy 297.1).
    ordinal = GrowConfig(**{**config.__dict__, "ordinal": (True,)})
    nodes, _ = grow_tree(codes, np.full(500, 0.5), y, None, np.array([5]), np.array([-1]), ordinal)
    assert nodes.child_table[0].tolist() == [1, 2, 2, 2, 2]


def test_feature_mask_and_config_rules() -> None:
    X, y = threshold_frame()
    codes = np.stack([X["x"].to_numpy().astype(np.int8), (X["c"] == "v").to_numpy().astype(np.int8)], 1)
    base = {
        "leaf_map": "shift",
        "criterion": "gini",
        "max_depth": 1,
        "min_node_size": 2.0,
        "min_child_size": 1.0,
        "penalty": 0.0,
        "n_views": 1,
        "mvce_bin_size": 1,
        "mvce_p": 2.0,
        "seed": 0,
        "split_mode": "binary",
        "ordinal": (True, False),
    }
    grown = [
        grow_tree(
            codes, X["score"].to_numpy(), y, None, np.array([10, 2]), np.array([-1, -1]), GrowConfig(**c)
        )[0]
        for c in (base, {**base, "feature_mask": (False, True)})
    ]
    assert grown[0].feature[0] == 0
    assert grown[1].feature[0] == 1  # x is masked: the noise feature is the only candidate
    with pytest.raises(ValueError, match="need split_mode='binary'"):
        GrowConfig(**{**base, "split_mode": "multiway"})
    with pytest.raises(ValueError, match="'mvce' grows multi-way"):
        GrowConfig(**{**base, "criterion": "mvce"})
    with pytest.raises(ValueError, match="split_mode"):
        GrowConfig(**{**base, "split_mode": "ternary"})


def test_gain_criterion_in_binary_mode_cuts_where_the_score_is_biased() -> None:
    # f = 0.3 everywhere; the true rate is 0.1 for codes 0-2 and 0.6 for codes 3-5: the log-loss gain
    # (shift leaves) puts the cut between 2 and 3, and the children's shifts are one Newton step.
    codes = np.repeat(np.arange(6), 200).astype(np.int8)[:, None]
    y = np.concatenate([(np.arange(200) < (20 if v < 3 else 120)).astype(float) for v in range(6)])
    f = np.full(1200, 0.3)
    config = GrowConfig(
        leaf_map="shift",
        criterion="gain",
        max_depth=1,
        min_node_size=2.0,
        min_child_size=1.0,
        penalty=0.0,
        n_views=1,
        mvce_bin_size=1,
        mvce_p=2.0,
        seed=0,
        split_mode="binary",
        ordinal=(True,),
    )
    nodes, _ = grow_tree(codes, f, y, None, np.array([6]), np.array([-1]), config)
    assert nodes.child_table[0].tolist() == [1, 1, 1, 2, 2, 2]
    # d = -G / H with G = sum(f - y), H = sum f (1 - f); the root's d first, children from it.
    root = -(1200 * 0.3 - y.sum()) / (1200 * 0.21)
    assert_allclose(nodes.values[0], [1.0, root], rtol=1e-12)
    for child, rate in ((1, 0.1), (2, 0.6)):
        g, h = 600 * (0.3 - rate), 600 * 0.21
        assert_allclose(nodes.values[child, 1], root - (g + h * root) / h, rtol=1e-12)
    assert CRIT_SHIFT == GrowConfig(**{**config.__dict__}).kind


# --------------------------------------------------------------------------------------------------
# The estimator


def test_hand_checkable_tree_cuts_x_at_4_and_each_leaf_is_sklearns_platt() -> None:
    X, y = threshold_frame()
    X_tree, y_tree = threshold_frame(seed=1)
    model = HeterogeneousCalibrator(max_depth=1, n_bins=20, **PAPER).fit(X, y, X_tree=X_tree, y_tree=y_tree)
    # The tree reads the features and the label only: X_tree needs no score column.
    no_score = HeterogeneousCalibrator(max_depth=1, n_bins=20, **PAPER)
    no_score.fit(X, y, X_tree=X_tree[["x", "c"]], y_tree=y_tree)
    assert_array_equal(no_score.node_params_, model.node_params_)
    e = model.ensemble_
    assert e.feature_names == ["x", "c"]
    assert e.node_feature.tolist() == [0, -1, -1]
    # x's codes 0-9 are its values (one bin each), code 10 is "missing": no tree row had it.
    assert e.child_table.tolist() == [1, 1, 1, 1, 2, 2, 2, 2, 2, 2, -1]
    assert e.node_weight.tolist() == [4000.0, float((X_tree["x"] < 4).sum()), float((X_tree["x"] >= 4).sum())]
    # Every node's map is a logistic regression on logit(score) of the calibration rows beneath it.
    x = X["x"].to_numpy()
    for node, rows in ((0, np.ones_like(x, bool)), (1, x < 4), (2, x >= 4)):
        a, b = sklearn_platt(X["score"].to_numpy()[rows], y[rows])
        assert_allclose(model.node_params_[node], [a, b], rtol=1e-6, atol=1e-8, err_msg=f"node {node}")
    assert_allclose(e.node_value, model.node_params_, rtol=0, atol=0)
    a, b = model.node_params_[model.leaves(X)[:, 0]].T
    assert_allclose(model.predict(X), expit(a * logit(X["score"]) + b), rtol=1e-12)


def test_without_tree_data_a_share_of_the_rows_grows_the_tree_and_the_rest_fits_the_maps() -> None:
    X, y = threshold_frame(6000)
    model = HeterogeneousCalibrator(max_depth=1, n_bins=20, tree_fraction=0.25, **PAPER).fit(X, y)
    grow = np.random.default_rng(0).random(6000) < 0.25
    assert model.ensemble_.node_weight[0] == grow.sum()
    x, s = X["x"].to_numpy(), X["score"].to_numpy()
    for node, rows in ((1, ~grow & (x < 4)), (2, ~grow & (x >= 4))):
        assert_allclose(model.node_params_[node], sklearn_platt(s[rows], y[rows]), rtol=1e-6, atol=1e-8)


def test_a_value_no_tree_row_had_stops_at_the_split_node_and_gets_its_map() -> None:
    X, y = threshold_frame()
    model = HeterogeneousCalibrator(max_depth=1, n_bins=20, **PAPER).fit(X, y)
    new = pd.DataFrame({"score": [0.3, 0.3], "x": [np.nan, 7.0], "c": ["u", "u"]})
    assert model.leaves(new)[:, 0].tolist() == [0, 2]
    a, b = model.node_params_[0]
    assert_allclose(model.predict(new)[0], expit(a * logit(0.3) + b), rtol=1e-12)


def test_leaf_penalty_pulls_a_leaf_toward_its_parent() -> None:
    X, y = threshold_frame()
    fits = [HeterogeneousCalibrator(max_depth=1, n_bins=20, leaf_penalty=lam).fit(X, y) for lam in (0.0, 1e9)]
    assert_allclose(fits[1].node_params_[1:], np.tile(fits[1].node_params_[0], (2, 1)), atol=1e-5)
    assert np.abs(fits[0].node_params_[1:] - fits[0].node_params_[0]).max() > 0.3
    # The root has no penalty: the same global fit either way.
    assert_allclose(fits[0].node_params_[0], fits[1].node_params_[0], rtol=1e-12)


@pytest.mark.parametrize("local_map", ["constant", "shift", "temperature", "scale", "beta"])
def test_every_local_map_kind_fits_and_the_fast_path_equals_the_node_maps(local_map) -> None:
    X, y = threshold_frame()
    model = HeterogeneousCalibrator(max_depth=2, n_bins=20, local_map=local_map, **PAPER).fit(X, y)
    from gpucal.trees.local_maps import apply_local_maps, n_map_params

    assert model.node_params_.shape == (model.ensemble_.n_nodes, n_map_params(local_map))
    expected = apply_local_maps(X["score"].to_numpy(), model.leaves(X)[:, 0], model.node_params_, local_map)
    assert_allclose(model.predict(X), expected, rtol=1e-12)


@pytest.fixture(scope="module")
def ctr_heterogeneous() -> tuple[pd.DataFrame, pd.DataFrame]:
    frame = make_ctr(120_000, "heterogeneous", seed=1)
    return frame.iloc[:60_000].reset_index(drop=True), frame.iloc[60_000:].reset_index(drop=True)


CTR_FIELDS = ["region", "hour", "user_segment", "device"]


@pytest.mark.parametrize("mode", ["tree", "forest", "boosted"])
def test_every_mode_recovers_the_under_used_feature(ctr_heterogeneous, mode) -> None:
    # make_ctr's "heterogeneous" scenario: the score uses only a quarter of user_segment's effect. On these
    # rows: base log-loss 0.1105 (Platt 0.1105, truth 0.1072), HC 0.1085-0.1088; AUC 0.832 -> 0.841-0.843.
    cal, test = ctr_heterogeneous
    y, y_test = cal["label"].to_numpy(), test["label"].to_numpy()
    params = {"feature_cols": CTR_FIELDS, "categorical_cols": CTR_FIELDS, "mode": mode, "n_trees": 4}
    model = HeterogeneousCalibrator(**params).fit(cal, y)
    p = model.predict(test)
    platt = gpucal.PlattCalibrator().fit(cal["score"], y).predict(test["score"])
    base = log_loss(y_test, test["score"].to_numpy())
    assert log_loss(y_test, p) < log_loss(y_test, platt) - 0.01 * base
    # The paper's claim: per-part calibration reorders the parts, so AUC rises (a global map cannot).
    assert roc_auc(y_test, p) > roc_auc(y_test, test["score"].to_numpy()) + 0.005
    assert model.ensemble_.node_feature[0] == 2 or mode == "forest"  # the root cuts user_segment
    if mode == "forest":
        assert model.ensemble_.n_trees == 4
    if mode == "boosted":
        assert model.history_[0]["kept"]
        assert model.ensemble_.n_trees == sum(h["kept"] for h in model.history_)


def test_boosted_chain_is_the_nested_composition_of_its_trees_maps(ctr_heterogeneous) -> None:
    cal, test = ctr_heterogeneous
    params = {"feature_cols": CTR_FIELDS, "categorical_cols": CTR_FIELDS, "mode": "boosted", "n_trees": 3}
    model = HeterogeneousCalibrator(**params, validation_fraction=0.0).fit(cal, cal["label"])
    assert model.ensemble_.n_trees == 3  # without a held-out share, every tree is kept
    leaves = model.leaves(test)
    out = test["score"].to_numpy()
    for t in range(3):
        a, b = model.node_params_[leaves[:, t]].T
        out = expit(a * logit(np.clip(out, 2.2e-16, 1 - 2.2e-16)) + b)
    assert_allclose(model.predict(test), out, rtol=1e-10)


def test_forest_is_the_mean_of_its_trees_each_with_a_feature_subset() -> None:
    X, y = threshold_frame()
    model = HeterogeneousCalibrator(mode="forest", n_trees=6, max_features=0.5, n_bins=20, max_depth=1).fit(
        X, y
    )
    e = model.ensemble_
    roots = e.tree_start[:-1]
    assert set(e.node_feature[roots].tolist()) <= {0, 1}
    leaves = model.leaves(X)
    a, b = model.node_params_[leaves].transpose(2, 0, 1)
    expected = expit(a * logit(X["score"].to_numpy())[:, None] + b).mean(axis=1)
    assert_allclose(model.predict(X), expected, rtol=1e-12)
    with pytest.raises(ValueError, match="not a chain of node maps"):
        model.export_rules()


def test_forest_is_seeded() -> None:
    X, y = threshold_frame(2000)
    fits = [HeterogeneousCalibrator(mode="forest", n_trees=3, n_bins=20, seed=s).fit(X, y) for s in (1, 1, 2)]
    assert_array_equal(fits[0].predict(X), fits[1].predict(X))
    assert not np.array_equal(fits[0].node_params_, fits[2].node_params_)


def test_integer_weights_equal_repeated_rows_with_tree_data() -> None:
    X, y = threshold_frame(1500)
    X_tree, y_tree = threshold_frame(1500, seed=1)
    rng = np.random.default_rng(5)
    w, w_tree = rng.integers(1, 4, 1500), rng.integers(1, 4, 1500)
    weighted = HeterogeneousCalibrator(max_depth=2, n_bins=20, **PAPER).fit(
        X, y, w.astype(float), X_tree=X_tree, y_tree=y_tree, sample_weight_tree=w_tree.astype(float)
    )
    rep, rep_tree = np.repeat(np.arange(1500), w), np.repeat(np.arange(1500), w_tree)
    repeated = HeterogeneousCalibrator(max_depth=2, n_bins=20, **PAPER).fit(
        X.iloc[rep], y[rep], X_tree=X_tree.iloc[rep_tree], y_tree=y_tree[rep_tree]
    )
    assert_array_equal(weighted.ensemble_.child_table, repeated.ensemble_.child_table)
    assert_allclose(weighted.node_params_, repeated.node_params_, rtol=1e-8)


def test_rows_of_no_weight_with_a_level_of_their_own_equal_dropped_rows() -> None:
    """A code held only by rows of weight 0 had a side of the split (a child, or the pooled rest),
    which moved where missing and unseen values go: predictions moved by up to 0.165 (HC) and 0.023
    (MBCT) against dropping those rows."""
    from gpucal.mbct import MBCT

    fields, categorical = ["region", "hour", "user_segment", "device"], ["user_segment", "device"]
    data = make_ctr(n_rows=3000, seed=0, base_rate=0.2)
    X, y = data[["score", *fields]], data["label"].to_numpy(float)
    w = np.random.default_rng(0).integers(1, 4, len(y)).astype(float)
    extra = X.iloc[:200].assign(user_segment=99)  # a level no weighted row has, appended last
    X_all, y_all = pd.concat([X, extra], ignore_index=True), np.concatenate([y, y[:200]])
    w_all = np.concatenate([w, np.zeros(200)])
    unseen = extra.assign(user_segment=55)
    for make in (
        lambda: HeterogeneousCalibrator(feature_cols=fields, categorical_cols=categorical, min_leaf_size=100),
        lambda: MBCT(
            feature_cols=fields,
            categorical_cols=categorical,
            max_trees=3,
            validation_fraction=0.0,
            min_node_size=50.0,
            min_child_size=20.0,
        ),
    ):
        dropped = make().fit(X, y, sample_weight=w)
        weighed = make().fit(X_all, y_all, sample_weight=w_all)
        for rows in (X, extra, unseen):
            assert_array_equal(weighed.predict(rows), dropped.predict(rows))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # the start's Platt at 1e300
def test_weights_whose_ridge_is_lost_in_rounding_still_fit() -> None:
    """A part of one score has a singular curvature but for a ridge of 1e-9, lost to rounding beside
    weight sums of 1e20 and more: MBCT and HC failed with numpy's LinAlgError ("Singular matrix")."""
    from gpucal.mbct import MBCT

    rng = np.random.default_rng(1)
    score = rng.uniform(0.01, 0.99, 1500)
    y = (rng.uniform(size=1500) < score).astype(float)
    X = pd.DataFrame(
        {"score": score, "f_cat": rng.choice(["a", "b", "c"], 1500), "f_num": rng.normal(size=1500)}
    )
    for weight in (np.full(1500, 1e20), np.where(np.arange(1500) < 5, 1e300, 1.0)):
        for model in (
            MBCT(max_trees=2, n_views=10, feature_cols=["f_cat", "f_num"], categorical_cols=["f_cat"]),
            HeterogeneousCalibrator(mode="boosted", feature_cols=["f_cat", "f_num"]),
        ):
            predicted = np.asarray(model.fit(X, y, sample_weight=weight).predict(X))
            assert np.isfinite(predicted).all()
            assert ((predicted >= 0) & (predicted <= 1)).all()


@pytest.mark.parametrize("mode", ["tree", "boosted"])
def test_export_rules_text_json_and_sql_reproduce_predict(mode) -> None:
    X, y = threshold_frame()
    model = HeterogeneousCalibrator(mode=mode, max_depth=2, n_bins=20, n_trees=3, validation_fraction=0.0)
    model.fit(X, y)
    assert "if x in [-inf, 4.0)" in model.export_rules()
    rules = json.loads(model.export_rules("json"))
    first = rules["trees"][0]["children"][0]
    assert first["map"] == dict(zip("ab", model.node_params_[first["id"]], strict=True))
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE events (id INTEGER, score REAL, x REAL, c TEXT)")
    con.executemany(
        "INSERT INTO events VALUES (?, ?, ?, ?)", list(zip(range(len(X)), *X.T.values, strict=True))
    )
    try:
        got = con.execute(f"SELECT calibrated FROM ({model.export_rules('sql', table='events')}) ORDER BY id")
        sql = np.array(got.fetchall(), dtype=np.float64)[:, 0]
    except sqlite3.OperationalError as error:  # a sqlite3 build without EXP and LN
        pytest.skip(str(error))
    finally:
        con.close()
    assert_allclose(sql, model.predict(X), rtol=1e-12)


@pytest.mark.parametrize(
    ("mode", "local_map"),
    [("tree", "platt"), ("forest", "platt"), ("boosted", "platt"), ("tree", "beta"), ("boosted", "shift")],
)
def test_save_load_round_trip_predicts_the_same(tmp_path, mode, local_map) -> None:
    X, y = threshold_frame()
    model = HeterogeneousCalibrator(mode=mode, local_map=local_map, n_trees=3, n_bins=20).fit(X, y)
    path = tmp_path / "hc.json"
    model.save(path)
    loaded = gpucal.load(path)
    assert_array_equal(loaded.predict(X), model.predict(X))
    document = json.loads(path.read_text())
    document["state"]["node_params_"] = document["state"]["node_params_"][:-1]
    path.write_text(json.dumps(document))
    with pytest.raises(gpucal.ModelFileError, match="node_params_"):
        gpucal.load(path)


def test_a_forest_of_huge_beta_maps_is_refused_at_load(tmp_path) -> None:
    """A forest's beta maps are no chain the ensemble's check bounds: parameters of 1e308 would
    predict NaN (an infinite log term minus another), so their size is checked on load."""
    X, y = threshold_frame()
    model = HeterogeneousCalibrator(mode="forest", local_map="beta", n_trees=2, n_bins=20).fit(X, y)
    path = tmp_path / "hc.json"
    model.save(path)
    document = json.loads(path.read_text())
    document["state"]["node_params_"] = [[1e308, 1e308, 0.0] for _ in document["state"]["node_params_"]]
    path.write_text(json.dumps(document))
    with pytest.raises(gpucal.ModelFileError, match="node_params_: an entry is larger than 1e\\+100"):
        gpucal.load(path)


def test_feature_cols_must_be_the_encoders_at_load(tmp_path) -> None:
    """A file naming fewer or other features than its encoder loaded and failed at predict with a
    KeyError; MBCT's check is the same."""
    X, y = threshold_frame()
    for model in (HeterogeneousCalibrator(n_bins=20), gpucal.MBCT(max_trees=1)):
        path = tmp_path / "model.json"
        model.fit(X, y).save(path)
        document = json.loads(path.read_text())
        document["state"]["feature_cols_"] = [*document["state"]["feature_cols_"][::-1], "other"]
        path.write_text(json.dumps(document))
        with pytest.raises(gpucal.ModelFileError, match="are not the encoder's features"):
            gpucal.load(path)


def test_parameters_clone_and_bad_input() -> None:
    X, y = threshold_frame(600)
    model = HeterogeneousCalibrator(max_depth=2, criterion="gini")
    assert clone(model).get_params() == model.get_params()
    with pytest.raises(ValueError, match="The 'criterion' parameter of HeterogeneousCalibrator"):
        HeterogeneousCalibrator(criterion="mse").fit(X, y)
    with pytest.raises(ValueError, match="The 'tree_fraction' parameter"):
        HeterogeneousCalibrator(tree_fraction=1.0).fit(X, y)
    with pytest.raises(ValueError, match="X_tree and y_tree"):
        HeterogeneousCalibrator().fit(X, y, X_tree=X)
    with pytest.raises(ValueError, match="feature"):
        HeterogeneousCalibrator().fit(X[["score"]], y)
    with pytest.raises(ValueError, match="y"):
        HeterogeneousCalibrator().fit(X, np.zeros(600))
    with pytest.raises(ValueError, match="y_tree"):
        HeterogeneousCalibrator().fit(X, y, X_tree=X, y_tree=y[:10])
    with pytest.raises(KeyError, match="X_tree: score column 'score' not found"):  # boosted reads it
        HeterogeneousCalibrator(mode="boosted").fit(X, y, X_tree=X[["x", "c"]], y_tree=y)
    with pytest.raises(KeyError, match="'nope'"):
        HeterogeneousCalibrator(feature_cols=["nope"]).fit(X, y)
    fitted = HeterogeneousCalibrator(n_bins=20).fit(X, y)
    with pytest.raises(KeyError, match="'c'"):
        fitted.predict(X[["score", "x"]])


def test_no_warnings_on_a_plain_fit_and_polars_in_polars_out() -> None:
    polars = pytest.importorskip("polars")
    X, y = threshold_frame(1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = HeterogeneousCalibrator(n_bins=20).fit(polars.from_pandas(X), y)
        out = model.predict(polars.from_pandas(X))
    assert isinstance(out, polars.Series)
    assert_allclose(out.to_numpy(), model.predict(X), rtol=0)
