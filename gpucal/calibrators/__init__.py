"""Calibrators: scikit-learn-style estimators over a score (and later, its features).

Each class is a thin shell (``base.Calibrator``) around pure array functions (``fit_isotonic``,
``fit_platt``, ...) that fit from aggregated sums, so the same fit runs on the CPU, the GPU and
Dask partitions. The base of every other method too (MBCT, HC, CCL, the neural calibrators); the table
of all of them by name is :mod:`gpucal.catalogue`, and ``gpucal.make_calibrator`` builds one.
"""

from __future__ import annotations

from gpucal.calibrators.base import Calibrator
from gpucal.calibrators.bbq import BBQCalibrator
from gpucal.calibrators.beta import BetaCalibrator
from gpucal.calibrators.centered_isotonic import CenteredIsotonicCalibrator
from gpucal.calibrators.dirichlet import DirichletCalibrator
from gpucal.calibrators.downsampling import DownsamplingCorrection, correct_downsampling
from gpucal.calibrators.enir import ENIRCalibrator
from gpucal.calibrators.feature_platt import FeatureAwarePlattCalibrator
from gpucal.calibrators.hinge_platt import HingePlattCalibrator
from gpucal.calibrators.histogram import HistogramCalibrator
from gpucal.calibrators.isotonic import IsotonicCalibrator
from gpucal.calibrators.platt import PlattCalibrator
from gpucal.calibrators.scaling_binning import ScalingBinningCalibrator
from gpucal.calibrators.sir import SIRCalibrator
from gpucal.calibrators.spline import SplineCalibrator
from gpucal.calibrators.temperature import TemperatureCalibrator
from gpucal.calibrators.venn_abers import VennAbersCalibrator

__all__ = [
    "BBQCalibrator",
    "BetaCalibrator",
    "Calibrator",
    "CenteredIsotonicCalibrator",
    "DirichletCalibrator",
    "DownsamplingCorrection",
    "ENIRCalibrator",
    "FeatureAwarePlattCalibrator",
    "HingePlattCalibrator",
    "HistogramCalibrator",
    "IsotonicCalibrator",
    "PlattCalibrator",
    "SIRCalibrator",
    "ScalingBinningCalibrator",
    "SplineCalibrator",
    "TemperatureCalibrator",
    "VennAbersCalibrator",
    "correct_downsampling",
]
