"""Reliability diagrams: the per-bin numbers (:func:`reliability_curve`) and their plots.

:func:`reliability_curve` is pure computation (numpy / numba, no matplotlib).
:func:`plot_reliability` and :func:`plot_reliability_to_png` draw with matplotlib, an optional
dependency (``pip install gpucal[plot]``) imported only when they are called.
"""

from gpucal.plot.curve import ReliabilityCurve, auto_n_bins, reliability_curve
from gpucal.plot.reliability import plot_reliability, plot_reliability_to_png

__all__ = [
    "ReliabilityCurve",
    "auto_n_bins",
    "plot_reliability",
    "plot_reliability_to_png",
    "reliability_curve",
]
