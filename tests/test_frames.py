"""Data in / data out: families, validation messages, and results returned in the caller's family."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from numpy.testing import assert_array_equal

from gpucal._frames import (
    Column,
    InputInfo,
    as_column,
    default_feature_names,
    describe_input,
    frame_columns,
    input_family,
    parse_input,
    resolve_feature_names,
    wrap_output,
)
from gpucal._validation import check_invariant, check_labels, check_sample_weight

SCORES = [0.1, 0.5, 0.9, 0.3]


def _pandas() -> pd.DataFrame:
    return pd.DataFrame(
        {"score": SCORES, "country": ["FR", None, "DE", "FR"], "age": [20.0, np.nan, 40.0, 50.0]},
        index=[10, 11, 12, 13],
    )


FRAMES = {
    "pandas": _pandas,
    "polars": lambda: pl.from_pandas(_pandas()),
    "pyarrow": lambda: pa.Table.from_pandas(_pandas(), preserve_index=False),
    "dict": lambda: {k: v.to_numpy() for k, v in _pandas().items()},
}


# ------------------------------------------------------------------------------------------------
# Families in


@pytest.mark.parametrize("family", list(FRAMES))
def test_split_input_every_frame_family(family):
    X = FRAMES[family]()
    got = parse_input(X)
    assert got.info.family == ("numpy" if family == "dict" else family)
    assert got.info.n_rows == 4
    assert got.info.name == "calibrated"
    assert got.score.dtype == np.float64
    assert_array_equal(got.score, SCORES)
    assert list(got.features) == ["country", "age"]
    country, age = got.features["country"], got.features["age"]
    assert not country.is_numeric
    assert [country.categories[c] if c >= 0 else None for c in country.values] == ["FR", None, "DE", "FR"]
    assert age.is_numeric
    assert_array_equal(age.values, [20.0, np.nan, 40.0, 50.0])


@pytest.mark.parametrize(
    "scores",
    [
        np.array(SCORES),
        SCORES,
        pd.Series(SCORES, name="p"),
        pl.Series("p", SCORES),
        pa.array(SCORES),
        pa.chunked_array([SCORES[:2], SCORES[2:]]),
    ],
    ids=["numpy", "list", "pandas", "polars", "pyarrow", "pyarrow-chunked"],
)
def test_split_input_1d_scores(scores):
    got = parse_input(scores)
    assert_array_equal(got.score, SCORES)
    assert got.features == {}
    assert got.info.n_rows == 4


def test_feature_cols_select_and_order():
    got = parse_input(_pandas(), feature_cols=["age", "country"])
    assert list(got.features) == ["age", "country"]
    assert list(parse_input(_pandas(), feature_cols="age").features) == ["age"]
    assert parse_input(_pandas(), feature_cols=[]).features == {}


def test_score_col_and_logits():
    X = _pandas().rename(columns={"score": "margin"})
    X["margin"] = [-3.0, 0.0, 2.5, 7.0]
    got = parse_input(X, score_col="margin", score_kind="logit")
    assert_array_equal(got.score, [-3.0, 0.0, 2.5, 7.0])
    assert got.info.name == "calibrated"


def test_input_family_does_not_import():
    assert input_family(np.zeros(2)) == "numpy"
    assert input_family([0.1]) == "numpy"
    assert input_family({"a": np.zeros(2)}) == "numpy"
    assert input_family(pl.DataFrame()) == "polars"


def test_import_gpucal_imports_no_gpu_library():
    code = (
        "import sys, gpucal, gpucal.encoding, gpucal._frames;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('cupy', 'cudf', 'dask_cuda', 'rmm'));"
        "bad += [m for m in sys.modules if m.startswith('numba.cuda')];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------------------------
# Columns: every dtype family to numbers or codes


def _decode(col: Column) -> list:
    return [col.categories[c] if c >= 0 else None for c in col.values]


@pytest.mark.parametrize(
    "column",
    [
        pd.Series(["a", None, "b"], dtype=object),
        pd.Series(["a", None, "b"], dtype="string"),
        pd.Series(["a", None, "b"], dtype=pd.ArrowDtype(pa.string())),
        pd.Series(pd.Categorical(["a", None, "b"], categories=["b", "a", "unused"])),
        pl.Series(["a", None, "b"]),
        pl.Series(["a", None, "b"], dtype=pl.Categorical),
        pl.Series(["a", None, "b"], dtype=pl.Enum(["b", "a"])),
        pa.array(["a", None, "b"]),
        pa.array(["a", None, "b"], type=pa.large_string()),
        pa.array(["a", None, "b"]).dictionary_encode(),
        pa.chunked_array([pa.array(["a", None]).dictionary_encode(), pa.array(["b"]).dictionary_encode()]),
        np.array(["a", None, "b"], dtype=object),
    ],
    ids=lambda c: f"{type(c).__module__.split('.')[0]}-{getattr(c, 'dtype', getattr(c, 'type', ''))}",
)
def test_as_column_by_value(column):
    col = as_column(column, "X['c']")
    assert not col.is_numeric
    assert _decode(col) == ["a", None, "b"]


@pytest.mark.parametrize(
    "column",
    [
        pd.Series([True, None, False], dtype="boolean"),
        pl.Series([True, None, False]),
        pa.array([True, None, False]),
    ],
    ids=["pandas", "polars", "pyarrow"],
)
def test_as_column_booleans_by_value(column):
    assert _decode(as_column(column, "b")) == [True, None, False]


@pytest.mark.parametrize(
    "column", [pd.Series([True, False]), np.array([True, False])], ids=["pandas", "numpy"]
)
def test_as_column_booleans_without_missing(column):
    col = as_column(column, "b")
    assert col.values.dtype == np.int8
    assert _decode(col) == [True, False]


@pytest.mark.parametrize(
    "column",
    [
        pd.Series([1, None, 3], dtype="Int64"),
        pd.Series([1.0, np.nan, 3.0]),
        pd.Series([1.0, None, 3.0], dtype="Float64"),
        pd.Series([1, None, 3], dtype=pd.ArrowDtype(pa.int64())),
        pl.Series([1, None, 3]),
        pl.Series([1.0, float("nan"), 3.0]),
        pl.Series([Decimal("1"), None, Decimal("3")]),
        pa.array([1, None, 3]),
        pa.chunked_array([[1, None], [3]]),
    ],
    ids=lambda c: f"{type(c).__module__.split('.')[0]}-{getattr(c, 'dtype', getattr(c, 'type', ''))}",
)
def test_as_column_numbers_with_missing(column):
    col = as_column(column, "n")
    assert col.is_numeric
    assert_array_equal(np.asarray(col.values, dtype=np.float64), [1.0, np.nan, 3.0])


def test_as_column_keeps_integer_dtype_without_missing():
    assert as_column(pd.Series([1, 2], dtype="Int32"), "n").values.dtype == np.int32
    assert as_column(pd.Series([1, 2], dtype=np.uint8), "n").values.dtype == np.uint8


def test_as_column_arrow_dictionary_with_null_entry():
    arr = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, None]), pa.array(["a", None, "b"]))
    assert _decode(as_column(arr, "d")) == ["a", None, "b", None]


def test_as_column_all_null():
    assert _decode(as_column(pa.nulls(2), "z")) == [None, None]
    assert _decode(as_column(pl.Series([None, None]), "z")) == [None, None]


@pytest.mark.parametrize(
    "X",
    [
        pd.DataFrame({"score": [0.5], "when": pd.to_datetime(["2024-01-01"])}),
        pl.DataFrame({"score": [0.5], "when": [[1, 2]]}),
        pa.table({"score": [0.5], "when": pa.array([b"x"])}),
    ],
    ids=["pandas-datetime", "polars-list", "pyarrow-binary"],
)
def test_unsupported_dtype_names_column(X):
    with pytest.raises(TypeError, match=r"X\['when'\]: unsupported dtype .*numbers, booleans, strings"):
        parse_input(X)


def test_unhashable_objects_name_column():
    X = pd.DataFrame({"score": [0.5], "when": [[1, 2]]})
    with pytest.raises(TypeError, match=r"X\['when'\]: cannot encode its values by value \(unhashable"):
        parse_input(X)


def test_frame_columns_selects_and_reports_missing():
    cols = frame_columns(_pandas(), ["age"])
    assert list(cols) == ["age"]
    assert frame_columns(cols) is not cols  # a dict of Column is passed through by value
    with pytest.raises(
        KeyError, match=r"X: column\(s\) \['height'\] not found; available columns: \['score'"
    ):
        frame_columns(_pandas(), ["height"])
    with pytest.raises(TypeError, match="X: expected a dataframe or a dict of columns, got a 1-D ndarray"):
        frame_columns(np.zeros(3))


# ------------------------------------------------------------------------------------------------
# Validation messages


def test_missing_score_column_lists_columns():
    with pytest.raises(
        KeyError, match=r"X: score column 'p' not found \(set score_col=\); available columns: \["
    ):
        parse_input(_pandas(), score_col="p")


def test_missing_feature_columns_listed():
    with pytest.raises(KeyError, match=r"feature_cols: column\(s\) \['x', 'y'\] not found in X; available"):
        parse_input(_pandas(), feature_cols=["age", "x", "y"])


def test_duplicate_feature_cols():
    with pytest.raises(ValueError, match=r"feature_cols: duplicate column names 'age';"):
        parse_input(_pandas(), feature_cols=["age", "age"])


def test_duplicate_frame_columns():
    X = pd.DataFrame([[0.5, 1, 2]], columns=["score", "a", "a"])
    with pytest.raises(ValueError, match=r"X: duplicate column names 'a'; column names must be unique"):
        parse_input(X)


def test_score_listed_as_feature():
    with pytest.raises(
        ValueError, match="feature_cols: lists the score column 'score'; the score cannot also"
    ):
        parse_input(_pandas(), feature_cols=["age", "score"])


def test_empty_frame():
    X = _pandas().iloc[:0]
    with pytest.raises(ValueError, match="X: no rows"):
        parse_input(X)
    got = parse_input(X, allow_empty=True)
    assert got.score.shape == (0,)
    assert wrap_output(got.score, got.info).index.equals(X.index)


def test_require_features():
    with pytest.raises(ValueError, match="X: no feature columns; this calibrator needs at least one"):
        parse_input(np.array(SCORES), require_features=True)
    with pytest.raises(ValueError, match="X: no feature columns"):
        parse_input(_pandas()[["score"]], require_features=True)


def test_feature_cols_with_1d_scores():
    with pytest.raises(ValueError, match="feature_cols: X is a 1-D score array and has no columns"):
        parse_input(np.array(SCORES), feature_cols=["a"])


@pytest.mark.parametrize(
    ("values", "kind", "match"),
    [
        (
            [0.2, 1.5, 0.1],
            "probability",
            r"X\['score'\]: 1 value\(s\) \(first at row 1: 1.5\) are outside \[0, 1\]",
        ),
        ([0.2, -0.1, 0.1], "probability", r"pass margins/logits as score_kind='logit'"),
        ([0.2, np.nan, 0.1], "probability", r"X\['score'\]: 1 value\(s\) \(first at row 1: nan\) are NaN or"),
        (
            [0.2, 0.3, np.inf],
            "logit",
            r"X\['score'\]: 1 value\(s\) \(first at row 2: inf\) are NaN or infinite",
        ),
    ],
)
def test_bad_scores_name_column_and_row(values, kind, match):
    with pytest.raises(ValueError, match=match):
        parse_input(pd.DataFrame({"score": values}), score_kind=kind)


def test_bad_score_kind():
    with pytest.raises(
        ValueError, match=r"The 'score_kind' parameter must be one of \('probability', 'logit'\)"
    ):
        parse_input(np.array(SCORES), score_kind="margin")


def test_string_scores():
    with pytest.raises(TypeError, match=r"X\['score'\]: expected numbers, got dtype"):
        parse_input(pd.DataFrame({"score": ["0.5"]}, dtype=object))


def test_1d_scores_named_x():
    with pytest.raises(ValueError, match=r"X: 1 value\(s\) \(first at row 0: 2.0\) are outside \[0, 1\]"):
        parse_input(np.array([2.0, 0.5]))


def test_scalar_array_rejected():
    with pytest.raises(ValueError, match=r"X: expected a dataframe or a 1-D array of scores, got the scalar"):
        parse_input(np.array(0.5))


def test_two_d_array_needs_column_positions():
    with pytest.raises(KeyError, match="X: a 2-D array of 2 columns has no column names; set score_col"):
        parse_input(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="X: a 3-D array has no columns to read"):
        parse_input(np.zeros((3, 2, 1)))


def test_n_by_1_array_is_the_score():
    """Issue 18: scikit-learn users hand a score as an ``(n, 1)`` array, as IsotonicRegression takes it."""
    X = np.array(SCORES)[:, None]
    for score_col in ("score", 0):
        got = parse_input(X, score_col=score_col, feature_cols=[])
        assert_array_equal(got.score, SCORES)
        assert (got.info.family, got.info.n_rows, got.features) == ("numpy", 4, {})


def test_n_by_1_array_is_the_score_of_the_calibrators_that_take_features_too() -> None:
    """MBCT and AutoCalibrator fit a 1-D score; on its ``(n, 1)`` form their default features listed
    column 0, the score ("feature_cols: lists the score column 0"); the feature-aware fits said so
    instead of that they need a feature."""
    from gpucal import MBCT, AutoCalibrator, FeatureAwarePlattCalibrator

    rng = np.random.default_rng(0)
    score = rng.uniform(0.05, 0.95, 600)
    y = (rng.uniform(size=600) < score).astype(float)
    for make in (lambda: MBCT(max_trees=3), lambda: AutoCalibrator(candidates=["platt", "mbct"], n_folds=2)):
        flat = make().fit(score, y).predict(score)
        assert_array_equal(make().fit(score[:, None], y).predict(score[:, None]), flat)
    with pytest.raises(ValueError, match="X: no feature columns"):
        FeatureAwarePlattCalibrator().fit(score[:, None], y)


def test_two_d_array_by_column_position():
    """Issue 18: integer ``score_col`` / ``feature_cols`` read a 2-D array by column position."""
    X = np.column_stack([[5.0, 6.0, 7.0, 8.0], SCORES, [1.0, 2.0, 1.0, 2.0]])
    got = parse_input(X, score_col=1)
    assert_array_equal(got.score, SCORES)
    assert list(got.features) == [0, 2]
    assert_array_equal(got.features[2].values, [1.0, 2.0, 1.0, 2.0])
    assert list(parse_input(X, score_col=1, feature_cols=[2]).features) == [2]
    with pytest.raises(KeyError, match=r"feature_cols: column\(s\) \[3\] not found in X"):
        parse_input(X, score_col=1, feature_cols=[3])


@pytest.mark.parametrize("X", [3.0, "score", {1, 2}, object()], ids=["float", "str", "set", "object"])
def test_unsupported_type_names_type_and_parameter(X):
    with pytest.raises(
        TypeError, match=r"X: unsupported type builtins\.\w+; expected a pandas, cudf, polars"
    ):
        parse_input(X)


def test_polars_lazyframe_asks_for_collect():
    with pytest.raises(
        TypeError, match=r"X: unsupported type polars.*LazyFrame.*\(call \.collect\(\) first\)"
    ):
        parse_input(pl.DataFrame({"score": [0.5]}).lazy())


def test_dict_columns_of_unequal_length():
    with pytest.raises(
        ValueError, match=r"X: columns have different numbers of rows: 'score' has 2, 'a' has 3"
    ):
        parse_input({"score": np.array([0.1, 0.2]), "a": np.array([1, 2, 3])})


def test_labels_and_weights_messages():
    assert_array_equal(check_labels(np.array([0, 1, 0.25])), [0.0, 1.0, 0.25])  # soft labels allowed
    with pytest.raises(
        ValueError, match=r"y_true: labels must be 0 or 1; 1 value\(s\) \(first at row 2: 0.25\)"
    ):
        check_labels(np.array([0, 1, 0.25]), allow_soft=False)
    with pytest.raises(
        ValueError, match=r"y_true: labels must be in \[0, 1\]; 1 value\(s\) \(first at row 0: 2.0"
    ):
        check_labels([2, 1])
    with pytest.raises(
        ValueError, match=r"sample_weight: weights must be >= 0; 1 value\(s\) \(first at row 1"
    ):
        check_sample_weight([1.0, -1.0], 2)
    with pytest.raises(ValueError, match="sample_weight: all weights are zero"):
        check_sample_weight([0.0, 0.0], 2)
    with pytest.raises(ValueError, match="sample_weight: has 3 rows, expected 2"):
        check_sample_weight([1.0, 1.0, 1.0], 2)
    with pytest.raises(ValueError, match=r"sample_weight: 1 value\(s\) \(first at row 0: nan\) are NaN"):
        check_sample_weight([np.nan, 1.0], 2)


def test_check_invariant():
    check_invariant(True, "fine")
    with pytest.raises(RuntimeError, match="internal error in gpucal: broken; please report it"):
        check_invariant(False, "broken")


# ------------------------------------------------------------------------------------------------
# Families out


def test_pandas_out_keeps_index_and_name():
    X = _pandas()
    got = parse_input(X)
    out = wrap_output(got.score * 2, got.info)
    assert isinstance(out, pd.Series)
    assert out.index.equals(X.index)
    assert out.name == "calibrated"
    assert_array_equal(out.to_numpy(), np.array(SCORES) * 2)
    assert wrap_output(got.score, got.info, name="other").name == "other"


def test_pandas_out_copies_unless_the_values_are_fresh():
    got = parse_input(_pandas())
    values = got.score * 2
    assert not np.shares_memory(wrap_output(values, got.info).to_numpy(), values)
    assert np.shares_memory(wrap_output(values, got.info, fresh=True).to_numpy(), values)


def test_pandas_series_in_keeps_its_index():
    s = pd.Series(SCORES, index=list("abcd"), name="p")
    got = parse_input(s)
    out = wrap_output(got.score, got.info)
    assert list(out.index) == list("abcd")
    assert out.name == "calibrated"


@pytest.mark.parametrize(
    ("family", "kind"),
    [("polars", pl.Series), ("pyarrow", pa.Array), ("dict", np.ndarray)],
)
def test_output_family_matches_input(family, kind):
    got = parse_input(FRAMES[family]())
    out = wrap_output(got.score, got.info)
    assert isinstance(out, kind)
    assert_array_equal(np.asarray(out), SCORES)
    if family == "polars":
        assert out.name == "calibrated"


def test_output_type_overrides_input_family():
    got = parse_input(_pandas())
    assert isinstance(wrap_output(got.score, got.info, output_type="numpy"), np.ndarray)
    out = wrap_output(got.score, got.info, output_type="polars")
    assert isinstance(out, pl.Series)
    from_numpy = wrap_output(np.array(SCORES), InputInfo("numpy", 4), output_type="pandas")
    assert from_numpy.index.equals(pd.RangeIndex(4))  # no index came in: the default one


def test_output_type_must_be_known():
    got = parse_input(np.array(SCORES))
    with pytest.raises(ValueError, match=r"The 'output_type' parameter must be one of \('input', 'numpy'"):
        wrap_output(got.score, got.info, output_type="torch")


def test_wrap_output_length_invariant():
    with pytest.raises(RuntimeError, match="internal error in gpucal: result does not match the input rows"):
        wrap_output(np.zeros(3), InputInfo("numpy", 4))


def test_describe_input_without_conversion():
    info = describe_input(_pandas())
    assert (info.family, info.n_rows, info.name) == ("pandas", 4, "calibrated")
    assert describe_input(pl.Series("p", SCORES)).name == "calibrated"


@pytest.mark.parametrize("family", ["pandas", "polars"])
def test_predictions_never_take_an_input_column_name(family):
    """Issue 18: predictions were named after the score column, so ``with_columns`` replaced the score."""
    X = FRAMES[family]()
    got = parse_input(X)
    out = wrap_output(got.score / 2, got.info)
    assert out.name == "calibrated"
    if family == "polars":
        assert X.with_columns(out).columns == ["score", "country", "age", "calibrated"]
        assert_array_equal(X.with_columns(out)["score"].to_numpy(), SCORES)
    clashing = (
        X.rename({"age": "calibrated"}) if family == "polars" else X.rename(columns={"age": "calibrated"})
    )
    assert parse_input(clashing).info.name == "calibrated_1"
    assert parse_input(pd.Series(SCORES, name="calibrated")).info.name == "calibrated_1"


def test_nullable_labels_name_the_missing_value():
    """Issue 18: nullable booleans with ``pd.NA`` said "expected numbers, got dtype object"."""
    y = pd.Series([True, False, pd.NA, True], dtype="boolean")
    with pytest.raises(ValueError, match=r"y: 1 missing value\(s\) \(first at row 2: <NA>\)"):
        check_labels(y, "y")
    with pytest.raises(ValueError, match=r"y: 1 missing value\(s\) \(first at row 1: null\)"):
        check_labels(pl.Series([1, None, 0, 1]), "y")
    with pytest.raises(ValueError, match=r"y: 1 missing value\(s\) \(first at row 3: null\)"):
        check_labels(pa.array([1, 0, 1, None]), "y")
    score = pd.DataFrame({"score": pd.array([0.1, None, 0.3], dtype="Float64")})
    with pytest.raises(ValueError, match=r"X\['score'\]: 1 missing value\(s\) \(first at row 1: <NA>\)"):
        parse_input(score)
    assert_array_equal(check_labels(y.fillna(False), "y"), [1.0, 0.0, 0.0, 1.0])


def test_complex_pandas_column_is_rejected_by_name() -> None:
    # Regression (review): complex passed pandas' numeric check and lost its imaginary part.
    with pytest.raises(TypeError, match=r"X\['c'\]: unsupported dtype complex128"):
        parse_input(pd.DataFrame({"score": [0.1, 0.2], "c": np.array([1 + 2j, 3j])}))


def test_scikit_learn_inputs_are_named():
    """Issue 18 (estimator checks): a missing y, sparse input and ``__array__`` objects."""
    import scipy.sparse as sp

    from gpucal.calibrators import PlattCalibrator

    with pytest.raises(
        ValueError, match="y: this calibrator requires y to be passed, but the target y is None"
    ):
        PlattCalibrator().fit(np.array(SCORES), None)
    with pytest.raises(TypeError, match=r"X: sparse input \(csr_matrix\) is not supported"):
        parse_input(sp.csr_matrix(np.array(SCORES)[:, None]))
    with pytest.raises(TypeError, match=r"X: sparse input \(dok_matrix\) is not supported"):
        parse_input(sp.dok_matrix(np.array(SCORES)[:, None]))  # a dict subclass, not a dict of columns

    class ArrayLike:
        def __array__(self, dtype=None, copy=None):  # type: ignore[no-untyped-def]
            return np.array(SCORES)

    assert_array_equal(parse_input(ArrayLike()).score, SCORES)
    # An object array of numbers is read as numbers (as check_array reads it); strings and None are not.
    assert_array_equal(parse_input(np.array(SCORES, dtype=object)).score, SCORES)
    with pytest.raises(
        TypeError, match=r"X: expected numbers, got dtype object \(a string at row 1: '0.5'\)"
    ):
        parse_input(np.array([0.1, "0.5"], dtype=object))
    with pytest.raises(TypeError, match=r"float\(\) argument must be a string or a real number, not 'dict'"):
        parse_input(np.array([0.1, {"a": 1}], dtype=object))
    with pytest.raises(ValueError, match=r"y: 1 missing value\(s\) \(first at row 1: None\)"):
        check_labels([1, None, 0], "y")
    with pytest.raises(
        ValueError, match=r"X: 0 feature\(s\) \(shape=\(4, 0\)\) while a minimum of 1 is required"
    ):
        parse_input(np.empty((4, 0)))


def test_a_tuple_naming_a_multiindex_column_is_one_name() -> None:
    """With MultiIndex columns, score_col=("m", "score") names one column: it is left out of the default
    features and refused in feature_cols, where it was read as two names and became a feature."""
    columns = pd.MultiIndex.from_tuples([("m", "score"), ("f", "site")])
    names = list(columns)
    assert default_feature_names(names, ("m", "score")) == [("f", "site")]
    with pytest.raises(ValueError, match="lists the score column"):
        resolve_feature_names(names, ("m", "score"), [("m", "score"), ("f", "site")])
    # A single name of any hashable kind is one feature; a list or another tuple lists several.
    assert resolve_feature_names([0, 1, 2], 0, 1) == [1]
    assert resolve_feature_names(["score", "a", "b"], "score", ("a", "b")) == ["a", "b"]
    assert resolve_feature_names([0, 1, 2, 3], 0, range(1, 3)) == [1, 2]
    with pytest.raises(TypeError, match="feature_cols: a one-shot iterator"):  # read twice by a fit
        resolve_feature_names([0, 1, 2, 3], 0, (c for c in [1, 2]))


def test_one_column_inputs_refuse_frames_and_read_pandas_arrays() -> None:
    """y or weights given as a one-column frame get a clear error (pandas said 'no attribute dtype',
    polars 'truth value of a DataFrame is ambiguous'); pandas arrays and Indexes read as columns."""
    labels = [0, 1, 1, 0]
    for frame in (pd.DataFrame({"y": labels}), pl.DataFrame({"y": labels})):
        with pytest.raises(ValueError, match="expected one column, got a DataFrame of shape"):
            check_labels(frame)
    np.testing.assert_array_equal(check_labels(pd.array(labels, dtype="Int64")), labels)
    np.testing.assert_array_equal(check_labels(pd.Index(labels, dtype="Float64")), labels)
    with pytest.raises(ValueError, match="missing"):
        check_labels(pd.array([0, None, 1], dtype="Int64"))


def test_integers_past_2_53_with_missing_values_are_refused_where_read_by_value() -> None:
    """An integer column with a missing value is read as float64: ids past 2**53 merged silently, and a
    fitted id took another's code whenever its batch held a missing value. Such a column is marked
    rounded (any family) and refused where it is read by value; binned, or all missing, it reads."""
    from gpucal.encoding import FeatureEncoder

    big = 2**53 + 1
    for column in (
        pd.Series([big, None], dtype="Int64"),
        pl.Series([big, None], dtype=pl.Int64),
        pa.array([big, None], type=pa.int64()),
    ):
        assert as_column(column, "id").rounded
    assert not as_column(pd.Series([None, None], dtype="Int64"), "id").rounded
    assert not as_column(pd.Series([7, None], dtype="Int64"), "id").rounded
    ids = pd.DataFrame({"id": pd.Series([big, big + 2, None] * 100, dtype="Int64")})
    with pytest.raises(ValueError, match=r"X\['id'\]: integers beyond 2\*\*53 with missing values"):
        FeatureEncoder().fit(ids)
    exact = pd.DataFrame({"id": pd.Series([big, big + 2] * 100, dtype="Int64")})
    with pytest.raises(ValueError, match="read by value"):  # fitted exactly, a batch with a gap
        FeatureEncoder().fit(exact).transform(ids)
    stamps = pd.Series(np.arange(300, dtype=np.int64) * 10**9 + 1_700_000_000 * 10**9, dtype="Int64")
    stamps[5] = None
    assert FeatureEncoder().fit(pd.DataFrame({"t": stamps})).kinds_ == ["bins"]
