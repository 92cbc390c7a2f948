"""MBCT's split scorer (``choose_splits``) against a plain numpy oracle written from its definition.

A node's candidate split on feature ``j`` has one child per code with rows, every code lighter than
``min_child`` (and the feature's rare code) pooled into one rest child; each child gets the map fitted to
its sums, and the split's loss is the sum of the children's losses (Huang et al. 2022, Sec. 4.1 for the
scale map; a Newton step on the log-loss, Chen & Guestrin 2016, Eq. 5-7, for the shift map).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpucal.kernels import STAT_COUNT, STAT_W, STAT_WF, STAT_WFF, STAT_WFY, STAT_WY, STAT_WYY
from gpucal.trees.splits import MAX_SHIFT, choose_splits


def child_map(s: np.ndarray, parent: tuple[float, float], scale: bool, lam: float) -> tuple[float, float]:
    """The child's map: k = (sum wy + lam k_p) / (sum wf + lam), or d = d_p - (G + H d_p) / (H + lam)."""
    k_p, d_p = parent
    if scale:
        den = s[STAT_WF] + lam
        return (k_p, d_p) if den <= 0 else ((s[STAT_WY] + lam * k_p) / den, d_p)
    g, h = s[STAT_WF] - s[STAT_WY], max(s[STAT_WF] - s[STAT_WFF], 0.0)
    if h + lam <= 0:
        return k_p, d_p
    return k_p, float(np.clip(d_p - (g + h * d_p) / (h + lam), -MAX_SHIFT, MAX_SHIFT))


def loss(s: np.ndarray, k: float, d: float, scale: bool) -> float:
    """Squared error sum w (k f - y)^2 for scale; G d + H d^2 / 2 for shift."""
    if scale:
        return k * k * s[STAT_WFF] - 2 * k * s[STAT_WFY] + s[STAT_WYY]
    g, h = s[STAT_WF] - s[STAT_WY], max(s[STAT_WF] - s[STAT_WFF], 0.0)
    return g * d + 0.5 * h * d * d


def choose_splits_oracle(hist, offsets, n_values, rare_codes, parent, scale, lam, min_child):
    n_slots, n_features = hist.shape[0], len(n_values)
    split_loss = np.full((n_slots, n_features), np.inf)
    own_loss = np.zeros(n_slots)
    for s in range(n_slots):
        node_parent = (parent[s, 0], parent[s, 1])
        own_loss[s] = loss(hist[s, : n_values[0]].sum(axis=0), *node_parent, scale)
        for j in range(n_features):
            rows = hist[s, offsets[j] : offsets[j] + n_values[j]]
            present = [v for v in range(n_values[j]) if rows[v, STAT_COUNT] > 0]
            pooled = [v for v in present if v == rare_codes[j] or rows[v, STAT_W] < min_child]
            children = [rows[v] for v in present if v not in pooled]
            if pooled:
                children.append(rows[pooled].sum(axis=0))
            if len(children) >= 2:
                split_loss[s, j] = sum(
                    loss(c, *child_map(c, node_parent, scale, lam), scale) for c in children
                )
    return split_loss, own_loss


def histogram(rng: np.random.Generator, n_slots: int, n_values: np.ndarray) -> np.ndarray:
    """Group sums of random rows (f, y, w) per node and code, some codes empty, some light."""
    hist = np.zeros((n_slots, int(n_values.sum()), 7))
    for s in range(n_slots):
        n = rng.integers(0, 40)  # the node's rows; each feature cuts them its own way
        f = rng.uniform(0.02, 0.98, n)
        y = (rng.uniform(size=n) < f).astype(float)
        w = rng.uniform(0.1, 3.0, n)
        for j, k in enumerate(n_values):
            offset = int(n_values[:j].sum())
            for v, fi, yi, wi in zip(rng.integers(0, k, n), f, y, w, strict=True):
                hist[s, offset + v] += (1, wi, wi * fi, wi * yi, wi * fi * fi, wi * fi * yi, wi * yi * yi)
    return hist


@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize(("penalty", "min_child"), [(0.0, 0.0), (2.0, 4.0)])
def test_choose_splits_matches_the_oracle(scale: bool, penalty: float, min_child: float) -> None:
    rng = np.random.default_rng(7)
    n_values = np.array([5, 3, 9, 2], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(n_values)[:-1]]).astype(np.int64)
    rare_codes = np.array([4, -1, 0, -1], dtype=np.int64)
    n_slots = 12
    hist = histogram(rng, n_slots, n_values)
    parent = np.column_stack([rng.uniform(0.5, 1.5, n_slots), rng.uniform(-1, 1, n_slots)])
    args = (hist, offsets, n_values, rare_codes, parent, scale, penalty, min_child)
    got_split, got_own = choose_splits(*args)
    want_split, want_own = choose_splits_oracle(*args)
    np.testing.assert_array_equal(np.isinf(got_split), np.isinf(want_split))
    assert np.isfinite(want_split).sum() > n_slots  # the case is not trivial: real candidates
    assert np.isinf(want_split).any()  # and some features with fewer than two children
    np.testing.assert_allclose(got_split, want_split, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_own, want_own, rtol=1e-12, atol=1e-12)
