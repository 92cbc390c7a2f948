"""The metrics of ``gpucal.metrics`` on dask collections: the same numbers from per-partition sums.

A public metric called with dask inputs lands here (``gpucal.metrics._inputs.accepts_dask``); the
twin takes the same arguments and returns the value the metric gives on the concatenated rows, up to
the order of floating-point additions (about 1e-15 relative per level of the reduction tree). Each
twin is one or two passes over the partitions:

* fixed-shape sums (:func:`~gpucal.distributed.sum_partitions`): PCE, PCOC, log-loss, Brier, TCE and
  every equal-width ("uniform") binned metric, one pass;
* MVCE: a pass counting the rows of each partition, then the view sums with each partition's global
  row offset, so the counter-based views put every row in the bin it has on one machine;
* field metrics (Field-ECE / RCE, GC-N, CECE, the segment report): a pass learning the field's
  distinct values (in order of first appearance), then group sums on the global codes;
* equal-mass ("quantile") bins, ECE-sweep and ROC AUC: a *distinct-score table*, the sums
  ``count, w, w*p, w*y`` keyed by score, merged by key in the tree. It is exact (ties count one half
  in AUC, tie groups are never split by a bin), and its size is the number of distinct scores: small
  for calibrated (binned) scores, up to the row count for raw float scores. It is capped by
  ``dask.config`` ``gpucal.max-distinct-keys`` (default 1e7 keys, 400 MB on the merging worker); above
  it the metric raises instead of collecting rows. Rounding the scores to 6 decimals bounds the table
  to 1e6 + 1 keys; for AUC that treats pairs closer than 1e-6 as ties (each such pair moves AUC by at
  most half its weight share). A fine fixed histogram would bound memory but give AUC only up to the
  mass of pairs inside one histogram bin, with no way to report the error: exactness won.

Row checks run inside each partition (error messages count rows from the partition's start); checks on
the whole data (no rows, all weights zero, one class for AUC) run on the reduced sums.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from gpucal._backend import to_numpy
from gpucal._validation import check_probabilities
from gpucal.metrics._binning import uniform_bin_ids
from gpucal.metrics._inputs import check_partition_rows, factorize_values
from gpucal.metrics._reduce import bin_gaps, lp_average, pcoc_ratio
from gpucal.metrics._sums import COUNT, WP, WY, W, group_stats
from gpucal.metrics.grouped import report_columns, segment_rows, sort_segments
from gpucal.metrics.rejection import (
    DEFAULT_THRESHOLDS,
    binary_threshold_sums,
    check_thresholds,
    curve_from_sums,
)
from gpucal.rows._checks import check_partition_weight
from gpucal.rows._collections import Partitions, partitions
from gpucal.rows._reduce import (
    KeyedTable,
    check_table_size,
    group_sorted,
    max_distinct_keys,
    merge_tables,
    merge_uniques,
    reduce_partitions,
    sum_partitions,
)

# --------------------------------------------------------------------------------------------------
# Partition functions (module level, so process workers can unpickle them)


def _totals(y: Any, p: Any, w: Any) -> np.ndarray:
    """``[count, sum w, sum w p, sum w y]`` of one partition."""
    rows = check_partition_rows(y, p, w)
    xp = rows.xp
    if rows.w is None:
        return np.array([rows.n, rows.n, float(xp.sum(rows.p)), float(xp.sum(rows.y))])
    return np.array([rows.n, float(rows.w.sum()), float(rows.w @ rows.p), float(rows.w @ rows.y)])


def _loss_sums(y: Any, p: Any, w: Any, kind: str) -> np.ndarray:
    """``[count, sum w, sum w * loss]`` with the log-loss or the squared error of one partition."""
    rows = check_partition_rows(y, p, w)
    xp = rows.xp
    if kind == "log_loss":
        eps = float(np.finfo(np.float64).eps)
        q = xp.clip(rows.p, eps, 1.0 - eps)
        loss = -(rows.y * xp.log(q) + (1.0 - rows.y) * xp.log1p(-q))
    else:
        diff = rows.p - rows.y
        loss = diff * diff
    return np.array([rows.n, rows.total_weight, float(rows.weights() @ loss)])


def _uniform_bins(y: Any, p: Any, w: Any, n_bins: int) -> np.ndarray:
    """``(n_bins, 4)`` sums of one partition's equal-width probability bins."""
    rows = check_partition_rows(y, p, w)
    return group_stats(uniform_bin_ids(rows.p, n_bins), rows.p, rows.y, rows.w, n_bins)


def _row_stats(rows: Any) -> Any:
    """``(n, 4)`` per-row ``1, w, w p, w y`` on the rows' device (the rows of a keyed table)."""
    xp = rows.xp
    w = rows.weights()
    return xp.stack([xp.ones(rows.n, dtype=xp.float64), w, w * rows.p, w * rows.y], axis=1)


def _score_table(y: Any, p: Any, w: Any, limit: int) -> KeyedTable:
    """Sums ``count, w, w p, w y`` per distinct probability of one partition."""
    rows = check_partition_rows(y, p, w)
    keys, stats = group_sorted((rows.p,), _row_stats(rows), rows.xp)
    check_table_size(int(stats.shape[0]), limit, "distinct-score table")
    return KeyedTable(tuple(to_numpy(k) for k in keys), to_numpy(stats))


def _views(
    y: Any, p: Any, w: Any, *, n_views: int, bin_size: int, seed: int, row_offset: int, n_total: int
) -> Any:
    """MVCE's ``(n_views, n_bins, 4)`` view sums of one partition, its rows at their global ids."""
    from kernels import view_sums

    rows = check_partition_rows(y, p, w)
    return view_sums(
        rows.p,
        rows.y,
        rows.w,
        n_views=n_views,
        bin_size=bin_size,
        seed=seed,
        row_offset=row_offset,
        n_total=n_total,
    )


def _field_uniques(*fields: Any) -> tuple[np.ndarray, ...]:
    """Distinct values of each field column of one partition, in order of first appearance."""
    return tuple(np.asarray(factorize_values(f, "field")[1], dtype=object) for f in fields)


def _merge_field_uniques(*per_partition: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    return tuple(merge_uniques(*column) for column in zip(*per_partition, strict=True))


def _global_codes(values: Any, uniques: np.ndarray, xp: Any) -> Any:
    """Codes of ``values`` into the global ``uniques`` (learnt by the first pass), on the rows' device."""
    local_codes, local_uniques = factorize_values(values, "field")
    position = pd.Index(uniques).get_indexer(pd.Index(np.asarray(local_uniques, dtype=object)))
    return xp.asarray(position, dtype=xp.int32)[xp.asarray(local_codes)]


def _field_stats(y: Any, p: Any, w: Any, *fields: Any, uniques: tuple[np.ndarray, ...]) -> np.ndarray:
    """Group sums of every field, stacked: ``(sum_j n_values_j, 4)``."""
    rows = check_partition_rows(y, p, w)
    parts = []
    for values, u in zip(fields, uniques, strict=True):
        codes = _global_codes(values, u, rows.xp)
        parts.append(group_stats(codes, rows.p, rows.y, rows.w, len(u)))
    return np.concatenate(parts)


def _gc_uniform(y: Any, p: Any, w: Any, field: Any, *, uniques: np.ndarray, n_bins: int) -> np.ndarray:
    rows = check_partition_rows(y, p, w)
    codes = _global_codes(field, uniques, rows.xp)
    bins = uniform_bin_ids(rows.p, n_bins).astype(rows.xp.int32)
    return group_stats(codes * n_bins + bins, rows.p, rows.y, rows.w, len(uniques) * n_bins)


def _field_score_table(y: Any, p: Any, w: Any, field: Any, *, uniques: np.ndarray, limit: int) -> KeyedTable:
    """Sums per distinct (field value, probability) of one partition (GC-N's equal-mass bins)."""
    rows = check_partition_rows(y, p, w)
    codes = _global_codes(field, uniques, rows.xp)
    keys, stats = group_sorted((codes, rows.p), _row_stats(rows), rows.xp)
    check_table_size(int(stats.shape[0]), limit, "distinct (field, score) table")
    return KeyedTable(tuple(to_numpy(k) for k in keys), to_numpy(stats))


def _tce_sums(eta: Any, prob: Any, w: Any, norm: float) -> np.ndarray:
    """``[count, sum w, sum w |eta - p|^norm or max gap over w > 0]`` of one partition."""
    from gpucal._backend import array_namespace

    eta = check_probabilities(eta, "p_true")
    prob = check_probabilities(prob, "y_prob")
    xp = array_namespace(eta, prob)
    n = int(eta.shape[0])
    if int(prob.shape[0]) != n:
        msg = f"inputs have different numbers of rows: p_true has {n}, y_prob has {prob.shape[0]}"
        raise ValueError(msg)
    weights = xp.ones(n, dtype=xp.float64) if w is None else check_partition_weight(w, n, xp)
    gap = xp.abs(eta - prob)
    if math.isinf(norm):
        kept = gap[weights > 0]
        top = float(kept.max()) if kept.shape[0] else -math.inf
        return np.array([n, float(weights.sum()), top])
    return np.array([n, float(weights.sum()), float(weights @ gap**norm)])


def _sum_sum_max(*arrays: np.ndarray) -> np.ndarray:
    stacked = np.stack(arrays)
    return np.array([stacked[:, 0].sum(), stacked[:, 1].sum(), stacked[:, 2].max()])


# --------------------------------------------------------------------------------------------------
# Helpers on the client


def _row_parts(y_true: Any, y_prob: Any, sample_weight: Any, **fields: Any) -> Partitions:
    return partitions({"y_true": y_true, "y_prob": y_prob, "sample_weight": sample_weight, **fields})


def _check_total(count: float, weight: float, label_name: str = "y_true") -> None:
    if count == 0:
        msg = f"{label_name}: no rows"
        raise ValueError(msg)
    if weight <= 0:
        msg = "sample_weight: all weights are zero"
        raise ValueError(msg)


def _score_table_of(parts: Partitions) -> KeyedTable:
    limit = max_distinct_keys()
    combine = functools.partial(merge_tables, limit=limit, what="distinct-score table")
    table: KeyedTable = reduce_partitions(parts, _score_table, combine, args=(limit,))
    _check_total(float(table.stats[:, COUNT].sum()), float(table.stats[:, W].sum()))
    return table


def _mass_bins(weight: np.ndarray, n_bins: int, group_start: np.ndarray | None = None) -> np.ndarray:
    """Equal-mass bin of each key of a table sorted by score (inside each group when ``group_start``).

    The rule of ``gpucal.metrics._binning.mass_bin_ids``: ``min(n_bins - 1, floor(n_bins S_< / W))``
    with ``S_<`` the weight of the smaller scores (of the group) and ``W`` the (group's) total weight.
    """
    n = weight.shape[0]
    prefix = np.concatenate([[0.0], np.cumsum(weight)])
    starts = np.array([0]) if group_start is None else group_start
    bounds = np.concatenate([starts, [n]])
    group_id = np.repeat(np.arange(starts.shape[0]), np.diff(bounds))
    below = prefix[:-1] - prefix[starts][group_id]
    total = (prefix[bounds[1:]] - prefix[bounds[:-1]])[group_id]
    safe_total = np.where(total > 0, total, 1.0)
    return np.minimum(np.floor(n_bins * below / safe_total), n_bins - 1).astype(np.int64)


def _sum_by(ids: np.ndarray, stats: np.ndarray, n_groups: int) -> np.ndarray:
    return np.stack(
        [np.bincount(ids, weights=stats[:, j], minlength=n_groups) for j in range(stats.shape[1])], 1
    )


def _binned_stats(y_true: Any, y_prob: Any, sample_weight: Any, n_bins: int, strategy: str) -> np.ndarray:
    """The ``(n_bins, 4)`` bin sums of ``gpucal.metrics.binned.binned_stats``, from partitions."""
    parts = _row_parts(y_true, y_prob, sample_weight)
    if strategy == "uniform":
        stats = sum_partitions(parts, _uniform_bins, args=(n_bins,))
        _check_total(stats[:, COUNT].sum(), stats[:, W].sum())
        return stats
    table = _score_table_of(parts)
    return _sum_by(_mass_bins(table.stats[:, W], n_bins), table.stats, n_bins)


def _field_uniques_of(parts: Partitions, fields: list[str]) -> tuple[np.ndarray, ...]:
    """First pass of the field metrics: the distinct values of every field column, globally."""
    index = [parts.names.index(f) for f in fields]
    field_parts = Partitions(tuple(fields), [tuple(part[i] for i in index) for part in parts.parts])
    return reduce_partitions(field_parts, _field_uniques, _merge_field_uniques)


def _grouped_stats(y_true: Any, y_prob: Any, field: Any, sample_weight: Any, name: str) -> np.ndarray:
    parts = _row_parts(y_true, y_prob, sample_weight, **{name: field})
    (uniques,) = _field_uniques_of(parts, [name])
    stats = sum_partitions(parts, _field_stats, kwargs={"uniques": (uniques,)})
    _check_total(stats[:, COUNT].sum(), stats[:, W].sum())
    return stats


# --------------------------------------------------------------------------------------------------
# The twins: same signatures and values as gpucal.metrics


def pce(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    count, weight, wp, wy = sum_partitions(_row_parts(y_true, y_prob, sample_weight), _totals)
    _check_total(count, weight)
    return abs(float(wp) - float(wy)) / float(weight)


def pcoc(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    count, weight, wp, wy = sum_partitions(_row_parts(y_true, y_prob, sample_weight), _totals)
    _check_total(count, weight)
    return pcoc_ratio(float(wp), float(wy))


def _mean_loss(kind: str, y_true: Any, y_prob: Any, sample_weight: Any) -> float:
    parts = _row_parts(y_true, y_prob, sample_weight)
    count, weight, loss = sum_partitions(parts, _loss_sums, args=(kind,))
    _check_total(count, weight)
    return float(loss) / float(weight)


def log_loss(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    return _mean_loss("log_loss", y_true, y_prob, sample_weight)


def brier(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    return _mean_loss("brier", y_true, y_prob, sample_weight)


def tce(p_true: Any, y_prob: Any, *, p: float = 2.0, sample_weight: Any = None) -> float:
    parts = partitions({"p_true": p_true, "y_prob": y_prob, "sample_weight": sample_weight})
    if math.isinf(p):
        count, weight, top = reduce_partitions(parts, _tce_sums, _sum_sum_max, args=(p,))
        _check_total(count, weight, "p_true")
        return float(top)
    count, weight, total = sum_partitions(parts, _tce_sums, args=(p,))
    _check_total(count, weight, "p_true")
    return (float(total) / float(weight)) ** (1.0 / p)


def roc_auc(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    """ROC AUC from the distinct-score table: exact, ties count one half (see the module docstring)."""
    table = _score_table_of(_row_parts(y_true, y_prob, sample_weight))
    pos = table.stats[:, WY]
    neg = table.stats[:, W] - pos
    total_pos, total_neg = float(pos.sum()), float(neg.sum())
    if total_pos <= 0 or total_neg <= 0:
        missing = "positive" if total_pos <= 0 else "negative"
        msg = f"roc_auc: y_true has only one class (no {missing} weight); ROC AUC is undefined"
        raise ValueError(msg)
    neg_below = np.concatenate([[0.0], np.cumsum(neg)[:-1]])
    return float(np.sum(pos * (neg_below + 0.5 * neg))) / (total_pos * total_neg)


def ece(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    n_bins: int = 15,
    strategy: str = "uniform",
    p: float = 1.0,
    weighting: str = "mass",
) -> float:
    gap, mass = bin_gaps(_binned_stats(y_true, y_prob, sample_weight, n_bins, strategy))
    return lp_average(gap, mass, p, weighting)


def mce(
    y_true: Any, y_prob: Any, *, sample_weight: Any = None, n_bins: int = 15, strategy: str = "uniform"
) -> float:
    gap, _ = bin_gaps(_binned_stats(y_true, y_prob, sample_weight, n_bins, strategy))
    return float(gap.max())


def ada_ece(y_true: Any, y_prob: Any, *, sample_weight: Any = None, n_bins: int = 15) -> float:
    return ece(
        y_true, y_prob, sample_weight=sample_weight, n_bins=n_bins, strategy="quantile", p=2, weighting="mass"
    )


def prob_ece(
    y_true: Any, y_prob: Any, *, sample_weight: Any = None, n_bins: int = 15, strategy: str = "uniform"
) -> float:
    stats = _binned_stats(y_true, y_prob, sample_weight, n_bins, strategy)
    return float(np.abs(stats[:, WY] - stats[:, WP]).sum() / stats[:, W].sum())


def cal_n(
    y_true: Any, y_prob: Any, *, sample_weight: Any = None, n_bins: int = 10, strategy: str = "quantile"
) -> float:
    from gpucal.metrics.binned import cal_n_per_group

    stats = _binned_stats(y_true, y_prob, sample_weight, n_bins, strategy)
    return float(cal_n_per_group(stats[np.newaxis])[0])


def ece_sweep(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    p: float = 1.0,
    weighting: str = "mass",
    max_bins: int | None = None,
) -> float:
    from gpucal.metrics.binned import sweep_from_prefix

    table = _score_table_of(_row_parts(y_true, y_prob, sample_weight))
    n_rows = int(table.stats[:, COUNT].sum())
    zero = np.zeros(1)
    prefix_w, prefix_wp, prefix_wy = (
        np.concatenate([zero, np.cumsum(table.stats[:, j])]) for j in (W, WP, WY)
    )
    limit = n_rows if max_bins is None else min(max_bins, n_rows)
    tie_start = np.arange(table.n_keys)
    return sweep_from_prefix(tie_start, prefix_w, prefix_wp, prefix_wy, limit=limit, p=p, weighting=weighting)


def mvce(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    n_views: int = 100,
    bin_size: int = 1000,
    p: float = 2.0,
    seed: int = 0,
) -> float:
    from gpucal.metrics.mvce import mvce_from_view_stats

    parts = _row_parts(y_true, y_prob, sample_weight)
    options = {"n_views": n_views, "bin_size": bin_size, "seed": seed}
    stats = sum_partitions(parts, _views, kwargs=options, with_offsets=True)
    _check_total(stats[0, :, COUNT].sum(), stats[0, :, W].sum())
    return mvce_from_view_stats(stats, p)


def field_ece(y_true: Any, y_prob: Any, field: Any, *, sample_weight: Any = None) -> float:
    stats = _grouped_stats(y_true, y_prob, field, sample_weight, "field")
    return float(np.abs(stats[:, WY] - stats[:, WP]).sum() / stats[:, W].sum())


def field_rce(y_true: Any, y_prob: Any, field: Any, *, sample_weight: Any = None, eps: float = 1e-6) -> float:
    stats = _grouped_stats(y_true, y_prob, field, sample_weight, "field")
    kept = stats[stats[:, W] > 0]
    excess = np.abs(kept[:, WY] - kept[:, WP])
    terms = kept[:, W] * excess / (kept[:, WY] + eps * kept[:, W])
    return float(terms.sum() / kept[:, W].sum())


def cece(y_true: Any, y_prob: Any, clusters: Any, *, sample_weight: Any = None, metric: str = "ece") -> float:
    gap, mass = bin_gaps(_grouped_stats(y_true, y_prob, clusters, sample_weight, "clusters"))
    norm = {"ece": 1.0, "mce": math.inf, "ada_ece": 2.0}[metric]
    return lp_average(gap, mass, norm, "mass")


def gc_n(
    y_true: Any,
    y_prob: Any,
    field: Any,
    *,
    sample_weight: Any = None,
    n_bins: int = 10,
    strategy: str = "quantile",
) -> float:
    from gpucal.metrics.binned import cal_n_per_group

    parts = _row_parts(y_true, y_prob, sample_weight, field=field)
    (uniques,) = _field_uniques_of(parts, ["field"])
    n_values = len(uniques)
    if strategy == "uniform":
        stats = sum_partitions(parts, _gc_uniform, kwargs={"uniques": uniques, "n_bins": n_bins})
    else:
        limit = max_distinct_keys()
        combine = functools.partial(merge_tables, limit=limit, what="distinct (field, score) table")
        table: KeyedTable = reduce_partitions(
            parts, _field_score_table, combine, kwargs={"uniques": uniques, "limit": limit}
        )
        codes = table.keys[0].astype(np.int64)
        group_start = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]]))
        bins = _mass_bins(table.stats[:, W], n_bins, group_start)
        stats = _sum_by(codes * n_bins + bins, table.stats, n_values * n_bins)
    _check_total(stats[:, COUNT].sum(), stats[:, W].sum())
    stats = stats.reshape(n_values, n_bins, 4)
    value_weight = stats[:, :, W].sum(axis=1)
    live = value_weight > 0
    per_value = cal_n_per_group(stats[live])
    return float(np.sum(value_weight[live] * per_value) / value_weight[live].sum())


def segment_report(
    y_true: Any,
    y_prob: Any,
    features: Any,
    *,
    sample_weight: Any = None,
    sort_by: str = "excess",
    min_rows: int = 1,
) -> pd.DataFrame:
    columns = report_columns(features)
    field_names = {f"features[{name!r}]": values for name, values in columns.items()}
    parts = _row_parts(y_true, y_prob, sample_weight, **field_names)
    uniques = _field_uniques_of(parts, list(field_names))
    stats_all = sum_partitions(parts, _field_stats, kwargs={"uniques": uniques})
    _check_total(stats_all[: len(uniques[0]), COUNT].sum(), stats_all[: len(uniques[0]), W].sum())
    report_parts = []
    start = 0
    for name, u in zip(columns, uniques, strict=True):
        report_parts.append(segment_rows(name, u, stats_all[start : start + len(u)], min_rows))
        start += len(u)
    return sort_segments(report_parts, sort_by)


def rejection_curve(
    y_true: Any, y_prob: Any, *, thresholds: Any = DEFAULT_THRESHOLDS, sample_weight: Any = None
) -> pd.DataFrame:
    """Binary rows only: per threshold, the accepted rows' sums are added over partitions."""
    levels = check_thresholds(thresholds)
    sums = sum_partitions(_row_parts(y_true, y_prob, sample_weight), binary_threshold_sums, args=(levels,))
    _check_total(float(sums[-1, 0]), float(sums[-1, 1]))
    return curve_from_sums(levels, sums)


_TWINS: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (
        ada_ece,
        brier,
        cal_n,
        cece,
        ece,
        ece_sweep,
        field_ece,
        field_rce,
        gc_n,
        log_loss,
        rejection_curve,
        mce,
        mvce,
        pce,
        pcoc,
        prob_ece,
        roc_auc,
        segment_report,
        tce,
    )
}


def distributed_metric(name: str) -> Callable[..., Any]:
    """Return the distributed twin of the metric ``name`` of ``gpucal.metrics``."""
    if name not in _TWINS:
        msg = f"{name} has no distributed form; compute it on one machine"
        raise NotImplementedError(msg)
    return _TWINS[name]


__all__ = ["distributed_metric", *sorted(_TWINS)]
