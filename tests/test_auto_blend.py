"""The blend's Newton fit on the simplex (``gpucal.auto.blend``) against numpy, scipy's SLSQP and brute
force; the AUC guard's reading of the raw score."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.optimize import minimize, minimize_scalar
from scipy.special import expit

from gpucal.auto.blend import fit_blend, mean_log_loss, newton_sums, simplex_qp
from gpucal.auto.guard import order_guard


def _members(seed: int, n_rows: int, scales: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Member logits of one signal with noise of each scale (a scale of 0: a constant member), labels."""
    rng = np.random.default_rng(seed)
    truth = rng.normal(scale=1.5, size=n_rows) - 1.0
    y = (rng.uniform(size=n_rows) < expit(truth)).astype(float)
    members = np.column_stack(
        [truth * (s > 0) + rng.normal(scale=max(s, 1e-12), size=n_rows) for s in scales]
    )
    return members, y


def _slsqp(member_logits: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The same objective by scipy's SLSQP at a tight tolerance: weights, intercept, loss."""
    k = member_logits.shape[1]

    def objective(theta: np.ndarray) -> float:
        return mean_log_loss(member_logits @ theta[:k] + theta[k], y, w)

    result = minimize(
        objective,
        np.r_[np.full(k, 1.0 / k), 0.0],
        method="SLSQP",
        bounds=[(0.0, 1.0)] * k + [(None, None)],
        constraints=[{"type": "eq", "fun": lambda t: t[:k].sum() - 1.0}],
        options={"maxiter": 500, "ftol": 1e-15},
    )
    return result.x[:k], float(result.x[k]), float(result.fun)


def test_newton_sums_match_numpy() -> None:
    """Loss, gradient and Hessian of one compiled pass against numpy (weighted rows, logits far out in both
    tails, a column-sliced input)."""
    rng = np.random.default_rng(3)
    n_rows = 3_000
    wide = rng.normal(scale=4.0, size=(n_rows, 5))
    wide[:5, :] = [[800.0], [-800.0], [40.0], [-40.0], [0.0]]
    member_logits = wide[:, 1:4]
    y = (rng.uniform(size=n_rows) < 0.3).astype(float)
    w = rng.uniform(0.0, 2.0, size=n_rows)
    x = np.column_stack([member_logits, np.ones(n_rows)])
    for theta in (np.array([0.2, 0.5, 0.3, -0.7]), np.array([1.0, 0.0, 0.0, 0.0])):
        z = x @ theta
        p = expit(z)
        loss, gradient, hessian = newton_sums(member_logits, y, w, theta)
        assert loss == pytest.approx(mean_log_loss(z, y, w), rel=1e-12)
        assert_allclose(gradient, x.T @ (w * (p - y)) / w.sum(), rtol=1e-10, atol=1e-15)
        assert_allclose(hessian, (x * (w * p * (1 - p))[:, None]).T @ x / w.sum(), rtol=1e-10, atol=1e-15)
        assert_allclose(hessian, hessian.T, rtol=0, atol=0)


@pytest.mark.parametrize("seed", range(6))
def test_simplex_qp_meets_the_kkt_conditions(seed: int) -> None:
    """The active-set solution is feasible to rounding and stationary, with non-negative multipliers on
    the weights at 0 (complementary slackness), and no worse than SLSQP's on the same quadratic."""
    rng = np.random.default_rng(seed)
    k = 2 + seed % 4
    root = rng.normal(size=(k + 1, k + 1))
    hessian = root @ root.T + 0.1 * np.eye(k + 1)
    linear = rng.normal(scale=3.0, size=k + 1)
    start = np.zeros(k + 1)
    start[seed % k] = 1.0
    x = simplex_qp(hessian, linear, start)
    weights = x[:k]
    assert np.all(weights >= 0.0)
    assert weights.sum() == pytest.approx(1.0, abs=1e-12)
    gradient = hessian @ x + linear
    assert gradient[k] == pytest.approx(0.0, abs=1e-10)  # the intercept is free
    free = weights > 0
    nu = -gradient[:k][free].mean()
    assert_allclose(gradient[:k][free] + nu, 0.0, atol=1e-10)
    assert np.all(gradient[:k][~free] + nu >= -1e-10)

    def quadratic(v: np.ndarray) -> float:
        return float(0.5 * v @ hessian @ v + linear @ v)

    reference = minimize(
        quadratic,
        np.r_[np.full(k, 1.0 / k), 0.0],
        jac=lambda v: hessian @ v + linear,
        method="SLSQP",
        bounds=[(0.0, None)] * k + [(None, None)],
        constraints=[{"type": "eq", "fun": lambda v: v[:k].sum() - 1.0}],
        options={"ftol": 1e-15, "maxiter": 500},
    )
    assert quadratic(x) <= reference.fun + 1e-12


@pytest.mark.parametrize(
    ("seed", "scales"),
    [(0, (1.0, 1.2, 3.0)), (1, (0.8, 0.0, 2.0, 5.0)), (2, (1.0, 1.0, 1.1, 4.0, 6.0, 0.5)), (3, (0.3, 3.0))],
)
def test_fit_blend_matches_slsqp(seed: int, scales: tuple[float, ...]) -> None:
    """The Newton fit reaches SLSQP's optimum (weights to 1e-4, the loss to 1e-10, never above it), with
    the simplex's constraints exact, on weighted rows, members with zero weight among them."""
    member_logits, y = _members(seed, 6_000, scales)
    w = np.random.default_rng(seed + 100).uniform(0.2, 2.0, size=y.shape[0])
    fit = fit_blend(member_logits, y, w)
    weights, intercept, loss = _slsqp(member_logits, y, w)
    assert np.all(fit.weights >= 0.0)
    assert fit.weights.sum() == pytest.approx(1.0, abs=1e-12)
    assert fit.loss == pytest.approx(
        mean_log_loss(member_logits @ fit.weights + fit.intercept, y, w), rel=1e-12
    )
    assert fit.loss <= loss + 1e-12
    assert fit.loss == pytest.approx(loss, abs=1e-10)
    assert_allclose(fit.weights, weights, atol=1e-4)
    assert fit.intercept == pytest.approx(intercept, abs=1e-3)


def test_fit_blend_two_members_against_brute_force() -> None:
    """Two members: the loss over a grid of the first weight, the intercept minimised at each, is nowhere
    below the fit's; the fit's weight is the grid's best to the grid's step."""
    member_logits, y = _members(7, 4_000, (1.0, 1.5))
    w = np.ones(y.shape[0])
    fit = fit_blend(member_logits, y, w)
    grid = np.linspace(0.0, 1.0, 401)
    losses = []
    for a in grid:
        z = member_logits @ np.array([a, 1.0 - a])
        losses.append(minimize_scalar(lambda b, z=z: mean_log_loss(z + b, y, w), tol=1e-12).fun)
    assert min(losses) >= fit.loss - 1e-12
    assert abs(grid[int(np.argmin(losses))] - fit.weights[0]) <= grid[1]


def test_fit_blend_with_a_duplicated_member() -> None:
    """Collinear members (a column twice): the Hessian is singular without its ridge; the fit still meets
    the constraints and SLSQP's loss."""
    member_logits, y = _members(4, 3_000, (1.0, 2.0))
    member_logits = np.column_stack([member_logits, member_logits[:, 0]])
    w = np.ones(y.shape[0])
    fit = fit_blend(member_logits, y, w)
    assert np.all(fit.weights >= 0.0)
    assert fit.weights.sum() == pytest.approx(1.0, abs=1e-12)
    assert fit.loss == pytest.approx(_slsqp(member_logits, y, w)[2], abs=1e-10)


def test_order_guard_reads_probabilities_as_they_are() -> None:
    """A raw score in [0, 1] (with -0.0 among its values) gives the AUC of its ranks; unit weights given
    as None give the AUC of weights of 1."""
    rng = np.random.default_rng(5)
    score = np.round(rng.uniform(size=3_000), 2)  # ties
    score[:50] = -0.0
    y = (rng.uniform(size=3_000) < score).astype(float)
    predicted = np.clip(score + rng.normal(scale=0.05, size=3_000), 0.001, 0.999)
    folds = np.arange(3_000) % 3
    plain = order_guard(score, predicted, y, None, folds)
    weighted = order_guard(score, predicted, y, np.ones(3_000), folds)
    ranked = order_guard(score * 4.0 - 2.0, predicted, y, None, folds)  # a margin: read through its ranks
    assert plain.raw_auc == weighted.raw_auc == ranked.raw_auc
    assert plain.auc == weighted.auc


def test_fit_blend_with_identical_members_reaches_the_same_blend() -> None:
    """Twins (identical logits) of the best member and of another: the twins' weights add up to what
    their column gets without the twins, at the same loss."""
    member_logits, y = _members(6, 3_000, (1.0, 2.5))
    w = np.ones(y.shape[0])
    twins = np.column_stack(
        [member_logits[:, 0], member_logits[:, 1], member_logits[:, 0], member_logits[:, 1]]
    )
    fit = fit_blend(twins, y, w)
    alone = fit_blend(member_logits, y, w)
    assert fit.loss == pytest.approx(alone.loss, abs=1e-13)
    assert_allclose(fit.weights[[0, 1]] + fit.weights[[2, 3]], alone.weights, atol=1e-7)
    assert np.all(alone.weights > 0.1)  # both columns weigh in the blend


def test_blend_predictions_in_row_chunks_are_one_calls_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucal.auto.blend import blend_logit, blend_predictions, logits
    from gpucal.calibrators.logistic import sigmoid
    from gpucal.kernels import jit

    rng = np.random.default_rng(4)
    n = 5 * jit.CHUNK_ALIGN + 13
    edges = np.r_[0.0, 1.0, rng.uniform(size=n - 2)]  # 0 and 1 clipped by the logit
    stacked = np.column_stack([rng.uniform(size=n), rng.uniform(size=n), edges])
    weights, intercept = np.array([0.5, 0.3, 0.2]), -0.25
    want = sigmoid(blend_logit(logits(stacked), weights, intercept))  # one call: below PARALLEL_MIN_ROWS
    monkeypatch.setattr(jit, "PARALLEL_MIN_ROWS", 10)
    monkeypatch.setattr(jit, "MAX_CHUNK_ROWS", 1)  # many chunks of CHUNK_ALIGN rows
    got = blend_predictions([stacked[:, k] for k in range(3)], weights, intercept)
    np.testing.assert_array_equal(got, want)
