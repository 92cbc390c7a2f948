"""Automatic calibration: cross-fit gpucal's calibrators on the calibration rows and keep the best.

:class:`AutoCalibrator` is the estimator; :mod:`gpucal.auto.candidates` lists what it chooses among,
:mod:`gpucal.auto.folds` cuts the folds and :mod:`gpucal.auto.blend` fits the optional stacked blend.
"""

from gpucal.auto.model import AutoCalibrator

__all__ = ["AutoCalibrator"]
