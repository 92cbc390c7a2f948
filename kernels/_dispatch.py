"""Host-side helpers shared by the kernel dispatchers: backend choice, array families, dtype pinning.

``kernels`` sits below ``gpucal`` and does not import it; these few lines repeat the rule of
``gpucal._backend``: the GPU path is taken exactly when the data already lives on the GPU (cupy),
decided from the array's type without importing cupy.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

BACKENDS = ("auto", "oracle", "cpu", "cuda")
CODE_DTYPES = (np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32))


def is_cupy_array(x: Any) -> bool:
    """Return True when ``x`` is a cupy ndarray, without importing cupy."""
    return type(x).__module__.split(".")[0] == "cupy"


def resolve_backend(backend: str, *arrays: Any) -> str:
    """Resolve ``backend``: ``"auto"`` is ``"cuda"`` iff any array is a cupy array, else ``"cpu"``."""
    if backend not in BACKENDS:
        msg = f"The 'backend' parameter must be one of {BACKENDS}. Got {backend!r} instead."
        raise ValueError(msg)
    if backend == "auto":
        return "cuda" if any(is_cupy_array(a) for a in arrays if a is not None) else "cpu"
    return backend


def namespace_of(x: Any) -> ModuleType:
    """Return ``cupy`` for a cupy array (imported only then), else ``numpy``."""
    if is_cupy_array(x):
        import cupy

        return cupy
    return np


def to_host(x: Any) -> np.ndarray:
    """Return ``x`` as a numpy array, copying from the GPU when it is a cupy array."""
    return x.get() if is_cupy_array(x) else np.asarray(x)


def float_dtype(*arrays: Any) -> np.dtype:
    """Return float32 when every given array is float32, else float64 (the dtype the kernels compile for)."""
    given = [np.dtype(a.dtype) for a in arrays if a is not None]
    return np.dtype(np.float32) if given and all(d == np.float32 for d in given) else np.dtype(np.float64)


def code_dtype(dtype: Any, name: str) -> np.dtype:
    """Return the kernel dtype of integer codes: int8/int16/int32 kept, other integers go to int32."""
    dtype = np.dtype(dtype)
    if dtype in CODE_DTYPES:
        return dtype
    if dtype.kind in "iu":
        return np.dtype(np.int32)
    msg = f"{name} must hold integer codes (int8, int16 or int32). Got dtype {dtype} instead."
    raise TypeError(msg)


def readonly(a: np.ndarray) -> np.ndarray:
    """Return a read-only view of ``a`` (no copy) to pass to a CPU twin that only reads it.

    numba compiles a separate specialisation for a read-only array (what pandas' copy-on-write
    ``to_numpy`` gives) and a writable one (what numpy computes); passing every input read-only keeps
    one, which halves the first call's compilation of kernels fed from both.
    """
    view = a.view()
    view.flags.writeable = False
    return view


def check_1d(x: Any, name: str, n_rows: int) -> None:
    """Raise ``ValueError`` unless ``x`` is one-dimensional with ``n_rows`` entries."""
    if x.ndim != 1 or x.shape[0] != n_rows:
        msg = f"{name} must be one-dimensional with {n_rows} rows. Got shape {tuple(x.shape)} instead."
        raise ValueError(msg)


def check_count(value: Any, name: str, minimum: int) -> int:
    """Return ``value`` as an int after checking it is an integer ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        msg = f"The '{name}' parameter must be an int in [{minimum}, inf). Got {value!r} instead."
        raise ValueError(msg)
    return int(value)
