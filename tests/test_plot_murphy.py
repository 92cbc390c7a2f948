"""The Murphy diagram: equal to probcal 0.4's ``murphy_curve``, and its Brier identity."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

from gpucal.metrics import brier
from gpucal.plot import murphy_curve, plot_murphy_curve


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = np.round(rng.random(n), 3)
    return (rng.random(n) < p**1.2).astype(np.float64), p, rng.random(n)


@pytest.mark.parametrize("thresholds", [513, np.array([0.0, 0.25, 0.5, 0.999, 1.0])])
def test_equals_probcal(thresholds: object) -> None:
    from probcal.metrics import murphy_curve as probcal_curve

    y, p, w = make_data(2000, 0)
    ours = murphy_curve(y, p, sample_weight=w, thresholds=thresholds)
    ref = probcal_curve(y, p, sample_weight=w, thresholds=thresholds)
    assert_allclose(ours.thresholds, ref.thresholds)
    assert_allclose(ours.score, ref.score, rtol=1e-12, atol=1e-15)
    assert ours.n == ref.n


def test_twice_the_integral_is_the_brier_score() -> None:
    y, p, w = make_data(500, 1)
    u = np.unique(np.concatenate([p, [0.0, 1.0]]))
    mid = (u[:-1] + u[1:]) / 2  # the score is linear between breakpoints: the midpoint rule is exact
    curve = murphy_curve(y, p, sample_weight=w, thresholds=mid)
    assert_allclose(2.0 * np.sum(curve.score * np.diff(u)), brier(y, p, sample_weight=w), rtol=1e-12)


def test_bad_thresholds_and_plot() -> None:
    y, p, _ = make_data(100, 2)
    with pytest.raises(ValueError, match="thresholds"):
        murphy_curve(y, p, thresholds=[1.5])
    with pytest.raises(ValueError, match="at least 2"):
        murphy_curve(y, p, thresholds=1)
    plt = pytest.importorskip("matplotlib.pyplot")
    fig = plot_murphy_curve(y, {"raw": p, "squared": p**2}, thresholds=51)
    assert len(fig.axes[0].lines) == 2
    plt.close(fig)
