"""``MBCT.fit`` on dask collections: the single-machine fit, with every statistic a sum over partitions.

The rows never leave the worker that read them. Each partition is read and encoded once; then each
worker's partitions are concatenated there (:func:`~gpucal.distributed.trees.per_worker`), so every
later pass ships one small result per worker whatever the number of partitions. Each step of
``MBCT._fit_codes`` becomes passes over them:

====================================  ===========================================================
one machine                           over partitions
====================================  ===========================================================
``FeatureEncoder.fit``                :func:`~gpucal.distributed.fit_encoder` (the same encoder)
codes, score bins                     ``MBCT._codes`` per partition
validation split                      ``held_out_mask`` per partition, the generator advanced to
                                      the partition's global row offset (the same rows held out)
``label_moments`` (Eq. 13's beta)     sums of ``w``, ``w y`` (with the split's summary), then
                                      of ``w (y - mean)^2``
``tree_code_maps``                    sum of ``code_weights`` (with the split's summary)
initial Platt map                     ``DaskLogisticRows``: Newton steps of summed passes
``grow_tree``                         ``grow_tree_on`` a :class:`~gpucal.distributed.trees.PartitionedRows`
                                      (one node-ordered store per worker, splits decided there)
leaf refit (``fit_local_maps``)       ``fit_local_maps_from_sums`` of summed ``local_map_sums``
global loss                           sums of ``w * loss`` and ``w``
the chain's output ``f``              ``predict_ensemble`` per worker, persisted
====================================  ===========================================================

so the trees are those of one machine up to the order of the additions (about 1e-15 relative per
sum). Identical rows are not merged (``aggregate``): merging is lossless, so it changes only that
order. Criterion "mvce" is refused: its views are equal-count bins over a node's rows in order, not
sums over partitions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from gpucal._backend import array_namespace, is_cupy_array
from gpucal._frames import split_input
from gpucal._validation import check_consistent_length, check_labels, check_same_index
from gpucal.calibrators._logistic import LogisticRows, check_class_weights
from gpucal.distributed.calibrators import (
    DaskLogisticRows,
    PartitionRows,
    combine_score_summaries,
    score_summary,
)
from gpucal.distributed.encoding import fit_encoder
from gpucal.distributed.trees import PartitionedRows
from gpucal.encoding import FeatureEncoder
from gpucal.mbct.model import (
    LevelLog,
    fit_init_platt,
    global_loss_sums,
    label_square_sum,
)
from gpucal.partition.ensemble import (
    TreeEnsemble,
    code_maps_from_weights,
    code_weights,
    map_codes,
    predict_ensemble,
)
from gpucal.partition.grow import GrowConfig, TreeNodes, grow_tree_on
from gpucal.partition.local_maps import MapSums, flatten_map_sums, local_map_sums, unflatten_map_sums
from gpucal.rows._checks import check_partition_weight
from gpucal.rows._collections import Partitions, partitions
from gpucal.rows._placement import as_partitions, map_persisted, per_worker, persist
from gpucal.rows._reduce import reduce_partitions, sum_partitions
from gpucal.rows.draws import check_held_out, held_out_mask

if TYPE_CHECKING:
    from gpucal.mbct.model import MBCT

# Columns of the input summary pass (the code weights from _CODE_WEIGHTS on).
_N_ROWS, _N_HELD, _N_POSITIVE, _N_NEGATIVE, _W_SUM, _WY_SUM, _CODE_WEIGHTS = range(7)


@dataclass(frozen=True)
class RowsPart:
    """One partition's rows of one side of the split: codes, score (or tree input), labels, weights."""

    codes: Any
    f: Any
    y: Any
    w: Any  # None: unit weights


@dataclass(frozen=True)
class _SplitPart:
    """One partition read and split: training rows, validation rows (None without a split), summary."""

    train: RowsPart
    valid: RowsPart | None
    summary: np.ndarray


def fit_mbct_partitions(model: MBCT, X: Any, y: Any, sample_weight: Any) -> None:
    """Fit ``model`` (parameters validated) on the dask DataFrame ``X``, labels and weights alike.

    Sets the fitted attributes of ``MBCT.fit``. Raises ``NotImplementedError`` for criterion "mvce".
    With ``dask.config`` key ``gpucal.stream-partitions`` set, no rows are held between passes
    (``gpucal.distributed.mbct_stream``).
    """
    parts = _encoded_input(model, X, y, sample_weight)
    from gpucal.distributed.mbct_stream import first_streamed_chain, stream_partitions

    if stream_partitions():
        model._grow_chain(first_streamed_chain(model, parts.parts))
        return
    # No local holds the first chain's rows (nor the input codes) while the trees grow: each tree's
    # rows are freed on the workers once the next tree's are made.
    model._grow_chain(_first_chain(model, parts))


def _encoded_input(model: MBCT, X: Any, y: Any, sample_weight: Any) -> Partitions:
    """Check the input's columns, fit the encoder (one pass); return the aligned input partitions."""
    if model.criterion == "mvce":
        msg = (
            "MBCT(criterion='mvce') has no distributed fit: MVCE's views are equal-count bins over the rows "
            "of a node in order, which are not sums over partitions. Use criterion='gain' on a dask "
            "collection, or fit on one machine."
        )
        raise NotImplementedError(msg)
    parts = partitions({"X": X, "y": y, "sample_weight": sample_weight})
    meta = split_input(X._meta, score_col=model.score_col, feature_cols=model.feature_cols, allow_empty=True)
    names = list(meta.features)
    if not names and not model.score_bins:
        msg = "X: MBCT needs a feature column or score_bins > 0 to split on"
        raise ValueError(msg)
    model._backend = "cuda" if is_cupy_array(meta.score) else "cpu"
    model.encoder_ = None
    if names:
        encoder = FeatureEncoder(n_bins=model.n_bins, categorical_cols=model.categorical_cols)
        model.encoder_ = fit_encoder(encoder, X[names], sample_weight=sample_weight)
    model.feature_cols_ = [] if model.encoder_ is None else list(model.encoder_.feature_names_)
    return parts


def _first_chain(model: MBCT, parts: Partitions) -> DaskChainRows:
    """Everything before the trees: encoded and split rows held per worker, sizes, code maps, initial map."""
    import dask

    # Each partition is read and encoded once; the validation split needs the global row offsets, known
    # when every partition's length is (a small gather of the persisted parts, no second read).
    encoded = persist([dask.delayed(_encode_part, pure=False)(*part, model) for part in parts.parts])
    lengths = dask.compute(*[dask.delayed(_n_rows, pure=False)(part) for part in encoded])
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    # One split part per worker (its partitions concatenated where they are): every later pass ships one
    # result per worker, and each tree's store is built without another copy.
    split_parts = per_worker(_split_group, encoded, model, offsets)
    del encoded  # the workers free the encoded partitions once their worker's split part exists
    summary = sum_partitions(as_partitions(split_parts), _part_summary, args=(model._n_values(),))
    _check_summary(model, summary)
    train = map_persisted(_side, split_parts, "train")
    valid = map_persisted(_side, split_parts, "valid") if model.validation_fraction else None
    del split_parts  # the workers free each read copy once both sides are taken
    n_train = int(summary[_N_ROWS] - summary[_N_HELD])
    model._log(
        1,
        f"MBCT: {n_train} training rows, {len(model._n_values())} split features (dask, "
        f"{len(parts.parts)} partitions on {len(train)} worker(s))",
    )

    def square_sum(mean: float) -> float:
        return float(sum_partitions(as_partitions(train), _label_square_sum, args=(mean,))[0])

    fit_input_state(model, summary, square_sum, lambda: _ScoreRows.of_parts(train))
    maps, n_values = model._code_maps, model._tree_n_values
    chain_train = map_persisted(_chain_input, train, model, maps, n_values)
    chain_valid = None if valid is None else map_persisted(_chain_input, valid, model, maps, n_values)
    return DaskChainRows(model, chain_train, chain_valid)  # the input codes are freed on return


def fit_input_state(
    model: MBCT,
    summary: np.ndarray,
    label_square_sum: Callable[[float], float],
    score_rows: Callable[[], _ScoreRows],
) -> None:
    """Set what the trees start from, from the input summary (:func:`_part_summary` added up).

    ``min_node_size_`` (Eq. 13's beta, from the label moments: ``label_square_sum(mean)`` is one more
    pass), the tree code maps (from the code weights), and ``init_`` (the initial Platt map: Newton
    steps of summed passes over ``score_rows()``, the training scores).
    """
    total, label_sum = float(summary[_W_SUM]), float(summary[_WY_SUM])
    model._resolve_sizes(total, label_square_sum(label_sum / total) / total)
    model._code_maps, model._rare_codes, model._tree_n_values = code_maps_from_weights(
        summary[_CODE_WEIGHTS:], model._n_values(), model.min_child_size_
    )
    model.init_ = np.array([1.0, 0.0])
    if model.init == "platt":
        # DaskLogisticRows spells out fit's keyword options where the protocol takes **options.
        model.init_ = np.array(fit_init_platt(cast(LogisticRows, DaskLogisticRows(score_rows()))))


# --------------------------------------------------------------------------------------------------
# Reading the partitions


@dataclass(frozen=True)
class _EncodedPart:
    """One partition checked and encoded: its rows and ``[n, positive, negative]`` (weighted rows)."""

    rows: RowsPart
    counts: np.ndarray


def _encode_part(X: Any, y: Any, w: Any, model: MBCT) -> _EncodedPart:
    """Check one partition as ``MBCT.fit`` checks its input and encode it (codes, score, labels, weights)."""
    split = split_input(X, score_col=model.score_col, feature_cols=model.feature_cols_, allow_empty=True)
    score = split.score
    check_same_index(X=X, y=y, sample_weight=w)
    labels = check_labels(y, "y")
    n = check_consistent_length(X=score, y=labels)
    xp = array_namespace(score)
    weights = None if w is None else check_partition_weight(w, n, xp)
    weighted = xp.ones(n, dtype=bool) if weights is None else weights > 0
    counts = np.array(
        [n, int(xp.count_nonzero(weighted & (labels > 0))), int(xp.count_nonzero(weighted & (labels < 1)))],
        dtype=np.float64,
    )
    return _EncodedPart(RowsPart(model._codes(split, model.encoder_), score, labels, weights), counts)


def _n_rows(part: _EncodedPart) -> int:
    return int(part.counts[0])


def _take(parts: list[RowsPart], keep: list[np.ndarray], xp: Any) -> RowsPart:
    """The rows ``keep[i]`` (boolean masks) of every partition, concatenated in partition order.

    The output is allocated once and filled partition by partition, so a worker holds its encoded
    partitions and one copy of the kept rows, not a copy per partition as well.
    """
    n = int(sum(int(k.sum()) for k in keep))
    first = parts[0]
    codes = xp.empty((n, first.codes.shape[1]), dtype=first.codes.dtype)
    f = xp.empty(n, dtype=first.f.dtype)
    y = xp.empty(n, dtype=first.y.dtype)
    w = None if first.w is None else xp.empty(n, dtype=first.w.dtype)
    at = 0
    for part, mask in zip(parts, keep, strict=True):
        take = xp.asarray(np.flatnonzero(mask))
        end = at + int(take.shape[0])
        codes[at:end] = part.codes[take]
        f[at:end] = part.f[take]
        y[at:end] = part.y[take]
        if w is not None:
            w[at:end] = part.w[take]
        at = end
    return RowsPart(codes, f, y, w)


def _split_group(
    parts: list[_EncodedPart], indices: list[int], model: MBCT, offsets: np.ndarray
) -> _SplitPart:
    """One worker's encoded partitions split (train, valid) and concatenated, with their summary.

    Partition ``i``'s held-out rows are those of one machine: ``held_out_mask`` from its global offset.
    """
    rows = [p.rows for p in parts]
    xp = array_namespace(rows[0].f)
    weighted = [r.w is not None for r in rows]
    if any(weighted) and not all(weighted):
        msg = "sample_weight: some partitions have weights and others not"
        raise ValueError(msg)
    sizes = [int(p.counts[0]) for p in parts]
    held = [
        held_out_mask(n, model.validation_fraction, model.seed, int(offsets[i]))
        if model.validation_fraction
        else np.zeros(n, dtype=bool)
        for n, i in zip(sizes, indices, strict=True)
    ]
    train = _take(rows, [~h for h in held], xp)
    valid = _take(rows, held, xp) if model.validation_fraction else None
    counts = np.sum([p.counts for p in parts], axis=0)
    summary = np.array([counts[0], sum(int(h.sum()) for h in held), counts[1], counts[2]], dtype=np.float64)
    return _SplitPart(train, valid, summary)


def _part_summary(part: _SplitPart, n_values: np.ndarray) -> np.ndarray:
    """``[rows, held, positive, negative, sum w, sum w y, code weights...]``: the checks, the first
    label moment and the code weights of the training rows, in one pass."""
    return np.concatenate([part.summary, _label_sums(part.train), _code_weights(part.train, n_values)])


def _side(part: _SplitPart, which: str) -> RowsPart | None:
    return part.train if which == "train" else part.valid


def _check_summary(model: MBCT, summary: np.ndarray) -> None:
    """The whole-data checks of ``MBCT.fit``: rows, both classes weighted, both sides of the split."""
    n = int(summary[_N_ROWS])
    if n == 0:
        msg = "X: no rows"
        raise ValueError(msg)
    check_class_weights(summary[_N_POSITIVE] > 0, summary[_N_NEGATIVE] > 0)
    if model.validation_fraction:
        check_held_out(int(summary[_N_HELD]), n, model.validation_fraction)


# --------------------------------------------------------------------------------------------------
# Sums before the trees


def _label_sums(part: RowsPart) -> np.ndarray:
    """``[sum w, sum w y]`` of a partition (``label_moments``' first pass)."""
    total = float(part.y.shape[0] if part.w is None else part.w.sum())
    return np.array([total, float((part.y if part.w is None else part.w * part.y).sum())])


def _label_square_sum(part: RowsPart, mean: float) -> np.ndarray:
    return np.array([label_square_sum(part.y, part.w, mean)])


def _code_weights(part: RowsPart, n_values: np.ndarray) -> np.ndarray:
    return code_weights(part.codes, part.w, n_values)


def _weighted_scores(part: RowsPart, fn: Any, *args: Any) -> Any:
    """``fn(score, y, w, *args)`` with unit weights made explicit (the logistic sums need an array)."""
    xp = array_namespace(part.f)
    w = xp.ones_like(part.f) if part.w is None else part.w
    return fn(part.f, part.y, w, *args)


@dataclass
class _ScoreRows(PartitionRows):
    """The training scores as the ``PartitionRows`` that ``DaskLogisticRows`` fits the Platt map on."""

    @classmethod
    def of_parts(cls, parts: list[Any]) -> _ScoreRows:
        """The training partitions, with the summary pass (weights, classes, score range) done."""
        rows = cls(as_partitions(parts), None, "probability")
        rows.summary = reduce_partitions(
            rows.parts, _weighted_scores, combine_score_summaries, args=(score_summary,)
        )
        return rows

    def sum(self, fn: Any, *args: Any) -> np.ndarray:
        return sum_partitions(self.parts, _weighted_scores, args=(fn, *args))


def _chain_input(part: RowsPart, model: MBCT, maps: list[np.ndarray], n_values: np.ndarray) -> RowsPart:
    """A partition's tree codes and the chain's first input (the initial map of the score)."""
    return RowsPart(map_codes(part.codes, maps, n_values), model._apply_init(part.f), part.y, part.w)


# --------------------------------------------------------------------------------------------------
# The chain


def _loss_sums(part: RowsPart, leaf_map: str) -> np.ndarray:
    return np.array(global_loss_sums(part.f, part.y, part.w, leaf_map))


def _map_sums(part: Any, theta: np.ndarray, kind: str, backend: str) -> np.ndarray:
    """``local_map_sums`` of a partition grouped by its rows' nodes, flattened ``[w, grad, hess]``."""
    return flatten_map_sums(
        *local_map_sums(part.f, part.y, part.w, part.node_idx, theta, kind, backend=backend)
    )


def partition_map_sums(parts: list[Any], kind: str, backend: str) -> MapSums:
    """``theta -> local_map_sums`` added over persisted partitions grouped by their ``node_idx``."""

    def sums(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        flat = sum_partitions(as_partitions(parts), _map_sums, args=(theta, kind, backend))
        return unflatten_map_sums(flat, *theta.shape)

    return sums


def _through(part: RowsPart, tree: TreeEnsemble) -> RowsPart:
    return RowsPart(part.codes, predict_ensemble(tree, part.codes, part.f), part.y, part.w)


@dataclass(frozen=True)
class DaskChainRows:
    """``gpucal.mbct.model.ChainRows`` over persisted partitions of :class:`RowsPart` (tree codes).

    The training rows of a tree are its workers' stores: after a tree is grown, the next tree's input
    is predicted on the rows of that tree's stores (in their node order), so a worker holds one copy
    of its training rows, not a data-ordered copy beside the node-ordered one. Every statistic is a
    sum over rows, so the order changes nothing but the order of the additions.
    """

    model: MBCT
    train: list[Any]
    valid: list[Any] | None
    grown: list[PartitionedRows] = field(default_factory=list, compare=False, repr=False)

    def global_loss(self) -> float:
        """``MBCT._global_loss`` ("gain"): summed ``w * loss`` over summed ``w``, validation rows if held."""
        rows = self.train if self.valid is None else self.valid
        loss_sum, weight_sum = sum_partitions(as_partitions(rows), _loss_sums, args=(self.model.leaf_map,))
        return float(loss_sum) / float(weight_sum)

    def grow(
        self, n_values: np.ndarray, rare_codes: np.ndarray, config: GrowConfig, log: LevelLog
    ) -> tuple[TreeNodes, PartitionedRows]:
        """Grow on the training partitions; the leaf is the store, each worker's rows in their node."""
        nodes, leaf = grow_tree_on(PartitionedRows.in_root(self.train), n_values, rare_codes, config, log=log)
        self.grown[:] = [leaf]
        return nodes, leaf

    def map_sums(self, leaf: PartitionedRows, kind: str) -> MapSums:
        """``theta -> local_map_sums`` added over the partitions of the grown tree."""
        return partition_map_sums(leaf.parts, kind, self.model._backend)

    def through(self, tree: TreeEnsemble) -> DaskChainRows:
        """Both sides' input passed through ``tree`` on every partition (the training rows: those of the
        tree's stores when it was grown here), persisted."""
        train = self.grown[0].parts if self.grown else self.train
        valid = None if self.valid is None else map_persisted(_through, self.valid, tree)
        return DaskChainRows(self.model, map_persisted(_through, train, tree), valid)


__all__ = ["DaskChainRows", "RowsPart", "fit_mbct_partitions", "partition_map_sums"]
