"""Rows read again by every pass, for data larger than the cluster's memory.

Asked for with ``dask.config.set({"gpucal.stream-partitions": True})``. Nothing is kept between
passes: :meth:`StreamedRows.map` only records the step, and every pass computes each partition from its
source again (for ``dd.read_parquet`` or ``dd.from_map(read, files)``: reads the file), replays the
recorded steps on the worker that read it, and returns the pass's fixed-shape sums. A pass is one task
per partition, and each adds its result to the one before it in its lane, one lane per worker
(:func:`fold_in_lanes`), so a lane holds two results whatever the number of partitions. The sums are
those of the held rows (:class:`~gpucal.rows.dask.DaskRows`) in another order of the additions.

What it costs: every pass pays the read and every recorded step (the checks, the encoding, the trees
so far); memory on a worker is the partitions in flight and a few results, whatever the number of rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpucal.rows._faults import compute
from gpucal.rows._placement import worker_addresses
from gpucal.rows.protocol import block_length, block_offsets
from gpucal.rows.reduce import SPLIT_EVERY, _host, _tree

#: The ``dask.config`` key that asks for streamed rows (default False: rows held on the workers).
STREAM_KEY = "gpucal.stream-partitions"


def stream_partitions() -> bool:
    """Return whether ``dask.config`` asks for streamed rows (key ``gpucal.stream-partitions``)."""
    import dask

    return bool(dask.config.get(STREAM_KEY, False))


@dataclass(frozen=True)
class _Step:
    """A recorded :meth:`StreamedRows.map`: ``fn(block, *args)``, with ``row_offset=`` from ``starts``."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    starts: np.ndarray | None


def _replay(source: Any, index: int, steps: tuple[_Step, ...]) -> Any:
    block = source
    for step in steps:
        if step.starts is None:
            block = step.fn(block, *step.args)
        else:
            block = step.fn(block, *step.args, row_offset=int(step.starts[index]))
    return block


def _replayed_call(
    source: Any,
    index: int,
    steps: tuple[_Step, ...],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Any,
) -> Any:
    return _host(fn(_replay(source, index, steps), *args, **kwargs))


def _added_step(
    source: Any,
    index: int,
    steps: tuple[_Step, ...],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    before: Any,
) -> np.ndarray:
    result = np.asarray(_replayed_call(source, index, steps, fn, args, kwargs))
    return result if before is None else before + result


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
    (out,) = compute(total)
    return np.asarray(out)


def _alone(block: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    return fn([block], [0], *args)


@dataclass(frozen=True)
class StreamedRows:
    """:class:`~gpucal.rows.Rows` over source partitions (dask Delayed, not persisted) and recorded steps."""

    sources: list[Any]
    steps: tuple[_Step, ...] = ()
    _offsets: list[tuple[np.ndarray, int]] = field(default_factory=list, compare=False, repr=False)

    @property
    def n_blocks(self) -> int:
        return len(self.sources)

    @property
    def holds_blocks(self) -> bool:
        return False

    def single_block(self) -> Any | None:
        return None

    def map(self, fn: Callable[..., Any], *args: Any, offsets: bool = False) -> StreamedRows:
        starts = self.offsets()[0] if offsets else None
        return replace(self, steps=(*self.steps, _Step(fn, args, starts)), _offsets=[])

    def _kwargs(self, offsets: bool) -> list[dict[str, Any]]:
        if not offsets:
            return [{} for _ in self.sources]
        return [{"row_offset": int(o)} for o in self.offsets()[0]]

    def sum(self, fn: Callable[..., Any], *args: Any, offsets: bool = False) -> np.ndarray:
        import dask

        task = dask.delayed(_added_step, pure=False)
        kwargs = self._kwargs(offsets)

        def step(i: int, before: Any) -> Any:
            return task(self.sources[i], i, self.steps, fn, args, kwargs[i], before)

        return fold_in_lanes(len(self.sources), max(1, len(worker_addresses())), step)

    def reduce(
        self, fn: Callable[..., Any], combine: Callable[..., Any], *args: Any, offsets: bool = False
    ) -> Any:
        import dask

        call = dask.delayed(_replayed_call, pure=False)
        kwargs = self._kwargs(offsets)
        leaves = [call(s, i, self.steps, fn, args, kwargs[i]) for i, s in enumerate(self.sources)]
        (result,) = compute(_tree(leaves, combine, SPLIT_EVERY))
        return result

    def per_worker(self, fn: Callable[..., Any], *args: Any) -> StreamedRows:
        """Each block alone (``fn([block], [0], *args)``): nothing is held, so nothing is gathered."""
        return self.map(_alone, fn, args)

    def sum_in_shares(
        self, fn: Callable[..., Any], finish: Callable[..., list[Any]], n_items: int, *args: Any
    ) -> list[Any]:
        return list(finish(self.sum(fn, 0, n_items, *args), 0, n_items, *args))

    def offsets(self) -> tuple[np.ndarray, int]:
        if not self._offsets:
            import dask

            task = dask.delayed(_replayed_call, pure=False)
            lengths = compute(
                *[task(s, i, self.steps, block_length, (), {}) for i, s in enumerate(self.sources)]
            )
            self._offsets.append(block_offsets(lengths))
        return self._offsets[0]


__all__ = ["STREAM_KEY", "StreamedRows", "fold_in_lanes", "stream_partitions"]
