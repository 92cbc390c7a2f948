"""Tests of gpucal.plot.trees: the tree diagram and the per-feature-value calibration plot."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from gpucal.encoding import FeatureEncoder
from gpucal.plot import feature_calibration, plot_feature_calibration, plot_tree
from gpucal.trees.ensemble import TreeEnsemble
from tests.test_rules import SCORE_BINS, build_ensemble, fit_encoder


def render(fig: Figure) -> list[str]:
    """Draw on the Agg canvas (as saving would) and return every text of every axes."""
    FigureCanvasAgg(fig).draw()
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def wide_ensemble(n_children: int) -> tuple[TreeEnsemble, FeatureEncoder]:
    """One split on a categorical feature with ``n_children`` leaves of weight 10, 20, ..."""
    values = [f"v{i:02d}" for i in range(n_children)]
    enc = FeatureEncoder().fit(pd.DataFrame({"site": values}))
    n_site = int(enc.n_values_[0])
    n_nodes = 1 + n_children
    table = np.full(n_site, -1, dtype=np.int32)
    table[:n_children] = np.arange(1, n_nodes)
    ens = TreeEnsemble(
        leaf_map="shift",
        feature_names=["site", "score bin"],
        n_values=np.array([n_site, SCORE_BINS], dtype=np.int64),
        node_feature=np.array([0] + [-1] * n_children, dtype=np.int32),
        node_child_base=np.array([0] + [-1] * n_children, dtype=np.int64),
        child_table=table,
        node_value=np.column_stack([np.ones(n_nodes), np.linspace(-1, 1, n_nodes)]),
        node_weight=np.array(
            [sum(10.0 * (i + 1) for i in range(n_children))] + [10.0 * (i + 1) for i in range(n_children)]
        ),
        node_depth=np.array([0] + [1] * n_children, dtype=np.int32),
        tree_start=np.array([0, n_nodes], dtype=np.int64),
        code_maps=[np.arange(n_site, dtype=np.int32), np.arange(SCORE_BINS, dtype=np.int32)],
        rare_codes=np.array([-1, -1], dtype=np.int64),
    )
    ens.check()
    return ens, enc


# --- plot_tree -------------------------------------------------------------------------------------


def test_plot_tree_boxes_and_highlighted_leaves():
    enc = fit_encoder()
    ens = build_ensemble(enc, "scale")
    fig = plot_tree(ens, enc, tree=0, score_col="score", score_bins=SCORE_BINS)
    texts = render(fig)
    ax = fig.axes[0]
    assert ax.get_title() == 'Calibration tree 1 of 2 (leaf map "scale")'
    assert len(texts) == 9  # every node of tree 1
    root = next(t for t in texts if t.startswith("all rows"))
    assert root.splitlines() == [
        "all rows",
        "rows 1000",
        "split on site",
        f"otherwise k = {ens.node_value[0, 0]:.4g}",
    ]
    assert f"is missing\nk = {ens.node_value[3, 0]:.4g}\nrows 200" in texts
    assert "in {\"O'Brien\", 'a'}\nrows 500\nsplit on age" in "\n".join(texts)
    assert any(t.startswith("in [0.7, 0.8)\nk = ") for t in texts)
    leaf_boxes = [t for t in ax.texts if t.get_bbox_patch().get_facecolor()[:3] != (0.933, 0.933, 0.933)]
    colors = {tuple(round(c, 3) for c in t.get_bbox_patch().get_facecolor()[:3]) for t in ax.texts}
    assert len(colors) == 2  # leaves and split nodes differ
    assert leaf_boxes
    assert len(ax.lines) == 8  # one edge per non-root node


def test_plot_tree_second_tree_and_given_axes():
    enc = fit_encoder()
    ens = build_ensemble(enc, "platt")
    fig = Figure()
    ax = fig.add_subplot()
    assert plot_tree(ens, enc, tree=1, score_col="score", score_bins=SCORE_BINS, ax=ax) is fig
    texts = render(fig)
    a, b = ens.node_value[12]
    assert f"in {{'d\"q'}} or unseen\na = {a:.4g}, b = {b:+.4g}\nweight 12.5" in texts


def test_plot_tree_truncates_large_fans():
    ens, enc = wide_ensemble(30)
    texts = render(plot_tree(ens, enc, score_col="score", score_bins=SCORE_BINS, max_children=5))
    assert len(texts) == 1 + 5
    assert "... 26 more\nrows " + str(int(sum(10 * (i + 1) for i in range(26)))) in texts
    # The four heaviest leaves are drawn.
    assert any(t.startswith("in {'v29'}") for t in texts)
    assert not any(t.startswith("in {'v00'}") for t in texts)


def test_plot_tree_max_depth():
    enc = fit_encoder()
    ens = build_ensemble(enc, "shift")
    texts = render(plot_tree(ens, enc, score_col="score", score_bins=SCORE_BINS, max_depth=0))
    assert texts == [
        f"all rows\nrows 1000\nsplit on site\notherwise shift = {ens.node_value[0, 1]:+.4g}\n(8 nodes below)"
    ]


def test_plot_tree_errors():
    enc = fit_encoder()
    ens = build_ensemble(enc, "scale")
    with pytest.raises(ValueError, match="not a tree of the chain"):
        plot_tree(ens, enc, tree=2, score_col="score", score_bins=SCORE_BINS)
    with pytest.raises(ValueError, match="'max_children' parameter"):
        plot_tree(ens, enc, score_col="score", score_bins=SCORE_BINS, max_children=1)


# --- plot_feature_calibration ----------------------------------------------------------------------


def make_segments(n: int = 4000, seed: int = 0):
    rng = np.random.default_rng(seed)
    site = rng.choice(np.array(["a", "b", "c", None], dtype=object), n, p=[0.5, 0.3, 0.15, 0.05])
    score = rng.uniform(0.05, 0.6, n)
    bias = np.select([site == "a", site == "b"], [1.4, 0.6], 1.0)
    y = (rng.random(n) < np.clip(score * bias, 0, 1)).astype(float)
    calibrated = np.clip(score * bias, 0, 1)
    return y, score, calibrated, site


def test_feature_calibration_numbers():
    y, score, calibrated, site = make_segments()
    w = np.random.default_rng(1).uniform(0.5, 2.0, len(y))
    table = feature_calibration(y, score, calibrated, site, sample_weight=w)
    assert table.values == ["a", "b", "c", "missing"]
    for value, obs, before, after, weight, count in zip(
        table.values, table.observed, table.before, table.after, table.weight, table.count, strict=True
    ):
        rows = np.array([s is None for s in site]) if value == "missing" else site == value
        assert count == rows.sum()
        np.testing.assert_allclose(weight, w[rows].sum())
        np.testing.assert_allclose(obs, np.average(y[rows], weights=w[rows]))
        np.testing.assert_allclose(before, np.average(score[rows], weights=w[rows]))
        np.testing.assert_allclose(after, np.average(calibrated[rows], weights=w[rows]))


def test_plot_feature_calibration_artists():
    y, score, calibrated, site = make_segments()
    fig = plot_feature_calibration(y, score, calibrated, pd.Series(site), feature_name="site")
    texts = render(fig)
    ax = fig.axes[0]
    assert ax.get_title() == "Calibration per value of site"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "missing"]
    counts = pd.Series(site).fillna("missing").value_counts()
    assert texts == [f"n={counts[v]:,}" for v in ["a", "b", "c", "missing"]]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0] == "observed rate"
    assert legend[1].startswith("before: mean score (mean |gap| ")
    gap_before, gap_after = (float(s.rsplit(" ", 1)[1].rstrip(")")) for s in legend[1:])
    assert gap_after < gap_before  # the segment bias is removed
    assert len(ax.patches) == 3 * 4


def test_a_value_of_zero_weight_is_not_drawn_as_rate_zero():
    """A value whose rows all weigh 0 has no rate (NaN): it was drawn as three bars at 0 with its label
    at y=NaN, and its zero-weight rows counted; now it is left out and counts no rows."""
    y, score, calibrated, site = make_segments()
    w = np.where(site == "c", 0.0, 1.0)
    table = feature_calibration(y, score, calibrated, site, sample_weight=w)
    assert table.count[table.values.index("c")] == 0
    fig = plot_feature_calibration(
        y, score, calibrated, pd.Series(site), feature_name="site", sample_weight=w
    )
    texts = render(fig)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["a", "b", "missing"]
    assert len(texts) == 3
    assert len(fig.axes[0].patches) == 3 * 3


def test_plot_feature_calibration_keeps_heaviest_values():
    rng = np.random.default_rng(2)
    n = 3000
    values = rng.zipf(1.5, n) % 50
    score = rng.uniform(0.1, 0.9, n)
    y = (rng.random(n) < score).astype(float)
    fig = plot_feature_calibration(y, score, score, values, feature_name="zip", max_values=5)
    render(fig)
    ax = fig.axes[0]
    assert "(5 heaviest of" in ax.get_title()
    counts = pd.Series(values).value_counts()
    drawn = [int(t.get_text()) for t in ax.get_xticklabels()]
    assert [counts[v] for v in drawn] == counts.to_numpy()[:5].tolist()
    with pytest.raises(ValueError, match="'max_values' parameter"):
        plot_feature_calibration(y, score, score, values, feature_name="zip", max_values=0)
