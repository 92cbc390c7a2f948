"""The rows protocol: local, dask (held) and streamed rows give the same sums, reductions and offsets."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpucal.rows import LabelSummary, LocalRows, RowBlock, as_rows, label_summary
from gpucal.rows.draws import held_out_mask

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
