"""Device code of gpucal: each kernel as a numpy oracle, a numba CPU twin and a numba-cuda kernel.

Importing this package imports numba (CPU) only; ``numba.cuda`` is imported inside the CUDA path.
"""

from kernels.group_sums import group_sums
from kernels.group_sums_oracle import (
    N_STATS,
    STAT_COUNT,
    STAT_W,
    STAT_WF,
    STAT_WFF,
    STAT_WFY,
    STAT_WY,
    STAT_WYY,
    value_offsets,
)
from kernels.views import N_VIEW_STATS, VIEW_COUNT, VIEW_W, VIEW_WP, VIEW_WY, view_bins, view_sums

__all__ = [
    "N_STATS",
    "N_VIEW_STATS",
    "STAT_COUNT",
    "STAT_W",
    "STAT_WF",
    "STAT_WFF",
    "STAT_WFY",
    "STAT_WY",
    "STAT_WYY",
    "VIEW_COUNT",
    "VIEW_W",
    "VIEW_WP",
    "VIEW_WY",
    "group_sums",
    "value_offsets",
    "view_bins",
    "view_sums",
]
