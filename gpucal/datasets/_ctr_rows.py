"""Per-row draws of the synthetic CTR generator: a numpy reference and the numba twin that fills chunks.

Every random number of row ``r`` is a pure function of ``(key, r)``: draw ``s`` of row ``r`` is value
``r * N_STREAMS + s`` of the SplitMix64 sequence started at ``key`` (Steele, Lea & Flood 2014,
"Fast splittable pseudorandom number generators", OOPSLA), so any range of rows can be generated alone,
in any chunking, and gives the same values bit for bit. Categorical codes come from Walker's alias
method with 32-bit integer arithmetic (exact, no floating-point search), the latent context from the
Box-Muller transform, the label from one uniform. The numpy form (``ctr_draws``) is the reference the
numba form is tested against; it also generates the pilot rows the model's intercepts are solved on.
"""

from __future__ import annotations

import math

import numpy as np

from gpucal.kernels.jit import njit, parallel_rows, prange

# Fixed draw layout of one row: one draw per field, two for the context normal, one for the label.
N_FIELD_STREAMS = 6
N_STREAMS = N_FIELD_STREAMS + 3
_CTX_STREAM_1 = N_FIELD_STREAMS
_CTX_STREAM_2 = N_FIELD_STREAMS + 1
_LABEL_STREAM = N_FIELD_STREAMS + 2

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_LOW_32 = np.uint64(0xFFFFFFFF)
_U30, _U27, _U31, _U32, _U11 = (np.uint64(s) for s in (30, 27, 31, 32, 11))
_ONE = np.uint64(1)
_N_STREAMS_U = np.uint64(N_STREAMS)
_TWO_POW_M53 = 2.0**-53
_TWO_PI = 2.0 * math.pi


def _splitmix_numpy(key: np.uint64, counter: np.ndarray) -> np.ndarray:
    """Value ``counter`` of the SplitMix64 sequence from ``key`` (uint64 arrays wrap silently)."""
    z = key + (counter + _ONE) * _GOLDEN
    z = (z ^ (z >> _U30)) * _MIX_1
    z = (z ^ (z >> _U27)) * _MIX_2
    return z ^ (z >> _U31)


def _alias_numpy(x: np.ndarray, accept: np.ndarray, alias: np.ndarray, size: np.uint64) -> np.ndarray:
    """Walker alias draw: the high 32 bits pick a column, the low 32 bits accept it or take its alias."""
    idx = ((x >> _U32) * size) >> _U32
    idx_i = idx.astype(np.int64)
    return np.where((x & _LOW_32) < accept[idx_i], idx_i, alias[idx_i])


def ctr_draws(
    key: int,
    row_start: int,
    n_rows: int,
    accept: np.ndarray,
    alias: np.ndarray,
    offsets: np.ndarray,
    sizes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Numpy reference of the random part of rows ``[row_start, row_start + n_rows)``.

    Returns ``codes`` (n_fields, n_rows) int64, the context ``c`` ~ N(0, 1) and the label uniform ``u``.
    """
    key_u = np.uint64(key)
    counter = (np.arange(n_rows, dtype=np.uint64) + np.uint64(row_start)) * _N_STREAMS_U
    codes = np.empty((len(sizes), n_rows), dtype=np.int64)
    for j in range(len(sizes)):
        lo, hi = offsets[j], offsets[j + 1]
        x = _splitmix_numpy(key_u, counter + np.uint64(j))
        codes[j] = _alias_numpy(x, accept[lo:hi], alias[lo:hi], np.uint64(sizes[j]))
    u_1 = ((_splitmix_numpy(key_u, counter + np.uint64(_CTX_STREAM_1)) >> _U11) + _ONE) * _TWO_POW_M53
    u_2 = (_splitmix_numpy(key_u, counter + np.uint64(_CTX_STREAM_2)) >> _U11) * _TWO_POW_M53
    ctx = np.sqrt(-2.0 * np.log(u_1)) * np.cos(_TWO_PI * u_2)
    u_label = (_splitmix_numpy(key_u, counter + np.uint64(_LABEL_STREAM)) >> _U11) * _TWO_POW_M53
    return codes, ctx, u_label


@njit(cache=True, inline="always")
def _splitmix(key, counter):  # pragma: no cover - compiled
    z = key + (counter + _ONE) * _GOLDEN
    z = (z ^ (z >> _U30)) * _MIX_1
    z = (z ^ (z >> _U27)) * _MIX_2
    return z ^ (z >> _U31)


@parallel_rows("p_out")
def fill_ctr_chunk(
    key,
    row_start,
    accept,
    alias,
    offsets,
    sizes,
    true_table,
    model_table,
    inter_true,
    inter_model,
    inter_fields,
    scalars,
    codes_out,
    p_out,
    score_out,
    label_out,
):  # pragma: no cover - compiled; tested against ``ctr_draws`` and the numpy formula
    """Fill codes, true probability, score and label of rows ``[row_start, row_start + len(p_out))``.

    ``scalars`` = (intercept, ctx_scale, logit_scale, shift, bend, knot); ``inter_fields`` = the two
    fields whose cells index the flat interaction tables (first field's code * second's cardinality +
    second's code).
    """
    intercept, ctx_scale, logit_scale, shift, bend, knot = (
        scalars[0],
        scalars[1],
        scalars[2],
        scalars[3],
        scalars[4],
        scalars[5],
    )
    n_fields = sizes.shape[0]
    field_a, field_b = inter_fields[0], inter_fields[1]
    size_b = np.int64(sizes[field_b])
    for i in prange(p_out.shape[0]):
        counter = (np.uint64(row_start) + np.uint64(i)) * _N_STREAMS_U
        x_1 = _splitmix(key, counter + np.uint64(_CTX_STREAM_1))
        x_2 = _splitmix(key, counter + np.uint64(_CTX_STREAM_2))
        u_1 = (np.float64(x_1 >> _U11) + 1.0) * _TWO_POW_M53
        u_2 = np.float64(x_2 >> _U11) * _TWO_POW_M53
        latent = ctx_scale * (math.sqrt(-2.0 * math.log(u_1)) * math.cos(_TWO_PI * u_2))
        z_true = intercept + latent
        z_model = logit_scale * (intercept + latent)
        for j in range(n_fields):
            x = _splitmix(key, counter + np.uint64(j))
            idx = np.int64(((x >> _U32) * sizes[j]) >> _U32)
            pos = offsets[j] + idx
            if (x & _LOW_32) >= accept[pos]:
                idx = alias[pos]
                pos = offsets[j] + idx
            codes_out[j, i] = idx
            z_true += true_table[pos]
            z_model += model_table[pos]
        cell = codes_out[field_a, i] * size_b + codes_out[field_b, i]
        z_true += inter_true[cell]
        z_model += inter_model[cell]
        z_model += bend * max(z_model - knot, 0.0) + shift
        p = 1.0 / (1.0 + math.exp(-z_true))
        score = 1.0 / (1.0 + math.exp(-z_model))
        p_out[i] = p
        score_out[i] = score
        u_label = np.float64(_splitmix(key, counter + np.uint64(_LABEL_STREAM)) >> _U11) * _TWO_POW_M53
        label_out[i] = 1 if u_label < p else 0
