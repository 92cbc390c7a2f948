"""``fit_ccl(rows, params, embedding)``: CCL's fit written once over :class:`~gpucal.rows.Rows`.

Each step of Algorithm 1 is a pass over the blocks (one on one machine, one per dask partition):

=====================================  ==========================================================
step                                   pass
=====================================  ==========================================================
checks of labels and weights           per block (:func:`read_block`, with its global row offset);
                                       both classes from summed counts
embedding (leaves, SHAP)               the embedding model per block (a per-row map; the model is
                                       shipped to where the block is)
one-hot leaf table                     the largest leaf per tree (a reduced maximum), then the rows
                                       per (tree, leaf) (a sum)
clustering sample, projection,         ``gpucal.ccl.clustering``: the sample by global row (the
k-means++ starts, Ward, Lloyd, elbow   same rows on any partitioning), Lloyd's sums summed per pass
assignment to the nearest centroid     per block
cluster weights, rates, maps           ``gpucal.ccl.cluster_maps``: per-cluster sums
=====================================  ==========================================================

so on one machine the numbers are those of the arrays, and over partitions the same up to the order of
the additions. Multi-class scores and the Dirichlet map (one Newton solve per cluster over that
cluster's rows) fit on one machine only.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, resolve_device
from gpucal._frames import input_family, parse_input
from gpucal._validation import check_sample_weight
from gpucal.ccl.cluster_maps import ClusterMaps, fit_cluster_maps, fit_dirichlet_maps
from gpucal.ccl.clustering import FittedClusters, assign_clusters, fit_clusters_on, project
from gpucal.ccl.embeddings import TreeEmbedding, _as_pandas, leaf_counts, leaf_widths
from gpucal.rows import LabelSummary, Rows, label_summary
from gpucal.rows.checks import check_labels_and_weights

# Columns of a block's summary: label_summary's five, then whether the block's score is on the GPU.
ON_GPU = 5


@dataclass(frozen=True)
class CCLParams:
    """The estimator's parameters, validated (their meaning: ``ClusteredCalibrator``'s docstring)."""

    score_col: Hashable | Sequence[Hashable]
    calibrator: str
    device: str
    min_cluster_size: float
    penalty: float
    cluster_options: dict[str, Any]  # fit_clusters_on's keyword arguments but the rows

    @property
    def multiclass(self) -> bool:
        return is_multiclass(self.score_col)


@dataclass(frozen=True)
class CCLState:
    """What :func:`fit_ccl` returns: the embedding (its leaf table learnt), the clusters and the maps."""

    embedding: TreeEmbedding
    clusters: FittedClusters
    maps: ClusterMaps


@dataclass(frozen=True)
class CCLBlock:
    """A block of CCL's rows: what is kept to embed it (``X``, raw leaves, then the embedding; None for
    an empty block), score, labels, weights, global row indices, and its clusters once assigned."""

    embedded: Any
    score: Any
    y: Any
    w: Any
    index: np.ndarray
    cluster: Any = None


def is_multiclass(score_col: Any) -> bool:
    """Whether ``score_col`` names several probability columns (a multi-class matrix)."""
    return not isinstance(score_col, str) and isinstance(score_col, Sequence)


def read_scores(X: Any, score_col: Any, *, allow_empty: bool = False) -> tuple[Any, Any]:
    """Return ``(score, info)``: the 1-D probability or the ``(n, K)`` probability matrix of ``X``."""
    if not is_multiclass(score_col):
        split = parse_input(X, score_col=score_col, feature_cols=[], allow_empty=allow_empty)
        return split.score, split.info
    from gpucal.calibrators.temperature import as_2d_scores

    cols: list[Hashable] = list(score_col)
    if input_family(X, "X") == "cupy":
        # Its maps and clusters are fitted on the host from a pandas frame, which cupy columns refuse (a
        # cudf frame converts itself).
        msg = (
            "X: ClusteredCalibrator's multi-class scores (score_col a list) are read on the host; pass the "
            "columns there (cupy.asnumpy(column)) or as a cudf frame"
        )
        raise TypeError(msg)
    frame = _as_pandas(X)
    missing = [c for c in cols if c not in frame.columns]
    if missing:
        msg = f"X: probability column(s) {missing} not found (score_col); available: {list(frame.columns)}"
        raise KeyError(msg)
    matrix = frame[cols].to_numpy()
    as_2d_scores(matrix, "X[score_col]")  # checks: numbers in [0, 1], rows summing to 1
    return np.asarray(matrix, dtype=np.float64), None


def fit_ccl(rows: Rows, params: CCLParams, embedding: TreeEmbedding) -> CCLState:
    """Embed, cluster and fit one map per cluster (Algorithm 1) over ``rows`` (``gpucal.rows.as_rows``).

    Raises
    ------
    NotImplementedError
        Multi-class scores or the Dirichlet map on rows that are not in one block here.
    ValueError
        No rows, one class only, the blocks' own checks.
    """
    whole = rows.single_block() is not None
    if not whole and (params.multiclass or params.calibrator == "dirichlet"):
        what = "multi-class scores (score_col a list)" if params.multiclass else "calibrator='dirichlet'"
        msg = (
            f"ClusteredCalibrator with {what} has no distributed fit: the Dirichlet map is one Newton solve "
            "per cluster over that cluster's rows, not sums over partitions. Use calibrator='platt', "
            "'temperature' or 'beta' on binary scores on a dask collection, or fit on one machine."
        )
        raise NotImplementedError(msg)
    read = rows.map(read_block, params, whole, offsets=True)
    summary = read.sum(block_summary)
    labels = LabelSummary.of(summary)
    labels.check_rows()
    if not params.multiclass:
        labels.check_two_classes()
    backend = "cuda" if summary[ON_GPU] > 0 else "cpu"
    raw = read.map(raw_embedding, embedding)
    if embedding.one_hot:
        widths = raw.reduce(_leaf_widths, _maximum)
        if widths is None:
            msg = "X: no rows"
            raise ValueError(msg)
        offset = embedding.tree_offsets(np.asarray(widths))
        embedding.set_leaf_table(offset, raw.sum(_leaf_counts, offset))
    embedded = raw.map(embed_block, embedding)
    clusters = fit_clusters_on(embedded, labels.n_rows, **params.cluster_options)
    assigned = embedded.map(assign_block, clusters)
    k = int(clusters.centroids.shape[0])
    if params.calibrator == "dirichlet":
        score, y, w, part = assigned.reduce(_columns, _joined)
        maps = fit_dirichlet_maps(
            score, y, w, part, k, multiclass=params.multiclass, min_cluster_size=params.min_cluster_size
        )
    else:
        maps = fit_cluster_maps(
            assigned,
            k,
            params.calibrator,
            min_cluster_size=float(params.min_cluster_size),
            penalty=float(params.penalty),
            backend=backend,
        )
    return CCLState(embedding, clusters, maps)


# --------------------------------------------------------------------------------------------------
# Block functions (module level: they run where the blocks are)


def read_block(block: Any, params: CCLParams, whole: bool, *, row_offset: int) -> CCLBlock:
    """Check one block of ``X, y, sample_weight`` as ``ClusteredCalibrator.fit`` checks its input.

    ``whole``: the block is all the rows (one machine), checked as a whole (multi-class labels and
    classes here); otherwise a partition, which may be empty, whose index must match its labels' and
    whose weights may all be zero. The maps run on the GPU when ``params.device`` resolves there
    (not the Dirichlet map: its fits stay on the host).
    """
    X, y, w = block["X"], block["y"], block["sample_weight"]
    score, _ = read_scores(X, params.score_col, allow_empty=not whole)
    xp = array_namespace(score)
    n = score.shape[0]
    if params.multiclass:
        from gpucal.calibrators.temperature import check_class_labels, check_several_classes

        labels = check_class_labels(y, n, score.shape[1])
        weights = check_sample_weight(w, n, xp=xp)
        check_several_classes(labels, weights, score.shape[1])
    else:
        labels, weights, _ = check_labels_and_weights(X, y, w, score, whole=whole, xp=xp)
        if weights is None:
            weights = check_sample_weight(None, n, xp=xp)  # the maps read explicit (unit) weights
    if resolve_device(params.device, score) == "gpu" and xp is np and params.calibrator != "dirichlet":
        import cupy

        score, labels, weights = cupy.asarray(score), cupy.asarray(labels), cupy.asarray(weights)
    kept = None if n == 0 else X
    return CCLBlock(kept, score, labels, weights, row_offset + np.arange(n, dtype=np.int64))


def block_summary(block: CCLBlock) -> np.ndarray:
    """``label_summary`` of the block, then 1 when its score is on the GPU."""
    on_gpu = array_namespace(block.score) is not np
    return np.concatenate([label_summary(block.y, block.w), [float(on_gpu)]])


def raw_embedding(block: CCLBlock, embedding: TreeEmbedding) -> CCLBlock:
    """One-hot leaves keep the model's raw leaves (the table is learnt from all blocks first); other
    embeddings keep the rows for the embedding model."""
    if block.embedded is None or not embedding.one_hot:
        return block
    return replace(block, embedded=embedding.raw_leaves(block.embedded))


def _leaf_widths(block: CCLBlock) -> np.ndarray | None:
    return None if block.embedded is None else leaf_widths(block.embedded)


def _maximum(*widths: np.ndarray | None) -> np.ndarray | None:
    """The elementwise maximum of the blocks' widths (None: an empty block)."""
    present = [w for w in widths if w is not None]
    return np.maximum.reduce(present) if present else None


def _leaf_counts(block: CCLBlock, offset: np.ndarray) -> np.ndarray:
    if block.embedded is None:
        return np.zeros(int(offset[-1]))
    return leaf_counts(block.embedded, offset)


def embed_block(block: CCLBlock, embedding: TreeEmbedding) -> CCLBlock:
    """The block's embedding: one-hot leaves from the raw leaves kept, else the model on its rows."""
    if block.embedded is None:  # an empty block: no embedding, skipped by every pass below
        return block
    raw = block.embedded
    return replace(
        block, embedded=embedding.embed_leaves(raw) if embedding.one_hot else embedding.transform(raw)
    )


def assign_block(block: CCLBlock, clusters: FittedClusters) -> CCLBlock:
    """The block's rows with their nearest centroid (the embedding is no longer needed)."""
    xp = array_namespace(block.score)
    if block.embedded is None:
        nearest = np.zeros(0, dtype=np.int32)
    else:
        nearest = assign_clusters(project(block.embedded, clusters.projection), clusters.centroids)
    return replace(block, embedded=None, cluster=xp.asarray(nearest))


def _columns(block: CCLBlock) -> tuple[Any, Any, Any, Any]:
    return block.score, block.y, block.w, block.cluster


def _joined(*parts: tuple[Any, ...]) -> tuple[Any, ...]:
    """Blocks' columns concatenated in block order."""
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(len(parts[0])))


__all__ = ["CCLBlock", "CCLParams", "CCLState", "fit_ccl", "is_multiclass", "read_scores"]
