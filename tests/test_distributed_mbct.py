"""MBCT on dask DataFrames (issue 6): the same trees as the single-machine fit, histograms summed.

The reference is ``MBCT.fit`` on the concatenated rows. Tree structure (features, child tables, tree
starts) must be equal exactly; node values and predictions agree to 1e-9 relative to ``max(|v|, 1)``
(sums are added in another order; node maps are logit offsets and slopes of order one, and a few are
rounding-level offsets near zero whose relative difference means nothing). Partitions are pandas on a
``distributed.LocalCluster`` of threads.
"""

from __future__ import annotations

import itertools

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from gpucal import MBCT
from gpucal.datasets import make_ctr
from gpucal.distributed import fit_encoder
from gpucal.encoding import FeatureEncoder
from gpucal.rows.draws import held_out_mask

RTOL = 1e-9
N_ROWS = 24_000
STRUCTURE = ("node_feature", "node_child_base", "child_table", "tree_start")


@pytest.fixture(scope="module")
def ctr() -> tuple[pd.DataFrame, pd.Series, np.ndarray]:
    """Three categorical fields (one as strings) and a numeric one; labels; positive weights."""
    df = make_ctr(N_ROWS, "mixed", seed=3)
    X = df[["score", "region", "user_segment", "device"]].copy()
    X["region"] = "r" + X["region"].astype(str)
    X["p_noisy"] = df["p_true"] * np.exp(np.random.default_rng(1).normal(0.0, 0.3, N_ROWS))
    w = np.random.default_rng(2).random(N_ROWS) * 2.0
    return X, df["label"].astype(np.float64), w


def _dask(X: pd.DataFrame, y: pd.Series, w: np.ndarray | None, n_parts: int) -> tuple:
    dw = None if w is None else dd.from_pandas(pd.Series(w, index=X.index), npartitions=n_parts)
    return dd.from_pandas(X, npartitions=n_parts), dd.from_pandas(y, npartitions=n_parts), dw


def _assert_close(actual: np.ndarray, expected: np.ndarray) -> None:
    scale = np.maximum(np.abs(expected), 1.0)
    assert np.max(np.abs(actual - expected) / scale, initial=0.0) <= RTOL


@pytest.mark.parametrize(
    ("leaf_map", "n_parts", "weighted", "max_trees"),
    [("platt", 4, False, 8), ("platt", 16, True, 3), ("scale", 4, True, 8), ("scale", 16, False, 3)],
)
def test_dask_fit_grows_the_single_machine_trees(client, ctr, leaf_map, n_parts, weighted, max_trees) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    sw = w if weighted else None
    params = {"leaf_map": leaf_map, "max_trees": max_trees}
    one = MBCT(**params).fit(X, y, sample_weight=sw)
    dX, dy, dw = _dask(X, y, sw, n_parts)
    two = MBCT(**params).fit(dX, dy, sample_weight=dw)
    e1, e2 = one.ensemble_, two.ensemble_
    assert e1.n_trees >= 2  # the chain, not a lone root, is compared
    for name in STRUCTURE:
        np.testing.assert_array_equal(getattr(e2, name), getattr(e1, name), err_msg=name)
    for a, b in zip(e2.code_maps, e1.code_maps, strict=True):
        np.testing.assert_array_equal(a, b)
    _assert_close(e2.node_value, e1.node_value)
    _assert_close(e2.node_weight, e1.node_weight)
    _assert_close(two.init_, one.init_)
    assert two.min_node_size_ == pytest.approx(one.min_node_size_, rel=1e-12)
    assert [h["kept"] for h in two.history_] == [h["kept"] for h in one.history_]
    predicted = two.predict(dX)
    assert isinstance(predicted, dd.Series)
    _assert_close(predicted.compute().to_numpy(), np.asarray(one.predict(X)))


def test_dask_fit_with_crosses_is_the_single_machine_fit(client, ctr) -> None:  # type: ignore[no-untyped-def]
    """A cross of a string column and a number is the same coded field over partitions."""
    X, y, w = ctr
    params = {"interactions": [("region", "p_noisy"), ("user_segment", "device")], "max_trees": 2}
    one = MBCT(**params).fit(X, y, sample_weight=w)
    dX, dy, dw = _dask(X, y, w, 4)
    two = MBCT(**params).fit(dX, dy, sample_weight=dw)
    assert two.encoder_.to_dict() == one.encoder_.to_dict()
    assert len(one.interactions_) == 2
    assert (one.ensemble_.node_feature >= len(one.feature_cols_)).any()  # a cross (or the score bin) splits
    for name in STRUCTURE:
        np.testing.assert_array_equal(
            getattr(two.ensemble_, name), getattr(one.ensemble_, name), err_msg=name
        )
    _assert_close(two.ensemble_.node_value, one.ensemble_.node_value)
    _assert_close(two.predict(dX).compute().to_numpy(), np.asarray(one.predict(X)))


def test_validation_rows_are_the_single_machine_ones() -> None:
    n, seed, fraction = 1000, 7, 0.2
    whole = np.random.default_rng(seed).random(n) < fraction
    cuts = [0, 1, 250, 251, 999, 1000]
    pieces = [held_out_mask(b - a, fraction, seed, a) for a, b in itertools.pairwise(cuts)]
    np.testing.assert_array_equal(np.concatenate(pieces), whole)
    np.testing.assert_array_equal(held_out_mask(n, fraction, seed), whole)


def test_encoder_over_partitions_is_the_single_machine_one(client, ctr) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    features = X.drop(columns="score")
    dX, _, dw = _dask(X, y, w, 16)
    local = FeatureEncoder(n_bins=32).fit(features, sample_weight=w)
    spread = fit_encoder(FeatureEncoder(n_bins=32), dX.drop(columns="score"), sample_weight=dw)
    assert spread.to_dict() == local.to_dict()


def test_mvce_refuses_dask_by_name(client, ctr) -> None:  # type: ignore[no-untyped-def]
    X, y, _ = ctr
    dX, dy, _ = _dask(X, y, None, 4)
    with pytest.raises(NotImplementedError, match="criterion='mvce'"):
        MBCT(criterion="mvce").fit(dX, dy)


def test_dask_fit_checks_the_whole_data(client, ctr) -> None:  # type: ignore[no-untyped-def]
    X, _, _ = ctr
    dX, dy, _ = _dask(X, pd.Series(np.zeros(len(X)), index=X.index), None, 4)
    with pytest.raises(ValueError, match="no positive labels"):
        MBCT().fit(dX, dy)


def test_dask_fit_screens_crosses_where_the_partitions_are(client, ctr) -> None:  # type: ignore[no-untyped-def]
    """On dask the partitions choose the device, the crosses' screening too: device='gpu' over pandas
    partitions fits on the CPU (the screening asked for a GPU this machine does not have)."""
    X, y, w = ctr
    dX, dy, dw = _dask(X, y, w, 2)
    fitted = MBCT(device="gpu", interactions="auto", max_trees=1).fit(dX, dy, sample_weight=dw)
    reference = MBCT(interactions="auto", max_trees=1).fit(dX, dy, sample_weight=dw)
    assert fitted.interactions_ == reference.interactions_
