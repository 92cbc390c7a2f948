r"""``route_rows``, ``tree_leaves``, ``predict_trees``: MBCT's multi-way trees over integer codes.

The node arrays are those of ``gpucal.trees.ensemble.TreeEnsemble`` (layout and formulas in
``gpucal.kernels.trees_oracle``). They are checked here on every call (a pass over the nodes, not the rows):
dtypes, shapes, ``node_feature`` in ``[-1, d)``, split nodes' ``node_child_base`` inside ``child_table``,
``child_table`` in ``[-1, n_nodes)``, finite ``node_value``, ``tree_start`` running from 0 to
``n_nodes`` and every child after its parent in its parent's tree. Codes are not checked, for speed (a
pass over the codes costs about a tenth of a prediction) and because these functions are not given the
value counts: a code at or above
``n_values[j]`` reads another node's children, and a negative code or one past the end of
``child_table`` reads outside it (undefined result, possibly a crash). Codes must come from the encoder
the trees were fitted with, whose codes lie in ``[0, n_values[j])``.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from gpucal.kernels._dispatch import (
    check_1d,
    code_dtype,
    is_cupy_array,
    namespace_of,
    readonly,
    resolve_backend,
    to_host,
)
from gpucal.kernels.jit import empty_rows
from gpucal.kernels.trees_cpu import (
    chain_start_cpu,
    predict_leaves_cpu,
    predict_trees_cpu,
    route_rows_cpu,
    split_ranges,
    tree_depths_cpu,
    tree_leaves_cpu,
    walk_table_cpu,
)
from gpucal.kernels.trees_oracle import (
    LEAF_MAP_CODES,
    LEAF_SCALE,
    chain_start_oracle,
    predict_trees_oracle,
    route_rows_oracle,
    tree_leaves_oracle,
)

INT32_MAX = int(np.iinfo(np.int32).max)
INT64_MAX = int(np.iinfo(np.int64).max)


class _Nodes(NamedTuple):
    """Checked tree structure on the host, in the kernels' dtypes."""

    node_feature: np.ndarray  # int32 (n_nodes,)
    node_child_base: np.ndarray  # int64 (n_nodes,)
    child_table: np.ndarray  # int32 (n_children,)

    @property
    def n_nodes(self) -> int:
        return int(self.node_feature.shape[0])


def route_rows(
    codes: Any,
    node_idx: Any,
    node_feature: Any,
    node_child_base: Any,
    child_table: Any,
    *,
    backend: str = "auto",
    n_blocks: int | None = None,
    threads_per_block: int | None = None,
) -> Any:
    """Move every row one level down its tree: the child of its node that holds the row's code.

    .. math::

        \\mathrm{out}_i = \\begin{cases}
            c_i & \\text{if } m_i \\ge 0,\\ \\mathrm{node\\_feature}[m_i] = j \\ge 0,\\ c_i \\ge 0 \\\\
            m_i & \\text{otherwise}
        \\end{cases}
        \\qquad c_i = \\mathrm{child\\_table}[\\mathrm{node\\_child\\_base}[m_i] + \\mathrm{codes}_{ij}]

    with :math:`m_i` = ``node_idx[i]``: rows at a leaf, rows whose code no training row of the node had
    (child ``-1``) and rows with ``node_idx = -1`` keep their node.

    Parameters
    ----------
    codes : int array of shape (n, d)
        Dense feature codes, int8, int16 or int32 (other integer dtypes are converted to int32).
    node_idx : int array of shape (n,)
        Current node of each row in ``[-1, n_nodes)``; ``-1`` means the row is in no node.
    node_feature, node_child_base, child_table : int arrays
        The trees (``TreeEnsemble`` layout): split feature per node (``-1`` for a leaf), offset of a
        split node's children in ``child_table``, and child ids (``-1`` where there is none).
    backend : {'auto', 'oracle', 'cpu', 'cuda'}, default='auto'
        - 'auto': 'cuda' when ``codes`` or ``node_idx`` is a cupy array, else 'cpu'.
        - 'oracle': the numpy reference (for tests).
        - 'cpu': the numba CPU twin (parallel over rows).
        - 'cuda': the numba-cuda kernel (numpy inputs are copied to the GPU and back).
    n_blocks, threads_per_block
        CUDA launch options for tests and tuning (ignored by the other backends).

    Returns
    -------
    out : int32 array of shape (n,)
        The node of each row after the step; cupy on the 'cuda' backend with cupy inputs, else numpy.
    """
    backend = resolve_backend(backend, codes, node_idx)
    if backend in ("oracle", "cpu"):
        codes, node_idx = to_host(codes), to_host(node_idx)
    codes = _check_codes(codes)
    nodes = _check_nodes(codes.shape[1], node_feature, node_child_base, child_table)
    node_idx = _check_node_idx(node_idx, codes.shape[0], nodes.n_nodes)
    if backend == "oracle":
        return route_rows_oracle(codes, node_idx, *nodes)
    if backend == "cpu":
        out = np.empty(codes.shape[0], dtype=np.int32)
        return route_rows_cpu(codes, node_idx, *nodes, out)
    return _route_rows_cuda(codes, node_idx, nodes, n_blocks, threads_per_block)


def tree_leaves(
    codes: Any,
    node_feature: Any,
    node_child_base: Any,
    child_table: Any,
    tree_start: Any,
    *,
    backend: str = "auto",
    n_blocks: int | None = None,
    threads_per_block: int | None = None,
) -> Any:
    """Return the node each row stops at in each tree: ``route_rows`` from the root until the row stays.

    A row walks from its tree's root ``tree_start[t]`` and stops at a leaf or at a node whose child for
    its code is ``-1`` (a child id not above its parent also ends the walk; checked ensembles have none).

    Parameters
    ----------
    codes : int array of shape (n, d)
        Dense feature codes, int8, int16 or int32 (other integer dtypes are converted to int32).
    node_feature, node_child_base, child_table : int arrays
        The trees, as in ``route_rows``.
    tree_start : int array of shape (n_trees + 1,)
        First node id of each tree, then ``n_nodes``; ``[0]`` for no trees.
    backend : {'auto', 'oracle', 'cpu', 'cuda'}, default='auto'
        As in ``route_rows`` ('auto' is 'cuda' when ``codes`` is a cupy array).
    n_blocks, threads_per_block
        CUDA launch options for tests and tuning (ignored by the other backends).

    Returns
    -------
    leaves : int32 array of shape (n, n_trees)
        Global node ids; cupy on the 'cuda' backend with cupy inputs, else numpy.
    """
    backend = resolve_backend(backend, codes)
    if backend in ("oracle", "cpu"):
        codes = to_host(codes)
    codes = _check_codes(codes)
    nodes = _check_nodes(codes.shape[1], node_feature, node_child_base, child_table)
    starts = _check_tree_start(tree_start, nodes.n_nodes)
    _check_children_in_trees(nodes, starts)
    if backend == "oracle":
        return tree_leaves_oracle(codes, *nodes, starts)
    if backend == "cpu":
        out = np.empty((codes.shape[0], starts.shape[0] - 1), dtype=np.int32)
        table, shift, depths = _walk_table(nodes, starts, codes.shape[1])
        return tree_leaves_cpu(codes, table, shift, nodes.child_table, starts, depths, out)
    return _tree_leaves_cuda(codes, nodes, starts, n_blocks, threads_per_block)


def predict_trees(
    codes: Any,
    f: Any,
    node_feature: Any,
    node_child_base: Any,
    child_table: Any,
    node_value: Any,
    tree_start: Any,
    leaf_map: int,
    *,
    init: tuple[float, float] | None = (1.0, 0.0),
    finish: bool = True,
    backend: str = "auto",
    n_blocks: int | None = None,
    threads_per_block: int | None = None,
) -> Any:
    """Return the chained prediction of the trees, in one pass per row.

    With :math:`(a_t, b_t)` the map of the node row :math:`i` stops at in tree :math:`t`:

    .. math::

        \\text{scale:}\\quad f_t = \\min(a_t f_{t-1}, 1),\\quad f_0 = f_i,\\quad \\mathrm{out}_i = f_T

        \\text{shift, platt:}\\quad l_t = a_t l_{t-1} + b_t,\\quad
        l_0 = \\operatorname{clip}\\Big(a_0 \\log\\frac{p}{1 - p} + b_0,
        \\pm\\log\\frac{1 - \\epsilon}{\\epsilon}\\Big),\\
        p = \\operatorname{clip}(f_i, \\epsilon, 1 - \\epsilon),\\quad
        \\mathrm{out}_i = \\frac{1}{1 + e^{-l_T}}

    with :math:`\\epsilon` the float64 machine epsilon, :math:`(a_0, b_0)` the initial map ``init`` (the
    identity by default, for which the outer clip changes nothing) and shift maps having :math:`a = 1`.
    With no trees the output is ``f`` (scale) or :math:`\\sigma(l_0)`. ``init=None`` starts from
    :math:`l_0 = f_i` (``f`` holds the chain's values, e.g. :func:`chain_start`'s) and ``finish=False``
    returns :math:`l_T` (no sigmoid): a fit passes its chain's values from tree to tree this way, the very
    operations of one call over all its trees.

    Parameters
    ----------
    codes : int array of shape (n, d)
        Dense feature codes, int8, int16 or int32 (other integer dtypes are converted to int32).
    f : float array of shape (n,)
        Input probabilities; float32 is read as is and widened to float64 per row.
    node_feature, node_child_base, child_table : int arrays
        The trees, as in ``route_rows``.
    node_value : float array of shape (n_nodes, 2)
        The ``(a, b)`` of each node's map.
    tree_start : int array of shape (n_trees + 1,)
        As in ``tree_leaves``.
    leaf_map : int
        ``LEAF_SCALE`` (0), ``LEAF_SHIFT`` (1) or ``LEAF_PLATT`` (2).
    init : (float, float) or None, default=(1.0, 0.0)
        The initial map :math:`(a_0, b_0)` of the logit of ``f`` (identity only for scale), or None.
    finish : bool, default=True
        Whether the chain's last values go through the sigmoid (scale: no effect).
    backend : {'auto', 'oracle', 'cpu', 'cuda'}, default='auto'
        As in ``route_rows`` ('auto' is 'cuda' when ``codes`` or ``f`` is a cupy array).
    n_blocks, threads_per_block
        CUDA launch options for tests and tuning (ignored by the other backends).

    Returns
    -------
    out : float64 array of shape (n,)
        Calibrated probabilities; cupy on the 'cuda' backend with cupy inputs, else numpy.

    Notes
    -----
    Every backend applies the same operations in the same order. "scale" (a product and a comparison per
    tree) is bit-identical on all of them; "shift" and "platt" agree to a few ulp, since numpy's, libm's
    and CUDA's ``log`` and ``exp`` round differently and the GPU may fuse :math:`a l + b`. A NaN in ``f``
    gives NaN.
    """
    backend = resolve_backend(backend, codes, f)
    if backend in ("oracle", "cpu"):
        codes, f = to_host(codes), to_host(f)
    if (
        isinstance(leaf_map, bool)
        or not isinstance(leaf_map, int | np.integer)
        or leaf_map not in LEAF_MAP_CODES
    ):
        msg = (
            "The 'leaf_map' parameter must be LEAF_SCALE (0), LEAF_SHIFT (1) or LEAF_PLATT (2). "
            f"Got {leaf_map!r} instead."
        )
        raise ValueError(msg)
    leaf_map = int(leaf_map)
    init = None if init is None else _check_init(init, leaf_map)
    codes = _check_codes(codes)
    check_1d(f, "f", codes.shape[0])
    if np.dtype(f.dtype).kind != "f":
        msg = f"f must hold floating-point probabilities. Got dtype {f.dtype} instead."
        raise TypeError(msg)
    nodes = _check_nodes(codes.shape[1], node_feature, node_child_base, child_table)
    values = _check_node_value(node_value, nodes.n_nodes)
    starts = _check_tree_start(tree_start, nodes.n_nodes)
    _check_children_in_trees(nodes, starts)
    if backend == "oracle":
        return predict_trees_oracle(codes, f, *nodes, values, starts, leaf_map, init, bool(finish))
    # The kernels take the initial map as two floats and whether to apply it (None: f holds chain values).
    chain = (*((1.0, 0.0) if init is None else init), init is not None, bool(finish))
    if backend == "cpu":
        f = readonly(np.ascontiguousarray(f, dtype=np.float64))
        out = empty_rows(codes.shape[0])
        table, shift, depths = _walk_table(nodes, starts, codes.shape[1])
        args = (nodes.child_table, starts, values, depths, leaf_map, *chain, out)
        return predict_trees_cpu(codes, f, table, shift, *args)
    return _predict_trees_cuda(codes, f, nodes, values, starts, leaf_map, chain, n_blocks, threads_per_block)


def chain_start(f: Any, init: tuple[float, float], leaf_map: int, *, backend: str = "auto") -> Any:
    """Return :func:`predict_trees`'s starting values :math:`l_0` of probabilities ``f`` (float64; ``f``
    itself for scale) under the initial map ``init``: the values a fit carries into its first tree.

    The same per-row function as :func:`predict_trees` on every backend (cupy in, cupy out on 'cuda').
    """
    backend = resolve_backend(backend, f)
    a, b = _check_init(init, int(leaf_map))
    if backend == "oracle":
        return chain_start_oracle(to_host(f), a, b, int(leaf_map))
    if backend == "cpu":
        f = readonly(np.ascontiguousarray(to_host(f), dtype=np.float64))
        return chain_start_cpu(f, a, b, int(leaf_map), empty_rows(f.shape[0]))
    from gpucal.kernels.trees_cuda import launch_chain_start

    dev = _Device(f)
    out = dev.empty((f.shape[0],), np.float64)
    if f.shape[0]:
        launch_chain_start(dev.put(f, np.float64), a, b, int(leaf_map), out)
    return dev.result(out)


def predict_leaves(x: np.ndarray, leaf: np.ndarray, node_value: np.ndarray, leaf_map: int) -> np.ndarray:
    """Return one tree's :func:`predict_trees` with ``init=None, finish=False`` (chain values ``x`` in, the
    chain's next values out) for rows whose node is known: ``leaf[i]``, the node row ``i`` stops at (a
    tree's growth routes every row there). CPU only, bit-identical to the walk.

    ``x`` float64, ``leaf`` integer ids into ``node_value`` (the grower's own arrays, not checked).
    """
    out = np.empty(x.shape[0], dtype=np.float64)
    return predict_leaves_cpu(
        readonly(np.ascontiguousarray(x, dtype=np.float64)),
        readonly(np.ascontiguousarray(leaf, dtype=np.int32)),
        readonly(np.ascontiguousarray(node_value, dtype=np.float64)),
        int(leaf_map),
        out,
    )


# --------------------------------------------------------------------------------------------------
# Input checks


def _walk_table(
    nodes: _Nodes, starts: np.ndarray, n_features: int
) -> tuple[np.ndarray, np.int64, np.ndarray]:
    """The CPU walk's table (``walk_table_cpu``), its feature bits and each tree's step count
    (``tree_depths_cpu``): the table int32 where the packed entries fit, else int64."""
    shift = max(n_features - 1, 0).bit_length()
    n_entries = nodes.child_table.shape[0] + starts.shape[0] - 1
    dtype = np.int32 if n_entries << shift <= INT32_MAX else np.int64
    table = np.empty(n_entries, dtype=dtype)
    order, stop = split_ranges(nodes.node_feature, nodes.node_child_base, nodes.child_table.shape[0])
    walk_table_cpu(*nodes, starts, order, stop, np.int64(shift), table)
    return table, np.int64(shift), tree_depths_cpu(*nodes, starts, stop)


def _check_init(init: tuple[float, float], leaf_map: int) -> tuple[float, float]:
    """``init`` as two finite floats; scale chains take only the identity."""
    a, b = (float(v) for v in init)
    if not (math.isfinite(a) and math.isfinite(b)) or (leaf_map == LEAF_SCALE and (a, b) != (1.0, 0.0)):
        msg = f"init must be two finite floats, (1.0, 0.0) for LEAF_SCALE. Got {init!r} instead."
        raise ValueError(msg)
    return a, b


def _check_codes(codes: Any) -> Any:
    """Return ``codes`` C-contiguous in its kernel dtype (same family), after shape and dtype checks."""
    xp = namespace_of(codes)
    if codes.ndim != 2:
        msg = f"codes must be two-dimensional (rows, features). Got shape {tuple(codes.shape)} instead."
        raise ValueError(msg)
    kernel_dtype = code_dtype(codes.dtype, "codes")
    if kernel_dtype != codes.dtype and codes.size and (int(codes.min()) < 0 or int(codes.max()) > INT32_MAX):
        msg = f"codes must lie in [0, {INT32_MAX}] to be converted to int32 from {codes.dtype}."
        raise ValueError(msg)
    return xp.ascontiguousarray(codes, dtype=kernel_dtype)


def _int_vector(x: Any, name: str) -> np.ndarray:
    """Return ``x`` on the host as a 1-D int64 array, or raise naming ``name``."""
    x = to_host(x)
    if x.dtype.kind not in "iu":
        msg = f"{name} must hold integers. Got dtype {x.dtype} instead."
        raise TypeError(msg)
    if x.ndim != 1:
        msg = f"{name} must be one-dimensional. Got shape {x.shape} instead."
        raise ValueError(msg)
    if x.dtype == np.uint64 and x.size and int(x.max()) > INT64_MAX:
        msg = f"{name} holds values above {INT64_MAX}."
        raise ValueError(msg)
    return x.astype(np.int64)


def _check_range(x: np.ndarray, name: str, low: int, high: int) -> None:
    """Raise ``ValueError`` unless every entry of ``x`` lies in ``[low, high)``; name the first outside."""
    bad = np.flatnonzero((x < low) | (x >= high))
    if bad.size:
        k = int(bad[0])
        msg = f"{name} must lie in [{low}, {high}). Got {name}[{k}] = {int(x[k])}."
        raise ValueError(msg)


def _check_nodes(n_features: int, node_feature: Any, node_child_base: Any, child_table: Any) -> _Nodes:
    """Check the tree structure against itself and ``n_features``; return it in the kernels' dtypes."""
    feature = _int_vector(node_feature, "node_feature")
    n_nodes = feature.shape[0]
    if n_nodes > INT32_MAX:
        msg = f"node ids are int32: at most {INT32_MAX} nodes. Got {n_nodes}."
        raise ValueError(msg)
    _check_range(feature, "node_feature", -1, n_features)
    base = _int_vector(node_child_base, "node_child_base")
    if base.shape[0] != n_nodes:
        msg = f"node_child_base must hold one offset per node ({n_nodes}). Got {base.shape[0]}."
        raise ValueError(msg)
    table = _int_vector(child_table, "child_table")
    _check_range(table, "child_table", -1, n_nodes)
    split = feature >= 0
    bad = np.flatnonzero(split & ((base < 0) | (base >= table.shape[0])))
    if bad.size:
        m = int(bad[0])
        msg = (
            f"node_child_base of split node {m} must lie in [0, len(child_table)) = [0, {table.shape[0]}). "
            f"Got {int(base[m])}."
        )
        raise ValueError(msg)
    # A split node's children are the entries from its base up to the next split node's base.
    bases = np.sort(base[split])
    shared = np.flatnonzero(bases[1:] == bases[:-1])
    if shared.size:
        msg = f"split nodes must own their child tables: two start at node_child_base {bases[shared[0]]}."
        raise ValueError(msg)
    return _Nodes(
        np.ascontiguousarray(feature, dtype=np.int32),
        np.ascontiguousarray(base, dtype=np.int64),
        np.ascontiguousarray(table, dtype=np.int32),
    )


def _check_node_value(node_value: Any, n_nodes: int) -> np.ndarray:
    """Return ``node_value`` as C-contiguous float64 ``(n_nodes, 2)`` on the host, after checking it."""
    value = to_host(node_value)
    if value.dtype.kind not in "iuf":
        msg = f"node_value must hold real numbers. Got dtype {value.dtype} instead."
        raise TypeError(msg)
    if value.shape != (n_nodes, 2):
        msg = f"node_value must have shape (n_nodes, 2) = ({n_nodes}, 2). Got {value.shape} instead."
        raise ValueError(msg)
    value = np.ascontiguousarray(value, dtype=np.float64)
    if not np.isfinite(value).all():
        msg = "node_value must be finite."
        raise ValueError(msg)
    return value


def _check_tree_start(tree_start: Any, n_nodes: int) -> np.ndarray:
    """Return ``tree_start`` as int64 on the host after checking it runs from 0 to ``n_nodes``."""
    start = _int_vector(tree_start, "tree_start")
    if start.shape[0] < 1 or start[0] != 0 or start[-1] != n_nodes or (np.diff(start) < 1).any():
        msg = (
            f"tree_start must increase from 0 to n_nodes = {n_nodes}, one root per tree. "
            f"Got {start if start.shape[0] <= 10 else start[:10]}."
        )
        raise ValueError(msg)
    return np.ascontiguousarray(start, dtype=np.int64)


def check_tree_structure(
    n_features: int, node_feature: Any, node_child_base: Any, child_table: Any, tree_start: Any
) -> None:
    """Raise ``ValueError`` unless the walks :func:`tree_leaves` and :func:`predict_trees` take would
    accept these trees (the checks they run on every call, for a model's load to run once)."""
    nodes = _check_nodes(n_features, node_feature, node_child_base, child_table)
    _check_children_in_trees(nodes, _check_tree_start(tree_start, nodes.n_nodes))


def _check_children_in_trees(nodes: _Nodes, starts: np.ndarray) -> None:
    """Refuse a child that lies outside its parent's tree or before it.

    A walk follows children by id, and the CPU twin steps each tree at most its depth; a child in a
    later tree would be followed by the oracle and the GPU kernel but not by it, and one before its
    parent could loop. A split node's entries run from its base up to the next split node's base.
    """
    split = np.flatnonzero(nodes.node_feature >= 0)
    if split.size == 0:
        return
    owners = split[np.argsort(nodes.node_child_base[split], kind="stable")]
    entry = np.arange(nodes.child_table.shape[0])
    slot = np.searchsorted(nodes.node_child_base[owners], entry, side="right") - 1
    child = nodes.child_table.astype(np.int64)
    held = (slot >= 0) & (child >= 0)
    parent, child = owners[slot[held]], child[held]
    tree_of = np.searchsorted(starts, np.arange(nodes.n_nodes), side="right") - 1
    bad = np.flatnonzero((child <= parent) | (tree_of[child] != tree_of[parent]))
    if bad.size:
        k = int(bad[0])
        msg = f"child_table: node {int(parent[k])} has child {int(child[k])} outside its tree or before it"
        raise ValueError(msg)


def _check_node_idx(node_idx: Any, n_rows: int, n_nodes: int) -> Any:
    """Return ``node_idx`` as C-contiguous int32 (same family) after checking it lies in ``[-1, n_nodes)``."""
    xp = namespace_of(node_idx)
    check_1d(node_idx, "node_idx", n_rows)
    if np.dtype(node_idx.dtype).kind not in "iu":
        msg = f"node_idx must hold integers. Got dtype {node_idx.dtype} instead."
        raise TypeError(msg)
    # One read of the rows: an id outside the node arrays would read outside them in the compiled kernels.
    if n_rows and (int(node_idx.min()) < -1 or int(node_idx.max()) >= n_nodes):
        msg = f"node_idx must lie in [-1, n_nodes) = [-1, {n_nodes})."
        raise ValueError(msg)
    return xp.ascontiguousarray(node_idx, dtype=np.int32)


# --------------------------------------------------------------------------------------------------
# CUDA paths


class _Device:
    """Moves arrays to the GPU for one call.

    With any cupy input, everything becomes cupy (numpy node arrays are uploaded) and the result stays
    on the GPU; with numpy inputs only, arrays go through ``cuda.to_device`` and the result comes back.
    """

    def __init__(self, *arrays: Any) -> None:
        cupy_input = next((a for a in arrays if is_cupy_array(a)), None)
        self.xp = namespace_of(cupy_input)
        self.on_gpu = cupy_input is not None

    def put(self, a: Any, dtype: Any = None) -> Any:
        from numba import cuda

        if self.on_gpu:
            return self.xp.ascontiguousarray(self.xp.asarray(a), dtype=dtype)
        return cuda.to_device(np.ascontiguousarray(a, dtype=dtype))

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        from numba import cuda

        return self.xp.empty(shape, dtype=dtype) if self.on_gpu else cuda.device_array(shape, dtype=dtype)

    def result(self, out: Any) -> Any:
        return out if self.on_gpu else out.copy_to_host()

    def nodes(self, nodes: _Nodes) -> tuple[Any, Any, Any]:
        return self.put(nodes.node_feature), self.put(nodes.node_child_base), self.put(nodes.child_table)


def _launch_options(n_blocks: int | None, threads_per_block: int | None) -> dict[str, Any]:
    from gpucal.kernels.group_sums_cuda import THREADS_PER_BLOCK

    return {"n_blocks": n_blocks, "threads_per_block": threads_per_block or THREADS_PER_BLOCK}


def _route_rows_cuda(
    codes: Any, node_idx: Any, nodes: _Nodes, n_blocks: int | None, threads_per_block: int | None
) -> Any:
    from gpucal.kernels.trees_cuda import launch_route_rows

    dev = _Device(codes, node_idx)
    out = dev.empty((codes.shape[0],), np.int32)
    if codes.shape[0]:
        feature, base, table = dev.nodes(nodes)
        launch_route_rows(
            dev.put(codes),
            dev.put(node_idx, np.int32),
            feature,
            base,
            table,
            out,
            **_launch_options(n_blocks, threads_per_block),
        )
    return dev.result(out)


def _tree_leaves_cuda(
    codes: Any, nodes: _Nodes, starts: np.ndarray, n_blocks: int | None, threads_per_block: int | None
) -> Any:
    from gpucal.kernels.trees_cuda import launch_tree_leaves

    dev = _Device(codes)
    n_trees = starts.shape[0] - 1
    out = dev.empty((codes.shape[0], n_trees), np.int32)
    if codes.shape[0] and n_trees:
        feature, base, table = dev.nodes(nodes)
        launch_tree_leaves(
            dev.put(codes),
            feature,
            base,
            table,
            dev.put(starts),
            out,
            **_launch_options(n_blocks, threads_per_block),
        )
    return dev.result(out)


def _predict_trees_cuda(
    codes: Any,
    f: Any,
    nodes: _Nodes,
    values: np.ndarray,
    starts: np.ndarray,
    leaf_map: int,
    chain: tuple[float, float, bool, bool],
    n_blocks: int | None,
    threads_per_block: int | None,
) -> Any:
    from gpucal.kernels.trees_cuda import launch_predict_trees

    dev = _Device(codes, f)
    out = dev.empty((codes.shape[0],), np.float64)
    if codes.shape[0]:
        # The kernel reads float32 or float64 and widens per row; other float dtypes become float64.
        fdt = np.float32 if f.dtype == np.float32 else np.float64
        feature, base, table = dev.nodes(nodes)
        launch_predict_trees(
            dev.put(codes),
            dev.put(f, fdt),
            feature,
            base,
            table,
            dev.put(values),
            dev.put(starts),
            leaf_map,
            *chain,
            out,
            **_launch_options(n_blocks, threads_per_block),
        )
    return dev.result(out)
