"""The tree store over any :class:`~gpucal.rows.Rows`: one node-ordered store per machine, sums added.

:func:`~gpucal.trees.grow.grow_tree_on` reads the rows through ``RowStore``: the root's seven sums,
the splits of a batch of open nodes, routing every row to its child, and the node each row ends in.
:class:`TreeRows` implements it once for every backend:

* :meth:`TreeRows.in_root` concatenates each machine's blocks (objects with ``codes, f, y, w``) into one
  :class:`~gpucal.trees.grow.NodeOrderedRows` there (:meth:`Rows.per_worker`), which keeps its rows
  grouped by node (a stable counting sort per level), so a batch's histogram reads one run of rows;
* root sums are :meth:`Rows.sum` over the stores: one result per machine is shipped, whatever the number of
  partitions;
* a batch's splits are :meth:`Rows.sum_in_shares`: each machine histograms its rows of every share of the
  batch, each share's histogram is added on one machine and decided there
  (:func:`~gpucal.trees.grow.decide_splits`), and only the splits come back;
* routing is ``gpucal.kernels.route_rows`` on every store where it lives, then the partition by node.

MVCE's views are drawn over the rows of a node in order, which are not sums: :func:`tree_store` gives the
rows of one block held in this process their own ``NodeOrderedRows`` (which MVCE reads), and ``TreeRows``
refuses criterion "mvce".
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpucal._backend import array_namespace
from gpucal.rows import Rows, concat_weights
from gpucal.trees.grow import NodeOrderedRows, RowStore, Split, SplitBatch, decide_splits, total_stats


def _root_store(blocks: Sequence[Any], indices: list[int]) -> NodeOrderedRows:
    """A machine's blocks (objects with ``codes, f, y, w``) as one store, every row in the root."""
    xp = array_namespace(blocks[0].f)

    def joined(name: str) -> Any:
        values = [getattr(b, name) for b in blocks]
        return values[0] if len(values) == 1 else xp.concatenate(values)

    w = concat_weights([b.w for b in blocks], xp)
    store = NodeOrderedRows.in_root(joined("codes"), joined("f"), joined("y"), w, keep_perm=False)
    store.start_level(1)
    return store


def _root_stats(store: NodeOrderedRows, backend: str) -> np.ndarray:
    return total_stats(store.f, store.y, store.w, backend)


def _share_histogram(store: NodeOrderedRows, lo: int, hi: int, level: SplitBatch) -> np.ndarray:
    """A store's group sums ``(hi - lo, n_bins, N_STATS)`` of nodes ``level.batch[lo:hi]``, from their run."""
    n_nodes = level.n_nodes
    if store.starts is None or store.starts.shape[0] != n_nodes + 1:
        store = replace(store, starts=store.node_starts(n_nodes))
    hist, _ = store.histogram(
        level.batch[lo:hi], n_nodes, level.n_values, level.config.backend, with_rows=False
    )
    return hist


def _decide(hist: np.ndarray, lo: int, hi: int, level: SplitBatch) -> list[Split | None]:
    return decide_splits(hist, None, level.share(lo, hi))


def _routed(
    store: NodeOrderedRows, feature: Any, base: Any, table: Any, n_nodes: int, more_levels: bool, backend: str
) -> NodeOrderedRows:
    """The store with every row moved to its child and, when a level follows, regrouped by node (on a
    copy: ``NodeOrderedRows.routed`` routes in place, and a held block stays as it was persisted)."""
    out = copy.copy(store).routed(feature, base, table, n_nodes, more_levels, backend)
    if more_levels:
        out.start_level(n_nodes)
    return out


@dataclass(frozen=True)
class TreeRows:
    """``RowStore`` over :class:`~gpucal.rows.Rows` whose blocks are node-ordered stores, one per machine.

    After the tree is grown the blocks (``NodeOrderedRows``: ``f, y, w, node_idx`` in node order) are the
    rows grouped by leaf, which is all that sums grouped by leaf (the leaf refit) need.
    """

    rows: Rows

    @classmethod
    def in_root(cls, rows: Rows) -> TreeRows:
        """Start a tree on rows whose blocks hold ``codes, f, y, w`` (every row in the root)."""
        return cls(rows.per_worker(_root_store))

    def root_stats(self, backend: str) -> np.ndarray:
        return self.rows.sum(_root_stats, backend)

    def start_level(self, n_nodes: int) -> None:
        """Nothing to do here: routing already computed the level's node starts."""

    def splits(self, level: SplitBatch) -> list[Split | None]:
        if level.config.criterion == "mvce":
            msg = "criterion 'mvce' needs the rows of each node on one device (its views are not sums)"
            raise NotImplementedError(msg)
        return self.rows.sum_in_shares(_share_histogram, _decide, len(level.batch), level)

    def routed(
        self, feature: Any, base: Any, table: Any, n_nodes: int, more_levels: bool, backend: str
    ) -> TreeRows:
        return TreeRows(self.rows.map(_routed, feature, base, table, n_nodes, more_levels, backend))

    def final_nodes(self) -> TreeRows:
        """The store itself: every block's ``node_idx`` is the node its rows (in block order) end in."""
        return self


def tree_store(rows: Rows) -> RowStore:
    """The store a tree grows on: one block held in this process is its own :class:`NodeOrderedRows`
    (rows kept in data order too: leaves come back per data row, and MVCE can read a node's rows), any
    other rows a :class:`TreeRows`."""
    block = rows.single_block()
    if block is not None:
        return NodeOrderedRows.in_root(block.codes, block.f, block.y, block.w)
    return TreeRows.in_root(rows)


__all__ = ["TreeRows", "tree_store"]
