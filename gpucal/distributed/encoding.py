"""Feature encoding that is the same on every partition: learn it in one pass, or hash.

A :class:`~gpucal.encoding.FeatureEncoder` fitted on one partition would give other partitions other
codes (a category it never saw, other quantile cuts). Two consistent ways:

* :func:`fit_encoder`: ``FeatureEncoder.fit`` of a dask DataFrame, one pass over the partitions
  (:meth:`~gpucal.encoding.FeatureEncoder.fit_rows`, ``gpucal.encoding.summaries``).
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

from typing import Any

import numpy as np

from gpucal._backend import is_cupy_array, to_numpy
from gpucal._frames import cudf_to_pandas
from gpucal.encoding import FeatureEncoder


def fit_encoder(encoder: FeatureEncoder, X: Any, *, sample_weight: Any = None) -> FeatureEncoder:
    """Fit ``encoder`` on every partition of the dask DataFrame ``X`` in one pass; return it.

    The same as ``encoder.fit(X, sample_weight=sample_weight)`` (:meth:`FeatureEncoder.fit_rows`), which
    equals ``encoder.fit(X.compute(), sample_weight=...)``: the same categories (sorted) and the same
    quantile cuts (``gpucal.encoding.summaries``).
    """
    return encoder.fit(X, sample_weight=sample_weight)


def transform_partitions(encoder: FeatureEncoder, X: Any) -> Any:
    """Return the codes of every partition of the dask DataFrame ``X``: a dask array ``(n, n_features)``.

    Chunks follow the partitions (their lengths are unknown until computed); each is the numpy (or,
    for cudf partitions, cupy) array ``encoder.transform`` returns.
    """
    import dask
    import dask.array as da

    n_features = len(encoder.feature_names_)
    meta = np.empty((0, n_features), dtype=encoder.codes_dtype_)
    if type(X._meta).__module__.split(".")[0] == "cudf":  # cudf partitions are encoded to cupy
        import cupy

        meta = cupy.asarray(meta)
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
    by their text, ``str(value)``: the number 7 and the string ``"7"`` share a bucket, as do None and
    ``"None"``, NaN and ``"nan"`` (7.0 reads ``"7.0"``, another bucket than 7); give a column one type
    to keep such values apart. A nullable integer or boolean column (pandas' ``Int64``, ``boolean``)
    reads each value as itself and a missing one as None, in every block, with or without missing
    values. cudf columns and cupy arrays are copied to the host first, and the buckets come back as
    pandas or numpy. Map it over a dask Series with ``series.map_partitions(hash_codes, n_buckets,
    meta=("bucket", "int64"))``; over a dask-cudf one, ``series.to_backend("pandas")`` first, so that
    every partition and the meta are pandas.

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
        values = cudf_to_pandas(values)  # an int column with a null stays integers
    elif is_cupy_array(values):
        values = to_numpy(values)
    index = values.index if isinstance(values, pd.Series) else None  # a list's .index is a method
    dtype = getattr(values, "dtype", None)
    if isinstance(dtype, pd.api.extensions.ExtensionDtype) and dtype.kind in "iub":
        # Nullable integers and booleans: each value itself, a missing one None. to_numpy() gives
        # floats when a block holds a missing value, so 7 read "7.0" there and "7" in the next block.
        raw = np.asarray(values.to_numpy(dtype=object, na_value=None), dtype=object)
    else:
        raw = np.asarray(values.to_numpy() if hasattr(values, "to_numpy") else values, dtype=object)
    hashed = pd.util.hash_array(raw, hash_key=f"{int(seed):016d}", categorize=False)
    codes = (hashed % np.uint64(n_buckets)).astype(np.int64)
    if index is not None:
        return pd.Series(codes, index=index, name=getattr(values, "name", None))
    return codes
