"""Plots of a fitted MBCT model: one tree (splits, maps, row counts), and calibration per feature value.

:func:`plot_tree` draws the rules of :func:`gpucal.rules.export_rules` as a diagram: a box per node
with the values that lead to it, its map and its training weight; leaves are highlighted.
:func:`plot_feature_calibration` shows, for each value of a feature, the observed rate beside the mean
prediction before and after calibration: the per-segment miscalibration that MBCT is meant to remove and a
feature-blind reliability diagram cannot show.

matplotlib is the optional extra ``gpucal[plot]``, imported only when a function is called; figures are made
with the object API (no pyplot, no global state), as in :mod:`gpucal.plot.reliability`.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gpucal._backend import is_cupy_array, to_numpy
from gpucal._frames import column_to_pandas
from gpucal._validation import (
    as_1d_array,
    check_consistent_length,
    check_labels,
    check_probabilities,
    check_same_index,
    check_sample_weight,
)
from gpucal.plot.reliability import _import_matplotlib, axes_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from gpucal.encoding import FeatureEncoder
    from gpucal.trees.ensemble import TreeEnsemble

# Significant digits of the map parameters in a tree's boxes.
BOX_DIGITS = 4
# A box line longer than this is cut with an ellipsis (the full rule is in export_rules' text).
BOX_CHARS = 30
# Tick labels of plot_feature_calibration longer than this are cut.
LABEL_CHARS = 16
# Figure size of plot_tree: inches per leaf column and per level, and the widest figure drawn.
INCHES_PER_COLUMN = 2.1
INCHES_PER_LEVEL = 1.35
MAX_WIDTH = 60.0
LEAF_COLOR, LEAF_EDGE = "#dcefdc", "#2e7d32"
SPLIT_COLOR, SPLIT_EDGE = "#eeeeee", "0.35"


@dataclass
class _Box:
    """One box of the drawn tree: a node, or a stand-in for children or levels left out."""

    lines: list[str]
    kind: str  # "leaf", "split" or "more"
    children: list[_Box] = field(default_factory=list)
    x: float = 0.0
    depth: int = 0


def _short(text: str, n: int = BOX_CHARS) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def plot_tree(
    ensemble: TreeEnsemble,
    encoder: FeatureEncoder | None,
    *,
    tree: int = 0,
    score_col: Hashable,
    score_bins: int,
    ax: Axes | None = None,
    max_children: int = 12,
    max_depth: int | None = None,
) -> Figure:
    """Draw one tree of a fitted MBCT chain.

    Each node is a box: the values of its parent's split feature that lead to it (the root reads
    "all rows"), its map (``k`` for scale leaves, the logit ``shift``, or platt's ``a`` and ``b``) and its
    training weight; a split node names its feature and, when some values stop there (no training row of
    the node had them), the map those rows get ("otherwise"). Leaves are green.

    Parameters
    ----------
    ensemble, encoder, score_col, score_bins
        As in :func:`gpucal.rules.export_rules` (a fitted model's ``ensemble_``, ``encoder_``,
        ``score_col`` and ``score_bins``).
    tree : int, default 0
        Which tree of the chain (0 is the first).
    ax : matplotlib.axes.Axes, optional
        Axes to draw on; None makes a new figure sized to the tree.
    max_children : int, default 12
        Most boxes under one node: a larger fan shows its ``max_children - 1`` heaviest children (in
        code order) and one "... n more" box with the rest's weight.
    max_depth : int, optional
        Deepest level drawn (the root is 0); a split node there says how many nodes lie below it.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        ``tree`` outside the chain, ``max_children < 2`` or ``max_depth < 0``.
    ImportError
        When matplotlib is not installed.
    """
    from gpucal.rules import describe_features

    if not 0 <= tree < ensemble.n_trees:
        msg = f"tree: {tree!r} is not a tree of the chain (it has {ensemble.n_trees})"
        raise ValueError(msg)
    if max_children < 2:
        msg = "The 'max_children' parameter of plot_tree must be an int in [2, inf). "
        msg += f"Got {max_children!r} instead."
        raise ValueError(msg)
    if max_depth is not None and max_depth < 0:
        msg = (
            "The 'max_depth' parameter of plot_tree must be an int in [0, inf) or None. "
            f"Got {max_depth!r} instead."
        )
        raise ValueError(msg)
    _import_matplotlib()
    from matplotlib.figure import Figure

    features = describe_features(ensemble, encoder, score_col=score_col, score_bins=int(score_bins))
    root = _build_box(
        ensemble, features, int(ensemble.tree_start[tree]), "all rows", 0, max_children, max_depth
    )
    n_columns = _place(root, 0)
    depth = _max_depth(root)

    if ax is None:
        width = min(MAX_WIDTH, max(6.0, INCHES_PER_COLUMN * n_columns))
        fig = Figure(figsize=(width, INCHES_PER_LEVEL * (depth + 1) + 0.8), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = axes_figure(ax)
    _draw_box(ax, root)
    ax.set_xlim(-0.6, n_columns - 0.4)
    ax.set_ylim(-depth - 0.6, 0.6)
    ax.axis("off")
    ax.set_title(f'Calibration tree {tree + 1} of {ensemble.n_trees} (leaf map "{ensemble.leaf_map}")')
    return fig


def _build_box(
    ens: TreeEnsemble,
    features: list[Any],
    node: int,
    condition: str,
    depth: int,
    max_children: int,
    max_depth: int | None,
) -> _Box:
    """The box of ``node`` and, recursively, of its children (at most ``max_children`` boxes each)."""
    from gpucal.rules import condition_text, map_text, node_children, stop_codes, weight_text

    a, b = (float(v) for v in ens.node_value[node])
    weight = weight_text(ens.node_weight[node])
    j = int(ens.node_feature[node])
    if j < 0:
        return _Box(
            [_short(condition), map_text(ens.leaf_map, a, b, BOX_DIGITS), weight], "leaf", depth=depth
        )
    feature = features[j]
    lines = [_short(condition), weight, _short(f"split on {feature.label}")]
    if stop_codes(ens, features, node):
        lines.append("otherwise " + map_text(ens.leaf_map, a, b, BOX_DIGITS))
    box = _Box(lines, "split", depth=depth)
    kids = node_children(ens, features, node)
    if max_depth is not None and depth >= max_depth:
        below = _count_below(ens, features, node)
        box.lines.append(f"({below} nodes below)")
        return box
    shown = kids
    if len(kids) > max_children:
        heaviest = sorted(kids, key=lambda kid: -float(ens.node_weight[kid[0]]))[: max_children - 1]
        keep = {child for child, _ in heaviest}
        shown = [kid for kid in kids if kid[0] in keep]
    for child, codes in shown:
        text = condition_text(feature, codes, BOX_DIGITS)
        # The feature is named in the parent's box: keep the values only.
        text = text.removeprefix(feature.label + " ")
        box.children.append(_build_box(ens, features, child, text, depth + 1, max_children, max_depth))
    if len(shown) < len(kids):
        rest = [child for child, _ in kids if child not in {c for c, _ in shown}]
        rest_weight = float(sum(ens.node_weight[c] for c in rest))
        box.children.append(
            _Box([f"... {len(rest)} more", weight_text(rest_weight)], "more", depth=depth + 1)
        )
    return box


def _count_below(ens: TreeEnsemble, features: list[Any], node: int) -> int:
    from gpucal.rules import node_children

    return sum(1 + _count_below(ens, features, child) for child, _ in node_children(ens, features, node))


def _place(box: _Box, next_column: int) -> int:
    """Give leaves consecutive columns, a parent the middle of its children; return the next free column."""
    if not box.children:
        box.x = float(next_column)
        return next_column + 1
    for child in box.children:
        next_column = _place(child, next_column)
    box.x = (box.children[0].x + box.children[-1].x) / 2.0
    return next_column


def _max_depth(box: _Box) -> int:
    return max([box.depth, *(_max_depth(child) for child in box.children)])


def _draw_box(ax: Any, box: _Box) -> None:
    for child in box.children:
        ax.plot([box.x, child.x], [-box.depth, -child.depth], color="0.6", linewidth=1.0, zorder=1)
        _draw_box(ax, child)
    if box.kind == "leaf":
        style = {"facecolor": LEAF_COLOR, "edgecolor": LEAF_EDGE}
    elif box.kind == "split":
        style = {"facecolor": SPLIT_COLOR, "edgecolor": SPLIT_EDGE}
    else:
        style = {"facecolor": "white", "edgecolor": "0.5", "linestyle": "--"}
    ax.text(
        box.x,
        -box.depth,
        "\n".join(box.lines),
        ha="center",
        va="center",
        fontsize="x-small",
        zorder=2,
        bbox={"boxstyle": "round,pad=0.35", **style},
    )


# --------------------------------------------------------------------------------------------------
# Calibration per feature value


@dataclass(frozen=True)
class FeatureCalibration:
    """Per value of a feature (heaviest first): weight, rows of positive weight, observed rate, mean
    predictions before/after (NaN for a value whose rows all weigh 0)."""

    values: list[Any]
    weight: np.ndarray
    count: np.ndarray
    observed: np.ndarray
    before: np.ndarray
    after: np.ndarray


def feature_calibration(
    y_true: Any, score: Any, calibrated: Any, feature_values: Any, *, sample_weight: Any = None
) -> FeatureCalibration:
    r"""Per feature value :math:`v`: :math:`W_v = \sum_{x_i = v} w_i`, the observed rate
    :math:`\sum w_i y_i / W_v` and the mean predictions :math:`\sum w_i s_i / W_v` (before) and
    :math:`\sum w_i c_i / W_v` (after), sorted by :math:`W_v`, heaviest first. Missing values (None, NaN,
    null) form one group, named ``"missing"``. pandas inputs must share one index, as a metric's must
    (:func:`gpucal._validation.check_same_index`): rows are paired by index label, never by position.
    """
    import pandas as pd

    # pandas inputs are paired by index label, never by position (the metrics' rule).
    check_same_index(
        y_true=y_true,
        score=score,
        calibrated=calibrated,
        feature_values=feature_values,
        sample_weight=sample_weight,
    )
    y = to_numpy(check_labels(y_true))
    s = to_numpy(check_probabilities(score, "score"))
    c = to_numpy(check_probabilities(calibrated, "calibrated"))
    values = _host_values(feature_values)
    n = check_consistent_length(y_true=y, score=s, calibrated=c, feature_values=values)
    # Read on the host, as the scores are: a cupy weight column beside cupy scores is no mix.
    host_weight = None if sample_weight is None else to_numpy(as_1d_array(sample_weight, "sample_weight"))
    w = np.ones(n) if host_weight is None else check_sample_weight(host_weight, n)
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    labels: list[Any] = list(uniques)
    codes = np.asarray(codes, dtype=np.int64)
    if (codes < 0).any():
        codes = np.where(codes < 0, len(labels), codes)
        labels.append("missing")
    k = len(labels)
    weight = np.bincount(codes, weights=w, minlength=k)
    count = np.bincount(codes[w > 0], minlength=k)  # a row of weight 0 is an absent row
    with np.errstate(invalid="ignore", divide="ignore"):
        observed = np.bincount(codes, weights=w * y, minlength=k) / weight
        before = np.bincount(codes, weights=w * s, minlength=k) / weight
        after = np.bincount(codes, weights=w * c, minlength=k) / weight
    order = np.argsort(-weight, kind="stable")
    return FeatureCalibration(
        values=[labels[i] for i in order],
        weight=weight[order],
        count=count[order],
        observed=observed[order],
        before=before[order],
        after=after[order],
    )


def _host_values(values: Any) -> Any:
    """The feature column as something ``pandas.factorize`` takes (a host Series or numpy array)."""
    if is_cupy_array(values):
        return to_numpy(values)
    module = type(values).__module__.split(".")[0]
    if module in ("cudf", "polars", "pyarrow"):
        return column_to_pandas(values)
    if module == "pandas":
        return values
    arr = np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values
    if arr.ndim != 1:
        msg = f"feature_values: expected a 1-D column, got shape {arr.shape}"
        raise ValueError(msg)
    return arr


def plot_feature_calibration(
    y_true: Any,
    score: Any,
    calibrated: Any,
    feature_values: Any,
    *,
    feature_name: str,
    sample_weight: Any = None,
    max_values: int = 20,
    ax: Axes | None = None,
) -> Figure:
    r"""Draw, per value of a feature, the observed rate beside the mean prediction before and after.

    A calibrated model's mean prediction matches the observed rate in every segment, not just overall. For
    the ``max_values`` heaviest values of the feature, three bars: observed rate, mean ``score`` (before)
    and mean ``calibrated`` (after); the number of rows sits above each group. The legend gives, over all
    values (not only those drawn), the weighted mean absolute gap
    :math:`\sum_v W_v |\bar p_v - \bar y_v| / \sum_v W_v` before and after.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in {0, 1} (soft labels in [0, 1] allowed).
    score, calibrated : array-like of shape (n,)
        Probabilities before and after calibration.
    feature_values : array-like of shape (n,)
        The feature's raw values (strings, numbers; None / NaN are one "missing" group). Numeric features
        with many values are best binned first (e.g. with ``FeatureEncoder``'s codes).
    feature_name : str
        Name shown in the title.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.
    max_values : int, default 20
        Most values drawn (the heaviest).
    ax : matplotlib.axes.Axes, optional
        Axes to draw on; None makes a new figure.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if isinstance(max_values, bool) or not isinstance(max_values, int) or max_values < 1:
        msg = (
            "The 'max_values' parameter of plot_feature_calibration must be an int in [1, inf). "
            f"Got {max_values!r} instead."
        )
        raise ValueError(msg)
    matplotlib = _import_matplotlib()
    from matplotlib.figure import Figure

    table = feature_calibration(y_true, score, calibrated, feature_values, sample_weight=sample_weight)
    total = float(table.weight.sum())
    filled = table.weight > 0
    gap_before = float(np.sum(table.weight[filled] * np.abs(table.before - table.observed)[filled]) / total)
    gap_after = float(np.sum(table.weight[filled] * np.abs(table.after - table.observed)[filled]) / total)
    # Values whose rows all weigh 0 have no rate to draw (NaN); heaviest first, they come last.
    k = min(max_values, int(filled.sum()))

    if ax is None:
        fig = Figure(figsize=(max(6.4, 0.55 * k + 2.0), 4.8), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = axes_figure(ax)
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    x = np.arange(k)
    width = 0.27
    bars = [
        (table.observed[:k], "observed rate", "0.45"),
        (table.before[:k], f"before: mean score (mean |gap| {gap_before:.4f})", colors[0]),
        (table.after[:k], f"after: mean calibrated (mean |gap| {gap_after:.4f})", colors[1 % len(colors)]),
    ]
    for offset, (heights, label, color) in zip((-width, 0.0, width), bars, strict=True):
        ax.bar(x + offset, np.nan_to_num(heights), width, label=label, color=color)
    tops = np.nanmax(np.vstack([b[0] for b in bars]), axis=0)
    top = float(np.nanmax(tops)) if k else 1.0
    for i in range(k):
        ax.text(
            x[i],
            tops[i] + 0.02 * top,
            f"n={int(table.count[i]):,}",
            ha="center",
            va="bottom",
            fontsize="x-small",
            rotation=90 if k > 8 else 0,
        )
    ax.set_xticks(x, [_short(str(v), LABEL_CHARS) for v in table.values[:k]])
    if k > 6:
        ax.tick_params(axis="x", labelrotation=45)
        for tick in ax.get_xticklabels():
            tick.set_horizontalalignment("right")
    ax.set_ylim(0.0, top * 1.35 if top > 0 else 1.0)
    ax.set_ylabel("rate / mean prediction")
    shown = f" ({k} heaviest of {len(table.values)} values)" if k < len(table.values) else ""
    ax.set_title(f"Calibration per value of {feature_name}{shown}")
    ax.legend(loc="upper right", fontsize="small")
    ax.grid(visible=True, axis="y", alpha=0.3)
    return fig
