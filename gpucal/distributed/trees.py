"""Grow a partition tree over dask partitions: the same level loop, with its sums added over workers.

``gpucal.partition.grow.grow_tree_on`` reads the rows through a small interface (``RowStore``): the
root's seven sums, the group-sum histogram of a batch of open nodes, routing every row to its child
after the splits, and the node each row ends in. :class:`PartitionedRows` implements it with one
``grow.NodeOrderedRows`` per worker, the one-machine store:

* :meth:`PartitionedRows.in_root` concatenates each worker's partitions into that worker's store
  (:func:`per_worker`: one task pinned to the worker);
* the store keeps its rows grouped by node (a stable counting sort per level, done by the routing
  task), so the histogram of a batch of open nodes reads only the contiguous run of the batch's rows
  (``NodeOrderedRows.histogram``), not every row of the worker;
* root sums and histograms are :func:`~gpucal.distributed.sum_partitions` over the stores: one result
  per worker is shipped and added, so a pass moves ``n_workers`` histograms, whatever the number of
  partitions; a level's decisions see the one-machine histogram up to the order of the additions;
* routing is ``kernels.route_rows`` on every store where it lives, followed by the partition by node.

MVCE's views are drawn over the rows of a node in order, which are not partition sums: the store
offers no rows for them, and ``grow_tree_on`` refuses criterion "mvce" on it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpucal._backend import array_namespace
from gpucal.partition.grow import GrowConfig, NodeOrderedRows, Split, decide_splits, total_stats
from gpucal.rows._placement import (
    _client,
    as_partitions,
    holders,
    map_persisted,
    per_worker,
)
from gpucal.rows._reduce import sum_partitions
from kernels import N_STATS, STAT_COUNT


@dataclass(frozen=True)
class TreeRowsPart:
    """One partition's rows as a tree sees them (numpy or cupy arrays, ``w`` None for unit weights)."""

    codes: Any  # (n, d) tree codes
    f: Any  # (n,) the tree's input probability
    y: Any  # (n,) labels
    w: Any  # (n,) weights or None
    node_idx: Any  # (n,) int32, the node each row is in (tree-local ids)


def concat_rows(parts: Sequence[Any], xp: Any) -> tuple[Any, Any, Any, Any]:
    """``codes, f, y, w`` of partitions (objects with those fields) concatenated in order (w None: unit)."""
    if len(parts) == 1:
        p = parts[0]
        return p.codes, p.f, p.y, p.w
    weighted = [p.w is not None for p in parts]
    if any(weighted) and not all(weighted):
        msg = "sample_weight: some partitions have weights and others not"
        raise ValueError(msg)
    return (
        xp.concatenate([p.codes for p in parts]),
        xp.concatenate([p.f for p in parts]),
        xp.concatenate([p.y for p in parts]),
        xp.concatenate([p.w for p in parts]) if all(weighted) else None,
    )


# --------------------------------------------------------------------------------------------------
# The store's passes, run on each worker's NodeOrderedRows


def _root_store(parts: list[Any], indices: list[int]) -> NodeOrderedRows:
    """A worker's partitions (objects with ``codes, f, y, w``) as one store, every row in the root."""
    xp = array_namespace(parts[0].f)
    store = NodeOrderedRows.in_root(*concat_rows(parts, xp), keep_perm=False)  # sums need no data order
    store.start_level(1)
    return store


def _root_stats(part: Any, backend: str) -> np.ndarray:
    """The seven sums of a store's (or partition's) rows (``grow.total_stats``)."""
    return total_stats(part.f, part.y, part.w, backend)


def _histogram(
    store: NodeOrderedRows, batch: list[int], n_nodes: int, n_values: np.ndarray, backend: str
) -> np.ndarray:
    """A store's group sums ``(len(batch), n_bins, N_STATS)`` of the batch's nodes, from their run."""
    if store.starts is None or store.starts.shape[0] != n_nodes + 1:
        store = replace(store, starts=store.node_starts(n_nodes))
    hist, _ = store.histogram(batch, n_nodes, n_values, backend)
    return hist


def _routed(
    store: NodeOrderedRows,
    feature: Any,
    base: Any,
    table: Any,
    n_nodes: int,
    more_levels: bool,
    backend: str,
) -> NodeOrderedRows:
    """The store with every row moved to its child and, when a level follows, regrouped by node.

    The next level's node starts are computed here, with the regrouping (``NodeOrderedRows.routed``
    routes in place: it runs on a copy, the input stays as dask persisted it).
    """
    out = copy.copy(store).routed(feature, base, table, n_nodes, more_levels, backend)
    if more_levels:
        out.start_level(n_nodes)
    return out


def _compact_histogram(
    store: NodeOrderedRows, nodes: list[int], n_nodes: int, n_values: np.ndarray, backend: str
) -> tuple[np.ndarray, np.ndarray]:
    """A store's histogram of ``nodes`` as its (slot, bin) pairs with rows: their flat positions in the
    ``len(nodes) * n_bins`` pairs and their sums ``(k, N_STATS)``.

    What one worker sends another (:meth:`PartitionedRows.splits`). A pair without rows holds seven
    exact zeros, so leaving it out changes no sum; a deep node's rows touch few of the codes, so this
    is a fraction of the dense bytes (30% of the pairs in a 1e7-row fit).
    """
    pairs = _histogram(store, nodes, n_nodes, n_values, backend).reshape(-1, N_STATS)
    at = np.flatnonzero(pairs[:, STAT_COUNT] > 0)
    return at, pairs[at]


def _decide_share(
    store: NodeOrderedRows,
    nodes: list[int],
    parent: np.ndarray,
    n_nodes: int,
    n_values: np.ndarray,
    rare_codes: np.ndarray,
    config: GrowConfig,
    *others: tuple[np.ndarray, np.ndarray],
) -> list[Split | None]:
    """The splits of ``nodes`` (a contiguous share of a batch): this store's histogram of them, the
    other workers' :func:`_compact_histogram` added pair by pair, then ``grow.decide_splits``.

    Each pair's sum has one term per worker with rows in it, and floating-point addition of two terms
    commutes, so with two workers the sums are bit for bit those of :meth:`PartitionedRows.histogram`;
    with more, the order of the additions may differ (about 1e-16 relative per sum).
    """
    total = _histogram(store, nodes, n_nodes, n_values, config.backend)
    pairs = total.reshape(-1, N_STATS)
    for at, sums in others:
        pairs[at] += sums  # distinct positions: one addition per pair
    return decide_splits(total, None, nodes, parent, n_values, rare_codes, config)


@dataclass(frozen=True)
class PartitionedRows:
    """``gpucal.partition.grow.RowStore`` over one persisted ``grow.NodeOrderedRows`` per worker.

    Every method that reads rows is one pass: a sum over the workers' stores, or a map that stays on
    them. ``parts`` (the stores) have ``f, y, w, node_idx`` in the same (node) order, which is all that
    sums grouped by node (the leaf refit, ``gpucal.distributed.mbct.partition_map_sums``) need.
    """

    parts: list[Any]  # persisted delayed NodeOrderedRows, one per worker
    # [holders(parts)] once looked up: (address, future) of every store, or None (no cluster).
    _placed: list[Any] = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def in_root(cls, parts: Sequence[Any]) -> PartitionedRows:
        """Start a tree on persisted partitions holding ``codes, f, y, w`` (every row in the root).

        The partitions of each worker are concatenated into its store there (:func:`per_worker`).
        """
        return cls(per_worker(_root_store, parts))

    def root_stats(self, backend: str) -> np.ndarray:
        """Sum over workers of the seven sums of their rows."""
        return sum_partitions(as_partitions(self.parts), _root_stats, args=(backend,))

    def start_level(self, n_nodes: int) -> None:
        """Nothing to do here: the routing task already computed the level's node starts."""

    def histogram(
        self, batch: list[int], n_nodes: int, n_values: np.ndarray, backend: str
    ) -> tuple[np.ndarray, None]:
        """Sum over workers of the batch's group sums, each from its run of rows; no rows for MVCE."""
        hist = sum_partitions(
            as_partitions(self.parts), _histogram, args=(list(batch), n_nodes, n_values, backend)
        )
        return hist, None

    def splits(
        self,
        batch: list[int],
        parent: np.ndarray,
        n_nodes: int,
        n_values: np.ndarray,
        rare_codes: np.ndarray,
        config: GrowConfig,
    ) -> list[Split | None]:
        """The batch's splits, decided on the workers from the histogram added there (a reduce-scatter).

        The batch's nodes are cut into one contiguous share per worker. Each worker histograms the rows
        it holds of every share (one run of its rows per share): its own share densely, the others' as
        :func:`_compact_histogram`, the only histogram bytes that move. It adds the other workers'
        compact histograms of its share to its own and decides those nodes' splits
        (:func:`_decide_share`); only the splits come back to the client. The sums are those of
        :meth:`histogram` up to the order of the additions (:func:`_decide_share`), so the splits are
        the same. Without a cluster: the histogram summed here and decided by the client.
        """
        placed = self._placement()
        if not placed:
            hist, _ = self.histogram(batch, n_nodes, n_values, config.backend)
            return decide_splits(hist, None, batch, parent, n_values, rare_codes, config)
        client = _client()
        batch = list(batch)
        bounds = np.linspace(0, len(batch), len(placed) + 1).astype(int)
        shares = []
        for h, (address, store) in enumerate(placed):
            lo, hi = int(bounds[h]), int(bounds[h + 1])
            if lo == hi:
                continue
            nodes = batch[lo:hi]
            others = [
                client.submit(
                    _compact_histogram,
                    other,
                    nodes,
                    n_nodes,
                    n_values,
                    config.backend,
                    workers=[holder],
                    pure=False,
                )
                for g, (holder, other) in enumerate(placed)
                if g != h
            ]
            shares.append(
                client.submit(
                    _decide_share,
                    store,
                    nodes,
                    parent[lo:hi],
                    n_nodes,
                    n_values,
                    rare_codes,
                    config,
                    *others,
                    workers=[address],
                    pure=False,
                )
            )
        return [split for share in client.gather(shares) for split in share]

    def _placement(self) -> list[tuple[str, Any]]:
        """``(address, future)`` of every store on its worker (looked up once); empty without a cluster."""
        if not self._placed:
            self._placed.append(holders(self.parts))
        return self._placed[0] or []

    def routed(
        self, feature: Any, base: Any, table: Any, n_nodes: int, more_levels: bool, backend: str
    ) -> PartitionedRows:
        """Route every store's rows where they live, regrouped by node when a level follows."""
        stores = map_persisted(_routed, self.parts, feature, base, table, n_nodes, more_levels, backend)
        return PartitionedRows(stores)

    def final_nodes(self) -> PartitionedRows:
        """The store itself: ``node_idx`` of every store is the node its rows (in store order) end in."""
        return self


__all__ = ["PartitionedRows", "TreeRowsPart", "concat_rows"]
