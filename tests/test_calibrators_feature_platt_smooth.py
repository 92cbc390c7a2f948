"""Feature-aware Platt's ``l2_smooth``: the difference penalty along ordered columns, against the exact
optimum of the same penalised objective on the dense one-hot design, and which columns it chains."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import expit, logit

from gpucal._frames import frame_columns
from gpucal.calibrators import feature_platt
from gpucal.calibrators.feature_platt import FeatureAwarePlattCalibrator
from gpucal.encoding import FeatureEncoder
from gpucal.kernels import value_offsets

EPS = np.finfo(np.float64).eps


def ordered_data(n: int = 3000, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """An integer age (read by value by the integer rule), a float income (binned), a string category;
    the truth bends smoothly in age and income."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 80, n)
    income = rng.lognormal(0.0, 0.6, n)
    group = rng.choice(list("abcd"), n)
    p = rng.beta(2.0, 5.0, n)
    z = logit(p) + 0.6 * np.sin((age - 18) / 12.0) - 0.4 * np.log(income) + 0.5 * (group == "a")
    y = (rng.random(n) < expit(z)).astype(np.float64)
    return pd.DataFrame({"score": p, "age": age, "income": income, "group": group}), y


def exact_fit(
    cal: FeatureAwarePlattCalibrator, X: pd.DataFrame, y: np.ndarray, w: np.ndarray | None
) -> np.ndarray:
    """``[a, b, beta]`` minimising the weighted loss sum plus ``l2/2 (a^2 + |beta|^2)`` plus
    ``l2_smooth/2 |D beta|^2`` by Newton on the dense design, ``D`` linking each ordered column's
    consecutive codes that some row of positive weight has."""
    encoder = FeatureEncoder.from_dict(cal.encoder_)
    codes = encoder.transform(X[encoder.feature_names_])
    offsets = value_offsets(encoder.n_values_)
    n_codes = int(encoder.n_values_.sum())
    onehot = np.zeros((len(X), n_codes))
    for j in range(codes.shape[1]):
        onehot[np.arange(len(X)), offsets[j] + codes[:, j]] = 1.0
    design = np.column_stack([logit(np.clip(X["score"].to_numpy(), EPS, 1 - EPS)), np.ones(len(X)), onehot])
    weight = np.ones(len(X)) if w is None else w
    used = (weight @ onehot) > 0
    links = []
    for j, ordered in enumerate(encoder.ordered_):
        if ordered:
            chained = offsets[j] + np.flatnonzero(used[offsets[j] : offsets[j] + encoder.missing_codes_[j]])
            links += list(itertools.pairwise(chained))
    diff = np.zeros((len(links), n_codes))
    for r, (left, right) in enumerate(links):
        diff[r, left], diff[r, right] = -1.0, 1.0
    penalty = np.zeros((n_codes + 2, n_codes + 2))
    penalty[0, 0] = cal.l2
    penalty[2:, 2:] = cal.l2 * np.eye(n_codes) + cal.l2_smooth * diff.T @ diff
    # Codes no row uses stay at 0 (as in the fit): solve over the others only.
    keep = np.r_[True, True, used]
    design, penalty = design[:, keep], penalty[np.ix_(keep, keep)]
    theta = np.zeros(design.shape[1])
    for _ in range(50):
        p = expit(design @ theta)
        grad = design.T @ (weight * (p - y)) + penalty @ theta
        hess = design.T @ (design * (weight * p * (1 - p))[:, None]) + penalty
        theta -= np.linalg.solve(hess, grad)
    out = np.zeros(n_codes + 2)
    out[keep] = theta
    return out


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("l2_smooth", [5.0, 200.0])
def test_equals_the_exact_penalised_optimum(weighted: bool, l2_smooth: float) -> None:
    X, y = ordered_data()
    w = None
    if weighted:
        w = np.random.default_rng(1).random(len(y)) * 2.0
        w[X["age"].to_numpy() == 40] = 0.0  # a value no row of positive weight has: the chain skips it
    cal = FeatureAwarePlattCalibrator(l2=2.0, l2_smooth=l2_smooth, n_bins=12).fit(X, y, sample_weight=w)
    ours = np.r_[cal.coef_score_, cal.intercept_, cal.coef_]
    assert_allclose(ours, exact_fit(cal, X, y, w), rtol=0, atol=1e-7)


def test_chains_only_ordered_columns() -> None:
    X, y = ordered_data(n=2000, seed=2)
    encoder = FeatureEncoder().fit(X[["age", "income", "group"]])
    assert encoder.kinds_ == ["values", "bins", "values"]
    assert encoder.ordered_ == [True, True, False]
    named = FeatureEncoder(categorical_cols=["age"]).fit(X[["age", "income", "group"]])
    assert named.ordered_ == [False, True, False]
    # Found before fitting, as the fit finds them.
    columns = frame_columns(X[["age", "income", "group"]])
    assert FeatureEncoder().ordered_columns(columns) == ["age", "income"]
    assert FeatureEncoder(categorical_cols=["age"]).ordered_columns(columns) == ["income"]
    # The string column and a column named in categorical_cols are not chained: with nothing else
    # ordered, the fit is the fit without smoothing, bit for bit.
    only_categories = X[["score", "age", "group"]]
    smooth = FeatureAwarePlattCalibrator(l2_smooth=1e3, categorical_cols=["age"]).fit(only_categories, y)
    plain = FeatureAwarePlattCalibrator(l2_smooth=0.0, categorical_cols=["age"]).fit(only_categories, y)
    assert_array_equal(smooth.coef_, plain.coef_)


def test_a_strong_smoothing_flattens_an_ordered_column() -> None:
    X, y = ordered_data(n=2000, seed=3)
    cal = FeatureAwarePlattCalibrator(l2_smooth=1e8).fit(X, y)
    encoder = FeatureEncoder.from_dict(cal.encoder_)
    offsets = value_offsets(encoder.n_values_)
    for j in (0, 1):  # age, income: their regular codes all move together, centred at 0
        regular = cal.coef_[offsets[j] : offsets[j] + encoder.missing_codes_[j]]
        assert np.ptp(regular) < 1e-4
    free = FeatureAwarePlattCalibrator(l2_smooth=0.0).fit(X, y)
    assert np.ptp(free.coef_[: encoder.missing_codes_[0]]) > 0.3


def test_the_default_smoothing_lowers_the_held_out_loss_of_a_smooth_truth() -> None:
    X, y = ordered_data(n=2500, seed=4)
    X_test, y_test = ordered_data(n=50_000, seed=5)

    def held_out(cal: FeatureAwarePlattCalibrator) -> float:
        p = cal.fit(X, y).predict(X_test).to_numpy()
        return float(-np.mean(y_test * np.log(p) + (1 - y_test) * np.log1p(-p)))

    smooth, plain = FeatureAwarePlattCalibrator(), FeatureAwarePlattCalibrator(l2_smooth=0.0)
    assert held_out(smooth) < held_out(plain) - 1e-3


def test_ordered_survives_saving_and_is_checked_on_load() -> None:
    X, _ = ordered_data(n=2000, seed=6)
    encoder = FeatureEncoder().fit(X[["age", "income", "group"]])
    assert encoder.kinds_[0] == "values"
    data = encoder.to_dict()
    assert data["columns"][0]["numeric_values"] is True
    assert "numeric_values" not in data["columns"][2]
    assert FeatureEncoder.from_dict(data).ordered_ == encoder.ordered_
    for bad in ("yes", 1):
        data["columns"][0]["numeric_values"] = bad
        with pytest.raises(ValueError, match=r"\['numeric_values'\]"):
            FeatureEncoder.from_dict(data)
    data["columns"][0]["numeric_values"] = False
    data["columns"][2]["numeric_values"] = True  # string categories
    with pytest.raises(ValueError, match=r"\[2\]\['numeric_values'\]"):
        FeatureEncoder.from_dict(data)


def test_array_path_equals_the_numba_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """The array code (the GPU path's, on numpy here) reads the same chains: the penalty is host data."""
    X, y = ordered_data(n=2000, seed=8)
    fast = FeatureAwarePlattCalibrator(l2_smooth=20.0).fit(X, y)
    monkeypatch.setattr(feature_platt, "FORCE_ARRAY_PATH", True)
    array = FeatureAwarePlattCalibrator(l2_smooth=20.0).fit(X, y)
    assert_allclose(
        np.r_[array.coef_score_, array.intercept_, array.coef_],
        np.r_[fast.coef_score_, fast.intercept_, fast.coef_],
        atol=1e-9,
    )


def test_rejects_a_negative_penalty() -> None:
    X, y = ordered_data(n=300, seed=7)
    with pytest.raises(ValueError, match="l2_smooth"):
        FeatureAwarePlattCalibrator(l2_smooth=-1.0).fit(X, y)
