"""Heterogeneous calibration (Durfee et al. 2022): a label-predicting tree's leaves, a map per leaf."""

from gpucal.hc.model import HeterogeneousCalibrator

__all__ = ["HeterogeneousCalibrator"]
