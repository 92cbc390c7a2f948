"""The rows a fit reads, wherever they are: blocks, mapped where they live, summed into fixed shapes.

Every gpucal statistic is a sum over rows of a fixed-shape array, so a fit needs only a few things from
its rows, and :class:`Rows` is those things. The rows are cut into *blocks*: one block for data in one
machine's memory (:class:`~gpucal.rows.local.LocalRows`), one per dask partition
(:class:`~gpucal.rows.dask.DaskRows`, kept on the workers between passes), or one per partition read
again by every pass (:class:`~gpucal.rows.streamed.StreamedRows`, for data larger than memory). A block
is whatever the fit made of it: the user's columns at first (:class:`~gpucal.rows.block.RowBlock`), then
encoded codes, a tree's node-ordered store, ... A fit written against :class:`Rows` is one algorithm on
every backend; only the order of the floating-point additions differs between them.

Functions given to :meth:`Rows.map`, :meth:`Rows.sum` and :meth:`Rows.reduce` run where the block is
(a dask worker, possibly another process): they must be module-level (picklable) and return host
(numpy) results from ``sum`` and ``reduce`` (cupy results are brought to the host).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np


class Rows(Protocol):
    """Blocks of rows and the passes a fit makes over them."""

    @property
    def n_blocks(self) -> int:
        """The number of blocks (1 for rows in one machine's memory)."""

    @property
    def holds_blocks(self) -> bool:
        """Whether the blocks :meth:`map` makes are kept where they were computed (True), or made again
        by every pass from the source (False: streamed rows, where a pass replays every step)."""

    def single_block(self) -> Any | None:
        """Return the one block holding every row when it is in this process, else None.

        Methods whose one-machine fit reads the rows whole (merging identical rows, MVCE's views, a
        node-ordered tree store, an encoder fitted on the full frame) ask this instead of the backend's
        type: any backend whose rows are one local block answers with that block."""

    def map(self, fn: Callable[..., Any], *args: Any, offsets: bool = False) -> Rows:
        """Return the rows whose block ``i`` is ``fn(block_i, *args)``, computed and kept where block ``i``
        lives. With ``offsets=True``, ``fn`` also receives ``row_offset=``: the global index of the block's
        first row in these rows (:meth:`offsets`)."""

    def sum(self, fn: Callable[..., Any], *args: Any, offsets: bool = False) -> np.ndarray:
        """Return ``sum_i fn(block_i, *args)`` (float64 arrays of one shape) as a host array: one pass."""

    def reduce(
        self, fn: Callable[..., Any], combine: Callable[..., Any], *args: Any, offsets: bool = False
    ) -> Any:
        """Return ``combine(fn(block_0, *args), fn(block_1, *args), ...)`` combined in a tree that keeps
        block order (``combine`` associative): keyed tables, distinct values, anything not fixed-shape."""

    def per_worker(self, fn: Callable[..., Any], *args: Any) -> Rows:
        """Return the rows with one block per machine: ``fn(blocks, indices, *args)`` of the blocks each
        holds (in block order, with their indices), computed and kept there. Later passes then ship one
        result per machine whatever the number of blocks. A machine's partitions interleave with the
        others', so the joined blocks may leave the rows' order: passes with ``offsets=True`` are
        refused after it on dask (the number of rows of :meth:`offsets` still holds)."""

    def sum_in_shares(
        self, fn: Callable[..., Any], finish: Callable[..., list[Any]], n_items: int, *args: Any
    ) -> list[Any]:
        """Sum per-item statistics and finish them where they were added: a reduce-scatter.

        Items ``0 .. n_items - 1`` (a batch of tree nodes) are cut into contiguous shares ``[lo, hi)``,
        one per machine. ``fn(block, lo, hi, *args)`` returns the fixed-shape sums of a block's rows for
        items ``lo .. hi - 1``; each share's sums are added on one machine, where ``finish(total, lo, hi,
        *args)`` turns them into one result per item. Returns the items' results in order. On one
        machine: ``finish(sum(fn, 0, n_items), 0, n_items)``."""

    def offsets(self) -> tuple[np.ndarray, int]:
        """Return ``(offsets, n_rows)``: the global index of each block's first row (blocks support
        ``len``), and the number of rows. Row ``j`` of block ``i`` is row ``offsets[i] + j`` of the rows
        concatenated on one machine, whatever the blocks (:func:`block_offsets` of their lengths)."""


def block_length(block: Any) -> int:
    """The number of rows of a block (``len``): the task each backend runs to count its rows."""
    return len(block)


def block_offsets(lengths: Any) -> tuple[np.ndarray, int]:
    r"""Return ``(offsets, n_rows)`` of blocks of ``lengths`` rows: ``offsets[i]`` is the global index of
    block ``i``'s first row, :math:`\sum_{k < i} \text{lengths}_k`."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64), int(lengths.sum())


__all__ = ["Rows", "block_length", "block_offsets"]
