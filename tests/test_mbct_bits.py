"""MBCT's trees and predictions pinned bit for bit: a faster fit must grow the same chain.

The digests were first taken from the fit as it stood before its passes were fused (histograms, routing
and the node partition in fewer sweeps over the rows). They were retaken once, when the chain of "shift"
and "platt" leaves began to carry its logits from tree to tree, starting from the initial Platt map's
logit (no sigmoid and logit between maps): that changes node values and predictions at rounding level
only, so the trees' structure stays pinned to the older chain's, and its node values and predictions to
1e-12 relative (the figures below are the older chain's). Any other change to the numbers a fit produces
shows here first.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_array_equal

from gpucal import MBCT
from gpucal.datasets import make_ctr
from gpucal.mbct import fit as mbct_fit
from gpucal.trees.ensemble import predict_ensemble

FIELDS = ["site_id", "ad_category", "region", "hour", "user_segment", "device"]


def ctr_frame(n_rows: int) -> tuple[pd.DataFrame, np.ndarray]:
    """``make_ctr(n, "mixed")``'s six fields and two crosses, read by value; the labels apart."""
    frame = make_ctr(n_rows, "mixed", seed=0).drop(columns=["p_true"])
    frame["device_hour"] = frame["device"].astype(np.int16) * 24 + frame["hour"]
    frame["region_segment"] = frame["region"].astype(np.int16) * 8 + frame["user_segment"]
    return frame, frame.pop("label").to_numpy(np.float64)


def digest(model: MBCT, predictions: np.ndarray | None) -> str:
    """sha256 (16 hex digits) of the chain's node arrays, code maps and the predictions; without the
    node values and predictions when ``predictions`` is None (the trees' structure alone)."""
    e = model.ensemble_
    values = [] if predictions is None else [e.node_value]
    arrays = (
        e.node_feature,
        e.node_child_base,
        e.child_table,
        *values,
        e.node_weight,
        e.node_depth,
        e.tree_start,
        *e.code_maps,
        e.rare_codes,
        *([] if predictions is None else [predictions]),
    )
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


# Per case: the trees' structure, then the sum of the predictions and of the node values' two columns
# under the probability chain (sigmoid and logit between trees), which the logit chain must match.
STRUCTURE = {
    "platt": ("74aa6cfe0d08fa37", [844.4973705389154, 440.75919503805613, -2.862727460238423]),
    "scale": ("d080f9860bcaa763", [836.2512472477679, 199.28835921438696, 0.0]),
    "weighted": ("5d8d2ce8e24fe551", [840.848598061144, 660.1219176288558, 2.1399439171291332]),
}


@pytest.mark.parametrize(
    ("params", "weighted", "n_trees", "n_nodes", "expected"),
    [
        ({}, False, 6, 440, "df28ce05d1be3ee0"),
        ({"leaf_map": "scale"}, False, 3, 202, "ebace80f4565c7b1"),
        ({}, True, 5, 657, "d5d16759fc68c361"),
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
    predictions = np.asarray(model.predict(X))
    structure, sums = STRUCTURE["weighted" if weighted else params.get("leaf_map", "platt")]
    assert digest(model, None) == structure
    got = [predictions.sum(), *model.ensemble_.node_value.sum(axis=0)]
    np.testing.assert_allclose(got, sums, rtol=1e-12, atol=0.0)
    assert digest(model, predictions) == expected


@pytest.mark.parametrize("params", [{}, {"leaf_map": "shift", "init": "identity"}])
def test_predict_recomputes_the_chain_the_fit_carried(params: dict, monkeypatch) -> None:
    # The fit carries the chain's logits from tree to tree; predict on the training rows (no held-out
    # split, no merged rows: the fit's rows in order) must give the very same logits back.
    carried = []
    loss_sums = mbct_fit._loss_sums

    def spy(block, leaf_map):
        carried.append(np.array(block.f))
        return loss_sums(block, leaf_map)

    monkeypatch.setattr(mbct_fit, "_loss_sums", spy)
    X, y = ctr_frame(6_000)
    features = list(X.columns.drop("score"))
    model = MBCT(
        feature_cols=features, categorical_cols=features, validation_fraction=0.0, aggregate=False, **params
    ).fit(X, y)
    n_trees = model.ensemble_.n_trees
    assert n_trees >= 2
    codes, score, _ = model._predict_input(X)
    init = tuple(float(v) for v in model.init_)
    logits = predict_ensemble(model.ensemble_, codes, score, init=init, finish=False)
    assert_array_equal(logits, carried[n_trees])  # carried[0]: the chain's start, before any tree
    assert_array_equal(
        np.asarray(model.predict(X)), predict_ensemble(model.ensemble_, codes, score, init=init)
    )
