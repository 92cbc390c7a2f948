r"""Multicalibration error (MCE): the worst ECCE over segments of the features, in null standard deviations.

Guy, Haimovich, Linder, Okati, Perini, Tax & Tygert, "Measuring multi-calibration" (arXiv:2506.11251,
2025), as MCGrad's ``mcgrad.metrics.MulticalibrationError`` computes it. Each segment column is reduced to
at most ``max_values_per_feature`` values; a *segment* is a combination of values of up to ``max_depth``
columns (depth 0 is all rows); segments of fewer than ``min_samples_per_segment`` rows are skipped and at
most ``max_n_segments`` are kept, in MCGrad's order. For each segment :math:`s` (rows sorted by ``p``):

.. math::

    \mathrm{ECCE}_s = \max_j C^s_j - \min_j C^s_j, \quad C^s_j = \frac{1}{W_s} \sum_{i \in s, i \le j}
    w_i (y_i - p_i), \qquad \sigma_s = \frac{\sqrt{\sum_{i \in s} w_i^2 p_i (1 - p_i)}}{W_s}

and :math:`\mathrm{MCE}_\sigma = \max_s \mathrm{ECCE}_s / \sigma_s`; the absolute MCE is
:math:`\mathrm{MCE}_\sigma \cdot \sigma_{\text{all}}`, its p-value the ECCE p-value of
:math:`\mathrm{MCE}_\sigma` (not adjusted for the many segments, as in MCGrad), and the minimum detectable
error :math:`\mathrm{MDE} = 5 \sigma_{\text{all}}`.

How the columns are reduced (MCGrad's rules): a categorical column with more than ``max_values_per_feature``
values keeps its ``max_values_per_feature - 1`` most frequent values (ties: the value met first in score
order) and merges the rest into ``"__OTHER"``; a numerical column with more distinct values is cut at its
row quantiles ``0, 1/k, ..., 1`` (``pandas.cut``, duplicate edges dropped). Missing values are a value of
their own. Values are enumerated in the order they first appear in score order, as MCGrad's ``unique()`` on
its score-sorted frame does. Segment choice uses row counts, not weights (as MCGrad).

How it is computed: the rows are read twice through :mod:`gpucal.rows` (one machine or dask partitions):
once for each column's distinct values (counts and first score), once for each row's reduced codes. The
segments of one set of columns are the groups of their combined code, so their sizes are one group-sum
pass (:func:`~gpucal.metrics.sums.group_stats`) per set of columns, never a loop over segments; then one
compiled pass over the rows in score order walks every segment's cumulative residual at once. Tied scores
are one step of each segment's walk, so the value does not depend on the order of tied rows (MCGrad's sort
does; without ties the values are equal, up to MCGrad's float32 default).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gpucal._frames import column_to_pandas
from gpucal._params import Interval, validate_params
from gpucal._validation import check_not_empty, check_same_index
from gpucal.kernels.jit import numba
from gpucal.metrics.ecce import ecce_pvalue_from_sigma, sigma_ratio
from gpucal.metrics.grouped import report_columns
from gpucal.metrics.inputs import check_partition_rows
from gpucal.metrics.sums import COUNT, group_stats
from gpucal.rows import RowBlock, as_rows

OTHER = "__OTHER"
DEPTH = Interval(int, 0, None, allow_none=True)
MAX_VALUES = Interval(int, 1, None)
MIN_SAMPLES = Interval(int, 1, None)
MAX_SEGMENTS = Interval(int, 1, None, allow_none=True)


@dataclass(frozen=True)
class MulticalibrationResult:
    """What :func:`multicalibration_error` measured.

    Attributes
    ----------
    mce : float
        Absolute MCE: ``mce_sigma * sigma_all``, in probability units.
    mce_sigma : float
        The largest segment ECCE in its null standard deviations.
    mce_pvalue : float
        ECCE p-value of ``mce_sigma`` (the smallest segment p-value; not adjusted for multiple segments).
    mce_relative : float
        ``mce`` as a percentage of the prevalence ``min(ybar, 1 - ybar)``.
    mde : float
        Minimum detectable error ``5 * sigma_all``.
    mde_relative : float
        ``mde`` as a percentage of the prevalence.
    global_ecce : float
        ECCE of all rows; ``global_ecce_sigma`` the same in null standard deviations.
    global_ecce_sigma : float
        See ``global_ecce``.
    segments : pandas.DataFrame
        One row per segment evaluated, worst first (by ``ecce_sigma``): ``segment`` (``"col=value & ..."``,
        ``"(all)"`` for depth 0), ``depth``, ``rows``, ``weight``, ``ecce``, ``ecce_sigma``,
        ``ecce_pvalue``, then one column per segment column (its value, or None when unconstrained).
    """

    mce: float
    mce_sigma: float
    mce_pvalue: float
    mce_relative: float
    mde: float
    mde_relative: float
    global_ecce: float
    global_ecce_sigma: float
    segments: pd.DataFrame

    def worst(self, k: int = 10) -> pd.DataFrame:
        """Return the ``k`` segments with the largest ``ecce_sigma``."""
        return self.segments.head(k)


# -- pass 1: each column's distinct values -------------------------------------------------------------


def host_column(values: Any) -> pd.Series:
    """Return a segment column as a host pandas Series with a fresh index (half floats as float64:
    pandas groups by no float16 index)."""
    if isinstance(values, pd.Series):
        column = values.reset_index(drop=True)
    else:
        module = type(values).__module__.split(".")[0]
        if module in ("cudf", "polars", "pyarrow"):
            column = pd.Series(column_to_pandas(values)).reset_index(drop=True)
        elif module == "cupy":
            column = pd.Series(values.get())
        else:
            column = pd.Series(np.asarray(values))
    return column.astype(np.float64) if column.dtype == np.float16 else column


def block_columns(block: RowBlock) -> tuple[Any, dict[str, pd.Series]]:
    """Return a block's checked rows and its segment columns (host Series), lengths checked."""
    given = report_columns(block["segments"])
    check_same_index(
        y_true=block["y_true"],
        y_prob=block["y_prob"],
        sample_weight=block["sample_weight"],
        **{f"segments[{name!r}]": values for name, values in given.items()},
    )
    rows = check_partition_rows(block["y_true"], block["y_prob"], block["sample_weight"])
    columns = {name: host_column(values) for name, values in given.items()}
    for name, column in columns.items():
        if len(column) != rows.n:
            msg = f"segments: column {name!r} has {len(column)} rows, expected {rows.n}"
            raise ValueError(msg)
    return rows, columns


def block_value_counts(block: RowBlock) -> dict[str, pd.DataFrame]:
    """Return, per segment column, its distinct values with their row count and smallest score."""
    rows, columns = block_columns(block)
    p = pd.Series(np.asarray(rows.p.get() if hasattr(rows.p, "get") else rows.p))
    out = {}
    for name, column in columns.items():
        frame = pd.DataFrame({"value": column, "p": p})
        out[name] = frame.groupby("value", dropna=False, sort=False)["p"].agg(["size", "min"])
    return out


def merge_value_counts(*parts: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Return the value counts of the union of the parts' rows (counts added, smallest scores kept)."""
    names = parts[0].keys()
    merged = {}
    for name in names:
        frame = pd.concat([part[name] for part in parts])
        merged[name] = frame.groupby(level=0, dropna=False, sort=False).agg({"size": "sum", "min": "min"})
    return merged


@dataclass(frozen=True)
class ColumnCoding:
    """How one segment column's values become codes ``0..n_codes-1`` (in first-seen score order).

    Categorical: ``index`` holds the distinct values, ``value_codes`` their codes (merged values share
    ``OTHER``'s). Numerical (``edges`` not empty): bin ``k`` is ``(edges[k], edges[k+1]]`` (the first closed),
    ``bin_codes`` gives each bin's code and ``nan_code`` that of missing values (-1 when none).
    """

    name: str
    labels: list[Any]
    index: pd.Index = field(default_factory=lambda: pd.Index([]))
    value_codes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    edges: np.ndarray = field(default_factory=lambda: np.zeros(0))
    bin_codes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    nan_code: int = -1

    @property
    def n_codes(self) -> int:
        return len(self.labels)

    def codes(self, column: pd.Series) -> np.ndarray:
        """Return the codes of a column's values (int16)."""
        if self.edges.size == 0:
            return self.value_codes[self.index.get_indexer(pd.Index(column))].astype(np.int16)
        values = column.to_numpy(dtype=np.float64, na_value=np.nan)
        missing = np.isnan(values)
        bins = np.clip(np.searchsorted(self.edges, values, side="left") - 1, 0, self.edges.size - 2)
        return np.where(missing, self.nan_code, self.bin_codes[bins]).astype(np.int16)


def _first_seen_codes(first_score: np.ndarray) -> np.ndarray:
    """Return codes numbering groups by their smallest score (ties: input order)."""
    order = np.argsort(first_score, kind="stable")
    codes = np.empty(order.size, dtype=np.int64)
    codes[order] = np.arange(order.size)
    return codes


def categorical_coding(name: str, counts: pd.DataFrame, max_values: int) -> ColumnCoding:
    """Keep the ``max_values - 1`` most frequent values when there are more than ``max_values``."""
    counts = counts.sort_values("min", kind="stable")  # first seen in score order
    group = np.arange(len(counts))
    labels: list[Any] = list(counts.index)
    if len(counts) > max_values:
        frequent = np.argsort(-counts["size"].to_numpy(), kind="stable")[: max_values - 1]
        keep = np.zeros(len(counts), dtype=bool)
        keep[frequent] = True
        group = np.where(keep, group, len(counts))
    first = pd.Series(counts["min"].to_numpy()).groupby(group).min()
    group_codes = _first_seen_codes(first.to_numpy())
    code_of_group = dict(zip(first.index, group_codes, strict=True))
    value_codes = np.array([code_of_group[g] for g in group], dtype=np.int64)
    labels = [None] * len(first)
    for value, g in zip(counts.index, group, strict=True):
        labels[code_of_group[g]] = OTHER if g == len(counts) else value
    return ColumnCoding(name, labels, index=pd.Index(counts.index), value_codes=value_codes)


def numerical_coding(name: str, counts: pd.DataFrame, max_values: int) -> ColumnCoding:
    """Cut at the row quantiles ``0, 1/k, ..., 1`` when there are more than ``k = max_values`` values."""
    values = counts.index.to_numpy(dtype=np.float64, na_value=np.nan)
    present = ~np.isnan(values)
    if present.sum() <= max_values:
        return categorical_coding(name, counts, len(counts))  # each value (and NaN) its own
    order = np.argsort(values[present], kind="stable")
    sorted_values = values[present][order]
    cum = np.cumsum(counts["size"].to_numpy()[present][order])
    positions = np.linspace(0.0, 1.0, max_values + 1) * (cum[-1] - 1)
    below = np.floor(positions)
    low = sorted_values[np.minimum(np.searchsorted(cum, below, side="right"), cum.size - 1)]
    high = sorted_values[np.minimum(np.searchsorted(cum, below + 1, side="right"), cum.size - 1)]
    edges = np.unique(low + (high - low) * (positions - below))
    bins = np.clip(np.searchsorted(edges, values, side="left") - 1, 0, edges.size - 2)
    group = np.where(present, bins, edges.size - 1)  # NaN: one group after the bins
    first = pd.Series(counts["min"].to_numpy()).groupby(group).min()
    codes = _first_seen_codes(first.to_numpy())
    code_of_group = dict(zip(first.index, codes, strict=True))
    labels: list[Any] = [None] * len(first)
    for g, code in code_of_group.items():
        labels[code] = np.nan if g == edges.size - 1 else pd.Interval(edges[g], edges[g + 1], closed="right")
    bin_codes = np.array([code_of_group.get(k, 0) for k in range(edges.size - 1)], dtype=np.int64)
    return ColumnCoding(
        name, labels, edges=edges, bin_codes=bin_codes, nan_code=code_of_group.get(edges.size - 1, -1)
    )


# -- pass 2: every row's codes --------------------------------------------------------------------------


def block_coded_rows(block: RowBlock, codings: tuple[ColumnCoding, ...]) -> tuple[Any, ...]:
    """Return a block's ``(p, y, w, codes)`` on the host: ``codes`` (n_columns, n) int16."""
    rows, columns = block_columns(block)
    host = [np.asarray(a.get() if hasattr(a, "get") else a) for a in (rows.p, rows.y)]
    w = None if rows.w is None else np.asarray(rows.w.get() if hasattr(rows.w, "get") else rows.w)
    codes = np.stack([c.codes(columns[c.name]) for c in codings]) if codings else np.zeros((0, rows.n))
    return host[0], host[1], w, codes.astype(np.int16)


def concat_coded_rows(*parts: tuple[Any, ...]) -> tuple[Any, ...]:
    """Concatenate blocks' coded rows in block order."""
    p = np.concatenate([part[0] for part in parts])
    y = np.concatenate([part[1] for part in parts])
    weighted = [part[2] is not None for part in parts]
    if any(weighted) and not all(weighted):
        msg = "sample_weight: some partitions have weights and others not"
        raise ValueError(msg)
    w = np.concatenate([part[2] for part in parts]) if all(weighted) else None
    return p, y, w, np.concatenate([part[3] for part in parts], axis=1)


# -- the segments and their walks ----------------------------------------------------------------------


@numba.njit(cache=True)
def _segment_walks(
    p,
    residual,
    weight,
    variance,
    codes,
    subset_cols,
    subset_strides,
    subset_depth,
    subset_offset,
    lookup,
    n_segments,
):  # pragma: no cover - compiled
    # Rows in score order. For each row and each set of columns: the row's segment in that set, its walk
    # moved by the row's residual. The walk's extremes are read only where the score changes (the end of a
    # block of tied scores), so tied rows are one step: 'touched' lists the segments a tie block moved.
    walk = np.zeros(n_segments)
    high = np.zeros(n_segments)
    low = np.zeros(n_segments)
    total_w = np.zeros(n_segments)
    total_v = np.zeros(n_segments)
    touched = np.empty(n_segments, dtype=np.int64)
    is_touched = np.zeros(n_segments, dtype=np.bool_)
    n_touched = 0
    n = p.shape[0]
    for i in range(n):
        for s in range(subset_cols.shape[0]):
            code = 0
            for t in range(subset_depth[s]):
                code += codes[subset_cols[s, t], i] * subset_strides[s, t]
            seg = lookup[subset_offset[s] + code]
            if seg < 0:
                continue
            walk[seg] += residual[i]
            total_w[seg] += weight[i]
            total_v[seg] += variance[i]
            if not is_touched[seg]:
                is_touched[seg] = True
                touched[n_touched] = seg
                n_touched += 1
        if i == n - 1 or p[i + 1] != p[i]:
            for k in range(n_touched):
                seg = touched[k]
                high[seg] = max(high[seg], walk[seg])
                low[seg] = min(low[seg], walk[seg])
                is_touched[seg] = False
            n_touched = 0
    return high - low, total_w, total_v


def _segment_label(codings: Sequence[ColumnCoding], cols: tuple[int, ...], combo: tuple[int, ...]) -> str:
    if not cols:
        return "(all)"
    return " & ".join(f"{codings[c].name}={codings[c].labels[k]}" for c, k in zip(cols, combo, strict=True))


@validate_params(
    max_depth=DEPTH,
    max_values_per_feature=MAX_VALUES,
    min_samples_per_segment=MIN_SAMPLES,
    max_n_segments=MAX_SEGMENTS,
)
def multicalibration_error(
    y_true: Any,
    y_prob: Any,
    segments: Any,
    *,
    sample_weight: Any = None,
    numerical_columns: Sequence[str] = (),
    max_depth: int | None = 3,
    max_values_per_feature: int = 3,
    min_samples_per_segment: int = 10,
    max_n_segments: int | None = 1000,
) -> MulticalibrationResult:
    r"""Multicalibration error: the worst segment ECCE in null standard deviations (Guy et al. 2025).

    .. math::

        \mathrm{MCE}_\sigma = \max_s \frac{\mathrm{ECCE}_s}{\sigma_s}, \qquad
        \mathrm{MCE} = \mathrm{MCE}_\sigma \, \sigma_{\text{all}}, \qquad \mathrm{MDE} = 5 \sigma_{\text{all}}

    over segments ``s`` = combinations of values of up to ``max_depth`` segment columns (module
    docstring). Equal to ``mcgrad.metrics.MulticalibrationError`` with its defaults (``mce``,
    ``mce_sigma``, ``mce_pvalue``, ``mde``, ``segments_ecce``) given ``categorical_segment_columns`` and
    ``numerical_segment_columns`` as here. It groups by features *and* sorts by ``p``: it sees segment
    biases that cancel globally and errors along the score inside a segment; ``mce_sigma`` says whether the
    worst one is beyond noise (above about 3 to 5).

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in {0, 1} (soft labels in [0, 1] are read as fractions of a positive).
    y_prob : array-like of shape (n,)
        Predicted probabilities of the positive class.
    segments : DataFrame or mapping of str to array-like of shape (n,)
        The segment columns (pandas, polars or dask DataFrame, or a dict of columns).
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights (they weight the walks and sigmas; segments are chosen on row counts).
        Importances, as in MCGrad: the sigmas sum :math:`w^2` (:func:`ecce_sigma`), so a row of weight 3
        is not three rows.
    numerical_columns : sequence of str, default=()
        Columns cut into quantile bins; the others are categorical.
    max_depth : int or None, default=3
        Most columns combined in one segment; None: all of them.
    max_values_per_feature : int, default=3
        Values (or quantile bins) kept per column.
    min_samples_per_segment : int, default=10
        Segments with fewer rows are skipped.
    max_n_segments : int or None, default=1000
        Segments evaluated at most, in enumeration order (depth, then columns, then values).

    Returns
    -------
    MulticalibrationResult
        MCE, its sigma and p-value, the MDE, and every segment's ECCE (worst first).
    """
    rows = as_rows(y_true=y_true, y_prob=y_prob, sample_weight=sample_weight, segments=segments)
    counts = rows.reduce(block_value_counts, merge_value_counts)
    unknown = sorted(set(numerical_columns) - set(counts))
    if unknown:
        msg = f"numerical_columns: {unknown} are not columns of segments"
        raise ValueError(msg)
    names = [n for n in counts if n not in numerical_columns] + [n for n in counts if n in numerical_columns]
    codings = tuple(
        numerical_coding(n, counts[n], max_values_per_feature)
        if n in numerical_columns
        else categorical_coding(n, counts[n], max_values_per_feature)
        for n in names
    )
    p, y, w, codes = rows.reduce(block_coded_rows, concat_coded_rows, codings)
    check_not_empty(p.shape[0], "y_true")
    # Any order of tied scores gives the same walks (they are read at the ends of tie blocks only).
    order = np.argsort(p)
    p, y, codes = p[order], y[order], np.ascontiguousarray(codes[:, order], dtype=np.int32)
    w = np.ones(p.shape[0]) if w is None else w[order]
    if not w.sum() > 0:
        msg = "sample_weight: all weights are zero"
        raise ValueError(msg)

    depth_limit = len(codings) if max_depth is None else min(max_depth, len(codings))
    columns = range(len(codings))
    subsets = [cols for depth in range(depth_limit + 1) for cols in itertools.combinations(columns, depth)]
    sizes = [c.n_codes for c in codings]
    subset_cols = np.zeros((len(subsets), max(depth_limit, 1)), dtype=np.int64)
    subset_strides = np.zeros_like(subset_cols)
    subset_depth = np.array([len(cols) for cols in subsets], dtype=np.int64)
    offsets = np.zeros(len(subsets), dtype=np.int64)
    lookup_parts, labels, seg_depth, seg_counts, seg_values = [], [], [], [], []
    n_segments, total = 0, 0
    limit = math.inf if max_n_segments is None else max_n_segments
    for s, cols in enumerate(subsets):
        radix = [sizes[c] for c in cols]
        strides = [math.prod(radix[t + 1 :]) for t in range(len(cols))]
        subset_cols[s, : len(cols)] = cols
        subset_strides[s, : len(cols)] = strides
        n_groups = math.prod(radix)
        combined = np.zeros(p.shape[0], dtype=np.int32)
        for c, stride in zip(cols, strides, strict=True):
            combined += codes[c] * np.int32(stride)
        # The segment enumeration: one group-sum pass gives every combination's row count.
        n_rows = group_stats(combined, p, y, None, n_groups)[:, COUNT]
        part = np.full(n_groups, -1, dtype=np.int64)
        for code in np.flatnonzero(n_rows >= min_samples_per_segment):
            if n_segments >= limit:
                break
            part[code] = n_segments
            n_segments += 1
            combo = tuple(int(code // stride) % size for stride, size in zip(strides, radix, strict=True))
            labels.append(_segment_label(codings, cols, combo))
            seg_depth.append(len(cols))
            seg_counts.append(int(n_rows[code]))
            seg_values.append(
                {codings[c].name: codings[c].labels[k] for c, k in zip(cols, combo, strict=True)}
            )
        offsets[s] = total
        total += n_groups
        lookup_parts.append(part)
    if n_segments == 0:
        msg = f"segments: no segment has min_samples_per_segment={min_samples_per_segment} rows"
        raise ValueError(msg)

    residual = w * (y - p)
    variance = w * w * p * (1.0 - p)
    spread, seg_w, seg_v = _segment_walks(
        p,
        residual,
        w,
        variance,
        codes,
        subset_cols,
        subset_strides,
        subset_depth,
        offsets,
        np.concatenate(lookup_parts),
        n_segments,
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        seg_ecce = np.where(seg_w > 0, spread / np.where(seg_w > 0, seg_w, 1.0), 0.0)
        seg_std = np.where(seg_w > 0, np.sqrt(seg_v) / np.where(seg_w > 0, seg_w, 1.0), 0.0)
    seg_sigma = np.asarray(sigma_ratio(seg_ecce, seg_std), dtype=np.float64).reshape(-1)

    total_w = float(w.sum())
    sigma_all = math.sqrt(float(variance.sum())) / total_w
    walk = np.cumsum(residual) / total_w
    ends = np.append(np.flatnonzero(p[1:] != p[:-1]), p.shape[0] - 1)
    global_ecce = float(max(walk[ends].max(), 0.0) - min(walk[ends].min(), 0.0))
    mean_y = float(np.dot(w, y)) / total_w
    prevalence = min(mean_y, 1.0 - mean_y)
    mce_sigma = float(seg_sigma.max())
    mce = mce_sigma * sigma_all
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = 100.0 / prevalence if prevalence > 0 else math.inf

    table = pd.DataFrame(
        {
            "segment": labels,
            "depth": seg_depth,
            "rows": np.asarray(seg_counts, dtype=np.int64),
            "weight": seg_w,
            "ecce": seg_ecce,
            "ecce_sigma": seg_sigma,
            "ecce_pvalue": ecce_pvalue_from_sigma(seg_sigma),
        }
    )
    for coding in codings:
        table[coding.name] = [values.get(coding.name) for values in seg_values]
    table = table.sort_values("ecce_sigma", ascending=False, kind="stable").reset_index(drop=True)
    return MulticalibrationResult(
        mce=mce,
        mce_sigma=mce_sigma,
        mce_pvalue=float(ecce_pvalue_from_sigma(mce_sigma)),
        mce_relative=mce * relative,
        mde=5.0 * sigma_all,
        mde_relative=5.0 * sigma_all * relative,
        global_ecce=global_ecce,
        global_ecce_sigma=float(sigma_ratio(global_ecce, sigma_all)),
        segments=table,
    )
