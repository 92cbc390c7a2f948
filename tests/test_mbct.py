"""MBCT: hand-checkable trees, the stopping rules, chaining, pooling, persistence and the estimator API."""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import clone

import gpucal
from gpucal import MBCT, ModelFileError
from gpucal.datasets import make_ctr
from gpucal.mbct._node_size import min_node_size, theorem1_bound
from gpucal.metrics import log_loss
from gpucal.trees import grow as _grow
from gpucal.trees.aggregate import aggregate_rows, estimated_distinct


def two_segment_frame() -> tuple[pd.DataFrame, np.ndarray]:
    """f = 0.1 everywhere; segment A=0 has 5% positives, A=1 has 20%; B is balanced noise.

    Each (A, B) cell holds 200 rows with 10 (A=0) or 40 (A=1) positives, so B carries no signal at all.
    """
    rows, labels = [], []
    for a, positives in ((0, 10), (1, 40)):
        for b in range(3):
            for i in range(200):
                rows.append((0.1, f"a{a}", f"b{b}"))
                labels.append(1.0 if i < positives else 0.0)
    frame = pd.DataFrame(rows, columns=["score", "A", "B"])
    return frame, np.asarray(labels)


# The paper's map without gpucal's extensions, so every number can be checked by hand.
PAPER_MAP = {
    "leaf_map": "scale",
    "leaf_penalty": 0.0,
    "learning_rate": 1.0,
    "validation_fraction": 0.0,
    "init": "identity",
}
HAND = {**PAPER_MAP, "score_bins": 0, "min_node_size": 10.0, "min_child_size": 1.0, "max_trees": 1}


def test_hand_checkable_tree_splits_on_the_segment_with_k_equal_to_label_over_score() -> None:
    X, y = two_segment_frame()
    X = X.to_dict("list")  # a dict of columns in, numpy out
    model = MBCT(max_depth=1, **HAND).fit(X, y)
    e = model.ensemble_
    assert e.n_trees == 1
    assert e.feature_names == ["A", "B"]
    assert e.node_feature.tolist() == [0, -1, -1]  # root splits on A, two leaves
    # Root: k = sum(y) / sum(f) = 150 / 120; children: 30 / 60 = 0.5 and 120 / 60 = 2.
    assert_allclose(e.node_value[:, 0], [150 / 120, 0.5, 2.0], rtol=1e-15)
    assert e.node_weight.tolist() == [1200.0, 600.0, 600.0]
    assert_allclose(model.predict(X), np.where(np.asarray(X["A"]) == "a0", 0.05, 0.2), rtol=1e-15)


def brier_after_split(f: np.ndarray, y: np.ndarray, groups: np.ndarray) -> float:
    """Squared error of k_b * f with k_b = sum(y) / sum(f) per group, computed row by row."""
    loss = 0.0
    for g in np.unique(groups):
        m = groups == g
        loss += float((((y[m].sum() / f[m].sum()) * f[m] - y[m]) ** 2).sum())
    return loss


def test_second_level_splits_only_where_the_feature_matters() -> None:
    X, y = two_segment_frame()
    # Inside A=1, make B=b0 all-negative and move its positives to b1: B matters there only.
    y = y.copy()
    a1 = (X["A"] == "a1").to_numpy()
    b = X["B"].to_numpy()
    y[a1 & (b == "b0")] = 0.0
    y[np.flatnonzero(a1 & (b == "b1"))[:80]] = 1.0
    model = MBCT(max_depth=2, **HAND).fit(X, y)
    e = model.ensemble_
    f = X["score"].to_numpy()
    by_a = brier_after_split(f, y, X["A"].to_numpy())
    by_b = brier_after_split(f, y, b)
    assert e.feature_names[e.node_feature[0]] == ("A" if by_a < by_b else "B")
    pred = model.predict(X).to_numpy()
    # Whatever the order, the two levels isolate the (A, B) cells that differ: A=1 by B, A=0 pooled.
    for cell_a in ("a0", "a1"):
        for cell_b in ("b0", "b1", "b2"):
            m = (X["A"] == cell_a).to_numpy() & (b == cell_b)
            assert_allclose(pred[m], y[m].mean(), rtol=1e-14, atol=1e-15)
    if e.feature_names[e.node_feature[0]] == "A":
        a0_node = next(c for c, codes in e.children(0).items() if codes == [0])
        assert e.node_feature[a0_node] == -1  # B is pure noise inside A=0: no split lowers the loss


@pytest.mark.parametrize(
    "params", [{"max_depth": 0}, {"min_node_size": 5000.0}], ids=["rule1-depth", "rule2-size"]
)
def test_stopping_rules_leave_the_root_alone(params: dict) -> None:
    X, y = two_segment_frame()
    model = MBCT(**{**HAND, **params}).fit(X, y)
    assert model.ensemble_.node_feature.tolist() == [-1]
    assert_allclose(model.predict(X), 0.125, rtol=1e-15)


def grow_config(**changes) -> _grow.GrowConfig:
    base = {
        "leaf_map": "scale",
        "criterion": "gain",
        "max_depth": 3,
        "min_node_size": 1.0,
        "min_child_size": 1.0,
        "penalty": 0.0,
        "n_views": 4,
        "mvce_bin_size": 2,
        "mvce_p": 2.0,
        "seed": 0,
    }
    return _grow.GrowConfig(**{**base, **changes})


def test_rule3_a_split_that_raises_the_local_loss_is_not_made() -> None:
    # k = sum(y) / sum(f) zeroes each child's PCE but is not the least-squares slope. Child x:
    # f = (0.1, 0.9), y = (1, 0): k = 1, squared error 1.62; child z: f = (0.5, 0.5), y = (0, 0): k = 0,
    # error 0. The root's k = 0.5 has error 1.105 + 0.125 = 1.23 < 1.62: splitting raises the loss.
    codes = np.array([[0], [0], [1], [1]], dtype=np.int8)
    f = np.array([0.1, 0.9, 0.5, 0.5])
    y = np.array([1.0, 0.0, 0.0, 0.0])
    no_rare = np.array([-1])
    nodes, _ = _grow.grow_tree(codes, f, y, None, np.array([2]), no_rare, grow_config())
    assert nodes.feature == [-1]
    assert_allclose(nodes.values, [[0.5, 0.0]])
    # Flip child z's labels: now its k = 2 and the split lowers the loss (0 + 1.62 - ... checked by hand).
    y2 = np.array([1.0, 0.0, 1.0, 1.0])
    nodes2, leaf2 = _grow.grow_tree(codes, f, y2, None, np.array([2]), no_rare, grow_config())
    root_loss = (((3.0 / 2.0) * f - y2) ** 2).sum()
    split_loss = ((1.0 * f[:2] - y2[:2]) ** 2).sum() + ((2.0 * f[2:] - y2[2:]) ** 2).sum()
    assert split_loss < root_loss
    assert nodes2.feature[0] == 0
    assert_array_equal(leaf2, [1, 1, 2, 2])


def test_rare_values_are_pooled_into_one_rest_child_and_unseen_values_join_it() -> None:
    rng = np.random.default_rng(0)
    n = 4000
    site = np.where(
        rng.random(n) < 0.9, rng.choice(["big1", "big2"], n), rng.choice([f"r{i}" for i in range(40)], n)
    )
    X = pd.DataFrame({"score": np.full(n, 0.2), "site": site})
    y = (rng.random(n) < np.where(site == "big1", 0.1, 0.3)).astype(float)
    model = MBCT(
        **PAPER_MAP, score_bins=0, min_node_size=100.0, min_child_size=200.0, max_depth=1, max_trees=1
    )
    model.fit(X, y)
    e = model.ensemble_
    assert e.n_values.tolist() == [3]  # big1, big2 and the shared rare code
    assert e.rare_codes.tolist() == [2]
    assert sorted(len(codes) for codes in e.children(0).values()) == [1, 1, 1]
    rare_rows = ~np.isin(site, ["big1", "big2"])
    pred = model.predict(X).to_numpy()
    assert np.unique(pred[rare_rows]).size == 1
    assert_allclose(pred[rare_rows][0], y[rare_rows].mean(), rtol=1e-12)
    unseen = model.predict(pd.DataFrame({"score": [0.2], "site": ["never-seen"]})).to_numpy()
    assert_allclose(unseen, pred[rare_rows][:1])


def test_trees_chain_multiplicatively_and_stop_when_the_global_loss_stops_falling() -> None:
    df = make_ctr(40_000, "segment_bias", seed=3)
    feats = ["region", "device", "hour"]
    model = MBCT(**PAPER_MAP, categorical_cols=feats, feature_cols=feats, max_trees=4, max_depth=2)
    model.fit(df, df.label)
    hist = model.history_
    kept = [h for h in hist if h["kept"]]
    assert len(kept) == model.ensemble_.n_trees >= 1
    assert all(h["loss_after"] < h["loss_before"] for h in kept)
    assert len(hist) == 4 or not hist[-1]["kept"]
    # The chain: prediction = min(... min(k1 * f, 1) * k2 ..., 1) along each row's leaves.
    leaves = model.leaves(df)
    expected = df["score"].to_numpy().copy()
    for t in range(model.ensemble_.n_trees):
        expected = np.minimum(model.ensemble_.node_value[leaves[:, t], 0] * expected, 1.0)
    assert_array_equal(model.predict(df), expected)


def test_segment_bias_is_fixed_by_the_regularised_configuration() -> None:
    df = make_ctr(120_000, "segment_bias", seed=5)
    train, test = df.iloc[:60_000], df.iloc[60_000:]
    feats = ["region", "device", "hour", "user_segment"]
    model = MBCT(
        feature_cols=feats,
        categorical_cols=feats,
        leaf_map="shift",
        leaf_penalty=100.0,
        learning_rate=0.5,
        validation_fraction=0.2,
    ).fit(train, train.label)
    oracle = log_loss(test.label, test.p_true)
    assert log_loss(test.label, model.predict(test)) < log_loss(test.label, test.score)
    assert log_loss(test.label, model.predict(test)) / oracle - 1 < 0.02


def test_mvce_criterion_picks_the_informative_feature_with_shared_views() -> None:
    rng = np.random.default_rng(1)
    n = 20_000
    seg = rng.integers(0, 2, n)
    noise = rng.integers(0, 4, n)
    f = np.full(n, 0.2)
    y = (rng.random(n) < np.where(seg == 1, 0.3, 0.1)).astype(float)
    X = pd.DataFrame({"score": f, "noise": noise.astype(str), "seg": seg.astype(str)})
    params = {"criterion": "mvce", "n_views": 20, "max_depth": 1, "max_trees": 1, "score_bins": 0}
    model = MBCT(**params).fit(X, y)
    assert model.ensemble_.feature_names[model.ensemble_.node_feature[0]] == "seg"
    again = MBCT(**params).fit(X, y)
    assert_array_equal(model.ensemble_.node_value, again.ensemble_.node_value)


def test_integer_weights_equal_repeated_rows_and_aggregation_is_lossless() -> None:
    df = make_ctr(20_000, "mixed", seed=7)
    feats = ["region", "device", "hour"]
    df["score"] = df["score"].round(2).clip(0.005, 0.995)  # ties, so rows merge
    w = np.random.default_rng(0).integers(1, 4, len(df))
    # No validation split: it would hold out different rows of the weighted and the repeated data.
    base = {"feature_cols": feats, "categorical_cols": feats, "max_trees": 2, "min_node_size": 300.0}
    base["validation_fraction"] = 0.0
    weighted = MBCT(**base, aggregate=False).fit(df, df.label, sample_weight=w)
    repeated_df = df.loc[df.index.repeat(w)].reset_index(drop=True)
    repeated = MBCT(**base, aggregate=False).fit(repeated_df, repeated_df.label)
    merged = MBCT(**base, aggregate=True).fit(repeated_df, repeated_df.label)
    for other in (repeated, merged):
        assert_array_equal(weighted.ensemble_.node_feature, other.ensemble_.node_feature)
        # To the fits' tolerance, not to rounding: a Platt fit of 16,384 rows or more reads its bins'
        # moments, one of fewer takes Newton passes, and the weighted, repeated and merged rows of one
        # node need not fall on the same side of that count.
        assert_allclose(weighted.ensemble_.node_value, other.ensemble_.node_value, rtol=1e-10, atol=1e-11)


def test_save_load_round_trip_and_a_corrupt_file_fails_clearly(tmp_path) -> None:
    df = make_ctr(30_000, "mixed", seed=2)
    feats = ["region", "device", "site_id"]
    model = MBCT(feature_cols=feats, categorical_cols=["region", "device"], max_trees=2).fit(df, df.label)
    path = tmp_path / "mbct.json"
    model.save(path)
    loaded = gpucal.load(path)
    assert_array_equal(loaded.predict(df), model.predict(df))
    doc = json.loads(path.read_text())
    doc["state"]["ensemble_"]["child_table"][0] = 10**6
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ModelFileError, match="child_table"):
        gpucal.load(bad)


@pytest.mark.parametrize(
    ("leaf_map", "edit", "match"),
    [
        # n_values near 2**63 wrapped base + width below the table's end: rows read past it.
        ("platt", lambda e: e["n_values"].__setitem__(2, 2**63 - 1), "node_child_base"),
        # A negative scale factor predicted below 0; a slope of 1e308 then 0 predicted NaN.
        ("scale", lambda e: e["node_value"].__setitem__(0, [-2.0, 0.0]), "scale map's factor is negative"),
        ("platt", lambda e: e.__setitem__("node_value", [[1e308, 0.0]] * len(e["node_value"])), "logit"),
        # numpy reads true as 1.0 and "1.0" as 1.0: the file format allows neither.
        ("platt", lambda e: e["node_value"].__setitem__(0, [True, 0.0]), "list of numbers"),
        ("platt", lambda e: e["node_value"].__setitem__(0, ["1.0", 0.0]), "list of numbers"),
    ],
)
def test_hostile_ensembles_are_refused_at_load(leaf_map: str, edit: Any, match: str, tmp_path) -> None:
    df = make_ctr(6_000, "mixed", seed=2)
    feats = ["region", "device"]
    fitted = MBCT(feature_cols=feats, categorical_cols=feats, leaf_map=leaf_map, max_trees=2).fit(
        df, df.label
    )
    doc = json.loads(json.dumps(gpucal.persistence.to_dict(fitted)))
    edit(doc["state"]["ensemble_"])
    with pytest.raises(ModelFileError, match=match):
        gpucal.persistence.from_dict(doc)


def test_a_split_node_made_a_leaf_in_the_file_loads_and_predicts_or_is_refused(tmp_path) -> None:
    """Its children then belong, for the walk, to the split node before it: such files loaded and
    failed at predict ("child_table: node 17 has child 34 outside its tree or before it")."""
    df = make_ctr(6_000, "mixed", seed=2)
    feats = ["region", "device", "site_id"]
    fitted = MBCT(feature_cols=feats, categorical_cols=feats, max_trees=2).fit(df, df.label)
    doc = gpucal.persistence.to_dict(fitted)
    splits = [m for m, f in enumerate(doc["state"]["ensemble_"]["node_feature"]) if f >= 0]
    refused = 0
    for m in splits:
        edited = json.loads(json.dumps(doc))
        edited["state"]["ensemble_"]["node_feature"][m] = -1
        try:
            loaded = gpucal.persistence.from_dict(edited)
        except ModelFileError:
            refused += 1
            continue
        assert np.isfinite(loaded.predict(df)).all()
    assert refused > 0


def test_pandas_in_pandas_out_and_polars_in() -> None:
    pl = pytest.importorskip("polars")
    df = make_ctr(10_000, "mixed", seed=4)
    df.index = df.index + 100
    feats = ["region", "device"]
    model = MBCT(feature_cols=feats, categorical_cols=feats, max_trees=1).fit(df, df.label)
    out = model.predict(df)
    assert isinstance(out, pd.Series)
    assert out.index.equals(df.index)
    polars_out = model.predict(pl.from_pandas(df[["score", *feats]]))
    assert isinstance(polars_out, pl.Series)
    assert_array_equal(polars_out.to_numpy(), out.to_numpy())


def test_interrupt_keeps_the_finished_trees(monkeypatch) -> None:
    df = make_ctr(10_000, "mixed", seed=4)
    feats = ["region", "device"]
    real = _grow.grow_tree_on
    calls = {"n": 0}

    def interrupt_second(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr("gpucal.mbct.fit.grow_tree_on", interrupt_second)
    model = MBCT(**PAPER_MAP, feature_cols=feats, categorical_cols=feats, max_trees=5)
    with pytest.warns(RuntimeWarning, match="interrupted"):
        model.fit(df, df.label)
    assert model.interrupted_
    assert model.ensemble_.n_trees == 1
    assert model.predict(df).shape == (len(df),)


def test_verbose_reports_beta_trees_and_levels(capsys) -> None:
    X, y = two_segment_frame()
    MBCT(**PAPER_MAP, score_bins=0, max_trees=1, verbose=2).fit(X, y)
    err = capsys.readouterr().err
    assert "beta (Eq. 13" in err
    assert "tree 1" in err
    assert "level 1" in err


def test_eq13_beta_is_where_the_theorem1_bound_reaches_e() -> None:
    beta = min_node_size(1e6, 0.05 * 0.95, alpha=0.05, e=0.1)
    assert theorem1_bound(beta, 1e6, 0.0475, 0.05) >= 0.1 > theorem1_bound(beta + 1, 1e6, 0.0475, 0.05)
    assert 100 < beta < 2000
    assert min_node_size(1e6, 0.0475, alpha=0.05, e=0.05) > beta  # a tighter error needs bigger nodes


def test_parameters_are_checked_when_fit_starts_and_clone_works() -> None:
    X, y = two_segment_frame()
    model = MBCT(leaf_map="cubic")
    assert clone(model).get_params()["leaf_map"] == "cubic"
    with pytest.raises(ValueError, match="'leaf_map' parameter of MBCT"):
        model.fit(X, y)
    with pytest.raises(ValueError, match="'min_node_size' parameter of MBCT must be one of"):
        MBCT(min_node_size="big").fit(X, y)
    with pytest.raises(KeyError, match="nope"):
        MBCT(feature_cols=["nope"]).fit(X, y)
    with pytest.raises(ValueError, match="positive"):
        MBCT(**PAPER_MAP).fit(X, np.zeros(len(y)))
    with pytest.raises(ValueError, match=r"X\[.score.\]: 1 value\(s\) \(first at row 3: nan\) are NaN"):
        MBCT().fit(X.assign(score=np.where(np.arange(len(y)) == 3, np.nan, X["score"])), y)
    with pytest.raises(ValueError, match="needs a feature column"):
        MBCT(score_bins=0).fit(X[["score"]], y)


def test_no_warnings_on_a_plain_fit() -> None:
    X, y = two_segment_frame()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MBCT(score_bins=0).fit(X, y).predict(X)


def test_merging_is_tried_only_when_a_sample_says_it_halves_the_rows() -> None:
    rng = np.random.default_rng(0)
    n = 300_000
    codes = rng.integers(0, 20, (n, 2)).astype(np.int8)
    distinct_scores = np.round(rng.random(n), 2)
    assert estimated_distinct(codes, distinct_scores) == pytest.approx(20 * 20 * 101, rel=0.2)
    merged = aggregate_rows(codes, distinct_scores, (rng.random(n) < 0.3).astype(float), None)
    assert merged is not None
    assert merged[0].shape[0] == np.unique(np.c_[codes, distinct_scores * 100], axis=0).shape[0]
    assert_allclose(merged[3].sum(), n)
    assert aggregate_rows(codes, rng.random(n), np.zeros(n), None) is None  # every score distinct


def test_split_losses_equal_but_for_rounding_pick_the_first_feature() -> None:
    """A field and its relabelled copy split a node alike; their losses differ only in the last bits,
    by summation order, which differs between backends and Dask partitions: the first must win."""
    lowest = 2.0
    split_loss = np.array([[3.0, lowest * (1 + 4e-16), lowest, np.inf], [np.inf] * 4])
    chosen = _grow.first_best(split_loss, np.array([10.0, 1.0]))
    assert chosen[0] == 1
    assert np.isinf(split_loss[1, chosen[1]])


def test_logit_scores_are_refused_with_a_fix_mbct_takes() -> None:
    """MBCT has no score_kind: the message offers the logistic function too, not only score_kind='logit'."""
    X = pd.DataFrame({"score": np.linspace(-2.0, 2.0, 100), "site": np.arange(100) % 3})
    with pytest.raises(ValueError, match=r"outside \[0, 1\].*scipy\.special\.expit"):
        MBCT().fit(X, np.arange(100) % 2)
    with pytest.raises(TypeError, match="score_kind"):
        gpucal.make_calibrator("mbct", score_kind="logit")
