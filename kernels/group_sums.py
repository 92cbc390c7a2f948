"""``group_sums``: the host dispatcher of the group-sum histogram (oracle, numba CPU twin, numba-cuda)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from gpucal.kernels._dispatch import (
    check_1d,
    check_count,
    code_dtype,
    float_dtype,
    namespace_of,
    readonly,
    resolve_backend,
    to_host,
)
from gpucal.kernels.group_sums_cpu import (
    MAX_ROW_CHUNKS,
    code_range,
    fill_node_ranges,
    group_sums_cpu,
    row_chunk_count,
)
from gpucal.kernels.group_sums_oracle import N_STATS, group_sums_oracle, value_offsets

INT32_MAX = int(np.iinfo(np.int32).max)


class _Checked(NamedTuple):
    """Inputs after validation, in the family they came in (numpy or cupy), dtypes not yet pinned."""

    codes: Any
    f: Any
    y: Any
    w: Any
    node_idx: Any
    n_nodes: int
    n_values: np.ndarray


def group_sums(
    codes: Any,
    f: Any,
    y: Any,
    w: Any = None,
    *,
    node_idx: Any = None,
    n_nodes: int = 1,
    n_values: Any = None,
    backend: str = "auto",
    force_global: bool = False,
    n_blocks: int | None = None,
    threads_per_block: int | None = None,
) -> Any:
    """Sum seven statistics per (node, feature, value): the histogram every gpucal fit is built from.

    .. math::

        H[m, o_j + v, :] = \\sum_{i:\\, \\mathrm{node}_i = m,\\; c_{ij} = v}
            (1,\\; w_i,\\; w_i f_i,\\; w_i y_i,\\; w_i f_i^2,\\; w_i f_i y_i,\\; w_i y_i^2)

    with :math:`o = ` ``value_offsets(n_values)``. This is the histogram of XGBoost's ``hist`` tree
    method (Chen & Guestrin, "XGBoost: A Scalable Tree Boosting System", KDD 2016, section 3.3) with the
    statistics of MBCT's split criterion (Huang et al., "MBCT: Tree-Based Feature-Aware Binning for
    Individual Uncertainty Calibration", WWW 2022).

    Parameters
    ----------
    codes : array of shape (n, d), int8, int16 or int32
        Dense codes of ``d`` features; feature ``j``'s codes lie in ``[0, n_values[j])``. Other integer
        dtypes are converted to int32.
    f, y : arrays of shape (n,)
        Scores and labels, float32 or float64. Sums are float64 on every backend; the CUDA kernel reads
        float32 when ``f``, ``y`` and ``w`` all are, the CPU twin widens its input to float64.
    w : array of shape (n,), default=None
        Row weights; ``None`` means one per row (no array is allocated).
    node_idx : int array of shape (n,), default=None
        The node of each row in ``[0, n_nodes)``; rows with ``-1`` are skipped. ``None`` puts every row
        in node 0.
    n_nodes : int, default=1
        Number of nodes.
    n_values : int array of shape (d,), default=None
        Number of values of each feature; ``None`` means ``codes.max(axis=0) + 1``.
    backend : {'auto', 'oracle', 'cpu', 'cuda'}, default='auto'
        - 'auto': 'cuda' when the inputs are cupy arrays, else 'cpu'.
        - 'oracle': the ``np.bincount`` reference (slow; for tests).
        - 'cpu': the numba CPU twin (parallel, bit-for-bit deterministic).
        - 'cuda': the numba-cuda kernel (numpy inputs are copied to the GPU and back).
    force_global, n_blocks, threads_per_block
        CUDA launch options for tests and tuning (ignored by the other backends): ``force_global`` takes
        the global-atomic path even when the histogram fits in shared memory.

    Returns
    -------
    out : float64 array of shape (n_nodes, sum(n_values), 7)
        Statistics in the order ``STAT_COUNT, STAT_W, STAT_WF, STAT_WY, STAT_WFF, STAT_WFY, STAT_WYY``;
        a cupy array on the 'cuda' backend with cupy inputs, else numpy.

    Notes
    -----
    The 'cpu' result is bit-identical between runs and thread counts; the 'oracle' and 'cuda' ones add
    in another order and agree with it to rounding. Counts are exact up to :math:`2^{53}` rows.
    """
    backend = resolve_backend(backend, codes, f, y, w, node_idx)
    if backend in ("oracle", "cpu"):
        codes, f, y, w, node_idx = (None if a is None else to_host(a) for a in (codes, f, y, w, node_idx))
    checked = _check_inputs(codes, f, y, w, node_idx, n_nodes, n_values)
    if backend == "oracle":
        return _group_sums_oracle(checked)
    if backend == "cpu":
        return _group_sums_cpu(checked)
    return _group_sums_cuda(checked, force_global, n_blocks, threads_per_block)


def node_range_sums(
    codes: np.ndarray,
    f: np.ndarray,
    y: np.ndarray,
    w: np.ndarray | None,
    lo: np.ndarray,
    hi: np.ndarray,
    n_values: np.ndarray,
) -> np.ndarray:
    """Return :func:`group_sums` ``(len(lo), sum(n_values), 7)`` of rows grouped by node: slot ``s`` holds
    rows ``lo[s]:hi[s]`` (disjoint, increasing runs). CPU only.

    The sums of the CPU twin's schedule for that input, bit for bit (node runs; row chunks for one node),
    without the per-row node array it reads and its checks: the runs are given by their bounds. Inputs
    are the tree store's own arrays (numpy, float64 scores, codes in ``[0, n_values)``), not checked.
    """
    n_slots, n_bins = lo.shape[0], int(n_values.sum())
    wt = np.empty(0, dtype=np.float64) if w is None else w
    if n_slots == 1:  # one node: the row-chunk schedule over its run, as group_sums takes it
        a, b = int(lo[0]), int(hi[0])
        n_chunks = row_chunk_count(b - a, n_bins)
        part = wt if w is None else wt[a:b]
        flat = group_sums_cpu(
            codes[a:b],
            f[a:b],
            y[a:b],
            part,
            np.empty(0, np.int32),
            value_offsets(n_values),
            1,
            n_bins,
            n_chunks,
        )
        return flat.reshape(1, n_bins, N_STATS)
    rows = np.cumsum(hi - lo)
    # Slots to tasks by rows: about MAX_ROW_CHUNKS tasks of equal rows, each a run of whole slots.
    cuts = np.searchsorted(rows, np.arange(1, MAX_ROW_CHUNKS) * (rows[-1] / MAX_ROW_CHUNKS), side="right")
    bounds = np.unique(np.concatenate(([0], cuts, [n_slots]))).astype(np.int64)
    out = np.zeros(n_slots * n_bins * N_STATS, dtype=np.float64)
    fill_node_ranges(
        out,
        codes,
        readonly(f),
        readonly(y),
        readonly(wt),
        value_offsets(n_values),
        n_bins,
        lo.astype(np.int64),
        hi.astype(np.int64),
        bounds,
    )
    return out.reshape(n_slots, n_bins, N_STATS)


def feature_code_range(codes: Any) -> tuple[np.ndarray, np.ndarray]:
    """Return the per-feature minimum and maximum of ``codes`` (``n, d >= 1``; numpy or cupy) as host int64.

    One pass over the codes: the numba CPU twin on numpy, the CUDA kernel on cupy.
    """
    if namespace_of(codes) is np:
        return code_range(codes)
    from gpucal.kernels.group_sums_cuda import launch_code_range

    return launch_code_range(codes)


def _check_inputs(codes: Any, f: Any, y: Any, w: Any, node_idx: Any, n_nodes: int, n_values: Any) -> _Checked:
    xp = namespace_of(codes)
    if codes.ndim != 2:
        msg = f"codes must be two-dimensional (rows, features). Got shape {tuple(codes.shape)} instead."
        raise ValueError(msg)
    n_rows, n_features = codes.shape
    kernel_dtype = code_dtype(codes.dtype, "codes")
    if kernel_dtype != codes.dtype and codes.size and (int(codes.min()) < 0 or int(codes.max()) > INT32_MAX):
        msg = f"codes must lie in [0, {INT32_MAX}] to be converted to int32 from {codes.dtype}."
        raise ValueError(msg)
    codes = xp.ascontiguousarray(codes, dtype=kernel_dtype)
    for name, arr in (("f", f), ("y", y), ("w", w), ("node_idx", node_idx)):
        if arr is not None:
            check_1d(arr, name, n_rows)
    n_nodes = check_count(n_nodes, "n_nodes", 1)
    if n_rows and n_features:
        low, high = feature_code_range(codes)
    else:
        low = high = np.full(n_features, -1, dtype=np.int64)
    n_values = np.asarray(high + 1 if n_values is None else to_host(n_values), dtype=np.int64)
    if n_values.shape != (n_features,) or (n_values < 0).any():
        msg = f"n_values must hold {n_features} non-negative counts. Got {n_values!r} instead."
        raise ValueError(msg)
    # Out-of-range codes would write outside the histogram in the compiled kernels.
    bad = np.nonzero((low < 0) | (high >= n_values))[0] if n_rows else np.empty(0, dtype=np.intp)
    if bad.size:
        j = int(bad[0])
        msg = (
            f"codes of feature {j} must lie in [0, n_values[{j}]) = [0, {n_values[j]}). "
            f"Got [{low[j]}, {high[j]}]."
        )
        raise ValueError(msg)
    if node_idx is not None:
        if np.dtype(node_idx.dtype).kind not in "iu":
            msg = f"node_idx must hold integers. Got dtype {node_idx.dtype} instead."
            raise TypeError(msg)
        if n_rows and (int(node_idx.min()) < -1 or int(node_idx.max()) >= n_nodes):
            msg = f"node_idx must lie in [-1, n_nodes) = [-1, {n_nodes})."
            raise ValueError(msg)
    return _Checked(codes, f, y, w, node_idx, n_nodes, n_values)


def _group_sums_oracle(c: _Checked) -> np.ndarray:
    n_rows = c.codes.shape[0]
    w = np.ones(n_rows) if c.w is None else c.w
    node_idx = np.zeros(n_rows, dtype=np.int32) if c.node_idx is None else c.node_idx
    return group_sums_oracle(c.codes, c.f, c.y, w, node_idx, c.n_nodes, c.n_values)


def _group_sums_cpu(c: _Checked) -> np.ndarray:
    # The twin adds in float64 whatever the input; one float dtype halves its compiled variants.
    fdt = np.float64
    f, y = (np.ascontiguousarray(a, dtype=fdt) for a in (c.f, c.y))
    # Length 0 means unit weights / a single node: no array of ones or zeros is made.
    w = np.empty(0, dtype=fdt) if c.w is None else np.ascontiguousarray(c.w, dtype=fdt)
    node_idx = np.empty(0, np.int32) if c.node_idx is None else np.ascontiguousarray(c.node_idx, np.int32)
    n_bins = int(c.n_values.sum())
    n_chunks = row_chunk_count(c.codes.shape[0], c.n_nodes * n_bins)
    flat = group_sums_cpu(c.codes, f, y, w, node_idx, value_offsets(c.n_values), c.n_nodes, n_bins, n_chunks)
    return flat.reshape(c.n_nodes, n_bins, N_STATS)


def _group_sums_cuda(
    c: _Checked, force_global: bool, n_blocks: int | None, threads_per_block: int | None
) -> Any:
    from numba import cuda

    from gpucal.kernels.group_sums_cuda import THREADS_PER_BLOCK, launch_group_sums

    on_gpu = namespace_of(c.codes) is not np
    xp = namespace_of(c.codes)
    fdt = float_dtype(c.f, c.y, c.w)

    def device(a: Any, dtype: Any) -> Any:
        a = xp.ascontiguousarray(a, dtype=dtype)
        return a if on_gpu else cuda.to_device(a)

    codes = device(c.codes, c.codes.dtype)
    f, y = device(c.f, fdt), device(c.y, fdt)
    w = device(xp.empty(0, dtype=fdt) if c.w is None else c.w, fdt)
    node_idx = device(xp.empty(0, dtype=np.int32) if c.node_idx is None else c.node_idx, np.int32)
    n_bins = int(c.n_values.sum())
    offsets = device(xp.asarray(value_offsets(c.n_values)), np.int64)
    out = device(xp.zeros(c.n_nodes * n_bins * N_STATS, dtype=np.float64), np.float64)
    if codes.shape[0]:
        launch_group_sums(
            codes,
            f,
            y,
            w,
            node_idx,
            offsets,
            n_bins,
            out,
            force_global=force_global,
            n_blocks=n_blocks,
            threads_per_block=threads_per_block or THREADS_PER_BLOCK,
        )
    out = out if on_gpu else out.copy_to_host()
    return out.reshape(c.n_nodes, n_bins, N_STATS)
