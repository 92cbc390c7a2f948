"""Row checks for one partition of distributed data, where an empty or weightless partition is fine."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from gpucal._backend import array_namespace
from gpucal._validation import as_1d_array, check_finite, check_sample_weight


def check_partition_weight(sample_weight: Any, n: int, xp: ModuleType, name: str = "sample_weight") -> Any:
    """:func:`~gpucal._validation.check_sample_weight` that lets a partition's weights be all zero."""
    w = as_1d_array(sample_weight, name)
    if w.shape[0] == n and bool((w == 0).all()):
        return array_namespace(w).asarray(w, dtype=np.float64)
    if n and not bool((w > 0).any()):  # NaN or negative somewhere: the full check words the error
        check_finite(w, name)
    return check_sample_weight(w, n, name, xp=xp)
