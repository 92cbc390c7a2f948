"""Murphy's decomposition of the log-loss: equal to its definition computed in numpy, and its identities."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose
from scipy.special import xlogy
from sklearn.metrics import log_loss

from gpucal.metrics import murphy_decomposition, murphy_decomposition_log_loss


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.beta(0.8, 1.5, n)
    y = (rng.random(n) < np.clip(1.3 * p**1.4, 0, 1)).astype(np.float64)
    return y, p


def oracle(y: np.ndarray, p: np.ndarray, w: np.ndarray, n_bins: int) -> dict[str, float]:
    """The definition over equal-width groups (a score on an edge goes to the upper group)."""
    group = np.searchsorted(np.linspace(0, 1, n_bins + 1)[1:-1], p, side="right")
    entropy = lambda q: -(xlogy(q, q) + xlogy(1 - q, 1 - q))  # noqa: E731
    kl = lambda q, r: xlogy(q, q / r) + xlogy(1 - q, (1 - q) / (1 - r))  # noqa: E731
    y_bar = np.average(y, weights=w)
    out = {"reliability": 0.0, "resolution": 0.0, "refinement": 0.0}
    for g in np.unique(group[w > 0]):
        m = (group == g) & (w > 0)
        share, rate, mean_p = (
            w[m].sum() / w.sum(),
            np.average(y[m], weights=w[m]),
            np.average(p[m], weights=w[m]),
        )
        out["reliability"] += share * kl(rate, mean_p)
        out["resolution"] += share * kl(rate, y_bar)
        out["refinement"] += share * entropy(rate)
    out["uncertainty"] = entropy(y_bar)
    out["log_loss"] = log_loss(y, p, sample_weight=w)
    out["calibration"] = out["log_loss"] - out["refinement"]
    return out


@pytest.mark.parametrize("weighted", [False, True])
def test_equals_the_definition(weighted: bool) -> None:
    y, p = make_data(3000, 0)
    w = np.random.default_rng(1).integers(0, 3, y.shape[0]).astype(np.float64) if weighted else np.ones(3000)
    ours = murphy_decomposition_log_loss(
        y, p, sample_weight=w if weighted else None, n_bins=8, strategy="uniform"
    )
    for name, value in oracle(y, p, w, 8).items():
        assert_allclose(getattr(ours, name), value, rtol=1e-12, err_msg=name)
    assert_allclose(ours.refinement, ours.uncertainty - ours.resolution, rtol=1e-12)
    if weighted:
        rows = np.repeat(np.arange(y.shape[0]), w.astype(np.int64))
        repeated = murphy_decomposition_log_loss(y[rows], p[rows], n_bins=8, strategy="uniform")
        assert_allclose(
            np.array(list(vars(ours).values())), np.array(list(vars(repeated).values())), rtol=1e-12
        )


def test_constant_groups_calibration_is_reliability() -> None:
    rng = np.random.default_rng(2)
    p = rng.choice([0.1, 0.3, 0.5, 0.7, 0.9], 2000)
    y = (rng.random(2000) < p**1.3).astype(np.float64)
    ours = murphy_decomposition_log_loss(y, p, n_bins=5, strategy="uniform")
    assert_allclose(ours.calibration, ours.reliability, rtol=1e-10)
    assert ours.reliability > 0
    brier = murphy_decomposition(y, p, n_bins=5, strategy="uniform")
    assert_allclose(
        ours.uncertainty, -(np.mean(y) * np.log(np.mean(y)) + (1 - np.mean(y)) * np.log1p(-np.mean(y)))
    )
    assert_allclose(brier.uncertainty, np.mean(y) * (1 - np.mean(y)))


def test_dask_equals_one_machine(client: Any) -> None:
    dd = pytest.importorskip("dask.dataframe")
    y, p = make_data(1000, 3)
    frame = pd.DataFrame({"y": y, "p": p, "w": np.random.default_rng(4).random(1000)})
    ddf = dd.from_pandas(frame, npartitions=4)
    local = murphy_decomposition_log_loss(frame.y, frame.p, sample_weight=frame.w)
    dist = murphy_decomposition_log_loss(ddf.y, ddf.p, sample_weight=ddf.w)
    assert_allclose(np.array(list(vars(dist).values())), np.array(list(vars(local).values())), rtol=1e-12)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="'n_bins' parameter"):
        murphy_decomposition_log_loss([0, 1], [0.2, 0.6], n_bins=0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        murphy_decomposition_log_loss([0, 1], [0.2, 1.6])
