"""FeatureAwarePlattCalibrator on dask DataFrames (issue 7): the single-machine coefficients, sums added.

The reference is ``FeatureAwarePlattCalibrator.fit`` on the concatenated rows. Newton-CG reads only sums
over rows, and the dask fit adds them over partitions, so it takes the same steps: the encoder must be
equal exactly, the number of Newton steps too, and every coefficient (score slope, intercept, each
value's offset) and prediction within 1e-8 relative (they agree to about 1e-12; the sums are added in
another order). Partitions are pandas on a ``distributed.LocalCluster`` of threads.
"""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from gpucal.calibrators import feature_platt
from gpucal.calibrators.feature_platt import FeatureAwarePlattCalibrator
from gpucal.datasets import make_ctr
from gpucal.distributed import DISTRIBUTED_FITS
from gpucal.encoding import FeatureEncoder

RTOL = 1e-8
N_ROWS = 24_000
PARAMS = {"categorical_cols": ["hour"], "n_bins": 16}


def _ctr_frame(base_rate: float) -> tuple[pd.DataFrame, pd.Series, np.ndarray]:
    df = make_ctr(N_ROWS, "mixed", seed=3, base_rate=base_rate)
    X = df[["score", "region", "user_segment", "device", "hour"]].copy()
    X["region"] = "r" + X["region"].astype(str)
    X["p_noisy"] = df["p_true"] * np.exp(np.random.default_rng(1).normal(0.0, 0.3, N_ROWS))
    w = np.random.default_rng(2).random(N_ROWS) * 2.0
    w[:2000] = 0.0
    return X, df["label"].astype(np.float64), w


@pytest.fixture(scope="module")
def ctr() -> tuple[pd.DataFrame, pd.Series, np.ndarray]:
    """Four categorical fields (one as strings, one an integer read by value), a numeric one; labels;
    weights, zero on the first 2,000 rows (a whole partition of 16 carries no weight)."""
    return _ctr_frame(0.03)


@pytest.fixture(scope="module")
def ctr_common() -> tuple[pd.DataFrame, pd.Series, np.ndarray]:
    """The same with 30% positives: enough for the score test to keep make_ctr's device x hour cross."""
    return _ctr_frame(0.3)


def _dask(X: pd.DataFrame, y: pd.Series, w: np.ndarray | None, n_parts: int) -> tuple:
    dw = None if w is None else dd.from_pandas(pd.Series(w, index=X.index), npartitions=n_parts)
    return dd.from_pandas(X, npartitions=n_parts), dd.from_pandas(y, npartitions=n_parts), dw


def _coefficients(cal: FeatureAwarePlattCalibrator) -> np.ndarray:
    return np.r_[cal.coef_score_, cal.intercept_, cal.coef_]


def _assert_same_fit(two: FeatureAwarePlattCalibrator, one: FeatureAwarePlattCalibrator) -> None:
    assert two.encoder_ == one.encoder_
    assert two.n_iter_ == one.n_iter_
    # Codes no row of positive weight has are exactly 0 in both; every other entry is compared relatively.
    np.testing.assert_allclose(_coefficients(two), _coefficients(one), rtol=RTOL, atol=0.0)


@pytest.mark.parametrize(
    ("n_parts", "weighted"),
    [
        (4, False),
        (16, True),
        pytest.param(4, True, marks=pytest.mark.slow),
        pytest.param(16, False, marks=pytest.mark.slow),
    ],
)
def test_dask_fit_is_the_single_machine_fit(client, ctr, n_parts, weighted) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    sw = w if weighted else None
    one = FeatureAwarePlattCalibrator(**PARAMS).fit(X, y, sample_weight=sw)
    dX, dy, dw = _dask(X, y, sw, n_parts)
    two = FeatureAwarePlattCalibrator(**PARAMS).fit(dX, dy, sample_weight=dw)
    assert one.n_iter_ >= 3  # Newton steps, not a start that is already the optimum, are compared
    _assert_same_fit(two, one)
    predicted = two.predict(dX)
    assert isinstance(predicted, dd.Series)
    np.testing.assert_allclose(
        predicted.compute().to_numpy(), np.asarray(one.predict(X)), rtol=RTOL, atol=0.0
    )


@pytest.mark.parametrize(
    ("interactions", "n_parts", "weighted"),
    [
        ([("region", "device"), ("user_segment", "p_noisy")], 8, True),
        ("auto", 4, False),
        pytest.param("auto", 16, True, marks=pytest.mark.slow),
    ],
)
def test_dask_fit_with_crosses_is_the_single_machine_fit(
    client, ctr_common, interactions, n_parts, weighted
) -> None:  # type: ignore[no-untyped-def]
    """Crosses: their levels are counted per partition and merged, so the encoder (and, with ``"auto"``,
    the pairs kept by the score test of the first-order fit) are the single machine's exactly."""
    X, y, w = ctr_common
    sw = w if weighted else None
    # tol=1e-10: the default 1e-8 leaves the last Newton step's truncated CG solve to differ by about 1e-9
    # in the smallest cross offsets, which rounding in the summed statistics can steer.
    params = {**PARAMS, "interactions": interactions, "min_cross_count": 20.0, "tol": 1e-10}
    one = FeatureAwarePlattCalibrator(**params).fit(X, y, sample_weight=sw)
    dX, dy, dw = _dask(X, y, sw, n_parts)
    two = FeatureAwarePlattCalibrator(**params).fit(dX, dy, sample_weight=dw)
    assert one.interactions_  # crosses are compared, not a first-order fit
    assert two.interactions_ == one.interactions_
    assert two.encoder_ == one.encoder_
    assert two.n_iter_ == one.n_iter_
    # A cross level's offset can be near 0 (1e-4 here): relative to the largest coefficient it agrees to
    # 1e-9 like every other (the sums are added in another order; the difference is about 1e-11).
    scale = np.abs(_coefficients(one)).max()
    np.testing.assert_allclose(_coefficients(two), _coefficients(one), rtol=RTOL, atol=1e-9 * scale)
    np.testing.assert_allclose(
        two.predict(dX).compute().to_numpy(), np.asarray(one.predict(X)), rtol=RTOL, atol=0.0
    )


def test_dask_fit_with_a_cross_the_user_computed_is_the_single_machine_fit(client, ctr) -> None:  # type: ignore[no-untyped-def]
    """A column nested in two others (device x hour computed beforehand): the nesting is found per
    partition and merged, so the deflated conjugate gradient takes the single machine's steps."""
    X, y, w = ctr
    X = X.assign(device_hour=X["device"] * 24 + X["hour"])
    params = {**PARAMS, "categorical_cols": ["hour", "device_hour"], "tol": 1e-10}
    one = FeatureAwarePlattCalibrator(**params).fit(X, y, sample_weight=w)
    two = FeatureAwarePlattCalibrator(**params).fit(*_dask(X, y, w, 8))
    _assert_same_fit(two, one)


def test_dask_fit_with_smoothing_is_the_single_machine_fit(client, ctr) -> None:  # type: ignore[no-untyped-def]
    """``l2_smooth`` with the integer rule: the partitions' summaries mark the same columns ordered (the
    integers read by value, the binned number), and the chains link the same used codes."""
    X, y, w = ctr
    params = {"n_bins": 16, "l2_smooth": 20.0}
    one = FeatureAwarePlattCalibrator(**params).fit(X, y, sample_weight=w)
    assert FeatureEncoder.from_dict(one.encoder_).ordered_ == [False, True, True, True, True]
    dX, dy, dw = _dask(X, y, w, 8)
    two = FeatureAwarePlattCalibrator(**params).fit(dX, dy, sample_weight=dw)
    _assert_same_fit(two, one)
    plain = FeatureAwarePlattCalibrator(n_bins=16).fit(X, y, sample_weight=w)
    assert not np.allclose(_coefficients(one), _coefficients(plain), rtol=1e-3, atol=0.0)


def test_warm_start_samples_the_single_machine_rows(client, ctr, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The warm start fits every 7th global row; partitions of 2,000 rows start at offsets 7 does not
    divide. With a loose ``tol`` the answer depends on the start, so other rows would give another."""
    X, y, w = (a[:12_000] for a in ctr)
    params = {**PARAMS, "tol": 1e-3}
    cold = FeatureAwarePlattCalibrator(**params).fit(X, y, sample_weight=w)
    monkeypatch.setattr(feature_platt, "WARM_START_MIN_ROWS", 1000)
    monkeypatch.setattr(feature_platt, "WARM_START_ROWS", 12_000 // 7)
    one = FeatureAwarePlattCalibrator(**params).fit(X, y, sample_weight=w)
    dX, dy, dw = _dask(X, y, w, 6)
    two = FeatureAwarePlattCalibrator(**params).fit(dX, dy, sample_weight=dw)
    _assert_same_fit(two, one)
    assert not np.allclose(_coefficients(one), _coefficients(cold), rtol=1e-6, atol=0.0)


def test_dask_fit_checks_the_whole_data(client, ctr) -> None:  # type: ignore[no-untyped-def]
    X, _, _ = ctr
    dX, dy, _ = _dask(X, pd.Series(np.ones(len(X)), index=X.index), None, 4)
    with pytest.raises(ValueError, match="no negative labels"):
        FeatureAwarePlattCalibrator(**PARAMS).fit(dX, dy)


def test_listed_among_the_distributed_fits() -> None:
    assert "FeatureAwarePlattCalibrator" in DISTRIBUTED_FITS
