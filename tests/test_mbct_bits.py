"""MBCT's trees and predictions pinned bit for bit: a faster fit must grow the same chain.

The digests were taken from the fit as it stood before its passes were fused (histograms, routing and the
node partition in fewer sweeps over the rows); any change to the numbers a fit produces shows here first.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from gpucal import MBCT
from gpucal.datasets import make_ctr

FIELDS = ["site_id", "ad_category", "region", "hour", "user_segment", "device"]


def ctr_frame(n_rows: int) -> tuple[pd.DataFrame, np.ndarray]:
    """``make_ctr(n, "mixed")``'s six fields and two crosses, read by value; the labels apart."""
    frame = make_ctr(n_rows, "mixed", seed=0).drop(columns=["p_true"])
    frame["device_hour"] = frame["device"].astype(np.int16) * 24 + frame["hour"]
    frame["region_segment"] = frame["region"].astype(np.int16) * 8 + frame["user_segment"]
    return frame, frame.pop("label").to_numpy(np.float64)


def digest(model: MBCT, predictions: np.ndarray) -> str:
    """sha256 (16 hex digits) of the chain's node arrays, code maps and the predictions."""
    e = model.ensemble_
    arrays = (
        e.node_feature,
        e.node_child_base,
        e.child_table,
        e.node_value,
        e.node_weight,
        e.node_depth,
        e.tree_start,
        *e.code_maps,
        e.rare_codes,
        predictions,
    )
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize(
    ("params", "weighted", "n_trees", "n_nodes", "expected"),
    [
        ({}, False, 6, 440, "fb11b77d909a32db"),
        ({"leaf_map": "scale"}, False, 3, 202, "ebace80f4565c7b1"),
        ({}, True, 5, 657, "e6ed9694881b052b"),
    ],
)
def test_fit_and_predict_are_bit_identical_to_the_pinned_chain(
    params: dict, weighted: bool, n_trees: int, n_nodes: int, expected: str
) -> None:
    X, y = ctr_frame(30_000)
    w = np.random.default_rng(0).integers(1, 4, len(y)).astype(np.float64) if weighted else None
    features = list(X.columns.drop("score"))
    model = MBCT(feature_cols=features, categorical_cols=features, **params).fit(X, y, sample_weight=w)
    assert (model.ensemble_.n_trees, model.ensemble_.n_nodes) == (n_trees, n_nodes)
    assert digest(model, np.asarray(model.predict(X))) == expected
