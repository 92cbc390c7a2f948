r"""The rejection curve: error rate of the rows a classifier keeps when it abstains on unsure ones.

CCL (Lavi et al., Sec. 4.1-4.2, Table 4, Fig. 4) uses calibrated probabilities as a reject option: a row
whose confidence is below a threshold is rejected (sent to an expert), and a calibrator is judged by the
error rate of the rows it accepts. Sorting rows by confidence once gives every threshold from suffix sums.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpucal._backend import to_numpy
from gpucal._validation import (
    as_1d_array,
    check_class_labels,
    check_not_empty,
    check_same_index,
    check_sample_weight,
)
from gpucal.metrics.inputs import CheckedRows, check_total, metric_rows
from gpucal.rows import is_dask_collection

#: Default thresholds on the confidence :math:`\max(p, 1 - p)`: 0.5 (accept all) to 0.95.
DEFAULT_THRESHOLDS = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))


def check_thresholds(thresholds: Any) -> np.ndarray:
    values = np.asarray(thresholds, dtype=np.float64)
    if values.ndim != 1 or values.shape[0] == 0:
        msg = f"thresholds: expected a non-empty 1-D sequence of numbers, got shape {values.shape}"
        raise ValueError(msg)
    bad = ~np.isfinite(values) | (values < 0) | (values > 1)
    if bad.any():
        msg = f"thresholds: must be finite numbers in [0, 1]; got {values[bad][0]!r}"
        raise ValueError(msg)
    return values


def _matrix_confidence_and_error(y_true: Any, prob: Any, sample_weight: Any) -> tuple[np.ndarray, ...]:
    """Per row of a probability matrix: confidence, error of the arg-max class, weight (host float64)."""
    check_same_index(y_true=y_true, y_prob=prob, sample_weight=sample_weight)
    matrix = np.asarray(to_numpy(prob), dtype=np.float64)
    n = matrix.shape[0]
    check_not_empty(n, "y_prob")
    outside = ~((matrix >= 0) & (matrix <= 1))  # NaN compares false: outside too
    if outside.any():
        row, column = np.argwhere(outside)[0]
        value = float(matrix[row, column])
        msg = f"y_prob: probabilities must be finite and in [0, 1]; row {row}, column {column} holds {value}"
        raise ValueError(msg)
    labels = to_numpy(check_class_labels(y_true, n, matrix.shape[1], name="y_true"))
    # Read on the host, as the matrix is: a cupy weight column beside a cupy matrix is no mix.
    host_weight = None if sample_weight is None else to_numpy(as_1d_array(sample_weight, "sample_weight"))
    w = np.asarray(check_sample_weight(host_weight, n), dtype=np.float64)
    predicted = np.argmax(matrix, axis=1)
    return matrix.max(axis=1), (predicted != labels).astype(np.float64), w


def _binary_confidence_and_error(rows: CheckedRows) -> tuple[np.ndarray, ...]:
    p, y = to_numpy(rows.p), to_numpy(rows.y)
    w = np.ones(p.shape[0]) if rows.w is None else to_numpy(rows.w)
    # The predicted class is 1 when p >= 1/2; a soft label y counts as that fraction of a positive.
    error = np.where(p >= 0.5, 1.0 - y, y)
    return np.maximum(p, 1.0 - p), error, np.asarray(w, dtype=np.float64)


def rejection_curve(
    y_true: Any, y_prob: Any, *, thresholds: Any = DEFAULT_THRESHOLDS, sample_weight: Any = None
) -> pd.DataFrame:
    r"""Error rate of the accepted rows, and the share accepted, per confidence threshold.

    A row is accepted when its confidence :math:`c_i = \max(p_i, 1 - p_i)` (binary; :math:`\max_k p_{ik}` for
    an ``(n, K)`` probability matrix) is at least the threshold :math:`\tau`, rejected otherwise. With the
    predicted class :math:`\hat y_i = [p_i \ge 1/2]` (the arg-max for a matrix):

    .. math::

        \mathrm{error}(\tau) = \frac{\sum_{i:\, c_i \ge \tau} w_i\, [\hat y_i \ne y_i]}
                                    {\sum_{i:\, c_i \ge \tau} w_i}, \qquad
        \mathrm{accepted}(\tau) = \frac{\sum_{i:\, c_i \ge \tau} w_i}{\sum_i w_i}.

    Source: CCL (Lavi et al.), Sec. 4.1-4.2 (Table 4, Fig. 4): reject the rows below a threshold, compare
    the errors of the accepted rows. Sorts by the confidence only; no bins. Table 4's threshold axis runs
    the other way (its error grows with the threshold, reaching the base error at 0.9), so compare
    calibrators at equal ``accepted`` shares rather than at equal threshold values.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in {0, 1} (soft labels count as that fraction of a positive, and of an error), or class
        indices for a probability matrix.
    y_prob : array-like of shape (n,) or (n, K)
        Probabilities of the positive class, or a probability matrix.
    thresholds : sequence of float, default 0.5, 0.55, ..., 0.95
        Confidence thresholds in [0, 1]; rows with confidence ``>= threshold`` are accepted.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.

    Returns
    -------
    pandas.DataFrame
        One row per threshold: ``threshold``, ``accepted`` (weight share accepted), ``rows`` (rows
        accepted), ``error_rate`` (NaN when nothing is accepted: no rows, no error rate).

    Examples
    --------
    >>> curve = rejection_curve([0, 1, 1, 0], [0.1, 0.8, 0.4, 0.6], thresholds=[0.5, 0.7])
    >>> curve["error_rate"].tolist(), curve["accepted"].tolist()
    ([0.5, 0.0], [1.0, 0.5])
    """
    levels = check_thresholds(thresholds)
    prob = y_prob if hasattr(y_prob, "ndim") else np.asarray(y_prob)
    if prob.ndim == 2 and not is_dask_collection(prob):
        confidence, error, w = _matrix_confidence_and_error(y_true, prob, sample_weight)
        return curve_from_sums(levels, threshold_sums(confidence, error, w, levels))
    sums = metric_rows(y_true, y_prob, sample_weight).sum(binary_threshold_sums, levels)
    check_total(float(sums[-1, 0]), float(sums[-1, 1]))
    return curve_from_sums(levels, sums)


def threshold_sums(
    confidence: np.ndarray, error: np.ndarray, w: np.ndarray, levels: np.ndarray
) -> np.ndarray:
    """Return ``(T + 1, 3)``: per threshold ``[rows, sum w, sum w error]`` of accepted rows, then of all.

    Sums over rows, so the curve of several blocks adds them.
    """
    order = np.argsort(confidence, kind="stable")
    # Suffix sums: entry j is the total over rows order[j:], the rows of confidence >= sorted value j.
    weight_tail = np.concatenate([np.cumsum(w[order][::-1])[::-1], [0.0]])
    error_tail = np.concatenate([np.cumsum((w * error)[order][::-1])[::-1], [0.0]])
    first = np.searchsorted(confidence[order], np.append(levels, -np.inf), side="left")
    accepted = [confidence.shape[0] - first, weight_tail[first], error_tail[first]]
    return np.stack(accepted, axis=1).astype(np.float64)


def curve_from_sums(levels: np.ndarray, sums: np.ndarray) -> pd.DataFrame:
    """The curve's table from :func:`threshold_sums` (possibly added over partitions)."""
    rows, weight, errors = sums[:-1, 0], sums[:-1, 1], sums[:-1, 2]
    with np.errstate(invalid="ignore", divide="ignore"):
        error_rate = np.where(weight > 0, errors / weight, np.nan)
    return pd.DataFrame(
        {
            "threshold": levels,
            "accepted": weight / sums[-1, 1],
            "rows": rows.astype(np.int64),
            "error_rate": error_rate,
        }
    )


def binary_threshold_sums(block: CheckedRows, levels: np.ndarray) -> np.ndarray:
    """:func:`threshold_sums` of one block of binary rows (it may be empty)."""
    confidence, error, w = _binary_confidence_and_error(block)
    return threshold_sums(confidence, error, w, levels)
