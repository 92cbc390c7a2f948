"""``gpucal.kernels.lookup_codes``, ``lookup_columns``, ``lookup_bins``, ``lookup_edges``, ``lookup_pairs``,
``pair_tables`` against numpy; ``transform(code_maps=)``."""

from __future__ import annotations

import contextlib

import numpy as np
import pandas as pd
import pytest

from gpucal.encoding import FeatureEncoder
from gpucal.kernels import (
    lookup_bins,
    lookup_codes,
    lookup_columns,
    lookup_edges,
    lookup_pairs,
    pair_tables,
)
from gpucal.kernels.jit import parallel_twins_only


def lookup_loop(values: np.ndarray, low: int, table: np.ndarray, fallback: int) -> np.ndarray:
    out = np.empty(values.shape[0], dtype=np.int64)
    for i, v in enumerate(values.tolist()):
        k = v - low
        out[i] = table[k] if 0 <= k < table.shape[0] else fallback
    return out


@pytest.mark.parametrize("backend", ["oracle", "cpu"])
@pytest.mark.parametrize(
    ("value_dtype", "out_dtype"),
    [
        (np.int8, np.int8),
        (np.int16, np.int16),
        (np.int32, np.int16),
        (np.int64, np.int32),
        (np.uint8, np.int8),
        (np.uint32, np.int16),
    ],
)
def test_lookup_matches_a_loop(backend: str, value_dtype: type, out_dtype: type) -> None:
    rng = np.random.default_rng(3)
    info = np.iinfo(value_dtype)
    values = rng.integers(max(info.min, -20), min(info.max, 120), 5_000).astype(value_dtype)
    table = rng.integers(0, 100, 90).astype(np.int64)
    table[[5, 40]] = -1  # values to reject
    out = np.full((values.shape[0], 3), 55, dtype=out_dtype)
    rejected = lookup_codes(values, 7, table, 99, out, 1, backend=backend)
    expected = lookup_loop(values, 7, table, 99)
    np.testing.assert_array_equal(out[:, 1], expected)
    assert rejected == int((expected < 0).sum()) > 0
    assert (out[:, [0, 2]] == 55).all()  # other columns untouched


@pytest.mark.parametrize(("backend", "blocked"), [("oracle", False), ("cpu", False), ("cpu", True)])
def test_lookup_columns_match_a_loop_per_column(backend: str, blocked: bool) -> None:
    rng = np.random.default_rng(4)
    n = 5_000  # over two blocks of the CPU twin, the last one partial
    values = [
        rng.integers(-5, 300, n).astype(np.int32),
        rng.integers(0, 24, n).astype(np.int8),
        rng.integers(90, 130, n).astype(np.uint16),
    ]
    lows, fallbacks, columns = [0, 2, 100], [7, -1, 3], [3, 0, 1]
    tables = [rng.integers(0, 100, k) for k in (280, 20, 25)]
    tables[0][[4, 90]] = -1
    out = np.full((n, 5), 55, dtype=np.int16)
    # blocked: the one-pass kernel, which runs from PARALLEL_MIN_ROWS rows; else a pass per column
    with parallel_twins_only() if blocked else contextlib.nullcontext():
        rejected = lookup_columns(values, lows, tables, fallbacks, out, columns, backend=backend)
    for k, j in enumerate(columns):
        expected = lookup_loop(values[k], lows[k], tables[k], fallbacks[k])
        np.testing.assert_array_equal(out[:, j], expected)
        assert rejected[k] == int((expected < 0).sum())
    assert rejected[0] > 0  # below the table and -1 entries
    assert rejected[1] > 0  # below the table
    assert (out[:, [2, 4]] == 55).all()  # other columns untouched


def test_lookup_columns_check_each_column() -> None:
    out = np.zeros((3, 2), dtype=np.int8)
    good = np.zeros(3, dtype=np.int32)
    with pytest.raises(ValueError, match="one entry per column"):
        lookup_columns([good], [0, 0], [np.zeros(2)], [0], out, [0])
    with pytest.raises(ValueError, match=r"codes must lie in \[-1, 127\]"):
        lookup_columns([good, good], [0, 0], [np.zeros(2), np.array([0, 300])], [0, 0], out, [0, 1])
    with pytest.raises(ValueError, match="column must lie in"):
        lookup_columns([good], [0], [np.zeros(2)], [0], out, [2])


def test_lookup_rejects_values_outside_with_fallback_minus_one() -> None:
    values = np.array([0, 5, 6, -3, 2], dtype=np.int32)
    out = np.zeros((5, 1), dtype=np.int16)
    assert lookup_codes(values, 0, np.array([4, 3, 2, 1, 0, 9]), -1, out, 0, backend="cpu") == 2
    np.testing.assert_array_equal(out[:, 0], [4, 9, -1, -1, 2])


def test_lookup_checks_its_arguments() -> None:
    out = np.zeros((3, 2), dtype=np.int16)
    with pytest.raises(TypeError, match="values must be a 1-D array"):
        lookup_codes(np.zeros(3, dtype=np.uint64), 0, np.zeros(2), 0, out, 0)
    with pytest.raises(TypeError, match="values must be a 1-D array"):
        lookup_codes(np.zeros(3), 0, np.zeros(2), 0, out, 0)
    with pytest.raises(ValueError, match="out must be an"):
        lookup_codes(np.zeros(4, dtype=np.int32), 0, np.zeros(2), 0, out, 0)
    with pytest.raises(ValueError, match="column must lie in"):
        lookup_codes(np.zeros(3, dtype=np.int32), 0, np.zeros(2), 0, out, 2)


@pytest.fixture
def frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(0)
    fit = pd.DataFrame(
        {
            "site": rng.integers(100, 400, 3_000).astype(np.int32),
            "hour": rng.integers(0, 24, 3_000).astype(np.int8),
            "city": rng.choice(["a", "b", "c"], 3_000),
            "age": rng.normal(40, 10, 3_000),
        }
    )
    new = fit.sample(2_000, random_state=1, ignore_index=True)
    new.loc[:9, "site"] = 7  # unseen, below the table
    new.loc[10:19, "site"] = 1_000  # unseen, above it
    return fit, new


@pytest.mark.parametrize("handle_unseen", ["separate", "missing"])
def test_transform_with_code_maps_is_the_map_of_the_codes(frames: tuple, handle_unseen: str) -> None:
    fit, new = frames
    enc = FeatureEncoder(categorical_cols=["site", "hour", "city"], handle_unseen=handle_unseen).fit(fit)
    rng = np.random.default_rng(1)
    maps = [rng.integers(0, 300, k).astype(np.int32) for k in enc.n_values_.tolist()]
    codes = enc.transform(new)
    mapped = enc.transform(new, code_maps=maps)
    expected = np.stack([maps[j][codes[:, j]] for j in range(codes.shape[1])], axis=1)
    np.testing.assert_array_equal(mapped, expected)
    assert mapped.dtype == np.int16  # codes up to 299

    out = np.full((len(new), 6), -7, dtype=np.int32)
    returned = enc.transform(new, code_maps=maps, out=out)
    np.testing.assert_array_equal(returned, expected)
    assert (out[:, 4:] == -7).all()


def test_transform_rejects_unseen_integers_by_name(frames: tuple) -> None:
    fit, new = frames
    enc = FeatureEncoder(categorical_cols=["site", "hour"], handle_unseen="error").fit(fit)
    with pytest.raises(
        ValueError, match=r"X\['site'\]: 20 row\(s\) hold values not seen at fit time \(e.g. 7\)"
    ):
        enc.transform(new)


def test_transform_checks_out_shape(frames: tuple) -> None:
    fit, new = frames
    enc = FeatureEncoder(categorical_cols=["site"]).fit(fit)
    with pytest.raises(ValueError, match="out: shape"):
        enc.transform(new, out=np.zeros((len(new), 2), dtype=np.int16))
    with pytest.raises(TypeError, match="out: dtype float64 is not a code dtype"):
        enc.transform(new, out=np.zeros((len(new), 4)))


@pytest.mark.parametrize("backend", ["oracle", "cpu"])
def test_lookup_bins_matches_floor(backend: str) -> None:
    rng = np.random.default_rng(5)
    p = np.concatenate([rng.random(3_000), [0.0, 1.0, 0.5, 0.99, 0.01, np.nextafter(1.0, 0.0)]])
    table = rng.permutation(100).astype(np.int16)
    out = np.full((p.shape[0], 2), -5, dtype=np.int16)
    lookup_bins(p, 100, table, out, 1, backend=backend)
    expected = table[np.minimum(np.floor(p * 100), 99).astype(np.int64)]
    np.testing.assert_array_equal(out[:, 1], expected)
    assert (out[:, 0] == -5).all()


def test_lookup_bins_checks_its_arguments() -> None:
    out = np.zeros((3, 1), dtype=np.int16)
    with pytest.raises(TypeError, match="probabilities"):
        lookup_bins(np.zeros(3, dtype=np.int32), 10, np.arange(10), out, 0)
    with pytest.raises(ValueError, match="one code per bin"):
        lookup_bins(np.zeros(3), 10, np.arange(9), out, 0)
    with pytest.raises(ValueError, match="column"):
        lookup_bins(np.zeros(3), 10, np.arange(10), out, 1)


@pytest.mark.parametrize("backend", ["oracle", "cpu"])
@pytest.mark.parametrize("value_dtype", [np.float64, np.float32, np.int32])
def test_lookup_edges_matches_searchsorted(backend: str, value_dtype: type) -> None:
    rng = np.random.default_rng(6)
    values = (rng.normal(0, 30, 4_000)).astype(value_dtype)
    edges = np.array([-20.0, -3.5, 0.0, 0.0, 7.0, 12.25, 40.0])
    if values.dtype.kind == "f":
        values[::97] = np.nan
        values[1::89] = 7.0  # on an edge: counted as at or above it
    table = rng.permutation(20).astype(np.int16)
    out = np.zeros((values.shape[0], 1), dtype=np.int16)
    lookup_edges(values, edges, table, 9, out, 0, backend=backend)
    x = values.astype(np.float64)
    expected = table[np.where(np.isnan(x), 9, np.searchsorted(edges, x, side="right"))]
    np.testing.assert_array_equal(out[:, 0], expected)


def test_lookup_edges_checks_its_table() -> None:
    out = np.zeros((3, 1), dtype=np.int16)
    with pytest.raises(ValueError, match="a code per bin"):
        lookup_edges(np.zeros(3), np.array([0.5]), np.arange(2), 2, out, 0)
    with pytest.raises(TypeError, match="numbers"):
        lookup_edges(np.array(["a", "b", "c"]), np.array([0.5]), np.arange(3), 2, out, 0)


def test_integer_numbers_bin_by_table_as_floats_by_search() -> None:
    rng = np.random.default_rng(7)
    fit = pd.DataFrame({"distance": rng.integers(30, 5_000, 4_000).astype(np.int32)})
    enc = FeatureEncoder(n_bins=40).fit(fit)
    new = pd.DataFrame({"distance": rng.integers(-100, 6_000, 3_000).astype(np.int32)})
    by_table = enc.transform(new)
    by_search = enc.transform(new.astype({"distance": np.float64}))
    edges = enc.bin_edges_["distance"]
    np.testing.assert_array_equal(by_table[:, 0], np.searchsorted(edges, new["distance"], side="right"))
    np.testing.assert_array_equal(by_table, by_search)


@pytest.mark.parametrize("backend", ["oracle", "cpu"])
def test_lookups_reject_codes_their_column_cannot_hold(backend: str) -> None:
    out = np.zeros((3, 1), dtype=np.int8)
    too_big = np.array([0, 200, 3])  # would wrap to -56 as int8
    with pytest.raises(ValueError, match=r"codes must lie in \[-1, 127\]"):
        lookup_codes(np.zeros(3, dtype=np.int32), 0, too_big, 0, out, 0, backend=backend)
    with pytest.raises(ValueError, match=r"codes must lie in \[-1, 127\]"):
        lookup_codes(np.zeros(3, dtype=np.int32), 0, np.arange(3), 300, out, 0, backend=backend)
    with pytest.raises(ValueError, match=r"codes must lie in \[-1, 127\]"):
        lookup_bins(np.zeros(3), 3, too_big, out, 0, backend=backend)
    with pytest.raises(ValueError, match=r"codes must lie in \[-1, 127\]"):
        lookup_edges(np.zeros(3), np.array([0.5, 1.5]), np.array([0, 1, -7]), 1, out, 0, backend=backend)


def pairs_loop(out: np.ndarray, pairs: list) -> np.ndarray:
    """Each pair's code per row: the key's position among the pair's keys, or their count."""
    codes = np.empty((out.shape[0], len(pairs)), dtype=np.int64)
    for c, (left, right, _, n_right, keys) in enumerate(pairs):
        position = {int(k): i for i, k in enumerate(keys)}
        for i in range(out.shape[0]):
            key = int(out[i, left]) * n_right + int(out[i, right])
            codes[i, c] = position.get(key, len(keys))
    return codes


@pytest.mark.parametrize("backend", ["oracle", "cpu"])
@pytest.mark.parametrize("max_table", [0, 60, 1 << 19])
@pytest.mark.parametrize("out_dtype", [np.int16, np.int32])
def test_lookup_pairs_match_a_loop(backend: str, max_table: int, out_dtype: type) -> None:
    """Tables (spans up to ``max_table``) and bisection of the runs alike; pairs without keys, keys
    of a left code with no row, rows of a key that is not kept."""
    rng = np.random.default_rng(11)
    n_values = [5, 13, 2, 40]
    n_rows = 3_000
    out = np.zeros((n_rows, 8), dtype=out_dtype)
    for j, k in enumerate(n_values):
        out[:, j] = rng.integers(0, k, n_rows)
    out[: n_rows // 2, 0] = 0  # left code 4 of column 0 on fewer rows
    pairs = []
    for left, right, share in [(0, 1, 0.5), (1, 3, 0.3), (3, 2, 1.0), (2, 0, 0.0)]:
        span = n_values[left] * n_values[right]
        keys = np.flatnonzero(rng.random(span) < share).astype(np.int64)
        pairs.append((left, right, n_values[left], n_values[right], keys))
    lookup_pairs(out, 4, pairs, max_table=max_table, backend=backend)
    np.testing.assert_array_equal(out[:, 4:], pairs_loop(out, pairs))
    with parallel_twins_only():
        twin = out.copy()
        twin[:, 4:] = -1
        lookup_pairs(twin, 4, pairs, max_table=max_table, backend=backend)
    np.testing.assert_array_equal(twin, out)


def test_lookup_pairs_checks_its_arguments() -> None:
    out = np.zeros((10, 3), dtype=np.int8)
    keys = np.arange(3, dtype=np.int64)
    with pytest.raises(ValueError, match="must lie before column 2"):
        lookup_pairs(out, 2, [(0, 2, 2, 2, keys)])
    with pytest.raises(ValueError, match=r"d >= 4"):
        lookup_pairs(out, 2, [(0, 1, 2, 2, keys), (1, 0, 2, 2, keys)])
    with pytest.raises(ValueError, match="to fit int8"):
        lookup_pairs(out, 2, [(0, 1, 20, 20, np.arange(200, dtype=np.int64))])


def test_pair_tables_equal_bincount() -> None:
    """Rows and weight per key of every pair from one pass: the counts and, added in row order, the
    very sums of ``bincount`` over the keys."""
    rng = np.random.default_rng(12)
    n_values = [4, 9, 30]
    codes = np.column_stack([rng.integers(0, k, 2_000) for k in n_values]).astype(np.int16)
    w = rng.uniform(0.0, 3.0, 2_000)
    pairs = [(0, 1, 4, 9), (2, 0, 30, 4), (1, 2, 9, 30)]
    for (left, right, n_left, n_right), (counts, sums) in zip(
        pairs, pair_tables(codes, w, pairs), strict=True
    ):
        keys = codes[:, left].astype(np.int64) * n_right + codes[:, right]
        np.testing.assert_array_equal(counts, np.bincount(keys, minlength=n_left * n_right))
        np.testing.assert_array_equal(sums, np.bincount(keys, weights=w, minlength=n_left * n_right))


def test_pair_tables_do_not_depend_on_the_threads() -> None:
    """The parallel pass deals the pairs to the threads, each table filled by one thread in row order:
    the serial pass's very counts and sums on one thread or two. Without weights only the counts."""
    import numba

    rng = np.random.default_rng(13)
    n_values = [40, 9, 300, 4]
    codes = np.column_stack([rng.integers(0, k, 3_000) for k in n_values]).astype(np.int16)
    w = rng.uniform(0.0, 3.0, 3_000)
    pairs = [(0, 1, 40, 9), (2, 0, 300, 40), (1, 3, 9, 4), (3, 2, 4, 300), (0, 3, 40, 4)]
    serial = pair_tables(codes, w, pairs)
    before = numba.get_num_threads()
    try:
        for threads in range(1, before + 1):
            numba.set_num_threads(threads)
            with parallel_twins_only():
                parallel = pair_tables(codes, w, pairs)
            for (counts, sums), (want_counts, want_sums) in zip(parallel, serial, strict=True):
                np.testing.assert_array_equal(counts, want_counts)
                np.testing.assert_array_equal(sums, want_sums)
    finally:
        numba.set_num_threads(before)
    for (counts, sums), (want_counts, _) in zip(pair_tables(codes, None, pairs), serial, strict=True):
        np.testing.assert_array_equal(counts, want_counts)
        assert sums is None
