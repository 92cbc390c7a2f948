"""Spline calibration: equal to the minimiser of ml-insights' own objective, and close to its SplineCalib.

Reference: ml-insights 1.1 (``splinecalib``): its natural cubic spline basis and its penalised
log-loss (``loss_fun_c.pen_ll_fun_grad``), minimised here by scipy's BFGS to 1e-10 in the gradient. Its
loss is a mean over rows with the prior's pseudo-rows counted as rows, ours a weighted mean: the
penalty is converted (``lambda W / n``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.optimize import minimize

import gpucal
from gpucal.calibrators.spline import (
    SplineCalibrator,
    _logistic_sums,
    natural_spline_basis,
    transform_scores,
)
from gpucal.kernels.jit import parallel_twins_only


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = rng.beta(0.8, 1.5, n)
    y = (rng.random(n) < np.clip(1.3 * s**1.4, 0, 1)).astype(np.float64)
    return s, y


def test_interval_moment_sums_equal_the_basis_matrix_sums() -> None:
    """The host loop sums per-interval moments of the piecewise cubics; the oracle forms the basis."""
    rng = np.random.default_rng(11)
    t = np.concatenate([rng.normal(0.0, 3.0, 3000), [-37.0, 37.0, -1.0, 2.0]])  # knots among the rows
    y, w = rng.random(t.shape[0]), rng.random(t.shape[0])
    w[:10] = 0.0
    knots = np.unique(np.concatenate([np.quantile(t, np.linspace(0.0, 1.0, 12))[1:-1], [-1.0, 2.0]]))
    theta = rng.normal(0.0, 0.5, knots.shape[0])
    basis = natural_spline_basis(t, knots)
    eta = basis @ theta
    p = 1.0 / (1.0 + np.exp(-eta))
    hess = (basis * (w * p * (1.0 - p))[:, None]).T @ basis
    expected = np.concatenate(
        [[w @ (np.logaddexp(0.0, eta) - y * eta)], basis.T @ (w * (p - y)), hess.ravel()]
    )
    ours = _logistic_sums(t, y, w, knots, theta)
    assert_allclose(ours, expected, rtol=1e-10, atol=1e-10 * np.abs(expected).max())
    assert_allclose(
        _logistic_sums(t, y, w, knots, theta, hessian=False)[: 1 + knots.shape[0]],
        expected[: 1 + knots.shape[0]],
        rtol=1e-10,
        atol=1e-9,
    )


def test_name_in_the_catalogue() -> None:
    assert type(gpucal.make_calibrator("spline")) is SplineCalibrator


def test_penalised_fit_is_the_minimiser_of_ml_insights_objective() -> None:
    pytest.importorskip("ml_insights")
    from loss_fun_c import pen_ll_fun_grad
    from splinecalib.calib_utils import _natural_cubic_spline_basis_expansion

    s, y, lam = *make_data(1000, 1), 0.01
    cal = SplineCalibrator(n_knots=12, reg_params=[lam]).fit(s, y)
    grid_t, grid_y, grid_w = cal._prior()
    t = np.concatenate([transform_scores(s, cal.logit_eps_, "probability"), grid_t])
    labels, weights = np.concatenate([y, grid_y]), np.concatenate([np.ones(s.shape[0]), grid_w])
    basis = _natural_cubic_spline_basis_expansion(t, cal.knots_)
    assert_allclose(natural_spline_basis(t, cal.knots_), basis, rtol=1e-12, atol=1e-9)
    lam_ref = lam * weights.sum() / t.shape[0]
    ref = minimize(
        pen_ll_fun_grad,
        np.zeros(basis.shape[1]),
        (basis, labels, lam_ref, weights),
        jac=True,
        method="BFGS",
        options={"gtol": 1e-10},
    )
    test = np.linspace(0.001, 0.999, 501)
    expected = 1.0 / (
        1.0
        + np.exp(
            -natural_spline_basis(transform_scores(test, cal.logit_eps_, "probability"), cal.knots_) @ ref.x
        )
    )
    assert_allclose(cal.predict(test), expected, atol=1e-6, rtol=0)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # ml-insights' exp overflows
def test_defaults_close_to_ml_insights_spline_calib() -> None:
    pytest.importorskip("ml_insights")
    from ml_insights import SplineCalib

    s, y = make_data(20000, 2)
    cal = SplineCalibrator().fit(s, y)
    ref = SplineCalib()
    ref.fit(s, y)
    test = np.linspace(0.001, 0.999, 999)
    # Different knots (quantiles, random draws there), held-out rows and final training rows.
    assert_allclose(cal.predict(test), ref.calibrate(test), atol=0.03, rtol=0)
    assert np.mean(np.abs(cal.predict(test) - ref.calibrate(test))) < 0.01
    assert cal.logit_eps_ == ref.logodds_eps


def test_weights_equal_repeated_rows_and_logit_scores() -> None:
    s, y = make_data(600, 3)
    rng = np.random.default_rng(4)
    w = rng.integers(0, 3, s.shape[0]).astype(np.float64)
    rows = np.repeat(np.arange(s.shape[0]), w.astype(np.int64))
    params = {"n_knots": 8, "reg_params": [0.01]}
    weighted = SplineCalibrator(**params).fit(s, y, sample_weight=w)
    repeated = SplineCalibrator(**params).fit(s[rows], y[rows])
    test = np.linspace(0.01, 0.99, 99)
    assert_allclose(weighted.predict(test), repeated.predict(test), rtol=1e-9, atol=0)
    logit = SplineCalibrator(**params, score_kind="logit").fit(np.log(s / (1 - s)), y)
    assert_allclose(
        logit.predict(np.log(test / (1 - test))),
        SplineCalibrator(**params).fit(s, y).predict(test),
        rtol=1e-9,
    )


def test_a_row_of_no_weight_near_zero_moves_no_logit_clip() -> None:
    """The logit clip ``logit_eps_`` read the scores of rows of weight 0 too: one at 1e-12 moved it
    from 3.7e-9 to 4.5e-13 and the predictions below it."""
    s, y = make_data(600, 3)
    fitted = SplineCalibrator(n_knots=8, reg_params=[0.01]).fit(s, y)
    extra = SplineCalibrator(n_knots=8, reg_params=[0.01]).fit(
        np.append(s, 1e-12), np.append(y, 0.0), sample_weight=np.append(np.ones(600), 0.0)
    )
    assert extra.logit_eps_ == fitted.logit_eps_
    test = np.logspace(-14, -1, 27)
    assert_array_equal(extra.predict(test), fitted.predict(test))


def test_penalty_is_chosen_on_held_out_rows() -> None:
    s, y = make_data(1500, 5)
    cal = SplineCalibrator(n_knots=8, reg_params=[1e-3, 1.0, 1e4]).fit(s, y)
    assert cal.held_out_losses_.shape == (3,)
    assert cal.reg_param_ == [1e-3, 1.0, 1e4][int(np.argmin(np.round(cal.held_out_losses_, 4)))]
    assert cal.held_out_losses_[2] > cal.held_out_losses_.min()  # a penalty of 1e4 is nearly constant


@pytest.mark.parametrize(
    ("score", "y", "kwargs", "match"),
    [
        (np.array([0.2, 0.4, 0.6]), np.ones(3), {}, "class"),
        (np.full(4, 0.3), np.array([0.0, 1, 0, 1]), {}, "distinct"),
        (np.array([0.2, np.nan, 0.4]), np.array([0.0, 1, 1]), {}, "NaN|finite"),
        (np.array([0.2, 0.4]), np.array([0.0, 1]), {"reg_params": [-1.0]}, "reg_params"),
        (np.array([0.2, 0.4]), np.array([0.0, 1]), {"n_folds": 1}, "'n_folds' parameter"),
    ],
)
def test_bad_input(score: np.ndarray, y: np.ndarray, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SplineCalibrator(**kwargs).fit(score, y)


def test_round_trip_and_hostile_state(tmp_path) -> None:  # type: ignore[no-untyped-def]
    s, y = make_data(500, 6)
    cal = SplineCalibrator(n_knots=6, reg_params=[0.1, 10.0]).fit(s, y)
    cal.save(tmp_path / "m.json")
    loaded = gpucal.load(tmp_path / "m.json")
    test = np.linspace(0, 1, 101)
    np.testing.assert_array_equal(loaded.predict(test), cal.predict(test))
    document = json.loads((tmp_path / "m.json").read_text())
    document["state"]["coef_"] = document["state"]["coef_"][:-1]
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(gpucal.ModelFileError, match="coef_"):
        gpucal.load(tmp_path / "bad.json")


@pytest.mark.parametrize("n_knots", [2, 3, 12])
def test_predict_is_the_basis_times_the_coefficients(n_knots: int) -> None:
    s, y = make_data(5000, 3)
    cal = SplineCalibrator(n_knots=n_knots).fit(s, y)
    # Every interval, both tails, the knots themselves and the clipped ends 0 and 1.
    t_knots = cal.knots_
    test = np.concatenate([np.linspace(0.0, 1.0, 2001), 1.0 / (1.0 + np.exp(-t_knots))])
    eta = natural_spline_basis(transform_scores(test, cal.logit_eps_, "probability"), cal.knots_) @ cal.coef_
    serial = cal.predict(test)
    assert_allclose(serial, 1.0 / (1.0 + np.exp(-eta)), rtol=1e-12, atol=1e-300)
    with parallel_twins_only():  # the large inputs' twin: the same numbers
        np.testing.assert_array_equal(cal.predict(test), serial)


def test_margins_past_1e100_are_refused_by_name() -> None:
    """The basis cubes (t - knot): margins of 1e148 overflowed it and the fit failed in numpy's SVD."""
    rng = np.random.default_rng(0)
    margins = rng.normal(size=2000) * 1e148
    y = (rng.random(2000) < 0.5).astype(np.float64)
    with pytest.raises(ValueError, match=r"X: margins reach .* the spline.s cubic basis overflows"):
        SplineCalibrator(score_kind="logit").fit(margins, y)
    with pytest.raises(ValueError, match=r"knots reach 1e\+150; the spline.s cubic basis overflows"):
        SplineCalibrator(score_kind="logit", knots=[-1e150, 0.0, 1e150]).fit(rng.normal(size=2000), y)
