"""Rows in the partitions of dask collections, kept on the workers between passes.

A block is one partition (a dask Delayed); :meth:`DaskRows.map` computes ``fn`` on each where it lives
and persists the results there, :meth:`DaskRows.sum` adds the blocks' fixed-shape arrays in a tree of
``split_every``-way additions (:func:`~gpucal.rows._reduce.reduce_partitions`), so a sum is bit-identical
from run to run and differs from one machine's only in the order of the additions.
:meth:`DaskRows.per_worker` concatenates each worker's blocks there
(:func:`~gpucal.rows._placement.per_worker`), and :meth:`DaskRows.sum_in_shares` adds each share of a
batch on one worker and finishes it there, so the per-level histograms of a tree fit never meet on the
client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpucal.rows._faults import PassWatch, compute
from gpucal.rows._placement import _client, holders, map_persisted, per_worker
from gpucal.rows._reduce import SPLIT_EVERY, _add, _call, _tree


def _length(block: Any) -> int:
    return len(block)


def _with_offset(block: Any, fn: Callable[..., Any], row_offset: int, args: tuple[Any, ...]) -> Any:
    return fn(block, *args, row_offset=row_offset)


def _compact(block: Any, fn: Callable[..., Any], lo: int, hi: int, args: tuple[Any, ...]) -> tuple[Any, Any]:
    """A block's sums of items ``lo .. hi - 1`` as their non-zero entries: positions and values.

    What one worker sends another in :meth:`DaskRows.sum_in_shares`: an entry without rows is an exact
    zero, so leaving it out changes no sum, and a deep tree node's rows touch few of the bins.
    """
    flat = np.asarray(fn(block, lo, hi, *args)).reshape(-1)
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
    total = np.array(fn(block, lo, hi, *args), copy=True)
    flat = total.reshape(-1)
    for at, values in others:
        flat[at] += values  # distinct positions: one addition per entry
    return list(finish(total, lo, hi, *args))


@dataclass(frozen=True)
class DaskRows:
    """:class:`~gpucal.rows.Rows` over dask partitions (``parts``: one Delayed object per block)."""

    parts: list[Any]
    # Looked up once: [(offsets, n_rows)] and [holders(parts)].
    _offsets: list[tuple[np.ndarray, int]] = field(default_factory=list, compare=False, repr=False)
    _placed: list[Any] = field(default_factory=list, compare=False, repr=False)

    @property
    def n_blocks(self) -> int:
        return len(self.parts)

    def map(self, fn: Callable[..., Any], *args: Any, offsets: bool = False) -> DaskRows:
        if not offsets:
            return DaskRows(map_persisted(fn, self.parts, *args))
        import dask

        starts, _ = self.offsets()
        task = dask.delayed(_with_offset, pure=False)
        tasks = [task(part, fn, int(o), args) for part, o in zip(self.parts, starts, strict=True)]
        return DaskRows(list(dask.persist(*tasks)))

    def sum(self, fn: Callable[..., Any], *args: Any, offsets: bool = False) -> np.ndarray:
        return np.asarray(self.reduce(fn, _add, *args, offsets=offsets))

    def reduce(
        self, fn: Callable[..., Any], combine: Callable[..., Any], *args: Any, offsets: bool = False
    ) -> Any:
        import dask

        starts = self.offsets()[0] if offsets else None
        # Fresh keys for every pass: dask does not hash the arguments (histogram batches, Newton thetas,
        # models), and two passes with equal arguments never share a key.
        call = dask.delayed(_call, pure=False)
        leaves = [
            call(fn, (part,), args, {} if starts is None else {"row_offset": int(starts[i])})
            for i, part in enumerate(self.parts)
        ]
        (result,) = compute(_tree(leaves, combine, SPLIT_EVERY))
        return result

    def per_worker(self, fn: Callable[..., Any], *args: Any) -> DaskRows:
        return DaskRows(per_worker(fn, self.parts, *args))

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
        if not self._offsets:
            import dask

            lengths = np.asarray(
                compute(*[dask.delayed(_length, pure=False)(p) for p in self.parts]), dtype=np.int64
            )
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            self._offsets.append((starts, int(lengths.sum())))
        return self._offsets[0]


__all__ = ["DaskRows"]
