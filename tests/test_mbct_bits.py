"""MBCT's trees pinned bit for bit, and their numbers to rounding: a faster fit must grow the same chain.

The trees' structure (node features, children, weights, depths, code maps) is pinned by digest: it is the
same on every CPU. The node values and predictions are pinned by sums and fixed random projections to
1e-12 relative, not by digest: their last bits depend on the CPU, through numpy's SIMD dispatch (its
``log``, ``exp`` and sums differ between AVX2 and AVX-512) and OpenBLAS's kernels (the leaf maps' small
solves). Measured on ``make_ctr(30000, "mixed")``: the same trees, node values up to 2.3e-16 and
predictions up to 1.7e-15 apart between an AVX-512 machine and the same machine with numpy and OpenBLAS
held to AVX2 (``NPY_DISABLE_CPU_FEATURES=X86_V4,AVX512_ICL,AVX512_SPR OPENBLAS_CORETYPE=Haswell``); the
projections below moved by at most 5e-15 relative. Bit-identity of two code paths on one machine is
checked where both run in one process (the fit's carried logits against predict, below).

The pinned sums were first taken from the fit as it stood before its passes were fused (histograms,
routing and the node partition in fewer sweeps over the rows), under the probability chain (sigmoid and
logit between maps); the logit chain matches them to 1e-12 relative. The projections were taken from the
logit chain on the AVX2 configuration above. Both were taken again when Platt scaling of 16,384 rows or
more (here the initial map) came to be fitted on its bins' moments (``logistic.SERIES_MIN_ROWS``), exact
to rounding where Newton's passes had stopped 5e-11 from the optimum: the same trees, node values moved
by at most 5e-10 and predictions by 2.4e-10.
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


def structure_digest(model: MBCT) -> str:
    """sha256 (16 hex digits) of the chain's integer node arrays and code maps: the trees' structure."""
    e = model.ensemble_
    arrays = (
        e.node_feature,
        e.node_child_base,
        e.child_table,
        e.node_weight,
        e.node_depth,
        e.tree_start,
        *e.code_maps,
        e.rare_codes,
    )
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def projections(x: np.ndarray) -> list[float]:
    """``x`` projected on fixed uniform(-1, 1) weights, and its sum of squares: a permutation or a change
    of a single entry above rounding moves one of them."""
    flat = np.ascontiguousarray(x, dtype=np.float64).ravel()
    weights = np.random.default_rng(1).uniform(-1.0, 1.0, flat.size)
    return [float(weights @ flat), float(flat @ flat)]


# Per case: the trees' structure, then the sum of the predictions and of the node values' two columns
# under the probability chain (sigmoid and logit between trees), which the logit chain must match.
STRUCTURE = {
    "platt": ("74aa6cfe0d08fa37", [844.497370546664, 440.75919503662305, -2.8627274407796146]),
    "scale": ("d080f9860bcaa763", [836.2512472068581, 199.28835923137234, 0.0]),
    "weighted": ("5d8d2ce8e24fe551", [840.8485980746027, 660.121917624596, 2.139943973119514]),
}

# Per case: :func:`projections` of the predictions, then of the node values, under the logit chain.
PROJECTIONS = {
    "platt": [-1.2614804389059935, 86.01301483595341, -6.297641566416973, 444.29769956960564],
    "scale": [-0.2928459999745425, 81.0200757292429, -10.372841139446951, 198.5103960982801],
    "weighted": [-1.7420296962289679, 91.86695301796013, 7.3832110697143, 670.8836419233652],
}


@pytest.mark.parametrize(
    ("params", "weighted", "n_trees", "n_nodes", "case"),
    [
        ({}, False, 6, 440, "platt"),
        ({"leaf_map": "scale"}, False, 3, 202, "scale"),
        ({}, True, 5, 657, "weighted"),
    ],
)
def test_fit_grows_the_pinned_trees_and_their_numbers(
    params: dict, weighted: bool, n_trees: int, n_nodes: int, case: str
) -> None:
    X, y = ctr_frame(30_000)
    w = np.random.default_rng(0).integers(1, 4, len(y)).astype(np.float64) if weighted else None
    features = list(X.columns.drop("score"))
    model = MBCT(feature_cols=features, categorical_cols=features, **params).fit(X, y, sample_weight=w)
    assert (model.ensemble_.n_trees, model.ensemble_.n_nodes) == (n_trees, n_nodes)
    predictions = np.asarray(model.predict(X))
    structure, sums = STRUCTURE[case]
    assert structure_digest(model) == structure
    got = [predictions.sum(), *model.ensemble_.node_value.sum(axis=0)]
    np.testing.assert_allclose(got, sums, rtol=1e-12, atol=0.0)
    got = [*projections(predictions), *projections(model.ensemble_.node_value)]
    np.testing.assert_allclose(got, PROJECTIONS[case], rtol=1e-12, atol=0.0)


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
