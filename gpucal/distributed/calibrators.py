"""Fit and predict the one-dimensional calibrators on dask collections.

``Calibrator.fit`` hands dask inputs of histogram binning and isotonic regression to their
``_fit_partitions`` with a :class:`PartitionRows`: the rows stay in their partitions, and the fit sees
only what it would compute from sums on one machine.

* Histogram binning, equal width: one pass of per-bin sums (:meth:`PartitionRows.sum`).
* Histogram binning, equal mass, and isotonic regression: the distinct-score table
  (:meth:`PartitionRows.score_table`), sums per distinct score merged by key. The bins (or PAV
  groups) depend only on the weight below each distinct score, so they are the single-machine ones.
  The table has one row per distinct score, capped by ``dask.config`` ``gpucal.max-distinct-keys``
  (``gpucal.metrics._inputs`` explains the choice).
* Platt, beta and temperature scaling fit every input through ``gpucal.calibrators._score_rows``
  (``ScoreRows``, over :mod:`gpucal.rows`). :class:`DaskLogisticRows` is left for MBCT's initial Platt
  fit (``gpucal.mbct.fit``) until it reads ``ScoreRows`` too.

Every fit begins with a summary pass (rows, weight, classes, score range) that runs the checks of the
one-machine fit on the whole data.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal._frames import split_input
from gpucal._validation import check_consistent_length, check_labels, check_same_index
from gpucal.calibrators._logistic import (
    FEATURES_COLUMNS,
    LogisticFit,
    check_class_weights,
    logistic_sums,
    n_features,
    newton_minimize,
    newton_start,
)
from gpucal.rows._checks import check_partition_weight
from gpucal.rows._collections import Partitions, partitions
from gpucal.rows._reduce import (
    KeyedTable,
    check_table_size,
    group_sorted,
    max_distinct_keys,
    merge_tables,
    reduce_partitions,
    sum_partitions,
)

# Columns of the summary pass.
_COUNT, _W, _WY, _N_POS, _N_NEG, _MIN, _MAX = range(7)


def _read(X: Any, y: Any, w: Any, score_col: Any, score_kind: str) -> tuple[Any, Any, Any]:
    """One partition's checked ``(score, labels, weights)``: the checks of ``Calibrator._fit_input``."""
    score = split_input(
        X, score_col=score_col, feature_cols=[], score_kind=score_kind, allow_empty=True, name="X"
    ).score
    check_same_index(X=X, y=y, sample_weight=w)
    labels = check_labels(y, "y")
    n = check_consistent_length(X=score, y=labels)
    xp = array_namespace(score)
    weights = xp.ones(n, dtype=xp.float64) if w is None else check_partition_weight(w, n, xp)
    return score, labels, weights


def _apply(X: Any, y: Any, w: Any, fn: Any, score_col: Any, score_kind: str, *args: Any) -> Any:
    return fn(*_read(X, y, w, score_col, score_kind), *args)


def score_summary(score: Any, y: Any, w: Any) -> np.ndarray:
    xp = array_namespace(score)
    n = int(score.shape[0])
    weighted = w > 0
    return np.array(
        [
            n,
            float(w.sum()),
            float(w @ y),
            float(xp.count_nonzero(weighted & (y > 0))),
            float(xp.count_nonzero(weighted & (y < 1))),
            float(xp.min(score)) if n else math.inf,
            float(xp.max(score)) if n else -math.inf,
        ]
    )


def combine_score_summaries(*summaries: np.ndarray) -> np.ndarray:
    stacked = np.stack(summaries)
    out = stacked.sum(axis=0)
    out[_MIN] = stacked[:, _MIN].min()
    out[_MAX] = stacked[:, _MAX].max()
    return out


def _score_table(score: Any, y: Any, w: Any, probability: bool, score_kind: str, limit: int) -> KeyedTable:
    """Sums ``w, w*y, w*x`` per distinct ``x`` over the rows of positive weight (``BIN_*`` columns).

    ``x`` is the score, or with ``probability=True`` the score as a probability (the logistic function
    of a margin), the axis histogram binning cuts.
    """
    from gpucal.calibrators.histogram import as_probability

    xp = array_namespace(score)
    x = as_probability(score, score_kind) if probability else score
    keep = w > 0
    x, y, w = x[keep], y[keep], w[keep]
    keys, stats = group_sorted((x,), xp.stack([w, w * y, w * x], axis=1), xp)
    check_table_size(int(stats.shape[0]), limit, "distinct-score table")
    return KeyedTable(tuple(to_numpy(k) for k in keys), to_numpy(stats))


def _logistic_vector(score: Any, y: Any, w: Any, theta: np.ndarray, options: dict[str, Any]) -> np.ndarray:
    """``[loss, gradient, Hessian (flattened)]`` sums of one partition at ``theta``."""
    loss, grad, hess = logistic_sums(score, y, w, theta, **options)
    return np.concatenate([[loss], grad, hess.ravel()])


@dataclass
class PartitionRows:
    """The rows of a distributed fit: scores (``X`` or ``X[score_col]``), labels and weights.

    Attributes
    ----------
    parts : Partitions
        The aligned partitions of ``X``, ``y`` and ``sample_weight``.
    score_col, score_kind
        How a partition's score is read (the calibrator's parameters).
    summary : numpy.ndarray
        Rows, ``sum w``, ``sum w*y``, weighted positive and negative rows, smallest and largest score.
    """

    parts: Partitions
    score_col: Any
    score_kind: str
    summary: np.ndarray = field(default_factory=lambda: np.zeros(7))

    @classmethod
    def of(cls, estimator: Any, X: Any, y: Any, sample_weight: Any) -> PartitionRows:
        """Align the inputs and run the summary pass with the whole-data checks of a fit."""
        if y is None:
            msg = f"y: {type(estimator).__name__} needs labels to fit"
            raise ValueError(msg)
        parts = partitions({"X": X, "y": y, "sample_weight": sample_weight})
        rows = cls(
            parts, getattr(estimator, "score_col", "score"), getattr(estimator, "score_kind", "probability")
        )
        summary = reduce_partitions(
            parts, _apply, combine_score_summaries, args=(score_summary, rows.score_col, rows.score_kind)
        )
        if summary[_COUNT] == 0:
            msg = "X: no rows"
            raise ValueError(msg)
        if summary[_W] <= 0:
            msg = "sample_weight: all weights are zero"
            raise ValueError(msg)
        rows.summary = summary
        return rows

    def sum(self, fn: Any, *args: Any) -> np.ndarray:
        """Return the sum over partitions of ``fn(score, y, w, *args)`` (a fixed-shape array)."""
        return sum_partitions(self.parts, _apply, args=(fn, self.score_col, self.score_kind, *args))

    def score_table(self, *, probability: bool) -> KeyedTable:
        """Return sums ``w, w*y, w*x`` per distinct score ``x`` of positive weight, merged by key."""
        limit = max_distinct_keys()
        combine = functools.partial(merge_tables, limit=limit, what="distinct-score table")
        return reduce_partitions(
            self.parts,
            _apply,
            combine,
            args=(_score_table, self.score_col, self.score_kind, probability, self.score_kind, limit),
        )


@dataclass(frozen=True)
class DaskLogisticRows:
    """``gpucal.calibrators._logistic.LogisticRows`` over partitions: Newton steps of summed passes."""

    rows: PartitionRows

    def check_two_classes(self) -> None:
        check_class_weights(self.rows.summary[_N_POS] > 0, self.rows.summary[_N_NEG] > 0)

    def label_sums(self) -> tuple[float, float]:
        return float(self.rows.summary[_W]), float(self.rows.summary[_WY])

    def score_range(self) -> tuple[float, float]:
        return float(self.rows.summary[_MIN]), float(self.rows.summary[_MAX])

    def fit(
        self,
        *,
        mode: int = FEATURES_COLUMNS,
        cols: Any = None,
        fit_intercept: bool = True,
        targets: tuple[float, float] = (0.0, 1.0),
        l2: float = 0.0,
        theta0: Any = None,
        bounds: tuple[float, float] | None = None,
        what: str = "logistic fit",
    ) -> LogisticFit:
        """``gpucal.calibrators._logistic.fit_logistic`` with each Newton pass a sum over partitions."""
        width = n_features(np.empty((0, 1)), mode)
        d = width if cols is None else len(cols)
        total_weight, label_sum = self.label_sums()
        start, ridge = newton_start(
            d, total_weight, label_sum, fit_intercept=fit_intercept, targets=targets, l2=l2, theta0=theta0
        )
        options = {"mode": mode, "cols": cols, "fit_intercept": fit_intercept, "targets": targets}
        m = start.shape[0]

        def sums(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
            vector = self.rows.sum(_logistic_vector, np.asarray(theta, dtype=np.float64), options)
            return float(vector[0]), vector[1 : 1 + m], vector[1 + m :].reshape(m, m)

        result = newton_minimize(sums, start, total_weight=total_weight, l2=ridge, bounds=bounds, what=what)
        intercept = float(result.theta[-1]) if fit_intercept else 0.0
        return LogisticFit(result.theta[:d].copy(), intercept, result.n_iter, result.converged)
