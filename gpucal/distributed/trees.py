"""Grow a partition tree over dask partitions: the same level loop, with its sums added over partitions.

``gpucal.partition.grow.grow_tree_on`` reads the rows through a small interface (``RowStore``): the
root's seven sums, the group-sum histogram of a batch of open nodes, routing every row to its child
after the splits, and the node each row ends in. :class:`PartitionedRows` implements it over persisted
partitions, each holding its rows' tree codes, tree input ``f``, labels ``y``, weights ``w`` and
current node:

* root sums and histograms are :func:`~gpucal.distributed.sum_partitions` of the one-machine functions
  (``grow.total_stats``, ``grow.batch_histogram``: ``kernels.group_sums`` with the batch's slot per
  node), so a level's decisions see the one-machine histogram up to the order of the additions;
* routing is ``kernels.route_rows`` on every partition where it lives (a new persisted partition
  sharing the other arrays), so no row moves between workers.

MVCE's views are drawn over the rows of a node in order, which are not partition sums: the store
offers no rows for them, and ``grow_tree_on`` refuses criterion "mvce" on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpucal._backend import array_namespace
from gpucal.distributed._collections import Partitions
from gpucal.distributed._reduce import sum_partitions
from gpucal.partition.grow import batch_histogram, total_stats
from kernels import route_rows


@dataclass(frozen=True)
class TreeRowsPart:
    """One partition's rows as a tree sees them (numpy or cupy arrays, ``w`` None for unit weights)."""

    codes: Any  # (n, d) tree codes
    f: Any  # (n,) the tree's input probability
    y: Any  # (n,) labels
    w: Any  # (n,) weights or None
    node_idx: Any  # (n,) int32, the node each row is in (tree-local ids)


def persist(tasks: Sequence[Any]) -> list[Any]:
    """Compute the delayed ``tasks`` where they run and keep the results there (``dask.persist``)."""
    import dask

    return list(dask.persist(*tasks))


def map_persisted(fn: Callable[..., Any], parts: Sequence[Any], *args: Any) -> list[Any]:
    """Return ``fn(part, *args)`` for every delayed partition, computed and kept on the workers."""
    import dask

    task = dask.delayed(fn, pure=False)  # fresh keys: no hashing of the arguments (models, trees)
    return persist([task(part, *args) for part in parts])


def as_partitions(parts: Sequence[Any]) -> Partitions:
    """Wrap delayed partitions (one object each) as the aligned partitions ``sum_partitions`` maps over."""
    return Partitions(("rows",), [(part,) for part in parts])


def _with_root(part: Any) -> TreeRowsPart:
    """Every row of a partition (an object with ``codes, f, y, w``) in the root."""
    xp = array_namespace(part.f)
    return TreeRowsPart(part.codes, part.f, part.y, part.w, xp.zeros(part.f.shape[0], dtype=xp.int32))


def _root_stats(part: TreeRowsPart, backend: str) -> np.ndarray:
    """The seven sums of a partition's rows (``grow.total_stats``)."""
    return total_stats(part.f, part.y, part.w, backend)


def _histogram(
    part: TreeRowsPart, batch: list[int], n_nodes: int, n_values: np.ndarray, backend: str
) -> np.ndarray:
    """A partition's group sums ``(len(batch), n_bins, N_STATS)`` of the batch's nodes."""
    hist, _ = batch_histogram(
        part.codes, part.f, part.y, part.w, part.node_idx, batch, n_nodes, n_values, backend
    )
    return hist


def _routed(part: TreeRowsPart, feature: Any, base: Any, table: Any, backend: str) -> TreeRowsPart:
    """A partition with every row moved to its child (``kernels.route_rows``); the rest is shared."""
    node_idx = route_rows(part.codes, part.node_idx, feature, base, table, backend=backend)
    return replace(part, node_idx=node_idx)


@dataclass(frozen=True)
class PartitionedRows:
    """``gpucal.partition.grow.RowStore`` over persisted dask partitions of :class:`TreeRowsPart`.

    Every method that reads rows is one pass: a sum over partitions, or a map that stays on them.
    """

    parts: list[Any]  # persisted delayed TreeRowsPart, in partition order

    @classmethod
    def in_root(cls, parts: Sequence[Any]) -> PartitionedRows:
        """Start a tree on delayed partitions holding ``codes, f, y, w`` (every row in the root)."""
        return cls(map_persisted(_with_root, parts))

    def root_stats(self, backend: str) -> np.ndarray:
        """Sum over partitions of the seven sums of their rows."""
        return sum_partitions(as_partitions(self.parts), _root_stats, args=(backend,))

    def start_level(self, n_nodes: int) -> None:
        """Nothing to prepare: every histogram pass reads each partition once."""

    def histogram(
        self, batch: list[int], n_nodes: int, n_values: np.ndarray, backend: str
    ) -> tuple[np.ndarray, None]:
        """Sum over partitions of the batch's group sums; no rows for MVCE."""
        hist = sum_partitions(
            as_partitions(self.parts), _histogram, args=(list(batch), n_nodes, n_values, backend)
        )
        return hist, None

    def routed(
        self, feature: Any, base: Any, table: Any, n_nodes: int, more_levels: bool, backend: str
    ) -> PartitionedRows:
        """Route every partition's rows where they live (``n_nodes`` and ``more_levels`` are not needed)."""
        return PartitionedRows(map_persisted(_routed, self.parts, feature, base, table, backend))

    def final_nodes(self) -> PartitionedRows:
        """The store itself: ``node_idx`` of every partition is the node its rows end in."""
        return self


__all__ = ["PartitionedRows", "TreeRowsPart", "as_partitions", "map_persisted", "persist"]
