"""Candidates as JSON: how ``AutoCalibrator.save`` writes its ``candidates``, and how they are read back.

A candidate given by name stays a name; a gpucal calibrator becomes ``{"class": ..., "params": ...}``.
"""

from __future__ import annotations

from typing import Any

from gpucal.catalogue import METHODS


def candidate_spec(estimator: Any) -> Any:
    """A candidate as JSON: its name when given by name, else ``{"class": ..., "params": ...}``."""
    if isinstance(estimator, str | dict):
        return estimator
    if type(estimator) not in METHODS.values():
        msg = (
            f"candidates: {type(estimator).__name__} is not a gpucal calibrator, so the model cannot be "
            "saved as JSON; give gpucal calibrators (or their names) to save it"
        )
        raise TypeError(msg)
    return {"class": type(estimator).__name__, "params": estimator.get_params(deep=False)}


def candidate_from_spec(entry: Any) -> Any:
    """Inverse of :func:`candidate_spec` for ``{"class": ..., "params": ...}`` entries; others unchanged."""
    if not isinstance(entry, dict):
        return entry
    classes = {cls.__name__: cls for cls in METHODS.values()}
    if (
        set(entry) != {"class", "params"}
        or entry["class"] not in classes
        or not isinstance(entry["params"], dict)
    ):
        msg = (
            "candidates: a dict entry must be {'class': <a gpucal calibrator class name>, 'params': {...}}; "
            f"got {entry!r}"
        )
        raise ValueError(msg)
    return classes[entry["class"]](**entry["params"])


__all__ = ["candidate_from_spec", "candidate_spec"]
