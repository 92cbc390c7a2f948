"""MBCT: Multiple Boosting Calibration Trees (Huang et al., WWW 2022), gpucal's feature-aware calibrator."""

from gpucal.mbct.model import MBCT
from gpucal.trees.ensemble import TreeEnsemble

__all__ = ["MBCT", "TreeEnsemble"]
