"""Leaf-refit sums over persisted dask partitions, for ``gpucal.distributed.hc`` until HC's fit over rows
replaces it (MBCT's fit over any rows is :func:`gpucal.mbct.fit.fit_mbct`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpucal.partition.ensemble import code_weights
from gpucal.partition.local_maps import MapSums, flatten_map_sums, local_map_sums, unflatten_map_sums
from gpucal.rows._placement import as_partitions
from gpucal.rows._reduce import sum_partitions


def _code_weights(part: Any, n_values: np.ndarray) -> np.ndarray:
    return code_weights(part.codes, part.w, n_values)


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


__all__ = ["partition_map_sums"]
