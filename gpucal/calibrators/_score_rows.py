"""The rows of a one-dimensional scaling fit over :class:`gpucal.rows.Rows`: one Newton fit for every backend.

:class:`ScoreRows` is the :class:`~gpucal.calibrators._logistic.LogisticRows` of Platt, beta and
temperature scaling written once over blocks of rows: each block is checked alone and holds the score,
the labels and the weights (:func:`read_scores`); a summary pass (:func:`score_summary`, added over
blocks) gives the whole-data checks, the label sums and the score range; and :meth:`ScoreRows.fit` is
:func:`~gpucal.calibrators._logistic.fit_logistic` with every Newton pass a :meth:`~gpucal.rows.Rows.sum`
of the blocks' ``(loss, gradient, Hessian)``:

* the log features are computed once per block when the compiled loop runs (as ``fit_logistic`` does);
* on at least ``WARM_START_MIN_ROWS`` rows, Newton starts from the fit on the rows whose *global* index
  is a multiple of ``n_rows // WARM_START_ROWS`` (the same subsample on one machine and over any
  partitioning);
* the full Newton then runs on all rows.

On one machine (one block) every sum is the one ``fit_logistic`` computes, so the fit is the same
number for number; over dask partitions only the order of the additions differs.

Histogram binning (equal mass) and isotonic regression read the rows in score order. Their fit is a
function of the distinct-score table (:func:`score_groups`: sums ``w, w*y, w*x`` per distinct score of
positive weight, the blocks' tables merged by key); on one machine, where the rows are one block
(:func:`whole_block`), they walk the sorted rows instead, which groups the same scores and adds the same
rows (``gpucal.calibrators._pav``, ``gpucal.calibrators._bins``).
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal._frames import split_input
from gpucal._validation import check_consistent_length, check_labels, check_same_index, check_sample_weight
from gpucal.calibrators._logistic import (
    FEATURES_COLUMNS,
    WARM_START_MIN_ROWS,
    WARM_START_ROWS,
    LogisticFit,
    check_class_weights,
    features_cpu,
    logistic_sums,
    n_features,
    newton_fit,
    newton_start,
    use_numba,
)
from gpucal.rows import LocalRows, RowBlock, Rows
from gpucal.rows._checks import check_partition_weight
from gpucal.rows._reduce import KeyedTable, check_table_size, group_sorted, max_distinct_keys, merge_tables

# Columns of :func:`score_summary`.
COUNT, WEIGHT, LABEL_WEIGHT, N_POSITIVE, N_NEGATIVE, LOWEST, HIGHEST = range(7)


@dataclass(frozen=True)
class ScoreBlock:
    """One block's checked score (or design matrix), labels and weights (float64, one device), and
    the feature mode its score is read with."""

    score: Any
    y: Any
    w: Any
    mode: int = FEATURES_COLUMNS

    def __len__(self) -> int:
        return int(self.score.shape[0])


def read_scores(block: RowBlock, score_col: Any, score_kind: str) -> ScoreBlock:
    """Check one block of ``X``, ``y``, ``sample_weight`` as ``Calibrator._fit_input`` checks whole
    inputs, except that the block may be empty or weigh nothing (the whole data is checked on the
    summary)."""
    X, y, sample_weight = block["X"], block["y"], block["sample_weight"]
    score = split_input(
        X, score_col=score_col, feature_cols=[], score_kind=score_kind, allow_empty=True, name="X"
    ).score
    check_same_index(X=X, y=y, sample_weight=sample_weight)
    labels = check_labels(y, "y")
    n = check_consistent_length(X=score, y=labels)
    xp = array_namespace(score)
    if sample_weight is None:
        w = check_sample_weight(None, n, xp=xp)  # a read-only view of ones: no n-sized array
    else:
        w = check_partition_weight(sample_weight, n, xp)
    return ScoreBlock(score, labels, w)


def score_summary(block: ScoreBlock) -> np.ndarray:
    """``[rows, sum w, sum w y, #weighted positives, #weighted negatives, min score, max score]``."""
    xp = array_namespace(block.score)
    n = len(block)
    weighted = block.w > 0
    return np.array(
        [
            n,
            float(block.w.sum()),
            float(block.w @ block.y),
            float(xp.count_nonzero(weighted & (block.y > 0))),
            float(xp.count_nonzero(weighted & (block.y < 1))),
            float(xp.min(block.score)) if n else math.inf,
            float(xp.max(block.score)) if n else -math.inf,
        ]
    )


def combine_summaries(*summaries: np.ndarray) -> np.ndarray:
    """Add summaries, keeping the smallest and the largest score."""
    stacked = np.stack(summaries)
    out = stacked.sum(axis=0)
    out[LOWEST] = stacked[:, LOWEST].min()
    out[HIGHEST] = stacked[:, HIGHEST].max()
    return out


def with_features(block: ScoreBlock, mode: int, backend: str) -> ScoreBlock:
    """The block with its log features computed once when the compiled loop will read it."""
    X = block.score[:, None] if block.score.ndim == 1 else block.score
    if mode != FEATURES_COLUMNS and use_numba(backend, X, block.y, block.w):
        return ScoreBlock(features_cpu(X, mode), block.y, block.w, FEATURES_COLUMNS)
    return ScoreBlock(X, block.y, block.w, mode)


def strided(block: ScoreBlock, stride: int, *, row_offset: int) -> ScoreBlock:
    """The block's rows whose global index is a multiple of ``stride`` (contiguous copies)."""
    xp = array_namespace(block.score)
    first = (-row_offset) % stride
    score, y, w = (xp.ascontiguousarray(a[first::stride]) for a in (block.score, block.y, block.w))
    return ScoreBlock(score, y, w, block.mode)


def weight_sum(block: ScoreBlock) -> np.ndarray:
    return np.array([float(array_namespace(block.w).sum(block.w))])


def logistic_vector(
    block: ScoreBlock, theta: np.ndarray, backend: str, options: dict[str, Any]
) -> np.ndarray:
    """``[loss, gradient, Hessian (flattened)]`` sums of one block at ``theta``."""
    loss, grad, hess = logistic_sums(
        block.score, block.y, block.w, theta, mode=block.mode, backend=backend, **options
    )
    return np.concatenate([[loss], grad, np.asarray(hess).ravel()])


def whole_block(rows: Rows) -> ScoreBlock | None:
    """The one block that holds every row when the rows are in this process (one machine), else None."""
    if isinstance(rows, LocalRows) and rows.n_blocks == 1:
        block: ScoreBlock = rows.blocks[0]
        return block
    return None


def block_score_groups(block: ScoreBlock, limit: int) -> KeyedTable:
    """Sums ``w, w*y, w*x`` per distinct score ``x`` of one block's rows of positive weight (the
    ``BIN_*`` columns of ``gpucal.calibrators._bins``), in increasing score order."""
    xp = array_namespace(block.score)
    keep = block.w > 0
    x, y, w = block.score[keep], block.y[keep], block.w[keep]
    keys, stats = group_sorted((x,), xp.stack([w, w * y, w * x], axis=1), xp)
    check_table_size(int(stats.shape[0]), limit, "distinct-score table")
    return KeyedTable(tuple(to_numpy(k) for k in keys), to_numpy(stats))


def score_groups(rows: Rows) -> KeyedTable:
    """The distinct-score table of all the rows (:class:`ScoreBlock`): the blocks' tables merged by key.

    Its size is the number of distinct scores, capped by ``dask.config`` ``gpucal.max-distinct-keys`` when
    it is merged from several blocks (one block is already in memory: no cap).
    """
    limit = sys.maxsize if rows.n_blocks == 1 else max_distinct_keys()
    combine = functools.partial(merge_tables, limit=limit, what="distinct-score table")
    table: KeyedTable = rows.reduce(block_score_groups, combine, limit)
    return table


def _newton_sums(rows: Rows, backend: str, options: dict[str, Any], m: int) -> Any:
    def sums(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        vector = rows.sum(logistic_vector, np.asarray(theta, dtype=np.float64), backend, options)
        return float(vector[0]), vector[1 : 1 + m], vector[1 + m :].reshape(m, m)

    return sums


@dataclass(frozen=True)
class ScoreRows:
    """:class:`~gpucal.calibrators._logistic.LogisticRows` over :class:`~gpucal.rows.Rows` of
    :class:`ScoreBlock` (see the module docstring)."""

    rows: Rows
    summary: np.ndarray

    @classmethod
    def of(cls, rows: Rows, score_col: Any = "score", score_kind: str = "probability") -> ScoreRows:
        """Read the blocks of ``X``, ``y``, ``sample_weight`` and check the whole data on the summary."""
        blocks = rows.map(read_scores, score_col, score_kind)
        summary = blocks.reduce(score_summary, combine_summaries)
        if summary[COUNT] == 0:
            msg = "X: no rows"
            raise ValueError(msg)
        if not summary[WEIGHT] > 0:
            msg = "sample_weight: all weights are zero"
            raise ValueError(msg)
        return cls(blocks, summary)

    @classmethod
    def of_blocks(cls, blocks: Rows) -> ScoreRows:
        """The scaling rows of blocks that already are :class:`ScoreBlock` (checked by the caller)."""
        return cls(blocks, blocks.reduce(score_summary, combine_summaries))

    def check_two_classes(self) -> None:
        check_class_weights(self.summary[N_POSITIVE] > 0, self.summary[N_NEGATIVE] > 0)

    def label_sums(self) -> tuple[float, float]:
        return float(self.summary[WEIGHT]), float(self.summary[LABEL_WEIGHT])

    def score_range(self) -> tuple[float, float]:
        return float(self.summary[LOWEST]), float(self.summary[HIGHEST])

    def fit(self, **options: Any) -> LogisticFit:
        """:func:`~gpucal.calibrators._logistic.fit_logistic` with every Newton pass a sum over blocks
        (the keyword options of ``fit_logistic``)."""
        return self._fit_logistic(**options)

    def _fit_logistic(
        self,
        *,
        mode: int = FEATURES_COLUMNS,
        cols: Any = None,
        fit_intercept: bool = True,
        targets: tuple[float, float] = (0.0, 1.0),
        l2: float = 0.0,
        theta0: Any = None,
        bounds: tuple[float, float] | None = None,
        backend: str = "auto",
        what: str = "logistic fit",
    ) -> LogisticFit:
        width = n_features(np.empty((0, 1)), mode)
        d = width if cols is None else len(cols)
        total_weight, label_sum = self.label_sums()
        if theta0 is not None or not fit_intercept:
            label_sum = 0.0
        start, ridge = newton_start(
            d, total_weight, label_sum, fit_intercept=fit_intercept, targets=targets, l2=l2, theta0=theta0
        )
        options = {"cols": cols, "fit_intercept": fit_intercept, "targets": targets}
        m = start.shape[0]
        design = self.rows.map(with_features, mode, backend)
        n_rows = int(self.summary[COUNT])
        warm = None
        if n_rows >= WARM_START_MIN_ROWS:
            sub = design.map(strided, n_rows // WARM_START_ROWS, offsets=True)
            warm = (_newton_sums(sub, backend, options, m), float(sub.sum(weight_sum)[0]))
        full = (_newton_sums(design, backend, options, m), total_weight)
        return newton_fit(full, warm, start, ridge, d, fit_intercept=fit_intercept, bounds=bounds, what=what)


__all__ = [
    "ScoreBlock",
    "ScoreRows",
    "block_score_groups",
    "combine_summaries",
    "read_scores",
    "score_groups",
    "score_summary",
    "whole_block",
]
