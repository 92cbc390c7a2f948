"""BBQ: equal to the paper's formulas computed row by row in numpy, model by model.

The oracle assigns the rows (not the distinct scores) to equal-mass bins by the rule of
``BBQCalibrator`` (the first distinct score whose middle of weight reaches ``b W / B`` starts bin b),
evaluates the BDeu evidence of each model from its bins' counts with ``scipy.special.gammaln`` and
averages the models' predictions point by point. netcal's ``BBQ`` scores models by BIC/AIC (see the
class Notes), so it is no reference for the values.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.special import gammaln

import gpucal
from gpucal.calibrators.bbq import MAX_BIN_COUNT, BBQCalibrator


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = np.round(rng.beta(0.8, 1.5, n), 2)  # ties
    y = (rng.random(n) < np.clip(1.3 * s**1.4, 0, 1)).astype(np.float64)
    return s, y


def oracle(s: np.ndarray, y: np.ndarray, w: np.ndarray, test: np.ndarray, spread: float = 10.0) -> np.ndarray:
    keep = w > 0
    s, y, w = s[keep], y[keep], w[keep]
    xs = np.unique(s)
    wk = np.array([w[s == x].sum() for x in xs])
    total = wk.sum()
    middle = np.cumsum(wk) - wk / 2
    root = total ** (1 / 3)
    counts = range(max(1, int(np.floor(root / spread))), int(np.ceil(root * spread)) + 1)
    log_ev, preds = [], []
    for n_bins in counts:
        starts = [
            int(np.argmax(middle >= b * total / n_bins)) if (middle >= b * total / n_bins).any() else len(xs)
            for b in range(n_bins)
        ]
        starts[0] = 0
        bins = [xs[a:b] for a, b in zip(starts, [*starts[1:], len(xs)], strict=True) if b > a]
        edges = [(bins[i][-1] + bins[i + 1][0]) / 2 for i in range(len(bins) - 1)]
        lows, highs = [xs[0], *edges], [*edges, xs[-1]]
        a = 2.0 / n_bins
        total_ev, values = 0.0, []
        for b, lo, hi in zip(bins, lows, highs, strict=True):
            rows = np.isin(s, b)
            n, m = w[rows].sum(), (w * y)[rows].sum()
            c = (lo + hi) / 2
            al, be = a * c, a * (1 - c)
            total_ev += (
                gammaln(a)
                - gammaln(n + a)
                + gammaln(m + al)
                - gammaln(al)
                + gammaln(n - m + be)
                - gammaln(be)
            )
            values.append((m + al) / (n + a))
        log_ev.append(total_ev)
        preds.append(np.array(values)[np.searchsorted(edges, test, side="right")])
    post = np.exp(np.array(log_ev) - max(log_ev))
    return (post / post.sum()) @ np.array(preds)


@pytest.mark.parametrize("weighted", [False, True])
def test_equals_the_papers_formulas(weighted: bool) -> None:
    s, y = make_data(250, 0)
    w = np.random.default_rng(1).integers(0, 3, s.shape[0]).astype(np.float64) if weighted else np.ones(250)
    test = np.concatenate([np.linspace(0, 1, 201), s[:50]])
    cal = BBQCalibrator().fit(s, y, sample_weight=w if weighted else None)
    assert_allclose(cal.predict(test), oracle(s, y, w, test), atol=1e-12, rtol=0)
    assert_allclose(cal.posterior_.sum(), 1.0)
    if weighted:
        rows = np.repeat(np.arange(s.shape[0]), w.astype(np.int64))
        assert_allclose(BBQCalibrator().fit(s[rows], y[rows]).predict(test), cal.predict(test), atol=1e-12)


def test_logit_scores_and_catalogue() -> None:
    assert type(gpucal.make_calibrator("bbq")) is BBQCalibrator
    s, y = make_data(300, 2)
    s = np.clip(s, 0.01, 0.99)
    z = np.log(s / (1 - s))
    by_prob = BBQCalibrator().fit(s, y)
    by_logit = BBQCalibrator(score_kind="logit").fit(z, y)
    # The same bins; the edges and the prior's centres are midpoints on the logit scale instead.
    assert by_logit.posterior_.shape == by_prob.posterior_.shape
    assert_allclose(by_logit.predict(z), by_prob.predict(s), atol=0.05)


def test_one_class_is_defined_and_bad_input() -> None:
    s, _ = make_data(200, 3)
    cal = BBQCalibrator().fit(s, np.zeros(200))
    assert np.all(cal.predict(np.linspace(0, 1, 11)) < 0.1)
    with pytest.raises(ValueError, match=r"NaN|finite"):
        BBQCalibrator().fit(np.array([0.2, np.nan]), np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="'spread' parameter"):
        BBQCalibrator(spread=0.5).fit(s, np.zeros(200))


def test_bin_counts_stop_at_a_cap_that_reads_the_total_weight_alone() -> None:
    """The total weight N sets the bin counts; scaled-up weights asked for tens of thousands of models
    (and one weight of 1e300 for a range no array holds). The counts stop at MAX_BIN_COUNT, a cap on N
    alone: unit weights keep every count of [N^(1/3)/C, C N^(1/3)], ties or not, and integer weights
    fit as their repeated rows."""
    s, y = make_data(300, 5)
    for weight in (np.full(300, 1e8), np.where(np.arange(300) == 7, 1e300, 1.0)):
        scaled = BBQCalibrator().fit(s, y, sample_weight=weight)
        assert 1 <= scaled.posterior_.shape[0] <= MAX_BIN_COUNT
        assert np.isfinite(scaled.predict(s)).all()
    # Weights of 1e40 each (1.2e43 rows): every model's score overflowed, every prediction was NaN.
    with pytest.raises(ValueError, match="sample_weight: BBQ reads weights as counts of rows"):
        BBQCalibrator().fit(s, y, sample_weight=np.full(300, 1e40))
    tied = np.round(s, 1)  # 11 distinct scores, far fewer than the 67 counts searched
    assert BBQCalibrator().fit(tied, y).posterior_.shape[0] == math.ceil(10.0 * 300 ** (1 / 3))
    weighted = BBQCalibrator(spread=2.0).fit(tied, y, sample_weight=np.full(300, 8.0))
    repeated = BBQCalibrator(spread=2.0).fit(np.repeat(tied, 8), np.repeat(y, 8))
    assert weighted.posterior_.shape == repeated.posterior_.shape
    assert_allclose(weighted.predict(s), repeated.predict(s), rtol=1e-12, atol=1e-15)


def test_round_trip_and_hostile_state(tmp_path) -> None:  # type: ignore[no-untyped-def]
    s, y = make_data(300, 4)
    cal = BBQCalibrator().fit(s, y)
    cal.save(tmp_path / "m.json")
    test = np.linspace(0, 1, 101)
    np.testing.assert_array_equal(gpucal.load(tmp_path / "m.json").predict(test), cal.predict(test))
    document = json.loads((tmp_path / "m.json").read_text())
    document["state"]["values_"] = document["state"]["values_"][:-1]
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(gpucal.ModelFileError, match="values_"):
        gpucal.load(tmp_path / "bad.json")


def test_step_map_is_searchsorted_on_the_right_in_both_twins() -> None:
    from gpucal.calibrators.bbq import _step_map_cpu
    from gpucal.kernels.jit import parallel_twins_only

    rng = np.random.default_rng(8)
    edges = np.unique(rng.uniform(size=300))
    values = rng.uniform(size=edges.shape[0] + 1)
    s = np.concatenate([rng.uniform(-0.1, 1.1, size=5000), edges, [np.nan, -np.inf, np.inf]])
    want = values[np.searchsorted(edges, s, side="right")]
    np.testing.assert_array_equal(_step_map_cpu(s, edges, values, np.empty(s.shape[0])), want)
    with parallel_twins_only():
        np.testing.assert_array_equal(_step_map_cpu(s, edges, values, np.empty(s.shape[0])), want)
    cal = BBQCalibrator().fit(rng.uniform(size=2000), (rng.uniform(size=2000) < 0.3).astype(float))
    probe = np.concatenate([cal.edges_, rng.uniform(size=100)])
    np.testing.assert_array_equal(
        cal.predict(probe), cal.values_[np.searchsorted(cal.edges_, probe, side="right")]
    )
