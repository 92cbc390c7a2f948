"""gpucal.metrics against independent, loop-over-bins numpy spellings of the paper definitions.

The reference functions below share no code with the module: bins are found by sklearn's searchsorted
rule or by a loop over distinct probabilities, and every sum is a loop over bins or values.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from gpucal import metrics
from gpucal.metrics.binning import mass_bin_ids, uniform_bin_ids

RTOL = 1e-10


# ---------------------------------------------------------------- independent references
def ref_uniform_bins(p: np.ndarray, n_bins: int) -> np.ndarray:
    return np.searchsorted(np.linspace(0.0, 1.0, n_bins + 1)[1:-1], p, side="left")


def ref_mass_bins(p: np.ndarray, w: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin of each row: floor(n_bins * (weight strictly below its probability) / total), ties together."""
    total = w.sum()
    out = np.empty(p.shape[0], dtype=np.int64)
    for value in np.unique(p):
        rows = p == value
        below = w[p < value].sum()
        out[rows] = min(n_bins - 1, math.floor(n_bins * below / total))
    return out


def ref_bin_table(y, p, w, bins, n_bins):  # type: ignore[no-untyped-def]
    """List of (weight, mean y, mean p) of the non-empty bins, by a loop over bins."""
    table = []
    for b in range(n_bins):
        rows = bins == b
        wb = w[rows].sum()
        if wb > 0:
            table.append((wb, (w[rows] * y[rows]).sum() / wb, (w[rows] * p[rows]).sum() / wb))
    return table


def ref_ece(y, p, w, n_bins, strategy, norm, weighting):  # type: ignore[no-untyped-def]
    bins = ref_uniform_bins(p, n_bins) if strategy == "uniform" else ref_mass_bins(p, w, n_bins)
    table = ref_bin_table(y, p, w, bins, n_bins)
    total = sum(t[0] for t in table)
    if norm == math.inf:
        return max(abs(t[1] - t[2]) for t in table)
    acc = 0.0
    for wb, yb, pb in table:
        share = wb / total if weighting == "mass" else 1.0 / len(table)
        acc += share * abs(yb - pb) ** norm
    return acc ** (1.0 / norm)


def ref_ece_sweep(y, p, w, norm, weighting):  # type: ignore[no-untyped-def]
    best = 1
    for n_bins in range(2, len(p) + 1):
        table = ref_bin_table(y, p, w, ref_mass_bins(p, w, n_bins), n_bins)
        means = [t[1] for t in table]
        if any(b < a for a, b in itertools.pairwise(means)):
            break
        best = n_bins
    return ref_ece(y, p, w, best, "quantile", norm, weighting)


def ref_cal_n_rows(y, p, w, bins, n_bins):  # type: ignore[no-untyped-def]
    errors = []
    for b in range(n_bins):
        rows = bins == b
        if w[rows].sum() == 0:
            continue
        pred, obs = (w[rows] * p[rows]).sum(), (w[rows] * y[rows]).sum()
        if pred == 0 and obs == 0:
            errors.append(0.0)
        elif pred == 0 or obs == 0:
            errors.append(math.inf)
        else:
            pcoc = pred / obs
            errors.append(pcoc - 1 if pcoc >= 1 else 1 / pcoc - 1)
    return math.sqrt(sum(e * e for e in errors) / len(errors))


def ref_field(y, p, w, z, kind, eps=1e-6):  # type: ignore[no-untyped-def]
    total = w.sum()
    acc = 0.0
    for value in pd.unique(z):
        rows = z == value
        excess = abs((w[rows] * (y[rows] - p[rows])).sum())
        if kind == "ece":
            acc += excess
        else:
            acc += w[rows].sum() * excess / (w[rows] * (y[rows] + eps)).sum()
    return acc / total


def ref_gc_n(y, p, w, z, n_bins, strategy):  # type: ignore[no-untyped-def]
    num = den = 0.0
    for value in pd.unique(z):
        rows = z == value
        yz, pz, wz = y[rows], p[rows], w[rows]
        bins = ref_uniform_bins(pz, n_bins) if strategy == "uniform" else ref_mass_bins(pz, wz, n_bins)
        num += wz.sum() * ref_cal_n_rows(yz, pz, wz, bins, n_bins)
        den += wz.sum()
    return num / den


def ref_cece(y, p, w, clusters, norm):  # type: ignore[no-untyped-def]
    codes = pd.factorize(clusters)[0]
    table = ref_bin_table(y, p, w, codes, codes.max() + 1)
    total = sum(t[0] for t in table)
    if norm == math.inf:
        return max(abs(t[1] - t[2]) for t in table)
    return sum(t[0] / total * abs(t[1] - t[2]) ** norm for t in table) ** (1 / norm)


def ref_mvce(y, p, w, n_views, bin_size, norm, seed):  # type: ignore[no-untyped-def]
    from gpucal.kernels import view_bins

    bins = view_bins(len(p), n_views=n_views, bin_size=bin_size, seed=seed)
    per_view = []
    for v in range(n_views):
        gaps = []
        for b in range(int(bins[v].max()) + 1):
            rows = bins[v] == b
            wb = w[rows].sum()
            if wb > 0:
                gaps.append(abs((w[rows] * p[rows]).sum() / wb - (w[rows] * y[rows]).sum() / wb))
        per_view.append(sum(gaps) / len(gaps))
    return (sum(e**norm for e in per_view) / n_views) ** (1 / norm)


def make_data(n: int, seed: int, *, ties: bool = False):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    p = rng.beta(0.5, 0.8, n)
    if ties:
        p = np.round(p, 2)
    z = rng.integers(0, 6, n)
    y = (rng.random(n) < np.clip(p * (0.6 + 0.15 * z), 0, 1)).astype(np.float64)
    w = rng.random(n) * 3
    return y, p, w, z


# ---------------------------------------------------------------- module vs references
@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
@pytest.mark.parametrize("norm", [1.0, 2.0, 3.5, math.inf])
@pytest.mark.parametrize("weighting", ["mass", "equal"])
@pytest.mark.parametrize("ties", [False, True])
def test_ece_matches_reference(strategy: str, norm: float, weighting: str, ties: bool) -> None:
    y, p, w, _ = make_data(800, 10, ties=ties)
    for sw in (None, w):
        got = metrics.ece(y, p, sample_weight=sw, n_bins=12, strategy=strategy, p=norm, weighting=weighting)
        ww = np.ones_like(p) if sw is None else sw
        assert_allclose(got, ref_ece(y, p, ww, 12, strategy, norm, weighting), rtol=RTOL)


def test_mce_ada_ece_prob_ece_are_their_formulas() -> None:
    y, p, w, _ = make_data(900, 11)
    for strategy in ("uniform", "quantile"):
        assert_allclose(
            metrics.mce(y, p, sample_weight=w, n_bins=9, strategy=strategy),
            ref_ece(y, p, w, 9, strategy, math.inf, "mass"),
            rtol=RTOL,
        )
        prob = (
            sum(
                abs((w[b] * (y[b] - p[b])).sum())
                for b in [
                    (ref_uniform_bins(p, 9) if strategy == "uniform" else ref_mass_bins(p, w, 9)) == k
                    for k in range(9)
                ]
            )
            / w.sum()
        )
        assert_allclose(metrics.prob_ece(y, p, sample_weight=w, n_bins=9, strategy=strategy), prob, rtol=RTOL)
    assert_allclose(
        metrics.ada_ece(y, p, sample_weight=w, n_bins=7), ref_ece(y, p, w, 7, "quantile", 2, "mass")
    )


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_ece_sweep_matches_reference(ties: bool, weighted: bool) -> None:
    y, p, w, _ = make_data(400, 12, ties=ties)
    ww = w if weighted else np.ones_like(p)
    for norm, weighting in ((1.0, "mass"), (2.0, "equal")):
        got = metrics.ece_sweep(y, p, sample_weight=ww if weighted else None, p=norm, weighting=weighting)
        assert_allclose(got, ref_ece_sweep(y, p, ww, norm, weighting), rtol=1e-9)


def test_ece_sweep_max_bins_caps_the_sweep() -> None:
    p = np.linspace(0.01, 0.99, 200)
    y = (p > 0.5).astype(float)  # label means monotone at every bin count
    assert_allclose(metrics.ece_sweep(y, p, max_bins=4), metrics.ece(y, p, n_bins=4, strategy="quantile"))


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_cal_n_and_gc_n_match_reference(strategy: str) -> None:
    y, p, w, z = make_data(3000, 13)
    bins = ref_uniform_bins(p, 5) if strategy == "uniform" else ref_mass_bins(p, w, 5)
    assert_allclose(
        metrics.cal_n(y, p, sample_weight=w, n_bins=5, strategy=strategy),
        ref_cal_n_rows(y, p, w, bins, 5),
        rtol=RTOL,
    )
    assert_allclose(
        metrics.gc_n(y, p, z, sample_weight=w, n_bins=4, strategy=strategy),
        ref_gc_n(y, p, w, z, 4, strategy),
        rtol=RTOL,
    )


def test_field_metrics_and_cece_match_reference() -> None:
    y, p, w, z = make_data(2000, 14)
    names = np.array(["north", "south", "east", "west", "up", "down"], dtype=object)[z]
    for field in (z, names, pd.Series(names, dtype="category")):
        assert_allclose(
            metrics.field_ece(y, p, field, sample_weight=w), ref_field(y, p, w, z, "ece"), rtol=RTOL
        )
        assert_allclose(
            metrics.field_rce(y, p, field, sample_weight=w), ref_field(y, p, w, z, "rce"), rtol=RTOL
        )
    for kind, norm in (("ece", 1.0), ("mce", math.inf), ("ada_ece", 2.0)):
        assert_allclose(
            metrics.cece(y, p, names, sample_weight=w, metric=kind), ref_cece(y, p, w, names, norm), rtol=RTOL
        )


@pytest.mark.parametrize("norm", [1.0, 2.0, math.inf])
def test_mvce_matches_reference(norm: float) -> None:
    y, p, w, _ = make_data(1500, 15)
    got = metrics.mvce(y, p, sample_weight=w, n_views=7, bin_size=100, p=norm, seed=42)
    if norm == math.inf:
        from gpucal.kernels import view_bins

        bins = view_bins(1500, n_views=7, bin_size=100, seed=42)
        per_view = [
            np.mean(
                [
                    abs(np.average(p[b == k], weights=w[b == k]) - np.average(y[b == k], weights=w[b == k]))
                    for k in range(15)
                ]
            )
            for b in bins
        ]
        assert_allclose(got, max(per_view), rtol=RTOL)
    else:
        assert_allclose(got, ref_mvce(y, p, w, 7, 100, norm, 42), rtol=RTOL)


def test_mvce_seed_reproducible_and_one_bin_is_pce() -> None:
    y, p, w, _ = make_data(1000, 16)
    a = metrics.mvce(y, p, n_views=5, bin_size=50, seed=3)
    assert a == metrics.mvce(y, p, n_views=5, bin_size=50, seed=3)
    assert a != metrics.mvce(y, p, n_views=5, bin_size=50, seed=4)
    # bin_size >= n: every view is one bin holding every row, so MVCE is the global gap.
    assert_allclose(
        metrics.mvce(y, p, sample_weight=w, n_views=3, bin_size=5000),
        metrics.pce(y, p, sample_weight=w),
        rtol=RTOL,
    )


def test_tce_and_pce_formulas() -> None:
    rng = np.random.default_rng(17)
    eta, h, w = rng.random(500), rng.random(500), rng.random(500)
    assert_allclose(
        metrics.tce(eta, h, p=2, sample_weight=w), math.sqrt(sum(w * (eta - h) ** 2) / w.sum()), rtol=RTOL
    )
    assert_allclose(metrics.tce(eta, h, p=1), np.mean(np.abs(eta - h)), rtol=RTOL)
    assert metrics.tce(eta, h, p=math.inf) == np.max(np.abs(eta - h))
    y = (rng.random(500) < eta).astype(float)
    assert_allclose(
        metrics.pce(y, h, sample_weight=w), abs(np.average(h, weights=w) - np.average(y, weights=w))
    )


def test_auc_matches_pairwise_count_with_soft_labels() -> None:
    rng = np.random.default_rng(18)
    p = np.round(rng.random(60), 1)
    y = rng.random(60)
    w = rng.random(60)
    pos, neg = w * y, w * (1 - y)
    wins = sum(
        pos[i] * neg[j] * (1.0 if p[i] > p[j] else 0.5 if p[i] == p[j] else 0.0)
        for i in range(60)
        for j in range(60)
    )
    assert_allclose(metrics.roc_auc(y, p, sample_weight=w), wins / (pos.sum() * neg.sum()), rtol=RTOL)


# ---------------------------------------------------------------- binning
@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=60), st.integers(1, 300))
def test_fast_uniform_bins_equal_searchsorted(values: list[float], n_bins: int) -> None:
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    p = np.concatenate(
        [np.asarray(values), edges, np.nextafter(edges, 2.0).clip(0, 1), np.nextafter(edges, -1.0).clip(0, 1)]
    )
    fast = uniform_bin_ids(p, n_bins)
    np.testing.assert_array_equal(fast, ref_uniform_bins(p, n_bins))
    np.testing.assert_array_equal(uniform_bin_ids(p, n_bins, force_fallback=True), fast)


def test_mass_bins_keep_ties_and_ignore_row_order() -> None:
    rng = np.random.default_rng(19)
    p = rng.choice([0.1, 0.2, 0.5, 0.7], size=400, p=[0.6, 0.2, 0.1, 0.1])
    w = rng.random(400)
    bins = mass_bin_ids(p, w, 5)
    for value in np.unique(p):
        assert np.unique(bins[p == value]).size == 1
    np.testing.assert_array_equal(bins, ref_mass_bins(p, w, 5))
    perm = rng.permutation(400)
    y = (rng.random(400) < p).astype(float)
    assert metrics.ece(y, p, sample_weight=w, n_bins=5, strategy="quantile") == pytest.approx(
        metrics.ece(y[perm], p[perm], sample_weight=w[perm], n_bins=5, strategy="quantile"), rel=1e-12
    )


def test_unit_weights_give_equal_count_bins() -> None:
    p = np.random.default_rng(20).random(103)
    counts = np.bincount(mass_bin_ids(p, None, 10), minlength=10)
    assert counts.min() == 10
    assert counts.max() == 11
