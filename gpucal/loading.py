"""``gpucal.load``: a saved model of any of gpucal's classes, read back from its JSON file.

A model file names its class, and :mod:`gpucal.persistence` rebuilds the classes of :mod:`gpucal.registry`,
which each method joins where it is defined. This module stands above the methods and imports every one
of them, so that the registry is complete here; ``gpucal.registry.complete`` imports this module.
"""

from __future__ import annotations

import os
from typing import Any

# Each import makes its package's methods join gpucal.registry.
import gpucal.auto
import gpucal.calibrators
import gpucal.ccl
import gpucal.hc
import gpucal.mbct
import gpucal.neural  # noqa: F401
from gpucal.persistence import from_dict, read_document


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
