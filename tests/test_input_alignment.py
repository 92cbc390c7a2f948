"""pandas inputs of one call must share one index: never paired silently by position (issue 18).

The rule (``gpucal._validation.check_same_index``): when two or more of ``X``, ``y``, ``sample_weight``
(of a fit) or ``y_true``, ``y_prob``, ``sample_weight``, a field (of a metric) are pandas objects, their
indexes must be equal; the same labels in another order are refused too, not reordered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

import gpucal
from gpucal import metrics
from gpucal.calibrators import (
    BetaCalibrator,
    FeatureAwarePlattCalibrator,
    HistogramCalibrator,
    IsotonicCalibrator,
    PlattCalibrator,
    TemperatureCalibrator,
)
from gpucal.ccl.model import ClusteredCalibrator
from gpucal.hc.model import HeterogeneousCalibrator
from gpucal.mbct.model import MBCT

N = 300


def _data(seed: int = 0) -> tuple[pd.DataFrame, pd.Series]:
    rng = np.random.default_rng(seed)
    score = rng.uniform(0.02, 0.98, N)
    X = pd.DataFrame({"score": score, "site": rng.integers(0, 3, N)}, index=np.arange(N) * 2 + 100)
    y = pd.Series((rng.uniform(size=N) < score).astype(float), index=X.index)
    return X, y


ESTIMATORS: list[Callable[[], Any]] = [
    PlattCalibrator,
    IsotonicCalibrator,
    HistogramCalibrator,
    BetaCalibrator,
    TemperatureCalibrator,
    FeatureAwarePlattCalibrator,
    lambda: MBCT(max_trees=2),
    lambda: HeterogeneousCalibrator(max_depth=1),
    lambda: ClusteredCalibrator(n_clusters=2),
]
IDS = ["platt", "isotonic", "histogram", "beta", "temperature", "feature_platt", "mbct", "hc", "ccl"]


@pytest.mark.parametrize("make", ESTIMATORS, ids=IDS)
def test_fit_refuses_a_shuffled_y(make: Callable[[], Any]) -> None:
    """Issue 18: a shuffled ``y`` changed predictions by up to 0.62; now the fit names both indexes."""
    X, y = _data()
    shuffled = y.sample(frac=1.0, random_state=1)
    first = shuffled.index[0]
    with pytest.raises(
        ValueError, match=rf"X and y have different indexes .*X.index\[0\] = 100, y.index\[0\] = {first}"
    ):
        make().fit(X, shuffled)


@pytest.mark.parametrize("make", ESTIMATORS, ids=IDS)
def test_fit_refuses_labels_or_weights_of_one_column_frames(make: Callable[[], Any]) -> None:
    """The feature-aware fits failed with "'DataFrame' object has no attribute 'dtype'", and every fit
    on a pyarrow Table with "no attribute 'null_count'"."""
    import polars as pl
    import pyarrow as pa

    X, y = _data()
    estimator = make()
    if isinstance(estimator, ClusteredCalibrator):
        estimator.set_params(embedding_model=MBCT(max_trees=2).fit(X, y))
    for frame in (y.to_frame("y"), pl.DataFrame({"y": y.to_numpy()}), pa.table({"y": y.to_numpy()})):
        kind = type(frame).__name__
        with pytest.raises(ValueError, match=f"y: expected one column, got a {kind} of shape"):
            estimator.fit(X, frame)
        with pytest.raises(ValueError, match=f"sample_weight: expected one column, got a {kind} of shape"):
            estimator.fit(X, y, sample_weight=frame)


@pytest.mark.parametrize("make", ESTIMATORS, ids=IDS)
def test_fit_refuses_misaligned_sample_weight(make: Callable[[], Any]) -> None:
    X, y = _data()
    weight = pd.Series(1.0, index=X.index[::-1])
    with pytest.raises(ValueError, match="X and sample_weight have different indexes"):
        make().fit(X, y, sample_weight=weight)


def test_fit_pairs_aligned_or_unindexed_inputs_as_before() -> None:
    X, y = _data()
    expected = PlattCalibrator().fit(X, y.to_numpy()).predict(X)
    pd.testing.assert_series_equal(PlattCalibrator().fit(X, y).predict(X), expected)
    # Without an index on one side, rows pair by position (numpy, polars, pyarrow carry none).
    renamed = y.set_axis(np.arange(N))
    pd.testing.assert_series_equal(PlattCalibrator().fit(X["score"].to_numpy(), renamed).predict(X), expected)


def test_fit_refuses_a_different_length_index() -> None:
    X, y = _data()
    with pytest.raises(ValueError, match="X and y have indexes of different lengths"):
        PlattCalibrator().fit(X, y.iloc[:-1])


def test_hc_tree_rows_are_checked_on_their_own() -> None:
    X, y = _data()
    X_tree, y_tree = _data(seed=1)
    HeterogeneousCalibrator(max_depth=1).fit(
        X, y, X_tree=X_tree.reset_index(drop=True), y_tree=y_tree.to_numpy()
    )
    with pytest.raises(ValueError, match="X_tree and y_tree have different indexes"):
        HeterogeneousCalibrator(max_depth=1).fit(X, y, X_tree=X_tree, y_tree=y_tree.iloc[::-1])


METRICS: list[tuple[str, Callable[..., Any]]] = [
    ("log_loss", lambda y, p, w: metrics.log_loss(y, p, sample_weight=w)),
    ("brier", lambda y, p, w: metrics.brier(y, p, sample_weight=w)),
    ("ece", lambda y, p, w: metrics.ece(y, p, sample_weight=w)),
    ("roc_auc", lambda y, p, w: metrics.roc_auc(y, p, sample_weight=w)),
    ("mvce", lambda y, p, w: metrics.mvce(y, p, sample_weight=w)),
    ("tce", lambda y, p, w: metrics.tce(y.clip(0.01, 0.99), p, sample_weight=w)),
]


@pytest.mark.parametrize(("name", "metric"), METRICS, ids=[m[0] for m in METRICS])
def test_metrics_refuse_misaligned_pandas_inputs(name: str, metric: Callable[..., Any]) -> None:
    """Issue 18: ``log_loss`` was 0.47 aligned and 0.85 on a shuffled ``y_true``."""
    X, y = _data()
    p = X["score"]
    shuffled = y.sample(frac=1.0, random_state=1)
    with pytest.raises(ValueError, match="have different indexes"):
        metric(shuffled, p, None)
    with pytest.raises(ValueError, match="and sample_weight have different indexes"):
        metric(y, p, pd.Series(1.0, index=p.index[::-1]))
    assert metric(y, p, None) == metric(y.to_numpy(), p, None)


def test_field_metrics_check_the_field_index() -> None:
    X, y = _data()
    p, site = X["score"], X["site"]
    for grouped in (metrics.field_ece, metrics.field_rce, metrics.gc_n, metrics.cece):
        with pytest.raises(ValueError, match=r"y_true and (field|clusters) have different indexes"):
            grouped(y, p, site.iloc[::-1])
    with pytest.raises(ValueError, match=r"y_true and features\['site'\] have different indexes"):
        metrics.segment_report(y, p, X[["site"]].iloc[::-1])
    assert metrics.field_ece(y, p, site) == metrics.field_ece(y, p, site.to_numpy())


def test_evaluate_takes_a_dataframe_of_fields() -> None:
    """Issue 18: ``evaluate(fields=<DataFrame>)`` raised "The truth value of a DataFrame is ambiguous"."""
    X, y = _data()
    table = gpucal.evaluate(y, {"raw": X["score"]}, fields=X[["site"]])
    expected = gpucal.evaluate(y, {"raw": X["score"]}, fields={"site": X["site"]})
    pd.testing.assert_frame_equal(table, expected)
    assert table.loc["field_ece[site]", "raw"] == metrics.field_ece(y, X["score"], X["site"])
    # evaluate checks the fields' index up front, whatever metrics are included.
    with pytest.raises(ValueError, match="y_true and fields have different indexes"):
        gpucal.evaluate(y, {"raw": X["score"]}, fields=X[["site"]].iloc[::-1])


def test_dask_partitions_are_checked_like_whole_inputs() -> None:
    """Dask inputs that are not co-aligned are paired partition by partition: the same index rule holds."""
    dd = pytest.importorskip("dask.dataframe")
    X, y = _data()
    p = X["score"]
    aligned = metrics.log_loss(dd.from_pandas(y, npartitions=2), dd.from_pandas(p, npartitions=2))
    assert aligned == pytest.approx(metrics.log_loss(y, p), rel=1e-12)
    moved = p.set_axis(p.index + 10_000)
    with pytest.raises(ValueError, match="y_true and y_prob have different indexes"):
        metrics.log_loss(dd.from_pandas(y, npartitions=2), dd.from_pandas(moved, npartitions=2))


@pytest.mark.parametrize("make", [PlattCalibrator, lambda: MBCT(max_trees=2)], ids=["platt", "mbct"])
def test_dask_fit_partitions_are_checked_like_whole_inputs(make: Callable[[], Any]) -> None:
    dd = pytest.importorskip("dask.dataframe")
    X, y = _data()
    make().fit(dd.from_pandas(X, npartitions=2), dd.from_pandas(y, npartitions=2))
    moved = y.set_axis(y.index + 10_000)
    with pytest.raises(ValueError, match="X and y have different indexes"):
        make().fit(dd.from_pandas(X, npartitions=2), dd.from_pandas(moved, npartitions=2))


@pytest.mark.parametrize("make", [PlattCalibrator, lambda: MBCT(max_trees=2)], ids=["platt", "mbct"])
def test_dask_columns_of_one_frame_changed_apart_are_still_checked(make: Callable[[], Any]) -> None:
    """X filtered, or y reordered inside its partitions, against columns of the same dask frame: both
    are co-aligned with X, but not X's columns, so their rows are not joined by index label (which
    would drop y's extra rows, or put them back in order, silently): the index rule refuses them."""
    dd = pytest.importorskip("dask.dataframe", reason="dask collections need the dask extra")
    X, y = _data()
    frame = dd.from_pandas(pd.concat([X, y.rename("label")], axis=1), npartitions=2)
    columns = list(X.columns)
    make().fit(frame[columns], frame.label)
    with pytest.raises(ValueError, match="X and y have"):
        make().fit(frame[columns].map_partitions(lambda part: part.iloc[::2]), frame.label)
    with pytest.raises(ValueError, match="X and y have different indexes"):
        make().fit(frame[columns], frame.label.map_partitions(lambda part: part.iloc[::-1]))


def test_a_dict_of_series_is_checked_like_a_frame() -> None:
    """A dict's Series carry their index: it is checked against y's (and against each other), where
    the dict's columns used to be taken as arrays and paired with y by position."""
    X, y = _data()
    shuffled = X["score"].sample(frac=1.0, random_state=0)
    with pytest.raises(ValueError, match="X and y have different indexes"):
        PlattCalibrator().fit({"score": shuffled}, y)
    PlattCalibrator().fit({"score": X["score"]}, y)
    columns = {"score": X["score"], "site": X["site"].sample(frac=1.0, random_state=1)}
    with pytest.raises(ValueError, match=r"X\['score'\] and X\['site'\] have different indexes"):
        FeatureAwarePlattCalibrator(feature_cols=["site"]).fit(columns, y)
