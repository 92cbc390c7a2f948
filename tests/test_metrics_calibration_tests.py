"""The classical calibration tests: equal to probcal 0.4 and statsmodels, weights as repeated rows, dask.

Tolerances: probcal's tests are the same sums added in another order (1e-9 relative, observed 1e-12);
statsmodels' GLM fits the same likelihood by IRLS to its own tolerance (1e-7 relative, observed 1e-14);
dask partitions add the same sums in another order (1e-9 relative).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose

from gpucal import metrics

RTOL = 1e-9


def make_data(n: int = 4000, seed: int = 0, decimals: int | None = None):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    p = rng.beta(0.8, 1.5, n)
    if decimals is not None:
        p = np.round(p, decimals)
    y = (rng.random(n) < np.clip(1.2 * p, 0, 1)).astype(np.float64)
    grades = np.array(list("ABCDE"))[np.minimum((p * 5).astype(int), 4)]
    return y, p, grades


def _same(got, expected, rtol: float = RTOL) -> None:  # type: ignore[no-untyped-def]
    for field in dataclasses.fields(got):
        value = getattr(got, field.name)
        if value is None:
            assert getattr(expected, field.name) is None, field.name
        elif field.name in ("grades", "light"):
            assert tuple(value) == tuple(getattr(expected, field.name)), field.name
        else:
            assert_allclose(value, getattr(expected, field.name), rtol=rtol, atol=1e-300, err_msg=field.name)


# --------------------------------------------------------------------------------------------------
# References


@pytest.mark.parametrize("decimals", [None, 2], ids=["distinct", "ties"])
@pytest.mark.parametrize(("n_bins", "ddof"), [(10, 0), (7, 2)])
def test_hosmer_lemeshow_equals_probcal(decimals: int | None, n_bins: int, ddof: int) -> None:
    from probcal import metrics as pm

    y, p, _ = make_data(decimals=decimals)
    got = metrics.hosmer_lemeshow(y, p, n_bins=n_bins, ddof=ddof)
    ref = pm.hosmer_lemeshow(y, p, n_bins=n_bins, ddof=ddof)
    assert got.df == ref.df
    assert_allclose([got.statistic, got.p_value], [ref.statistic, ref.p_value], rtol=RTOL)


@pytest.mark.parametrize(("strategy", "probcal_strategy"), [("quantile", "mass"), ("uniform", "width")])
@pytest.mark.parametrize("bias_corrected", [False, True])
def test_murphy_decomposition_equals_probcal(
    strategy: str, probcal_strategy: str, bias_corrected: bool
) -> None:
    from probcal import metrics as pm

    y, p, _ = make_data(decimals=3)
    got = metrics.murphy_decomposition(y, p, n_bins=8, strategy=strategy, bias_corrected=bias_corrected)
    ref = pm.murphy_decomposition(y, p, n_bins=8, strategy=probcal_strategy, bias_corrected=bias_corrected)
    _same(got, ref)


def test_spiegelhalter_equals_probcal() -> None:
    from probcal import metrics as pm

    y, p, _ = make_data()
    _same(metrics.spiegelhalter_z(y, p), pm.spiegelhalter_z(y, p))


def test_slope_and_intercept_equal_statsmodels_and_probcal() -> None:
    sm = pytest.importorskip("statsmodels.api")
    from probcal import metrics as pm

    y, p, _ = make_data()
    w = np.random.default_rng(1).integers(1, 4, y.shape[0]).astype(float)
    z = np.log(p) - np.log1p(-p)
    binomial = sm.families.Binomial()
    full = sm.GLM(y, np.column_stack([np.ones_like(z), z]), family=binomial, freq_weights=w).fit(tol=1e-14)
    offset = sm.GLM(y, np.ones((y.shape[0], 1)), offset=z, family=binomial, freq_weights=w).fit(tol=1e-14)
    slope = metrics.calibration_slope(y, p, sample_weight=w)
    assert_allclose([slope.intercept, slope.slope], full.params, rtol=1e-7)
    assert_allclose([slope.intercept_se, slope.slope_se], full.bse, rtol=1e-7)
    null = float(np.sum(w * (y * np.log(p) + (1 - y) * np.log1p(-p))))
    assert_allclose(slope.statistic, 2 * (full.llf - null), rtol=1e-7)
    intercept = metrics.calibration_intercept(y, p, sample_weight=w)
    assert_allclose([intercept.intercept, intercept.se], [offset.params[0], offset.bse[0]], rtol=1e-7)
    assert_allclose(metrics.calibration_slope(y, p).slope, pm.calibration_slope(y, p), rtol=1e-8)
    assert_allclose(metrics.calibration_intercept(y, p).intercept, pm.calibration_intercept(y, p), rtol=1e-8)


@pytest.mark.parametrize("name", ["binomial_grade_test", "jeffreys_grade_test"])
def test_grade_tests_equal_probcal(name: str) -> None:
    from probcal import metrics as pm

    y, p, grades = make_data(n=3000)
    got = getattr(metrics, name)(y, p, grades)
    ref = getattr(pm, name)(y, p, grades)
    assert got.grades == ref.grades
    assert got.light == ref.light
    for field in ("n", "k", "pd", "p_value", "ci_low", "ci_high") + (("p_normal",) if name[0] == "b" else ()):
        assert_allclose(getattr(got, field), getattr(ref, field), rtol=1e-9, atol=1e-15, err_msg=field)


# --------------------------------------------------------------------------------------------------
# Weights are repeated rows


CALLS = {
    "hosmer_lemeshow": lambda y, p, g, w: metrics.hosmer_lemeshow(y, p, sample_weight=w),
    "murphy": lambda y, p, g, w: metrics.murphy_decomposition(y, p, sample_weight=w, bias_corrected=True),
    "spiegelhalter": lambda y, p, g, w: metrics.spiegelhalter_z(y, p, sample_weight=w),
    "slope": lambda y, p, g, w: metrics.calibration_slope(y, p, sample_weight=w),
    "intercept": lambda y, p, g, w: metrics.calibration_intercept(y, p, sample_weight=w),
    "binomial": lambda y, p, g, w: metrics.binomial_grade_test(y, p, g, sample_weight=w),
    "jeffreys": lambda y, p, g, w: metrics.jeffreys_grade_test(y, p, g, sample_weight=w),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_integer_weights_are_repeated_rows(name: str) -> None:
    y, p, grades = make_data(n=1500, decimals=3)
    w = np.random.default_rng(2).integers(0, 4, y.shape[0]).astype(float)
    rows = np.repeat(np.arange(y.shape[0]), w.astype(int))
    _same(CALLS[name](y, p, grades, w), CALLS[name](y[rows], p[rows], grades[rows], None), rtol=1e-8)


# --------------------------------------------------------------------------------------------------
# Dask


@pytest.mark.parametrize("name", list(CALLS))
def test_dask_equals_one_machine(client, name: str) -> None:  # type: ignore[no-untyped-def]
    dd = pytest.importorskip("dask.dataframe")
    y, p, grades = make_data(n=3000, decimals=3)
    w = np.random.default_rng(3).random(y.shape[0]) * 2.0
    w[:50] = 0.0
    frame = pd.DataFrame({"y": y, "p": p, "g": grades, "w": w})
    ddf = dd.from_pandas(frame, npartitions=7)
    _same(CALLS[name](ddf.y, ddf.p, ddf.g, ddf.w), CALLS[name](frame.y, frame.p, frame.g, frame.w))


# --------------------------------------------------------------------------------------------------
# Bad input and documented results


def test_bad_input_is_refused_by_name() -> None:
    y, p, grades = make_data(n=100)
    with pytest.raises(ValueError, match="y_prob"):
        metrics.hosmer_lemeshow(y, np.where(np.arange(100) == 3, np.nan, p))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        metrics.spiegelhalter_z(y, p + 1.0)
    with pytest.raises(ValueError, match="one class"):
        metrics.calibration_slope(np.zeros(100), p)
    with pytest.raises(ValueError, match="one class"):
        metrics.calibration_intercept(np.ones(100), p)
    with pytest.raises(ValueError, match="same logit"):
        metrics.calibration_slope(y, np.full(100, 0.3))
    with pytest.raises(ValueError, match="all weights are zero"):
        metrics.murphy_decomposition(y, p, sample_weight=np.zeros(100))
    with pytest.raises(ValueError, match="n_bins"):
        metrics.hosmer_lemeshow(y, p, n_bins=0)
    with pytest.raises(ValueError, match="order"):
        metrics.jeffreys_grade_test(y, p, grades, order=["A", "B"])
    # A missing grade failed in sorted() among text grades and stood unsorted among numbers.
    for missing in (
        np.where(np.arange(len(grades)) == 5, None, np.asarray(grades, dtype=object)),
        np.where(np.arange(len(grades)) == 5, np.nan, np.arange(len(grades)) % 3.0),
        pd.Series(np.asarray(grades, dtype=object)).astype("string").where(np.arange(len(grades)) != 5),
        pd.Series(np.datetime64("2020-01-01") + (np.arange(len(grades)) % 3).astype("timedelta64[D]")).where(
            np.arange(len(grades)) != 5
        ),
    ):
        for test in (metrics.jeffreys_grade_test, metrics.binomial_grade_test):
            with pytest.raises(ValueError, match="grades: some rows have no grade"):
                test(y, p, missing)


def test_separated_classes_have_no_slope() -> None:
    """The score separating the classes (completely, or but for tied rows) leaves the logistic
    recalibration without a finite maximum: an error, not a finite slope with an SE of 1e15 or 1e41."""
    p = np.array([0.1, 0.2, 0.3, 0.6, 0.7, 0.8])
    with pytest.raises(ValueError, match="separated by the score"):
        metrics.calibration_slope(np.array([0.0, 0, 0, 1, 1, 1]), p)
    quasi = np.array([0.1, 0.2, 0.5, 0.6, 0.7, 0.5])
    with pytest.raises(ValueError, match="separated by the score"):
        metrics.calibration_slope(np.array([0.0, 0, 1, 1, 1, 0]), quasi)
    # Here the Hessian turned exactly singular on the way: numpy's LinAlgError, not this error.
    with pytest.raises(ValueError, match="separated by the score"):
        metrics.calibration_slope(np.array([0.0, 0, 1, 1]), np.array([0.2, 0.4, 0.7, 0.9]))
    y, p, _ = make_data(n=100)
    assert np.isfinite(metrics.calibration_slope(y, p).slope_se)
    with pytest.raises(ValueError, match="separated by the score"):
        metrics.calibration_belt(np.array([0.0, 0, 0, 1, 1, 1]), np.array([0.1, 0.2, 0.3, 0.6, 0.7, 0.8]))


def test_hosmer_lemeshow_group_predicted_at_zero_with_events_is_infinitely_off() -> None:
    y, p, _ = make_data(n=400)
    p = np.concatenate([p, np.zeros(100)])
    agreeing = metrics.hosmer_lemeshow(np.concatenate([y, np.zeros(100)]), p)
    assert np.isfinite(agreeing.statistic)
    contradicting = metrics.hosmer_lemeshow(np.concatenate([y, np.ones(100)]), p)
    assert (contradicting.statistic, contradicting.p_value) == (np.inf, 0.0)


def test_weights_summing_below_two_rows_are_refused_where_they_count_rows() -> None:
    """Weights normalised to sum to 1 are one row to the metrics that read weights as repeated rows:
    every quantile edge fell on the lowest score and the ICI's window held one; now an error."""
    y, p, _ = make_data(n=400)
    w = np.full(400, 1 / 400)
    for call in (
        lambda: metrics.hosmer_lemeshow(y, p, sample_weight=w),
        lambda: metrics.murphy_decomposition(y, p, sample_weight=w),
        lambda: metrics.ici(y, p, sample_weight=w),
        lambda: metrics.ece_debiased(y, p, sample_weight=w),
    ):
        with pytest.raises(ValueError, match=r"sample_weight: .* reads weights as repeated rows"):
            call()
    with pytest.raises(ValueError, match="y_true: the Hosmer-Lemeshow test needs at least two rows, got 1"):
        metrics.hosmer_lemeshow([1.0], [0.5])  # no weights: one row, said as such
    # Equal width groups do not count rows: the Murphy decomposition of any weight scale stands.
    uniform = metrics.murphy_decomposition(y, p, sample_weight=w, strategy="uniform")
    plain = metrics.murphy_decomposition(y, p, strategy="uniform")
    assert_allclose(dataclasses.astuple(uniform), dataclasses.astuple(plain), rtol=1e-12)


def test_documented_results() -> None:
    y, p, grades = make_data(n=200)
    # One distinct score: one group, so ddof=2 leaves no degrees of freedom.
    result = metrics.hosmer_lemeshow(y, np.full(200, 0.4), ddof=2)
    assert result.df == 0
    assert np.isnan(result.p_value)
    # Every prediction 1/2: the null variance is zero.
    assert np.isnan(metrics.spiegelhalter_z(y, np.full(200, 0.5)).z)
    # A listed grade with no rows is reported, empty.
    order = ["A", "B", "C", "D", "E", "F"]
    test = metrics.binomial_grade_test(y, p, grades, order=order)
    assert test.grades == tuple(order)
    assert test.n[-1] == 0
    assert np.isnan(test.p_value[-1])
    assert test.light[-1] == "none"
