"""MBCT: Multiple Boosting Calibration Trees (Huang et al., WWW 2022), gpucal's feature-aware calibrator."""

# gpucal.calibrators' registry imports this package's model: import the registry first, so that the
# import cycle between them always resolves in the same order, whichever is imported first.
import gpucal.calibrators  # noqa: F401
from gpucal.mbct.model import MBCT
from gpucal.partition.ensemble import TreeEnsemble

__all__ = ["MBCT", "TreeEnsemble"]
