r"""Node maps and split choice of MBCT, from the group sums of the tree's input ``f`` and labels ``y``.

Each node holds a map of the tree's input probability ``f`` (``gpucal.trees.ensemble``): the paper's
:math:`k_b f` ("scale") or a logit shift :math:`\sigma(\operatorname{logit} f + d_b)` ("shift"; the
"platt" map grows its tree like "shift" and refits :math:`(a_b, d_b)` per node at the end). Every
quantity below is a function of the seven sums :math:`(n, W, \sum wf, \sum wy, \sum wf^2, \sum wfy,
\sum wy^2)` of a node or of a candidate child, so a split decision needs the histogram alone.

Scale map (Huang et al. 2022, Sec. 4.1):

.. math::

    k_b = \frac{\sum w y + \lambda k_p}{\sum w f + \lambda}, \qquad
    L_b(k) = \sum w (k f - y)^2 = k^2 \textstyle\sum w f^2 - 2 k \sum w f y + \sum w y^2,

:math:`k_b` zeroes the child's partition calibration error (Eq. 4) when :math:`\lambda = 0`; the penalty
``leaf_penalty`` = :math:`\lambda` (in units of expected positives) shrinks it toward the parent's
:math:`k_p`. The deterministic criterion is the squared error (Brier) :math:`L` of the split.

Shift map (a Newton step on the log-loss, as XGBoost's leaf weights; Chen & Guestrin 2016, Eq. 5-7):
with :math:`G = \sum w (f - y)` and :math:`H = \sum w f (1 - f)` at :math:`d = 0`,

.. math::

    d_b = d_p - \frac{G + H d_p}{H + \lambda}, \qquad Q_b(d) = G d + \tfrac12 H d^2,

the second-order log-loss; the criterion is :math:`\sum_b Q_b(d_b)` against the node's :math:`Q(d_p)`.

Label criteria (the heterogeneous-calibration tree, Durfee et al. 2022, Sec. 5.1: a decision tree that
predicts the label from the features). A node's loss is an impurity of its label rate
:math:`p = \sum w y / W`, from :math:`W = \sum w` and :math:`\sum w y` only:

.. math::

    \text{entropy:}\ L = -W \big(p \ln p + (1 - p) \ln (1 - p)\big), \qquad
    \text{gini:}\ L = 2 W p (1 - p),

(entropy is half the binomial deviance of the node's constant prediction), and the node's map is that
constant, :math:`(a, b) = (0, \operatorname{logit} p)`.

Binary splits (``choose_binary_splits``): per node and feature, the best two-way split. An ordinal
feature (numeric bins, the score bin) is cut at a threshold in code order; a categorical one is cut at a
threshold after sorting its codes by their own fitted value (the label rate for the label criteria,
the child map's :math:`d` or :math:`k` for the gain criteria). For a binary label and an impurity that is
concave in :math:`p` (entropy, Gini) the best of these ``k - 1`` cuts is the best of all
:math:`2^{k-1} - 1` two-way partitions (Breiman et al. 1984, Sec. 9.4); for the quadratic shift loss
the same holds for the ratio :math:`G / H` (Fisher 1958), which the fitted :math:`d` is when
:math:`\lambda = 0`. Each side must weigh at least ``min_child``; under that constraint the result is the
best cut in sorted order, which the best partition need not be. Codes without rows in the node get no
side.

The functions are numba-compiled: a level's histogram has (open nodes) x (codes) x 7 entries, and one
compiled pass over it replaces a dozen numpy temporaries of that size.
"""

from __future__ import annotations

import math

import numpy as np

from gpucal.kernels import STAT_W, STAT_WF, STAT_WFF, STAT_WFY, STAT_WY, STAT_WYY
from gpucal.kernels.jit import numba, parallel_rows

# Criterion codes of the binary split functions: the node map's loss (MBCT's "gain" with the scale or the
# shift map) or an impurity of the label (HC).
CRIT_SCALE, CRIT_SHIFT, CRIT_ENTROPY, CRIT_GINI = range(4)
LABEL_CRITERIA = ("entropy", "gini")

# A logit shift beyond this is a probability ratio of e**30: only a near-empty or separable child asks for
# it, and a larger one would saturate the sigmoid to exactly 0 or 1 (an infinite log-loss downstream).
MAX_SHIFT = 30.0


@numba.njit(cache=True)
def fit_node(stats, parent_a, parent_b, scale, penalty):
    """Return the ``(a, b)`` map of a node with sums ``stats`` (7,) whose parent's map is ``(a_p, b_p)``.

    A node without the mass to fit (``sum w f + lambda = 0`` for scale, ``H + lambda = 0`` for shift)
    keeps its parent's map.
    """
    if scale:
        den = stats[STAT_WF] + penalty
        if den <= 0.0:
            return parent_a, parent_b
        return (stats[STAT_WY] + penalty * parent_a) / den, parent_b
    g = stats[STAT_WF] - stats[STAT_WY]
    h = max(stats[STAT_WF] - stats[STAT_WFF], 0.0)
    den = h + penalty
    if den <= 0.0:
        return parent_a, parent_b
    d = parent_b - (g + h * parent_b) / den
    return parent_a, min(max(d, -MAX_SHIFT), MAX_SHIFT)


@numba.njit(cache=True)
def node_loss(stats, a, b, scale):
    """Return the criterion loss of a node with sums ``stats`` under the map ``(a, b)`` (plus a constant)."""
    if scale:
        return a * a * stats[STAT_WFF] - 2.0 * a * stats[STAT_WFY] + stats[STAT_WYY]
    g = stats[STAT_WF] - stats[STAT_WY]
    h = max(stats[STAT_WF] - stats[STAT_WFF], 0.0)
    return g * b + 0.5 * h * b * b


@numba.njit(cache=True)
def _is_pooled(hist_row, code, rare_code, min_child):
    return code == rare_code or hist_row[STAT_W] < min_child


@parallel_rows("hist", axes=2)
def choose_splits(hist, offsets, n_values, rare_codes, parent, scale, penalty, min_child):
    """Return the loss of each open node's split on each feature, ``(S, d)``, and each node's own loss.

    ``hist`` is ``(S, sum(n_values), 7)``; a feature's split has one child per code with rows, codes
    lighter than ``min_child`` (and the rare code) pooled into one rest child; a split with fewer than
    two children is no candidate and gets an infinite loss.
    """
    n_slots = hist.shape[0]
    split_loss = np.full((n_slots, n_values.shape[0]), np.inf)
    own_loss = np.zeros(n_slots)
    for s in numba.prange(n_slots):
        pa, pb = parent[s, 0], parent[s, 1]
        node = np.zeros(hist.shape[2])
        for v in range(n_values[0]):
            node += hist[s, v]
        own_loss[s] = node_loss(node, pa, pb, scale)
        rest = np.empty(hist.shape[2])
        for j in range(n_values.shape[0]):
            rest[:] = 0.0
            has_rest = False
            n_children = 0
            loss = 0.0
            for v in range(n_values[j]):
                row = hist[s, offsets[j] + v]
                if row[STAT_W] <= 0.0:  # rows of no weight count as no rows
                    continue
                if _is_pooled(row, v, rare_codes[j], min_child):
                    rest += row
                    has_rest = True
                    continue
                a, b = fit_node(row, pa, pb, scale, penalty)
                loss += node_loss(row, a, b, scale)
                n_children += 1
            if has_rest:
                a, b = fit_node(rest, pa, pb, scale, penalty)
                loss += node_loss(rest, a, b, scale)
                n_children += 1
            if n_children >= 2:
                split_loss[s, j] = loss
    return split_loss, own_loss


@numba.njit(cache=True)
def split_children(hist_feature, rare_code, parent_a, parent_b, scale, penalty, min_child):
    """Return one node's split on one feature: child index per code (-1: none), child maps and weights.

    ``hist_feature`` is that node's ``(n_values[j], 7)`` slice; own children come in code order, the
    pooled rest child (if any) last.
    """
    k = hist_feature.shape[0]
    table = np.full(k, -1, dtype=np.int64)
    values = np.empty((k + 1, 2))
    weights = np.empty(k + 1)
    rest = np.zeros(hist_feature.shape[1])
    pooled = np.zeros(k, dtype=np.bool_)
    n = 0
    for v in range(k):
        row = hist_feature[v]
        if row[STAT_W] <= 0.0:
            continue
        if _is_pooled(row, v, rare_code, min_child):
            rest += row
            pooled[v] = True
            continue
        values[n, 0], values[n, 1] = fit_node(row, parent_a, parent_b, scale, penalty)
        weights[n] = row[STAT_W]
        table[v] = n
        n += 1
    if pooled.any():
        values[n, 0], values[n, 1] = fit_node(rest, parent_a, parent_b, scale, penalty)
        weights[n] = rest[STAT_W]
        for v in range(k):
            if pooled[v]:
                table[v] = n
        n += 1
    return table, values[:n].copy(), weights[:n].copy()


@parallel_rows("hist", axes=2)
def candidate_values(hist, offsets, n_values, rare_codes, parent, scale, penalty, min_child):
    """Return ``(S, sum(n_values), 2)``: the map of the child each code would join, per node and feature.

    The MVCE criterion evaluates every candidate split row by row with these maps (codes without rows
    get the node's map; they hold no row).
    """
    out = np.empty((hist.shape[0], hist.shape[1], 2))
    for s in numba.prange(hist.shape[0]):
        for j in range(n_values.shape[0]):
            o = offsets[j]
            table, values, _ = split_children(
                hist[s, o : o + n_values[j]],
                rare_codes[j],
                parent[s, 0],
                parent[s, 1],
                scale,
                penalty,
                min_child,
            )
            for v in range(n_values[j]):
                c = table[v]
                if c >= 0:
                    out[s, o + v, 0] = values[c, 0]
                    out[s, o + v, 1] = values[c, 1]
                else:
                    out[s, o + v, 0] = parent[s, 0]
                    out[s, o + v, 1] = parent[s, 1]
    return out


# --------------------------------------------------------------------------------------------------
# Label criteria and binary splits


def criterion_code(criterion: str, leaf_map: str) -> int:
    """Return the ``CRIT_*`` code of a growth criterion ("gain" reads the map: scale or shift)."""
    if criterion == "entropy":
        return CRIT_ENTROPY
    if criterion == "gini":
        return CRIT_GINI
    return CRIT_SCALE if leaf_map == "scale" else CRIT_SHIFT


@numba.njit(cache=True)
def label_loss(stats, kind):
    """Return the impurity of a node with sums ``stats`` (7,): entropy or Gini, times its weight."""
    w = stats[STAT_W]
    if w <= 0.0:
        return 0.0
    pos = min(max(stats[STAT_WY], 0.0), w)
    p = pos / w
    if kind == CRIT_GINI:
        return 2.0 * w * p * (1.0 - p)
    loss = 0.0
    if pos > 0.0:
        loss -= pos * math.log(p)
    if pos < w:
        loss -= (w - pos) * math.log1p(-p)
    return loss


@numba.njit(cache=True)
def node_value(stats, parent_a, parent_b, kind, penalty):
    """Return the ``(a, b)`` map of a node: the fitted map (gain) or its label rate as a constant."""
    if kind == CRIT_ENTROPY or kind == CRIT_GINI:
        w = stats[STAT_W]
        if w <= 0.0:
            return parent_a, parent_b
        p = min(max(stats[STAT_WY] / w, 0.0), 1.0)
        logit = math.log(max(p, 1e-300)) - math.log(max(1.0 - p, 1e-300))
        return 0.0, min(max(logit, -MAX_SHIFT), MAX_SHIFT)
    return fit_node(stats, parent_a, parent_b, kind == CRIT_SCALE, penalty)


@numba.njit(cache=True)
def criterion_loss(stats, parent_a, parent_b, kind, penalty):
    """Return the loss of a candidate child: its impurity, or its map's loss at the fitted map."""
    if kind == CRIT_ENTROPY or kind == CRIT_GINI:
        return label_loss(stats, kind)
    a, b = fit_node(stats, parent_a, parent_b, kind == CRIT_SCALE, penalty)
    return node_loss(stats, a, b, kind == CRIT_SCALE)


@numba.njit(cache=True)
def _sort_key(stats, parent_a, parent_b, kind, penalty):
    """A categorical code's place in the scan: its label rate, or its own fitted ``d`` (shift) or ``k``."""
    if kind == CRIT_ENTROPY or kind == CRIT_GINI:
        w = stats[STAT_W]
        return stats[STAT_WY] / w if w > 0.0 else 0.0
    a, b = fit_node(stats, parent_a, parent_b, kind == CRIT_SCALE, penalty)
    return a if kind == CRIT_SCALE else b


@numba.njit(cache=True)
def scan_order(hist_feature, ordinal, parent_a, parent_b, kind, penalty):
    """Return the codes with rows in the node, in the order a threshold cuts them (see the module doc)."""
    k = hist_feature.shape[0]
    codes = np.empty(k, dtype=np.int64)
    m = 0
    for v in range(k):
        if hist_feature[v, STAT_W] > 0.0:
            codes[m] = v
            m += 1
    codes = codes[:m]
    if ordinal:
        return codes
    key = np.empty(m)
    for i in range(m):
        key[i] = _sort_key(hist_feature[codes[i]], parent_a, parent_b, kind, penalty)
    # A stable sort: codes with equal keys stay in code order (deterministic).
    return codes[np.argsort(key, kind="mergesort")]


@numba.njit(cache=True)
def best_threshold(hist_feature, order, parent_a, parent_b, kind, penalty, min_child):
    """Return the least loss of cutting ``order`` after position ``i`` and that ``i`` (-1: no valid cut)."""
    n_stats = hist_feature.shape[1]
    total = np.zeros(n_stats)
    for v in order:
        total += hist_feature[v]
    left = np.zeros(n_stats)
    best, best_at = np.inf, -1
    for i in range(order.shape[0] - 1):
        left += hist_feature[order[i]]
        right = total - left
        if left[STAT_W] < min_child or right[STAT_W] < min_child:
            continue
        loss = criterion_loss(left, parent_a, parent_b, kind, penalty)
        loss += criterion_loss(right, parent_a, parent_b, kind, penalty)
        if loss < best:
            best, best_at = loss, i
    return best, best_at


@parallel_rows("hist", axes=2)
def choose_binary_splits(hist, offsets, n_values, ordinal, allowed, parent, kind, penalty, min_child):
    """Return the best two-way split of each open node on each feature.

    Returns ``split_loss`` ``(S, d)`` (infinite where a feature has no valid cut or is not
    ``allowed``), each node's own loss ``(S,)``, and ``side`` ``(S, sum(n_values))``: the child (0 or 1)
    of each code under that feature's best cut, -1 for codes without rows in the node.
    """
    n_slots = hist.shape[0]
    split_loss = np.full((n_slots, n_values.shape[0]), np.inf)
    own_loss = np.zeros(n_slots)
    side = np.full((n_slots, hist.shape[1]), -1, dtype=np.int8)
    for s in numba.prange(n_slots):
        pa, pb = parent[s, 0], parent[s, 1]
        node = np.zeros(hist.shape[2])
        for v in range(n_values[0]):
            node += hist[s, v]
        if kind == CRIT_ENTROPY or kind == CRIT_GINI:
            own_loss[s] = label_loss(node, kind)
        else:
            own_loss[s] = node_loss(node, pa, pb, kind == CRIT_SCALE)
        for j in range(n_values.shape[0]):
            if not allowed[j]:
                continue
            o = offsets[j]
            feature_hist = hist[s, o : o + n_values[j]]
            order = scan_order(feature_hist, ordinal[j], pa, pb, kind, penalty)
            loss, cut = best_threshold(feature_hist, order, pa, pb, kind, penalty, min_child)
            if cut < 0:
                continue
            split_loss[s, j] = loss
            for i in range(order.shape[0]):
                side[s, o + order[i]] = 0 if i <= cut else 1
    return split_loss, own_loss, side


@numba.njit(cache=True)
def binary_children(hist_feature, side, parent_a, parent_b, kind, penalty):
    """Return the two children of a binary split: their maps ``(2, 2)`` and weights ``(2,)``."""
    sums = np.zeros((2, hist_feature.shape[1]))
    for v in range(hist_feature.shape[0]):
        if side[v] >= 0:
            # Element by element: an array added into a row compiles numba's shape-mismatch message.
            for s in range(hist_feature.shape[1]):
                sums[side[v], s] += hist_feature[v, s]
    values = np.empty((2, 2))
    weights = np.empty(2)
    for c in range(2):
        values[c, 0], values[c, 1] = node_value(sums[c], parent_a, parent_b, kind, penalty)
        weights[c] = sums[c, STAT_W]
    return values, weights
