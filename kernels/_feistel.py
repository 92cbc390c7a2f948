"""Counter-based random permutations of ``[0, n_total)``: the MVCE views' bin assignment.

View ``v`` of seed ``s`` permutes the global row ids with a six-round Feistel network on the mixed-radix
domain ``[0, n_left * 2**right_bits)``, ``right_bits = floor(n_bits / 2)`` for the ``n_bits`` that cover
``n_total`` and ``n_left = ceil(n_total / 2**right_bits)`` (Black & Rogaway, "Ciphers with arbitrary
finite domains", CT-RSA 2002: a Feistel network adding its round function modulo the half's size). A
value is ``x = left * 2**right_bits + right``; the rounds alternate

.. math:: \\mathrm{left} \\leftarrow (\\mathrm{left} + F_{2i}(\\mathrm{right})) \\bmod n_{left}, \\qquad
    \\mathrm{right} \\leftarrow \\mathrm{right} \\oplus F_{2i+1}(\\mathrm{left}),

each a bijection whatever ``F``, so the network is a bijection of its domain, and cycle walking (apply
it again until the value lands below ``n_total``) restricts it to a bijection of ``[0, n_total)``. The
domain exceeds ``n_total`` by less than ``2**right_bits``, about ``sqrt(n_total)``, so a walk is rare
(one row in ``sqrt(n_total)``) and the branch is predictable on a CPU and does not diverge on a GPU.

The round function is the splitmix64 finaliser (Steele, Lea & Flood 2014) of the half xor a round key,
its top bits taken; the left round maps its top 32 bits onto ``[0, n_left)`` by ``(h * n_left) >> 32``
(Lemire's multiply-shift range reduction). Six rounds: with halves of a few bits (``n_total`` around
1e4-1e5) a four-round network is measurably non-random (``tests/test_kernels_views.py`` checks).

Row ``r`` goes to bin ``(pi_v(r) * n_bins) // n_total``, an exact uniform-mass partition, computed
without a 64-bit division: a float64 estimate corrected by one exact integer remainder (``bin_of``).
Nothing here has state: every backend computes the same bins from ``(seed, view, row)``.

All arithmetic is on ``np.uint64``: numba types ``uint64 op int64`` as float64, so every constant and
cast below is explicit. The functions compile both under ``numba.njit`` and as CUDA device functions.
"""

from __future__ import annotations

import numpy as np

from gpucal.kernels.jit import numba

# splitmix64 (Steele, Lea & Flood 2014) multipliers and the golden-ratio increment.
MIX_MUL_1 = np.uint64(0xBF58476D1CE4E5B9)
MIX_MUL_2 = np.uint64(0x94D049BB133111EB)
GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)
# Round keys keep 63 bits: numba-cuda's simulator hands a device function's uint64 results back as
# Python ints, and values below 2**63 all type as int64, so the key tuple has one numba type.
KEY_MASK = np.uint64(0x7FFFFFFFFFFFFFFF)
# Six Feistel rounds, one key each. Four (Luby & Rackoff's count) fail the row-block-versus-bin chi-square
# test for n_total ~ 1e4-1e5 (halves of 7-9 bits, where a four-round network is far from random); six pass.
N_ROUNDS = 6
HASH_BITS = np.uint64(32)
MIN_DOMAIN_BITS = 2
# (pi * n_bins) must fit in 64 bits, and bin_of's signed remainder needs 2 * n_total < 2**63.
MAX_BIN_PRODUCT = 2**64
MAX_N_TOTAL = 2**62


@numba.njit(cache=True)
def mix64(z):
    """Return the splitmix64 finaliser of ``z`` (a bijection of uint64 with full avalanche)."""
    z = np.uint64(z)
    z = (z ^ (z >> np.uint64(30))) * MIX_MUL_1
    z = (z ^ (z >> np.uint64(27))) * MIX_MUL_2
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True)
def view_keys(seed, view):
    """Return the ``N_ROUNDS`` round keys of view ``view`` of ``seed``, a tuple of uint64 below 2**63.

    .. math:: k = \\mathrm{mix64}(s \\oplus \\mathrm{mix64}((v + 1)\\gamma)), \\qquad
        k_j = \\mathrm{mix64}(k + (j + 1)\\gamma) \\wedge (2^{63} - 1)
    """
    key = mix64(np.uint64(seed) ^ mix64((np.uint64(view) + np.uint64(1)) * GOLDEN_GAMMA))
    return (
        mix64(key + np.uint64(1) * GOLDEN_GAMMA) & KEY_MASK,
        mix64(key + np.uint64(2) * GOLDEN_GAMMA) & KEY_MASK,
        mix64(key + np.uint64(3) * GOLDEN_GAMMA) & KEY_MASK,
        mix64(key + np.uint64(4) * GOLDEN_GAMMA) & KEY_MASK,
        mix64(key + np.uint64(5) * GOLDEN_GAMMA) & KEY_MASK,
        mix64(key + np.uint64(6) * GOLDEN_GAMMA) & KEY_MASK,
    )


@numba.njit(cache=True)
def feistel_pair(left, right, key_left, key_right, right_shift, n_left):
    """Return ``(left, right)`` after one left round and one right round of the Feistel network."""
    # left += F(right) mod n_left: F's top 32 bits scaled onto [0, n_left), so left + F < 2 n_left.
    left += ((mix64(right ^ np.uint64(key_left)) >> HASH_BITS) * n_left) >> HASH_BITS
    left = left - n_left if left >= n_left else left
    right ^= mix64(left ^ np.uint64(key_right)) >> right_shift
    return left, right


@numba.njit(cache=True)
def feistel(x, keys, right_bits, n_left):
    """Apply the keyed Feistel network to ``x`` in ``[0, n_left * 2**right_bits)``."""
    # Casts make callers' int64 (or, in the simulator, Python int) arguments safe: uint64 op int64 is float64.
    right_bits = np.uint64(right_bits)
    n_left = np.uint64(n_left)
    right_shift = np.uint64(64) - right_bits
    x = np.uint64(x)
    left = x >> right_bits
    right = x & ((np.uint64(1) << right_bits) - np.uint64(1))
    left, right = feistel_pair(left, right, keys[0], keys[1], right_shift, n_left)
    left, right = feistel_pair(left, right, keys[2], keys[3], right_shift, n_left)
    left, right = feistel_pair(left, right, keys[4], keys[5], right_shift, n_left)
    return (left << right_bits) | right


@numba.njit(cache=True)
def walk(x, n_total, keys, right_bits, n_left):
    """Return ``x`` if below ``n_total``, else its first image under ``feistel`` that is (cycle walking)."""
    n_total = np.uint64(n_total)
    x = np.uint64(x)
    while x >= n_total:
        x = feistel(x, keys, right_bits, n_left)
    return x


@numba.njit(cache=True)
def permute(row, n_total, keys, right_bits, n_left):
    """Return ``pi(row)``: the Feistel network cycle-walked into ``[0, n_total)``."""
    return walk(feistel(row, keys, right_bits, n_left), n_total, keys, right_bits, n_left)


@numba.njit(cache=True)
def bin_of(x, n_total, n_bins):
    """Return ``(x * n_bins) // n_total`` for ``x < n_total <= MAX_N_TOTAL``, without a 64-bit division.

    The float64 estimate is within one of the quotient (its relative error is a few ulps and the
    quotient is below ``2**32``); the exact remainder ``x * n_bins - est * n_total`` (wrapping, read
    as signed) lies in ``[0, n_total)`` when the estimate is right, and says which way it is off if not.
    """
    x = np.uint64(x)
    n_total = np.uint64(n_total)
    n_bins = np.uint64(n_bins)
    scale = np.float64(n_bins) / np.float64(n_total)
    est = np.int64(np.float64(np.int64(x)) * scale)
    rem = np.int64(x * n_bins - np.uint64(est) * n_total)
    return est + np.int64(rem >= np.int64(n_total)) - np.int64(rem < np.int64(0))


@numba.njit(cache=True)
def row_bin(row, n_total, n_bins, keys, right_bits, n_left):
    """Return the bin of global row ``row`` in the view with round keys ``keys``.

    .. math:: b = \\lfloor \\pi(\\mathrm{row})\\, n_{bins} / n_{total} \\rfloor
    """
    return bin_of(permute(row, n_total, keys, right_bits, n_left), n_total, n_bins)


def feistel_domain(n_total: int) -> tuple[int, int]:
    """Return ``(right_bits, n_left)``: the Feistel domain ``[0, n_left * 2**right_bits)`` for ``n_total``.

    ``right_bits`` is half (rounded down) of the bits of ``n_total - 1`` (at least ``MIN_DOMAIN_BITS``), so
    both halves hold at most 32 bits, and the domain exceeds ``n_total`` by less than ``2**right_bits``.
    """
    n_bits = max(MIN_DOMAIN_BITS, max(int(n_total) - 1, 0).bit_length())
    right_bits = n_bits // 2
    n_left = max(1, -(-int(n_total) // (1 << right_bits)))
    return right_bits, n_left
