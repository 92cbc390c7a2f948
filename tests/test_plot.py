"""Tests of gpucal.plot: the reliability curve's numbers, its bootstrap band, and the figures."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.calibration import calibration_curve

from gpucal.metrics import ece
from gpucal.plot import ReliabilityCurve, auto_n_bins, reliability_curve
from gpucal.plot._bootstrap import (
    poisson_bin_sums,
    poisson_bin_sums_oracle,
    poisson_multipliers,
)
from gpucal.plot.curve import _bootstrap_sums


def make_rows(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Labels drawn from a miscalibrated score: true rate sqrt(p), so the curve sits above the diagonal."""
    rng = np.random.default_rng(seed)
    p = rng.random(n) ** 2
    y = (rng.random(n) < np.sqrt(p)).astype(np.float64)
    return y, p


def numpy_curve(y, p, w, n_bins, strategy):
    """Independent per-bin (mean prediction, observed rate, weight) of the non-empty bins."""
    if strategy == "uniform":
        codes = np.searchsorted(np.linspace(0, 1, n_bins + 1)[1:-1], p, side="left")
    else:
        # S_<: the weight strictly below each row's prediction; bin floor(n_bins * S_< / W).
        below = np.array([w[p < pi].sum() for pi in p])
        codes = np.minimum(np.floor(n_bins * below / w.sum()), n_bins - 1).astype(int)
    sw = np.bincount(codes, weights=w, minlength=n_bins)
    swp = np.bincount(codes, weights=w * p, minlength=n_bins)
    swy = np.bincount(codes, weights=w * y, minlength=n_bins)
    keep = sw > 0
    return swp[keep] / sw[keep], swy[keep] / sw[keep], sw[keep]


# --- the curve's point estimates -------------------------------------------------------------------


@pytest.mark.parametrize("n_bins", [1, 5, 10, 23])
def test_uniform_matches_sklearn_calibration_curve(n_bins):
    y, p = make_rows(3000, seed=n_bins)
    # Predictions exactly on the edges check that bins are closed on the right, as sklearn's.
    p[: n_bins + 1] = np.linspace(0, 1, n_bins + 1)
    curve = reliability_curve(y, p, n_bins=n_bins, n_bootstrap=0)
    prob_true, prob_pred = calibration_curve(y, p, n_bins=n_bins, strategy="uniform")
    # Same bins and the same sums in another order: agreement to rounding.
    assert_allclose(curve.observed, prob_true, rtol=1e-12, atol=1e-15)
    assert_allclose(curve.mean_predicted, prob_pred, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_weighted_curve_matches_numpy(strategy):
    y, p = make_rows(400, seed=1)
    p = np.round(p, 2)  # ties, which quantile bins must keep together
    w = np.random.default_rng(2).gamma(1.0, size=400)
    w[::7] = 0.0
    curve = reliability_curve(y, p, sample_weight=w, n_bins=8, strategy=strategy, n_bootstrap=0)
    mean_p, rate, weight = numpy_curve(y, p, w, 8, strategy)
    assert_allclose(curve.mean_predicted, mean_p, rtol=1e-12)
    assert_allclose(curve.observed, rate, rtol=1e-12, atol=1e-15)
    assert_allclose(curve.weight, weight, rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    n_rows=st.integers(1, 60),
    n_bins=st.integers(1, 12),
    strategy=st.sampled_from(["uniform", "quantile"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_curve_matches_numpy_property(n_rows, n_bins, strategy, seed):
    rng = np.random.default_rng(seed)
    # Predictions on a coarse grid (ties, edges, 0 and 1), soft labels, some zero weights.
    p = rng.integers(0, 11, size=n_rows) / 10.0
    y = rng.random(n_rows)
    w = rng.gamma(1.0, size=n_rows) * (rng.random(n_rows) < 0.8)
    w[0] = 1.0  # never all zero
    curve = reliability_curve(y, p, sample_weight=w, n_bins=n_bins, strategy=strategy, n_bootstrap=0)
    mean_p, rate, weight = numpy_curve(y, p, w, n_bins, strategy)
    assert_allclose(curve.mean_predicted, mean_p, rtol=1e-12)
    assert_allclose(curve.observed, rate, rtol=1e-12, atol=1e-15)
    assert_allclose(curve.weight, weight, rtol=1e-12)


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_integer_weights_equal_repeated_rows(strategy):
    y, p = make_rows(500, seed=3)
    counts = np.random.default_rng(4).integers(0, 4, size=500)
    weighted = reliability_curve(y, p, sample_weight=counts, n_bins=6, strategy=strategy, n_bootstrap=0)
    repeated = reliability_curve(
        np.repeat(y, counts), np.repeat(p, counts), n_bins=6, strategy=strategy, n_bootstrap=0
    )
    assert_allclose(weighted.mean_predicted, repeated.mean_predicted, rtol=1e-12)
    assert_allclose(weighted.observed, repeated.observed, rtol=1e-12, atol=1e-15)
    assert_allclose(weighted.lower, repeated.lower)
    assert_allclose(weighted.upper, repeated.upper)


def test_unit_weights_equal_no_weights_band_included():
    y, p = make_rows(2000, seed=5)
    a = reliability_curve(y, p, n_bins=7, n_bootstrap=50, seed=3)
    b = reliability_curve(y, p, sample_weight=np.ones(2000), n_bins=7, n_bootstrap=50, seed=3)
    assert_array_equal(a.observed, b.observed)
    assert_array_equal(a.band_low, b.band_low)
    assert_array_equal(a.band_high, b.band_high)


def test_empty_bins_are_dropped_not_zero():
    y, p = make_rows(1000, seed=6)
    p = 0.3 * p  # every prediction below 0.3: bins 3..9 of 10 are empty
    curve = reliability_curve(y, p, n_bins=10, n_bootstrap=0)
    assert_array_equal(curve.bin_index, [0, 1, 2])
    assert_allclose(curve.lower, [0.0, 0.1, 0.2])
    assert_allclose(curve.upper, [0.1, 0.2, 0.3])
    assert curve.count.sum() == 1000
    assert curve.n_bins == 10


def test_zero_weight_bin_is_dropped():
    p = np.array([0.05, 0.15, 0.55, 0.95])
    curve = reliability_curve([0, 1, 1, 0], p, sample_weight=[1.0, 1.0, 0.0, 1.0], n_bins=2, n_bootstrap=0)
    # Bin (0.5, 1] holds 0.55 (weight 0) and 0.95 (weight 1): kept; nothing else is empty.
    assert_array_equal(curve.bin_index, [0, 1])
    curve = reliability_curve([0, 1, 1, 0], p, sample_weight=[1.0, 1.0, 0.0, 0.0], n_bins=2, n_bootstrap=0)
    assert_array_equal(curve.bin_index, [0])


def test_quantile_ranges_hold_their_rows():
    y, p = make_rows(2000, seed=7)
    curve = reliability_curve(y, p, n_bins=10, strategy="quantile", n_bootstrap=0)
    assert curve.bin_index.size == 10
    assert (curve.lower <= curve.mean_predicted).all()
    assert (curve.mean_predicted <= curve.upper).all()
    assert (curve.upper[:-1] < curve.lower[1:]).all()
    assert_allclose(curve.count, 200)  # no ties: equal-mass bins of exactly n / n_bins rows


@pytest.mark.parametrize("family", ["list", "pandas", "polars"])
def test_input_families(family):
    y, p = make_rows(300, seed=8)
    w = np.linspace(0.5, 2.0, 300)
    if family == "list":
        args = (y.tolist(), p.tolist(), w.tolist())
    elif family == "pandas":
        args = (pd.Series(y), pd.Series(p), pd.Series(w))
    else:
        pl = pytest.importorskip("polars")
        args = (pl.Series(y), pl.Series(p), pl.Series(w))
    got = reliability_curve(args[0], args[1], sample_weight=args[2], n_bins=5, n_bootstrap=20)
    want = reliability_curve(y, p, sample_weight=w, n_bins=5, n_bootstrap=20)
    assert_array_equal(got.observed, want.observed)
    assert_array_equal(got.band_high, want.band_high)


def test_to_frame():
    y, p = make_rows(500, seed=9)
    curve = reliability_curve(y, p, n_bins=4, n_bootstrap=10)
    frame = curve.to_frame()
    assert list(frame.columns) == [
        "bin",
        "lower",
        "upper",
        "mean_predicted",
        "observed",
        "count",
        "weight",
        "band_low",
        "band_high",
    ]
    assert_array_equal(frame["observed"].to_numpy(), curve.observed)


# --- the bin-count rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_eff", "expected"),
    [(1, 5), (10, 5), (100, 10), (1000, 20), (10_000, 44), (15_625, 50), (10**8, 50)],
)
def test_auto_n_bins_rule(n_eff, expected):
    assert auto_n_bins(n_eff) == expected


def test_auto_uses_effective_sample_size():
    y, p = make_rows(2000, seed=10)
    assert reliability_curve(y, p, n_bootstrap=0).n_bins == auto_n_bins(2000)
    # Half the rows at weight 0: n_eff = (1000)^2 / 1000 = 1000 -> 20 bins.
    w = np.r_[np.ones(1000), np.zeros(1000)]
    curve = reliability_curve(y, p, sample_weight=w, n_bootstrap=0)
    assert curve.n_eff == pytest.approx(1000.0)
    assert curve.n_bins == 20
    # Scaling the weights changes nothing.
    assert reliability_curve(y, p, sample_weight=7.5 * w, n_bootstrap=0).n_bins == 20


# --- the bootstrap band ----------------------------------------------------------------------------


@pytest.mark.parametrize("weighted", [False, True])
def test_band_contains_estimate_and_is_reproducible(weighted):
    y, p = make_rows(20_000, seed=11)
    w = np.random.default_rng(12).gamma(2.0, size=20_000) if weighted else None
    curve = reliability_curve(y, p, sample_weight=w, n_bins=10, n_bootstrap=200, seed=4)
    assert (curve.band_low <= curve.observed).all()
    assert (curve.observed <= curve.band_high).all()
    assert (curve.band_low < curve.band_high).all()
    again = reliability_curve(y, p, sample_weight=w, n_bins=10, n_bootstrap=200, seed=4)
    assert_array_equal(curve.band_low, again.band_low)
    assert_array_equal(curve.band_high, again.band_high)
    other = reliability_curve(y, p, sample_weight=w, n_bins=10, n_bootstrap=200, seed=5)
    assert not np.array_equal(curve.band_low, other.band_low)


@pytest.mark.parametrize("weighted", [False, True])
def test_band_narrows_with_more_data(weighted):
    widths = []
    for n in (2_000, 50_000):
        y, p = make_rows(n, seed=13)
        w = np.random.default_rng(14).gamma(2.0, size=n) if weighted else None
        curve = reliability_curve(y, p, sample_weight=w, n_bins=5, n_bootstrap=200)
        widths.append(np.mean(curve.band_high - curve.band_low))
    # Width goes as 1/sqrt(n): a factor 5 expected for 25 times the rows; 2.5 leaves room for noise.
    assert widths[1] < widths[0] / 2.5


def test_band_width_matches_binomial_standard_error():
    y, p = make_rows(40_000, seed=15)
    curve = reliability_curve(y, p, n_bins=5, n_bootstrap=1000, confidence=0.9)
    se = np.sqrt(curve.observed * (1 - curve.observed) / curve.count)
    # 90% normal interval is +-1.645 se; 1000 replicates estimate the width to a few percent.
    assert_allclose(curve.band_high - curve.band_low, 2 * 1.645 * se, rtol=0.15)


def test_no_bootstrap_gives_nan_band():
    y, p = make_rows(100, seed=16)
    curve = reliability_curve(y, p, n_bins=3, n_bootstrap=0)
    assert np.isnan(curve.band_low).all()
    assert np.isnan(curve.band_high).all()


def test_row_kernel_matches_numpy_oracle():
    rng = np.random.default_rng(17)
    codes = rng.integers(0, 6, size=3000).astype(np.int32)
    w = rng.gamma(1.0, size=3000)
    wy = w * (rng.random(3000) < 0.3)
    got = poisson_bin_sums(codes, w, wy, 6, 7, seed=21)
    want = poisson_bin_sums_oracle(codes, w, wy, 6, 7, seed=21)
    # Both add the same products in row order.
    assert_allclose(got, want, rtol=1e-13)


def test_row_kernel_does_not_depend_on_thread_count():
    import numba

    rng = np.random.default_rng(27)
    codes = rng.integers(0, 4, size=2000).astype(np.int32)
    w = rng.gamma(1.0, size=2000)
    wy = w * (rng.random(2000) < 0.5)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        single = poisson_bin_sums(codes, w, wy, 4, 9, seed=5)
    finally:
        numba.set_num_threads(threads)
    assert_array_equal(poisson_bin_sums(codes, w, wy, 4, 9, seed=5), single)


def test_poisson_multipliers_follow_poisson_one():
    m = poisson_multipliers(seed=3, replicate=0, n_rows=200_000)
    assert m.mean() == pytest.approx(1.0, abs=0.01)
    assert m.var() == pytest.approx(1.0, abs=0.02)
    pmf = np.exp(-1.0) / np.array([1, 1, 2, 6, 24])
    assert_allclose(np.bincount(m, minlength=5)[:5] / m.size, pmf, atol=0.005)
    # Replicates and seeds are different streams.
    assert abs(np.corrcoef(m, poisson_multipliers(seed=3, replicate=1, n_rows=200_000))[0, 1]) < 0.01
    assert abs(np.corrcoef(m, poisson_multipliers(seed=4, replicate=0, n_rows=200_000))[0, 1]) < 0.01


def test_pooled_shortcut_matches_row_bootstrap_in_distribution():
    y, p = make_rows(5000, seed=18)
    codes = np.searchsorted(np.linspace(0, 1, 5)[1:-1], p).astype(np.int32)
    rates = []
    for force_rows in (False, True):
        sums = _bootstrap_sums(codes, y, None, 4, 800, seed=2, force_rows=force_rows)
        rates.append(sums[..., 1] / sums[..., 0])
    pooled, rows = rates
    # Same distribution, different draws: means within 0.25 sd, sd within 15% (800 replicates).
    sd = rows.std(axis=0)
    assert_allclose(pooled.mean(axis=0), rows.mean(axis=0), atol=0.25 * sd.min())
    assert_allclose(pooled.std(axis=0), sd, rtol=0.15)


def test_weighted_band_is_scale_invariant():
    y, p = make_rows(3000, seed=19)
    w = np.random.default_rng(20).gamma(1.0, size=3000)
    a = reliability_curve(y, p, sample_weight=w, n_bins=4, n_bootstrap=50)
    b = reliability_curve(y, p, sample_weight=10.0 * w, n_bins=4, n_bootstrap=50)
    assert_allclose(a.band_low, b.band_low, rtol=1e-12)
    assert_allclose(a.band_high, b.band_high, rtol=1e-12)


# --- parameter and data errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"n_bins": 0},
            ValueError,
            r"The 'n_bins' parameter of reliability_curve must be an int in \[1, inf\) ",
        ),
        ({"n_bins": "sqrt"}, ValueError, r"or 'auto'. Got 'sqrt' instead"),
        ({"n_bins": 2.5}, ValueError, r"'n_bins' parameter .* Got 2.5 instead"),
        ({"n_bins": None}, TypeError, r"'n_bins' parameter .* Got None instead"),
        ({"strategy": "kmeans"}, ValueError, r"'strategy' parameter of reliability_curve must be one of"),
        ({"n_bootstrap": -1}, ValueError, r"'n_bootstrap' parameter .* must be an int in \[0, inf\)"),
        ({"confidence": 1.0}, ValueError, r"'confidence' parameter .* must be a float in \(0, 1\)"),
        ({"seed": -1}, ValueError, r"'seed' parameter"),
    ],
)
def test_parameter_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        reliability_curve([0, 1], [0.2, 0.8], **kwargs)


def test_data_errors():
    with pytest.raises(
        ValueError, match=r"y_prob: 1 value\(s\) \(first at row 1: 1.5\) are outside \[0, 1\]"
    ):
        reliability_curve([0, 1], [0.2, 1.5])
    with pytest.raises(ValueError, match=r"inputs have different numbers of rows"):
        reliability_curve([0, 1, 1], [0.2, 0.5])
    with pytest.raises(ValueError, match=r"sample_weight: weights must be >= 0"):
        reliability_curve([0, 1], [0.2, 0.5], sample_weight=[1.0, -1.0])
    with pytest.raises(ValueError, match=r"y_true: no rows"):
        reliability_curve([], [])


# --- figures ---------------------------------------------------------------------------------------


def named_lines(ax):
    return [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]


def test_plot_overlays_predictions_with_ece_in_legend():
    pytest.importorskip("matplotlib")
    from gpucal.plot import plot_reliability

    y, p = make_rows(5000, seed=21)
    preds = {"raw": p, "fixed": np.sqrt(p)}
    fig = plot_reliability(y, preds, n_bins=10, n_bootstrap=20)
    assert len(fig.axes) == 2  # the diagram and the histogram beneath
    ax, hist_ax = fig.axes
    labels = named_lines(ax)
    assert labels[0] == "perfectly calibrated"
    assert labels[1] == f"raw (ECE {ece(y, p, n_bins=10):.4f}, 10 uniform bins)"
    assert labels[2] == f"fixed (ECE {ece(y, np.sqrt(p), n_bins=10):.4f}, 10 uniform bins)"
    assert len(ax.collections) == 2  # one band per prediction
    assert len(hist_ax.patches) == 2  # one outline histogram per prediction
    assert ax.get_legend() is not None
    # The curve drawn is the computed one.
    curve = reliability_curve(y, p, n_bins=10, n_bootstrap=0)
    assert_allclose(ax.get_lines()[1].get_ydata(), curve.observed)


def test_plot_single_array_no_histogram_no_band():
    pytest.importorskip("matplotlib")
    from gpucal.plot import plot_reliability

    y, p = make_rows(1000, seed=22)
    fig = plot_reliability(pd.Series(y), pd.Series(p), n_bootstrap=0, show_histogram=False)
    (ax,) = fig.axes
    assert named_lines(ax)[1].startswith("y_prob (ECE ")
    assert len(ax.collections) == 0


def test_plot_dataframe_columns_and_weights_on_given_axes():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from gpucal.plot import plot_reliability

    y, p = make_rows(2000, seed=23)
    frame = pd.DataFrame({"a": p, "b": p**0.5})
    fig = Figure()
    ax = fig.add_subplot()
    out = plot_reliability(y, frame, sample_weight=np.full(2000, 2.0), ax=ax, strategy="quantile")
    assert out is fig
    assert len(fig.axes) == 2  # histogram appended below the given axes
    assert [label.split(" (")[0] for label in named_lines(ax)[1:3]] == ["a", "b"]
    assert fig.axes[1].get_ylabel() == "weight"


def test_plot_on_hand_placed_axes_hangs_histogram_below():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from gpucal.plot import plot_reliability

    y, p = make_rows(1000, seed=26)
    fig = Figure()
    ax = fig.add_axes((0.1, 0.4, 0.8, 0.5))  # no grid cell to share
    plot_reliability(y, p, ax=ax, n_bootstrap=0)
    assert len(ax.child_axes) == 1  # an inset: a child of ax, not one of fig.axes
    assert ax.child_axes[0].get_shared_x_axes().joined(ax, ax.child_axes[0])


def test_plot_marks_sparse_bins():
    pytest.importorskip("matplotlib")
    from gpucal.plot import plot_reliability

    y, p = make_rows(200, seed=24)
    fig = plot_reliability(y, p, n_bins=20, n_bootstrap=0)
    assert "bin of < 30 rows" in named_lines(fig.axes[0])


def test_plot_errors_name_the_prediction():
    pytest.importorskip("matplotlib")
    from gpucal.plot import plot_reliability, plot_reliability_to_png

    with pytest.raises(ValueError, match=r"predictions\['bad'\]: 1 value\(s\) \(first at row 0: 2.0\)"):
        plot_reliability([0, 1], {"ok": [0.1, 0.2], "bad": [2.0, 0.2]})
    with pytest.raises(ValueError, match=r"predictions: no predictions given"):
        plot_reliability([0, 1], {})
    with pytest.raises(ValueError, match=r"The 'n_bins' parameter of plot_reliability"):
        plot_reliability([0, 1], [0.1, 0.2], n_bins=0)
    with pytest.raises(TypeError, match=r"`ax` cannot be passed"):
        plot_reliability_to_png("x.png", [0, 1], [0.1, 0.2], ax=object())


def test_png_written(tmp_path):
    pytest.importorskip("matplotlib")
    from gpucal.plot import plot_reliability_to_png

    y, p = make_rows(3000, seed=25)
    path = plot_reliability_to_png(tmp_path / "reliability.png", y, {"m": p}, n_bootstrap=20, dpi=50)
    assert path == tmp_path / "reliability.png"
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (320, 360)  # 6.4 x 7.2 inches at 50 dpi


def test_missing_matplotlib_names_the_extra(monkeypatch):
    from gpucal.plot import plot_reliability

    # A None entry in sys.modules makes `import matplotlib` raise ImportError.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install 'gpucal\[plot\]'"):
        plot_reliability([0, 1], [0.2, 0.8])
    # The computation needs no matplotlib.
    assert isinstance(reliability_curve([0, 1], [0.2, 0.8], n_bootstrap=0), ReliabilityCurve)


def test_import_gpucal_does_not_import_matplotlib():
    code = "import sys, gpucal, gpucal.plot; sys.exit('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_plot_axis_holds_every_prediction_and_legend_matches_the_table():
    """With quantile bins at a low base rate the last bin's mean sat far below the largest prediction,
    and the axis (histogram included) was cut there; the legend's ECE matched no row of evaluate."""
    pytest.importorskip("matplotlib")
    import gpucal
    from gpucal.plot import plot_reliability

    rng = np.random.default_rng(5)
    p = np.clip(rng.beta(0.6, 30.0, 20000), 0, 1)
    p[:700] = rng.uniform(0.5, 0.81, 700)  # a few hundred rows far above the last quantile bin's mean
    y = (rng.random(p.shape[0]) < p).astype(float)
    fig = plot_reliability(y, {"s": p}, n_bins=15, strategy="quantile", n_bootstrap=0)
    ax, hist_ax = fig.axes
    assert ax.get_xlim()[1] >= p.max()
    assert hist_ax.get_xlim()[1] >= p.max()
    table = gpucal.evaluate(y, {"s": p})
    assert named_lines(ax)[1] == f"s (ECE {table.loc['ece_15_quantile', 's']:.4f}, 15 quantile bins)"
