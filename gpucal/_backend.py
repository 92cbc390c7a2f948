"""Which device an array lives on, and the array namespace that goes with it.

GPU libraries are detected by the type's module name before anything is imported, so that
``import gpucal`` and every CPU code path never import cupy, cudf or dask_cuda.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Literal

import numpy as np

Device = Literal["cpu", "gpu"]
DEVICES = ("auto", "cpu", "gpu")


class DeviceUnavailableError(RuntimeError):
    """``device="gpu"`` (or data on the GPU) was asked for where no usable CUDA GPU is: a setting the user
    can change, unlike the internal errors that are plain ``RuntimeError``."""


def missing_extra(error: ImportError) -> bool:
    """Whether ``error`` is gpucal's own word that an optional dependency is not installed (its message
    names the extra to install), not an import that failed: Python names the module of a failed import
    (``error.name``), gpucal's messages name none."""
    return error.name is None


def is_cupy_array(x: Any) -> bool:
    """Return True when ``x`` is a cupy ndarray, without importing cupy."""
    return type(x).__module__.split(".")[0] == "cupy"


def array_namespace(*arrays: Any) -> ModuleType:
    """Return ``cupy`` when any argument is a cupy array, else ``numpy``.

    Mixing host and device arrays is an error: a silent copy in either direction would hide a
    slow path.
    """
    on_gpu = [is_cupy_array(a) for a in arrays if a is not None]
    if any(on_gpu):
        if not all(on_gpu):
            msg = "arrays are on different devices (some cupy, some numpy); move them to one device first"
            raise TypeError(msg)
        import cupy

        return cupy
    return np


def gpu_available() -> bool:
    """Return True when a real CUDA GPU can be used: cupy imports and sees a device.

    ``numba.cuda.is_available()`` is not used: under the simulator it is True without a GPU.
    """
    try:
        import cupy
    except ImportError:
        return False
    try:
        return bool(cupy.is_available())
    except Exception:  # a driver or runtime error means no usable GPU
        return False


def resolve_device(device: str, *arrays: Any) -> Device:
    """Resolve the ``device`` parameter (``"auto"``, ``"cpu"`` or ``"gpu"``) for these arrays.

    ``"auto"`` takes the GPU path exactly when the data is already on the GPU.
    """
    if device not in DEVICES:
        msg = f"The 'device' parameter must be one of {DEVICES}. Got {device!r} instead."
        raise ValueError(msg)
    data_on_gpu = any(is_cupy_array(a) for a in arrays if a is not None)
    if device == "auto":
        return "gpu" if data_on_gpu else "cpu"
    if device == "gpu" and not gpu_available():
        msg = "device='gpu' was requested but no CUDA GPU is usable (install gpucal[gpu] on a GPU machine)"
        raise DeviceUnavailableError(msg)
    return device  # type: ignore[return-value]


def to_numpy(x: Any) -> np.ndarray:
    """Copy a device array to the host; return numpy arrays unchanged."""
    if is_cupy_array(x):
        return x.get()
    return np.asarray(x)
