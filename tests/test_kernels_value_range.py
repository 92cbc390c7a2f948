"""``gpucal.kernels.value_range`` against numpy's ``min`` and ``max``, and the [0, 1] checks that use it."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

from gpucal._validation import check_labels, check_probabilities
from gpucal.kernels import value_range
from gpucal.kernels.jit import PARALLEL_MIN_ROWS, parallel_twins_only


def oracle_range(x: np.ndarray) -> tuple[float, float]:
    return float(np.min(x)), float(np.max(x))


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("bad", [None, np.nan, np.inf, -np.inf])
def test_value_range_matches_numpy(parallel: bool, bad: float | None) -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=200_003)
    if bad is not None:
        x[123_457] = bad
    with parallel_twins_only() if parallel else contextlib.nullcontext():
        got = value_range(x, backend="cpu")
    expected = value_range(x, backend="oracle")
    assert expected == pytest.approx(oracle_range(x), nan_ok=True)
    assert got == pytest.approx(expected, nan_ok=True)
    assert value_range(x) == pytest.approx(expected, nan_ok=True)  # numpy below the parallel size
    # A strided view is read where it lies.
    assert value_range(x[::3], backend="cpu") == pytest.approx(oracle_range(x[::3]), nan_ok=True)


def test_value_range_of_nothing_and_bad_input() -> None:
    assert value_range(np.empty(0), backend="cpu") == (math.inf, -math.inf)
    with pytest.raises(TypeError, match="1-D float64"):
        value_range(np.zeros(3, dtype=np.float32))


@pytest.mark.parametrize(("value", "message"), [(np.nan, "NaN or infinite"), (1.5, r"outside \[0, 1\]")])
def test_large_probability_checks_find_the_bad_row(value: float, message: str) -> None:
    p = np.full(PARALLEL_MIN_ROWS, 0.5)
    check_probabilities(p)
    p[PARALLEL_MIN_ROWS - 7] = value
    with pytest.raises(ValueError, match=rf"first at row {PARALLEL_MIN_ROWS - 7}: .*{message}"):
        check_probabilities(p)
    with pytest.raises(ValueError, match=f"first at row {PARALLEL_MIN_ROWS - 7}"):
        check_labels(p)
