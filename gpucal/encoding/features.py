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
from gpucal._validation import as_1d_array
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
    differs = rows.sum(_rows_differing, candidates, sample_weight is not None)
    is_label = {c for j, c in enumerate(candidates) if c == label_name or differs[0, j] == 0}
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
    is_weight = set()
    if sample_weight is not None:
        is_weight = {c for j, c in enumerate(candidates) if c == weight_name or differs[1, j] == 0}
    return [c for c in candidates if c not in is_label and c not in is_weight]


def _series_name(x: Any) -> Hashable | None:
    """The name of a pandas, polars, cudf or dask Series (None for arrays and unnamed Series)."""
    if x is None or isinstance(x, np.ndarray) or not hasattr(x, "name"):
        return None
    name = x.name
    return name if isinstance(name, Hashable) and name not in (None, "") else None


#: Rows of a block a candidate column is compared on first: one that differs from the label (or the
#: weights) there is not read further. A column equal to it there is compared on every row.
HEAD_ROWS = 1024


def _rows_differing(block: RowBlock, candidates: list[Hashable], weighted: bool) -> np.ndarray:
    """``[[d_y(j)], [d_w(j)]]`` of one block (float64): the rows where column ``j`` differs from ``y``
    (``sample_weight``), over the block's first ``HEAD_ROWS`` rows when some differ there, else over all
    of them. So ``d`` is 0 exactly when the column holds the target on every row, which is all the
    caller reads of it (summed over blocks); a column that differs early is converted to numbers on its
    first rows only (converting every row of 8 integer columns of 1e7 rows took 0.3-0.7 s)."""
    X, y, w = block["X"], block.columns.get("y"), block.columns.get("sample_weight")
    targets = [_numeric_target(y), _numeric_target(w) if weighted else None]
    out = np.full((2, len(candidates)), float(len(block)))
    for j, name in enumerate(candidates):
        try:
            column = frame_columns(X, [name])[name]
        except TypeError:  # a dtype no feature may have (dates, nested): not the label; the fit says why
            continue
        head = numeric_values(Column(column.values[:HEAD_ROWS], column.categories, column.dtype))
        if head is None:  # strings or categories: never the label
            continue
        values = None
        for i, target in enumerate(targets):
            if target is None or target.shape != column.values.shape:
                continue
            differing = _count_differing(head, target[:HEAD_ROWS])
            if differing == 0:
                values = numeric_values(column) if values is None else values
                differing = _count_differing(values, target)
            out[i, j] = float(differing)
    return out


def _count_differing(values: Any, target: Any) -> int:
    """Count the entries of ``values`` that differ from ``target``'s; on the host when one is on the GPU
    and the other not (labels in cupy beside host columns: cupy refuses numpy's operands)."""
    if is_cupy_array(values) != is_cupy_array(target):
        values, target = to_numpy(values), to_numpy(target)
    return int((values != target).sum())


def _numeric_target(x: Any) -> Any:
    """Labels or weights as float64 numbers, or None when they hold none (the fit's checks say why)."""
    if x is None:
        return None
    try:
        return numeric_values(as_column(as_1d_array(x, "y"), "y"))
    except (TypeError, ValueError):
        return None


__all__ = ["resolve_feature_cols", "trusting_feature_cols"]
