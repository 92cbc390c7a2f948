"""Every gpucal estimator against scikit-learn's own estimator checks, and its parameter tables (issue 18)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import gpucal.calibrators  # noqa: F401  (the calibrators first: gpucal.neural imports them)
from gpucal._params import Interval
from gpucal.calibrators import CALIBRATORS
from gpucal.calibrators._base import Calibrator
from gpucal.ccl.model import ClusteredCalibrator
from gpucal.hc.model import HeterogeneousCalibrator
from gpucal.mbct.model import MBCT
from gpucal.neural import FieldAwareCalibrator, PiecewiseLogitCalibrator, torch_available

#: Every estimator class: the registry's calibrators and the feature-aware ones it does not name.
ESTIMATOR_CLASSES: list[type[Calibrator]] = sorted(
    {*CALIBRATORS.values(), MBCT, HeterogeneousCalibrator, ClusteredCalibrator},
    key=lambda cls: cls.__name__,
)


# --------------------------------------------------------------------------------------------------
# Parameters: finite unless stated


def _float_intervals(cls: type[Calibrator]) -> list[tuple[str, Interval]]:
    found = []
    for name, constraint in cls._parameter_constraints.items():
        parts = getattr(constraint, "constraints", (constraint,))
        found += [(name, c) for c in parts if isinstance(c, Interval) and c.kind is float]
    return found


def test_real_intervals_refuse_inf_unless_they_say_so() -> None:
    """Issue 18: ``Interval(float, 0, None)`` let ``inf`` through (all-NaN predictions, torch IndexError)."""
    checked = 0
    for cls in ESTIMATOR_CLASSES:
        for name, interval in _float_intervals(cls):
            assert interval.accepts(math.inf) == (interval.high == math.inf), (cls.__name__, name)
            assert not interval.accepts(-math.inf), (cls.__name__, name)
            checked += 1
    assert checked >= 20


INF_CASES: list[tuple[Any, str]] = [
    (lambda: MBCT(leaf_penalty=math.inf), "leaf_penalty"),
    (lambda: HeterogeneousCalibrator(leaf_penalty=math.inf), "leaf_penalty"),
    (lambda: ClusteredCalibrator(penalty=math.inf), "penalty"),
    (lambda: FieldAwareCalibrator(learning_rate=math.inf), "learning_rate"),
    (lambda: FieldAwareCalibrator(monotone_penalty=math.inf), "monotone_penalty"),
    (lambda: PiecewiseLogitCalibrator(monotone_penalty=math.inf), "monotone_penalty"),
]


@pytest.mark.parametrize(("make", "name"), INF_CASES, ids=[f"{i}-{c[1]}" for i, c in enumerate(INF_CASES)])
def test_inf_parameters_are_refused_with_the_template(make: Any, name: str) -> None:
    estimator = make()
    if isinstance(estimator, FieldAwareCalibrator | PiecewiseLogitCalibrator) and not torch_available():
        pytest.skip("needs the neural extra (PyTorch)")
    match = (
        rf"The '{name}' parameter of {type(estimator).__name__} must be a float in [\[(]0, inf\)\. Got inf"
    )
    rng = np.random.default_rng(0)
    X = {"score": rng.uniform(0.1, 0.9, 40), "site": rng.integers(0, 2, 40)}
    with pytest.raises(ValueError, match=match):
        estimator.fit(X, rng.integers(0, 2, 40))
