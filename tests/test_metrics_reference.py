"""gpucal.metrics against reference libraries: scikit-learn and netcal.

Reference libraries, not re-implementations: sklearn's log_loss, brier_score_loss, roc_auc_score and
calibration_curve; netcal's ECE, MCE and ACE (equal-width bins, binary input = probability of class 1).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss, roc_auc_score
from sklearn.metrics import log_loss as sk_log_loss

from gpucal import metrics
from gpucal.metrics.binned import binned_stats
from gpucal.metrics.inputs import metric_rows

RTOL = 1e-12


def make_data(n: int, seed: int, *, ties: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.beta(0.6, 0.9, n)
    if ties:
        p = np.round(p, 1)
    y = (rng.random(n) < p**1.4).astype(np.float64)
    w = rng.integers(1, 5, n).astype(np.float64)
    return y, p, w


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ties", [False, True])
def test_log_loss_brier_auc_match_sklearn(weighted: bool, ties: bool) -> None:
    y, p, w = make_data(5000, 1, ties=ties)
    sw = w if weighted else None
    assert_allclose(metrics.log_loss(y, p, sample_weight=sw), sk_log_loss(y, p, sample_weight=sw), rtol=RTOL)
    assert_allclose(
        metrics.brier(y, p, sample_weight=sw), brier_score_loss(y, p, sample_weight=sw), rtol=RTOL
    )
    assert_allclose(metrics.roc_auc(y, p, sample_weight=sw), roc_auc_score(y, p, sample_weight=sw), rtol=RTOL)


def test_log_loss_clips_exact_zero_and_one_like_sklearn() -> None:
    y = np.array([0.0, 1.0, 1.0, 0.0])
    p = np.array([0.0, 1.0, 0.0, 1.0])
    assert_allclose(metrics.log_loss(y, p), sk_log_loss(y, p), rtol=RTOL)


@pytest.mark.parametrize("scale", [1e-170, 1e170, 2.0**-1000, 2.0**1000])
def test_auc_does_not_depend_on_the_weights_scale(scale: float) -> None:
    y, p, w = make_data(2000, 7, ties=True)
    unit = metrics.roc_auc(y, p, sample_weight=w)
    scaled = metrics.roc_auc(y, p, sample_weight=w * scale)
    assert scaled == (unit if math.frexp(scale)[0] == 0.5 else pytest.approx(unit, rel=1e-13))


def test_auc_all_tied_is_one_half() -> None:
    y = np.array([0, 1, 0, 1, 1])
    assert metrics.roc_auc(y, np.full(5, 0.3)) == 0.5
    assert roc_auc_score(y, np.full(5, 0.3)) == 0.5


@pytest.mark.parametrize("n_bins", [1, 5, 10, 15, 40])
@pytest.mark.parametrize("ties", [False, True])
def test_uniform_bins_match_calibration_curve(n_bins: int, ties: bool) -> None:
    y, p, _ = make_data(3000, 2, ties=ties)
    # Probabilities on the edges, where right-closed and left-closed bins differ.
    p[: n_bins + 1] = np.linspace(0.0, 1.0, n_bins + 1)
    prob_true, prob_pred = calibration_curve(y, p, n_bins=n_bins, strategy="uniform")
    stats = binned_stats(metric_rows(y, p, None), n_bins, "uniform")
    kept = stats[stats[:, 1] > 0]
    assert_allclose(kept[:, 3] / kept[:, 1], prob_true, rtol=RTOL)
    assert_allclose(kept[:, 2] / kept[:, 1], prob_pred, rtol=RTOL)


@pytest.fixture(scope="module")
def netcal_metrics():  # type: ignore[no-untyped-def]
    return pytest.importorskip("netcal.metrics")


@pytest.mark.parametrize("n_bins", [5, 15, 30])
def test_ece_mce_ace_match_netcal(netcal_metrics, n_bins: int) -> None:  # type: ignore[no-untyped-def]
    # Continuous probabilities: netcal's bins are closed on the left, gpucal's (sklearn's) on the right;
    # they differ only for a probability exactly on an edge.
    y, p, _ = make_data(20000, 3)
    yi = y.astype(np.int64)
    assert_allclose(metrics.ece(y, p, n_bins=n_bins), netcal_metrics.ECE(n_bins).measure(p, yi), rtol=1e-9)
    assert_allclose(metrics.mce(y, p, n_bins=n_bins), netcal_metrics.MCE(n_bins).measure(p, yi), rtol=1e-9)
    assert_allclose(
        metrics.ece(y, p, n_bins=n_bins, weighting="equal"),
        netcal_metrics.ACE(n_bins).measure(p, yi),
        rtol=1e-9,
    )
