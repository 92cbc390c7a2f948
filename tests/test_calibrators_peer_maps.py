"""Venn-Abers and centred isotonic calibration: equal to their reference libraries and to an oracle.

References: probcal 0.4's ``VennAbersCalibrator`` / ``CrossVennAbersCalibrator`` and the ``venn-abers``
package (the fast IVAP tables of both, the same arithmetic: equal to 1e-12, observed 0); the naive
IVAP (two scikit-learn isotonic fits per test score, 1e-12); probcal's centred isotonic regression.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose
from sklearn.isotonic import IsotonicRegression

import gpucal
from gpucal.calibrators import venn_abers as venn_abers_module
from gpucal.calibrators.centered_isotonic import CenteredIsotonicCalibrator
from gpucal.calibrators.venn_abers import VennAbersCalibrator, venn_abers_folds

ATOL = 1e-12


def make_data(n: int, seed: int, *, decimals: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = rng.beta(0.8, 1.5, n)
    if decimals is not None:
        s = np.round(s, decimals)
    y = (rng.random(n) < np.clip(1.3 * s**1.4, 0, 1)).astype(np.float64)
    return s, y


def test_names_in_the_catalogue() -> None:
    assert type(gpucal.make_calibrator("venn_abers")) is VennAbersCalibrator
    assert type(gpucal.make_calibrator("centered_isotonic")) is CenteredIsotonicCalibrator


# --------------------------------------------------------------------------------------------------
# Venn-Abers


@pytest.mark.parametrize("decimals", [None, 2], ids=["distinct", "ties"])
def test_ivap_equals_probcal_and_venn_abers(decimals: int | None) -> None:
    from probcal.vennabers import VennAbersCalibrator as ProbcalIVAP
    from venn_abers import VennAbers

    s, y = make_data(3000, 1, decimals=decimals)
    test = np.concatenate([np.linspace(0, 1, 401), s[:200]])
    if decimals is not None:
        test = np.round(test, decimals)
    cal = VennAbersCalibrator().fit(s, y)
    ref = ProbcalIVAP().fit(s, y)
    assert_allclose(cal.predict_interval(test), ref.predict_interval(test), atol=ATOL, rtol=0)
    assert_allclose(cal.predict(test), ref.predict_proba(test), atol=ATOL, rtol=0)
    va = VennAbers().fit(p_cal=np.column_stack([1 - s, s]), y_cal=y)
    merged, pairs = va.predict_proba(p_test=np.column_stack([1 - test, test]))
    assert_allclose(cal.predict_interval(test), pairs, atol=ATOL, rtol=0)
    assert_allclose(cal.predict(test), merged[:, 1], atol=ATOL, rtol=0)


def test_ivap_equals_two_isotonic_fits_per_test_score() -> None:
    """The naive IVAP: the test score added with label 0, then 1, and scikit-learn's isotonic fit read."""
    s, y = make_data(80, 2, decimals=1)
    w = np.random.default_rng(3).uniform(0.5, 2.0, 80)
    test = np.round(np.linspace(-0.05, 1.05, 23), 1)
    pairs = VennAbersCalibrator().fit(s, y, sample_weight=w).predict_interval(test)
    for q, pair in zip(test, pairs, strict=True):
        naive = [
            IsotonicRegression(out_of_bounds="clip")
            .fit(np.append(s, q), np.append(y, label), sample_weight=np.append(w, 1.0))
            .predict([q])[0]
            for label in (0.0, 1.0)
        ]
        assert_allclose(pair, naive, atol=ATOL, rtol=0)


def test_weights_equal_repeated_rows_and_probcal() -> None:
    from probcal.vennabers import VennAbersCalibrator as ProbcalIVAP

    s, y = make_data(1500, 4, decimals=3)
    w = np.random.default_rng(5).integers(0, 4, s.shape[0]).astype(float)
    rows = np.repeat(np.arange(s.shape[0]), w.astype(int))
    test = np.linspace(0, 1, 301)
    weighted = VennAbersCalibrator().fit(s, y, sample_weight=w)
    repeated = VennAbersCalibrator().fit(s[rows], y[rows])
    assert_allclose(weighted.predict_interval(test), repeated.predict_interval(test), atol=ATOL, rtol=0)
    kept = w > 0  # probcal refuses zero weights; zero-weight rows are dropped here
    ref = ProbcalIVAP().fit(s[kept], y[kept], sample_weight=w[kept])
    assert_allclose(weighted.predict_interval(test), ref.predict_interval(test), atol=ATOL, rtol=0)


def test_cvap_equals_probcal_on_the_same_folds(monkeypatch: pytest.MonkeyPatch) -> None:
    import probcal.vennabers as probcal_va

    s, y = make_data(4000, 6, decimals=3)
    folds = venn_abers_folds(s.shape[0], 5, 7)
    monkeypatch.setattr(probcal_va, "stratified_folds", lambda y, cv, seed: folds)
    ref = probcal_va.CrossVennAbersCalibrator(cv=5).fit(s, y)
    cal = VennAbersCalibrator(n_folds=5, random_state=7).fit(s, y)
    test = np.concatenate([np.linspace(0, 1, 301), s[:300]])  # between and at calibration scores
    assert_allclose(cal.predict(test), ref.predict_proba(test), atol=ATOL, rtol=0)
    assert_allclose(cal.predict_interval(test), ref.predict_interval(test), atol=ATOL, rtol=0)
    assert cal.fold_sizes_.shape == (5,)
    # Each fold's IVAP is the inductive fit on the other folds' rows.
    for k in range(5):
        ivap = VennAbersCalibrator().fit(s[folds != k], y[folds != k])
        start = int(cal.fold_sizes_[:k].sum())
        assert_allclose(cal.scores_[start : start + cal.fold_sizes_[k]], ivap.scores_)
        assert_allclose(cal.F1_[start + k : start + k + cal.fold_sizes_[k] + 1], ivap.F1_)
    # The folds fitted in threads (as on large data) give the same tables.
    monkeypatch.setattr(venn_abers_module, "PARALLEL_FOLD_KEYS", 1)
    monkeypatch.setattr(venn_abers_module, "thread_count", lambda: 3)
    threaded = VennAbersCalibrator(n_folds=5, random_state=7).fit(s, y)
    for name in ("scores_", "F0_", "F1_", "fold_sizes_"):
        np.testing.assert_array_equal(getattr(threaded, name), getattr(cal, name))


def test_interval_properties_and_frames() -> None:
    s, y = make_data(500, 8)
    frame = pd.DataFrame({"score": s}, index=np.arange(500) * 3)
    cal = VennAbersCalibrator().fit(frame, pd.Series(y, index=frame.index))
    pairs = cal.predict_interval(frame)
    assert pairs.shape == (500, 2)
    assert np.all(pairs[:, 0] <= pairs[:, 1])
    out = cal.predict(frame)
    assert isinstance(out, pd.Series)
    assert out.index.equals(frame.index)
    assert np.all((pairs[:, 0] <= out.to_numpy()) & (out.to_numpy() <= pairs[:, 1]))
    assert np.all(np.diff(cal.F0_) >= 0)
    assert np.all(np.diff(cal.F1_) >= 0)


def test_one_class_is_a_documented_result() -> None:
    s = np.linspace(0.1, 0.9, 9)
    cal = VennAbersCalibrator().fit(s, np.zeros(9))
    pairs = cal.predict_interval(np.array([0.05, 0.5, 0.95]))
    assert_allclose(pairs[:, 0], 0.0)
    assert_allclose(pairs[:, 1], [1 / 10, 1 / 6, 1.0])  # 1 / (1 + weight of the rows at scores >= s)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_folds": 1}, "'n_folds' parameter of VennAbersCalibrator must be an int in"),
        ({"random_state": -1}, "'random_state' parameter"),
    ],
)
def test_bad_parameters(kwargs: dict, match: str) -> None:
    s, y = make_data(50, 0)
    with pytest.raises(ValueError, match=match):
        VennAbersCalibrator(**kwargs).fit(s, y)


@pytest.mark.parametrize(
    ("score", "match"),
    [(np.array([0.2, np.nan, 0.4]), "NaN|finite"), (np.array([0.2, 1.5, 0.4]), r"\[0, 1\]")],
)
def test_bad_scores(score: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        VennAbersCalibrator().fit(score, np.array([0.0, 1.0, 1.0]))


def test_weights_lost_in_the_sums_are_refused() -> None:
    """A weight below the float spacing of the sum before it makes a zero gap in the cumulative
    weights, which the hulls' slopes divide by: a clear error, not numba's ZeroDivisionError."""
    s = np.array([0.1, 0.4, 0.6, 0.9])
    y = np.array([0.0, 1.0, 0.0, 1.0])
    VennAbersCalibrator().fit(s, y, sample_weight=[1e15, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="lost in the sum of the weights before it"):
        VennAbersCalibrator().fit(s, y, sample_weight=[1e17, 1.0, 1.0, 1.0])


def test_a_fold_without_rows_is_an_error() -> None:
    with pytest.raises(ValueError, match="fold"):
        VennAbersCalibrator(n_folds=2).fit(np.array([0.5]), np.array([1.0]))


def _saved(cal: VennAbersCalibrator, tmp_path) -> dict:  # type: ignore[no-untyped-def]
    cal.save(tmp_path / "m.json")
    return json.loads((tmp_path / "m.json").read_text())


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda st: st.update(fold_sizes_=[1000]), "fold_sizes_|entries"),
        (lambda st: st.update(F1_=[2.0] * len(st["F1_"])), r"\[0, 1\]"),
        (lambda st: st.update(F0_=st["F0_"][::-1]), "non-decreasing|F0_ <= F1_"),
        (lambda st: st.update(scores_=st["scores_"][::-1]), "strictly increasing"),
        (lambda st: st.update(fold_sizes_=[0, len(st["scores_"])]), "positive sizes"),
    ],
)
def test_hostile_state_is_refused(change, match, tmp_path) -> None:  # type: ignore[no-untyped-def]
    s, y = make_data(300, 9)
    document = _saved(VennAbersCalibrator().fit(s, y), tmp_path)
    change(document["state"])
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(gpucal.ModelFileError, match=match):
        gpucal.load(tmp_path / "bad.json")


def test_cross_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    s, y = make_data(600, 10)
    cal = VennAbersCalibrator(n_folds=3).fit(s, y)
    cal.save(tmp_path / "m.json")
    loaded = gpucal.load(tmp_path / "m.json")
    test = np.linspace(0, 1, 101)
    np.testing.assert_array_equal(loaded.predict(test), cal.predict(test))
    np.testing.assert_array_equal(loaded.predict_interval(test), cal.predict_interval(test))


# --------------------------------------------------------------------------------------------------
# Centred isotonic regression


@pytest.mark.parametrize(
    ("n", "decimals", "weighted"), [(3000, None, False), (5000, 3, True), (400, 2, False)]
)
def test_cir_equals_probcal(n: int, decimals: int | None, weighted: bool) -> None:
    from probcal.isotonic import CenteredIsotonicCalibrator as ProbcalCIR

    s, y = make_data(n, 11, decimals=decimals)
    w = np.random.default_rng(12).uniform(0.5, 2.0, n) if weighted else np.ones(n)
    test = np.concatenate([np.linspace(0, 1, 601), s[:300]])
    ref = ProbcalCIR().fit(s, y, sample_weight=w)
    sample_weight = w if weighted else None
    cal = CenteredIsotonicCalibrator(interior_strict=False).fit(s, y, sample_weight=sample_weight)
    assert_allclose(cal.predict(test), ref.predict_proba(test), atol=ATOL, rtol=0)
    assert_allclose(cal.X_knots_, ref.block_center_s_, atol=ATOL, rtol=0)
    # The default pools probcal's adjacent blocks of equal value inside (0, 1): one knot for each run.
    strict = CenteredIsotonicCalibrator().fit(s, y, sample_weight=sample_weight)
    means = ref.block_mean_
    runs = np.concatenate([[True], (np.diff(means) != 0) | (means[1:] <= 0) | (means[1:] >= 1)])
    assert_allclose(strict.y_knots_, means[runs], atol=ATOL, rtol=0)
    assert strict.X_knots_.shape[0] == int(runs.sum()) < means.shape[0] + (n == 5000)


def test_cir_pools_interior_flat_stretches_and_keeps_them_at_zero_and_one() -> None:
    """The oracle by hand: groups at 0.1 .. 0.6 with means 0, 0, 1/2, 1/2, 1, 1."""
    s = np.array([0.1, 0.2, 0.3, 0.3, 0.4, 0.4, 0.5, 0.6])
    y = np.array([0, 0, 0, 1, 1, 0, 1, 1], dtype=float)
    cal = CenteredIsotonicCalibrator().fit(s, y)
    assert_allclose(cal.X_knots_, [0.1, 0.2, 0.35, 0.5, 0.6])
    assert_allclose(cal.y_knots_, [0.0, 0.0, 0.5, 1.0, 1.0])
    assert_allclose(cal.predict(np.array([0.05, 0.15, 0.275, 0.425, 0.7])), [0.0, 0.0, 0.25, 0.75, 1.0])


def test_cir_weights_equal_repeated_rows_and_strictly_increasing() -> None:
    s, y = make_data(2000, 13, decimals=3)
    w = np.random.default_rng(14).integers(0, 4, s.shape[0]).astype(float)
    rows = np.repeat(np.arange(s.shape[0]), w.astype(int))
    weighted = CenteredIsotonicCalibrator().fit(s, y, sample_weight=w)
    repeated = CenteredIsotonicCalibrator().fit(s[rows], y[rows])
    assert_allclose(weighted.X_knots_, repeated.X_knots_, atol=ATOL)
    assert_allclose(weighted.y_knots_, repeated.y_knots_, atol=ATOL)
    inside = (weighted.y_knots_[1:] > 0) & (weighted.y_knots_[:-1] < 1)
    assert np.all(np.diff(weighted.y_knots_)[inside] > 0)


def test_cir_one_class_is_constant() -> None:
    s = np.linspace(0.1, 0.9, 9)
    cal = CenteredIsotonicCalibrator().fit(s, np.ones(9))
    assert_allclose(cal.predict(np.linspace(0, 1, 11)), 1.0)


def test_cir_bad_input() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        CenteredIsotonicCalibrator().fit(np.array([0.2, -0.5]), np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="all weights are zero"):
        CenteredIsotonicCalibrator().fit(
            np.array([0.2, 0.5]), np.array([0.0, 1.0]), sample_weight=np.zeros(2)
        )
