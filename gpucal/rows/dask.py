"""Rows in the partitions of dask collections, kept on the workers between passes.

A block is one partition (a dask Delayed); :meth:`DaskRows.map` computes ``fn`` on each where it lives
and persists the results there, :meth:`DaskRows.reduce` combines the blocks' results in a tree of
``split_every``-way combinations that keeps block order (:func:`~gpucal.rows.reduce._tree`), and
:meth:`DaskRows.sum` is that reduction with addition, so a sum is bit-identical from run to run and
differs from one machine's only in the order of the additions. :meth:`DaskRows.per_worker` concatenates
each worker's blocks there (:func:`~gpucal.rows._placement.per_worker`), and
:meth:`DaskRows.sum_in_shares` adds each share of a batch on one worker and finishes it there, so the
per-level histograms of a tree fit never meet on the client.

:func:`reduce_partitions`, :func:`sum_partitions`, :func:`partition_offsets` and
:func:`partition_lengths` are the same passes over dask collections given directly (one
:class:`~gpucal.rows.block.RowBlock` of the aligned partitions per block), for users' own statistics;
``gpucal.distributed`` exports them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpucal.rows._faults import PassWatch, compute
from gpucal.rows._placement import _client, holders, map_persisted, per_worker
from gpucal.rows.block import RowBlock, row_block
from gpucal.rows.collections import Partitions, as_partitions
from gpucal.rows.protocol import block_length, block_offsets
from gpucal.rows.reduce import SPLIT_EVERY, _add, _call, _host, _tree


def _with_offset(block: Any, fn: Callable[..., Any], row_offset: int, args: tuple[Any, ...]) -> Any:
    return fn(block, *args, row_offset=row_offset)


def _compact(block: Any, fn: Callable[..., Any], lo: int, hi: int, args: tuple[Any, ...]) -> tuple[Any, Any]:
    """A block's sums of items ``lo .. hi - 1`` as their non-zero entries: positions and values.

    What one worker sends another in :meth:`DaskRows.sum_in_shares`: an entry without rows is an exact
    zero, so leaving it out changes no sum, and a deep tree node's rows touch few of the bins.
    """
    flat = np.asarray(_host(fn(block, lo, hi, *args))).reshape(-1)
    at = np.flatnonzero(flat)
    return at, flat[at]


def _finish_share(
    block: Any,
    fn: Callable[..., Any],
    finish: Callable[..., list[Any]],
    lo: int,
    hi: int,
    args: tuple[Any, ...],
    *others: tuple[Any, Any],
) -> list[Any]:
    """This block's sums of its share, the other workers' :func:`_compact` sums added entry by entry,
    then ``finish``: with two workers bit for bit the sums of :meth:`DaskRows.sum`."""
    total = np.array(_host(fn(block, lo, hi, *args)), copy=True)
    flat = total.reshape(-1)
    for at, values in others:
        flat[at] += values  # distinct positions: one addition per entry
    return list(finish(total, lo, hi, *args))


@dataclass(frozen=True)
class DaskRows:
    """:class:`~gpucal.rows.Rows` over dask partitions (``parts``: one Delayed object per block)."""

    parts: list[Any]
    #: Results combined in one task of the reduction tree (at least 2).
    split_every: int = SPLIT_EVERY
    #: Whether the blocks follow the rows' order. After :meth:`per_worker` a block joins one worker's
    #: partitions, which interleave with the other workers': no block starts at a global row index.
    in_row_order: bool = True
    # Looked up once: [(offsets, n_rows)] and [holders(parts)].
    _offsets: list[tuple[np.ndarray, int]] = field(default_factory=list, compare=False, repr=False)
    _placed: list[Any] = field(default_factory=list, compare=False, repr=False)

    @property
    def n_blocks(self) -> int:
        return len(self.parts)

    @property
    def holds_blocks(self) -> bool:
        return True

    def single_block(self) -> Any | None:
        return None

    def map(self, fn: Callable[..., Any], *args: Any, offsets: bool = False) -> DaskRows:
        if not offsets:
            return DaskRows(map_persisted(fn, self.parts, *args), self.split_every, self.in_row_order)
        import dask

        starts = self._row_starts()
        task = dask.delayed(_with_offset, pure=False)
        tasks = [task(part, fn, int(o), args) for part, o in zip(self.parts, starts, strict=True)]
        return DaskRows(list(dask.persist(*tasks)), self.split_every)

    def sum(self, fn: Callable[..., Any], *args: Any, offsets: bool = False) -> np.ndarray:
        return np.asarray(self.reduce(fn, _add, *args, offsets=offsets))

    def reduce(
        self, fn: Callable[..., Any], combine: Callable[..., Any], *args: Any, offsets: bool = False
    ) -> Any:
        import dask

        starts = self._row_starts() if offsets else None
        # Fresh keys for every pass: dask does not hash the arguments (histogram batches, Newton thetas,
        # models), and two passes with equal arguments never share a key.
        call = dask.delayed(_call, pure=False)
        leaves = [
            call(fn, (part,), args, {} if starts is None else {"row_offset": int(starts[i])})
            for i, part in enumerate(self.parts)
        ]
        (result,) = compute(_tree(leaves, combine, self.split_every))
        return result

    def per_worker(self, fn: Callable[..., Any], *args: Any) -> DaskRows:
        return DaskRows(per_worker(fn, self.parts, *args), self.split_every, in_row_order=False)

    def _row_starts(self) -> np.ndarray:
        """The global row index of each block's first row; refused once blocks join several workers'."""
        if not self.in_row_order:
            msg = (
                "row offsets are not defined after per_worker (a block joins partitions that interleave "
                "with other workers'): draw what depends on the global row index before joining"
            )
            raise ValueError(msg)
        return self.offsets()[0]

    def sum_in_shares(
        self, fn: Callable[..., Any], finish: Callable[..., list[Any]], n_items: int, *args: Any
    ) -> list[Any]:
        placed = self._placement()
        if not placed:
            return list(finish(self.sum(fn, 0, n_items, *args), 0, n_items, *args))
        client = _client()
        bounds = np.linspace(0, n_items, len(placed) + 1).astype(int)
        shares = []
        for h, (address, block) in enumerate(placed):
            lo, hi = int(bounds[h]), int(bounds[h + 1])
            if lo == hi:
                continue
            others = [
                client.submit(
                    _compact, other, fn, lo, hi, args, workers=[holder], allow_other_workers=True, pure=False
                )
                for g, (holder, other) in enumerate(placed)
                if g != h
            ]
            shares.append(
                client.submit(
                    _finish_share,
                    block,
                    fn,
                    finish,
                    lo,
                    hi,
                    args,
                    *others,
                    workers=[address],
                    allow_other_workers=True,
                    pure=False,
                )
            )
        gathered = PassWatch(client, "a reduce-scatter over dask rows").gather(shares)
        return [result for share in gathered for result in share]

    def _placement(self) -> list[tuple[str, Any]]:
        """``(address, future)`` of every block on its worker (looked up once); empty without a cluster."""
        if not self._placed:
            self._placed.append(holders(self.parts))
        return self._placed[0] or []

    def offsets(self) -> tuple[np.ndarray, int]:
        """:meth:`Rows.offsets`; after :meth:`per_worker` only the number of rows holds (the blocks' starts
        are in the joined blocks' order, no global row index), and passes with ``offsets=True`` refuse."""
        if not self._offsets:
            import dask

            lengths = compute(*[dask.delayed(block_length, pure=False)(p) for p in self.parts])
            self._offsets.append(block_offsets(lengths))
        return self._offsets[0]


def partition_blocks(parts: Partitions) -> list[Any]:
    """One delayed :class:`~gpucal.rows.block.RowBlock` per partition: the aligned inputs by name."""
    import dask

    task = dask.delayed(row_block, pure=True)
    return [task(parts.names, *part) for part in parts.parts]


def order_by_node(collections: Any, split_every: int = SPLIT_EVERY) -> DaskRows:
    """The :class:`DaskRows` of a dask collection, a sequence of aligned ones, or their
    :class:`~gpucal.rows.collections.Partitions` (one block per partition, not persisted)."""
    if split_every < 2:
        msg = f"The 'split_every' parameter must be an int >= 2. Got {split_every!r} instead."
        raise ValueError(msg)
    parts = collections if isinstance(collections, Partitions) else as_partitions(collections)
    return DaskRows(partition_blocks(parts), split_every)


def _spread(
    block: RowBlock,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    **offset: int,
) -> Any:
    """``fn`` of a block's partitions as positional arguments (the inputs' order), then the rest."""
    return fn(*block.columns.values(), *args, **kwargs, **offset)


def reduce_partitions(
    collections: Any,
    fn: Callable[..., Any],
    combine: Callable[..., Any],
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    with_offsets: bool = False,
    split_every: int = SPLIT_EVERY,
) -> Any:
    """Return ``combine`` over partitions of ``fn(*partition, *args, **kwargs)``, reduced in a tree:
    :meth:`DaskRows.reduce` of the collections' partitions.

    ``combine(*results)`` must be associative and must keep the order of its arguments meaningful
    (results arrive in partition order). With ``with_offsets=True`` a first pass counts the rows of every
    partition, and ``fn`` also receives ``row_offset=`` (the global index of the partition's first row)
    and ``n_total=`` (all rows).
    """
    rows = order_by_node(collections, split_every)
    if rows.n_blocks == 0:
        msg = "the collection has no partitions"
        raise ValueError(msg)
    extra = dict(kwargs or {})
    if with_offsets:
        extra["n_total"] = rows.offsets()[1]
    return rows.reduce(_spread, combine, fn, tuple(args), extra, offsets=with_offsets)


def sum_partitions(
    collections: Any,
    fn: Callable[..., Any],
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    with_offsets: bool = False,
    split_every: int = SPLIT_EVERY,
) -> np.ndarray:
    """Map ``fn`` over the partitions of ``collections`` and add the results: one pass over the rows.

    This is the distributed form of every gpucal statistic ("statistics are sums"): ``fn`` takes the
    partition (one pandas or cudf frame or Series, or a numpy or cupy chunk, per collection), then
    ``*args`` and ``**kwargs``, and returns an array of a shape that does not depend on the partition
    (a histogram of fixed bins, a vector of Newton sums). The arrays are brought to the host and added
    in a tree of ``split_every``-way additions (:meth:`DaskRows.sum`); the sum comes back as a numpy
    array.

    Parameters
    ----------
    collections : dask collection or sequence of dask collections
        A dask DataFrame, Series or 1-D Array, or several with the same partitions (partition ``i``
        of each is passed to ``fn`` together).
    fn : callable
        ``fn(*partitions, *args, **kwargs) -> array``; module-level (picklable) for process workers.
    args, kwargs
        Extra arguments, the same for every partition.
    with_offsets : bool, default=False
        Count the partitions' rows first (one more pass) and pass ``row_offset=`` and ``n_total=`` to
        ``fn``, for statistics that depend on the global row index (MVCE's views).
    split_every : int, default=8
        Results added per task of the tree.

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    A per-level histogram of a tree fit is one call: ``sum_partitions(frame, level_histogram,
    args=(tree_so_far,))`` with ``level_histogram`` returning ``(n_nodes, n_bins, n_stats)`` sums.
    """
    return np.asarray(
        reduce_partitions(
            collections,
            fn,
            _add,
            args=args,
            kwargs=kwargs,
            with_offsets=with_offsets,
            split_every=split_every,
        )
    )


def partition_offsets(collections: Any) -> tuple[np.ndarray, int]:
    """Return ``(offsets, n_total)``: the global index of each partition's first row, and all rows.

    Row ``j`` of partition ``i`` is global row ``offsets[i] + j``, the index it would have in the
    concatenated data on one machine (what the counter-based MVCE views hash): :meth:`DaskRows.offsets`.
    """
    return order_by_node(collections).offsets()


def partition_lengths(collections: Any) -> np.ndarray:
    """Return the number of rows of every partition (int64), in partition order: one pass."""
    offsets, n_total = partition_offsets(collections)
    return np.diff(offsets, append=n_total)


__all__ = [
    "DaskRows",
    "order_by_node",
    "partition_blocks",
    "partition_lengths",
    "partition_offsets",
    "reduce_partitions",
    "sum_partitions",
]
