"""One table of every headline metric for several predictions of the same rows.

This is what ``gpucal demo`` prints, and what a user runs to compare calibrators side by side: rows
are metrics, columns are predictions (the raw score, each calibrator, the oracle where known).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from gpucal import metrics
from gpucal._validation import check_not_class_labels
from gpucal.metrics.grouped import report_columns


def evaluate(
    y_true: Any,
    predictions: Mapping[str, Any],
    *,
    sample_weight: Any = None,
    fields: Any = None,
    p_true: Any = None,
    seed: int = 0,
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
        are NaN for a constant prediction, where they are not defined.
    """
    field_columns = (
        {}
        if fields is None or (isinstance(fields, Mapping) and not fields)
        else report_columns(fields, "fields")
    )
    table: dict[str, dict[str, float]] = {}
    for name, y_prob in predictions.items():
        check_not_class_labels(y_prob, f"predictions[{name!r}]")
    for name, y_prob in predictions.items():
        col = {
            "log_loss": metrics.log_loss(y_true, y_prob, sample_weight=sample_weight),
            "brier": metrics.brier(y_true, y_prob, sample_weight=sample_weight),
            "roc_auc": metrics.roc_auc(y_true, y_prob, sample_weight=sample_weight),
            "ece_15_uniform": metrics.ece(y_true, y_prob, sample_weight=sample_weight),
            "ece_15_quantile": metrics.ece(y_true, y_prob, sample_weight=sample_weight, strategy="quantile"),
            "mvce_r100": metrics.mvce(y_true, y_prob, sample_weight=sample_weight, seed=seed),
            "pcoc": metrics.pcoc(y_true, y_prob, sample_weight=sample_weight),
            "ecce": metrics.ecce(y_true, y_prob, sample_weight=sample_weight),
            "ecce_sigma": metrics.ecce_sigma(y_true, y_prob, sample_weight=sample_weight),
            "smooth_ece": metrics.smooth_ece(y_true, y_prob, sample_weight=sample_weight),
            "hosmer_lemeshow_p": metrics.hosmer_lemeshow(y_true, y_prob, sample_weight=sample_weight).p_value,
            "spiegelhalter_p": metrics.spiegelhalter_z(y_true, y_prob, sample_weight=sample_weight).p_value,
            "calibration_slope": _unless_constant(
                metrics.calibration_slope, "slope", y_true, y_prob, sample_weight
            ),
            "calibration_intercept": metrics.calibration_intercept(
                y_true, y_prob, sample_weight=sample_weight
            ).intercept,
            "skce": _unless_constant(metrics.skce, "statistic", y_true, y_prob, sample_weight),
        }
        if field_columns:
            multicalibration = metrics.multicalibration_error(
                y_true, y_prob, field_columns, sample_weight=sample_weight
            )
            col["mce"], col["mce_sigma"] = multicalibration.mce, multicalibration.mce_sigma
        else:
            col["mce"], col["mce_sigma"] = col["ecce"], col["ecce_sigma"]
        for field_name, field in field_columns.items():
            col[f"field_ece[{field_name}]"] = metrics.field_ece(
                y_true, y_prob, field, sample_weight=sample_weight
            )
            col[f"field_rce[{field_name}]"] = metrics.field_rce(
                y_true, y_prob, field, sample_weight=sample_weight
            )
        if p_true is not None:
            col["tce_l2"] = metrics.tce(p_true, y_prob, sample_weight=sample_weight)
        table[name] = col
    return pd.DataFrame(table)


def _unless_constant(
    metric: Callable[..., Any], field: str, y_true: Any, y_prob: Any, sample_weight: Any
) -> float:
    """The ``field`` of ``metric``'s result, or NaN when it refuses a constant prediction (the inputs
    were checked by the metrics before)."""
    try:
        return float(getattr(metric(y_true, y_prob, sample_weight=sample_weight), field))
    except ValueError as error:
        if "same logit" in str(error) or "identical" in str(error):
            return math.nan
        raise
