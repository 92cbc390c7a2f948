"""Venn-Abers, centred isotonic, ENIR, BBQ, spline and hinge Platt calibration on dask collections:
the one-machine fit.

The reference is the same estimator on the concatenated pandas rows. The fits read sums per distinct
score (merged over partitions in another order), so tables and predictions agree to 1e-9 relative; the
cross predictor's folds depend on the global row index only, so they are the same on any partitioning.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")

from gpucal import make_calibrator  # noqa: E402
from gpucal.rows.streamed import STREAM_KEY  # noqa: E402

RTOL = 1e-9


def _frame(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    score = np.round(rng.beta(0.8, 1.5, n), 3)
    y = (rng.random(n) < np.clip(1.3 * score**1.4, 0, 1)).astype(np.float64)
    w = rng.random(n) * 2.0
    w[rng.random(n) < 0.05] = 0.0
    return pd.DataFrame({"score": score, "y": y, "w": w})


CASES = [
    ("venn_abers", {}),
    ("venn_abers", {"n_folds": 4, "random_state": 3}),
    ("centered_isotonic", {}),
    ("enir", {}),
]


@pytest.mark.parametrize("streamed", [False, True], ids=["held", "streamed"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize(("name", "params"), CASES, ids=["ivap", "cvap", "cir", "enir"])
def test_dask_fit_is_the_one_machine_fit(
    client, name: str, params: dict, weighted: bool, streamed: bool
) -> None:  # type: ignore[no-untyped-def]
    frame = _frame()
    ddf = dd.from_pandas(frame, npartitions=7)
    w_local = frame.w if weighted else None
    w_dask = ddf.w if weighted else None
    local = make_calibrator(name, **params).fit(frame[["score"]], frame.y, sample_weight=w_local)
    with dask.config.set({STREAM_KEY: streamed}):
        dist = make_calibrator(name, **params).fit(ddf[["score"]], ddf.y, sample_weight=w_dask)
    for attr in local._state_spec:
        assert_allclose(getattr(dist, attr), getattr(local, attr), rtol=RTOL, atol=0, err_msg=attr)
    test = np.linspace(0, 1, 401)
    assert_allclose(dist.predict(test), local.predict(test), rtol=RTOL, atol=0)
    predicted = dist.predict(ddf[["score"]]).compute()
    assert_allclose(predicted.to_numpy(), local.predict(frame[["score"]]).to_numpy(), rtol=RTOL)


def test_spline_dask_fit_is_the_one_machine_fit(client) -> None:  # type: ignore[no-untyped-def]
    frame = _frame(800)
    ddf = dd.from_pandas(frame, npartitions=3)
    params = {"n_knots": 6, "reg_params": [0.1]}
    local = make_calibrator("spline", **params).fit(frame[["score"]], frame.y, sample_weight=frame.w)
    dist = make_calibrator("spline", **params).fit(ddf[["score"]], ddf.y, sample_weight=ddf.w)
    for attr in local._state_spec:
        assert_allclose(getattr(dist, attr), getattr(local, attr), rtol=RTOL, atol=1e-12, err_msg=attr)
    test = np.linspace(0, 1, 401)
    assert_allclose(dist.predict(test), local.predict(test), rtol=RTOL, atol=0)


@pytest.mark.parametrize("n", [1000, 40_000])  # 40,000: the fit on the series of the logit's bins
def test_hinge_platt_dask_fit_is_the_one_machine_fit(client, n: int) -> None:  # type: ignore[no-untyped-def]
    frame = _frame(n)
    ddf = dd.from_pandas(frame, npartitions=4)
    local = make_calibrator("platt_hinge").fit(frame[["score"]], frame.y, sample_weight=frame.w)
    dist = make_calibrator("platt_hinge").fit(ddf[["score"]], ddf.y, sample_weight=ddf.w)
    for attr in local._state_spec:
        assert_allclose(getattr(dist, attr), getattr(local, attr), rtol=RTOL, atol=1e-12, err_msg=attr)
    test = np.linspace(0, 1, 401)
    assert_allclose(dist.predict(test), local.predict(test), rtol=RTOL, atol=0)


def test_bbq_dask_fit_is_the_one_machine_fit(client) -> None:  # type: ignore[no-untyped-def]
    frame = _frame(1000)
    ddf = dd.from_pandas(frame, npartitions=4)
    local = make_calibrator("bbq").fit(frame[["score"]], frame.y, sample_weight=frame.w)
    dist = make_calibrator("bbq").fit(ddf[["score"]], ddf.y, sample_weight=ddf.w)
    for attr in local._state_spec:
        assert_allclose(getattr(dist, attr), getattr(local, attr), rtol=RTOL, atol=1e-15, err_msg=attr)
