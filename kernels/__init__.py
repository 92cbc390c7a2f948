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
from kernels.lookup import lookup_bins, lookup_codes, lookup_edges
from kernels.partition import partition_rows, take_rows
from kernels.split_mvce import N_SPLIT_STATS, SPLIT_RESIDUAL, SPLIT_W, mvce_from_split_sums, mvce_split_sums
from kernels.trees import predict_trees, route_rows, tree_leaves
from kernels.trees_oracle import LEAF_PLATT, LEAF_SCALE, LEAF_SHIFT
from kernels.views import N_VIEW_STATS, VIEW_COUNT, VIEW_W, VIEW_WP, VIEW_WY, view_bins, view_sums

__all__ = [
    "LEAF_PLATT",
    "LEAF_SCALE",
    "LEAF_SHIFT",
    "N_SPLIT_STATS",
    "N_STATS",
    "N_VIEW_STATS",
    "SPLIT_RESIDUAL",
    "SPLIT_W",
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
    "lookup_bins",
    "lookup_codes",
    "lookup_edges",
    "mvce_from_split_sums",
    "mvce_split_sums",
    "partition_rows",
    "predict_trees",
    "route_rows",
    "take_rows",
    "tree_leaves",
    "value_offsets",
    "view_bins",
    "view_sums",
]
