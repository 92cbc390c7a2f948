"""SKCE and its test: equal to probcal 0.4 (unit weights) and to a direct O(n^2) numpy oracle (weights)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose

from gpucal.metrics import skce, skce_test

RTOL = 1e-11


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = np.round(rng.random(n), 3)
    y = (rng.random(n) < p**1.2).astype(np.float64)
    return y, p


def oracle(y: np.ndarray, p: np.ndarray, w: np.ndarray, kernel: str, h: float, biased: bool) -> float:
    """The definition: the weighted double sum of h_ij = 2 k(p_i, p_j) r_i r_j, O(n^2)."""
    d = np.abs(p[:, None] - p[None, :])
    k = np.exp(-d / h) if kernel == "laplace" else np.exp(-(d**2) / (2 * h * h))
    r = y - p
    full = 2.0 * np.einsum("i,j,ij,i,j->", w, w, k, r, r)
    total = w.sum()
    if biased:
        return full / total**2
    return (full - 2.0 * np.sum(w * r * r)) / (total * total - total)


@pytest.mark.parametrize(
    ("estimator", "kernel", "scale", "bandwidth"),
    [
        ("uq", "laplace", "probability", None),
        ("uq", "gaussian", "logit", None),
        ("biased", "laplace", "logit", 0.3),
        ("biased", "gaussian", "probability", 0.3),
    ],
)
def test_skce_equals_probcal(estimator: str, kernel: str, scale: str, bandwidth: float | None) -> None:
    from probcal.metrics.kernel import skce as probcal_skce

    y, p = make_data(1500, 0)
    ours = skce(y, p, estimator=estimator, kernel=kernel, scale=scale, bandwidth=bandwidth)
    ref = probcal_skce(y, p, estimator=estimator, kernel=kernel, scale=scale, bandwidth=bandwidth)
    assert_allclose(ours.statistic, ref, rtol=RTOL)


@pytest.mark.parametrize("kernel", ["laplace", "gaussian"])
@pytest.mark.parametrize("biased", [False, True])
def test_weighted_skce_equals_the_oracle_and_repeated_rows(kernel: str, biased: bool) -> None:
    y, p = make_data(400, 1)
    w = np.random.default_rng(2).integers(0, 4, y.shape[0]).astype(np.float64)
    estimator = "biased" if biased else "uq"
    ours = skce(y, p, sample_weight=w, estimator=estimator, kernel=kernel, bandwidth=0.2).statistic
    assert_allclose(ours, oracle(y, p, w, kernel, 0.2, biased), rtol=RTOL)
    rows = np.repeat(np.arange(y.shape[0]), w.astype(np.int64))
    repeated = skce(y[rows], p[rows], estimator=estimator, kernel=kernel, bandwidth=0.2).statistic
    assert_allclose(ours, repeated, rtol=RTOL)


def test_skce_test_equals_probcal_on_its_pairing() -> None:
    from probcal.metrics.kernel import skce_test as probcal_test

    y, p = make_data(1001, 3)
    ref = probcal_test(y, p, method="asymptotic", random_state=7)
    perm = np.random.default_rng(7).permutation(y.shape[0])
    m = y.shape[0] // 2
    order = np.empty(2 * m + 1, dtype=np.int64)
    order[0:-1:2], order[1:-1:2], order[-1] = perm[0::2][:m], perm[1::2][:m], perm[-1]
    ours = skce_test(y[order], p[order], bandwidth=ref.bandwidth)
    for name in ("statistic", "p_value", "p_value_bound"):
        assert_allclose(getattr(ours, name), getattr(ref, name), rtol=RTOL, err_msg=name)
    assert (ours.estimator, ours.method, ours.n_boot) == ("ul", "asymptotic", None)
    # The default bandwidth is probcal's median heuristic (strided rows of the input as given).
    assert skce_test(y, p).bandwidth == probcal_test(y, p, method="asymptotic").bandwidth


def test_skce_test_reads_weights_as_importances() -> None:
    """Scaling every weight leaves the test as it is (the effective number of pairs, not the weights'
    total, sets its spread), and rows of weight 0 do not move the median-heuristic bandwidth."""
    y, p = make_data(1000, 4)
    y = (np.random.default_rng(5).random(y.shape[0]) < np.clip(p + 0.1, 0, 1)).astype(np.float64)
    w = np.random.default_rng(6).uniform(0.5, 2.0, y.shape[0])
    base = skce_test(y, p, sample_weight=w)
    assert 1e-12 < base.p_value < 0.5
    for scale in (1e-4, 1.0 / w.sum(), 4.0):
        scaled = skce_test(y, p, sample_weight=w * scale)
        assert_allclose(scaled.p_value, base.p_value, rtol=1e-9)
        assert_allclose(scaled.p_value_bound, base.p_value_bound, rtol=1e-9)
    padded_p = np.concatenate([p, np.full(3000, 0.999)])
    padded_y = np.concatenate([y, np.zeros(3000)])
    padded_w = np.concatenate([np.ones(y.shape[0]), np.zeros(3000)])
    assert skce(padded_y, padded_p, sample_weight=padded_w).bandwidth == skce(y, p).bandwidth
    with pytest.raises(ValueError, match="one pair of rows carries all the weight"):
        skce_test(y[:4], p[:4], sample_weight=[1.0, 1.0, 0.0, 0.0])
    # A stride (2 at 5,000 rows) meeting only rows of weight 0 falls back to the rows of positive
    # weight, strided among themselves: the bandwidth of those rows alone.
    y, p = make_data(5000, 7)
    odd = (np.arange(5000) % 2).astype(np.float64)
    assert skce(y, p, sample_weight=odd).bandwidth == skce(y[1::2], p[1::2]).bandwidth


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: skce([0, 1], [0.5, 0.5]), "identical"),
        # One row of positive weight: numpy warned of an empty mean first ("Mean of empty slice").
        (lambda: skce([0, 1, 1], [0.2, 0.6, 0.7], sample_weight=[0.0, 3.0, 0.0]), "identical"),
        (lambda: skce([0, 1], [0.2, 0.6], bandwidth=0.0), "'bandwidth' parameter"),
        (lambda: skce([0, 1], [0.2, 1.6]), r"\[0, 1\]"),
        (lambda: skce_test([0, 1, 1], [0.2, 0.6, 0.7]), "at least 4 rows"),
        (lambda: skce([0, 1, 1], [0.2, 0.6, 0.7], kernel="cosine"), "'kernel' parameter"),
    ],
)
def test_bad_input(call: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_dask_equals_one_machine(client: Any) -> None:
    dd = pytest.importorskip("dask.dataframe")
    y, p = make_data(1200, 4)
    w = np.random.default_rng(5).random(y.shape[0])
    frame = pd.DataFrame({"y": y, "p": p, "w": w})
    ddf = dd.from_pandas(frame, npartitions=7)  # blocks starting at odd rows: pairs across blocks
    assert_allclose(
        skce(ddf.y, ddf.p, sample_weight=ddf.w).statistic, skce(y, p, sample_weight=w).statistic, rtol=1e-12
    )
    local, dist = skce_test(y, p, sample_weight=w), skce_test(ddf.y, ddf.p, sample_weight=ddf.w)
    assert_allclose([dist.statistic, dist.p_value], [local.statistic, local.p_value], rtol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_median_distance_equals_the_materialised_median(seed: int) -> None:
    """The counted median of the pairwise distances is numpy's median of all of them, to the bit (ties,
    an even and an odd number of pairs, a median of 0 that falls back to the mean)."""
    from gpucal.metrics.kernel_calibration import _median_distance

    rng = np.random.default_rng(seed)
    for m in (2, 3, 50, 301):
        for s in (
            rng.random(m),
            np.round(rng.random(m), 1),
            np.where(rng.random(m) < 0.8, 0.5, rng.random(m)),
        ):
            if np.all(s == s[0]):
                continue
            d = np.abs(s[:, None] - s[None, :])[np.triu_indices(m, k=1)]
            expected = float(np.median(d)) or float(np.mean(d))
            assert _median_distance(s) == expected
