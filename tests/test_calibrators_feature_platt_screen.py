"""Feature-aware Platt's ``screen_fields``: the fields kept against Platt scaling, checked against the
explicit fit on those fields, scikit-learn's Platt fit, and the held-out log-loss of the unscreened fit;
the fits of a search's settings inside ``sharing_fits`` against the same fits alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import expit, logit
from sklearn.linear_model import LogisticRegression

from gpucal.calibrators import _feature_platt_solver as solver
from gpucal.calibrators._feature_platt_rows import PlattBlock
from gpucal.calibrators._feature_platt_solver import _score_only
from gpucal.calibrators.feature_platt import FeatureAwarePlattCalibrator, sharing_fits
from gpucal.metrics import log_loss
from gpucal.rows.local import LocalRows

EPS = np.finfo(np.float64).eps


def noisy_ids(n: int, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    """A score that knows everything but a ``region`` bias; ``site`` is an id with 600 values the truth
    does not use (its offsets can only fit noise)."""
    rng = np.random.default_rng(seed)
    bias = np.random.default_rng(100).normal(0, 0.6, 8)
    region = rng.integers(0, 8, n)
    site = rng.integers(0, 600, n)
    p = rng.beta(2.0, 5.0, n)
    y = (rng.random(n) < expit(logit(p) - bias[region])).astype(np.float64)
    return pd.DataFrame({"score": p, "site": site, "region": region}), y


PARAMS = {"categorical_cols": ["site", "region"], "l2": 10.0, "tol": 1e-10}


def test_keeps_the_biased_field_drops_the_id_and_equals_the_fit_on_it() -> None:
    X, y = noisy_ids(6_000, 0)
    screened = FeatureAwarePlattCalibrator(screen_fields=True, **PARAMS).fit(X, y)
    assert screened.encoder_["columns"][0]["name"] == "region"
    assert len(screened.encoder_["columns"]) == 1
    alone = FeatureAwarePlattCalibrator(feature_cols=["region"], **{**PARAMS, "categorical_cols": ["region"]})
    assert_allclose(screened.predict(X), alone.fit(X, y).predict(X), rtol=1e-12)


def test_beats_the_unscreened_fit_held_out() -> None:
    X, y = noisy_ids(6_000, 1)
    X_test, y_test = noisy_ids(20_000, 2)
    screened = FeatureAwarePlattCalibrator(screen_fields=True, **PARAMS).fit(X, y)
    every = FeatureAwarePlattCalibrator(**PARAMS).fit(X, y)
    gain = log_loss(y_test, every.predict(X_test)) - log_loss(y_test, screened.predict(X_test))
    assert gain > 0.0005


def test_fields_of_listed_interactions_stay() -> None:
    X, y = noisy_ids(3_000, 3)
    cal = FeatureAwarePlattCalibrator(screen_fields=True, interactions=[("site", "region")], **PARAMS)
    cal.fit(X, y)
    assert [c["name"] for c in cal.encoder_["columns"]] == ["site", "region"]
    assert cal.interactions_ == [["site", "region"]]


def cross_only(n: int, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    """A bias per cell of ``device`` x ``hour`` whose row and column means are 0 (neither field carries
    any of it alone), beside ``site``, an id with 600 values the truth does not use."""
    rng = np.random.default_rng(seed)
    cells = np.random.default_rng(200).normal(0, 0.8, (4, 6))
    cells -= cells.mean(axis=0) + cells.mean(axis=1, keepdims=True) - cells.mean()
    device, hour = rng.integers(0, 4, n), rng.integers(0, 6, n)
    p = rng.beta(2.0, 5.0, n)
    y = (rng.random(n) < expit(logit(p) - cells[device, hour])).astype(np.float64)
    return pd.DataFrame({"score": p, "site": rng.integers(0, 600, n), "device": device, "hour": hour}), y


def test_keeps_the_fields_of_a_cross_that_pays_though_neither_does_alone() -> None:
    X, y = cross_only(6_000, 6)
    params = {**PARAMS, "categorical_cols": ["site", "device", "hour"]}
    cal = FeatureAwarePlattCalibrator(screen_fields=True, interactions="auto", l2_cross=10.0, **params)
    cal.fit(X, y)
    assert [c["name"] for c in cal.encoder_["columns"]] == ["device", "hour"]
    assert cal.interactions_ == [["device", "hour"]]
    X_test, y_test = cross_only(20_000, 7)
    first_order = FeatureAwarePlattCalibrator(screen_fields=True, **params).fit(X, y)
    assert log_loss(y_test, first_order.predict(X_test)) - log_loss(y_test, cal.predict(X_test)) > 0.005


def test_keeps_the_best_field_when_none_pays() -> None:
    rng = np.random.default_rng(4)
    p = rng.beta(2.0, 5.0, 4_000)
    X = pd.DataFrame({"score": p, "a": rng.integers(0, 300, 4_000), "b": rng.integers(0, 200, 4_000)})
    y = (rng.random(4_000) < p).astype(np.float64)
    cal = FeatureAwarePlattCalibrator(screen_fields=True, categorical_cols=["a", "b"], l2=10.0).fit(X, y)
    assert len(cal.encoder_["columns"]) == 1


@pytest.mark.parametrize("n_rows", [2_000, 20_000])  # Newton's passes; the bins' moments
@pytest.mark.parametrize("l2", [1.0, 10.0])
def test_score_only_fit_equals_sklearn(l2: float, n_rows: int) -> None:
    rng = np.random.default_rng(5)
    p = rng.beta(2.0, 5.0, n_rows)
    y = (rng.random(n_rows) < expit(1.7 * logit(p) - 0.4)).astype(np.float64)
    x = logit(np.clip(p, EPS, 1 - EPS))
    block = PlattBlock(x=x, codes=np.zeros((n_rows, 1), dtype=np.int8), y=y, w=np.ones(n_rows))
    a, b = _score_only(LocalRows((block,)), l2)
    ref = LogisticRegression(C=1.0 / l2, tol=1e-12, max_iter=1000).fit(x[:, None], y)
    assert_allclose([a, b], [ref.coef_[0, 0], ref.intercept_[0]], atol=1e-7)


# The settings of AutoCalibrator's feature-aware Platt candidates on a large set: three share the
# first-order encoder, two the encoder with every pair crossed, three the score-only model of the screen.
SEARCH = [
    {"l2": 1.0},
    {"l2": 10.0, "screen_fields": True},
    {"l2": 100.0},
    {"l2": 10.0, "screen_fields": True, "interactions": "auto", "l2_cross": 10.0},
    {"l2": 10.0, "screen_fields": True, "interactions": "auto", "l2_cross": 100.0},
]


def fitted_state(cal: FeatureAwarePlattCalibrator) -> tuple[Any, ...]:
    return (cal.encoder_, cal.interactions_, cal.coef_score_, cal.intercept_, cal.coef_.tolist(), cal.n_iter_)


def test_shared_fits_equal_unshared_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = cross_only(5_000, 8)
    w = np.random.default_rng(9).uniform(0.5, 2.0, len(y))
    params = {"categorical_cols": ["site", "device", "hour"], "tol": 1e-5}
    alone = [FeatureAwarePlattCalibrator(**params, **p).fit(X, y, sample_weight=w) for p in SEARCH]
    assert alone[3].interactions_ == [["device", "hour"]]
    encodings: list[Any] = []
    real = solver._encoded
    monkeypatch.setattr(solver, "_encoded", lambda *a, **k: encodings.append(a) or real(*a, **k))
    memo: dict[Any, Any] = {}
    with sharing_fits(memo):
        shared = [FeatureAwarePlattCalibrator(**params, **p).fit(X, y, sample_weight=w) for p in SEARCH]
        other = X.copy()  # another object: its own encodings, never those of X
        again = FeatureAwarePlattCalibrator(**params, **SEARCH[3]).fit(other, y, sample_weight=w)
    assert len(encodings) == 3  # two encoders on X, one on its copy
    assert len(memo) == 2
    for one, two in zip(alone, shared, strict=True):
        assert fitted_state(one) == fitted_state(two)
        assert_array_equal(one.predict(X), two.predict(X))
    assert fitted_state(again) == fitted_state(alone[3])


def test_shared_second_order_fits_with_and_without_the_field_screen_equal_unshared_ones() -> None:
    # Where the screen narrows nothing, the two settings share an encoding and a column list, but their
    # first-order fits start apart (the screen's Platt scaling, the constant model) and stop at a
    # tolerance: each must take its own.
    rng = np.random.default_rng(3)
    n_rows = 4_000
    X = pd.DataFrame(
        {
            "score": rng.uniform(0.05, 0.95, n_rows),
            "a": rng.choice(list("pqrst"), n_rows),
            "b": rng.choice(list("xyz"), n_rows),
        }
    )
    effect = 1.0 * ((X["a"] == "p") & (X["b"] == "x")) + 0.8 * (X["a"] == "q") + 0.7 * (X["b"] == "y")
    y = (rng.random(n_rows) < expit(0.5 * logit(X["score"]) + effect)).astype(np.float64).to_numpy()
    params = {"l2": 10.0, "interactions": "auto"}
    settings = [{}, {"screen_fields": True}]
    alone = [FeatureAwarePlattCalibrator(**params, **p).fit(X, y) for p in settings]
    for order in (settings, settings[::-1]):
        with sharing_fits({}):
            shared = {id(p): FeatureAwarePlattCalibrator(**params, **p).fit(X, y) for p in order}
        for p, one in zip(settings, alone, strict=True):
            assert fitted_state(shared[id(p)]) == fitted_state(one)


def test_nothing_is_kept_outside_sharing(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = cross_only(3_000, 10)
    params = {"categorical_cols": ["site", "device", "hour"], **SEARCH[3]}
    encodings: list[Any] = []
    real = solver._encoded
    monkeypatch.setattr(solver, "_encoded", lambda *a, **k: encodings.append(a) or real(*a, **k))
    with sharing_fits({}):
        FeatureAwarePlattCalibrator(**params).fit(X, y)
    assert solver._SHARED_FITS.get() is None
    X["hour"] = (X["hour"].to_numpy() + 1) % 6  # the same object, changed between two fits outside
    refit = FeatureAwarePlattCalibrator(**params).fit(X, y)
    assert len(encodings) == 2
    fresh = FeatureAwarePlattCalibrator(**params).fit(X.copy(), y)
    assert fitted_state(refit) == fitted_state(fresh)
