r"""Poisson bootstrap of per-bin sums, one compiled pass over the rows per replicate.

Each replicate gives row ``i`` a multiplier :math:`m_{ri} \sim \mathrm{Poisson}(1)` and sums
``m * w`` and ``m * w * y`` per bin. The multipliers come from a counter-based generator (SplitMix64
of ``(seed, replicate, row)``, then the inverse CDF of Poisson(1)), so replicate ``r`` is the same
whatever the number of threads, and blocks of replicates run on threads with no shared state. Memory is the
``(n_bootstrap, n_bins, 2)`` output: no ``(n_bootstrap, n)`` array is ever made.
"""

from __future__ import annotations

import itertools
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from gpucal.kernels.jit import numba

# Poisson(1) CDF, P(K <= k) for k = 0..POISSON_MAX_K - 1; P(K >= 20) is about 1.5e-19, below the
# 2**-53 resolution of the uniforms, so the last entry is set to 1 to end every search.
POISSON_MAX_K = 20
_POISSON_CDF = np.cumsum([math.exp(-1.0) / math.factorial(k) for k in range(POISSON_MAX_K)])
_POISSON_CDF[-1] = 1.0
# The first seven as scalars, for the branch-free count below (P(K >= 7) is about 8e-5).
_C0, _C1, _C2, _C3, _C4, _C5, _C6 = (float(c) for c in _POISSON_CDF[:7])

# SplitMix64 constants (Steele, Lea & Flood, OOPSLA 2014): the golden-ratio increment and the
# two multipliers of the output mix.
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True)
def _mix64(z):  # pragma: no cover - compiled
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True)
def _poisson1(key, row):  # pragma: no cover - compiled
    # u in [0, 1) from the top 53 bits, then the smallest k with u < P(K <= k). The count of CDF
    # entries below u is summed without branches: a search loop mispredicts on nearly every row
    # (k is random) and was about three times slower; only k >= 7 (about 1 row in 12,000) walks the table.
    u = np.float64(_mix64(key + (np.uint64(row) + np.uint64(1)) * _GAMMA) >> np.uint64(11)) * 2.0**-53
    k = (
        int(u >= _C0)
        + int(u >= _C1)
        + int(u >= _C2)
        + int(u >= _C3)
        + int(u >= _C4)
        + int(u >= _C5)
        + int(u >= _C6)
    )
    if k == 7:
        while u >= _POISSON_CDF[k]:
            k += 1
    return k


@numba.njit(nogil=True, cache=True)
def _poisson_bin_sums(codes, w, wy, seed, first_replicate, out):  # pragma: no cover - compiled
    for j in range(out.shape[0]):
        # One key per (seed, replicate): rows of replicate r are the SplitMix64 stream from that key.
        r = first_replicate + j
        key = _mix64(np.uint64(seed) * _GAMMA + np.uint64(r) + np.uint64(1))
        # Accumulate straight into out (zeroed by the caller): a local accumulator array ran no
        # faster and took 7 s longer to compile.
        for i in range(codes.shape[0]):
            m = _poisson1(key, i)
            out[j, codes[i], 0] += m * w[i]
            out[j, codes[i], 1] += m * wy[i]


@numba.njit(cache=True)
def _poisson_multipliers(seed, replicate, n_rows):  # pragma: no cover - compiled; used by tests
    out = np.empty(n_rows, dtype=np.int64)
    key = _mix64(np.uint64(seed) * _GAMMA + np.uint64(replicate) + np.uint64(1))
    for i in range(n_rows):
        out[i] = _poisson1(key, i)
    return out


def poisson_multipliers(seed: int, replicate: int, n_rows: int) -> np.ndarray:
    """Return the Poisson(1) multipliers of the rows in one replicate (for tests and inspection)."""
    return _poisson_multipliers(np.uint64(seed), np.uint64(replicate), n_rows)


def poisson_bin_sums(
    codes: np.ndarray, w: np.ndarray, wy: np.ndarray, n_bins: int, n_bootstrap: int, seed: int
) -> np.ndarray:
    """Return ``(n_bootstrap, n_bins, 2)`` sums ``sum m*w, sum m*w*y`` per replicate and bin.

    ``codes`` are bin ids in ``[0, n_bins)``; ``w`` and ``wy`` the rows' weight and weight times label
    (host arrays). ``seed`` must be a non-negative int below 2**64.
    """
    out = np.zeros((n_bootstrap, n_bins, 2), dtype=np.float64)
    args = (
        np.ascontiguousarray(codes, dtype=np.int32),
        np.ascontiguousarray(w, dtype=np.float64),
        np.ascontiguousarray(wy, dtype=np.float64),
        np.uint64(seed),
    )
    # Threads over contiguous blocks of replicates (the kernel releases the GIL). numba's
    # parallel=True would do the same but costs about 12 s of compilation on a cold cache.
    n_threads = max(1, min(numba.get_num_threads(), n_bootstrap))
    bounds = np.linspace(0, n_bootstrap, n_threads + 1).astype(np.int64)
    if n_threads == 1:
        _poisson_bin_sums(*args, np.uint64(0), out)
        return out
    with ThreadPoolExecutor(max_workers=n_threads) as pool:
        jobs = [
            pool.submit(_poisson_bin_sums, *args, np.uint64(lo), out[lo:hi])
            for lo, hi in itertools.pairwise(bounds)
        ]
        for job in jobs:
            job.result()
    return out


def poisson_bin_sums_pooled(n_pos: np.ndarray, n_neg: np.ndarray, n_bootstrap: int, seed: int) -> np.ndarray:
    """Return the same ``(n_bootstrap, n_bins, 2)`` sums for unit weights and 0/1 labels, without the rows.

    A sum of independent Poisson(1) multipliers over ``c`` rows is Poisson(``c``), so the multiplied
    count of a bin's positives is Poisson(``n_pos``) and of its negatives Poisson(``n_neg``), all
    independent: the same distribution as :func:`poisson_bin_sums` (not the same draws), in
    ``O(n_bootstrap * n_bins)``.
    """
    rng = np.random.default_rng(seed)
    pos = rng.poisson(n_pos, size=(n_bootstrap, n_pos.shape[0])).astype(np.float64)
    neg = rng.poisson(n_neg, size=(n_bootstrap, n_neg.shape[0])).astype(np.float64)
    return np.stack([pos + neg, pos], axis=-1)


def poisson_bin_sums_oracle(
    codes: np.ndarray, w: np.ndarray, wy: np.ndarray, n_bins: int, n_bootstrap: int, seed: int
) -> np.ndarray:
    """Plain numpy twin of :func:`poisson_bin_sums` (same multipliers, ``bincount`` per replicate)."""
    out = np.zeros((n_bootstrap, n_bins, 2), dtype=np.float64)
    for r in range(n_bootstrap):
        m = poisson_multipliers(seed, r, codes.shape[0])
        out[r, :, 0] = np.bincount(codes, weights=m * w, minlength=n_bins)
        out[r, :, 1] = np.bincount(codes, weights=m * wy, minlength=n_bins)
    return out
