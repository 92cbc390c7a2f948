"""HC's first passes over its rows: each block read and checked, cut into tree rows and map rows, encoded.

Every block is read the same way whatever holds it (:func:`read_block`): the score and feature columns
split off ``X``, labels and weights checked, arrays moved to the device, and the rows that grow the
trees marked (``tree_fraction``: row ``r`` grows them when draw ``r`` of ``default_rng(seed)`` is below
the share, :func:`~gpucal.rows.draws.held_out_mask` at the block's global row offset, so dask partitions
mark the rows one machine marks). Checks of the whole data read the summed block summaries. Once the
encoder is fitted, :func:`encoded_sides` gives each block's tree rows and map rows as
:class:`TreeBlock` s: what :class:`~gpucal.trees.tree_rows.TreeRows` and the node-map sums read.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, resolve_device, to_numpy
from gpucal._frames import Column, frame_columns, parse_input
from gpucal.encoding import FeatureEncoder
from gpucal.kernels import gather_rows
from gpucal.rows import label_summary
from gpucal.rows.block import RowBlock
from gpucal.rows.checks import check_labels_and_weights
from gpucal.rows.draws import held_out_mask
from gpucal.trees.ensemble import map_codes

# Which rows a block of input holds: X cut by tree_fraction, X all map rows, X_tree all tree rows.
SPLIT, MAP, TREE = "split", "map", "tree"
# The input names in messages, by role.
_NAMES = {SPLIT: ("X", "y", "sample_weight"), MAP: ("X", "y", "sample_weight")}
_NAMES[TREE] = ("X_tree", "y_tree", "sample_weight_tree")
# Columns of a block summary after label_summary's five: tree rows, blocks on the GPU.
N_TREE, N_ON_GPU = 5, 6


@dataclass(frozen=True)
class InputBlock:
    """One block read and checked: its role, feature columns, score (None for the tree rows of a label
    tree), labels, weights (None: unit), which rows grow the trees (host bool), the block's global row
    offset, its summary (``label_summary`` columns, tree rows, 1 when on the GPU), and the frame and
    weights as given (what the encoder is fitted on), and whether the block is all the rows."""

    role: str
    features: dict[Hashable, Column]
    score: Any
    y: Any
    w: Any
    grows: np.ndarray
    row_offset: int
    summary: np.ndarray
    frame_given: Any
    weights_given: Any
    whole: bool


@dataclass(frozen=True)
class TreeBlock:
    """Rows of one role (tree growth or map fitting): codes, the trees' input or the score ``f``,
    labels, weights (None: unit) and ``index``, each row's position in the input it came from (host
    int64: what the forest's bootstrap draws are keyed by)."""

    codes: Any
    f: Any
    y: Any
    w: Any
    index: np.ndarray

    def __len__(self) -> int:
        return int(self.y.shape[0])


def read_block(
    block: RowBlock,
    role: str,
    feature_cols: Sequence[Hashable] | str | None,
    score_col: Hashable,
    device: str,
    split: tuple[float, int, bool],
    whole: bool,
    row_offset: int,
) -> InputBlock:
    """Read one block of ``X, y, sample_weight`` (or of the tree inputs, ``role`` TREE) as ``fit`` does.

    ``split`` is ``(tree_fraction, seed, boosted)``; ``whole`` is True when the block is all the rows
    (one machine: an empty block or all-zero weights are errors there, fine in one partition of many).
    """
    tree_fraction, seed, boosted = split
    x_name = _NAMES[role][0]
    X, y, w = block["X"], block["y"], block["sample_weight"]
    if role == TREE and not boosted:  # the label tree reads features only
        features, score = frame_columns(X, feature_cols, name=x_name), None
    else:
        given = parse_input(
            X,
            score_col=score_col,
            feature_cols=feature_cols,
            require_features=True,
            allow_empty=not whole,
            name=x_name,
        )
        features, score = given.features, given.score
    x_rows = next(iter(features.values())).values
    labels, weights, n = check_labels_and_weights(X, y, w, x_rows, whole=whole, names=_NAMES[role])
    on_gpu = resolve_device(device, labels if score is None else score) == "gpu"
    if on_gpu:
        import cupy

        score, labels = (None if score is None else cupy.asarray(score)), cupy.asarray(labels)
        weights = None if weights is None else cupy.asarray(weights)
    else:  # device="cpu" on rows on the GPU: the CPU kernels read numpy (the codes: encoded_sides)
        score, labels = (None if score is None else to_numpy(score)), to_numpy(labels)
        weights = None if weights is None else to_numpy(weights)
    grows = np.full(n, role == TREE)
    if role == SPLIT:
        grows = held_out_mask(n, tree_fraction, seed, row_offset)
    summary = np.concatenate([label_summary(labels, weights), [float(grows.sum()), float(on_gpu)]])
    return InputBlock(role, features, score, labels, weights, grows, row_offset, summary, X, w, whole)


def block_summary(block: InputBlock) -> np.ndarray:
    return block.summary


def feature_names(block: InputBlock) -> list[Hashable]:
    return list(block.features)


def first(*values: Any) -> Any:
    """Combine of :meth:`Rows.reduce` keeping the first block's value."""
    return values[0]


# --------------------------------------------------------------------------------------------------
# The encoder


def encoder_inputs(block: InputBlock) -> tuple[Any, Any]:
    """What the feature encoder is fitted on (``FeatureEncoder.fit_rows``): the block's feature columns
    and its weights as given. One block of all the rows gives its columns as read (what ``fit`` always
    read); a partition gives its frame's feature columns (the block summaries count a frame's rows)."""
    if block.whole:
        return block.features, block.weights_given
    return block.frame_given[list(block.features)], block.weights_given


# --------------------------------------------------------------------------------------------------
# Encoded sides


def encoded_sides(
    block: InputBlock, encoder: FeatureEncoder, boosted: bool
) -> tuple[TreeBlock | None, TreeBlock | None]:
    """The block's tree rows and map rows (None when it has none of a role), with their codes.

    The label tree's input ``f`` is read by the gain criteria only, so any probability does (0.5);
    boosted trees 2.. grow on the score's calibrated output.
    """
    xp = array_namespace(block.y)
    codes = encoder.transform(block.features)
    codes = to_numpy(codes) if xp is np else xp.asarray(codes)
    n = int(block.y.shape[0])

    def side(rows: np.ndarray, f: Any) -> TreeBlock:
        index = block.row_offset + rows
        if rows.shape[0] == n:  # every row: no copy
            return TreeBlock(codes, f, block.y, block.w, index)
        side_codes, side_f, side_y, side_w = gather_rows(xp.asarray(rows), codes, f, block.y, block.w)
        return TreeBlock(side_codes, side_f, side_y, side_w, index)

    tree_f = block.score if boosted else xp.full_like(block.y, 0.5)
    tree = None if block.role == MAP else side(np.flatnonzero(block.grows), tree_f)
    cal = None if block.role == TREE else side(np.flatnonzero(~block.grows), block.score)
    return tree, cal


def pick(pair: tuple[Any, ...], which: int) -> Any:
    return pair[which]


def tree_codes(block: TreeBlock, maps: list[np.ndarray], counts: np.ndarray) -> TreeBlock:
    """The block with its input codes translated to tree codes (rare categories pooled)."""
    return TreeBlock(map_codes(block.codes, maps, counts), block.f, block.y, block.w, block.index)


__all__ = [
    "MAP",
    "SPLIT",
    "TREE",
    "InputBlock",
    "TreeBlock",
    "block_summary",
    "encoded_sides",
    "encoder_inputs",
    "feature_names",
    "first",
    "pick",
    "read_block",
    "tree_codes",
]
