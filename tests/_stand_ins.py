"""Stand-ins for GPU objects in tests that run without a GPU."""

from __future__ import annotations

from typing import Any

import numpy as np


class DeviceArray:
    """A cupy array as gpucal's host copies meet it: its module, ``get()``, slicing, and no implicit numpy
    copy (cupy refuses numpy's ``__array__``, so a host path that forgets ``get()`` fails here as there)."""

    __module__ = "cupy"

    def __init__(self, values: np.ndarray) -> None:
        self.values = np.asarray(values)
        self.shape, self.ndim, self.dtype = self.values.shape, self.values.ndim, self.values.dtype

    def get(self) -> np.ndarray:
        return self.values.copy()

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, key: Any) -> DeviceArray:
        return DeviceArray(self.values[key])

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        msg = "Implicit conversion to a NumPy array is not allowed"
        raise TypeError(msg)
