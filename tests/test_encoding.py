"""FeatureEncoder: codes by value, quantile bins, missing and unseen codes, dtype, plain-data round trip."""

from __future__ import annotations

import itertools
import json
from decimal import Decimal

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.testing import assert_array_equal
from sklearn.exceptions import NotFittedError

from gpucal._frames import parse_input
from gpucal.encoding import FeatureEncoder
from gpucal.encoding.summaries import as_codes, inverted_cdf, observed_categories, observed_values
from gpucal.rows import LocalRows, RowBlock


def _hand_bins(
    x: np.ndarray, n_bins: int, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Cut points and codes as the module docstring defines them, written with np.quantile."""
    finite = x[np.isfinite(x)]
    w = None if weights is None else weights[np.isfinite(x)]
    q = np.quantile(finite, np.arange(1, n_bins) / n_bins, method="inverted_cdf", weights=w)
    edges = np.unique(q[q > finite.min()])
    codes = np.searchsorted(edges, x, side="right")
    codes[np.isnan(x)] = len(edges) + 1
    return edges, codes


# ------------------------------------------------------------------------------------------------
# By value


def test_strings_by_value_sorted_with_missing_and_unseen_codes():
    X = pd.DataFrame({"country": ["FR", "DE", None, "FR", "IT"]})
    enc = FeatureEncoder().fit(X)
    assert list(enc.categories_["country"]) == ["DE", "FR", "IT"]
    assert_array_equal(enc.transform(X)[:, 0], [1, 0, 3, 1, 2])
    assert enc.n_values_.tolist() == [5]
    assert enc.missing_codes_.tolist() == [3]
    assert enc.unseen_codes_.tolist() == [4]
    assert enc.describe_codes("country") == ["DE", "FR", "IT", "missing", "unseen"]
    assert enc.kinds_ == ["values"]


def test_categorical_uses_observed_values_not_declared_order():
    X = pd.DataFrame({"c": pd.Categorical(["b", "a", "b"], categories=["z", "b", "a"])})
    enc = FeatureEncoder().fit(X)
    assert list(enc.categories_["c"]) == ["a", "b"]
    # the same values as plain strings get the same codes
    assert_array_equal(enc.transform(X), enc.transform(pd.DataFrame({"c": ["b", "a", "b"]})))


@pytest.mark.parametrize(
    ("handle_unseen", "expected"),
    [("separate", [0, 3, 2]), ("missing", [0, 2, 2])],
)
def test_unseen_rule(handle_unseen, expected):
    enc = FeatureEncoder(handle_unseen=handle_unseen).fit(pd.DataFrame({"c": ["a", "b"]}))
    got = enc.transform(pd.DataFrame({"c": ["a", "zz", None]}))
    assert_array_equal(got[:, 0], expected)


def test_unseen_error_names_column_and_value():
    enc = FeatureEncoder(handle_unseen="error").fit(pd.DataFrame({"c": ["a", "b"]}))
    assert enc.unseen_codes_.tolist() == [-1]
    new = pd.DataFrame({"c": pd.Categorical(["a", "zz", "zz", None], categories=["never", "zz", "a"])})
    with pytest.raises(
        ValueError, match=r"X\['c'\]: 2 row\(s\) hold values not seen at fit time \(e.g. 'zz'\)"
    ):
        enc.transform(new)
    # unused unseen categories and missing values are not errors
    assert_array_equal(enc.transform(new.iloc[[0, 3]])[:, 0], [0, 2])


def test_a_column_read_by_value_that_changed_type_is_read_as_fitted():
    """Ids fitted as numbers (a CSV) and given as text (a Parquet file of strings), or the other way: not
    one value seen as given, so the values are read as the fitted kind; new ids stay unseen."""
    numbers = FeatureEncoder(categorical_cols=["region"]).fit(pd.DataFrame({"region": [0, 1, 2, 1]}))
    as_text = numbers.transform(pd.DataFrame({"region": ["0", "2", "07", "new"]}))[:, 0]
    assert as_text.tolist() == numbers.transform(pd.DataFrame({"region": [0, 2, 7, 9]}))[:, 0].tolist()
    decimals = pd.DataFrame({"region": pd.Series([Decimal("0.10"), Decimal("1.90")], dtype=object)})
    with pytest.warns(
        UserWarning, match=r"X\['region'\]: held number values at fit time and now holds other"
    ):
        assert numbers.transform(decimals)[:, 0].tolist() == [numbers.unseen_codes_[0]] * 2  # not truncated
    huge = pd.DataFrame({"region": ["1e999999999", "2.0"]})  # a billion digits would take minutes
    assert numbers.transform(huge)[:, 0].tolist() == [numbers.unseen_codes_[0], 2]
    text = FeatureEncoder().fit(pd.DataFrame({"region": ["0", "1", "s1"]}))
    given = pd.DataFrame({"region": pd.Series([0, 1, 101], dtype="category")})
    assert (
        text.transform(given)[:, 0].tolist()
        == text.transform(pd.DataFrame({"region": ["0", "1", "x"]}))[:, 0].tolist()
    )
    # New ids that look like numbers, or the column coded again upstream: none seen, said.
    with pytest.warns(
        UserWarning, match="held text values at fit time and now holds number values, none seen"
    ):
        new = text.transform(pd.DataFrame({"region": [101, 102]}))[:, 0]
    assert new.tolist() == [text.unseen_codes_[0]] * 2
    # Categories no row holds are no values: rows all missing read as missing, unwarned.
    missing = pd.DataFrame({"region": pd.Categorical([None, None], categories=[101, 102])})
    assert text.transform(missing)[:, 0].tolist() == [text.missing_codes_[0]] * 2
    nothing = FeatureEncoder().fit(pd.DataFrame({"region": pd.Series([None, None], dtype=object)}))
    nothing.transform(pd.DataFrame({"region": ["a"]}))  # no fitted value: nothing to compare with


def test_numeric_column_by_value_with_categorical_cols():
    X = pd.DataFrame({"store": [7, 3, 7, 100], "x": [1.0, 2.0, np.nan, 4.0]})
    enc = FeatureEncoder(categorical_cols=["store", "x"]).fit(X)
    assert list(enc.categories_["store"]) == [3, 7, 100]
    assert list(enc.categories_["x"]) == [1.0, 2.0, 4.0]
    assert_array_equal(enc.transform(X), [[1, 0], [0, 1], [1, 3], [2, 2]])
    assert_array_equal(enc.transform(pd.DataFrame({"store": [3.0, 5.0], "x": [4, 4]})), [[0, 2], [4, 2]])


def test_booleans_by_value():
    enc = FeatureEncoder().fit(pd.DataFrame({"b": pd.array([True, None, False], dtype="boolean")}))
    assert enc.describe_codes("b") == ["False", "True", "missing", "unseen"]
    assert_array_equal(enc.transform(pd.DataFrame({"b": [True, False]}))[:, 0], [1, 0])


def test_mixed_types_sorted_by_type_then_repr():
    enc = FeatureEncoder().fit({"m": np.array(["b", 2, "a", 1], dtype=object)})
    assert list(enc.categories_["m"]) == [1, 2, "a", "b"]


def test_arrow_chunks_with_different_dictionaries():
    col = pa.chunked_array(
        [pa.array(["x", "y"]).dictionary_encode(), pa.array(["z", "x"]).dictionary_encode()]
    )
    enc = FeatureEncoder().fit(pa.table({"c": col}))
    assert_array_equal(enc.transform(pa.table({"c": col}))[:, 0], [0, 1, 2, 0])


# ------------------------------------------------------------------------------------------------
# Quantile bins


@pytest.mark.parametrize("n_bins", [1, 2, 5, 32])
def test_bins_match_hand_computation(n_bins):
    rng = np.random.default_rng(n_bins)
    x = rng.lognormal(size=1000)
    x[rng.random(1000) < 0.05] = np.nan
    edges, codes = _hand_bins(x, n_bins)
    enc = FeatureEncoder(n_bins=n_bins).fit({"x": x})
    assert_array_equal(enc.bin_edges_["x"], edges)
    assert_array_equal(enc.transform({"x": x})[:, 0], codes)
    assert enc.n_values_.tolist() == [len(edges) + 2]
    assert enc.missing_codes_.tolist() == [len(edges) + 1]
    assert enc.unseen_codes_.tolist() == [-1]
    assert len(edges) == n_bins - 1  # continuous data: no duplicate cuts


def test_every_bin_has_fit_rows_and_few_values_get_own_bins():
    x = np.repeat([0, 1, 2, 5], [700, 100, 100, 100])
    enc = FeatureEncoder(n_bins=16, categorical_cols=[]).fit({"x": x})  # integers binned, not read by value
    assert_array_equal(enc.bin_edges_["x"], [1, 2, 5])
    codes = enc.transform({"x": x})[:, 0]
    assert_array_equal(np.bincount(codes, minlength=5), [700, 100, 100, 100, 0])
    # with 8 bins, 5 holds less than 1/8 of the rows and shares the top bin with 2
    assert_array_equal(FeatureEncoder(n_bins=8, categorical_cols=[]).fit({"x": x}).bin_edges_["x"], [1, 2])


def _integer_ids(n_rows: int, n_ids: int, seed: int = 0) -> np.ndarray:
    """``n_ids`` integer codes, each on at least one of ``n_rows`` rows, in a random order."""
    rng = np.random.default_rng(seed)
    return rng.permutation(np.resize(np.arange(1000, 1000 + n_ids), n_rows)).astype(np.int64)


def test_integer_codes_are_read_by_value_floats_binned():
    site = _integer_ids(6000, 60)
    enc = FeatureEncoder().fit({"site": site, "site_float": site.astype(np.float64)})
    assert enc.kinds_ == ["values", "bins"]
    assert enc.categories_["site"].tolist() == list(range(1000, 1060))  # one code per site, none merged
    assert len(enc.bin_edges_["site_float"]) == 31  # 32 quantile bins over the 60 sites
    codes = enc.transform({"site": site, "site_float": site.astype(np.float64)})[:, 0]
    assert_array_equal(codes, site - 1000)


def test_integer_rule_threshold_one_value_per_20_rows():
    # 6000 rows: at most 300 distinct values are read by value; 301 are binned
    enc = FeatureEncoder().fit({"a": _integer_ids(6000, 300), "b": _integer_ids(6000, 301)})
    assert enc.kinds_ == ["values", "bins"]


@pytest.mark.parametrize(
    ("categorical_cols", "kinds"),
    [([], ["bins", "bins"]), (["b"], ["bins", "values"]), (None, ["values", "bins"])],
)
def test_categorical_cols_list_replaces_the_integer_rule(categorical_cols, kinds):
    X = {"a": _integer_ids(2000, 10), "b": np.random.default_rng(1).normal(size=2000)}
    assert FeatureEncoder(categorical_cols=categorical_cols).fit(X).kinds_ == kinds


def test_integer_rule_for_every_integer_dtype():
    ids = _integer_ids(1000, 12)
    frames = [
        pd.DataFrame({"x": pd.array(np.where(np.arange(1000) % 7 == 0, None, ids), dtype="Int64")}),
        pl.DataFrame({"x": ids.astype(np.uint16)}),
        pa.table({"x": pa.array(ids.astype(np.int32))}),
    ]
    for frame in frames:
        enc = FeatureEncoder().fit(frame)
        assert enc.kinds_ == ["values"], type(frame)
        assert enc.categories_["x"].tolist() == list(range(1000, 1012))


@pytest.mark.parametrize("categorical_cols", [None, []])
def test_integer_rule_same_over_blocks(categorical_cols):
    """Fitted over several blocks (the dask path), the encoder is the one fitted on all rows at once."""
    rng = np.random.default_rng(3)
    w = rng.uniform(0.0, 2.0, 3000)
    w[:40] = 0.0  # values held only by zero-weight rows are still categories
    X = pd.DataFrame({"a": _integer_ids(3000, 150), "b": _integer_ids(3000, 151), "c": rng.normal(size=3000)})
    whole = FeatureEncoder(categorical_cols=categorical_cols).fit(X, sample_weight=w)
    cuts = [0, 700, 2000, 3000]
    blocks = tuple(
        RowBlock({"X": X.iloc[lo:hi], "sample_weight": pd.Series(w[lo:hi], index=X.index[lo:hi])})
        for lo, hi in itertools.pairwise(cuts)
    )
    merged = FeatureEncoder(categorical_cols=categorical_cols).fit_rows(LocalRows(blocks))
    assert merged.to_dict() == whole.to_dict()
    assert merged.kinds_ == (["values", "bins", "bins"] if categorical_cols is None else ["bins"] * 3)


def test_integer_ids_past_2_53_stay_apart_over_blocks() -> None:
    """Block summaries grouped integer columns through float64, merging ids past 2**53 that the fit on
    all rows keeps apart."""
    ids = np.array([2**53, 2**53 + 1] * 50, dtype=np.int64)
    X = pd.DataFrame({"id": ids})
    whole = FeatureEncoder().fit(X)
    blocks = LocalRows(
        tuple(RowBlock({"X": X.iloc[lo:hi], "sample_weight": None}) for lo, hi in [(0, 60), (60, 100)])
    )
    merged = FeatureEncoder().fit_rows(blocks)
    assert merged.to_dict() == whole.to_dict()
    assert merged.kinds_ == ["values"]


def test_a_numeric_column_past_the_key_limit_is_named_with_advice_for_it() -> None:
    dask = pytest.importorskip("dask", reason="the distinct-key limit is set through dask.config")
    values = np.random.default_rng(4).normal(size=400)
    blocks = LocalRows(
        tuple(
            RowBlock({"X": pd.DataFrame({"c": values[lo:hi]}), "sample_weight": None})
            for lo, hi in [(0, 200), (200, 400)]
        )
    )
    said = r"X\['c'\] distinct values: 400 distinct keys .* Round the values of X\['c'\]"
    with dask.config.set({"gpucal.max-distinct-keys": 300}), pytest.raises(ValueError, match=said):
        FeatureEncoder().fit_rows(blocks)


def test_out_of_range_and_infinite_values_go_to_end_bins():
    enc = FeatureEncoder(n_bins=4).fit({"x": np.arange(100.0)})
    edges = enc.bin_edges_["x"]
    got = enc.transform({"x": np.array([-1e9, -np.inf, 1e9, np.inf, np.nan])})[:, 0]
    assert_array_equal(got, [0, 0, len(edges), len(edges), len(edges) + 1])
    assert enc.describe_codes("x") == [
        "[-inf, 24.0)",
        "[24.0, 49.0)",
        "[49.0, 74.0)",
        "[74.0, inf]",
        "missing",
    ]


def test_weighted_bins_equal_repeated_rows():
    rng = np.random.default_rng(0)
    x = rng.normal(size=200)
    w = rng.integers(0, 4, size=200)
    weighted = FeatureEncoder(n_bins=7).fit({"x": x}, sample_weight=w)
    repeated = FeatureEncoder(n_bins=7).fit({"x": np.repeat(x, w)})
    assert_array_equal(weighted.bin_edges_["x"], repeated.bin_edges_["x"])
    assert_array_equal(weighted.bin_edges_["x"], _hand_bins(x[w > 0], 7, w[w > 0].astype(float))[0])


@pytest.mark.parametrize("n", [1, 2, 3, 7, 500])
def test_inverted_cdf_matches_numpy(n):
    rng = np.random.default_rng(1)
    v, w = rng.normal(size=n), rng.random(n)
    levels = np.arange(1, 16) / 16
    v[: n // 3] = 0.5  # ties
    assert_array_equal(inverted_cdf(v, levels, None), np.quantile(v, levels, method="inverted_cdf"))
    assert_array_equal(inverted_cdf(v, levels, w), np.quantile(v, levels, method="inverted_cdf", weights=w))


def test_all_missing_numeric_column():
    enc = FeatureEncoder().fit({"x": np.array([np.nan, np.nan])})
    assert_array_equal(enc.transform({"x": np.array([np.nan, 3.0])})[:, 0], [1, 0])


# ------------------------------------------------------------------------------------------------
# Output layout, families, dtype


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    n = 300
    return pd.DataFrame(
        {
            "score": rng.random(n),
            "country": rng.choice(["FR", "DE", "IT", None], size=n),
            "age": np.where(rng.random(n) < 0.1, np.nan, rng.normal(40, 10, n)),
            "n_items": rng.integers(0, 50, n),
            "member": rng.random(n) < 0.5,
        }
    )


@pytest.mark.parametrize(
    "convert",
    [pl.from_pandas, lambda df: pa.Table.from_pandas(df, preserve_index=False), lambda df: dict(df.items())],
    ids=["polars", "pyarrow", "dict-of-series"],
)
def test_same_codes_for_every_family(convert):
    df = _frame()
    expected = FeatureEncoder(n_bins=8).fit_transform(df.drop(columns="score"))
    other = FeatureEncoder(n_bins=8).fit(parse_input(convert(df)).features)
    assert_array_equal(other.transform(convert(df)), expected)


def test_output_layout_and_extra_columns_ignored():
    df = _frame()
    enc = FeatureEncoder(n_bins=8).fit(df.drop(columns="score"))
    codes = enc.transform(df)  # the score column is not a fitted feature: ignored
    assert codes.shape == (300, 4)
    assert codes.flags.c_contiguous
    assert codes.dtype == np.int8
    assert enc.feature_names_ == ["country", "age", "n_items", "member"]
    assert enc.kinds_ == ["values", "bins", "bins", "values"]
    assert (codes >= 0).all()
    assert (codes < enc.n_values_).all()


@pytest.mark.parametrize(
    ("n_categories", "dtype"), [(10, np.int8), (126, np.int8), (127, np.int16), (40_000, np.int32)]
)
def test_smallest_code_dtype(n_categories, dtype):
    # n categories + missing + unseen: the largest code is n + 1
    enc = FeatureEncoder().fit({"c": np.arange(n_categories).astype(str).astype(object)})
    assert enc.codes_dtype_ == dtype
    assert enc.transform({"c": np.array(["0"], dtype=object)}).dtype == dtype


# ------------------------------------------------------------------------------------------------
# Plain-data round trip


def test_to_dict_from_dict_round_trip_through_json():
    df = _frame()
    enc = FeatureEncoder(n_bins=6, categorical_cols=["n_items"], handle_unseen="missing").fit(
        df.drop(columns="score")
    )
    data = json.loads(json.dumps(enc.to_dict()))
    back = FeatureEncoder.from_dict(data)
    assert back.to_dict() == enc.to_dict()
    assert (back.n_bins, back.categorical_cols, back.handle_unseen) == (6, ["n_items"], "missing")
    new = df.assign(country=["XX"] * len(df))
    assert_array_equal(back.transform(new), enc.transform(new))
    assert_array_equal(back.n_values_, enc.n_values_)
    assert back.codes_dtype_ == enc.codes_dtype_


def test_to_dict_rejects_values_json_cannot_hold():
    enc = FeatureEncoder().fit({"c": np.array([b"x", None], dtype=object)})
    with pytest.raises(
        TypeError, match=r"X\['c'\]: category b'x' of type bytes cannot be saved as plain data"
    ):
        enc.to_dict()
    # Saved, an infinite category failed inside json ("Out of range float values"), and an integer of
    # 21 digits wrote a file that load refused.
    for column, match in (
        (np.array([1.0, np.inf, 2.0]), r"X\['c'\]: category inf cannot be saved"),
        (np.array([1, -np.inf], dtype=object), r"X\['c'\]: category -inf cannot be saved"),
        (np.array([10**20, 3], dtype=object), r"X\['c'\]: an integer category of 21 digits cannot be saved"),
    ):
        with pytest.raises(TypeError, match=match):
            FeatureEncoder(categorical_cols=["c"]).fit({"c": column}).to_dict()
    assert FeatureEncoder().fit({"c": np.array([2**64 - 1, 3], dtype=object)}).to_dict()  # 20 digits


def test_to_dict_writes_numpy_scalar_categories_as_python_values():
    # An object column mixing numpy and Python scalars: every category written as the Python value.
    enc = FeatureEncoder().fit({"c": np.array([np.int64(3), 1, np.float64(2.5), 1], dtype=object)})
    cats = enc.to_dict()["columns"][0]["categories"]
    assert cats == [1, 2.5, 3]
    assert [type(v) for v in cats] == [int, float, int]


def test_to_dict_rejects_column_names_json_cannot_hold():
    enc = FeatureEncoder().fit({("a", 1): np.arange(3.0)})
    with pytest.raises(TypeError, match=r"X\[\('a', 1\)\]: column name of type tuple cannot be saved"):
        enc.to_dict()


def _good_dict() -> dict:
    enc = FeatureEncoder(n_bins=4).fit({"x": np.arange(10.0), "c": np.array(["a", "b"] * 5, dtype=object)})
    return json.loads(json.dumps(enc.to_dict()))


@pytest.mark.parametrize(
    ("corrupt", "match"),
    [
        (lambda d: d.update(format="other"), r"data: not a FeatureEncoder dict \(found \('other', 1\)"),
        (lambda d: d.update(version=2), r"data: not a FeatureEncoder dict"),
        (lambda d: d["params"].pop("n_bins"), r"data\['params'\]: expected the keys"),
        (lambda d: d.update(columns=[]), r"data\['columns'\]: expected a non-empty list"),
        (lambda d: d["columns"][0].update(kind="zz"), r"data\['columns'\]\[0\]: expected a dict with 'kind'"),
        (
            lambda d: d["columns"][0].update(name=None),
            r"data\['columns'\]\[0\]\['name'\]: expected a str or int",
        ),
        (
            lambda d: d["columns"][0].update(bin_edges=[3.0, 1.0]),
            r"\['bin_edges'\]: expected a list of finite, strictly",
        ),
        (lambda d: d["columns"][0].update(bin_edges=["1"]), r"\['bin_edges'\]: expected a list of finite"),
        (
            lambda d: d["columns"][1].update(categories=["a", "a"]),
            r"\['categories'\]: values must be distinct",
        ),
        (
            lambda d: d["columns"][1].update(categories=[None]),
            r"\['categories'\]: expected a list of str, int",
        ),
        (lambda d: d["columns"][1].update(name="x"), r"data\['columns'\]: duplicate column names"),
    ],
)
def test_from_dict_rejects_corrupt_data(corrupt, match):
    data = _good_dict()
    FeatureEncoder.from_dict(data)  # the uncorrupted dict loads
    corrupt(data)
    with pytest.raises(ValueError, match=match):
        FeatureEncoder.from_dict(data)


def test_from_dict_checks_params():
    data = _good_dict()
    data["params"]["n_bins"] = 0
    with pytest.raises(ValueError, match="The 'n_bins' parameter of FeatureEncoder must be an int"):
        FeatureEncoder.from_dict(data)


# ------------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        (
            {"n_bins": 0},
            ValueError,
            r"The 'n_bins' parameter of FeatureEncoder must be an int in \[1, inf\). Got 0 ",
        ),
        ({"n_bins": 2.5}, TypeError, r"The 'n_bins' parameter .* Got 2.5 instead."),
        ({"n_bins": True}, TypeError, r"The 'n_bins' parameter .* Got True instead."),
        (
            {"handle_unseen": "ignore"},
            ValueError,
            r"The 'handle_unseen' parameter of FeatureEncoder must be one of",
        ),
        (
            {"categorical_cols": 3},
            TypeError,
            r"The 'categorical_cols' parameter of FeatureEncoder must be a list",
        ),
    ],
)
def test_bad_parameters(params, error, match):
    with pytest.raises(error, match=match):
        FeatureEncoder(**params).fit({"x": np.arange(3.0)})


def test_sklearn_params_and_repr():
    enc = FeatureEncoder(n_bins=5)
    assert enc.get_params() == {
        "n_bins": 5,
        "categorical_cols": None,
        "handle_unseen": "separate",
        "interactions": None,
        "min_cross_count": 10.0,
        "max_cross_levels": 100_000,
    }
    assert repr(enc) == "FeatureEncoder(n_bins=5)"


def test_categorical_cols_must_be_columns():
    with pytest.raises(
        KeyError, match=r"categorical_cols: column\(s\) \['y'\] are not columns of X; columns: \['x'\]"
    ):
        FeatureEncoder(categorical_cols="y").fit({"x": np.arange(3.0)})


def test_fit_needs_rows_and_columns():
    with pytest.raises(ValueError, match="X: no rows"):
        FeatureEncoder().fit({"x": np.array([])})
    with pytest.raises(ValueError, match="X: no feature columns to encode"):
        FeatureEncoder().fit(pd.DataFrame())


def test_sample_weight_checked():
    with pytest.raises(ValueError, match="sample_weight: has 2 rows, expected 3"):
        FeatureEncoder().fit({"x": np.arange(3.0)}, sample_weight=[1.0, 1.0])


def test_transform_errors():
    enc = FeatureEncoder().fit(pd.DataFrame({"age": [1.0, 2.0], "c": ["a", "b"]}))
    with pytest.raises(KeyError, match=r"X: column\(s\) \['c'\] not found; available columns: \['age'\]"):
        enc.transform(pd.DataFrame({"age": [1.0]}))
    with pytest.raises(
        TypeError, match=r"X\['age'\]: was numeric at fit time \(quantile bins\) but now has dtype"
    ):
        enc.transform(pd.DataFrame({"age": ["old"], "c": ["a"]}))
    with pytest.raises(
        KeyError, match=r"column: 'x' is not an encoded column; encoded columns: \['age', 'c'\]"
    ):
        enc.describe_codes("x")


def test_not_fitted():
    with pytest.raises(NotFittedError, match="This FeatureEncoder instance is not fitted yet"):
        FeatureEncoder().transform({"x": np.arange(3.0)})


# ------------------------------------------------------------------------------------------------
# Properties


@settings(max_examples=40, deadline=None)
@given(
    x=hnp.arrays(
        np.float64, st.integers(1, 60), elements=st.floats(allow_nan=True, allow_infinity=True, width=32)
    ),
    new=hnp.arrays(np.float64, st.integers(0, 20), elements=st.floats(allow_nan=True, allow_infinity=True)),
    n_bins=st.integers(1, 40),
)
def test_bins_codes_in_range_and_monotone(x, new, n_bins):
    enc = FeatureEncoder(n_bins=n_bins).fit({"x": x})
    n_values = int(enc.n_values_[0])
    for data in (x, new):
        codes = enc.transform({"x": data})[:, 0].astype(np.int64)
        assert ((codes >= 0) & (codes < n_values)).all()
        assert (codes[np.isnan(data)] == n_values - 1).all()
        finite = ~np.isnan(data)
        order = np.argsort(data[finite], kind="stable")
        assert (np.diff(codes[finite][order]) >= 0).all()  # bins keep the order of the values
    fit_codes = enc.transform({"x": x})[:, 0]
    if np.isfinite(x).any():
        assert_array_equal(
            enc.bin_edges_["x"], _hand_bins(x, n_bins)[0]
        )  # every regular bin holds finite fit rows
        assert set(fit_codes[np.isfinite(x)].tolist()) == set(range(n_values - 1))


@settings(max_examples=40, deadline=None)
@given(
    fit=st.lists(st.one_of(st.none(), st.sampled_from("abcdef")), min_size=1, max_size=40),
    new=st.lists(st.one_of(st.none(), st.sampled_from("abcdefgh")), max_size=40),
)
def test_value_codes_in_range_and_decode(fit, new):
    enc = FeatureEncoder().fit({"c": np.array(fit, dtype=object)})
    labels = enc.describe_codes("c")
    codes = enc.transform({"c": np.array(new, dtype=object)})[:, 0]
    assert ((codes >= 0) & (codes < enc.n_values_[0])).all()
    seen = {v for v in fit if v is not None}
    decoded = [labels[c] for c in codes]
    assert decoded == ["missing" if v is None else v if v in seen else "unseen" for v in new]


@settings(max_examples=50, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(-5, 5).map(float), st.floats(0.01, 10.0)), min_size=1, max_size=50),
    n_bins=st.integers(2, 40),
)
def test_inverted_cdf_agrees_with_numpy(data, n_bins):
    v, w = (np.array(c) for c in zip(*data, strict=True))
    levels = np.arange(1, n_bins) / n_bins
    assert_array_equal(inverted_cdf(v, levels, None), np.quantile(v, levels, method="inverted_cdf"))
    assert_array_equal(inverted_cdf(v, levels, w), np.quantile(v, levels, method="inverted_cdf", weights=w))


@pytest.mark.parametrize("handle_unseen", ["separate", "missing"])
def test_integer_lookup_path_equals_the_general_path(monkeypatch, handle_unseen):
    from gpucal.encoding import encoder as encoding  # the module whose transform reads the span

    rng = np.random.default_rng(0)
    fit_values = rng.choice([3, 7, 8, 40, 41, 1000], 5000)
    new_values = rng.choice([3, 7, 8, 40, 41, 1000, 5, -2, 2000], 5000)  # gaps and both sides unseen
    enc = FeatureEncoder(categorical_cols=["id"], handle_unseen=handle_unseen)
    enc.fit(pd.DataFrame({"id": fit_values}))
    fast = enc.transform(pd.DataFrame({"id": new_values}))
    monkeypatch.setattr(encoding, "MAX_LOOKUP_SPAN", 0)
    general = enc.transform(pd.DataFrame({"id": new_values}))
    np.testing.assert_array_equal(fast, general)
    assert fast.dtype == general.dtype


def test_integer_lookup_path_names_an_unseen_value():
    enc = FeatureEncoder(categorical_cols=["id"], handle_unseen="error").fit(pd.DataFrame({"id": [1, 2, 3]}))
    with pytest.raises(
        ValueError, match=r"X\['id'\]: 1 row\(s\) hold values not seen at fit time \(e.g. 9\)"
    ):
        enc.transform(pd.DataFrame({"id": [1, 9, 2]}))


@pytest.mark.parametrize(
    "values",
    [
        np.tile(np.array([5, -3, 5, 120, -3], dtype=np.int8), 40),  # counted
        np.tile(np.array([-128, 127, 0], dtype=np.int8), 100),  # counted
        np.array([7, 2**63 + 5, 7], dtype=np.uint64),  # a span past the counted range: hashed
        np.array([0, 3, 3, 9], dtype=np.uint16),  # counted
        np.array([40_000, -2, 40_000], dtype=np.int32),  # a span wide for its rows: hashed
        pd.array([3, None, 1], dtype="Int64"),
        np.array([1.5, np.nan, 1.5]),
        np.array(["b", "a", "b"], dtype=object),
    ],
)
def test_observed_values_are_the_factorised_ones(values: object) -> None:
    """The distinct values an integer column holds, counted by value, are those its factorisation finds,
    as Python ints in order; other columns take the factorisation."""
    col = parse_input(
        pd.DataFrame({"score": np.zeros(len(values)), "f": values}), feature_cols=["f"]
    ).features["f"]
    expected = observed_categories(as_codes(col))
    got = observed_values(col)
    assert got.tolist() == expected.tolist()
    assert [type(v) for v in got] == [type(v) for v in expected]


def test_integers_past_int64_are_read_by_value_without_overflow() -> None:
    """A uint64 column above 2**63 - 1 overflowed the int64 offsets of the counting path, and a Python
    int category past int64 the integer lookup table (OverflowError); both take the general path."""
    big = np.array([2**63, 2**63 + 5, 2**63], dtype=np.uint64)
    encoder = FeatureEncoder(categorical_cols=["id"]).fit(pd.DataFrame({"id": big}))
    np.testing.assert_array_equal(encoder.transform(pd.DataFrame({"id": big}))[:, 0], [0, 1, 0])
    objects = pd.DataFrame({"id": pd.Series([1, 2, 10**20], dtype=object)})
    encoder = FeatureEncoder(categorical_cols=["id"]).fit(objects)
    codes = encoder.transform(pd.DataFrame({"id": np.array([2, 1], dtype=np.int64)}))
    np.testing.assert_array_equal(codes[:, 0], [1, 0])


def test_non_finite_categories_are_refused_on_load() -> None:
    encoder = FeatureEncoder(categorical_cols=["c"]).fit(pd.DataFrame({"c": [0.5, 1.5]}))
    for bad in (float("nan"), float("inf")):
        data = encoder.to_dict()
        data["columns"][0]["categories"][0] = bad
        with pytest.raises(ValueError, match="finite float"):
            FeatureEncoder.from_dict(data)


def test_rounded_integers_over_blocks_are_refused_with_the_way_to_bin_them() -> None:
    """A block cannot know whether the merged count reads an automatic integer column by value, so a
    fit over blocks refuses integers past 2**53 with missing values, and says how to bin them."""
    stamps = pd.Series(np.arange(300, dtype=np.int64) * 10**9 + 1_700_000_000 * 10**9, dtype="Int64")
    stamps[5] = None
    X = pd.DataFrame({"t": stamps})
    blocks = LocalRows(
        tuple(RowBlock({"X": X.iloc[lo:hi], "sample_weight": None}) for lo, hi in [(0, 150), (150, 300)])
    )
    with pytest.raises(ValueError, match=r"or, to bin it, set categorical_cols=\[\]"):
        FeatureEncoder().fit_rows(blocks)
    assert FeatureEncoder(categorical_cols=[]).fit_rows(blocks).kinds_ == ["bins"]


def test_half_float_columns_are_binned_and_grouped_as_floats():
    """numba has no float16: the encoder binned such a column, then its transform (so every feature-
    aware fit) failed with "NotImplementedError: float16"; pandas groups by no float16 index (the
    multicalibration error)."""
    import gpucal
    from gpucal.metrics import multicalibration_error

    half = np.array([0.5, 1.5, 2.5, 3.5] * 50, dtype=np.float16)
    rng = np.random.default_rng(0)
    score = rng.uniform(0.1, 0.9, half.size)
    y = (rng.uniform(size=half.size) < score).astype(float)
    enc = FeatureEncoder().fit({"f": half})
    assert_array_equal(enc.transform({"f": half}), enc.transform({"f": half.astype(np.float64)}))
    X = pd.DataFrame({"score": score, "f": half})
    wide = X.assign(f=half.astype(np.float64))
    fitted = gpucal.FeatureAwarePlattCalibrator().fit(X, y).predict(X)
    assert_array_equal(fitted, gpucal.FeatureAwarePlattCalibrator().fit(wide, y).predict(wide))
    assert multicalibration_error(y, score, X[["f"]]).mce == multicalibration_error(y, score, wide[["f"]]).mce
