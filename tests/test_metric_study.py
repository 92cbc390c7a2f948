"""The metric study's TCE by quadrature (benchmarks/metric_study.py) and one tiny cell of the study."""

import sys
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import metric_study

SETTINGS = {s.key: s for s in metric_study.SETTINGS}


def _beta_moment(a: float, b: float, k: int) -> float:
    """E[h^k] for h ~ Beta(a, b): prod_{i<k} (a + i) / (a + b + i)."""
    return float(np.prod([(a + i) / (a + b + i) for i in range(k)]))


def _closed_form_tce_square_link(a: float, b: float) -> tuple[float, float]:
    """TCE_2 and TCE_1 of g(c) = c^2: |c^2 - c| = c - c^2 on [0, 1], so both are sums of Beta moments."""
    m1, m2, m3, m4 = (_beta_moment(a, b, k) for k in (1, 2, 3, 4))
    return float(np.sqrt(m2 - 2 * m3 + m4)), m1 - m2


@pytest.mark.parametrize(("a", "b"), [(0.2, 0.7), (0.4, 0.7), (2.0, 5.0)])
def test_tce_quadrature_matches_beta_moments(a, b):
    tce2, tce1 = _closed_form_tce_square_link(a, b)
    link = [lambda c: c**2]
    assert_allclose(metric_study.tce_beta(a, b, link, p=2), tce2, rtol=1e-9)
    assert_allclose(metric_study.tce_beta(a, b, link, p=1), tce1, rtol=1e-9)


def test_tce_of_the_papers_first_setting_is_not_0_0868():
    # The paper prints TCE = 0.0868 for Beta(0.2, 0.7), g = c^2; quadrature gives 0.1215 (l2).
    refs = metric_study.setting_reference_errors(SETTINGS["s1"])
    assert round(refs["TCE_2"], 4) == 0.1215
    assert round(refs["TCE_1"], 4) == 0.0819
    assert abs(refs["TCE_2"] - metric_study.PAPER_TCE) > 0.03


@pytest.mark.parametrize("key", ["s1", "s3", "seg"])
def test_tce_quadrature_matches_monte_carlo(key):
    setting = SETTINGS[key]
    for p in (1.0, 2.0):
        # 1e6 draws: the Monte-Carlo relative error is about 1e-3; 5e-3 leaves room for unlucky seeds.
        assert_allclose(
            metric_study.monte_carlo_tce(setting, 1_000_000, seed=7, p=p),
            metric_study.setting_tce(setting, p),
            rtol=5e-3,
        )


def test_segment_setting_is_calibrated_in_the_score_alone():
    setting = SETTINGS["seg"]
    refs = metric_study.setting_reference_errors(setting)
    a, b = setting.a, setting.b
    # E|s_z h(1-h)| = mean|s| * E[h(1-h)] = mean|s| * ab / ((a+b)(a+b+1)).
    expected_tce1 = np.mean(np.abs(setting.slopes)) * a * b / ((a + b) * (a + b + 1))
    assert_allclose(refs["TCE_1"], expected_tce1, rtol=1e-9)
    assert_allclose(refs["segment"], expected_tce1, rtol=1e-9)
    assert refs["global"] < 1e-12
    h, y, z = setting.sample(1000, np.random.default_rng(0))
    assert h.min() >= 0.0
    assert h.max() <= 1.0
    assert set(np.unique(y)) <= {0.0, 1.0}
    assert set(np.unique(z)) == set(range(setting.n_segments))


def test_population_ece_is_below_tce_and_blind_to_cancelling_segments():
    refs = metric_study.setting_reference_errors(SETTINGS["s1"])
    # Binning averages c - c^2 inside a bin, so by Jensen the binned value sits just below TCE_2.
    assert refs["TCE_1"] < refs["ECE_pop"] < refs["TCE_2"]
    assert round(refs["ECE_pop"], 4) == 0.1213
    assert metric_study.population_ece(SETTINGS["seg"], 8) < 1e-12


def test_one_study_cell_runs_and_is_reproducible():
    setting = SETTINGS["seg"]
    kwargs = {"bins": (8, 256), "n_views": 5, "grid_views": 3, "seed": 3}
    first = metric_study.cell_values(setting, 400, 0, **kwargs)
    assert first == metric_study.cell_values(setting, 400, 0, **kwargs)
    # 256 bins of 400 rows hold fewer than MIN_ROWS_PER_BIN rows each: that cell is skipped.
    assert {row[:3] for row in first} == {
        ("ECE_sweep", 0, 0),
        ("MVCE", metric_study.MAIN_BINS, 5),
        ("ECE", 8, 0),
        ("MVCE", 8, 3),
        ("Field-ECE", 0, 0),
    }
    assert all(np.isfinite(v) and v >= 0.0 for *_, v in first)


@pytest.mark.slow
def test_quick_study_writes_report(tmp_path):
    pytest.importorskip("matplotlib")
    assert metric_study.main(["--quick", "--reps", "2", "--workers", "1", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "metric_study_quick.md").read_text()
    assert "0.1215" in report
    assert (tmp_path / "metric_study_quick_ebias_vs_n.png").stat().st_size > 0
    assert (tmp_path / "metric_study_quick_grid.png").stat().st_size > 0
