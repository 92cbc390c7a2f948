"""Calibration errors grouped by the values of a feature (a field) or by given clusters.

These metrics do not look at the score to form groups: each value of the field (or each cluster) is one
bin, so the bins do not move when a calibrator changes the scores, and an error that is right on average
at every score level but wrong inside a segment shows up directly. They are blind to errors along the
score inside a segment (use the ECE family for that) and to segments of features they are not given.
Each is a small function of per-value sums ``count, sum w, sum w*p, sum w*y`` from
``gpucal.kernels.group_sums``.

Field values are factorised per block with pandas (cupy for device arrays) and their distinct values
merged over blocks (``gpucal.metrics.inputs``); missing values form their own group.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from gpucal._params import Interval, Options, validate_params
from gpucal._validation import check_not_class_labels, text_keyed
from gpucal.metrics._reduce import bin_gaps, lp_average, pcoc_ratio
from gpucal.metrics.binned import N_BINS, STRATEGY, cal_n_per_group, totals
from gpucal.metrics.binning import sum_by_id, table_mass_bins, uniform_bin_ids
from gpucal.metrics.inputs import (
    CheckedRows,
    check_total,
    field_uniques,
    global_codes,
    keyed_score_table,
    metric_rows,
)
from gpucal.metrics.sums import COUNT, WP, WY, W, group_stats


def field_sums(block: CheckedRows, fields: tuple[tuple[str, np.ndarray], ...]) -> np.ndarray:
    """Group sums ``count, w, w*p, w*y`` of one block per value of every field (``(name, uniques)``
    pairs), stacked: ``(sum_j n_values_j, 4)``."""
    parts = [
        group_stats(global_codes(block, name, uniques), block.p, block.y, block.w, len(uniques))
        for name, uniques in fields
    ]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def segment_sums(block: CheckedRows, fields: tuple[tuple[str, np.ndarray], ...]) -> np.ndarray:
    """:func:`field_sums` with a fifth column, ``sum w * p**2`` per value (for :func:`segment_report`'s
    null variance ``sum w p (1 - p)``)."""
    parts = []
    for name, uniques in fields:
        codes = global_codes(block, name, uniques)
        stats = group_stats(codes, block.p, block.y, block.w, len(uniques))
        squares = group_stats(codes, block.p * block.p, block.y, block.w, len(uniques))[:, WP]
        parts.append(np.column_stack([stats, squares]))
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def field_value_sums(
    y_true: Any, y_prob: Any, field: Any, sample_weight: Any, name: str
) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of one field (named ``name`` in errors) and their sums ``count, w, w*p, w*y``
    over every row, in the order of the values; the total weight is checked."""
    rows = metric_rows(y_true, y_prob, sample_weight, **{name: field})
    (uniques,) = field_uniques(rows, name)
    stats = rows.sum(field_sums, ((name, uniques),))
    check_total(stats[:, COUNT].sum(), stats[:, W].sum())
    return uniques, stats


def field_bin_sums(block: CheckedRows, uniques: np.ndarray, n_bins: int) -> np.ndarray:
    """Sums of one block per (field value, equal-width probability bin): GC-N's uniform bins."""
    codes = global_codes(block, "field", uniques)
    bins = uniform_bin_ids(block.p, n_bins).astype(block.xp.int32)
    return group_stats(codes * n_bins + bins, block.p, block.y, block.w, len(uniques) * n_bins)


def field_ece(y_true: Any, y_prob: Any, field: Any, *, sample_weight: Any = None) -> float:
    r"""Field-level calibration error: summed absolute excess of positives per value of a field.

    .. math::

        \text{Field-ECE} = \frac{1}{W} \sum_{z} \Big| \sum_{i:\, z_i = z} w_i (y_i - p_i) \Big|

    Source: Pan et al., "Field-aware Calibration" (WWW 2020). Groups by a feature: it sees segment biases of
    either sign even when they cancel globally; it cannot see errors along the score inside a value (a value
    that is over-confident at both ends but right on average scores 0), and each value is one group however
    many rows it has, so noise in rare values adds up (about ``sqrt(2/pi) sd / sqrt(n_z)`` per value).

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities.
    field : array-like of shape (n,)
        The field's value for each row: numbers, strings, categoricals (any 1-D column).
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.

    Returns
    -------
    float

    Examples
    --------
    >>> field_ece([1, 0, 1, 0], [0.5, 0.5, 0.5, 0.5], ["a", "a", "b", "b"])
    0.0
    >>> field_ece([1, 1, 0, 0], [0.5, 0.5, 0.5, 0.5], ["a", "a", "b", "b"])
    0.5
    """
    _, stats = field_value_sums(y_true, y_prob, field, sample_weight, "field")
    return float(np.abs(stats[:, WY] - stats[:, WP]).sum() / stats[:, W].sum())


@validate_params(eps=Interval(float, 0, None, closed="neither"))
def field_rce(y_true: Any, y_prob: Any, field: Any, *, sample_weight: Any = None, eps: float = 1e-6) -> float:
    r"""Field-level relative calibration error: per-value relative excess, weighted by the value's mass.

    With :math:`W_z = \sum_{i: z_i = z} w_i`:

    .. math::

        \text{Field-RCE} = \frac{1}{W} \sum_z W_z \,
            \frac{\big| \sum_{i:\, z_i = z} w_i (y_i - p_i) \big|}{\sum_{i:\, z_i = z} w_i (y_i + \epsilon)}

    Source: Pan et al., "Field-aware Calibration" (WWW 2020). Groups by a feature; relative to the value's
    positives, so a low-rate value with a small absolute excess can weigh as much as a high-rate one. Blind to
    errors along the score inside a value.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities.
    field : array-like of shape (n,)
        The field's value for each row.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.
    eps : float, default 1e-6
        Added to every label in the denominator (the paper's :math:`\epsilon`).

    Returns
    -------
    float

    Notes
    -----
    Division by zero: a value with no positives has denominator :math:`\epsilon W_z`, so its term is
    :math:`\sum w p / \epsilon`: large, on purpose (positives were predicted and none came). Pool rare
    values or raise ``eps`` if that is not what you want. Values of zero total weight are skipped.

    Examples
    --------
    >>> round(field_rce([1, 0, 1, 0], [0.5, 0.5, 0.25, 0.25], ["a", "a", "b", "b"]), 6)
    0.25
    """
    _, stats = field_value_sums(y_true, y_prob, field, sample_weight, "field")
    kept = stats[stats[:, W] > 0]
    excess = np.abs(kept[:, WY] - kept[:, WP])
    terms = kept[:, W] * excess / (kept[:, WY] + eps * kept[:, W])
    return float(terms.sum() / kept[:, W].sum())


@validate_params(n_bins=N_BINS, strategy=STRATEGY)
def gc_n(
    y_true: Any,
    y_prob: Any,
    field: Any,
    *,
    sample_weight: Any = None,
    n_bins: int = 10,
    strategy: str = "quantile",
) -> float:
    r"""Grouped Cal-N: Cal-N inside each value of a field, averaged with the values' weights.

    .. math::

        \text{GC-N} = \frac{\sum_z W_z \, \text{Cal-N}_z}{\sum_z W_z}

    with :math:`\text{Cal-N}_z` as in :func:`cal_n` on the rows of value :math:`z` (equal-mass bins are cut
    inside each value; equal-width bins share sklearn's edges) and :math:`W_z` the value's total weight
    (its row count when unweighted).

    Source: Deng et al., "Calibrating User Response Predictions in Online Advertising" (ECML PKDD 2020).
    Groups by a feature and then sorts by ``p`` inside each group: it sees errors along the score within
    segments; values with few rows give noisy, often infinite, ratios.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities.
    field : array-like of shape (n,)
        The field's value for each row.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.
    n_bins : int, default 10
        Bins per value.
    strategy : {"uniform", "quantile"}, default "quantile"
        Equal-width or equal-mass bins (see :func:`ece`).

    Returns
    -------
    float
        ``inf`` when any value's Cal-N is infinite (a bin with positives and no predicted mass, or the
        reverse; see :func:`cal_n` for the division rules).
    """
    rows = metric_rows(y_true, y_prob, sample_weight, field=field)
    (uniques,) = field_uniques(rows, "field")
    n_values = len(uniques)
    if strategy == "uniform":
        stats = rows.sum(field_bin_sums, uniques, n_bins)
        check_total(stats[:, COUNT].sum(), stats[:, W].sum())
    else:
        # Equal-mass bins inside each value, cut on the table of sums per distinct (value, score).
        table = keyed_score_table(rows, ("field", uniques))
        codes = table.keys[0].astype(np.int64)
        group_start = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]]))
        bins = table_mass_bins(table.stats[:, W], n_bins, group_start)
        stats = sum_by_id(codes * n_bins + bins, table.stats, n_values * n_bins)
    stats = stats.reshape(n_values, n_bins, 4)
    value_weight = stats[:, :, W].sum(axis=1)
    live = value_weight > 0
    per_value = cal_n_per_group(stats[live])
    return float(np.sum(value_weight[live] * per_value) / value_weight[live].sum())


@validate_params(metric=Options("ece", "mce", "ada_ece"))
def cece(y_true: Any, y_prob: Any, clusters: Any, *, sample_weight: Any = None, metric: str = "ece") -> float:
    r"""Clustered ECE: ECE, MCE or AdaECE with given clusters as the bins.

    .. math::

        \mathrm{CECE}_{\mathrm{ECE}} = \sum_c \frac{W_c}{W} |\bar y_c - \bar p_c|, \quad
        \mathrm{CECE}_{\mathrm{MCE}} = \max_c |\bar y_c - \bar p_c|, \quad
        \mathrm{CECE}_{\mathrm{AdaECE}} = \sqrt{\sum_c \frac{W_c}{W} (\bar y_c - \bar p_c)^2}

    Source: CCL ("Calibration and Discrimination Optimization Using Clusters of Learned
    Representation"), Section 2.4, Eq. 4 (clustered binning) applied to Eq. 1 and its MCE / AdaECE
    forms. Groups by the given cluster labels: the bins do not move when a calibrator changes the scores,
    which is what makes CECE comparable across calibrators. It sees nothing the clustering does not
    separate. Clusters of zero total weight are skipped. The weights :math:`W_c / W` are the paper's
    :math:`|B_i| / N` (row counts when unweighted); AdaECE is the paper's
    :math:`\sqrt{\frac1N \sum_i |B_i| (\hat P(B_i) - P(B_i))^2}` on these bins.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities.
    clusters : array-like of shape (n,)
        Cluster label of each row (any 1-D column); for a fitted
        :class:`~gpucal.ClusteredCalibrator`, ``cal.clusters(X)``.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.
    metric : {"ece", "mce", "ada_ece"}, default "ece"
        The base metric.

    Returns
    -------
    float

    Examples
    --------
    Cluster "a" is calibrated on average, cluster "b" predicts 0.75 where every label is 1:

    >>> y, p, clusters = [1, 0, 1, 1], [0.5, 0.5, 0.75, 0.75], ["a", "a", "b", "b"]
    >>> cece(y, p, clusters), cece(y, p, clusters, metric="mce")
    (0.125, 0.25)
    """
    _, stats = field_value_sums(y_true, y_prob, clusters, sample_weight, "clusters")
    gap, mass = bin_gaps(stats)
    norm = {"ece": 1.0, "mce": math.inf, "ada_ece": 2.0}[metric]
    return lp_average(gap, mass, norm, "mass")


def pcoc(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> float:
    r"""Predicted over observed positives.

    .. math::

        \mathrm{PCOC} = \frac{\sum_i w_i p_i}{\sum_i w_i y_i}

    Source: He et al., "Practical Lessons from Predicting Clicks on Ads at Facebook" (ADKDD 2014), as
    used by Deng et al. (2020) and Pan et al. (2020). 1 means
    calibrated on average; it sees only the global bias (no bins) and nothing that cancels.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.

    Returns
    -------
    float
        ``inf`` when there is no positive but some predicted mass, ``nan`` when both sums are zero
        (0/0: nothing predicted and nothing observed, the ratio is undefined).

    Examples
    --------
    >>> pcoc([0, 1, 1, 0], [0.1, 0.8, 0.7, 0.4])
    1.0
    """
    count, weight, wp, wy = metric_rows(y_true, y_prob, sample_weight).sum(totals)
    check_total(count, weight)
    return pcoc_ratio(float(wp), float(wy))


@validate_params(sort_by=Options("excess", "error", "sigma"), min_rows=Interval(int, 1, None))
def segment_report(
    y_true: Any,
    y_prob: Any,
    features: Any,
    *,
    sample_weight: Any = None,
    sort_by: str = "excess",
    min_rows: int = 1,
) -> pd.DataFrame:
    r"""Calibration of every value of every feature, worst first.

    One row per (feature, value): ``rows`` (row count), ``weight`` (:math:`W_z`), ``observed``
    (:math:`\bar y_z`), ``predicted`` (:math:`\bar p_z`), ``error`` (:math:`\bar p_z - \bar y_z`, positive
    = over-prediction), ``excess`` (:math:`\sum_{i:\, z_i = z} w_i (p_i - y_i) = W_z \cdot \text{error}`,
    predicted minus observed positives), ``pcoc`` (:math:`\sum w p / \sum w y`) and ``sigma``, the excess
    in standard deviations of its noise when the probabilities are calibrated,

    .. math::

        \sigma_z = \frac{\sum_{i:\, z_i = z} w_i (p_i - y_i)}{\sqrt{\sum_{i:\, z_i = z} w_i p_i (1 - p_i)}}

    (:math:`y_i \sim \text{Bernoulli}(p_i)`, weights read as row counts: integer weights equal repeated
    rows). :math:`|\sigma|` above about 3 is a bias beyond noise; ``sort_by="sigma"`` ranks by it, so that a
    small segment's noisy rate gap does not come before a large segment's real one.

    The sum of ``|excess|`` over a feature's values divided by :math:`W` is that feature's Field-ECE
    (Pan et al., WWW 2020). Groups by each feature in turn; blind to errors along the score inside a value
    and to interactions of features.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels and predicted probabilities.
    features : DataFrame or mapping of name to 1-D column
        The columns to report on (pandas or polars DataFrame, or a dict of arrays).
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.
    sort_by : {"excess", "error", "sigma"}, default "excess"
        ``"excess"``: by ``|excess|``, the segment's share of its feature's Field-ECE (large segments with a
        real bias first). ``"error"``: by ``|error|`` (rate gap; small noisy segments can come first).
        ``"sigma"``: by ``|sigma|``, how far beyond noise each segment's bias is.
    min_rows : int, default 1
        Leave out values with fewer rows.

    Returns
    -------
    pandas.DataFrame
        Columns ``feature, value, rows, weight, observed, predicted, error, excess, pcoc, sigma``, sorted
        worst first (ties keep feature order, then first appearance of the value).

    Notes
    -----
    Division by zero: a value of zero total weight has ``observed``, ``predicted`` and ``error`` NaN and
    ``excess`` 0; ``pcoc`` follows :func:`pcoc` (``inf`` with no positives, NaN for 0/0). ``sigma`` is 0
    when ``excess`` is 0 and infinite (with its sign) when the null variance is 0 but the excess is not
    (every probability 0 or 1). Predictions of an integer or boolean dtype are class labels, not
    probabilities, and are refused (``TypeError``); a feature column must hold one value per row (a 2-D
    column, or one of lists or arrays, is refused, naming it).
    """
    check_not_class_labels(y_prob)
    columns = report_columns(features)
    names = [f"features[{name!r}]" for name in columns]
    rows = metric_rows(y_true, y_prob, sample_weight, **dict(zip(names, columns.values(), strict=True)))
    uniques = field_uniques(rows, *names)
    stats = rows.sum(segment_sums, tuple(zip(names, uniques, strict=True)))
    check_total(stats[: len(uniques[0]), COUNT].sum(), stats[: len(uniques[0]), W].sum())
    parts = []
    start = 0
    for name, values in zip(columns, uniques, strict=True):
        parts.append(segment_rows(name, values, stats[start : start + len(values)], min_rows))
        start += len(values)
    return sort_segments(parts, sort_by)


def report_columns(features: Any, name: str = "features") -> dict[str, Any]:
    """The columns of :func:`segment_report`'s ``features`` (a DataFrame or a mapping), by name.

    Each must be one value per row: a 2-D column, or one holding lists or arrays, is refused here,
    naming it (``ValueError`` / ``TypeError``).
    """
    if hasattr(features, "column_names"):  # a pyarrow Table or RecordBatch: .columns holds the arrays
        # By position: by name, a name given twice failed inside pyarrow before text_keyed could say so.
        columns = text_keyed(((c, features.column(i)) for i, c in enumerate(features.column_names)), name)
    elif hasattr(features, "columns"):
        columns = text_keyed(((c, features[c]) for c in features.columns), name)
    elif isinstance(features, Mapping):
        columns = text_keyed(features.items(), name)
    else:
        kind = type(features).__name__
        msg = f"features: expected a DataFrame or a mapping of column name to values, got {kind}"
        raise TypeError(msg)
    if not columns:
        msg = "features: no columns to report on"
        raise ValueError(msg)
    for column, values in columns.items():
        check_field_column(values, f"{name}[{column!r}]")
    return columns


def check_field_column(values: Any, name: str) -> None:
    """Refuse a field that is not one value per row: a 2-D array or frame, or a column of lists/arrays."""
    shape = getattr(values, "shape", None)
    if shape is not None and len(shape) != 1:
        msg = f"{name}: expected a 1-D column (one value per row), got shape {tuple(shape)}"
        raise ValueError(msg)
    first = next((v for v in _head(values) if v is not None), None)
    if isinstance(first, list | tuple | dict | set | np.ndarray):
        kind = type(first).__name__
        msg = f"{name}: holds {kind} values; a field holds one value per row (numbers, strings, categories)"
        raise TypeError(msg)


def _head(values: Any) -> list[Any]:
    """The first few values of an object (Python-valued) column, else none (numbers need no look)."""
    dtype = getattr(values, "dtype", None)
    if dtype is not None and str(dtype) != "object":
        return []
    if isinstance(values, pd.Series):
        return list(values.iloc[:8])
    return list(values[:8]) if isinstance(values, list | np.ndarray) else []


#: Column of :func:`segment_sums` after the four of :mod:`gpucal.metrics.sums`: ``sum w p**2``.
_WP2 = 4


def segment_rows(name: str, uniques: Any, stats: np.ndarray, min_rows: int) -> pd.DataFrame:
    """One feature's rows of :func:`segment_report` from its per-value :func:`segment_sums`."""
    weight = stats[:, W]
    has_weight = weight > 0
    safe = np.where(has_weight, weight, 1.0)
    observed = np.where(has_weight, stats[:, WY] / safe, np.nan)
    predicted = np.where(has_weight, stats[:, WP] / safe, np.nan)
    part = pd.DataFrame(
        {
            "feature": name,
            "value": pd.Series(np.asarray(uniques, dtype=object)),
            "rows": stats[:, COUNT].astype(np.int64),
            "weight": weight,
            "observed": observed,
            "predicted": predicted,
            "error": predicted - observed,
            "excess": stats[:, WP] - stats[:, WY],
            "pcoc": [pcoc_ratio(a, b) for a, b in zip(stats[:, WP], stats[:, WY], strict=True)],
            "sigma": _null_sigmas(stats[:, WP] - stats[:, WY], stats[:, WP] - stats[:, _WP2]),
        }
    )
    return part[part["rows"] >= min_rows]


def _null_sigmas(excess: np.ndarray, variance: np.ndarray) -> np.ndarray:
    """``excess / sqrt(variance)``: 0 for no excess, signed ``inf`` for an excess without variance."""
    variance = np.maximum(variance, 0.0)  # sum w p - sum w p^2 can round below 0 when every p is 0 or 1
    with np.errstate(divide="ignore", invalid="ignore"):
        out = excess / np.sqrt(variance)
    out[excess == 0] = 0.0
    return out


def sort_segments(parts: list[pd.DataFrame], sort_by: str) -> pd.DataFrame:
    """Concatenate features' segment rows, worst first by ``|sort_by|`` (stable: ties keep their order)."""
    report = pd.concat(parts, ignore_index=True)
    key = report[sort_by].abs().fillna(-1.0)
    order = np.argsort(-key.to_numpy(), kind="stable")
    return report.iloc[order].reset_index(drop=True)
