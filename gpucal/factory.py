"""``gpucal.make_calibrator``: any calibrator by name, the automatic one included."""

from __future__ import annotations

from typing import Any

# The automatic calibrator and the catalogue's methods join gpucal.registry when imported.
import gpucal.auto  # noqa: F401
from gpucal.calibrators import Calibrator
from gpucal.catalogue import build
from gpucal.registry import methods

#: Name -> class: every method of :mod:`gpucal.registry`, ``"auto"`` included (names and aliases, sorted).
CALIBRATORS: dict[str, type[Calibrator]] = {key: m.cls for key, m in methods().items()}


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
    return build(CALIBRATORS, name, params)


__all__ = ["CALIBRATORS", "make_calibrator"]
