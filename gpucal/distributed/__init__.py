"""gpucal on a Dask cluster: the cluster helpers, the batch job, and the dask entry points users call.

Every fit and metric reads dask collections through :mod:`gpucal.rows` (``as_rows``: one block per
partition, held on the workers or read again every pass with ``dask.config.set({"gpucal.stream-partitions":
True})``), written once with the one-machine fit; this package holds no fit. Importing it imports no dask
and no GPU library; each function imports what it needs.

* :func:`local_cluster` / :func:`local_cuda_cluster` start a CPU or a one-worker-per-GPU cluster;
  :func:`dataframe_backend` chooses pandas or cudf partitions; :mod:`~gpucal.distributed.batch` is the
  Parquet batch job.
* :func:`sum_partitions` maps a function returning a fixed-shape array over partitions and adds the
  results in a tree (every gpucal statistic is such a sum); :func:`reduce_partitions` is the same with
  another associative ``combine``; :func:`partition_offsets` gives each partition's global row offset
  (what MVCE's views and the held-out splits hash). They are the passes of
  :class:`~gpucal.rows.dask.DaskRows`, the rows every fit reads, for users' own statistics.
* :func:`fit_encoder` learns a :class:`~gpucal.encoding.FeatureEncoder` over all partitions (the same as
  ``FeatureEncoder.fit`` of the dask DataFrame); :func:`hash_codes` is the stable hashing alternative for
  very high cardinality; :func:`transform_partitions` encodes every partition.
* ``DISTRIBUTED_FITS`` names the calibrators whose fit takes dask collections (those that joined
  :mod:`gpucal.registry` with ``fits_on_dask``); the others refuse them by name (:func:`reject_dask`).
"""

from typing import Any

from gpucal.distributed.cluster import dataframe_backend, gpu_count, local_cluster, local_cuda_cluster
from gpucal.distributed.encoding import fit_encoder, hash_codes, transform_partitions
from gpucal.registry import dask_fitting_names
from gpucal.rows.collections import is_dask_collection, reject_dask
from gpucal.rows.dask import partition_lengths, partition_offsets, reduce_partitions, sum_partitions

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


def __getattr__(name: str) -> Any:
    """``DISTRIBUTED_FITS``, read from the registry when asked (every method has joined by then)."""
    if name == "DISTRIBUTED_FITS":
        return dask_fitting_names()
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
