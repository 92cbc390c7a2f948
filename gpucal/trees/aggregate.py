"""Merge rows that share every code and the score into one weighted row (Huang et al. 2022, App. A.2).

Rows with equal codes fall in the same node of every tree and, with equal scores, get equal predictions,
so one row of weight :math:`W = \\sum w` and soft label :math:`\\sum w y / W` stands for them exactly:
every sum MBCT fits from (:math:`\\sum w`, :math:`\\sum w f`, :math:`\\sum w y`, :math:`\\sum w f y`, ...)
is unchanged, except :math:`\\sum w y^2`, whose change is the same for every candidate split and so never
changes a decision. The paper merges on the codes alone and averages the score, which changes the fit;
here the score is part of the key, so merging is lossless. (MVCE views are drawn over the merged rows.)
"""

from __future__ import annotations

import numpy as np

# Merging pays off only when it at least halves the rows: the merged arrays are copies.
MIN_SHRINK = 2.0
# Rows hashed to estimate the number of distinct rows before paying for a sort of all of them.
SAMPLE_ROWS = 1 << 16
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MIX = np.uint64(0xBF58476D1CE4E5B9)


def aggregate_rows(
    codes: np.ndarray, score: np.ndarray, y: np.ndarray, w: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Return ``(codes, score, y, w)`` of the merged rows, or None when merging would not halve them.

    Rows are keyed by a 64-bit hash of their codes and score; a hash collision (two different rows with
    one key) is detected and merging is skipped, so the result is always exact.
    """
    n = codes.shape[0]
    if n > SAMPLE_ROWS and estimated_distinct(codes, score) * MIN_SHRINK > n:
        return None
    key = _row_hash(codes, score)
    uniques, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    if uniques.shape[0] * MIN_SHRINK > n:
        return None
    rep = first[inverse]
    if not (np.array_equal(codes[rep], codes) and np.array_equal(score[rep], score)):
        return None
    weight = np.ones(n) if w is None else w
    merged_w = np.bincount(inverse, weights=weight)
    merged_wy = np.bincount(inverse, weights=weight * y)
    keep = merged_w > 0
    merged_y = np.divide(merged_wy, merged_w, out=np.zeros_like(merged_w), where=keep)
    return codes[first][keep], score[first][keep], np.clip(merged_y, 0.0, 1.0)[keep], merged_w[keep]


def estimated_distinct(codes: np.ndarray, score: np.ndarray) -> float:
    """Estimate the number of distinct rows from the repeated pairs among ``SAMPLE_ROWS`` evenly spaced rows.

    With ``U`` distinct rows equally frequent, a sample of ``m`` holds ``m (m - 1) / (2 U)`` repeated
    pairs on average, so ``U ~ m (m - 1) / (2 pairs)`` (infinite when no pair repeats). Unequal
    frequencies give more pairs, so the estimate errs toward merging, which is then checked exactly.
    """
    step = codes.shape[0] // SAMPLE_ROWS
    sample = slice(0, step * SAMPLE_ROWS, step)
    _, counts = np.unique(_row_hash(codes[sample], score[sample]), return_counts=True)
    pairs = float((counts * (counts - 1) // 2).sum())
    m = float(SAMPLE_ROWS)
    return np.inf if pairs == 0 else m * (m - 1) / (2.0 * pairs)


def _row_hash(codes: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Hash each row's codes and score bits to uint64 (a multiply-xorshift chain)."""
    h = np.ascontiguousarray(score, dtype=np.float64).view(np.uint64).copy()
    with np.errstate(over="ignore"):
        for j in range(codes.shape[1]):
            h ^= codes[:, j].astype(np.uint64) + GOLDEN
            h *= MIX
            h ^= h >> np.uint64(31)
    return h
