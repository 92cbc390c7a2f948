"""gpucal.evaluate reports ECCE, MCE (with its sigma) and smooth ECE by default (issue 16)."""

from __future__ import annotations

import numpy as np
import pytest

import gpucal
from gpucal import metrics


def test_evaluate_reports_ecce_mce_and_smooth_ece() -> None:
    rng = np.random.default_rng(0)
    n = 3000
    site = rng.integers(0, 3, n)
    p = rng.random(n)
    y = (rng.random(n) < np.clip(p + 0.1 * (site == 1), 0, 1)).astype(np.float64)
    w = rng.random(n) + 0.5
    table = gpucal.evaluate(y, {"raw": p}, sample_weight=w, fields={"site": site})
    column = table["raw"]
    assert column["ecce"] == pytest.approx(metrics.ecce(y, p, sample_weight=w), rel=1e-12)
    assert column["ecce_sigma"] == pytest.approx(metrics.ecce_sigma(y, p, sample_weight=w), rel=1e-12)
    assert column["smooth_ece"] == pytest.approx(metrics.smooth_ece(y, p, sample_weight=w), rel=1e-12)
    mce = metrics.multicalibration_error(y, p, {"site": site}, sample_weight=w)
    assert (column["mce"], column["mce_sigma"]) == pytest.approx((mce.mce, mce.mce_sigma), rel=1e-12)
    assert column["mce_sigma"] > column["ecce_sigma"]  # the planted segment error is beyond the global one


def test_evaluate_without_fields_reports_the_global_segment() -> None:
    rng = np.random.default_rng(1)
    p = rng.random(500)
    y = (rng.random(500) < p).astype(np.float64)
    column = gpucal.evaluate(y, {"raw": p})["raw"]
    assert (column["mce"], column["mce_sigma"]) == (column["ecce"], column["ecce_sigma"])


def test_evaluate_reports_the_classical_tests() -> None:
    rng = np.random.default_rng(2)
    p = rng.random(800)
    y = (rng.random(800) < p**1.3).astype(np.float64)
    table = gpucal.evaluate(y, {"raw": p, "constant": np.full(800, 0.4)})
    column = table["raw"]
    assert column["hosmer_lemeshow_p"] == metrics.hosmer_lemeshow(y, p).p_value
    assert column["spiegelhalter_p"] == metrics.spiegelhalter_z(y, p).p_value
    assert column["calibration_slope"] == metrics.calibration_slope(y, p).slope
    assert column["calibration_intercept"] == metrics.calibration_intercept(y, p).intercept
    assert column["skce"] == metrics.skce(y, p).statistic
    assert np.isnan(table["constant"]["calibration_slope"])
    assert np.isnan(table["constant"]["skce"])
