"""Issue 16's metrics on dask partitions equal their one-machine values (``gpucal.rows``; real LocalCluster).

Only the order of floating-point additions differs, so the tolerance is 1e-12 relative. Scores are
rounded, so tied scores fall in different partitions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

dd = pytest.importorskip("dask.dataframe")
pytest.importorskip("distributed")

from gpucal import metrics  # noqa: E402

RTOL = 1e-12


def make_frame(n: int = 2000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p = np.round(rng.beta(0.8, 1.5, n), 3)
    z = rng.integers(0, 4, n)
    y = (rng.random(n) < np.clip(p * (0.7 + 0.2 * z), 0, 1)).astype(np.float64)
    w = rng.random(n) * 2.0
    w[rng.random(n) < 0.05] = 0.0
    return pd.DataFrame(
        {
            "y": y,
            "p": p,
            "w": w,
            "z": z,
            "s": np.array(["a", "b", "c", "d"], dtype=object)[z],
            "x": rng.normal(size=n),
        }
    )


FRAME = make_frame()

SCALARS: list[tuple[str, Callable[..., Any]]] = [
    ("ecce", metrics.ecce),
    ("ecce_sigma", metrics.ecce_sigma),
    ("ecce_pvalue", metrics.ecce_pvalue),
    ("smooth_ece", metrics.smooth_ece),
    ("ece_debiased", metrics.ece_debiased),
    ("ici", metrics.ici),
    ("e50", metrics.e50),
    ("e90", metrics.e90),
    ("emax", metrics.emax),
]


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize(("name", "metric"), SCALARS)
def test_scalar_metrics_on_dask_equal_one_machine(
    client: Any, name: str, metric: Callable[..., Any], weighted: bool
) -> None:
    parts = dd.from_pandas(FRAME, npartitions=5)
    local = metric(FRAME.y, FRAME.p, sample_weight=FRAME.w if weighted else None)
    distributed = metric(parts.y, parts.p, sample_weight=parts.w if weighted else None)
    assert distributed == pytest.approx(local, rel=RTOL, abs=1e-15), name


@pytest.mark.parametrize("weighted", [False, True])
def test_multicalibration_error_on_dask_equals_one_machine(client: Any, weighted: bool) -> None:
    parts = dd.from_pandas(FRAME, npartitions=4)
    kwargs: dict[str, Any] = {"numerical_columns": ["x"], "min_samples_per_segment": 20}
    local = metrics.multicalibration_error(
        FRAME.y, FRAME.p, FRAME[["s", "z", "x"]], sample_weight=FRAME.w if weighted else None, **kwargs
    )
    distributed = metrics.multicalibration_error(
        parts.y, parts.p, parts[["s", "z", "x"]], sample_weight=parts.w if weighted else None, **kwargs
    )
    for field in ("mce", "mce_sigma", "mce_pvalue", "mde", "global_ecce"):
        assert getattr(distributed, field) == pytest.approx(getattr(local, field), rel=RTOL), field
    pd.testing.assert_frame_equal(distributed.segments, local.segments, rtol=RTOL)


def test_dask_bad_weights_name_the_argument(client: Any) -> None:
    frame = FRAME.assign(w=-1.0)
    parts = dd.from_pandas(frame, npartitions=3)
    with pytest.raises(ValueError, match="sample_weight"):
        metrics.ecce(parts.y, parts.p, sample_weight=parts.w)


def test_smooth_and_corp_curves_on_dask_equal_one_machine(client: Any) -> None:
    from gpucal.plot import corp_curve, smooth_reliability_curve

    parts = dd.from_pandas(FRAME, npartitions=4)
    local = smooth_reliability_curve(FRAME.y, FRAME.p, sample_weight=FRAME.w, n_bootstrap=8, seed=2)
    distributed = smooth_reliability_curve(parts.y, parts.p, sample_weight=parts.w, n_bootstrap=8, seed=2)
    np.testing.assert_allclose(distributed.observed, local.observed, rtol=RTOL)
    np.testing.assert_allclose(distributed.band_low, local.band_low, rtol=1e-10)
    np.testing.assert_allclose(distributed.band_high, local.band_high, rtol=1e-10)
    corp_local = corp_curve(FRAME.y, FRAME.p, sample_weight=FRAME.w)
    corp_distributed = corp_curve(parts.y, parts.p, sample_weight=parts.w)
    np.testing.assert_allclose(corp_distributed.value, corp_local.value, rtol=RTOL)
    assert corp_distributed.mcb == pytest.approx(corp_local.mcb, rel=1e-10)
