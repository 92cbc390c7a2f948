"""numba-cuda kernels for the tree routines (imported only on the CUDA path).

One thread per row in a grid-stride loop; each row walks the trees on its own and writes only its own
outputs, so there are no atomics and the results do not depend on the launch shape. The per-row code is
``gpucal.kernels.trees_row``, the functions the CPU twin calls. The node arrays are small and every thread
reads them, so they stay in the L1/L2 caches.

On the GPU, NVVM may fuse ``a * l + b`` into one fused multiply-add (one rounding instead of two):
"shift" and "platt" predictions can then differ from the CPU's in the last bits. "scale" uses one
multiply and a comparison per tree and is bit-identical to the CPU twin.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from gpucal.kernels import trees_row
from gpucal.kernels.group_sums_cuda import THREADS_PER_BLOCK, grid_blocks

# Device functions compiled from the Python source of the CPU twin's per-row functions (the simulator
# cannot hand its arrays to an njit function; a device function works on the GPU and in the simulator).
route_row = cuda.jit(device=True)(trees_row.route_row.py_func)
walk_tree = cuda.jit(device=True)(trees_row.walk_tree.py_func)
start_value = cuda.jit(device=True)(trees_row.start_value.py_func)
apply_map = cuda.jit(device=True)(trees_row.apply_map.py_func)
finish_value = cuda.jit(device=True)(trees_row.finish_value.py_func)


@cuda.jit
def route_rows_kernel(codes, node_idx, node_feature, node_child_base, child_table, out):
    """``out[i]``: the node of row ``i`` one level below ``node_idx[i]`` (int32)."""
    for i in range(cuda.grid(1), codes.shape[0], cuda.gridsize(1)):
        out[i] = route_row(codes, i, node_idx[i], node_feature, node_child_base, child_table)


@cuda.jit
def tree_leaves_kernel(codes, node_feature, node_child_base, child_table, tree_start, out):
    """``out[i, t]``: the node row ``i`` stops at in tree ``t`` (int32)."""
    n_trees = tree_start.shape[0] - 1
    for i in range(cuda.grid(1), codes.shape[0], cuda.gridsize(1)):
        for t in range(n_trees):
            out[i, t] = walk_tree(codes, i, tree_start[t], node_feature, node_child_base, child_table)


@cuda.jit
def predict_trees_kernel(
    codes,
    f,
    node_feature,
    node_child_base,
    child_table,
    node_value,
    tree_start,
    leaf_map,
    a,
    b,
    start,
    finish,
    out,
):
    """``out[i]``: the chained prediction of row ``i`` (float64; ``f`` is float32 or float64). ``a, b,
    start``: the initial map and whether it starts the chain, as in the CPU twin; ``finish``: whether the
    sigmoid ends the chain."""
    n_trees = tree_start.shape[0] - 1
    for i in range(cuda.grid(1), codes.shape[0], cuda.gridsize(1)):
        x = start_value(f[i], a, b, leaf_map) if start else float(f[i])
        for t in range(n_trees):
            m = walk_tree(codes, i, tree_start[t], node_feature, node_child_base, child_table)
            x = apply_map(x, node_value[m, 0], node_value[m, 1], leaf_map)
        out[i] = finish_value(x, leaf_map) if finish else x


@cuda.jit
def chain_start_kernel(f, a, b, leaf_map, out):
    """``out[i]``: the chain's starting value of row ``i`` (``start_value``, float64)."""
    for i in range(cuda.grid(1), f.shape[0], cuda.gridsize(1)):
        out[i] = start_value(f[i], a, b, leaf_map)


def launch_route_rows(
    codes: Any,
    node_idx: Any,
    node_feature: Any,
    node_child_base: Any,
    child_table: Any,
    out: Any,
    *,
    n_blocks: int | None = None,
    threads_per_block: int = THREADS_PER_BLOCK,
) -> None:
    """Launch ``route_rows_kernel`` on device arrays (``out`` int32 of shape ``(n,)``)."""
    grid = grid_blocks(codes.shape[0], n_blocks, threads_per_block)
    route_rows_kernel[grid, threads_per_block](
        codes, node_idx, node_feature, node_child_base, child_table, out
    )


def launch_tree_leaves(
    codes: Any,
    node_feature: Any,
    node_child_base: Any,
    child_table: Any,
    tree_start: Any,
    out: Any,
    *,
    n_blocks: int | None = None,
    threads_per_block: int = THREADS_PER_BLOCK,
) -> None:
    """Launch ``tree_leaves_kernel`` on device arrays (``out`` int32 of shape ``(n, n_trees)``)."""
    grid = grid_blocks(codes.shape[0], n_blocks, threads_per_block)
    tree_leaves_kernel[grid, threads_per_block](
        codes, node_feature, node_child_base, child_table, tree_start, out
    )


def launch_predict_trees(
    codes: Any,
    f: Any,
    node_feature: Any,
    node_child_base: Any,
    child_table: Any,
    node_value: Any,
    tree_start: Any,
    leaf_map: int,
    a: float,
    b: float,
    start: bool,
    finish: bool,
    out: Any,
    *,
    n_blocks: int | None = None,
    threads_per_block: int = THREADS_PER_BLOCK,
) -> None:
    """Launch ``predict_trees_kernel`` on device arrays (``out`` float64 of shape ``(n,)``)."""
    grid = grid_blocks(codes.shape[0], n_blocks, threads_per_block)
    predict_trees_kernel[grid, threads_per_block](
        codes,
        f,
        node_feature,
        node_child_base,
        child_table,
        node_value,
        tree_start,
        np.int64(leaf_map),
        np.float64(a),
        np.float64(b),
        np.bool_(start),
        np.bool_(finish),
        out,
    )


def launch_chain_start(f: Any, a: float, b: float, leaf_map: int, out: Any) -> None:
    """Launch ``chain_start_kernel`` on device arrays (``f`` and ``out`` float64 of shape ``(n,)``)."""
    grid = grid_blocks(f.shape[0], None, THREADS_PER_BLOCK)
    chain_start_kernel[grid, THREADS_PER_BLOCK](f, np.float64(a), np.float64(b), np.int64(leaf_map), out)
