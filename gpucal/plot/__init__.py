"""Reliability diagrams: the per-bin numbers (:func:`reliability_curve`) and their plots; MBCT plots.

Without bins: the smooth kernel curve with its bootstrap band (:func:`smooth_reliability_curve`,
:func:`plot_smooth_reliability`; Błasiok & Nakkiran, as relplot) and the CORP isotonic curve with its
Brier decomposition (:func:`corp_curve`, :func:`plot_corp_reliability`; Dimitriadis, Gneiting & Jordan).
The Murphy diagram (:func:`murphy_curve`, :func:`plot_murphy_curve`; Ehm, Gneiting, Jordan & Krüger).
The calibration belt (:func:`plot_calibration_belt`, the numbers from
:func:`gpucal.metrics.calibration_belt`; Finazzi et al., Nattino et al.).

:func:`reliability_curve` and :func:`feature_calibration` are pure computation (numpy / numba, no
matplotlib). :func:`plot_reliability`, :func:`plot_reliability_to_png`, :func:`plot_tree` (one tree of
a fitted MBCT chain) and :func:`plot_feature_calibration` (calibration per feature value, before and
after) draw with matplotlib, an optional dependency (``pip install gpucal[plot]``) imported only when
they are called.
"""

from gpucal.plot.belt import plot_calibration_belt
from gpucal.plot.curve import ReliabilityCurve, auto_n_bins, reliability_curve
from gpucal.plot.murphy import MurphyCurve, murphy_curve, plot_murphy_curve
from gpucal.plot.reliability import plot_reliability, plot_reliability_to_png
from gpucal.plot.smooth import (
    CorpCurve,
    SmoothReliabilityCurve,
    corp_curve,
    plot_corp_reliability,
    plot_smooth_reliability,
    smooth_reliability_curve,
)
from gpucal.plot.trees import FeatureCalibration, feature_calibration, plot_feature_calibration, plot_tree

__all__ = [
    "CorpCurve",
    "FeatureCalibration",
    "MurphyCurve",
    "ReliabilityCurve",
    "SmoothReliabilityCurve",
    "auto_n_bins",
    "corp_curve",
    "feature_calibration",
    "murphy_curve",
    "plot_calibration_belt",
    "plot_corp_reliability",
    "plot_feature_calibration",
    "plot_murphy_curve",
    "plot_reliability",
    "plot_reliability_to_png",
    "plot_smooth_reliability",
    "plot_tree",
    "reliability_curve",
    "smooth_reliability_curve",
]
