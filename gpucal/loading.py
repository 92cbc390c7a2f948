"""``gpucal.load``: a saved model of any of gpucal's classes, read back from its JSON file.

A model file names its class, and :mod:`gpucal.persistence` rebuilds only the classes registered with it;
each method's package registers its classes when it is imported. ``gpucal.persistence`` sits below the
methods and imports none of them, so the step "import every method" lives here, above the methods
(``ARCHITECTURE.md``): whatever the process imported before, ``load`` reads any gpucal model.
"""

from __future__ import annotations

import os
from typing import Any

# Each import registers its package's classes with gpucal.persistence.
import gpucal.auto
import gpucal.calibrators
import gpucal.ccl
import gpucal.hc
import gpucal.mbct
import gpucal.neural  # noqa: F401
from gpucal.persistence import _REGISTRY, from_dict, read_document


def load(path: str | os.PathLike[str]) -> Any:
    """Load a calibrator written by ``save``; a bad file raises :class:`~gpucal.persistence.ModelFileError`.

    Examples
    --------
    >>> import os, tempfile
    >>> from gpucal import PlattCalibrator, load
    >>> model = PlattCalibrator().fit([0.1, 0.4, 0.6, 0.9], [0, 0, 1, 1])
    >>> path = os.path.join(tempfile.mkdtemp(), "platt.json")
    >>> model.save(path)
    >>> load(path).predict([0.5]).round(3).tolist() == model.predict([0.5]).round(3).tolist()
    True
    """
    return from_dict(read_document(path))


def _registry() -> dict[str, type]:
    """Every loadable class by name (each method's package is imported above)."""
    return _REGISTRY
