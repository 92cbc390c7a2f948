"""Which columns of ``X`` a feature-aware fit reads: the default feature columns and the label check.

Every feature-aware calibrator (feature-aware Platt, MBCT, HC, CCL, NeuCalib, the automatic calibrator)
and ``gpucal fit`` resolve their features here, once, on the whole data, before anything is fitted.

Default features
----------------
With ``feature_cols=None`` the features are every column of ``X`` except

* ``score_col``;
* the label: a column with the name of ``y`` (a pandas, polars, cudf or dask Series), or holding the
  values of ``y`` on every row (``fit(df, df["clicked"].to_numpy())``);
* the weights: likewise a column named like ``sample_weight`` or holding its values on every row;
* :data:`gpucal._frames.ORACLE_COLUMNS` (``p_true``, the data sets' true probability).

A feature that *is* the label gives a perfect fit on the calibration rows and a ``KeyError`` in
production (where the label is not known yet), so an explicit ``feature_cols`` naming it, by name or by
values, is refused with ``ValueError``. Naming the weight column explicitly is allowed.

The label recoded (``"yes"``/``"no"`` beside ``y = LabelEncoder().fit_transform(...)``, or ``1 - y``) holds
other values than ``y``: it is found, for labels in [0, 1], as a column that *separates* the classes,
each of its few values (at most :data:`MAX_RECODED_VALUES`, each on at least :data:`MIN_ROWS_PER_VALUE`
rows) seen with one class only. Such a column is left out of the default features with a warning
naming it; named in ``feature_cols`` it is kept, with the same warning (a feature can separate the
classes without being the label: the warning says how to keep it).

Values are compared row by row as numbers (booleans as 0 and 1; NaN equals nothing); a column of
strings or categories never equals a label. Over many blocks (dask) the comparison is one pass of
counts added over the blocks (:meth:`gpucal.rows.Rows.sum`), so every partition reads the same features.

Inside :func:`trusting_feature_cols` an explicit ``feature_cols`` is only checked to name distinct
columns of ``X`` other than the score, not compared with the label and the weights: the automatic
calibrator compares its columns with the labels once, on every row, and then fits its candidates on
subsets of those rows, where the comparison would only be repeated or, on a small fold, refuse a
column that equals the label there by chance.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from gpucal._backend import is_cupy_array, to_numpy
from gpucal._frames import (
    Column,
    as_column,
    column_names,
    frame_columns,
    numeric_values,
    resolve_feature_names,
)
from gpucal._validation import as_1d_array, warn_at_caller
from gpucal.rows import RowBlock, Rows
from gpucal.rows.collections import any_dask

#: True inside :func:`trusting_feature_cols`.
_TRUSTED: ContextVar[bool] = ContextVar("gpucal_trusted_feature_cols", default=False)


@contextmanager
def trusting_feature_cols() -> Iterator[None]:
    """Within the block, :func:`resolve_feature_cols` checks that an explicit ``feature_cols`` names
    distinct columns of ``X`` other than the score, and does not compare them with the labels and weights
    (module docstring): for fits on row subsets of an ``X`` whose columns the caller compared on every
    row."""
    token = _TRUSTED.set(True)
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def resolve_feature_cols(
    rows: Rows,
    X: Any,
    y: Any,
    sample_weight: Any = None,
    *,
    score_col: Hashable,
    feature_cols: Sequence[Hashable] | str | None,
) -> Sequence[Hashable] | str | None:
    """Return the feature columns a fit reads (module docstring): ``feature_cols`` resolved and checked.

    Parameters
    ----------
    rows : Rows
        ``as_rows(X=X, y=y, sample_weight=sample_weight)``, the rows the fit reads.
    X, y, sample_weight
        The fit's inputs as given (their column and Series names are read here).
    score_col : hashable or list of hashable
        The score column, or the class-probability columns (never features).
    feature_cols : list of hashable, str or None
        The estimator's parameter.

    Returns
    -------
    list of hashable, or ``feature_cols`` unchanged
        With ``feature_cols=None``, the default features; an explicit list once checked. ``X`` without
        columns (1-D scores) gives ``feature_cols`` back unchanged, for the fit's own errors.

    Raises
    ------
    ValueError
        An explicit ``feature_cols`` names the label column (same name as ``y``, or same values), a
        score column, or a column twice.
    KeyError
        An explicit ``feature_cols`` names a column ``X`` does not have.
    """
    names = list(X.columns) if any_dask(X) else column_names(X)
    if names is None:
        return feature_cols
    candidates = resolve_feature_names(names, score_col, feature_cols)
    if not candidates:
        return candidates if feature_cols is None else feature_cols
    if feature_cols is not None and _TRUSTED.get():
        return feature_cols
    label_name, weight_name = _series_name(y), _series_name(sample_weight)
    checks = rows.sum(_column_checks, candidates, sample_weight is not None)
    differs = checks[:, :2]
    is_label = {c for j, c in enumerate(candidates) if c == label_name or differs[j, 0] == 0}
    is_weight = set()
    if sample_weight is not None:
        is_weight = {c for j, c in enumerate(candidates) if c == weight_name or differs[j, 1] == 0}
    class_counts = checks[:, 2:].reshape(len(candidates), VALUE_BUCKETS + 1, 2)
    recoded = [c for c in recoded_labels(class_counts, candidates) if c not in is_label | is_weight]
    if recoded:
        _warn_recoded(recoded, explicit=feature_cols is not None)
    if feature_cols is not None:
        if is_label:
            column = next(c for c in candidates if c in is_label)
            how = "has the name of y" if column == label_name else "holds the same values as y on every row"
            msg = (
                f"feature_cols: column {column!r} {how}: it is the label, and a calibrator that reads the "
                "label as a feature fits perfectly here and cannot predict where the label is unknown; "
                "leave it out of feature_cols"
            )
            raise ValueError(msg)
        return feature_cols
    return [c for c in candidates if c not in is_label and c not in is_weight and c not in recoded]


def _series_name(x: Any) -> Hashable | None:
    """The name of a pandas, polars, cudf or dask Series (None for arrays and unnamed Series)."""
    if x is None or isinstance(x, np.ndarray) or not hasattr(x, "name"):
        return None
    name = x.name
    return name if isinstance(name, Hashable) and name not in (None, "") else None


#: Rows of a block a candidate column is compared on first: one that differs from the label (or the
#: weights) there is not read further. A column equal to it there is compared on every row.
HEAD_ROWS = 1024


def _column_checks(block: RowBlock, candidates: list[Hashable], weighted: bool) -> np.ndarray:
    """Per candidate column of one block, one row of ``[d_y, d_w, class counts...]`` (float64): the rows
    where the column differs from ``y`` (``sample_weight``), and its :func:`_class_counts` flattened.
    Each column is read once for both (a column of strings is factorized to be read at all)."""
    X, y, w = block["X"], block.columns.get("y"), block.columns.get("sample_weight")
    targets = [_numeric_target(y), _numeric_target(w) if weighted else None]
    out = np.zeros((len(candidates), 2 + 2 * (VALUE_BUCKETS + 1)))
    out[:, :2] = float(len(block))
    out[:, 2:] = _NOT_RECODED.ravel()
    for j, name in enumerate(candidates):
        try:
            column = frame_columns(X, [name])[name]
        except TypeError:  # a dtype no feature may have (dates, nested): not the label; the fit says why
            continue
        _rows_differing(column, targets, out[j, :2])
        out[j, 2:] = _class_counts(column, targets[0]).ravel()
    return out


def _rows_differing(column: Column, targets: list[Any], out: np.ndarray) -> None:
    """Write into ``out`` (``[d_y, d_w]``, left as it is for a target that is None or of another length)
    the rows where the column differs from each target, over its first ``HEAD_ROWS`` rows when some
    differ there, else over all of them. So ``d`` is 0 exactly when the column holds the target on every
    row, which is all the caller reads of it (summed over blocks); a column that differs early is
    converted to numbers on its first rows only (converting every row of 8 integer columns of 1e7 rows
    took 0.3-0.7 s)."""
    head = numeric_values(Column(column.values[:HEAD_ROWS], column.categories, column.dtype))
    if head is None:  # strings or categories: never the label itself
        return
    values = None
    for i, target in enumerate(targets):
        if target is None or target.shape != column.values.shape:
            continue
        count = _count_differing(head, target[:HEAD_ROWS])
        if count == 0:
            values = numeric_values(column) if values is None else values
            count = _count_differing(values, target)
        out[i] = float(count)


def _count_differing(values: Any, target: Any) -> int:
    """Count the entries of ``values`` that differ from ``target``'s; on the host when one is on the GPU
    and the other not (labels in cupy beside host columns: cupy refuses numpy's operands)."""
    if is_cupy_array(values) != is_cupy_array(target):
        values, target = to_numpy(values), to_numpy(target)
    return int((values != target).sum())


#: Most distinct values of a column read as the label recoded (:func:`recoded_labels`).
MAX_RECODED_VALUES = 16
#: Fewest rows of every value of a column read as the label recoded: on fewer, a rare level (or an id)
#: seen with one class separates the classes by chance, or by a strong feature's right.
MIN_ROWS_PER_VALUE = 8
#: Hash buckets the values of a column are counted in, per class. Two values that share one are
#: counted as one (a chance of about 1 in 256 for a pair of values): a separation is hidden, or the
#: count of values and the rows per value change, either way.
VALUE_BUCKETS = 256
#: The text hash's key (``pandas.util.hash_array``): one under which the common spellings of a label
#: (no/yes, 0/1, false/true, N/Y, neg/pos, good/bad, ... and the numbers -1, 0, 1, 2, NaN) fall in
#: distinct buckets, as a test checks; under pandas' own key "no" shares the number 1's.
TEXT_HASH_KEY = "gpucal-labels-01"
#: :func:`_class_counts` of a column a block shows to be no recoded label.
_NOT_RECODED = np.vstack([np.zeros((VALUE_BUCKETS, 2)), np.ones((1, 2))])


def recoded_labels(class_counts: np.ndarray, candidates: list[Hashable]) -> list[Hashable]:
    """The candidate columns that hold the label recoded (module docstring), from their
    :func:`_class_counts` added over the blocks: at most :data:`MAX_RECODED_VALUES` values, each on
    :data:`MIN_ROWS_PER_VALUE` rows or more and seen with one class only, and both classes present
    (with one class every value is seen with one class: the fit refuses such labels)."""
    found = []
    for j, column in enumerate(candidates):
        per_value, mixed = class_counts[j, :VALUE_BUCKETS], class_counts[j, VALUE_BUCKETS]
        rows = per_value.sum(axis=1)
        present = rows > 0
        separates = mixed.sum() == 0 and not bool(((per_value[:, 0] > 0) & (per_value[:, 1] > 0)).any())
        few = 2 <= int(present.sum()) <= MAX_RECODED_VALUES
        both_classes = bool(per_value[:, 0].sum() > 0) and bool(per_value[:, 1].sum() > 0)
        if separates and few and both_classes and bool((rows[present] >= MIN_ROWS_PER_VALUE).all()):
            found.append(column)
    return found


def _class_counts(column: Column, y: Any) -> np.ndarray:
    """``(VALUE_BUCKETS + 1, 2)`` counts of one block's column: the negative and positive rows (``1 -
    y``, ``y``) of each bucket of its values, or, in the last row, a mark that the block shows it
    separates nothing (:data:`_NOT_RECODED`). Counted on about ``HEAD_ROWS`` evenly strided rows first
    (rows sorted by the label would separate at the head), and on every row only when those separate
    the classes with at most ``MAX_RECODED_VALUES`` values: an ordinary feature costs a thousand rows."""
    n_rows = column.values.shape[0]
    if y is None or y.shape != column.values.shape:
        return _NOT_RECODED
    counts = _bucket_class_counts(column, y, slice(None, None, max(1, n_rows // HEAD_ROWS)))
    if counts is not None and n_rows > HEAD_ROWS:
        counts = _bucket_class_counts(column, y, slice(None))
    return _NOT_RECODED if counts is None else np.vstack([counts, np.zeros((1, 2))])


def _bucket_class_counts(column: Column, y: Any, rows: slice) -> np.ndarray | None:
    """The ``(VALUE_BUCKETS, 2)`` class counts of the column's ``rows``, or None when they show it is no
    recoded label: a value with both classes, too many values, or labels outside [0, 1] (several
    classes, or values the fit refuses)."""
    labels = np.asarray(to_numpy(y[rows]), dtype=np.float64)
    if not bool(((labels >= 0.0) & (labels <= 1.0)).all()):
        return None
    buckets = _value_buckets(column, rows)
    counts = np.stack(
        [
            np.bincount(buckets, weights=1.0 - labels, minlength=VALUE_BUCKETS),
            np.bincount(buckets, weights=labels, minlength=VALUE_BUCKETS),
        ],
        axis=1,
    )
    present = counts.sum(axis=1) > 0
    if int(present.sum()) > MAX_RECODED_VALUES or bool(((counts[:, 0] > 0) & (counts[:, 1] > 0)).any()):
        return None
    return counts


def _value_buckets(column: Column, rows: slice) -> np.ndarray:
    """A hash bucket per row of the column's ``rows``, the same for a value in every block and family:
    a number (bool, int or float, in a numeric column or among categories) by its float64 value (-0.0
    as 0.0, every NaN and a missing category as one NaN), any other category by its text. Only the
    distinct values are hashed."""
    import pandas as pd

    values = to_numpy(column.values[rows])
    if column.categories is None:
        codes, uniques = pd.factorize(np.asarray(values, dtype=np.float64), use_na_sentinel=False)
        return _number_buckets(np.asarray(uniques, dtype=np.float64))[codes]
    codes = values.astype(np.int64)
    used = np.unique(codes[codes >= 0])
    categories = np.asarray(column.categories, dtype=object)[used]
    numeric = np.array([isinstance(c, int | float | np.number | np.bool_) for c in categories], dtype=bool)
    table = np.empty(used.shape[0] + 1, dtype=np.int64)
    table[0] = _number_buckets(np.array([np.nan]))[0]  # a missing category: as a missing number
    table[1:][numeric] = _number_buckets(np.array([float(c) for c in categories[numeric]], dtype=np.float64))
    texts = np.array([str(c) for c in categories[~numeric]], dtype=object)
    hashed = pd.util.hash_array(texts, hash_key=TEXT_HASH_KEY)
    table[1:][~numeric] = (hashed % np.uint64(VALUE_BUCKETS)).astype(np.int64)
    return table[np.where(codes >= 0, np.searchsorted(used, codes) + 1, 0)]


def _number_buckets(numbers: np.ndarray) -> np.ndarray:
    """The bucket of each float64 number: -0.0 as 0.0 and every NaN as one (pandas before 3 hashes
    their bits apart)."""
    import pandas as pd

    canonical = np.where(np.isnan(numbers), np.nan, numbers + 0.0)
    return (pd.util.hash_array(canonical) % np.uint64(VALUE_BUCKETS)).astype(np.int64)


def _warn_recoded(columns: list[Hashable], *, explicit: bool) -> None:
    """Warn, at the user's fit call, that ``columns`` separate the classes: left out of the default
    features, or kept as named."""
    names = ", ".join(repr(c) for c in columns)
    if explicit:
        what = "kept, as feature_cols names them; leave them out if they are the label"
    else:
        what = "left out of the default features; name them in feature_cols to read them all the same"
    msg = (
        f"X column(s) {names} separate the classes of y (each value is seen with one class only): they "
        f"look like the label recoded, which is not known where a calibrator predicts; {what}"
    )
    warn_at_caller(msg)


def _numeric_target(x: Any) -> Any:
    """Labels or weights as float64 numbers, or None when they hold none (the fit's checks say why)."""
    if x is None:
        return None
    try:
        return numeric_values(as_column(as_1d_array(x, "y"), "y"))
    except (TypeError, ValueError):
        return None


__all__ = ["resolve_feature_cols", "trusting_feature_cols"]
