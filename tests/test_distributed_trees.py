"""Tree growth over dask partitions (issue 6): one node-ordered store per worker, partitions read once.

The references are independent of the code under test: ``grow.grow_tree`` on the concatenated rows
(one machine) for the trees, ``client.who_has`` for where partitions live, and a counter of partition
reads for the joined inputs. Partitions are pandas or numpy on a ``distributed.LocalCluster`` of threads.
"""

from __future__ import annotations

import itertools
import threading

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from gpucal import MBCT
from gpucal.datasets import make_ctr
from gpucal.distributed import sum_partitions
from gpucal.mbct.read import ChainBlock as RowsPart
from gpucal.rows._placement import balanced_shares, holders, per_worker, persist, worker_groups
from gpucal.rows.collections import partitions
from gpucal.trees import grow
from gpucal.trees.grow import GrowConfig, grow_tree, grow_tree_on
from gpucal.trees.tree_rows import TreeRows

N_ROWS = 20_000
N_VALUES = np.array([7, 5, 12, 3], dtype=np.int64)


def _rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Codes with label rates that depend on them, so trees grow several levels; positive weights."""
    rng = np.random.default_rng(seed)
    codes = np.stack([rng.integers(0, k, n) for k in N_VALUES], axis=1).astype(np.int16)
    logit = 0.4 * codes[:, 0] - 0.3 * codes[:, 1] + 0.2 * (codes[:, 2] % 4) - 2.0
    f = 1.0 / (1.0 + np.exp(-(logit + rng.normal(0.0, 0.5, n))))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float64)
    return codes, f, y, rng.random(n) * 2.0


def _parts(codes: np.ndarray, f: np.ndarray, y: np.ndarray, w: np.ndarray | None, n_parts: int) -> list:
    bounds = np.linspace(0, len(f), n_parts + 1).astype(int)
    rows = [
        RowsPart(codes[a:b], f[a:b], y[a:b], None if w is None else w[a:b])
        for a, b in itertools.pairwise(bounds)
    ]
    return persist([dask.delayed(lambda r: r, pure=False)(r) for r in rows])


def _config(leaf_map: str) -> GrowConfig:
    return GrowConfig(
        leaf_map=leaf_map,
        criterion="gain",
        max_depth=4,
        min_node_size=50.0,
        min_child_size=10.0,
        penalty=0.0,
        n_views=1,
        mvce_bin_size=1,
        mvce_p=2.0,
        seed=0,
        backend="cpu",
    )


@pytest.mark.parametrize(("n_parts", "weighted", "leaf_map"), [(1, False, "shift"), (7, True, "scale")])
def test_worker_stores_grow_the_one_machine_tree_in_batches(client, monkeypatch, n_parts, weighted, leaf_map):  # type: ignore[no-untyped-def]
    codes, f, y, w = _rows(N_ROWS, 5)
    w = w if weighted else None
    # Room for 3 open nodes per histogram: levels take several batches, each from its run of rows.
    monkeypatch.setattr(grow, "MAX_HIST_BYTES", 3 * int(N_VALUES.sum()) * 7 * 8)
    rare = np.full(len(N_VALUES), -1, dtype=np.int64)
    one, leaf = grow_tree(codes, f, y, w, N_VALUES, rare, _config(leaf_map))
    from gpucal.rows.dask import DaskRows

    two, grown = grow_tree_on(
        TreeRows.in_root(DaskRows(_parts(codes, f, y, w, n_parts))), N_VALUES, rare, _config(leaf_map)
    )
    store = grown.rows  # the worker stores
    assert len(one.feature) > 20
    assert max(one.depth) == 4
    assert len(store.parts) <= 2  # one store per worker holding partitions, not one per partition
    assert two.feature == one.feature
    assert two.depth == one.depth
    for a, b in zip(two.child_table, one.child_table, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(two.values, one.values, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(two.weight, one.weight, rtol=1e-12)
    # Each store's rows end in the same nodes as one machine's: the leaf weights add up alike.
    stores = dask.compute(*store.parts)
    leaf_weight = np.zeros(len(one.feature))
    for s in stores:
        np.add.at(leaf_weight, s.node_idx, 1.0 if s.w is None else s.w)
    expected = np.bincount(leaf, weights=w, minlength=len(one.feature))
    np.testing.assert_allclose(leaf_weight, expected, rtol=1e-12)


def test_per_worker_keeps_partitions_where_they_are_up_to_a_share(client) -> None:  # type: ignore[no-untyped-def]
    from distributed import futures_of, get_worker

    parts = persist([dask.delayed(np.arange, pure=False)(10 * i, 10 * i + 10) for i in range(6)])
    groups = worker_groups(parts)
    assert sorted(i for _, idx in groups for i in idx) == list(range(6))
    assert sorted(len(idx) for _, idx in groups) == [3, 3]
    holders = client.who_has([futures_of(p)[0] for p in parts])
    for address, indices in groups:
        assert indices == sorted(indices)
        held = sum(address in holders[p.key] for p in parts)
        kept = sum(address in holders[parts[i].key] for i in indices)
        assert kept == min(held, 3)  # only the partitions beyond a worker's share move

    def where(group: list, indices: list[int]) -> tuple[str, list[int], int]:
        return get_worker().address, indices, int(sum(int(g.sum()) for g in group))

    results = dask.compute(*per_worker(where, parts))
    assert [(a, idx) for a, idx, _ in results] == groups
    assert sum(s for _, _, s in results) == sum(range(60))


def test_per_worker_balances_partitions_read_on_one_worker(client) -> None:  # type: ignore[no-untyped-def]
    from distributed import get_worker

    first = sorted(client.scheduler_info()["workers"])[0]
    with dask.annotate(workers=[first], allow_other_workers=False):
        tasks = [dask.delayed(np.arange, pure=False)(10 * i, 10 * i + 10) for i in range(5)]
    parts = persist(tasks)
    assert {a for a, _ in (holders(parts) or [])} == {first}

    def where(group: list, indices: list[int]) -> tuple[str, list[int], int]:
        return get_worker().address, indices, int(sum(int(g.sum()) for g in group))

    results = dask.compute(*per_worker(where, parts))
    assert sorted(len(idx) for _, idx, _ in results) == [2, 3]
    assert len({a for a, _, _ in results}) == 2  # both workers hold a store
    assert sum(s for _, _, s in results) == sum(range(50))


@pytest.mark.parametrize(
    ("held_by", "expected"),
    [
        (["a"] * 5, {"a": [0, 1, 4], "b": [2, 3]}),
        (["a", "b", "a", "b"], {"a": [0, 2], "b": [1, 3]}),
        (["b", "b", "b", "a", "x"], {"a": [2, 3, 4], "b": [0, 1]}),
        (["a"], {"a": [0], "b": []}),
    ],
)
def test_balanced_shares(held_by: list[str], expected: dict[str, list[int]]) -> None:
    assert balanced_shares(held_by, ["a", "b"]) == expected


def test_per_worker_without_a_cluster_is_one_group() -> None:
    with dask.config.set(scheduler="sync"):
        parts = persist([dask.delayed(np.arange, pure=False)(3) for _ in range(3)])
        assert worker_groups(parts) in ([(None, [0, 1, 2])], [])  # no futures: one group
        (out,) = dask.compute(*per_worker(lambda group, idx: (len(group), idx), parts))
    assert out == (3, [0, 1, 2])


_READS: list[int] = []
_LOCK = threading.Lock()


def _counted_read(i: int) -> pd.DataFrame:
    with _LOCK:
        _READS.append(i)
    rng = np.random.default_rng(i)
    return pd.DataFrame(
        {"score": rng.random(100), "a": rng.integers(0, 3, 100), "label": rng.integers(0, 2, 100)}
    )


def _label_times_score(X: pd.DataFrame, y: pd.Series) -> np.ndarray:
    return np.array([float((X["score"] * y).sum()), float(len(y))])


def test_inputs_of_one_frame_are_read_once_per_pass(client) -> None:  # type: ignore[no-untyped-def]
    ddf = dd.from_map(_counted_read, list(range(5)))
    X, y = ddf[["score", "a"]], ddf.label
    _READS.clear()
    joined = sum_partitions(partitions({"X": X, "y": y}), _label_times_score)
    assert sorted(_READS) == list(range(5))  # each partition once, not once per input
    whole = pd.concat([_counted_read(i) for i in range(5)])
    np.testing.assert_allclose(joined, [(whole.score * whole.label).sum(), len(whole)], rtol=1e-12)
    # Inputs of different frames are not joined (no shuffle): listed apart, same sums.
    other = dd.from_map(_counted_read, list(range(5))).label
    apart = sum_partitions(partitions({"X": X, "y": other}), _label_times_score)
    np.testing.assert_allclose(apart, joined, rtol=1e-12)


def test_batched_levels_give_the_one_machine_mbct(client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    df = make_ctr(12_000, "mixed", seed=4)
    X, y = df[["score", "region", "user_segment", "device"]], df["label"].astype(np.float64)
    monkeypatch.setattr(grow, "MAX_HIST_BYTES", 2 * 600 * 7 * 8)  # a few nodes per histogram pass
    one = MBCT(max_trees=3).fit(X, y)
    frame = dd.from_pandas(pd.concat([X, y.rename("label")], axis=1), npartitions=5)
    two = MBCT(max_trees=3).fit(frame[list(X.columns)], frame.label)
    e1, e2 = one.ensemble_, two.ensemble_
    for name in ("node_feature", "child_table", "tree_start"):
        np.testing.assert_array_equal(getattr(e2, name), getattr(e1, name), err_msg=name)
    np.testing.assert_allclose(e2.node_value, e1.node_value, rtol=1e-9, atol=1e-9)
