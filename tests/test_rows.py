"""The rows protocol: local, dask (held) and streamed rows give the same sums, reductions and offsets."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpucal.distributed import partition_lengths, partition_offsets, sum_partitions
from gpucal.rows import LabelSummary, LocalRows, RowBlock, as_rows, label_summary, strided_rows
from gpucal.rows import dask as dask_rows
from gpucal.rows.draws import held_out_mask
from gpucal.rows.protocol import block_offsets
from tests._stand_ins import DeviceArray

dd = pytest.importorskip("dask.dataframe")

N_ROWS = 1_000


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame(
        {
            "p": rng.random(N_ROWS),
            "y": (rng.random(N_ROWS) < 0.3).astype(float),
            "w": rng.random(N_ROWS) + 0.5,
        }
    )


def _block_sums(block: RowBlock) -> np.ndarray:
    return label_summary(np.asarray(block["y"]), np.asarray(block["w"]))


def _held(block: RowBlock, row_offset: int) -> np.ndarray:
    return np.array([held_out_mask(len(block), 0.3, 7, row_offset).sum()], dtype=np.float64)


def _values(block: RowBlock) -> np.ndarray:
    return np.asarray(block["p"])


def _concat(*arrays: np.ndarray) -> np.ndarray:
    return np.concatenate(arrays)


def _doubled(block: RowBlock) -> RowBlock:
    return RowBlock({k: v * 2 for k, v in block.columns.items()})


def _joined(blocks: list[RowBlock], indices: list[int]) -> RowBlock:
    return RowBlock({k: pd.concat([b[k] for b in blocks]) for k in blocks[0].columns})


def _histogram(block: RowBlock, lo: int, hi: int, n_bins: int) -> np.ndarray:
    ids = np.minimum((np.asarray(block["p"]) * n_bins).astype(int), n_bins - 1)
    return np.bincount(ids, minlength=n_bins)[lo:hi].astype(np.float64)


def _finish(total: np.ndarray, lo: int, hi: int, n_bins: int) -> list[Any]:
    return [float(v) for v in total]


def _rows(kind: str) -> Any:
    frame = _frame()
    if kind == "local":
        return as_rows(p=frame["p"], y=frame["y"], w=frame["w"])
    ddf = dd.from_pandas(frame, npartitions=5)
    return as_rows(p=ddf["p"], y=ddf["y"], w=ddf["w"], stream=kind == "streamed")


@pytest.mark.parametrize("kind", ["local", "dask", "streamed"])
def test_passes_equal_one_machine(client: Any, kind: str) -> None:
    frame = _frame()
    rows = _rows(kind)
    expected = label_summary(frame["y"].to_numpy(), frame["w"].to_numpy())
    np.testing.assert_allclose(rows.sum(_block_sums), expected, rtol=1e-12)
    summary = LabelSummary.of(rows.sum(_block_sums))
    assert summary.n_rows == N_ROWS
    summary.check_two_classes()
    assert rows.offsets()[1] == N_ROWS
    assert rows.sum(_held, offsets=True)[0] == held_out_mask(N_ROWS, 0.3, 7).sum()
    np.testing.assert_array_equal(rows.reduce(_values, _concat), frame["p"].to_numpy())
    doubled = rows.map(_doubled)
    np.testing.assert_allclose(doubled.sum(_block_sums)[[0, 1]], [N_ROWS, 2 * frame["w"].sum()], rtol=1e-12)
    joined = rows.per_worker(_joined)
    np.testing.assert_array_equal(np.sort(joined.reduce(_values, _concat)), np.sort(frame["p"].to_numpy()))
    assert joined.offsets()[1] == N_ROWS
    if kind == "dask":  # a worker's partitions interleave with the others': no global row index
        with pytest.raises(ValueError, match="not defined after per_worker"):
            joined.sum(_held, offsets=True)
    else:
        assert joined.sum(_held, offsets=True)[0] == held_out_mask(N_ROWS, 0.3, 7).sum()
    counts = joined.sum_in_shares(_histogram, _finish, 10, 10)
    np.testing.assert_array_equal(counts, np.histogram(frame["p"], bins=10, range=(0, 1))[0])


def test_mixed_inputs_refused() -> None:
    frame = _frame()
    with pytest.raises(TypeError, match="dask"):
        as_rows(p=dd.from_pandas(frame, npartitions=2)["p"], y=frame["y"])


def test_local_rows_hold_one_block_as_given() -> None:
    frame = _frame()
    rows = as_rows(X=frame, y=None)
    assert isinstance(rows, LocalRows)
    assert rows.n_blocks == 1
    assert rows.blocks[0]["X"] is frame
    assert rows.blocks[0]["y"] is None


@pytest.mark.parametrize(("kind", "holds"), [("local", True), ("dask", True), ("streamed", False)])
def test_what_a_method_asks_instead_of_the_backend(client: Any, kind: str, holds: bool) -> None:
    """``single_block`` is the one local block (None for several blocks or rows elsewhere), and
    ``holds_blocks`` is False only where every pass reads the partitions again."""
    rows = _rows(kind)
    assert rows.holds_blocks is holds
    block = rows.single_block()
    if kind == "local":
        assert block is rows.blocks[0]
        assert rows.map(_doubled).single_block()["p"].sum() == 2 * block["p"].sum()
    else:
        assert block is None
    assert LocalRows((block, block)).single_block() is None


def test_block_offsets_and_strided_rows_count_global_rows() -> None:
    offsets, n_rows = block_offsets([3, 0, 5, 2])
    np.testing.assert_array_equal(offsets, [0, 3, 3, 8])
    assert n_rows == 10
    values = np.arange(10.0)
    # Global rows 0, 4, 8 of blocks [0, 3), [3, 8), [8, 10): each block picks its own, in order.
    picked = [
        strided_rows(4, int(o), values[o : o + n])[0] for o, n in zip(offsets, [3, 0, 5, 2], strict=True)
    ]
    np.testing.assert_array_equal(np.concatenate(picked), values[::4])
    assert all(p.flags.c_contiguous for p in picked)


def test_partition_entry_points_are_dask_rows_passes(client: Any) -> None:
    frame = _frame()
    ddf = dd.from_pandas(frame, npartitions=5)
    lengths = partition_lengths(ddf)
    assert lengths.sum() == N_ROWS
    np.testing.assert_array_equal(partition_offsets(ddf)[0], np.concatenate([[0], np.cumsum(lengths)[:-1]]))
    np.testing.assert_array_equal(partition_offsets(ddf)[0], _rows("dask").offsets()[0])
    with pytest.raises(ValueError, match="split_every"):
        sum_partitions(ddf, _values, split_every=1)


def test_share_passes_bring_device_sums_to_the_host() -> None:
    """Each pass of DaskRows.sum_in_shares reads a block's sums on the host, as every other pass does."""

    def sums(block: Any, lo: int, hi: int) -> DeviceArray:
        return DeviceArray(np.array([0.0, 2.0, 0.0, 5.0])[lo:hi])

    at, values = dask_rows._compact(None, sums, 0, 4, ())
    assert at.tolist() == [1, 3]
    assert values.tolist() == [2.0, 5.0]
    other = (np.array([0]), np.array([1.0]))  # another worker's entry
    total = dask_rows._finish_share(None, sums, lambda t, lo, hi: [t], 0, 4, (), other)
    assert total[0].tolist() == [1.0, 2.0, 0.0, 5.0]
