"""Feature encoding that is the same on every partition: learn it in one pass, or hash.

A :class:`~gpucal.encoding.FeatureEncoder` fitted on one partition would give other partitions other
codes (a category it never saw, other quantile cuts). Two consistent ways:

* :func:`fit_encoder`: one pass over the partitions learns every column's categories (the union of
  what each partition saw) and, for numeric columns, the weight of every distinct finite value
  (a keyed table merged by value), from which the inverted-CDF quantile cuts are exactly those of
  ``FeatureEncoder.fit`` on all the rows. The table has one row per distinct value of a numeric column,
  capped by ``dask.config`` ``gpucal.max-distinct-keys``: round a continuous column first (or bin it
  yourself) when it has more distinct values than that.
* :func:`hash_codes`: a stable hash of the value modulo ``n_buckets``, for categorical columns of very
  high cardinality (user or item ids) whose category list would not fit in a model file. It needs no
  fit: every partition, process and machine computes the same code from the value alone
  (``pandas.util.hash_array``, a keyed SipHash, not Python's salted ``hash``). Different values can
  share a bucket; with ``n_buckets`` well above the number of values that matter, collisions only
  pool rare values. Encode the bucket column by value (``categorical_cols``).

:func:`transform_partitions` applies a fitted encoder to every partition and returns a dask array of
codes.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, is_cupy_array, to_numpy
from gpucal._frames import frame_columns
from gpucal.encoding import FeatureEncoder, _as_codes, _observed_categories
from gpucal.rows._checks import check_partition_weight
from gpucal.rows._collections import collection_kind, partitions
from gpucal.rows._reduce import (
    KeyedTable,
    check_table_size,
    group_sorted,
    max_distinct_keys,
    merge_tables,
    merge_uniques,
    reduce_partitions,
)

BINS, VALUES = "bins", "values"


def _summaries(
    X: Any, w: Any, categorical: frozenset[Hashable], limit: int
) -> tuple[int, dict[Hashable, Any]]:
    """One partition: its row count, and per column a value-weight table (numbers) or its categories."""
    columns = frame_columns(X)
    n_rows = len(X)
    out: dict[Hashable, Any] = {}
    for name, col in columns.items():
        if col.is_numeric and name not in categorical:
            xp = array_namespace(col.values)
            v = xp.asarray(col.values, dtype=xp.float64)
            weight = xp.ones(n_rows, dtype=xp.float64) if w is None else check_partition_weight(w, n_rows, xp)
            keep = xp.isfinite(v) & (weight > 0)
            keys, sums = group_sorted((v[keep],), weight[keep][:, None], xp)
            check_table_size(int(sums.shape[0]), limit, f"X[{name!r}] distinct values")
            out[name] = (BINS, KeyedTable((to_numpy(keys[0]),), to_numpy(sums)))
        else:
            out[name] = (VALUES, _observed_categories(_as_codes(col)))
    return n_rows, out


def _merge(*parts: tuple[int, dict[Hashable, Any]], limit: int) -> tuple[int, dict[Hashable, Any]]:
    n_rows = sum(p[0] for p in parts)
    merged: dict[Hashable, Any] = {}
    for name, (kind, _) in parts[0][1].items():
        pieces = [p[1][name][1] for p in parts]
        if kind == BINS:
            merged[name] = (BINS, merge_tables(*pieces, limit=limit, what=f"X[{name!r}] distinct values"))
        else:
            merged[name] = (VALUES, merge_uniques(*pieces))
    return n_rows, merged


def fit_encoder(encoder: FeatureEncoder, X: Any, *, sample_weight: Any = None) -> FeatureEncoder:
    """Fit ``encoder`` on every partition of the dask DataFrame ``X`` in one pass; return it.

    The result equals ``encoder.fit(X.compute(), sample_weight=...)``: the same categories (sorted) and
    the same quantile cuts (see the module docstring for the table this keeps per numeric column).

    Parameters
    ----------
    encoder : FeatureEncoder
        Unfitted or fitted; its parameters are used and its fitted state replaced.
    X : dask DataFrame
        The feature columns (pandas or cudf partitions); every column is encoded.
    sample_weight : dask Series or Array, optional
        Row weights for the quantile cuts, partitioned like ``X``.

    Returns
    -------
    FeatureEncoder
        ``encoder``, fitted.
    """
    categorical = frozenset(encoder._check_params())
    if collection_kind(X) != "frame" or not hasattr(X, "columns"):
        msg = f"X: expected a dask DataFrame, got {type(X).__module__}.{type(X).__qualname__}"
        raise TypeError(msg)
    names = list(X.columns)
    unknown = [c for c in categorical if c not in names]
    if unknown:
        msg = f"categorical_cols: column(s) {unknown} are not columns of X; columns: {names}"
        raise KeyError(msg)
    limit = max_distinct_keys()
    parts = partitions({"X": X, "sample_weight": sample_weight})
    n_rows, summaries = reduce_partitions(
        parts, _summaries, functools.partial(_merge, limit=limit), args=(categorical, limit)
    )
    if n_rows == 0:
        msg = "X: no rows"
        raise ValueError(msg)
    value_weights = {
        name: (table.keys[0], table.stats[:, 0]) for name, (kind, table) in summaries.items() if kind == BINS
    }
    categories = {name: cats for name, (kind, cats) in summaries.items() if kind == VALUES}
    return encoder.fit_summaries(names, value_weights=value_weights, categories=categories)


def transform_partitions(encoder: FeatureEncoder, X: Any) -> Any:
    """Return the codes of every partition of the dask DataFrame ``X``: a dask array ``(n, n_features)``.

    Chunks follow the partitions (their lengths are unknown until computed); each is the numpy (or,
    for cudf partitions, cupy) array ``encoder.transform`` returns.
    """
    import dask
    import dask.array as da

    n_features = len(encoder.feature_names_)
    meta = np.empty((0, n_features), dtype=encoder.codes_dtype_)
    blocks = [
        da.from_delayed(
            dask.delayed(encoder.transform)(part),
            shape=(np.nan, n_features),
            dtype=encoder.codes_dtype_,
            meta=meta,
        )
        for part in X.to_delayed()
    ]
    return da.concatenate(blocks, axis=0)


def hash_codes(values: Any, n_buckets: int, *, seed: int = 0) -> Any:
    """Return a stable bucket in ``[0, n_buckets)`` for every value (int64, on the host).

    The bucket depends only on the value, ``n_buckets`` and ``seed``: the same on every partition,
    process and machine (``pandas.util.hash_array`` with a key made from ``seed``). Values are hashed
    as Python objects (the string ``"7"`` and the number 7 differ); missing values (None, NaN) hash
    like any value. cudf columns and cupy arrays are copied to the host first. Map it over a dask Series with
    ``series.map_partitions(hash_codes, n_buckets, meta=("bucket", "int64"))``.

    Parameters
    ----------
    values : 1-D array-like or Series
        The column to hash.
    n_buckets : int
        Number of buckets (>= 1).
    seed : int, default=0
        Picks another hash function (0 <= seed < 10**16).

    Returns
    -------
    numpy.ndarray or pandas.Series of int64
        A Series with the input's index and name for a Series, else an array.
    """
    import pandas as pd

    if isinstance(n_buckets, bool) or not isinstance(n_buckets, int | np.integer) or n_buckets < 1:
        msg = f"The 'n_buckets' parameter of hash_codes must be an int >= 1. Got {n_buckets!r} instead."
        raise ValueError(msg)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < 10**16:
        msg = f"The 'seed' parameter of hash_codes must be an int in [0, 10**16). Got {seed!r} instead."
        raise ValueError(msg)
    if type(values).__module__.split(".")[0] == "cudf":
        values = values.to_pandas()
    elif is_cupy_array(values):
        values = to_numpy(values)
    index = getattr(values, "index", None)
    raw = np.asarray(values.to_numpy() if hasattr(values, "to_numpy") else values, dtype=object)
    hashed = pd.util.hash_array(raw, hash_key=f"{int(seed):016d}", categorize=False)
    codes = (hashed % np.uint64(n_buckets)).astype(np.int64)
    if index is not None:
        return pd.Series(codes, index=index, name=getattr(values, "name", None))
    return codes
