r"""``value_range``: the smallest and the largest entry of a float64 array in one pass.

The input checks read every score and label to see that it lies in [0, 1]; numpy's ``min`` and ``max``
are two passes on one core. This is one pass, parallel over fixed chunks of rows:

.. math::

    (\min_i x_i,\ \max_i x_i), \qquad \text{both NaN when some } x_i \text{ is NaN}

(numpy's ``min`` and ``max`` propagate NaN the same way), ``(inf, -inf)`` for an empty array.

Forms, as ``gpucal.kernels.lookup``: the numpy oracle (``x.min()``, ``x.max()``), the numba CPU twin
(parallel over chunks of rows, the chunks' results combined in a fixed order) and, for cupy arrays,
cupy's reductions.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpucal.kernels._dispatch import is_cupy_array, readonly, resolve_backend
from gpucal.kernels.jit import numba, parallel_rows, runs_parallel

#: Rows per chunk of the CPU twin.
CHUNK_ROWS = 1 << 16


def value_range(x: Any, *, backend: str = "auto") -> tuple[float, float]:
    """Return ``(min(x), max(x))`` of a 1-D float64 array; NaN for both when ``x`` holds a NaN.

    Parameters
    ----------
    x : float64 array of shape (n,)
        numpy or cupy; any stride.
    backend : {'auto', 'oracle', 'cpu', 'cuda'}
        'auto' and 'cuda' use cupy's reductions for a cupy array; 'cpu' the numba twin; 'oracle' numpy.
        'auto' on a host array runs the parallel twin where :func:`gpucal.kernels.jit.runs_parallel`
        says so, else numpy (two passes of a millisecond or less, and no serial twin to compile).

    Returns
    -------
    (float, float)
        ``(inf, -inf)`` when ``x`` is empty.
    """
    small = backend == "auto" and not is_cupy_array(x) and not runs_parallel(x.shape[0])
    backend = "oracle" if small else resolve_backend(backend, x)
    if x.ndim != 1 or np.dtype(x.dtype) != np.float64:
        msg = f"x must be a 1-D float64 array. Got {x.dtype}, shape {tuple(x.shape)}."
        raise TypeError(msg)
    if x.shape[0] == 0:
        return math.inf, -math.inf
    if backend in ("cuda", "oracle") or is_cupy_array(x):
        return float(x.min()), float(x.max())
    low, high = _value_range_cpu(readonly(x))
    return float(low), float(high)


@parallel_rows("x")
def _value_range_cpu(x):  # pragma: no cover - compiled; tested against the oracle
    n = x.shape[0]
    n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    lows = np.empty(n_chunks)
    highs = np.empty(n_chunks)
    for c in numba.prange(n_chunks):
        low = np.inf
        high = -np.inf
        nan = False
        for i in range(c * CHUNK_ROWS, min(n, (c + 1) * CHUNK_ROWS)):
            v = x[i]
            low = v if v < low else low
            high = v if v > high else high
            nan |= v != v
        lows[c] = np.nan if nan else low
        highs[c] = np.nan if nan else high
    low = np.inf
    high = -np.inf
    for c in range(n_chunks):  # fixed order; a NaN chunk makes both NaN
        if lows[c] != lows[c]:
            return np.nan, np.nan
        low = min(low, lows[c])
        high = max(high, highs[c])
    return low, high
