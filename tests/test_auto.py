"""AutoCalibrator (issue 14): selection by cross-fitting, folds, weights, blend, report, saving, families."""

from __future__ import annotations

import itertools
import json
import warnings
from contextlib import nullcontext
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import expit
from sklearn.base import BaseEstimator, clone

import gpucal
from gpucal._frames import frame_columns
from gpucal.auto import AutoCalibrator, sizing
from gpucal.auto import candidates as candidates_module
from gpucal.auto import guard as guard_module
from gpucal.auto import model as auto_model
from gpucal.auto.blend import (
    MIN_MEMBER_WEIGHT,
    fit_blend,
    logits,
    loss_and_gradient,
    mean_log_loss,
    member_losses,
)
from gpucal.auto.candidates import FEATURE_CANDIDATES, SMOOTH_CANDIDATES, Candidate
from gpucal.auto.cross_fit import CrossFitting
from gpucal.auto.folds import (
    grouped_folds,
    host_rows,
    nested_subsamples,
    on_device,
    stratified_folds,
    without_attrs,
)
from gpucal.auto.guard import order_guard, within_fold_auc
from gpucal.auto.report import ROW_LOSSES, fold_scores
from gpucal.calibrators import _feature_platt_solver as feature_platt_solver
from gpucal.calibrators.feature_platt import L2_SMOOTH
from gpucal.calibrators.hinge_platt import HingePlattCalibrator
from gpucal.datasets import make_ctr
from gpucal.encoding import FeatureEncoder
from gpucal.factory import make_calibrator
from gpucal.metrics import roc_auc
from gpucal.persistence import ModelFileError, from_dict, to_dict
from tests._stand_ins import DeviceArray

FIELDS = ["site_id", "ad_category", "region", "hour", "user_segment", "device"]
FAST = ["platt", "isotonic", "feature_platt"]


class ConstantHalf(BaseEstimator):
    """A calibrator that always loses: it predicts 0.5 whatever the score."""

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> ConstantHalf:
        self.fitted_ = True
        return self

    def predict(self, X: Any) -> np.ndarray:
        return np.full(len(X), 0.5)


class ConstantRate(BaseEstimator):
    """Predicts the training rows' positive rate: a tiny ECE, and no ranking at all (AUC 0.5)."""

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> ConstantRate:
        self.rate_ = float(np.mean(y))
        return self

    def predict(self, X: Any) -> np.ndarray:
        return np.full(len(X), self.rate_)


@pytest.fixture(scope="module")
def ctr() -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame]:
    """make_ctr segment-bias rows: 3,000 to fit, 2,000 held out."""
    fit = make_ctr(3_000, "segment_bias", seed=0)
    held_out = make_ctr(2_000, "segment_bias", seed=0, row_offset=3_000)
    return fit[["score", *FIELDS]], fit["label"].to_numpy(), held_out[["score", *FIELDS]]


def auto(**params: Any) -> AutoCalibrator:
    return AutoCalibrator(categorical_cols=FIELDS, **{"candidates": FAST, **params})


class PredictsNaN(ConstantHalf):
    """A calibrator whose predictions are not probabilities."""

    def predict(self, X: Any) -> np.ndarray:
        return np.full(len(X), np.nan)


def test_a_candidate_predicting_nan_fails_alone(ctr: Any) -> None:
    X, y, _ = ctr
    with pytest.warns(UserWarning, match=r"1 of 2 candidates failed \(the first, PredictsNaN: error"):
        model = auto(candidates=[PredictsNaN(), "platt"]).fit(X, y)
    status = model.cv_results_["status"].tolist()
    assert status[0].startswith("error: ValueError: the candidate's held-out predictions: ")
    assert "NaN" in status[0]
    assert status[1] == "ok"
    assert model.best_index_ == 1


def test_losing_candidate_is_never_picked(ctr: Any) -> None:
    X, y, _ = ctr
    raced = auto(candidates=[ConstantHalf(), "platt", "isotonic"]).fit(X, y)
    assert not isinstance(raced.best_estimator_, ConstantHalf)
    model = auto(candidates=[ConstantHalf(), "platt", "isotonic"], drop_threshold=None).fit(X, y)
    results = model.cv_results_
    assert results["candidate"].tolist() == ["ConstantHalf", "platt", "isotonic"]
    assert model.best_index_ != 0
    assert int(results.loc[0, "rank_test_score"]) == 3
    assert not isinstance(model.best_estimator_, ConstantHalf)
    scoring = results["mean_test_log_loss"].to_numpy()
    assert model.best_index_ == int(np.argmin(scoring))


def test_racing_drops_a_trailing_candidate_early(ctr: Any) -> None:
    X, y, _ = ctr
    raced = auto(candidates=["platt", ConstantHalf()]).fit(X, y)
    assert raced.cv_results_["status"].tolist() == ["ok", "dropped after 1 fold(s)"]
    assert raced.cv_results_["n_folds_fitted"].tolist() == [5, 1]
    assert np.isnan(raced.oof_predictions_[:, 1]).all()
    full = auto(candidates=["platt", ConstantHalf()], drop_threshold=None).fit(X, y)
    assert full.cv_results_["status"].tolist() == ["ok", "ok"]
    assert full.best_index_ == 0


@pytest.mark.parametrize("scoring", ["log_loss", "brier", "ece"])
def test_best_is_lowest_mean_score(ctr: Any, scoring: str) -> None:
    X, y, _ = ctr
    model = auto(scoring=scoring).fit(X, y)
    means = model.cv_results_[f"mean_test_{scoring}"].to_numpy()
    assert model.best_index_ == int(np.argmin(means))
    assert model.cv_results_.loc[model.best_index_, "rank_test_score"] == 1


def test_folds_are_deterministic(ctr: Any) -> None:
    X, y, _ = ctr
    first = auto().fit(X, y)
    second = auto().fit(X, y)
    numbers = [c for c in first.cv_results_.columns if c.startswith(("mean_test", "std_test"))]
    assert_array_equal(first.cv_results_[numbers].to_numpy(), second.cv_results_[numbers].to_numpy())
    assert_array_equal(first.oof_predictions_, second.oof_predictions_)
    other = auto(random_state=1).fit(X, y)
    assert not np.array_equal(first.oof_predictions_, other.oof_predictions_)


def test_stratified_folds_balance_the_classes() -> None:
    labels = np.r_[np.ones(50), np.zeros(950)]
    folds = stratified_folds(labels, 5, seed=3)
    assert_array_equal(folds, stratified_folds(labels, 5, seed=3))
    assert_array_equal(np.bincount(folds[labels == 1]), [10] * 5)
    assert_array_equal(np.bincount(folds), [200] * 5)


def test_grouped_folds_keep_groups_together() -> None:
    groups = np.repeat(np.arange(40), np.arange(1, 41))
    folds = grouped_folds(groups, 4, seed=0, weights=None)
    for group in range(40):
        assert np.unique(folds[groups == group]).size == 1
    assert np.bincount(folds).max() - np.bincount(folds).min() <= 40
    with pytest.raises(ValueError, match="fewer than n_folds=5"):
        grouped_folds(np.arange(3), 5, seed=0, weights=None)


def test_groups_by_column_name(ctr: Any) -> None:
    X, y, _ = ctr
    by_name = auto(candidates=["platt"]).fit(X, y, groups="site_id")
    by_array = auto(candidates=["platt"]).fit(X, y, groups=X["site_id"].to_numpy())
    assert_array_equal(by_name.oof_predictions_, by_array.oof_predictions_)


def test_groups_by_column_name_read_their_values(ctr: Any) -> None:
    """A string or categorical column named as ``groups`` gives the folds of an array of its values,
    whatever order its codes come in (first appearance, the categories' order)."""
    X, y, _ = ctr
    values = np.array([f"u{v:03d}" for v in X["site_id"].to_numpy() % 97], dtype=object)
    reordered = pd.Categorical(values, categories=sorted(set(values), reverse=True))
    by_array = auto(candidates=["platt"]).fit(X, y, groups=values)
    for column in (values, reordered):
        named = X.assign(user=pd.Series(column, index=X.index))
        by_name = auto(candidates=["platt"], feature_cols=FIELDS).fit(named, y, groups="user")
        assert_array_equal(by_name.oof_predictions_, by_array.oof_predictions_)
    ids = X["site_id"].to_numpy() % 97  # integer categories keep their dtype, which the hash reads
    by_ids = auto(candidates=["platt"]).fit(X, y, groups=ids)
    named = X.assign(user=pd.Series(ids, index=X.index, dtype="category"))
    by_name = auto(candidates=["platt"], feature_cols=FIELDS).fit(named, y, groups="user")
    assert_array_equal(by_name.oof_predictions_, by_ids.oof_predictions_)


def test_grouped_folds_follow_the_seed_on_every_dtype() -> None:
    ids = np.repeat(np.arange(60), 5)
    for groups in (ids, ids.astype(np.float64), ids.astype(str).astype(object)):
        seeded = {grouped_folds(groups, 3, seed=seed, weights=None).tobytes() for seed in range(4)}
        assert len(seeded) == 4
    assert not np.array_equal(
        grouped_folds(ids, 3, seed=0, weights=None), grouped_folds(ids, 3, seed=10**16, weights=None)
    )


def test_grouped_folds_take_groups_of_mixed_types() -> None:
    groups = np.array([1, "a", 2.5, "a", 1, "b", 3, 3], dtype=object)
    folds = grouped_folds(groups, 2, seed=0, weights=None)
    assert folds[1] == folds[3]
    assert folds[0] == folds[4]
    assert folds[6] == folds[7]


def test_a_groups_series_must_share_the_index_of_x(ctr: Any) -> None:
    X, y, _ = ctr
    groups = pd.Series(X["site_id"].to_numpy() % 7, index=X.index)
    auto(candidates=["platt"]).fit(X, y, groups=groups)  # the same index: paired by label
    with pytest.raises(ValueError, match="X and groups have different indexes"):
        auto(candidates=["platt"]).fit(X, y, groups=groups.sample(frac=1.0, random_state=0))


@pytest.mark.parametrize("missing", [None, np.nan])
def test_rows_without_a_group_are_refused(ctr: Any, missing: Any) -> None:
    X, y, _ = ctr
    groups = np.array([f"u{i % 7}" for i in range(len(y))], dtype=object)
    groups[[5, 9]] = missing
    with pytest.raises(ValueError, match=r"groups: 2 row\(s\) have no group .*first at row 5"):
        auto(candidates=["platt"]).fit(X, y, groups=groups)
    named = X.assign(user=pd.Series(groups, index=X.index, dtype="category"))
    with pytest.raises(ValueError, match=r"groups: 2 row\(s\) have no group"):
        auto(candidates=["platt"], feature_cols=FIELDS).fit(named, y, groups="user")
    nobody = X.assign(user=pd.Series(None, index=X.index, dtype="category"))
    with pytest.raises(ValueError, match=rf"groups: {len(y)} row\(s\) have no group"):
        auto(candidates=["platt"], feature_cols=FIELDS).fit(nobody, y, groups="user")


def test_one_class_is_refused_before_the_search(ctr: Any) -> None:
    X, y, _ = ctr
    with pytest.raises(ValueError, match=r"^y: no positive labels \(with non-zero weight\)"):
        auto(candidates=["platt", "isotonic"]).fit(X, np.zeros(len(y)))
    weights = (y < 0.5).astype(float)  # every positive row without weight
    with pytest.raises(ValueError, match=r"^y: no positive labels"):
        auto(candidates=["platt", "isotonic"], auc_guard=False).fit(X, y, sample_weight=weights)


def test_folds_without_rows_of_positive_weight_are_refused(ctr: Any) -> None:
    X, y, _ = ctr
    n_folds = int(max(np.sum(y >= 0.5), np.sum(y < 0.5))) + 1
    with pytest.raises(ValueError, match=rf"n_folds={n_folds}: 1 of the folds .* the larger class leave"):
        auto(candidates=["platt"], n_folds=n_folds).fit(X, y)
    groups = np.arange(len(y)) % 10
    weights = np.isin(groups, [0, 1, 2]).astype(float)  # three groups carry weight, five folds
    with pytest.raises(ValueError, match=r"n_folds=5: 2 of the folds .* fewer groups of positive weight"):
        auto(candidates=["platt"], n_folds=5).fit(X, y, sample_weight=weights, groups=groups)


def test_integer_weights_equal_repeated_rows(ctr: Any) -> None:
    X, y, held_out = ctr
    weights = np.random.default_rng(0).integers(0, 4, len(y))
    rows = np.repeat(np.arange(len(y)), weights)
    weighted = auto().fit(X, y, sample_weight=weights.astype(float), groups=np.arange(len(y)))
    repeated = auto().fit(X.iloc[rows], y[rows], groups=rows)
    assert weighted.best_index_ == repeated.best_index_
    numbers = ["mean_test_log_loss", "mean_test_brier"]
    assert_allclose(weighted.cv_results_[numbers], repeated.cv_results_[numbers], rtol=1e-6)
    assert_allclose(weighted.predict(held_out), repeated.predict(held_out), rtol=1e-6, atol=1e-9)


def test_candidates_with_numpy_scalar_parameters_save_and_load(ctr: Any, tmp_path: Any) -> None:
    X, y, held_out = ctr
    candidates = ["platt", make_calibrator("mbct", max_depth=np.int64(3), categorical_cols=FIELDS)]
    model = auto(candidates=candidates, drop_threshold=None).fit(X, y)
    model.save(tmp_path / "auto.json")
    assert_array_equal(gpucal.load(tmp_path / "auto.json").predict(held_out), model.predict(held_out))


@pytest.mark.parametrize("ensemble", [False, True])
def test_save_load_equal(ctr: Any, tmp_path: Any, ensemble: bool) -> None:
    X, y, held_out = ctr
    model = auto(ensemble=ensemble, candidates=[*FAST, make_calibrator("beta")]).fit(X, y)
    path = tmp_path / "auto.json"
    model.save(path)
    loaded = gpucal.load(path)
    assert_array_equal(loaded.predict(held_out), model.predict(held_out))
    pd.testing.assert_frame_equal(loaded.cv_results_, model.cv_results_, check_dtype=False)
    assert loaded.best_index_ == model.best_index_
    assert type(loaded.best_estimator_) is type(model.best_estimator_)
    beta = {"class": "BetaCalibrator", "params": make_calibrator("beta").get_params()}
    assert loaded.candidates[-1] == beta
    assert_array_equal(clone(loaded).fit(X, y).predict(held_out), model.predict(held_out))


def test_load_rejects_bad_members(ctr: Any) -> None:
    X, y, _ = ctr
    document = json.loads(json.dumps(to_dict(auto(candidates=["platt"]).fit(X, y))))
    nested = json.loads(json.dumps(document))
    nested["state"]["members_"][0] = json.loads(json.dumps(document))
    with pytest.raises(ModelFileError, match="members are single calibrators"):
        from_dict(nested)
    hostile = json.loads(json.dumps(document))
    hostile["state"]["members_"][0]["class"] = "os.system"
    with pytest.raises(ModelFileError, match="unknown calibrator class"):
        from_dict(hostile)
    negative = json.loads(json.dumps(document))
    negative["state"]["weights_"] = [-1.0]
    with pytest.raises(ModelFileError, match="non-negative"):
        from_dict(negative)
    zero = json.loads(json.dumps(document))
    zero["state"]["weights_"] = [0.0]
    with pytest.raises(ModelFileError, match="weights_ are all zero"):
        from_dict(zero)
    rng = np.random.default_rng(0)
    matrix, classes = rng.dirichlet(np.ones(3), 300), rng.integers(0, 3, 300)
    for name in ("temperature", "dirichlet"):
        multiclass = json.loads(json.dumps(document))
        multiclass["state"]["members_"][0] = to_dict(make_calibrator(name).fit(matrix, classes))
        with pytest.raises(ModelFileError, match=r"members_\[0\] is a .*(fitted on 3 classes|matrix per)"):
            from_dict(multiclass)
    binary = json.loads(json.dumps(document))
    two = np.c_[matrix[:, 0], 1.0 - matrix[:, 0]]
    binary["state"]["members_"][0] = to_dict(make_calibrator("dirichlet").fit(two, classes % 2))
    with pytest.raises(ModelFileError, match="DirichletCalibrator, which reads a matrix per class"):
        from_dict(binary)


def test_ensemble_weights_convex_and_no_worse_than_best_member(ctr: Any) -> None:
    X, y, held_out = ctr
    model = auto(ensemble=True, candidates=[*FAST, "beta"]).fit(X, y)
    blend = model.cv_results_["blend_weight"].to_numpy()
    assert np.all(blend >= 0)
    assert blend.sum() == pytest.approx(1.0)
    assert_allclose(np.sort(model.weights_[model.weights_ > 0]), np.sort(blend[blend > 0]))
    fitted = np.flatnonzero(model.cv_results_["status"] == "ok")
    assert np.all(blend[np.setdiff1d(np.arange(len(blend)), fitted)] == 0)
    member_logits, blend = logits(model.oof_predictions_[:, fitted]), blend[fitted]
    weights = np.ones(len(y))
    blended = mean_log_loss(member_logits @ blend + model.intercept_, y, weights)
    best_member = min(mean_log_loss(member_logits[:, k], y, weights) for k in range(len(blend)))
    assert blended <= best_member + 1e-12
    assert model.predict(held_out).shape == (len(held_out),)


def test_blend_falls_back_to_the_best_member() -> None:
    rng = np.random.default_rng(0)
    y = (rng.uniform(size=500) < 0.3).astype(float)
    good = np.where(y == 1, 2.0, -2.0) + rng.normal(size=500)
    fit = fit_blend(np.column_stack([good, np.zeros(500)]), y, np.ones(500))
    assert fit.weights[0] == pytest.approx(1.0, abs=1e-6)
    assert fit.loss <= mean_log_loss(good, y, np.ones(500)) + 1e-12


def test_dataframe_families_in_and_out(ctr: Any) -> None:
    X, y, held_out = ctr
    model = auto(candidates=["platt", "feature_platt"]).fit(pl.from_pandas(X), pl.Series(y))
    out = model.predict(pl.from_pandas(held_out))
    assert isinstance(out, pl.Series)
    indexed = held_out.set_axis(np.arange(len(held_out)) + 10)
    pandas_out = model.predict(indexed)
    assert isinstance(pandas_out, pd.Series)
    assert_array_equal(pandas_out.index, indexed.index)
    assert_allclose(pandas_out.to_numpy(), out.to_numpy())
    numpy_out = AutoCalibrator(output_type="numpy", candidates=["platt"]).fit(X, y).predict(X)
    assert isinstance(numpy_out, np.ndarray)


def test_one_dimensional_input_uses_score_only_candidates() -> None:
    rng = np.random.default_rng(0)
    score = rng.uniform(0.01, 0.99, 2_000)
    y = (rng.uniform(size=2_000) < score**2).astype(float)
    model = AutoCalibrator().fit(score, y)
    assert model.cv_results_["method"].tolist() == ["platt", "beta", "platt_hinge", "centered_isotonic"]
    assert model.predict(score).shape == (2_000,)


def test_given_estimators_take_the_column_parameters_left_at_default() -> None:
    rng = np.random.default_rng(0)
    margin = rng.normal(size=(2_000, 2))
    y = (rng.uniform(size=2_000) < 1 / (1 + np.exp(-margin[:, 0]))).astype(float)
    given = [make_calibrator("platt"), {"class": "IsotonicCalibrator", "params": {"score_col": 5}}]
    model = AutoCalibrator(candidates=given, score_col=0, score_kind="logit", drop_threshold=None)
    with pytest.warns(UserWarning, match="1 of 2 candidates failed"):
        model.fit(margin, y)
    assert model.estimators_[0].get_params()["score_col"] == 0
    assert model.cv_results_["status"].tolist()[0] == "ok"
    assert model.cv_results_["status"].tolist()[1].startswith("error: KeyError")  # kept its score_col=5


def test_logit_scores_keep_the_maps_that_take_margins(ctr: Any) -> None:
    X, y, _ = ctr
    margins = X.assign(score=np.log(X["score"] / (1 - X["score"])))
    model = AutoCalibrator(categorical_cols=FIELDS, score_kind="logit", candidates=None)
    names = [c.name for c in model._resolve_candidates(has_features=True)]
    assert not {"beta", "mbct", "hc"} & set(names)
    assert {"platt", "centered_isotonic", "feature_platt"} <= set(names)
    fitted = AutoCalibrator(categorical_cols=FIELDS, score_kind="logit", candidates=FAST).fit(margins, y)
    assert fitted.predict(margins).between(0, 1).all()


def test_failed_candidate_is_reported_not_chosen(ctr: Any) -> None:
    X, y, _ = ctr
    with pytest.warns(UserWarning, match=r"1 of 2 candidates failed \(the first, feature_platt: error"):
        model = AutoCalibrator(candidates=["platt", "feature_platt"], feature_cols=[]).fit(X, y)
    status = model.cv_results_["status"].tolist()
    assert status[0] == "ok"
    assert status[1].startswith("error: ValueError")
    assert model.best_index_ == 0
    with pytest.raises(ValueError, match="no candidate could be fitted"):
        AutoCalibrator(candidates=["feature_platt"], feature_cols=[]).fit(X, y)


def test_verbose_lines(ctr: Any, capsys: Any) -> None:
    X, y, _ = ctr
    auto(verbose=1).fit(X, y)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == len(FAST) + 2
    assert lines[0].startswith("[AutoCalibrator] features read by value: ")  # how each feature is read
    assert lines[1].startswith("[AutoCalibrator] 1/3 platt: log_loss")
    assert lines[-1].startswith("[AutoCalibrator] best: ")
    auto(verbose=2, candidates=["platt"]).fit(X, y)
    assert "fold 5/5" in capsys.readouterr().err


def test_time_budget_skips_the_rest(ctr: Any, capsys: Any) -> None:
    X, y, _ = ctr
    model = auto(time_budget=1e-9, verbose=1).fit(X, y)
    assert model.cv_results_["status"].tolist() == ["ok", "skipped", "skipped"]
    assert model.best_index_ == 0
    assert "skipped (time budget): isotonic, feature_platt" in capsys.readouterr().err


def test_export_rules_follows_the_winner(ctr: Any) -> None:
    X, y, _ = ctr
    mbct = auto(candidates=["mbct"]).fit(X, y)
    assert mbct.export_rules() == mbct.best_estimator_.export_rules()
    with pytest.raises(TypeError, match="PlattCalibrator, which has no rules"):
        auto(candidates=["platt"]).fit(X, y).export_rules()
    # One member left in the blend, its logit shifted by the intercept: its rules are not the prediction.
    rng = np.random.default_rng(0)
    score, field, number = rng.uniform(0.02, 0.98, 400), rng.integers(0, 4, 400), rng.normal(size=400)
    truth = expit(np.log(score / (1 - score)) + 0.5 * (field == 1) - 0.3 * number)
    labels = (rng.random(400) < truth).astype(float)
    small = pd.DataFrame({"score": score, "field": field, "number": number})
    trees = [make_calibrator("mbct", min_node_size=80.0), make_calibrator("mbct", min_node_size=300.0)]
    shifted = AutoCalibrator(candidates=trees, auc_guard=False).fit(small, labels)
    assert shifted.weights_.tolist() == [1.0]
    assert shifted.intercept_ != 0.0
    with pytest.raises(TypeError, match=r"predicts a blend \(weights \[1.0\], intercept"):
        shifted.export_rules()


def test_registry_params_and_errors(ctr: Any) -> None:
    X, y, _ = ctr
    assert isinstance(make_calibrator("auto"), AutoCalibrator)
    assert gpucal.AutoCalibrator is AutoCalibrator
    assert clone(auto(n_folds=3)).get_params()["n_folds"] == 3
    with pytest.raises(ValueError, match="The 'n_folds' parameter of AutoCalibrator must be an int in"):
        AutoCalibrator(n_folds=1).fit(X, y)
    with pytest.raises(ValueError, match="unknown calibrator 'nope'"):
        AutoCalibrator(candidates=["nope"]).fit(X, y)
    with pytest.raises(ValueError, match="the list is empty"):
        AutoCalibrator(candidates=[]).fit(X, y)
    with pytest.raises(TypeError, match="not a gpucal calibrator"):
        auto(candidates=[ConstantHalf(), "platt"]).fit(X, y).save("unused.json")


def test_dask_is_refused(ctr: Any) -> None:
    dd = pytest.importorskip("dask.dataframe")
    X, y, _ = ctr
    X_dask, y_dask = dd.from_pandas(X, npartitions=2), dd.from_pandas(pd.Series(y), npartitions=2)
    with pytest.raises(NotImplementedError, match="candidates neucalib have no distributed fit"):
        AutoCalibrator(candidates=["platt", "neucalib"]).fit(X_dask, y_dask)
    with pytest.raises(NotImplementedError, match=r"which this version does not do\. Fit it on a sample"):
        AutoCalibrator(candidates=["platt", "mbct"]).fit(X_dask, y_dask)


# ---------------------------------------------------------------------------------------------------
# The rungs of the search: successive halving over growing subsamples (gpucal.auto.sizing)


def subsample_rows(labels: np.ndarray, n_rows: int, seed: int) -> np.ndarray:
    """One stratified subsample of ``n_rows`` rows (``nested_subsamples`` of one size)."""
    return nested_subsamples(labels, [n_rows], seed)[0]


def test_subsample_rows_is_seeded_sorted_and_stratified() -> None:
    labels = np.r_[np.ones(300), np.zeros(9_700)]
    rows = subsample_rows(labels, 1_000, seed=4)
    assert_array_equal(rows, subsample_rows(labels, 1_000, seed=4))
    assert rows.shape == (1_000,)
    assert np.all(np.diff(rows) > 0)
    assert labels[rows].sum() == 30  # the positive rate kept: 3%
    assert not np.array_equal(rows, subsample_rows(labels, 1_000, seed=5))
    assert_array_equal(subsample_rows(labels, 20_000, seed=4), np.arange(10_000))


@pytest.mark.parametrize("rate", [0.03, 0.5, 0.999])
def test_nested_subsamples_are_those_of_one_size_each_within_the_next(rate: float) -> None:
    labels = (np.random.default_rng(2).random(10_000) < rate).astype(np.float64)
    sizes = [7, 500, 2_000, 8_000, 10_000]
    samples = nested_subsamples(labels, sizes, seed=3)
    for size, sample in zip(sizes, samples, strict=True):
        assert_array_equal(sample, subsample_rows(labels, size, seed=3))
    for smaller, larger in itertools.pairwise(samples):
        assert np.isin(smaller, larger).all()


def test_plan_grows_the_rows_rung_by_rung() -> None:
    first, growth = sizing.FIRST_RUNG_ROWS, sizing.GROWTH
    small = sizing.plan_search(first, "auto", "auto")
    assert small.rungs == (sizing.Rung(first, sizing.MID_N_FOLDS),)
    assert not small.large
    tiny = sizing.plan_search(sizing.SMALL_ROWS, "auto", "auto")
    assert tiny.rungs == (sizing.Rung(sizing.SMALL_ROWS, sizing.SMALL_N_FOLDS),)
    mid = sizing.plan_search(2 * first * growth, "auto", "auto")
    assert [r.rows for r in mid.rungs] == [first, first * growth, 2 * first * growth]
    assert [r.n_folds for r in mid.rungs] == [sizing.SCREEN_N_FOLDS] * 2 + [sizing.LARGE_N_FOLDS]
    # A last step of less than MIN_STEP times the rows replaces the rung before it.
    assert [r.rows for r in sizing.plan_search(first + 1, "auto", "auto").rungs] == [first + 1]
    # A large set's last rung has every row (the finalists are compared on all of them), up to the cap.
    n_large = sizing.LARGE_ROWS + 1
    large = sizing.plan_search(n_large, "auto", "auto")
    assert (large.n_folds, large.cv_rows, large.large) == (sizing.LARGE_N_FOLDS, n_large, True)
    assert [r.rows for r in large.rungs] == [first, first * growth, n_large]
    assert large.rungs[0] == sizing.Rung(first, sizing.SCREEN_N_FOLDS)
    huge = sizing.plan_search(3 * sizing.LARGE_CV_ROWS, "auto", "auto")
    assert huge.cv_rows == sizing.LARGE_CV_ROWS
    given = sizing.plan_search(500_000, 4, None)
    assert (given.n_folds, given.cv_rows, given.large) == (4, 500_000, True)
    assert {r.n_folds for r in given.rungs} == {4}
    assert sizing.plan_search(1_000, 3, 5_000).cv_rows == 1_000
    assert [sizing.survivors_wanted(m) for m in (2, 3, 9, 10, 14)] == [2, 2, 3, 3, 4]


def test_rows_on_the_gpu_are_searched_on_the_host_below_host_rung_rows(
    ctr: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows on the GPU stand in here as rows said to be there: the rungs under HOST_RUNG_ROWS read one
    host copy of the largest such rung's rows and the host labels and weights, the last rung the rows
    as given, and the fit is the one without the switch."""
    X, y, _ = ctr
    weights = np.random.default_rng(1).uniform(0.5, 2.0, size=len(y))
    monkeypatch.setattr(sizing, "FIRST_RUNG_ROWS", 200)
    params = {"candidates": ["platt", "isotonic", "feature_platt"], "drop_threshold": None}
    plain = auto(**params).fit(X, y, sample_weight=weights)
    assert [rung["rows"] for rung in plain.rungs_] == [200, 800, 3_000]
    copies: list[pd.DataFrame] = []
    host_arrays: list[np.ndarray] = []
    searched: list[tuple[int, bool, bool, bool]] = []

    def host_copy(rows: pd.DataFrame) -> pd.DataFrame:
        copies.append(rows.copy())
        return copies[-1]

    def host_array(values: Any) -> np.ndarray:
        host_arrays.append(np.array(values, dtype=np.float64))
        return host_arrays[-1]

    def recorded(**fields: Any) -> CrossFitting:
        on_host = [fields["X"] is copy for copy in copies] == [True]
        read = (fields["labels"], fields["weights"])
        from_host = all(any(a is h for h in host_arrays) for a in read)
        searched.append((int((fields["folds"] >= 0).sum()), on_host, from_host, fields["X_rows"] is not None))
        return CrossFitting(**fields)

    monkeypatch.setattr(auto_model, "on_device", lambda X, labels: True)
    monkeypatch.setattr(auto_model, "host_rows", host_copy)
    monkeypatch.setattr(auto_model, "to_numpy", host_array)
    monkeypatch.setattr(auto_model, "HOST_RUNG_ROWS", 3_000)  # a rung of as many rows stays where it is
    monkeypatch.setattr(auto_model, "CrossFitting", recorded)
    switched = auto(**params).fit(X, y, sample_weight=weights)
    assert searched == [(200, True, True, True), (800, True, True, True), (3_000, False, False, False)]
    assert len(copies[0]) == 800  # the largest host rung's rows, copied once
    assert_array_equal(switched.cv_results_["mean_test_log_loss"], plain.cv_results_["mean_test_log_loss"])
    assert_array_equal(switched.oof_predictions_, plain.oof_predictions_)
    assert_array_equal(switched.predict(X), plain.predict(X))


def test_host_rows_copies_gpu_columns_only() -> None:
    class DeviceSeries:  # what host_rows reads of a cudf series; its to_pandas as cudf's behaves
        __module__ = "cudf.core.series"

        def __init__(self, values: pd.Series) -> None:
            self.values = values
            self.dtype = np.dtype("int64") if str(values.dtype) == "Int64" else values.dtype
            self.has_nulls = bool(values.isna().any())

        def to_pandas(self, nullable: bool = False) -> pd.Series:
            if nullable and isinstance(self.values.dtype, pd.CategoricalDtype):
                msg = "nullable types not supported for categorical columns"
                raise NotImplementedError(msg)
            if not nullable and str(self.values.dtype) == "Int64":  # ints with nulls read as floats
                return self.values.astype("float64")
            return self.values

    class DeviceFrame:  # what input_family and host_rows read of a cudf frame
        __module__ = "cudf.core.dataframe"
        columns = ("score", "site", "kind")

        class index:
            @staticmethod
            def to_pandas() -> pd.Index:
                return pd.RangeIndex(7, 307)

        def __getitem__(self, name: str) -> DeviceSeries:
            frame = {
                "score": pd.Series([0.25, 0.5, 0.75] * 100, index=range(7, 307)),
                "site": pd.Series(pd.array([3, None, 5] * 100, dtype="Int64"), index=range(7, 307)),
                "kind": pd.Series(pd.Categorical(["a", None, "b"] * 100), index=range(7, 307)),
            }
            return DeviceSeries(frame[name])

    values = np.array([0.25, 0.75])
    assert_array_equal(host_rows(DeviceArray(values)), values)
    assert isinstance(host_rows(DeviceArray(values)), np.ndarray)
    copied = host_rows(DeviceFrame())
    assert copied.index[:3].tolist() == [7, 8, 9]
    assert [str(copied[name].dtype) for name in DeviceFrame.columns] == ["float64", "Int64", "category"]
    # The integer column with nulls is read by value, as the device column is.
    assert FeatureEncoder().fit(copied[["site"]]).describe_columns() == "read by value: site (2 values)"
    columns = host_rows({"score": DeviceArray(values), "field": values})
    assert isinstance(columns["score"], np.ndarray)
    assert columns["field"] is values
    frame = pd.DataFrame({"score": values})
    assert host_rows(frame) is frame
    assert host_rows(values) is values
    assert on_device({"score": DeviceArray(values)}, values)
    assert on_device(frame, DeviceArray(values))
    assert not on_device(frame, values)


def test_successive_halving_leaves_the_worst_behind(ctr: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    X, y, _ = ctr
    monkeypatch.setattr(sizing, "FIRST_RUNG_ROWS", 1_000)
    monkeypatch.setattr(sizing, "MIN_SURVIVORS", 3)
    candidates = [ConstantHalf(), "platt", "isotonic", "feature_platt"]
    model = auto(candidates=candidates, drop_threshold=None, ensemble=False).fit(X, y)
    assert model.rungs_ == [
        {"rows": 1_000, "n_folds": sizing.SCREEN_N_FOLDS, "candidates": 4},
        {"rows": 3_000, "n_folds": sizing.SMALL_N_FOLDS, "candidates": 3},
    ]
    results = model.cv_results_
    assert results["status"].tolist() == ["halved out after 1,000 rows"] + ["ok"] * 3
    assert results["cv_rows"].tolist() == [1_000, 3_000, 3_000, 3_000]
    assert results["n_folds_fitted"].tolist() == [sizing.SCREEN_N_FOLDS, 5, 5, 5]
    assert np.isnan(model.oof_predictions_[:, 0]).all()  # the last rung's predictions only
    assert np.isfinite(model.oof_predictions_[:, 1:]).all()
    assert results["rank_test_score"].tolist()[0] == 4
    assert model.best_index_ >= 1
    # The last rung alone, on the same rows and folds, gives the same report for the survivors.
    last = auto(candidates=candidates[1:], drop_threshold=None, ensemble=False).fit(X, y)
    assert_allclose(results["mean_test_log_loss"][1:], last.cv_results_["mean_test_log_loss"])
    spent = auto(candidates=candidates, drop_threshold=None, time_budget=1e-9).fit(X, y)
    assert len(spent.rungs_) == 1  # the budget was spent on the first rung
    # An expensive candidate goes on only as its rung's best (it stops after a first fold it does not
    # lead); a dominated one never.
    monkeypatch.setattr(candidates_module, "EXPENSIVE_CLASSES", frozenset({"IsotonicCalibrator"}))
    costly = auto(candidates=candidates, drop_threshold=None, ensemble=False).fit(X, y)
    halved = "halved out after 1,000 rows"
    assert costly.cv_results_["status"].tolist()[:3] == [halved, "ok", "dropped after 1 fold(s)"]
    assert costly.cv_results_["n_folds_fitted"][2] == 1
    # After a feature-aware candidate that does not beat Platt by DOMINATED_SE, it is not screened at all.
    noise = X[["score"]].assign(noise=np.random.default_rng(0).integers(0, 3, size=len(y)))
    late = ["platt", "feature_platt", "isotonic"]
    unpaid = AutoCalibrator(candidates=late, categorical_cols=["noise"], drop_threshold=None).fit(noise, y)
    assert unpaid.cv_results_["status"][2].startswith("not screened: feature_platt, the best")
    assert unpaid.cv_results_["n_folds_fitted"][2] == 0
    # The ECE has no per-row loss to measure the features' gain by: the expensive candidate is screened.
    by_ece = AutoCalibrator(candidates=late, categorical_cols=["noise"], scoring="ece").fit(noise, y)
    assert by_ece.cv_results_["n_folds_fitted"][2] > 0
    monkeypatch.setattr(sizing, "MIN_SURVIVORS", 4)
    assert (
        auto(candidates=candidates, drop_threshold=None, ensemble=False).fit(X, y).rungs_[1]["candidates"]
        == 2
    )


def test_large_data_cross_fits_a_subsample_and_refits_on_every_row(
    ctr: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    X, y, held_out = ctr
    monkeypatch.setattr(sizing, "LARGE_ROWS", 2_000)
    monkeypatch.setattr(sizing, "LARGE_CV_ROWS", 1_200)
    monkeypatch.setattr(sizing, "FIRST_RUNG_ROWS", 500)
    model = auto(candidates=["platt", "feature_platt"]).fit(X, y)
    assert (model.n_folds_, model.cv_rows_) == (sizing.SMALL_N_FOLDS, 1_200)
    assert [rung["rows"] for rung in model.rungs_] == [500, 1_200]
    assert_array_equal(model.cv_index_, subsample_rows(y, 1_200, seed=0))
    assert model.oof_predictions_.shape == (1_200, 2)  # the subsample's rows only
    assert np.isfinite(model.oof_predictions_[:, 0]).all()
    assert model.cv_results_["n_folds_fitted"].max() == sizing.SMALL_N_FOLDS
    again = auto(candidates=["platt", "feature_platt"]).fit(X, y)
    assert_array_equal(again.oof_predictions_, model.oof_predictions_)
    refit = clone(model.estimators_[0]).fit(X, y)  # the members see every row, not the subsample
    assert_allclose(model.estimators_[0].predict(held_out), refit.predict(held_out))
    every_row = auto(candidates=["platt", "feature_platt"], cv_rows=None, n_folds=5).fit(X, y)
    assert every_row.cv_rows_ == len(y)
    assert np.isfinite(every_row.oof_predictions_[:, 0]).all()


def test_large_data_compares_its_finalists_on_every_row(ctr: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    X, y, _ = ctr
    monkeypatch.setattr(sizing, "LARGE_ROWS", 2_000)
    monkeypatch.setattr(sizing, "FIRST_RUNG_ROWS", 500)
    model = auto(candidates=["platt", ConstantHalf(), "feature_platt"], ensemble=False, drop_threshold=None)
    model.fit(X, y)
    assert model.rungs_ == [
        {"rows": 500, "n_folds": sizing.SCREEN_N_FOLDS, "candidates": 3},
        {"rows": 2_000, "n_folds": sizing.SCREEN_N_FOLDS, "candidates": 2},
        {"rows": 3_000, "n_folds": sizing.SMALL_N_FOLDS, "candidates": 2},
    ]
    results = model.cv_results_
    assert results["cv_rows"].tolist() == [3_000, 500, 3_000]
    assert np.isfinite(model.oof_predictions_[:, [0, 2]]).all()  # every row held out once
    # The same as cross-fitting the finalists on every row at once.
    final = auto(candidates=["platt", "feature_platt"], ensemble=False, drop_threshold=None, cv_rows=None)
    final.fit(X, y)
    assert_allclose(results["mean_test_log_loss"][[0, 2]], final.cv_results_["mean_test_log_loss"])
    # On a large set a second-order candidate goes on whatever its rank on a screening rung.
    monkeypatch.setattr(sizing, "KEEP_SHARE", 0.0)
    monkeypatch.setattr(sizing, "MIN_SURVIVORS", 1)
    second = make_calibrator("feature_platt", interactions="auto", l2_cross=1e4)
    grid = ["platt", ConstantHalf(), second]
    carried = auto(candidates=grid, ensemble=False, drop_threshold=None).fit(X, y)
    assert carried.cv_results_["cv_rows"].tolist() == [3_000, 500, 3_000]
    monkeypatch.setattr(sizing, "LARGE_ROWS", 10_000)
    small = auto(candidates=grid, ensemble=False, drop_threshold=None).fit(X, y)
    assert small.cv_results_["cv_rows"].tolist() == [3_000, 500, 500]  # left behind on the first rung


def test_default_candidates_are_one_list_at_every_size() -> None:
    # make_ctr's fields named categorical: no ordered column.
    resolve = AutoCalibrator(categorical_cols=FIELDS)._resolve_candidates
    labels = [c.label for c in resolve(has_features=True, ordered=False)]
    expected = ["platt", "beta", "platt_hinge", "centered_isotonic"]
    expected += [
        Candidate(name, None, params).label
        for name, params in FEATURE_CANDIDATES
        if (name, params) not in SMOOTH_CANDIDATES
    ]
    assert labels == [*expected, "neucalib"]
    assert "feature_platt(l2=1.0)" in labels
    # On a large set the same list, the l2 = 10 feature-aware Platt settings screening their fields.
    large = resolve(has_features=True, large=True, ordered=False)
    screened = [c.label for c in large if c.estimator.get_params().get("screen_fields")]
    tens = [label for label in expected if label.startswith("feature_platt(l2=10.0")]
    assert screened == [label[:-1] + ", screen_fields=True)" for label in tens]
    assert len(screened) == 3
    small = AutoCalibrator()._resolve_candidates(has_features=True, ordered=False)
    assert [c.name for c in large] == [c.name for c in small]
    assert len(resolve(has_features=True, large=True)) == len(large) + len(SMOOTH_CANDIDATES)


def test_bad_categorical_cols_are_refused_before_the_search() -> None:
    """Not left to each feature-aware candidate's encoder, whose error the search would record and pass
    over (an unknown column once fell back to the score-only maps without a word)."""
    X = pd.DataFrame({"score": np.linspace(0.1, 0.9, 200), "a": np.arange(200) % 3})
    y = (np.arange(200) % 2).astype(np.float64)
    with pytest.raises(KeyError, match=r"categorical_cols: column\(s\) \['nope'\] are not columns of X"):
        AutoCalibrator(categorical_cols=["nope"]).fit(X, y)
    with pytest.raises(TypeError, match="'categorical_cols' parameter of FeatureEncoder must be a list"):
        AutoCalibrator(categorical_cols=5).fit(X, y)


def test_smoothed_candidates_only_with_an_ordered_column() -> None:
    listed = AutoCalibrator()._resolve_candidates(has_features=True, ordered=True)
    smoothed = [c.label for c in listed if c.params.get("l2_smooth")]
    assert len(smoothed) == len(SMOOTH_CANDIDATES)
    # With an ordered column the other feature-aware Platt settings are the plain ridge, named so.
    plain = [c for c in listed if c.name == "feature_platt" and c.label not in smoothed]
    assert len(plain) == len(FEATURE_CANDIDATES) - len(SMOOTH_CANDIDATES) - 4  # less MBCT's three and HC
    assert all(c.params["l2_smooth"] == 0.0 == c.estimator.l2_smooth for c in plain)
    unordered = AutoCalibrator()._resolve_candidates(has_features=True, ordered=False)
    assert [c.label for c in unordered] == [
        c.label.replace(", l2_smooth=0.0", "") for c in listed if c.label not in smoothed
    ]
    assert all(c.estimator.l2_smooth == L2_SMOOTH for c in unordered if c.name == "feature_platt")
    # A number is ordered unless named in categorical_cols; strings never are.
    X = pd.DataFrame({"site": ["a", "b", "a"], "hour": [1, 2, 3]})
    assert FeatureEncoder().ordered_columns(frame_columns(X)) == ["hour"]
    assert FeatureEncoder(categorical_cols=["hour"]).ordered_columns(frame_columns(X)) == []
    assert FeatureEncoder(categorical_cols="hour").ordered_columns(frame_columns(X)) == []
    assert FeatureEncoder().ordered_columns(frame_columns(X[["site"]])) == []
    # The fit reads its input: make_ctr's fields named categorical leave the smoothed settings out.
    ctr = make_ctr(3_000, "mixed", seed=0)
    fields = ["region", "device"]
    fitted = AutoCalibrator(candidates=None, categorical_cols=fields, ensemble=False, feature_cols=fields)
    fitted.fit(ctr[["score", *fields]], ctr["label"])
    assert not any("l2_smooth" in label for label in fitted.cv_results_["candidate"])


def test_large_data_blend_takes_one_setting_per_method(ctr: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    X, y, _ = ctr
    monkeypatch.setattr(sizing, "LARGE_ROWS", 2_000)
    grid = ["platt", *(make_calibrator("feature_platt", l2=l2) for l2 in (0.3, 3.0, 30.0))]
    model = auto(candidates=grid, drop_threshold=None, auc_guard=False).fit(X, y)
    results = model.cv_results_
    weighted = results.loc[results["blend_weight"] > 0, "method"]
    assert weighted.is_unique
    assert (results["blend_weight"] == 0).sum() >= 2


def test_blend_loss_and_gradient_match_numpy() -> None:
    """The compiled pass of the blend's objective against the sums written in numpy (weighted rows,
    logits far out in both tails, a column-sliced input)."""
    rng = np.random.default_rng(3)
    n_rows = 3_000
    wide = rng.normal(scale=4.0, size=(n_rows, 5))
    wide[:5, :] = [[800.0], [-800.0], [40.0], [-40.0], [0.0]]
    member_logits = wide[:, 1:4]  # not C-contiguous
    y = (rng.uniform(size=n_rows) < 0.3).astype(float)
    w = rng.uniform(0.0, 2.0, size=n_rows)
    for theta in (np.array([0.2, 0.5, 0.3, -0.7]), np.array([1.0, 0.0, 0.0, 0.0])):
        z = member_logits @ theta[:3] + theta[3]
        residual = w * (expit(z) - y) / w.sum()
        loss, gradient = loss_and_gradient(member_logits, y, w, theta)
        assert loss == pytest.approx(mean_log_loss(z, y, w), rel=1e-12)
        assert_allclose(gradient, np.r_[member_logits.T @ residual, residual.sum()], rtol=1e-10, atol=1e-15)


def test_member_losses_equal_the_blend_at_each_member() -> None:
    """Each member's loss from the one pass equals the blend's loss with that member alone (weights
    e_k, intercept 0), bit for bit: the blend's start compares them."""
    rng = np.random.default_rng(5)
    n_rows = 2_000
    member_logits = np.ascontiguousarray(rng.normal(scale=3.0, size=(n_rows, 4)))
    member_logits[:3] = [[36.0, -36.0, 0.0, -0.0]] * 3
    y = (rng.uniform(size=n_rows) < 0.3).astype(float)
    w = rng.uniform(0.0, 2.0, size=n_rows)
    alone = [loss_and_gradient(member_logits, y, w, np.eye(1, 5, k)[0])[0] for k in range(4)]
    assert member_losses(member_logits, y, w).tolist() == alone


def test_blend_drops_light_members() -> None:
    rng = np.random.default_rng(1)
    y = (rng.uniform(size=4_000) < 0.3).astype(float)
    signal = np.where(y == 1, 1.0, -1.0)
    members = np.column_stack([signal + rng.normal(scale=s, size=4_000) for s in (1.0, 1.1, 3.0, 6.0)])
    free = fit_blend(members, y, np.ones(4_000))
    assert np.any((free.weights > 0) & (free.weights < MIN_MEMBER_WEIGHT))  # a light member to drop
    fit = fit_blend(members, y, np.ones(4_000), min_member_weight=MIN_MEMBER_WEIGHT)
    assert np.all((fit.weights == 0) | (fit.weights >= MIN_MEMBER_WEIGHT))
    assert fit.weights.sum() == pytest.approx(1.0)
    best_member = min(mean_log_loss(members[:, k], y, np.ones(4_000)) for k in range(4))
    assert fit.loss <= best_member + 1e-12


# ---------------------------------------------------------------------------------------------------
# The AUC guard (gpucal.auto.guard)


def test_order_guard_compares_within_fold_auc_with_the_raw_score() -> None:
    rng = np.random.default_rng(0)
    score = rng.uniform(size=2_000)
    y = (rng.uniform(size=2_000) < score).astype(float)
    ones = np.ones(2_000)
    folds = np.arange(2_000) % 3
    kept = order_guard(score, score**2, y, ones, folds)
    assert not kept.applied
    assert kept.auc == pytest.approx(kept.raw_auc)
    coarse = np.round(score, 1) * 0.9 + 0.05  # ties: ranks worse than the score
    lost = order_guard(score, coarse, y, ones, folds)
    assert lost.applied
    assert lost.auc < lost.raw_auc
    margins = np.log(score / (1 - score))  # margins rank as the probabilities do
    assert order_guard(margins, coarse, y, ones, folds).raw_auc == lost.raw_auc


def test_order_guard_keeps_a_different_increasing_map_per_fold() -> None:
    """Each fold's prediction is an increasing map of the score, a different one per fold: the pooled
    AUC of such predictions falls below the raw score's, the AUC within the folds does not."""
    rng = np.random.default_rng(1)
    score = rng.uniform(0.01, 0.99, 3_000)
    y = (rng.uniform(size=3_000) < score**3).astype(float)
    folds = np.arange(3_000) % 3
    predicted = np.select([folds == 0, folds == 1], [score**2, score**4], score**3)
    assert roc_auc(y, predicted) < roc_auc(y, score)
    guard = order_guard(score, predicted, y, None, folds)
    assert not guard.applied
    assert guard.auc == guard.raw_auc


def test_within_fold_auc_keeps_unit_weights_on_roc_aucs_unweighted_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No weights: each fold's AUC is roc_auc's unweighted one (for 0/1 labels a sort of integer keys),
    equal to the bit to the AUC with weights of one, ties and soft labels included."""
    rng = np.random.default_rng(3)
    score = np.round(rng.uniform(size=3_000), 2)  # ties
    y = (rng.uniform(size=3_000) < score).astype(float)
    soft = np.where(np.arange(3_000) % 7 == 0, rng.uniform(size=3_000), y)
    folds = np.arange(3_000) % 3
    for labels in (y, soft):
        assert within_fold_auc(labels, score, folds, None) == within_fold_auc(
            labels, score, folds, np.ones(3_000)
        )
    seen: list[object] = []
    original = guard_module.roc_auc

    def recording(y_true: np.ndarray, y_prob: np.ndarray, *, sample_weight: object = None) -> float:
        seen.append(sample_weight)
        return original(y_true, y_prob, sample_weight=sample_weight)

    monkeypatch.setattr(guard_module, "roc_auc", recording)
    within_fold_auc(y, score, folds, None)
    assert len(seen) == 3
    assert all(weights is None for weights in seen)


def test_within_fold_auc_does_not_depend_on_the_weights_scale() -> None:
    rng = np.random.default_rng(2)
    score = rng.uniform(size=600)
    y = (rng.uniform(size=600) < score).astype(float)
    folds = np.arange(600) % 2
    weights = rng.uniform(0.5, 2.0, 600)
    unit = within_fold_auc(y, score, folds, weights)
    for scale in (1e-170, 1e170):
        assert within_fold_auc(y, score, folds, weights * scale) == pytest.approx(unit, rel=1e-12)
    one_class_folds = np.where(y > 0, 0, 1)  # every fold holds one class: no pair to rank
    assert within_fold_auc(y, score, one_class_folds, None) is None
    assert not order_guard(score, score, y, None, one_class_folds).applied


def test_auc_guard_keeps_an_increasing_map_that_wins() -> None:
    """Beta calibration, an increasing map, beats Platt scaling on scores whose truth is their cube: the
    guard leaves it (a pooled out-of-fold AUC replaced it by Platt scaling on every seed tried)."""
    rng = np.random.default_rng(2)
    score = rng.uniform(0.01, 0.99, 3_000)
    y = (rng.uniform(size=3_000) < score**3).astype(float)
    model = AutoCalibrator(candidates=["platt", "beta"], ensemble=False).fit(score, y)
    assert not model.auc_guard_["applied"]
    assert model.cv_results_.loc[model.best_index_, "method"] == "beta"
    assert roc_auc(y, model.oof_predictions_[:, model.best_index_]) < roc_auc(y, score)  # pooled: below


def test_auc_guard_falls_back_to_platt(ctr: Any) -> None:
    X, y, held_out = ctr
    candidates = [ConstantRate(), "platt", "isotonic"]
    unguarded = auto(candidates=candidates, scoring="ece", ensemble=False, auc_guard=False).fit(X, y)
    assert isinstance(unguarded.best_estimator_, ConstantRate)  # lowest ECE, no ranking
    guarded = auto(candidates=candidates, scoring="ece", ensemble=False).fit(X, y)
    assert guarded.auc_guard_["applied"]
    assert guarded.auc_guard_["auc"] < guarded.auc_guard_["raw_auc"]
    assert guarded.cv_results_.loc[guarded.best_index_, "method"] == "platt"
    platt = make_calibrator("platt").fit(X, y)
    assert_allclose(guarded.predict(held_out), platt.predict(held_out))
    no_platt = auto(candidates=[ConstantRate(), "isotonic"], scoring="ece", ensemble=False).fit(X, y)
    assert isinstance(no_platt.best_estimator_, ConstantRate)
    assert not no_platt.auc_guard_["applied"]
    assert "no Platt candidate" in no_platt.auc_guard_["note"]


def test_auc_guard_finds_platt_listed_after_a_better_candidate() -> None:
    """Platt scaling, what the guards fall back to, is not raced: listed after isotonic regression,
    which leads after the first fold here, it is still cross-fitted on every fold."""
    rng = np.random.default_rng(0)
    score = rng.uniform(0.01, 0.99, 6_000)
    truth = np.where(score < 0.5, 0.05, 0.6) + 0.3 * (score > 0.8)
    y = (rng.uniform(size=6_000) < truth).astype(float)
    for candidates in (["platt", "isotonic"], ["isotonic", "platt"]):
        model = AutoCalibrator(candidates=candidates, n_folds=5, ensemble=False).fit(score, y)
        assert (model.cv_results_["status"] == "ok").all()
        assert model.auc_guard_["applied"]
        assert type(model.best_estimator_).__name__ == "PlattCalibrator"


def test_auc_guard_falls_back_to_the_better_order_keeping_map(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    score = rng.beta(1.0, 3.0, 4_000)
    logit = np.log(score / (1 - score))
    # The logit bends at -1 (slope 1 below, 3 above): Platt's one slope misses both ends.
    y = (rng.random(4_000) < 1 / (1 + np.exp(-(logit + 2.0 * np.maximum(logit + 1, 0))))).astype(float)
    candidates = [ConstantRate(), "platt", "platt_hinge"]
    guarded = AutoCalibrator(candidates=candidates, scoring="ece", ensemble=False).fit(score, y)
    assert guarded.auc_guard_["applied"]
    table = guarded.cv_results_
    keeping = table[table["method"].isin(["platt", "platt_hinge"])]
    assert guarded.best_index_ == int(keeping["mean_test_ece"].idxmin())
    assert table.loc[guarded.best_index_, "method"] == "platt_hinge"

    # A hinge map whose refit does not increase would break the ranking: Platt scaling takes its place.
    monkeypatch.setattr(HingePlattCalibrator, "increasing", lambda self: False)
    refused = AutoCalibrator(candidates=candidates, scoring="ece", ensemble=False).fit(score, y)
    assert refused.cv_results_.loc[refused.best_index_, "method"] == "platt"
    assert type(refused.best_estimator_).__name__ == "PlattCalibrator"


def test_large_data_keeps_platt_unless_the_features_beat_it(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    field = rng.integers(0, 4, 3_000)
    score = rng.uniform(0.05, 0.95, 3_000)
    shifted = 1 / (1 + np.exp(-(np.log(score / (1 - score)) + np.array([-1.5, -0.5, 0.5, 1.5])[field])))
    y = (rng.uniform(size=3_000) < shifted).astype(float)
    X = pd.DataFrame({"score": score, "field": field})
    model = AutoCalibrator(candidates=["platt", "feature_platt"], categorical_cols=["field"], auc_guard=False)
    small = clone(model).fit(X, y).platt_gain_
    assert not small["applied"]  # measured on every size, applied on large sets only
    assert small["gain"] > 2 * small["se"]
    monkeypatch.setattr(sizing, "LARGE_ROWS", 2_000)
    large = clone(model).fit(X, y)
    gain = large.platt_gain_
    assert gain["gain"] > 2 * gain["se"]  # the field's bias: measurably better than Platt
    assert not gain["applied"]
    assert large.cv_results_.loc[large.best_index_, "method"] == "feature_platt"
    monkeypatch.setattr("gpucal.auto.model.PLATT_MARGIN", 1e9)  # no gain is enough
    strict = clone(model).fit(X, y)
    assert strict.platt_gain_["applied"]
    assert strict.cv_results_.loc[strict.best_index_, "method"] == "platt"
    assert_allclose(strict.predict(X), make_calibrator("platt").fit(X, y).predict(X))


def test_growing_twins_keeps_the_second_order_twin() -> None:
    from gpucal.auto.cross_fit import TWIN_LOGIT_TOL, growing_twins

    first = Candidate("feature_platt", make_calibrator("feature_platt", l2=10.0), {"l2": 10.0})
    second = Candidate(
        "feature_platt",
        make_calibrator("feature_platt", l2=10.0, interactions="auto"),
        {"l2": 10.0, "interactions": "auto"},
    )
    other = Candidate("mbct", make_calibrator("mbct"))
    p = np.random.default_rng(0).uniform(0.05, 0.95, (50, 1))
    oof = np.hstack([p, p, p, p * 0.9])
    crossed = np.arange(50)
    # The first-order candidate and its second-order twin: the twin stays; a twin of another method too.
    assert growing_twins(np.arange(4), oof, crossed, [first, second, other, other]).tolist() == [1, 3]
    # Logits apart by more than the tolerance: not twins, both stay.
    oof[0, 1] = 1.0 / (1.0 + (1.0 - p[0, 0]) / p[0, 0] * np.exp(-10 * TWIN_LOGIT_TOL))
    assert growing_twins(np.arange(2), oof, crossed, [first, second]).tolist() == [0, 1]


def test_growing_stand_ins_pass_the_second_order_twin_on() -> None:
    from gpucal.auto.cross_fit import growing_stand_ins

    def feature_platt(**params: Any) -> Candidate:
        return Candidate("feature_platt", make_calibrator("feature_platt", l2=10.0, **params), params)

    first, tens = feature_platt(), feature_platt(interactions="auto", l2_cross=10.0)
    hundreds, other = (
        feature_platt(interactions="auto", l2_cross=100.0),
        Candidate("mbct", make_calibrator("mbct")),
    )
    candidates = [first, tens, hundreds, other]
    p = np.random.default_rng(0).uniform(0.05, 0.95, (50, 1))
    oof, crossed, usable = np.hstack([p, p, p, p * 0.9]), np.arange(50), [0, 1, 2, 3]
    # The first-order candidate gives way to its first second-order twin, or to one already passed on.
    assert growing_stand_ins({0, 3}, usable, oof, crossed, candidates) == {1, 3}
    assert growing_stand_ins({0, 2, 3}, usable, oof, crossed, candidates) == {2, 3}
    assert growing_stand_ins({1, 3}, usable, oof, crossed, candidates) == {1, 3}
    # A second-order candidate whose screen kept a pair predicts otherwise: no twin, nothing replaced.
    oof[:, 1:3] = np.clip(oof[:, 1:3] * 1.01, 0, 1)
    assert growing_stand_ins({0, 3}, usable, oof, crossed, candidates) == {0, 3}


def test_large_data_passes_the_second_order_twin_on(ctr: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = ctr[0].iloc[:1_500], ctr[1][:1_500]
    monkeypatch.setattr(sizing, "LARGE_ROWS", 1_000)
    monkeypatch.setattr(sizing, "FIRST_RUNG_ROWS", 500)
    twins = [
        "platt",
        make_calibrator("feature_platt", l2=10.0),
        make_calibrator("feature_platt", l2=10.0, interactions="auto"),
    ]
    model = auto(candidates=twins, drop_threshold=None, cv_rows=1_000, n_folds=2).fit(X, y)
    first = model.oof_predictions_  # the last rung's: the first-order candidate did not reach it
    status = model.cv_results_["status"].tolist()
    assert status == ["ok", "halved out after 500 rows", "ok"]
    assert np.isnan(first[:, 1]).all()
    assert np.isfinite(first[:, 2]).any()


def test_distinct_growing_keeps_one_of_second_order_twins() -> None:
    from gpucal.auto.cross_fit import distinct_growing

    def second(l2_cross: float) -> Candidate:
        params = {"interactions": "auto", "l2_cross": l2_cross}
        return Candidate("feature_platt", make_calibrator("feature_platt", **params), params)

    candidates = [Candidate("platt", make_calibrator("platt")), second(10.0), second(100.0), second(1e3)]
    p = np.random.default_rng(0).uniform(0.05, 0.95, (50, 1))
    oof, crossed = np.hstack([p, p, p, p * 0.9]), np.arange(50)
    # Platt is no second-order candidate; of the two twins the first listed; the third predicts otherwise.
    assert distinct_growing([0, 1, 2, 3], oof, crossed, candidates) == [1, 3]
    assert distinct_growing([0, 2, 3], oof, crossed, candidates) == [2, 3]


def test_large_data_passes_one_of_second_order_twins_on(ctr: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = ctr[0].iloc[:1_500], ctr[1][:1_500]
    monkeypatch.setattr(sizing, "LARGE_ROWS", 1_000)
    monkeypatch.setattr(sizing, "FIRST_RUNG_ROWS", 500)
    grid = [
        "platt",
        make_calibrator("feature_platt", l2=10.0, interactions="auto", l2_cross=10.0),
        make_calibrator("feature_platt", l2=10.0, interactions="auto", l2_cross=100.0),
    ]
    model = auto(candidates=grid, drop_threshold=None, cv_rows=1_000, n_folds=2).fit(X, y)
    assert model.rungs_[0]["candidates"] == 3
    assert model.cv_results_["status"].tolist() == ["ok", "ok", "halved out after 500 rows"]


def test_fold_estimator_loosens_feature_platt_only() -> None:
    from gpucal.auto.cross_fit import FOLD_TOL, fold_estimator

    tight = make_calibrator("feature_platt", interactions="auto")
    assert fold_estimator(tight).get_params()["tol"] == FOLD_TOL
    assert tight.get_params()["tol"] == 1e-8  # the candidate (and so its refit) keeps its own
    loose = make_calibrator("feature_platt", tol=1e-3)
    assert fold_estimator(loose).get_params()["tol"] == 1e-3
    assert (
        fold_estimator(make_calibrator("mbct")).get_params()["tol"]
        == make_calibrator("mbct").get_params()["tol"]
    )


@pytest.mark.parametrize("weighted", [False, True])
def test_fold_scores_match_the_metrics(weighted: bool) -> None:
    """A fold's scores from its per-row losses equal gpucal.metrics' log-loss, Brier and ECE."""
    from gpucal.metrics import brier, ece, log_loss

    rng = np.random.default_rng(3)
    p = np.clip(rng.uniform(size=500), 0.0, 1.0)
    p[:3] = [0.0, 1.0, 0.5]  # clipped by the log-loss
    y = (rng.uniform(size=500) < p).astype(float)
    w = rng.uniform(0.5, 2.0, 500) if weighted else None
    scores = fold_scores(y, p, w, {name: loss(y, p) for name, loss in ROW_LOSSES.items()})
    assert_allclose(scores["log_loss"], log_loss(y, p, sample_weight=w), rtol=1e-14)
    assert_allclose(scores["brier"], brier(y, p, sample_weight=w), rtol=1e-14)
    assert scores["ece"] == ece(y, p, sample_weight=w)


def test_search_leaves_the_frame_attrs() -> None:
    """The search drops a frame's attrs on a shallow copy: the caller's frame keeps them, the fit is
    the same."""
    frame = make_ctr(3_000, "segment_bias", seed=2)
    X, y = frame[["score", "region", "device"]], frame["label"].to_numpy(float)
    assert X.attrs  # make_ctr describes its scenario there
    plain = without_attrs(X)
    assert plain.attrs == {}
    assert X.attrs
    assert plain["score"].equals(X["score"])
    params = {"candidates": ["platt", "feature_platt"], "output_type": "numpy"}
    with_attrs = AutoCalibrator(**params).fit(X, y)
    assert X.attrs
    without = AutoCalibrator(**params).fit(plain, y)
    assert_array_equal(with_attrs.predict(X), without.predict(plain))


def test_fold_fits_share_their_encodings_and_match_unshared_ones(
    ctr: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    X, y, held_out = ctr
    grid = [
        make_calibrator("feature_platt", l2=l2, **extra)
        for l2, extra in [
            (1.0, {}),
            (10.0, {"screen_fields": True}),
            (10.0, {"screen_fields": True, "interactions": "auto", "l2_cross": 10.0}),
            (10.0, {"screen_fields": True, "interactions": "auto", "l2_cross": 100.0}),
        ]
    ]
    encodings: list[Any] = []
    real = feature_platt_solver._encoded
    monkeypatch.setattr(
        feature_platt_solver, "_encoded", lambda *a, **k: encodings.append(a) or real(*a, **k)
    )
    shared = auto(candidates=grid, drop_threshold=None).fit(X, y)
    n_shared = len(encodings)
    monkeypatch.setattr(CrossFitting, "sharing", lambda self, fold: nullcontext())
    alone = auto(candidates=grid, drop_threshold=None).fit(X, y)
    n_alone = len(encodings) - n_shared
    assert n_alone - n_shared == 2 * shared.n_folds_  # per fold two encodings of four (one rung)
    assert_array_equal(shared.oof_predictions_, alone.oof_predictions_)
    assert shared.best_index_ == alone.best_index_
    assert_array_equal(shared.predict(held_out), alone.predict(held_out))


def test_fits_in_several_threads_leave_blas_threads_as_they_were() -> None:
    """Each fit restored on exit the limit it saw on entry: two fits overlapping in two threads (the
    first to start finishing first) left BLAS on one thread for the rest of the process."""
    from threadpoolctl import threadpool_info

    from gpucal.auto.blas_threads import one_blas_thread

    def blas_threads() -> list[int]:
        return sorted({pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"})

    before = blas_threads()
    first, second = one_blas_thread(), one_blas_thread()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert set(blas_threads()) <= {1}  # the second fit still runs
    second.__exit__(None, None, None)
    assert blas_threads() == before


def test_column_parameters_changed_after_the_fit_are_refused_by_name(tmp_path) -> None:
    """The fitted members read the columns they were fitted with: a score_col set after the fit is
    refused by predict and save, naming both values, where predict failed with 'score column not found
    (set score_col=)'."""
    data = make_ctr(3_000, seed=0).drop(columns="p_true")
    X, y = data.drop(columns="label"), data["label"]
    model = AutoCalibrator(feature_cols=np.array(FIELDS[:2], dtype=object)).fit(X, y)
    expected = model.predict(X)
    model.set_params(score_col="pred")
    changed = r"score_col='pred', but the model was fitted with score_col='score'"
    with pytest.raises(ValueError, match=changed):
        model.predict(X)
    with pytest.raises(ValueError, match="fitted with score_col='score'"):
        model.save(tmp_path / "model.json")
    model.set_params(score_col="score", feature_cols=np.array(FIELDS[:2], dtype=object))  # equal, new array
    pd.testing.assert_series_equal(model.predict(X), expected)
    listed = AutoCalibrator(feature_cols=list(FIELDS[:2])).fit(X, y)  # a list, then listed otherwise
    for same in (pd.Index(FIELDS[:2]), tuple(FIELDS[:2]), np.array(FIELDS[:2])):
        listed.set_params(feature_cols=same)
        pd.testing.assert_series_equal(listed.predict(X), expected)
    listed.set_params(feature_cols=pd.Index(FIELDS[:1]))
    with pytest.raises(ValueError, match=r"feature_cols=Index\(\['site_id'\]"):
        listed.predict(X)


def test_a_search_where_most_candidates_fail_warns_with_the_first_error() -> None:
    """One positive label in 3,000 rows: every fold without it fails Platt scaling and most others, and
    the choice is made among the few left; the warning says so, naming the first error, at the
    caller's line."""
    data = make_ctr(3_000, seed=0).drop(columns="p_true")
    X, y = data.drop(columns="label"), np.zeros(3_000)
    y[17] = 1.0
    with pytest.warns(
        UserWarning, match=r"of \d+ candidates failed \(the first, platt: error: ValueError"
    ) as seen:
        AutoCalibrator(feature_cols=FIELDS[:2]).fit(X, y)
    assert [w.filename for w in seen if "candidates failed" in str(w.message)] == [__file__]


def test_the_auc_guard_warns_when_the_platt_candidates_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard finds the choice ranking the folds worse than the raw score, and the Platt candidate
    failed: the prediction is kept, as auc_guard_ notes, and a warning says so. Without a Platt
    candidate in the list (the user's choice) only auc_guard_ notes it."""
    from gpucal.auto.guard import GuardResult

    def failing(*args: Any, **kwargs: Any) -> Any:
        msg = "this Platt scaling fails"
        raise ValueError(msg)

    monkeypatch.setattr(auto_model, "order_guard", lambda *args: GuardResult(True, 0.8, 0.7))
    data = make_ctr(2_000, seed=0)
    score, y = data["score"].to_numpy(), data["label"]
    monkeypatch.setattr(type(gpucal.make_calibrator("platt")), "fit", failing)  # every clone fails
    with pytest.warns(
        UserWarning, match="the Platt scaling candidates failed, so there was none to fall"
    ) as seen:
        model = AutoCalibrator(candidates=["platt", "beta", "spline", "centered_isotonic"]).fit(score, y)
    assert {w.filename for w in seen if "none to fall back" in str(w.message)} == {__file__}
    assert model.auc_guard_["note"] == "no Platt candidate: the prediction was kept"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert AutoCalibrator(candidates=["beta"]).fit(score, y).auc_guard_["note"].startswith("no Platt")


def test_too_few_rows_for_the_automatic_fold_count_say_it_was_chosen() -> None:
    """n_folds='auto' chose the folds: the error says so, where it read as if the user had asked for 5."""
    with pytest.raises(
        ValueError, match=r"fewer than n_folds=5.*chose 5; pass n_folds at most the number of groups, 2 at"
    ):
        AutoCalibrator().fit(np.linspace(0.1, 0.9, 200), np.arange(200) % 2, groups=np.arange(200) % 2)
    with pytest.raises(ValueError, match=r"fewer than n_folds=3; every fold needs a group$"):
        AutoCalibrator(n_folds=3).fit(
            np.linspace(0.1, 0.9, 200), np.arange(200) % 2, groups=np.arange(200) % 2
        )
