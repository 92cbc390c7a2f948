"""Reading MBCT's rows: the codes of a block, the checks, the validation split and the input summary.

The block functions here run where the blocks are (module level, picklable), mapped over
:class:`~gpucal.rows.Rows` by :func:`gpucal.mbct.fit.fit_mbct`; :func:`input_codes` and
:func:`apply_init` also serve ``MBCT.predict``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal._frames import ParsedInput, parse_input
from gpucal.calibrators.platt import predict_platt
from gpucal.encoding import FeatureEncoder
from gpucal.kernels import chain_start, gather_rows, lookup_bins
from gpucal.rows import Rows, concat_weights, held_out_mask
from gpucal.rows.checks import check_labels_and_weights
from gpucal.trees.ensemble import LEAF_MAPS, TreeEnsemble, code_weights, map_codes, tree_code_dtype

# Columns of :func:`input_summary` (the training rows' code weights from CODE_WEIGHTS on).
N_ROWS, N_HELD, N_POSITIVE, N_NEGATIVE, W_SUM, WY_SUM, CODE_WEIGHTS = range(7)


@dataclass(frozen=True)
class ChainBlock:
    """A block of a chain's rows: codes (input codes, then tree codes), tree input, labels, weights.

    Once the chain starts (:func:`chain_input`), ``f`` holds the chain's values: probabilities for "scale"
    leaves, logits for "shift" and "platt" (``predict_trees`` with ``init=None, finish=False``)."""

    codes: Any
    f: Any
    y: Any
    w: Any  # None: unit weights

    def __len__(self) -> int:
        return int(self.f.shape[0])


@dataclass(frozen=True)
class HoldoutBlock:
    """A block's training and validation rows (None without a split), and its ``[n, held]`` counts."""

    train: ChainBlock
    valid: ChainBlock | None
    n_rows: int
    n_held: int


def input_codes(
    split: ParsedInput, encoder: FeatureEncoder | None, score_bins: int, tree: TreeEnsemble | None = None
) -> Any:
    """Return the ``(n, d)`` codes: the encoded features and their crosses, then the score bin, written in
    one array.

    With ``tree``, its pooled tree codes instead (``tree.code_maps`` composed with the encoding, one
    table read per row and column).
    """
    xp = array_namespace(split.score)
    width = (0 if encoder is None else len(encoder.n_codes_)) + (1 if score_bins else 0)
    if tree is None:
        maps = None
        bin_codes = np.arange(score_bins)
        parts = ([] if encoder is None else [encoder.codes_dtype_]) + ([np.int16] if score_bins else [])
        dtype = np.result_type(*parts)
    else:
        maps = tree.code_maps
        bin_codes = maps[-1]
        dtype = tree_code_dtype(tree.n_values)
    out = xp.empty((split.score.shape[0], width), dtype=dtype)
    if encoder is not None:
        encoder.transform(split.features, code_maps=maps, out=out)
    if score_bins:
        lookup_bins(split.score, score_bins, bin_codes, out, width - 1)
    return out


def input_n_values(encoder: FeatureEncoder | None, score_bins: int) -> np.ndarray:
    """Codes per split feature: the encoder's features and crosses, then the score bins."""
    enc = [] if encoder is None else list(encoder.n_codes_)
    return np.asarray(enc + ([score_bins] if score_bins else []), dtype=np.int64)


def apply_init(score: Any, init: np.ndarray) -> Any:
    """The chain's first map :math:`g_0`: the global Platt map ``init = [a, b]`` (identity: ``[1, 0]``)."""
    a, b = (float(v) for v in init)
    return score if (a, b) == (1.0, 0.0) else predict_platt(score, a, b)


def start_values(score: Any, init: np.ndarray, leaf_map: str) -> Any:
    """The values a chain carries into its first tree: :math:`g_0(s)` for "scale" (probabilities), else
    the logit of :math:`g_0(s)` as ``gpucal.kernels.chain_start`` takes it,
    :math:`\\operatorname{clip}(a \\operatorname{logit}(\\operatorname{clip} s) + b)`, the very start of
    ``predict_trees`` with ``init=(a, b)`` (no sigmoid and logit between the map and the first tree)."""
    if leaf_map == "scale":
        return apply_init(score, init)
    a, b = (float(v) for v in init)
    return chain_start(score, (a, b), LEAF_MAPS.index(leaf_map))


def fit_mbct_encoder(
    rows: Rows, score_col: Hashable, features: list[Any], encoding: dict[str, Any]
) -> FeatureEncoder | None:
    """The encoder of the ``features`` columns (None without any), fitted over ``rows`` (blocks of
    ``X, y, sample_weight``): :meth:`FeatureEncoder.fit_rows`, one machine's encoder on any rows.
    ``encoding``: the encoder's parameters (bins, categorical columns, crosses)."""
    if not features:
        return None
    encoder = FeatureEncoder(**encoding)
    whole = rows.single_block() is not None
    return encoder.fit_rows(rows, _encoder_input, score_col, features, whole)


def _encoder_input(block: Any, score_col: Hashable, features: list[Any], whole: bool) -> tuple[Any, Any]:
    """A block's feature columns and weights, as the encoder reads them: the split columns of all the
    rows, or a partition's frame of the feature columns (the block summaries read a frame)."""
    X = block["X"]
    if not whole:
        return X[features], block["sample_weight"]
    split = parse_input(X, score_col=score_col, feature_cols=features, allow_empty=True)
    return split.features, block["sample_weight"]


def read_block(
    block: Any,
    score_col: Hashable,
    feature_cols: list[Any],
    score_bins: int,
    backend: str,
    encoder: FeatureEncoder | None,
    whole: bool,
) -> ChainBlock:
    """Check one block of ``X, y, sample_weight`` and encode it (codes, score, labels, weights).

    ``whole``: the block is all the rows (one machine), checked as a whole; otherwise a partition,
    whose index must match its labels' and whose weights may all be zero.
    """
    X, y, w = block["X"], block["y"], block["sample_weight"]
    split = parse_input(X, score_col=score_col, feature_cols=feature_cols, allow_empty=True)
    score = split.score
    xp = array_namespace(score)
    labels, w, _ = check_labels_and_weights(X, y, w, score, whole=whole, xp=xp)
    codes = input_codes(split, encoder, score_bins)
    if backend == "cuda" and xp is np:
        import cupy

        score, labels, codes = cupy.asarray(score), cupy.asarray(labels), cupy.asarray(codes)
        w = None if w is None else cupy.asarray(w)
    elif backend == "cpu" and xp is not np:  # device="cpu" on rows on the GPU: the CPU kernels read numpy
        score, labels, codes = to_numpy(score), to_numpy(labels), to_numpy(codes)
        w = None if w is None else to_numpy(w)
    return ChainBlock(codes, score, labels, w)


def holdout_block(block: ChainBlock, fraction: float, seed: int, *, row_offset: int) -> HoldoutBlock:
    """The block's training and held-out rows: ``held_out_mask`` from its global offset."""
    n = len(block)
    if not fraction:
        return HoldoutBlock(block, None, n, 0)
    held = held_out_mask(n, fraction, seed, row_offset)
    xp = array_namespace(block.f)
    train = gather_rows(xp.asarray(np.flatnonzero(~held)), block.codes, block.f, block.y, block.w)
    valid = gather_rows(xp.asarray(np.flatnonzero(held)), block.codes, block.f, block.y, block.w)
    return HoldoutBlock(ChainBlock(*train), ChainBlock(*valid), n, int(held.sum()))


def _joined(blocks: list[ChainBlock]) -> ChainBlock:
    if len(blocks) == 1:
        return blocks[0]
    xp = array_namespace(blocks[0].f)

    def cat(name: str) -> Any:
        return xp.concatenate([getattr(b, name) for b in blocks])

    return ChainBlock(cat("codes"), cat("f"), cat("y"), concat_weights([b.w for b in blocks], xp))


def join_holdout(blocks: list[HoldoutBlock], indices: list[int]) -> HoldoutBlock:
    """One machine's split blocks as one (its later passes ship one result whatever its blocks)."""
    if len(blocks) == 1:
        return blocks[0]
    valid = None if blocks[0].valid is None else _joined([b.valid for b in blocks if b.valid is not None])
    return HoldoutBlock(
        _joined([b.train for b in blocks]),
        valid,
        sum(b.n_rows for b in blocks),
        sum(b.n_held for b in blocks),
    )


def _class_counts(part: ChainBlock | None) -> tuple[int, int]:
    """Rows of each class with weight: ``(#(w > 0, y > 0), #(w > 0, y < 1))``."""
    if part is None:
        return 0, 0
    weighted = True if part.w is None else part.w > 0
    return int((weighted & (part.y > 0)).sum()), int((weighted & (part.y < 1)).sum())


def input_summary(block: HoldoutBlock, n_values: np.ndarray) -> np.ndarray:
    """``[rows, held, positive, negative, sum w, sum w y, code weights...]``: the checks (all rows), the
    first label moment and the code weights (training rows), in one pass."""
    train = block.train
    counts = np.add(_class_counts(train), _class_counts(block.valid))
    total = float(train.y.shape[0] if train.w is None else train.w.sum())
    label_sum = float((train.y if train.w is None else train.w * train.y).sum())
    head = [block.n_rows, block.n_held, counts[0], counts[1], total, label_sum]
    return np.concatenate([np.asarray(head, dtype=np.float64), code_weights(train.codes, train.w, n_values)])


def side(block: HoldoutBlock, which: str) -> ChainBlock | None:
    return block.train if which == "train" else block.valid


def label_square_sum(block: ChainBlock, mean: float) -> np.ndarray:
    r""":math:`\sum w (y - \bar y)^2` (the second pass of the label moments)."""
    y, w = block.y, block.w
    return np.array([float(((y - mean) ** 2 if w is None else w * (y - mean) ** 2).sum())])


def block_code_weights(block: ChainBlock, n_values: np.ndarray) -> np.ndarray:
    return code_weights(block.codes, block.w, n_values)


def chain_input(
    block: ChainBlock, maps: list[np.ndarray], n_values: np.ndarray, init: np.ndarray, leaf_map: str
) -> ChainBlock:
    """A block's tree codes and the chain's first values (:func:`start_values` of the score)."""
    codes = map_codes(block.codes, maps, n_values)
    return ChainBlock(codes, start_values(block.f, init, leaf_map), block.y, block.w)


__all__ = [
    "ChainBlock",
    "HoldoutBlock",
    "apply_init",
    "block_code_weights",
    "chain_input",
    "fit_mbct_encoder",
    "holdout_block",
    "input_codes",
    "input_n_values",
    "input_summary",
    "label_square_sum",
    "read_block",
    "side",
    "start_values",
]
