"""Per-group sums for the metrics, computed by the shared kernels.

Every metric in this package is a small function of per-bin (or per-group, per-view) sums
``count, sum w, sum w*p, sum w*y``: the rows are touched once, by ``gpucal.kernels.group_sums`` (one feature:
the bin id, one node) or ``gpucal.kernels.view_sums`` (MVCE, in ``mvce``), so numpy and cupy inputs take the
same path.
The result is brought to the host: the bin-level arithmetic after it is tiny.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpucal._backend import to_numpy

# Columns of the arrays returned below.
COUNT, W, WP, WY = range(4)


def code_dtype(n_groups: int) -> type:
    """Return the narrowest integer dtype the kernels take for codes in ``[0, n_groups)``."""
    if n_groups <= np.iinfo(np.int8).max + 1:
        return np.int8
    if n_groups <= np.iinfo(np.int16).max + 1:
        return np.int16
    return np.int32


def group_stats(codes: Any, p: Any, y: Any, w: Any, n_groups: int) -> np.ndarray:
    """Return ``(n_groups, 4)`` float64 host sums ``count, w, w*p, w*y`` per code in ``[0, n_groups)``.

    ``w=None`` means unit weights (no array of ones is made).
    """
    # Imported here so that a broken or missing kernel build cannot break ``import gpucal``.
    from gpucal.kernels import STAT_COUNT, STAT_W, STAT_WF, STAT_WY, group_sums

    xp_codes = codes.astype(code_dtype(n_groups), copy=False).reshape(-1, 1)
    hist = group_sums(xp_codes, p, y, w, n_values=np.array([n_groups], dtype=np.int64))
    stats = to_numpy(hist)[0]
    return np.ascontiguousarray(stats[:, [STAT_COUNT, STAT_W, STAT_WF, STAT_WY]])
