"""Calibrators: scikit-learn-style estimators over a score (and later, its features).

Each class is a thin shell (``_base.Calibrator``) around pure array functions (``fit_isotonic``,
``fit_platt``, ...) that fit from aggregated sums, so the same fit runs on the CPU, the GPU and
Dask partitions. :func:`make_calibrator` builds one by name, accepting scikit-learn's names.
"""

from __future__ import annotations

import inspect
from typing import Any

from gpucal.calibrators._base import Calibrator
from gpucal.calibrators.beta import BetaCalibrator
from gpucal.calibrators.dirichlet import DirichletCalibrator
from gpucal.calibrators.downsampling import DownsamplingCorrection, correct_downsampling
from gpucal.calibrators.feature_platt import FeatureAwarePlattCalibrator
from gpucal.calibrators.histogram import HistogramCalibrator
from gpucal.calibrators.isotonic import IsotonicCalibrator
from gpucal.calibrators.platt import PlattCalibrator
from gpucal.calibrators.scaling_binning import ScalingBinningCalibrator
from gpucal.calibrators.sir import SIRCalibrator
from gpucal.calibrators.temperature import TemperatureCalibrator
from gpucal.ccl.model import ClusteredCalibrator
from gpucal.hc.model import HeterogeneousCalibrator
from gpucal.mbct.model import MBCT
from gpucal.neural.field_aware import FieldAwareCalibrator
from gpucal.neural.piecewise import PiecewiseLogitCalibrator

#: Name -> class. scikit-learn's names ("sigmoid", "isotonic", "temperature") are aliases of ours.
CALIBRATORS: dict[str, type[Calibrator]] = {
    "platt": PlattCalibrator,
    "sigmoid": PlattCalibrator,
    "temperature": TemperatureCalibrator,
    "beta": BetaCalibrator,
    "histogram": HistogramCalibrator,
    "isotonic": IsotonicCalibrator,
    "scaling_binning": ScalingBinningCalibrator,
    "sir": SIRCalibrator,
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


def make_calibrator(name: str, **params: Any) -> Calibrator:
    """Return an unfitted calibrator by name, with ``params`` passed to its constructor.

    Parameters
    ----------
    name : str
        One of :data:`CALIBRATORS`: ``"platt"`` (alias ``"sigmoid"``), ``"temperature"``, ``"beta"``,
        ``"histogram"``, ``"isotonic"``, ``"scaling_binning"``, ``"sir"``, ``"dirichlet"``,
        ``"downsampling"``, ``"feature_platt"``, ``"mbct"``, ``"hc"``, ``"ccl"``, ``"piecewise_logit"``,
        ``"neucalib"`` (alias ``"field_aware"``), ``"auto"`` (:class:`~gpucal.auto.AutoCalibrator`).
    **params
        Constructor parameters of that class; an unknown one raises ``TypeError`` naming it.

    Examples
    --------
    >>> from gpucal import make_calibrator
    >>> make_calibrator("sigmoid")
    PlattCalibrator()
    """
    if name not in CALIBRATORS:
        msg = f"unknown calibrator {name!r}; choose one of {sorted(CALIBRATORS)}"
        raise ValueError(msg)
    cls = CALIBRATORS[name]
    valid = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        msg = f"{cls.__name__} has no parameter(s) {unknown}; its parameters: {sorted(valid)}"
        raise TypeError(msg)
    return cls(**params)


# Last: AutoCalibrator builds its candidates from the names above (gpucal.auto imports this package first).
from gpucal.auto.model import AutoCalibrator  # noqa: E402

CALIBRATORS["auto"] = AutoCalibrator

__all__ = [
    "CALIBRATORS",
    "BetaCalibrator",
    "Calibrator",
    "ClusteredCalibrator",
    "DirichletCalibrator",
    "DownsamplingCorrection",
    "FeatureAwarePlattCalibrator",
    "FieldAwareCalibrator",
    "HeterogeneousCalibrator",
    "HistogramCalibrator",
    "IsotonicCalibrator",
    "PiecewiseLogitCalibrator",
    "PlattCalibrator",
    "SIRCalibrator",
    "ScalingBinningCalibrator",
    "TemperatureCalibrator",
    "correct_downsampling",
    "make_calibrator",
]
