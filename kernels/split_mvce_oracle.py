r"""Numpy oracle for the MVCE split sums: the reference the CPU twin and the CUDA kernel are tested against.

Layout shared by all three forms (oracle, numba CPU twin, numba-cuda kernel). Row :math:`i` with
``slot[i] = s >= 0`` belongs to active node ``s`` and has index ``local_row[i]`` in
``[0, slot_rows[s])`` inside it; rows with ``slot[i] = -1`` are skipped. View ``v`` (the
``view_start + v``-th view of ``seed``) cuts node ``s`` into ``slot_bins[s]`` bins of uniform mass:

.. math:: b_v(i) = \left\lfloor \pi_{v}(\mathrm{local\_row}_i)\, n_{bins} / n_{total} \right\rfloor,
    \qquad n_{total} = \mathrm{slot\_rows}[s], \; n_{bins} = \mathrm{slot\_bins}[s],

with :math:`\pi_v` the Feistel permutation of ``[0, n_total)`` of ``gpucal.kernels._feistel`` (the same bins
as
``gpucal.kernels.views.view_bins`` with that ``n_total``), so bin sizes differ by at most one. The row's bin
in
the output is :math:`g = \mathrm{slot\_bin\_start}[s] + b_v(i)`. Every candidate column ``j`` sees the
same bins (common random numbers). For candidate feature ``j < d`` the row takes its child's map
``(a, b) = child_value[s, o_j + codes[i, j]]`` with ``o = value_offsets(n_values)``; column ``d`` takes
the node's own map ``node_value[s]`` (the node left unsplit). With :math:`q_{ij}` that map applied to
:math:`f_i` (``gpucal.kernels.trees_oracle``: scale :math:`\min(a f, 1)`, shift and platt
:math:`\sigma(a\,\operatorname{logit}(\operatorname{clip} f) + b)`):

.. math:: S[v, g, j, 0] = \sum_{i:\, g_v(i) = g} w_i (q_{ij} - y_i), \qquad
    S[v, g, j, 1] = \sum_{i:\, g_v(i) = g} w_i .

The weight sum does not depend on ``j``; it is repeated for every column so that each ``(g, j)`` entry
holds the residual sum and the weight of one bin of one candidate split.
"""

from __future__ import annotations

import numpy as np

from gpucal.kernels._feistel import feistel_domain
from gpucal.kernels.group_sums_oracle import value_offsets
from gpucal.kernels.trees_oracle import LEAF_SCALE, logit_clipped, sigmoid
from gpucal.kernels.views_oracle import _feistel, _view_keys

# The two statistics per (view, bin, candidate): residual sum and weight sum.
N_SPLIT_STATS = 2
SPLIT_RESIDUAL, SPLIT_W = range(N_SPLIT_STATS)


def candidate_predictions(
    codes: np.ndarray,
    f: np.ndarray,
    slot: np.ndarray,
    child_value: np.ndarray,
    node_value: np.ndarray,
    leaf_map: int,
    n_values: np.ndarray,
) -> np.ndarray:
    """Return ``q`` of shape ``(n, d + 1)``: each row's prediction under each candidate split (0: skipped)."""
    n_rows, d = codes.shape
    offsets = value_offsets(n_values)
    keep = slot >= 0
    s = slot[keep].astype(np.int64)
    params = np.empty((int(keep.sum()), d + 1, 2), dtype=np.float64)
    for j in range(d):
        params[:, j] = child_value[s, offsets[j] + codes[keep, j].astype(np.int64)]
    params[:, d] = node_value[s]
    f64 = np.asarray(f, dtype=np.float64)[keep, None]
    if leaf_map == LEAF_SCALE:
        q = np.minimum(params[..., 0] * f64, 1.0)
    else:
        q = sigmoid(params[..., 0] * logit_clipped(f64) + params[..., 1])
    out = np.zeros((n_rows, d + 1), dtype=np.float64)
    out[keep] = q
    return out


def node_permutation(n_total: int, seed: int, view: int, rows: np.ndarray) -> np.ndarray:
    """Return :math:`\\pi_{view}(r)` for the local row ids ``rows`` of a node of ``n_total`` rows (uint64)."""
    right_bits, n_left = feistel_domain(n_total)
    keys = _view_keys(seed, view)
    x = _feistel(np.asarray(rows, dtype=np.uint64), keys, right_bits, n_left)
    # Cycle walking: re-encrypt only the values still outside [0, n_total).
    outside = x >= np.uint64(n_total)
    while outside.any():
        x[outside] = _feistel(x[outside], keys, right_bits, n_left)
        outside = x >= np.uint64(n_total)
    return x


def mvce_split_sums_oracle(
    codes: np.ndarray,
    f: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    slot: np.ndarray,
    local_row: np.ndarray,
    slot_rows: np.ndarray,
    slot_bins: np.ndarray,
    slot_bin_start: np.ndarray,
    child_value: np.ndarray,
    node_value: np.ndarray,
    leaf_map: int,
    n_views: int,
    view_start: int,
    seed: int,
    n_values: np.ndarray,
    total_bins: int,
) -> np.ndarray:
    """Return the split sums (module docstring) of shape ``(n_views, total_bins, d + 1, 2)`` by bincount."""
    d = codes.shape[1]
    q = candidate_predictions(codes, f, slot, child_value, node_value, leaf_map, n_values)
    w64, y64 = np.asarray(w, dtype=np.float64), np.asarray(y, dtype=np.float64)
    residual = w64[:, None] * (q - y64[:, None])
    out = np.zeros((n_views, total_bins, d + 1, N_SPLIT_STATS), dtype=np.float64)
    for s in range(slot_rows.shape[0]):
        rows = np.flatnonzero(slot == s)
        n_total, n_bins = int(slot_rows[s]), int(slot_bins[s])
        for v in range(n_views):
            pi = node_permutation(n_total, seed, view_start + v, local_row[rows])
            # The exact integer quotient (the compiled backends correct a float64 estimate).
            g = int(slot_bin_start[s]) + ((pi * np.uint64(n_bins)) // np.uint64(n_total)).astype(np.int64)
            for j in range(d + 1):
                out[v, :, j, SPLIT_RESIDUAL] += np.bincount(g, residual[rows, j], total_bins)
                out[v, :, j, SPLIT_W] += np.bincount(g, w64[rows], total_bins)
    return out
