"""The rows of a one-dimensional scaling fit over :class:`gpucal.rows.Rows`: one Newton fit for every backend.

:class:`ScoreRows` is what Platt, beta and temperature scaling read, written once over blocks of rows
(arrays on one device are one block, :meth:`ScoreRows.of_arrays`): each block is checked alone and holds
the score, the labels and the weights (:func:`read_scores`); a summary pass (:func:`score_summary`,
added over blocks) gives the whole-data checks, the label sums and the score range; and
:meth:`ScoreRows.fit` is :func:`~gpucal.calibrators.logistic.fit_logistic_rows`, every Newton pass a
:meth:`~gpucal.rows.Rows.sum` of the blocks' ``(loss, gradient, Hessian)``. On one machine (one block)
every sum is the one ``fit_logistic`` computes, so the fit is the same number for number; over dask
partitions only the order of the additions differs.

Histogram binning (equal mass) and isotonic regression read the rows in score order. Their fit is a
function of the distinct-score table (:func:`score_groups`: sums ``w, w*y, w*x`` per distinct score of
positive weight, the blocks' tables merged by key); on one machine, where the rows are one block
(:meth:`~gpucal.rows.Rows.single_block`), they walk the sorted rows instead, which groups the same
scores and adds the same rows (``gpucal.calibrators.pav``, ``gpucal.calibrators.bins``).
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal._frames import parse_input
from gpucal._validation import check_sample_weight
from gpucal.calibrators._sorted import distinct_counts
from gpucal.calibrators.bins import BIN_W, BIN_WY, unit_weights
from gpucal.calibrators.logistic import (
    CHUNK_ROWS,
    LogisticFit,
    ScoreBlock,
    check_class_weights,
    fit_logistic_rows,
    use_numba,
)
from gpucal.kernels import readonly
from gpucal.kernels.jit import numba, parallel_rows
from gpucal.rows import LocalRows, RowBlock, Rows
from gpucal.rows.checks import check_labels_and_weights
from gpucal.rows.reduce import KeyedTable, check_table_size, group_sorted, max_distinct_keys, merge_tables

# Columns of :func:`score_summary`.
COUNT, WEIGHT, LABEL_WEIGHT, N_POSITIVE, N_NEGATIVE, LOWEST, HIGHEST, N_REFUSED = range(8)
N_SUMMARY = 8


def read_scores(block: RowBlock, score_col: Any, score_kind: str, scan: bool = True) -> ScoreBlock:
    """Check one block of ``X``, ``y``, ``sample_weight`` as ``Calibrator._fit_input`` checks whole
    inputs, except that the block may be empty or weigh nothing (the whole data is checked on the
    summary). ``scan=False`` leaves the values of the score and the labels to the fit's first compiled
    pass (``scan`` of ``gpucal._validation``; :func:`rescan_scores` words the error)."""
    X, y, sample_weight = block["X"], block["y"], block["sample_weight"]
    score = parse_input(
        X, score_col=score_col, feature_cols=[], score_kind=score_kind, allow_empty=True, name="X", scan=scan
    ).score
    xp = array_namespace(score)
    labels, w, n = check_labels_and_weights(X, y, sample_weight, score, whole=False, xp=xp, scan=scan)
    if w is None:
        w = check_sample_weight(None, n, xp=xp)  # a read-only view of ones: no n-sized array
    return ScoreBlock(score, labels, w)


@parallel_rows("score")
def _score_summary_cpu(score, y, w, probability):  # pragma: no cover - compiled
    """The counts, the score range and the refused rows of :func:`score_summary` for a 1-D float64 host
    block in one pass (fixed chunks, fixed order); the caller adds the two weight sums. A row is refused
    when its label is not in [0, 1] or its score is not in [0, 1] (``probability``) or not finite.
    Tested against the array path."""
    n = score.shape[0]
    n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    partial = np.zeros((n_chunks, N_SUMMARY))
    for c in numba.prange(n_chunks):
        pos = neg = 0.0
        low = np.inf
        high = -np.inf
        refused = 0
        for i in range(c * CHUNK_ROWS, min(n, (c + 1) * CHUNK_ROWS)):
            yi = y[i]
            x = score[i]
            if w[i] > 0.0:
                pos += yi > 0.0
                neg += yi < 1.0
            low = min(low, x)
            high = max(high, x)
            score_ok = ((x >= 0.0) & (x <= 1.0)) if probability else (abs(x) < np.inf)
            refused += not (score_ok & (yi >= 0.0) & (yi <= 1.0))
        partial[c, N_POSITIVE] = pos
        partial[c, N_NEGATIVE] = neg
        partial[c, LOWEST] = low
        partial[c, HIGHEST] = high
        partial[c, N_REFUSED] = refused
    out = np.zeros(N_SUMMARY)
    out[COUNT] = n
    out[LOWEST] = np.inf
    out[HIGHEST] = -np.inf
    for c in range(n_chunks):
        for j in (N_POSITIVE, N_NEGATIVE, N_REFUSED):
            out[j] += partial[c, j]
        out[LOWEST] = min(out[LOWEST], partial[c, LOWEST])
        out[HIGHEST] = max(out[HIGHEST], partial[c, HIGHEST])
    return out


def score_summary(block: ScoreBlock, scan_kind: str | None = None) -> np.ndarray:
    """``[rows, sum w, sum w y, #weighted positives, #weighted negatives, min score, max score, #refused]``.

    ``#refused`` counts, for a block read unscanned (``scan=False`` in ``gpucal._validation``), the rows
    the scan of a ``scan_kind`` score (``"probability"`` or ``"logit"``) and of the labels refuses; it is
    0 when ``scan_kind`` is None (the values were checked). One compiled pass for a large 1-D float64
    block on the host; array code otherwise.
    """
    xp = array_namespace(block.score)
    n = len(block)
    probability = scan_kind == "probability"
    if block.score.ndim == 1 and use_numba("auto", block.score, block.y, block.w):
        out = _score_summary_cpu(
            readonly(np.ascontiguousarray(block.score, dtype=np.float64)),
            readonly(np.ascontiguousarray(block.y, dtype=np.float64)),
            readonly(np.asarray(block.w, dtype=np.float64)),
            probability,
        )
        # The weight sums as fit_logistic adds them, so one block fits the same number for number.
        out[WEIGHT] = float(block.w.sum())
        out[LABEL_WEIGHT] = float(block.w @ block.y)
        if scan_kind is None:
            out[N_REFUSED] = 0.0
        return out
    weighted = block.w > 0
    refused = 0
    if scan_kind is not None:
        score_ok = (block.score >= 0) & (block.score <= 1) if probability else xp.isfinite(block.score)
        refused = int(xp.count_nonzero(~(score_ok & (block.y >= 0) & (block.y <= 1))))
    return np.array(
        [
            n,
            float(block.w.sum()),
            float(block.w @ block.y),
            float(xp.count_nonzero(weighted & (block.y > 0))),
            float(xp.count_nonzero(weighted & (block.y < 1))),
            float(xp.min(block.score)) if n else math.inf,
            float(xp.max(block.score)) if n else -math.inf,
            float(refused),
        ]
    )


def count_and_weight(block: ScoreBlock) -> np.ndarray:
    """``[rows, sum w]`` of one block; unit weights (a zero-stride view of ones, what
    ``check_sample_weight`` gives for None) are counted without a pass."""
    n = len(block)
    return np.array([n, float(n) if unit_weights(block.w) else float(block.w.sum())])


def _check_count_and_weight(count: float, weight: float) -> None:
    """The whole-data checks of the rows of a fit: some rows, some weight."""
    if count == 0:
        msg = "X: no rows"
        raise ValueError(msg)
    if not weight > 0:
        msg = "sample_weight: all weights are zero"
        raise ValueError(msg)


def read_score_rows(
    rows: Rows, score_col: Any = "score", score_kind: str = "probability", *, scan: bool = True
) -> Rows:
    """The checked blocks (:class:`ScoreBlock`) of ``X``, ``y``, ``sample_weight``, for fits that need
    no summary (no label sums, no score range): :meth:`ScoreRows.of`'s checks on the row count and
    the total weight only; ``scan`` as in :func:`read_scores`."""
    blocks = rows.map(read_scores, score_col, score_kind, scan)
    count, weight = blocks.sum(count_and_weight)
    _check_count_and_weight(count, weight)
    return blocks


def rescan_scores(rows: Rows, score_col: Any, score_kind: str) -> NoReturn:
    """Raise the error of the scan a fit left to its compiled pass (``scan=False``), which found a score
    or label it refuses: the rows read again with the scan, whose check words the error."""
    read_score_rows(rows, score_col, score_kind)
    msg = (
        "internal error in gpucal: a compiled pass refused a score or label that the checks accept; "
        "please report it"
    )
    raise RuntimeError(msg)


def combine_summaries(*summaries: np.ndarray) -> np.ndarray:
    """Add summaries, keeping the smallest and the largest score."""
    stacked = np.stack(summaries)
    out = stacked.sum(axis=0)
    out[LOWEST] = stacked[:, LOWEST].min()
    out[HIGHEST] = stacked[:, HIGHEST].max()
    return out


def block_score_groups(block: ScoreBlock, limit: int) -> KeyedTable:
    """Sums ``w, w*y, w*x`` per distinct score ``x`` of one block's rows of positive weight (the
    ``BIN_*`` columns of ``gpucal.calibrators.bins``), in increasing score order."""
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


def distinct_score_sums(blocks: Rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each distinct score ``x`` of the rows (:class:`ScoreBlock`), increasing, with ``sum w`` and
    ``sum w*y`` over its rows: :func:`score_groups`, or, for one host block of unit weights and 0/1
    labels, the same sums as counts by two sorts (``distinct_counts``)."""
    whole = blocks.single_block()
    if whole is not None and isinstance(whole.score, np.ndarray):
        counts = distinct_counts(whole.score, whole.y, whole.w)
        if counts is not None:
            return counts
    table = score_groups(blocks)
    return table.keys[0], table.stats[:, BIN_W], table.stats[:, BIN_WY]


def read_distinct_score_sums(
    rows: Rows, score_col: Any = "score", score_kind: str = "probability"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`distinct_score_sums` of the checked blocks of ``X``, ``y``, ``sample_weight``
    (:func:`read_score_rows`): the input of the fits over sorted distinct scores (BBQ, ENIR, centred
    isotonic)."""
    return distinct_score_sums(read_score_rows(rows, score_col, score_kind))


@dataclass(frozen=True)
class ScoreRows:
    """The rows of a scaling fit: :class:`~gpucal.rows.Rows` of :class:`ScoreBlock` and their summary
    (:func:`score_summary` added over the blocks; see the module docstring)."""

    rows: Rows
    summary: np.ndarray

    @classmethod
    def of(cls, rows: Rows, score_col: Any = "score", score_kind: str = "probability") -> ScoreRows:
        """Read the blocks of ``X``, ``y``, ``sample_weight`` and check the whole data on the summary:
        the summary pass also scans the scores and the labels (read with ``scan=False``)."""
        blocks = rows.map(read_scores, score_col, score_kind, False)
        summary = blocks.reduce(score_summary, combine_summaries, score_kind)
        if summary[N_REFUSED] > 0:
            rescan_scores(rows, score_col, score_kind)
        _check_count_and_weight(summary[COUNT], summary[WEIGHT])
        return cls(blocks, summary)

    @classmethod
    def of_arrays(cls, score: Any, y: Any, w: Any) -> ScoreRows:
        """The scaling rows of validated float64 arrays on one device: one block."""
        return cls.of_blocks(LocalRows((ScoreBlock(score, y, w),)))

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
        """:func:`~gpucal.calibrators.logistic.fit_logistic_rows` of these rows and their sums (the
        keyword options of ``fit_logistic_rows``)."""
        return fit_logistic_rows(
            self.rows,
            n_rows=int(self.summary[COUNT]),
            n_columns=1,
            total_weight=float(self.summary[WEIGHT]),
            label_sum=float(self.summary[LABEL_WEIGHT]),
            score_range=self.score_range(),
            **options,
        )


__all__ = [
    "ScoreBlock",
    "ScoreRows",
    "block_score_groups",
    "combine_summaries",
    "count_and_weight",
    "read_distinct_score_sums",
    "read_score_rows",
    "read_scores",
    "rescan_scores",
    "score_groups",
    "score_summary",
]
