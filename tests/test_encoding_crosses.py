"""Crosses of the feature encoder (``FeatureEncoder(interactions=...)``) against a numpy oracle.

The oracle: a cross's key is ``code_left * n_right + code_right`` of the first-order codes; the keys whose
weight reaches ``min_cross_count`` keep codes ``0 .. m-1`` in key order, every other pair (rare, or never
seen at fit time) reads as ``m``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_array_equal

from gpucal.encoding import FeatureEncoder
from gpucal.rows import LocalRows, RowBlock


def _frame(n: int = 2000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    x[::50] = np.nan
    return pd.DataFrame(
        {
            "site": rng.choice(["a", "b", "c", "d"], n, p=[0.5, 0.3, 0.15, 0.05]),
            "hour": rng.integers(0, 6, n),
            "x": x,
        }
    )


def _oracle(first: np.ndarray, left: int, right: int, n_right: int, weight: np.ndarray, min_count: float):
    """Codes of a cross on the fit rows, and its kept keys."""
    keys = first[:, left].astype(np.int64) * n_right + first[:, right]
    totals = np.bincount(keys, weights=weight)
    kept = np.flatnonzero((totals >= min_count) & (totals > 0))
    codes = np.where(np.isin(keys, kept), np.searchsorted(kept, keys), len(kept))
    return codes, kept


@pytest.mark.parametrize("weighted", [False, True])
def test_cross_codes_equal_the_oracle(weighted: bool) -> None:
    X = _frame()
    w = np.random.default_rng(1).random(len(X)) * 2 if weighted else None
    pairs = [("site", "hour"), ("hour", "x")]
    enc = FeatureEncoder(n_bins=4, categorical_cols=["hour"], interactions=pairs, min_cross_count=25.0)
    codes = enc.fit(X, sample_weight=w).transform(X)
    first = FeatureEncoder(n_bins=4, categorical_cols=["hour"]).fit(X, sample_weight=w).transform(X)
    np.testing.assert_array_equal(codes[:, :3], first)
    weight = np.ones(len(X)) if w is None else w
    for c, (left, right) in enumerate([(0, 1), (1, 2)]):
        expected, kept = _oracle(first, left, right, int(enc.n_values_[right]), weight, 25.0)
        np.testing.assert_array_equal(codes[:, 3 + c], expected)
        assert enc.n_codes_[3 + c] == len(kept) + 1
    assert enc.interactions_ == pairs
    assert codes.shape == (len(X), 5)
    assert (codes < enc.n_codes_).all()


def test_rare_and_unseen_pairs_read_as_the_pooled_code() -> None:
    X = pd.DataFrame({"a": list("xxxxyyyyz"), "b": list("pqpqpqpqq")})
    enc = FeatureEncoder(interactions=[("a", "b")], min_cross_count=2).fit(X)
    # Kept: (x, p), (x, q), (y, p), (y, q); (z, q) has one row: pooled with anything new.
    new = pd.DataFrame({"a": ["x", "z", "w", None], "b": ["q", "q", "p", "p"]})
    codes = enc.transform(new)
    assert enc.n_codes_[2] == 5
    assert codes[:, 2].tolist() == [1, 4, 4, 4]


def test_numeric_columns_cross_through_their_bins() -> None:
    X = pd.DataFrame({"u": np.arange(100.0), "v": np.tile([0.0, 1.0, 2.0, 3.0], 25)})
    enc = FeatureEncoder(n_bins=4, interactions=[("u", "v")], min_cross_count=1).fit(X)
    codes = enc.transform(X)
    # u: four bins and the missing code; v: bins {0}, {1}, {2, 3} (a cut at the minimum is dropped), missing
    assert enc.n_values_.tolist() == [5, 4]
    expected, kept = _oracle(codes, 0, 1, 4, np.ones(100), 1.0)
    np.testing.assert_array_equal(codes[:, 2], expected)
    assert len(kept) == 12  # every bin of u meets every bin of v


def test_all_pairs_and_json_round_trip() -> None:
    X = _frame()
    enc = FeatureEncoder(n_bins=3, categorical_cols=["hour"], interactions="all").fit(X)
    assert enc.interactions_ == [("site", "hour"), ("site", "x"), ("hour", "x")]
    back = FeatureEncoder.from_dict(json.loads(json.dumps(enc.to_dict())))
    np.testing.assert_array_equal(back.transform(X), enc.transform(X))
    assert back.interactions_ == enc.interactions_
    np.testing.assert_array_equal(back.n_codes_, enc.n_codes_)


@pytest.mark.parametrize("interactions", [None, "all"])
def test_keep_columns_equals_the_fit_on_those_columns(interactions: str | None) -> None:
    X = _frame().assign(ad=np.random.default_rng(2).integers(0, 300, 2000))
    params = {"n_bins": 4, "interactions": interactions, "min_cross_count": 25.0}
    full = FeatureEncoder(categorical_cols=["hour", "ad"], **params).fit(X)
    kept, columns = full.keep_columns(["site", "x"])
    alone = FeatureEncoder(categorical_cols=[], **params).fit(X[["site", "x"]])
    assert kept.to_dict() == alone.to_dict()
    # The full encoder's dtype (ad's 300 values), not the smallest for the kept codes: no new kernels.
    assert (full.codes_dtype_, kept.codes_dtype_, alone.codes_dtype_) == (np.int16, np.int16, np.int8)
    assert_array_equal(full.transform(X)[:, columns], alone.transform(X))
    assert_array_equal(kept.transform(X), full.transform(X)[:, columns])
    assert FeatureEncoder.from_dict(kept.to_dict()).codes_dtype_ == np.int8


def test_keep_crosses_keeps_the_code_dtype() -> None:
    rng = np.random.default_rng(3)
    X = pd.DataFrame({"a": rng.integers(0, 20, 4000), "b": rng.integers(0, 20, 4000)})
    full = FeatureEncoder(categorical_cols=["a", "b"], interactions=[("a", "b")], min_cross_count=1).fit(X)
    none = full.keep_crosses([])
    # The cross's 400 pairs need int16; the columns alone fit int8, but no new kernel is compiled.
    assert (full.codes_dtype_, none.codes_dtype_) == (np.int16, np.int16)
    assert_array_equal(none.transform(X), full.transform(X)[:, :2])
    assert FeatureEncoder.from_dict(none.to_dict()).codes_dtype_ == np.int8


def test_large_pair_spaces_use_the_key_search(monkeypatch: pytest.MonkeyPatch) -> None:
    X = _frame()
    enc = FeatureEncoder(n_bins=8, interactions=[("site", "x")], min_cross_count=5).fit(X)
    dense = enc.transform(X)
    monkeypatch.setattr("gpucal.encoding.crosses.MAX_LOOKUP_SPAN", 1)
    np.testing.assert_array_equal(enc.transform(X), dense)


def test_the_cap_drops_pairs_with_a_warning_naming_them() -> None:
    X = _frame()
    enc = FeatureEncoder(n_bins=4, interactions=[("site", "hour"), ("site", "x")], max_cross_levels=25)
    with pytest.warns(UserWarning, match=r"\[\('site', 'x'\)\] dropped.*max_cross_levels=25"):
        enc.fit(X)
    assert enc.interactions_ == [("site", "hour")]
    assert enc.n_codes_[3:].sum() <= 25


@pytest.mark.parametrize(
    ("interactions", "match"),
    [
        ([("site", "nope")], r"\('site', 'nope'\) names column\(s\) \['nope'\]"),
        ([("site", "site")], r"crosses column 'site' with itself"),
        ([("site",)], r"\('site',\) is not a pair of columns"),
        ([("site", "hour"), ("hour", "site")], r"given twice"),
        (["site"], r"'site' is not a pair"),
    ],
)
def test_bad_interactions_name_the_entry(interactions: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FeatureEncoder(interactions=interactions).fit(_frame(50))


@pytest.mark.parametrize("interactions", ["auto", np.array([["site", "hour"]])])
def test_interactions_must_be_a_list(interactions: Any) -> None:
    with pytest.raises(TypeError, match="expected None, 'all' or a list of column pairs"):
        FeatureEncoder(interactions=interactions).fit(_frame(50))


def test_code_maps_map_the_crosses_too() -> None:
    """A tree's pooled codes: every column, crosses included, mapped after the plain codes are read."""
    X = _frame(50)
    enc = FeatureEncoder(interactions=[("site", "hour")], categorical_cols=["hour"]).fit(X)
    codes = enc.transform(X)
    maps = [np.arange(k)[::-1].astype(np.int32) for k in enc.n_codes_]
    mapped = enc.transform(X, code_maps=maps)
    expected = np.column_stack([m[codes[:, j]] for j, m in enumerate(maps)])
    assert_array_equal(mapped, expected)


@pytest.mark.parametrize(
    ("corrupt", "match"),
    [
        (lambda d: d["crosses"][0].update(keys=[3, 2]), r"\['keys'\]: expected strictly increasing"),
        (lambda d: d["crosses"][0].update(keys=[10**6]), r"\['keys'\]: expected strictly increasing"),
        (lambda d: d["crosses"][0]["keys"].append(2**64), r"\['keys'\]: expected strictly increasing"),
        (lambda d: d["crosses"][0].update(keys=[-(2**70), 0]), r"\['keys'\]: expected strictly increasing"),
        (lambda d: d["crosses"][0].update(columns=["site", "site"]), r"\['columns'\]: expected two distinct"),
        (lambda d: d["crosses"][0].update(columns=["site", "zzz"]), r"\['columns'\]: expected two distinct"),
        (lambda d: d["params"].update(interactions=[["hour", "x"]]), "differ from data"),
        (lambda d: d.pop("crosses"), r"'crosses' with crosses"),
        (lambda d: d["params"].update(max_cross_levels=2), "more codes than max_cross_levels"),
        (lambda d: d["params"].pop("min_cross_count"), "data\\['params'\\]: expected the keys"),
    ],
)
def test_from_dict_checks_the_crosses(corrupt, match: str) -> None:
    X = _frame()
    data = FeatureEncoder(n_bins=3, interactions=[("site", "x")]).fit(X).to_dict()
    corrupt(data)
    with pytest.raises(ValueError, match=match):
        FeatureEncoder.from_dict(data)


def _site_ad(ads: range, n: int = 2_000) -> pd.DataFrame:
    rng = np.random.default_rng(ads.start)
    ad = rng.integers(ads.start, ads.stop, n)
    return pd.DataFrame({"site": rng.integers(0, 10, n).astype(str), "ad": ad.astype(str)})


def test_a_cross_past_the_key_limit_is_named_with_advice_for_crosses() -> None:
    dask = pytest.importorskip("dask", reason="the distinct-key limit is set through dask.config")
    X = _site_ad(range(0, 20))  # 200 keys
    halves = (_site_ad(range(0, 10)), _site_ad(range(10, 20)))  # 100 keys in each
    blocks = LocalRows(tuple(RowBlock({"X": half, "sample_weight": None}) for half in halves))
    said = r"the cross of 'site' and 'ad': 200 distinct keys .* Leave the pair out of interactions"
    with dask.config.set({"gpucal.max-distinct-keys": 150}):
        with pytest.raises(ValueError, match=said):  # one block
            FeatureEncoder(interactions=[("site", "ad")]).fit(X)
        with pytest.raises(ValueError, match=said):  # the blocks' tables merged
            FeatureEncoder(interactions=[("site", "ad")]).fit_rows(blocks)
    with dask.config.set({"gpucal.max-distinct-keys": 200}):
        fitted = FeatureEncoder(interactions=[("site", "ad")]).fit_rows(blocks)
    assert fitted.interactions_ == [("site", "ad")]


def test_files_without_crosses_load_as_before() -> None:
    X = _frame()
    data = FeatureEncoder(n_bins=3).fit(X).to_dict()
    assert "crosses" not in data
    assert set(data["params"]) == {"n_bins", "categorical_cols", "handle_unseen"}
    assert FeatureEncoder.from_dict(data).interactions_ == []


#: A process in which dask and distributed cannot be imported, as on an install without the dask extra.
_WITHOUT_DASK = """
import importlib.abc, sys

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("dask", "distributed"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, Refuse())
"""


def test_crosses_fit_without_dask_installed() -> None:
    """Dask is an optional extra: counting the crosses' keys on one machine must not import it."""
    code = _WITHOUT_DASK + (
        "import numpy as np, pandas as pd\n"
        "from gpucal.encoding import FeatureEncoder\n"
        "rng = np.random.default_rng(0)\n"
        "X = pd.DataFrame({'site': rng.integers(0, 4, 500), 'hour': rng.integers(0, 6, 500)})\n"
        "enc = FeatureEncoder(categorical_cols=['site', 'hour'], interactions=[('site', 'hour')]).fit(X)\n"
        "assert enc.transform(X).shape == (500, 3)\n"
        "assert 'dask' not in sys.modules\n"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parent.parent,
        env=os.environ,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )


def test_unweighted_pair_counts_equal_the_weighted_ones() -> None:
    """Without weights the pairs of more keys than rows sort their keys alone; their counts are the
    sums of unit weights, key for key (the dense, table-of-every-key and sorted paths all met)."""
    from gpucal.encoding.crosses import count_pairs

    rng = np.random.default_rng(8)
    n_values = [3_000, 700, 40, 6]
    codes = np.column_stack([rng.integers(0, k, 5_000) for k in n_values]).astype(np.int16)
    pairs = [(a, b, n_values[a], n_values[b]) for a in range(4) for b in range(a + 1, 4)]
    spans = [n_left * n_right for _, _, n_left, n_right in pairs]
    assert min(spans) <= 5_000 < max(spans)  # dense pairs and pairs of more keys than rows
    for plain, weighted in zip(
        count_pairs(codes, None, pairs, 10**7), count_pairs(codes, np.ones(5_000), pairs, 10**7), strict=True
    ):
        assert_array_equal(plain.keys[0], weighted.keys[0])
        assert_array_equal(plain.stats, weighted.stats)


@pytest.mark.parametrize("weighted", [False, True])
def test_pair_counts_equal_numpys_on_every_path(weighted: bool) -> None:
    """Pairs of at most as many keys as rows in a table of every key, the others by ``bincount`` or by
    sorting their keys: every path gives the keys some row has and their weight summed in row order, as
    ``np.unique`` and ``bincount`` find them."""
    from gpucal.encoding.crosses import count_pairs

    rng = np.random.default_rng(9)
    n_rows = 4_000
    n_values = [3_000, 150, 50, 4]
    codes = np.column_stack([rng.integers(0, k, n_rows) for k in n_values]).astype(np.int16)
    w = rng.uniform(0.0, 2.0, n_rows) if weighted else None
    pairs = [(a, b, n_values[a], n_values[b]) for a in range(4) for b in range(a + 1, 4)]
    spans = [n_left * n_right for _, _, n_left, n_right in pairs]
    assert min(spans) <= n_rows < max(spans)
    for (left, right, _, n_right), table in zip(pairs, count_pairs(codes, w, pairs, 10**7), strict=True):
        keys = codes[:, left].astype(np.int64) * n_right + codes[:, right]
        present = np.unique(keys)
        assert_array_equal(table.keys[0], present)
        assert_array_equal(table.stats[:, 0], np.bincount(keys, weights=w)[present])


def test_group_sorted_without_weights_counts_the_keys() -> None:
    """No weights: each key's sum is its count, read off the keys sorted alone (one key on numpy); the
    same keys and sums as unit weights through the argsort, and the same for two keys."""
    from gpucal.rows.reduce import group_sorted

    rng = np.random.default_rng(9)
    keys = rng.integers(-50, 5_000, 3_000)
    other = rng.integers(0, 3, 3_000)
    for columns in [(keys,), (keys, other), (keys[:0],)]:
        n = columns[0].shape[0]
        counted_keys, counts = group_sorted(columns, None)
        weighted_keys, sums = group_sorted(columns, np.ones((n, 1)))
        for a, b in zip(counted_keys, weighted_keys, strict=True):
            assert_array_equal(a, b)
        assert_array_equal(counts, sums)
        assert counts.shape == (len(np.unique(np.column_stack(columns), axis=0)), 1)
