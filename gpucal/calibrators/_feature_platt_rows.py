r"""Feature-aware Platt's blocks: reading one block of rows, and every pass Newton-CG makes over a block.

The functions here run where the blocks are (module level, picklable), mapped over
:class:`~gpucal.rows.Rows` by :func:`~gpucal.calibrators._feature_platt_solver.fit_feature_platt`:

==========================================  ==================================================
what Newton-CG reads                        the block function, summed over blocks
==========================================  ==================================================
both classes weighted, ``sum w``, ``w y``   :func:`block_summary` (``gpucal.rows.label_summary``)
weight per code (the centering's used set)  :func:`code_weights`
loss, gradient and Hessian diagonal at the  :func:`curved_sums` of a :class:`Curved` block (made by
start or a line-search trial                :func:`curved` or :func:`trial_curved`, one pass): the loss,
                                            ``[sum r x, sum r, sum D x^2, sum D, sum D x]`` and
                                            ``code_sums(codes, r, D)`` (``r = w (p - y)``)
Hessian-vector product                      :func:`hessian_sums`: ``sum D u x`` and ``code_sums(codes, D u)``
                                            (``u = X v``)
levels a cross pools (the null directions)  :func:`pooled_levels`: rows with the pooled code, per level of
                                            each of the pair's columns
columns nested in others (the null          :func:`nested_code_table`: per code of a first-order column,
directions)                                 the one code of each other column its rows have (combined
                                            by ``merge_nested_codes``)
a cross's score test (``"auto"``)           :func:`level_sums`: ``sum w (p - y)``, ``sum w p (1 - p)``
                                            per code
==========================================  ==================================================

The row vectors the solver carries (the predictor :math:`z = X\theta`, a step's :math:`X d`, the
curvatures :math:`D = w p (1 - p)`) live in the blocks beside the rows they belong to, so they stay where
the rows are. ``array_code`` is the tests' switch to the array code (the GPU path) on numpy blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, resolve_device, to_numpy
from gpucal._frames import ParsedInput, parse_input
from gpucal._validation import check_consistent_length, check_labels, check_same_index, check_sample_weight
from gpucal.calibrators._feature_platt_kernels import (
    code_sums,
    curved_rows,
    hessian_rows,
    linear_predictor,
    nested_codes,
    on_device,
    score_feature,
    select_code_columns,
)
from gpucal.calibrators.logistic import ScoreBlock
from gpucal.encoding import FeatureEncoder
from gpucal.encoding.crosses import Cross
from gpucal.kernels import value_offsets
from gpucal.rows import label_summary, strided_rows
from gpucal.rows.checks import check_partition_weight


@dataclass(frozen=True)
class CheckedBlock:
    """A block's inputs checked: score and feature columns, labels, weights (checked and as given)."""

    source: Any  # X as given (a partition's frame: the encoder's summaries read its feature columns)
    split: ParsedInput
    y: Any
    w: Any  # float64 weights; unit weights as check_sample_weight's zero-stride view of ones
    source_w: Any  # sample_weight as given (the encoder's cuts weigh by it)


@dataclass(frozen=True)
class PlattBlock:
    """A block encoded for the fit: score feature ``x``, codes, labels and weights, on one device."""

    x: Any
    codes: Any
    y: Any
    w: Any

    def __len__(self) -> int:
        return int(self.x.shape[0])


@dataclass(frozen=True)
class Predicted:
    """A block and its predictor :math:`z = X\\theta` (at the start of a fit)."""

    rows: PlattBlock
    z: Any


@dataclass(frozen=True)
class Stepped:
    """A block, its predictor ``z`` and a step's :math:`X d` (the line search's trials are ``z + s X d``)."""

    rows: PlattBlock
    z: Any
    dz: Any


@dataclass(frozen=True)
class Curved:
    """A block at the iterate: its predictor, its row curvatures ``D`` and its gradient pass's sums."""

    rows: PlattBlock
    z: Any
    curvature: Any
    sums: np.ndarray  # [loss, sum r x, sum r, sum D x^2, sum D, sum D x, code sums of (r, D) (flattened)]


#: Entries of a gradient pass's sums before the code sums: loss, sum r x, sum r, sum D x^2, sum D, sum D x.
N_ROW_SUMS = 6


# --------------------------------------------------------------------------------------------------
# Reading


def read_block(block: Any, score_col: Any, feature_cols: Any, score_kind: str, whole: bool) -> CheckedBlock:
    """Check one block of ``X, y, sample_weight`` as ``FeatureAwarePlattCalibrator.fit`` does its input.

    ``whole``: the block is all the rows (one machine), checked as a whole; otherwise a partition, which
    may be empty, whose index must match its labels' and whose weights may all be zero (the summary pass
    checks the whole data).
    """
    X, y, w = block["X"], block["y"], block["sample_weight"]
    split = parse_input(
        X,
        score_col=score_col,
        feature_cols=feature_cols,
        score_kind=score_kind,
        require_features=True,
        allow_empty=not whole,
    )
    if not whole:
        check_same_index(X=X, y=y, sample_weight=w)
    labels = check_labels(y, "y")
    n_rows = check_consistent_length(X=split.score, y=labels)
    xp = array_namespace(labels)
    weights = (
        check_sample_weight(w, n_rows, xp=xp) if whole or w is None else check_partition_weight(w, n_rows, xp)
    )
    return CheckedBlock(X, split, labels, weights, w)


def encoder_inputs(block: CheckedBlock, whole: bool) -> tuple[Any, Any]:
    """The features and weights (as given) the encoder fits on: the split's columns for the whole data,
    a partition's frame of feature columns otherwise (its per-block summary reads a frame)."""
    features = block.split.features if whole else block.source[list(block.split.features)]
    return features, block.source_w


def encode_block(block: CheckedBlock, encoder: FeatureEncoder, device: str, score_kind: str) -> PlattBlock:
    """Encode a checked block and move it to the resolved ``device`` ("auto" follows the block's data)."""
    codes = encoder.transform(block.split.features)
    where = resolve_device(device, block.split.score, codes)
    score, codes, labels, weights = (
        on_device(a, where) for a in (block.split.score, codes, block.y, block.w)
    )
    return PlattBlock(score_feature(score, score_kind), codes, labels, weights)


def block_summary(block: PlattBlock) -> np.ndarray:
    """``[rows, sum w, sum w y, positives, negatives]`` (``gpucal.rows.label_summary``)."""
    return label_summary(block.y, block.w)


def strided(block: PlattBlock, stride: int, *, row_offset: int) -> PlattBlock:
    """The block's rows whose global index is a multiple of ``stride`` (the warm start's sample,
    :func:`~gpucal.rows.block.strided_rows`)."""
    return PlattBlock(*strided_rows(stride, row_offset, block.x, block.codes, block.y, block.w))


def select_columns(block: PlattBlock, columns: np.ndarray) -> PlattBlock:
    """The block with the code columns ``columns`` only (C-contiguous, for the kernels)."""
    return PlattBlock(block.x, select_code_columns(block.codes, columns), block.y, block.w)


def code_weights(block: PlattBlock, n_values: np.ndarray) -> np.ndarray:
    """``sum w`` per code, features in order (flat, ``sum(n_values)`` entries): one pass over the codes
    (:func:`~gpucal.calibrators._feature_platt_kernels.code_sums`), not a ``bincount`` per column."""
    return code_sums(block.codes, n_values, block.w)[:, 0]


def pooled_levels(block: PlattBlock, crosses: Sequence[Cross], n_first: int) -> np.ndarray:
    """Per cross (code column ``n_first + i``), the rows of positive weight holding its pooled code,
    counted per level of its left column, then per level of its right column (flat, in cross order)."""
    xp = array_namespace(block.codes)
    counts = []
    for i, cross in enumerate(crosses):
        pooled = block.codes[(block.codes[:, n_first + i] == cross.pooled_code) & (block.w > 0)]
        for column, n_levels in ((cross.left, cross.n_left), (cross.right, cross.n_right)):
            counts.append(to_numpy(xp.bincount(pooled[:, column].astype(xp.int64), minlength=n_levels)))
    return np.concatenate(counts) if counts else np.zeros(0)


def nested_code_table(block: PlattBlock, n_values: np.ndarray, n_first: int, array_code: bool) -> np.ndarray:
    """:func:`~gpucal.calibrators._feature_platt_kernels.nested_codes` of the block's first ``n_first``
    code columns (the first-order ones; ``n_values`` of every column)."""
    return nested_codes(block.codes, block.w, n_values[:n_first], array_code=array_code)


def level_sums(block: PlattBlock, theta: np.ndarray, n_values: np.ndarray, array_code: bool) -> np.ndarray:
    """Per code, at the model ``theta`` (zero on the codes it does not fit): ``sum w (p - y)`` and
    ``sum w p (1 - p)``, shape ``(sum(n_values), 2)``: the code sums of the gradient pass
    (``curved_rows``)."""
    offsets = value_offsets(np.asarray(n_values, dtype=np.int64))
    z = _linear(block, theta, offsets, array_code)
    rows = (block.x, block.y, block.w, block.codes)
    sums = curved_rows(z, None, 1.0, *rows, n_values, array_code=array_code)[2]
    return sums[N_ROW_SUMS:].reshape(-1, 2)


def score_block(block: PlattBlock) -> ScoreBlock:
    """The block's score feature, labels and weights: the rows of Platt scaling on the score alone."""
    return ScoreBlock(block.x, block.y, block.w)


# --------------------------------------------------------------------------------------------------
# Newton-CG's passes


def _linear(block: PlattBlock, theta: np.ndarray, offsets: np.ndarray, array_code: bool) -> Any:
    return linear_predictor(
        block.x, theta[0], theta[1], theta[2:], block.codes, offsets, array_code=array_code
    )


def predicted(block: PlattBlock, theta: np.ndarray, offsets: np.ndarray, array_code: bool) -> Predicted:
    """The block with its predictor :math:`X \\theta` (``theta = [a, b, beta]``)."""
    return Predicted(block, _linear(block, theta, offsets, array_code))


def stepped(block: Curved, step: np.ndarray, offsets: np.ndarray, array_code: bool) -> Stepped:
    """The block at the iterate with the step's :math:`X d`."""
    return Stepped(block.rows, block.z, _linear(block.rows, step, offsets, array_code))


def curved(block: Predicted, n_values: np.ndarray, array_code: bool) -> Curved:
    """The gradient pass of a block at its predictor: its curvatures (kept for the Hessian products),
    its loss and gradient sums (``_feature_platt_kernels.curved_rows``)."""
    rows = block.rows
    z, curvature, sums = curved_rows(
        block.z, None, 1.0, rows.x, rows.y, rows.w, rows.codes, n_values, array_code=array_code
    )
    return Curved(rows, z, curvature, sums)


def trial_curved(block: Stepped, scale: float, n_values: np.ndarray, array_code: bool) -> Curved:
    """:func:`curved` at a line-search trial's predictor ``z + scale * X d``, in the same pass."""
    rows = block.rows
    z, curvature, sums = curved_rows(
        block.z, block.dz, scale, rows.x, rows.y, rows.w, rows.codes, n_values, array_code=array_code
    )
    return Curved(rows, z, curvature, sums)


def curved_sums(block: Curved) -> np.ndarray:
    """The gradient pass's sums: ``[loss, sum r x, sum r, sum D x^2, sum D, sum D x, code sums of (r, D)
    (flattened)]``."""
    return block.sums


def hessian_sums(block: Curved, v: np.ndarray, n_values: np.ndarray, array_code: bool) -> np.ndarray:
    """``[sum D u x, code sums of D u (flattened)]`` for :math:`u = X v`."""
    rows = block.rows
    return hessian_rows(rows.x, rows.codes, n_values, v, block.curvature, array_code=array_code)


__all__ = [
    "CheckedBlock",
    "Curved",
    "PlattBlock",
    "Predicted",
    "Stepped",
    "block_summary",
    "code_weights",
    "curved",
    "curved_sums",
    "encode_block",
    "encoder_inputs",
    "hessian_sums",
    "level_sums",
    "nested_code_table",
    "pooled_levels",
    "predicted",
    "read_block",
    "score_block",
    "select_columns",
    "stepped",
    "strided",
    "trial_curved",
]
