"""Data in, data out: turn what users hold into device arrays, and results back into their family.

Families
--------
``X`` may be a dataframe (pandas, cudf, polars, pyarrow ``Table``/``RecordBatch``, or a ``dict`` of
1-D columns) or, for calibrators that need no features, a 1-D score array (numpy, cupy, a pandas,
cudf or polars Series, a pyarrow (Chunked)Array, or a Python sequence) or an ``(n, 1)`` array (the
score, as scikit-learn's ``IsotonicRegression`` takes it). A 2-D numpy or cupy array is a dataframe
whose columns are named by position: ``score_col=0, feature_cols=[1, 2]`` reads them. Libraries
are recognised by the module name of ``type(X)`` before anything is imported, so ``import gpucal``
imports no GPU library; cudf and cupy are imported only when a result must be built in their family.
:func:`input_family` is the one ``if/elif`` ladder; each family has a named converter below it.

What comes out
--------------
:func:`parse_input` returns the validated score column as a float64 numpy array (cupy for cudf and
cupy inputs: no host copy) and each feature column as a :class:`Column`, the single form the
:class:`~gpucal.encoding.FeatureEncoder` reads: numbers stay a numeric array (NaN marks missing),
everything read by value (strings, categoricals, booleans) becomes integer codes into a small host
array of categories (-1 marks missing). Labels and sample weights are taken as arrays, never as
column names: pass ``df["y"]``, not ``"y"``. pandas (and cudf) ``X``, labels and weights must share
one index; rows are never paired by position behind the caller's back
(:func:`gpucal._validation.check_same_index`, run before every fit and every metric).

Output type precedence
----------------------
This is the only place the rule is written down. A result is returned in

1. the family named by the estimator's ``output_type`` parameter, when it is not ``"input"``;
2. otherwise the family of the ``X`` given to *that* call (``predict``'s ``X``, not ``fit``'s):
   cudf in, cudf Series out; pandas in, pandas Series out with ``X``'s index; polars in, polars
   Series out; pyarrow in, pyarrow Array out; numpy / sequences / ``dict`` in, numpy out; cupy in,
   cupy out.

Moving between host and device costs one copy of the result; nothing else is converted.

Prediction names
----------------
A returned Series (pandas, cudf, polars) is named :data:`PREDICTION_NAME`, ``"calibrated"``, never
after an input column, so ``polars_df.with_columns(pred)`` adds a column instead of replacing the
raw score. When ``X`` itself holds a column (or is a Series) of that name, the prediction takes the
first of ``"calibrated_1"``, ``"calibrated_2"``, ... that ``X`` does not hold.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpucal._arrow import require_pyarrow
from gpucal._backend import array_namespace, is_cupy_array, to_numpy
from gpucal._validation import check_invariant, check_not_empty, check_scores, cudf_has_nulls

FAMILIES = ("numpy", "cupy", "pandas", "cudf", "polars", "pyarrow")
#: Columns never taken as default features: the data sets' true probability (an oracle no real table has).
ORACLE_COLUMNS = ("p_true",)
OUTPUT_TYPES = ("input", *FAMILIES)
#: The name of a returned prediction Series (module docstring, "Prediction names").
PREDICTION_NAME = "calibrated"


@dataclass(frozen=True)
class InputInfo:
    """What a caller handed in, kept so results can be returned in the same family.

    Attributes
    ----------
    family : str
        One of :data:`FAMILIES`.
    n_rows : int
        Number of rows.
    index : object or None
        The pandas or cudf index of ``X`` (put back on results), else None.
    name : hashable or None
        Name for a returned Series: :data:`PREDICTION_NAME`, or the first free name after it when
        ``X`` holds a column of that name (:func:`prediction_name`).
    """

    family: str
    n_rows: int
    index: Any = None
    name: Hashable | None = None


@dataclass(frozen=True)
class Column:
    """One feature column in the form the encoder reads.

    Attributes
    ----------
    values : array
        1-D numpy or cupy array. When ``categories`` is None: numbers (int, uint or float; NaN is
        missing). Otherwise: integer codes into ``categories``, -1 for missing.
    categories : numpy.ndarray or None
        Host array of the values the codes stand for (may hold values no row uses, and repeats).
    dtype : str
        The column's dtype in the caller's library, for error messages.
    rounded : bool
        Integers with missing values, read as float64, some past 2**53 and so not held exactly: fine to
        bin, refused where they are read by value (``gpucal.encoding``), where ids would merge.
    """

    values: Any
    categories: np.ndarray | None
    dtype: str
    rounded: bool = False

    @property
    def is_numeric(self) -> bool:
        """True for a numeric column, False for one read by value."""
        return self.categories is None


@dataclass(frozen=True)
class ParsedInput:
    """Result of :func:`parse_input`: the score array, the feature columns and the input's description."""

    info: InputInfo
    score: Any
    features: dict[Hashable, Column] = field(default_factory=dict)


@dataclass(frozen=True)
class _Frame:
    """A dataframe seen through its column names and a per-column converter (nothing copied yet)."""

    family: str
    names: list[Hashable]
    n_rows: int
    get: Callable[[Hashable], Any]  # the raw 1-D column of the caller's library
    index: Any = None
    positional: bool = False  # a 2-D array: its columns are named 0, 1, ... by position


# --------------------------------------------------------------------------------------------------
# The ladder


def _module(x: Any) -> str:
    return type(x).__module__.split(".")[0]


def input_family(x: Any, name: str = "X") -> str:
    """Return the family of ``x`` (one of :data:`FAMILIES`) without importing any library.

    Python sequences, objects with ``__array__`` and ``dict`` of columns count as ``"numpy"``; a
    ``dict`` of cupy arrays as ``"cupy"``. scipy sparse matrices are refused (``TypeError``).
    """
    module = _module(x)
    if isinstance(x, np.ndarray):
        return "numpy"
    elif is_cupy_array(x):
        return "cupy"
    elif module in ("pandas", "cudf", "polars", "pyarrow"):
        return module
    elif module == "scipy":  # before Mapping: a DOK sparse matrix is a dict
        kind = type(x).__qualname__
        msg = f"{name}: sparse input ({kind}) is not supported; pass a dense array or a dataframe"
        raise TypeError(msg)
    elif isinstance(x, Mapping):
        return "cupy" if any(is_cupy_array(v) for v in x.values()) else "numpy"
    elif (isinstance(x, Sequence) and not isinstance(x, str | bytes)) or hasattr(x, "__array__"):
        return "numpy"  # a sequence, or an object numpy converts (the ``__array__`` protocol)
    msg = (
        f"{name}: unsupported type {type(x).__module__}.{type(x).__qualname__}; expected a pandas, cudf, "
        "polars or pyarrow dataframe, a dict of columns, or a 1-D array/Series of scores"
    )
    raise TypeError(msg)


def _as_frame_or_1d(x: Any, name: str) -> _Frame | Any:
    """Return a :class:`_Frame` for a dataframe, or the 1-D object itself for a score array."""
    family = input_family(x, name)
    kind = type(x).__name__
    if family in ("numpy", "cupy"):
        if isinstance(x, Mapping):
            return _mapping_frame(x, family, name)
        arr = x if is_cupy_array(x) else np.asarray(x)
        return _array_frame(arr, family) if arr.ndim == 2 else _array_1d(arr, name)
    elif family == "pandas":
        return _pandas_frame(x, name) if kind == "DataFrame" else _check_series(x, kind, name)
    elif family == "cudf":
        return _cudf_frame(x, name) if kind == "DataFrame" else _check_series(x, kind, name)
    elif family == "polars":
        return _polars_frame(x, name) if kind == "DataFrame" else _check_series(x, kind, name)
    # pyarrow: input_family has already raised for anything else
    return _arrow_frame(x, name) if kind in ("Table", "RecordBatch") else _check_series(x, kind, name)


def _check_series(x: Any, kind: str, name: str) -> Any:
    if kind not in ("Series", "Array", "ChunkedArray") and not kind.endswith("Array"):
        msg = (
            f"{name}: unsupported type {type(x).__module__}.{kind}; "
            "expected a dataframe or a 1-D Series/Array"
        )
        if kind == "LazyFrame":
            msg += " (call .collect() first)"
        raise TypeError(msg)
    return x


def _array_1d(x: Any, name: str) -> Any:
    arr = x if is_cupy_array(x) else np.asarray(x)
    if arr.ndim == 0:
        msg = f"{name}: expected a dataframe or a 1-D array of scores, got the scalar {x!r}"
        raise ValueError(msg)
    if arr.ndim != 1:
        msg = (
            f"{name}: a {arr.ndim}-D array has no columns to read; pass a dataframe (or a dict of "
            "columns) with a score column and feature columns, a 2-D array with integer score_col / "
            "feature_cols, or a 1-D score array"
        )
        raise ValueError(msg)
    return arr


def _array_frame(arr: Any, family: str) -> _Frame:
    """A 2-D numpy or cupy array as a frame whose column names are the positions 0, 1, ...

    Each column is copied out contiguous (a column of a C-ordered array is a strided view), as the
    kernels read their inputs.
    """
    xp = array_namespace(arr)
    columns: list[Hashable] = list(range(arr.shape[1]))
    return _Frame(family, columns, arr.shape[0], lambda j: xp.ascontiguousarray(arr[:, j]), positional=True)


def prediction_name(input_names: Sequence[Hashable]) -> str:
    """Return :data:`PREDICTION_NAME`, or ``"calibrated_<k>"`` for the first ``k`` not in ``input_names``."""
    taken = set(input_names)
    candidate, k = PREDICTION_NAME, 0
    while candidate in taken:
        k += 1
        candidate = f"{PREDICTION_NAME}_{k}"
    return candidate


def _check_unique_names(names: list[Hashable], name: str) -> None:
    dup = [c for c, count in Counter(names).items() if count > 1]
    if dup:
        listed = ", ".join(sorted(map(repr, dup)))
        msg = f"{name}: duplicate column names {listed}; column names must be unique"
        raise ValueError(msg)


def _pandas_frame(x: Any, name: str) -> _Frame:
    names = list(x.columns)
    _check_unique_names(names, name)
    return _Frame("pandas", names, len(x), lambda c: x[c], index=x.index)


def _cudf_frame(x: Any, name: str) -> _Frame:
    names = list(x.columns)
    _check_unique_names(names, name)
    return _Frame("cudf", names, len(x), lambda c: x[c], index=x.index)


def _polars_frame(x: Any, name: str) -> _Frame:
    return _Frame("polars", list(x.columns), x.height, x.get_column)


def _arrow_frame(x: Any, name: str) -> _Frame:
    names = list(x.column_names)
    _check_unique_names(names, name)
    return _Frame("pyarrow", names, x.num_rows, x.column)


def _mapping_frame(x: Mapping[Hashable, Any], family: str, name: str) -> _Frame:
    cols = {k: _array_1d(v, f"{name}[{k!r}]") for k, v in x.items()}
    lengths = {k: int(v.shape[0]) for k, v in cols.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{k!r} has {n}" for k, n in lengths.items())
        msg = f"{name}: columns have different numbers of rows: {shown}"
        raise ValueError(msg)
    return _Frame(family, list(cols), next(iter(lengths.values()), 0), cols.__getitem__)


# --------------------------------------------------------------------------------------------------
# One column to numbers or codes, per family


def as_column(x: Any, name: str) -> Column:
    """Convert one 1-D column of any family to a :class:`Column` (the encoder's input form).

    Numbers (int, uint, float; nullable ints become float64 with NaN for missing) stay numeric.
    Read by value: booleans, strings, pandas/polars categoricals and enums, pyarrow dictionaries,
    and numpy/pandas object columns. Dates, times and nested types raise ``TypeError``.
    """
    family = input_family(x, name)
    if family in ("numpy", "cupy"):
        return _array_column(_array_1d(x, name), name)
    elif family == "pandas":
        return _pandas_column(x, name)
    elif family == "cudf":
        return _cudf_column(x, name)
    elif family == "polars":
        return _polars_column(x, name)
    return _arrow_column(x, name)


def _unsupported_dtype(name: str, dtype: Any) -> TypeError:
    msg = (
        f"{name}: unsupported dtype {dtype}; "
        "feature columns must hold numbers, booleans, strings or categories"
    )
    return TypeError(msg)


def _bool_column(values: Any, dtype: str) -> Column:
    xp = array_namespace(values)
    return Column(values.astype(xp.int8), np.array([False, True]), dtype)


def _array_column(arr: Any, name: str) -> Column:
    kind = arr.dtype.kind
    if kind == "b":
        return _bool_column(arr, str(arr.dtype))
    if kind in "iuf":
        return Column(arr, None, str(arr.dtype))
    if kind in "OUS" and not is_cupy_array(arr):
        return _factorize_objects(arr, name)
    raise _unsupported_dtype(name, arr.dtype)


def _factorize_objects(values: Any, name: str) -> Column:
    """Codes by value for host strings/objects (NaN, None and pd.NA are missing)."""
    import pandas as pd

    try:
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
    except TypeError as exc:  # unhashable values such as lists
        msg = (
            f"{name}: cannot encode its values by value ({exc}); feature columns must hold numbers or strings"
        )
        raise TypeError(msg) from exc
    return Column(codes, np.asarray(uniques, dtype=object), str(values.dtype))


def _pandas_column(s: Any, name: str) -> Column:
    import pandas as pd

    dtype = s.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        return Column(s.cat.codes.to_numpy(), s.cat.categories.to_numpy(), str(dtype))
    if isinstance(dtype, pd.ArrowDtype):
        import pyarrow as pa

        return _arrow_column(pa.array(s.array), name)
    if pd.api.types.is_bool_dtype(dtype):
        codes = s.to_numpy(dtype=np.int8, na_value=-1) if s.hasnans else s.to_numpy(dtype=np.int8)
        return Column(codes, np.array([False, True]), str(dtype))
    if pd.api.types.is_complex_dtype(dtype):
        raise _unsupported_dtype(name, dtype)
    if pd.api.types.is_numeric_dtype(dtype):
        # numpy integers hold no NaN: pandas would still write and scan a mask of the rows to say so
        if not (isinstance(dtype, np.dtype) and dtype.kind in "iu") and s.hasnans:
            integers = pd.api.types.is_integer_dtype(dtype) and bool(s.notna().any())
            rounded = integers and _past_float_exact(s.min(), s.max())
            return Column(s.to_numpy(dtype=np.float64, na_value=np.nan), None, str(dtype), rounded)
        return Column(s.to_numpy(dtype=getattr(dtype, "numpy_dtype", dtype)), None, str(dtype))
    if pd.api.types.is_string_dtype(dtype) or pd.api.types.is_object_dtype(dtype):
        return _factorize_objects(s, name)
    raise _unsupported_dtype(name, dtype)


#: Integers up to this size are exact in float64, the form of a numeric column with missing values.
MAX_EXACT_INTEGER = 2**53


def _past_float_exact(low: Any, high: Any) -> bool:
    """Whether integers from ``low`` to ``high`` (None: no value) leave float64's exact range."""
    if low is None or high is None:
        return False
    return max(abs(int(low)), abs(int(high))) > MAX_EXACT_INTEGER


def _polars_column(s: Any, name: str) -> Column:
    import polars as pl

    dtype = s.dtype
    if dtype == pl.Boolean:
        return Column(s.cast(pl.Int8).fill_null(-1).to_numpy(), np.array([False, True]), str(dtype))
    if dtype.is_integer() or dtype.is_float():
        rounded = dtype.is_integer() and s.null_count() > 0 and _past_float_exact(s.min(), s.max())
        return Column(s.to_numpy(), None, str(dtype), rounded)  # nulls become NaN
    if dtype == pl.Decimal:
        return Column(s.cast(pl.Float64).to_numpy(), None, str(dtype))
    if dtype in (pl.String, pl.Categorical, pl.Enum, pl.Null):
        require_pyarrow(f"column {name!r}: a polars {dtype} column")  # handed over as an Arrow array
        return _arrow_column(s.to_arrow(), name)
    raise _unsupported_dtype(name, dtype)


def _arrow_column(a: Any, name: str) -> Column:
    import pyarrow as pa
    import pyarrow.compute as pc

    t = a.type
    if pa.types.is_null(t):
        return Column(np.full(len(a), -1, dtype=np.int8), np.array([], dtype=object), str(t))
    if pa.types.is_boolean(t):
        codes = pc.fill_null(pc.cast(a, pa.int8()), -1)
        return Column(codes.to_numpy(), np.array([False, True]), str(t))
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        rounded = False
        if pa.types.is_decimal(t) or a.null_count:
            if pa.types.is_integer(t):
                bounds = pc.min_max(a)
                rounded = _past_float_exact(bounds["min"].as_py(), bounds["max"].as_py())
            # Unsafe: ids past 2**53 round (marked ``rounded``) rather than fail in Arrow's cast.
            a = pc.cast(a, pa.float64(), safe=False)  # nulls become NaN below
        return Column(a.to_numpy(zero_copy_only=False), None, str(t), rounded)
    if not pa.types.is_dictionary(t):
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)):
            raise _unsupported_dtype(name, t)
        a = pc.dictionary_encode(a)
    if isinstance(a, pa.ChunkedArray):
        a = a.unify_dictionaries().combine_chunks() if a.num_chunks else pa.array([], type=a.type)
    codes = pc.fill_null(pc.cast(a.indices, pa.int64()), -1).to_numpy()
    categories = a.dictionary.to_numpy(zero_copy_only=False)
    if a.dictionary.null_count:  # a null entry in the dictionary is a missing value, not a category
        null_entry = np.flatnonzero(a.dictionary.is_null().to_numpy(zero_copy_only=False))
        codes = np.where(np.isin(codes, null_entry), -1, codes)
    return Column(codes, np.asarray(categories, dtype=object), str(t))


def cudf_to_pandas(column: Any) -> Any:
    """A cudf series as a pandas one on the host: an integer or boolean one with nulls in pandas'
    nullable dtype (``Int64``, ``boolean``), every other as cudf's default gives it.

    cudf's default reads an integer column with nulls as floats (ids past 2**53 merge, and the encoder
    bins what it reads by value on the device); its nullable conversion is refused for other kinds
    (categoricals, dates) and turns missing strings and floats into ``pd.NA``, which pandas hashes
    otherwise than ``None`` and NaN.
    """
    nullable = getattr(column.dtype, "kind", "") in ("i", "u", "b") and cudf_has_nulls(column)
    return column.to_pandas(nullable=nullable)


def column_to_pandas(column: Any) -> Any:
    """A cudf, polars or pyarrow column as a pandas one on the host: an integer or boolean column with
    nulls in pandas' nullable dtype, as a pandas column of them is (the libraries' own conversions
    give floats: ids past 2**53 merge, and 3 reads 3.0), every other as the library converts it."""
    module = _module(column)
    if module == "cudf":
        return cudf_to_pandas(column)
    if module == "polars":
        kind = column.dtype
        if (kind.is_integer() or str(kind) == "Boolean") and column.null_count():
            return _arrow_to_pandas(column.to_arrow())
        return column.to_pandas()
    return _arrow_to_pandas(column)


def _arrow_to_pandas(a: Any) -> Any:
    """A pyarrow array as pandas, its integers or booleans with nulls in pandas' nullable dtype."""
    import pandas as pd
    import pyarrow as pa

    t = a.type
    if a.null_count and (pa.types.is_integer(t) or pa.types.is_boolean(t)):
        # pyarrow's names ("int64", "uint8", "bool") spell pandas' nullable ones capitalised.
        nullable = "boolean" if pa.types.is_boolean(t) else str(t).capitalize().replace("Uint", "UInt")
        return a.to_pandas(types_mapper=lambda _: pd.api.types.pandas_dtype(nullable))
    return a.to_pandas()


def _cudf_column(s: Any, name: str) -> Column:
    """cudf Series -> Column, on the device. Not exercised by CI (no GPU); keep it small.

    Strings go through cudf's own categorical conversion so that only the (small) category list
    is copied to the host.
    """
    dtype = s.dtype
    kind = getattr(dtype, "kind", "")
    if kind == "b":
        if s.has_nulls:
            return Column(s.astype("int8").fillna(-1).to_cupy(), np.array([False, True]), str(dtype))
        return _bool_column(s.to_cupy(), str(dtype))
    if kind in "iuf" and kind:
        if s.has_nulls:
            present = s.null_count < len(s)  # an all-null column has no min to read
            rounded = kind in "iu" and present and _past_float_exact(s.min(), s.max())
            return Column(s.astype("float64").to_cupy(na_value=np.nan), None, str(dtype), rounded)
        return Column(s.to_cupy(), None, str(dtype))
    if str(dtype) in ("object", "str", "string") or str(dtype) == "category":
        cat = s if str(dtype) == "category" else s.astype("category")
        codes = cat.cat.codes.astype("int32").where(cat.notna(), -1).to_cupy()
        # The categories in their own dtype, as the pandas branch keeps them (grouped folds hash them).
        return Column(codes, cat.cat.categories.to_pandas().to_numpy(), str(dtype))
    if str(dtype).startswith("decimal"):  # read as float64, as pandas, polars and pyarrow decimals are
        return Column(s.astype("float64").to_cupy(na_value=np.nan), None, str(dtype))
    raise _unsupported_dtype(name, dtype)


# --------------------------------------------------------------------------------------------------
# Public entry points


def describe_input(X: Any, *, score_col: Hashable = "score", name: str = "X") -> InputInfo:
    """Describe ``X`` (family, rows, index, output name) without converting any column."""
    obj = _as_frame_or_1d(X, name)
    if isinstance(obj, _Frame):
        return InputInfo(obj.family, obj.n_rows, obj.index, prediction_name(obj.names))
    family = input_family(X, name)
    series_name = getattr(obj, "name", None)
    return InputInfo(family, len(obj), getattr(obj, "index", None), prediction_name([series_name]))


def frame_columns(
    X: Any, columns: Sequence[Hashable] | None = None, *, name: str = "X"
) -> dict[Hashable, Column]:
    """Return the named columns of a dataframe (all of them when ``columns`` is None) as :class:`Column`.

    ``X`` may also be a ``dict`` whose values are already :class:`Column` (what :func:`parse_input`
    returns as ``features``); it is then only checked, not converted.

    Raises
    ------
    TypeError
        ``X`` is not a dataframe or ``dict`` of columns, or a column has an unsupported dtype.
    KeyError
        A requested column is missing (the message lists the missing and the available columns).
    """
    if isinstance(X, Mapping) and X and all(isinstance(v, Column) for v in X.values()):
        names = list(X)
        get: Callable[[Hashable], Any] = X.__getitem__
    else:
        obj = _as_frame_or_1d(X, name)
        if not isinstance(obj, _Frame):
            msg = f"{name}: expected a dataframe or a dict of columns, got a 1-D {type(X).__qualname__}"
            raise TypeError(msg)
        names, get = obj.names, obj.get
    wanted = names if columns is None else list(columns)
    missing = [c for c in wanted if c not in names]
    if missing:
        msg = f"{name}: column(s) {missing} not found; available columns: {names}"
        raise KeyError(msg)
    out = {c: get(c) for c in wanted}
    return {c: v if isinstance(v, Column) else as_column(v, f"{name}[{c!r}]") for c, v in out.items()}


def column_names(X: Any, name: str = "X") -> list[Hashable] | None:
    """The column names of a dataframe, ``dict`` of columns or 2-D array (positions); None for 1-D ``X``
    and for an ``(n, 1)`` array, which is the score (:func:`parse_input`), not a column beside it."""
    obj = _as_frame_or_1d(X, name)
    if not isinstance(obj, _Frame) or (obj.positional and len(obj.names) == 1):
        return None
    return obj.names


def numeric_values(col: Column) -> Any:
    """A :class:`Column`'s values as float64 numbers (NaN: missing), or None when it holds none.

    A column read by value whose values are all numbers (booleans as 0 and 1, the Python ints of an
    object column) gives them; a column of strings or other categories has no numeric values (None).
    """
    xp = array_namespace(col.values)
    if col.is_numeric:
        return xp.asarray(col.values, dtype=xp.float64)
    categories = col.categories
    if categories is None or not all(isinstance(c, int | float | np.number | np.bool_) for c in categories):
        return None
    table = xp.asarray(np.array([float(c) for c in categories] + [np.nan]))
    codes = xp.asarray(col.values, dtype=xp.int64)
    return table[xp.where(codes < 0, len(categories), codes)]


def named_columns(value: Any, names: Sequence[Hashable], what: str) -> list[Hashable]:
    """A parameter naming one column or several (``score_col``, ``feature_cols``), as a list of names.

    A tuple that is a column's name (MultiIndex columns name their columns by tuples) is one name, as is
    a string or any value that is not iterable (a number); a list, a range, another tuple or an array
    lists several. A one-shot iterator (a generator) is refused: an estimator reads its parameter
    more than once, and the second read would find it empty.
    """
    if isinstance(value, Iterator):
        msg = (
            f"{what}: a one-shot iterator ({type(value).__name__}) is read empty the second time; pass a list"
        )
        raise TypeError(msg)
    if isinstance(value, tuple):
        return [value] if value in names else list(value)
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        return [value]
    return list(value)


def default_feature_names(names: Sequence[Hashable], score_col: Any) -> list[Hashable]:
    """Every column of ``names`` but the score (a name, or a list of them) and :data:`ORACLE_COLUMNS`: the
    candidates for default features, before a fit takes the label and weight columns out
    (``gpucal.encoding.features``)."""
    scores = named_columns(score_col, names, "score_col")
    return [c for c in names if c not in scores and c not in ORACLE_COLUMNS]


def resolve_feature_names(
    names: list[Hashable], score_col: Any, feature_cols: Any, name: str = "X"
) -> list[Hashable]:
    """``feature_cols`` checked against the columns ``names`` of ``X``; None gives the default candidates.

    Raises ``ValueError`` for a name listed twice or a score column listed, ``KeyError`` for a name that
    is not a column (the message lists the columns).
    """
    if feature_cols is None:
        return default_feature_names(names, score_col)
    cols = named_columns(feature_cols, names, "feature_cols")
    _check_unique_names(cols, "feature_cols")
    scores = named_columns(score_col, names, "score_col")
    listed = [c for c in scores if c in cols]
    if listed:
        msg = f"feature_cols: lists the score column {listed[0]!r}; the score cannot also be a feature"
        raise ValueError(msg)
    missing = [c for c in cols if c not in names]
    if missing:
        msg = f"feature_cols: column(s) {missing} not found in {name}; available columns: {names}"
        raise KeyError(msg)
    return cols


def parse_input(
    X: Any,
    *,
    score_col: Hashable = "score",
    feature_cols: Sequence[Hashable] | str | None = None,
    score_kind: str = "probability",
    require_features: bool = False,
    allow_empty: bool = False,
    name: str = "X",
    scan: bool = True,
) -> ParsedInput:
    """Split ``X`` into its validated score array and its feature columns.

    Parameters
    ----------
    X : dataframe, dict of columns, 2-D array, or 1-D array
        A pandas, cudf, polars or pyarrow dataframe, or a ``dict`` of 1-D columns; a 2-D numpy or
        cupy array, its columns named by position; or, when no features are needed, a 1-D array or
        Series of scores.
    score_col : hashable, default="score"
        Name of the score column of a dataframe (its position for a 2-D array). Ignored for a 1-D
        ``X`` and for an ``(n, 1)`` array unless it is 0: either is the score itself.
    feature_cols : list of hashable, str or None, default=None
        Feature column names; None means every column except ``score_col`` and
        :data:`ORACLE_COLUMNS` (a fit first takes the label and weight columns out too:
        :func:`gpucal.encoding.resolve_feature_cols`). A single string is one column name. ``[]``
        means no features.
    score_kind : {"probability", "logit"}, default="probability"
        Probabilities must lie in [0, 1]; logits (margins) only need to be finite.
    require_features : bool, default=False
        Raise when no feature column is left (for calibrators that condition on features).
    allow_empty : bool, default=False
        Accept an ``X`` with no rows (prediction on an empty batch); fitting never allows it.
    name : str, default="X"
        How ``X`` is called in error messages.
    scan : bool, default=True
        Read the score's values to check them; ``False`` leaves them to the caller's compiled pass
        (``scan`` of :func:`gpucal._validation.check_scores`).

    Returns
    -------
    ParsedInput
        ``score``: float64 1-D numpy array (cupy for cudf/cupy inputs); ``features``: an ordered
        ``dict`` of :class:`Column`; ``info``: the :class:`InputInfo` used to build outputs.

    Raises
    ------
    TypeError
        ``X`` or a column has an unsupported type.
    KeyError
        ``score_col`` or a name in ``feature_cols`` is not a column (the message lists the columns).
    ValueError
        Duplicate column names, the score column listed as a feature, no rows, no features when
        required, or a score that is not finite / outside [0, 1] (the message names the column and
        the first bad row).
    """
    obj = _as_frame_or_1d(X, name)
    if isinstance(obj, _Frame) and obj.positional and score_col not in obj.names:
        if not obj.names:  # scikit-learn's wording for an array without columns
            msg = f"{name}: 0 feature(s) (shape=({obj.n_rows}, 0)) while a minimum of 1 is required."
            raise ValueError(msg)
        if len(obj.names) != 1:
            msg = (
                f"{name}: a 2-D array of {len(obj.names)} columns has no column names; set score_col "
                "(and feature_cols) to column positions, e.g. score_col=0, or pass a dataframe"
            )
            raise KeyError(msg)
        score_col = 0  # an (n, 1) array is the score, as scikit-learn's calibrators take it
    if isinstance(obj, _Frame):
        if score_col not in obj.names:
            msg = (
                f"{name}: score column {score_col!r} not found (set score_col=); "
                f"available columns: {obj.names}"
            )
            raise KeyError(msg)
        cols = resolve_feature_names(obj.names, score_col, feature_cols, name)
        info = InputInfo(obj.family, obj.n_rows, obj.index, prediction_name(obj.names))
        score_name = f"{name}[{score_col!r}]"
        raw_score = obj.get(score_col)
        features = {c: as_column(obj.get(c), f"{name}[{c!r}]") for c in cols}
    else:
        if feature_cols:
            msg = f"feature_cols: {name} is a 1-D score array and has no columns; pass a dataframe instead"
            raise ValueError(msg)
        index, series_name = getattr(obj, "index", None), getattr(obj, "name", None)
        info = InputInfo(input_family(X, name), len(obj), index, prediction_name([series_name]))
        score_name, raw_score, features = name, obj, {}
    if not allow_empty:
        check_not_empty(info.n_rows, name)
    if require_features and not features:
        msg = f"{name}: no feature columns; this calibrator needs at least one (see feature_cols)"
        raise ValueError(msg)
    score = check_scores(raw_score, score_name, kind=score_kind, scan=scan)
    if features:
        array_namespace(score, *(c.values for c in features.values()))  # one device for every column
    return ParsedInput(info, score, features)


def wrap_output(
    values: Any,
    info: InputInfo,
    *,
    name: Hashable | None = None,
    output_type: str = "input",
    fresh: bool = False,
) -> Any:
    """Return the 1-D result ``values`` (numpy or cupy) in the family chosen by the precedence rule.

    Parameters
    ----------
    values : numpy.ndarray or cupy.ndarray
        One value per input row.
    info : InputInfo
        From :func:`parse_input` or :func:`describe_input` on the call's ``X``.
    name : hashable, optional
        Series name; defaults to ``info.name`` (:data:`PREDICTION_NAME`, never an input column's).
    output_type : {"input", "numpy", "cupy", "pandas", "cudf", "polars", "pyarrow"}, default="input"
        ``"input"`` returns ``info.family``; anything else overrides it (module docstring).
    fresh : bool, default=False
        ``values`` is a new array no one else holds: a pandas Series wraps it instead of copying it
        (pandas copies a numpy array by default, 80 MB for 1e7 rows).
    """
    if output_type not in OUTPUT_TYPES:
        msg = f"The 'output_type' parameter must be one of {OUTPUT_TYPES}. Got {output_type!r} instead."
        raise ValueError(msg)
    matches = values.ndim == 1 and values.shape[0] == info.n_rows
    check_invariant(matches, "result does not match the input rows")
    family = info.family if output_type == "input" else output_type
    name = info.name if name is None else name
    index = info.index if family == info.family else None
    if family == "numpy":
        return to_numpy(values)
    elif family == "cupy":
        return _to_cupy(values)
    elif family == "pandas":
        import pandas as pd

        return pd.Series(to_numpy(values), index=index, name=name, copy=not fresh)
    elif family == "cudf":
        import cudf

        return cudf.Series(_to_cupy(values), index=index, name=name)
    elif family == "polars":
        import polars as pl

        return pl.Series("" if name is None else str(name), to_numpy(values))
    import pyarrow as pa

    return pa.array(to_numpy(values))


def _to_cupy(values: Any) -> Any:
    if is_cupy_array(values):
        return values
    import cupy

    return cupy.asarray(values)
