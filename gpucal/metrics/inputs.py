"""How a metric reads its rows: checked blocks of ``(y, p, w)`` and fields, written once for every backend.

Every metric is ``finish(sums(rows))``. :func:`metric_rows` turns what the user passed (numpy, cupy,
pandas, cudf, polars, pyarrow, or dask collections of them) into :class:`gpucal.rows.Rows` whose blocks
are :class:`CheckedRows`: each block is checked on its own by :func:`check_partition_rows` (a dask
partition may be empty or weigh nothing), its fields factorised. A metric then

1. sums fixed-shape arrays over the blocks with :meth:`~gpucal.rows.Rows.sum` (bin or group sums from
   :func:`gpucal.metrics.sums.group_stats`, MVCE's views with the block's ``row_offset``), or combines
   keyed tables with :meth:`~gpucal.rows.Rows.reduce` (sums per distinct score);
2. runs the whole-data checks on the summed summary (:func:`check_total`: no rows, all weights zero);
3. finishes on the host (a few bins or groups).

On one machine there is one block (the inputs as given) and each pass is one function call; over dask
each block is a partition, summed on the workers in a tree, and the value is the one of the concatenated
rows up to the order of floating-point additions (about 1e-15 relative per level of the tree). Row checks
count rows from the block's start; the checks on the whole data (no rows, all weights zero, one class for
AUC) run on the summed sums. Which pass each metric makes:

* fixed-shape sums, one pass: PCE, PCOC, log-loss, Brier, TCE, the rejection curve and every equal-width
  ("uniform") binned metric;
* MVCE: the blocks' row offsets, then the view sums with each block's global ``row_offset``, so the
  counter-based views put every row in the bin it has on one machine;
* field metrics (Field-ECE / RCE, GC-N, CECE, the segment report): the fields' distinct values (in order
  of first appearance), then group sums on the global codes;
* equal-mass ("quantile") bins, ECE-sweep and ROC AUC: a *distinct-score table*
  (``gpucal.metrics.score_table``; GC-N's keyed by field value too, :func:`keyed_score_table`), the
  sums per distinct score, merged by key. It is exact (ties count one half in AUC,
  tie groups are never split by a bin), and its size is the number of distinct scores: small for
  calibrated (binned) scores, up to the row count for raw float scores. Merged from several blocks it is
  capped by ``dask.config`` ``gpucal.max-distinct-keys`` (default 1e7 keys, 400 MB on the merging
  worker); above it the metric raises instead of collecting rows. Rounding the scores to 6 decimals
  bounds the table to 1e6 + 1 keys; for AUC that treats pairs closer than 1e-6 as ties (each such pair
  moves AUC by at most half its weight share). A fine fixed histogram would bound memory but give AUC
  only up to the mass of pairs inside one histogram bin, with no way to report the error: exactness won.

A new metric is written like this::

    def block_sums(block: CheckedRows, n_bins: int) -> np.ndarray:   # module level (picklable)
        return group_stats(uniform_bin_ids(block.p, n_bins), block.p, block.y, block.w, n_bins)

    def my_metric(y_true, y_prob, *, sample_weight=None, n_bins=15):
        stats = metric_rows(y_true, y_prob, sample_weight).sum(block_sums, n_bins)
        check_total(stats[:, COUNT].sum(), stats[:, W].sum())
        return finish(stats)

A field (the values of one feature, ``metric_rows(..., field=values)``) is factorised per block with
pandas (cupy for device arrays): ``block.codes[name]`` are the block's int32 codes into
``block.uniques[name]``. :func:`field_uniques` merges the blocks' distinct values in order of first
appearance (one small pass) and :func:`global_codes` maps a block's codes onto them. Missing values
(NaN, None) form one group of their own. (The fitted :class:`gpucal.FeatureEncoder` is not used here:
a metric groups by every distinct value, with no frequency cut-off and no hashing.)
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd

from gpucal._backend import array_namespace, is_cupy_array, to_numpy
from gpucal._frames import column_to_pandas
from gpucal._validation import (
    check_consistent_length,
    check_labels,
    check_not_empty,
    check_probabilities,
    check_same_index,
    check_sample_weight,
)
from gpucal.rows import RowBlock, Rows, as_rows
from gpucal.rows.checks import check_partition_weight
from gpucal.rows.reduce import KeyedTable, check_table_size, group_sorted, merge_tables, merge_uniques


@dataclass(frozen=True)
class CheckedRows:
    """Checked metric inputs of one block: labels ``y``, probabilities ``p``, weights ``w`` (None: all
    ones) on one device, and the block's factorised fields (``codes[name]`` into ``uniques[name]``).

    ``indexed`` keeps the arguments as given (by name), so that a field can be checked against their
    pandas index (:func:`gpucal._validation.check_same_index`).
    """

    y: Any
    p: Any
    w: Any
    xp: ModuleType
    indexed: dict[str, Any] = field(default_factory=dict)
    codes: dict[str, Any] = field(default_factory=dict)
    uniques: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.p.shape[0])

    def __len__(self) -> int:
        return self.n

    @property
    def total_weight(self) -> float:
        return float(self.n if self.w is None else self.w.sum())

    def weights(self) -> Any:
        """Return the weights as an array (ones when none were given)."""
        return self.xp.ones(self.n, dtype=self.xp.float64) if self.w is None else self.w

    def host_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """Return ``(p, y, w, unit)`` as contiguous float64 numpy arrays for a compiled CPU pass.

        ``unit`` is True when no weights were given; ``w`` is then empty and the pass reads every
        weight as 1. Call it on a numpy block (``xp is numpy``).
        """
        unit = self.w is None
        w = np.empty(0) if unit else np.ascontiguousarray(self.w, dtype=np.float64)
        p = np.ascontiguousarray(self.p, dtype=np.float64)
        return p, np.ascontiguousarray(self.y, dtype=np.float64), w, unit


def check_rows(
    y_true: Any,
    y_prob: Any,
    sample_weight: Any,
    *,
    allow_soft: bool = True,
    label_name: str = "y_true",
) -> CheckedRows:
    """Validate ``(y_true, y_prob, sample_weight)`` held in one place, as a whole data set: it must have
    rows and some weight. Keeps ``w = None`` so unit weights cost nothing.

    pandas inputs must share one index (:func:`gpucal._validation.check_same_index`).
    """
    return _checked_rows(y_true, y_prob, sample_weight, allow_soft, label_name, whole=True)


def check_partition_rows(
    y_true: Any,
    y_prob: Any,
    sample_weight: Any,
    *,
    allow_soft: bool = True,
    label_name: str = "y_true",
) -> CheckedRows:
    """:func:`check_rows` for one block of rows: it may be empty or weigh nothing.

    The whole data set must have rows and some weight: the metric checks that on the summed sums
    (:func:`check_total`). Row numbers in error messages count from the block's first row. pandas
    blocks must share one index, as whole inputs must (:func:`check_rows`).
    """
    return _checked_rows(y_true, y_prob, sample_weight, allow_soft, label_name, whole=False)


def _checked_rows(
    y_true: Any, y_prob: Any, sample_weight: Any, allow_soft: bool, label_name: str, *, whole: bool
) -> CheckedRows:
    """The checks of :func:`check_rows` (``whole``: rows and some weight required) or of
    :func:`check_partition_rows`."""
    indexed = {label_name: y_true, "y_prob": y_prob, "sample_weight": sample_weight}
    check_same_index(**indexed)
    p = check_probabilities(y_prob, "y_prob")
    y = check_labels(y_true, label_name, allow_soft=allow_soft)
    xp = array_namespace(y, p)
    n = check_consistent_length(**{label_name: y, "y_prob": p})
    if whole:
        check_not_empty(n, label_name)
    if sample_weight is None:
        w = None
    elif whole:
        w = check_sample_weight(sample_weight, n, xp=xp)
    else:
        w = check_partition_weight(sample_weight, n, xp)
    return CheckedRows(y=y, p=p, w=w, xp=xp, indexed=indexed)


def check_total(count: float, weight: float, label_name: str = "y_true") -> None:
    """The whole-data checks, on summed sums: some rows (``count``), some weight (``weight``)."""
    check_not_empty(int(count), label_name)
    if not weight > 0:
        msg = "sample_weight: all weights are zero"
        raise ValueError(msg)


def check_repeated_rows(total_weight: float, what: str, weighted: bool) -> None:
    """Refuse weights adding up to less than two rows where ``what`` reads weights as repeated rows
    (``weighted``: weights were given; else the total is the number of rows).

    Its windows, quantile ranks or bins count rows; weights normalised to sum to 1 would be one row,
    and the result nonsense rather than an error.
    """
    if total_weight >= 2.0:
        return
    if weighted:
        msg = (
            f"sample_weight: {what} reads weights as repeated rows, and these add up to {total_weight:g}, "
            "less than two rows; pass frequencies (counts), not weights normalised to sum to 1"
        )
    else:
        msg = f"y_true: {what} needs at least two rows, got {total_weight:g}"
    raise ValueError(msg)


def read_block(
    block: RowBlock, label_name: str, allow_soft: bool, field_names: tuple[str, ...]
) -> CheckedRows:
    """Check one block of a metric's rows and factorise its fields (the first map of :func:`metric_rows`)."""
    rows = check_partition_rows(
        block[label_name],
        block["y_prob"],
        block["sample_weight"],
        allow_soft=allow_soft,
        label_name=label_name,
    )
    codes, uniques = {}, {}
    for name in field_names:
        values = block[name]
        check_same_index(**rows.indexed, **{name: values})
        local_codes, local_uniques = factorize_values(values, name)
        check_consistent_length(y_prob=rows.p, **{name: local_codes})
        # A field on the GPU beside host scores is factorized there; its codes join the scores on the host.
        local_codes = to_numpy(local_codes) if rows.xp is np else local_codes
        codes[name] = rows.xp.asarray(local_codes, dtype=rows.xp.int32)
        uniques[name] = np.asarray(local_uniques, dtype=object)
    return CheckedRows(rows.y, rows.p, rows.w, rows.xp, rows.indexed, codes, uniques)


def metric_rows(
    y_true: Any,
    y_prob: Any,
    sample_weight: Any = None,
    *,
    allow_soft: bool = True,
    label_name: str = "y_true",
    **fields: Any,
) -> Rows:
    """Return the rows of a metric's inputs, local or dask, as blocks of :class:`CheckedRows`.

    ``fields`` are named 1-D columns (a field, clusters, a report's feature columns) factorised per
    block. Every block is checked alone (:func:`check_partition_rows`); call :func:`check_total` on the
    summed counts and weights.
    """
    rows = as_rows(**{label_name: y_true}, y_prob=y_prob, sample_weight=sample_weight, **fields)
    return rows.map(read_block, label_name, allow_soft, tuple(fields))


def factorize_values(values: Any, name: str) -> tuple[Any, Any]:
    """Return ``(codes, uniques)`` of a 1-D column: int codes (numpy or cupy) and its distinct values.

    Any 1-D column works: numbers, strings, booleans, pandas categoricals, polars / pyarrow / cudf
    columns. Uniques are on the host, in order of first appearance; missing values (NaN, None) are one
    value of their own.
    """
    module = type(values).__module__.split(".")[0]
    if is_cupy_array(values):
        codes, uniques = factorize_in_order(values)
        uniques = uniques.get()
    else:
        if module in ("cudf", "polars", "pyarrow"):
            values = column_to_pandas(values)  # a host round trip: the uniques go to the host anyway
        elif not isinstance(values, pd.Series | pd.Index | pd.Categorical):
            values = np.asarray(values)
        if values.ndim != 1:
            msg = f"{name}: expected a 1-D array, got shape {tuple(values.shape)}"
            raise ValueError(msg)
        try:
            codes, uniques = pd.factorize(values, use_na_sentinel=False)
        except TypeError as exc:  # unhashable values: lists, arrays, dicts
            msg = (
                f"{name}: cannot group rows by its values ({exc}); a field holds one value per row "
                "(numbers, strings, booleans or categories), not lists or arrays"
            )
            raise TypeError(msg) from None
    return codes, uniques


def factorize_in_order(values: Any) -> tuple[Any, Any]:
    """Factorize a numeric array in its own namespace (cupy has no ``factorize``): ``(codes, uniques)``,
    the uniques in order of first appearance and NaN one value, as ``pandas.factorize`` gives them.
    ``unique``'s sorted values and first positions, ranked by those positions. NaNs are made one bit
    pattern first: a GPU radix sort orders them by their bits, and a NaN with its sign bit set (0/0 on
    x86) sorts first, where ``unique`` looks for NaNs last."""
    xp = array_namespace(values)
    if values.dtype.kind == "f":
        values = xp.where(xp.isnan(values), xp.nan, values)
    uniques, first, inverse = xp.unique(values, return_index=True, return_inverse=True)
    order = xp.argsort(first)
    rank = xp.empty_like(order)
    rank[order] = xp.arange(order.shape[0], dtype=order.dtype)
    return rank[inverse.reshape(-1)], uniques[order]


def block_uniques(block: CheckedRows, names: tuple[str, ...]) -> tuple[np.ndarray, ...]:
    """The distinct values of the named fields of one block."""
    return tuple(block.uniques[name] for name in names)


def merge_field_uniques(*per_block: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Merge the blocks' distinct values field by field, in order of first appearance."""
    return tuple(merge_uniques(*column) for column in zip(*per_block, strict=True))


def field_uniques(rows: Rows, *names: str) -> tuple[np.ndarray, ...]:
    """Return the distinct values of each named field over all blocks, in order of first appearance."""
    return tuple(rows.reduce(block_uniques, merge_field_uniques, names))


def global_codes(block: CheckedRows, name: str, uniques: np.ndarray) -> Any:
    """Return the block's codes of field ``name`` into the global ``uniques`` (of :func:`field_uniques`)."""
    local = block.uniques[name]
    if local.shape[0] == uniques.shape[0] and (
        local.shape[0] == 0 or bool(pd.Index(local).equals(pd.Index(uniques)))
    ):
        return block.codes[name]  # one block, or a block that saw every value in order: codes as they are
    position = pd.Index(uniques).get_indexer(pd.Index(local))
    return block.xp.asarray(position, dtype=block.xp.int32)[block.codes[name]]


def row_stats(block: CheckedRows) -> Any:
    """``(n, 4)`` per-row ``1, w, w p, w y`` on the block's device (the rows of a keyed table)."""
    xp = block.xp
    w = block.weights()
    return xp.stack([xp.ones(block.n, dtype=xp.float64), w, w * block.p, w * block.y], axis=1)


def block_score_table(
    block: CheckedRows, limit: int, keys: tuple[tuple[str, np.ndarray], ...] = ()
) -> KeyedTable:
    """Sums ``count, w, w p, w y`` per distinct score (after the named fields' global codes, given as
    ``(name, uniques)`` pairs in ``keys``) of one block."""
    key_columns = [global_codes(block, name, uniques) for name, uniques in keys]
    keyed, stats = group_sorted((*key_columns, block.p), row_stats(block), block.xp)
    check_table_size(int(stats.shape[0]), limit, _table_name(keys))
    return KeyedTable(tuple(to_numpy(k) for k in keyed), to_numpy(stats))


def _table_name(keys: tuple[Any, ...]) -> str:
    return "distinct (field, score) table" if keys else "distinct-score table"


def _merge(*tables: KeyedTable, limit: int, what: str) -> KeyedTable:
    return merge_tables(*tables, limit=limit, what=what)


def key_limit(rows: Rows) -> int:
    """The most keys a table merged from several blocks may hold (``dask.config``
    ``gpucal.max-distinct-keys``, default 1e7); unbounded for one block, already in memory."""
    if rows.n_blocks == 1:
        return sys.maxsize
    from gpucal.rows.reduce import max_distinct_keys

    return max_distinct_keys()


def keyed_score_table(rows: Rows, *keys: tuple[str, np.ndarray], label_name: str = "y_true") -> KeyedTable:
    """Return the keyed table of sums ``count, w, w p, w y`` per distinct score of all blocks (per
    distinct ``(field code, score)`` with ``keys``), sorted by key, and check the totals.

    Exact: tied scores are one key, never split. Its size is the number of distinct keys; over several
    blocks it is capped by :func:`key_limit` (an error above it, never a silent collect).
    """
    limit = key_limit(rows)
    combine = functools.partial(_merge, limit=limit, what=_table_name(keys))
    table: KeyedTable = rows.reduce(block_score_table, combine, limit, tuple(keys))
    check_total(float(table.stats[:, 0].sum()), float(table.stats[:, 1].sum()), label_name)
    return table


__all__ = [
    "CheckedRows",
    "block_score_table",
    "check_partition_rows",
    "check_rows",
    "check_total",
    "factorize_values",
    "field_uniques",
    "global_codes",
    "key_limit",
    "keyed_score_table",
    "metric_rows",
    "read_block",
    "row_stats",
]
