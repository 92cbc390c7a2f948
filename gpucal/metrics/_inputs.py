"""Turn what users pass to a metric into checked arrays on one device.

Labels, probabilities and weights go through ``gpucal._validation`` (one wording for every error). A
field (the values of one feature) is factorised to dense int32 codes here with pandas or cupy: the
shared encoder (``gpucal.encoding``) will take this over once it lands.

Dask: every public metric carries :func:`accepts_dask`, the one place where a call with dask
collections (labels, probabilities, weights or a field given as dask DataFrames, Series or Arrays)
is routed to its distributed twin in ``gpucal.distributed.metrics``; nothing else in a metric knows
about dask.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from gpucal._backend import array_namespace, is_cupy_array
from gpucal._validation import (
    check_consistent_length,
    check_labels,
    check_not_empty,
    check_probabilities,
    check_same_index,
    check_sample_weight,
)
from gpucal.rows._checks import check_partition_weight
from gpucal.rows._collections import any_dask

F = TypeVar("F", bound=Callable[..., Any])


def accepts_dask(metric: F) -> F:
    """Let ``metric`` take dask collections: such calls go to the distributed twin of the same name.

    The twin (``gpucal.distributed.metrics``) takes the same arguments and returns the same value as
    the metric on the concatenated rows, up to the order of floating-point additions. Importing it
    (and dask) happens on the first dask call only.
    """

    @functools.wraps(metric)
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        if any_dask(*args, *kwargs.values()):
            from gpucal.distributed.metrics import distributed_metric

            return distributed_metric(metric.__name__)(*args, **kwargs)
        return metric(*args, **kwargs)

    return dispatch  # type: ignore[return-value]


@dataclass(frozen=True)
class Rows:
    """Checked metric inputs: labels ``y``, probabilities ``p`` and weights ``w`` (None: all ones).

    ``indexed`` keeps the arguments as given (by name), so that a field can be checked against their
    pandas index (:func:`gpucal._validation.check_same_index`).
    """

    y: Any
    p: Any
    w: Any
    xp: ModuleType
    indexed: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.p.shape[0])

    @property
    def total_weight(self) -> float:
        return float(self.n if self.w is None else self.w.sum())

    def weights(self) -> Any:
        """Return the weights as an array (ones when none were given)."""
        return self.xp.ones(self.n, dtype=self.xp.float64) if self.w is None else self.w


def check_rows(
    y_true: Any,
    y_prob: Any,
    sample_weight: Any,
    *,
    allow_soft: bool = True,
    label_name: str = "y_true",
) -> Rows:
    """Validate ``(y_true, y_prob, sample_weight)``; keep ``w = None`` so unit weights cost nothing.

    pandas inputs must share one index (:func:`gpucal._validation.check_same_index`).
    """
    indexed = {label_name: y_true, "y_prob": y_prob, "sample_weight": sample_weight}
    check_same_index(**indexed)
    p = check_probabilities(y_prob, "y_prob")
    y = check_labels(y_true, label_name, allow_soft=allow_soft)
    xp = array_namespace(y, p)
    n = check_consistent_length(**{label_name: y, "y_prob": p})
    check_not_empty(n, label_name)
    w = None if sample_weight is None else check_sample_weight(sample_weight, n, xp=xp)
    return Rows(y=y, p=p, w=w, xp=xp, indexed=indexed)


def check_partition_rows(
    y_true: Any,
    y_prob: Any,
    sample_weight: Any,
    *,
    allow_soft: bool = True,
    label_name: str = "y_true",
) -> Rows:
    """:func:`check_rows` for one partition of distributed rows: it may be empty or weigh nothing.

    The whole data set must have rows and some weight; the distributed metric checks that on the
    reduced sums. Row numbers in error messages count from the partition's first row. pandas
    partitions must share one index, as whole inputs must (:func:`check_rows`).
    """
    check_same_index(**{label_name: y_true, "y_prob": y_prob, "sample_weight": sample_weight})
    p = check_probabilities(y_prob, "y_prob")
    y = check_labels(y_true, label_name, allow_soft=allow_soft)
    xp = array_namespace(y, p)
    n = check_consistent_length(**{label_name: y, "y_prob": p})
    w = None if sample_weight is None else check_partition_weight(sample_weight, n, xp)
    return Rows(y=y, p=p, w=w, xp=xp)


def factorize_values(values: Any, name: str) -> tuple[Any, Any]:
    """Return ``(codes, uniques)`` of a 1-D column: int codes (numpy or cupy) and its distinct values.

    Uniques are in order of first appearance, on the host. See :func:`factorize`.
    """
    module = type(values).__module__.split(".")[0]
    if is_cupy_array(values):
        uniques, codes = array_namespace(values).unique(values, return_inverse=True)
        uniques = uniques.get()
    else:
        if module == "cudf":
            # Host round trip until gpucal.encoding factorises on the device.
            values = values.to_pandas()
        elif module in ("polars", "pyarrow"):
            values = values.to_pandas()
        elif not isinstance(values, pd.Series | pd.Index | pd.Categorical):
            values = np.asarray(values)
        if values.ndim != 1:
            msg = f"{name}: expected a 1-D array, got shape {tuple(values.shape)}"
            raise ValueError(msg)
        codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return codes, uniques


def factorize(values: Any, name: str, rows: Rows) -> tuple[Any, Any]:
    """Return ``(codes, uniques)``: int32 codes on the rows' device and the distinct values (host).

    Any 1-D column works: numbers, strings, booleans, pandas categoricals, polars / pyarrow / cudf
    columns. Missing values (NaN, None) form one group of their own rather than being dropped. A
    pandas column must carry the rows' index (:func:`gpucal._validation.check_same_index`).
    """
    check_same_index(**rows.indexed, **{name: values})
    codes, uniques = factorize_values(values, name)
    check_consistent_length(y_prob=rows.p, **{name: codes})
    codes = rows.xp.asarray(codes, dtype=rows.xp.int32)
    return codes, uniques
