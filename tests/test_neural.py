"""Tests of the neural calibrators (NeuCalib): ``gpucal.neural`` (issue 7).

References are independent of the code under test: the true map of simulated data, a direct torch
evaluation of the stored weights, ``np.interp``, and the ILPS penalty written out in numpy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import numpy as np
import pandas as pd
import pytest

import gpucal
from gpucal.neural import FieldAwareCalibrator, PiecewiseLogitCalibrator, torch_available
from gpucal.neural.field_aware import untrained_to_unknown
from gpucal.neural.piecewise import knot_coordinates, knot_positions, monotone_violation, pool_knots

pytestmark = pytest.mark.skipif(not torch_available(), reason="needs the neural extra (PyTorch)")

BENT = (-0.5, 1.5)  # slopes of the true logit map below and above 0


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p / (1.0 - p))


def _bent(x: np.ndarray) -> np.ndarray:
    """A monotone, not logit-linear truth: slope 0.5 below 0, 1.5 above (plus a shift)."""
    return np.where(x < 0, 0.5 * x, 1.5 * x) + BENT[0]


def _one_dim(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(-1.0, 1.5, n)
    y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-_bent(x)))).astype(np.float64)
    return 1.0 / (1.0 + np.exp(-x)), y


def _fields(n: int, seed: int, bias: np.ndarray) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """A score off by a known logit bias per value of ``site``; ``colour`` carries no bias."""
    rng = np.random.default_rng(seed)
    site = rng.integers(0, bias.shape[0], n)
    colour = rng.choice(["red", "green", "blue"], n)
    truth = rng.normal(-1.0, 1.0, n)
    y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-truth))).astype(np.float64)
    score = 1.0 / (1.0 + np.exp(-(truth - bias[site])))  # the model misses the site's bias
    return pd.DataFrame({"score": score, "site": site, "colour": colour}), y, truth


# --------------------------------------------------------------------------------------------------
# eta: knots, the penalty, monotonicity


def test_knots_are_weighted_quantiles_and_coordinates_interpolate() -> None:
    x = np.array([3.0, 1.0, 2.0, 2.0, 5.0, 4.0])
    knots = knot_positions(x, np.ones(6), 2)
    assert knots.tolist() == [1.0, 2.0, 5.0]  # inverted CDF at 0, 1/2, 1
    weighted = knot_positions(x, np.array([1.0, 0, 1, 1, 1, 1]), 1)
    assert weighted.tolist() == [2.0, 5.0]  # a zero-weight row is no knot
    queries = np.array([-1.0, 1.0, 1.5, 3.5, 5.0, 9.0])
    k, t = knot_coordinates(queries, knots)
    values = np.array([0.3, 0.7, 2.0])
    eta = values[k] * (1 - t) + values[np.minimum(k + 1, 2)] * t
    np.testing.assert_allclose(eta, np.interp(queries, knots, values), rtol=0, atol=1e-15)


def test_ilps_penalty_is_the_papers_sum_of_hinges() -> None:
    import torch

    from gpucal.neural._train import NeuCalibNet

    b = np.array([0.0, 0.5, 0.2, 0.9, -0.3, 1.0])
    net = NeuCalibNet(b, None, torch.Generator().manual_seed(0))
    expected = sum(max(b[i] - b[i + 1], 0.0) for i in range(len(b) - 1))  # 0.3 + 1.2
    assert float(net.monotone_penalty().detach()) == pytest.approx(expected, abs=1e-6)
    assert monotone_violation(b) == pytest.approx(1.2)


def test_pool_knots_is_weighted_isotonic_regression() -> None:
    values = np.array([0.0, 2.0, 1.0, 3.0])
    mass = np.array([1.0, 1.0, 3.0, 1.0])
    pooled = pool_knots(values, mass)
    np.testing.assert_allclose(pooled, [0.0, 1.25, 1.25, 3.0])  # (2 * 1 + 1 * 3) / 4
    np.testing.assert_array_equal(pool_knots(np.arange(4.0), np.ones(4)), np.arange(4.0))


def test_eta_is_monotone_and_recovers_a_monotone_truth() -> None:
    score, y = _one_dim(60_000, seed=1)
    cal = PiecewiseLogitCalibrator(n_knots=16).fit(score, y)
    # The penalty did the work: what the optimiser returned is monotone up to its step size.
    assert cal.monotone_violation_ < 0.02
    assert np.all(np.diff(cal.knots_y_) >= 0.0)
    # eta against the true map, at the knots inside the bulk of the data (the ends hold few rows).
    inner = slice(2, -2)
    np.testing.assert_allclose(cal.knots_y_[inner], _bent(cal.knots_x_[inner]), atol=0.15)
    # Monotone everywhere, the extrapolation included; constant beyond the end knots.
    grid = 1.0 / (1.0 + np.exp(-np.linspace(-12, 12, 2001)))
    pred = cal.predict(grid)
    assert np.all(np.diff(pred) >= 0.0)
    assert pred[0] == pred[1]
    assert pred[-1] == pred[-2]


def test_penalty_makes_eta_monotone_where_the_loss_alone_would_not() -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(-3, 3, 40_000)
    truth = -np.abs(x)  # not monotone: the unpenalised fit follows it down
    y = (rng.uniform(size=x.shape[0]) < 1 / (1 + np.exp(-truth))).astype(np.float64)
    free = PiecewiseLogitCalibrator(n_knots=12, monotone_penalty=0.0, score_kind="logit").fit(x, y)
    ilps = PiecewiseLogitCalibrator(n_knots=12, monotone_penalty=1.0, score_kind="logit").fit(x, y)
    assert monotone_violation(free.knots_y_) > 0.3
    assert ilps.monotone_violation_ < 0.02
    assert np.all(np.diff(ilps.knots_y_) >= 0.0)


def test_piecewise_beats_platt_on_a_bent_truth() -> None:
    score, y = _one_dim(40_000, seed=4)
    test_score, _ = _one_dim(40_000, seed=5)
    truth = 1 / (1 + np.exp(-_bent(_logit(test_score))))
    # 8 bins: the end knots of 32 bins are set by the few rows in the tails at this size (the top bin of
    # a normal's logits is wide), which costs about 0.02 of RMSE there.
    pw = PiecewiseLogitCalibrator(n_knots=8).fit(score, y).predict(test_score)
    platt = gpucal.PlattCalibrator().fit(score, y).predict(test_score)
    err_pw = np.sqrt(np.mean((pw - truth) ** 2))
    err_platt = np.sqrt(np.mean((platt - truth) ** 2))
    assert err_pw < 0.5 * err_platt
    assert err_pw < 0.01


# --------------------------------------------------------------------------------------------------
# g: the field term


def test_field_term_learns_a_known_per_field_bias() -> None:
    bias = np.array([-0.8, -0.2, 0.0, 0.4, 0.9])
    X, y, _ = _fields(80_000, seed=6, bias=bias)
    cal = FieldAwareCalibrator(categorical_cols=["site"]).fit(X, y)
    g = np.asarray(cal.field_bias(X))
    learnt = np.array([g[X["site"] == s].mean() for s in range(bias.shape[0])])
    # The model's logit misses bias[site]; g must add it back (up to a constant shared with eta).
    np.testing.assert_allclose(learnt - learnt.mean(), bias - bias.mean(), atol=0.1)
    colour = np.array([g[X["colour"] == c].mean() for c in ("red", "green", "blue")])
    assert np.ptp(colour) < 0.1  # no bias there, none learnt
    # Calibrated per site afterwards, where the raw score is off by up to 0.1.
    q = cal.predict(X).to_numpy()
    for s in range(bias.shape[0]):
        rows = X["site"].to_numpy() == s
        assert abs(q[rows].mean() - y[rows].mean()) < 0.01


def test_linear_field_term_matches_feature_aware_platt() -> None:
    """hidden_units=0, embedding_dim=1: g is an offset per value, as in logistic regression on one-hots."""
    bias = np.array([-0.6, 0.0, 0.6])
    X, y, _ = _fields(40_000, seed=7, bias=bias)
    # Few knots: the truth is linear in the logit, and 32 free knots would fit noise of ~0.02 at 40k rows.
    linear = {"hidden_units": 0, "embedding_dim": 1, "n_knots": 4}
    neural = FieldAwareCalibrator(categorical_cols=["site"], **linear).fit(X, y)
    platt = gpucal.FeatureAwarePlattCalibrator(categorical_cols=["site"]).fit(X, y)
    g = np.asarray(neural.field_bias(X))
    offsets = np.array([g[X["site"] == s].mean() for s in range(3)])
    coef = platt.coef_[:3]  # site's codes come first: values 0, 1, 2
    np.testing.assert_allclose(offsets - offsets.mean(), coef - coef.mean(), atol=0.05)
    assert np.mean(np.abs(neural.predict(X).to_numpy() - platt.predict(X).to_numpy())) < 0.01


def test_numpy_forward_equals_the_torch_module() -> None:
    import torch

    X, y, _ = _fields(5_000, seed=8, bias=np.array([-0.5, 0.5]))
    cal = FieldAwareCalibrator(categorical_cols=["site"], max_epochs=3).fit(X, y)
    codes = gpucal.FeatureEncoder.from_dict(cal.encoder_).transform(X[["site", "colour"]])
    offsets = np.concatenate([[0], np.cumsum(gpucal.FeatureEncoder.from_dict(cal.encoder_).n_values_)[:-1]])
    rows = torch.as_tensor(cal.code_rows_[codes.astype(np.int64) + offsets])
    h = torch.nn.functional.embedding(rows, torch.as_tensor(cal.embedding_)).reshape(len(X), -1)
    for i, layer in enumerate(cal.layers_):
        weight, bias = (torch.as_tensor(layer[key], dtype=torch.float64) for key in ("weight", "bias"))
        h = torch.nn.functional.linear(h, weight, bias)
        h = torch.relu(h) if i < len(cal.layers_) - 1 else h
    eps = np.finfo(np.float64).eps
    logit = _logit(np.clip(X["score"].to_numpy(), eps, 1 - eps))
    eta = np.interp(logit, cal.knots_x_, cal.knots_y_)
    expected = torch.sigmoid(torch.as_tensor(eta) + h[:, 0]).numpy()
    np.testing.assert_allclose(cal.predict(X).to_numpy(), expected, rtol=1e-12, atol=1e-14)


def test_rare_and_unseen_values_share_the_unknown_embedding() -> None:
    X, y, _ = _fields(20_000, seed=9, bias=np.array([-0.5, 0.5]))
    X.loc[:9, "colour"] = "violet"  # 10 rows: below min_value_rows
    cal = FieldAwareCalibrator(max_epochs=3, min_value_rows=50).fit(X, y)
    new = pd.concat([X.iloc[:10], X.iloc[:10]], ignore_index=True)
    new["colour"] = ["violet"] * 10 + ["never-seen"] * 10
    g = np.asarray(cal.field_bias(new))
    np.testing.assert_array_equal(g[:10], g[10:])  # row i and row i + 10 differ only in the colour
    assert cal.embedding_.shape[0] == 2 + 1 + 3 + 1  # site: 2 own + unknown; colour: 3 own + unknown


def test_an_unknown_row_only_weightless_rows_reached_is_filled_as_one_none_reached() -> None:
    X, y, _ = _fields(3_000, seed=17, bias=np.array([-0.5, 0.5]))
    X["colour"] = X["colour"].astype(object)
    X.loc[:19, "colour"] = "violet"  # 20 rare rows
    w = np.ones(y.shape[0])
    w[:20] = 0.0  # that weigh nothing
    weightless = FieldAwareCalibrator(max_epochs=3).fit(X, y, sample_weight=w)
    # Nothing trained colour's unknown row (the last; colour's three own rows before it): it is filled
    # with their weighted mean, a convex combination of them, not left at its random start.
    own, unknown = weightless.embedding_[-4:-1], weightless.embedding_[-1]
    system = np.vstack([own.T, np.ones(3)])
    mix = np.linalg.lstsq(system, np.r_[unknown, 1.0], rcond=None)[0]
    np.testing.assert_allclose(system @ mix, np.r_[unknown, 1.0], atol=1e-5)
    assert (mix > 0.0).all()


def test_auto_crosses_are_screened_on_the_training_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucal.neural import field_aware
    from gpucal.neural.field_aware import validation_mask

    X, y, _ = _fields(3_000, seed=18, bias=np.array([-0.5, 0.5]))
    screened: list[Any] = []
    real = field_aware.encoder_params
    monkeypatch.setattr(field_aware, "encoder_params", lambda *a, **k: screened.append(a[2]) or real(*a, **k))
    FieldAwareCalibrator(max_epochs=2, interactions="auto").fit(X, y)
    weights = np.asarray(screened[0].single_block()["sample_weight"])
    held = validation_mask(3_000, 0.1, 0)
    np.testing.assert_array_equal(weights, np.where(held, 0.0, 1.0))


# --------------------------------------------------------------------------------------------------
# Training: reproducible, weighted, early-stopped


def test_two_fits_give_identical_predictions() -> None:
    X, y, _ = _fields(20_000, seed=10, bias=np.array([-0.5, 0.5]))
    first = FieldAwareCalibrator(max_epochs=4).fit(X, y).predict(X).to_numpy()
    second = FieldAwareCalibrator(max_epochs=4).fit(X, y).predict(X).to_numpy()
    other_seed = FieldAwareCalibrator(max_epochs=4, seed=1).fit(X, y).predict(X).to_numpy()
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, other_seed)


def test_fit_restores_the_thread_count_and_leaves_the_global_rng_alone() -> None:
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    threads = torch.get_num_threads()
    X, y, _ = _fields(5_000, seed=11, bias=np.array([-0.5, 0.5]))
    FieldAwareCalibrator(max_epochs=2, n_threads=1).fit(X, y)
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "float64_default"])
def test_the_callers_torch_modes_do_not_change_the_fit(mode: str) -> None:
    import torch

    X, y, _ = _fields(3_000, seed=14, bias=np.array([-0.5, 0.5]))
    plain = FieldAwareCalibrator(max_epochs=3).fit(X, y).predict(X).to_numpy()
    alone = PiecewiseLogitCalibrator().fit(X["score"].to_numpy(), y).knots_y_
    before = torch.get_default_dtype()
    if mode == "float64_default":
        torch.set_default_dtype(torch.float64)
    block = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}.get(mode, torch.enable_grad)
    try:
        with block():
            inside = FieldAwareCalibrator(max_epochs=3).fit(X, y).predict(X).to_numpy()
            eta = PiecewiseLogitCalibrator().fit(X["score"].to_numpy(), y).knots_y_
    finally:
        torch.set_default_dtype(before)
    np.testing.assert_array_equal(inside, plain)
    np.testing.assert_array_equal(eta, alone)


def test_a_class_the_held_out_or_start_rows_miss_still_trains() -> None:
    from gpucal.neural.field_aware import START_ROWS, start_rows, validation_mask

    X, _, _ = _fields(3_000, seed=15, bias=np.array([-0.5, 0.5]))
    held = validation_mask(3_000, 0.1, 0)
    y = np.zeros(3_000)
    y[np.flatnonzero(held)[:5]] = 1.0  # every positive in the held-out rows
    assert validation_mask(3_000, 0.1, 0, None, y) is None  # so every row trains
    assert np.isfinite(FieldAwareCalibrator(max_epochs=2).fit(X, y).predict(X).to_numpy()).all()
    n_rows = 4 * START_ROWS
    drawn = start_rows(n_rows, None, 0)
    labels = np.zeros(n_rows)
    labels[np.setdiff1d(np.arange(n_rows), drawn)[:10]] = 1.0  # ten positives, none in the draw
    assert start_rows(n_rows, None, 0, labels).shape[0] == n_rows
    labels[drawn[0]] = 1.0
    np.testing.assert_array_equal(start_rows(n_rows, None, 0, labels), drawn)


def test_sample_weights_weight_the_log_loss() -> None:
    score, y = _one_dim(30_000, seed=12)
    w = np.where(np.arange(y.shape[0]) % 2 == 0, 3.0, 1.0)
    y = y.copy()
    y[::2] = 1.0 * (np.random.default_rng(0).uniform(size=y[::2].shape[0]) < 0.6)  # heavy rows: 60%
    cal = PiecewiseLogitCalibrator().fit(score, y, sample_weight=w)
    pred = cal.predict(score)
    # Calibration in the large under the weights (the knots' common shift is free): the weighted mean
    # prediction meets the weighted label rate, which the unweighted one is far from.
    assert abs(np.average(pred, weights=w) - np.average(y, weights=w)) < 0.01
    assert abs(np.average(y, weights=w) - y.mean()) > 0.05


@pytest.mark.parametrize("scale", [1e39, 1e-46])
def test_weights_scaled_alike_give_the_same_fit(scale: float) -> None:
    X, y, _ = _fields(3_000, seed=16, bias=np.array([-0.5, 0.5]))
    w = np.random.default_rng(16).uniform(0.5, 2.0, y.shape[0])
    plain = FieldAwareCalibrator(max_epochs=3).fit(X, y, sample_weight=w).predict(X).to_numpy()
    scaled = FieldAwareCalibrator(max_epochs=3).fit(X, y, sample_weight=w * scale).predict(X).to_numpy()
    np.testing.assert_allclose(scaled, plain, atol=1e-5)


def test_early_stopping_keeps_the_best_epoch() -> None:
    X, y, _ = _fields(20_000, seed=13, bias=np.array([-0.5, 0.5]))
    cal = FieldAwareCalibrator(max_epochs=200, patience=3).fit(X, y)
    assert cal.best_epoch_ <= cal.n_epochs_ < 200
    assert cal.n_epochs_ - cal.best_epoch_ == 3
    full = FieldAwareCalibrator(max_epochs=4, validation_fraction=0.0).fit(X, y)
    assert full.n_epochs_ == full.best_epoch_ == 4


def test_eta_alone_is_solved_to_the_optimum() -> None:
    """The L-BFGS fit meets the unpenalised optimum found by scipy on the same objective."""
    from scipy.optimize import minimize

    score, y = _one_dim(20_000, seed=20)
    cal = PiecewiseLogitCalibrator(n_knots=8, monotone_penalty=0.0).fit(score, y)
    x = _logit(score)
    k, t = knot_coordinates(x, cal.knots_x_)
    last = cal.knots_x_.shape[0] - 1

    def loss(b: np.ndarray) -> tuple[float, np.ndarray]:
        z = b[k] * (1 - t) + b[np.minimum(k + 1, last)] * t
        r = 1 / (1 + np.exp(-z)) - y
        grad = np.bincount(k, r * (1 - t), last + 1) + np.bincount(np.minimum(k + 1, last), r * t, last + 1)
        return float(np.mean(np.logaddexp(0, z) - y * z)), grad / x.shape[0]

    ref = minimize(loss, cal.knots_x_, jac=True, method="L-BFGS-B", options={"gtol": 1e-12}).x
    np.testing.assert_allclose(cal.knots_y_, ref, atol=1e-3)


# --------------------------------------------------------------------------------------------------
# Saving, loading, the API


@pytest.mark.parametrize("kind", ["piecewise", "field_aware"])
def test_save_load_round_trip_without_torch(tmp_path, kind: str) -> None:
    X, y, _ = _fields(10_000, seed=14, bias=np.array([-0.5, 0.5]))
    if kind == "piecewise":
        cal = PiecewiseLogitCalibrator().fit(X["score"], y)
        data = X["score"]
    else:
        cal = FieldAwareCalibrator(max_epochs=3).fit(X, y)
        data = X
    path = tmp_path / "model.json"
    cal.save(path)
    document = json.loads(path.read_text())
    assert document["class"] == type(cal).__name__
    np.save(tmp_path / "X.npy", X["score"].to_numpy())
    X.to_parquet(tmp_path / "X.parquet")
    expected = np.asarray(cal.predict(data), dtype=np.float64)
    np.save(tmp_path / "expected.npy", expected)
    # Load and predict in a fresh interpreter where importing torch fails.
    script = f"""
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ImportError("torch is blocked in this test")

sys.meta_path.insert(0, NoTorch())
import numpy as np, pandas as pd, gpucal, gpucal.neural
X = pd.read_parquet({str(tmp_path / "X.parquet")!r})
cal = gpucal.load({str(path)!r})
data = X["score"] if {kind == "piecewise"!r} else X
np.testing.assert_array_equal(np.asarray(cal.predict(data)), np.load({str(tmp_path / "expected.npy")!r}))
assert "torch" not in sys.modules
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_few_extreme_logits_do_not_flatten_the_map() -> None:
    """Twelve margins of +-1000 among 4,000: the Platt start on every logit had a slope of about 0 and
    the fit stopped near a constant (predictions between 0.25 and 0.35 on the other rows)."""
    score, y = _one_dim(4_000, seed=3)
    margins = np.log(score / (1 - score))
    margins[:6], margins[6:12] = 1e3, -1e3
    fitted = PiecewiseLogitCalibrator(score_kind="logit").fit(margins, y)
    clean = PiecewiseLogitCalibrator(score_kind="logit").fit(margins[12:], y[12:])
    loss = gpucal.metrics.log_loss(y[12:], fitted.predict(margins[12:]))
    assert loss == pytest.approx(gpucal.metrics.log_loss(y[12:], clean.predict(margins[12:])), abs=0.002)


def test_values_that_train_nothing_share_the_unknown_row() -> None:
    """A value whose rows all weigh nothing gets no row of its own (it kept its random start): it
    predicts as an unseen value does; nor does a value whose rows were all held out."""
    X, y, _ = _fields(4_000, seed=21, bias=np.array([-0.5, 0.5, 0.0]))
    X["site"] = X["site"].astype(str)
    X.loc[:39, "site"] = "Z"
    weights = np.ones(len(y))
    weights[:40] = 0.0
    model = FieldAwareCalibrator(max_epochs=3, min_value_rows=10).fit(X, y, sample_weight=weights)
    probe = pd.DataFrame({"score": [0.3, 0.3], "site": ["Z", "never seen"], "colour": ["red", "red"]})
    z, unseen = model.predict(probe).to_numpy()
    assert z == unseen

    code_rows = np.array([0, 1, 2, 3, 4, 5])  # one field: codes 0-4 own rows 0-4, code 5 the unknown
    trained = [np.array([7, 0, 3, 9, 0, 2])]
    assert untrained_to_unknown(code_rows, np.array([6]), trained).tolist() == [0, 5, 2, 3, 5, 5]


def test_a_batch_of_light_rows_weighs_as_little_as_they_do() -> None:
    """A batch's loss estimates the training rows' weighted mean: rows of weight 1e-9 in a batch of their
    own add 1e-9 of what rows of weight 1 add, not as much (over the batch's own weight)."""
    import torch

    from gpucal.neural._train import _batch_log_loss

    z = torch.tensor([0.3, -1.2, 2.0, 0.1])
    y = torch.tensor([1.0, 0.0, 0.0, 1.0])
    heavy = _batch_log_loss(z, y, torch.ones(4), mean_weight=1.0)
    light = _batch_log_loss(z, y, torch.full((4,), 1e-9), mean_weight=1.0)
    assert float(light) == pytest.approx(1e-9 * float(heavy), rel=1e-6)
    mean_loss = torch.nn.functional.binary_cross_entropy_with_logits(z, y)
    assert float(heavy) == pytest.approx(float(mean_loss), rel=1e-6)


def test_loading_rejects_inconsistent_state(tmp_path) -> None:
    X, y, _ = _fields(5_000, seed=15, bias=np.array([-0.5, 0.5]))
    FieldAwareCalibrator(max_epochs=2).fit(X, y).save(tmp_path / "m.json")
    document = json.loads((tmp_path / "m.json").read_text())
    document["state"]["layers_"][0]["weight"][0] = document["state"]["layers_"][0]["weight"][0][:-1]
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(gpucal.ModelFileError, match="layers_"):
        gpucal.load(tmp_path / "bad.json")


def _tampered(tmp_path, document: dict, change) -> Any:
    copy = json.loads(json.dumps(document))
    change(copy["state"])
    (tmp_path / "tampered.json").write_text(json.dumps(copy))
    return tmp_path / "tampered.json"


def test_loading_rejects_numbers_that_overflow_or_are_not_numbers(tmp_path) -> None:
    """Finite entries whose products overflow (inf - inf in the field term: NaN on every row), knot values
    whose difference overflows, and booleans or strings read as numbers are refused on load."""
    X, y, _ = _fields(3_000, seed=15, bias=np.array([-0.5, 0.5]))
    FieldAwareCalibrator(max_epochs=2).fit(X, y).save(tmp_path / "m.json")
    document = json.loads((tmp_path / "m.json").read_text())

    def overflowing(state: dict) -> None:
        state["embedding_"] = [[1e300] * len(row) for row in state["embedding_"]]
        state["layers_"][0]["weight"] = [[1e10] * len(row) for row in state["layers_"][0]["weight"]]

    def far_knots(state: dict) -> None:
        state["knots_y_"] = [(-1e308 if k % 2 else 1e308) for k in range(len(state["knots_y_"]))]

    def wide_knots(state: dict) -> None:
        state["knots_x_"][0], state["knots_x_"][-1] = -1.5e308, 1.5e308

    def boolean(state: dict) -> None:
        state["layers_"][-1]["bias"] = [True]

    def text(state: dict) -> None:
        state["layers_"][0]["weight"][0][0] = "1e3"

    for change, message in [
        (overflowing, "field term past 1e\\+300"),
        (far_knots, "knots_y_: an entry is larger than 1e\\+100"),
        (wide_knots, "knots_x_: the knots span more than float64 holds"),
        (boolean, r"layers_\[1\] must hold lists of numbers"),
        (text, r"layers_\[0\] must hold lists of numbers"),
    ]:
        with pytest.raises(gpucal.ModelFileError, match=message):
            gpucal.load(_tampered(tmp_path, document, change))


def test_import_gpucal_imports_no_torch() -> None:
    script = "import sys, gpucal, gpucal.neural; assert 'torch' not in sys.modules, 'torch imported'"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr


def test_fit_without_torch_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    score, y = _one_dim(1_000, seed=16)
    with pytest.raises(ImportError, match=r"PiecewiseLogitCalibrator .*pip install 'gpucal\[neural\]'"):
        PiecewiseLogitCalibrator().fit(score, y)
    X, y, _ = _fields(1_000, seed=16, bias=np.array([-0.5, 0.5]))
    with pytest.raises(ImportError, match=r"FieldAwareCalibrator .*pip install 'gpucal\[neural\]'"):
        FieldAwareCalibrator().fit(X, y)


def test_bad_input_is_named() -> None:
    X, y, _ = _fields(2_000, seed=17, bias=np.array([-0.5, 0.5]))
    with pytest.raises(ValueError, match="'embedding_dim' parameter of FieldAwareCalibrator"):
        FieldAwareCalibrator(embedding_dim=0).fit(X, y)
    # Past these, torch ended the process (threads) or failed after the start fit (seed).
    with pytest.raises(ValueError, match=r"'n_threads' parameter of FieldAwareCalibrator .*\[1, 1024\]"):
        FieldAwareCalibrator(n_threads=10**6).fit(X, y)
    with pytest.raises(ValueError, match="'n_threads' parameter of PiecewiseLogitCalibrator"):
        PiecewiseLogitCalibrator(n_threads=10**6).fit(X["score"], y)
    with pytest.raises(ValueError, match="'seed' parameter of FieldAwareCalibrator"):
        FieldAwareCalibrator(seed=2**64).fit(X, y)
    # Past this, numpy failed with a MemoryError (10**12 knots asked for terabytes).
    with pytest.raises(ValueError, match=r"'n_knots' parameter of PiecewiseLogitCalibrator .*\[1, 1048576\]"):
        PiecewiseLogitCalibrator(n_knots=10**12).fit(X["score"], y)
    with pytest.raises(ValueError, match="'n_knots' parameter of FieldAwareCalibrator"):
        FieldAwareCalibrator(n_knots=10**12).fit(X, y)
    with pytest.raises(KeyError, match="missing_col"):
        FieldAwareCalibrator(feature_cols=["missing_col"]).fit(X, y)
    with pytest.raises(ValueError, match="no positive labels"):
        FieldAwareCalibrator().fit(X, np.zeros(len(X)))
    with pytest.raises(ValueError, match="leaves no training row"):
        FieldAwareCalibrator(validation_fraction=0.9999).fit(X.iloc[:10], y[:10])
    cal = FieldAwareCalibrator(max_epochs=1).fit(X, y)
    with pytest.raises(KeyError, match="colour"):
        cal.predict(X[["score", "site"]])


def test_output_follows_the_input_family() -> None:
    pl = pytest.importorskip("polars")
    X, y, _ = _fields(3_000, seed=18, bias=np.array([-0.5, 0.5]))
    cal = FieldAwareCalibrator(max_epochs=2).fit(pl.from_pandas(X), y)
    out = cal.predict(pl.from_pandas(X))
    assert isinstance(out, pl.Series)
    np.testing.assert_allclose(out.to_numpy(), cal.predict(X).to_numpy())
    assert isinstance(PiecewiseLogitCalibrator().fit(X["score"], y).predict(X), pd.Series)


@pytest.mark.gpu
def test_cupy_input_trains_on_cuda_by_dlpack() -> None:
    cupy = pytest.importorskip("cupy")
    import torch

    if not (gpucal._backend.gpu_available() and torch.cuda.is_available()):
        pytest.skip("needs a CUDA GPU and a CUDA build of PyTorch")
    score, y = _one_dim(20_000, seed=19)
    cal = PiecewiseLogitCalibrator().fit(cupy.asarray(score), cupy.asarray(y))
    cpu = PiecewiseLogitCalibrator(device="cpu").fit(score, y)
    out = cal.predict(cupy.asarray(score))
    assert isinstance(out, cupy.ndarray)
    np.testing.assert_allclose(cal.knots_y_, cpu.knots_y_, atol=1e-6)


def test_readme_example_runs() -> None:
    """The README's NeuCalib block runs as written (fewer rows)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"## NeuCalib\n\n```python\n(.*?)```", text, re.S)
    assert block is not None, "README.md lost its '## NeuCalib' section with a python block"
    namespace: dict = {}
    code = block.group(1).replace("200_000", "20_000").replace("100_000", "10_000")
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["calibrated"].index.equals(namespace["test"].index)
    assert np.all(np.diff(namespace["eta_only"].knots_y_) >= 0)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # two rows are separable
@pytest.mark.parametrize("kept", [(0, 1), (10, 200), (398, 399)])
def test_weights_zero_on_all_but_two_rows_give_finite_predictions(kept: tuple[int, int]) -> None:
    """Issue 18: NeuCalib predicted all NaN: a mini-batch (or the held-out rows) weighing nothing gave 0/0."""
    X, y, _ = _fields(400, seed=19, bias=np.array([-0.5, 0.5]))
    y = y.copy()
    y[list(kept)] = (0.0, 1.0)
    w = np.zeros(400)
    w[list(kept)] = 1.0
    cal = FieldAwareCalibrator(max_epochs=5).fit(X, y, sample_weight=w)
    pred = cal.predict(X).to_numpy()
    assert np.isfinite(pred).all()
    assert ((pred > 0) & (pred < 1)).all()
    # The held-out rows (or the training rows) weigh nothing: no early stopping, every epoch trains.
    assert cal.n_epochs_ == cal.best_epoch_ == 5


def test_read_only_inputs_are_copied_for_torch() -> None:
    """torch has no read-only tensor: a read-only array (a pandas column's view, checked labels) is
    copied, a writable one of the right dtype is shared, and a fit on read-only float labels runs
    without torch's warning (in a fresh process: torch warns once per process)."""
    import torch

    from gpucal.neural._torch import as_tensor

    writable = np.linspace(0.0, 1.0, 50)
    shared = as_tensor(writable, "cpu", "float64")
    assert shared.data_ptr() == writable.ctypes.data
    read_only = writable.copy()
    read_only.flags.writeable = False
    copied = as_tensor(read_only, "cpu", "float64")
    assert copied.data_ptr() != read_only.ctypes.data
    assert torch.equal(copied, shared)
    script = """
import warnings
import numpy as np, pandas as pd
from gpucal.neural import FieldAwareCalibrator
warnings.simplefilter("error")
rng = np.random.default_rng(0)
X = pd.DataFrame({"score": rng.uniform(0.05, 0.95, 2_000), "field": rng.integers(0, 3, 2_000)})
y = (rng.uniform(size=2_000) < X["score"]).to_numpy(dtype=np.float64)
y.flags.writeable = False
FieldAwareCalibrator(max_epochs=2).fit(X, y)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
