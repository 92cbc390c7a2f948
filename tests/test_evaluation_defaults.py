"""gpucal.evaluate reports ECCE, MCE (with its sigma) and smooth ECE by default (issue 16)."""

from __future__ import annotations

import numpy as np
import pandas as pd
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


def test_scores_that_separate_the_classes_have_no_slope_in_the_table() -> None:
    """A prediction that ranks every positive above every negative (a small evaluation set, a good
    model) has an infinite calibration slope: NaN in the table, every other metric reported. It ended
    ``evaluate`` with numpy's "Singular matrix"."""
    y = np.array([0.0, 0.0, 1.0, 1.0])
    table = gpucal.evaluate(y, {"score": np.array([0.2, 0.4, 0.7, 0.9])})
    assert np.isnan(table["score"]["calibration_slope"])
    assert table["score"]["roc_auc"] == 1.0
    assert table["score"].drop("calibration_slope").notna().all()


def test_evaluate_computes_only_the_metrics_included(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's table shows seven metrics; the others of the table took two thirds of its time."""
    from gpucal.evaluation import METRIC_NAMES

    rng = np.random.default_rng(3)
    p = rng.random(600)
    y = (rng.random(600) < p).astype(np.float64)
    site = rng.integers(0, 3, 600)
    full = gpucal.evaluate(y, {"raw": p}, fields={"site": site}, p_true=p)
    assert set(METRIC_NAMES) | {"mce_sigma", "field_ece[site]", "field_rce[site]"} == set(full.index) | {
        "field_ece",
        "field_rce",
    }

    def not_computed(*args: object, **kwargs: object) -> None:
        msg = "computed although not included"
        raise AssertionError(msg)

    for left_out in ("skce", "multicalibration_error", "field_rce", "mvce"):
        monkeypatch.setattr(metrics, left_out, not_computed)
    include = ("log_loss", "roc_auc", "field_ece", "tce_l2")
    part = gpucal.evaluate(y, {"raw": p}, fields={"site": site}, p_true=p, include=include)
    assert list(part.index) == ["log_loss", "roc_auc", "field_ece[site]", "tce_l2"]
    assert part["raw"].to_dict() == full["raw"][part.index].to_dict()
    with pytest.raises(ValueError, match=r"unknown metrics \['ece'\]"):
        gpucal.evaluate(y, {"raw": p}, include=["log_loss", "ece"])


def test_fields_and_predictions_whose_labels_read_alike_are_refused() -> None:
    """The columns 0 and "0" of one frame were keyed by their text and one was dropped without a word
    (evaluate's fields, the reliability plot's curves): refused, naming both."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    p = rng.uniform(0.05, 0.95, 200)
    fields = pd.DataFrame({0: rng.integers(0, 2, 200), "0": rng.integers(0, 3, 200)})
    with pytest.raises(ValueError, match="the labels 0 and '0' read the same as text"):
        gpucal.evaluate(y, {"raw": p}, fields=fields)
    import pyarrow as pa  # a name given twice in a Table failed inside pyarrow ("exists 2 times")

    twice = pa.Table.from_arrays([pa.array(fields[0]), pa.array(fields["0"])], names=["a", "a"])
    with pytest.raises(ValueError, match="the labels 'a' and 'a' read the same as text"):
        gpucal.evaluate(y, {"raw": p}, fields=twice)
    pytest.importorskip("matplotlib", reason="the reliability plot needs matplotlib (the plot extra)")
    from gpucal.plot import plot_reliability

    with pytest.raises(ValueError, match="the labels 0 and '0' read the same as text"):
        plot_reliability(y, pd.DataFrame({0: p, "0": p}))


def test_a_metric_undefined_on_the_rows_is_nan_with_a_warning_not_the_end_of_the_table() -> None:
    """Labels of one class, weights normalised to sum to 1, or no segment of ten rows each ended the
    whole table (and ``gpucal evaluate``) with one metric's refusal."""
    rng = np.random.default_rng(0)
    p = rng.uniform(0.1, 0.9, 40)
    y = (rng.uniform(size=40) < p).astype(float)
    cases = [
        ({"y_true": np.zeros(40)}, {"roc_auc", "calibration_slope", "calibration_intercept"}),
        ({"y_true": y, "sample_weight": np.full(40, 1 / 40)}, {"hosmer_lemeshow_p", "skce"}),
        ({"y_true": y[:9], "fields": {"f": np.arange(9) % 2}}, {"mce", "mce_sigma"}),
    ]
    for kwargs, undefined in cases:
        rows = len(kwargs["y_true"])
        with pytest.warns(UserWarning, match="evaluate: .* is NaN here: "):
            column = gpucal.evaluate(predictions={"m": p[:rows]}, **kwargs)["m"]
        assert set(column[column.isna()].index) == undefined
    with pytest.raises(ValueError, match=r"predictions\['m'\]: 1 value"):  # bad input is still refused
        gpucal.evaluate(y, {"m": np.where(np.arange(40) == 3, np.nan, p)})


def test_evaluate_checks_indexes_whatever_metrics_are_included() -> None:
    """With include=["tce_l2"] no metric read y_true, so a y_true of another index passed unchecked."""
    rng = np.random.default_rng(1)
    p = pd.Series(rng.uniform(0.05, 0.95, 100))
    y = pd.Series(rng.integers(0, 2, 100), index=np.arange(100) + 1000)
    with pytest.raises(ValueError, match="y_true and predictions\\['raw'\\] have different indexes"):
        gpucal.evaluate(y, {"raw": p}, p_true=p, include=["tce_l2"])
    fields = pd.DataFrame({"site": rng.integers(0, 3, 100)}, index=np.arange(100) + 1000)
    with pytest.raises(ValueError, match="and fields have different indexes"):
        gpucal.evaluate(y.set_axis(p.index), {"raw": p}, fields=fields, include=["brier"])
