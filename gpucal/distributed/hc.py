"""``HeterogeneousCalibrator.fit`` on dask collections: one machine's fit, sums over partitions.

The rows never leave their partitions. Each step of the single-machine fit becomes passes over them:

====================================  ===========================================================
one machine                           over partitions
====================================  ===========================================================
``FeatureEncoder.fit``                :func:`~gpucal.distributed.fit_encoder` (the same encoder)
checks of labels and weights          per partition, both classes from summed counts
``tree_fraction`` split (``divide``)  ``held_out_mask`` per partition, the generator advanced to
                                      the partition's global row offset (the same tree rows)
``tree_code_maps``                    sum of ``code_weights`` (per-code weighted bincounts)
``grow_tree``                         ``grow_tree_on`` a :class:`~gpucal.distributed.trees.PartitionedRows`
``fit_node_maps`` (per depth)         ``fit_node_maps_on`` with ``fit_local_maps_from_sums`` of
                                      summed ``local_map_sums`` of each row's node at that depth
                                      ("scale": its closed form from the summed group sums)
forest: bootstrap weights             ``bootstrap_weights`` of the rows' global positions (counter-
                                      based draws), feature subsets from the seed
boosted: validation split             ``held_out_mask`` advanced to the partition's offset among the
                                      map rows
boosted: the chain's output ``f``     each tree's node maps applied per partition, persisted
held-out log-loss                     sums of ``w * loss`` and ``w``
====================================  ===========================================================

so the trees and their maps are those of one machine up to the order of the additions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from gpucal._backend import array_namespace, is_cupy_array
from gpucal._frames import frame_columns, split_input
from gpucal._validation import check_consistent_length, check_labels, check_same_index
from gpucal.calibrators._logistic import EPS, check_class_weights
from gpucal.distributed.encoding import fit_encoder
from gpucal.distributed.mbct import _code_weights, partition_map_sums
from gpucal.distributed.trees import PartitionedRows, TreeRowsPart
from gpucal.encoding import FeatureEncoder
from gpucal.hc.model import bootstrap_weights
from gpucal.hc.node_maps import fit_node_maps_on, node_ancestors, tree_parents
from gpucal.partition.ensemble import map_codes
from gpucal.partition.grow import GrowConfig, TreeNodes, grow_tree_on
from gpucal.partition.local_maps import (
    fit_local_maps_from_sums,
    fit_scale_maps_from_sums,
    part_sums,
    start_params,
)
from gpucal.rows._checks import check_all_dask, check_partition_weight
from gpucal.rows._collections import partition_offsets, partitions
from gpucal.rows._placement import as_partitions, map_persisted, persist
from gpucal.rows._reduce import sum_partitions
from gpucal.rows.draws import held_out_mask

if TYPE_CHECKING:
    from gpucal.hc.model import HeterogeneousCalibrator

# Columns of a partition's summary: rows, tree rows among them, weighted positives, weighted negatives.
_N_ROWS, _N_TREE, _N_POSITIVE, _N_NEGATIVE = range(4)


@dataclass(frozen=True)
class _Part:
    """One partition's rows of one role: codes, tree input or score ``f``, labels, weights (None: unit)
    and ``index``, each row's position in the input it came from (host int64; the bootstrap's key)."""

    codes: Any
    f: Any
    y: Any
    w: Any
    index: np.ndarray


@dataclass(frozen=True)
class _ReadPart:
    """One partition read and encoded: its tree rows and map rows (either may be None), its summary."""

    tree: _Part | None
    cal: _Part | None
    summary: np.ndarray


def fit_hc_partitions(
    model: HeterogeneousCalibrator,
    X: Any,
    y: Any,
    sample_weight: Any,
    X_tree: Any,
    y_tree: Any,
    sample_weight_tree: Any,
) -> None:
    """Fit ``model`` (parameters validated) on the dask DataFrame ``X`` (and ``X_tree``), as one machine.

    Sets the fitted attributes of ``HeterogeneousCalibrator.fit``, every mode and local map.
    """
    given = {
        "X": X,
        "y": y,
        "sample_weight": sample_weight,
        "X_tree": X_tree,
        "y_tree": y_tree,
        "sample_weight_tree": sample_weight_tree,
    }
    check_all_dask(given)
    meta = split_input(
        X._meta,
        score_col=model.score_col,
        feature_cols=model.feature_cols,
        require_features=True,
        allow_empty=True,
    )
    model._backend = "cuda" if is_cupy_array(meta.score) else "cpu"
    model.feature_cols_ = list(meta.features)
    encoder = FeatureEncoder(n_bins=model.n_bins, categorical_cols=model.categorical_cols)
    import dask

    read = dask.delayed(_read_part, pure=False)
    cal_parts = partitions({"X": X, "y": y, "sample_weight": sample_weight})
    offsets, _ = partition_offsets(cal_parts)
    if X_tree is None:
        model.encoder_ = fit_encoder(encoder, X[model.feature_cols_], sample_weight=sample_weight)
        read_parts = persist(
            [read(*p, model, int(o), "split") for p, o in zip(cal_parts.parts, offsets, strict=True)]
        )
        summary = sum_partitions(as_partitions(read_parts), _summary)
        _check_classes(summary, "y")
        _check_split(summary, model.tree_fraction)
        tree = map_persisted(_side, read_parts, "tree")
        cal = map_persisted(_side, read_parts, "cal")
    else:
        tree_inputs = {"X_tree": X_tree, "y_tree": y_tree, "sample_weight_tree": sample_weight_tree}
        tree_parts = partitions(tree_inputs)
        tree_offsets, _ = partition_offsets(tree_parts)
        model.encoder_ = fit_encoder(encoder, X_tree[model.feature_cols_], sample_weight=sample_weight_tree)
        read_parts = persist(
            [read(*p, model, int(o), "map") for p, o in zip(cal_parts.parts, offsets, strict=True)]
        )
        _check_classes(sum_partitions(as_partitions(read_parts), _summary), "y")
        read_tree = persist(
            [read(*p, model, int(o), "tree") for p, o in zip(tree_parts.parts, tree_offsets, strict=True)]
        )
        summary = sum_partitions(as_partitions(read_tree), _summary)
        _check_classes(summary, "y_tree")
        tree = map_persisted(_side, read_tree, "tree")
        cal = map_persisted(_side, read_parts, "cal")
    del read_parts

    n_values = np.asarray(model.encoder_.n_values_, dtype=np.int64)
    maps, counts = model._set_code_maps(sum_partitions(as_partitions(tree), _code_weights, args=(n_values,)))
    tree = map_persisted(_tree_codes, tree, maps, counts)
    cal = map_persisted(_tree_codes, cal, maps, counts)
    model._log(
        1,
        f"HC ({model.mode}): {int(summary[_N_TREE])} tree rows, {len(model._ordinal)} features "
        f"(dask, {len(cal)} map partitions)",
    )
    model.history_ = []
    if model.mode == "boosted":
        trees, params = _fit_boosted(model, tree, cal)
    else:
        trees, params = _fit_trees(model, tree, cal)
    model._set_ensemble(trees, params, maps, counts)


# --------------------------------------------------------------------------------------------------
# Reading the partitions


def _read_part(
    X: Any, y: Any, w: Any, model: HeterogeneousCalibrator, row_offset: int, role: str
) -> _ReadPart:
    """Check and encode one partition as ``fit`` checks its input (its first row is global ``row_offset``).

    ``role`` "split": rows of ``X`` cut into tree rows and map rows by ``tree_fraction``; "map": rows
    of ``X``, all map rows; "tree": rows of ``X_tree`` (features, and the score in mode "boosted"), all
    tree rows.
    """
    boosted = model.mode == "boosted"
    if role == "tree" and not boosted:
        features, score = frame_columns(X, model.feature_cols_, name="X_tree"), None
    else:
        name = "X_tree" if role == "tree" else "X"
        split = split_input(
            X, score_col=model.score_col, feature_cols=model.feature_cols_, allow_empty=True, name=name
        )
        features, score = split.features, split.score
    x_name, y_name, w_name = (
        ("X_tree", "y_tree", "sample_weight_tree") if role == "tree" else ("X", "y", "sample_weight")
    )
    check_same_index(**{x_name: X, y_name: y, w_name: w})
    labels = check_labels(y, y_name)
    n = check_consistent_length(**{x_name: next(iter(features.values())).values, y_name: labels})
    xp = array_namespace(labels)
    weights = None if w is None else check_partition_weight(w, n, xp, w_name)
    codes = xp.asarray(model.encoder_.transform(features))
    weighted = xp.ones(n, dtype=bool) if weights is None else weights > 0
    grows = np.full(n, role == "tree")
    if role == "split":
        # Row r grows the tree when draw r of default_rng(seed) is below the share, as in _Rows.divide.
        grows = held_out_mask(n, model.tree_fraction, model.seed, row_offset)
    summary = np.array(
        [
            n,
            int(grows.sum()),
            int(xp.count_nonzero(weighted & (labels > 0))),
            int(xp.count_nonzero(weighted & (labels < 1))),
        ],
        dtype=np.float64,
    )

    def side(rows: np.ndarray, f: Any) -> _Part:
        take = xp.asarray(rows)
        return _Part(
            codes[take], f[take], labels[take], None if weights is None else weights[take], row_offset + rows
        )

    # The label tree's input: read by the gain criteria only, so any probability does; boosted trees
    # 2.. grow on the score's calibrated output.
    tree_f = score if boosted else xp.full_like(labels, 0.5)
    tree = side(np.flatnonzero(grows), tree_f) if role != "map" else None
    cal = side(np.flatnonzero(~grows), score) if role != "tree" else None
    return _ReadPart(tree, cal, summary)


def _summary(part: _ReadPart) -> np.ndarray:
    return part.summary


def _side(part: _ReadPart, which: str) -> _Part | None:
    return part.tree if which == "tree" else part.cal


def _check_classes(summary: np.ndarray, name: str) -> None:
    if int(summary[_N_ROWS]) == 0:
        msg = f"{name}: no rows"
        raise ValueError(msg)
    check_class_weights(summary[_N_POSITIVE] > 0, summary[_N_NEGATIVE] > 0, name)


def _check_split(summary: np.ndarray, share: float) -> None:
    """The check of ``_Rows.divide``: both sides of the ``tree_fraction`` split hold rows."""
    n, n_first = int(summary[_N_ROWS]), int(summary[_N_TREE])
    if n_first in (0, n):
        msg = f"a share of {share:g} of {n} rows leaves one side empty: give more rows"
        raise ValueError(msg)


def _tree_codes(part: _Part, maps: list[np.ndarray], counts: np.ndarray) -> _Part:
    return replace(part, codes=map_codes(part.codes, maps, counts))


# --------------------------------------------------------------------------------------------------
# Trees: one, a forest, or the boosted chain


def _grow(model: HeterogeneousCalibrator, parts: list[Any], config: GrowConfig) -> TreeNodes:
    log = (lambda line: model._log(2, line)) if model.verbose >= 2 else None
    nodes, _ = grow_tree_on(
        PartitionedRows.in_root(parts), model._tree_n_values, model._rare_codes, config, log=log
    )
    return nodes


def _bootstrapped(part: _Part, seed: int, tree: int) -> _Part:
    """A partition's tree rows weighted by forest tree ``tree``'s bootstrap counts (one machine's)."""
    xp = array_namespace(part.y)
    boot = xp.asarray(bootstrap_weights(seed, tree, part.index))
    return replace(part, w=boot if part.w is None else part.w * boot)


def _fit_trees(
    model: HeterogeneousCalibrator, tree: list[Any], cal: list[Any]
) -> tuple[list[TreeNodes], np.ndarray]:
    """``HeterogeneousCalibrator._fit_trees`` over partitions: the label tree, or the forest."""
    rng = np.random.default_rng(model.seed)  # the feature subsets, drawn as one machine draws them
    d = len(model._ordinal)
    n_trees = 1 if model.mode == "tree" else model.n_trees
    trees, params = [], []
    for t in range(n_trees):
        start = time.perf_counter()
        parts = tree
        mask: tuple[bool, ...] = ()
        if model.mode == "forest":
            parts = map_persisted(_bootstrapped, tree, model.seed, t)
            mask = model._feature_mask(rng, d)
        nodes = _grow(model, parts, model._grow_config(model.criterion, mask))
        trees.append(nodes)
        params.append(_fit_node_maps(model, nodes, cal))
        model._record(t, nodes, start)
    return trees, np.concatenate(params)


def _n_rows(part: _Part) -> int:
    return int(part.y.shape[0])


def _divided(part: _Part, share: float, seed: int, row_offset: int) -> tuple[_Part, _Part]:
    """``_Rows.divide`` of a partition whose first row is row ``row_offset`` of all the map rows."""
    first = held_out_mask(_n_rows(part), share, seed, row_offset)
    xp = array_namespace(part.y)

    def take(rows: np.ndarray) -> _Part:
        at = xp.asarray(rows)
        w = None if part.w is None else part.w[at]
        return _Part(part.codes[at], part.f[at], part.y[at], w, part.index[rows])

    return take(np.flatnonzero(first)), take(np.flatnonzero(~first))


def _pick(pair: tuple[_Part, _Part], which: int) -> _Part:
    return pair[which]


def _divide(parts: list[Any], share: float, seed: int) -> tuple[list[Any], list[Any]]:
    """The boosted chain's validation split of the map rows, as one machine draws it, checked alike."""
    import dask

    lengths = np.asarray(dask.compute(*[dask.delayed(_n_rows)(p) for p in parts]), dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    task = dask.delayed(_divided, pure=False)
    pairs = persist([task(p, share, seed, int(o)) for p, o in zip(parts, offsets, strict=True)])
    first, second = map_persisted(_pick, pairs, 0), map_persisted(_pick, pairs, 1)
    n_first = int(sum(dask.compute(*[dask.delayed(_n_rows)(p) for p in first])))
    if n_first in (0, int(lengths.sum())):
        msg = f"a share of {share:g} of {int(lengths.sum())} rows leaves one side empty: give more rows"
        raise ValueError(msg)
    return first, second


def _through(part: _Part, model: HeterogeneousCalibrator, nodes: TreeNodes, params: np.ndarray) -> _Part:
    """A partition's ``f`` through the node maps of one tree (``HeterogeneousCalibrator._apply_tree``)."""
    return replace(part, f=model._apply_tree(nodes, params, part.codes, part.f))


def _loss_sums(part: _Part) -> np.ndarray:
    """``[sum w * loss, sum w]`` of a partition: ``gpucal.hc.model._log_loss`` as sums."""
    xp = array_namespace(part.f)
    q = xp.clip(part.f, EPS, 1.0 - EPS)
    loss = -(part.y * xp.log(q) + (1.0 - part.y) * xp.log1p(-q))
    if part.w is None:
        return np.array([float(loss.sum()), float(loss.shape[0])])
    return np.array([float((part.w * loss).sum()), float(part.w.sum())])


def _log_loss(parts: list[Any]) -> float:
    total, weight = sum_partitions(as_partitions(parts), _loss_sums)
    return float(total) / float(weight)


def _fit_boosted(
    model: HeterogeneousCalibrator, tree: list[Any], cal: list[Any]
) -> tuple[list[TreeNodes], np.ndarray]:
    """``HeterogeneousCalibrator._fit_boosted`` over partitions: each tree's output a map, persisted."""
    share = 1.0 - model.validation_fraction
    fit, valid = _divide(cal, share, model.seed + 1) if model.validation_fraction else (cal, cal)
    loss = _log_loss(valid)
    trees: list[TreeNodes] = []
    params: list[np.ndarray] = []
    for t in range(model.n_trees):
        start = time.perf_counter()
        criterion = model.criterion if t == 0 else "gain"
        nodes = _grow(model, tree, model._grow_config(criterion))
        tree_params = _fit_node_maps(model, nodes, fit)
        valid_next = map_persisted(_through, valid, model, nodes, tree_params)
        new_loss = _log_loss(valid_next)
        kept = t == 0 or new_loss < loss
        model._record(t, nodes, start, loss, new_loss, kept)
        if not kept:
            break
        trees.append(nodes)
        params.append(tree_params)
        tree = map_persisted(_through, tree, model, nodes, tree_params)
        fit = map_persisted(_through, fit, model, nodes, tree_params)
        valid, loss = valid_next, new_loss
    return trees, np.concatenate(params)


# --------------------------------------------------------------------------------------------------
# The node maps


def _node_levels(
    part: _Part, model: HeterogeneousCalibrator, nodes: TreeNodes, depth: np.ndarray, parent: np.ndarray
) -> list[TreeRowsPart]:
    """Per depth ``d``, the partition's map rows grouped by their node at ``d`` (``node_ancestors``)."""
    leaf = model._leaves(nodes, part.codes)
    return [
        TreeRowsPart(None, part.f, part.y, part.w, level) for level in node_ancestors(leaf, depth, parent)
    ]


def _level(levels: list[TreeRowsPart], d: int) -> TreeRowsPart:
    return levels[d]


def _label_sums(part: _Part) -> np.ndarray:
    """``[sum w, sum w y]`` of a partition's map rows."""
    if part.w is None:
        return np.array([float(part.y.shape[0]), float(part.y.sum())])
    return np.array([float(part.w.sum()), float((part.w * part.y).sum())])


def _scale_sums(part: TreeRowsPart, n_parts: int, backend: str) -> np.ndarray:
    """The seven group sums per node of a partition's rows (what ``fit_local_maps`` "scale" reads)."""
    return part_sums(part.f, part.y, part.w, part.node_idx, n_parts, backend)


def _fit_node_maps(model: HeterogeneousCalibrator, nodes: TreeNodes, cal: list[Any]) -> np.ndarray:
    """``fit_node_maps`` over partitions: the same top-down loop, each level's sums added."""
    depth = np.asarray(nodes.depth, dtype=np.int64)
    levels = map_persisted(_node_levels, cal, model, nodes, depth, tree_parents(nodes))
    kind, backend = model.local_map, model._backend

    def fit_level(d: int, n_parts: int, prior: np.ndarray | None, penalty: float) -> np.ndarray:
        start = prior
        if start is None:  # the root: fit_local_maps' default start, which reads the label mean only
            mean = np.zeros(1)
            if kind == "constant":
                weight, label = sum_partitions(as_partitions(cal), _label_sums)
                mean = np.array([float(label) / float(weight)])
            start = start_params(mean, mean, None, n_parts, kind)
        level = map_persisted(_level, levels, d)
        if kind == "scale":
            stats = sum_partitions(as_partitions(level), _scale_sums, args=(n_parts, backend))
            return fit_scale_maps_from_sums(stats, start, penalty=penalty)
        sums = partition_map_sums(level, kind, backend)
        return fit_local_maps_from_sums(sums, start, kind, penalty=penalty)

    return fit_node_maps_on(nodes, fit_level, float(model.leaf_penalty))


__all__ = ["fit_hc_partitions"]
