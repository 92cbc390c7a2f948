"""Scaling calibrators (Platt, temperature, beta, Dirichlet, downsampling): references, properties, errors.

References: scikit-learn's sigmoid and temperature calibrators, betacal (with its solver converged
tightly, and as shipped), a hand-solved Dirichlet problem (scipy.optimize on the same objective).
"""

from __future__ import annotations

import functools
import itertools
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from scipy.optimize import minimize
from scipy.special import expit, logit, softmax
from sklearn.base import clone
from sklearn.calibration import CalibratedClassifierCV, _SigmoidCalibration, _TemperatureScaling
from sklearn.exceptions import ConvergenceWarning
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression

import gpucal
from gpucal.calibrators import logistic
from gpucal.calibrators._logistic_kernels import NUMBA_MAX_DESIGN
from gpucal.calibrators.beta import BetaCalibrator
from gpucal.calibrators.dirichlet import DirichletCalibrator, dirichlet_sums
from gpucal.calibrators.downsampling import DownsamplingCorrection, correct_downsampling
from gpucal.calibrators.platt import PlattCalibrator
from gpucal.calibrators.temperature import TemperatureCalibrator, softmax_temperature_sums

EPS = np.finfo(np.float64).eps
# Parameters of two converged maximum likelihood fits: scikit-learn's L-BFGS stops at a gradient of
# 1e-6 on the summed loss and its bounded Brent search at about 1.5e-8 relative; Newton goes further.
PARAM_RTOL = 1e-6


def binary_data(n: int = 4000, seed: int = 0, power: float = 1.6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.beta(1.2, 1.5, n)
    y = (rng.random(n) < p**power).astype(np.float64)
    return p, y


def multiclass_data(n: int = 3000, k: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = 2.0 * rng.normal(size=(n, k))
    truth = softmax(0.6 * z + rng.normal(scale=0.3, size=k), axis=1)
    y = (truth.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1)
    return z, softmax(z, axis=1), y


def assert_params_close(ours: Any, reference: Any, rtol: float = PARAM_RTOL) -> None:
    """Parameter vectors equal to ``rtol`` relative to the vector's size (a near-zero entry is not
    held to a relative tolerance of its own)."""
    ours, reference = np.atleast_1d(ours), np.atleast_1d(reference)
    assert np.max(np.abs(ours - reference)) <= rtol * np.max(np.abs(reference)), (ours, reference)


def weights(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 4, n).astype(np.float64)


# --------------------------------------------------------------------------------------------------
# Platt vs scikit-learn


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("score_kind", ["probability", "logit"])
def test_platt_equals_sklearn_sigmoid(weighted: bool, score_kind: str) -> None:
    p, y = binary_data()
    sw = weights(p.size) if weighted else None
    score = p if score_kind == "probability" else 3.0 * logit(p) + 1.0
    feature = logit(np.clip(p, EPS, 1 - EPS)) if score_kind == "probability" else score
    ours = PlattCalibrator(score_kind=score_kind).fit(score, y, sample_weight=sw)
    ref = _SigmoidCalibration().fit(feature, y, sample_weight=sw)
    assert_params_close([ours.a_, ours.b_], [-ref.a_, -ref.b_])  # sklearn: sigmoid(-(A f + B))
    assert_allclose(ours.predict(score), ref.predict(feature), rtol=0, atol=1e-7)


def test_platt_equals_calibrated_classifier_cv() -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(3000, 3))
    y = (rng.random(3000) < expit(X @ [1.5, -1.0, 0.5])).astype(int)
    model = LogisticRegression().fit(X[:1000], y[:1000])
    ccv = CalibratedClassifierCV(FrozenEstimator(model), method="sigmoid").fit(X[1000:2000], y[1000:2000])
    ours = PlattCalibrator(score_kind="logit").fit(model.decision_function(X[1000:2000]), y[1000:2000])
    assert_allclose(
        ours.predict(model.decision_function(X[2000:])), ccv.predict_proba(X[2000:])[:, 1], atol=1e-7
    )


def test_platt_without_smoothing_is_plain_logistic_regression() -> None:
    p, y = binary_data(seed=4)
    ours = PlattCalibrator(target_smoothing=False).fit(p, y)
    ref = LogisticRegression(C=np.inf, tol=1e-12, max_iter=1000).fit(logit(p)[:, None], y)
    assert_params_close([ours.a_, ours.b_], [ref.coef_[0, 0], ref.intercept_[0]])


def test_platt_smoothed_targets_match_platt_formula() -> None:
    y = np.array([1.0, 0.0, 1.0, 1.0])
    w = np.array([2.0, 1.0, 1.0, 0.5])
    t_neg, t_pos = _logistic_targets(y, w)
    assert_allclose([t_neg, t_pos], [1.0 / (1.0 + 2.0), (3.5 + 1.0) / (3.5 + 2.0)], rtol=1e-15)


def _logistic_targets(y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    from gpucal.calibrators.platt import platt_targets

    return platt_targets(y, w, smoothing=True)


def test_platt_clips_exact_zero_and_one() -> None:
    p, y = binary_data(500, seed=5)
    p[:3], p[3:6] = 0.0, 1.0
    cal = PlattCalibrator().fit(p, y)
    out = cal.predict(np.array([0.0, EPS, 1.0 - EPS, 1.0]))
    assert_array_equal(out[[0, 3]], out[[1, 2]])  # 0 and 1 are read as eps and 1 - eps
    assert np.all(np.isfinite(out))


def test_platt_on_separable_data() -> None:
    p = np.array([0.1, 0.2, 0.3, 0.7, 0.8, 0.9])
    y = np.array([0, 0, 0, 1, 1, 1])
    # Without smoothing the likelihood has no maximiser: Newton stops once the loss no longer moves
    # measurably, at a steep but finite map.
    steep = PlattCalibrator(target_smoothing=False).fit(p, y)
    assert np.isfinite(steep.a_)
    assert steep.a_ > 10
    assert_allclose(steep.predict(p), y, atol=1e-6)
    smooth = PlattCalibrator().fit(p, y)  # smoothing keeps the fit finite and moderate
    assert 0 < smooth.a_ < steep.a_


def test_newton_warns_when_it_runs_out_of_steps() -> None:
    p, y = binary_data(200)
    with pytest.warns(ConvergenceWarning, match="did not converge in 1 Newton steps"):
        logistic.newton_minimize(
            lambda t: logistic.logistic_sums(p, y, np.ones(200), t, mode=logistic.FEATURES_LOGIT),
            np.array([5.0, 3.0]),
            total_weight=200.0,
            max_iter=1,
        )


# --------------------------------------------------------------------------------------------------
# Temperature vs scikit-learn


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("score_kind", ["probability", "logit"])
def test_temperature_multiclass_equals_sklearn(weighted: bool, score_kind: str) -> None:
    z, prob, y = multiclass_data()
    X = prob if score_kind == "probability" else z
    sw = weights(y.size) if weighted else None
    ours = TemperatureCalibrator(score_kind=score_kind).fit(X, y, sample_weight=sw)
    ref = _TemperatureScaling().fit(X, y, sample_weight=sw)
    assert_params_close(ours.temperature_, 1.0 / ref.beta_)
    assert_allclose(ours.predict(X), ref.predict(X), atol=1e-7)


def test_temperature_binary_equals_sklearn() -> None:
    p, y = binary_data(seed=6)
    ours = TemperatureCalibrator().fit(p, y)
    ref = _TemperatureScaling().fit(np.c_[1 - p, p], y.astype(int))
    assert_params_close(ours.temperature_, 1.0 / ref.beta_)
    assert_allclose(ours.predict(p), ref.predict(np.c_[1 - p, p])[:, 1], atol=1e-7)
    # On a margin scikit-learn builds the logits (-s, s): its beta is 1 / (2 T).
    s = logit(p)
    ours_margin = TemperatureCalibrator(score_kind="logit").fit(s, y)
    ref_margin = _TemperatureScaling().fit(s, y.astype(int))
    assert_params_close(ours_margin.temperature_, 1.0 / (2.0 * ref_margin.beta_))


def test_temperature_calibrated_classifier_cv_multiclass() -> None:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(3000, 4))
    y = np.argmax(X[:, :3] * 2.0 + rng.normal(size=(3000, 3)), axis=1)
    model = LogisticRegression(C=100.0).fit(X[:1000], y[:1000])
    ccv = CalibratedClassifierCV(FrozenEstimator(model), method="temperature").fit(X[1000:2000], y[1000:2000])
    ours = TemperatureCalibrator(score_kind="logit").fit(model.decision_function(X[1000:2000]), y[1000:2000])
    assert_allclose(ours.predict(model.decision_function(X[2000:])), ccv.predict_proba(X[2000:]), atol=1e-7)


def test_temperature_stays_in_sklearn_bounds_for_useless_scores() -> None:
    z, _, y = multiclass_data(500, 3, seed=8)
    anti = -z  # scores that point away from the labels: the best positive T is the upper bound
    cal = TemperatureCalibrator(score_kind="logit").fit(anti, y)
    assert cal.temperature_ == pytest.approx(np.exp(10.0))
    assert np.all(np.isfinite(cal.predict(anti)))


# --------------------------------------------------------------------------------------------------
# Beta vs betacal


def _betacal(tight: bool) -> Any:
    """betacal's BetaCalibration class; ``tight`` converges its LogisticRegression to tol=1e-12."""
    betacal = pytest.importorskip("betacal")
    import betacal.beta_calibration as module

    return (
        betacal,
        module,
        functools.partial(LogisticRegression, tol=1e-12, max_iter=10_000) if tight else None,
    )


def _refit_data(kind: str, n: int = 5000, seed: int = 9) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.random(n)
    if kind == "plain":
        truth = p**2
    elif kind == "a<0":  # falls, then rises (U-shaped): the ln p slope a goes negative
        truth = 0.15 + 1.5 * (p - 0.35) ** 2
    else:  # "b<0": rises, then falls: the -ln(1 - p) slope b goes negative
        truth = 0.85 - 1.5 * (p - 0.65) ** 2
    return p, (rng.random(n) < truth).astype(np.float64)


@pytest.mark.parametrize("kind", ["plain", "a<0", "b<0"])
@pytest.mark.parametrize("parameters", ["abm", "ab", "am"])
def test_beta_equals_betacal(parameters: str, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    betacal, module, tight = _betacal(tight=True)
    p, y = _refit_data(kind)
    sw = weights(p.size, seed=2)
    ours = BetaCalibrator(parameters=parameters).fit(p, y, sample_weight=sw)
    if parameters == "abm" and kind != "plain":
        assert (ours.a_ if kind == "a<0" else ours.b_) == 0.0  # the refit rule fired
    monkeypatch.setattr(module, "LogisticRegression", tight)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # betacal's own warnings filter
        ref = betacal.BetaCalibration(parameters).fit(p, y, sample_weight=sw)
    grid = np.concatenate([np.linspace(0.0, 1.0, 101), p[:200]])
    assert_allclose(ours.predict(grid), ref.predict(grid), rtol=0, atol=1e-6)
    assert_params_close([ours.a_, ours.b_], ref.calibrator_.map_[:2], rtol=1e-6)


def test_beta_close_to_betacal_as_shipped() -> None:
    betacal, _, _ = _betacal(tight=False)
    p, y = _refit_data("plain")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = betacal.BetaCalibration("abm").fit(p, y)
    # betacal's L-BFGS stops at tol=1e-4: its outputs sit about 1e-4 from the optimum.
    assert_allclose(BetaCalibrator().fit(p, y).predict(p), ref.predict(p), atol=1e-3)


def test_beta_am_is_platt_without_smoothing() -> None:
    p, y = binary_data(seed=10)
    beta = BetaCalibrator(parameters="am").fit(p, y)
    platt = PlattCalibrator(target_smoothing=False).fit(p, y)
    assert_params_close([beta.a_, beta.c_], [platt.a_, platt.b_], rtol=1e-9)


# --------------------------------------------------------------------------------------------------
# Dirichlet: a hand-solved case and the binary case


def _odir_objective(theta: np.ndarray, log_p: np.ndarray, y: np.ndarray, lam: float, mu: float) -> float:
    """The penalised objective written out independently: last row of [W | b] fixed at 0."""
    k = log_p.shape[1]
    full = np.vstack([theta.reshape(k - 1, k + 1), np.zeros(k + 1)])
    W, b = full[:, :k], full[:, k]
    z = log_p @ W.T + b
    log_q = (
        z
        - np.log(np.exp(z - z.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True))
        - z.max(axis=1, keepdims=True)
    )
    off = W - np.diag(np.diag(W))
    return float(
        -log_q[np.arange(y.size), y].mean() + lam / (k * (k - 1)) * (off**2).sum() + mu / k * (b**2).sum()
    )


@pytest.mark.parametrize(("lam", "mu"), [(0.0, 0.0), (0.5, 0.2), (5.0, 1.0)])
def test_dirichlet_hand_solved(lam: float, mu: float) -> None:
    _, prob, y = multiclass_data(600, 3, seed=11)
    ours = DirichletCalibrator(reg_lambda=lam, reg_mu=mu).fit(prob, y)
    log_p = np.log(prob)
    start = np.array([[1.0, 0.0, -1.0, 0.0], [0.0, 1.0, -1.0, 0.0]]).ravel()
    ref = minimize(_odir_objective, start, args=(log_p, y, lam, mu), method="BFGS", options={"gtol": 1e-10})
    ref_full = np.vstack([ref.x.reshape(2, 4), np.zeros(4)])
    assert_params_close(np.c_[ours.coef_, ours.intercept_], ref_full)  # BFGS gets to ~1e-7
    assert (
        _odir_objective(np.c_[ours.coef_, ours.intercept_][:2].ravel(), log_p, y, lam, mu) <= ref.fun + 1e-12
    )


def test_dirichlet_binary_is_logistic_on_log_probabilities() -> None:
    p, y = _refit_data("plain", 3000)
    P = np.c_[1 - p, p]
    ours = DirichletCalibrator().fit(P, y.astype(int))
    fit = logistic.fit_logistic(np.log(np.clip(P, EPS, 1)), y, np.ones(p.size))
    # Class 1 is the reference row: P(1) = sigmoid(-(W[0] @ ln p + b[0])).
    assert_params_close(-np.r_[ours.coef_[0], ours.intercept_[0]], np.r_[fit.coef, fit.intercept], rtol=1e-9)
    # ... which is beta calibration (abm) without the refit rule: [ln p1, ln p0] spans [ln p, -ln(1-p)].
    beta = BetaCalibrator().fit(p, y)
    assert beta.a_ > 0
    assert beta.b_ > 0
    assert_allclose(ours.predict(P)[:, 1], beta.predict(p), atol=1e-9)


# --------------------------------------------------------------------------------------------------
# Downsampling


def test_correct_downsampling_formula() -> None:
    p = np.array([0.0, 0.1, 0.5, 0.9, 1.0])
    q = correct_downsampling(p, 0.25)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = p / (p + (1 - p) / 0.25)
    assert_allclose(q, expected, rtol=1e-15)
    assert_array_equal(correct_downsampling(p, 1.0), p)
    assert_allclose(correct_downsampling(logit(p[1:4]), 0.25, score_kind="logit"), q[1:4], rtol=1e-14)


def test_downsampling_correction_is_a_calibrator(tmp_path: Any) -> None:
    p = pd.Series([0.2, 0.6, 0.9], index=[5, 6, 7], name="score")
    cal = DownsamplingCorrection(rate=0.1).fit(p)
    out = cal.predict(p)
    assert isinstance(out, pd.Series)
    assert list(out.index) == [5, 6, 7]
    assert_allclose(out.to_numpy(), correct_downsampling(p, 0.1))
    cal.fit(p, [0, 1, 1], sample_weight=[1.0, 2.0, 1.0])  # y and weights are only validated
    cal.save(tmp_path / "d.json")
    assert_array_equal(gpucal.load(tmp_path / "d.json").predict(p), out)


@pytest.mark.parametrize("rate", [0.0, -0.1, 1.5, float("nan")])
def test_downsampling_rejects_bad_rate(rate: float) -> None:
    with pytest.raises(
        ValueError, match=r"The 'rate' parameter of DownsamplingCorrection must be a float in \(0, 1\]"
    ):
        DownsamplingCorrection(rate=rate).fit([0.5])
    with pytest.raises(ValueError, match="The 'rate' parameter of correct_downsampling"):
        correct_downsampling([0.5], rate)


# --------------------------------------------------------------------------------------------------
# Kernels: numba twin = array oracle; deterministic


@pytest.mark.parametrize(
    ("mode", "width"),
    [
        (logistic.FEATURES_LOGIT, 1),
        (logistic.FEATURES_BETA, 2),
        (logistic.FEATURES_BETA_AB, 2),
        (0, 3),
        (0, NUMBA_MAX_DESIGN),
    ],
)
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_logistic_sums_numba_equals_array(mode: int, width: int, fit_intercept: bool) -> None:
    """Designs of 3 to NUMBA_MAX_DESIGN columns take their own compiled loop, narrower models the
    fused one; both against the array code."""
    rng = np.random.default_rng(12)
    n = 70_000  # more than two chunks
    X = rng.random((n, width)) if mode == 0 else rng.random(n)
    X[:5] = 0.0 if mode != 0 else X[:5]
    y, w = rng.random(n), rng.random(n) * (rng.random(n) > 0.1)
    theta = rng.normal(size=width + int(fit_intercept))
    args = (X, y, w, theta)
    kw = {"mode": mode, "fit_intercept": fit_intercept, "targets": (0.1, 0.8)}
    fast = logistic.logistic_sums(*args, backend="numba", **kw)
    slow = logistic.logistic_sums(*args, backend="array", **kw)
    for a, b in zip(fast, slow, strict=True):
        assert_allclose(a, b, rtol=1e-10)
    assert_array_equal(fast[1], logistic.logistic_sums(*args, backend="numba", **kw)[1])  # deterministic
    coef = theta[:width]
    assert_allclose(
        logistic.predict_logistic(X, coef, 0.3, mode=mode, backend="numba"),
        logistic.predict_logistic(X, coef, 0.3, mode=mode, backend="array"),
        rtol=1e-13,
    )


@pytest.mark.parametrize(
    "mode", [0, logistic.FEATURES_LOGIT, logistic.FEATURES_BETA, logistic.FEATURES_BETA_AB]
)
@pytest.mark.parametrize("n_moments", [3, logistic.SERIES_MOMENTS])
def test_binned_moments_numba_equals_array(mode: int, n_moments: int) -> None:
    rng = np.random.default_rng(13)
    n = 70_000
    X = rng.normal(size=n) if mode == 0 else rng.random(n)
    y, w = rng.random(n), rng.random(n) * (rng.random(n) > 0.1)
    span = logistic.one_variable_span(float(X.min()), float(X.max()), mode)
    kw = {"mode": mode, "span": span, "n_bins": 64, "targets": (0.1, 0.8), "n_moments": n_moments}
    fast = logistic.binned_moments(X, y, w, backend="numba", **kw)
    slow = logistic.binned_moments(X, y, w, backend="array", **kw)
    assert_allclose(fast, slow, rtol=1e-10, atol=1e-12)
    assert_allclose(fast[0 : 64 * n_moments : n_moments].sum(), w.sum(), rtol=1e-12)  # every row in a bin


@pytest.mark.parametrize(
    ("mode", "cols", "fit_intercept"),
    [
        (logistic.FEATURES_LOGIT, None, True),
        (logistic.FEATURES_BETA, None, True),
        (logistic.FEATURES_BETA, [1], True),
        (logistic.FEATURES_BETA_AB, None, False),
    ],
)
def test_fit_logistic_numba_equals_array(mode: int, cols: Any, fit_intercept: bool) -> None:
    p, y = _refit_data("plain", 3000)
    w = weights(3000, seed=5)
    kw = {"mode": mode, "cols": cols, "fit_intercept": fit_intercept}
    fast = logistic.fit_logistic(p, y, w, backend="numba", **kw)
    slow = logistic.fit_logistic(p, y, w, backend="array", **kw)
    assert_params_close(np.r_[fast.coef, fast.intercept], np.r_[slow.coef, slow.intercept], rtol=1e-10)


def test_warm_start_does_not_change_the_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    n = logistic.SERIES_MIN_ROWS + 7
    p, y = binary_data(n, seed=20)
    warm = BetaCalibrator().fit(p, y)
    monkeypatch.setattr(logistic, "SERIES_MIN_ROWS", 10 * n)
    cold = BetaCalibrator().fit(p, y)
    assert_params_close([warm.a_, warm.b_, warm.c_], [cold.a_, cold.b_, cold.c_], rtol=1e-9)


@pytest.mark.parametrize(
    ("make", "params"),
    [
        (PlattCalibrator, ("a_", "b_")),
        (functools.partial(PlattCalibrator, target_smoothing=False), ("a_", "b_")),
        (TemperatureCalibrator, ("temperature_",)),
    ],
)
def test_series_fit_equals_the_fit_on_rows(
    make: Any, params: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one-pass fit on each bin's moments finds the optimum the Newton passes over the rows find,
    to rounding (a few ulps), and its predictions differ by about 1e-15."""
    n = logistic.SERIES_MIN_ROWS + 7
    p, y = binary_data(n, seed=21)
    p[:3] = [0.0, 1.0, 0.5]  # clipped ends widen the bins
    series = make().fit(p, y)
    monkeypatch.setattr(logistic, "SERIES_MAX_REACH", -1.0)  # every series fit is refused
    rows = make().fit(p, y)
    assert_allclose([getattr(series, k) for k in params], [getattr(rows, k) for k in params], rtol=1e-13)
    assert_allclose(series.predict(p[:1000]), rows.predict(p[:1000]), rtol=0, atol=1e-14)


def test_series_fit_refuses_steep_maps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the slope times half a bin is above SERIES_MAX_REACH the series are not trusted: the fit
    reads the rows (here raw margins over a wide range)."""
    n = logistic.SERIES_MIN_ROWS + 7
    rng = np.random.default_rng(22)
    margin = rng.normal(size=n) * 3.0
    margin[0] = 5000.0  # half a bin of 0.6: any slope above 1/60 is steep
    y = (rng.random(n) < expit(margin)).astype(np.float64)
    calls: list[int] = []
    series_sums = logistic._series_sums
    monkeypatch.setattr(logistic, "_series_sums", lambda *a: calls.append(1) or series_sums(*a))
    cal = PlattCalibrator(score_kind="logit").fit(margin, y)
    assert calls  # tried, then refused
    reference = _SigmoidCalibration().fit(margin, y)
    assert_params_close([cal.a_, cal.b_], [-reference.a_, -reference.b_])


def test_sigmoid_derivatives_are_the_derivatives() -> None:
    z = np.array([-40.0, -3.0, -0.2, 0.0, 0.7, 5.0, 30.0])
    step = 1e-5
    every = logistic.sigmoid_derivatives(z, 7)
    assert_allclose(every[0], expit(z), rtol=1e-15)
    for k in range(6):
        upper = logistic.sigmoid_derivatives(z + step, 7)[k]
        lower = logistic.sigmoid_derivatives(z - step, 7)[k]
        assert_allclose((upper - lower) / (2 * step), every[k + 1], rtol=1e-6, atol=1e-12)


def test_softmax_sums_numba_equals_array() -> None:
    z, _, y = multiclass_data(70_000, 5, seed=13)
    w = np.random.default_rng(1).random(y.size)
    fast = softmax_temperature_sums(z, y, w, 0.7, backend="numba")
    slow = softmax_temperature_sums(z, y, w, 0.7, backend="array")
    assert_allclose(fast, slow, rtol=1e-10)


def test_dirichlet_sums_gradient_is_the_derivative() -> None:
    _, prob, y = multiclass_data(200, 3, seed=14)
    log_p, w = np.log(prob), np.random.default_rng(2).random(200)
    theta = np.random.default_rng(3).normal(size=8)
    _loss, grad, hess = dirichlet_sums(log_p, y, w, theta)
    step = 1e-6
    for j in range(8):
        e = np.zeros(8)
        e[j] = step
        up, down = dirichlet_sums(log_p, y, w, theta + e), dirichlet_sums(log_p, y, w, theta - e)
        assert_allclose((up[0] - down[0]) / (2 * step), grad[j], rtol=1e-6)
        assert_allclose((up[1] - down[1]) / (2 * step), hess[j], rtol=1e-5, atol=1e-8)


# --------------------------------------------------------------------------------------------------
# Properties (hypothesis)

# Anchor rows with both labels at three scores keep every fit's likelihood bounded (no separation).
ANCHORS_P = np.array([0.02, 0.02, 0.5, 0.5, 0.98, 0.98])
ANCHORS_Y = np.array([0.0, 1.0, 0.0, 1.0, 0.0, 1.0])

rows = st.lists(
    st.tuples(
        st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 1.0, 0.5])),
        st.integers(0, 1),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=25,
)

BINARY_FACTORIES = {
    "platt": lambda: PlattCalibrator(),
    "platt_logit": lambda: PlattCalibrator(score_kind="logit"),
    "temperature": lambda: TemperatureCalibrator(),
    "beta_abm": lambda: BetaCalibrator(),
    "beta_ab": lambda: BetaCalibrator(parameters="ab"),
    "beta_am": lambda: BetaCalibrator(parameters="am"),
    "downsampling": lambda: DownsamplingCorrection(rate=0.3),
}
PROPERTY_SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _unpack(data: list[tuple[float, int, int]], name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p = np.r_[ANCHORS_P, [r[0] for r in data]]
    y = np.r_[ANCHORS_Y, [r[1] for r in data]].astype(np.float64)
    w = np.r_[np.ones(ANCHORS_P.size), [r[2] for r in data]].astype(np.float64)
    score = 4.0 * (p - 0.5) if name == "platt_logit" else p
    return score, y, w


@pytest.mark.parametrize("name", list(BINARY_FACTORIES))
@PROPERTY_SETTINGS
@given(data=rows)
def test_outputs_finite_bounded_monotone(name: str, data: list[tuple[float, int, int]]) -> None:
    score, y, w = _unpack(data, name)
    cal = BINARY_FACTORIES[name]().fit(score, y, sample_weight=w)
    grid = np.linspace(score.min(), score.max(), 64) if name == "platt_logit" else np.linspace(0, 1, 64)
    out = cal.predict(grid)
    assert np.all(np.isfinite(out))
    assert np.all((out >= 0) & (out <= 1))
    promised = {
        "platt": lambda c: c.a_ > 0,
        "platt_logit": lambda c: c.a_ > 0,
        "temperature": lambda c: True,
        "beta_abm": lambda c: c.a_ >= 0 and c.b_ >= 0,
        "beta_ab": lambda c: c.a_ >= 0 and c.b_ >= 0,
        "beta_am": lambda c: c.a_ >= 0,
        "downsampling": lambda c: True,
    }[name](cal)
    if promised:
        assert np.all(np.diff(out) >= -1e-15)


@pytest.mark.parametrize("name", list(BINARY_FACTORIES))
@PROPERTY_SETTINGS
@given(data=rows)
def test_integer_weights_equal_repeated_rows(name: str, data: list[tuple[float, int, int]]) -> None:
    score, y, w = _unpack(data, name)
    w_before = w.copy()
    weighted = BINARY_FACTORIES[name]().fit(score, y, sample_weight=w)
    assert_array_equal(w, w_before)  # sample_weight not modified
    repeat = w.astype(int)
    repeated = BINARY_FACTORIES[name]().fit(np.repeat(score, repeat), np.repeat(y, repeat))
    grid = np.unique(score)
    assert_allclose(weighted.predict(grid), repeated.predict(grid), rtol=0, atol=1e-8)


@pytest.mark.parametrize("name", list(BINARY_FACTORIES))
def test_ones_weights_equal_none_and_refit(name: str) -> None:
    p, y = binary_data(800, seed=15)
    score = 4.0 * (p - 0.5) if name == "platt_logit" else p
    a = BINARY_FACTORIES[name]().fit(score, y, sample_weight=np.ones(p.size))
    b = BINARY_FACTORIES[name]().fit(score, y)
    assert_array_equal(a.predict(score), b.predict(score))
    p2, y2 = binary_data(500, seed=16, power=0.7)
    score2 = 4.0 * (p2 - 0.5) if name == "platt_logit" else p2
    b.fit(score2, y2)  # refit replaces the state
    fresh = BINARY_FACTORIES[name]().fit(score2, y2)
    assert_array_equal(b.predict(score), fresh.predict(score))
    assert clone(b).get_params() == b.get_params()


def test_multiclass_weights_equal_repeated_rows() -> None:
    _, prob, y = multiclass_data(300, 3, seed=17)
    w = weights(300, seed=4)
    for make in (TemperatureCalibrator, lambda: DirichletCalibrator(reg_lambda=0.1, reg_mu=0.1)):
        weighted = make().fit(prob, y, sample_weight=w)
        repeated = make().fit(np.repeat(prob, w.astype(int), axis=0), np.repeat(y, w.astype(int)))
        assert_allclose(weighted.predict(prob), repeated.predict(prob), atol=1e-8)
        assert_array_equal(
            make().fit(prob, y, sample_weight=np.ones(300)).predict(prob), make().fit(prob, y).predict(prob)
        )


# --------------------------------------------------------------------------------------------------
# Saving


def _fitted_models() -> list[tuple[Any, np.ndarray]]:
    p, y = binary_data(600, seed=18)
    z, prob, yk = multiclass_data(600, 3, seed=18)
    return [
        (PlattCalibrator().fit(p, y), p),
        (PlattCalibrator(score_kind="logit", target_smoothing=False).fit(logit(p), y), logit(p)),
        (TemperatureCalibrator().fit(p, y), p),
        (TemperatureCalibrator(score_kind="logit").fit(z, yk), z),
        (BetaCalibrator().fit(p, y), p),
        (BetaCalibrator(parameters="ab").fit(p, y), p),
        (BetaCalibrator(parameters="am").fit(p, y), p),
        (DirichletCalibrator(reg_lambda=0.3, reg_mu=0.1).fit(prob, yk), prob),
        (DownsamplingCorrection(rate=0.05).fit(p, y), p),
    ]


def test_save_load_round_trip_bit_for_bit(tmp_path: Any) -> None:
    for i, (model, X) in enumerate(_fitted_models()):
        path = tmp_path / f"m{i}.json"
        model.save(path)
        loaded = gpucal.load(path)
        assert type(loaded) is type(model)
        assert loaded.get_params() == model.get_params()
        assert_array_equal(loaded.predict(X), model.predict(X))


def test_load_rejects_inconsistent_state(tmp_path: Any) -> None:
    import json

    model = DirichletCalibrator().fit(*multiclass_data(200, 3, seed=19)[1:])
    model.save(tmp_path / "d.json")
    doc = json.loads((tmp_path / "d.json").read_text())
    doc["state"]["n_classes_"] = 4
    (tmp_path / "d.json").write_text(json.dumps(doc))
    with pytest.raises(gpucal.ModelFileError, match="inconsistent fitted state"):
        gpucal.load(tmp_path / "d.json")
    temp = TemperatureCalibrator().fit(*binary_data(200))
    temp.save(tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text())
    for temperature in (-1.0, 5e-324):  # a subnormal one made every logit infinite: NaN predictions
        doc["state"]["temperature_"] = temperature
        (tmp_path / "t.json").write_text(json.dumps(doc))
        with pytest.raises(gpucal.ModelFileError, match=r"temperature_ must lie in \[1e-100, 1e\+100\]"):
            gpucal.load(tmp_path / "t.json")
    model.save(tmp_path / "d.json")
    doc = json.loads((tmp_path / "d.json").read_text())
    doc["state"]["coef_"][0][0] = -1e308  # loaded, it predicted NaN on half the rows (inf - inf)
    (tmp_path / "d.json").write_text(json.dumps(doc))
    with pytest.raises(gpucal.ModelFileError, match="coef_: an entry is larger than 1e"):
        gpucal.load(tmp_path / "d.json")


# --------------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("make", [PlattCalibrator, TemperatureCalibrator, BetaCalibrator])
def test_bad_binary_inputs(make: Any) -> None:
    p, y = binary_data(50)
    bad = p.copy()
    bad[7] = np.nan
    with pytest.raises(ValueError, match="row 7"):
        make().fit(bad, y)
    bad[7] = 1.5
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
        make().fit(bad, y)
    y2 = y.copy()
    y2[3] = 2
    with pytest.raises(ValueError, match=r"y: labels must be in \[0, 1\]"):
        make().fit(p, y2)
    with pytest.raises(ValueError, match="y: no positive labels"):
        make().fit(p, np.zeros(50))
    with pytest.raises(ValueError, match="y: no negative labels"):
        make().fit(p, np.ones(50), sample_weight=np.ones(50))
    with pytest.raises(ValueError, match="y: no negative labels"):  # the only negatives weigh nothing
        make().fit(p, np.r_[0.0, np.ones(49)], sample_weight=np.r_[0.0, np.ones(49)])
    with pytest.raises(ValueError, match="sample_weight: weights must be >= 0"):
        make().fit(p, y, sample_weight=-np.ones(50))
    with pytest.raises(ValueError, match="different numbers of rows"):
        make().fit(p, y[:-1])
    if make is not BetaCalibrator:
        with pytest.raises(ValueError, match=f"The 'score_kind' parameter of {make.__name__}"):
            make(score_kind="margin").fit(p, y)
    if make is not TemperatureCalibrator:  # a temperature is identified on one score; slopes are not
        one_score = r"X: every score is 0\.3; .* needs at least two distinct scores"
        with pytest.raises(ValueError, match=one_score):
            make().fit(np.full(50, 0.3), y)


def test_bad_parameters() -> None:
    p, y = binary_data(50)
    with pytest.raises(
        ValueError,
        match=r"The 'target_smoothing' parameter of PlattCalibrator must be one of \(True, False\)",
    ):
        PlattCalibrator(target_smoothing="yes").fit(p, y)
    with pytest.raises(ValueError, match="The 'parameters' parameter of BetaCalibrator"):
        BetaCalibrator(parameters="abc").fit(p, y)
    with pytest.raises(ValueError, match="The 'reg_lambda' parameter of DirichletCalibrator"):
        DirichletCalibrator(reg_lambda=-1.0).fit(np.full((4, 2), 0.5), [0, 1, 0, 1])


@pytest.mark.parametrize("make", [TemperatureCalibrator, DirichletCalibrator])
def test_bad_multiclass_inputs(make: Any) -> None:
    _, prob, y = multiclass_data(100, 3)
    if make is DirichletCalibrator:  # for TemperatureCalibrator an (n, 1) array is a binary score
        with pytest.raises(ValueError, match=r"one column per class \(at least 2\), got shape \(100, 1\)"):
            make().fit(prob[:, :1], y)
    with pytest.raises(ValueError, match="rows of a probability matrix must sum to 1"):
        make().fit(prob * 0.9, y)
    with pytest.raises(ValueError, match=r"y: class labels must be integers in \[0, 3\)"):
        make().fit(prob, np.r_[y[:-1], 3])
    with pytest.raises(ValueError, match=r"y: class labels must be integers in \[0, 3\)"):
        make().fit(prob, np.r_[y[:-1], 0.5])
    with pytest.raises(ValueError, match="expected 100 class labels"):
        make().fit(prob, y[:-1])
    with pytest.raises(ValueError, match="y: only one class"):
        make().fit(prob, np.zeros(100, dtype=int))
    if make is DirichletCalibrator:  # its slopes are not identified: it fitted a steep, non-monotone map
        with pytest.raises(ValueError, match="X: every row holds the same probabilities"):
            make().fit(np.tile(prob[:1], (100, 1)), y)
    bad = prob.copy()
    bad[4, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        make().fit(bad, y)
    cal = make().fit(prob, y)
    with pytest.raises(ValueError, match="X: has 4 columns, the calibrator was fitted on 3 classes"):
        cal.predict(np.full((2, 4), 0.25))


def test_temperature_predict_needs_the_fitted_dimension() -> None:
    p, y = binary_data(100)
    with pytest.raises(ValueError, match="fitted on 1-D binary scores; got a class-score matrix"):
        TemperatureCalibrator().fit(p, y).predict(np.c_[1 - p, p])
    _, prob, yk = multiclass_data(100, 3)
    with pytest.raises(ValueError, match=r"fitted on an \(n, 3\) matrix; got binary scores"):
        TemperatureCalibrator().fit(prob, yk).predict(p)


def test_predict_before_fit() -> None:
    from sklearn.exceptions import NotFittedError

    for cal in (PlattCalibrator(), TemperatureCalibrator(), BetaCalibrator(), DirichletCalibrator()):
        with pytest.raises(NotFittedError):
            cal.predict(np.full((2, 2), 0.5) if isinstance(cal, DirichletCalibrator) else [0.5])


def test_dataframe_input_uses_score_col() -> None:
    p, y = binary_data(200)
    df = pd.DataFrame({"s": p, "other": 1.0})
    cal = PlattCalibrator(score_col="s").fit(df, y)
    out = cal.predict(df)
    assert isinstance(out, pd.Series)
    assert out.name == "calibrated"  # never an input column's name (issue 18)
    assert_array_equal(out.to_numpy(), PlattCalibrator().fit(p, y).predict(p))


def test_platt_rejects_constant_scores() -> None:
    # Regression (review): a singular Hessian let the pseudo-inverse pick a meaningless, even decreasing,
    # slope; a constant score identifies no slope, so Platt (and scaling-binning) refuse it by name.
    y = np.array([0.0, 1.0, 1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match=r"every score is 0\.7; Platt scaling needs at least two distinct"):
        PlattCalibrator().fit(np.full(5, 0.7), y)


@pytest.mark.parametrize("family", ["pandas", "polars", "pyarrow"])
def test_temperature_takes_a_probability_matrix_dataframe(family: str) -> None:
    """Issue 18: TemperatureCalibrator refused a probability-matrix DataFrame that Dirichlet takes."""
    import polars as pl
    import pyarrow as pa

    _, prob, y = multiclass_data(300, 3)
    frame = pd.DataFrame(prob, columns=["a", "b", "c"])
    X = {"pandas": frame, "polars": pl.from_pandas(frame), "pyarrow": pa.Table.from_pandas(frame)}[family]
    expected = TemperatureCalibrator().fit(prob, y)
    cal = TemperatureCalibrator().fit(X, y)
    assert cal.multiclass_
    assert cal.n_classes_ == 3
    assert cal.temperature_ == expected.temperature_
    assert_array_equal(cal.predict(X), expected.predict(prob))
    # A dataframe holding score_col stays binary input.
    p, yb = binary_data(300)
    binary = TemperatureCalibrator().fit(pd.DataFrame({"score": p, "other": 1.0}), yb)
    assert not binary.multiclass_


def test_temperature_takes_an_n_by_1_score() -> None:
    """Issue 18: an ``(n, 1)`` score array, as scikit-learn's calibrators take it, is binary input."""
    p, y = binary_data(300)
    cal = TemperatureCalibrator().fit(p[:, None], y)
    assert not cal.multiclass_
    assert_array_equal(cal.predict(p[:, None]), TemperatureCalibrator().fit(p, y).predict(p))


@pytest.mark.parametrize("weighted", [False, True])
def test_score_rows_fit_is_the_same_over_blocks_and_on_arrays(weighted: bool) -> None:
    """ScoreRows on one block is fit_logistic bit for bit; over uneven blocks (the warm start's
    subsample taken by global row index) it differs only in the order of the additions."""
    from gpucal.calibrators.logistic import FEATURES_BETA, fit_logistic
    from gpucal.calibrators.score_rows import ScoreRows
    from gpucal.rows import LocalRows, RowBlock

    rng = np.random.default_rng(3)
    n = logistic.WARM_START_MIN_ROWS + 1000
    p = np.clip(rng.beta(2.0, 3.0, n), 1e-6, 1 - 1e-6)
    y = (rng.random(n) < p**1.2).astype(np.float64)
    w = rng.random(n) if weighted else None
    expected = fit_logistic(p, y, np.ones(n) if w is None else w, mode=FEATURES_BETA)

    def rows_of(cuts: list[int]) -> ScoreRows:
        bounds = [0, *cuts, n]
        blocks = tuple(
            RowBlock({"X": p[a:b], "y": y[a:b], "sample_weight": None if w is None else w[a:b]})
            for a, b in itertools.pairwise(bounds)
        )
        return ScoreRows.of(LocalRows(blocks))

    one = rows_of([]).fit(mode=FEATURES_BETA)
    assert_array_equal(one.coef, expected.coef)
    assert one.intercept == expected.intercept
    array_fit = ScoreRows.of_arrays(p, y, np.ones(n) if w is None else w).fit(mode=FEATURES_BETA)
    assert_array_equal(array_fit.coef, one.coef)
    split = rows_of([0, 1, 70_001, 200_000]).fit(mode=FEATURES_BETA)  # an empty and a one-row block
    assert_allclose(split.coef, one.coef, rtol=1e-10)
    assert_allclose(split.intercept, one.intercept, rtol=1e-10)


@pytest.mark.parametrize("score_col", ["scroe", None])
def test_temperature_missing_or_none_score_col_names_the_column(score_col: Any) -> None:
    """A misspelt score column read the frame as a class-score matrix and said "rows ... must sum to 1"."""
    p, y = binary_data(200)
    df = pd.DataFrame({"score": p, "other": p})
    if score_col is None:
        with pytest.raises(ValueError, match="The 'score_col' parameter of TemperatureCalibrator"):
            TemperatureCalibrator(score_col=None).fit(df, y)
        return
    match = r"X: no score column 'scroe' \(set score_col=; columns: \['score', 'other'\]\), so X was read as"
    with pytest.raises(ValueError, match=match + ".*must sum to 1"):
        TemperatureCalibrator(score_col=score_col).fit(df, y)
    with pytest.raises(TypeError, match=match + ".*expected numbers, got dtype object"):
        TemperatureCalibrator(score_col=score_col).fit(df.assign(other="a"), y)
    fitted = TemperatureCalibrator().fit(df, y)
    with pytest.raises(ValueError, match=r"got a class-score matrix \(X has no score column 'score'"):
        fitted.predict(df.rename(columns={"score": "s"}))


@pytest.mark.parametrize("scan_kind", [None, "probability", "logit"])
@pytest.mark.parametrize("compiled", [True, False])
def test_score_summary_one_pass_equals_numpy(scan_kind: str | None, compiled: bool) -> None:
    from gpucal.calibrators._logistic_kernels import NUMBA_MIN_ROWS
    from gpucal.calibrators.logistic import ScoreBlock
    from gpucal.calibrators.score_rows import score_summary

    rng = np.random.default_rng(14)
    n = NUMBA_MIN_ROWS + 5 if compiled else 1000
    p, y, w = rng.random(n), (rng.random(n) < 0.3) * 1.0, rng.random(n) * (rng.random(n) > 0.2)
    y[:7] = 0.5
    # Rows the scans refuse: a score above 1, an infinite score, labels outside [0, 1] or NaN.
    p[10], p[11], y[12], y[13] = 1.5, -np.inf, 2.0, np.nan
    summary = score_summary(ScoreBlock(p, y, w), scan_kind)
    weighted = w > 0
    score_ok = ((p >= 0) & (p <= 1)) if scan_kind == "probability" else np.isfinite(p)
    refused = np.sum(~(score_ok & (y >= 0) & (y <= 1))) if scan_kind else 0
    assert refused == (4 if scan_kind == "probability" else 3 if scan_kind else 0)
    label_sum = w[~np.isnan(y)] @ y[~np.isnan(y)]
    expected = [
        n,
        w.sum(),
        label_sum,
        np.sum(weighted & (y > 0)),
        np.sum(weighted & (y < 1)),
        p.min(),
        p.max(),
        refused,
    ]
    assert np.isnan(summary[2])  # the NaN label's weighted sum
    summary[2] = label_sum
    assert_allclose(summary, expected, rtol=1e-12)
