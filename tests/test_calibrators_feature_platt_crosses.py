"""Second-order feature-aware Platt (``interactions=``): scikit-learn's LogisticRegression on the same
one-hot design with crosses, weights, the automatic choice of pairs, saving and bad input.

The reference design is ``[logit(score), one-hot of each column's codes, one-hot of each cross's codes]``
from the fitted encoder. scikit-learn has one penalty ``1 / C``; the crosses' own penalty ``l2_cross`` is
reached by scaling their one-hot columns by ``s = sqrt(l2 / l2_cross)`` (a coefficient ``g`` on the scaled
column is ``d = g s`` on the plain one, and ``l2 g^2 = l2_cross d^2``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import expit, logit
from sklearn.linear_model import LogisticRegression

import gpucal
from gpucal.calibrators import _feature_platt_solver as solver
from gpucal.calibrators import feature_platt
from gpucal.calibrators._feature_platt_kernels import NOT_NESTED, merge_nested_codes, nested_codes
from gpucal.calibrators._feature_platt_rows import PlattBlock, code_weights, pooled_levels
from gpucal.calibrators._feature_platt_solver import nested_vectors, null_directions
from gpucal.calibrators.feature_platt import FeatureAwarePlattCalibrator
from gpucal.encoding import FeatureEncoder
from gpucal.kernels import value_offsets
from gpucal.metrics import log_loss

EPS = np.finfo(np.float64).eps


def crossed_data(n: int = 3000, seed: int = 0, strength: float = 1.2) -> tuple[pd.DataFrame, np.ndarray]:
    """Three fields and a number; the truth has main effects and a ``device x hour`` interaction only."""
    rng = np.random.default_rng(seed)
    truth = np.random.default_rng(100)
    device = rng.integers(0, 4, n)
    hour = rng.integers(0, 6, n)
    site = rng.choice(np.array(["a", "b", "c", "d", "e"]), n)
    num = rng.normal(size=n)
    p = rng.beta(2.0, 3.0, n)
    z = logit(p) + truth.normal(0, 0.4, 4)[device] + 0.3 * num
    z = z + strength * truth.normal(0, 1.0, (4, 6))[device, hour]
    y = (rng.random(n) < expit(z)).astype(np.float64)
    return pd.DataFrame({"score": p, "site": site, "device": device, "hour": hour, "num": num}), y


PARAMS: dict[str, Any] = {"categorical_cols": ["device", "hour"], "n_bins": 4, "tol": 1e-10}


def crossed_design(cal: FeatureAwarePlattCalibrator, X: pd.DataFrame, scale: float) -> np.ndarray:
    """``[logit(score), one-hot codes]`` with the cross columns multiplied by ``scale``."""
    encoder = FeatureEncoder.from_dict(cal.encoder_)
    onehot = crossed_design_codes(encoder, encoder.transform(X))
    onehot[:, int(encoder.n_values_.sum()) :] *= scale
    return np.column_stack([logit(np.clip(X["score"].to_numpy(), EPS, 1 - EPS)), onehot])


@pytest.mark.parametrize(
    ("l2", "l2_cross", "weighted"), [(1.0, 1.0, False), (1.0, 10.0, False), (0.5, 20.0, True)]
)
def test_equals_sklearn_on_the_one_hot_design_with_crosses(
    l2: float, l2_cross: float, weighted: bool
) -> None:
    X, y = crossed_data()
    w = np.random.default_rng(1).random(len(y)) * 2 if weighted else None
    pairs = [("device", "hour"), ("site", "num"), ("hour", "num")]
    # The plain ridge (no difference penalty along num's bins) is what scikit-learn fits.
    cal = FeatureAwarePlattCalibrator(interactions=pairs, l2=l2, l2_cross=l2_cross, l2_smooth=0.0, **PARAMS)
    cal.fit(X, y, sample_weight=w)
    assert cal.interactions_ == [list(p) for p in pairs]
    scale = np.sqrt(l2 / l2_cross)
    design = crossed_design(cal, X, scale)
    ref = LogisticRegression(C=1.0 / l2, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    ref.fit(design, y, sample_weight=w)
    n_first = int(FeatureEncoder.from_dict(cal.encoder_).n_values_.sum())
    coef = ref.coef_[0].copy()
    coef[1 + n_first :] *= scale
    assert_allclose(np.r_[cal.intercept_, cal.coef_score_, cal.coef_], np.r_[ref.intercept_, coef], atol=1e-6)
    assert_allclose(cal.predict(X).to_numpy(), ref.predict_proba(design)[:, 1], rtol=0, atol=1e-8)


def test_null_directions_change_no_row_of_positive_weight() -> None:
    # min_cross_count pools a few of site x hour's 30 pairs (weight about 30 each): levels with
    # pooled rows get no direction of their own, the others do.
    X, y = crossed_data(n=900, seed=5)
    w = np.random.default_rng(6).integers(0, 3, len(y)).astype(np.float64)
    encoder = FeatureEncoder(
        n_bins=4, categorical_cols=["device", "hour"], interactions=[("site", "hour")], min_cross_count=22.0
    )
    encoder.fit(X[["site", "device", "hour", "num"]], sample_weight=w)
    codes = encoder.transform(X)
    block = PlattBlock(np.zeros(len(y)), codes, y, w)
    n_codes = encoder.n_codes_
    used = np.r_[True, True, code_weights(block, n_codes) > 0]
    pooled = pooled_levels(block, encoder.crosses_, len(encoder.feature_names_))
    assert 0 < np.count_nonzero(pooled) < pooled.size
    design = np.column_stack([np.zeros(len(y)), np.ones(len(y)), crossed_design_codes(encoder, codes)])
    null = null_directions(n_codes, used, encoder.crosses_, pooled).toarray()
    assert null.shape[1] > len(n_codes)  # the columns' own, and cross levels'
    assert_allclose(design[w > 0] @ null, 0.0, atol=0)
    # Ignoring the pooled rows gives directions that do change rows: the count is what makes them null.
    wrong = null_directions(n_codes, used, encoder.crosses_, np.zeros_like(pooled)).toarray()
    assert np.abs(design[w > 0] @ wrong).max() > 0


def user_crossed_data(n: int = 2000, seed: int = 3) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """``device``, ``hour``, their cross as the user computed it (``device_hour``) and an unrelated
    ``site``; weights with zeros, and a zero-weight row whose ``device_hour`` breaks the nesting."""
    rng = np.random.default_rng(seed)
    device, hour, site = rng.integers(0, 4, n), rng.integers(0, 6, n), rng.integers(0, 5, n)
    X = pd.DataFrame({"score": rng.beta(2.0, 3.0, n), "device": device, "hour": hour})
    X["device_hour"] = device * 6 + hour
    X["site"] = site
    X.loc[0, "device_hour"] = (device[0] + 1) % 4 * 6 + (hour[0] + 1) % 6  # another device and hour
    w = rng.integers(0, 3, n).astype(np.float64)
    w[0] = 0.0
    z = logit(X["score"].to_numpy()) + 0.5 * np.random.default_rng(7).normal(size=24)[X["device_hour"]]
    return X, (rng.random(n) < expit(z)).astype(np.float64), w


def nested_pairs(table: np.ndarray, n_values: np.ndarray, names: list[str]) -> set[tuple[str, str]]:
    """The ``(child, parent)`` column pairs whose block of ``nested_codes``' table holds no NOT_NESTED."""
    offsets = np.r_[value_offsets(n_values), table.shape[0]]
    return {
        (names[k], names[j])
        for k in range(len(names))
        for j in range(len(names))
        if j != k and not np.any(table[offsets[k] : offsets[k + 1], j] == NOT_NESTED)
    }


def test_nested_codes_find_the_cross_the_user_computed() -> None:
    X, _, w = user_crossed_data()
    names = ["device", "hour", "device_hour", "site"]
    encoder = FeatureEncoder(categorical_cols=names).fit(X[names])
    codes, n_values = encoder.transform(X), encoder.n_values_
    table = nested_codes(codes, w, n_values)
    assert_array_equal(table, nested_codes(codes, w, n_values, array_code=True))
    assert nested_pairs(table, n_values, names) == {("device_hour", "device"), ("device_hour", "hour")}
    # The first columns of wider codes (the crosses come after the first-order columns).
    first = nested_codes(np.ascontiguousarray(codes[:, :3]), w, n_values[:3])
    assert_array_equal(nested_codes(codes, w, n_values[:3]), first)
    assert_array_equal(nested_codes(codes, w, n_values[:3], array_code=True), first)
    # Each code of device_hour records its device; the codes no row of positive weight has, none.
    offsets = value_offsets(n_values)
    recorded = table[offsets[2] : offsets[2] + n_values[2], 0]
    assert_array_equal(recorded[:24], np.arange(24) // 6)
    assert_array_equal(recorded[24:], -1)  # the missing and unseen codes
    # The broken row counts once its weight is positive.
    w[0] = 1.0
    assert nested_pairs(nested_codes(codes, w, n_values), n_values, names) == set()


def test_a_column_of_one_value_makes_no_nesting_directions() -> None:
    """Every column nests in a column of one used code (a constant or all-missing one): its directions
    were the difference of two columns' own, and 100 such columns made the coarse system dense (300
    rows: over 100 s). The user's cross still makes its own."""
    X, _, w = user_crossed_data()
    X = X.assign(constant=7, empty=np.nan)
    names = ["device", "hour", "device_hour", "constant", "empty"]
    encoder = FeatureEncoder(categorical_cols=names[:3]).fit(X[names])
    codes, n_values = encoder.transform(X), encoder.n_values_
    used = np.r_[
        True,
        True,
        np.bincount(
            (codes + value_offsets(n_values)).ravel()[np.repeat(w > 0, len(names))],
            minlength=int(n_values.sum()),
        )
        > 0,
    ]
    vectors = nested_vectors(nested_codes(codes, w, n_values), value_offsets(n_values), used)
    offsets = value_offsets(n_values)
    one_code = [
        2 + offsets[j] + np.flatnonzero(used[2 + offsets[j] : 2 + offsets[j] + n_values[j]])[0]
        for j in (3, 4)
    ]
    assert not any(v[0] in one_code for v in vectors)
    assert len(vectors) == 4 + 6  # device_hour within each device, and within each hour


def test_nested_codes_merge_over_blocks_like_one_pass() -> None:
    X, _, w = user_crossed_data()
    names = ["device", "hour", "device_hour"]
    encoder = FeatureEncoder(categorical_cols=names).fit(X[names])
    codes, n_values = encoder.transform(X), encoder.n_values_
    halves = [nested_codes(codes[part], w[part], n_values) for part in (slice(0, 700), slice(700, None))]
    assert_array_equal(merge_nested_codes(*halves), nested_codes(codes, w, n_values))
    # Nested in each block, but a code of device_hour with one device in the first and another in the
    # second: not nested over both.
    moved = codes.copy()
    moved[700:, 2] = np.where(moved[700:, 2] < 24, (moved[700:, 2] + 6) % 24, moved[700:, 2])
    split = [nested_codes(moved[part], w[part], n_values) for part in (slice(0, 700), slice(700, None))]
    assert {("device_hour", "device"), ("device_hour", "hour")} <= nested_pairs(split[1], n_values, names)
    assert nested_pairs(merge_nested_codes(*split), n_values, names) == {("device_hour", "hour")}


def test_null_directions_of_a_nested_column_change_no_row() -> None:
    X, y, w = user_crossed_data()
    names = ["device", "hour", "device_hour", "site"]
    encoder = FeatureEncoder(categorical_cols=names).fit(X[names])
    codes, n_codes = encoder.transform(X), encoder.n_codes_
    block = PlattBlock(np.zeros(len(y)), codes, y, w)
    used = np.r_[True, True, code_weights(block, n_codes) > 0]
    design = np.column_stack([np.zeros(len(y)), np.ones(len(y)), crossed_design_codes(encoder, codes)])
    plain = null_directions(n_codes, used, [], np.zeros(0)).toarray()
    null = null_directions(n_codes, used, [], np.zeros(0), nested_codes(codes, w, n_codes)).toarray()
    assert null.shape[1] == plain.shape[1] + 4 + 6  # one per device and per hour
    assert_allclose(design[w > 0] @ null, 0.0, atol=0)
    assert np.abs(design @ null).max() > 0  # the zero-weight row that breaks the nesting is not counted


@pytest.mark.parametrize("weighted", [False, True])
def test_fit_with_a_cross_the_user_computed_equals_sklearn(weighted: bool) -> None:
    X, y, w = user_crossed_data()
    w = w if weighted else None
    names = ["device", "hour", "device_hour", "site"]
    cal = FeatureAwarePlattCalibrator(feature_cols=names, categorical_cols=names, l2=2.0, tol=1e-10)
    cal.fit(X, y, sample_weight=w)
    encoder = FeatureEncoder.from_dict(cal.encoder_)
    score = logit(np.clip(X["score"].to_numpy(), EPS, 1 - EPS))
    design = np.column_stack([score, crossed_design_codes(encoder, encoder.transform(X))])
    ref = LogisticRegression(C=0.5, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    ref.fit(design, y, sample_weight=w)
    assert_allclose(cal.predict(X).to_numpy(), ref.predict_proba(design)[:, 1], rtol=0, atol=1e-8)


def crossed_design_codes(encoder: FeatureEncoder, codes: np.ndarray) -> np.ndarray:
    """The one-hot design of every code column (no score, no intercept)."""
    offsets = value_offsets(encoder.n_codes_)
    onehot = np.zeros((codes.shape[0], int(encoder.n_codes_.sum())))
    for j in range(codes.shape[1]):
        onehot[np.arange(codes.shape[0]), offsets[j] + codes[:, j]] = 1.0
    return onehot


def test_integer_weights_equal_repeated_rows() -> None:
    X, y = crossed_data(n=800, seed=3)
    w = np.random.default_rng(4).integers(0, 4, len(y))
    params = {**PARAMS, "interactions": [("device", "hour"), ("site", "device")], "min_cross_count": 5}
    weighted = FeatureAwarePlattCalibrator(**params).fit(X, y, sample_weight=w.astype(np.float64))
    rows = np.repeat(np.arange(len(y)), w)
    repeated = FeatureAwarePlattCalibrator(**params).fit(X.iloc[rows].reset_index(drop=True), y[rows])
    assert weighted.encoder_ == repeated.encoder_
    assert_allclose(weighted.predict(X), repeated.predict(X), atol=1e-9)


def test_auto_keeps_the_true_interaction_and_beats_first_order_held_out() -> None:
    X, y = crossed_data(n=20_000, seed=5)
    X_test, y_test = crossed_data(n=20_000, seed=6)
    auto = FeatureAwarePlattCalibrator(interactions="auto", **PARAMS).fit(X, y)
    assert auto.interactions_ == [["device", "hour"]]
    first = FeatureAwarePlattCalibrator(**PARAMS).fit(X, y)
    assert first.interactions_ == []
    gain = log_loss(y_test, first.predict(X_test)) - log_loss(y_test, auto.predict(X_test))
    assert gain > 0.005


def test_auto_keeps_no_pair_without_interactions() -> None:
    X, y = crossed_data(n=20_000, seed=7, strength=0.0)
    auto = FeatureAwarePlattCalibrator(interactions="auto", **PARAMS).fit(X, y)
    assert auto.interactions_ == []
    first = FeatureAwarePlattCalibrator(**PARAMS).fit(X, y)
    assert_allclose(auto.predict(X), first.predict(X), atol=1e-6)


def test_auto_equals_the_listed_fit_of_the_pairs_it_keeps() -> None:
    X, y = crossed_data(n=20_000, seed=5)
    auto = FeatureAwarePlattCalibrator(interactions="auto", **PARAMS).fit(X, y)
    listed = FeatureAwarePlattCalibrator(interactions=auto.interactions_, **PARAMS).fit(X, y)
    assert_allclose(auto.predict(X), listed.predict(X), atol=1e-8)


def test_screened_crosses_start_at_their_one_step_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Started at -g / (h + l2_cross), the second-order fit reaches the optimum it reaches from 0 in
    fewer Newton steps (each a pass over the rows)."""
    X, y = crossed_data(n=20_000, seed=5)
    stepped = FeatureAwarePlattCalibrator(interactions="auto", **PARAMS).fit(X, y)
    one_step = solver.cross_steps
    monkeypatch.setattr(solver, "cross_steps", lambda *args: np.zeros_like(one_step(*args)))
    from_zero = FeatureAwarePlattCalibrator(interactions="auto", **PARAMS).fit(X, y)
    assert stepped.interactions_ == from_zero.interactions_ == [["device", "hour"]]
    assert_allclose(stepped.predict(X), from_zero.predict(X), atol=1e-8)
    assert stepped.n_iter_ < from_zero.n_iter_


@pytest.mark.parametrize("strength", [1.2, 0.0])
def test_screened_fit_starts_from_the_first_order_fit_not_strided_rows(
    monkeypatch: pytest.MonkeyPatch, strength: float
) -> None:
    """On many rows the first-order fit the screen reads is warm-started on strided rows; the second-order
    fit then starts from it (the fit on every row) and takes no strided fit of its own, which would move
    it away: the same optimum in fewer Newton steps, with a cross kept or none."""
    X, y = crossed_data(n=20_000, seed=5, strength=strength)
    monkeypatch.setattr(feature_platt, "WARM_START_MIN_ROWS", 10_000)
    monkeypatch.setattr(feature_platt, "WARM_START_ROWS", 2_000)
    strided_fits: list[int] = []
    sample = solver.strided

    def counted(*args: Any, **kwargs: Any) -> Any:
        strided_fits.append(1)
        return sample(*args, **kwargs)

    monkeypatch.setattr(solver, "strided", counted)
    fitted = FeatureAwarePlattCalibrator(interactions="auto", **PARAMS).fit(X, y)
    assert len(strided_fits) == 1  # the first-order fit's warm start only
    fit_rows = solver._fit_rows

    def rewarming(*args: Any, **kwargs: Any) -> Any:
        return fit_rows(*args, **{**kwargs, "strided_start": True})

    monkeypatch.setattr(solver, "_fit_rows", rewarming)
    rewarmed = FeatureAwarePlattCalibrator(interactions="auto", **PARAMS).fit(X, y)
    assert len(strided_fits) == 3
    assert fitted.interactions_ == rewarmed.interactions_ == ([["device", "hour"]] if strength else [])
    assert_allclose(fitted.predict(X), rewarmed.predict(X), atol=1e-8)
    assert fitted.n_iter_ < rewarmed.n_iter_


def test_save_load_round_trip(tmp_path: Any) -> None:
    X, y = crossed_data(n=3000, seed=9)
    cal = FeatureAwarePlattCalibrator(interactions="auto", **PARAMS).fit(X, y)
    assert cal.interactions_
    cal.save(tmp_path / "m.json")
    loaded = gpucal.load(tmp_path / "m.json")
    assert loaded.get_params() == cal.get_params()
    assert loaded.interactions_ == cal.interactions_
    assert_array_equal(loaded.predict(X).to_numpy(), cal.predict(X).to_numpy())


def test_parameters_holding_numpy_scalars_save_and_load(tmp_path: Any) -> None:
    X, y = crossed_data(n=1500, seed=11)
    X = X.rename(columns={"device": 1, "hour": 2})  # columns named by integers, given as numpy's
    pair = (np.int64(1), np.int64(2))
    cal = FeatureAwarePlattCalibrator(interactions=[pair], categorical_cols=[1, 2], l2=np.float64(3.0))
    cal.fit(X, y).save(tmp_path / "m.json")
    loaded = gpucal.load(tmp_path / "m.json")
    assert loaded.get_params() == {**cal.get_params(), "interactions": [[1, 2]]}  # JSON has no tuples
    assert_array_equal(loaded.predict(X).to_numpy(), cal.predict(X).to_numpy())


def test_load_rejects_inconsistent_crosses(tmp_path: Any) -> None:
    X, y = crossed_data(n=1500, seed=10)
    FeatureAwarePlattCalibrator(interactions=[("device", "hour")], **PARAMS).fit(X, y).save(
        tmp_path / "m.json"
    )
    doc = json.loads((tmp_path / "m.json").read_text())
    other = json.loads(json.dumps(doc))
    other["state"]["interactions_"] = [["site", "hour"]]
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(gpucal.ModelFileError, match="differ from the encoder's crosses"):
        gpucal.load(tmp_path / "other.json")
    short = json.loads(json.dumps(doc))
    short["state"]["encoder_"]["crosses"][0]["keys"] = short["state"]["encoder_"]["crosses"][0]["keys"][:-1]
    (tmp_path / "short.json").write_text(json.dumps(short))
    with pytest.raises(gpucal.ModelFileError, match="encoder has"):
        gpucal.load(tmp_path / "short.json")


@pytest.mark.parametrize(
    ("interactions", "error", "match"),
    [
        ([("device", "nope")], ValueError, r"names column\(s\) \['nope'\]"),
        ([("hour", "hour")], ValueError, "crosses column 'hour' with itself"),
        ([("hour",)], ValueError, r"\('hour',\) is not a pair of columns"),
        ("pairs", ValueError, "'interactions' parameter of FeatureAwarePlattCalibrator must be None, 'auto'"),
        (3, ValueError, "'interactions' parameter of FeatureAwarePlattCalibrator"),
        (np.array([["device", "hour"]]), ValueError, r"list of column pairs \(tuples of two column names\)"),
    ],
)
def test_bad_interactions(interactions: Any, error: type, match: str) -> None:
    X, y = crossed_data(n=200)
    with pytest.raises(error, match=match):
        FeatureAwarePlattCalibrator(interactions=interactions, **PARAMS).fit(X, y)


def test_bad_cross_parameters() -> None:
    X, y = crossed_data(n=200)
    with pytest.raises(ValueError, match="'l2_cross' parameter"):
        FeatureAwarePlattCalibrator(l2_cross=0.0).fit(X, y)
    with pytest.raises(ValueError, match="'max_cross_levels' parameter"):
        FeatureAwarePlattCalibrator(max_cross_levels=0).fit(X, y)
