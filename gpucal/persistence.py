"""Fitted calibrators as JSON: a schema version, the class, the parameters, the fitted state.

No pickle, and nothing in a file decides what code runs: the class must be one of gpucal's
registered calibrators, every parameter goes through the class's own constraints, and every
fitted attribute is checked against the class's ``_state_spec`` (kind, shape, finiteness) before
it is set. A corrupt, truncated, wrong-version or hostile file fails with a ``ModelFileError``
that says which part is wrong.

File layout (schema version 1)::

    {"format": "gpucal-model", "schema_version": 1, "gpucal_version": "0.1.0",
     "class": "IsotonicCalibrator", "params": {...}, "state": {"X_thresholds_": [...], ...}}

State kinds: ``"float"``, ``"int"``, ``"bool"``, ``"str"``, ``"float_array"`` (1-D list of finite
numbers), ``"float_matrix"`` (2-D, rectangular), ``"int_array"``, ``"json"`` (plain nested data,
checked by the class). Floats are written with Python's shortest round-trip repr, so a loaded
model predicts bit-for-bit what the saved one did.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

from gpucal._version import __version__

FORMAT = "gpucal-model"
SCHEMA_VERSION = 1
MAX_FILE_BYTES = 1 << 30

_REGISTRY: dict[str, type] = {}


class ModelFileError(ValueError):
    """A model file cannot be loaded: corrupt, truncated, wrong version or not a gpucal model."""


def register(cls: type) -> type:
    """Class decorator: make a calibrator loadable by ``gpucal.load`` under its class name."""
    _REGISTRY[cls.__name__] = cls
    return cls


def _encode_state_value(kind: str, value: Any) -> Any:
    if kind in ("float_array", "float_matrix", "int_array"):
        return np.asarray(value).tolist()
    if kind == "float":
        return float(value)
    if kind == "int":
        return int(value)
    if kind == "bool":
        return bool(value)
    if kind == "json" and hasattr(value, "to_dict"):
        return value.to_dict()  # an object the class rebuilds from plain data in ``_check_state``
    return value


def to_dict(model: Any) -> dict[str, Any]:
    """Return the JSON-ready description of a fitted calibrator."""
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(model, list(model._state_spec))
    state = {
        name: _encode_state_value(kind, getattr(model, name)) for name, kind in model._state_spec.items()
    }
    return {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "gpucal_version": __version__,
        "class": type(model).__name__,
        "params": model.get_params(deep=False),
        "state": state,
    }


def save(model: Any, path: str | os.PathLike[str]) -> None:
    """Write ``model`` to ``path`` as JSON (``allow_nan=False``: a non-finite number is a bug, not data)."""
    document = to_dict(model)
    text = json.dumps(document, allow_nan=False, indent=1)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _reject_constant(name: str) -> None:
    msg = f"the file holds the non-finite number {name}; gpucal never writes one"
    raise ModelFileError(msg)


def _decode_state_value(cls_name: str, name: str, kind: str, value: Any) -> Any:
    where = f"{cls_name} state {name!r}"
    if kind in ("float_array", "int_array", "float_matrix"):
        ndim = 2 if kind == "float_matrix" else 1
        if not isinstance(value, list):
            msg = f"{where}: expected a list, got {type(value).__name__}"
            raise ModelFileError(msg)
        try:
            arr = np.asarray(value, dtype=np.int64 if kind == "int_array" else np.float64)
        except (TypeError, ValueError) as error:
            msg = f"{where}: not a rectangular array of numbers ({error})"
            raise ModelFileError(msg) from None
        if arr.ndim != ndim or (kind == "int_array" and any(isinstance(v, bool | float) for v in value)):
            msg = f"{where}: expected a {ndim}-D array of {'integers' if kind == 'int_array' else 'numbers'}"
            raise ModelFileError(msg)
        return arr
    checks = {"float": (int, float), "int": (int,), "bool": (bool,), "str": (str,)}
    if kind in checks:
        ok = isinstance(value, checks[kind]) and (kind == "bool" or not isinstance(value, bool))
        if not ok:
            msg = f"{where}: expected {kind}, got {type(value).__name__}"
            raise ModelFileError(msg)
        if kind == "float" and not math.isfinite(value):
            msg = f"{where}: not finite"
            raise ModelFileError(msg)
        return float(value) if kind == "float" else value
    return value  # "json": plain data, the class's _set_state checks it


def from_dict(document: Any) -> Any:
    """Rebuild a fitted calibrator from :func:`to_dict`'s output, checking every part first."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        msg = "not a gpucal model file (no 'format': 'gpucal-model' at the top level)"
        raise ModelFileError(msg)
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        msg = (
            f"schema_version {version!r} is not supported by gpucal {__version__} (it reads {SCHEMA_VERSION})"
        )
        raise ModelFileError(msg)
    missing = [key for key in ("class", "params", "state") if key not in document]
    if missing:
        msg = f"model file is missing {missing}"
        raise ModelFileError(msg)
    cls_name = document["class"]
    if not isinstance(cls_name, str) or cls_name not in _REGISTRY:
        msg = f"unknown calibrator class {cls_name!r}; known: {sorted(_REGISTRY)}"
        raise ModelFileError(msg)
    cls = _REGISTRY[cls_name]
    params, state = document["params"], document["state"]
    if not isinstance(params, dict) or not isinstance(state, dict):
        msg = f"{cls_name}: 'params' and 'state' must be JSON objects"
        raise ModelFileError(msg)
    try:
        model = cls(**params)
        model._validate_params()
    except (TypeError, ValueError) as error:
        msg = f"{cls_name}: bad parameters in the file: {error}"
        raise ModelFileError(msg) from None
    spec: dict[str, str] = model._state_spec
    if set(state) != set(spec):
        msg = f"{cls_name}: state has keys {sorted(state)}, expected {sorted(spec)}"
        raise ModelFileError(msg)
    for name, kind in spec.items():
        setattr(model, name, _decode_state_value(cls_name, name, kind, state[name]))
    check_state = getattr(model, "_check_state", None)
    if check_state is not None:
        try:
            check_state()
        except ValueError as error:
            msg = f"{cls_name}: inconsistent fitted state: {error}"
            raise ModelFileError(msg) from None
    return model


def load(path: str | os.PathLike[str]) -> Any:
    """Load a calibrator written by ``save``; a bad file raises :class:`ModelFileError`."""
    size = os.path.getsize(path)
    if size > MAX_FILE_BYTES:
        msg = f"{os.fspath(path)!r} is {size} bytes; model files are at most {MAX_FILE_BYTES}"
        raise ModelFileError(msg)
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        document = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        msg = f"{os.fspath(path)!r} is not valid JSON (truncated or corrupt?): {error}"
        raise ModelFileError(msg) from None
    except (RecursionError, UnicodeDecodeError) as error:
        msg = f"{os.fspath(path)!r} cannot be parsed: {type(error).__name__}"
        raise ModelFileError(msg) from None
    return from_dict(document)
