"""Scores and labels checked by the compiled pass that reads them (``scan=False`` in ``gpucal._validation``).

The one-dimensional maps read the values of their scores and labels once, in the pass that bins, sums or
maps them, and word a refused value by the checks' own scan. Every refused value (NaN, +-inf, outside
[0, 1]) must raise the message of the check that reads the input on its own, on the array path, the
compiled serial twin and the parallel twin, and the counts of the passes must equal numpy's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from gpucal._validation import check_labels, check_scores
from gpucal.calibrators import (
    BetaCalibrator,
    HistogramCalibrator,
    IsotonicCalibrator,
    PlattCalibrator,
    TemperatureCalibrator,
    bins,
)
from gpucal.calibrators._logistic_kernels import (
    FEATURES_BETA,
    FEATURES_COLUMNS,
    FEATURES_LOGIT,
    NUMBA_MIN_ROWS,
    predict_logistic,
    predict_logistic_and_refused,
)
from gpucal.kernels.jit import parallel_twins_only

MAPS = [
    pytest.param(functools.partial(make, **kwargs), kind, id=f"{make.__name__}-{kwargs}")
    for make, kwargs, kind in [
        (HistogramCalibrator, {}, "probability"),
        (HistogramCalibrator, {"strategy": "quantile"}, "probability"),
        (HistogramCalibrator, {"score_kind": "logit"}, "logit"),
        (IsotonicCalibrator, {}, "probability"),
        (IsotonicCalibrator, {"score_kind": "logit"}, "logit"),
        (PlattCalibrator, {}, "probability"),
        (PlattCalibrator, {"score_kind": "logit"}, "logit"),
        (BetaCalibrator, {}, "probability"),
        (TemperatureCalibrator, {}, "probability"),
    ]
]
# Sizes: the array code, and the compiled passes (the summary and the Newton passes start there).
SIZES = [200, NUMBA_MIN_ROWS + 5]
BAD_VALUES = [np.nan, np.inf, -np.inf, 1.5, -0.25]


def scores_of(n: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    p = rng.uniform(0.01, 0.99, n)
    y = (rng.random(n) < p).astype(float)
    return (p if kind == "probability" else np.log(p / (1 - p))), y


def message_of(check: Callable[[], Any]) -> str:
    """The message the check raises on its own."""
    with pytest.raises(ValueError, match="value") as raised:
        check()
    return str(raised.value)


def refuses(value: float, kind: str) -> bool:
    return not np.isfinite(value) or (kind == "probability" and not 0 <= value <= 1)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize(("make", "kind"), MAPS)
def test_fit_and_predict_raise_the_checks_message(
    make: Any, kind: str, n: int, parallel: bool, weighted: bool
) -> None:
    score, y = scores_of(n, kind)
    # Weights take the fits off their unit-weight paths (isotonic regression: the argsort walk).
    w = np.random.default_rng(1).uniform(0.5, 1.5, n) if weighted else None
    fitted = make().fit(score, y, sample_weight=w)
    for value in BAD_VALUES:
        bad = score.copy()
        bad[1] = value
        bad[n - 2] = value
        labels = y.copy()
        labels[n - 4] = value
        with parallel_twins_only() if parallel else nullcontext():
            if not refuses(value, kind):
                make().fit(bad, y, sample_weight=w)
                fitted.predict(bad)
            else:
                expected = message_of(lambda: check_scores(bad, "X", kind))  # noqa: B023
                with pytest.raises(ValueError, match=re.escape(expected)):
                    make().fit(bad, y, sample_weight=w)
                with pytest.raises(ValueError, match=re.escape(expected)):
                    fitted.predict(bad)
            expected = message_of(lambda: check_labels(labels, "y"))  # noqa: B023
            with pytest.raises(ValueError, match=re.escape(expected)):
                make().fit(score, labels, sample_weight=w)


@pytest.mark.parametrize(("make", "kind"), MAPS)
def test_a_frame_names_the_column(make: Any, kind: str) -> None:
    n = NUMBA_MIN_ROWS + 5
    score, y = scores_of(n, kind)
    fitted = make(score_col="s").fit(pd.DataFrame({"s": score}), y)
    bad = score.copy()
    bad[17] = np.nan
    frame = pd.DataFrame({"s": bad})
    match = re.escape("X['s']: 1 value(s) (first at row 17: nan) are NaN or infinite")
    with pytest.raises(ValueError, match=match):
        make(score_col="s").fit(frame, y)
    with pytest.raises(ValueError, match=match):
        fitted.predict(frame)


@pytest.mark.parametrize("unit", [False, True])
@pytest.mark.parametrize("uniform", [True, False])
@pytest.mark.parametrize("parallel", [False, True])
def test_bin_passes_count_what_the_scan_refuses(uniform: bool, parallel: bool, unit: bool) -> None:
    rng = np.random.default_rng(5)
    n = 70_000
    p, y, w = rng.random(n), (rng.random(n) < 0.4).astype(float), rng.random(n)
    p[[3, 9, 400]] = [np.nan, 1.5, -np.inf]
    p[[bins.CHUNK_ROWS + 5, bins.CHUNK_ROWS + 6]] = [7.0, np.nan]  # the second chunk's labels are 0 or 1
    y[[9, 11]] = [np.nan, 2.0]
    interior = np.linspace(0, 1, 11)[1:-1]
    good = (p >= 0) & (p <= 1) & (y >= 0) & (y <= 1)

    def weights(rows: np.ndarray) -> np.ndarray:
        """The weights of ``rows``: the unit view (the counting path of 0/1 labels) or drawn ones."""
        return np.broadcast_to(np.float64(1.0), (np.count_nonzero(rows),)) if unit else w[rows]

    every = np.ones(n, dtype=bool)
    with parallel_twins_only() if parallel else nullcontext():
        _, n_outside = bins.bin_sums_and_outside(p, y, weights(every), interior, uniform=uniform)
        assert n_outside == np.count_nonzero(~good) == 6
        if unit:  # refused scores with 0/1 labels are counted, in the bins the scatter gives them
            labels = np.where((y == 0) | (y == 1), y, 0.0)
            bounds = bins.bounds_of(interior, uniform)
            counted = bins._bin_sums_cpu(p, labels, weights(every), bounds, uniform, True)
            scattered = bins._bin_sums_cpu(p, labels, weights(every), bounds, uniform, False)
            assert_array_equal(counted[0], scattered[0])
            assert counted[1] == scattered[1] == 5
        sums, n_outside = bins.bin_sums_and_outside(
            p[good], y[good], weights(good), interior, uniform=uniform
        )
        assert n_outside == 0
        ids = np.searchsorted(interior, p[good], side="left")
        expected = np.stack(
            [np.bincount(ids, v, 10) for v in (weights(good), (weights(good) * y[good]))], axis=1
        )
        assert_allclose(sums, expected, rtol=1e-12)
        assert_array_equal(sums, bins.bin_sums(p[good], y[good], weights(good), interior, uniform=uniform))
        values = rng.random(10)
        out, n_outside = bins.lookup_bins_and_outside(p, interior, values, uniform=uniform)
        assert n_outside == 5
        inside = (p >= 0) & (p <= 1)
        assert_array_equal(out[inside], bins.lookup_bins(p[inside], interior, values, uniform=uniform))
        assert_array_equal(out[9], values[-1])  # above 1: the last bin, as before
        assert_array_equal(bins.lookup_bins(p, interior, values, uniform=uniform), out)


@pytest.mark.parametrize("parallel", [False, True])
def test_interp_and_logistic_passes_count_what_the_scan_refuses(parallel: bool) -> None:
    rng = np.random.default_rng(6)
    x = rng.random(70_000)
    x[[1, 5, 8, 13]] = [np.nan, np.inf, -2.0, 1.0]
    knots_x, knots_y = np.array([0.1, 0.4, 0.9]), np.array([0.0, 0.5, 0.7])
    finite = np.isfinite(x)
    with parallel_twins_only() if parallel else nullcontext():
        for kind, expected in (("probability", 3), ("logit", 2)):
            out, n_refused = bins.interp_clipped_and_refused(x, knots_x, knots_y, kind)
            assert n_refused == expected
            assert_array_equal(out[finite], bins.interp_clipped(x[finite], knots_x, knots_y))
            assert out[1] == knots_y[0]  # NaN: below the first knot, never a read outside the table
        for mode, kind, expected in (
            (FEATURES_LOGIT, "probability", 3),
            (FEATURES_BETA, "probability", 3),
            (FEATURES_COLUMNS, "logit", 2),
        ):
            coef = np.array([0.7, 1.3]) if mode == FEATURES_BETA else np.array([0.7])
            out, n_refused = predict_logistic_and_refused(x, coef, 0.2, mode=mode, scan_kind=kind)
            assert n_refused == expected
            assert_array_equal(out, predict_logistic(x, coef, 0.2, mode=mode))
