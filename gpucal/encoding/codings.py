"""One column's coding for ``FeatureEncoder`` (``gpucal.encoding``): its cut points or categories.

``Coding`` is how one fitted column maps to codes (its bins' cut points, or its sorted categories, then
the missing code and the unseen code); this module also holds its plain-data form (``coding_from_dict``,
``plain_category``, ``plain_column_name``), the codes' dtype, and the bin codes of a numeric column
(``transform_bins``). The per-block summaries a fit merges are ``gpucal.encoding.summaries``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal._frames import Column
from gpucal.encoding.summaries import plain_value
from gpucal.kernels.lookup import VALUE_DTYPES, lookup_codes, lookup_edges
from gpucal.persistence import MAX_INT_DIGITS

CODE_DTYPES = (np.int8, np.int16, np.int32)  # the dtypes the group-sum kernel takes
KIND_BINS = "bins"
# Integer categories spanning fewer values than this are encoded by a lookup table (4 MiB of int64).
MAX_LOOKUP_SPAN = 1 << 19
KIND_VALUES = "values"


@dataclass(frozen=True)
class Coding:
    """How one column is encoded: quantile cut points or a sorted list of category values."""

    name: Hashable
    kind: str
    edges: np.ndarray | None = None  # float64 cut points (KIND_BINS)
    categories: np.ndarray | None = None  # object array of distinct values (KIND_VALUES)
    has_unseen_code: bool = False
    # KIND_VALUES: the values are numbers read by value by the integer rule (not named in categorical_cols),
    # so their sorted order means something (an age, a tenure in months).
    numeric_values: bool = False

    @property
    def ordered(self) -> bool:
        """Whether the regular codes are in the order of the values they stand for: bins of a number, or
        the sorted values of an integer column read by value by the encoder's integer rule."""
        return self.kind == KIND_BINS or self.numeric_values

    @property
    def n_regular(self) -> int:
        """Number of codes before the missing code."""
        return len(self.edges) + 1 if self.edges is not None else len(self.categories)  # type: ignore[arg-type]

    @property
    def missing_code(self) -> int:
        """The code of a missing value: right after the regular codes."""
        return self.n_regular

    @property
    def unseen_code(self) -> int:
        """The unseen code, or -1 when unseen values have none."""
        return self.n_regular + 1 if self.has_unseen_code else -1

    @property
    def n_values(self) -> int:
        """Number of codes: the regular ones, the missing code and the unseen code (when it has one)."""
        return self.n_regular + 1 + int(self.has_unseen_code)


def coding_from_dict(c: Any, where: str, separate: bool) -> Coding:
    """Check and rebuild one column's coding from plain data."""
    if not isinstance(c, Mapping) or c.get("kind") not in (KIND_BINS, KIND_VALUES):
        msg = f"{where}: expected a dict with 'kind' 'bins' or 'values'"
        raise ValueError(msg)
    name = c.get("name")
    if not isinstance(name, str | int) or isinstance(name, bool):
        msg = f"{where}['name']: expected a str or int column name, got {name!r}"
        raise ValueError(msg)
    if c["kind"] == KIND_BINS:
        raw = c.get("bin_edges")
        ok = isinstance(raw, list) and all(
            isinstance(e, int | float) and not isinstance(e, bool) for e in raw
        )
        edges = np.asarray(raw if ok else [], dtype=np.float64)
        if not ok or not np.isfinite(edges).all() or (np.diff(edges) <= 0).any():
            msg = f"{where}['bin_edges']: expected a list of finite, strictly increasing numbers"
            raise ValueError(msg)
        return Coding(name, KIND_BINS, edges=edges)
    raw = c.get("categories")
    if not isinstance(raw, list) or not all(
        isinstance(v, str | int) or (isinstance(v, float) and math.isfinite(v)) for v in raw
    ):
        msg = f"{where}['categories']: expected a list of str, int, finite float or bool values"
        raise ValueError(msg)
    if len(set(raw)) != len(raw):
        msg = f"{where}['categories']: values must be distinct"
        raise ValueError(msg)
    numeric = c.get("numeric_values", False)
    if not isinstance(numeric, bool) or (numeric and not all(_is_int(v) for v in raw)):
        msg = f"{where}['numeric_values']: expected a bool, true only for integer categories"
        raise ValueError(msg)
    cats = np.empty(len(raw), dtype=object)
    cats[:] = raw
    return Coding(name, KIND_VALUES, categories=cats, has_unseen_code=separate, numeric_values=numeric)


def _is_int(v: Any) -> bool:
    """Whether a loaded category is an integer (JSON's ``true`` is a bool, not an integer category)."""
    return isinstance(v, int) and not isinstance(v, bool)


def transform_bins(coding: Coding, col: Column, code_map: np.ndarray | None, out: Any, j: int) -> None:
    """Write column ``j``'s bin codes (through ``code_map``): the edges at or below a value, NaN missing."""
    if not col.is_numeric:
        msg = (
            f"X[{coding.name!r}]: was numeric at fit time (quantile bins) but now has dtype {col.dtype}; "
            "pass numbers, or refit with the new column"
        )
        raise TypeError(msg)
    values = col.values
    if values.dtype.kind not in "iuf" or values.dtype == np.float16:  # numba has no half floats
        values = values.astype(np.float64)
    table = np.arange(coding.n_values) if code_map is None else code_map
    if np.dtype(values.dtype) in VALUE_DTYPES and values.shape[0]:
        # Integer numbers (distances, days): one table entry per value between the column's extremes
        # replaces a binary search per row, 3 ms instead of 0.1 s per 3e6 rows.
        low, high = int(values.min()), int(values.max())
        if high - low < MAX_LOOKUP_SPAN:
            bins = np.searchsorted(np.asarray(coding.edges), np.arange(low, high + 1), side="right")
            lookup_codes(values, low, np.asarray(table)[bins], -1, out, j)
            return
    lookup_edges(values, coding.edges, table, coding.missing_code, out, j)


def plain_category(v: Any, where: str) -> Any:
    """A category as plain data (str, int, float or bool) for ``to_dict``; TypeError names ``where``."""
    v = plain_value(v)
    if not isinstance(v, str | int | float | bool):
        msg = (
            f"{where}: category {v!r} of type {type(v).__name__} cannot be saved as plain data "
            "(str/int/float/bool)"
        )
        raise TypeError(msg)
    if isinstance(v, int | float):
        _check_savable_numbers([v], where)
    return v


def plain_categories(values: Any, where: str) -> list[Any]:
    """``plain_category`` of every category: one pass over their types when all are plain already (a
    40,000-value column is written by every fit of a search)."""
    entries = list(values)
    kinds = set(map(type, entries))
    if all(issubclass(k, str | int | float | bool) and not issubclass(k, np.generic) for k in kinds):
        if kinds & {int, float}:
            _check_savable_numbers([v for v in entries if type(v) in (int, float)], where)
        return entries
    return [plain_category(v, where) for v in entries]


def _check_savable_numbers(numbers: list[int | float], where: str) -> None:
    """Refuse number categories a model file cannot hold (``TypeError`` naming ``where``): an infinite
    float (JSON has no infinity) or an integer longer than :data:`~gpucal.persistence.MAX_INT_DIGITS`
    digits (saved, its file would not load)."""
    floats = [v for v in numbers if isinstance(v, float)]
    if not all(map(math.isfinite, floats)):
        bad = next(v for v in floats if not math.isfinite(v))
        msg = f"{where}: category {bad!r} cannot be saved (a model file holds finite numbers)"
        raise TypeError(msg)
    largest = max((abs(v) for v in numbers if isinstance(v, int)), default=0)
    if largest >= 10**MAX_INT_DIGITS:
        msg = (
            f"{where}: an integer category of {len(str(largest))} digits cannot be saved (a model file "
            f"holds integers of at most {MAX_INT_DIGITS}); pass such ids as text"
        )
        raise TypeError(msg)


def plain_column_name(name: Any) -> Any:
    """A column name as plain data (str or int) for ``to_dict``."""
    name = plain_value(name)
    if not isinstance(name, str | int) or isinstance(name, bool):
        kind = type(name).__name__
        msg = f"X[{name!r}]: column name of type {kind} cannot be saved as plain data (str or int)"
        raise TypeError(msg)
    return name


def smallest_code_dtype(largest: int) -> np.dtype | None:
    """The smallest kernel dtype whose maximum is at least ``largest``; None when not even int32's is."""
    return next((np.dtype(d) for d in CODE_DTYPES if largest <= np.iinfo(d).max), None)


def map_codes_dtype(code_maps: Sequence[np.ndarray]) -> np.dtype:
    """The smallest kernel dtype holding every code the maps give (int32 at most: ``lookup_codes``
    rejects a code it cannot hold)."""
    largest = max((int(np.max(m, initial=0)) for m in code_maps), default=0)
    return smallest_code_dtype(largest) or np.dtype(np.int32)


def codes_dtype(codings: list[Coding]) -> np.dtype:
    """The smallest kernel dtype whose maximum is at least the largest code."""
    dtype = smallest_code_dtype(max((c.n_values - 1 for c in codings), default=0))
    if dtype is not None:
        return dtype
    worst = max(codings, key=lambda c: c.n_values)
    msg = f"X[{worst.name!r}]: {worst.n_values} distinct codes do not fit in int32"
    raise ValueError(msg)


__all__ = [
    "CODE_DTYPES",
    "KIND_BINS",
    "KIND_VALUES",
    "MAX_LOOKUP_SPAN",
    "Coding",
    "codes_dtype",
    "coding_from_dict",
    "map_codes_dtype",
    "plain_categories",
    "plain_category",
    "plain_column_name",
    "smallest_code_dtype",
    "transform_bins",
]
