"""Issue 16's metrics equal their reference implementations, weight like repeated rows, and name bad inputs.

References: mcgrad 0.1.5 (``ecce``, ``ecce_sigma``, ``ecce_pvalue``, ``MulticalibrationError``), relplot
(``smECE``), uncertainty-calibration (``get_calibration_error(p, y, p=2, debias=True)``) and probcal 0.4
(``ici``, ``e50``, ``e90``, ``emax``). Scores are continuous (no ties: the references' argsort orders tied
rows arbitrarily) unless a test says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose

from gpucal import metrics

mcgrad_metrics = pytest.importorskip("mcgrad.metrics")
relplot = pytest.importorskip("relplot")
calibration = pytest.importorskip("calibration")
probcal_metrics = pytest.importorskip("probcal.metrics")

RTOL = 1e-10
# MCGrad 0.1.5 sorts with pandas' deprecated ``inplace=True``: its warning, not ours.
MCGRAD_WARNING = "ignore:The inplace keyword:Warning"


def make_rows(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.beta(1.2, 2.0, n) * 0.98 + 0.01
    y = (rng.random(n) < p**1.3).astype(np.float64)
    w = rng.integers(0, 4, n).astype(np.float64)
    return y, p, w


SIZES = [60, 500, 3000]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", ["ecce", "ecce_sigma", "ecce_pvalue"])
def test_ecce_equals_mcgrad(name: str, n: int) -> None:
    y, p, w = make_rows(n)
    ours, theirs = getattr(metrics, name), getattr(mcgrad_metrics, name)
    assert_allclose(ours(y, p), theirs(y, p), rtol=RTOL, atol=1e-14)
    assert_allclose(ours(y, p, sample_weight=w), theirs(y, p, w), rtol=RTOL, atol=1e-14)


def test_ecce_pvalue_ends_match_mcgrad() -> None:
    from gpucal.metrics.ecce import ecce_pvalue_from_sigma

    sigmas = np.array([0.0, 1e-30, 0.3, 1.0, 2.5, 5.0, 8.0, 8.3, np.inf])
    assert_allclose(ecce_pvalue_from_sigma(sigmas), mcgrad_metrics.ecce_pvalue_from_sigma(sigmas), atol=1e-15)


@pytest.mark.parametrize("n", SIZES)
def test_smooth_ece_equals_relplot(n: int) -> None:
    from gpucal.metrics.smooth import smooth_ece_and_bandwidth

    y, p, _ = make_rows(n)
    value, sigma = relplot.smECE(p, y, return_width=True)
    assert (metrics.smooth_ece(y, p), smooth_ece_and_bandwidth(y, p)[1]) == pytest.approx(
        (value, sigma), rel=RTOL
    )


def test_smooth_ece_small_bandwidth_grids_equal_relplot() -> None:
    # A well-calibrated model on many rows: the bandwidth search goes below 0.01, onto finer grids.
    rng = np.random.default_rng(3)
    p = rng.random(50_000)
    y = (rng.random(p.size) < p).astype(np.float64)
    value, sigma = relplot.smECE(p, y, return_width=True)
    assert sigma < 0.01
    assert metrics.smooth_ece(y, p) == pytest.approx(value, rel=RTOL)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("decimals", [None, 1])
def test_ece_debiased_equals_uncertainty_calibration(n: int, decimals: int | None) -> None:
    y, p, _ = make_rows(n)
    if decimals is not None:  # few distinct scores: every score is a bin
        p = np.round(p, decimals)
    expected = calibration.get_calibration_error(p, y.astype(int), p=2, debias=True)
    assert metrics.ece_debiased(y, p) == pytest.approx(expected, rel=RTOL, abs=1e-15)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", ["ici", "e50", "e90", "emax"])
@pytest.mark.parametrize("decimals", [None, 2])
def test_ici_family_equals_probcal(name: str, n: int, decimals: int | None) -> None:
    y, p, _ = make_rows(n)
    if decimals is not None:  # tied scores: LOESS fits their mean label
        p = np.round(p, decimals)
    expected = getattr(probcal_metrics, name)(y.astype(int), p)
    assert getattr(metrics, name)(y, p) == pytest.approx(expected, rel=1e-9, abs=1e-14)


def test_ici_every_score_and_span_equal_probcal() -> None:
    y, p, _ = make_rows(800)
    expected = probcal_metrics.ici(y.astype(int), p, frac=0.3, grid_size=None)
    assert metrics.ici(y, p, frac=0.3, grid_size=None) == pytest.approx(expected, rel=1e-9)


def segment_frame(n: int, seed: int = 1) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "a": rng.choice(list("xyzuv"), n, p=[0.4, 0.3, 0.15, 0.1, 0.05]),
            "b": rng.integers(0, 3, n),
            "c": rng.choice(["k", "l"], n),
            "d": rng.normal(size=n),
            "e": rng.random(n),
        }
    )
    frame.loc[rng.random(n) < 0.05, "a"] = None
    frame.loc[rng.random(n) < 0.05, "d"] = np.nan
    p = rng.random(n) * 0.9 + 0.05
    bias = np.where(frame.a == "x", 0.08, 0.0) + np.where(frame.b == 1, -0.05, 0.0)
    y = (rng.random(n) < np.clip(p + bias, 0, 1)).astype(np.float64)
    w = rng.integers(1, 4, n).astype(np.float64)
    return frame, y, p, w


@pytest.mark.filterwarnings(MCGRAD_WARNING)
@pytest.mark.parametrize(
    ("numerical", "weighted", "max_depth"),
    [((), False, 3), (("d", "e"), False, 3), (("d", "e"), True, 3), (("d",), False, None), ((), True, 1)],
)
def test_multicalibration_error_equals_mcgrad(
    numerical: tuple[str, ...], weighted: bool, max_depth: int | None
) -> None:
    frame, y, p, w = segment_frame(3000)
    categorical = ["a", "b", "c"]
    data = frame.assign(y=y, p=p, w=w)
    reference = mcgrad_metrics.MulticalibrationError(
        data,
        "y",
        "p",
        weight_column="w" if weighted else None,
        categorical_segment_columns=categorical,
        numerical_segment_columns=list(numerical) or None,
        max_depth=max_depth,
        precision_dtype="float64",
    )
    ours = metrics.multicalibration_error(
        y,
        p,
        frame[categorical + list(numerical)],
        sample_weight=w if weighted else None,
        numerical_columns=numerical,
        max_depth=max_depth,
    )
    for field in ("mce", "mce_sigma", "mce_pvalue", "mce_relative", "mde", "mde_relative", "global_ecce"):
        assert getattr(ours, field) == pytest.approx(float(getattr(reference, field)), rel=1e-9), field
    assert len(ours.segments) == reference.total_number_segments
    assert_allclose(np.sort(ours.segments["ecce"]), np.sort(reference.segments_ecce), rtol=1e-9, atol=1e-15)
    assert_allclose(
        np.sort(ours.segments["ecce_sigma"]), np.sort(reference.segments_ecce_sigma), rtol=1e-9, atol=1e-15
    )


@pytest.mark.filterwarnings(MCGRAD_WARNING)
def test_multicalibration_error_default_precision_close_to_mcgrad() -> None:
    # MCGrad's default precision_dtype is float32: equal to about 1e-5.
    frame, y, p, _ = segment_frame(2000, seed=2)
    reference = mcgrad_metrics.MulticalibrationError(
        frame.assign(y=y, p=p), "y", "p", categorical_segment_columns=["a", "b", "c"]
    )
    ours = metrics.multicalibration_error(y, p, frame[["a", "b", "c"]])
    assert ours.mce_sigma == pytest.approx(float(reference.mce_sigma), rel=1e-4)
    assert ours.mce == pytest.approx(float(reference.mce), rel=1e-4)


@pytest.mark.filterwarnings(MCGRAD_WARNING)
def test_multicalibration_error_truncates_like_mcgrad() -> None:
    frame, y, p, _ = segment_frame(3000, seed=4)
    frame["f"] = np.random.default_rng(5).integers(0, 3, len(frame))
    reference = mcgrad_metrics.MulticalibrationError(
        frame.assign(y=y, p=p),
        "y",
        "p",
        categorical_segment_columns=["a", "b", "c", "f"],
        numerical_segment_columns=["d", "e"],
        max_n_segments=100,
        precision_dtype="float64",
    )
    ours = metrics.multicalibration_error(
        y, p, frame[["a", "b", "c", "f", "d", "e"]], numerical_columns=["d", "e"], max_n_segments=100
    )
    assert ours.mce_sigma == pytest.approx(float(reference.mce_sigma), rel=1e-9)
    assert len(ours.segments) == reference.total_number_segments == 100


def test_multicalibration_worst_segment_is_the_planted_one() -> None:
    frame, y, p, _ = segment_frame(3000)
    result = metrics.multicalibration_error(y, p, frame[["a", "b", "c"]])
    worst = result.worst(1).iloc[0]
    assert worst["segment"] == "a=x"
    assert worst["ecce_sigma"] == pytest.approx(result.mce_sigma)
    assert result.segments["segment"].iloc[-1] != "a=x"


# -- weights count as repeated rows ---------------------------------------------------------------------

SCALARS: list[tuple[str, Callable[..., Any]]] = [
    ("ecce", metrics.ecce),
    ("ecce_sigma", metrics.ecce_sigma),
    ("ecce_pvalue", metrics.ecce_pvalue),
    ("smooth_ece", metrics.smooth_ece),
    ("ece_debiased", metrics.ece_debiased),
    ("ici", metrics.ici),
    ("e50", metrics.e50),
    ("e90", metrics.e90),
    ("emax", metrics.emax),
]


# ECCE's sigma (and so its p-value and the MCE's sigma) is MCGrad's: sqrt(sum w^2 p (1 - p)) / W, the
# standard deviation under importance weights, not under repeated rows.
FREQUENCY_WEIGHTED = [(name, metric) for name, metric in SCALARS if name not in ("ecce_sigma", "ecce_pvalue")]


@pytest.mark.parametrize(("name", "metric"), FREQUENCY_WEIGHTED)
def test_integer_weights_equal_repeated_rows(name: str, metric: Callable[..., Any]) -> None:
    y, p, w = make_rows(700, seed=7)
    repeat = np.repeat(np.arange(p.size), w.astype(int))
    assert metric(y, p, sample_weight=w) == pytest.approx(metric(y[repeat], p[repeat]), rel=1e-9), name


@pytest.mark.parametrize(("name", "metric"), SCALARS)
def test_unit_weights_equal_no_weights(name: str, metric: Callable[..., Any]) -> None:
    y, p, _ = make_rows(300, seed=8)
    assert metric(y, p, sample_weight=np.ones(p.size)) == pytest.approx(metric(y, p), rel=1e-12), name


@pytest.mark.parametrize("metric", [metrics.ici, metrics.e50, metrics.e90, metrics.emax])
def test_the_ici_refuses_more_rows_than_its_windows_count(metric: Callable[..., Any]) -> None:
    """Weights adding up past 2**53 rows: the window search on float row positions never ended."""
    y, p, _ = make_rows(40, seed=11)
    with pytest.raises(ValueError, match=r"more rows than its windows can count \(2\*\*53\)"):
        metric(y, p, sample_weight=np.full(40, 1e15))


def test_multicalibration_integer_weights_equal_repeated_rows() -> None:
    # With at most max_values_per_feature values per column and large segments, row counts choose the
    # same segments for the weighted and the repeated rows, and their walks are equal (the sigmas are
    # MCGrad's importance-weight ones, see FREQUENCY_WEIGHTED).
    frame, y, p, _ = segment_frame(1500, seed=9)
    w = np.random.default_rng(9).integers(1, 4, len(frame)).astype(np.float64)
    repeat = np.repeat(np.arange(len(frame)), w.astype(int))
    columns = frame[["b", "c"]]
    weighted = metrics.multicalibration_error(y, p, columns, sample_weight=w)
    repeated = metrics.multicalibration_error(
        y[repeat], p[repeat], columns.iloc[repeat].reset_index(drop=True)
    )
    assert weighted.global_ecce == pytest.approx(repeated.global_ecce, rel=1e-9)
    by_segment = weighted.segments.set_index("segment")["ecce"]
    assert_allclose(by_segment[repeated.segments["segment"]], repeated.segments["ecce"], rtol=1e-9)


def test_tied_scores_do_not_depend_on_row_order() -> None:
    y, p, w = make_rows(1000, seed=10)
    p = np.round(p, 2)
    shuffle = np.random.default_rng(0).permutation(p.size)
    frame = pd.DataFrame({"b": np.arange(p.size) % 3})
    for metric in (metrics.ecce, metrics.ece_debiased, metrics.ici, metrics.smooth_ece):
        assert metric(y, p, sample_weight=w) == pytest.approx(
            metric(y[shuffle], p[shuffle], sample_weight=w[shuffle]), rel=1e-12
        )
    a = metrics.multicalibration_error(y, p, frame, sample_weight=w)
    b = metrics.multicalibration_error(y[shuffle], p[shuffle], frame.iloc[shuffle], sample_weight=w[shuffle])
    assert a.mce_sigma == pytest.approx(b.mce_sigma, rel=1e-12)


# -- bad inputs name the argument -----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "metric"), SCALARS)
def test_bad_inputs_name_the_argument(name: str, metric: Callable[..., Any]) -> None:
    y, p, w = make_rows(50)
    with pytest.raises(ValueError, match="y_prob"):
        metric(y, p + 1.0)
    with pytest.raises(ValueError, match="y_true"):
        metric(y * 3.0, p)
    with pytest.raises(ValueError, match="sample_weight"):
        metric(y, p, sample_weight=-w - 1.0)
    with pytest.raises(ValueError, match="sample_weight"):
        metric(y, p, sample_weight=np.zeros(p.size))
    with pytest.raises(ValueError, match="rows"):
        metric(y[:10], p)
    with pytest.raises(ValueError, match="y_true"):
        metric(np.zeros(0), np.zeros(0))


def test_bad_parameters_name_the_parameter() -> None:
    y, p, _ = make_rows(50)
    with pytest.raises(ValueError, match="'n_bins' parameter of ece_debiased"):
        metrics.ece_debiased(y, p, n_bins=0)
    with pytest.raises(ValueError, match="'frac' parameter of ici"):
        metrics.ici(y, p, frac=0.0)
    with pytest.raises(ValueError, match="'max_depth' parameter of multicalibration_error"):
        metrics.multicalibration_error(y, p, {"a": np.zeros(50)}, max_depth=-1)


def test_multicalibration_bad_segments_name_the_argument() -> None:
    y, p, _ = make_rows(50)
    with pytest.raises(ValueError, match="segments: column 'a' has 10 rows"):
        metrics.multicalibration_error(y, p, {"a": np.zeros(10)})
    with pytest.raises(ValueError, match="numerical_columns"):
        metrics.multicalibration_error(y, p, {"a": np.zeros(50)}, numerical_columns=["b"])
    with pytest.raises(TypeError, match="features"):
        metrics.multicalibration_error(y, p, np.zeros(50))
    with pytest.raises(ValueError, match="min_samples_per_segment"):
        metrics.multicalibration_error(y[:5], p[:5], {"a": np.zeros(5)})


def test_multicalibration_refuses_segments_on_another_index() -> None:
    frame, y, p, _ = segment_frame(200)
    labels = pd.Series(y, index=frame.index)
    with pytest.raises(ValueError, match="segments\\['b'\\]"):
        metrics.multicalibration_error(labels, p, frame[["b"]].iloc[::-1])
