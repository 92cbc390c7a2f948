"""MBCT: Multiple Boosting Calibration Trees (Huang et al., WWW 2022), gpucal's feature-aware calibrator."""

from gpucal.mbct._ensemble import TreeEnsemble
from gpucal.mbct.model import MBCT

__all__ = ["MBCT", "TreeEnsemble"]
