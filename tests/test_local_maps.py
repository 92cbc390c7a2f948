"""The per-part maps of the partition engine: each kind against an independent fit, parts at once."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.optimize import minimize
from sklearn.linear_model import LogisticRegression

from gpucal.trees.local_maps import (
    LOCAL_MAP_KINDS,
    apply_local_maps,
    fit_local_maps,
    identity_params,
    local_map_sums,
    n_map_params,
)

NEWTON_KINDS = ["constant", "shift", "temperature", "platt", "beta"]


def make_parts(rng, n=6000, n_parts=3):
    part = rng.integers(0, n_parts, n).astype(np.int32)
    logit = rng.normal(0.0, 1.5, n)
    true = 1.5 * logit * (1 + 0.3 * part) - 0.5 + 0.4 * part
    y = (rng.random(n) < 1 / (1 + np.exp(-true))).astype(float)
    score = 1 / (1 + np.exp(-logit))
    return score, y, part


def direct_log_loss_fit(score, y, w, kind):
    """The same model fitted by L-BFGS-B on the exact weighted log-loss (scipy): the independent reference."""
    p = np.clip(score, 1e-15, 1 - 1e-15)
    lp, lq = np.log(p), np.log1p(-p)
    designs = {
        "constant": (np.ones((len(p), 1)), 0.0),
        "shift": (np.ones((len(p), 1)), lp - lq),
        "temperature": ((lp - lq)[:, None], 0.0),
        "platt": (np.c_[lp - lq, np.ones(len(p))], 0.0),
        "beta": (np.c_[lp, -lq, np.ones(len(p))], 0.0),
    }
    x, offset = designs[kind]

    def loss(theta):
        eta = offset + x @ theta
        return float(np.sum(w * (np.logaddexp(0, eta) - y * eta)))

    def grad(theta):
        q = 1 / (1 + np.exp(-(offset + x @ theta)))
        return x.T @ (w * (q - y))

    bounds = [(0, None), (0, None), (None, None)] if kind == "beta" else None
    start = identity_params(kind)
    res = minimize(
        loss, start, jac=grad, method="L-BFGS-B", bounds=bounds, options={"gtol": 1e-12, "ftol": 1e-15}
    )
    return res.x


@pytest.mark.parametrize("kind", NEWTON_KINDS)
def test_each_part_equals_its_own_log_loss_fit(kind) -> None:
    rng = np.random.default_rng(0)
    score, y, part = make_parts(rng)
    w = rng.uniform(0.5, 2.0, score.shape[0])
    params = fit_local_maps(score, y, w, part, 3, kind)
    assert params.shape == (3, n_map_params(kind))
    for m in range(3):
        rows = part == m
        expected = direct_log_loss_fit(score[rows], y[rows], w[rows], kind)
        assert_allclose(params[m], expected, rtol=1e-5, atol=1e-6)


def test_platt_parts_equal_sklearn_logistic_regression() -> None:
    rng = np.random.default_rng(1)
    score, y, part = make_parts(rng)
    params = fit_local_maps(score, y, None, part, 3, "platt")
    logit = np.log(score) - np.log1p(-score)
    for m in range(3):
        rows = part == m
        lr = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12).fit(logit[rows, None], y[rows])
        assert_allclose(params[m], [lr.coef_[0, 0], lr.intercept_[0]], rtol=1e-6, atol=1e-6)


def test_beta_bound_is_kept_where_the_unconstrained_fit_leaves_it() -> None:
    rng = np.random.default_rng(2)
    n = 20_000
    score = rng.uniform(0.02, 0.98, n)
    # truth decreasing in ln(1 - p) direction only: the unconstrained b is negative
    eta = 2.0 * np.log(score) + 1.0 * np.log1p(-score) + 0.5
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    params = fit_local_maps(score, y, None, np.zeros(n, dtype=np.int32), 1, "beta")
    assert params[0, 1] == 0.0
    assert_allclose(params[0], direct_log_loss_fit(score, y, np.ones(n), "beta"), atol=1e-5)


def test_constant_is_the_part_rate_and_apply_reproduces_each_map() -> None:
    rng = np.random.default_rng(3)
    score, y, part = make_parts(rng)
    params = fit_local_maps(score, y, None, part, 3, "constant")
    for m in range(3):
        assert_allclose(1 / (1 + np.exp(-params[m, 0])), y[part == m].mean(), rtol=1e-9)
    out = apply_local_maps(score, part, params, "constant")
    assert_allclose(out, np.array([y[part == m].mean() for m in range(3)])[part])
    platt = fit_local_maps(score, y, None, part, 3, "platt")
    logit = np.log(score) - np.log1p(-score)
    expected = 1 / (1 + np.exp(-(platt[part, 0] * logit + platt[part, 1])))
    assert_allclose(apply_local_maps(score, part, platt, "platt"), expected, rtol=1e-12)


def test_scale_is_the_closed_form_ratio() -> None:
    rng = np.random.default_rng(4)
    score, y, part = make_parts(rng)
    w = rng.uniform(0.5, 2.0, score.shape[0])
    params = fit_local_maps(score, y, w, part, 3, "scale", prior=np.ones((3, 1)), penalty=5.0)
    for m in range(3):
        rows = part == m
        assert_allclose(
            params[m, 0], (np.sum(w[rows] * y[rows]) + 5.0) / (np.sum(w[rows] * score[rows]) + 5.0)
        )
    assert_allclose(apply_local_maps(score, part, params, "scale"), np.minimum(params[part, 0] * score, 1.0))


def test_light_and_empty_parts_get_the_fallback_or_their_prior() -> None:
    rng = np.random.default_rng(5)
    score, y, part = make_parts(rng)
    part[part == 2] = 1  # part 2 empty
    part[:10] = 3  # part 3: ten rows
    prior = np.tile([1.0, 0.0], (4, 1))
    prior[2] = [0.7, 0.1]
    params = fit_local_maps(score, y, None, part, 4, "platt", prior=prior, min_part_weight=50)
    assert_allclose(params[2], [0.7, 0.1])
    assert_allclose(params[3], [1.0, 0.0])
    fallback = fit_local_maps(
        score, y, None, part, 4, "platt", min_part_weight=50, fallback=np.array([2.0, -1.0])
    )
    assert_allclose(fallback[2:], [[2.0, -1.0], [2.0, -1.0]])
    assert_allclose(fallback[:2], params[:2])


def test_penalty_shrinks_toward_the_prior() -> None:
    rng = np.random.default_rng(6)
    score, y, part = make_parts(rng)
    prior = np.tile([1.0, 0.0], (3, 1))
    free = fit_local_maps(score, y, None, part, 3, "platt", prior=prior)
    tied = fit_local_maps(score, y, None, part, 3, "platt", prior=prior, penalty=1e9)
    assert np.abs(free - prior).max() > 0.2
    assert np.abs(tied - prior).max() < 1e-5


def test_separable_part_stays_finite() -> None:
    score = np.array([0.2, 0.3, 0.6, 0.7])
    y = np.array([0.0, 0.0, 1.0, 1.0])
    params = fit_local_maps(score, y, None, np.zeros(4, dtype=np.int32), 1, "platt")
    assert np.isfinite(params).all()
    assert np.isfinite(apply_local_maps(score, np.zeros(4, dtype=np.int32), params, "platt")).all()


@pytest.mark.parametrize("kind", NEWTON_KINDS)
@pytest.mark.parametrize("weighted", [False, True])
def test_fused_sums_equal_the_group_sum_path(kind, weighted) -> None:
    rng = np.random.default_rng(7)
    n = 200_000
    score = 1 / (1 + np.exp(-rng.normal(-2.0, 1.0, n)))
    y = (rng.random(n) < 0.1).astype(float)
    w = rng.random(n) if weighted else None
    part = rng.integers(-1, 7, n).astype(np.int32)
    theta = np.tile(identity_params(kind), (7, 1)) + rng.normal(0, 0.2, (7, n_map_params(kind)))
    fused = local_map_sums(score, y, w, part, theta, kind)
    generic = local_map_sums(score, y, w, part, theta, kind, backend="oracle")
    for a, b in zip(fused, generic, strict=True):
        assert_allclose(a, b, rtol=1e-10, atol=1e-8)


def test_unknown_kind_and_wrong_prior_shape_are_named() -> None:
    score, y = np.array([0.2, 0.8]), np.array([0.0, 1.0])
    part = np.zeros(2, dtype=np.int32)
    with pytest.raises(ValueError, match="kind: expected one of"):
        fit_local_maps(score, y, None, part, 1, "isotonic")
    with pytest.raises(ValueError, match="prior: expected shape"):
        fit_local_maps(score, y, None, part, 1, "platt", prior=np.ones((2, 2)))
    assert set(LOCAL_MAP_KINDS) == {"constant", "scale", "shift", "temperature", "platt", "beta"}


def test_apply_saturates_without_overflow() -> None:
    score = np.array([1e-12, 0.5, 1 - 1e-12])
    params = np.array([[40.0, -50.0]])
    with np.errstate(over="raise"):
        out = apply_local_maps(score, np.zeros(3, dtype=np.int32), params, "platt")
    assert np.isfinite(out).all()
    assert out[0] == pytest.approx(0.0, abs=1e-300)


def test_two_close_scores_reach_the_likelihood_maximum() -> None:
    """A part with two close scores has a far, flat optimum: shortened Newton steps still reach it."""
    score = np.array([0.7] * 6 + [0.72] * 34)
    y = np.ones(40)
    y[[0, 6]] = 0.0
    w = np.ones(40)
    w[0], w[6] = 2.4, 0.6
    params = fit_local_maps(score, y, w, np.zeros(40, dtype=np.int32), 1, "platt")
    logit = np.log(score) - np.log1p(-score)
    lr = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12).fit(
        logit[:, None], y, sample_weight=w
    )
    assert_allclose(params[0], [lr.coef_[0, 0], lr.intercept_[0]], rtol=1e-5)
