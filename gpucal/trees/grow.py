r"""Grow one tree (MBCT's or HC's): one histogram pass per level, split decisions from the histogram, routing.

Per level (Huang et al. 2022, Sec. 4.3, operations (1)-(3)):

1. the group-sum histogram ``H[node, feature, value, stat]`` of the open nodes
   (``gpucal.kernels.group_sums``; nodes are batched so the histogram stays under ``MAX_HIST_BYTES``);
2. for every open node and feature, the multi-way split into one child per value (values with less
   weight than ``min_child_size`` pooled into one child), each child's map fitted from its sums, and the
   split's loss: the deterministic criterion from the sums alone (``gpucal.trees.splits``), or the
   faithful MVCE over ``r`` views shared by every candidate of the node (``gpucal.kernels.mvce_split_sums``,
   Eq. 10 and 12);
3. the best feature splits the node when the split has at least two children and lowers the node's
   loss (stopping rule 3); nodes lighter than ``min_node_size`` (rule 2) or at ``max_depth`` (rule 1)
   stay leaves; ``gpucal.kernels.route_rows`` moves every row of a split node to its child.

With ``split_mode="binary"`` step 2 is instead the best two-way split per feature
(``splits.choose_binary_splits``: thresholds in code order for ordinal features, in label-rate order for
categorical ones), scored by the map's loss ("gain") or by a label impurity ("entropy", "gini": the
heterogeneous-calibration tree); ``feature_mask`` keeps a random forest's tree to its features.

The loop (:func:`grow_tree_on`) reads the rows only through a :class:`RowStore`: the root's sums, a
batch's splits (:func:`decide_splits` of the batch's histogram), routing, the final node per row.
:func:`grow_tree` runs it on one device (``NodeOrderedRows``); ``gpucal.trees.tree_rows`` runs the
same loop over any :class:`~gpucal.rows.Rows` (dask partitions held or streamed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal.kernels import (
    N_STATS,
    STAT_W,
    gather_rows,
    group_sums,
    mvce_from_split_sums,
    mvce_split_sums,
    node_range_sums,
    order_by_node,
    route_and_group,
    route_rows,
    value_offsets,
)
from gpucal.trees.splits import (
    LABEL_CRITERIA,
    binary_children,
    candidate_values,
    choose_binary_splits,
    choose_splits,
    criterion_code,
    fit_node,
    node_value,
    split_children,
)

# Histogram memory per batch of open nodes; more open nodes than fit are histogrammed in several passes.
MAX_HIST_BYTES = 256 << 20
# MVCE sums (views x bins x candidates x 2 float64) per chunk of views.
MAX_MVCE_BYTES = 256 << 20
# A split must lower the node's loss by more than rounding: this fraction of the loss's scale.
RELATIVE_GAIN_TOL = 1e-12

IDENTITY = np.array([1.0, 0.0])
SPLIT_MODES = ("multiway", "binary")


@dataclass(frozen=True)
class GrowConfig:
    """Parameters of one tree's growth (the estimator's parameters, resolved)."""

    leaf_map: str  # "scale" or "shift" ("platt" grows as "shift")
    criterion: str  # "gain" or "mvce"; "entropy" or "gini" (label criteria, binary splits only)
    max_depth: int
    min_node_size: float
    min_child_size: float
    penalty: float
    n_views: int
    mvce_bin_size: int
    mvce_p: float
    seed: int
    backend: str = "auto"  # kernel backend: "cpu", "cuda" (numpy inputs are copied), "oracle" or "auto"
    split_mode: str = "multiway"  # "multiway": a child per code (MBCT); "binary": two children
    ordinal: tuple[bool, ...] = ()  # per feature, cut by threshold in code order (binary; () = none)
    feature_mask: tuple[bool, ...] = ()  # per feature, may split on it (binary; () = every feature)

    def __post_init__(self) -> None:
        if self.split_mode not in SPLIT_MODES:
            msg = f"split_mode: expected one of {SPLIT_MODES}, got {self.split_mode!r}"
            raise ValueError(msg)
        binary_only = self.criterion in LABEL_CRITERIA or self.ordinal or self.feature_mask
        if self.split_mode == "multiway" and binary_only:
            msg = "label criteria, ordinal features and feature masks need split_mode='binary'"
            raise ValueError(msg)
        if self.split_mode == "binary" and self.criterion == "mvce":
            msg = "criterion 'mvce' grows multi-way splits only"
            raise ValueError(msg)

    @property
    def kind(self) -> int:
        """The ``splits.CRIT_*`` code of the criterion."""
        return criterion_code(self.criterion, self.leaf_map)


@dataclass
class TreeNodes:
    """The nodes of one tree as they are created (ids local to the tree, root 0)."""

    feature: list[int] = field(default_factory=list)
    child_base: list[int] = field(default_factory=list)
    child_table: list[np.ndarray] = field(default_factory=list)
    value: list[np.ndarray] = field(default_factory=list)
    weight: list[float] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    table_size: int = 0

    def add(self, value: np.ndarray, weight: float, depth: int) -> int:
        self.feature.append(-1)
        self.child_base.append(-1)
        self.value.append(np.asarray(value, dtype=np.float64))
        self.weight.append(float(weight))
        self.depth.append(depth)
        return len(self.feature) - 1

    def split(self, node: int, feature: int, table: np.ndarray) -> None:
        self.feature[node] = feature
        self.child_base[node] = self.table_size
        self.child_table.append(table.astype(np.int32))
        self.table_size += table.shape[0]

    def routing_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        table = np.concatenate(self.child_table) if self.child_table else np.zeros(0, dtype=np.int32)
        return (
            np.asarray(self.feature, dtype=np.int32),
            np.asarray(self.child_base, dtype=np.int64),
            table.astype(np.int32),
        )

    @property
    def values(self) -> np.ndarray:
        return np.stack(self.value).reshape(-1, 2)


@dataclass(frozen=True)
class Split:
    """The chosen split of one open node (what a :class:`RowStore` returns for each node of a batch)."""

    feature: int
    table: np.ndarray  # child slot per code: index into ``values``, -1 for no child
    values: np.ndarray  # (n_children, 2)
    weights: np.ndarray  # (n_children,)


def grow_tree(
    codes: Any,
    f: Any,
    y: Any,
    w: Any,
    n_values: np.ndarray,
    rare_codes: np.ndarray,
    config: GrowConfig,
    *,
    log: Callable[[str], None] | None = None,
) -> tuple[TreeNodes, Any]:
    """Grow one tree on the tree input ``f``; return its nodes and the node each row ends in.

    Parameters
    ----------
    codes : int array of shape (n, d)
        Feature codes (the score bin last), numpy or cupy.
    f, y : float64 arrays of shape (n,)
        The tree's input probabilities and the labels.
    w : float64 array of shape (n,) or None
        Row weights (None: one per row).
    n_values : int64 array of shape (d,)
        Codes per feature.
    rare_codes : int64 array of shape (d,)
        Per feature, the code of the pooled rare values (always in the rest child of a multi-way split;
        one more code to a binary split), or -1.
    config : GrowConfig
    log : callable, optional
        Receives one line per level.

    Returns
    -------
    nodes : TreeNodes
    leaf : int32 array of shape (n,)
        The node (tree-local id) each row ends in.
    """
    return grow_tree_on(NodeOrderedRows.in_root(codes, f, y, w), n_values, rare_codes, config, log=log)


@dataclass(frozen=True)
class SplitBatch:
    """One batch of a level's open nodes and what deciding their splits reads.

    ``parent[s]`` is node ``batch[s]``'s map; ``n_nodes`` the tree's nodes when the level started
    (every row is in one of them).
    """

    batch: list[int]
    parent: np.ndarray
    n_nodes: int
    n_values: np.ndarray
    rare_codes: np.ndarray
    config: GrowConfig

    def share(self, lo: int, hi: int) -> SplitBatch:
        """The batch's nodes ``lo:hi``."""
        return replace(self, batch=self.batch[lo:hi], parent=self.parent[lo:hi])


class RowStore(Protocol):
    """What the level loop reads from the rows, wherever they are (one array, or dask partitions).

    :class:`NodeOrderedRows` holds them on one device; ``gpucal.trees.tree_rows`` holds them on
    dask workers, adds each histogram over them and decides the splits there. Every row starts in the
    root (node 0).
    """

    def root_stats(self, backend: str) -> np.ndarray:
        """Return the seven sums of every row (``gpucal.kernels.N_STATS``)."""

    def start_level(self, n_nodes: int) -> None:
        """Prepare the histograms of a level of a tree of ``n_nodes`` nodes."""

    def splits(self, level: SplitBatch) -> list[Split | None]:
        """Return the split (or None) of each node of ``level.batch``: :func:`decide_splits` of the
        group-sum histogram ``(len(batch), n_bins, N_STATS)`` of the batch's rows, wherever it is added
        up and decided."""

    def routed(
        self, feature: Any, base: Any, table: Any, n_nodes: int, more_levels: bool, backend: str
    ) -> Any:
        """Return the store with every row moved to its child (``gpucal.kernels.route_rows``)."""

    def final_nodes(self) -> Any:
        """Return the node each row ends in (the store's own form)."""


def grow_tree_on(
    rows: RowStore,
    n_values: np.ndarray,
    rare_codes: np.ndarray,
    config: GrowConfig,
    *,
    log: Callable[[str], None] | None = None,
) -> tuple[TreeNodes, Any]:
    """Grow one tree on the rows of ``rows`` (every row in the root); see :func:`grow_tree`.

    Returns the nodes and ``rows.final_nodes()``, the node each row ends in.
    """
    offsets = value_offsets(n_values)
    nodes = TreeNodes()
    root_stats = rows.root_stats(config.backend)
    if config.split_mode == "binary":
        root = node_value(root_stats, IDENTITY[0], IDENTITY[1], config.kind, config.penalty)
    else:
        root = fit_node(root_stats, IDENTITY[0], IDENTITY[1], config.leaf_map == "scale", config.penalty)
    nodes.add(np.asarray(root), root_stats[STAT_W], 0)
    frontier = [0] if _splittable(nodes, 0, config) else []
    for depth in range(config.max_depth):
        if not frontier:
            break
        n_split, n_before = 0, len(nodes.feature)
        rows.start_level(n_before)
        for batch in _batches(frontier, int(offsets[-1] + n_values[-1])):
            parent = np.stack([nodes.value[m] for m in batch])
            # The nodes when the level started: every row is in one of them, and a store's node
            # starts (``start_level``) stay valid for all the level's batches.
            splits = rows.splits(SplitBatch(batch, parent, n_before, n_values, rare_codes, config))
            for node, choice in zip(batch, splits, strict=True):
                if choice is None:
                    continue
                ids = [
                    nodes.add(v, wt, depth + 1) for v, wt in zip(choice.values, choice.weights, strict=True)
                ]
                table = np.where(choice.table >= 0, np.asarray(ids)[np.maximum(choice.table, 0)], -1)
                nodes.split(node, choice.feature, table)
                n_split += 1
        frontier = [m for m in range(n_before, len(nodes.feature)) if _splittable(nodes, m, config)]
        if n_split:
            feature, base, table = nodes.routing_arrays()
            rows = rows.routed(feature, base, table, len(nodes.feature), bool(frontier), config.backend)
        if log is not None:
            log(f"    level {depth + 1}: {n_split} node(s) split, {len(nodes.feature)} nodes")
        if not n_split:
            break
    return nodes, rows.final_nodes()


def batch_histogram(
    codes: Any,
    f: Any,
    y: Any,
    w: Any,
    node_idx: Any,
    batch: list[int],
    n_nodes: int,
    n_values: np.ndarray,
    backend: str,
) -> tuple[np.ndarray, Any]:
    """Return the group sums of the rows of the nodes of ``batch`` (slot ``s``: node ``batch[s]``) and
    each row's slot (-1: a node outside the batch), ``gpucal.kernels.group_sums`` over ``(codes, f, y,
    w)``."""
    xp = array_namespace(f)
    slot_of_node = np.full(n_nodes, -1, dtype=np.int32)
    slot_of_node[batch] = np.arange(len(batch), dtype=np.int32)
    slot = xp.asarray(slot_of_node)[node_idx]
    hist = group_sums(codes, f, y, w, node_idx=slot, n_nodes=len(batch), n_values=n_values, backend=backend)
    return to_numpy(hist), slot


@dataclass(frozen=True)
class _BatchRows:
    """The contiguous run of rows of one batch of nodes, as MVCE's views need them."""

    rows: NodeOrderedRows
    slot: Any  # each row's slot in the batch, -1 for rows of other nodes in the run
    starts: np.ndarray  # node m's first position in the run


@dataclass
class NodeOrderedRows:
    """The rows, permuted so that every node's rows are contiguous (and in data order within it).

    ``perm[i]`` is the data row at position ``i`` (None: data order). Kept per level by a stable
    partition (``gpucal.kernels.order_by_node``), so a node's histogram is added from one run of rows.
    The store of one device in :func:`grow_tree`, and of each machine in ``gpucal.trees.tree_rows``.
    """

    codes: Any
    f: Any
    y: Any
    w: Any
    node_idx: Any
    perm: Any
    starts: np.ndarray | None = None  # node_starts of the current level
    keep_perm: bool = True  # False: no ``perm``, 8 B a row saved (for sums only: no ``final_nodes``)

    @classmethod
    def in_root(cls, codes: Any, f: Any, y: Any, w: Any, *, keep_perm: bool = True) -> NodeOrderedRows:
        """Every row in the root (node 0), in data order."""
        xp = array_namespace(f)
        return cls(codes, f, y, w, xp.zeros(f.shape[0], dtype=xp.int32), None, keep_perm=keep_perm)

    def root_stats(self, backend: str) -> np.ndarray:
        return total_stats(self.f, self.y, self.w, backend)

    def start_level(self, n_nodes: int) -> None:
        if self.starts is None or self.starts.shape[0] != n_nodes + 1:
            self.starts = self.node_starts(n_nodes)

    def histogram(
        self, batch: list[int], n_nodes: int, n_values: np.ndarray, backend: str, *, with_rows: bool = True
    ) -> tuple[np.ndarray, _BatchRows | None]:
        # Only the run of positions holding the batch's nodes is read (other nodes' rows between
        # them get slot -1).
        starts = self.node_starts(n_nodes) if self.starts is None else self.starts
        lo, hi = int(starts[batch[0]]), int(starts[batch[-1] + 1])
        if not with_rows and self._on_cpu(backend):
            # Each node's rows are one run: summed from their bounds, no per-row slot array.
            ids = np.asarray(batch)
            return node_range_sums(
                self.codes, self.f, self.y, self.w, starts[ids], starts[ids + 1], n_values
            ), None
        run = self.slice(lo, hi)
        hist, slot = batch_histogram(
            run.codes, run.f, run.y, run.w, run.node_idx, batch, n_nodes, n_values, backend
        )
        return hist, _BatchRows(run, slot, starts - lo)

    def splits(self, level: SplitBatch) -> list[Split | None]:
        config = level.config
        mvce = config.criterion == "mvce"
        hist, batch_rows = self.histogram(
            level.batch, level.n_nodes, level.n_values, config.backend, with_rows=mvce
        )
        return decide_splits(hist, batch_rows, level)

    def routed(
        self, feature: Any, base: Any, table: Any, n_nodes: int, more_levels: bool, backend: str
    ) -> NodeOrderedRows:
        if more_levels and self._on_cpu(backend):
            # Routing and the partition by node in one kernel (two passes, no order array).
            codes, f, y, w, node_idx, perm, starts = route_and_group(
                self.codes,
                self.f,
                self.y,
                self.w,
                self.node_idx,
                self.perm,
                (feature, base, table),
                n_nodes,
                keep_perm=self.keep_perm,
            )
            return NodeOrderedRows(codes, f, y, w, node_idx, perm, starts=starts, keep_perm=self.keep_perm)
        self.node_idx = route_rows(self.codes, self.node_idx, feature, base, table, backend=backend)
        self.starts = None
        return self.ordered_by_node(n_nodes, backend) if more_levels else self

    def _on_cpu(self, backend: str) -> bool:
        """Whether the rows are numpy arrays summed by the CPU twin (the fused paths)."""
        return backend in ("auto", "cpu") and array_namespace(self.f) is np

    def final_nodes(self) -> Any:
        return self.in_data_order(self.node_idx)

    def node_starts(self, n_nodes: int) -> np.ndarray:
        """Return ``starts`` (``n_nodes + 1``): node ``m``'s rows are positions ``starts[m]:starts[m+1]``."""
        xp = array_namespace(self.node_idx)
        counts = to_numpy(xp.bincount(self.node_idx, minlength=n_nodes))
        return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)

    def slice(self, lo: int, hi: int) -> NodeOrderedRows:
        return NodeOrderedRows(
            self.codes[lo:hi],
            self.f[lo:hi],
            self.y[lo:hi],
            None if self.w is None else self.w[lo:hi],
            self.node_idx[lo:hi],
            None,
        )

    def ordered_by_node(self, n_nodes: int, backend: str) -> NodeOrderedRows:
        order = order_by_node(self.node_idx, n_nodes, backend="cpu" if backend == "oracle" else backend)
        codes, f, y, w, node_idx, perm = gather_rows(
            order, self.codes, self.f, self.y, self.w, self.node_idx, self.perm
        )
        if self.keep_perm and perm is None:
            perm = order
        return NodeOrderedRows(codes, f, y, w, node_idx, perm, keep_perm=self.keep_perm)

    def in_data_order(self, values: Any) -> Any:
        if self.perm is None:
            return values
        out = array_namespace(values).empty_like(values)
        out[self.perm] = values
        return out


def _splittable(nodes: TreeNodes, node: int, config: GrowConfig) -> bool:
    """Stopping rules 1 and 2: the node is above ``max_depth`` and holds at least ``min_node_size``."""
    return nodes.depth[node] < config.max_depth and nodes.weight[node] >= config.min_node_size


def _batches(frontier: list[int], n_bins: int) -> list[list[int]]:
    per_batch = max(1, MAX_HIST_BYTES // (n_bins * N_STATS * 8))
    return [frontier[i : i + per_batch] for i in range(0, len(frontier), per_batch)]


def total_stats(f: Any, y: Any, w: Any, backend: str) -> np.ndarray:
    """Return the seven sums of every row (the root's statistics): one group-sum pass, one constant code."""
    xp = array_namespace(f)
    constant = xp.zeros((f.shape[0], 1), dtype=xp.int8)
    sums = group_sums(constant, f, y, w, n_values=np.ones(1, dtype=np.int64), backend=backend)
    return to_numpy(sums)[0, 0, :]


def decide_splits(hist: np.ndarray, batch_rows: _BatchRows | None, level: SplitBatch) -> list[Split | None]:
    """Return the split (or None) of each node of ``level.batch`` from its histogram ``hist``.

    ``batch_rows`` (the batch's run of rows) is read by the MVCE criterion only. Reads nothing else of
    the tree, so it runs wherever the histogram is.
    """
    batch, parent, n_values, rare_codes, config = (
        level.batch,
        level.parent,
        level.n_values,
        level.rare_codes,
        level.config,
    )
    offsets = value_offsets(n_values)
    if config.split_mode == "binary":
        return _decide_binary(hist, parent, offsets, n_values, config)
    scale = config.leaf_map == "scale"
    rule = (offsets, n_values, rare_codes, parent, scale, config.penalty, config.min_child_size)
    split_loss, own_loss = choose_splits(hist, *rule)
    if config.criterion == "mvce":
        if batch_rows is None:
            msg = "criterion 'mvce' needs the rows of each node on one device (its views are not sums)"
            raise NotImplementedError(msg)
        rows, slot, starts = batch_rows.rows, batch_rows.slot, batch_rows.starts
        xp = array_namespace(rows.f)
        local_row = xp.arange(rows.f.shape[0], dtype=xp.int64) - xp.asarray(starts)[rows.node_idx]
        slot_rows = (starts[np.asarray(batch) + 1] - starts[np.asarray(batch)]).astype(np.int64)
        mvce_split, own_loss = _mvce_losses(
            rows, slot, local_row, slot_rows, candidate_values(hist, *rule), parent, n_values, config
        )
        # Eq. 12 over the features whose split has at least two children.
        split_loss = np.where(np.isfinite(split_loss), mvce_split, np.inf)
    best, accept = best_accepted(split_loss, own_loss)
    out: list[Split | None] = []
    for s in range(len(batch)):
        if not accept[s]:
            out.append(None)
            continue
        j = int(best[s])
        o, k = int(offsets[j]), int(n_values[j])
        table, values, weights = split_children(
            hist[s, o : o + k],
            rare_codes[j],
            parent[s, 0],
            parent[s, 1],
            scale,
            config.penalty,
            config.min_child_size,
        )
        out.append(Split(j, table, values, weights))
    return out


def best_accepted(split_loss: np.ndarray, own_loss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return per node its best feature (:func:`first_best`) and whether splitting on it lowers the
    node's loss by more than rounding (``RELATIVE_GAIN_TOL`` of the larger loss)."""
    best = first_best(split_loss, own_loss)
    split_loss = split_loss[np.arange(split_loss.shape[0]), best]
    loss_scale = np.maximum(np.abs(own_loss), np.abs(split_loss))
    accept = np.isfinite(split_loss) & (split_loss < own_loss - RELATIVE_GAIN_TOL * loss_scale)
    return best, accept


def first_best(split_loss: np.ndarray, own_loss: np.ndarray) -> np.ndarray:
    """Return per node the first feature whose split loss is within rounding of the lowest.

    Two features can split a node into the same children (a field and its cross with a constant), so
    their losses are equal but for the order of the additions, which differs between backends and
    between one machine and Dask partitions. Losses within ``RELATIVE_GAIN_TOL`` of the node's loss
    scale count as tied, and the first feature wins a tie: the same tree everywhere.
    """
    lowest = split_loss.min(axis=1, initial=np.inf)
    scale = np.maximum(np.abs(own_loss), np.where(np.isfinite(lowest), np.abs(lowest), 0.0))
    tied = split_loss <= (lowest + RELATIVE_GAIN_TOL * scale)[:, None]
    return np.argmax(tied, axis=1)


def _decide_binary(
    hist: np.ndarray, parent: np.ndarray, offsets: np.ndarray, n_values: np.ndarray, config: GrowConfig
) -> list[Split | None]:
    """Return the best two-way split (or None) of each node of a batch, from its histogram."""
    d = len(n_values)
    ordinal = np.asarray(config.ordinal or (False,) * d, dtype=np.bool_)
    allowed = np.asarray(config.feature_mask or (True,) * d, dtype=np.bool_)
    if ordinal.shape != (d,) or allowed.shape != (d,):
        msg = f"ordinal and feature_mask: expected one flag per feature ({d})"
        raise ValueError(msg)
    kind = config.kind
    split_loss, own_loss, side = choose_binary_splits(
        hist, offsets, n_values, ordinal, allowed, parent, kind, config.penalty, config.min_child_size
    )
    best, accept = best_accepted(split_loss, own_loss)
    out: list[Split | None] = []
    for s in range(hist.shape[0]):
        if not accept[s]:
            out.append(None)
            continue
        j = int(best[s])
        o, k = int(offsets[j]), int(n_values[j])
        table = side[s, o : o + k].astype(np.int64)
        values, weights = binary_children(
            hist[s, o : o + k], table, parent[s, 0], parent[s, 1], kind, config.penalty
        )
        out.append(Split(j, table, values, weights))
    return out


def _mvce_losses(
    rows: NodeOrderedRows,
    slot: Any,
    local_row: Any,
    slot_rows: np.ndarray,
    child_value: np.ndarray,
    parent: np.ndarray,
    n_values: np.ndarray,
    config: GrowConfig,
) -> tuple[np.ndarray, np.ndarray]:
    """Return MVCE per (node, candidate feature) and per node unsplit, over views shared by all candidates."""
    n_slots = parent.shape[0]
    slot_bins = np.maximum(1, slot_rows // config.mvce_bin_size).astype(np.int64)
    slot_bin_start = np.concatenate(([0], np.cumsum(slot_bins)[:-1])).astype(np.int64)
    d = len(n_values)
    per_view_bytes = int(slot_bins.sum()) * (d + 1) * 2 * 8
    chunk = max(1, min(config.n_views, MAX_MVCE_BYTES // max(per_view_bytes, 1)))
    powered = np.zeros((n_slots, d + 1))
    for start in range(0, config.n_views, chunk):
        n_chunk = min(chunk, config.n_views - start)
        sums = mvce_split_sums(
            rows.codes,
            rows.f,
            rows.y,
            rows.w,
            slot,
            local_row,
            slot_rows,
            slot_bins,
            slot_bin_start,
            child_value,
            parent,
            0 if config.leaf_map == "scale" else 1,
            n_views=n_chunk,
            view_start=start,
            seed=config.seed,
            n_values=n_values,
            backend=config.backend,
        )
        chunk_mvce = mvce_from_split_sums(to_numpy(sums), slot_bins, slot_bin_start, config.mvce_p)
        powered += n_chunk * chunk_mvce**config.mvce_p
    mvce = (powered / config.n_views) ** (1.0 / config.mvce_p)
    return mvce[:, :d], mvce[:, d]
