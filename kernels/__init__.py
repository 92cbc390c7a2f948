"""Device code of gpucal: each kernel as a numpy oracle, a numba CPU twin and a numba-cuda kernel.

Importing this package imports neither numba nor numpy: each name below is imported from its module
on first use (PEP 562), so ``import gpucal`` stays fast; the modules that compile import numba from
:mod:`gpucal.kernels.jit`, which chooses numba's cache folder first. ``numba.cuda`` is imported inside the
CUDA path.
"""

from __future__ import annotations

import sys
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpucal.kernels._dispatch import readonly
    from gpucal.kernels.group_sums import group_sums, node_range_sums
    from gpucal.kernels.group_sums_oracle import (
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
    from gpucal.kernels.lookup import (
        lookup_bins,
        lookup_codes,
        lookup_columns,
        lookup_edges,
        lookup_pairs,
        pair_tables,
    )
    from gpucal.kernels.node_order import gather_rows, order_by_node, route_and_group
    from gpucal.kernels.split_mvce import (
        N_SPLIT_STATS,
        SPLIT_RESIDUAL,
        SPLIT_W,
        mvce_from_split_sums,
        mvce_split_sums,
    )
    from gpucal.kernels.trees import (
        chain_start,
        check_tree_structure,
        predict_leaves,
        predict_trees,
        route_rows,
        tree_leaves,
    )
    from gpucal.kernels.trees_oracle import LEAF_PLATT, LEAF_SCALE, LEAF_SHIFT
    from gpucal.kernels.value_range import value_range
    from gpucal.kernels.views import N_VIEW_STATS, VIEW_COUNT, VIEW_W, VIEW_WP, VIEW_WY, view_bins, view_sums

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
    "chain_start",
    "check_tree_structure",
    "gather_rows",
    "group_sums",
    "lookup_bins",
    "lookup_codes",
    "lookup_columns",
    "lookup_edges",
    "lookup_pairs",
    "mvce_from_split_sums",
    "mvce_split_sums",
    "node_range_sums",
    "order_by_node",
    "pair_tables",
    "predict_leaves",
    "predict_trees",
    "readonly",
    "route_and_group",
    "route_rows",
    "tree_leaves",
    "value_offsets",
    "value_range",
    "view_bins",
    "view_sums",
]


#: Module of each public name, for the lazy import in ``__getattr__``.
_MODULE_OF = {
    name: module
    for module, names in {
        "gpucal.kernels.group_sums": ("group_sums", "node_range_sums"),
        "gpucal.kernels.group_sums_oracle": (
            "N_STATS",
            "STAT_COUNT",
            "STAT_W",
            "STAT_WF",
            "STAT_WFF",
            "STAT_WFY",
            "STAT_WY",
            "STAT_WYY",
            "value_offsets",
        ),
        "gpucal.kernels._dispatch": ("readonly",),
        "gpucal.kernels.lookup": (
            "lookup_bins",
            "lookup_codes",
            "lookup_columns",
            "lookup_edges",
            "lookup_pairs",
            "pair_tables",
        ),
        "gpucal.kernels.node_order": ("order_by_node", "gather_rows", "route_and_group"),
        "gpucal.kernels.split_mvce": (
            "N_SPLIT_STATS",
            "SPLIT_RESIDUAL",
            "SPLIT_W",
            "mvce_from_split_sums",
            "mvce_split_sums",
        ),
        "gpucal.kernels.trees": (
            "chain_start",
            "check_tree_structure",
            "predict_leaves",
            "predict_trees",
            "route_rows",
            "tree_leaves",
        ),
        "gpucal.kernels.trees_oracle": ("LEAF_PLATT", "LEAF_SCALE", "LEAF_SHIFT"),
        "gpucal.kernels.value_range": ("value_range",),
        "gpucal.kernels.views": (
            "N_VIEW_STATS",
            "VIEW_COUNT",
            "VIEW_W",
            "VIEW_WP",
            "VIEW_WY",
            "view_bins",
            "view_sums",
        ),
    }.items()
    for name in names
}


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use, then keep it in the package namespace."""
    if name not in _MODULE_OF:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(import_module(_MODULE_OF[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


class _PublicNamesModule(ModuleType):
    """This package's module type: a public name stays what ``__getattr__`` gives when a module of the
    same name is imported.

    Python's import system binds a loaded submodule to its package's attribute of that name, so without
    this, importing ``gpucal.kernels.group_sums`` or ``gpucal.kernels.value_range`` directly (as kernel
    modules do for their helpers) before the public name was first read would leave the module where
    ``from gpucal.kernels import group_sums`` expects the function.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, ModuleType) and value.__name__ == _MODULE_OF.get(name):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _PublicNamesModule
