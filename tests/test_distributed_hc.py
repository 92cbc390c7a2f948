"""HeterogeneousCalibrator on dask DataFrames (issue 6): one machine's tree and node maps, sums added.

The reference is ``HeterogeneousCalibrator.fit`` on the concatenated rows. Tree structure (features,
child tables, code maps) must be equal exactly, node maps, node weights and predictions to 1e-9
relative to ``max(|v|, 1)`` (sums are added in another order). Partitions are pandas on a
``distributed.LocalCluster`` of threads.
"""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from scipy.special import expit, logit

from gpucal.datasets import make_ctr
from gpucal.hc import HeterogeneousCalibrator

RTOL = 1e-9
N_ROWS = 6_000
STRUCTURE = ("node_feature", "node_child_base", "child_table", "tree_start")
SMALL = {"max_depth": 3, "min_leaf_size": 100.0, "n_bins": 16}


def _ctr(n: int, seed: int) -> tuple[pd.DataFrame, pd.Series, np.ndarray]:
    """Categorical fields (one as strings) and a numeric one; labels; positive weights."""
    df = make_ctr(n, "mixed", seed=seed)
    X = df[["score", "region", "user_segment", "device"]].copy()
    X["region"] = "r" + X["region"].astype(str)
    X["p_noisy"] = df["p_true"] * np.exp(np.random.default_rng(seed + 1).normal(0.0, 0.3, n))
    w = np.random.default_rng(seed + 2).random(n) * 2.0
    return X, df["label"].astype(np.float64), w


@pytest.fixture(scope="module")
def ctr() -> tuple[pd.DataFrame, pd.Series, np.ndarray]:
    return _ctr(N_ROWS, 3)


def _dask(X: pd.DataFrame, y: pd.Series, w: np.ndarray | None, n_parts: int) -> tuple:
    dw = None if w is None else dd.from_pandas(pd.Series(w, index=X.index), npartitions=n_parts)
    return dd.from_pandas(X, npartitions=n_parts), dd.from_pandas(y, npartitions=n_parts), dw


def _assert_close(actual: np.ndarray, expected: np.ndarray) -> None:
    scale = np.maximum(np.abs(expected), 1.0)
    assert np.max(np.abs(actual - expected) / scale, initial=0.0) <= RTOL


def _assert_same_fit(two: HeterogeneousCalibrator, one: HeterogeneousCalibrator) -> None:
    e1, e2 = one.ensemble_, two.ensemble_
    assert e1.n_nodes >= 5  # a grown tree, not a lone root, is compared
    assert two.encoder_.to_dict() == one.encoder_.to_dict()
    for name in STRUCTURE:
        np.testing.assert_array_equal(getattr(e2, name), getattr(e1, name), err_msg=name)
    for a, b in zip(e2.code_maps, e1.code_maps, strict=True):
        np.testing.assert_array_equal(a, b)
    _assert_close(e2.node_weight, e1.node_weight)
    _assert_close(e2.node_value, e1.node_value)
    _assert_close(two.node_params_, one.node_params_)
    assert two.history_ == one.history_


@pytest.mark.parametrize(
    ("local_map", "n_parts", "weighted"),
    [("platt", 4, False), ("platt", 3, True), ("constant", 2, True), ("beta", 3, False)],
)
def test_dask_fit_with_a_tree_fraction_is_the_single_machine_fit(
    client, ctr, local_map, n_parts, weighted
) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    sw = w if weighted else None
    params = {**SMALL, "local_map": local_map, "tree_fraction": 0.4, "seed": 5}
    one = HeterogeneousCalibrator(**params).fit(X, y, sample_weight=sw)
    dX, dy, dw = _dask(X, y, sw, n_parts)
    two = HeterogeneousCalibrator(**params).fit(dX, dy, sample_weight=dw)
    _assert_same_fit(two, one)
    # The root holds the tree rows: those the seeded draw of one machine gives the tree.
    grow = np.random.default_rng(5).random(N_ROWS) < 0.4
    assert two.ensemble_.node_weight[0] == pytest.approx((w if weighted else np.ones(N_ROWS))[grow].sum())
    predicted = two.predict(dX)
    assert isinstance(predicted, dd.Series)
    _assert_close(predicted.compute().to_numpy(), np.asarray(one.predict(X)))


@pytest.mark.parametrize("weighted", [False, True])
def test_dask_fit_with_tree_data_is_the_single_machine_fit(client, ctr, weighted) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    X_tree, y_tree, w_tree = _ctr(4_000, 11)
    sw, sw_tree = (w, w_tree) if weighted else (None, None)
    one = HeterogeneousCalibrator(**SMALL).fit(
        X, y, sw, X_tree=X_tree, y_tree=y_tree, sample_weight_tree=sw_tree
    )
    dX, dy, dw = _dask(X, y, sw, 3)
    dX_tree, dy_tree, dw_tree = _dask(X_tree, y_tree, sw_tree, 2)
    two = HeterogeneousCalibrator(**SMALL).fit(
        dX, dy, dw, X_tree=dX_tree, y_tree=dy_tree, sample_weight_tree=dw_tree
    )
    _assert_same_fit(two, one)
    _assert_close(two.predict(dX).compute().to_numpy(), np.asarray(one.predict(X)))


def test_dask_fit_with_crosses_is_the_single_machine_fit(client) -> None:  # type: ignore[no-untyped-def]
    """Crosses chosen by "auto": the same pair kept, the same cross codes, the same tree."""
    rng = np.random.default_rng(4)
    n = 4_000
    X = pd.DataFrame({"score": rng.beta(2.0, 3.0, n), "site": rng.choice(np.array(list("abcde")), n)})
    X["device"], X["hour"] = rng.integers(0, 4, n), rng.integers(0, 6, n)
    effect = np.random.default_rng(100).normal(0.0, 1.5, (4, 6))[X["device"], X["hour"]]
    y = pd.Series((rng.random(n) < expit(logit(X["score"]) + effect)).astype(np.float64))
    w = rng.random(n) * 2.0
    params = {**SMALL, "interactions": "auto", "categorical_cols": ["device", "hour"]}
    one = HeterogeneousCalibrator(**params).fit(X, y, sample_weight=w)
    two = HeterogeneousCalibrator(**params).fit(*_dask(X, y, w, 3))
    assert one.interactions_ == [["device", "hour"]]
    assert two.interactions_ == one.interactions_
    _assert_same_fit(two, one)
    dX = dd.from_pandas(X, npartitions=3)
    _assert_close(two.predict(dX).compute().to_numpy(), np.asarray(one.predict(X)))


def test_dask_fit_checks_the_whole_data(client, ctr) -> None:  # type: ignore[no-untyped-def]
    X, y, _ = ctr
    dX, dy, _ = _dask(X, pd.Series(np.zeros(len(X)), index=X.index), None, 2)
    with pytest.raises(ValueError, match="y: no positive labels"):
        HeterogeneousCalibrator().fit(dX, dy)
    dX, dy, _ = _dask(X, y, None, 2)
    with pytest.raises(TypeError, match="X_tree, y_tree: not dask collections"):
        HeterogeneousCalibrator().fit(dX, dy, X_tree=X, y_tree=y)
    with pytest.raises(ValueError, match="leaves no rows on one side"):
        HeterogeneousCalibrator(tree_fraction=1e-9).fit(dX, dy)
