"""Feature-aware Platt scaling: scikit-learn's LogisticRegression on the same one-hot design, a learnt
per-field bias, saving, input families, unseen values and errors.
"""

from __future__ import annotations

import json
import math
from contextlib import nullcontext
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import expit, logit
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression

import gpucal
from gpucal._backend import gpu_available
from gpucal.calibrators import feature_platt
from gpucal.calibrators._feature_platt_kernels import code_sums, curved_rows, select_code_columns
from gpucal.calibrators._feature_platt_rows import PlattBlock, code_weights
from gpucal.calibrators._feature_platt_solver import block_preconditioner
from gpucal.calibrators.feature_platt import FeatureAwarePlattCalibrator
from gpucal.calibrators.platt import PlattCalibrator
from gpucal.encoding import FeatureEncoder
from gpucal.kernels import value_offsets
from gpucal.kernels.jit import parallel_twins_only
from gpucal.metrics import log_loss

EPS = np.finfo(np.float64).eps
SIZES = (3, 17, 50)


def field_data(
    n: int = 2000,
    seed: int = 0,
    sizes: tuple[int, ...] = SIZES,
    spread: float = 0.7,
    bias_seed: int | None = None,
) -> tuple[pd.DataFrame, np.ndarray, list[np.ndarray]]:
    """Scores, categorical fields with a per-value logit bias, labels drawn from the biased truth.

    The biases come from ``bias_seed`` (default ``seed``), so two samples can share them.
    """
    rng = np.random.default_rng(seed)
    bias_rng = np.random.default_rng(seed if bias_seed is None else bias_seed)
    biases = [bias_rng.normal(0.0, spread, k) for k in sizes]
    p = rng.beta(2.0, 3.0, n)
    z = 1.3 * logit(p) + 0.2
    fields = {}
    for j, k in enumerate(sizes):
        codes = rng.integers(0, k, n)
        fields[f"f{j}"] = pd.Categorical.from_codes(codes, [f"v{i}" for i in range(k)])
        z = z + biases[j][codes]
    y = (rng.random(n) < expit(z)).astype(np.float64)
    return pd.DataFrame({"score": p, **fields}), y, biases


def one_hot_design(cal: FeatureAwarePlattCalibrator, X: pd.DataFrame) -> np.ndarray:
    """``[logit(score), one-hot of every code]``, columns in ``coef_`` order."""
    encoder = FeatureEncoder.from_dict(cal.encoder_)
    codes = encoder.transform(X)
    offsets = value_offsets(encoder.n_values_)
    onehot = np.zeros((len(X), int(encoder.n_values_.sum())))
    for j in range(codes.shape[1]):
        onehot[np.arange(len(X)), offsets[j] + codes[:, j]] = 1.0
    score = X["score"].to_numpy()
    return np.column_stack([logit(np.clip(score, EPS, 1 - EPS)), onehot])


def penalised_gradient(
    design: np.ndarray, y: np.ndarray, w: Any, intercept: float, coef: np.ndarray
) -> float:
    """Largest entry of the gradient of sum w logloss + (1/2) |coef|^2 (l2 = 1)."""
    residual = (1.0 if w is None else w) * (expit(design @ coef + intercept) - y)
    return float(np.abs(np.r_[residual.sum(), design.T @ residual + coef]).max())


# --------------------------------------------------------------------------------------------------
# scikit-learn's LogisticRegression on the same design


@pytest.mark.parametrize("weighted", [False, True])
def test_equals_sklearn_logistic_regression(weighted: bool) -> None:
    X, y, _ = field_data()
    w = np.random.default_rng(1).integers(1, 4, len(y)).astype(np.float64) if weighted else None
    cal = FeatureAwarePlattCalibrator(l2=1.0).fit(X, y, sample_weight=w)
    design = one_hot_design(cal, X)
    ours = np.r_[cal.intercept_, cal.coef_score_, cal.coef_]
    predicted = cal.predict(X).to_numpy()

    # newton-cholesky solves the same problem exactly: every coefficient and prediction agrees.
    exact = LogisticRegression(C=1.0, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    exact.fit(design, y, sample_weight=w)
    assert_allclose(ours, np.r_[exact.intercept_, exact.coef_[0]], rtol=0, atol=1e-6)
    assert_allclose(predicted, exact.predict_proba(design)[:, 1], rtol=0, atol=1e-6)

    # L-BFGS: the predictions agree to 1e-6, the coefficients only to about 1e-5. Its stopping rule on the
    # relative decrease of the loss (ftol = 64 eps, fixed inside scikit-learn) ends the run before it
    # resolves the nearly flat direction "intercept up, every offset of a feature down" (only the penalty
    # sees it); its gradient there is ~1e-4, ours ~1e-11, so the gap is L-BFGS's.
    lbfgs = LogisticRegression(C=1.0, solver="lbfgs", tol=1e-12, max_iter=100_000)
    lbfgs.fit(design, y, sample_weight=w)
    assert_allclose(predicted, lbfgs.predict_proba(design)[:, 1], rtol=0, atol=1e-6)
    assert_allclose(ours, np.r_[lbfgs.intercept_, lbfgs.coef_[0]], rtol=0, atol=5e-5)
    ours_grad = penalised_gradient(design, y, w, cal.intercept_, ours[1:])
    assert ours_grad < 1e-6  # summed over 2000 rows
    assert ours_grad < penalised_gradient(design, y, w, lbfgs.intercept_[0], lbfgs.coef_[0])


@pytest.mark.parametrize("l2", [0.1, 10.0])
def test_l2_is_sklearn_inverse_c_and_logit_scores(l2: float) -> None:
    X, y, _ = field_data(n=1500, seed=2)
    margin = X.assign(score=logit(X["score"]) * 2.0 - 0.5)
    cal = FeatureAwarePlattCalibrator(l2=l2, score_kind="logit").fit(margin, y)
    design = one_hot_design(cal, X)
    design[:, 0] = margin["score"].to_numpy()
    ref = LogisticRegression(C=1.0 / l2, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(design, y)
    assert_allclose(
        np.r_[cal.intercept_, cal.coef_score_, cal.coef_], np.r_[ref.intercept_, ref.coef_[0]], atol=1e-6
    )


def test_integer_weights_equal_repeated_rows() -> None:
    X, y, _ = field_data(n=600, seed=3)
    w = np.random.default_rng(4).integers(0, 4, len(y))
    weighted = FeatureAwarePlattCalibrator().fit(X, y, sample_weight=w.astype(np.float64))
    rows = np.repeat(np.arange(len(y)), w)
    repeated = FeatureAwarePlattCalibrator().fit(X.iloc[rows].reset_index(drop=True), y[rows])
    assert_allclose(weighted.predict(X), repeated.predict(X), atol=1e-9)


def test_warm_start_does_not_change_the_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y, _ = field_data(n=4000, seed=5)
    cold = FeatureAwarePlattCalibrator().fit(X, y)
    monkeypatch.setattr(feature_platt, "WARM_START_MIN_ROWS", 1000)
    monkeypatch.setattr(feature_platt, "WARM_START_ROWS", 500)
    warm = FeatureAwarePlattCalibrator().fit(X, y)
    assert_allclose(warm.coef_, cold.coef_, atol=1e-8)
    assert_allclose([warm.coef_score_, warm.intercept_], [cold.coef_score_, cold.intercept_], atol=1e-8)
    encoder = FeatureEncoder.from_dict(warm.encoder_)
    assert_array_equal(warm.coef_[value_offsets(encoder.n_values_) + encoder.unseen_codes_], 0.0)


def test_offsets_of_each_feature_sum_to_zero() -> None:
    X, y, _ = field_data(n=1000, seed=6)
    cal = FeatureAwarePlattCalibrator().fit(X, y)
    encoder = FeatureEncoder.from_dict(cal.encoder_)
    offsets = value_offsets(encoder.n_values_)
    for o, k in zip(offsets, encoder.n_values_, strict=True):
        assert abs(cal.coef_[o : o + k].sum()) < 1e-8


# --------------------------------------------------------------------------------------------------
# What it is for


def test_learns_a_per_field_bias_global_platt_cannot() -> None:
    sizes = (4, 12)
    X, y, biases = field_data(n=20_000, seed=7, sizes=sizes, spread=1.0)
    X_test, y_test, _ = field_data(n=20_000, seed=8, sizes=sizes, spread=1.0, bias_seed=7)
    cal = FeatureAwarePlattCalibrator().fit(X, y)
    platt = PlattCalibrator().fit(X["score"].to_numpy(), y)
    ours = log_loss(y_test, cal.predict(X_test).to_numpy())
    global_only = log_loss(y_test, platt.predict(X_test["score"].to_numpy()))
    assert ours < global_only - 0.03, (ours, global_only)
    # The learnt offsets recover the generating biases up to a constant per field (the intercept's).
    encoder = FeatureEncoder.from_dict(cal.encoder_)
    offsets = value_offsets(encoder.n_values_)
    for j, k in enumerate(sizes):
        # Categories are coded in sorted order ("v0", "v1", "v10", ...): look each one up.
        position = {v: i for i, v in enumerate(encoder.categories_[f"f{j}"])}
        learnt = cal.coef_[offsets[j] + np.array([position[f"v{i}"] for i in range(k)])]
        assert np.corrcoef(biases[j], learnt)[0, 1] > 0.97
        assert_allclose(learnt - learnt.mean(), biases[j] - biases[j].mean(), atol=0.15)


# --------------------------------------------------------------------------------------------------
# Saving, input families, unseen values


def test_save_load_round_trip(tmp_path: Any) -> None:
    X, y, _ = field_data(n=800, seed=9)
    X["num"] = np.random.default_rng(9).normal(size=len(y))
    cal = FeatureAwarePlattCalibrator(n_bins=8).fit(X, y)
    cal.save(tmp_path / "m.json")
    loaded = gpucal.load(tmp_path / "m.json")
    assert type(loaded) is FeatureAwarePlattCalibrator
    assert loaded.get_params() == cal.get_params()
    assert_array_equal(loaded.predict(X).to_numpy(), cal.predict(X).to_numpy())


def test_load_rejects_inconsistent_state(tmp_path: Any) -> None:
    X, y, _ = field_data(n=500, seed=10)
    FeatureAwarePlattCalibrator().fit(X, y).save(tmp_path / "m.json")
    doc = json.loads((tmp_path / "m.json").read_text())
    short = json.loads(json.dumps(doc))
    short["state"]["coef_"] = short["state"]["coef_"][:-1]
    (tmp_path / "short.json").write_text(json.dumps(short))
    with pytest.raises(gpucal.ModelFileError, match="encoder has"):
        gpucal.load(tmp_path / "short.json")
    broken = json.loads(json.dumps(doc))
    broken["state"]["encoder_"]["columns"] = []
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(gpucal.ModelFileError, match="columns"):
        gpucal.load(tmp_path / "broken.json")


def test_pandas_in_series_out_with_index() -> None:
    X, y, _ = field_data(n=400, seed=11)
    X.index = pd.RangeIndex(1000, 1400) * 3
    out = FeatureAwarePlattCalibrator().fit(X, y).predict(X)
    assert isinstance(out, pd.Series)
    assert out.index.equals(X.index)
    assert out.name == "calibrated"
    assert ((out > 0) & (out < 1)).all()


def test_polars_and_numpy_output() -> None:
    X, y, _ = field_data(n=400, seed=12)
    cal = FeatureAwarePlattCalibrator().fit(X, y)
    frame = pl.from_pandas(X.astype({c: str for c in ("f0", "f1", "f2")}))
    from_polars = FeatureAwarePlattCalibrator().fit(frame, y)
    out = from_polars.predict(frame)
    assert isinstance(out, pl.Series)
    assert_allclose(out.to_numpy(), cal.predict(X).to_numpy(), atol=1e-12)
    numpy_out = clone(cal).set_params(output_type="numpy").fit(X, y).predict(X)
    assert isinstance(numpy_out, np.ndarray)


def test_unseen_value_falls_back_to_offset_zero() -> None:
    X, y, _ = field_data(n=500, seed=13)
    cal = FeatureAwarePlattCalibrator().fit(X, y)
    encoder = FeatureEncoder.from_dict(cal.encoder_)
    unseen = value_offsets(encoder.n_values_) + encoder.unseen_codes_
    assert_array_equal(cal.coef_[unseen], 0.0)
    new = X.head(3).astype({"f1": str})
    new.loc[:, "f1"] = ["never", "seen", "before"]
    p = cal.predict(new).to_numpy()
    codes = encoder.transform(new)
    offsets = value_offsets(encoder.n_values_)
    expected = expit(
        cal.intercept_
        + cal.coef_score_ * logit(new["score"].to_numpy())
        + cal.coef_[offsets[0] + codes[:, 0]]
        + cal.coef_[offsets[2] + codes[:, 2]]
    )
    assert_allclose(p, expected, rtol=1e-12)


def test_feature_cols_and_extra_columns() -> None:
    X, y, _ = field_data(n=500, seed=14)
    cal = FeatureAwarePlattCalibrator(feature_cols=["f0", "f2"]).fit(X.assign(other=1.0), y)
    assert FeatureEncoder.from_dict(cal.encoder_).feature_names_ == ["f0", "f2"]
    assert_allclose(cal.predict(X.drop(columns="f1")), cal.predict(X))
    assert cal.predict(X.iloc[:0]).shape == (0,)


def test_registered_by_name() -> None:
    assert isinstance(gpucal.make_calibrator("feature_platt", l2=2.0), gpucal.FeatureAwarePlattCalibrator)


# --------------------------------------------------------------------------------------------------
# Errors


def test_errors() -> None:
    X, y, _ = field_data(n=300, seed=15)
    cal = FeatureAwarePlattCalibrator().fit(X, y)
    with pytest.raises(KeyError, match=r"\['f1'\] not found"):
        cal.predict(X.drop(columns="f1"))
    with pytest.raises(ValueError, match="no feature columns"):
        FeatureAwarePlattCalibrator().fit(X[["score"]], y)
    with pytest.raises(ValueError, match="no feature columns"):
        FeatureAwarePlattCalibrator().fit(X["score"].to_numpy(), y)
    with pytest.raises(ValueError, match="no negative labels"):
        FeatureAwarePlattCalibrator().fit(X, np.ones(len(y)))
    with pytest.raises(KeyError, match="not found"):
        FeatureAwarePlattCalibrator(feature_cols=["nope"]).fit(X, y)
    with pytest.raises(ValueError, match=r"The 'l2' parameter of FeatureAwarePlattCalibrator must be"):
        FeatureAwarePlattCalibrator(l2=0.0).fit(X, y)
    with pytest.raises(ValueError, match="'device' parameter"):
        FeatureAwarePlattCalibrator(device="tpu").fit(X, y)
    with pytest.raises(ValueError, match="rows"):
        FeatureAwarePlattCalibrator().fit(X, y[:-1])


@pytest.mark.skipif(not gpu_available(), reason="needs a CUDA GPU and cupy")
def test_gpu_fit_equals_cpu_fit() -> None:
    import cupy

    X, y, _ = field_data(n=3000, seed=16)
    cpu = FeatureAwarePlattCalibrator(device="cpu").fit(X, y)
    gpu = FeatureAwarePlattCalibrator(device="gpu").fit(X, y)
    assert_allclose(gpu.coef_, cpu.coef_, atol=1e-8)
    assert_allclose([gpu.coef_score_, gpu.intercept_], [cpu.coef_score_, cpu.intercept_], atol=1e-8)
    out = gpu.set_params(output_type="cupy").predict(X)
    assert isinstance(out, cupy.ndarray)
    assert_allclose(cupy.asnumpy(out), cpu.predict(X).to_numpy(), atol=1e-10)


def test_numba_loops_equal_the_array_path(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y, _ = field_data(n=1500, seed=17)
    w = np.random.default_rng(17).uniform(0.5, 2.0, len(y))
    fast = FeatureAwarePlattCalibrator().fit(X, y, sample_weight=w)
    monkeypatch.setattr(feature_platt, "FORCE_ARRAY_PATH", True)
    array = FeatureAwarePlattCalibrator().fit(X, y, sample_weight=w)
    assert_allclose(array.coef_, fast.coef_, atol=1e-9)
    assert_allclose([array.coef_score_, array.intercept_], [fast.coef_score_, fast.intercept_], atol=1e-9)
    assert_allclose(array.predict(X), fast.predict(X), atol=1e-12)


def test_fit_is_deterministic() -> None:
    X, y, _ = field_data(n=1500, seed=18)
    first = FeatureAwarePlattCalibrator().fit(X, y)
    second = FeatureAwarePlattCalibrator().fit(X, y)
    assert_array_equal(first.coef_, second.coef_)
    assert first.intercept_ == second.intercept_


@pytest.mark.parametrize("n_rows", [3_000, 200_000])
@pytest.mark.parametrize("stepping", [False, True])
def test_curved_pass_equals_the_separate_passes(n_rows: int, stepping: bool) -> None:
    """The fused pass (trial predictor, loss, gradient row sums, code sums) against the same sums in
    numpy, and its table of curvatures against the separate ``code_sums`` pass over its own ``D``, to
    the bit (the same row chunks, rows added in order); the parallel twin equals the serial one to the
    bit (its chunks follow the sizes only); the array path agrees to rounding."""
    rng = np.random.default_rng(5)
    n_values = np.array([3, 40, 7])
    codes = np.column_stack([rng.integers(0, k, n_rows) for k in n_values]).astype(np.int16)
    x, z, dz = rng.normal(0.0, 2.0, n_rows), rng.normal(0.0, 3.0, n_rows), rng.normal(0.0, 1.0, n_rows)
    y, w = (rng.random(n_rows) < 0.3).astype(np.float64), rng.uniform(0.0, 2.0, n_rows)
    scale = 0.25
    at = z + scale * dz if stepping else z
    step = dz if stepping else None
    z_out, curvature, sums = curved_rows(z, step, scale, x, y, w, codes, n_values)
    assert_array_equal(z_out, at)
    p = expit(at)
    residual = w * (p - y)
    assert_allclose(curvature, w * p * (1.0 - p), rtol=1e-13, atol=1e-300)
    loss = np.sum(w * (np.logaddexp(0.0, at) - y * at))
    expected = [loss, residual @ x, residual.sum(), curvature @ (x * x), curvature.sum(), curvature @ x]
    assert_allclose(sums[:6], expected, rtol=1e-12)
    table = sums[6:].reshape(-1, 2)
    assert_array_equal(table[:, 1], code_sums(codes, n_values, curvature)[:, 0])
    assert_allclose(table[:, 0], code_sums(codes, n_values, residual)[:, 0], rtol=1e-10, atol=1e-10)
    with parallel_twins_only():
        parallel = curved_rows(z, step, scale, x, y, w, codes, n_values)
    assert_array_equal(parallel[2], sums)
    assert_array_equal(parallel[1], curvature)
    array = curved_rows(z, step, scale, x, y, w, codes, n_values, array_code=True)
    assert_allclose(array[2], sums, rtol=1e-12, atol=1e-10)
    assert_allclose(array[1], curvature, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("dtype", [np.int8, np.int32])
def test_selected_code_columns_and_code_weights(dtype: type) -> None:
    """The compiled column gather (both twins) equals numpy's ``codes[:, columns]``, C-contiguous; the
    per-code weights of one pass equal a weighted ``bincount`` per column."""
    rng = np.random.default_rng(6)
    n_values = np.array([3, 40, 7, 5])
    codes = np.column_stack([rng.integers(0, k, 5000) for k in n_values]).astype(dtype)
    columns = np.array([3, 0, 2])
    for twins in (nullcontext(), parallel_twins_only()):
        with twins:
            picked = select_code_columns(codes, columns)
        assert picked.flags.c_contiguous
        assert picked.dtype == codes.dtype
        assert_array_equal(picked, codes[:, columns])
    w = rng.uniform(0.0, 2.0, 5000)
    block = PlattBlock(np.zeros(5000), codes, np.zeros(5000), w)
    expected = np.concatenate(
        [np.bincount(codes[:, j], weights=w, minlength=k) for j, k in enumerate(n_values)]
    )
    assert_allclose(code_weights(block, n_values), expected, rtol=1e-12)


def test_block_preconditioner_inverts_the_score_intercept_block() -> None:
    """M^-1 v: the (a, b) block solved whole, the codes divided by their diagonal, unused codes 0; the
    diagonal alone when the block is singular."""
    used = np.array([True, True, True, False, True])
    diag = np.array([4.0, 2.0, 5.0, 3.0, 0.5])
    v = np.array([1.0, -2.0, 3.0, 7.0, -1.0])
    out = block_preconditioner(used, diag, 1.5)(v)
    assert_allclose(np.array([[4.0, 1.5], [1.5, 2.0]]) @ out[:2], v[:2], rtol=1e-14)
    assert_allclose(out[2:], [3.0 / 5.0, 0.0, -2.0])
    singular = block_preconditioner(used, diag, math.sqrt(8.0))(v)
    assert_allclose(singular, [0.25, -1.0, 0.6, 0.0, -2.0])
