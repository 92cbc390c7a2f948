"""``MBCT.fit`` on dask collections without holding the rows: every pass reads the partitions again.

For data larger than the cluster's memory, asked for with
``dask.config.set({"gpucal.stream-partitions": True})``. The default fit
(``gpucal.distributed.mbct``) reads each partition once and keeps every worker's rows in memory (about
40 bytes a row: codes, score, label, node). Streamed, nothing is kept between passes. Each pass
computes every partition from its source again (for ``dd.read_parquet`` or ``dd.from_map(read, files)``:
reads the file), then on the worker that computed it:

1. checks and encodes it (the fitted ``encoder_``), and takes its training or validation rows
   (``held_out_mask`` at the partition's global row offset, found by the first pass);
2. maps the codes to tree codes and passes the score through the initial map and the trees kept so
   far (``predict_ensemble``);
3. for the tree being grown, finds each row's node by walking the tree as far as it is built
   (``kernels.tree_leaves``: the nodes of the current level are leaves of that walk);

and returns the pass's fixed-shape sums. A histogram pass is one task per partition (nothing of
partition size outlives it) and each adds its histogram to the one before it in its lane, one
lane per worker (:func:`fold_in_lanes`), so a lane holds two histograms whatever the number of
partitions. The sums are those of the held fit in another order of the additions, so the trees are the
same (up to the ties that ``grow.first_best`` settles) and the node values agree to rounding
(``tests/test_distributed_stream.py``).

What it costs: every pass pays the read and the encoding, and a histogram pass scatters into the
batch's histogram from rows in data order (the held fit reads one run of node-ordered rows). A 6-tree
fit is about 280 passes. Memory on a worker is the partitions in flight and a few batch histograms,
whatever the number of rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from gpucal.distributed.mbct import (
    _N_HELD,
    _N_ROWS,
    RowsPart,
    _check_summary,
    _encode_part,
    _label_square_sum,
    _loss_sums,
    _map_sums,
    _part_summary,
    _ScoreRows,
    _split_group,
    _SplitPart,
    fit_input_state,
)
from gpucal.distributed.trees import TreeRowsPart
from gpucal.partition.ensemble import TreeEnsemble, map_codes, predict_ensemble
from gpucal.partition.grow import (
    GrowConfig,
    Split,
    TreeNodes,
    batch_histogram,
    decide_splits,
    grow_tree_on,
    total_stats,
)
from gpucal.partition.local_maps import MapSums, unflatten_map_sums
from gpucal.rows._placement import as_partitions, worker_addresses
from gpucal.rows._reduce import sum_partitions
from kernels import tree_leaves

if TYPE_CHECKING:
    from gpucal.mbct.model import MBCT

#: The ``dask.config`` key that asks for the streamed fit (default False: rows held on the workers).
STREAM_KEY = "gpucal.stream-partitions"


def stream_partitions() -> bool:
    """Return whether ``dask.config`` asks for the streamed fit (``gpucal.stream-partitions``)."""
    import dask

    return bool(dask.config.get(STREAM_KEY, False))


# --------------------------------------------------------------------------------------------------
# What a task computes from one source partition


def _n_rows(X: Any) -> int:
    return len(X)


def _split_part(X: Any, y: Any, w: Any, index: int, offsets: np.ndarray, model: MBCT) -> _SplitPart:
    """Partition ``index`` checked, encoded and split as the held fit splits it (``mbct._split_group``)."""
    return _split_group([_encode_part(X, y, w, model)], [index], model, offsets)


def _side_rows(
    X: Any,
    y: Any,
    w: Any,
    index: int,
    offsets: np.ndarray,
    model: MBCT,
    side: str,
    trees: Sequence[TreeEnsemble] | None,
) -> RowsPart:
    """One partition's training (``side="train"``) or validation rows, encoded.

    ``trees`` None: the input codes and the score as read. Otherwise the tree codes and the chain's
    input after the initial map and ``trees``.
    """
    split = _split_part(X, y, w, index, offsets, model)
    rows = split.train if side == "train" else split.valid
    if rows is None:
        msg = f"side {side!r}: the fit holds no validation rows"
        raise ValueError(msg)
    if trees is None:
        return rows
    codes = map_codes(rows.codes, model._code_maps, model._tree_n_values)
    f = model._apply_init(rows.f)
    for tree in trees:
        f = predict_ensemble(tree, codes, f)
    return RowsPart(codes, f, rows.y, rows.w)


def _summary(X: Any, y: Any, w: Any, index: int, offsets: np.ndarray, model: MBCT) -> np.ndarray:
    """The held fit's input summary (``mbct._part_summary``) of one partition."""
    return _part_summary(_split_part(X, y, w, index, offsets, model), model._n_values())


def _in_nodes(part: RowsPart, feature: np.ndarray, base: np.ndarray, table: np.ndarray) -> TreeRowsPart:
    """The rows with the node each is in, in a tree built as far as ``feature, base, table``."""
    node = tree_leaves(part.codes, feature, base, table, np.array([0, feature.shape[0]], dtype=np.int64))
    return TreeRowsPart(part.codes, part.f, part.y, part.w, node[:, 0])


def _root_stats(part: RowsPart, backend: str) -> np.ndarray:
    return total_stats(part.f, part.y, part.w, backend)


def _histogram(
    X: Any,
    y: Any,
    w: Any,
    index: int,
    offsets: np.ndarray,
    model: MBCT,
    trees: list[TreeEnsemble],
    tree: tuple[np.ndarray, np.ndarray, np.ndarray],
    batch: list[int],
    n_nodes: int,
    n_values: np.ndarray,
    backend: str,
    before: np.ndarray | None,
) -> np.ndarray:
    """``before`` plus one partition's batch histogram, from its source: rows, nodes and group sums in
    one task (nothing of partition size outlives it)."""
    rows = _side_rows(X, y, w, index, offsets, model, "train", trees)
    part = _in_nodes(rows, *tree)
    hist, _ = batch_histogram(
        part.codes, part.f, part.y, part.w, part.node_idx, batch, n_nodes, n_values, backend
    )
    return hist if before is None else before + hist


def _added(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b


def fold_in_lanes(n_parts: int, n_lanes: int, step: Callable[[int, Any], Any]) -> np.ndarray:
    """Sum partitions in ``n_lanes`` chains: lane ``k`` is ``step(i, sum so far)`` for partitions
    ``k, k + n_lanes, ...`` (the first step gets None), then the lanes are added in order.

    ``step(i, before)`` returns a delayed ``before`` plus partition ``i``'s array. Each step waits for
    the one before it, so a lane holds its running sum and one partition's array whatever the number of
    partitions, where a reduction tree can compute every partition's first. The order of the additions
    is fixed by ``n_lanes``.
    """
    import dask

    lanes = []
    for k in range(min(n_lanes, n_parts)):
        total = None
        for i in range(k, n_parts, n_lanes):
            total = step(i, total)
        lanes.append(total)
    add = dask.delayed(_added, pure=False)
    total = lanes[0]
    for lane in lanes[1:]:
        total = add(total, lane)
    (out,) = dask.compute(total)
    return np.asarray(out)


# --------------------------------------------------------------------------------------------------
# The fit


@dataclass(frozen=True)
class StreamedChainRows:
    """``gpucal.mbct.model.ChainRows`` over source partitions recomputed by every pass.

    ``sources[i]`` is partition ``i`` of ``(X, y, sample_weight)`` (dask Delayed, not persisted),
    ``offsets[i]`` its first row's global index, ``trees`` the trees the input has passed through.
    """

    model: MBCT
    sources: list[tuple[Any, ...]]
    offsets: np.ndarray
    trees: tuple[TreeEnsemble, ...] = ()

    def side(self, which: str, *, tree_codes: bool = True) -> list[Any]:
        """Delayed :func:`_side_rows` of every partition: what one pass computes from its sources."""
        import dask

        task = dask.delayed(_side_rows, pure=False)
        trees = list(self.trees) if tree_codes else None
        return [
            task(*source, i, self.offsets, self.model, which, trees) for i, source in enumerate(self.sources)
        ]

    def sum(self, which: str, fn: Callable[..., Any], *args: Any, tree_codes: bool = True) -> np.ndarray:
        """``fn(rows, *args)`` added over every partition's rows of one side: one pass."""
        return sum_partitions(as_partitions(self.side(which, tree_codes=tree_codes)), fn, args=args)

    def global_loss(self) -> float:
        which = "valid" if self.model.validation_fraction else "train"
        loss_sum, weight_sum = self.sum(which, _loss_sums, self.model.leaf_map)
        return float(loss_sum) / float(weight_sum)

    def grow(
        self,
        n_values: np.ndarray,
        rare_codes: np.ndarray,
        config: GrowConfig,
        log: Callable[[str], None] | None,
    ) -> tuple[TreeNodes, StreamedRows]:
        root = StreamedRows(  # one node, a leaf
            self, np.array([-1], dtype=np.int32), np.array([-1], dtype=np.int64), np.zeros(0, dtype=np.int32)
        )
        return grow_tree_on(root, n_values, rare_codes, config, log=log)

    def map_sums(self, leaf: StreamedRows, kind: str) -> MapSums:
        backend = self.model._backend

        def sums(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            flat = sum_partitions(as_partitions(leaf.rows()), _map_sums, args=(theta, kind, backend))
            return unflatten_map_sums(flat, *theta.shape)

        return sums

    def through(self, tree: TreeEnsemble) -> StreamedChainRows:
        return replace(self, trees=(*self.trees, tree))


@dataclass(frozen=True)
class StreamedRows:
    """``gpucal.partition.grow.RowStore`` of a tree grown on streamed partitions.

    Holds the tree as far as it is built (``feature, base, table``: ``TreeNodes.routing_arrays``);
    every read is a pass over the training rows with each row's node found by walking it.
    """

    chain: StreamedChainRows
    feature: np.ndarray
    base: np.ndarray
    table: np.ndarray

    def rows(self) -> list[Any]:
        """Delayed training rows of every partition, each with the node it is in."""
        import dask

        task = dask.delayed(_in_nodes, pure=False)
        return [task(part, self.feature, self.base, self.table) for part in self.chain.side("train")]

    def root_stats(self, backend: str) -> np.ndarray:
        return self.chain.sum("train", _root_stats, backend)

    def start_level(self, n_nodes: int) -> None:
        """Nothing to prepare: each pass finds the rows' nodes."""

    def splits(
        self,
        batch: list[int],
        parent: np.ndarray,
        n_nodes: int,
        n_values: np.ndarray,
        rare_codes: np.ndarray,
        config: GrowConfig,
    ) -> list[Split | None]:
        import dask

        chain, task = self.chain, dask.delayed(_histogram, pure=False)
        tree = (self.feature, self.base, self.table)
        trees, batch = list(chain.trees), list(batch)

        def step(i: int, before: Any) -> Any:
            source = chain.sources[i]
            return task(
                *source,
                i,
                chain.offsets,
                chain.model,
                trees,
                tree,
                batch,
                n_nodes,
                n_values,
                config.backend,
                before,
            )

        hist = fold_in_lanes(len(chain.sources), max(1, len(worker_addresses())), step)
        return decide_splits(hist, None, batch, parent, n_values, rare_codes, config)

    def routed(
        self, feature: Any, base: Any, table: Any, n_nodes: int, more_levels: bool, backend: str
    ) -> StreamedRows:
        """The tree one level further (no pass: the next pass walks it)."""
        return replace(self, feature=feature, base=base, table=table)

    def final_nodes(self) -> StreamedRows:
        return self


def first_streamed_chain(model: MBCT, sources: list[tuple[Any, ...]]) -> StreamedChainRows:
    """Everything before the trees, streamed: the held fit's ``_first_chain`` passes, each a new read."""
    import dask

    lengths = dask.compute(*[dask.delayed(_n_rows, pure=False)(source[0]) for source in sources])
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    task = dask.delayed(_summary, pure=False)
    summaries = [task(*source, i, offsets, model) for i, source in enumerate(sources)]
    summary = sum_partitions(as_partitions(summaries), np.asarray)
    _check_summary(model, summary)
    chain = StreamedChainRows(model, sources, offsets)
    n_train = int(summary[_N_ROWS] - summary[_N_HELD])
    model._log(1, f"MBCT: {n_train} training rows (dask, {len(sources)} partitions, streamed)")

    def square_sum(mean: float) -> float:
        return float(chain.sum("train", _label_square_sum, mean, tree_codes=False)[0])

    fit_input_state(
        model, summary, square_sum, lambda: _ScoreRows.of_parts(chain.side("train", tree_codes=False))
    )
    return chain


__all__ = [
    "STREAM_KEY",
    "StreamedChainRows",
    "StreamedRows",
    "first_streamed_chain",
    "fold_in_lanes",
    "stream_partitions",
]
