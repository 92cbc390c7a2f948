"""``HeterogeneousCalibrator.fit`` (mode "tree") on dask collections: one machine's fit, sums over partitions.

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
====================================  ===========================================================

so the tree and its maps are those of one machine up to the order of the additions. Modes "forest"
(Poisson bootstrap weights, whose draws use a varying number of generator outputs per row) and
"boosted", and ``local_map="scale"`` (a closed form, not Newton steps of sums), are refused by name.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpucal._backend import array_namespace, is_cupy_array
from gpucal._frames import frame_columns, split_input
from gpucal._validation import check_consistent_length, check_labels
from gpucal.calibrators._logistic import check_class_weights
from gpucal.distributed._checks import check_partition_weight
from gpucal.distributed._collections import is_dask_collection, partition_offsets, partitions
from gpucal.distributed._reduce import sum_partitions
from gpucal.distributed.encoding import fit_encoder
from gpucal.distributed.mbct import RowsPart, _code_weights, partition_map_sums
from gpucal.distributed.trees import PartitionedRows, TreeRowsPart, as_partitions, map_persisted, persist
from gpucal.encoding import FeatureEncoder
from gpucal.hc.node_maps import fit_node_maps_on, node_ancestors, tree_parents
from gpucal.mbct.model import held_out_mask
from gpucal.partition.ensemble import map_codes
from gpucal.partition.grow import TreeNodes, grow_tree_on
from gpucal.partition.local_maps import _start, fit_local_maps_from_sums

if TYPE_CHECKING:
    from gpucal.hc.model import HeterogeneousCalibrator

# Columns of a partition's summary: rows, tree rows among them, weighted positives, weighted negatives.
_N_ROWS, _N_TREE, _N_POSITIVE, _N_NEGATIVE = range(4)


@dataclass(frozen=True)
class _ReadPart:
    """One partition read and encoded: its tree rows and map rows (either may be None), its summary."""

    tree: RowsPart | None
    cal: RowsPart | None
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

    Sets the fitted attributes of ``HeterogeneousCalibrator.fit``. Raises ``NotImplementedError`` for
    modes "forest" and "boosted" and for ``local_map="scale"``.
    """
    _check_supported(model)
    given = {
        "X": X,
        "y": y,
        "sample_weight": sample_weight,
        "X_tree": X_tree,
        "y_tree": y_tree,
        "sample_weight_tree": sample_weight_tree,
    }
    local = [k for k, v in given.items() if v is not None and not is_dask_collection(v)]
    if local:
        msg = (
            f"{', '.join(local)}: not dask collections while other inputs are; pass every row input of "
            "a distributed fit as a dask collection"
        )
        raise TypeError(msg)
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
    if X_tree is None:
        model.encoder_ = fit_encoder(encoder, X[model.feature_cols_], sample_weight=sample_weight)
        offsets, _ = partition_offsets(cal_parts)
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
        model.encoder_ = fit_encoder(encoder, X_tree[model.feature_cols_], sample_weight=sample_weight_tree)
        read_parts = persist([read(*p, model, 0, "map") for p in cal_parts.parts])
        _check_classes(sum_partitions(as_partitions(read_parts), _summary), "y")
        read_tree = persist([read(*p, model, 0, "tree") for p in tree_parts.parts])
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
    start = time.perf_counter()
    log = (lambda line: model._log(2, line)) if model.verbose >= 2 else None
    config = model._grow_config(model.criterion)
    nodes, _ = grow_tree_on(
        PartitionedRows.in_root(tree), model._tree_n_values, model._rare_codes, config, log=log
    )
    params = _fit_node_maps(model, nodes, cal)
    model._record(0, nodes, start)
    model._set_ensemble([nodes], params, maps, counts)


def _check_supported(model: HeterogeneousCalibrator) -> None:
    if model.mode != "tree":
        msg = (
            f"HeterogeneousCalibrator(mode={model.mode!r}) has no distributed fit: "
            + (
                "its Poisson bootstrap weights are not drawn one generator output per row, so partitions "
                "cannot draw one machine's weights"
                if model.mode == "forest"
                else "its chain of trees is not written over partitions"
            )
            + ". Use mode='tree' on a dask collection, or fit on one machine."
        )
        raise NotImplementedError(msg)
    if model.local_map == "scale":
        msg = (
            "HeterogeneousCalibrator(local_map='scale') has no distributed fit: its maps are a closed form, "
            "not Newton steps of summed sums. Use another local_map on a dask collection, or fit on one "
            "machine."
        )
        raise NotImplementedError(msg)


# --------------------------------------------------------------------------------------------------
# Reading the partitions


def _read_part(
    X: Any, y: Any, w: Any, model: HeterogeneousCalibrator, row_offset: int, role: str
) -> _ReadPart:
    """Check and encode one partition as ``fit`` checks its input.

    ``role`` "split": rows of ``X`` cut into tree rows and map rows by ``tree_fraction`` (the
    partition's first row is global row ``row_offset``); "map": rows of ``X``, all map rows; "tree":
    rows of ``X_tree`` (features only), all tree rows.
    """
    if role == "tree":
        features, score = frame_columns(X, model.feature_cols_, name="X_tree"), None
        x_name, y_name, w_name = "X_tree", "y_tree", "sample_weight_tree"
    else:
        split = split_input(X, score_col=model.score_col, feature_cols=model.feature_cols_, allow_empty=True)
        features, score = split.features, split.score
        x_name, y_name, w_name = "X", "y", "sample_weight"
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

    def side(rows: np.ndarray, f: Any) -> RowsPart:
        take = xp.asarray(rows)
        return RowsPart(codes[take], f[take], labels[take], None if weights is None else weights[take])

    # The tree input: read by the gain criteria only, so any probability does for the label tree.
    tree = side(np.flatnonzero(grows), xp.full_like(labels, 0.5)) if role != "map" else None
    cal = side(np.flatnonzero(~grows), score) if role != "tree" else None
    return _ReadPart(tree, cal, summary)


def _summary(part: _ReadPart) -> np.ndarray:
    return part.summary


def _side(part: _ReadPart, which: str) -> RowsPart | None:
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


def _tree_codes(part: RowsPart, maps: list[np.ndarray], counts: np.ndarray) -> RowsPart:
    return RowsPart(map_codes(part.codes, maps, counts), part.f, part.y, part.w)


# --------------------------------------------------------------------------------------------------
# The node maps


def _node_levels(
    part: RowsPart, model: HeterogeneousCalibrator, nodes: TreeNodes, depth: np.ndarray, parent: np.ndarray
) -> list[TreeRowsPart]:
    """Per depth ``d``, the partition's map rows grouped by their node at ``d`` (``node_ancestors``)."""
    leaf = model._leaves(nodes, part.codes)
    return [
        TreeRowsPart(None, part.f, part.y, part.w, level) for level in node_ancestors(leaf, depth, parent)
    ]


def _level(levels: list[TreeRowsPart], d: int) -> TreeRowsPart:
    return levels[d]


def _label_sums(part: RowsPart) -> np.ndarray:
    """``[sum w, sum w y]`` of a partition's map rows."""
    if part.w is None:
        return np.array([float(part.y.shape[0]), float(part.y.sum())])
    return np.array([float(part.w.sum()), float((part.w * part.y).sum())])


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
            start = _start(mean, mean, None, n_parts, kind)
        sums = partition_map_sums(map_persisted(_level, levels, d), kind, backend)
        return fit_local_maps_from_sums(sums, start, kind, penalty=penalty)

    return fit_node_maps_on(nodes, fit_level, float(model.leaf_penalty))


__all__ = ["fit_hc_partitions"]
