r"""Refit the leaves of a grown tree by grouped Newton steps on the log-loss (the "shift" and "platt" maps).

Growth fits a shift leaf with a single Newton step from the tree input (``_leaves``); once the structure
is fixed, a few more steps per leaf make it the penalised maximum-likelihood value. Every step needs only
per-leaf sums (``newton_sums``: one fused numba pass on the CPU, ``kernels.group_sums`` with one
constant feature and the leaf as the node elsewhere):

.. math::

    g = \sum_{i \in b} w_i (q_i - y_i)\, x_i, \qquad
    H = \sum_{i \in b} w_i q_i (1 - q_i)\, x_i x_i^\top, \qquad
    q_i = \sigma(a l_i + d), \quad x_i = (l_i, 1),

with :math:`l = \operatorname{logit} f` and a ridge ``penalty`` pulling :math:`(a, d)` toward the grown
:math:`(1, d_0)`; the shift map keeps :math:`a = 1` and uses the second coordinate only.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal.calibrators._logistic import EPS
from gpucal.partition.splits import MAX_SHIFT
from kernels import STAT_W, STAT_WF, STAT_WFF, STAT_WFY, STAT_WY, group_sums

N_NEWTON_STEPS = 4
# Trust region per step (XGBoost's max_delta_step, for the same reason): a leaf with no positives, or
# separable ones, has no finite optimum, and an undamped Newton step there overshoots by orders of magnitude.
MAX_STEP_SLOPE = 0.5
MAX_STEP_SHIFT = 2.0
# Columns of newton_sums.
N_SUMS = 6
SUM_W, SUM_R, SUM_RL, SUM_H, SUM_HL, SUM_HLL = range(N_SUMS)
# Row chunks of the fused CPU pass: a fixed count (so sums do not depend on the thread count).
MAX_CHUNKS = 16
MIN_CHUNK_ROWS = 1 << 16
# Keeps a leaf's 2x2 Hessian invertible when its logits are all equal (the slope is then not identified).
RIDGE = 1e-9


def refit_leaf_maps(
    f: Any,
    y: Any,
    w: Any,
    leaf: Any,
    values: np.ndarray,
    leaf_map: str,
    penalty: float,
    *,
    backend: str = "auto",
) -> np.ndarray:
    """Return ``values`` (``(n_nodes, 2)``) with every node that holds rows refitted; others unchanged."""
    xp = array_namespace(f)
    logit = xp.log(xp.clip(f, EPS, 1.0 - EPS)) - xp.log1p(-xp.clip(f, EPS, 1.0 - EPS))
    target = values.copy()
    out = values.copy()
    for _ in range(N_NEWTON_STEPS):
        sums = newton_sums(logit, y, w, leaf, out, backend=backend)
        has_rows = sums[:, SUM_W] > 0
        g_b = sums[:, SUM_R] + penalty * (out[:, 1] - target[:, 1])
        h_bb = sums[:, SUM_H] + penalty + RIDGE
        if leaf_map == "shift":
            step_b = np.clip(g_b / h_bb, -MAX_STEP_SHIFT, MAX_STEP_SHIFT)
            out[:, 1] = np.where(has_rows, np.clip(out[:, 1] - step_b, -MAX_SHIFT, MAX_SHIFT), out[:, 1])
            continue
        g_a = sums[:, SUM_RL] + penalty * (out[:, 0] - target[:, 0])
        h_aa = sums[:, SUM_HLL] + penalty + RIDGE
        h_ab = sums[:, SUM_HL]
        det = h_aa * h_bb - h_ab * h_ab
        ok = has_rows & (det > 0)
        safe = np.where(ok, det, 1.0)
        step_a = np.clip((h_bb * g_a - h_ab * g_b) / safe, -MAX_STEP_SLOPE, MAX_STEP_SLOPE)
        step_b = np.clip((h_aa * g_b - h_ab * g_a) / safe, -MAX_STEP_SHIFT, MAX_STEP_SHIFT)
        out[:, 0] = np.where(ok, out[:, 0] - step_a, out[:, 0])
        out[:, 1] = np.where(ok, np.clip(out[:, 1] - step_b, -MAX_SHIFT, MAX_SHIFT), out[:, 1])
    return out


def newton_sums(
    logit: Any, y: Any, w: Any, leaf: Any, values: np.ndarray, *, backend: str = "auto"
) -> np.ndarray:
    r"""Return per node the six Newton sums ``(n_nodes, 6)`` at the maps ``values`` (columns ``SUM_*``).

    With :math:`q = \sigma(a_b l + d_b)`, :math:`r = q - y`, :math:`h = w q (1 - q)`: :math:`\sum w`,
    :math:`\sum w r`, :math:`\sum w r l`, :math:`\sum h`, :math:`\sum h l`, :math:`\sum h l^2`. On numpy
    inputs with the CPU backend, one fused numba pass; otherwise two ``kernels.group_sums`` passes (the
    GPU and oracle path), which give the same sums in another order.
    """
    xp = array_namespace(logit)
    n_nodes = values.shape[0]
    if xp is np and backend in ("auto", "cpu"):
        wt = np.empty(0) if w is None else np.ascontiguousarray(w, dtype=np.float64)
        n_chunks = max(1, min(MAX_CHUNKS, logit.shape[0] // MIN_CHUNK_ROWS))
        return _newton_sums_cpu(logit, y, wt, leaf, values[:, 0].copy(), values[:, 1].copy(), n_chunks)
    constant = xp.zeros((logit.shape[0], 1), dtype=xp.int8)
    a, b = xp.asarray(values[:, 0])[leaf], xp.asarray(values[:, 1])[leaf]
    q = 1.0 / (1.0 + xp.exp(-(a * logit + b)))
    first = _leaf_sums(constant, logit, q - y, w, leaf, n_nodes, backend)
    curvature = q * (1.0 - q) if w is None else w * q * (1.0 - q)
    second = _leaf_sums(constant, logit, y, curvature, leaf, n_nodes, backend)
    columns = [first[:, STAT_W], first[:, STAT_WY], first[:, STAT_WFY]]
    columns += [second[:, STAT_W], second[:, STAT_WF], second[:, STAT_WFF]]
    return np.stack(columns, axis=1)


@numba.njit(parallel=True, cache=True)
def _newton_sums_cpu(logit, y, w, leaf, a_node, b_node, n_chunks):
    """One fused pass: each fixed row chunk fills a private ``(n_nodes, 6)`` block, added in chunk order."""
    n = logit.shape[0]
    n_nodes = a_node.shape[0]
    has_w = w.shape[0] > 0
    private = np.zeros((n_chunks, n_nodes, N_SUMS))
    size = (n + n_chunks - 1) // n_chunks
    for c in numba.prange(n_chunks):
        acc = private[c]
        for i in range(c * size, min(n, (c + 1) * size)):
            m = leaf[i]
            if m < 0:
                continue
            li = logit[i]
            q = 1.0 / (1.0 + np.exp(-(a_node[m] * li + b_node[m])))
            wi = w[i] if has_w else 1.0
            wr = wi * (q - y[i])
            h = wi * q * (1.0 - q)
            acc[m, 0] += wi
            acc[m, 1] += wr
            acc[m, 2] += wr * li
            acc[m, 3] += h
            acc[m, 4] += h * li
            acc[m, 5] += h * li * li
    out = np.zeros((n_nodes, N_SUMS))
    for c in range(n_chunks):
        out += private[c]
    return out


def _leaf_sums(constant: Any, f: Any, y: Any, w: Any, leaf: Any, n_nodes: int, backend: str) -> np.ndarray:
    """Return the seven sums per leaf, ``(n_nodes, 7)``: a group sum with one constant feature."""
    one = np.ones(1, dtype=np.int64)
    sums = group_sums(constant, f, y, w, node_idx=leaf, n_nodes=n_nodes, n_values=one, backend=backend)
    return to_numpy(sums)[:, 0, :]
