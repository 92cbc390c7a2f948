"""Feature columns to dense integer codes, the input of the group-sum kernel.

Each feature column ``j`` becomes codes in ``[0, n_values_[j])``:

========================  ======================================================================
column                    codes
========================  ======================================================================
numbers (float, and       quantile bins ``0 .. k-1`` (``k <= n_bins``), then the missing code ``k``
integers with many
distinct values)
by value (strings,        the distinct values seen at fit time, sorted, ``0 .. k-1``; the missing
categoricals, enums,      code ``k``; with ``handle_unseen="separate"`` (default) the unseen code
booleans, integer codes,  ``k + 1``
numbers listed in
``categorical_cols``)
========================  ======================================================================

Rules
-----
* **Integers.** With ``categorical_cols=None`` (the default) an integer column (any int or uint
  dtype, nullable ones included) is read by value when it has at most one distinct value per
  ``ROWS_PER_VALUE`` (20) rows and at most ``MAX_AUTO_VALUES`` (50,000) distinct values: in CTR,
  credit and clinical tables such a column is a code (a site, a region, an hour), and quantile bins
  would merge unrelated codes. Other integer columns (counts, amounts, timestamps with many distinct
  values) and every float column are binned. A list ``categorical_cols`` replaces the rule: exactly
  the numeric columns it names are read by value (``[]``: every number binned). ``kinds_`` says how
  each column was read.
* **Missing** (NaN, None, null, pd.NA, a categorical's code -1) always has its own code, present
  even when the fit data had no missing value, so new data with gaps needs no refit.
* **Bins.** The cut points are the quantiles at levels ``1/n_bins, ..., (n_bins-1)/n_bins`` of the
  finite fit values by the inverted CDF (numpy's ``method="inverted_cdf"``: the smallest fit value
  whose share of the rows, or of ``sample_weight``, reaches the level), with duplicates and cuts
  equal to the minimum removed. Cuts are thus fit values and every bin holds fit rows; a value
  carrying more than ``1/n_bins`` of the weight starts a bin, so a column whose distinct values
  all do (few distinct values) gets one bin per value. Bin ``b`` is ``[c_{b-1}, c_b)`` with
  ``c_{-1} = -inf`` and ``c_k = +inf``: values outside the fit range, and +-inf, fall into the
  first or last bin.
* **Unseen values** (a category that no fit row had) follow ``handle_unseen``:
  ``"separate"`` gives them their own code, which no fit row has, so any statistic fitted on the
  codes is empty there and a calibrator falls back to its feature-free answer instead of borrowing
  another group's; ``"missing"`` gives them the missing code; ``"error"`` raises, naming the column
  and an unseen value. Numbers are never unseen (see bins).

**Crosses** (``interactions``): a pair of columns becomes one more coded column after the others, its
codes the pair's combined levels; levels lighter than ``min_cross_count`` and pairs never seen at fit
time share one pooled code, and the crosses' codes add up to at most ``max_cross_levels`` (pairs past
it are dropped with a warning). ``gpucal.encoding.crosses`` has the rules.

Codes come back as one C-ordered ``(n_rows, n_features + n_crosses)`` array of the smallest of int8, int16 and
int32 that holds every code, on the device the data is on (numpy or cupy).

This module is the estimator, ``FeatureEncoder``; one column's coding is ``gpucal.encoding.codings``
and the per-block summaries a fit merges are ``gpucal.encoding.summaries``.
"""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from gpucal._backend import array_namespace, to_numpy
from gpucal._frames import Column, frame_columns
from gpucal._params import Interval, Options, check_param
from gpucal._validation import check_consistent_length, check_not_empty, check_sample_weight
from gpucal.encoding.codings import (
    CODE_DTYPES,
    KIND_BINS,
    KIND_VALUES,
    MAX_LOOKUP_SPAN,
    Coding,
    codes_dtype,
    coding_from_dict,
    map_codes_dtype,
    plain_categories,
    plain_column_name,
    smallest_code_dtype,
    transform_bins,
)
from gpucal.encoding.crosses import (
    Cross,
    check_interactions,
    count_pairs,
    cross_from_dict,
    cross_to_dict,
    merge_pair_counts,
    pair_labels,
    select_crosses,
    transform_crosses,
)
from gpucal.encoding.summaries import (
    INTEGERS,
    VALUES,
    as_codes,
    bin_edges_from_values,
    check_exact_values,
    fit_bins,
    integer_categories,
    is_integer_column,
    max_auto_values,
    merge_summaries,
    observed_categories,
    observed_values,
    read_block,
    summarise_block,
)
from gpucal.kernels.lookup import VALUE_DTYPES, lookup_codes, lookup_columns
from gpucal.rows import Rows, any_dask, as_rows
from gpucal.rows.checks import check_partition_weight
from gpucal.rows.collections import collection_kind

HANDLE_UNSEEN = ("separate", "missing", "error")
#: Default weight (rows, when unweighted) a cross level needs to keep a code of its own.
MIN_CROSS_COUNT = 10.0
#: Default cap on the codes of all crosses together: with 32 bins a column has up to 33 codes, so about
#: 90 full pairs of such columns (28 pairs of 8 columns take under 31,000).
MAX_CROSS_LEVELS = 100_000
_PARAMS = ("n_bins", "categorical_cols", "handle_unseen")
_CROSS_PARAMS = ("interactions", "min_cross_count", "max_cross_levels")
_KEYS = ("format", "version", "params", "columns")
_FORMAT = "gpucal.FeatureEncoder"
_FORMAT_VERSION = 1


def _value_kinds(values: Any) -> set[str]:
    """The kinds of ``values`` read by value: ``"number"`` (ints and floats, not booleans), ``"text"``
    (strings) or ``"other"``, one check per type."""
    kinds = set()
    for kind in set(map(type, values)):
        if issubclass(kind, str):
            kinds.add("text")
        elif issubclass(kind, bool | np.bool_):
            kinds.add("other")
        elif issubclass(kind, int | float | np.integer | np.floating):
            kinds.add("number")
        else:
            kinds.add("other")
    return kinds


def _as_kind(values: Any, kinds: set[str]) -> list[Any] | None:
    """``values`` read as the one kind of ``kinds``: numbers as their text (a whole float as an int's,
    ``7.0`` as ``"7"``), text as the number it spells (``"07"`` as 7; other text kept); None for another
    kind."""
    if kinds == {"text"}:
        return [
            str(int(v)) if isinstance(v, float | np.floating) and float(v).is_integer() else str(v)
            for v in values
        ]
    if kinds == {"number"}:
        return [_spelt_number(v) for v in values]
    return None


#: Most digits before the point of a number :func:`_spelt_number` reads (ids past 2**128 stay text).
MAX_SPELT_DIGITS = 40


def _spelt_number(text: Any) -> Any:
    """The number a string spells, an int where it is whole (exactly: ``"9007199254740993.0"`` is
    2**53 + 1); anything else as it is (a ``Decimal`` of 1.90 is not read as 1)."""
    if not isinstance(text, str):
        return text
    try:
        number = Decimal(text.strip())
    except InvalidOperation:
        return text
    if not number.is_finite() or number.adjusted() > MAX_SPELT_DIGITS:
        # "1e999999999" would be an int of a billion digits: no fitted id is one.
        return text
    return int(number) if number == number.to_integral_value() else float(number)


class FeatureEncoder(BaseEstimator):
    """Encode feature columns as dense integer codes: by value, or by quantile bins for numbers.

    Parameters
    ----------
    n_bins : int, default=32
        Most quantile bins per numeric column (fewer when values repeat). 1 puts every number in
        one bin.
    categorical_cols : list of hashable, str or None, default=None
        Numeric columns to encode by value instead of by bins. None: integer columns with few
        distinct values (at most one per 20 rows, and 50,000) by value, other numbers binned (module
        docstring, "Integers"); a list: exactly those numeric columns by value; ``[]``: every number
        binned. Non-numeric columns are always encoded by value.
    handle_unseen : {"separate", "missing", "error"}, default="separate"
        What a category that did not occur at fit time becomes:

        - ``"separate"``: its own code (``unseen_codes_``), never held by fit rows;
        - ``"missing"``: the missing code;
        - ``"error"``: ``ValueError`` naming the column and an unseen value.
    interactions : list of pairs of column names, "all" or None, default=None
        Pairs of columns to cross: each becomes one more coded column after the columns of ``X``, in the
        order given (see the module docstring); ``"all"``: every pair, in column order. A pair naming an
        unknown column, a column with itself, or an entry that is not two names raises ``ValueError``
        naming it.
    min_cross_count : float, default=10.0
        Least weight (``sample_weight`` summed; rows when unweighted) of a cross level with a code of its
        own; lighter levels share the cross's pooled code.
    max_cross_levels : int, default=100000
        Most codes of all crosses together (each cross has its kept levels plus the pooled code): bounds
        the model's size and the fit's memory. Pairs that would pass it are dropped with a
        ``UserWarning`` naming them.

    Attributes
    ----------
    feature_names_ : list of hashable
        The encoded columns, in output order.
    kinds_ : list of {"bins", "values"}
        How each column is encoded.
    ordered_ : list of bool
        Per column, whether its regular codes follow the order of what they stand for: a number's bins,
        or an integer column's values read by value by the integer rule (not those of a column named in
        ``categorical_cols``, nor categories). Feature-aware Platt's ``l2_smooth`` reads it.
    n_values_ : numpy.ndarray of int64, shape (n_features,)
        Number of codes per column of ``X``, missing (and unseen) codes included.
    interactions_ : list of tuples
        The crossed pairs kept, in output order (empty without ``interactions``).
    n_codes_ : numpy.ndarray of int64, shape (n_features + n_crosses,)
        Number of codes per output column (``n_values_``, then each cross's): the kernel's ``n_values``.
    missing_codes_ : numpy.ndarray of int64, shape (n_features,)
        The missing code of each column.
    unseen_codes_ : numpy.ndarray of int64, shape (n_features,)
        The unseen code of each column, -1 where there is none (bins, or ``handle_unseen`` other
        than ``"separate"``).
    bin_edges_ : dict
        Column name -> float64 cut points (bins columns only).
    categories_ : dict
        Column name -> object array of the category values, code order (value columns only).
    codes_dtype_ : numpy.dtype
        int8, int16 or int32: the smallest that holds every code.

    Notes
    -----
    Rules for bins, missing and unseen values are in the module docstring. The fitted state is
    plain data: :meth:`to_dict` / :meth:`from_dict` round-trip it through JSON (no pickle).

    Examples
    --------
    Encode a string column by value and a numeric column into two quantile bins.

    >>> import pandas as pd
    >>> X = pd.DataFrame({"country": ["FR", "DE", None, "FR"], "age": [20.0, 30.0, 40.0, 50.0]})
    >>> enc = FeatureEncoder(n_bins=2).fit(X)
    >>> enc.transform(X)
    array([[1, 0],
           [0, 1],
           [2, 1],
           [1, 1]], dtype=int8)
    >>> enc.describe_codes("country")
    ['DE', 'FR', 'missing', 'unseen']
    >>> enc.describe_codes("age")
    ['[-inf, 30.0)', '[30.0, inf]', 'missing']
    >>> enc.describe_columns()
    'read by value: country (2 values); binned: age (2 bins)'
    """

    def __init__(
        self,
        *,
        n_bins: int = 32,
        categorical_cols: Sequence[Hashable] | str | None = None,
        handle_unseen: str = "separate",
        interactions: Sequence[Sequence[Hashable]] | str | None = None,
        min_cross_count: float = MIN_CROSS_COUNT,
        max_cross_levels: int = MAX_CROSS_LEVELS,
    ) -> None:
        self.n_bins = n_bins
        self.categorical_cols = categorical_cols
        self.handle_unseen = handle_unseen
        self.interactions = interactions
        self.min_cross_count = min_cross_count
        self.max_cross_levels = max_cross_levels

    # ----------------------------------------------------------------------------------------------
    # Parameters and fitted state

    _parameter_constraints: ClassVar[dict[str, Interval | Options]] = {
        "n_bins": Interval(int, 1, None),
        "handle_unseen": Options(*HANDLE_UNSEEN),
        "min_cross_count": Interval(float, 0, None),
        "max_cross_levels": Interval(int, 1, None),
    }

    def _check_params(self) -> list[Hashable]:
        """Check the parameters against the table (one template); return ``categorical_cols`` as a list."""
        for name, constraint in self._parameter_constraints.items():
            check_param(type(self).__name__, name, getattr(self, name), constraint)
        cols = self.categorical_cols
        if cols is None:
            return []
        if isinstance(cols, str):
            return [cols]
        if not isinstance(cols, Sequence):
            msg = (
                "The 'categorical_cols' parameter of FeatureEncoder must be a list of column names, "
                f"a str or None. Got {cols!r} instead."
            )
            raise TypeError(msg)
        return list(cols)

    def _set_fitted(self, codings: list[Coding], crosses: Sequence[Cross] = ()) -> None:
        self._codings = codings
        self._crosses = list(crosses)
        self.feature_names_ = [c.name for c in codings]
        self.kinds_ = [c.kind for c in codings]
        self.ordered_ = [c.ordered for c in codings]
        self.n_values_ = np.array([c.n_values for c in codings], dtype=np.int64)
        self.missing_codes_ = np.array([c.missing_code for c in codings], dtype=np.int64)
        self.unseen_codes_ = np.array([c.unseen_code for c in codings], dtype=np.int64)
        self.bin_edges_ = {c.name: c.edges for c in codings if c.kind == KIND_BINS}
        self.categories_ = {c.name: c.categories for c in codings if c.kind == KIND_VALUES}
        self.interactions_ = [(self.feature_names_[c.left], self.feature_names_[c.right]) for c in crosses]
        self.n_codes_ = np.array([*self.n_values_, *(c.n_values for c in crosses)], dtype=np.int64)
        self.codes_dtype_ = codes_dtype(codings)
        if crosses:
            # A cross has at most max_cross_levels codes, and no more than the int32 a pair key's table holds.
            crossed = smallest_code_dtype(max(c.n_values for c in crosses) - 1) or np.dtype(np.int32)
            self.codes_dtype_ = max(self.codes_dtype_, crossed, key=lambda d: d.itemsize)
        # Lookup tables of integer-valued columns, built at their first transform (not saved).
        self._value_tables: dict[int, tuple[int, np.ndarray, int] | None] = {}

    # ----------------------------------------------------------------------------------------------
    # fit / transform

    def fit(self, X: Any, *, sample_weight: Any = None) -> FeatureEncoder:
        """Learn bins and categories from the columns of ``X``.

        Parameters
        ----------
        X : dataframe or dict
            pandas, cudf, polars or pyarrow dataframe, a ``dict`` of 1-D columns, or the
            ``features`` dict of :func:`gpucal._frames.parse_input`. Every column is encoded.
        sample_weight : array-like of shape (n_rows,), optional
            Row weights for the quantile cut points (rows of weight 0 are ignored there).
            Categories are every value that occurs, whatever its weight.

        Returns
        -------
        FeatureEncoder
            ``self``, fitted.

        Notes
        -----
        A dask DataFrame ``X`` (with ``sample_weight`` partitioned like it) is fitted in one pass over
        its partitions (:meth:`fit_rows`): the same categories and quantile cuts as on the computed rows.
        """
        if any_dask(X, sample_weight):
            if collection_kind(X) != "frame" or not hasattr(X, "columns"):
                msg = f"X: expected a dask DataFrame, got {type(X).__module__}.{type(X).__qualname__}"
                raise TypeError(msg)
            self._check_columns(list(X.columns))
            return self.fit_rows(as_rows(X=X, sample_weight=sample_weight))
        categorical = self._check_params()
        columns = frame_columns(X)
        if not columns:
            msg = "X: no feature columns to encode"
            raise ValueError(msg)
        self._check_columns(list(columns))
        n_rows = check_consistent_length(**{repr(k): c.values for k, c in columns.items()})
        check_not_empty(n_rows, "X")
        xp = array_namespace(*(c.values for c in columns.values()))
        w = None if sample_weight is None else check_sample_weight(sample_weight, n_rows, xp=xp)
        codings = []
        for name, col in columns.items():
            if not col.is_numeric or name in categorical:
                check_exact_values(col, name)
                cats = observed_values(col)
            elif self.categorical_cols is None and is_integer_column(col):
                cats = observed_values(col)
                if len(cats) > max_auto_values(n_rows):
                    cats = None
                else:
                    check_exact_values(col, name)
                    cats = integer_categories(cats)
            else:
                cats = None
            if cats is None:
                codings.append(Coding(name, KIND_BINS, edges=fit_bins(col.values, w, int(self.n_bins))))
            else:
                numeric = col.is_numeric and name not in categorical
                codings.append(
                    Coding(
                        name,
                        KIND_VALUES,
                        categories=cats,
                        has_unseen_code=self._separate,
                        numeric_values=numeric,
                    )
                )
        self._set_fitted(codings)
        pairs = self._cross_pairs()
        if pairs:
            from gpucal.rows.reduce import max_distinct_keys

            labels = pair_labels(pairs, self.feature_names_)
            tables = count_pairs(self.transform(columns), w, pairs, max_distinct_keys(), labels)
            self._fit_crosses(codings, tables)
        return self

    def _cross_pairs(self) -> list[tuple[int, int, int, int]]:
        """``(left, right, n_left, n_right)`` of each pair of ``interactions``, checked against the fitted
        columns."""
        pairs = check_interactions(self.interactions, self.feature_names_, "interactions")
        index = {name: j for j, name in enumerate(self.feature_names_)}
        n_values = self.n_values_
        return [(index[a], index[b], int(n_values[index[a]]), int(n_values[index[b]])) for a, b in pairs]

    def _fit_crosses(self, codings: list[Coding], tables: list[Any]) -> None:
        """Keep each pair's levels from its merged weight table; set the fitted state with the crosses."""
        crosses = select_crosses(
            [(left, right) for left, right, _, _ in self._cross_pairs()],
            self.n_values_,
            tables,
            names=self.feature_names_,
            min_count=float(self.min_cross_count),
            max_levels=int(self.max_cross_levels),
        )
        self._set_fitted(codings, crosses)

    def fit_rows(
        self, rows: Rows, read: Callable[..., tuple[Any, Any]] | None = None, *args: Any
    ) -> FeatureEncoder:
        """Fit over :class:`gpucal.rows.Rows`: each block's ``(features, sample_weight)`` is
        ``read(block, *args)`` (default: the block's ``X`` and ``sample_weight``, as ``as_rows`` names
        them; ``read`` must be module-level, picklable).

        Rows held here in one block are :meth:`fit` on that block; other rows take one pass of block
        summaries merged over blocks (``gpucal.encoding.summaries``) and :meth:`fit_summaries`, which
        gives the same encoder.

        Returns
        -------
        FeatureEncoder
            ``self``, fitted.
        """
        read = read_block if read is None else read
        block = rows.single_block()
        if block is not None:
            X, w = read(block, *args)
            return self.fit(X, sample_weight=w)
        from gpucal.rows.reduce import max_distinct_keys

        categorical = frozenset(self._check_params())
        limit = max_distinct_keys()
        combine = functools.partial(merge_summaries, limit=limit)
        auto = self.categorical_cols is None
        n_rows, summaries = rows.reduce(summarise_block, combine, read, args, categorical, limit, auto)
        check_not_empty(n_rows, "X")
        names = list(summaries)
        self._check_columns(names)
        value_weights, categories, numeric = {}, {}, set()
        for name, (kind, summary) in summaries.items():
            if kind == VALUES:
                categories[name] = summary
            elif kind == INTEGERS and summary.keys[0].shape[0] <= max_auto_values(n_rows):
                categories[name] = integer_categories(summary.keys[0])
                numeric.add(name)
            else:  # BINS, or INTEGERS with too many values: the values of positive weight
                weighted = summary.stats[:, 0] > 0
                value_weights[name] = (summary.keys[0][weighted], summary.stats[weighted, 0])
        self.fit_summaries(names, value_weights=value_weights, categories=categories, numeric_values=numeric)
        pairs = self._cross_pairs()
        if pairs:
            labels = pair_labels(pairs, self.feature_names_)
            merge = functools.partial(merge_pair_counts, limit=limit, labels=labels)
            tables = rows.reduce(_count_block_pairs, merge, read, args, self, pairs, limit, labels)
            self._fit_crosses(self._codings, tables)
        return self

    def ordered_columns(self, columns: Mapping[Hashable, Column]) -> list[Hashable]:
        """The columns a fit on ``columns`` (``frame_columns``' ``Column``) reads in order (``ordered_``),
        found without fitting: the numeric ones not named in ``categorical_cols``, binned or read by value
        by the integer rule. ``categorical_cols`` is checked as :meth:`fit` checks it (``TypeError``;
        ``KeyError`` naming the columns ``X`` lacks)."""
        self._check_columns(list(columns))
        named = set(self._check_params())
        return [name for name, col in columns.items() if col.is_numeric and name not in named]

    def _check_columns(self, names: list[Hashable]) -> None:
        """Raise ``KeyError`` for ``categorical_cols`` that are not among the columns ``names``."""
        unknown = [c for c in self._check_params() if c not in names]
        if unknown:
            msg = f"categorical_cols: column(s) {unknown} are not columns of X; columns: {names}"
            raise KeyError(msg)

    def fit_summaries(
        self,
        columns: Sequence[Hashable],
        *,
        value_weights: Mapping[Hashable, tuple[np.ndarray, np.ndarray]],
        categories: Mapping[Hashable, np.ndarray],
        numeric_values: Collection[Hashable] = (),
    ) -> FeatureEncoder:
        """Fit from per-column summaries instead of rows: what :meth:`fit_rows` gathers over blocks.

        Parameters
        ----------
        columns : sequence of hashable
            Column names in output order; each is in exactly one of the two mappings.
        value_weights : mapping
            Bins columns: ``(values, weights)``, the distinct finite values of positive weight,
            increasing, and the total weight (or row count) of each.
        categories : mapping
            Value columns: every category value some row uses (any order, repeats allowed).
        numeric_values : collection of hashable, default=()
            The value columns that are integers read by value by the integer rule (``Coding.ordered``).

        Returns
        -------
        FeatureEncoder
            ``self``, fitted exactly as :meth:`fit` on the rows the summaries describe, crosses aside
            (their levels are counted over rows: :meth:`fit_rows`).
        """
        self._check_params()
        codings = []
        for name in columns:
            if name in value_weights:
                values, weights = value_weights[name]
                edges = bin_edges_from_values(values, weights, int(self.n_bins))
                codings.append(Coding(name, KIND_BINS, edges=edges))
            else:
                cats = np.asarray(categories[name], dtype=object)
                observed = observed_categories((np.arange(len(cats)), cats))
                codings.append(
                    Coding(
                        name,
                        KIND_VALUES,
                        categories=observed,
                        has_unseen_code=self._separate,
                        numeric_values=name in numeric_values,
                    )
                )
        if not codings:
            msg = "X: no feature columns to encode"
            raise ValueError(msg)
        self._set_fitted(codings)
        return self

    @property
    def crosses_(self) -> tuple[Cross, ...]:
        """The fitted crosses (:class:`~gpucal.encoding.crosses.Cross`: the pair's columns and kept keys),
        in output order."""
        check_is_fitted(self, "feature_names_")
        return tuple(self._crosses)

    def keep_crosses(self, kept: Sequence[int]) -> FeatureEncoder:
        """Return a fitted copy with only the crosses ``kept`` (indices among ``interactions_``), in order:
        ``transform`` then gives the columns of ``X`` and those crosses, codes unchanged. As in
        :meth:`keep_columns`, ``codes_dtype_`` stays this encoder's, so the copy's predictions read its
        codes with the kernels its fit compiled."""
        check_is_fitted(self, "feature_names_")
        crosses = [self._crosses[i] for i in kept]
        encoder = type(self)(**self.get_params())
        encoder.interactions = [self.interactions_[i] for i in kept]
        encoder._set_fitted(self._codings, crosses)
        encoder.codes_dtype_ = self.codes_dtype_
        return encoder

    def keep_columns(self, kept: Sequence[Hashable]) -> tuple[FeatureEncoder, np.ndarray]:
        """Return a fitted copy with only the columns ``kept`` (names, in fitted order) and the crosses
        between two of them, and the indices of its code columns among this encoder's.

        Each column's coding and each cross's kept keys are fitted on that column or pair alone, so the
        copy's codes are this encoder's columns at those indices, and :meth:`fit` on the kept columns
        gives the same copy (``categorical_cols`` narrowed to them), unless ``max_cross_levels`` dropped
        crosses here that the kept pairs alone would have had room for. ``codes_dtype_`` stays this
        encoder's, which holds the copy's codes: its codes are read by the kernels already compiled for
        these (numba compiles a kernel per code dtype). A copy saved and loaded gets the smallest again.
        """
        check_is_fitted(self, "feature_names_")
        index = [self.feature_names_.index(name) for name in kept]
        new = {old: j for j, old in enumerate(index)}
        crossed = [c for c, cross in enumerate(self._crosses) if cross.left in new and cross.right in new]
        crosses = [
            replace(self._crosses[c], left=new[self._crosses[c].left], right=new[self._crosses[c].right])
            for c in crossed
        ]
        encoder = type(self)(**self.get_params())
        if self.categorical_cols is not None:
            encoder.categorical_cols = [c for c in self._check_params() if c in kept]
        if self.interactions is not None:
            encoder.interactions = [self.interactions_[c] for c in crossed]
        encoder._set_fitted([self._codings[j] for j in index], crosses)
        encoder.codes_dtype_ = self.codes_dtype_
        n_first = len(self._codings)
        return encoder, np.r_[index, n_first + np.asarray(crossed, dtype=np.int64)].astype(np.int64)

    @property
    def _separate(self) -> bool:
        return self.handle_unseen == "separate"

    def transform(self, X: Any, *, code_maps: Sequence[np.ndarray] | None = None, out: Any = None) -> Any:
        """Return the codes of ``X``'s fitted columns (other columns are ignored).

        Parameters
        ----------
        X : dataframe or mapping of columns
            Holds every fitted column.
        code_maps : sequence of int arrays, optional
            One per fitted column: ``code_maps[j][c]`` replaces code ``c`` of column ``j`` (a tree's
            pooled codes), crosses included. Composed with the encoding into one table read per row
            where it can be (with crosses, applied after the codes are written).
        out : int8, int16 or int32 array of shape (n_rows, d), d >= n_features + n_crosses, optional
            Written in its first ``n_features`` columns (C-contiguous, the input's array family), so a
            caller adding columns of its own writes no second copy.

        Returns
        -------
        numpy.ndarray or cupy.ndarray of shape (n_rows, n_features + n_crosses)
            C-ordered, dtype ``codes_dtype_`` (``out`` when given); column ``j`` in ``[0, n_codes_[j])``:
            the columns of ``X``, then the crosses (read off the columns' codes in the same call).

        Raises
        ------
        KeyError
            A fitted column is missing from ``X``.
        TypeError
            A column fitted as numbers holds non-numeric values now.
        ValueError
            ``handle_unseen="error"`` and a column holds a value not seen at fit time.
        """
        check_is_fitted(self, "feature_names_")
        columns = frame_columns(X, self.feature_names_)
        n_rows = check_consistent_length(**{repr(k): c.values for k, c in columns.items()})
        xp = array_namespace(*(c.values for c in columns.values()))
        width = len(self._codings) + len(self._crosses)
        if out is None:
            dtype = self.codes_dtype_ if code_maps is None else map_codes_dtype(code_maps)
            out = xp.empty((n_rows, width), dtype=dtype)
        elif out.ndim != 2 or out.shape[0] != n_rows or out.shape[1] < width:
            msg = f"out: shape {tuple(out.shape)} cannot hold {n_rows} rows of {width} codes"
            raise ValueError(msg)
        elif np.dtype(out.dtype) not in [np.dtype(d) for d in CODE_DTYPES]:
            msg = f"out: dtype {out.dtype} is not a code dtype (int8, int16 or int32)"
            raise TypeError(msg)
        if code_maps is not None and self._crosses:
            # A cross reads its pair's input codes: map every column once all of them are written.
            codes = self.transform(columns)
            for j in range(width):
                lookup_codes(codes[:, j], 0, np.asarray(code_maps[j]), -1, out, j)
            return out if out.shape[1] == width else out[:, :width]
        lookups: list[tuple[int, Any, tuple[int, np.ndarray, int]]] = []  # written in one pass below
        for j, coding in enumerate(self._codings):
            col = columns[coding.name]
            code_map = None if code_maps is None else np.asarray(code_maps[j])
            if coding.kind == KIND_BINS:
                transform_bins(coding, col, code_map, out, j)
                continue
            check_exact_values(col, coding.name)
            found = self._small_int_lookup(j, col, code_map)
            if found is not None:
                lookups.append((j, col.values, found))
                continue
            codes = self._transform_values(coding, col)
            if code_map is None:
                out[:, j] = codes
            else:
                lookup_codes(codes.astype(self.codes_dtype_, copy=False), 0, code_map, -1, out, j)
        self._write_lookups(lookups, out)
        transform_crosses(self._crosses, out, len(self._codings))
        return out if out.shape[1] == width else out[:, :width]

    def fit_transform(self, X: Any, *, sample_weight: Any = None) -> Any:
        """Fit on ``X``, then return its codes (same as ``fit(X).transform(X)``, converting ``X`` once)."""
        columns = frame_columns(X)
        return self.fit(columns, sample_weight=sample_weight).transform(columns)

    def _transform_values(self, coding: Coding, col: Column) -> Any:
        codes, cats = as_codes(col)
        xp = array_namespace(codes)
        import pandas as pd

        fitted_cats: np.ndarray = coding.categories  # type: ignore[assignment]
        fitted = pd.Index(fitted_cats, dtype="object")
        lookup = np.asarray(fitted.get_indexer(pd.Index(cats, dtype="object")), dtype=np.int64)
        unseen = lookup < 0
        drifted = len(cats) > 0 and len(fitted_cats) > 0 and bool(unseen.all())
        fitted_kinds = _value_kinds(fitted_cats) if drifted else set()
        if drifted and not (_value_kinds(cats) & fitted_kinds):
            # Not one value seen, and of another kind than every fitted one: the column's type changed
            # (ids read as numbers from a CSV, as text from a Parquet file), and every row would read as
            # unseen (predictions moved by up to 0.34). Its values are read as the fitted kind instead;
            # those still unseen (new ids that look like numbers) stay unseen.
            converted = _as_kind(cats, fitted_kinds)
            if converted is not None:
                lookup = np.asarray(fitted.get_indexer(pd.Index(converted, dtype="object")), dtype=np.int64)
                unseen = lookup < 0
            held = np.asarray(cats, dtype=object)[to_numpy(xp.unique(codes[codes >= 0]))]
            if unseen.all() and held.size:
                # Still none seen: new ids, or a column coded again upstream (strings fitted, their
                # integer codes given), which would drop the feature on every row unnoticed. Read from
                # the values rows hold (a category list may name values no row has).
                was, now = (" and ".join(sorted(kinds)) for kinds in (fitted_kinds, _value_kinds(held)))
                warnings.warn(
                    f"X[{coding.name!r}]: held {was} values at fit time and now holds {now} values, none "
                    "seen at fit time: every row reads as an unseen value. Pass the column as it was at "
                    "fit time.",
                    UserWarning,
                    stacklevel=2,
                )
        if unseen.any() and self.handle_unseen == "error":
            counts = to_numpy(xp.bincount(codes[codes >= 0].astype(xp.int64), minlength=len(cats)))
            used_unseen = unseen & (counts > 0)
            if used_unseen.any():
                first = cats[int(np.argmax(used_unseen))]
                msg = (
                    f"X[{coding.name!r}]: {int(counts[used_unseen].sum())} row(s) hold values not seen "
                    f"at fit time (e.g. {first!r}); set handle_unseen='separate' or 'missing' to encode them"
                )
                raise ValueError(msg)
        fallback = coding.unseen_code if coding.has_unseen_code else coding.missing_code
        # Entry -1 (the last one) is the missing code, so missing rows (code -1) need no branch.
        table = np.append(np.where(unseen, fallback, lookup), coding.missing_code).astype(self.codes_dtype_)
        return xp.asarray(table)[codes]

    def _small_int_lookup(
        self, j: int, col: Column, code_map: np.ndarray | None
    ) -> tuple[int, np.ndarray, int] | None:
        """``(low, table, fallback)`` giving column ``j``'s codes (through ``code_map``) by one table read
        per row (:func:`~gpucal.kernels.lookup_codes`); None if it cannot.

        Integer IDs read by value (hours, ad categories, site IDs) are the common case of prediction
        time. When every fitted category is an integer and they span at most ``MAX_LOOKUP_SPAN``
        values, ``table[v - min]`` gives each row's code without hashing or sorting (the general path
        factorises the column first); values outside the span or in its gaps are unseen. The table is
        built once per fitted column and kept.
        """
        values = col.values
        if col.categories is not None or np.dtype(values.dtype) not in VALUE_DTYPES:
            return None
        if j not in self._value_tables:
            self._value_tables[j] = self._value_table(self._codings[j])
        found = self._value_tables[j]
        if found is None:
            return None
        low, table, fallback = found
        if code_map is not None:
            table = np.where(table >= 0, code_map[np.maximum(table, 0)], -1)
            fallback = int(code_map[fallback]) if fallback >= 0 else -1
        return low, table, fallback

    def _write_lookups(self, lookups: list[tuple[int, Any, tuple[int, np.ndarray, int]]], out: Any) -> None:
        """Write the ``(column, values, (low, table, fallback))`` lookups into ``out`` in one pass
        (:func:`~gpucal.kernels.lookup_columns`); raise, naming the column, on a value to reject."""
        if not lookups:
            return
        columns, values, found = zip(*lookups, strict=True)
        lows, tables, fallbacks = zip(*found, strict=True)
        rejected = lookup_columns(values, lows, tables, fallbacks, out, columns)
        for k in np.flatnonzero(rejected):
            j = columns[k]
            unseen = array_namespace(values[k]).asarray(out[:, j] < 0)
            first = int(to_numpy(values[k][unseen][:1])[0])
            msg = (
                f"X[{self._codings[j].name!r}]: {int(rejected[k])} row(s) hold values not seen at fit "
                f"time (e.g. {first!r}); set handle_unseen='separate' or 'missing' to encode them"
            )
            raise ValueError(msg)

    def _value_table(self, coding: Coding) -> tuple[int, np.ndarray, int] | None:
        """``(low, table, fallback)`` of an integer-valued coding: code of value ``low + k`` at ``table[k]``.

        Gaps and values outside the table get the unseen (or missing) code, or ``-1`` to reject them
        when ``handle_unseen="error"``. None when a category is not an integer or they span too many.
        """
        cats = coding.categories
        if cats is None or len(cats) == 0:
            return None
        kinds = set(map(type, cats))  # one check per type, not per category
        if not all(issubclass(k, int | np.integer) and not issubclass(k, bool | np.bool_) for k in kinds):
            return None
        if min(cats) < -(2**63) or max(cats) >= 2**63:  # integers past int64: the general path
            return None
        ints = np.asarray(cats, dtype=np.int64)
        low, high = int(ints.min()), int(ints.max())
        if high - low >= MAX_LOOKUP_SPAN:
            return None
        fallback = -1
        if self.handle_unseen != "error":
            fallback = coding.unseen_code if coding.has_unseen_code else coding.missing_code
        table = np.full(high - low + 1, fallback, dtype=np.int64)
        table[ints - low] = np.arange(len(ints))
        return low, table, fallback

    # ----------------------------------------------------------------------------------------------
    # Reports and plain-data state

    def describe_codes(self, column: Hashable) -> list[str]:
        """Return a label per code of ``column``.

        Bins read ``"[lo, hi)"`` (the last ``"[lo, inf]"``), categories their value as a string; then
        ``"missing"`` and, with ``handle_unseen="separate"``, ``"unseen"``.
        """
        check_is_fitted(self, "feature_names_")
        if column not in self.feature_names_:
            msg = f"column: {column!r} is not an encoded column; encoded columns: {self.feature_names_}"
            raise KeyError(msg)
        coding = self._codings[self.feature_names_.index(column)]
        if coding.kind == KIND_BINS:
            bounds = [-np.inf, *(float(e) for e in coding.edges), np.inf]  # type: ignore[union-attr]
            labels = [f"[{lo!r}, {hi!r})" for lo, hi in itertools.pairwise(bounds)]
            labels[-1] = labels[-1][:-1] + "]"
        else:
            labels = [str(v) for v in coding.categories]  # type: ignore[union-attr]
        labels.append("missing")
        if coding.has_unseen_code:
            labels.append("unseen")
        return labels

    def output_names(self) -> list[str]:
        """A name per column of :meth:`transform`'s codes: each column's (as ``str``), then ``"a x b"``
        for the cross of ``a`` and ``b``."""
        check_is_fitted(self, "feature_names_")
        return [str(n) for n in self.feature_names_] + [f"{a} x {b}" for a, b in self.interactions_]

    def describe_columns(self) -> str:
        """One line saying how each column is read, for fit reports.

        For example ``"read by value: region (50 values), hour (24 values); binned: age (32 bins)"``.
        """
        check_is_fitted(self, "feature_names_")
        by_value = [f"{c.name} ({len(c.categories)} values)" for c in self._codings if c.kind == KIND_VALUES]  # type: ignore[arg-type]
        binned = [f"{c.name} ({c.n_regular} bins)" for c in self._codings if c.kind == KIND_BINS]
        parts = [
            f"{label}: {', '.join(names)}"
            for label, names in (("read by value", by_value), ("binned", binned))
            if names
        ]
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Return the parameters and fitted state as plain JSON-compatible data (lists, numbers, strings).

        Raises ``TypeError`` when a category is not a str, int, float or bool (it could not be
        written as JSON and read back equal).
        """
        check_is_fitted(self, "feature_names_")
        columns: list[dict[str, Any]] = []
        for c in self._codings:
            if c.kind == KIND_BINS:
                edges = c.edges.tolist()  # type: ignore[union-attr]
                columns.append({"name": plain_column_name(c.name), "kind": c.kind, "bin_edges": edges})
            else:
                cats = plain_categories(c.categories, f"X[{c.name!r}]")
                column = {"name": plain_column_name(c.name), "kind": c.kind, "categories": cats}
                if c.numeric_values:
                    column["numeric_values"] = True
                columns.append(column)
        params: dict[str, Any] = {
            "n_bins": int(self.n_bins),
            "categorical_cols": None if self.categorical_cols is None else self._check_params(),
            "handle_unseen": self.handle_unseen,
        }
        data = {"format": _FORMAT, "version": _FORMAT_VERSION, "params": params, "columns": columns}
        if self.interactions is not None:
            names = [plain_column_name(n) for n in self.feature_names_]
            params["interactions"] = [[names[c.left], names[c.right]] for c in self._crosses]
            params["min_cross_count"] = float(self.min_cross_count)
            params["max_cross_levels"] = int(self.max_cross_levels)
            data["crosses"] = [cross_to_dict(c, names) for c in self._crosses]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureEncoder:
        """Rebuild a fitted encoder from :meth:`to_dict`'s output.

        Every part is checked before use (the data may come from a file): a malformed dict raises
        ``ValueError`` naming the part, e.g. ``data['columns'][1]['bin_edges']``.
        """
        if (
            not isinstance(data, Mapping)
            or data.get("format") != _FORMAT
            or data.get("version") != _FORMAT_VERSION
        ):
            found = (
                (data.get("format"), data.get("version"))
                if isinstance(data, Mapping)
                else type(data).__name__
            )
            msg = f"data: not a FeatureEncoder dict (found {found!r}; expected format {_FORMAT!r}, version 1)"
            raise ValueError(msg)
        params, columns = data.get("params"), data.get("columns")
        crossed = isinstance(params, Mapping) and "interactions" in params
        if not isinstance(params, Mapping) or set(params) != {*_PARAMS, *(_CROSS_PARAMS if crossed else ())}:
            msg = (
                "data['params']: expected the keys 'n_bins', 'categorical_cols' and 'handle_unseen' (and, "
                "with crosses, 'interactions', 'min_cross_count' and 'max_cross_levels')"
            )
            raise ValueError(msg)
        if set(data) - {*_KEYS, "crosses"} or crossed != ("crosses" in data):
            msg = "data: expected the keys 'format', 'version', 'params', 'columns' ('crosses' with crosses)"
            raise ValueError(msg)
        if not isinstance(columns, list) or not columns:
            msg = "data['columns']: expected a non-empty list of column codings"
            raise ValueError(msg)
        enc = cls(**params)
        enc._check_params()
        codings = [coding_from_dict(c, f"data['columns'][{i}]", enc._separate) for i, c in enumerate(columns)]
        names = [c.name for c in codings]
        if len(set(names)) != len(names):
            msg = f"data['columns']: duplicate column names in {names}"
            raise ValueError(msg)
        enc._set_fitted(codings)
        if crossed:
            raw = data["crosses"]
            if not isinstance(raw, list) or len(raw) > int(enc.max_cross_levels):
                msg = "data['crosses']: expected a list of crosses"
                raise ValueError(msg)
            crosses = [
                cross_from_dict(c, names, enc.n_values_, f"data['crosses'][{i}]") for i, c in enumerate(raw)
            ]
            if [list(p) for p in check_interactions(params["interactions"], names, "interactions")] != [
                [names[c.left], names[c.right]] for c in crosses
            ]:
                msg = "data['crosses']: the crossed pairs differ from data['params']['interactions']"
                raise ValueError(msg)
            if sum(c.n_values for c in crosses) > int(enc.max_cross_levels):
                msg = f"data['crosses']: more codes than max_cross_levels={enc.max_cross_levels}"
                raise ValueError(msg)
            enc._set_fitted(codings, crosses)
        return enc


def _count_block_pairs(
    block: Any,
    read: Callable[..., tuple[Any, Any]],
    args: tuple[Any, ...],
    encoder: FeatureEncoder,
    pairs: list[tuple[int, int, int, int]],
    limit: int,
    labels: list[str],
) -> list[Any]:
    """One block's weight per pair key of each cross (``crosses.count_pairs`` of the block's codes)."""
    X, w = read(block, *args)
    codes = encoder.transform(X)
    weight = None if w is None else check_partition_weight(w, int(codes.shape[0]), array_namespace(codes))
    return count_pairs(codes, weight, pairs, limit, labels)
