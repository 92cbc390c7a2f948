"""Heterogeneous calibration (Durfee et al. 2022): a label-predicting tree's leaves, a map per leaf."""

# gpucal.calibrators' registry imports this package's model: import the registry first, so that the
# import cycle between them always resolves in the same order, whichever is imported first.
import gpucal.calibrators  # noqa: F401
from gpucal.hc.model import HeterogeneousCalibrator

__all__ = ["HeterogeneousCalibrator"]
