"""Every calibration method by name: the table :class:`~gpucal.auto.AutoCalibrator` chooses among.

It stands above the methods (the one-dimensional maps and feature-aware Platt, MBCT, HC, CCL and the
neural calibrators), imports them all, and reads their names from :mod:`gpucal.registry`, where each
method joined with its aliases (scikit-learn's "sigmoid" for "platt"); it stands below the automatic
calibrator, which :mod:`gpucal.factory` adds for :func:`~gpucal.factory.make_calibrator`.
"""

from __future__ import annotations

import inspect
from typing import Any

# Each import makes its package's methods join gpucal.registry.
import gpucal.calibrators
import gpucal.ccl
import gpucal.hc
import gpucal.mbct
import gpucal.neural  # noqa: F401
from gpucal.calibrators import Calibrator
from gpucal.registry import methods

#: Name -> class of every method the automatic calibrator may choose (names and aliases, sorted).
METHODS: dict[str, type[Calibrator]] = {key: m.cls for key, m in methods().items() if m.candidate}


def build(table: dict[str, type[Calibrator]], name: str, params: dict[str, Any]) -> Calibrator:
    """Return ``table[name](**params)``, refusing an unknown name or parameter by name."""
    if name not in table:
        msg = f"unknown calibrator {name!r}; choose one of {sorted(table)}"
        raise ValueError(msg)
    cls = table[name]
    valid = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        msg = f"{cls.__name__} has no parameter(s) {unknown}; its parameters: {sorted(valid)}"
        raise TypeError(msg)
    return cls(**params)


__all__ = ["METHODS", "build"]
