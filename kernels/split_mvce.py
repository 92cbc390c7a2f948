r"""``mvce_split_sums`` and ``mvce_from_split_sums``: MBCT's faithful MVCE split criterion, on every backend.

MBCT (Huang et al., "MBCT: Tree-Based Feature-Aware Binning for Individual Uncertainty Calibration",
WWW 2022) picks the split feature of a node by Eq. 12,

.. math:: \Phi_* = \operatorname{argmin}_{\Phi_j}
    \operatorname{MVCE}(\operatorname{calib}(\operatorname{split}(D', \Phi_j))),

with the multi-view calibration error of Eq. 10 over ``r`` random-shuffle uniform-mass partitions of
the node's rows. ``mvce_split_sums`` computes, in one pass over the rows, the residual and weight sums of
every bin of every view for every candidate feature at once, all candidates sharing the same views
(common random numbers); ``mvce_from_split_sums`` turns them into the MVCE of each (node, candidate).
The cost is :math:`O(n\, r\, (d + 1))`, the paper's :math:`O(k d s r n)` for one level. Layout and
formulas are in ``gpucal.kernels.split_mvce_oracle``.
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import numpy as np

from gpucal.kernels._dispatch import (
    check_1d,
    check_count,
    code_dtype,
    float_dtype,
    namespace_of,
    resolve_backend,
    to_host,
)
from gpucal.kernels._feistel import MAX_BIN_PRODUCT, MAX_N_TOTAL, feistel_domain
from gpucal.kernels.group_sums import feature_code_range
from gpucal.kernels.group_sums_oracle import value_offsets
from gpucal.kernels.split_mvce_cpu import mvce_split_sums_cpu
from gpucal.kernels.split_mvce_oracle import N_SPLIT_STATS, SPLIT_RESIDUAL, SPLIT_W, mvce_split_sums_oracle
from gpucal.kernels.trees_oracle import LEAF_MAP_CODES

__all__ = ["N_SPLIT_STATS", "SPLIT_RESIDUAL", "SPLIT_W", "mvce_from_split_sums", "mvce_split_sums"]

SEED_MODULUS = 2**64
# View ids are uint64 in the kernels; keep view_start + n_views well inside that.
MAX_VIEW = 2**63
INT32_MAX = int(np.iinfo(np.int32).max)


class _Slots(NamedTuple):
    """Per-slot parameters on the host, in the kernels' dtypes."""

    rows: np.ndarray  # uint64 (n_slots,)
    bins: np.ndarray  # uint64 (n_slots,)
    bin_start: np.ndarray  # int64 (n_slots,)
    right_bits: np.ndarray  # uint64 (n_slots,)
    n_left: np.ndarray  # uint64 (n_slots,)
    total_bins: int


class _Checked(NamedTuple):
    """Inputs after validation; row arrays in the family they came in, the small tables on the host."""

    codes: Any
    f: Any
    y: Any
    w: Any
    slot: Any
    local_row: Any
    slots: _Slots
    child_value: np.ndarray
    node_value: np.ndarray
    leaf_map: int
    n_views: int
    view_start: int
    seed: int
    n_values: np.ndarray


def mvce_split_sums(
    codes: Any,
    f: Any,
    y: Any,
    w: Any,
    slot: Any,
    local_row: Any,
    slot_rows: Any,
    slot_bins: Any,
    slot_bin_start: Any,
    child_value: Any,
    node_value: Any,
    leaf_map: int,
    *,
    n_views: int,
    view_start: int = 0,
    seed: int,
    n_values: Any,
    backend: str = "auto",
    n_blocks: int | None = None,
    threads_per_block: int | None = None,
) -> Any:
    """Sum residuals and weights per (view, node bin, candidate split): the sums behind MBCT's MVCE split.

    .. math::

        S[v, g, j, 0] = \\sum_{i:\\, g_v(i) = g} w_i\\, (q_{ij} - y_i), \\qquad
        S[v, g, j, 1] = \\sum_{i:\\, g_v(i) = g} w_i

    Row :math:`i` of node :math:`s` = ``slot[i]`` falls in bin
    :math:`g_v(i) = \\mathrm{slot\\_bin\\_start}[s] + \\lfloor \\pi_v(\\mathrm{local\\_row}_i)\\,
    \\mathrm{slot\\_bins}[s] / \\mathrm{slot\\_rows}[s] \\rfloor` of view :math:`v`, with
    :math:`\\pi_v` the Feistel permutation of ``[0, slot_rows[s])`` of view ``view_start + v`` of ``seed``
    (the bins of ``gpucal.kernels.views.view_bins`` with ``n_total = slot_rows[s]``): each view cuts each node
    into ``slot_bins[s]`` bins whose sizes differ by at most one (the remainder is spread over the bins,
    no row is dropped). :math:`q_{ij}` is row :math:`i`'s prediction when node :math:`s` is split on
    feature :math:`j` and each child calibrated: the map ``(a, b) = child_value[s, o_j + codes[i, j]]``,
    :math:`o` = ``value_offsets(n_values)``, applied to :math:`f_i` (scale: :math:`\\min(a f, 1)`; shift
    and platt: :math:`\\sigma(a \\operatorname{logit}(\\operatorname{clip}(f, \\epsilon, 1 - \\epsilon))
    + b)`, as ``gpucal.kernels.predict_trees``). Column :math:`j = d` uses ``node_value[s]``, the node left
    unsplit.
    All candidates share the same views (common random numbers).

    Parameters
    ----------
    codes : int array of shape (n, d)
        Dense feature codes, int8, int16 or int32 (other integer dtypes are converted to int32);
        feature ``j``'s codes lie in ``[0, n_values[j])``.
    f, y : arrays of shape (n,)
        Current predictions (probabilities) and labels, float32 or float64.
    w : array of shape (n,) or None
        Row weights (non-negative); ``None`` means one per row.
    slot : int array of shape (n,)
        Active node of each row in ``[-1, n_slots)``; rows with ``-1`` are skipped.
    local_row : int array of shape (n,)
        Index of the row inside its node, in ``[0, slot_rows[slot[i]])``. Over all rows of a node
        (across every partition of a distributed data set) these must be ``0, ..., slot_rows - 1``
        once each for the views to be exact partitions; a Dask partition passes its rows' ids only.
    slot_rows, slot_bins, slot_bin_start : int arrays of shape (n_slots,)
        Rows in each node (at most :math:`2^{62}`), bins per view in each node (at least 1), and the
        first output bin of each node. The nodes' bin ranges must not overlap.
    child_value : float array of shape (n_slots, sum(n_values), 2)
        ``(a, b)`` of the child each feature value goes to, per node and candidate feature; finite.
    node_value : float array of shape (n_slots, 2)
        ``(a, b)`` of each node's own map; finite.
    leaf_map : int
        ``LEAF_SCALE`` (0), ``LEAF_SHIFT`` (1) or ``LEAF_PLATT`` (2).
    n_views : int
        Number of views (``r``) to compute, at least 1.
    view_start : int, default=0
        Id of the first view: views ``[view_start, view_start + n_views)``, so the views can be computed
        in chunks (the chunks' results, concatenated on axis 0, equal one call over all views).
    seed : int
        Seed of the views, taken modulo :math:`2^{64}`.
    n_values : int array of shape (d,)
        Number of values of each feature (fixes the layout of ``child_value``).
    backend : {'auto', 'oracle', 'cpu', 'cuda'}, default='auto'
        - 'auto': 'cuda' when a row array is a cupy array, else 'cpu'.
        - 'oracle': the numpy reference (slow; for tests).
        - 'cpu': the numba CPU twin (parallel over views, bit-for-bit deterministic).
        - 'cuda': the numba-cuda kernel (numpy inputs are copied to the GPU and back).
    n_blocks, threads_per_block
        CUDA launch options for tests and tuning (ignored by the other backends).

    Returns
    -------
    sums : float64 array of shape (n_views, total_bins, d + 1, 2)
        ``total_bins = max(slot_bin_start + slot_bins)`` (0 without slots); ``[..., SPLIT_RESIDUAL]`` the
        residual sums and ``[..., SPLIT_W]`` the bin weights (the same for every column); a cupy array on
        'cuda' with cupy inputs, else numpy.

    Notes
    -----
    The cost is :math:`O(n\\, r\\, (d + 1))` additions. The 'cpu' result is bit-identical between runs
    and thread counts; 'oracle' and 'cuda' add in another order and agree with it to rounding. A bin's
    sums are additive over rows, so the sums of the partitions of a data set add up to the whole's.
    """
    backend = resolve_backend(backend, codes, f, y, w, slot, local_row)
    if backend in ("oracle", "cpu"):
        codes, f, y, w, slot, local_row = (
            None if a is None else to_host(a) for a in (codes, f, y, w, slot, local_row)
        )
    c = _check_inputs(
        codes,
        f,
        y,
        w,
        slot,
        local_row,
        slot_rows,
        slot_bins,
        slot_bin_start,
        child_value,
        node_value,
        leaf_map,
        n_views,
        view_start,
        seed,
        n_values,
    )
    if backend == "oracle":
        w = np.ones(c.codes.shape[0]) if c.w is None else c.w
        return mvce_split_sums_oracle(
            c.codes,
            c.f,
            c.y,
            w,
            c.slot,
            c.local_row,
            c.slots.rows,
            c.slots.bins,
            c.slots.bin_start,
            c.child_value,
            c.node_value,
            c.leaf_map,
            c.n_views,
            c.view_start,
            c.seed,
            c.n_values,
            c.slots.total_bins,
        )
    if backend == "cpu":
        return _split_sums_cpu(c)
    return _split_sums_cuda(c, n_blocks, threads_per_block)


def mvce_from_split_sums(sums: Any, slot_bins: Any, slot_bin_start: Any, p: float = 2.0) -> Any:
    """Return the MVCE (paper Eq. 10) of every (node, candidate split), float64 of shape (n_slots, d + 1).

    .. math::

        \\mathrm{MVCE}_{s, j} = \\Big( \\frac{1}{r} \\sum_{v=1}^{r} \\Big( \\frac{1}{t_{v,s,j}}
            \\sum_{g:\\, W_{v,g,j} > 0} \\frac{|R_{v,g,j}|}{W_{v,g,j}} \\Big)^{p} \\Big)^{1/p}

    with :math:`R = ` ``sums[..., SPLIT_RESIDUAL]``, :math:`W = ` ``sums[..., SPLIT_W]``, ``g`` over the
    node's bins ``[slot_bin_start[s], slot_bin_start[s] + slot_bins[s])`` and :math:`t_{v,s,j}` the
    number of those bins with positive weight. :math:`|R| / W` is the partition calibration error of
    Eq. 4 with weights, :math:`|\\sum w q / \\sum w - \\sum w y / \\sum w|`.

    Parameters
    ----------
    sums : float array of shape (r, total_bins, d + 1, 2)
        The output of ``mvce_split_sums`` (views computed in chunks concatenated on axis 0).
    slot_bins, slot_bin_start : int arrays of shape (n_slots,)
        As given to ``mvce_split_sums``.
    p : float, default=2.0
        The exponent of the mean over views (the paper's :math:`\\ell_p` convention, ``p = 2``); > 0.

    Returns
    -------
    mvce : float64 array of shape (n_slots, d + 1)
        numpy or cupy, as ``sums``.

    Notes
    -----
    A bin with zero weight has no calibration error to measure (Eq. 4 divides by its size): it is left
    out of the mean over the node's bins, so :math:`t` counts the bins with positive weight. That only
    happens with zero weights or when ``slot_bins[s] > slot_rows[s]``. A view in which the node has no
    bin of positive weight has no defined error, and neither has the node: its MVCE is NaN.
    """
    xp = namespace_of(sums)
    if sums.ndim != 4 or sums.shape[3] != N_SPLIT_STATS:
        msg = f"sums must have shape (n_views, total_bins, d + 1, 2). Got shape {tuple(sums.shape)} instead."
        raise ValueError(msg)
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 < float(p) < np.inf:
        msg = f"The 'p' parameter must be a finite real number > 0. Got {p!r} instead."
        raise ValueError(msg)
    bins, bin_start = _check_bin_layout(slot_bins, slot_bin_start, None)
    _, total_bins, n_columns, _ = sums.shape
    ends = bin_start + bins.astype(np.int64)
    if ends.size and int(ends.max()) > total_bins:
        msg = f"slot_bin_start + slot_bins reaches {int(ends.max())}, past the {total_bins} bins of sums."
        raise ValueError(msg)
    out = xp.empty((bins.shape[0], n_columns), dtype=np.float64)
    p = float(p)
    for s in range(bins.shape[0]):
        node = sums[:, int(bin_start[s]) : int(ends[s])].astype(np.float64)
        residual, weight = node[..., SPLIT_RESIDUAL], node[..., SPLIT_W]
        has_weight = weight > 0
        pce = xp.where(has_weight, xp.abs(residual) / xp.where(has_weight, weight, 1.0), 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_view = pce.sum(axis=1) / has_weight.sum(axis=1)
        out[s] = xp.mean(per_view**p, axis=0) ** (1.0 / p)
    return out


def _check_bin_layout(
    slot_bins: Any, slot_bin_start: Any, n_slots: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Check the per-slot bin counts and first bins; return them as uint64 and int64 host arrays."""
    bins = _int_table(slot_bins, "slot_bins", n_slots)
    n_slots = bins.shape[0]
    bin_start = _int_table(slot_bin_start, "slot_bin_start", n_slots)
    if (bins < 1).any():
        s = int(np.flatnonzero(bins < 1)[0])
        msg = f"slot_bins must be >= 1 for every slot. Got slot_bins[{s}] = {bins[s]}."
        raise ValueError(msg)
    if (bin_start < 0).any():
        s = int(np.flatnonzero(bin_start < 0)[0])
        msg = f"slot_bin_start must be >= 0 for every slot. Got slot_bin_start[{s}] = {bin_start[s]}."
        raise ValueError(msg)
    order = np.argsort(bin_start, kind="stable")
    ends = bin_start[order] + bins[order]
    overlap = np.flatnonzero(bin_start[order][1:] < ends[:-1])
    if overlap.size:
        a, b = int(order[overlap[0]]), int(order[overlap[0] + 1])
        msg = (
            f"The bin ranges of slots {a} and {b} overlap: slot_bin_start + [0, slot_bins) must be disjoint. "
            f"Got [{bin_start[a]}, {bin_start[a] + bins[a]}) and [{bin_start[b]}, {bin_start[b] + bins[b]})."
        )
        raise ValueError(msg)
    return bins.astype(np.uint64), bin_start


def _int_table(x: Any, name: str, n_slots: int | None) -> np.ndarray:
    """Return the one-dimensional integer table ``x`` as int64 on the host, checking its length."""
    arr = to_host(x)
    if arr.dtype.kind not in "iu":
        msg = f"{name} must hold integers. Got dtype {arr.dtype} instead."
        raise TypeError(msg)
    if arr.ndim != 1 or (n_slots is not None and arr.shape[0] != n_slots):
        want = "" if n_slots is None else f" with {n_slots} entries"
        msg = f"{name} must be one-dimensional{want}. Got shape {tuple(arr.shape)} instead."
        raise ValueError(msg)
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        msg = f"{name} must fit in int64. Got {int(arr.max())}."
        raise ValueError(msg)
    return arr.astype(np.int64)


def _float_table(x: Any, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Return ``x`` as a C-contiguous float64 host array of ``shape`` with finite entries."""
    arr = to_host(x)
    if arr.dtype.kind not in "fiu":
        msg = f"{name} must hold real numbers. Got dtype {arr.dtype} instead."
        raise TypeError(msg)
    if arr.shape != shape:
        msg = f"{name} must have shape {shape}. Got shape {tuple(arr.shape)} instead."
        raise ValueError(msg)
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    if not np.isfinite(arr).all():
        msg = f"{name} must be finite."
        raise ValueError(msg)
    return arr


def _check_slots(slot_rows: Any, slot_bins: Any, slot_bin_start: Any) -> _Slots:
    rows = _int_table(slot_rows, "slot_rows", None)
    n_slots = rows.shape[0]
    bins, bin_start = _check_bin_layout(slot_bins, slot_bin_start, n_slots)
    if (rows < 0).any() or (rows > MAX_N_TOTAL).any():
        s = int(np.flatnonzero((rows < 0) | (rows > MAX_N_TOTAL))[0])
        msg = f"slot_rows must lie in [0, 2**62]. Got slot_rows[{s}] = {rows[s]}."
        raise ValueError(msg)
    for s in range(n_slots):
        if max(int(rows[s]) - 1, 0) * int(bins[s]) >= MAX_BIN_PRODUCT:
            msg = (
                f"slot_rows[{s}] = {rows[s]} with slot_bins[{s}] = {bins[s]} overflows the 64-bit bin "
                "arithmetic; use fewer bins."
            )
            raise ValueError(msg)
    domains = [feistel_domain(int(r)) for r in rows]
    right_bits = np.array([rb for rb, _ in domains], dtype=np.uint64)
    n_left = np.array([nl for _, nl in domains], dtype=np.uint64)
    total_bins = int((bin_start + bins.astype(np.int64)).max()) if n_slots else 0
    return _Slots(rows.astype(np.uint64), bins, bin_start, right_bits, n_left, total_bins)


def _check_inputs(
    codes: Any,
    f: Any,
    y: Any,
    w: Any,
    slot: Any,
    local_row: Any,
    slot_rows: Any,
    slot_bins: Any,
    slot_bin_start: Any,
    child_value: Any,
    node_value: Any,
    leaf_map: Any,
    n_views: Any,
    view_start: Any,
    seed: Any,
    n_values: Any,
) -> _Checked:
    xp = namespace_of(codes)
    if codes.ndim != 2:
        msg = f"codes must be two-dimensional (rows, features). Got shape {tuple(codes.shape)} instead."
        raise ValueError(msg)
    n_rows, d = codes.shape
    kernel_dtype = code_dtype(codes.dtype, "codes")
    if kernel_dtype != codes.dtype and codes.size and (int(codes.min()) < 0 or int(codes.max()) > INT32_MAX):
        msg = f"codes must lie in [0, {INT32_MAX}] to be converted to int32 from {codes.dtype}."
        raise ValueError(msg)
    codes = xp.ascontiguousarray(codes, dtype=kernel_dtype)
    for name, arr in (("f", f), ("y", y), ("w", w), ("slot", slot), ("local_row", local_row)):
        if arr is not None:
            check_1d(arr, name, n_rows)
    for name, arr in (("f", f), ("y", y), ("w", w)):
        if arr is not None and np.dtype(arr.dtype).kind not in "fiub":
            msg = f"{name} must hold real numbers. Got dtype {arr.dtype} instead."
            raise TypeError(msg)
    for name, arr in (("slot", slot), ("local_row", local_row)):
        if np.dtype(arr.dtype).kind not in "iu":
            msg = f"{name} must hold integers. Got dtype {arr.dtype} instead."
            raise TypeError(msg)
    if isinstance(leaf_map, bool) or leaf_map not in LEAF_MAP_CODES:
        msg = f"The 'leaf_map' parameter must be one of {LEAF_MAP_CODES}. Got {leaf_map!r} instead."
        raise ValueError(msg)
    n_views = check_count(n_views, "n_views", 1)
    view_start = check_count(view_start, "view_start", 0)
    if view_start + n_views > MAX_VIEW:
        msg = f"view_start + n_views must be at most 2**63. Got {view_start + n_views}."
        raise ValueError(msg)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        msg = f"The 'seed' parameter must be an int. Got {seed!r} instead."
        raise ValueError(msg)
    n_values = _int_table(n_values, "n_values", d)
    if (n_values < 0).any():
        msg = f"n_values must hold {d} non-negative counts. Got {n_values!r} instead."
        raise ValueError(msg)
    slots = _check_slots(slot_rows, slot_bins, slot_bin_start)
    n_slots = slots.rows.shape[0]
    child_value = _float_table(child_value, "child_value", (n_slots, int(n_values.sum()), 2))
    node_value = _float_table(node_value, "node_value", (n_slots, 2))
    if n_rows and d:
        low, high = feature_code_range(codes)
        # Out-of-range codes would read another feature's (or another node's) children.
        bad = np.flatnonzero((low < 0) | (high >= n_values))
        if bad.size:
            j = int(bad[0])
            msg = (
                f"codes of feature {j} must lie in [0, n_values[{j}]) = [0, {n_values[j]}). "
                f"Got [{low[j]}, {high[j]}]."
            )
            raise ValueError(msg)
    if n_rows:
        if int(slot.min()) < -1 or int(slot.max()) >= n_slots:
            msg = f"slot must lie in [-1, n_slots) = [-1, {n_slots})."
            raise ValueError(msg)
        kept = slot >= 0
        # One extra entry for the skipped rows, so that the table is never empty.
        table = xp.asarray(np.append(slots.rows.astype(np.int64), 0))
        node_rows = table[xp.where(kept, slot, n_slots)]
        bad_row = kept & ((local_row < 0) | (local_row >= node_rows))
        if bool(bad_row.any()):
            i = int(xp.flatnonzero(bad_row)[0])
            msg = (
                f"local_row must lie in [0, slot_rows[slot[i]]) for rows with slot[i] >= 0. "
                f"Got local_row[{i}] = {int(local_row[i])} with slot_rows[{int(slot[i])}] = "
                f"{int(slots.rows[int(slot[i])])}."
            )
            raise ValueError(msg)
    return _Checked(
        codes,
        f,
        y,
        w,
        slot,
        local_row,
        slots,
        child_value,
        node_value,
        int(leaf_map),
        n_views,
        view_start,
        int(seed) % SEED_MODULUS,
        n_values,
    )


def _split_sums_cpu(c: _Checked) -> np.ndarray:
    # The twin adds in float64 whatever the input; one float dtype halves its compiled variants.
    fdt = np.float64
    f, y = (np.ascontiguousarray(a, dtype=fdt) for a in (c.f, c.y))
    w = np.empty(0, dtype=fdt) if c.w is None else np.ascontiguousarray(c.w, dtype=fdt)
    return mvce_split_sums_cpu(
        c.codes,
        f,
        y,
        w,
        np.ascontiguousarray(c.slot, dtype=np.int32),
        np.ascontiguousarray(c.local_row, dtype=np.int64),
        c.slots.rows,
        c.slots.bins,
        c.slots.bin_start,
        c.slots.right_bits,
        c.slots.n_left,
        c.child_value,
        c.node_value,
        value_offsets(c.n_values),
        c.leaf_map,
        c.n_views,
        np.uint64(c.view_start),
        np.uint64(c.seed),
        c.slots.total_bins,
    )


def _split_sums_cuda(c: _Checked, n_blocks: int | None, threads_per_block: int | None) -> Any:
    from numba import cuda

    from gpucal.kernels.group_sums_cuda import THREADS_PER_BLOCK
    from gpucal.kernels.split_mvce_cuda import launch_mvce_split_sums

    xp = namespace_of(c.codes)
    on_gpu = xp is not np
    fdt = float_dtype(c.f, c.y, c.w)

    def device(a: Any, dtype: Any) -> Any:
        a = xp.ascontiguousarray(xp.asarray(a), dtype=dtype)
        return a if on_gpu else cuda.to_device(a)

    n_columns = c.codes.shape[1] + 1
    total_bins = c.slots.total_bins
    out = device(xp.zeros(c.n_views * total_bins * n_columns * N_SPLIT_STATS, dtype=np.float64), np.float64)
    if c.codes.shape[0] and total_bins:
        launch_mvce_split_sums(
            device(c.codes, c.codes.dtype),
            device(c.f, fdt),
            device(c.y, fdt),
            device(xp.empty(0, dtype=fdt) if c.w is None else c.w, fdt),
            device(c.slot, np.int32),
            device(c.local_row, np.int64),
            device(c.slots.rows, np.uint64),
            device(c.slots.bins, np.uint64),
            device(c.slots.bin_start, np.int64),
            device(c.slots.right_bits, np.uint64),
            device(c.slots.n_left, np.uint64),
            device(c.child_value, np.float64),
            device(c.node_value, np.float64),
            device(value_offsets(c.n_values), np.int64),
            c.leaf_map,
            c.n_views,
            c.view_start,
            c.seed,
            total_bins,
            out,
            n_blocks=n_blocks,
            threads_per_block=threads_per_block or THREADS_PER_BLOCK,
        )
    out = out if on_gpu else out.copy_to_host()
    out = out.reshape(c.n_views, total_bins, n_columns, N_SPLIT_STATS)
    # The kernel adds each bin's weight into column 0 only; every column has the same weight.
    out[:, :, 1:, SPLIT_W] = out[:, :, :1, SPLIT_W]
    return out
