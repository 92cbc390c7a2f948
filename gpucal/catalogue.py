"""Every calibration method by name: the table :class:`~gpucal.auto.AutoCalibrator` chooses among.

It stands above the methods it lists (the one-dimensional maps and feature-aware Platt, MBCT, HC, CCL and
the neural calibrators) and below the automatic calibrator; :mod:`gpucal.factory` adds ``"auto"`` to it
for :func:`~gpucal.factory.make_calibrator`. scikit-learn's names ("sigmoid", "isotonic", "temperature")
are aliases of ours.
"""

from __future__ import annotations

import inspect
from typing import Any

from gpucal.calibrators import (
    BetaCalibrator,
    Calibrator,
    CenteredIsotonicCalibrator,
    DirichletCalibrator,
    DownsamplingCorrection,
    FeatureAwarePlattCalibrator,
    HistogramCalibrator,
    IsotonicCalibrator,
    PlattCalibrator,
    ScalingBinningCalibrator,
    SIRCalibrator,
    TemperatureCalibrator,
    VennAbersCalibrator,
)
from gpucal.ccl import ClusteredCalibrator
from gpucal.hc import HeterogeneousCalibrator
from gpucal.mbct import MBCT
from gpucal.neural import FieldAwareCalibrator, PiecewiseLogitCalibrator

#: Name -> class of every method (the automatic calibrator aside).
METHODS: dict[str, type[Calibrator]] = {
    "platt": PlattCalibrator,
    "sigmoid": PlattCalibrator,
    "temperature": TemperatureCalibrator,
    "beta": BetaCalibrator,
    "histogram": HistogramCalibrator,
    "isotonic": IsotonicCalibrator,
    "centered_isotonic": CenteredIsotonicCalibrator,
    "scaling_binning": ScalingBinningCalibrator,
    "sir": SIRCalibrator,
    "venn_abers": VennAbersCalibrator,
    "dirichlet": DirichletCalibrator,
    "downsampling": DownsamplingCorrection,
    "feature_platt": FeatureAwarePlattCalibrator,
    "mbct": MBCT,
    "hc": HeterogeneousCalibrator,
    "ccl": ClusteredCalibrator,
    "piecewise_logit": PiecewiseLogitCalibrator,
    "neucalib": FieldAwareCalibrator,
    "field_aware": FieldAwareCalibrator,
}


def build(table: dict[str, type[Calibrator]], name: str, params: dict[str, Any]) -> Calibrator:
    """Return ``table[name](**params)``, refusing an unknown name or parameter by name."""
    if name not in table:
        msg = f"unknown calibrator {name!r}; choose one of {sorted(table)}"
        raise ValueError(msg)
    cls = table[name]
    valid = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        msg = f"{cls.__name__} has no parameter(s) {unknown}; its parameters: {sorted(valid)}"
        raise TypeError(msg)
    return cls(**params)


__all__ = ["METHODS", "build"]
