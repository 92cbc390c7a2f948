"""ENIR: the path equal to netcal's near-isotonic path, the average equal to a numpy oracle.

netcal 1.4's ``NearIsotonicRegression`` (its models stepped through ``get_next_model``) is the
reference for the solution path on distinct scores: its block values at each breakpoint equal
``enir_knot_map``'s to 1e-9. Its ``ENIR`` averages differently (see the class Notes), so the oracle of
the average is numpy on netcal's path: BIC row by row, relative likelihood weights, ``np.interp``.
probcal 0.4's ``ENIRCalibrator`` is the reference for the average where its definition agrees, and
its own fits pin the documented differences where it does not.
"""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gpucal
from gpucal.calibrators.enir import LOG_EPS, ENIRCalibrator


def make_data(n: int, seed: int, decimals: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = rng.beta(0.8, 1.5, n)
    if decimals is not None:
        s = np.round(s, decimals)  # ties
    y = (rng.random(n) < np.clip(1.3 * s**1.4, 0, 1)).astype(np.float64)
    return s, y


def netcal_path(s: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    """netcal's path models (the quick start at lambda = 0 included), each evaluated at the sorted scores."""
    nir = pytest.importorskip("netcal.binning")
    order = np.argsort(s)
    model = nir.NearIsotonicRegression(quick_init=True)
    with contextlib.redirect_stdout(io.StringIO()):
        model.fit(s[order], y[order].astype(np.int64))
    fits = []
    while model is not None:
        fits.append(model.transform(s[order]))
        model = model.get_next_model()
    return fits


@pytest.mark.parametrize(("n", "seed"), [(40, 0), (40, 7), (80, 41)])
def test_path_and_average_equal_netcal_path_and_the_oracle(n: int, seed: int) -> None:
    # Data on which no three blocks meet at one lambda (netcal's merge mishandles those; see the Notes).
    s, y = make_data(n, seed)
    fits = netcal_path(s, y)
    ys = y[np.argsort(s)]
    bic = []
    for fit in fits:
        p = np.clip(fit, LOG_EPS, 1 - LOG_EPS)
        k = np.count_nonzero(np.diff(fit)) + 1
        bic.append(-2 * np.sum(ys * np.log(p) + (1 - ys) * np.log(1 - p)) + k * np.log(n))
    weights = np.exp(-(np.array(bic) - min(bic)) / 2)
    weights /= weights.sum()
    cal = ENIRCalibrator().fit(s, y)
    assert cal.model_weights_.shape[0] == len(fits)
    assert_allclose(cal.model_weights_, weights, atol=1e-9)
    test = np.concatenate([np.linspace(0, 1, 201), s[:20]])
    expected = np.interp(test, np.sort(s), weights @ np.array(fits))
    assert_allclose(cal.predict(test), expected, atol=1e-9, rtol=0)


def stepwise_enir(s: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The oracle of the whole path: numpy steps over all blocks, every model's BIC evaluated.

    Unit weights and distinct scores; each step moves every block by its slope to the earliest
    meeting and fuses the neighbours that meet there (within a relative 1e-9).
    """
    order = np.argsort(s)
    ys = y[order]
    keep = np.concatenate([[True], ys[1:] != ys[:-1]])  # equal neighbours fused from the start
    size = np.diff(np.append(np.flatnonzero(keep), ys.shape[0])).astype(np.float64)
    value = ys[keep]
    fits, bics = [], []
    while True:
        fit = np.repeat(value, size.astype(np.int64))
        p = np.clip(fit, LOG_EPS, 1 - LOG_EPS)
        deviance = -2 * np.sum(ys * np.log(p) + (1 - ys) * np.log1p(-p))
        fits.append(fit)
        bics.append(deviance + value.shape[0] * np.log(ys.shape[0]))
        down = np.concatenate([[0.0], value[:-1] > value[1:], [0.0]])
        slope = (down[:-1] - down[1:]) / size
        closing = slope[:-1] - slope[1:]
        meet = np.full(closing.shape, np.inf)
        meet[closing != 0] = np.maximum((value[1:] - value[:-1])[closing != 0] / closing[closing != 0], 0)
        if not np.isfinite(meet).any():
            break
        step = meet.min()
        value = value + slope * step
        group = np.cumsum(np.concatenate([[True], meet > step * (1 + 1e-9)])) - 1
        size, value = np.bincount(group, size), np.bincount(group, size * value) / np.bincount(group, size)
    weights = np.exp(-(np.array(bics) - min(bics)) / 2)
    return weights / weights.sum(), weights @ np.array(fits) / weights.sum()


@pytest.mark.parametrize("seed", [0, 1])
def test_event_path_and_skipped_models_equal_the_stepwise_oracle(seed: int) -> None:
    # 1e4 rows: a path of 430-470 models, most of them with weights below e^-800 (not evaluated).
    s, y = make_data(10_000, seed)
    weights, fit = stepwise_enir(s, y)
    cal = ENIRCalibrator().fit(s, y)
    assert cal.model_weights_.shape == weights.shape
    assert np.count_nonzero(weights) < weights.shape[0] // 2
    assert_allclose(cal.model_weights_, weights, atol=1e-12, rtol=0)
    assert_allclose(cal.values_, fit, atol=1e-12, rtol=0)


def test_blocks_meeting_at_once_fuse_into_one() -> None:
    # Labels 1, 0, 1, 0: every neighbour pair meets at lambda = 1/2 at 0.5, so the path has two
    # models, the data (4 blocks) and the constant 0.5 (1 block).
    s, y = np.array([0.1, 0.2, 0.3, 0.4]), np.array([1.0, 0.0, 1.0, 0.0])
    eps = LOG_EPS
    bic = np.array([-2 * 4 * np.log1p(-eps) + 4 * np.log(4), -2 * 4 * np.log(0.5) + np.log(4)])
    weights = np.exp(-(bic - bic.min()) / 2) / np.exp(-(bic - bic.min()) / 2).sum()
    cal = ENIRCalibrator().fit(s, y)
    assert_allclose(cal.model_weights_, weights, rtol=1e-12)
    assert_allclose(cal.values_, weights[0] * y + weights[1] * 0.5, rtol=1e-12)


def per_score_rows(means: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, ...]:
    """Scores 0.05, 0.15, ... with the weighted label means ``means``: a positive and a negative row each."""
    s = np.repeat(np.arange(means.shape[0]) / 10 + 0.05, 2)
    w = np.column_stack([weight * means, weight * (1 - means)]).ravel()
    return s, np.tile([1.0, 0.0], means.shape[0]), w


def test_average_equals_probcal_where_the_definitions_agree() -> None:
    # Distinct weighted means at distinct scores, no two meetings at one lambda: the same path models,
    # the same BIC weights. Between the scores probcal predicts steps (the left score's value), this
    # class the line through the two (see the Notes).
    import probcal

    rng = np.random.default_rng(3)
    s = np.repeat(np.linspace(0.05, 0.95, 30), 20)
    y = (rng.random(s.shape[0]) < s).astype(np.float64)
    w = rng.uniform(0.5, 2.0, s.shape[0])
    reference = probcal.ENIRCalibrator(max_solutions=None).fit(s, y, sample_weight=w)
    cal = ENIRCalibrator().fit(s, y, sample_weight=w)
    levels = reference.predict_proba(cal.knots_)
    assert cal.model_weights_.shape[0] == reference.path_lambdas_.shape[0] > 5
    assert_allclose(cal.model_weights_, reference.model_weights_, atol=1e-12, rtol=0)
    assert_allclose(cal.values_, levels, atol=1e-12, rtol=0)
    middle = (cal.knots_[:-1] + cal.knots_[1:]) / 2
    assert_allclose(reference.predict_proba(middle), levels[:-1], atol=1e-12, rtol=0)
    assert_allclose(cal.predict(middle), (levels[:-1] + levels[1:]) / 2, atol=1e-12, rtol=0)


def test_average_against_probcal_where_the_definitions_differ() -> None:
    import probcal

    # Three pairs of neighbours meet at lambda = 2: probcal records each meeting as a path model of its
    # own (three copies of one solution), this class one. Dropping probcal's copies gives this map.
    s, y, w = per_score_rows(np.array([0.6, 0.8, 0.2, 0.4, 0.8, 0.4, 0.6, 0.8]), np.full(8, 10.0))
    reference = probcal.ENIRCalibrator(max_solutions=None).fit(s, y, sample_weight=w)
    cal = ENIRCalibrator().fit(s, y, sample_weight=w)
    lam = reference.path_lambdas_
    assert_allclose(lam, [0, 2, 2, 2, 4], rtol=1e-12)
    first = np.r_[True, ~np.isclose(lam[1:], lam[:-1], rtol=1e-9, atol=0)]
    once = reference.model_weights_[first] / reference.model_weights_[first].sum()
    assert_allclose(cal.model_weights_, once, rtol=1e-12)
    assert_allclose(cal.values_, once @ reference.path_solutions_[first], atol=1e-12, rtol=0)
    assert np.abs(cal.values_ - reference.predict_proba(cal.knots_)).max() > 0.01
    # Equal neighbours at lambda = 0 (0.8 at the second and third scores): this class fuses them
    # into one block from the start, probcal lets them part along its path. This map is probcal's on
    # the data with the two scores pooled into one.
    s, y, w = per_score_rows(np.array([0.3, 0.8, 0.8, 0.2, 0.6]), np.full(5, 10.0))
    cal = ENIRCalibrator().fit(s, y, sample_weight=w)
    pooled = probcal.ENIRCalibrator(max_solutions=None).fit(
        *per_score_rows(np.array([0.3, 0.8, 0.2, 0.6]), np.array([10.0, 20.0, 10.0, 10.0]))
    )
    assert_allclose(cal.values_, pooled.predict_proba(pooled.scores_[[0, 1, 1, 2, 3]]), atol=1e-12)
    unpooled = probcal.ENIRCalibrator(max_solutions=None).fit(s, y, sample_weight=w)
    assert np.abs(cal.values_ - unpooled.predict_proba(cal.knots_)).max() > 1e-4


def test_weights_are_repeated_rows_and_output_is_near_monotone() -> None:
    s, y = make_data(400, 1, decimals=2)
    w = np.random.default_rng(2).integers(0, 3, s.shape[0]).astype(np.float64)
    cal = ENIRCalibrator().fit(s, y, sample_weight=w)
    rows = np.repeat(np.arange(s.shape[0]), w.astype(np.int64))
    test = np.linspace(0, 1, 301)
    assert_allclose(ENIRCalibrator().fit(s[rows], y[rows]).predict(test), cal.predict(test), atol=1e-12)
    p = cal.predict(test)
    assert np.all((p >= 0) & (p <= 1))
    assert p[-1] > p[0] + 0.5
    # Near-isotonic: what the average loses to decreasing steps is small against its rise.
    assert -np.sum(np.minimum(np.diff(p), 0)) < 0.1 * (p.max() - p.min())
    assert type(gpucal.make_calibrator("enir")) is ENIRCalibrator
    assert gpucal.catalogue.METHODS["enir"] is ENIRCalibrator  # a name AutoCalibrator's candidates take


def test_bad_input() -> None:
    s, _ = make_data(100, 3)
    with pytest.raises(ValueError, match="no positive labels"):
        ENIRCalibrator().fit(s, np.zeros(100))
    with pytest.raises(ValueError, match="no negative labels"):
        ENIRCalibrator().fit(s, np.ones(100))
    with pytest.raises(ValueError, match=r"NaN|finite"):
        ENIRCalibrator().fit(np.array([0.2, np.nan]), np.array([0.0, 1.0]))


def test_round_trip_and_hostile_state(tmp_path) -> None:  # type: ignore[no-untyped-def]
    s, y = make_data(200, 4, decimals=2)
    cal = ENIRCalibrator().fit(s, y)
    cal.save(tmp_path / "m.json")
    test = np.linspace(0, 1, 101)
    np.testing.assert_array_equal(gpucal.load(tmp_path / "m.json").predict(test), cal.predict(test))
    document = json.loads((tmp_path / "m.json").read_text())
    for key, bad, match in [
        ("values_", document["state"]["values_"][:-1], "values_"),
        ("knots_", document["state"]["knots_"][::-1], "knots_"),
    ]:
        hostile = json.loads(json.dumps(document))
        hostile["state"][key] = bad
        (tmp_path / "bad.json").write_text(json.dumps(hostile))
        with pytest.raises(gpucal.ModelFileError, match=match):
            gpucal.load(tmp_path / "bad.json")
