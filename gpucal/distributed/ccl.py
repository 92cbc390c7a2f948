"""``ClusteredCalibrator.fit`` on dask collections: one machine's clusters and maps, sums over partitions.

The rows never leave their partitions. Each step of the single-machine fit becomes passes over them:

=====================================  ==========================================================
one machine                            over partitions
=====================================  ==========================================================
checks of labels and weights           per partition, both classes from summed counts
embedding (leaves, SHAP)               the embedding model per partition (a per-row map; the model
                                       is shipped to the workers)
one-hot leaf table                     the largest leaf per tree (a reduced maximum), then the rows
                                       per (tree, leaf) (a sum)
clustering sample                      :func:`~gpucal.ccl.clustering.sample_rows` of the rows'
                                       global positions: the same rows, brought to the client
projection, k-means++ starts, Ward     on that sample, as on one machine
Lloyd's iterations, elbow's ``S(k)``   sums of :func:`~gpucal.ccl.clustering.lloyd_sums` per pass
assignment to the nearest centroid     per partition
cluster weights, rates, flat clusters  sums of :func:`~gpucal.ccl.model.cluster_sums` and
                                       :func:`~gpucal.ccl.model.centred_logit_sums`
global and per-cluster maps            ``fit_local_maps_from_sums`` of summed ``local_map_sums``
=====================================  ==========================================================

so the clusters and maps are those of one machine up to the order of the additions. Multi-class
scores and the Dirichlet map (one Newton solve per cluster over its rows) are refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from gpucal._backend import array_namespace, is_cupy_array, to_numpy
from gpucal._validation import check_consistent_length, check_labels, check_same_index
from gpucal.calibrators._logistic import check_class_weights
from gpucal.ccl.clustering import (
    FittedClusters,
    assign_clusters,
    fit_clusters_on,
    inertias,
    lloyd_sums,
    project,
    sample_rows,
)
from gpucal.ccl.embeddings import TreeEmbedding, leaf_counts, leaf_widths, make_embedding
from gpucal.ccl.model import centred_logit_sums, cluster_sums, map_parts
from gpucal.partition.local_maps import MapSums, flatten_map_sums, local_map_sums, unflatten_map_sums
from gpucal.rows._checks import check_all_dask, check_partition_weight
from gpucal.rows._collections import partition_offsets, partitions
from gpucal.rows._placement import as_partitions, map_persisted, persist
from gpucal.rows._reduce import reduce_partitions, sum_partitions

if TYPE_CHECKING:
    from gpucal.ccl.model import ClusteredCalibrator

# Columns of a partition's summary: rows, weighted positives, weighted negatives.
_N_ROWS, _N_POSITIVE, _N_NEGATIVE = range(3)


@dataclass(frozen=True)
class _Part:
    """One partition: its embedding (raw model output, then the embedding), score, labels, weights
    (explicit ones), global row positions, and its clusters once assigned (else None)."""

    embedded: Any
    score: Any
    y: Any
    w: Any
    index: np.ndarray
    cluster: Any = None


def fit_ccl_partitions(model: ClusteredCalibrator, X: Any, y: Any, sample_weight: Any) -> None:
    """Fit ``model`` (parameters checked) on the dask DataFrame ``X``, labels and weights alike.

    Sets the fitted attributes of ``ClusteredCalibrator.fit``. Raises ``NotImplementedError`` for
    multi-class scores and ``calibrator="dirichlet"``.
    """
    _check_supported(model)
    given = {"X": X, "y": y, "sample_weight": sample_weight}
    check_all_dask(given)
    meta_score, _ = model._scores(X._meta, allow_empty=True)
    model._backend = "cuda" if is_cupy_array(meta_score) else "cpu"
    model.embedding_ = make_embedding(
        model.embedding_model,
        model.embedding,
        model.leaf_encoding,
        model.feature_cols,
        model._other_columns(X._meta),
    )
    parts = partitions(given)
    offsets, n_total = partition_offsets(parts)
    import dask

    read = dask.delayed(_read_part, pure=False)
    rows = persist([read(*p, model, int(o)) for p, o in zip(parts.parts, offsets, strict=True)])
    _check_summary(sum_partitions(as_partitions(rows), _summary))
    embedding = model.embedding_
    if embedding.one_hot:
        widths = reduce_partitions(as_partitions(rows), _leaf_widths, _maximum)
        offset = embedding.tree_offsets(np.asarray(widths))
        embedding.set_leaf_table(offset, sum_partitions(as_partitions(rows), _leaf_counts, args=(offset,)))
    rows = map_persisted(_embedded, rows, embedding)
    clusters = fit_clusters_on(_DaskEmbeddedRows(rows, n_total), **model._cluster_options())
    model._set_clustering(clusters)
    rows = map_persisted(_assigned, rows, clusters)
    model._fit_local(_DaskClusterRows(rows, model._backend))


def _check_supported(model: ClusteredCalibrator) -> None:
    if model._multiclass or model.calibrator == "dirichlet":
        what = "multi-class scores (score_col a list)" if model._multiclass else "calibrator='dirichlet'"
        msg = (
            f"ClusteredCalibrator with {what} has no distributed fit: the Dirichlet map is one Newton solve "
            "per cluster over that cluster's rows, not sums over partitions. Use calibrator='platt', "
            "'temperature' or 'beta' on binary scores on a dask collection, or fit on one machine."
        )
        raise NotImplementedError(msg)


# --------------------------------------------------------------------------------------------------
# Reading and embedding the partitions


@dataclass(frozen=True)
class _ReadPart:
    part: _Part
    summary: np.ndarray


def _read_part(X: Any, y: Any, w: Any, model: ClusteredCalibrator, row_offset: int) -> _ReadPart:
    """Check one partition as ``fit`` checks its input; keep the embedding model's raw output of it."""
    score, _ = model._scores(X, allow_empty=True)
    check_same_index(X=X, y=y, sample_weight=w)
    labels = check_labels(y, "y")
    n = check_consistent_length(X=score, y=labels)
    xp = array_namespace(score)
    weights = xp.ones(n) if w is None else check_partition_weight(w, n, xp)
    weighted = weights > 0
    summary = np.array(
        [
            n,
            int(xp.count_nonzero(weighted & (labels > 0))),
            int(xp.count_nonzero(weighted & (labels < 1))),
        ],
        dtype=np.float64,
    )
    embedding = model.embedding_
    # One-hot leaves keep the model's raw leaves (the table is learnt from all partitions first);
    # other embeddings keep the rows for the embedding model. An empty partition keeps nothing.
    kept = None if n == 0 else embedding.raw_leaves(X) if embedding.one_hot else X
    index = row_offset + np.arange(n, dtype=np.int64)
    return _ReadPart(_Part(kept, score, labels, weights, index), summary)


def _summary(read: _ReadPart) -> np.ndarray:
    return read.summary


def _check_summary(summary: np.ndarray) -> None:
    if int(summary[_N_ROWS]) == 0:
        msg = "X: no rows"
        raise ValueError(msg)
    check_class_weights(summary[_N_POSITIVE] > 0, summary[_N_NEGATIVE] > 0)


def _leaf_widths(read: _ReadPart) -> np.ndarray | None:
    return None if read.part.embedded is None else leaf_widths(read.part.embedded)


def _maximum(*widths: np.ndarray | None) -> np.ndarray | None:
    """The elementwise maximum of the partitions' widths (None: an empty partition)."""
    present = [w for w in widths if w is not None]
    return np.maximum.reduce(present) if present else None


def _leaf_counts(read: _ReadPart, offset: np.ndarray) -> np.ndarray:
    if read.part.embedded is None:
        return np.zeros(int(offset[-1]))
    return leaf_counts(read.part.embedded, offset)


def _embedded(read: _ReadPart, embedding: TreeEmbedding) -> _Part:
    """The partition's embedding: one-hot leaves from the raw leaves kept, else the model on its rows."""
    part = read.part
    if part.embedded is None:  # an empty partition: no embedding, skipped by every pass below
        return part
    raw = part.embedded
    E = embedding.embed_leaves(raw) if embedding.one_hot else embedding.transform(raw)
    return _Part(E, part.score, part.y, part.w, part.index)


# --------------------------------------------------------------------------------------------------
# The clustering


def _sample_part(part: _Part, n_total: int, max_rows: int, seed: int) -> tuple[Any, np.ndarray] | None:
    if part.embedded is None:
        return None
    take = np.flatnonzero(sample_rows(part.index, n_total, max_rows, seed))
    return part.embedded[take], to_numpy(part.w)[take]


def _projected(part: _Part, projection: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if part.embedded is None:
        return np.zeros((0, projection.shape[1])), np.zeros(0)
    return project(part.embedded, projection), to_numpy(part.w)


def _lloyd_part(z_w: tuple[np.ndarray, np.ndarray], centroids: np.ndarray) -> np.ndarray:
    return lloyd_sums(z_w[0], z_w[1], centroids)


def _inertias_part(z_w: tuple[np.ndarray, np.ndarray], centroid_sets: list[np.ndarray]) -> np.ndarray:
    return inertias(z_w[0], z_w[1], centroid_sets)


@dataclass(frozen=True)
class _DaskEmbeddedRows:
    """``gpucal.ccl.clustering.EmbeddedRows`` over persisted partitions of :class:`_Part`."""

    parts: list[Any]
    n_total: int

    def sample(self, max_rows: int, seed: int) -> tuple[Any, np.ndarray]:
        """The sample's rows of every partition, stacked in partition order (one machine's order)."""
        import dask

        pieces = dask.compute(
            *[dask.delayed(_sample_part)(p, self.n_total, max_rows, seed) for p in self.parts]
        )
        present = [piece for piece in pieces if piece is not None]
        blocks = [E for E, _ in present]
        stacked = (
            sp.vstack(blocks, format="csr") if sp.issparse(blocks[0]) else np.concatenate(blocks, axis=0)
        )
        return stacked, np.concatenate([w for _, w in present])

    def projected(self, projection: np.ndarray) -> _DaskProjectedRows:
        return _DaskProjectedRows(map_persisted(_projected, self.parts, projection))


@dataclass(frozen=True)
class _DaskProjectedRows:
    """``gpucal.ccl.clustering.ProjectedRows``: persisted ``(Z, w)`` per partition, sums added."""

    parts: list[Any]

    def lloyd_sums(self, centroids: np.ndarray) -> np.ndarray:
        return sum_partitions(as_partitions(self.parts), _lloyd_part, args=(centroids,))

    def inertias(self, centroid_sets: list[np.ndarray]) -> np.ndarray:
        return sum_partitions(as_partitions(self.parts), _inertias_part, args=(centroid_sets,))


def _assigned(part: _Part, clusters: FittedClusters) -> _Part:
    """The partition's rows with their nearest centroid (the embedding is no longer needed)."""
    xp = array_namespace(part.score)
    if part.embedded is None:
        nearest = np.zeros(0, dtype=np.int32)
    else:
        nearest = assign_clusters(project(part.embedded, clusters.projection), clusters.centroids)
    return _Part(None, part.score, part.y, part.w, part.index, xp.asarray(nearest))


# --------------------------------------------------------------------------------------------------
# The maps


def _cluster_sums(part: _Part, k: int) -> np.ndarray:
    return cluster_sums(part.score, part.y, part.w, part.cluster, k)


def _centred_sums(part: _Part, mean: np.ndarray) -> np.ndarray:
    return centred_logit_sums(part.score, part.w, part.cluster, mean)


def _map_sums(part: _Part, theta: np.ndarray, kind: str, skip: np.ndarray | None, backend: str) -> np.ndarray:
    """``local_map_sums`` of a partition in ``map_parts``' parts, flattened ``[w, grad, hess]``."""
    sums = local_map_sums(
        part.score, part.y, part.w, map_parts(part.cluster, skip), theta, kind, backend=backend
    )
    return flatten_map_sums(*sums)


@dataclass(frozen=True)
class _DaskClusterRows:
    """``gpucal.ccl.model.ClusterMapRows`` over persisted partitions with their clusters assigned."""

    parts: list[Any]
    backend: str

    def cluster_sums(self, k: int) -> np.ndarray:
        return sum_partitions(as_partitions(self.parts), _cluster_sums, args=(k,))

    def centred_logit_sums(self, k: int, mean: np.ndarray) -> np.ndarray:
        return sum_partitions(as_partitions(self.parts), _centred_sums, args=(mean,))

    def map_sums(self, kind: str, skip: np.ndarray | None) -> MapSums:
        def sums(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            flat = sum_partitions(
                as_partitions(self.parts), _map_sums, args=(theta, kind, skip, self.backend)
            )
            return unflatten_map_sums(flat, *theta.shape)

        return sums


__all__ = ["fit_ccl_partitions"]
