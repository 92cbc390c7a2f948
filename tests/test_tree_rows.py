"""The tree store over any rows grows one machine's tree: local blocks, dask partitions, streamed ones."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from gpucal.rows import LocalRows
from gpucal.trees import grow
from gpucal.trees.grow import NodeOrderedRows, grow_tree, grow_tree_on
from gpucal.trees.tree_rows import TreeRows, tree_store
from tests.test_distributed_trees import N_ROWS, N_VALUES, _config, _rows

dask = pytest.importorskip("dask")


class _Block:
    def __init__(self, codes: Any, f: Any, y: Any, w: Any) -> None:
        self.codes, self.f, self.y, self.w = codes, f, y, w

    def __len__(self) -> int:
        return len(self.f)


def _blocks(n_parts: int, w: Any, codes: Any, f: Any, y: Any) -> list[_Block]:
    bounds = np.linspace(0, len(f), n_parts + 1).astype(int)
    return [
        _Block(codes[a:b], f[a:b], y[a:b], None if w is None else w[a:b])
        for a, b in itertools.pairwise(bounds)
    ]


def _tree_rows(kind: str, blocks: list[_Block]) -> Any:
    if kind == "local":
        return LocalRows(tuple(blocks))
    from gpucal.rows.dask import DaskRows
    from gpucal.rows.streamed import StreamedRows

    delayed = [dask.delayed(b) for b in blocks]
    return DaskRows(delayed).map(_identity) if kind == "dask" else StreamedRows(delayed)


def _identity(block: Any) -> Any:
    return block


@pytest.mark.parametrize(
    ("kind", "weighted"), [("local", True), ("dask", True), ("dask", False), ("streamed", True)]
)
def test_tree_rows_grow_the_one_machine_tree(
    client: Any, monkeypatch: Any, kind: str, weighted: bool
) -> None:
    codes, f, y, w = _rows(N_ROWS, 5)
    w = w if weighted else None
    monkeypatch.setattr(grow, "MAX_HIST_BYTES", 3 * int(N_VALUES.sum()) * 7 * 8)
    rare = np.full(len(N_VALUES), -1, dtype=np.int64)
    one, leaf = grow_tree(codes, f, y, w, N_VALUES, rare, _config("shift"))
    rows = _tree_rows(kind, _blocks(5, w, codes, f, y))
    two, store = grow_tree_on(TreeRows.in_root(rows), N_VALUES, rare, _config("shift"))
    assert len(one.feature) > 20
    assert two.feature == one.feature
    for a, b in zip(two.child_table, one.child_table, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(two.values, one.values, rtol=1e-9, atol=1e-12)
    leaf_weight = store.rows.sum(_leaf_weight, len(one.feature))
    np.testing.assert_allclose(
        leaf_weight, np.bincount(leaf, weights=w, minlength=len(one.feature)), rtol=1e-12
    )


def _leaf_weight(store: NodeOrderedRows, n_nodes: int) -> np.ndarray:
    return np.bincount(store.node_idx, weights=store.w, minlength=n_nodes)


def test_one_local_block_is_its_own_node_ordered_store() -> None:
    codes, f, y, w = _rows(100, 1)
    assert isinstance(tree_store(LocalRows((_Block(codes, f, y, w),))), NodeOrderedRows)
    assert isinstance(tree_store(LocalRows(tuple(_blocks(2, w, codes, f, y)))), TreeRows)
