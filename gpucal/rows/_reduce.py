"""Map a function over partitions and combine the results in a tree: the one distributed primitive.

Every gpucal statistic is a sum over rows of a fixed-shape array (``kernels.group_sums``), so the
distributed path is: each partition computes its array where it lives (numpy or cupy, brought to the
host), and the arrays are added in a tree of ``split_every``-way additions (dask.delayed). The tree has
a fixed shape for a given number of partitions, so a result is bit-identical from run to run; against
one machine only the order of the additions differs (a relative difference of about 1e-15 per level).

Two statistics are not fixed-shape: the distinct values of a column (a field's categories) and sums
keyed by a value (a table of ``count, w, w*p, w*y`` per distinct score, which exact equal-mass bins,
ROC AUC and isotonic regression need). Both are merged in the same tree by :func:`merge_tables` and
:func:`merge_uniques`; their size is the number of distinct keys, bounded by ``max_keys``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal._backend import is_cupy_array, to_numpy
from gpucal.rows._collections import Partitions, as_partitions, partition_offsets
from gpucal.rows._faults import compute

#: Partitions (or partial results) added in one task of the reduction tree.
SPLIT_EVERY = 8

#: Most distinct keys a keyed table may hold before the computation stops with an error. A table row is
#: the key plus 4 float64 sums (40 bytes): 1e7 keys are 400 MB on the worker that merges them. Set it
#: with ``dask.config.set({"gpucal.max-distinct-keys": n})``.
MAX_DISTINCT_KEYS = 10_000_000


def max_distinct_keys() -> int:
    """Return the limit on keyed tables: ``dask.config`` key ``gpucal.max-distinct-keys`` or the default."""
    import dask

    return int(dask.config.get("gpucal.max-distinct-keys", MAX_DISTINCT_KEYS))


def _host(x: Any) -> Any:
    """Bring a partition result to the host (cupy arrays, tuples of them); leave anything else."""
    if is_cupy_array(x):
        return to_numpy(x)
    if isinstance(x, tuple):
        return tuple(_host(v) for v in x)
    return x


def _call(
    fn: Callable[..., Any], parts: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    return _host(fn(*parts, *args, **kwargs))


def _add(*arrays: np.ndarray) -> np.ndarray:
    total = np.array(arrays[0], copy=True)
    for a in arrays[1:]:
        total += a
    return total


def _tree(items: list[Any], combine: Callable[..., Any], split_every: int) -> Any:
    """Combine delayed ``items`` in consecutive groups of ``split_every`` until one is left (order kept)."""
    import dask

    combine_task = dask.delayed(combine, pure=False)  # fresh keys: partial results are not hashed
    while len(items) > 1:
        items = [combine_task(*items[i : i + split_every]) for i in range(0, len(items), split_every)]
    return items[0]


def reduce_partitions(
    collections: Any,
    fn: Callable[..., Any],
    combine: Callable[..., Any],
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    with_offsets: bool = False,
    split_every: int = SPLIT_EVERY,
) -> Any:
    """Return ``combine`` over partitions of ``fn(*partition, *args, **kwargs)``, reduced in a tree.

    ``combine(*results)`` must be associative and must keep the order of its arguments meaningful
    (results arrive in partition order). With ``with_offsets=True`` a first pass counts the rows of every
    partition, and ``fn`` also receives ``row_offset=`` (the global index of the partition's first row)
    and ``n_total=`` (all rows).
    """
    if split_every < 2:
        msg = f"The 'split_every' parameter must be an int >= 2. Got {split_every!r} instead."
        raise ValueError(msg)
    import dask

    parts = collections if isinstance(collections, Partitions) else as_partitions(collections)
    if parts.n_partitions == 0:
        msg = "the collection has no partitions"
        raise ValueError(msg)
    kwargs = dict(kwargs or {})
    offsets: Sequence[int] = [0] * parts.n_partitions
    if with_offsets:
        offset_array, n_total = partition_offsets(parts)
        offsets = [int(o) for o in offset_array]
        kwargs["n_total"] = n_total
    # Fresh keys for every pass: dask does not hash the arguments (histogram batches, Newton thetas,
    # models), and two passes with equal arguments never share a key.
    call = dask.delayed(_call, pure=False)
    leaves = []
    for part, offset in zip(parts.parts, offsets, strict=True):
        extra = {**kwargs, "row_offset": offset} if with_offsets else kwargs
        leaves.append(call(fn, part, tuple(args), extra))
    (result,) = compute(_tree(leaves, combine, split_every))
    return result


def sum_partitions(
    collections: Any,
    fn: Callable[..., Any],
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    with_offsets: bool = False,
    split_every: int = SPLIT_EVERY,
) -> np.ndarray:
    """Map ``fn`` over the partitions of ``collections`` and add the results: one pass over the rows.

    This is the distributed form of every gpucal statistic ("statistics are sums"): ``fn`` takes the
    partition (one pandas or cudf frame or Series, or a numpy or cupy chunk, per collection), then
    ``*args`` and ``**kwargs``, and returns an array of a shape that does not depend on the partition
    (a histogram of fixed bins, a vector of Newton sums). The arrays are brought to the host and added
    in a tree of ``split_every``-way additions; the sum comes back as a numpy array.

    Parameters
    ----------
    collections : dask collection or sequence of dask collections
        A dask DataFrame, Series or 1-D Array, or several with the same partitions (partition ``i``
        of each is passed to ``fn`` together).
    fn : callable
        ``fn(*partitions, *args, **kwargs) -> array``; module-level (picklable) for process workers.
    args, kwargs
        Extra arguments, the same for every partition.
    with_offsets : bool, default=False
        Count the partitions' rows first (one more pass) and pass ``row_offset=`` and ``n_total=`` to
        ``fn``, for statistics that depend on the global row index (MVCE's views).
    split_every : int, default=8
        Results added per task of the tree.

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    A per-level histogram of a tree fit is one call: ``sum_partitions(frame, level_histogram,
    args=(tree_so_far,))`` with ``level_histogram`` returning ``(n_nodes, n_bins, n_stats)`` sums.
    """
    return np.asarray(
        reduce_partitions(
            collections,
            fn,
            _add,
            args=args,
            kwargs=kwargs,
            with_offsets=with_offsets,
            split_every=split_every,
        )
    )


# --------------------------------------------------------------------------------------------------
# Keyed tables: sums per distinct key


@dataclass(frozen=True)
class KeyedTable:
    """Sums per distinct key: ``keys`` (tuple of 1-D host arrays, sorted lexicographically, first key
    first) and ``stats`` of shape ``(n_keys, n_stats)``, row ``k`` the sums of the rows with key ``k``."""

    keys: tuple[np.ndarray, ...]
    stats: np.ndarray

    @property
    def n_keys(self) -> int:
        return int(self.stats.shape[0])


def check_table_size(n_keys: int, limit: int, what: str) -> None:
    """Raise ``ValueError`` when a keyed table would exceed ``limit`` keys (never collect silently)."""
    if n_keys > limit:
        msg = (
            f"{what}: {n_keys} distinct keys exceed the limit of {limit} "
            "(dask.config 'gpucal.max-distinct-keys'); the exact distributed computation keeps one row of "
            "sums per distinct score on one worker. Round the scores (e.g. to 6 decimals: at most 1e6 + 1 "
            "keys) or raise the limit if that worker has the memory"
        )
        raise ValueError(msg)


def group_sorted(keys: Sequence[Any], stats: Any, xp: Any = np) -> tuple[tuple[Any, ...], Any]:
    """Sort rows by ``keys`` (first key first) and add up ``stats`` of equal keys (numpy or cupy)."""
    n = int(stats.shape[0])
    if n == 0:
        return tuple(k[:0] for k in keys), stats[:0]
    if len(keys) == 1:
        order = xp.argsort(keys[0])  # equal keys are summed, so their order does not matter
    elif xp is np:
        order = np.lexsort(tuple(keys[::-1]))
    else:  # cupy's lexsort takes one 2-D array; the keys are codes and scores, exact in float64
        order = xp.lexsort(xp.stack([xp.asarray(k, dtype=xp.float64) for k in keys[::-1]]))
    sorted_keys = [k[order] for k in keys]
    new = xp.zeros(n, dtype=bool)
    new[0] = True
    for k in sorted_keys:
        new[1:] |= k[1:] != k[:-1]
    starts = xp.flatnonzero(new)
    if xp is np:
        summed = np.add.reduceat(stats[order], starts, axis=0)
    else:
        ids = xp.cumsum(new) - 1
        columns = [
            xp.bincount(ids, weights=stats[order, j], minlength=int(starts.shape[0]))
            for j in range(stats.shape[1])
        ]
        summed = xp.stack(columns, axis=1)
    return tuple(k[starts] for k in sorted_keys), summed


def merge_tables(*tables: KeyedTable, limit: int = MAX_DISTINCT_KEYS, what: str = "keyed sums") -> KeyedTable:
    """Merge keyed tables: concatenate and add the sums of equal keys (the ``combine`` of the tree)."""
    n_key_cols = len(tables[0].keys)
    keys = [np.concatenate([t.keys[j] for t in tables]) for j in range(n_key_cols)]
    stats = np.concatenate([t.stats for t in tables])
    merged_keys, merged = group_sorted(keys, stats)
    check_table_size(int(merged.shape[0]), limit, what)
    return KeyedTable(merged_keys, merged)


def merge_uniques(*uniques: Any) -> Any:
    """Distinct values in order of first appearance over the arguments (a field's categories)."""
    import pandas as pd

    values = np.concatenate([np.asarray(u, dtype=object) for u in uniques])
    return np.asarray(pd.unique(pd.Series(values, dtype=object)), dtype=object)
