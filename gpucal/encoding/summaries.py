"""What rows tell the feature encoder: categories, value-weight tables, and the quantile cuts read off them.

:func:`fit_bins` cuts a numeric column of rows at the inverted-CDF quantiles;
:func:`bin_edges_from_values` cuts the same from a column's distinct values and their weights.

:class:`~gpucal.encoding.FeatureEncoder` fitted on one block would give other blocks other codes (a
category it never saw, other quantile cuts). Fitted over :class:`gpucal.rows.Rows` it makes one pass:
every block summarises each column (:func:`block_summaries`): a categorical column by the categories
its rows use, a numeric column by the weight of every distinct finite value of positive weight (a keyed
table); the summaries are merged over blocks (:func:`merge_summaries`: categories united, tables merged
by value), and :meth:`~gpucal.encoding.FeatureEncoder.fit_summaries` reads the inverted-CDF quantile
cuts off the merged tables: exactly those of ``FeatureEncoder.fit`` on all the rows when the weights
are whole numbers (or absent). Fractional weights add per value and block here, row by row there, so
where the cumulative weight lands on a level (weights of 0.1: 30 of 300 rows is 0.1 of the total) the
two roundings can put the cut on neighbouring values. A numeric
column's table has one row per distinct value, capped by ``dask.config`` ``gpucal.max-distinct-keys``:
round a continuous column first (or bin it yourself) when it has more distinct values than that.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal._frames import Column, frame_columns
from gpucal.rows import RowBlock
from gpucal.rows.checks import check_partition_weight
from gpucal.rows.reduce import KeyedTable, check_table_size, group_sorted, merge_tables, merge_uniques

#: Kinds of column summary: a value-weight table (quantile bins), the categories used, or the value-weight
#: table of an integer column whose reading (by value or binned) depends on its distinct values
#: (``FeatureEncoder``'s default rule): every finite value is kept, zero weights included.
BINS, VALUES, INTEGERS = "bins", "values", "integers"

#: The default rule: an integer column is read by value when it has at most one distinct value per
#: ``ROWS_PER_VALUE`` rows and at most ``MAX_AUTO_VALUES`` of them; other numbers are binned.
ROWS_PER_VALUE = 20
MAX_AUTO_VALUES = 50_000


def is_integer_column(col: Column) -> bool:
    """Whether a numeric column has an integer dtype in its library (nullable integers included)."""
    return col.is_numeric and col.dtype.lower().removeprefix("u").startswith("int")


def max_auto_values(n_rows: int) -> int:
    """The most distinct values an integer column of ``n_rows`` rows may have to be read by value."""
    return min(MAX_AUTO_VALUES, n_rows // ROWS_PER_VALUE)


def integer_categories(values: Any) -> np.ndarray:
    """Distinct integer values (any numeric dtype holding integers) as a sorted object array of ints."""
    out = np.empty(len(values), dtype=object)
    out[:] = sorted(int(v) for v in values)
    return out


def as_codes(col: Column) -> tuple[Any, np.ndarray]:
    """Return ``(codes, categories)`` for any column; numbers are factorised by value (NaN -> -1)."""
    if not col.is_numeric:
        return col.values, col.categories  # type: ignore[return-value]
    xp = array_namespace(col.values)
    v = col.values
    if xp is np:
        import pandas as pd

        # A hash table, then a sort of the distinct values only: O(n), where np.unique sorts all n rows
        # (0.1 s per column at 1e6 rows). NaN becomes -1, as below.
        codes, uniques = pd.factorize(v, sort=True, use_na_sentinel=True)
        uniques = np.asarray(uniques)
    else:
        ok = ~xp.isnan(v) if v.dtype.kind == "f" else xp.ones(v.shape, dtype=bool)
        uniques, inverse = xp.unique(v[ok], return_inverse=True)
        codes = xp.full(v.shape, -1, dtype=xp.int64)
        codes[ok] = inverse.reshape(-1)
    cats = np.empty(uniques.shape[0], dtype=object)
    cats[:] = to_numpy(uniques).tolist()
    return codes, cats


def observed_categories(codes_cats: tuple[Any, np.ndarray]) -> np.ndarray:
    """The distinct category values that some row uses, sorted (by type name, then repr, if types mix)."""
    codes, cats = codes_cats
    if len(cats) == 0:
        return np.empty(0, dtype=object)
    xp = array_namespace(codes)
    counts = to_numpy(xp.bincount(codes[codes >= 0].astype(xp.int64), minlength=len(cats)))
    used = list(dict.fromkeys(plain_values(cats[counts > 0])))
    try:
        used.sort()
    except TypeError:
        used.sort(key=lambda v: (type(v).__name__, repr(v)))
    out = np.empty(len(used), dtype=object)
    out[:] = used
    return out


#: An integer column whose values span at most this many, and at most ``COUNTED_SPAN_PER_ROW`` per row,
#: is counted into a table of every value of its range (one ``bincount`` pass) to find the values it
#: holds, instead of being factorised by hashing (on make_ctr's fields of 150,000 rows 0.2 against 0.9 ms
#: a column). A table costs about 2 ns an entry to clear and scan, hashing about 100-140 ns a row: on
#: 4,000 rows they cost the same at a span of 200,000, and 100 rows spanning 1e6 hash in 0.04 ms where
#: the table takes 1.9.
MAX_COUNTED_SPAN = 1 << 20
COUNTED_SPAN_PER_ROW = 32


def check_exact_values(col: Column, name: Hashable, *, over_blocks: bool = False) -> None:
    """Refuse to read by value a column whose integers float64 rounded (:attr:`Column.rounded`): ids
    past 2**53 would merge, or be read into another id's code. Binned, such a column is fine.

    ``over_blocks``: a block of a fit over several (dask) cannot know whether the merged count of
    values will read the column by value or bin it, so it refuses an automatic integer column too;
    the message says how to have it binned.
    """
    if col.rounded:
        advice = "; or, to bin it, set categorical_cols=[]" if over_blocks else ""
        msg = (
            f"X[{name!r}]: integers beyond 2**53 with missing values are read as float64, which cannot "
            "hold them exactly, and this column may be read by value (ids would merge); fill the "
            f"missing values (e.g. with -1) or pass the ids as strings{advice}"
        )
        raise ValueError(msg)


def observed_values(col: Column) -> np.ndarray:
    """:func:`observed_categories` of :func:`as_codes` of ``col``: the distinct values some row holds,
    sorted. A numpy integer column spanning few enough values (:data:`MAX_COUNTED_SPAN`) is counted by
    value."""
    v = col.values
    if col.is_numeric and isinstance(v, np.ndarray) and v.dtype.kind in "iu" and v.size:
        low, high = int(v.min()), int(v.max())
        # Offsets are int64: a uint64 column above 2**63 - 1 is hashed instead.
        if high < 2**63 and high - low < min(MAX_COUNTED_SPAN, COUNTED_SPAN_PER_ROW * v.size):
            offsets = v if low == 0 and np.can_cast(v.dtype, np.intp) else np.subtract(v, low, dtype=np.int64)
            present = np.flatnonzero(np.bincount(offsets, minlength=high - low + 1)) + low
            out = np.empty(present.shape[0], dtype=object)
            out[:] = present.tolist()
            return out
    return observed_categories(as_codes(col))


def plain_value(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def plain_values(values: np.ndarray) -> list[Any]:
    """``plain_value`` of every entry of an object array, as a list: one pass over the entries' types
    when none is a numpy scalar (a 40,000-value column is read by every fit of a search)."""
    entries = values.tolist()
    if any(issubclass(kind, np.generic) for kind in set(map(type, entries))):
        return [plain_value(v) for v in entries]
    return entries


def block_summaries(
    X: Any, w: Any, categorical: frozenset[Hashable], limit: int, auto_integers: bool = False
) -> tuple[int, dict[Hashable, Any]]:
    """One block: its row count, and per column a value-weight table (numbers) or its categories.

    With ``auto_integers``, integer columns not in ``categorical`` get an :data:`INTEGERS` table: every
    finite value, zero weights included, so the merged table decides the column's reading.
    """
    columns = frame_columns(X)
    n_rows = len(X)
    out: dict[Hashable, Any] = {}
    for name, col in columns.items():
        if col.is_numeric and name not in categorical:
            kind = INTEGERS if auto_integers and is_integer_column(col) else BINS
            if kind == INTEGERS:
                check_exact_values(col, name, over_blocks=True)
            xp = array_namespace(col.values)
            weight = xp.ones(n_rows, dtype=xp.float64) if w is None else check_partition_weight(w, n_rows, xp)
            if kind == INTEGERS and col.values.dtype.kind in "iu":
                # Grouped as integers: through float64, ids past 2**53 would merge (the local fit
                # factorises the integers themselves).
                v, keep = col.values, xp.ones(n_rows, dtype=bool)
            else:
                v = xp.asarray(col.values, dtype=xp.float64)
                keep = xp.isfinite(v) if kind == INTEGERS else xp.isfinite(v) & (weight > 0)
            keys, sums = group_sorted((v[keep],), weight[keep][:, None], xp)
            check_table_size(int(sums.shape[0]), limit, f"X[{name!r}] distinct values", _round_values(name))
            out[name] = (kind, KeyedTable((to_numpy(keys[0]),), to_numpy(sums)))
        else:
            check_exact_values(col, name)
            out[name] = (VALUES, observed_categories(as_codes(col)))
    return n_rows, out


def _round_values(name: Hashable) -> str:
    """What the table-size check advises for a numeric feature column of too many distinct values."""
    return f"Round the values of X[{name!r}]"


def merge_summaries(*parts: tuple[int, dict[Hashable, Any]], limit: int) -> tuple[int, dict[Hashable, Any]]:
    """Merge blocks' summaries: rows added, categories united, value tables merged by value."""
    n_rows = sum(p[0] for p in parts)
    merged: dict[Hashable, Any] = {}
    for name, (kind, _) in parts[0][1].items():
        pieces = [p[1][name][1] for p in parts]
        if kind in (BINS, INTEGERS):
            what, advice = f"X[{name!r}] distinct values", _round_values(name)
            merged[name] = (kind, merge_tables(*pieces, limit=limit, what=what, advice=advice))
        else:
            merged[name] = (VALUES, merge_uniques(*pieces))
    return n_rows, merged


def read_block(block: RowBlock) -> tuple[Any, Any]:
    """The features and weights of a block of ``as_rows(X=..., sample_weight=...)``."""
    return block["X"], block["sample_weight"]


def summarise_block(
    block: Any,
    read: Callable[..., tuple[Any, Any]],
    args: tuple[Any, ...],
    categorical: frozenset[Hashable],
    limit: int,
    auto_integers: bool = False,
) -> tuple[int, dict[Hashable, Any]]:
    """:func:`~gpucal.encoding.summaries.block_summaries` of the features and weights ``read`` gives."""
    X, w = read(block, *args)
    return block_summaries(X, w, categorical, limit, auto_integers)


def fit_bins(values: Any, weight: Any, n_bins: int) -> np.ndarray:
    """Inverted-CDF quantile cut points of the finite values, deduplicated, above the minimum."""
    xp = array_namespace(values)
    v = xp.asarray(values, dtype=xp.float64)
    keep = xp.isfinite(v) if weight is None else xp.isfinite(v) & (weight > 0)
    v = v[keep]
    if v.shape[0] == 0 or n_bins == 1:
        return np.empty(0, dtype=np.float64)
    levels = xp.arange(1, n_bins, dtype=xp.float64) / n_bins
    cuts = inverted_cdf(v, levels, None if weight is None else weight[keep])
    cuts = to_numpy(cuts)
    # A cut at the minimum would leave bin 0 empty at fit time.
    return np.unique(cuts[cuts > float(v.min())])


def bin_edges_from_values(values: np.ndarray, weights: np.ndarray, n_bins: int) -> np.ndarray:
    """:func:`fit_bins` from distinct finite values (increasing) and the weight of each.

    The inverted CDF is the first value whose cumulative share of the weight reaches the level; with
    row counts as weights that is numpy's index rule ``ceil(n q - 1)`` exactly (both compare the same
    rationals, each rounded once).
    """
    values = np.asarray(values, dtype=np.float64)
    if values.shape[0] == 0 or n_bins == 1:
        return np.empty(0, dtype=np.float64)
    levels = np.arange(1, n_bins, dtype=np.float64) / n_bins
    cdf = np.cumsum(np.asarray(weights, dtype=np.float64))
    cdf /= cdf[-1]
    cuts = values[np.clip(np.searchsorted(cdf, levels, side="left"), 0, values.shape[0] - 1)]
    return np.unique(cuts[cuts > values[0]])


def inverted_cdf(v: Any, levels: Any, weight: Any) -> Any:
    """Inverted-CDF quantiles of ``v`` at ``levels``, exactly as ``np.quantile(method="inverted_cdf")``.

    Written with a full sort so that it runs on cupy (whose ``quantile`` has neither the method nor
    weights) and because one sort beats numpy's partition at 31 levels. Unweighted, level ``q`` is
    the sorted value at index ``ceil(n q - 1)``; weighted, the first whose normalised cumulative
    weight reaches ``q`` (numpy's index arithmetic, so both agree bit for bit).
    """
    xp = array_namespace(v)
    n = v.shape[0]
    if weight is None:
        v_sorted = xp.sort(v)
        idx = xp.ceil(n * levels - 1).astype(xp.int64)
    else:
        order = xp.argsort(v)
        v_sorted = v[order]
        cdf = xp.cumsum(weight[order], dtype=xp.float64)
        cdf /= cdf[-1]
        idx = xp.searchsorted(cdf, levels, side="left")
    return v_sorted[xp.clip(idx, 0, n - 1)]


__all__ = [
    "BINS",
    "INTEGERS",
    "MAX_AUTO_VALUES",
    "ROWS_PER_VALUE",
    "VALUES",
    "as_codes",
    "bin_edges_from_values",
    "block_summaries",
    "check_exact_values",
    "fit_bins",
    "integer_categories",
    "inverted_cdf",
    "is_integer_column",
    "max_auto_values",
    "merge_summaries",
    "observed_categories",
    "plain_value",
    "plain_values",
    "read_block",
    "summarise_block",
]
