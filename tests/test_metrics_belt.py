"""The calibration belt: equal to the ``calibration-belt`` package and statsmodels, its null distribution
to a convolution oracle, its band to a brute-force search of the confidence region; weights, dask, errors.

``calibration-belt`` installs a top-level ``calibration.py`` that another test dependency's
``calibration`` package shadows, so it is loaded from its file.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import warnings
from types import ModuleType

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose
from scipy import integrate, special, stats

from gpucal.metrics import calibration_belt
from gpucal.metrics.belt import belt_statistic_cdf
from gpucal.plot import plot_calibration_belt


def reference() -> ModuleType:
    try:
        path = importlib.metadata.distribution("calibration-belt").locate_file("calibration.py")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("calibration-belt is not installed")
    spec = importlib.util.spec_from_file_location("calibration_belt_reference", str(path))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_data(
    n: int, seed: int, quadratic: float = 0.15, cubic: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(-0.5, 1.5, n)
    truth = special.expit(0.2 + 0.9 * z + quadratic * z**2 + cubic * z**3)
    return (rng.random(n) < truth).astype(np.float64), special.expit(z)


def region_extremes(y: np.ndarray, p: np.ndarray, coef: np.ndarray, drop: float, x: np.ndarray) -> tuple:
    """Brute force for a degree-1 fit: walk 1000 rays out of the estimate to the region's edge
    (bisection on the log-likelihood, concave along each ray) and read min / max of ``x @ beta``."""
    z = special.logit(p)
    design = np.column_stack([np.ones_like(z), z])

    def loglik(beta: np.ndarray) -> np.ndarray:  # beta: (k, 2)
        eta = design @ beta.T
        return (y[:, None] * eta - np.logaddexp(0.0, eta)).sum(axis=0)

    floor = loglik(coef[None, :])[0] - drop / 2.0
    angles = np.linspace(0.0, 2.0 * np.pi, 1000, endpoint=False)
    rays = np.column_stack([np.cos(angles), np.sin(angles)])
    low, high = np.zeros(angles.shape[0]), np.ones(angles.shape[0])
    while np.any(loglik(coef + high[:, None] * rays) >= floor):
        high *= 2.0
    for _ in range(40):
        mid = (low + high) / 2.0
        inside = loglik(coef + mid[:, None] * rays) >= floor
        low, high = np.where(inside, mid, low), np.where(inside, high, mid)
    edge = coef + low[:, None] * rays
    values = x @ edge.T
    return special.expit(values.min(axis=1)), special.expit(values.max(axis=1))


def test_selection_statistic_and_fit_equal_the_references() -> None:
    sm = pytest.importorskip("statsmodels.api")
    ref = reference()
    for quadratic, cubic, degree in [(0.15, 0.0, 2), (0.0, 0.2, 3)]:
        y, p = make_data(3000, 1, quadratic, cubic)
        belt = calibration_belt(y, p, grid=3)
        cb = ref.CalibrationBelt(y, p)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # its formula data is a dict
            m, model = cb.forward_select(0.95)
            statistic, p_value = cb.test(0.95)
        assert belt.degree == m == degree
        assert_allclose(belt.coefficients, model.params.to_numpy(), rtol=1e-8)
        assert_allclose(belt.statistic, statistic, rtol=1e-9)
        assert_allclose(belt.p_value, p_value, rtol=1e-7, atol=1e-15)
        z = special.logit(p)
        glm = sm.GLM(y, z[:, None] ** np.arange(degree + 1), family=sm.families.Binomial()).fit()
        assert_allclose(belt.coefficients, glm.params, rtol=1e-8)


def test_band_equals_the_reference_package() -> None:
    ref = reference()
    y, p = make_data(1500, 2)
    cb = ref.CalibrationBelt(y, p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its formula data is a dict; trust-constr warns on its Hessian
        bounds = cb.calculate_boundaries(0.95, size=6)
    ours = calibration_belt(y, p, confidence_levels=(0.95,), grid=bounds[:, 0])
    # trust-constr stops at tol 1e-5 and clips its probabilities at 1e-5
    assert_allclose(ours.lower[0], bounds[:, 1], atol=3e-4)
    assert_allclose(ours.upper[0], bounds[:, 2], atol=3e-4)


def test_band_equals_a_brute_force_search_of_the_region() -> None:
    y, p = make_data(400, 3, quadratic=0.0)
    grid = np.array([0.02, 0.1, 0.3, 0.6, 0.9, 0.99])
    belt = calibration_belt(y, p, grid=grid)
    assert belt.degree == 1
    x = np.column_stack([np.ones_like(grid), special.logit(grid)])
    for i, level in enumerate(belt.confidence_levels):
        drop = stats.chi2.ppf(level, 2)  # F_1 is the chi-square with 2 degrees of freedom
        low, high = region_extremes(y, p, belt.coefficients, drop, x)
        # 1000 rays: the polygon's vertices fall short of the edge by 5e-6 of the region's radius
        assert_allclose(belt.lower[i], low, rtol=5e-5)
        assert_allclose(belt.upper[i], high, rtol=5e-5)
    assert np.all(belt.lower[1] < belt.lower[0])
    assert np.all(belt.upper[1] > belt.upper[0])


def test_steep_fit_on_scores_near_zero_gives_nested_bands() -> None:
    """Scores down to 1e-6 and labels certain above 0.83: a steep high-degree fit, where Newton on the
    boundary's equations needs its step control."""
    rng = np.random.default_rng(0)
    p = rng.beta(0.8, 1.5, 3000)
    y = (rng.random(3000) < np.clip(1.2 * p, 0, 1)).astype(np.float64)
    belt = calibration_belt(y, p, grid=20)
    assert belt.degree >= 3
    z = special.logit(belt.grid)
    fitted = special.expit(np.polynomial.polynomial.polyval(z, belt.coefficients))
    for i in range(2):
        assert np.all(belt.lower[i] <= fitted * (1 + 1e-12))
        assert np.all(fitted <= belt.upper[i] * (1 + 1e-12))
    assert np.all(belt.lower[1] <= belt.lower[0])
    assert np.all(belt.upper[0] <= belt.upper[1])


@pytest.mark.parametrize("degree", [2, 3, 4])
def test_null_distribution_is_the_convolution(degree: int) -> None:
    """F_m is chi2_2 plus (m - 1) chi2_1 variables each conditioned to exceed k: F_m = F_{m-1} * g."""
    q = 0.95
    k = stats.chi2.ppf(q, 1)
    for t in [(degree - 1) * k + 0.5, (degree - 1) * k + 4.0, 25.0]:

        def integrand(x: float, t: float = t) -> float:
            return stats.chi2.pdf(x, 1) / (1 - q) * belt_statistic_cdf(t - x, degree - 1, q)

        expected = integrate.quad(integrand, k, t, limit=200)[0]
        assert_allclose(belt_statistic_cdf(t, degree, q), expected, rtol=1e-6, atol=1e-9)
    assert belt_statistic_cdf((degree - 1) * k, degree, q) == 0.0
    assert_allclose(belt_statistic_cdf(200.0, degree, q), 1.0, atol=1e-9)


def test_integer_weights_equal_repeated_rows() -> None:
    y, p = make_data(600, 4)
    w = np.random.default_rng(5).integers(0, 4, y.shape[0]).astype(np.float64)
    rows = np.repeat(np.arange(y.shape[0]), w.astype(int))
    weighted = calibration_belt(y, p, sample_weight=w, grid=5)
    repeated = calibration_belt(y[rows], p[rows], grid=weighted.grid)
    assert weighted.degree == repeated.degree
    assert weighted.n == int((w > 0).sum())
    assert_allclose(weighted.statistic, repeated.statistic, rtol=1e-9)
    assert_allclose(weighted.lower, repeated.lower, rtol=1e-8)
    assert_allclose(weighted.upper, repeated.upper, rtol=1e-8)


@pytest.mark.slow  # a dask cluster (the client fixture) and a few rounds of tasks
def test_dask_equals_one_machine(client) -> None:  # type: ignore[no-untyped-def]
    dd = pytest.importorskip("dask.dataframe")
    y, p = make_data(2000, 6)
    w = np.random.default_rng(7).random(y.shape[0]) * 2.0
    frame = pd.DataFrame({"y": y, "p": p, "w": w})
    ddf = dd.from_pandas(frame, npartitions=3)
    one = calibration_belt(frame.y, frame.p, sample_weight=frame.w, grid=5)
    many = calibration_belt(ddf.y, ddf.p, sample_weight=ddf.w, grid=5)
    assert one.degree == many.degree
    assert_allclose(many.statistic, one.statistic, rtol=1e-9)
    assert_allclose(many.lower, one.lower, rtol=1e-9)
    assert_allclose(many.upper, one.upper, rtol=1e-9)


def test_bad_input_is_refused_by_name() -> None:
    y, p = make_data(200, 8)
    with pytest.raises(ValueError, match="one class"):
        calibration_belt(np.zeros(200), p)
    with pytest.raises(ValueError, match="same logit"):
        calibration_belt(y, np.full(200, 0.3))
    with pytest.raises(ValueError, match="y_prob"):
        calibration_belt(y, np.where(np.arange(200) == 3, np.nan, p))
    with pytest.raises(ValueError, match="separated"):
        calibration_belt((p > 0.5).astype(float), p)
    with pytest.raises(ValueError, match="max_degree"):
        calibration_belt(y, p, max_degree=5)
    with pytest.raises(ValueError, match="confidence_levels"):
        calibration_belt(y, p, confidence_levels=(0.8, 1.0))
    with pytest.raises(ValueError, match="grid"):
        calibration_belt(y, p, grid=[0.0, 0.5])
    # Weights read as repeated rows: normalised ones (or a few dozen rows' worth) failed inside SciPy.
    with pytest.raises(ValueError, match="these add up to 1, less than two rows"):
        calibration_belt(y, p, sample_weight=np.full(200, 1 / 200))
    with pytest.raises(ValueError, match="the confidence region has no finite bound on these rows"):
        calibration_belt(y, p, sample_weight=np.full(200, 0.05))


def test_plot_draws_one_band_per_level() -> None:
    plt = pytest.importorskip("matplotlib.pyplot")
    y, p = make_data(300, 9)
    belt = calibration_belt(y, p, grid=5)
    fig = plot_calibration_belt(y, p, belt=belt)
    assert len(fig.axes[0].collections) == 2
    assert f"degree {belt.degree}" in fig.axes[0].get_title()
    plt.close(fig)


def test_compressed_rows_equal_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1024 bins of 3000 rows: about three rows per bin, each bin's two Gauss points standing for them.
    from gpucal.metrics import belt

    y, p = make_data(3000, 9)
    w = np.random.default_rng(10).random(y.shape[0]) * 2.0
    monkeypatch.setattr(belt, "BELT_BINS", 1024)
    monkeypatch.setattr(belt, "RESOLUTION", 1.0)
    compressed = calibration_belt(y, p, sample_weight=w, grid=7)
    monkeypatch.setattr(belt, "RESOLUTION", 0.0)  # every fit redone on the rows
    rows = calibration_belt(y, p, sample_weight=w, grid=7)
    assert compressed.degree == rows.degree == 2
    assert_allclose(compressed.statistic, rows.statistic, rtol=1e-9)
    assert_allclose(compressed.coefficients, rows.coefficients, rtol=1e-9)
    assert_allclose(compressed.lower, rows.lower, rtol=1e-9)
    assert_allclose(compressed.upper, rows.upper, rtol=1e-9)
