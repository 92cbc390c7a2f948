"""MBCT fitted on dask partitions streamed from their source (``gpucal.stream-partitions``).

The streamed fit holds no rows between passes: every pass computes the partitions again. It must grow
the held fit's trees (the same sums in another order of the additions) and read its source once per
pass.
"""

from __future__ import annotations

import threading
from pathlib import Path

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from gpucal import MBCT
from gpucal.datasets import make_ctr
from gpucal.rows.streamed import STREAM_KEY, fold_in_lanes, stream_partitions

FEATURES = ["region", "user_segment", "device"]


def _frame(n: int, seed: int) -> pd.DataFrame:
    df = make_ctr(n, "mixed", seed=seed)
    return df[["score", *FEATURES, "label"]].assign(label=df["label"].astype(np.float64))


def _assert_same_trees(one: MBCT, two: MBCT, X: pd.DataFrame) -> None:
    e1, e2 = one.ensemble_, two.ensemble_
    for name in ("node_feature", "child_table", "tree_start"):
        np.testing.assert_array_equal(getattr(e2, name), getattr(e1, name))
    np.testing.assert_allclose(e2.node_value, e1.node_value, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(two.init_, one.init_, rtol=1e-9, atol=1e-12)
    assert two.min_node_size_ == pytest.approx(one.min_node_size_, rel=1e-12)
    np.testing.assert_allclose(two.predict(X), one.predict(X), rtol=1e-9, atol=1e-12)


def test_stream_is_asked_for_by_dask_config() -> None:
    assert not stream_partitions()
    with dask.config.set({STREAM_KEY: True}):
        assert stream_partitions()


@pytest.mark.parametrize(
    ("leaf_map", "init", "weighted"), [("platt", "platt", False), ("scale", "identity", True)]
)
def test_streamed_fit_grows_the_held_trees(client, leaf_map: str, init: str, weighted: bool) -> None:  # type: ignore[no-untyped-def]
    df = _frame(16_000, seed=5)
    if weighted:
        df["w"] = np.random.default_rng(0).uniform(0.5, 2.0, len(df))
    frame = dd.from_pandas(df, npartitions=4)
    X = frame[["score", *FEATURES]]
    w = frame.w if weighted else None
    params = {"max_trees": 3, "leaf_map": leaf_map, "init": init}
    held = MBCT(**params).fit(X, frame.label, sample_weight=w)
    with dask.config.set({STREAM_KEY: True}):
        streamed = MBCT(**params).fit(X, frame.label, sample_weight=w)
    assert len(streamed.history_) == len(held.history_) >= 2
    for a, b in zip(streamed.history_, held.history_, strict=True):
        assert a["nodes"] == b["nodes"]
        assert a["loss_after"] == pytest.approx(b["loss_after"], rel=1e-9)
    _assert_same_trees(held, streamed, df[["score", *FEATURES]])


_READS: list[str] = []
_LOCK = threading.Lock()


def _counted_read(path: str) -> pd.DataFrame:
    with _LOCK:
        _READS.append(path)
    return pd.read_parquet(path)


def test_streamed_fit_reads_its_parquet_files_once_per_pass(client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    df = _frame(12_000, seed=8)
    files = []
    for i, chunk in enumerate(np.array_split(np.arange(len(df)), 3)):
        path = str(tmp_path / f"part{i}.parquet")
        df.iloc[chunk].to_parquet(path)
        files.append(path)
    frame = dd.from_map(_counted_read, files)
    X, y = frame[["score", *FEATURES]], frame.label
    _READS.clear()
    held = MBCT(max_trees=2).fit(X, y)
    held_reads = len(_READS)
    # the default features' label check (a column equal to y is never a feature), the encoder's pass,
    # then once into the workers' stores
    assert held_reads == 3 * len(files)
    _READS.clear()
    with dask.config.set({STREAM_KEY: True}):
        streamed = MBCT(max_trees=2).fit(X, y)
    assert sorted(set(_READS)) == files
    per_file = [_READS.count(f) for f in files]
    assert len(set(per_file)) == 1  # every pass reads every file once
    assert per_file[0] > 10  # ... and the fit is many passes: the rows are not held
    _assert_same_trees(held, streamed, df[["score", *FEATURES]])


@pytest.mark.parametrize("n_lanes", [1, 2, 3, 8])
def test_fold_in_lanes_adds_every_part_in_lane_order(n_lanes: int) -> None:
    rng = np.random.default_rng(n_lanes)
    arrays = [rng.normal(size=(3, 4)) for _ in range(7)]
    add = dask.delayed(lambda before, i: arrays[i] if before is None else before + arrays[i], pure=False)
    with dask.config.set(scheduler="sync"):
        total = fold_in_lanes(len(arrays), n_lanes, lambda i, before: add(before, i))
    lanes = [arrays[k::n_lanes] for k in range(min(n_lanes, len(arrays)))]
    expected = None
    for lane in lanes:
        lane_sum = lane[0]
        for a in lane[1:]:
            lane_sum = lane_sum + a
        expected = lane_sum if expected is None else expected + lane_sum
    np.testing.assert_array_equal(total, expected)  # the same additions in the same order
