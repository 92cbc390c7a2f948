"""Per-row arithmetic shared by the numba CPU twins and the numba-cuda kernels.

Each function here is a plain ``numba.njit`` function: the CPU twins call it as compiled code and the
CUDA kernels call it as a device function (numba-cuda compiles the same Python source for the GPU),
so the two backends cannot drift apart in what they add per row.
"""

from __future__ import annotations

import numpy as np

from gpucal.kernels.jit import numba


@numba.njit(cache=True)
def group_row_stats(f, y, w):
    """Return the seven group-sum statistics of one row, in ``STAT_*`` order, as float64.

    .. math:: (1,\\; w,\\; w f,\\; w y,\\; w f^2,\\; w f y,\\; w y^2)
    """
    f64 = np.float64(f)
    y64 = np.float64(y)
    w64 = np.float64(w)
    wf = w64 * f64
    wy = w64 * y64
    return 1.0, w64, wf, wy, wf * f64, wf * y64, wy * y64


@numba.njit(cache=True)
def view_row_stats(p, y, w):
    """Return the four view-sum statistics of one row as float64: :math:`(1, w, w p, w y)`."""
    w64 = np.float64(w)
    return 1.0, w64, w64 * np.float64(p), w64 * np.float64(y)
