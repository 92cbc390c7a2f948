"""Platt scaling on logit hinges: equal to scikit-learn's LogisticRegression on the same hinge design.

Reference: ``LogisticRegression(C=1 / l2, solver="newton-cholesky")`` on
``[s * logit p, (logit p - t_k)_+]`` with ``s = 1e4`` (the logit's coefficient practically unpenalised,
as in gpucal, which penalises the slope changes only), Platt's smoothed targets written as two weighted
rows per row. The knots are the model's own (``knots_``), checked separately against exact weighted
quantiles.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose
from sklearn.linear_model import LogisticRegression

import gpucal
from gpucal.calibrators import hinge_platt
from gpucal.calibrators._logistic_kernels import logistic_sums
from gpucal.calibrators.hinge_platt import (
    DEFAULT_QUANTILES,
    HingePlattCalibrator,
    hinge_design,
    hinge_knots,
    predict_hinge_platt,
    variable_block,
)
from gpucal.calibrators.hinge_series import HingeSeries, hinge_moments
from gpucal.calibrators.logistic import SERIES_MAX_REACH, ScoreBlock
from gpucal.calibrators.spline import HISTOGRAM_BINS
from gpucal.rows import LocalRows

#: The scale of the logit column in the reference design: its penalty is l2 / SCALE**2, negligible.
SCALE = 1e4


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores whose logit bends at -1 (a slope of 1 below, 1.8 above), and integer weights 1-3."""
    rng = np.random.default_rng(seed)
    p = rng.beta(1.0, 4.0, n)
    x = np.log(p / (1 - p))
    y = (rng.random(n) < 1 / (1 + np.exp(-(x + 0.8 * np.maximum(x + 1, 0))))).astype(np.float64)
    return p, y, rng.integers(1, 4, n).astype(np.float64)


def sklearn_hinge_fit(
    p: np.ndarray, y: np.ndarray, w: np.ndarray, knots: np.ndarray, l2: float, smoothing: bool
) -> tuple[np.ndarray, float]:
    """``[a, c_1, ..., c_K]`` and ``b`` from scikit-learn on the hinge design (module docstring)."""
    design = hinge_design(np.log(p / (1 - p)), knots)
    design[:, 0] *= SCALE
    n_pos, total = float(w @ y), float(w.sum())
    t_neg, t_pos = (1 / (total - n_pos + 2), (n_pos + 1) / (n_pos + 2)) if smoothing else (0.0, 1.0)
    t = t_neg + y * (t_pos - t_neg)
    model = LogisticRegression(C=1 / l2, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(
        np.vstack([design, design]),
        np.r_[np.ones(p.shape[0]), np.zeros(p.shape[0])],
        sample_weight=np.r_[w * t, w * (1 - t)],
    )
    coef = model.coef_[0].copy()
    coef[0] *= SCALE
    return coef, float(model.intercept_[0])


@pytest.mark.parametrize(("smoothing", "l2"), [(True, 1.0), (False, 5.0)])
def test_fit_is_scikit_learns_logistic_regression_on_the_hinge_design(smoothing: bool, l2: float) -> None:
    p, y, w = make_data(3000, 0)
    cal = HingePlattCalibrator(l2=l2, target_smoothing=smoothing).fit(p, y, sample_weight=w)
    coef, intercept = sklearn_hinge_fit(p, y, w, cal.knots_, l2, smoothing)
    assert cal.knots_.shape == (3,)
    assert_allclose(cal.coef_, coef, rtol=0, atol=1e-6)
    assert abs(cal.intercept_ - intercept) < 1e-6
    test = np.linspace(0.001, 0.999, 99)
    x = np.log(test / (1 - test))
    expected = 1 / (1 + np.exp(-(hinge_design(x, cal.knots_) @ coef + intercept)))
    assert_allclose(cal.predict(test), expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("backend", ["numba", "array"])  # array: the GPU path's code, on numpy
def test_series_sums_are_the_row_sums(backend: str) -> None:
    """The loss, gradient and Hessian of the bins' series equal those of the rows (module
    ``hinge_series``), at the start and away from the optimum, with weights and smoothed targets."""
    p, y, w = make_data(40_000, 5)
    variable = LocalRows((variable_block(ScoreBlock(p, y, w), "probability"),))
    knots, span = hinge_knots(variable, np.array(DEFAULT_QUANTILES))
    targets = (0.01, 0.98)
    series = HingeSeries(variable.sum(hinge_moments, span, backend), span, knots, targets)
    x = np.log(p / (1 - p))
    design = hinge_design(x, knots)
    for theta in (np.array([1.0, 0.0, 0.0, 0.0, 0.0]), np.array([0.7, 0.4, -0.3, 0.2, -0.5])):
        loss, grad, hess = series.sums(theta)
        row_loss, row_grad, row_hess = logistic_sums(design, y, w, theta, targets=targets, backend="array")
        assert abs(loss - row_loss) <= 1e-11 * abs(row_loss)
        assert_allclose(grad, row_grad, rtol=1e-10, atol=1e-10 * np.abs(row_grad).max())
        assert_allclose(hess, row_hess, rtol=1e-10, atol=1e-10 * np.abs(row_hess).max())
    assert series.reach(theta) <= SERIES_MAX_REACH


@pytest.mark.parametrize("smoothing", [True, False])
def test_large_fit_from_the_series_is_the_row_fit(monkeypatch, smoothing: bool) -> None:  # type: ignore[no-untyped-def]
    """From SERIES_MIN_ROWS rows the series answer stands, without a pass of Newton over the rows: the
    same coefficients as the row fit and scikit-learn's."""
    p, y, w = make_data(40_000, 6)
    passes: list[int] = []
    row_fit = hinge_platt.fit_logistic_rows
    monkeypatch.setattr(
        hinge_platt, "fit_logistic_rows", lambda *a, **k: passes.append(1) or row_fit(*a, **k)
    )
    cal = HingePlattCalibrator(target_smoothing=smoothing).fit(p, y, sample_weight=w)
    assert passes == []
    monkeypatch.setattr(hinge_platt, "SERIES_MIN_ROWS", 10**9)
    rows = HingePlattCalibrator(target_smoothing=smoothing).fit(p, y, sample_weight=w)
    assert passes == [1]
    assert_allclose(cal.knots_, rows.knots_, rtol=0, atol=0)
    assert_allclose(cal.coef_, rows.coef_, rtol=0, atol=1e-9)
    assert abs(cal.intercept_ - rows.intercept_) < 1e-9
    coef, intercept = sklearn_hinge_fit(p, y, w, cal.knots_, 1.0, smoothing)
    assert_allclose(cal.coef_, coef, rtol=0, atol=1e-6)
    assert abs(cal.intercept_ - intercept) < 1e-6


def test_series_out_of_reach_starts_the_row_fit(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A few scores at the ends of the probability scale stretch the logit's bins until the largest
    slope times half a bin passes SERIES_MAX_REACH: the series answer then starts the row fit."""
    p, y, w = make_data(40_000, 7)
    p[:20], p[20:40] = 1e-15, 1 - 1e-15
    starts: list[object] = []
    row_fit = hinge_platt.fit_logistic_rows
    monkeypatch.setattr(
        hinge_platt, "fit_logistic_rows", lambda *a, **k: starts.append(k["theta0"]) or row_fit(*a, **k)
    )
    cal = HingePlattCalibrator().fit(p, y, sample_weight=w)
    assert len(starts) == 1
    assert starts[0] is not None
    coef, intercept = sklearn_hinge_fit(p, y, w, cal.knots_, 1.0, True)
    assert_allclose(cal.coef_, coef, rtol=0, atol=1e-6)
    assert abs(cal.intercept_ - intercept) < 1e-6


def test_knots_are_weighted_quantiles_of_the_logit() -> None:
    p, y, w = make_data(2000, 1)
    cal = HingePlattCalibrator(quantiles=(0.2, 0.5, 0.9)).fit(p, y, sample_weight=w)
    x = np.log(p / (1 - p))
    exact = np.quantile(np.repeat(x, w.astype(np.int64)), [0.2, 0.5, 0.9], method="inverted_cdf")
    # Read on a histogram of the logit: at most one bin's width above the exact quantile.
    width = (x.max() - x.min()) / HISTOGRAM_BINS
    assert np.all(cal.knots_ >= exact - 1e-12)
    assert np.all(cal.knots_ <= exact + width + 1e-12)


def test_weights_equal_repeated_rows_frames_and_logit_scores() -> None:
    p, y, w = make_data(800, 2)
    w[::7] = 0.0
    rows = np.repeat(np.arange(p.shape[0]), w.astype(np.int64))
    weighted = HingePlattCalibrator().fit(p, y, sample_weight=w)
    repeated = HingePlattCalibrator().fit(p[rows], y[rows])
    test = np.linspace(0.01, 0.99, 99)
    assert_allclose(weighted.predict(test), repeated.predict(test), rtol=1e-9, atol=0)
    frame = pd.DataFrame({"s": p[rows], "other": 0.0})
    from_frame = HingePlattCalibrator(score_col="s").fit(frame, pd.Series(y[rows]))
    assert_allclose(from_frame.coef_, repeated.coef_, rtol=1e-12)
    logit = HingePlattCalibrator(score_kind="logit").fit(np.log(p[rows] / (1 - p[rows])), y[rows])
    assert_allclose(logit.predict(np.log(test / (1 - test))), repeated.predict(test), rtol=1e-9)


def test_name_and_two_scores_give_platts_map() -> None:
    assert type(gpucal.make_calibrator("platt_hinge")) is HingePlattCalibrator
    p, y, _ = make_data(500, 3)
    # Two distinct scores: (a, b) alone fit both, so the penalised slope changes vanish.
    two = np.where(p < np.median(p), 0.2, 0.6)
    cal = HingePlattCalibrator().fit(two, y)
    platt = gpucal.make_calibrator("platt").fit(two, y)
    assert_allclose(cal.coef_[1:], 0.0, atol=1e-9)
    assert_allclose(cal.predict(np.array([0.2, 0.6])), platt.predict(np.array([0.2, 0.6])), rtol=1e-9)


def test_increasing_reads_every_partial_slope() -> None:
    rng = np.random.default_rng(4)
    score = rng.random(20_000)
    logit = np.log(score / (1 - score))
    rising = HingePlattCalibrator().fit(score, (rng.random(20_000) < score).astype(float))
    assert rising.increasing()
    # The rate falls again above the logit's median: the last partial slopes turn negative.
    bent = 1 / (1 + np.exp(-(logit - 3.0 * np.maximum(logit, 0.0))))
    falling = HingePlattCalibrator().fit(score, (rng.random(20_000) < bent).astype(float))
    assert np.cumsum(falling.coef_)[-1] < 0
    assert not falling.increasing()
    grid = np.linspace(0.01, 0.99, 99)
    assert np.any(np.diff(falling.predict(grid)) < 0)
    assert np.all(np.diff(rising.predict(grid)) > 0)


@pytest.mark.parametrize(
    ("score", "y", "kwargs", "match"),
    [
        (np.array([0.2, 0.4, 0.6]), np.ones(3), {}, "class"),
        (np.full(4, 0.3), np.array([0.0, 1, 0, 1]), {}, "distinct"),
        (np.array([0.2, 0.4]), np.array([0.0, 1]), {"quantiles": (0.5, 1.0)}, "quantiles"),
        (np.array([0.2, 0.4]), np.array([0.0, 1]), {"l2": -1.0}, "'l2' parameter"),
    ],
)
def test_bad_input(score: np.ndarray, y: np.ndarray, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        HingePlattCalibrator(**kwargs).fit(score, y)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda state: state.update(coef_=state["coef_"][:-1]), "coef_"),
        (lambda state: state.update(knots_=state["knots_"][::-1]), "knots_"),
        (lambda state: state.update(intercept_="0.5"), "intercept_"),
    ],
)
def test_round_trip_and_hostile_state(tmp_path, change, match: str) -> None:  # type: ignore[no-untyped-def]
    p, y, _ = make_data(500, 4)
    cal = HingePlattCalibrator().fit(p, y)
    cal.save(tmp_path / "m.json")
    loaded = gpucal.load(tmp_path / "m.json")
    test = np.linspace(0, 1, 101)
    np.testing.assert_array_equal(loaded.predict(test), cal.predict(test))
    document = json.loads((tmp_path / "m.json").read_text())
    change(document["state"])
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(gpucal.ModelFileError, match=match):
        gpucal.load(tmp_path / "bad.json")


@pytest.mark.parametrize("score_kind", ["probability", "logit"])
def test_predict_in_row_chunks_is_one_calls_bits(monkeypatch: pytest.MonkeyPatch, score_kind: str) -> None:
    from gpucal.calibrators.hinge_platt import _hinge_probabilities
    from gpucal.kernels import jit

    rng = np.random.default_rng(5)
    n = 5 * jit.CHUNK_ALIGN + 13
    score = rng.uniform(size=n) if score_kind == "probability" else rng.normal(scale=3.0, size=n)
    score[:2] = (0.0, 1.0) if score_kind == "probability" else (-40.0, 40.0)
    knots, coef = np.array([-2.0, 0.5, 1.5]), np.array([0.9, 0.2, -0.3, 0.4])
    want = _hinge_probabilities(score, knots, coef, -0.1, score_kind)  # one call: below PARALLEL_MIN_ROWS
    monkeypatch.setattr(jit, "PARALLEL_MIN_ROWS", 10)
    monkeypatch.setattr(jit, "MAX_CHUNK_ROWS", 1)  # many chunks of CHUNK_ALIGN rows
    got = predict_hinge_platt(score, knots, coef, -0.1, score_kind=score_kind)
    np.testing.assert_array_equal(got, want)
