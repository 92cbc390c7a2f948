r"""Refit the leaves of a grown tree by grouped Newton steps on the log-loss (the "shift" and "platt" maps).

Growth fits a shift leaf with a single Newton step from the tree input (``_leaves``); once the structure
is fixed, a few more steps per leaf make it the penalised maximum-likelihood value. Every step needs only
per-leaf sums, taken by ``kernels.group_sums`` with one constant feature and the leaf as the node:

.. math::

    g = \sum_{i \in b} w_i (q_i - y_i)\, x_i, \qquad
    H = \sum_{i \in b} w_i q_i (1 - q_i)\, x_i x_i^\top, \qquad
    q_i = \sigma(a l_i + d), \quad x_i = (l_i, 1),

with :math:`l = \operatorname{logit} f` and a ridge ``penalty`` pulling :math:`(a, d)` toward the grown
:math:`(1, d_0)`; the shift map keeps :math:`a = 1` and uses the second coordinate only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal.calibrators._logistic import EPS
from gpucal.mbct._leaves import MAX_SHIFT
from kernels import STAT_W, STAT_WF, STAT_WFF, STAT_WFY, STAT_WY, group_sums

N_NEWTON_STEPS = 4
# Trust region per step (XGBoost's max_delta_step, for the same reason): a leaf with no positives, or
# separable ones, has no finite optimum, and an undamped Newton step there overshoots by orders of magnitude.
MAX_STEP_SLOPE = 0.5
MAX_STEP_SHIFT = 2.0
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
    n_nodes = values.shape[0]
    constant = xp.zeros((f.shape[0], 1), dtype=xp.int8)
    logit = xp.log(xp.clip(f, EPS, 1.0 - EPS)) - xp.log1p(-xp.clip(f, EPS, 1.0 - EPS))
    target = values.copy()
    out = values.copy()
    for _ in range(N_NEWTON_STEPS):
        a, b = xp.asarray(out[:, 0])[leaf], xp.asarray(out[:, 1])[leaf]
        q = 1.0 / (1.0 + xp.exp(-(a * logit + b)))
        if leaf_map == "shift":
            # One pass: with f = q, g = sum w (q - y) = WF - WY and H = sum w q (1 - q) = WF - WFF.
            sums = _leaf_sums(constant, q, y, w, leaf, n_nodes, backend)
            has_rows = sums[:, STAT_W] > 0
            g_b = sums[:, STAT_WF] - sums[:, STAT_WY] + penalty * (out[:, 1] - target[:, 1])
            h_bb = np.maximum(sums[:, STAT_WF] - sums[:, STAT_WFF], 0.0) + penalty + RIDGE
            step_b = np.clip(g_b / h_bb, -MAX_STEP_SHIFT, MAX_STEP_SHIFT)
            out[:, 1] = np.where(has_rows, np.clip(out[:, 1] - step_b, -MAX_SHIFT, MAX_SHIFT), out[:, 1])
            continue
        first = _leaf_sums(constant, logit, q - y, w, leaf, n_nodes, backend)
        curvature = q * (1.0 - q) if w is None else w * q * (1.0 - q)
        second = _leaf_sums(constant, logit, y, curvature, leaf, n_nodes, backend)
        has_rows = first[:, STAT_W] > 0
        g_b = first[:, STAT_WY] + penalty * (out[:, 1] - target[:, 1])
        h_bb = second[:, STAT_W] + penalty + RIDGE
        g_a = first[:, STAT_WFY] + penalty * (out[:, 0] - target[:, 0])
        h_aa = second[:, STAT_WFF] + penalty + RIDGE
        h_ab = second[:, STAT_WF]
        det = h_aa * h_bb - h_ab * h_ab
        ok = has_rows & (det > 0)
        safe = np.where(ok, det, 1.0)
        step_a = np.clip((h_bb * g_a - h_ab * g_b) / safe, -MAX_STEP_SLOPE, MAX_STEP_SLOPE)
        step_b = np.clip((h_aa * g_b - h_ab * g_a) / safe, -MAX_STEP_SHIFT, MAX_STEP_SHIFT)
        out[:, 0] = np.where(ok, out[:, 0] - step_a, out[:, 0])
        out[:, 1] = np.where(ok, np.clip(out[:, 1] - step_b, -MAX_SHIFT, MAX_SHIFT), out[:, 1])
    return out


def _leaf_sums(constant: Any, f: Any, y: Any, w: Any, leaf: Any, n_nodes: int, backend: str) -> np.ndarray:
    """Return the seven sums per leaf, ``(n_nodes, 7)``: a group sum with one constant feature."""
    one = np.ones(1, dtype=np.int64)
    sums = group_sums(constant, f, y, w, node_idx=leaf, n_nodes=n_nodes, n_values=one, backend=backend)
    return to_numpy(sums)[:, 0, :]
