"""Binning and isotonic calibrators: equal to scikit-learn, netcal and uncertainty-calibration; properties.

Reference tolerances: scikit-learn's isotonic outputs to 1e-10 (observed: 4e-16; the fit is the same
arithmetic in another order); netcal's histogram binning to 1e-12 (the same means); the binning stage of
uncertainty-calibration's Platt binner to 1e-12 given the same Platt map, the whole binner to 1e-3 (observed
2e-4: its Platt fit is L-BFGS with gradient tolerance 1e-4 on a C=1e10 ridge).
"""

from __future__ import annotations

import itertools
import json
import warnings
from contextlib import nullcontext
from typing import Any

import numba
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import clone
from sklearn.isotonic import IsotonicRegression, isotonic_regression

import gpucal
from gpucal.calibrators import _sorted, bins, pav
from gpucal.calibrators.histogram import (
    HistogramCalibrator,
    fit_histogram,
    histogram_rows,
    probability_block,
)
from gpucal.calibrators.isotonic import IsotonicCalibrator, fit_isotonic, isotonic_rows
from gpucal.calibrators.scaling_binning import ScalingBinningCalibrator
from gpucal.calibrators.score_rows import ScoreRows
from gpucal.calibrators.sir import SIRCalibrator
from gpucal.kernels.jit import parallel_twins_only
from gpucal.kernels.pav_chunks import chunk_bounds
from gpucal.metrics.binning import mass_bin_ids
from gpucal.rows import LocalRows, RowBlock

ISOTONIC_ATOL = 1e-10
EXACT_ATOL = 1e-12


def make_data(n: int = 2000, seed: int = 0, *, decimals: int | None = 2) -> tuple[np.ndarray, np.ndarray]:
    """Scores with many ties (rounded) and labels drawn from a miscalibrated truth."""
    rng = np.random.default_rng(seed)
    s = rng.beta(0.8, 1.5, n)
    if decimals is not None:
        s = np.round(s, decimals)
    y = (rng.random(n) < np.clip(1.3 * s**1.4, 0, 1)).astype(np.float64)
    return s, y


ALL = [
    pytest.param(lambda: IsotonicCalibrator(), id="isotonic"),
    pytest.param(lambda: IsotonicCalibrator(rank_preserving=True, clip_eps=1e-3), id="isotonic_rank"),
    pytest.param(lambda: HistogramCalibrator(n_bins=7), id="histogram_uniform"),
    pytest.param(lambda: HistogramCalibrator(n_bins=7, strategy="quantile"), id="histogram_quantile"),
    pytest.param(lambda: SIRCalibrator(n_bins=12), id="sir"),
    pytest.param(lambda: ScalingBinningCalibrator(n_bins=6), id="scaling_binning"),
]


# --------------------------------------------------------------------------------------------------
# scikit-learn's isotonic regression


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("clip_eps", [0.0, 0.02])
def test_isotonic_equals_sklearn_with_ties_and_weights(seed: int, clip_eps: float) -> None:
    s, y = make_data(3000, seed, decimals=seed % 3 + 1)
    rng = np.random.default_rng(seed + 10)
    w = rng.integers(0, 4, s.shape[0]).astype(np.float64) * rng.random(s.shape[0])  # zeros included
    bounds = {"y_min": clip_eps, "y_max": 1 - clip_eps} if clip_eps else {}
    ref = IsotonicRegression(out_of_bounds="clip", **bounds).fit(s, y, sample_weight=w)
    cal = IsotonicCalibrator(clip_eps=clip_eps).fit(s, y, sample_weight=w)
    t = np.concatenate([s, rng.random(5000), [0.0, 1.0]])
    assert_allclose(cal.predict(t), ref.predict(t), rtol=0, atol=ISOTONIC_ATOL)
    assert_allclose(cal.X_thresholds_, ref.X_thresholds_, rtol=0, atol=0)
    assert_allclose(cal.y_thresholds_, ref.y_thresholds_, rtol=0, atol=ISOTONIC_ATOL)


def test_isotonic_soft_labels_and_margins_equal_sklearn() -> None:
    rng = np.random.default_rng(5)
    z = np.round(rng.normal(0, 2, 4000), 1)
    y = rng.random(4000)
    ref = IsotonicRegression(out_of_bounds="clip").fit(z, y)
    cal = IsotonicCalibrator(score_kind="logit").fit(z, y)
    t = rng.normal(0, 3, 3000)
    assert_allclose(cal.predict(t), ref.predict(t), rtol=0, atol=ISOTONIC_ATOL)


def test_isotonic_ties_closer_than_1e15_pool_like_sklearn() -> None:
    # scikit-learn's _make_unique pools scores less than 1e-15 above a group's first score.
    base = np.array([0.2, 0.5, 0.5, 0.8])
    s = np.concatenate([base, np.nextafter(base, 1.0), base + 2e-15])
    y = np.tile([1.0, 0.0, 1.0, 0.0], 3)
    w = np.arange(1.0, 13.0)
    ref = IsotonicRegression(out_of_bounds="clip").fit(s, y, sample_weight=w)
    cal = IsotonicCalibrator().fit(s, y, sample_weight=w)
    assert_array_equal(cal.X_thresholds_, ref.X_thresholds_)
    assert_allclose(cal.predict(s), ref.predict(s), rtol=0, atol=ISOTONIC_ATOL)


def test_isotonic_threaded_sort_runs_equal_one_run(monkeypatch: pytest.MonkeyPatch) -> None:
    s, y = make_data(5000, 3, decimals=3)
    w = np.random.default_rng(4).random(s.shape[0])  # not unit weights: the argsort path
    one = fit_isotonic(s, y, w)
    monkeypatch.setattr(_sorted, "MIN_RUN_ROWS", 64)
    monkeypatch.setattr(_sorted, "thread_count", lambda: 7)
    order, bounds = _sorted.sorted_runs(s)
    assert bounds.shape[0] == 8
    for r in range(7):
        assert np.all(np.diff(s[order[bounds[r] : bounds[r + 1]]]) >= 0)
    many = fit_isotonic(s, y, w)
    assert_allclose(many[0], one[0], rtol=0, atol=0)
    assert_allclose(many[1], one[1], rtol=0, atol=EXACT_ATOL)
    stats_many = bins.mass_bin_stats(s, y, w, 9)
    monkeypatch.setattr(_sorted, "MIN_RUN_ROWS", 1 << 20)
    for a, b in zip(stats_many, bins.mass_bin_stats(s, y, w, 9), strict=True):
        assert_allclose(a, b, rtol=1e-12, atol=0)


@pytest.mark.parametrize("decimals", [1, 3, None])
def test_counting_path_equals_argsort_path(decimals: int | None) -> None:
    # Unit weights and 0/1 labels take np.sort + counts; force_argsort takes the general path.
    s, y = make_data(20_000, 6, decimals=decimals)
    w = np.ones(s.shape[0])
    fast, general = pav.isotonic_blocks(s, y, w), pav.isotonic_blocks(s, y, w, force_argsort=True)
    for field in ("x_first", "x_last", "weight", "mean_x", "value"):
        assert_allclose(getattr(fast, field), getattr(general, field), rtol=1e-13, atol=0, err_msg=field)
    for y_is_score in (False, True):
        target = s if y_is_score else y
        fast_bins = bins.mass_bin_stats(s, target, w, 13, y_is_score=y_is_score)
        general_bins = bins.mass_bin_stats(s, target, w, 13, y_is_score=y_is_score, force_argsort=True)
        for a, b in zip(fast_bins, general_bins, strict=True):
            assert_allclose(a, b, rtol=1e-12, atol=0)


def fitted_steps(blocks: pav.PavBlocks, s: np.ndarray) -> np.ndarray:
    """The isotonic fit's value at each score (its step function)."""
    return blocks.value[np.searchsorted(blocks.x_first, s, side="right") - 1]


@pytest.mark.parametrize("weights", ["unit", "weighted", "zeros", "soft_labels"])
@pytest.mark.parametrize("exact_means", [True, False])
def test_device_sort_blocks_equal_the_host_paths(weights: str, exact_means: bool) -> None:
    """The GPU fit's entry (sort, chunks pooled where the arrays are, their blocks pooled on the host),
    run here on numpy arrays through the kernel's CPU twin: the host path's blocks, exactly with unit
    weights and 0/1 labels (every sum a count) but for the rounding of the mean scores; with other
    weights or labels the same fit to rounding."""
    s, y = make_data(20_000, 8, decimals=3)
    rng = np.random.default_rng(8)
    w = np.ones(s.shape[0]) if weights in ("unit", "soft_labels") else rng.random(s.shape[0]) + 0.5
    if weights == "zeros":
        w[::7] = 0.0
    if weights == "soft_labels":
        y = np.clip(y * 0.9 + 0.05 * rng.random(y.shape[0]), 0.0, 1.0)
    host = pav.scanned_isotonic_blocks(s, y, w, "probability", exact_means=exact_means)
    device = pav.device_sort_isotonic_blocks(s, y, w, "probability")
    assert host is not None
    assert device is not None
    if weights == "unit":
        for field in ("x_first", "x_last", "weight", "value"):
            assert_array_equal(getattr(device, field), getattr(host, field), err_msg=field)
        assert_allclose(device.mean_x, host.mean_x, rtol=1e-13, atol=0)
    else:
        assert_allclose(fitted_steps(device, s), fitted_steps(host, s), rtol=1e-14, atol=0)


@pytest.mark.parametrize("data", ["distinct", "ties", "near_ties"])
def test_merged_runs_walk_in_chunks_equal_one_walk(monkeypatch: pytest.MonkeyPatch, data: str) -> None:
    """The argsort path's runs (5 here), cut into chunks of about 97 rows that each open a tie group in
    merged order, walked in threads and pooled: the fit of one walk."""
    s, y = make_data(6000, 10, decimals=3 if data == "ties" else None)
    if data == "near_ties":  # clusters of scores within 1e-15, spread over the runs
        s[::3] = np.round(s[::3], 2) + np.random.default_rng(10).integers(0, 4, s[::3].shape[0]) * 3e-16
    w = np.random.default_rng(11).random(s.shape[0]) + 0.5
    w[::11] = 0.0
    one = pav.isotonic_blocks(s, y, w)
    monkeypatch.setattr(_sorted, "MIN_RUN_ROWS", 64)
    monkeypatch.setattr(_sorted, "thread_count", lambda: 5)
    monkeypatch.setattr(pav, "WALK_CHUNK_ROWS", 97)
    order, bounds = _sorted.sorted_runs(s)
    cuts = _sorted.tie_group_cuts(s, order, bounds, 6000 // 97, pav.TIE_EPS)
    assert np.all(np.diff(cuts, axis=0) >= 0)
    # Each chunk's rows, merged, start with a row that opens a tie group of all the rows merged.
    xs = np.sort(s)
    opens = pav._tie_group_starts(xs, pav.TIE_EPS)
    first_rows = np.sum(cuts - bounds[:-1], axis=1)[:-1]
    assert np.all(opens[first_rows[first_rows < xs.shape[0]]])
    assert np.unique(first_rows).shape[0] > 30
    chunked = pav.isotonic_blocks(s, y, w)
    assert_allclose(fitted_steps(chunked, s), fitted_steps(one, s), rtol=1e-14, atol=0)
    assert_allclose(chunked.weight.sum(), one.weight.sum(), rtol=1e-13)


@pytest.mark.parametrize("data", ["distinct", "ties", "near_ties"])
@pytest.mark.parametrize("exact_means", [True, False])
def test_chunked_walks_equal_one_walk(monkeypatch: pytest.MonkeyPatch, data: str, exact_means: bool) -> None:
    """The counting path's walks over chunks of 97 sorted rows, in threads and pooled, give the blocks
    of one walk: the same groups and values (counts, exact), mean scores to rounding; the chunks start
    tie groups."""
    s, y = make_data(6000, 9, decimals=3 if data == "ties" else None)
    if data == "near_ties":  # groups of scores within 1e-15 of each other, cut by the nominal bounds
        s = np.sort(s)
        s[97::97] = np.nextafter(s[96:-1:97], 1.0)
        s[98::97] = s[97::97] + 5e-16
    w = np.ones(s.shape[0])
    one = pav.scanned_isotonic_blocks(s, y, w, None, exact_means=exact_means)
    monkeypatch.setattr(pav, "WALK_CHUNK_ROWS", 97)
    xs = np.sort(s)
    bounds = chunk_bounds(xs, pav.WALK_CHUNK_ROWS, pav.TIE_EPS)
    assert bounds.shape[0] > 40
    assert np.all(pav._tie_group_starts(xs, pav.TIE_EPS)[bounds[:-1]])
    chunked = pav.scanned_isotonic_blocks(s, y, w, None, exact_means=exact_means)
    assert one is not None
    assert chunked is not None
    for field in ("x_first", "x_last", "weight", "value"):
        assert_array_equal(getattr(chunked, field), getattr(one, field), err_msg=field)
    assert_allclose(chunked.mean_x, one.mean_x, rtol=1e-13, atol=0)


@pytest.mark.parametrize("bad", ["score_above_one", "score_nan", "label_above_one"])
@pytest.mark.parametrize("unit", [True, False])
def test_device_sort_blocks_refuse_what_the_scan_refuses(bad: str, unit: bool) -> None:
    s, y = make_data(2_000, 9)
    w = np.ones(s.shape[0]) if unit else np.full(s.shape[0], 2.0)
    if bad == "score_above_one":
        s[17] = 1.5
    elif bad == "score_nan":
        s[17] = np.nan
    else:
        y[17] = 1.5
    assert pav.scanned_isotonic_blocks(s, y, w, "probability") is None
    assert pav.device_sort_isotonic_blocks(s, y, w, "probability") is None


@pytest.mark.parametrize("case", ["distinct", "rounded", "near_ties", "one_class"])
def test_isotonic_runs_walk_equals_group_walk(case: str) -> None:
    # exact_means=False adds each run of label-0 rows at once: the same blocks, mean_x to rounding.
    s, y = make_data(20_000, 7, decimals=3 if case == "rounded" else None)
    if case == "near_ties":  # a negative and a positive less than 1e-15 above a run's last score
        s = np.concatenate([s, [0.4, np.nextafter(0.4, 1.0), 0.4 + 5e-16]])
        y = np.concatenate([y, [0.0, 0.0, 1.0]])
    if case == "one_class":
        y = np.zeros_like(y)
    w = np.ones(s.shape[0])
    exact, runs = pav.isotonic_blocks(s, y, w), pav.isotonic_blocks(s, y, w, exact_means=False)
    for field in ("x_first", "x_last", "weight", "value"):
        assert_array_equal(getattr(runs, field), getattr(exact, field), err_msg=field)
    assert_allclose(runs.mean_x, exact.mean_x, rtol=1e-13, atol=0)
    xs, positives = _sorted.counting_sorts(s, y, w)
    took_runs = pav._isotonic_distinct(xs, positives, pav.TIE_EPS).shape[0] > 0
    assert took_runs == (case in ("distinct", "one_class"))


def test_isotonic_one_class_is_constant() -> None:
    s, _ = make_data(100)
    assert_array_equal(IsotonicCalibrator().fit(s, np.zeros(100)).predict(s), np.zeros(100))
    clipped = IsotonicCalibrator(clip_eps=1e-6, rank_preserving=True).fit(s, np.ones(100))
    assert_array_equal(clipped.predict(s), np.full(100, 1 - 1e-6))


# --------------------------------------------------------------------------------------------------
# Rank-preserving isotonic


def test_rank_preserving_is_strictly_increasing_and_keeps_block_means() -> None:
    s, y = make_data(4000, 1, decimals=None)
    w = np.random.default_rng(2).random(s.shape[0]) + 0.1
    plain = IsotonicCalibrator().fit(s, y, sample_weight=w)
    rank = IsotonicCalibrator(rank_preserving=True).fit(s, y, sample_weight=w)
    order = np.argsort(s)
    out = rank.predict(s[order])
    assert np.all(np.diff(out) > 0)  # no ties among distinct scores: the ranking (and AUC) is kept
    fitted = plain.predict(s)
    values = np.unique(fitted)
    assert values.shape[0] > 3
    out = rank.predict(s)
    for v in values[1:-1]:  # inner blocks keep their weighted mean (the end blocks may sit at 0 or 1)
        block = fitted == v
        assert_allclose(np.average(out[block], weights=w[block]), v, rtol=0, atol=1e-12)
    # The same holds at the ends when they are not at the floor or ceiling.
    for v in (values[0], values[-1]):
        block = fitted == v
        if 0 < v < 1:
            assert_allclose(np.average(out[block], weights=w[block]), v, rtol=0, atol=1e-12)
    assert np.all((out >= 0) & (out <= 1))


def test_clip_eps_keeps_log_loss_finite() -> None:
    # scikit-learn#10903: exact 0 and 1 outputs give an infinite log-loss on new data.
    s, y = make_data(500, 4)
    out = IsotonicCalibrator(clip_eps=1e-6).fit(s, y).predict(np.linspace(0, 1, 101))
    assert out.min() >= 1e-6
    assert out.max() <= 1 - 1e-6


# --------------------------------------------------------------------------------------------------
# netcal's histogram binning


@pytest.mark.parametrize("n_bins", [1, 5, 10, 37])
def test_histogram_equals_netcal(n_bins: int) -> None:
    binning = pytest.importorskip("netcal.binning")
    s, y = make_data(3000, n_bins, decimals=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # netcal and its torch import warn on import and fit
        ref = binning.HistogramBinning(bins=n_bins).fit(s, y)
        t = np.random.default_rng(n_bins).random(4000)
        expected = ref.transform(t)
    cal = HistogramCalibrator(n_bins=n_bins).fit(s, y)
    assert_allclose(cal.predict(t), expected, rtol=0, atol=EXACT_ATOL)


def test_histogram_empty_bin_predicts_its_centre() -> None:
    s = np.array([0.05, 0.1, 0.92, 0.95])
    cal = HistogramCalibrator(n_bins=4).fit(s, np.array([0.0, 1.0, 1.0, 1.0]))
    assert_allclose(cal.predict(np.array([0.3, 0.6, 0.0, 1.0])), [0.375, 0.625, 0.5, 1.0], rtol=0, atol=0)
    assert_array_equal(cal.bin_weights_, [2.0, 0.0, 0.0, 2.0])


def test_histogram_right_closed_bins_and_logit_scores() -> None:
    s = np.array([0.2, 0.5, 0.5, 0.7])
    cal = HistogramCalibrator(n_bins=2).fit(s, np.array([0.0, 1.0, 0.0, 1.0]))
    assert_allclose(cal.bin_values_, [1 / 3, 1.0])  # 0.5 lies in the first bin, (0, 0.5]
    logit = HistogramCalibrator(n_bins=2, score_kind="logit").fit(np.log(s / (1 - s)), [0, 1, 0, 1])
    assert_allclose(logit.bin_values_, cal.bin_values_)  # margins are binned on sigma(margin)


def test_histogram_quantile_bins_have_equal_mass() -> None:
    rng = np.random.default_rng(3)
    s = rng.random(1000)
    y = (rng.random(1000) < s).astype(float)
    cal = HistogramCalibrator(n_bins=8, strategy="quantile").fit(s, y)
    assert_array_equal(cal.bin_weights_, np.full(8, 125.0))
    ids = np.searchsorted(cal.bin_edges_[1:-1], s, side="left")
    for b in range(8):
        assert_allclose(cal.bin_values_[b], y[ids == b].mean(), rtol=0, atol=EXACT_ATOL)


def test_histogram_quantile_drops_bins_emptied_by_ties() -> None:
    s = np.array([0.1] * 90 + [0.2] * 5 + [0.9] * 5)
    cal = HistogramCalibrator(n_bins=10, strategy="quantile").fit(s, np.r_[np.zeros(90), np.ones(10)])
    # 0.1 starts at mass 0 (bin 0); 0.2 and 0.9 start at masses 0.90 and 0.95 (both bin 9).
    assert cal.bin_values_.shape == (2,)
    assert_allclose(cal.predict(np.array([0.1, 0.2, 0.9])), [0.0, 1.0, 1.0])


# --------------------------------------------------------------------------------------------------
# uncertainty-calibration's Platt binner (Kumar et al.)


def test_scaling_binning_equals_uncertainty_calibration() -> None:
    calibration = pytest.importorskip("calibration")
    from calibration import utils

    rng = np.random.default_rng(7)
    n = 6000  # divisible by n_bins: np.array_split makes equal parts, as gpucal's equal-mass rule
    s = np.clip(rng.beta(1.2, 2.0, n), 1e-6, 1 - 1e-6)
    y = (rng.random(n) < s**1.5).astype(float)
    t = np.clip(rng.random(3000), 1e-6, 1 - 1e-6)
    cal = ScalingBinningCalibrator(n_bins=10).fit(s, y)

    # The binning stage given gpucal's Platt map: the package's own functions.
    def platt(x: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-(cal.coef_ * np.log(x / (1 - x)) + cal.intercept_)))

    bins = utils.get_equal_bins(platt(s), num_bins=10)
    discrete = utils.get_discrete_calibrator(platt(s), bins)
    assert_allclose(cal.bin_edges_[1:], bins, rtol=0, atol=EXACT_ATOL)
    assert_allclose(cal.predict(t), discrete(platt(t)), rtol=0, atol=EXACT_ATOL)

    # The whole calibrator: the Platt fits differ by the package's L-BFGS tolerance.
    ref = calibration.PlattBinnerCalibrator(n, 10)
    ref.train_calibration(s, y)
    assert_allclose(cal.predict(t), ref.calibrate(t), rtol=0, atol=1e-3)  # observed 2e-4


def test_scaling_binning_outputs_are_bin_means_of_platt() -> None:
    s, y = make_data(3000, 8, decimals=None)
    cal = ScalingBinningCalibrator(n_bins=5).fit(s, y)
    g = 1 / (1 + np.exp(-(cal.coef_ * np.log(s / (1 - s)) + cal.intercept_)))
    out = cal.predict(s)
    assert np.unique(out).shape[0] == 5
    for v in np.unique(out):
        assert_allclose(g[out == v].mean(), v, rtol=0, atol=EXACT_ATOL)


def test_scaling_binning_split_uses_disjoint_rows() -> None:
    s, y = make_data(4000, 9, decimals=None)
    full = ScalingBinningCalibrator(n_bins=5).fit(s, y)
    half = ScalingBinningCalibrator(n_bins=5, split_fraction=0.5, random_state=3).fit(s, y)
    again = ScalingBinningCalibrator(n_bins=5, split_fraction=0.5, random_state=3).fit(s, y)
    assert half.coef_ != full.coef_
    assert_array_equal(half.predict(s), again.predict(s))
    assert_allclose(half.coef_, full.coef_, rtol=0.2)


# --------------------------------------------------------------------------------------------------
# SIR against a numpy transcription


def sir_oracle(s: np.ndarray, y: np.ndarray, n_bins: int, t: np.ndarray) -> np.ndarray:
    """Sort, equal-count bins (distinct scores), isotonic across bin means, one knot per block."""
    order = np.argsort(s, kind="stable")
    s, y = s[order], y[order]
    ids = np.minimum(n_bins - 1, (n_bins * np.arange(s.shape[0])) // s.shape[0])
    counts = np.bincount(ids, minlength=n_bins).astype(float)
    mean_s = np.bincount(ids, weights=s, minlength=n_bins) / counts
    mean_y = np.bincount(ids, weights=y, minlength=n_bins) / counts
    fitted = isotonic_regression(mean_y, sample_weight=counts)
    blocks = np.concatenate([[0], np.flatnonzero(np.diff(fitted) != 0) + 1])
    x = np.add.reduceat(mean_s * counts, blocks) / np.add.reduceat(counts, blocks)
    v = fitted[blocks]
    lo_slope = (v[1] - v[0]) / (x[1] - x[0])
    hi_slope = (v[-1] - v[-2]) / (x[-1] - x[-2])
    knots_x = np.r_[s[0], x, s[-1]]
    knots_y = np.r_[
        max(0.0, v[0] - lo_slope * (x[0] - s[0])), v, min(1.0, v[-1] + hi_slope * (s[-1] - x[-1]))
    ]
    return np.interp(np.clip(t, s[0], s[-1]), knots_x, knots_y)


@pytest.mark.parametrize("seed", range(3))
def test_sir_equals_oracle(seed: int) -> None:
    s, y = make_data(5000, seed, decimals=None)
    t = np.random.default_rng(seed).random(2000)
    cal = SIRCalibrator(n_bins=25).fit(s, y)
    assert_allclose(cal.predict(t), sir_oracle(s, y, 25, t), rtol=0, atol=EXACT_ATOL)
    out = cal.predict(np.sort(s))
    inside = (out > 0) & (out < 1)  # strictly increasing except where an end segment meets 0 or 1
    assert np.all(np.diff(out[inside]) > 0)


# --------------------------------------------------------------------------------------------------
# Kernels against plain numpy


def bin_sums_oracle(p: np.ndarray, y: np.ndarray, w: np.ndarray, interior: np.ndarray) -> np.ndarray:
    """Per-bin sums ``w``, ``w * y`` by ``searchsorted`` and ``bincount``."""
    ids = np.searchsorted(interior, p, side="left")
    return np.stack([np.bincount(ids, v, interior.shape[0] + 1) for v in (w, w * y)], axis=1)


@pytest.mark.parametrize("parallel", [False, True])
def test_bin_sums_counting_and_scatter_paths_equal_numpy(parallel: bool) -> None:
    rng = np.random.default_rng(12)
    n = 2 * bins.CHUNK_ROWS + 3 * bins.COUNT_BLOCK_ROWS + 5  # a ragged last block in a ragged last chunk
    p = rng.random(n) ** 8  # most scores in the first bin, as click-through rates
    edges = np.concatenate([np.linspace(0, 1, k + 1) for k in (10, 32, 100)])
    near = np.r_[edges, np.nextafter(edges, -1), np.nextafter(edges, 2), -0.0].clip(0, 1)
    p[rng.choice(n, near.shape[0], replace=False)] = near  # every edge and its neighbours, in several chunks
    y = (rng.random(n) < p).astype(float)
    unit = np.broadcast_to(np.float64(1.0), (n,))
    ones = np.ones(n)
    fractional = y.copy()
    fractional[[bins.CHUNK_ROWS + 7, n - 1]] = 0.25  # in the second chunk and in the last chunk's last block
    w = rng.random(n)
    with parallel_twins_only() if parallel else nullcontext():
        for n_bins in (1, 2, 10, 32, 33, 100):
            interior = np.linspace(0, 1, n_bins + 1)[1:-1]
            expected = bin_sums_oracle(p, y, ones, interior)
            for uniform in (True, False):
                bounds = bins.bounds_of(interior, uniform)
                for count in (True, False):  # either path, whatever the bin count
                    sums, n_outside = bins._bin_sums_cpu(p, y, unit, bounds, uniform, count)
                    assert_array_equal(sums, expected)
                    assert n_outside == 0
                assert_array_equal(bins.bin_sums(p, y, unit, interior, uniform=uniform), expected)
                # Labels other than 0 and 1: their chunks fall back to the scatter, the others are counted.
                sums = bins._bin_sums_cpu(p, fractional, unit, bounds, uniform, True)[0]
                assert_array_equal(sums, bins._bin_sums_cpu(p, fractional, unit, bounds, uniform, False)[0])
                assert_allclose(sums, bin_sums_oracle(p, fractional, ones, interior), rtol=1e-12)
                # Weights other than the unit view: the scatter.
                twos = np.broadcast_to(np.float64(2.0), (n,))
                assert_array_equal(bins.bin_sums(p, y, twos, interior, uniform=uniform), 2 * expected)
                assert_array_equal(bins.bin_sums(p, y, ones, interior, uniform=uniform), expected)
                got = bins.bin_sums(p, y, w, interior, uniform=uniform)
                assert_allclose(got, bin_sums_oracle(p, y, w, interior), rtol=1e-12)


def test_fit_histogram_without_weights_equals_weights_of_one() -> None:
    rng = np.random.default_rng(13)
    p = rng.random(300_000) ** 4
    y = (rng.random(p.shape[0]) < p).astype(float)
    for n_bins in (10, 100):  # counted, scattered
        for got, expected in zip(
            fit_histogram(p, y, n_bins=n_bins),
            fit_histogram(p, y, np.ones(p.shape[0]), n_bins=n_bins),
            strict=True,
        ):
            assert_array_equal(got, expected)


def test_count_chunk_declines_labels_other_than_0_and_1() -> None:
    n = 3 * bins.COUNT_BLOCK_ROWS + 11
    p = np.linspace(0, 1, n)
    y = (np.arange(n) % 3 == 0).astype(float)
    bounds = bins.uniform_bounds(10)
    acc = np.zeros((10, 2))
    assert bins._count_chunk(p, y, 0, n, bounds, acc) == (True, 0)
    assert_array_equal(acc, bin_sums_oracle(p, y, np.ones(n), bounds[1:-1]))
    for bad in (0.5, np.nan, 2.0, -1.0, np.inf):
        for row in (0, n - 1):
            labels = y.copy()
            labels[row] = bad
            acc = np.full((10, 2), 7.0)
            assert bins._count_chunk(p, labels, 0, n, bounds, acc) == (False, 0)
            assert_array_equal(acc, 7.0)  # untouched: the scatter sums the chunk


def test_kernels_equal_numpy() -> None:
    rng = np.random.default_rng(11)
    p = np.r_[rng.random(100_000), np.linspace(0, 1, 21)]  # edges themselves included
    y = (rng.random(p.shape[0]) < p).astype(float)
    w = rng.random(p.shape[0])
    for n_bins in (1, 3, 10, 20):
        interior = np.linspace(0, 1, n_bins + 1)[1:-1]
        ids = np.searchsorted(interior, p, side="left")
        expected = np.stack([np.bincount(ids, v, n_bins) for v in (w, w * y)], axis=1)
        for uniform in (True, False):
            assert_allclose(bins.bin_sums(p, y, w, interior, uniform=uniform), expected, rtol=1e-12)
            values = rng.random(n_bins)
            assert_array_equal(bins.lookup_bins(p, interior, values, uniform=uniform), values[ids])
    # The search-free bins on every edge and the floats next to it, for bin counts up to 1000.
    for n_bins in (2, 3, 7, 10, 49, 100, 999, 1000):
        edges = np.linspace(0, 1, n_bins + 1)
        near = np.r_[edges, np.nextafter(edges, -1), np.nextafter(edges, 2)].clip(0, 1)
        values = rng.random(n_bins)
        expected = values[np.searchsorted(edges[1:-1], near, side="left")]
        assert_array_equal(bins.lookup_bins(near, edges[1:-1], values, uniform=True), expected)
    # Knots spread, skewed, clustered (the index table's cells hold many knots), single, margins of
    # both signs and of extreme sizes (the table's keys are the values' bits).
    clustered = np.unique(np.r_[rng.random(30), 0.5 + np.cumsum(np.full(200, 1e-12))])
    margins = np.unique(rng.normal(0.0, 20.0, 500))
    extremes = np.array([-1e300, -1.0, -5e-324, 0.0, 5e-324, 1e-300, 1e300])
    for kx in (
        np.sort(rng.random(50)),
        np.unique(rng.random(3000) ** 6),
        clustered,
        np.array([0.3]),
        margins,
        extremes,
    ):
        ky = np.sort(rng.random(kx.shape[0]))
        t = np.r_[rng.random(10_000) * 1.2 - 0.1, kx, np.nextafter(kx, 2), np.nextafter(kx, -1)]
        assert_allclose(bins.interp_clipped(t, kx, ky), np.interp(t, kx, ky), rtol=0, atol=1e-15)


# --------------------------------------------------------------------------------------------------
# Properties (hypothesis)

scores = st.lists(
    st.sampled_from([0.0, 0.05, 0.2, 0.3, 0.31, 0.5, 0.7, 0.9, 0.99, 1.0]), min_size=0, max_size=60
)


def _draw(data: st.DataObject, s: list[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels and integer weights for the drawn scores, after four rows with both labels at 0.2 and 0.8.

    The four rows keep the data from being separable, where the Platt step of scaling-binning has no
    finite fit; they do not change what the other calibrators are tested for.
    """
    n = len(s)
    y = np.array([0, 1, 0, 1, *data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))], dtype=float)
    w = np.array([1, 1, 1, 1, *data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))], dtype=float)
    return np.array([0.2, 0.2, 0.8, 0.8, *s]), y, w


PROPERTY_SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("make", ALL)
@PROPERTY_SETTINGS
@given(s=scores, data=st.data())
def test_properties(make: Any, s: list[float], data: st.DataObject) -> None:
    s_arr, y, w = _draw(data, s)
    w_before = w.copy()
    cal = make().fit(s_arr, y, sample_weight=w)
    assert_array_equal(w, w_before)  # sample_weight not modified
    grid = np.linspace(0, 1, 201)
    out = cal.predict(grid)
    assert np.all(np.isfinite(out))
    assert np.all((out >= 0) & (out <= 1))
    if isinstance(cal, IsotonicCalibrator | SIRCalibrator):
        assert np.all(np.diff(out) >= 0)
    if isinstance(cal, IsotonicCalibrator) and cal.rank_preserving and np.unique(cal.y_thresholds_).size > 1:
        inside = grid[(grid >= cal.X_thresholds_[0]) & (grid <= cal.X_thresholds_[-1])]
        assert np.all(np.diff(cal.predict(inside)) > 0)
    # Integer weights equal repeated rows; all-ones weights equal None.
    rep = np.repeat(np.arange(s_arr.shape[0]), w.astype(int))
    repeated = make().fit(s_arr[rep], y[rep])
    assert_allclose(repeated.predict(grid), out, rtol=0, atol=1e-9)
    ones = make().fit(s_arr[rep], y[rep], sample_weight=np.ones(rep.shape[0]))
    assert_array_equal(ones.predict(grid), repeated.predict(grid))
    # Refitting on other data replaces the fit.
    cal.fit(1.0 - s_arr, y, sample_weight=w)
    assert_array_equal(cal.predict(grid), make().fit(1.0 - s_arr, y, sample_weight=w).predict(grid))


# --------------------------------------------------------------------------------------------------
# Saving, the estimator API, errors


@pytest.mark.parametrize("make", ALL)
def test_save_load_round_trip_is_bit_for_bit(make: Any, tmp_path: Any) -> None:
    s, y = make_data(1500, 2, decimals=3)
    cal = make().fit(s, y)
    path = tmp_path / "model.json"
    cal.save(path)
    loaded = gpucal.load(path)
    t = np.random.default_rng(0).random(5000)
    assert type(loaded) is type(cal)
    assert_array_equal(loaded.predict(t), cal.predict(t))
    assert clone(cal).get_params() == cal.get_params()


@pytest.mark.parametrize(
    ("make", "key"),
    [
        (lambda: IsotonicCalibrator(), "X_thresholds_"),
        (lambda: HistogramCalibrator(), "bin_edges_"),
        (lambda: SIRCalibrator(n_bins=5), "X_knots_"),
        (lambda: ScalingBinningCalibrator(), "bin_edges_"),
    ],
)
def test_load_rejects_unsorted_state(make: Any, key: str, tmp_path: Any) -> None:
    s, y = make_data(500, 1)
    path = tmp_path / "model.json"
    make().fit(s, y).save(path)
    document = json.loads(path.read_text())
    document["state"][key] = document["state"][key][::-1]
    path.write_text(json.dumps(document))
    with pytest.raises(gpucal.ModelFileError, match="inconsistent fitted state"):
        gpucal.load(path)


def test_dataframe_in_series_out() -> None:
    s, y = make_data(300)
    frame = pd.DataFrame({"p": s}, index=np.arange(300) + 1000)
    cal = IsotonicCalibrator(score_col="p").fit(frame, y)
    out = cal.predict(frame)
    assert isinstance(out, pd.Series)
    assert_array_equal(out.index, frame.index)
    assert_array_equal(out.to_numpy(), cal.predict(s))


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: IsotonicCalibrator(clip_eps=0.5), ValueError, "'clip_eps' parameter of IsotonicCalibrator"),
        (lambda: IsotonicCalibrator(rank_preserving=1), ValueError, "'rank_preserving' parameter"),
        (
            lambda: HistogramCalibrator(n_bins=0),
            ValueError,
            r"'n_bins' parameter .* must be an int in \[1, inf\)",
        ),
        (lambda: HistogramCalibrator(strategy="width"), ValueError, "'strategy' parameter"),
        (lambda: SIRCalibrator(n_bins=2.5), TypeError, "'n_bins' parameter of SIRCalibrator"),
        (lambda: ScalingBinningCalibrator(split_fraction=1.0), ValueError, "'split_fraction' parameter"),
    ],
)
def test_bad_parameters(make: Any, error: type[Exception], match: str) -> None:
    s, y = make_data(100)
    with pytest.raises(error, match=match):
        make().fit(s, y)


@pytest.mark.parametrize("make", ALL)
def test_bad_inputs(make: Any) -> None:
    s, y = make_data(100)
    with pytest.raises(ValueError, match="outside"):
        make().fit(s + 1.0, y)
    with pytest.raises(ValueError, match="labels must be in"):
        make().fit(s, y * 2)
    with pytest.raises(ValueError, match="different numbers of rows"):
        make().fit(s, y[:-1])
    with pytest.raises(ValueError, match="weights must be >= 0"):
        make().fit(s, y, sample_weight=-np.ones(100))
    with pytest.raises(ValueError, match="NaN or infinite"):
        make().fit(s, y).predict(np.array([0.5, np.nan]))


def test_scaling_binning_one_class_raises() -> None:
    s, _ = make_data(100)
    with pytest.raises(ValueError, match="no positive labels"):
        ScalingBinningCalibrator().fit(s, np.zeros(100))


def test_split_fraction_too_small_raises() -> None:
    s, y = make_data(5)
    with pytest.raises(ValueError, match="left one part"):
        ScalingBinningCalibrator(split_fraction=1e-9).fit(s, y)


def test_equal_mass_edge_between_neighbouring_floats_keeps_rows_in_their_bins(tmp_path) -> None:
    # Regression (review): the midpoint of two neighbouring floats rounded up to the upper bin's score,
    # so the upper bin's rows were predicted with the lower bin's value, and the state failed to load.
    score = np.array([1 - 2**-53] * 5 + [1.0] * 5)
    y = np.array([0, 0, 1, 0, 1, 1, 1, 0, 1, 1], dtype=float)
    model = HistogramCalibrator(n_bins=2, strategy="quantile").fit(score, y)
    assert_allclose(model.predict(score), [0.4] * 5 + [0.8] * 5)
    model.save(tmp_path / "h.json")
    assert_array_equal(gpucal.load(tmp_path / "h.json").predict(score), model.predict(score))


@pytest.mark.parametrize("weighted", [False, True])
def test_score_table_fit_over_blocks_equals_the_sorted_walk(weighted: bool) -> None:
    """Isotonic and equal-mass histogram fits over uneven blocks (the distinct-score table merged by
    key) equal the one-block fit (the compiled walk over the sorted rows) up to the order of additions,
    ties closer than 1e-15 included."""
    p, y = make_data(3000, seed=5)
    p[::50] = p[::50] + 2e-16  # near-ties that pool with their neighbour
    w = np.random.default_rng(5).random(p.shape[0]) if weighted else None
    if w is not None:
        w[::13] = 0.0

    def rows_of(cuts: list[int]) -> Any:
        bounds = [0, *cuts, p.shape[0]]
        blocks = tuple(
            RowBlock({"X": p[a:b], "y": y[a:b], "sample_weight": None if w is None else w[a:b]})
            for a, b in itertools.pairwise(bounds)
        )
        return ScoreRows.of(LocalRows(blocks)).rows

    one, split = rows_of([]), rows_of([0, 1, 1234, 2000])  # an empty and a one-row block
    walk, table = isotonic_rows(one), isotonic_rows(split)
    for field in ("x_first", "x_last", "weight", "mean_x", "value"):
        assert_allclose(getattr(table, field), getattr(walk, field), rtol=1e-12)
    for a, b in zip(
        histogram_rows(one.map(probability_block, "probability"), 7, "quantile"),
        histogram_rows(split.map(probability_block, "probability"), 7, "quantile"),
        strict=True,
    ):
        assert_allclose(b, a, rtol=1e-12)


def test_the_pav_walks_inline_the_block_push():
    """``_push_block`` is inlined into every walk (a call per pushed group cost about 40% of a walk),
    so it never compiles on its own. The walks are compiled afresh, uncached, so the check holds
    whatever the cache holds."""
    rng = np.random.default_rng(0)
    p = rng.uniform(size=500)
    y = rng.binomial(1, p).astype(np.float64)
    w = rng.uniform(0.5, 2.0, size=500)
    xs, positives = _sorted.counting_sorts(p, y, np.ones(500))
    order, bounds = _sorted.sorted_runs(p)
    stats = np.array([[1.0, 0.0, 0.2, 0.2, 0.2], [1.0, 1.0, 0.5, 0.5, 0.5]])
    calls = (
        (pav._isotonic_counts, (xs, positives, pav.TIE_EPS)),
        (pav._isotonic_walk, (p, y, w, order, bounds[:-1], bounds[1:], pav.TIE_EPS)),
        (pav._pool_groups, (stats,)),
    )
    for caller, args in calls:
        fresh = numba.njit(caller.py_func)
        assert_array_equal(fresh(*args), caller(*args))
    assert pav._push_block.signatures == []


@pytest.mark.parametrize(
    "make",
    [
        lambda: SIRCalibrator(),
        lambda: HistogramCalibrator(n_bins=100, strategy="quantile"),
        lambda: ScalingBinningCalibrator(),
    ],
    ids=["sir", "histogram", "scaling_binning"],
)
@pytest.mark.parametrize("weight", [0.1, 1e-8, 3.0])
def test_constant_weights_give_the_unweighted_equal_mass_bins(make: Any, weight: float) -> None:
    """0.1 added 30 times is 2.9999999999999996: the weight below a bin edge read just under it, and
    the row fell into the bin below. Positions within 1e-11 of a whole number are that number."""
    rng = np.random.default_rng(0)
    p = np.sort(rng.uniform(0.01, 0.99, 300))
    y = (rng.random(300) < p).astype(np.float64)
    plain = make().fit(p, y).predict(p)
    weighted = make().fit(p, y, sample_weight=np.full(300, weight)).predict(p)
    assert_allclose(weighted, plain, rtol=0, atol=1e-14)
    ids = mass_bin_ids(p, np.full(300, weight), 100)
    assert_array_equal(ids, mass_bin_ids(p, None, 100))


def test_the_sweeps_bins_snap_as_mass_bin_ids_do() -> None:
    """ece_sweep's bins (from prefix sums) follow mass_bin_ids' rule, its snap included: with weights
    of 0.1 a bin edge read a hair low and its first row went to the bin before."""
    from gpucal.metrics.binned import _sweep_bins

    rng = np.random.default_rng(1)
    p = np.sort(rng.random(300))
    y = (rng.random(300) < p).astype(np.float64)
    rows = np.arange(300)

    def prefix(values: np.ndarray) -> np.ndarray:
        return np.concatenate([[0.0], np.cumsum(values)])

    w = np.full(300, 0.1)
    for n_bins in (3, 10, 30):
        weighted = _sweep_bins(
            n_bins, prefix(w)[rows], rows, float(w.sum()), 300, prefix(w), prefix(w * p), prefix(w * y)
        )
        ids = mass_bin_ids(p, w, n_bins)
        assert_allclose(weighted[:, 0], np.bincount(ids, weights=w, minlength=n_bins), rtol=1e-12)
