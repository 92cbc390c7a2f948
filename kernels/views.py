"""``view_bins`` and ``view_sums``: MVCE's random uniform-mass views, on every backend.

MVCE (Huang et al., "MBCT", WWW 2022, section 4) scores a calibrator on ``n_views`` random partitions
of the rows into bins of ``bin_size`` rows. Here view ``v`` is the permutation ``pi_v`` of the global
row ids ``[0, n_total)`` given by ``gpucal.kernels._feistel`` and row ``r`` falls in bin
``(pi_v(r) * n_bins) // n_total``, so a bin holds between ``bin_size`` and ``2 * bin_size - 1`` rows,
and a Dask partition starting at ``row_offset`` gets exactly the bins it would get on one machine.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpucal.kernels._dispatch import (
    check_1d,
    check_count,
    float_dtype,
    namespace_of,
    readonly,
    resolve_backend,
    to_host,
)
from gpucal.kernels._feistel import MAX_BIN_PRODUCT, MAX_N_TOTAL, feistel_domain
from gpucal.kernels.views_cpu import view_bins_cpu, view_sums_cpu
from gpucal.kernels.views_oracle import (
    N_VIEW_STATS,
    VIEW_COUNT,
    VIEW_W,
    VIEW_WP,
    VIEW_WY,
    view_bins_oracle,
    view_sums_oracle,
)

__all__ = ["N_VIEW_STATS", "VIEW_COUNT", "VIEW_W", "VIEW_WP", "VIEW_WY", "view_bins", "view_sums"]

SEED_MODULUS = 2**64

# Bin ids are written as int32 on every backend.
MAX_BINS = 2**31 - 1


def _view_params(n_total: int, n_views: int, bin_size: int, seed: Any) -> tuple[int, int, int, int, int]:
    """Check the view parameters; return ``(n_views, n_bins, seed mod 2**64, right_bits, n_left)``."""
    n_total = check_count(n_total, "n_total", 0)
    n_views = check_count(n_views, "n_views", 1)
    bin_size = check_count(bin_size, "bin_size", 1)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        msg = f"The 'seed' parameter must be an int. Got {seed!r} instead."
        raise ValueError(msg)
    if n_total > MAX_N_TOTAL:
        msg = f"n_total={n_total} exceeds the 2**62 rows the 64-bit view arithmetic covers."
        raise ValueError(msg)
    n_bins = max(1, n_total // bin_size)
    if n_bins > MAX_BINS:
        msg = f"n_total={n_total}, bin_size={bin_size}: {n_bins} bins; bin ids are int32 (<= {MAX_BINS})."
        raise ValueError(msg)
    if max(n_total - 1, 0) * n_bins >= MAX_BIN_PRODUCT:
        msg = (
            f"n_total={n_total} with bin_size={bin_size} overflows the 64-bit bin arithmetic; raise bin_size."
        )
        raise ValueError(msg)
    return n_views, n_bins, int(seed) % SEED_MODULUS, *feistel_domain(n_total)


def view_bins(
    n_total: int,
    *,
    n_views: int,
    bin_size: int,
    seed: int,
    rows: Any = None,
    backend: str = "auto",
    n_blocks: int | None = None,
    threads_per_block: int | None = None,
) -> Any:
    """Return the bin of each row in each view, shape ``(n_views, len(rows))``, int32.

    .. math:: b_v(r) = \\left\\lfloor \\pi_v(r)\\, n_{bins} / n_{total} \\right\\rfloor,
        \\qquad n_{bins} = \\max(1, \\lfloor n_{total} / \\mathrm{bin\\_size} \\rfloor)

    Parameters
    ----------
    n_total : int
        Number of rows over all partitions.
    n_views, bin_size, seed : int
        Number of views, target rows per bin, and the seed (taken modulo :math:`2^{64}`).
    rows : int array, default=None
        Global row ids in ``[0, n_total)``; ``None`` means all of them in order.
    backend : {'auto', 'oracle', 'cpu', 'cuda'}, default='auto'
        'auto' is 'cuda' when ``rows`` is a cupy array, else 'cpu'.
    n_blocks, threads_per_block
        CUDA launch options (tests and tuning; ignored by the other backends).

    Returns
    -------
    bins : int32 array of shape (n_views, len(rows))
    """
    backend = resolve_backend(backend, rows)
    n_views, n_bins, seed, right_bits, n_left = _view_params(n_total, n_views, bin_size, seed)
    if rows is None:
        rows = np.arange(n_total, dtype=np.uint64)
    if rows.ndim != 1:
        msg = f"rows must be one-dimensional. Got shape {tuple(rows.shape)} instead."
        raise ValueError(msg)
    if rows.dtype.kind not in "iu":
        msg = f"rows must be integer row ids. Got dtype {rows.dtype} instead."
        raise TypeError(msg)
    if rows.shape[0] and (int(rows.min()) < 0 or int(rows.max()) >= n_total):
        msg = f"rows must lie in [0, n_total) = [0, {n_total})."
        raise ValueError(msg)
    if backend == "oracle":
        return view_bins_oracle(n_total, n_views, bin_size, seed, to_host(rows))
    if backend == "cpu":
        rows = np.ascontiguousarray(to_host(rows), dtype=np.uint64)
        return view_bins_cpu(
            rows,
            n_views,
            np.uint64(n_total),
            np.uint64(n_bins),
            np.uint64(seed),
            np.uint64(right_bits),
            np.uint64(n_left),
        )
    return _view_bins_cuda(
        rows, n_views, n_total, n_bins, seed, right_bits, n_left, n_blocks, threads_per_block
    )


def view_sums(
    p: Any,
    y: Any,
    w: Any = None,
    *,
    n_views: int,
    bin_size: int,
    seed: int,
    row_offset: int = 0,
    n_total: int | None = None,
    backend: str = "auto",
    force_global: bool = False,
    n_blocks: int | None = None,
    threads_per_block: int | None = None,
) -> Any:
    """Sum ``count, w, w*p, w*y`` per (view, bin): the statistics of MVCE's random views.

    .. math::

        S[v, b, :] = \\sum_{i:\\, b_v(\\mathrm{row\\_offset} + i) = b} (1,\\; w_i,\\; w_i p_i,\\; w_i y_i)

    Parameters
    ----------
    p, y : arrays of shape (n,)
        Calibrated probabilities and labels, float32 or float64 (summed in float64).
    w : array of shape (n,), default=None
        Row weights; ``None`` means one per row.
    n_views, bin_size, seed : int
        As in ``view_bins``.
    row_offset : int, default=0
        Global id of the first row (a Dask partition's start).
    n_total : int, default=None
        Rows over all partitions; ``None`` means ``len(p)`` and needs ``row_offset == 0``.
    backend : {'auto', 'oracle', 'cpu', 'cuda'}, default='auto'
        'auto' is 'cuda' when the inputs are cupy arrays, else 'cpu'.
    force_global, n_blocks, threads_per_block
        CUDA launch options for tests and tuning (ignored by the other backends).

    Returns
    -------
    sums : float64 array of shape (n_views, n_bins, 4)
        In the order ``VIEW_COUNT, VIEW_W, VIEW_WP, VIEW_WY``; cupy with cupy inputs on 'cuda'.

    Notes
    -----
    The sums over the partitions of a data set equal the sums over the whole (up to rounding), since
    the bins depend only on the global row id. The 'cpu' result is bit-identical between runs.
    """
    backend = resolve_backend(backend, p, y, w)
    if backend in ("oracle", "cpu"):
        p, y, w = (None if a is None else to_host(a) for a in (p, y, w))
    check_1d(p, "p", p.shape[0] if p.ndim == 1 else -1)
    n_rows = p.shape[0]
    check_1d(y, "y", n_rows)
    if w is not None:
        check_1d(w, "w", n_rows)
    row_offset = check_count(row_offset, "row_offset", 0)
    if n_total is None:
        if row_offset:
            msg = "n_total must be given with row_offset (the rows of all partitions together)."
            raise ValueError(msg)
        n_total = n_rows
    if row_offset + n_rows > check_count(n_total, "n_total", 0):
        msg = f"row_offset + len(p) = {row_offset + n_rows} exceeds n_total = {n_total}."
        raise ValueError(msg)
    n_views, n_bins, seed, right_bits, n_left = _view_params(n_total, n_views, bin_size, seed)
    if backend == "oracle":
        w = np.ones(n_rows) if w is None else w
        return view_sums_oracle(p, y, w, n_views, bin_size, seed, row_offset, n_total)
    if backend == "cpu":
        # The twin adds in float64 whatever the input; one float dtype halves its compiled variants.
        fdt = np.float64
        p, y = (readonly(np.ascontiguousarray(a, dtype=fdt)) for a in (p, y))
        w = readonly(np.empty(0, dtype=fdt) if w is None else np.ascontiguousarray(w, dtype=fdt))
        return view_sums_cpu(
            p,
            y,
            w,
            n_views,
            np.uint64(row_offset),
            np.uint64(n_total),
            np.uint64(n_bins),
            np.uint64(seed),
            np.uint64(right_bits),
            np.uint64(n_left),
        )
    return _view_sums_cuda(
        p,
        y,
        w,
        float_dtype(p, y, w),
        n_views,
        row_offset,
        n_total,
        n_bins,
        seed,
        right_bits,
        n_left,
        force_global,
        n_blocks,
        threads_per_block,
    )


def _view_bins_cuda(
    rows: Any,
    n_views: int,
    n_total: int,
    n_bins: int,
    seed: int,
    right_bits: int,
    n_left: int,
    n_blocks: int | None,
    threads_per_block: int | None,
) -> Any:
    from numba import cuda

    from gpucal.kernels.group_sums_cuda import THREADS_PER_BLOCK
    from gpucal.kernels.views_cuda import launch_view_bins

    xp = namespace_of(rows)
    on_gpu = xp is not np
    rows = xp.ascontiguousarray(rows, dtype=np.uint64)
    out = xp.empty((n_views, rows.shape[0]), dtype=np.int32)
    d_rows, d_out = (rows, out) if on_gpu else (cuda.to_device(rows), cuda.to_device(out))
    if rows.shape[0]:
        launch_view_bins(
            d_rows,
            n_total,
            n_bins,
            seed,
            right_bits,
            n_left,
            d_out,
            n_blocks=n_blocks,
            threads_per_block=threads_per_block or THREADS_PER_BLOCK,
        )
    return d_out if on_gpu else d_out.copy_to_host()


def _view_sums_cuda(
    p: Any,
    y: Any,
    w: Any,
    fdt: np.dtype,
    n_views: int,
    row_offset: int,
    n_total: int,
    n_bins: int,
    seed: int,
    right_bits: int,
    n_left: int,
    force_global: bool,
    n_blocks: int | None,
    threads_per_block: int | None,
) -> Any:
    from numba import cuda

    from gpucal.kernels.group_sums_cuda import THREADS_PER_BLOCK
    from gpucal.kernels.views_cuda import launch_view_sums

    xp = namespace_of(p)
    on_gpu = xp is not np

    def device(a: Any, dtype: Any) -> Any:
        a = xp.ascontiguousarray(a, dtype=dtype)
        return a if on_gpu else cuda.to_device(a)

    d_p, d_y = device(p, fdt), device(y, fdt)
    d_w = device(xp.empty(0, dtype=fdt) if w is None else w, fdt)
    out = device(xp.zeros(n_views * n_bins * N_VIEW_STATS, dtype=np.float64), np.float64)
    if p.shape[0]:
        launch_view_sums(
            d_p,
            d_y,
            d_w,
            n_views,
            row_offset,
            n_total,
            n_bins,
            seed,
            right_bits,
            n_left,
            out,
            force_global=force_global,
            n_blocks=n_blocks,
            threads_per_block=threads_per_block or THREADS_PER_BLOCK,
        )
    out = out if on_gpu else out.copy_to_host()
    return out.reshape(n_views, n_bins, N_VIEW_STATS)
