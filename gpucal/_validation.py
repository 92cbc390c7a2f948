"""Checks on the arrays users hand in: one place, one wording.

Every check names the argument (or column) and says what is wrong and where, e.g.
``y_prob: 3 values outside [0, 1] (first at row 17: 1.2)``. Nothing is ever clipped or dropped
silently. Arrays keep their device: numpy stays numpy, cupy stays cupy.

``scan=False`` (:func:`check_probabilities`, :func:`check_scores`, :func:`check_labels`) returns the
array after the checks of its shape and type, its values unread, for a caller whose first compiled pass
reads every value anyway and checks it there: one pass over the rows instead of two. That pass must
flag every value the scan refuses (NaN, +-inf, outside [0, 1] where [0, 1] is the rule), and the caller,
when it flags one, calls the same check again with ``scan=True``, which raises the check's own message
(the column and the first bad row).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, is_cupy_array

SCORE_KINDS = ("probability", "logit")


def as_1d_array(x: Any, name: str) -> Any:
    """Return a 1-D numpy or cupy array from a sequence, numpy/cupy array or a single column.

    Accepts pandas, polars and cudf Series, pyarrow (Chunked)Arrays, numpy and cupy arrays and
    Python sequences. A cudf Series becomes a cupy array (no host copy). An object array of numbers
    becomes float64 (as scikit-learn's ``check_array`` reads it); missing values (``pd.NA``, None,
    nulls) are named, not read as numbers.
    """
    module = type(x).__module__.split(".")[0]
    # A frame has a 2-D shape; a Series or a pyarrow (Chunked)Array has one of 1-D or none at all.
    if module in ("pandas", "polars", "cudf", "pyarrow") and len(getattr(x, "shape", (0,))) != 1:
        msg = (
            f"{name}: expected one column, got a {type(x).__name__} of shape {tuple(x.shape)}; "
            "pass one column"
        )
        raise ValueError(msg)
    if is_cupy_array(x):
        arr = x
    elif module == "cudf":
        _check_no_missing(x.isna().to_numpy() if cudf_has_nulls(x) else None, lambda row: "null", name)
        arr = x.to_cupy()
    elif module == "pandas":
        # A Series, or a pandas array or Index (whose isna is numpy and which have no iloc).
        numpy_numbers = isinstance(x.dtype, np.dtype) and x.dtype.kind != "O"
        at = x.iloc if hasattr(x, "iloc") else x
        _check_no_missing(None if numpy_numbers else np.asarray(x.isna()), lambda row: repr(at[row]), name)
        arr = x.to_numpy()
    elif module == "polars":
        _check_no_missing(x.is_null().to_numpy() if x.null_count() else None, lambda row: "null", name)
        arr = x.to_numpy()
    elif module == "pyarrow":
        missing = x.is_null().to_numpy(zero_copy_only=False) if x.null_count else None
        _check_no_missing(missing, lambda row: "null", name)
        arr = x.to_numpy(zero_copy_only=False)
    else:
        arr = np.asarray(x)
    if arr.ndim != 1:
        msg = f"{name}: expected a 1-D array, got shape {tuple(arr.shape)}"
        raise ValueError(msg)
    if arr.dtype.kind == "O":
        arr = _object_numbers(arr, name)
    if arr.dtype.kind not in "biuf":
        msg = f"{name}: expected numbers, got dtype {arr.dtype}"
        raise TypeError(msg)
    return arr


def text_keyed(items: Iterable[tuple[Any, Any]], name: str) -> dict[str, Any]:
    """Key ``(label, value)`` pairs by the labels' text (report rows, legends). Labels of one text
    (the columns ``0`` and ``"0"``) are refused by name: keyed, one would silently replace the other."""
    keyed: dict[str, Any] = {}
    labels: dict[str, Any] = {}
    for label, value in items:
        text = str(label)
        if text in keyed:
            msg = f"{name}: the labels {labels[text]!r} and {label!r} read the same as text; rename one"
            raise ValueError(msg)
        keyed[text], labels[text] = value, label
    return keyed


def _object_numbers(arr: np.ndarray, name: str) -> np.ndarray:
    """Return an object array of numbers as float64.

    Missing values are named (``ValueError``); strings and anything ``float`` cannot read raise
    ``TypeError`` naming the cause.
    """
    import pandas as pd

    _check_no_missing(pd.isna(arr), lambda row: repr(arr[row]), name)
    text = np.fromiter((isinstance(v, str | bytes) for v in arr), dtype=bool, count=arr.shape[0])
    if text.any():  # "0.5" is no number here, though float() would read it
        row = int(np.argmax(text))
        msg = f"{name}: expected numbers, got dtype object (a string at row {row}: {arr[row]!r})"
        raise TypeError(msg)
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError) as exc:
        msg = f"{name}: expected numbers, got dtype object ({exc})"
        raise TypeError(msg) from exc


def _check_no_missing(missing: Any, show: Callable[[int], str], name: str) -> None:
    """Raise ``ValueError`` naming the first missing value (``pd.NA``, a null) of a column.

    ``missing`` is a boolean numpy mask, or None when the column cannot hold such values (a numpy
    dtype: there NaN is a number, and the finiteness checks name it); ``show(row)`` prints the
    missing value of that row as its library does.
    """
    if missing is None or not missing.any():
        return
    first = int(np.argmax(missing))
    msg = (
        f"{name}: {int(missing.sum())} missing value(s) (first at row {first}: {show(first)}); "
        "expected numbers: fill or drop the missing rows first"
    )
    raise ValueError(msg)


def _first_bad(mask: Any, values: Any) -> str:
    """Describe how many entries ``mask`` flags and the first of them."""
    xp = array_namespace(mask)
    n_bad = int(xp.count_nonzero(mask))
    first = int(xp.argmax(mask))
    return f"{n_bad} value(s) (first at row {first}: {float(values[first])!r})"


def check_row_mask(bad: Any, message: Callable[[int], str]) -> None:
    """Raise ``ValueError(message(row))`` at the first row that the boolean mask ``bad`` flags (numpy or
    cupy); nothing when it flags none."""
    if bool(bad.any()):
        raise ValueError(message(int(array_namespace(bad).argmax(bad))))


def _inside_unit_interval(arr: Any) -> bool:
    """Fast path of the [0, 1] checks: the range of the values, no temporaries.

    NaN fails both comparisons and +-inf fails one, so any bad value falls through to the full check,
    which finds it and words the error.
    """
    if arr.shape[0] == 0:
        return True
    if isinstance(arr, np.ndarray) and arr.dtype == np.float64:
        # One compiled parallel pass on large arrays instead of numpy's min and max, two on one core.
        from gpucal.kernels.value_range import value_range

        low, high = value_range(arr)
        return low >= 0 and high <= 1
    return bool(arr.min() >= 0) and bool(arr.max() <= 1)


def check_finite(x: Any, name: str) -> None:
    """Raise ``ValueError`` when ``x`` holds NaN or +-inf."""
    xp = array_namespace(x)
    bad = ~xp.isfinite(x)
    if bool(bad.any()):
        msg = f"{name}: {_first_bad(bad, x)} are NaN or infinite"
        raise ValueError(msg)


#: What :func:`check_probabilities` suggests for values outside [0, 1] where no ``score_kind`` exists.
TO_PROBABILITIES = "pass probabilities (margins/logits through a sigmoid first, e.g. scipy.special.expit)"


def check_probabilities(
    p: Any, name: str = "y_prob", *, fix: str = TO_PROBABILITIES, scan: bool = True
) -> Any:
    """Return ``p`` as a float64 1-D array after checking it is finite and inside [0, 1].

    ``fix`` ends the message for values outside [0, 1]: how the caller's own function takes margins.
    ``scan=False``: the values are not read (module docstring).
    """
    raw = as_1d_array(p, name)  # a cudf Series becomes cupy: the namespace is the converted array's
    xp = array_namespace(raw)
    arr = xp.asarray(raw, dtype=xp.float64)
    if not scan or _inside_unit_interval(arr):
        return arr
    check_finite(arr, name)
    bad = (arr < 0) | (arr > 1)
    if bool(bad.any()):
        msg = f"{name}: {_first_bad(bad, arr)} are outside [0, 1]; {fix}"
        raise ValueError(msg)
    return arr


def check_not_class_labels(p: Any, name: str = "y_prob") -> None:
    """Refuse predictions of an integer or boolean dtype: class labels (``predict``), not probabilities.

    Tables of calibration metrics over hard 0/1 predictions are mostly infinite log-losses and sigmas;
    a float array of probabilities that happen to be 0 or 1 is accepted.
    """
    dtype = getattr(p, "dtype", None) if not isinstance(p, list | tuple) else np.asarray(p).dtype
    if dtype is None:
        dtype = getattr(p, "type", "")  # pyarrow arrays
    kind = str(dtype).lower()
    if kind.removeprefix("u").startswith(("int", "bool")):
        msg = (
            f"{name}: dtype {dtype} holds class labels, not probabilities; pass the predicted probability "
            "of the positive class (e.g. model.predict_proba(X)[:, 1]), or cast to float to score hard 0/1 "
            "predictions as probabilities"
        )
        raise TypeError(msg)


def check_scores(s: Any, name: str = "score", kind: str = "probability", *, scan: bool = True) -> Any:
    """Check a model score: a probability in [0, 1] or, with ``kind="logit"``, any finite margin.

    ``scan=False``: the values are not read (module docstring).
    """
    if kind not in SCORE_KINDS:
        msg = f"The 'score_kind' parameter must be one of {SCORE_KINDS}. Got {kind!r} instead."
        raise ValueError(msg)
    if kind == "probability":
        fix = (
            "pass margins/logits as score_kind='logit', or, to a calibrator without that parameter, their "
            "logistic function (scipy.special.expit)"
        )
        return check_probabilities(s, name, fix=fix, scan=scan)
    raw = as_1d_array(s, name)
    xp = array_namespace(raw)
    arr = xp.asarray(raw, dtype=xp.float64)
    if scan:
        check_finite(arr, name)
    return arr


def check_labels(y: Any, name: str = "y_true", *, allow_soft: bool = True, scan: bool = True) -> Any:
    """Return binary labels as float64.

    Labels must be 0 or 1; with ``allow_soft=True`` any value in [0, 1] is accepted and read as
    the probability of the positive class (a soft or aggregated label: every metric and fit that
    uses ``y`` only through sums such as ``sum w*y`` treats it exactly as that fraction of a
    positive row). ``scan=False`` (soft labels only): the values are not read (module docstring).
    """
    if y is None:  # scikit-learn's wording, which its estimator checks look for
        msg = f"{name}: this calibrator requires y to be passed, but the target y is None"
        raise ValueError(msg)
    raw = as_1d_array(y, name)
    xp = array_namespace(raw)
    if raw.dtype == bool:
        raw = raw.astype(xp.int8)
    arr = xp.asarray(raw, dtype=xp.float64)
    if allow_soft and (not scan or _inside_unit_interval(arr)):
        return arr
    check_finite(arr, name)
    if allow_soft:
        bad = (arr < 0) | (arr > 1)
        rule = "in [0, 1]"
    else:
        bad = (arr != 0) & (arr != 1)
        rule = "0 or 1"
    if bool(bad.any()):
        msg = f"{name}: labels must be {rule}; {_first_bad(bad, arr)} are not"
        raise ValueError(msg)
    return arr


def check_sample_weight(sample_weight: Any, n_rows: int, name: str = "sample_weight", xp: Any = np) -> Any:
    """Return float64 weights of length ``n_rows`` (a read-only view of ones when None); finite, >= 0.

    ``xp`` is the scores' namespace: weights on another device are an error, not a silent copy.
    """
    if sample_weight is None:
        # A read-only zero-stride view: unit weights cost no memory (a float64 array of ones is as large
        # as the scores) and nothing can write into them by mistake.
        return xp.broadcast_to(xp.asarray(1.0, dtype=xp.float64), (n_rows,))
    w = as_1d_array(sample_weight, name)
    w_xp = array_namespace(w)
    if w_xp is not xp:
        msg = f"{name}: is a {w_xp.__name__} array but the scores are {xp.__name__}; put both on one device"
        raise TypeError(msg)
    w = w_xp.asarray(w, dtype=np.float64)
    if w.shape[0] != n_rows:
        msg = f"{name}: has {w.shape[0]} rows, expected {n_rows}"
        raise ValueError(msg)
    check_finite(w, name)
    bad = w < 0
    if bool(bad.any()):
        msg = f"{name}: weights must be >= 0; {_first_bad(bad, w)} are negative"
        raise ValueError(msg)
    if n_rows and not bool((w > 0).any()):
        msg = f"{name}: all weights are zero"
        raise ValueError(msg)
    return w


def check_consistent_length(**arrays: Any) -> int:
    """Return the common length of the named arrays (None entries are skipped) or raise."""
    lengths = {k: int(v.shape[0]) for k, v in arrays.items() if v is not None}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{k} has {n}" for k, n in lengths.items())
        msg = f"inputs have different numbers of rows: {shown}"
        raise ValueError(msg)
    return next(iter(lengths.values()), 0)


def _row_index(x: Any) -> Any:
    """Return the index of a pandas or cudf Series / DataFrame, else None (rows are paired by position).

    A dict of columns carries the index of its Series: they must share one (a dict's columns are
    paired with each other by position too, so their labels must agree as a frame's would).
    """
    if isinstance(x, Mapping):
        indexed = [(key, index) for key, value in x.items() if (index := _row_index(value)) is not None]
        for key, index in indexed[1:]:
            if not index.equals(indexed[0][1]):
                msg = (
                    f"X[{indexed[0][0]!r}] and X[{key!r}] have different indexes; rows are paired by "
                    "index label, never by position: align them first or pass a DataFrame"
                )
                raise ValueError(msg)
        return indexed[0][1] if indexed else None
    if type(x).__module__.split(".")[0] not in ("pandas", "cudf") or type(x).__name__ not in (
        "Series",
        "DataFrame",
    ):
        return None
    return x.index


def check_same_index(**named: Any) -> None:
    """Refuse pandas (or cudf) inputs of one call whose indexes differ: rows are never paired silently.

    The rule, the same for every fit and every metric: when two or more of the named inputs carry an
    index (pandas or cudf Series / DataFrames), the indexes must be equal, label for label and in the
    same order; otherwise ``ValueError`` names both inputs and the first position where they differ.
    Indexes holding the same labels in another order are refused too, not reordered: align them
    first (``y = y.loc[X.index]``) or drop both (``.reset_index(drop=True)``). Inputs without an
    index (numpy, cupy, polars, pyarrow, sequences, None) are paired by position.
    """
    indexed = [(name, index) for name, x in named.items() if (index := _row_index(x)) is not None]
    if len(indexed) < 2:
        return
    first_name, first_index = indexed[0]
    for name, index in indexed[1:]:
        if index.equals(first_index):
            continue
        if len(index) != len(first_index):
            msg = (
                f"{first_name} and {name} have indexes of different lengths ({len(first_index)} and "
                f"{len(index)} rows); rows are paired by index label, never by position"
            )
            raise ValueError(msg)
        left = _host_labels(first_index)
        right = _host_labels(index)
        row = int(np.argmax(left != right))
        msg = (
            f"{first_name} and {name} have different indexes (first at position {row}: "
            f"{first_name}.index[{row}] = {left[row]!r}, {name}.index[{row}] = {right[row]!r}); rows are "
            f"paired by index label, never by position: align them first ({name} = {name}.loc"
            f"[{first_name}.index]) or drop both indexes (.reset_index(drop=True))"
        )
        raise ValueError(msg)


def _host_labels(index: Any) -> np.ndarray:
    """Return the labels of a pandas or cudf index as a host object array (for comparing and printing)."""
    labels = index.to_pandas() if type(index).__module__.split(".")[0] == "cudf" else index
    return np.asarray(labels.to_numpy(dtype=object))


def check_not_empty(n_rows: int, name: str = "y_true") -> None:
    """Raise when there are no rows to compute on."""
    if n_rows == 0:
        msg = f"{name}: no rows"
        raise ValueError(msg)


def cudf_has_nulls(x: Any) -> bool:
    """Whether a cudf Series or Index holds a null: a Series says so without a pass (``has_nulls``), an
    Index through ``hasnans``."""
    return bool(x.has_nulls) if hasattr(x, "has_nulls") else bool(x.hasnans)


def warn_at_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn at the first frame outside gpucal: the user's call, whatever the depth of gpucal's own calls
    under it (a fixed ``stacklevel`` points into gpucal from one estimator or another)."""
    frame = sys._getframe(1)
    level = 2  # the caller's frame, seen from warnings.warn here
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "gpucal":
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    warnings.warn(message, category, stacklevel=level)


def check_invariant(condition: bool, message: str) -> None:
    """Raise ``RuntimeError`` when an internal invariant fails (unlike ``assert``, survives ``python -O``).

    For gpucal's own bugs, never for bad user input: those get a ``ValueError``/``TypeError``
    naming the argument.
    """
    if not condition:
        msg = f"internal error in gpucal: {message}; please report it"
        raise RuntimeError(msg)


def check_class_labels(y: Any, n_rows: int, n_classes: int, name: str = "y") -> Any:
    """Return class indices in ``[0, n_classes)`` as int64 (numpy or cupy)."""
    arr = y if is_cupy_array(y) else np.asarray(y.to_numpy() if hasattr(y, "to_numpy") else y)
    xp = array_namespace(arr)
    if arr.ndim != 1 or arr.shape[0] != n_rows:
        msg = f"{name}: expected {n_rows} class labels (1-D), got shape {arr.shape}"
        raise ValueError(msg)
    if arr.dtype.kind not in "biuf":
        msg = f"{name}: class labels must be integers, got dtype {arr.dtype}"
        raise TypeError(msg)
    values = xp.asarray(arr, dtype=xp.float64)
    bad = ~xp.isfinite(values) | (values != xp.floor(values)) | (values < 0) | (values >= n_classes)
    check_row_mask(
        bad,
        lambda row: (
            f"{name}: class labels must be integers in [0, {n_classes}) (one per column of X); "
            f"row {row} holds {float(values[row])!r}"
        ),
    )
    return xp.asarray(values, dtype=xp.int64)
