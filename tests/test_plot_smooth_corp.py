"""Smooth (relplot) and CORP (isotonic) reliability curves: values against their references (issue 16)."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

from gpucal import metrics
from gpucal.plot import corp_curve, smooth_reliability_curve

relplot_estimators = pytest.importorskip("relplot.estimators")
relplot_kernels = pytest.importorskip("relplot.kernels")


def make_rows(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.beta(1.2, 2.0, n)
    y = (rng.random(n) < p**1.4).astype(np.float64)
    return y, p, rng.integers(0, 4, n).astype(np.float64)


def test_smooth_curve_equals_relplot_kernel_smoother() -> None:
    y, p, _ = make_rows(2000)
    curve = smooth_reliability_curve(y, p, n_bootstrap=0)
    smoother = relplot_estimators.KernelSmoother(relplot_kernels.ReflectedGaussianKernel(curve.sigma))
    expected = smoother.fit(p.reshape(-1, 1), y).predict(curve.mesh.reshape(-1, 1))
    assert_allclose(curve.observed, expected, rtol=1e-10, atol=1e-12)
    assert curve.smooth_ece == pytest.approx(metrics.smooth_ece(y, p), rel=1e-12)
    assert np.trapezoid(curve.density, curve.mesh) == pytest.approx(1.0)


def test_smooth_curve_band_covers_the_curve_and_is_reproducible() -> None:
    y, p, w = make_rows(1500, seed=1)
    curve = smooth_reliability_curve(y, p, sample_weight=w, n_bootstrap=40, seed=3)
    again = smooth_reliability_curve(y, p, sample_weight=w, n_bootstrap=40, seed=3)
    assert_allclose(curve.band_low, again.band_low)
    inside = (curve.band_low <= curve.observed + 1e-9) & (curve.observed <= curve.band_high + 1e-9)
    assert inside.mean() > 0.9
    assert (curve.band_high - curve.band_low).max() < 0.5


def test_smooth_curve_integer_weights_equal_repeated_rows() -> None:
    y, p, w = make_rows(800, seed=2)
    repeat = np.repeat(np.arange(p.size), w.astype(int))
    weighted = smooth_reliability_curve(y, p, sample_weight=w, n_bootstrap=0)
    repeated = smooth_reliability_curve(y[repeat], p[repeat], n_bootstrap=0)
    assert_allclose(weighted.observed, repeated.observed, rtol=1e-10)


def test_corp_curve_is_the_isotonic_fit_and_decomposes_brier() -> None:
    from sklearn.isotonic import IsotonicRegression

    y, p, w = make_rows(2000, seed=4)
    curve = corp_curve(y, p, sample_weight=w)
    expected = IsotonicRegression(out_of_bounds="clip").fit(p, y, sample_weight=w).predict(p)
    assert_allclose(curve.predict(p)[w > 0], expected[w > 0], atol=1e-12)
    assert curve.brier == pytest.approx(metrics.brier(y, p, sample_weight=w), rel=1e-10)
    assert curve.brier == pytest.approx(curve.mcb - curve.dsc + curve.unc, rel=1e-10)
    assert curve.mcb >= 0.0
    assert curve.dsc >= 0.0


def test_curves_name_bad_inputs() -> None:
    y, p, _ = make_rows(50)
    with pytest.raises(ValueError, match="y_prob"):
        corp_curve(y, p + 2.0)
    with pytest.raises(ValueError, match="'n_bootstrap' parameter of smooth_reliability_curve"):
        smooth_reliability_curve(y, p, n_bootstrap=-1)


def test_plots_draw() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from gpucal.plot import plot_corp_reliability, plot_smooth_reliability

    y, p, _ = make_rows(500)
    assert plot_smooth_reliability(y, p, n_bootstrap=10).axes
    assert plot_corp_reliability(y, p).axes
