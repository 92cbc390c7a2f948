"""One table of every headline metric for several predictions of the same rows.

This is what ``gpucal demo`` prints, and what a user runs to compare calibrators side by side: rows
are metrics, columns are predictions (the raw score, each calibrator, the oracle where known).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import Any

import pandas as pd

from gpucal import metrics
from gpucal._validation import check_not_class_labels, check_probabilities, check_same_index
from gpucal.metrics.grouped import report_columns
from gpucal.rows import any_dask

#: The metrics :func:`evaluate` computes, each a name its ``include`` takes: a row of the table each,
#: but ``mce`` (the ``mce`` and ``mce_sigma`` rows) and ``field_ece`` / ``field_rce`` (a row per field).
METRIC_NAMES = (
    "log_loss",
    "brier",
    "roc_auc",
    "ece_15_uniform",
    "ece_15_quantile",
    "mvce_r100",
    "pcoc",
    "ecce",
    "ecce_sigma",
    "smooth_ece",
    "hosmer_lemeshow_p",
    "spiegelhalter_p",
    "calibration_slope",
    "calibration_intercept",
    "skce",
    "mce",
    "field_ece",
    "field_rce",
    "tce_l2",
)


def evaluate(
    y_true: Any,
    predictions: Mapping[str, Any],
    *,
    sample_weight: Any = None,
    fields: Any = None,
    p_true: Any = None,
    seed: int = 0,
    include: Collection[str] | None = None,
) -> pd.DataFrame:
    """Return a metrics-by-prediction table.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in {0, 1} (soft labels in [0, 1] allowed).
    predictions : mapping of str to array-like of shape (n,)
        Named probability predictions of the same rows, e.g. ``{"raw": score, "isotonic": p}``. An
        integer or boolean dtype holds class labels, not probabilities: refused (``TypeError``).
    sample_weight : array-like of shape (n,), default=None
        Row weights used by every metric.
    fields : DataFrame or mapping of str to array-like of shape (n,), default=None
        Segment columns (a pandas or polars DataFrame, as :func:`gpucal.metrics.segment_report`
        takes, or a dict); each adds a Field-ECE and a Field-RCE row (segment-level calibration
        that the score-binned metrics cannot see), and together they are the (categorical) segment
        columns of the ``mce`` / ``mce_sigma`` rows (MCGrad's multicalibration error with its
        defaults). Without fields the only segment is all rows: ``mce`` is then ECCE and
        ``mce_sigma`` ECCE's sigma.
    p_true : array-like of shape (n,), default=None
        The true probability, known only in simulations; adds a TCE row.
    seed : int, default=0
        Seed of the MVCE views (the same seed gives the same views on every backend).
    include : collection of str, default=None
        The metrics to compute, from :data:`METRIC_NAMES` (``mce`` gives the ``mce`` and ``mce_sigma``
        rows, ``field_ece`` and ``field_rce`` a row per field); None computes every one. Leaving out
        those a report does not show saves time: ``mce``, ``mvce_r100`` and ``skce`` take about 70% of
        the table's time on 150,000 rows.

    Returns
    -------
    pandas.DataFrame
        Index: metric names (lower is better except ``roc_auc``); columns: the prediction names.
        Besides the binned ECEs: ``ecce`` and ``ecce_sigma`` (the cumulative walk, no bins; sigma
        above about 3 is beyond noise), ``mce`` and ``mce_sigma`` (the worst segment's ECCE) and
        ``smooth_ece`` (Błasiok & Nakkiran's consistent measure). The classical tests, read
        differently: ``hosmer_lemeshow_p`` and ``spiegelhalter_p`` (p-values; small rejects
        calibration), ``calibration_slope`` and ``calibration_intercept`` (Cox: 1 and 0 when
        calibrated) and ``skce`` (the unbiased SKCE, near 0 when calibrated); the slope and the SKCE
        are NaN for a constant prediction, where they are not defined, and the slope is NaN for a
        prediction that separates the classes (it is infinite). A metric undefined on these rows is NaN
        too, with a ``UserWarning`` naming it and why, and every other row is filled in: labels of one
        class (the AUC and the recalibration), no segment of enough rows (``mce``), or weights adding up
        to too few rows for a metric that reads them as repeated rows (weights normalised to sum to 1).
    """
    field_columns = (
        {}
        if fields is None or (isinstance(fields, Mapping) and not fields)
        else report_columns(fields, "fields")
    )
    if include is not None:
        unknown = sorted(set(include) - set(METRIC_NAMES))
        if unknown:
            msg = f"evaluate: unknown metrics {unknown} in include; the metrics are {list(METRIC_NAMES)}"
            raise ValueError(msg)
    wanted = set(METRIC_NAMES if include is None else include)
    table: dict[str, dict[str, float]] = {}
    for name, y_prob in predictions.items():
        check_not_class_labels(y_prob, f"predictions[{name!r}]")
        if not any_dask(y_prob):  # named here: the metrics would name any of them y_prob
            check_probabilities(y_prob, f"predictions[{name!r}]")
        # Checked here, whatever metrics are included: one that reads no labels would not check them.
        check_same_index(
            y_true=y_true,
            **{f"predictions[{name!r}]": y_prob},
            sample_weight=sample_weight,
            p_true=p_true,
            fields=fields,
        )
    for name, y_prob in predictions.items():
        table[name] = _column(y_true, y_prob, sample_weight, field_columns, p_true, seed, wanted)
    return pd.DataFrame(table)


def _column(
    y_true: Any,
    y_prob: Any,
    sample_weight: Any,
    field_columns: Mapping[str, Any],
    p_true: Any,
    seed: int,
    wanted: set[str],
) -> dict[str, float]:
    """The metrics of :func:`evaluate` named in ``wanted`` for one prediction, in the table's order."""
    w = sample_weight
    one_number: dict[str, Callable[[], float]] = {
        "log_loss": lambda: metrics.log_loss(y_true, y_prob, sample_weight=w),
        "brier": lambda: metrics.brier(y_true, y_prob, sample_weight=w),
        "roc_auc": lambda: metrics.roc_auc(y_true, y_prob, sample_weight=w),
        "ece_15_uniform": lambda: metrics.ece(y_true, y_prob, sample_weight=w),
        "ece_15_quantile": lambda: metrics.ece(y_true, y_prob, sample_weight=w, strategy="quantile"),
        "mvce_r100": lambda: metrics.mvce(y_true, y_prob, sample_weight=w, seed=seed),
        "pcoc": lambda: metrics.pcoc(y_true, y_prob, sample_weight=w),
        "ecce": lambda: metrics.ecce(y_true, y_prob, sample_weight=w),
        "ecce_sigma": lambda: metrics.ecce_sigma(y_true, y_prob, sample_weight=w),
        "smooth_ece": lambda: metrics.smooth_ece(y_true, y_prob, sample_weight=w),
        "hosmer_lemeshow_p": lambda: metrics.hosmer_lemeshow(y_true, y_prob, sample_weight=w).p_value,
        "spiegelhalter_p": lambda: metrics.spiegelhalter_z(y_true, y_prob, sample_weight=w).p_value,
        "calibration_slope": lambda: _unless_constant(metrics.calibration_slope, "slope", y_true, y_prob, w),
        "calibration_intercept": lambda: (
            metrics.calibration_intercept(y_true, y_prob, sample_weight=w).intercept
        ),
        "skce": lambda: _unless_constant(metrics.skce, "statistic", y_true, y_prob, w),
    }
    col = {metric: _defined_or_nan(metric, value) for metric, value in one_number.items() if metric in wanted}
    if "mce" in wanted:
        if field_columns:
            mce = _defined_or_nan(
                "mce",
                lambda: metrics.multicalibration_error(y_true, y_prob, field_columns, sample_weight=w),
            )
            col["mce"], col["mce_sigma"] = (
                (math.nan, math.nan) if isinstance(mce, float) else (mce.mce, mce.mce_sigma)
            )
        else:
            # Without fields the one segment is every row: ECCE's own rows, computed once.
            col["mce"] = col["ecce"] if "ecce" in col else one_number["ecce"]()
            col["mce_sigma"] = col["ecce_sigma"] if "ecce_sigma" in col else one_number["ecce_sigma"]()
    for field_name, field in field_columns.items():
        if "field_ece" in wanted:
            col[f"field_ece[{field_name}]"] = metrics.field_ece(y_true, y_prob, field, sample_weight=w)
        if "field_rce" in wanted:
            col[f"field_rce[{field_name}]"] = metrics.field_rce(y_true, y_prob, field, sample_weight=w)
    if p_true is not None and "tce_l2" in wanted:
        col["tce_l2"] = metrics.tce(p_true, y_prob, sample_weight=w)
    return col


#: What a metric says where the data leave it undefined (labels of one class, no segment of enough rows)
#: or where it reads weights as repeated rows and these are too few (weights normalised to sum to 1):
#: :func:`evaluate` shows NaN in that row, and warns with the metric's reason.
UNDEFINED_REASONS = (
    "one class",
    "reads weights as repeated rows",
    "needs at least two rows",
    "needs a total weight above 1",
    "no segment has",
)


def _defined_or_nan(name: str, compute: Callable[[], Any]) -> Any:
    """``compute()``, or NaN with a warning naming ``name`` where it is undefined on these rows
    (:data:`UNDEFINED_REASONS`): one metric's refusal does not end the whole table."""
    try:
        return compute()
    except ValueError as error:
        if not any(reason in str(error) for reason in UNDEFINED_REASONS):
            raise
        warnings.warn(f"evaluate: {name} is NaN here: {error}", UserWarning, stacklevel=4)
        return math.nan


def _unless_constant(
    metric: Callable[..., Any], field: str, y_true: Any, y_prob: Any, sample_weight: Any
) -> float:
    """The ``field`` of ``metric``'s result, or NaN when it refuses a constant prediction or, for the
    logistic recalibration, scores that separate the classes (its slope is infinite; the inputs were
    checked by the metrics before)."""
    try:
        return float(getattr(metric(y_true, y_prob, sample_weight=sample_weight), field))
    except ValueError as error:
        if any(reason in str(error) for reason in ("same logit", "identical", "separated by the score")):
            return math.nan
        raise
