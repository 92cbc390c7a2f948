r"""CCL's maps: one calibration map per cluster from per-cluster sums over :class:`~gpucal.rows.Rows`.

Platt, temperature and beta maps (``gpucal.trees.local_maps``) are fitted for all clusters at once
by grouped Newton steps whose every statistic is a sum over rows, so :func:`fit_cluster_maps` reads
the rows only through ``rows.sum`` of block functions (:func:`cluster_sums`, :func:`centred_logit_sums`,
``local_map_sums``): one machine and any partitioning give the same maps up to the order of additions.
The Dirichlet map is one Newton solve per cluster over that cluster's rows (:func:`fit_dirichlet_maps`,
on one machine's arrays).

A homogeneous cluster (one class, or scores that do not vary) gets Laplace's smoothed rate (Eq. 3); a
cluster lighter than ``min_cluster_size`` gets the global map.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal.calibrators.logistic import EPS
from gpucal.rows import Rows
from gpucal.trees.local_maps import (
    fit_local_maps_from_sums,
    flatten_map_sums,
    identity_params,
    local_map_sums,
    unflatten_map_sums,
)

# A cluster whose scores vary less than this (weighted variance of the logit, or of every log-probability
# column) has no slope to fit: all its scores are equal up to rounding.
MIN_LOGIT_VARIANCE = 1e-10


@dataclass(frozen=True)
class ClusterMaps:
    """Every cluster's map and what happened to it (``ClusteredCalibrator``'s attributes of the same
    meaning: ``params_``, ``global_params_``, ``cluster_weight_``, ``cluster_rate_``)."""

    params: np.ndarray
    global_params: np.ndarray
    weight: np.ndarray
    rate: np.ndarray
    constant: np.ndarray  # homogeneous clusters (Eq. 3), not too light
    too_light: np.ndarray  # clusters below min_cluster_size: the global map


def cluster_sums(score: Any, y: Any, w: Any, part: Any, k: int) -> np.ndarray:
    r"""Return ``(k, 3)``: per cluster :math:`\sum w`, :math:`\sum w y`, :math:`\sum w\,\mathrm{logit}(f)`."""
    xp = array_namespace(score)
    columns = [w, w * y, w * _logit(score)]
    return np.stack([to_numpy(xp.bincount(part, weights=c, minlength=k)) for c in columns], axis=1)


def centred_logit_sums(score: Any, w: Any, part: Any, mean: np.ndarray) -> np.ndarray:
    r"""Return per cluster :math:`\sum w (\mathrm{logit}(f) - m_c)^2` around the clusters' means ``mean``."""
    xp = array_namespace(score)
    centred = _logit(score) - xp.asarray(mean)[part]
    return to_numpy(xp.bincount(part, weights=w * centred * centred, minlength=mean.shape[0]))


def map_parts(part: Any, skip: np.ndarray | None) -> Any:
    """Each row's part of a map fit: all in part 0 (``skip`` None: the global map), else its cluster,
    -1 (left out) for the clusters ``skip`` marks."""
    xp = array_namespace(part)
    if skip is None:
        return xp.zeros(part.shape[0], dtype=xp.int32)
    return xp.where(xp.asarray(skip)[part], -1, part).astype(xp.int32)


# --------------------------------------------------------------------------------------------------
# Block functions: a block has ``score``, ``y``, ``w`` and ``cluster`` (``gpucal.ccl.fit.CCLBlock``)


def _block_cluster_sums(block: Any, k: int) -> np.ndarray:
    return cluster_sums(block.score, block.y, block.w, block.cluster, k)


def _block_centred_sums(block: Any, mean: np.ndarray) -> np.ndarray:
    return centred_logit_sums(block.score, block.w, block.cluster, mean)


def _block_map_sums(
    block: Any, theta: np.ndarray, kind: str, skip: np.ndarray | None, backend: str
) -> np.ndarray:
    """``local_map_sums`` of a block in ``map_parts``' parts, flattened ``[w, grad, hess]``."""
    parts = map_parts(block.cluster, skip)
    return flatten_map_sums(
        *local_map_sums(block.score, block.y, block.w, parts, theta, kind, backend=backend)
    )


def _map_sums(rows: Rows, kind: str, skip: np.ndarray | None, backend: str) -> Any:
    """``theta -> local_map_sums`` over every row: one summed pass per Newton step."""

    def sums(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return unflatten_map_sums(rows.sum(_block_map_sums, theta, kind, skip, backend), *theta.shape)

    return sums


def fit_cluster_maps(
    rows: Rows, k: int, kind: str, *, min_cluster_size: float, penalty: float, backend: str
) -> ClusterMaps:
    """Binary Platt / temperature / beta maps for every cluster from per-cluster sums over ``rows``."""
    weight, positive, logit_sum = rows.sum(_block_cluster_sums, k).T
    rate = ((positive + 1.0) / (weight + 2.0))[:, None]
    too_light = weight < min_cluster_size
    safe = np.where(weight > 0, weight, 1.0)
    variance = rows.sum(_block_centred_sums, logit_sum / safe) / safe
    homogeneous = (positive <= 0.0) | (positive >= weight) | (variance < MIN_LOGIT_VARIANCE)
    global_params = fit_local_maps_from_sums(
        _map_sums(rows, kind, None, backend), identity_params(kind)[None, :], kind
    )[0]
    constant = homogeneous & ~too_light
    params = fit_local_maps_from_sums(
        _map_sums(rows, kind, constant, backend),  # rows of constant clusters do not enter the fits
        np.tile(global_params, (k, 1)),
        kind,
        penalty=penalty,
        min_part_weight=min_cluster_size,
        fallback=global_params,
    )
    params[constant | too_light] = global_params
    return ClusterMaps(params, global_params, weight, rate, constant, too_light)


def fit_dirichlet_maps(
    score: Any, y: Any, w: Any, part: Any, k: int, *, multiclass: bool, min_cluster_size: float
) -> ClusterMaps:
    """One :class:`DirichletCalibrator` per cluster (a loop: each fit is its own Newton solve)."""
    from gpucal.calibrators.dirichlet import DirichletCalibrator

    probs = as_matrix(to_numpy(score))
    labels = np.asarray(to_numpy(y) if multiclass else to_numpy(y) >= 0.5, dtype=np.int64)
    if not multiclass and not np.isin(to_numpy(y), (0.0, 1.0)).all():
        msg = "y: calibrator='dirichlet' needs hard labels in {0, 1}; soft labels have no class"
        raise ValueError(msg)
    w_np, part_np = to_numpy(w), to_numpy(part)
    n_classes = probs.shape[1]
    # Binary rates are of the positive class only, as for the other maps.
    targets = np.eye(n_classes)[labels] if multiclass else labels[:, None].astype(np.float64)
    weight, rate = _cluster_rates(targets, w_np, part_np, k)
    too_light = weight < min_cluster_size
    class_mass = np.stack(
        [np.bincount(part_np, weights=w_np * (labels == c), minlength=k) for c in range(n_classes)],
        axis=1,
    )
    single_class = (class_mass > 0).sum(axis=1) <= 1
    constant = (single_class | _flat(np.log(np.maximum(probs, EPS)), w_np, part_np, k, weight)) & ~too_light
    glob = DirichletCalibrator().fit(probs, labels, sample_weight=w_np)
    global_params = np.concatenate([glob.coef_.ravel(), glob.intercept_])
    params = np.tile(global_params, (k, 1))
    for j in np.flatnonzero(~(constant | too_light)):
        rows = part_np == j
        cal = DirichletCalibrator().fit(probs[rows], labels[rows], sample_weight=w_np[rows])
        params[j] = np.concatenate([cal.coef_.ravel(), cal.intercept_])
    return ClusterMaps(params, global_params, weight, rate, constant, too_light)


def _cluster_rates(targets: Any, w: Any, part: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster: total weight and Laplace-smoothed rate of each target column (host arrays)."""
    xp = array_namespace(targets)
    weight = to_numpy(xp.bincount(part, weights=w, minlength=k)).astype(np.float64)
    mass = np.stack(
        [
            to_numpy(xp.bincount(part, weights=w * targets[:, j], minlength=k))
            for j in range(targets.shape[1])
        ],
        axis=1,
    )
    n_outcomes = 2 if targets.shape[1] == 1 else targets.shape[1]
    return weight, (mass + 1.0) / (weight[:, None] + n_outcomes)


def _logit(score: Any) -> Any:
    xp = array_namespace(score)
    p = xp.clip(score, EPS, 1.0 - EPS)
    return xp.log(p) - xp.log1p(-p)


def as_matrix(score: np.ndarray) -> np.ndarray:
    """A binary score as the two-column matrix ``(1 - p, p)``; a matrix as it is."""
    return np.stack([1.0 - score, score], axis=1) if score.ndim == 1 else score


def _flat(values: Any, w: Any, part: Any, k: int, weight: np.ndarray) -> np.ndarray:
    """Clusters whose score columns all have weighted variance below ``MIN_LOGIT_VARIANCE``."""
    xp = array_namespace(values)
    safe = np.where(weight > 0, weight, 1.0)
    flat = np.ones(k, dtype=bool)
    for j in range(values.shape[1]):
        v = values[:, j]
        mean = to_numpy(xp.bincount(part, weights=w * v, minlength=k)) / safe
        centred = v - xp.asarray(mean)[part]
        variance = to_numpy(xp.bincount(part, weights=w * centred * centred, minlength=k)) / safe
        flat &= variance < MIN_LOGIT_VARIANCE
    return flat


__all__ = [
    "MIN_LOGIT_VARIANCE",
    "ClusterMaps",
    "as_matrix",
    "centred_logit_sums",
    "cluster_sums",
    "fit_cluster_maps",
    "fit_dirichlet_maps",
    "map_parts",
]
