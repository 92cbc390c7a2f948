"""Counter-based random permutations of ``[0, n_total)``: the MVCE views' bin assignment.

View ``v`` of seed ``s`` permutes the global row ids with a balanced Feistel network on ``2 * half_bits``
bits (the smallest even width covering ``n_total``), whose round function is the splitmix64 finaliser
of ``right ^ round_key``. A Feistel network is a bijection of ``[0, 2**(2 * half_bits))`` whatever its
round function, and cycle walking (apply it again until the value lands below ``n_total``) restricts it
to a bijection of ``[0, n_total)``; the domain is at most four times ``n_total``, so a row takes
fewer than four walks on average. Row ``r`` goes to bin ``(pi_v(r) * n_bins) // n_total``, an exact
uniform-mass partition. Nothing here has state: every backend computes the same bins from
``(seed, view, row)``.

All arithmetic is on ``np.uint64``: numba types ``uint64 op int64`` as float64, so every constant and
cast below is explicit. The functions compile both under ``numba.njit`` and as CUDA device functions.
"""

from __future__ import annotations

import numba
import numpy as np

# splitmix64 (Steele, Lea & Flood 2014) multipliers and the golden-ratio increment.
MIX_MUL_1 = np.uint64(0xBF58476D1CE4E5B9)
MIX_MUL_2 = np.uint64(0x94D049BB133111EB)
GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)
# Four Feistel rounds: Luby & Rackoff's bound for a pseudo-random permutation.
N_ROUNDS = 4
MIN_HALF_BITS = 1
# (pi * n_bins) must fit in 64 bits.
MAX_BIN_PRODUCT = 2**64


@numba.njit(cache=True)
def mix64(z):
    """Return the splitmix64 finaliser of ``z`` (a bijection of uint64 with full avalanche)."""
    z = np.uint64(z)
    z = (z ^ (z >> np.uint64(30))) * MIX_MUL_1
    z = (z ^ (z >> np.uint64(27))) * MIX_MUL_2
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True)
def view_key(seed, view):
    """Return the uint64 key of view ``view`` of ``seed``: ``mix64(seed ^ mix64((view + 1) * gamma))``."""
    return mix64(np.uint64(seed) ^ mix64((np.uint64(view) + np.uint64(1)) * GOLDEN_GAMMA))


@numba.njit(cache=True)
def feistel(x, key, half_bits, half_mask):
    """Apply the keyed Feistel network to ``x`` in ``[0, 2**(2 * half_bits))``."""
    # Casts make callers' int64 (or, in the simulator, Python int) arguments safe: uint64 op int64 is float64.
    half_bits = np.uint64(half_bits)
    half_mask = np.uint64(half_mask)
    left = np.uint64(x) >> half_bits
    right = np.uint64(x) & half_mask
    round_key = np.uint64(key)
    for _ in range(N_ROUNDS):
        round_key = round_key + GOLDEN_GAMMA
        left, right = right, left ^ (mix64(right ^ round_key) & half_mask)
    return (left << half_bits) | right


@numba.njit(cache=True)
def permute(row, n_total, key, half_bits, half_mask):
    """Return ``pi(row)``: the Feistel network cycle-walked into ``[0, n_total)``."""
    n_total = np.uint64(n_total)
    x = feistel(row, key, half_bits, half_mask)
    while x >= n_total:
        x = feistel(x, key, half_bits, half_mask)
    return x


@numba.njit(cache=True)
def row_bin(row, n_total, n_bins, key, half_bits, half_mask):
    """Return the bin of global row ``row`` in the view keyed by ``key``: ``pi(row) * n_bins // n_total``."""
    return (permute(row, n_total, key, half_bits, half_mask) * np.uint64(n_bins)) // np.uint64(n_total)


def feistel_half_bits(n_total: int) -> int:
    """Return the half width of the smallest even-width power-of-two domain covering ``[0, n_total)``."""
    n_bits = max(int(n_total) - 1, 0).bit_length()
    return max(MIN_HALF_BITS, (n_bits + 1) // 2)
