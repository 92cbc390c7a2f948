"""Input checks of distributed fits: every row input a dask collection; one partition's rows, where an
empty or weightless partition is fine."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from gpucal._backend import array_namespace
from gpucal._validation import as_1d_array, check_finite, check_sample_weight
from gpucal.rows.collections import is_dask_collection


def check_partition_weight(sample_weight: Any, n: int, xp: ModuleType, name: str = "sample_weight") -> Any:
    """:func:`~gpucal._validation.check_sample_weight` that lets a partition's weights be all zero."""
    w = as_1d_array(sample_weight, name)
    if w.shape[0] == n and bool((w == 0).all()):
        return array_namespace(w).asarray(w, dtype=np.float64)
    if n and not bool((w > 0).any()):  # NaN or negative somewhere: the full check words the error
        check_finite(w, name)
    return check_sample_weight(w, n, name, xp=xp)


def check_all_dask(inputs: dict[str, Any]) -> None:
    """Raise ``TypeError`` naming the given inputs that are not dask collections (None is not given)."""
    local = [name for name, v in inputs.items() if v is not None and not is_dask_collection(v)]
    if local:
        msg = (
            f"{', '.join(local)}: not dask collections while other inputs are; pass every row input of "
            "a distributed fit as a dask collection"
        )
        raise TypeError(msg)
