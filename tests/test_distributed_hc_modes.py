"""HeterogeneousCalibrator modes "forest" and "boosted" and the "scale" map on dask (issue 6).

The reference is ``HeterogeneousCalibrator.fit`` on the concatenated rows: tree structure equal exactly,
node maps and predictions to 1e-9 relative to ``max(|v|, 1)``. The forest's bootstrap counts are checked
against an independent computation: SplitMix64 written with Python integers and scipy's Poisson quantile.
"""

from __future__ import annotations

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from scipy.stats import poisson

from gpucal.hc import HeterogeneousCalibrator
from gpucal.rows.draws import poisson_one, row_uniforms
from gpucal.rows.streamed import STREAM_KEY
from tests.test_distributed_hc import _assert_close, _ctr, _dask

N_ROWS = 3_000
STRUCTURE = ("node_feature", "node_child_base", "child_table", "tree_start")
SMALL = {"max_depth": 3, "min_leaf_size": 80.0, "n_bins": 16}
MASK = (1 << 64) - 1


@pytest.fixture(scope="module")
def ctr() -> tuple[pd.DataFrame, pd.Series, np.ndarray]:
    return _ctr(N_ROWS, 7)


def _splitmix_uniform(seed: int, stream: int, row: int) -> float:
    """``row_uniforms`` for one row, with Python integers (the module docstring's formula)."""

    def mix(z: int) -> int:
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    gamma = 0x9E3779B97F4A7C15
    key = mix((mix((seed + gamma) & MASK) + stream) & MASK)
    return (mix((key + (row + 1) * gamma) & MASK) >> 11) * 2.0**-53


def test_row_draws_are_splitmix64_and_poisson_quantiles() -> None:
    rows = np.array([0, 1, 2, 17, 123_456_789, 2**40 + 3])
    expected = [_splitmix_uniform(5, 3, int(r)) for r in rows]
    np.testing.assert_array_equal(row_uniforms(5, 3, rows), expected)
    # Seeds are any non-negative int: the formula's arithmetic is modulo 2**64, so 2**64 + 5 is 5.
    np.testing.assert_array_equal(row_uniforms(2**64 + 5, 3, rows), expected)
    u = row_uniforms(1, 0, np.arange(200_000))
    np.testing.assert_array_equal(poisson_one(u), poisson.ppf(u, 1.0))
    counts = poisson_one(u)
    assert abs(counts.mean() - 1.0) < 0.01
    assert abs(counts.var() - 1.0) < 0.015


def _assert_same_fit(two: HeterogeneousCalibrator, one: HeterogeneousCalibrator) -> None:
    e1, e2 = one.ensemble_, two.ensemble_
    assert e1.n_nodes >= 5 * e1.n_trees  # grown trees, not lone roots
    for name in STRUCTURE:
        np.testing.assert_array_equal(getattr(e2, name), getattr(e1, name), err_msg=name)
    _assert_close(e2.node_weight, e1.node_weight)
    _assert_close(two.node_params_, one.node_params_)
    assert len(two.history_) == len(one.history_)
    for h2, h1 in zip(two.history_, one.history_, strict=True):
        assert {k: v for k, v in h2.items() if "loss" not in k} == {
            k: v for k, v in h1.items() if "loss" not in k
        }
        for key in ("loss_before", "loss_after"):
            if key in h1:
                assert h2[key] == pytest.approx(h1[key], rel=1e-9)


@pytest.mark.parametrize(("n_parts", "weighted", "local_map"), [(4, False, "platt"), (16, True, "scale")])
def test_forest_on_dask_is_the_single_machine_forest(client, ctr, n_parts, weighted, local_map) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    sw = w if weighted else None
    params = {**SMALL, "mode": "forest", "n_trees": 3, "local_map": local_map, "seed": 4}
    one = HeterogeneousCalibrator(**params).fit(X, y, sample_weight=sw)
    dX, dy, dw = _dask(X, y, sw, n_parts)
    two = HeterogeneousCalibrator(**params).fit(dX, dy, sample_weight=dw)
    _assert_same_fit(two, one)
    _assert_close(two.predict(dX).compute().to_numpy(), np.asarray(one.predict(X)))
    # Each tree's root holds the tree rows weighted by that tree's Poisson(1) counts of their positions.
    grows = np.flatnonzero(np.random.default_rng(4).random(N_ROWS) < 0.5)
    base = np.ones(N_ROWS) if sw is None else sw
    for t in range(3):
        counts = poisson.ppf([_splitmix_uniform(4, t, int(r)) for r in grows], 1.0)
        root = one.ensemble_.tree_start[t]
        assert one.ensemble_.node_weight[root] == pytest.approx((base[grows] * counts).sum(), rel=1e-12)


@pytest.mark.parametrize(
    ("n_parts", "weighted", "extra"),
    [
        (4, True, {}),
        (3, False, {"validation_fraction": 0.0, "n_trees": 3}),
        (4, False, {"local_map": "scale"}),
    ],
)
def test_boosted_on_dask_is_the_single_machine_chain(client, ctr, n_parts, weighted, extra) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    sw = w if weighted else None
    params = {**SMALL, "mode": "boosted", "n_trees": 4, "seed": 2, **extra}
    one = HeterogeneousCalibrator(**params).fit(X, y, sample_weight=sw)
    assert len(one.history_) >= 2  # a second tree was grown on the chain's output and judged
    dX, dy, dw = _dask(X, y, sw, n_parts)
    two = HeterogeneousCalibrator(**params).fit(dX, dy, sample_weight=dw)
    _assert_same_fit(two, one)
    _assert_close(two.predict(dX).compute().to_numpy(), np.asarray(one.predict(X)))


def test_boosted_with_tree_data_reads_the_tree_rows_scores(client, ctr) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    X_tree, y_tree, w_tree = _ctr(2_000, 13)
    params = {**SMALL, "mode": "boosted", "n_trees": 3, "validation_fraction": 0.0}
    one = HeterogeneousCalibrator(**params).fit(
        X, y, w, X_tree=X_tree, y_tree=y_tree, sample_weight_tree=w_tree
    )
    dX, dy, dw = _dask(X, y, w, 3)
    dX_tree, dy_tree, dw_tree = _dask(X_tree, y_tree, w_tree, 2)
    two = HeterogeneousCalibrator(**params).fit(
        dX, dy, dw, X_tree=dX_tree, y_tree=dy_tree, sample_weight_tree=dw_tree
    )
    _assert_same_fit(two, one)
    with pytest.raises(KeyError, match="X_tree: score column 'score' not found"):
        HeterogeneousCalibrator(**params).fit(
            dX, dy, X_tree=dd.from_pandas(X_tree.drop(columns="score"), npartitions=2), y_tree=dy_tree
        )


@pytest.mark.parametrize("params", [{"mode": "forest", "n_trees": 3}, {"mode": "boosted", "n_trees": 3}])
def test_streamed_partitions_fit_the_single_machine_model(client, ctr, params) -> None:  # type: ignore[no-untyped-def]
    """Partitions read again by every pass (``STREAM_KEY``) fit what held ones fit: one machine's model."""
    X, y, w = ctr
    params = {**SMALL, **params, "seed": 2}
    one = HeterogeneousCalibrator(**params).fit(X, y, sample_weight=w)
    dX, dy, dw = _dask(X, y, w, 4)
    with dask.config.set({STREAM_KEY: True}):
        two = HeterogeneousCalibrator(**params).fit(dX, dy, sample_weight=dw)
    _assert_same_fit(two, one)
