"""gpucal beyond one machine: the same statistics over the partitions of dask collections.

Importing this package imports no dask and no GPU library; each function imports what it needs.

* :func:`sum_partitions` maps a function returning a fixed-shape array over partitions and adds the
  results in a tree: every gpucal statistic is such a sum, and a tree fit can call it per level.
  :func:`reduce_partitions` is the same with another associative ``combine``.
* :func:`partition_offsets` gives each partition's global row offset (what MVCE's views hash).
* The metrics of ``gpucal.metrics`` and the fit / predict of the one-dimensional calibrators
  (histogram, isotonic, Platt, beta, temperature) accept dask DataFrames, Series and Arrays directly:
  the metrics and the scaling fits are written once over :mod:`gpucal.rows`.
* ``MBCT.fit`` / ``predict`` accept dask DataFrames (criterion ``"gain"``): the tree engine's row store
  over partitions (:mod:`~gpucal.distributed.trees`) and the fit driver (:mod:`~gpucal.distributed.mbct`).
  For data larger than memory, ``dask.config.set({"gpucal.stream-partitions": True})`` holds no rows:
  every pass reads the partitions again (:mod:`~gpucal.distributed.mbct_stream`).
* ``FeatureAwarePlattCalibrator.fit`` / ``predict`` accept dask DataFrames: the Newton-CG of one machine
  over a row store of persisted partitions (:mod:`~gpucal.distributed.feature_platt`).
* ``HeterogeneousCalibrator.fit`` / ``predict`` accept dask DataFrames in every mode and local map: the
  tree engine's row store over partitions and per-depth summed node-map sums (:mod:`~gpucal.distributed.hc`).
* ``ClusteredCalibrator.fit`` / ``predict`` accept dask DataFrames (binary scores; Platt, temperature or
  beta maps): embeddings per partition, Lloyd iterations as summed passes (:mod:`~gpucal.distributed.ccl`).
* :func:`local_cluster` / :func:`local_cuda_cluster` start a CPU or a one-worker-per-GPU cluster;
  :func:`dataframe_backend` chooses pandas or cudf partitions.
* :func:`fit_encoder` learns a :class:`~gpucal.encoding.FeatureEncoder` over all partitions (the same as
  ``FeatureEncoder.fit`` of the dask DataFrame), and
  :func:`hash_codes` is the stable hashing alternative for very high cardinality;
  :func:`transform_partitions` encodes every partition.
"""

from gpucal.distributed.cluster import dataframe_backend, gpu_count, local_cluster, local_cuda_cluster
from gpucal.distributed.encoding import fit_encoder, hash_codes, transform_partitions
from gpucal.rows._collections import (
    DISTRIBUTED_FITS,
    is_dask_collection,
    partition_lengths,
    partition_offsets,
    reject_dask,
)
from gpucal.rows._reduce import reduce_partitions, sum_partitions

__all__ = [
    "DISTRIBUTED_FITS",
    "dataframe_backend",
    "fit_encoder",
    "gpu_count",
    "hash_codes",
    "is_dask_collection",
    "local_cluster",
    "local_cuda_cluster",
    "partition_lengths",
    "partition_offsets",
    "reduce_partitions",
    "reject_dask",
    "sum_partitions",
    "transform_partitions",
]
