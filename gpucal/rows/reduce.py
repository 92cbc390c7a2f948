"""The pieces of every reduction over blocks: results to the host, added or combined in a tree.

Every gpucal statistic is a sum over rows of a fixed-shape array (``gpucal.kernels.group_sums``), so a pass
over
dask rows is: each block computes its array where it lives (numpy or cupy, brought to the host by
:func:`_host`), and the arrays are combined in a tree of ``split_every``-way steps (:func:`_tree`, the
one reduction of :class:`~gpucal.rows.dask.DaskRows` and :class:`~gpucal.rows.streamed.StreamedRows`).
The tree has a fixed shape for a given number of blocks, so a result is bit-identical from run to run;
against one machine only the order of the additions differs (a relative difference of about 1e-15 per
level).

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

#: Partitions (or partial results) added in one task of the reduction tree.
SPLIT_EVERY = 8

#: Most distinct keys a keyed table may hold before the computation stops with an error. A table row is
#: the key plus 4 float64 sums (40 bytes): 1e7 keys are 400 MB on the worker that merges them. Set it
#: with ``dask.config.set({"gpucal.max-distinct-keys": n})``.
MAX_DISTINCT_KEYS = 10_000_000


def max_distinct_keys() -> int:
    """Return the limit on keyed tables: ``dask.config`` key ``gpucal.max-distinct-keys`` or the default.

    Dask is an optional extra: without it (one machine's fits) the default holds.
    """
    try:
        import dask
    except ImportError:
        return MAX_DISTINCT_KEYS
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


#: What :func:`check_table_size` advises for a table keyed by scores.
ROUND_THE_SCORES = "Round the scores (e.g. to 6 decimals: at most 1e6 + 1 keys)"


def check_table_size(n_keys: int, limit: int, what: str, advice: str = ROUND_THE_SCORES) -> None:
    """Raise ``ValueError`` when a keyed table would exceed ``limit`` keys (never collect silently); the
    message names the table (``what``) and says what would make it smaller (``advice``)."""
    if n_keys > limit:
        msg = (
            f"{what}: {n_keys} distinct keys exceed the limit of {limit} "
            "(dask.config 'gpucal.max-distinct-keys'); the exact distributed computation keeps one row of "
            f"sums per distinct key on one worker. {advice} or raise the limit if that worker has the memory"
        )
        raise ValueError(msg)


def group_sorted(keys: Sequence[Any], stats: Any, xp: Any = np) -> tuple[tuple[Any, ...], Any]:
    """Sort rows by ``keys`` (first key first) and add up ``stats`` of equal keys (numpy or cupy).

    ``stats`` None: one per row, so each key's sum is its count. With one key on numpy that is read off
    the keys sorted alone, about half the cost of an ``argsort`` and the gather of the rows' ones.
    """
    n = int(keys[0].shape[0])
    counting = stats is None and len(keys) == 1 and xp is np
    if stats is None and not counting:
        stats = xp.ones((n, 1))
    if n == 0:
        return tuple(k[:0] for k in keys), np.zeros((0, 1)) if counting else stats[:0]
    if counting:
        sorted_keys = [np.sort(keys[0])]
    else:
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
    if counting:
        summed = np.diff(np.append(starts, n)).astype(np.float64)[:, None]
    elif xp is np:
        summed = np.add.reduceat(stats[order], starts, axis=0)
    else:
        ids = xp.cumsum(new) - 1
        columns = [
            xp.bincount(ids, weights=stats[order, j], minlength=int(starts.shape[0]))
            for j in range(stats.shape[1])
        ]
        summed = xp.stack(columns, axis=1)
    return tuple(k[starts] for k in sorted_keys), summed


def merge_tables(
    *tables: KeyedTable,
    limit: int = MAX_DISTINCT_KEYS,
    what: str = "keyed sums",
    advice: str = ROUND_THE_SCORES,
) -> KeyedTable:
    """Merge keyed tables: concatenate and add the sums of equal keys (the ``combine`` of the tree);
    ``limit``, ``what`` and ``advice`` as in :func:`check_table_size`."""
    n_key_cols = len(tables[0].keys)
    keys = [np.concatenate([t.keys[j] for t in tables]) for j in range(n_key_cols)]
    stats = np.concatenate([t.stats for t in tables])
    merged_keys, merged = group_sorted(keys, stats)
    check_table_size(int(merged.shape[0]), limit, what, advice)
    return KeyedTable(merged_keys, merged)


def merge_uniques(*uniques: Any) -> Any:
    """Distinct values in order of first appearance over the arguments (a field's categories)."""
    import pandas as pd

    values = np.concatenate([np.asarray(u, dtype=object) for u in uniques])
    return np.asarray(pd.unique(pd.Series(values, dtype=object)), dtype=object)
