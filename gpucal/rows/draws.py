r"""Random draws per global row index: the same numbers on one machine and over any partitioning.

A generator consumed row after row cannot be advanced to a partition's first row when a draw spends a
varying number of outputs (numpy's Poisson sampler does), so the draws that must agree between one
machine and the partitions of a dask collection are counter-based instead: the uniform of row
:math:`r` in stream :math:`s` under seed :math:`\sigma` is

.. math::

    u_r = 2^{-53} \left\lfloor \operatorname{mix}\big(k_{\sigma,s} + (r + 1)\,\gamma\big) / 2^{11}
    \right\rfloor, \qquad k_{\sigma,s} = \operatorname{mix}\big(\operatorname{mix}(\sigma + \gamma)
    + s\big),

with :math:`\operatorname{mix}` the splitmix64 finaliser and :math:`\gamma` its golden-ratio increment
(Steele, Lea & Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014), all modulo
:math:`2^{64}`: value :math:`r` of the SplitMix64 sequence keyed by seed and stream, so a row's draw
needs only its global index (a block's offset plus its position, :meth:`~gpucal.rows.Rows.offsets`).
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_SHIFTS = (np.uint64(30), np.uint64(27), np.uint64(31))
_MANTISSA_SHIFT = np.uint64(11)
_TWO_POW_M53 = 2.0**-53
# Poisson(1) counts beyond this have probability below 1e-19: a uniform never reaches them.
_MAX_POISSON = 20


def _mix(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser of a uint64 array (array arithmetic wraps modulo 2**64 silently)."""
    z = (z ^ (z >> _SHIFTS[0])) * _MIX_1
    z = (z ^ (z >> _SHIFTS[1])) * _MIX_2
    return z ^ (z >> _SHIFTS[2])


def row_uniforms(seed: int, stream: int, rows: np.ndarray) -> np.ndarray:
    """Return the uniform in [0, 1) of every global row index in ``rows`` for ``(seed, stream)``."""
    # Seeds are any non-negative int (as numpy's default_rng takes): those of 2**64 and more wrap.
    seed_key = _mix(np.array([seed % 2**64], dtype=np.uint64) + _GOLDEN)
    key = _mix(seed_key + np.array([stream], dtype=np.uint64))
    counter = np.asarray(rows, dtype=np.int64).astype(np.uint64) + np.uint64(1)
    z = _mix(key + counter * _GOLDEN)
    return (z >> _MANTISSA_SHIFT).astype(np.float64) * _TWO_POW_M53


def _poisson_one_cdf() -> np.ndarray:
    k = np.arange(_MAX_POISSON + 1)
    log_pmf = -1.0 - np.cumsum(np.log(np.maximum(k, 1)))
    return np.cumsum(np.exp(log_pmf))


_POISSON_ONE_CDF = _poisson_one_cdf()


def poisson_one(u: np.ndarray) -> np.ndarray:
    r"""Return Poisson(1) counts by inversion: the least :math:`k` with :math:`F(k) > u` (float64).

    :math:`F(k) = e^{-1} \sum_{j \le k} 1/j!`; one uniform per count, so a count is a function of
    its row's uniform alone.
    """
    return np.searchsorted(_POISSON_ONE_CDF, u, side="right").astype(np.float64)


def held_out_mask(n: int, fraction: float, seed: int, row_offset: int = 0) -> np.ndarray:
    """Return which of rows ``row_offset .. row_offset + n - 1`` are held out for validation.

    Row ``r`` is held out when the ``r``-th draw of ``numpy.random.default_rng(seed).random`` is below
    ``fraction``. PCG64 spends one 64-bit output per double, so a partition starting at global row
    ``row_offset`` advances the generator by that many outputs and draws the same numbers as one machine.
    """
    bit_generator = np.random.PCG64(seed)  # what default_rng(seed) wraps
    bit_generator.advance(row_offset)
    return np.random.Generator(bit_generator).random(n) < fraction


def check_held_out(n_held: int, n: int, fraction: float, name: str = "validation_fraction") -> None:
    """Raise ``ValueError`` when a random split of ``n`` rows (``n_held`` of them drawn with probability
    ``fraction``, the parameter ``name``) leaves no rows on one side."""
    if n_held == n or n_held == 0:
        msg = f"{name}={fraction} leaves no rows on one side of {n} rows: give more rows"
        raise ValueError(msg)


__all__ = ["check_held_out", "held_out_mask", "poisson_one", "row_uniforms"]
