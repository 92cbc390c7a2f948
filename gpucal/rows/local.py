"""Rows in one machine's memory (numpy or cupy): the blocks are held here and every pass is a loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal.rows.protocol import block_offsets
from gpucal.rows.reduce import _host as host


@dataclass(frozen=True)
class LocalRows:
    """:class:`~gpucal.rows.Rows` over blocks held in this process (usually one: the whole data)."""

    blocks: tuple[Any, ...]

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    @property
    def holds_blocks(self) -> bool:
        return True

    def single_block(self) -> Any | None:
        return self.blocks[0] if len(self.blocks) == 1 else None

    def _calls(self, fn: Callable[..., Any], args: tuple[Any, ...], offsets: bool) -> list[Any]:
        if not offsets:
            return [fn(block, *args) for block in self.blocks]
        starts, _ = self.offsets()
        return [fn(b, *args, row_offset=int(o)) for b, o in zip(self.blocks, starts, strict=True)]

    def map(self, fn: Callable[..., Any], *args: Any, offsets: bool = False) -> LocalRows:
        return LocalRows(tuple(self._calls(fn, args, offsets)))

    def sum(self, fn: Callable[..., Any], *args: Any, offsets: bool = False) -> np.ndarray:
        results = self._calls(fn, args, offsets)
        total = np.array(host(results[0]), copy=True)
        for r in results[1:]:
            total += host(r)
        return total

    def reduce(
        self, fn: Callable[..., Any], combine: Callable[..., Any], *args: Any, offsets: bool = False
    ) -> Any:
        results = [host(r) for r in self._calls(fn, args, offsets)]
        return results[0] if len(results) == 1 else combine(*results)

    def per_worker(self, fn: Callable[..., Any], *args: Any) -> LocalRows:
        return LocalRows((fn(list(self.blocks), list(range(len(self.blocks))), *args),))

    def sum_in_shares(
        self, fn: Callable[..., Any], finish: Callable[..., list[Any]], n_items: int, *args: Any
    ) -> list[Any]:
        return list(finish(self.sum(fn, 0, n_items, *args), 0, n_items, *args))

    def offsets(self) -> tuple[np.ndarray, int]:
        return block_offsets([len(b) for b in self.blocks])


__all__ = ["LocalRows"]
