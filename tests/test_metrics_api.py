"""gpucal.metrics: hand-computed cases, weight rules, division-by-zero rules and parameter errors."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose

import gpucal
from gpucal import metrics
from gpucal.metrics import binned, binning, score_table

RTOL = 1e-12


def data(n: int = 600, seed: int = 0):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    p = np.round(rng.beta(0.7, 1.2, n), 3)
    z = rng.integers(0, 4, n)
    y = (rng.random(n) < np.clip(p * (0.7 + 0.2 * z), 0, 1)).astype(np.float64)
    return y, p, z


# (name, call(y, p, z, w)) for every metric with a weight argument.
CASES: list[tuple[str, Callable[..., Any]]] = [
    ("pce", lambda y, p, z, w: metrics.pce(y, p, sample_weight=w)),
    ("ece_uniform", lambda y, p, z, w: metrics.ece(y, p, sample_weight=w, n_bins=8, p=2)),
    (
        "ece_quantile",
        lambda y, p, z, w: metrics.ece(
            y, p, sample_weight=w, n_bins=8, strategy="quantile", weighting="equal"
        ),
    ),
    ("mce", lambda y, p, z, w: metrics.mce(y, p, sample_weight=w, n_bins=8, strategy="quantile")),
    ("ada_ece", lambda y, p, z, w: metrics.ada_ece(y, p, sample_weight=w, n_bins=8)),
    ("ece_sweep", lambda y, p, z, w: metrics.ece_sweep(y, p, sample_weight=w, p=2)),
    ("prob_ece", lambda y, p, z, w: metrics.prob_ece(y, p, sample_weight=w)),
    ("cal_n", lambda y, p, z, w: metrics.cal_n(y, p, sample_weight=w, n_bins=4)),
    ("gc_n", lambda y, p, z, w: metrics.gc_n(y, p, z, sample_weight=w, n_bins=3)),
    ("field_ece", lambda y, p, z, w: metrics.field_ece(y, p, z, sample_weight=w)),
    ("field_rce", lambda y, p, z, w: metrics.field_rce(y, p, z, sample_weight=w)),
    ("cece", lambda y, p, z, w: metrics.cece(y, p, z, sample_weight=w, metric="ada_ece")),
    ("pcoc", lambda y, p, z, w: metrics.pcoc(y, p, sample_weight=w)),
    ("log_loss", lambda y, p, z, w: metrics.log_loss(y, p, sample_weight=w)),
    ("brier", lambda y, p, z, w: metrics.brier(y, p, sample_weight=w)),
    ("roc_auc", lambda y, p, z, w: metrics.roc_auc(y, p, sample_weight=w)),
    ("tce", lambda y, p, z, w: metrics.tce(np.clip(p * 1.1, 0, 1), p, sample_weight=w)),
]


@pytest.mark.parametrize(("name", "call"), CASES, ids=[c[0] for c in CASES])
def test_integer_weights_equal_repeated_rows(name: str, call: Callable[..., Any]) -> None:
    y, p, z = data()
    w = np.random.default_rng(1).integers(0, 4, y.shape[0])
    rep = np.repeat(np.arange(y.shape[0]), w)
    assert_allclose(call(y, p, z, w.astype(float)), call(y[rep], p[rep], z[rep], None), rtol=1e-10)


@pytest.mark.parametrize(("name", "call"), CASES, ids=[c[0] for c in CASES])
def test_unit_weights_equal_none(name: str, call: Callable[..., Any]) -> None:
    y, p, z = data()
    assert_allclose(call(y, p, z, np.ones_like(p)), call(y, p, z, None), rtol=RTOL)


def test_mvce_unit_weights_equal_none() -> None:
    y, p, _ = data()
    assert_allclose(
        metrics.mvce(y, p, sample_weight=np.ones_like(p), n_views=4, bin_size=50),
        metrics.mvce(y, p, n_views=4, bin_size=50),
        rtol=RTOL,
    )


def test_segment_report_integer_weights_equal_repeated_rows() -> None:
    y, p, z = data()
    w = np.random.default_rng(2).integers(1, 4, y.shape[0])
    rep = np.repeat(np.arange(y.shape[0]), w)
    a = metrics.segment_report(y, p, {"z": z}, sample_weight=w.astype(float))
    b = metrics.segment_report(y[rep], p[rep], {"z": z[rep]})
    pd.testing.assert_frame_equal(a.drop(columns="rows"), b.drop(columns="rows"), rtol=1e-10)


# ---------------------------------------------------------------- hand-computed
def test_hand_computed_ece_family() -> None:
    y = [0, 1, 1, 0]
    p = [0.1, 0.8, 0.7, 0.4]
    # Bins [0, 0.5] and (0.5, 1]: means (y, p) = (0, 0.25) and (1, 0.75); both gaps 0.25.
    assert metrics.ece(y, p, n_bins=2) == pytest.approx(0.25)
    assert metrics.mce(y, p, n_bins=2) == pytest.approx(0.25)
    # Four bins, one row each: gaps |0 - .1|, |0 - .4|, |1 - .7| (in (.5, .75]) and |1 - .8|.
    assert metrics.ece(y, p, n_bins=4) == pytest.approx((0.1 + 0.4 + 0.3 + 0.2) / 4)
    assert metrics.mce(y, p, n_bins=4) == pytest.approx(0.4)
    # Equal weighting skips empty bins: 3 non-empty bins of 10 -> mean of their gaps.
    assert metrics.ece([0, 1, 1], [0.05, 0.95, 0.83], n_bins=10, weighting="equal") == pytest.approx(
        (0.05 + 0.05 + 0.17) / 3
    )
    # A probability exactly on an edge goes to the lower bin (right-closed, as sklearn).
    assert metrics.ece([1, 0], [0.5, 0.6], n_bins=2) == pytest.approx((0.5 + 0.6) / 2)


def test_hand_computed_quantile_bins_and_ties() -> None:
    # Weights 1, 1, 2 at probabilities .2, .2, .6: the tie at .2 holds half the mass -> bin 0, .6 -> bin 1.
    y, p, w = [0, 1, 1], [0.2, 0.2, 0.6], [1.0, 1.0, 2.0]
    expected = 0.5 * abs(0.5 - 0.2) + 0.5 * abs(1 - 0.6)
    assert metrics.ece(y, p, sample_weight=w, n_bins=2, strategy="quantile") == pytest.approx(expected)
    # Three bins: the tie group (mass 0 to 0.5) starts in bin 0 and is never split.
    assert metrics.ece(y, p, sample_weight=w, n_bins=3, strategy="quantile") == pytest.approx(expected)


@pytest.mark.parametrize("case", ["binary_unit", "soft_unit", "weighted", "zero_weights", "no_ties"])
def test_compiled_score_table_and_mass_bins_equal_the_array_code(case: str) -> None:
    """The host's table of distinct scores (one compiled pass in score order) equals the array code the
    GPU runs, and the equal-mass bin sums of one compiled pass equal ``table_mass_bins`` and
    ``sum_by_id``: bit for bit (the same additions in the same order)."""
    rng = np.random.default_rng(3)
    n = 5000
    p = rng.random(n) if case == "no_ties" else np.round(rng.random(n), 2)
    y = rng.random(n) if case == "soft_unit" else (rng.random(n) < p).astype(np.float64)
    w = None if case in ("binary_unit", "soft_unit", "no_ties") else rng.random(n) + 0.5
    if case == "zero_weights":
        w[::4] = 0.0
    host, array = score_table._host_score_table(y, p, w), score_table._array_score_table(y, p, w)
    for name, a, b in zip(score_table.ScoreTable._fields, host, array, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)
    stats = np.stack([host.n_rows, host.weight, host.keys * host.weight, host.weight_y], axis=1)
    for n_bins in (1, 7, 15):
        two_steps = binning.sum_by_id(binning.table_mass_bins(host.weight, n_bins), stats, n_bins)
        fused = binning.table_mass_bin_sums(host.keys, host.n_rows, host.weight, host.weight_y, n_bins)
        np.testing.assert_array_equal(fused, two_steps)


def test_hand_computed_auc_with_ties() -> None:
    assert metrics.roc_auc([0, 1, 0, 1], [0.1, 0.5, 0.5, 0.9]) == pytest.approx(3.5 / 4)
    assert metrics.roc_auc([0, 1, 0, 1], [0.1, 0.5, 0.5, 0.9], sample_weight=[1, 2, 1, 1]) == pytest.approx(
        (2 * (1 + 0.5) + 1 * 2) / (3 * 2)
    )


def test_hand_computed_field_metrics() -> None:
    field = ["a", "a", "b", "b"]
    assert metrics.field_ece([1, 1, 0, 0], [0.5] * 4, field) == pytest.approx(0.5)
    assert metrics.field_ece([1, 0, 1, 0], [0.5] * 4, field) == 0.0
    # Value "a": excess 0; "b": |0 - 0.4| with no positives -> W_b * 0.4 / (eps * W_b) = 0.4 / eps.
    got = metrics.field_rce([1, 0, 0, 0], [0.5, 0.5, 0.2, 0.2], field, eps=1e-3)
    assert got == pytest.approx((2 * 0.4 / (1e-3 * 2)) / 4)
    assert metrics.field_rce([1, 0, 1, 1], [0.5, 0.5, 0.5, 0.5], field) == pytest.approx(
        (2 * 0 / (1 + 2e-6) + 2 * 1.0 / (2 + 2e-6)) / 4
    )


def test_hand_computed_cal_n_pcoc() -> None:
    y, p = [0, 1, 1, 1], [0.2, 0.2, 0.8, 0.8]
    # Bin 0: P = .4, Y = 1 -> 1/.4 - 1 = 1.5; bin 1: P = 1.6, Y = 2 -> 1/.8 - 1 = .25.
    assert metrics.cal_n(y, p, n_bins=2, strategy="uniform") == pytest.approx(
        math.sqrt((1.5**2 + 0.25**2) / 2)
    )
    assert metrics.pcoc(y, p) == pytest.approx(2.0 / 3.0)
    assert metrics.pcoc([0, 1], [0.9, 0.9]) == pytest.approx(1.8)


def test_gc_n_weights_values_by_their_mass() -> None:
    y, p, z = [0, 1, 1, 1, 0, 1], [0.5, 0.5, 0.5, 0.5, 0.5, 0.5], [0, 0, 1, 1, 1, 1]
    # Value 0: P = 1, Y = 1 -> 0. Value 1: P = 2, Y = 3 -> 3/2 - 1 = .5. Weights 2 and 4.
    assert metrics.gc_n(y, p, z, n_bins=1) == pytest.approx((2 * 0 + 4 * 0.5) / 6)


# ---------------------------------------------------------------- division by zero
def test_division_by_zero_rules() -> None:
    assert metrics.pcoc([0, 0], [0.1, 0.2]) == math.inf
    assert math.isnan(metrics.pcoc([0, 0], [0.0, 0.0]))
    assert metrics.cal_n([0, 0, 1, 1], [0.1, 0.1, 0.9, 0.9], n_bins=2) == math.inf
    # P = Y = 0 in a bin is no error.
    assert metrics.cal_n([0, 0, 1, 1], [0.0, 0.0, 1.0, 1.0], n_bins=2) == 0.0
    assert metrics.gc_n([0, 1], [0.2, 0.5], ["a", "b"], n_bins=1) == math.inf
    # Zero-weight rows: empty bins are skipped.
    assert metrics.ece([0, 1, 1], [0.1, 0.9, 0.5], sample_weight=[1, 1, 0], n_bins=2) == pytest.approx(0.1)
    with pytest.raises(ValueError, match=r"roc_auc: y_true has only one class \(no positive weight\)"):
        metrics.roc_auc([0, 0, 0], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"no negative weight"):
        metrics.roc_auc([1, 0], [0.1, 0.2], sample_weight=[1, 0])


# ---------------------------------------------------------------- inputs and reports
def test_inputs_from_pandas_polars_and_lists() -> None:
    polars = pytest.importorskip("polars")
    y, p, z = data(200)
    ref = metrics.field_ece(y, p, z)
    assert metrics.field_ece(list(y), list(p), list(z)) == pytest.approx(ref, rel=RTOL)
    assert metrics.field_ece(pd.Series(y), pd.Series(p), pd.Series(z).astype("category")) == pytest.approx(
        ref
    )
    assert metrics.field_ece(
        polars.Series(y), polars.Series(p), polars.Series(z.astype(str))
    ) == pytest.approx(ref)


def test_missing_field_values_form_a_group() -> None:
    field = np.array(["a", None, "a", None], dtype=object)
    assert metrics.field_ece([1, 0, 0, 0], [0.5, 0.5, 0.5, 0.5], field) == pytest.approx((0 + 1.0) / 4)


def test_segment_report_columns_and_order() -> None:
    y = np.array([1, 1, 1, 0, 0, 0, 1, 0])
    p = np.full(8, 0.5)
    features = pd.DataFrame(
        {
            "country": ["fr", "fr", "fr", "de", "de", "de", "it", "it"],
            "device": ["m", "d", "m", "d", "m", "d", "m", "d"],
        }
    )
    report = metrics.segment_report(y, p, features)
    assert list(report.columns) == [
        "feature",
        "value",
        "rows",
        "weight",
        "observed",
        "predicted",
        "error",
        "excess",
        "pcoc",
        "sigma",
    ]
    assert report.loc[0, "feature"] == "country"
    assert set(report.loc[:1, "value"]) == {"fr", "de"}
    assert report["excess"].abs().is_monotonic_decreasing
    fr = report[(report["feature"] == "country") & (report["value"] == "fr")].iloc[0]
    assert (fr["rows"], fr["observed"], fr["predicted"], fr["error"], fr["excess"]) == (
        3,
        1.0,
        0.5,
        -0.5,
        -1.5,
    )
    # The sum of |excess| over a feature's values / W is that feature's Field-ECE.
    country = report[report["feature"] == "country"]
    assert country["excess"].abs().sum() / 8 == pytest.approx(metrics.field_ece(y, p, features["country"]))
    by_error = metrics.segment_report(y, p, features, sort_by="error", min_rows=3)
    assert by_error["rows"].min() >= 3
    assert by_error["error"].abs().is_monotonic_decreasing
    # sigma: the excess over its null standard deviation sqrt(sum w p (1 - p)) = sqrt(3 * 0.25) for "fr".
    assert fr["sigma"] == pytest.approx(-1.5 / np.sqrt(0.75))


def test_segment_report_sigma_ranks_real_bias_before_noise() -> None:
    """A large segment with a small real bias outranks a small one with a large noisy rate gap."""
    rng = np.random.default_rng(0)
    n_big, n_small = 20_000, 8
    p = np.full(n_big + n_small, 0.3)
    y = np.concatenate([rng.random(n_big) < 0.33, [1, 1, 1, 0, 1, 0, 0, 1]]).astype(float)
    segment = np.array(["big"] * n_big + ["small"] * n_small)
    by_error = metrics.segment_report(y, p, {"s": segment}, sort_by="error")
    by_sigma = metrics.segment_report(y, p, {"s": segment}, sort_by="sigma")
    assert by_error.loc[0, "value"] == "small"
    assert by_sigma.loc[0, "value"] == "big"
    assert abs(by_sigma.loc[0, "sigma"]) > 3 > abs(by_sigma.loc[1, "sigma"])
    excess = (p[:n_big] - y[:n_big]).sum()
    assert by_sigma.loc[0, "sigma"] == pytest.approx(excess / np.sqrt((p[:n_big] * (1 - p[:n_big])).sum()))


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: metrics.ece([0, 1], [0.2, 0.3], n_bins=0),
            ValueError,
            r"^The 'n_bins' parameter of ece must be an int in \[1, inf\). Got 0 instead.$",
        ),
        (
            lambda: metrics.ece([0, 1], [0.2, 0.3], n_bins=2.5),
            TypeError,
            r"The 'n_bins' parameter of ece must be an int in \[1, inf\). Got 2.5 instead.",
        ),
        (lambda: metrics.ece([0, 1], [0.2, 0.3], n_bins=True), TypeError, r"'n_bins' parameter of ece"),
        (
            lambda: metrics.ece([0, 1], [0.2, 0.3], strategy="width"),
            ValueError,
            r"The 'strategy' parameter of ece must be one of \('uniform', 'quantile'\). Got 'width' instead.",
        ),
        (
            lambda: metrics.ece([0, 1], [0.2, 0.3], p=0.5),
            ValueError,
            r"The 'p' parameter of ece must be a float in \[1, inf\]. Got 0.5 instead.",
        ),
        (
            lambda: metrics.ece([0, 1], [0.2, 0.3], weighting="bins"),
            ValueError,
            r"'weighting' parameter of ece",
        ),
        (lambda: metrics.mvce([0, 1], [0.2, 0.3], n_views=0), ValueError, r"'n_views' parameter of mvce"),
        (lambda: metrics.mvce([0, 1], [0.2, 0.3], seed=-1), ValueError, r"'seed' parameter of mvce"),
        (
            lambda: metrics.ece_sweep([0, 1], [0.2, 0.3], max_bins=0),
            ValueError,
            r"'max_bins' parameter of ece_sweep must be an int in \[1, inf\) or None",
        ),
        (
            lambda: metrics.field_rce([0, 1], [0.2, 0.3], [1, 2], eps=0.0),
            ValueError,
            r"The 'eps' parameter of field_rce must be a float in \(0, inf\)",
        ),
        (
            lambda: metrics.cece([0, 1], [0.2, 0.3], [1, 2], metric="ace"),
            ValueError,
            r"'metric' parameter of cece",
        ),
        (
            lambda: metrics.segment_report([0, 1], [0.2, 0.3], {"a": [1, 2]}, sort_by="rows"),
            ValueError,
            r"'sort_by' parameter of segment_report",
        ),
        (
            lambda: metrics.segment_report([0, 1], [0.2, 0.3], [[1, 2]]),
            TypeError,
            r"features: expected a DataFrame",
        ),
        (lambda: metrics.segment_report([0, 1], [0.2, 0.3], {}), ValueError, r"features: no columns"),
        (
            lambda: metrics.ece([0, 1], [0.2, 1.3]),
            ValueError,
            r"y_prob: 1 value\(s\) \(first at row 1: 1.3\)",
        ),
        (lambda: metrics.ece([0, 2], [0.2, 0.3]), ValueError, r"y_true: labels must be in \[0, 1\]"),
        (lambda: metrics.ece([0, 1, 1], [0.2, 0.3]), ValueError, r"inputs have different numbers of rows"),
        (lambda: metrics.ece([], []), ValueError, r"y_true: no rows"),
        (
            lambda: metrics.brier([0, 1], [0.2, 0.3], sample_weight=[1, -1]),
            ValueError,
            r"sample_weight: weights must be >= 0",
        ),
        (lambda: metrics.field_ece([0, 1], [0.2, 0.3], [1, 2, 3]), ValueError, r"field has 3"),
        (lambda: metrics.tce([0.1, 1.2], [0.2, 0.3]), ValueError, r"p_true: 1 value\(s\)"),
    ],
)
def test_errors(call: Callable[[], Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call()


def test_repeated_runs_are_bit_identical() -> None:
    rng = np.random.default_rng(3)
    p = rng.random(300_000)
    y = (rng.random(300_000) < p).astype(float)
    w = rng.random(300_000)
    for call in (
        lambda: metrics.ece(y, p, sample_weight=w),
        lambda: metrics.ece(y, p, sample_weight=w, strategy="quantile", p=2),
        lambda: metrics.field_ece(y, p, (p * 1000).astype(int), sample_weight=w),
    ):
        assert call() == call()


def test_ece_sweep_stops_once_every_tied_group_has_its_bin() -> None:
    # A constant prediction: one tie group, so the sweep ends at one bin instead of trying every count.
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 200_000).astype(float)
    p = np.full(200_000, 0.3)
    assert metrics.ece_sweep(y, p) == pytest.approx(abs(y.mean() - 0.3), abs=1e-9)  # prefix-sum rounding
    # Three distinct scores: the finest partition is reached at three bins; the value is that ECE.
    p3 = np.repeat([0.2, 0.5, 0.8], 1000)
    y3 = (rng.random(3000) < p3).astype(float)
    assert metrics.ece_sweep(y3, p3) == pytest.approx(
        metrics.ece(y3, p3, n_bins=3, strategy="quantile"), rel=1e-9
    )


def test_ece_sweep_reads_integer_weights_as_repeated_rows_and_zero_weights_as_absent() -> None:
    y, p, w = np.array([0.0, 1.0, 1.0]), np.array([0.2, 0.5, 0.9]), np.array([1.0, 1.0, 10.0])
    repeated = metrics.ece_sweep(np.repeat(y, [1, 1, 10]), np.repeat(p, [1, 1, 10]))
    assert metrics.ece_sweep(y, p, sample_weight=w) == pytest.approx(repeated, rel=1e-12)
    # A score whose one row weighs nothing: the sweep stops where it stops without that row.
    rng = np.random.default_rng(6)
    p0 = np.r_[0.9, np.full(20_000, 0.3)]
    y0 = np.r_[1.0, (rng.random(20_000) < 0.3).astype(float)]
    w0 = np.r_[0.0, np.ones(20_000)]
    calls: list[int] = []
    real = binned._sweep_bins
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(binned, "_sweep_bins", lambda n_bins, *a: calls.append(n_bins) or real(n_bins, *a))
        weighted = metrics.ece_sweep(y0, p0, sample_weight=w0)
    assert calls == [1]
    assert weighted == pytest.approx(metrics.ece_sweep(y0[1:], p0[1:]), rel=1e-12)


# --------------------------------------------------------------------------------------------------
# Inputs that gave an obscure error or a silently infinite table


def _rows(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.05, 0.95, n)
    return (rng.random(n) < p).astype(np.int64), p, rng.integers(0, 4, n)


def test_field_of_lists_or_two_dimensions_is_named():
    y, p, region = _rows()
    lists = pd.Series([[int(v), 1] for v in region])
    for call in (
        lambda: metrics.field_ece(y, p, lists),
        lambda: metrics.field_rce(y, p, lists),
        lambda: metrics.cece(y, p, lists),
    ):
        with pytest.raises(TypeError, match=r"cannot group rows by its values \(unhashable type: 'list'\)"):
            call()
    with pytest.raises(TypeError, match=r"features\['a'\]: holds list values"):
        metrics.segment_report(y, p, pd.DataFrame({"a": lists}))
    with pytest.raises(TypeError, match=r"fields\['a'\]: holds list values"):
        gpucal.evaluate(y, {"p": p}, fields=pd.DataFrame({"a": lists}))
    with pytest.raises(ValueError, match=r"fields\['a'\]: expected a 1-D column .* shape \(300, 2\)"):
        gpucal.evaluate(y, {"p": p}, fields={"a": np.c_[region, region]})


def test_segment_report_takes_pyarrow_inputs():
    pa = pytest.importorskip("pyarrow")
    y, p, region = _rows()
    expected = metrics.segment_report(y, p, pd.DataFrame({"region": region}))
    got = metrics.segment_report(pa.array(y), pa.array(p), pa.table({"region": pa.array(region)}))
    pd.testing.assert_frame_equal(got, expected)


@pytest.mark.parametrize(
    "hard", [lambda y: y, lambda y: y.astype(bool), lambda y: pd.Series(y, dtype="Int64")]
)
def test_class_labels_as_predictions_are_refused(hard):
    """0/1 integer predictions gave log-loss 18 and infinite sigmas without a word."""
    y, p, region = _rows()
    with pytest.raises(
        TypeError, match=r"y_prob: dtype .* holds class labels, not probabilities.*predict_proba"
    ):
        metrics.segment_report(y, hard(y), pd.DataFrame({"region": region}))
    with pytest.raises(TypeError, match=r"predictions\['hard'\]: dtype .* holds class labels"):
        gpucal.evaluate(y, {"p": p, "hard": hard(y)})
    # the same values as floats are probabilities that happen to be 0 or 1: a documented result
    report = metrics.segment_report(y, y.astype(np.float64), pd.DataFrame({"region": region}))
    assert (report["error"] == 0).all()
    assert (report["sigma"] == 0).all()


def test_ece_outside_unit_interval_suggests_what_ece_takes():
    y, p, _ = _rows()
    with pytest.raises(
        ValueError, match=r"outside \[0, 1\]; pass probabilities \(margins/logits through a sigmoid"
    ):
        metrics.ece(y, p * 3)


@pytest.mark.parametrize("family", ["pandas", "polars", "pyarrow", "pyarrow_chunked"])
def test_integer_segments_with_nulls_are_read_as_pandas_reads_them(family: str) -> None:
    """Ids with a missing value stay integers in every family: as floats, 2**53 and 2**53 + 1 were one
    segment and 3 read 3.0."""
    import polars as pl
    import pyarrow as pa

    from gpucal.metrics.inputs import factorize_values
    from gpucal.metrics.multicalibration import host_column
    from gpucal.plot.trees import _host_values

    ids = [2**53, 2**53 + 1, None, 3]
    column = {
        "pandas": lambda: pd.Series(ids, dtype="Int64"),
        "polars": lambda: pl.Series(ids),
        "pyarrow": lambda: pa.array(ids),
        "pyarrow_chunked": lambda: pa.chunked_array([ids[:2], ids[2:]]),
    }[family]()
    codes, uniques = factorize_values(column, "segments")
    assert len(set(np.asarray(codes).tolist())) == 4
    assert [None if pd.isna(u) else int(u) for u in uniques] == [2**53, 2**53 + 1, None, 3]
    assert host_column(column).nunique(dropna=False) == 4
    assert _host_values(column).nunique(dropna=False) == 4
