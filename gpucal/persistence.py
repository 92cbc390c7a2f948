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

A file cannot hurt the process that loads it: only a regular file is read (a device such
as ``/dev/zero`` or a FIFO is refused before it is opened), and at most ``MAX_FILE_BYTES``; the parser
refuses ``NaN``/``Infinity``, number literals that overflow to infinity (``1e999``), integers longer
than ``MAX_INT_DIGITS`` digits, and nesting deeper than ``MAX_NESTING`` (it parses under a recursion
limit leaving it at most ``PARSE_RECURSION_LIMIT`` levels, whatever the process set); a ``null`` or a
boolean where a number is expected is an error, never a NaN. Every class checks its state's sizes
against each other in ``_check_state`` (the number of classes, trees, clusters and nodes the arrays
really hold), so nothing a file declares can make ``load`` or ``predict`` allocate more than the
file's own arrays. Every failure is a :class:`ModelFileError`.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from gpucal._version import __version__
from gpucal.registry import class_named, class_names

FORMAT = "gpucal-model"
SCHEMA_VERSION = 1
MAX_FILE_BYTES = 1 << 30
# Integers in a model file fit int64 (19 digits); Python refuses to parse past 4300 digits at all.
MAX_INT_DIGITS = 20
# gpucal's own files nest 8 levels at most (a CCL file holding a gpucal model's code maps).
MAX_NESTING = 32
# The levels of recursion the JSON parser may use below its caller whatever limit the process set: the
# parser recurses in C once per level, and a file nesting 200,000 deep overflowed the C stack (a
# segmentation fault) under a limit of 100,000 before the nesting check could run.
PARSE_RECURSION_LIMIT = 4_000


class ModelFileError(ValueError):
    """A model file cannot be loaded: corrupt, truncated, wrong version or not a gpucal model."""


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


def check_records(value: Any, name: str, fields: dict[str, tuple[type, ...]], max_length: int) -> None:
    """Raise ``ValueError`` unless ``value`` is a list of at most ``max_length`` flat records.

    For a ``"json"`` state field such as a fit's ``history_``: each record is an object whose keys are
    among ``fields`` and whose values have the listed types (a bool is no int, numbers are finite), so a
    file cannot hand ``load`` an unbounded list or nested data to hold in memory.
    """
    if not isinstance(value, list) or len(value) > max_length:
        msg = f"{name}: expected a list of at most {max_length} records"
        raise ValueError(msg)
    for record in value:
        if not isinstance(record, dict) or not set(record) <= set(fields):
            msg = f"{name}: each record must be an object with keys among {sorted(fields)}"
            raise ValueError(msg)
        for key, item in record.items():
            types = fields[key]
            wrong_bool = isinstance(item, bool) and bool not in types
            if (
                wrong_bool
                or not isinstance(item, types)
                or (isinstance(item, float) and not math.isfinite(item))
            ):
                msg = f"{name}: {key!r} must be {' or '.join(t.__name__ for t in types)}, got {item!r}"
                raise ValueError(msg)


def rebuilt_object(value: Any, cls: type, name: str, what: str, *, allow_none: bool = False) -> Any:
    """Return a ``"json"`` state field as a ``cls`` object: plain data (a dict) rebuilt by
    ``cls.from_dict``, an object of ``cls`` kept, None kept when ``allow_none``; anything else raises
    ``ValueError`` naming the field (``"<name>: expected an <what> object"``)."""
    if value is None and allow_none:
        return None
    if isinstance(value, dict):
        value = cls.from_dict(value)  # type: ignore[attr-defined]
    if not isinstance(value, cls):
        msg = f"{name}: expected an {what} object" + (" or null" if allow_none else "")
        raise ValueError(msg)
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


#: A loaded model's coefficients and map parameters must be below this in size: far above what a fit's
#: penalised coefficients reach, and far enough below float64's limit that a map summing them times a
#: basis stays finite instead of reaching inf - inf.
MAX_LOADED_MAGNITUDE = 1e100


def check_magnitude(values: np.ndarray, name: str) -> None:
    """Raise ``ValueError`` unless every entry of ``values`` is at most :data:`MAX_LOADED_MAGNITUDE` in
    size (a model file's coefficients, checked on load)."""
    if not (np.abs(values) <= MAX_LOADED_MAGNITUDE).all():
        msg = f"{name}: an entry is larger than {MAX_LOADED_MAGNITUDE:g} in size, far past any fitted one"
        raise ValueError(msg)


#: A loaded map's term (a coefficient times a distance between scores) must be below this in size.
MAX_TERM = 1e300


def check_span(knots: np.ndarray, name: str) -> None:
    """Raise ``ValueError`` unless increasing ``knots`` (scores, as a fit saw them) span a finite range.

    Knots are scores, and a margin of 1e150 is a score a fit may see; knots farther apart than float64
    holds (+-1e308) make an infinite slope or gap, and 0 * inf (NaN) where a map interpolates them.
    """
    with np.errstate(over="ignore"):  # the overflow is what is checked for
        span = knots[-1] - knots[0] if knots.shape[0] else 0.0
    if not np.isfinite(span):
        msg = f"{name}: the knots span more than float64 holds ({float(knots[0])!r} to {float(knots[-1])!r})"
        raise ValueError(msg)


def _json_default(value: Any) -> Any:
    """``json``'s ``default``: a numpy scalar anywhere in a document (a parameter ``np.int64(0)`` naming a
    column, one in a candidate's parameters) is written as Python's number, and a numpy array (an
    array-like parameter: a spline's knots, hinge Platt's quantiles) as a list, as is a pandas Index or
    Series (``feature_cols=df.columns.drop("label")``); anything else is refused as ``json`` refuses it."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    if type(value).__module__.split(".")[0] == "pandas" and hasattr(value, "tolist"):
        return value.tolist()
    msg = f"Object of type {type(value).__name__} is not JSON serializable"
    raise TypeError(msg)


def document_text(document: dict[str, Any]) -> str:
    """A model's document (:func:`to_dict`) as the JSON text :func:`save` writes (``allow_nan=False``: a
    non-finite number is a bug, not data)."""
    return json.dumps(document, allow_nan=False, indent=1, default=_json_default)


def save(model: Any, path: str | os.PathLike[str]) -> None:
    """Write ``model`` to ``path`` as JSON: :func:`loadable_text` of its :func:`to_dict`."""
    text = loadable_text(model, to_dict(model))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def loadable_text(model: Any, document: dict[str, Any]) -> str:
    """The JSON text of ``model``'s ``document`` (:func:`document_text`) once it reads back as
    :func:`load` reads a file; ``ValueError`` otherwise, so a file that is written loads.

    It may not where parameters were changed after the fit: one the fitted state is read with (the
    class's ``_state_params``: a forest's ``mode``) is refused as ``predict`` refuses it, another that
    no longer matches the state (``set_params(n_bins=11)`` on a fitted histogram) by the load's own
    checks, and a value past what the parser takes (an integer of 21 digits) by the parser.
    """
    for name in model._state_params:
        model._fitted_param(name)
    text = document_text(document)
    try:
        from_dict(parse_document(text, "the file"))
    except ModelFileError as error:
        msg = f"{document['class']} cannot be saved: the file would not load ({error})"
        if "inconsistent fitted state" in str(error) or "bad parameters" in str(error):
            msg += "; were its parameters changed after the fit? Refit it, or set them back"
        raise ValueError(msg) from None
    return text


def _reject_constant(name: str) -> None:
    msg = f"the file holds the non-finite number {name}; gpucal never writes one"
    raise ModelFileError(msg)


def plain_numbers(value: Any, depth: int) -> bool:
    """Whether ``value`` (a ``"json"`` state field's part) is a ``depth``-deep list of ints and floats:
    never a bool, a string or ``null``, which numpy would read as 1, a parsed number or NaN."""
    if depth == 0:
        return type(value) is int or type(value) is float
    return isinstance(value, list) and all(plain_numbers(v, depth - 1) for v in value)


def _is_number(value: Any) -> bool:
    """An int or a finite float, never a bool or ``null`` (which numpy would read as 1 or NaN)."""
    return (type(value) is int) or (type(value) is float and math.isfinite(value))


def _decode_array(where: str, kind: str, value: Any) -> np.ndarray:
    ndim = 2 if kind == "float_matrix" else 1
    rows = value if ndim == 2 else [value]
    if not isinstance(value, list) or not all(isinstance(row, list) for row in rows):
        msg = f"{where}: expected a list ({ndim}-D), got {type(value).__name__}"
        raise ModelFileError(msg)
    if ndim == 2 and len({len(row) for row in rows}) > 1:
        msg = f"{where}: not a rectangular array of numbers (rows of different lengths)"
        raise ModelFileError(msg)
    integers = kind == "int_array"
    for row in rows:
        if not all((type(v) is int) if integers else _is_number(v) for v in row):
            what = "integers" if integers else "finite numbers (null, booleans and strings are not numbers)"
            msg = f"{where}: expected a {ndim}-D array of {what}"
            raise ModelFileError(msg)
    try:
        arr = np.asarray(value, dtype=np.int64 if integers else np.float64)
    except OverflowError:
        msg = f"{where}: an integer outside int64"
        raise ModelFileError(msg) from None
    if arr.ndim != ndim:  # [] where a matrix is expected
        msg = f"{where}: expected a {ndim}-D array"
        raise ModelFileError(msg)
    return arr


def _decode_state_value(cls_name: str, name: str, kind: str, value: Any) -> Any:
    where = f"{cls_name} state {name!r}"
    if kind in ("float_array", "int_array", "float_matrix"):
        return _decode_array(where, kind, value)
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
    return value  # "json": plain data, the class's _check_state checks it


def from_dict(document: Any) -> Any:
    """Rebuild a fitted calibrator from :func:`to_dict`'s output, checking every part first.

    The class is looked up in :mod:`gpucal.registry`, which every method joins where it is defined; a
    class whose package was not imported yet (a CCL embedding naming an MBCT model in a process that
    never imported ``gpucal.mbct``) is found once the registry is completed (``registry.complete``).
    This module sits below the methods (``ARCHITECTURE.md``) and imports none of them.
    """
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        msg = "not a gpucal model file (no 'format': 'gpucal-model' at the top level)"
        raise ModelFileError(msg)
    version = document.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:  # true and 1.0 equal 1
        msg = (
            f"schema_version {version!r} is not supported by gpucal {__version__} (it reads {SCHEMA_VERSION})"
        )
        raise ModelFileError(msg)
    missing = [key for key in ("class", "params", "state") if key not in document]
    if missing:
        msg = f"model file is missing {missing}"
        raise ModelFileError(msg)
    cls_name = document["class"]
    cls = class_named(cls_name) if isinstance(cls_name, str) else None
    if cls is None:
        msg = f"unknown calibrator class {cls_name!r}; known: {class_names()}"
        raise ModelFileError(msg)
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
    model._remember_fit_params()
    check_state = getattr(model, "_check_state", None)
    if check_state is not None:
        try:
            check_state()
        # Whatever plain data a hostile file holds, checking it ends in one error type.
        except (
            ValueError,
            TypeError,
            KeyError,
            IndexError,
            AttributeError,
            OverflowError,
            RecursionError,
        ) as error:
            msg = f"{cls_name}: inconsistent fitted state: {error}"
            raise ModelFileError(msg) from None
    return model


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        msg = f"the number {text[:30]!r} overflows to infinity; gpucal never writes one"
        raise ModelFileError(msg)
    return value


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        msg = f"an integer of {len(text.lstrip('-'))} digits; model files hold at most {MAX_INT_DIGITS}"
        raise ModelFileError(msg)
    return int(text)


def _check_nesting(document: Any) -> None:
    """Raise unless lists and objects nest at most ``MAX_NESTING`` deep (an iterative walk)."""
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > MAX_NESTING:
                    msg = f"lists and objects nest more than {MAX_NESTING} deep; gpucal's files nest far less"
                    raise ModelFileError(msg)
                stack.append((child, depth + 1))


_PARSE_LOCK = threading.Lock()


def _stack_depth() -> int:
    """The calling thread's number of Python frames."""
    depth, frame = 0, sys._getframe()
    while frame.f_back is not None:
        depth, frame = depth + 1, frame.f_back
    return depth + 1


@contextmanager
def _bounded_recursion() -> Iterator[None]:
    """Run the block with at most :data:`PARSE_RECURSION_LIMIT` levels of recursion left to it, whatever
    the process's limit, and restore the limit after it. One parse runs at a time (the limit is the
    process's: a deeper parse in another thread would lift a shallow one's bound; the parser holds the
    GIL in any case); a thread recursing past the bound meanwhile stops, as under Python's default."""
    with _PARSE_LOCK:
        limit = sys.getrecursionlimit()
        bound = min(limit, _stack_depth() + PARSE_RECURSION_LIMIT)
        if bound < limit:
            sys.setrecursionlimit(bound)
        try:
            yield
        finally:
            if bound < limit:
                sys.setrecursionlimit(limit)


def read_document(path: str | os.PathLike[str]) -> Any:
    """Return the parsed JSON of a model file, refusing what is no regular file, too large or malformed.

    Only a regular file is opened (``/dev/zero`` reports size 0 and never ends; a FIFO blocks), and
    opened without blocking, its type checked again on the open handle; at most ``MAX_FILE_BYTES`` are
    read. Raises :class:`ModelFileError` (or ``OSError`` when the file cannot be read at all).
    """
    name = os.fspath(path)
    if not stat.S_ISREG(os.stat(name).st_mode):
        msg = f"{name!r} is not a regular file (a directory, device or FIFO); model files are regular files"
        raise ModelFileError(msg)
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the two looks
            msg = f"{name!r} is not a regular file; model files are regular files"
            raise ModelFileError(msg)
        raw = handle.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        msg = f"{name!r} is larger than {MAX_FILE_BYTES} bytes, the most a model file may hold"
        raise ModelFileError(msg)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        msg = f"{name!r} cannot be parsed: UnicodeDecodeError"
        raise ModelFileError(msg) from None
    return parse_document(text, repr(name))


def parse_document(text: str, name: str) -> Any:
    """Return the JSON of a model file's ``text`` (``name`` names it in errors), parsed under the limits
    of the module docstring; :class:`ModelFileError` otherwise."""
    try:
        with _bounded_recursion():
            document = json.loads(
                text,
                parse_constant=_reject_constant,
                parse_float=_parse_float,
                parse_int=_parse_int,
            )
    except ModelFileError:
        raise
    except json.JSONDecodeError as error:
        msg = f"{name} is not valid JSON (truncated or corrupt?): {error}"
        raise ModelFileError(msg) from None
    except (RecursionError, ValueError, OverflowError, MemoryError) as error:
        msg = f"{name} cannot be parsed: {type(error).__name__}"
        raise ModelFileError(msg) from None
    _check_nesting(document)
    return document
