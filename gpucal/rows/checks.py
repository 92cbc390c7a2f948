"""Input checks of distributed fits: every row input a dask collection; one partition's rows, where an
empty or weightless partition is fine."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from gpucal._backend import array_namespace
from gpucal._validation import (
    as_1d_array,
    check_consistent_length,
    check_finite,
    check_labels,
    check_same_index,
    check_sample_weight,
)
from gpucal.rows.collections import is_dask_collection


def check_partition_weight(sample_weight: Any, n: int, xp: ModuleType, name: str = "sample_weight") -> Any:
    """:func:`~gpucal._validation.check_sample_weight` that lets a partition's weights be all zero."""
    w = as_1d_array(sample_weight, name)
    if w.shape[0] == n and bool((w == 0).all()):
        return array_namespace(w).asarray(w, dtype=np.float64)
    if n and not bool((w > 0).any()):  # NaN or negative somewhere: the full check words the error
        check_finite(w, name)
    return check_sample_weight(w, n, name, xp=xp)


def check_labels_and_weights(
    X: Any,
    y: Any,
    sample_weight: Any,
    x_rows: Any,
    *,
    whole: bool,
    xp: ModuleType | None = None,
    names: tuple[str, str, str] = ("X", "y", "sample_weight"),
    scan: bool = True,
) -> tuple[Any, Any, int]:
    """Check one block's labels and weights against its ``X`` (``x_rows``: an array of ``X``'s rows, for
    the length); return the labels, the weights (None when none were given) and the row count.

    ``whole``: the block is all the rows (one machine), checked as a whole; otherwise a partition, whose
    index must match its labels' and whose weights may all be zero. ``xp`` is the namespace the weights
    must be in (default: the labels'); ``names`` are the three inputs' names in messages; ``scan=False``
    leaves the labels' values to the caller's compiled pass (``scan`` of ``gpucal._validation``).
    """
    x_name, y_name, w_name = names
    if not whole:
        check_same_index(**{x_name: X, y_name: y, w_name: sample_weight})
    labels = check_labels(y, y_name, scan=scan)
    n = check_consistent_length(**{x_name: x_rows, y_name: labels})
    xp = array_namespace(labels) if xp is None else xp
    weights = None
    if sample_weight is not None:
        if whole:
            weights = check_sample_weight(sample_weight, n, w_name, xp=xp)
        else:
            weights = check_partition_weight(sample_weight, n, xp, w_name)
    return labels, weights, n


def check_all_dask(inputs: dict[str, Any]) -> None:
    """Raise ``TypeError`` naming the given inputs that are not dask collections (None is not given)."""
    local = [name for name, v in inputs.items() if v is not None and not is_dask_collection(v)]
    if local:
        msg = (
            f"{', '.join(local)}: not dask collections while other inputs are; pass every row input of "
            "a distributed fit as a dask collection"
        )
        raise TypeError(msg)
