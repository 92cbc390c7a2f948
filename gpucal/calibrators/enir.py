r"""Ensemble of near-isotonic regressions (ENIR): the near-isotonic solution path, averaged by BIC.

The functional core :func:`enir_knot_map` turns the sums per distinct score into the averaged map (a
piecewise-linear function through the distinct scores); :class:`ENIRCalibrator` computes those sums
over :class:`gpucal.rows.Rows` (one machine or dask partitions), calls it and stores the knots.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, Calibrator, Constraint, Options
from gpucal.calibrators.bins import check_knot_map, interp_clipped
from gpucal.calibrators.score_rows import read_distinct_score_sums
from gpucal.kernels.jit import numba
from gpucal.registry import calibration_method
from gpucal.rows import Rows

#: Block values are kept in [LOG_EPS, 1 - LOG_EPS] inside the log-likelihood (a block at 0 or 1).
LOG_EPS = 1e-12
#: Collision times within this relative distance of the next one merge in the same step.
MERGE_RTOL = 1e-9


#: Lower-bound margin of a path model's BIC over the best one beyond which its weight
#: :math:`\exp(-\Delta\mathrm{BIC} / 2)` is below float64's smallest subnormal (:math:`e^{-745}`): such
#: models enter the average with weight 0 without their BIC being evaluated.
NEGLIGIBLE_BIC = 1600.0
#: Death time of a block still alive at the end of the path.
ALIVE = np.iinfo(np.int64).max


def _fuse(
    fuse_next: np.ndarray, starts: np.ndarray, weight: np.ndarray, weighted_y: np.ndarray, value: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Merge block ``j`` into block ``j + 1`` wherever ``fuse_next[j]`` (chains merge into one block)."""
    opens = np.concatenate([[True], ~fuse_next])
    group = np.cumsum(opens) - 1
    new_weight = np.bincount(group, weight)
    new_value = np.bincount(group, weight * value) / new_weight
    return starts[opens], new_weight, np.bincount(group, weighted_y), new_value


@numba.njit(cache=True, inline="always")
def _heap_swap(times, left, right, i, j):  # pragma: no cover - compiled
    """Swap heap entries ``i`` and ``j``."""
    times[i], times[j] = times[j], times[i]
    left[i], left[j] = left[j], left[i]
    right[i], right[j] = right[j], right[i]


@numba.njit(cache=True)
def _heap_push(times, left, right, size, t, a, b):  # pragma: no cover - compiled
    """Push the meeting ``(t, a, b)`` on the binary min-heap of its first ``size`` entries."""
    i = size
    times[i], left[i], right[i] = t, a, b
    while i > 0:
        parent = (i - 1) // 2
        if times[parent] <= times[i]:
            break
        _heap_swap(times, left, right, i, parent)
        i = parent
    return size + 1


@numba.njit(cache=True)
def _heap_pop(times, left, right, size):  # pragma: no cover - compiled
    """Drop the heap's first entry (the earliest meeting); return the new size."""
    size -= 1
    times[0], left[0], right[0] = times[size], left[size], right[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and times[child + 1] < times[child]:
            child += 1
        if times[i] <= times[child]:
            break
        _heap_swap(times, left, right, i, child)
        i = child
    return size


@numba.njit(cache=True, inline="always")
def _block_deviance(w, wy, v):  # pragma: no cover - compiled
    """``-2`` times a block's binomial log-likelihood at value ``v`` (kept in [LOG_EPS, 1 - LOG_EPS])."""
    v = min(max(v, LOG_EPS), 1.0 - LOG_EPS)
    return -2.0 * (wy * math.log(v) + (w - wy) * math.log1p(-v))


@numba.njit(cache=True)
def _near_isotonic_path(first, weight, weighted_y, value, merge_rtol):  # pragma: no cover - compiled
    """Follow the near-isotonic path from the blocks ``(first, weight, weighted_y, value)`` at lambda 0.

    Blocks form a linked list; each block's value is linear in lambda over its life (its slope reads
    the order of its neighbours, which only a meeting changes, and a meeting ends the block), so the
    meetings of neighbours are events on a min-heap, stale entries skipped. One path step takes the
    earliest meeting and every meeting within ``merge_rtol`` of its step, and fuses their chains.

    Returns the blocks ever formed (first initial block's knot, weight, weighted labels, value at
    ``lam``, ``lam``, slope, birth and death step, the block formed from it or -1) and per path model
    (step) its lambda, block count and the deviance lower bound (every block at its own clipped mean).
    """
    n0 = weight.shape[0]
    cap = 2 * n0
    b_first = np.empty(cap, np.int64)
    b_w = np.empty(cap)
    b_wy = np.empty(cap)
    b_v = np.empty(cap)
    b_lam = np.zeros(cap)
    b_slope = np.zeros(cap)
    b_birth = np.zeros(cap, np.int64)
    b_death = np.full(cap, ALIVE, np.int64)
    b_parent = np.full(cap, -1, np.int64)
    prev = np.empty(cap, np.int64)
    nxt = np.empty(cap, np.int64)
    marked = np.zeros(cap, np.bool_)
    m_lam = np.empty(n0)
    m_k = np.empty(n0, np.int64)
    m_dev = np.empty(n0)
    heap_t = np.empty(3 * n0)
    heap_a = np.empty(3 * n0, np.int64)
    heap_b = np.empty(3 * n0, np.int64)
    group = np.empty(n0, np.int64)
    fresh = np.empty(n0, np.int64)
    dev = 0.0
    for b in range(n0):
        b_first[b], b_w[b], b_wy[b], b_v[b] = first[b], weight[b], weighted_y[b], value[b]
        prev[b], nxt[b] = b - 1, b + 1
        dev += _block_deviance(b_w[b], b_wy[b], b_wy[b] / b_w[b])
    nxt[n0 - 1] = -1
    for b in range(n0):
        down_left = 1.0 if b > 0 and b_v[b - 1] > b_v[b] else 0.0
        down_right = 1.0 if b < n0 - 1 and b_v[b] > b_v[b + 1] else 0.0
        b_slope[b] = (down_left - down_right) / b_w[b]
    size = 0
    for b in range(n0 - 1):
        closing = b_slope[b] - b_slope[b + 1]
        if closing != 0.0:
            size = _heap_push(
                heap_t, heap_a, heap_b, size, max((b_v[b + 1] - b_v[b]) / closing, 0.0), b, b + 1
            )
    m_lam[0], m_k[0], m_dev[0] = 0.0, n0, dev
    n_models, n_blocks, alive, lam = 1, n0, n0, 0.0
    while True:
        while size > 0 and (b_death[heap_a[0]] != ALIVE or nxt[heap_a[0]] != heap_b[0]):
            size = _heap_pop(heap_t, heap_a, heap_b, size)
        if size == 0:
            break
        step = heap_t[0] - lam
        limit = max(lam + step * (1.0 + merge_rtol), heap_t[0])
        lam += step
        n_group = 0
        while size > 0 and heap_t[0] <= limit:
            a, b = heap_a[0], heap_b[0]
            size = _heap_pop(heap_t, heap_a, heap_b, size)
            if b_death[a] == ALIVE and nxt[a] == b and not marked[a]:
                marked[a] = True
                group[n_group] = a
                n_group += 1
        # Fuse each chain of marked pairs into one new block, valued at the members' weighted mean.
        model = n_models
        n_fresh = 0
        for g in range(n_group):
            head = group[g]
            if b_death[head] != ALIVE or (prev[head] >= 0 and marked[prev[head]]):
                continue
            new = n_blocks
            n_blocks += 1
            sw = swy = swv = 0.0
            cur = head
            while True:
                sw += b_w[cur]
                swy += b_wy[cur]
                swv += b_w[cur] * (b_v[cur] + b_slope[cur] * (lam - b_lam[cur]))
                dev -= _block_deviance(b_w[cur], b_wy[cur], b_wy[cur] / b_w[cur])
                b_death[cur], b_parent[cur] = model, new
                alive -= 1
                last = cur
                if not marked[cur]:
                    break
                marked[cur] = False
                cur = nxt[cur]
            b_first[new], b_w[new], b_wy[new], b_v[new], b_lam[new] = b_first[head], sw, swy, swv / sw, lam
            b_birth[new] = model
            prev[new], nxt[new] = prev[head], nxt[last]
            if prev[new] >= 0:
                nxt[prev[new]] = new
            if nxt[new] >= 0:
                prev[nxt[new]] = new
            dev += _block_deviance(sw, swy, swy / sw)
            alive += 1
            fresh[n_fresh] = new
            n_fresh += 1
        # The new blocks' slopes, then their meetings with their neighbours.
        for f in range(n_fresh):
            b = fresh[f]
            p, q = prev[b], nxt[b]
            down_left = 1.0 if p >= 0 and b_v[p] + b_slope[p] * (lam - b_lam[p]) > b_v[b] else 0.0
            down_right = 1.0 if q >= 0 and b_v[b] > b_v[q] + b_slope[q] * (lam - b_lam[q]) else 0.0
            b_slope[b] = (down_left - down_right) / b_w[b]
        for f in range(n_fresh):
            b = fresh[f]
            for a, c in ((prev[b], b), (b, nxt[b])):
                if a < 0 or c < 0 or (c == b and b_birth[a] == model):
                    continue  # no neighbour, or a pair of two new blocks pushed from its left one
                closing = b_slope[a] - b_slope[c]
                if closing != 0.0:
                    gap = b_v[c] + b_slope[c] * (lam - b_lam[c]) - b_v[a] - b_slope[a] * (lam - b_lam[a])
                    size = _heap_push(heap_t, heap_a, heap_b, size, lam + max(gap / closing, 0.0), a, c)
        m_lam[model], m_k[model], m_dev[model] = lam, alive, dev
        n_models += 1
    b_death[:n_blocks] = np.minimum(b_death[:n_blocks], n_models)
    return (
        b_first[:n_blocks],
        b_w[:n_blocks],
        b_wy[:n_blocks],
        b_v[:n_blocks],
        b_lam[:n_blocks],
        b_slope[:n_blocks],
        b_birth[:n_blocks],
        b_death[:n_blocks],
        b_parent[:n_blocks],
        m_lam[:n_models],
        m_k[:n_models],
        m_dev[:n_models],
    )


@numba.njit(cache=True)
def _path_deviances(models, m_lam, b_w, b_wy, b_v, b_lam, b_slope, b_birth, b_death):  # pragma: no cover
    """The deviance (``-2`` log-likelihood) of each path model in ``models`` (increasing steps)."""
    out = np.zeros(models.shape[0])
    for b in range(b_w.shape[0]):
        for c in range(np.searchsorted(models, b_birth[b]), np.searchsorted(models, b_death[b])):
            lam = m_lam[models[c]]
            out[c] += _block_deviance(b_w[b], b_wy[b], b_v[b] + b_slope[b] * (lam - b_lam[b]))
    return out


@numba.njit(cache=True)
def _averaged_knots(
    n_knots, n0, models, relative, m_lam, b_first, b_v, b_lam, b_slope, b_birth, b_death, b_parent
):  # pragma: no cover
    """``sum_m relative_m * fit_m`` at each knot, summed over the blocks that held it (``n0`` initial)."""
    n_blocks = b_v.shape[0]
    total = np.zeros(n_blocks)
    # A block's parent is formed after it: walk from the last block formed down, adding the
    # contributions of every block that ever held a knot.
    for b in range(n_blocks - 1, -1, -1):
        part = 0.0
        for c in range(np.searchsorted(models, b_birth[b]), np.searchsorted(models, b_death[b])):
            part += relative[c] * (b_v[b] + b_slope[b] * (m_lam[models[c]] - b_lam[b]))
        total[b] = part + (total[b_parent[b]] if b_parent[b] >= 0 else 0.0)
    out = np.empty(n_knots)
    for b in range(n0):
        end = b_first[b + 1] if b + 1 < n0 else n_knots
        out[b_first[b] : end] = total[b]
    return out


def enir_knot_map(
    xs: np.ndarray, weight: np.ndarray, weighted_y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fit ENIR from the sums per distinct score (increasing ``xs``, positive ``weight``).

    The path is followed once (:func:`_near_isotonic_path`, :math:`O(K \\log K)` in the distinct
    scores); the BIC is then evaluated only for the models whose lower bound (each block at its own
    mean) is within :data:`NEGLIGIBLE_BIC` of an evaluated model's BIC: the others' weights are 0.

    Returns
    -------
    knots : numpy.ndarray
        The distinct scores (the map's knots).
    values : numpy.ndarray
        The averaged map at the knots, in [0, 1].
    model_weights : numpy.ndarray
        The path models' relative likelihood weights (summing to 1), from the data to the isotonic fit.
    """
    total = float(weight.sum())
    penalty = math.log(total) if total > 1.0 else 0.0
    # Blocks: first distinct score, weight, weighted labels, fitted value. Equal neighbours are fused
    # from the start (the degrees of freedom of a near-isotonic fit count its fused groups).
    value = weighted_y / weight
    starts, bw, bwy, bv = _fuse(value[:-1] == value[1:], np.arange(xs.shape[0]), weight, weighted_y, value)
    first, b_w, b_wy, b_v, b_lam, b_slope, birth, death, parent, m_lam, m_k, m_dev = _near_isotonic_path(
        starts, bw, bwy, bv, MERGE_RTOL
    )
    blocks = (b_w, b_wy, b_v, b_lam, b_slope, birth, death)
    bound = m_dev + penalty * m_k
    probe = np.array([np.argmin(bound)])
    ceiling = _path_deviances(probe, m_lam, *blocks)[0] + penalty * m_k[probe[0]]
    models = np.flatnonzero(bound <= ceiling + NEGLIGIBLE_BIC)
    bic = _path_deviances(models, m_lam, *blocks) + penalty * m_k[models]
    relative = np.exp(-(bic - bic.min()) / 2.0)
    acc = _averaged_knots(
        xs.shape[0],
        starts.shape[0],
        models,
        relative,
        m_lam,
        first,
        b_v,
        b_lam,
        b_slope,
        birth,
        death,
        parent,
    )
    model_weights = np.zeros(m_lam.shape[0])
    model_weights[models] = relative / relative.sum()
    return xs, np.clip(acc / relative.sum(), 0.0, 1.0), model_weights


@calibration_method("enir", fits_on_dask=True)
class ENIRCalibrator(Calibrator):
    r"""Ensemble of near-isotonic regressions (ENIR, Naeini & Cooper 2016).

    Near-isotonic regression (Tibshirani, Hoefling & Tibshirani 2011) fits, for a penalty
    :math:`\lambda \ge 0`, the values :math:`\beta` at the distinct scores :math:`x_1 < \dots < x_K`

    .. math::

        \hat\beta_\lambda = \arg\min_\beta \tfrac12 \sum_j W_j (\bar y_j - \beta_j)^2
        + \lambda \sum_{j<K} (\beta_j - \beta_{j+1})_+ ,

    (:math:`W_j` the weight at :math:`x_j`, :math:`\bar y_j` its weighted label mean). The solution
    path runs from the data (:math:`\lambda = 0`) to the isotonic fit; it is piecewise linear in
    :math:`\lambda`, and the modified pool-adjacent-violators algorithm (section 3 of that paper)
    follows it: each block of fused values moves at rate
    :math:`(1[\beta_{i-1} > \beta_i] - 1[\beta_i > \beta_{i+1}]) / W_i` until two neighbours meet
    and fuse. ENIR (section 3 of Naeini & Cooper) takes one model per breakpoint of the path, scores
    it by

    .. math::

        \mathrm{BIC}_m = -2 \sum_b \bigl[m_b \log \beta_b + (n_b - m_b) \log(1 - \beta_b)\bigr]
        + k_m \log N,

    (:math:`k_m` the model's blocks, :math:`n_b` and :math:`m_b` a block's weight and weighted
    positives, :math:`N` the total weight, the penalty 0 for :math:`N \le 1`, :math:`\beta_b` kept
    in [1e-12, 1 - 1e-12]) and averages the models with the relative likelihood weights
    :math:`\propto \exp(-\mathrm{BIC}_m / 2)`. A model
    predicts by linear interpolation between its values at the distinct scores (constant outside
    them); the models share those knots, so the average is itself one piecewise-linear map.

    Parameters
    ----------
    score_col : str, default="score"
        Column of the scores when ``X`` is a dataframe.
    score_kind : {"probability", "logit"}, default="probability"
        Probabilities in [0, 1] or raw margins (the knots are then margins).
    output_type : str, default="input"
        Family of the returned array (see ``gpucal._frames``).

    Attributes
    ----------
    knots_ : numpy.ndarray of shape (k,)
        The distinct calibration scores.
    values_ : numpy.ndarray of shape (k,)
        The averaged map at the knots.
    model_weights_ : numpy.ndarray
        The path models' weights, from the data (:math:`\lambda = 0`) to the isotonic fit.

    Notes
    -----
    *Against netcal.* netcal 1.4's ``ENIR`` follows the same path (its ``NearIsotonicRegression``
    models equal this class's path models on distinct scores while no three blocks meet at one
    :math:`\lambda`; where they do, its merge step loses the rows of the third block, and it splits
    meetings that differ by rounding into separate models) but averages differently: it drops the
    :math:`\lambda = 0` model, keeps only the best models by an "elbow" rule on their BIC and
    renormalises their scores, and its models predict a step function over the blocks rather than
    interpolating between the scores. The tests check the path against netcal's on data without such
    meetings and the average against a direct numpy oracle of the definition above; blocks that meet
    within a relative 1e-9 of the same :math:`\lambda` fuse in one step here.

    *Against probcal.* probcal 0.4's ``ENIRCalibrator`` averages the path's models by the same BIC
    weights, but counts every meeting as a breakpoint of its own (no grouping of meetings at one
    :math:`\lambda`, no fusing of equal neighbours at :math:`\lambda = 0`), keeps its 256 best models
    and predicts steps between the scores: its map differs from this one in the gaps between the
    scores and by the extra breakpoints' weights. Where neither case arises (distinct label means at
    neighbouring scores, no two meetings at one :math:`\lambda`) and it keeps every model
    (``max_solutions=None``), its weights and its values at the scores are this class's; the tests
    check that, its copies of one solution where meetings coincide, and its parting of equal
    neighbours (this map is then probcal's on the data with those scores pooled).

    *Weights and ties.* The fit reads the sums :math:`\sum w` and :math:`\sum w y` per distinct score,
    so integer weights give what repeated rows give and a dask fit is the one-machine fit; tied
    scores are one point of the path. Rows of zero weight are ignored.

    *Cost.* A block's value is linear in :math:`\lambda` over its life (its slope reads the order of
    its neighbours, which only a meeting changes, and a meeting ends it), so the path is followed
    event by event: each meeting of neighbours is a heap entry, :math:`O(K \log K)` in all for
    :math:`K` distinct scores. Each model's BIC has the lower bound of its blocks at their own means,
    kept as blocks form; only the models whose bound is within 1600 of an evaluated model's BIC are
    evaluated (the others' weights, :math:`e^{-800}` or less, are 0 in float64), and the average is
    summed per block over its life, then down the tree of merges to the knots.

    *One class.* ``ValueError``: every path model is the constant 0 (or 1).

    References
    ----------
    .. [1] M. P. Naeini, G. F. Cooper, "Binary classifier calibration using an ensemble of near
       isotonic regression models", Proc. IEEE ICDM 2016, 360-369.
    .. [2] R. J. Tibshirani, H. Hoefling, R. Tibshirani, "Nearly-isotonic regression",
       Technometrics 53(1), 2011, 54-61.

    Examples
    --------
    >>> import numpy as np
    >>> from gpucal.calibrators.enir import ENIRCalibrator
    >>> rng = np.random.default_rng(0)
    >>> s = np.round(rng.random(2000), 2)
    >>> y = (rng.random(2000) < s**2).astype(float)
    >>> ENIRCalibrator().fit(s, y).predict(np.array([0.2, 0.5, 0.8])).round(2).tolist()
    [0.04, 0.29, 0.68]
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "score_kind": Options("probability", "logit"),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {
        "knots_": "float_array",
        "values_": "float_array",
        "model_weights_": "float_array",
    }

    def __init__(
        self,
        *,
        score_col: str = "score",
        score_kind: str = "probability",
        output_type: str = "input",
    ) -> None:
        self.score_col = score_col
        self.score_kind = score_kind
        self.output_type = output_type

    def _fit(self, rows: Rows) -> None:
        xs, weight, weighted_y = read_distinct_score_sums(rows, self.score_col, self.score_kind)
        positives = float(weighted_y.sum())
        if positives <= 0.0 or positives >= float(weight.sum()):
            which = "positive" if positives <= 0.0 else "negative"
            msg = f"y: one class only (no {which} labels with non-zero weight); ENIR's path is one constant"
            raise ValueError(msg)
        self.knots_, self.values_, self.model_weights_ = enir_knot_map(xs, weight, weighted_y)

    def _predict_scores(self, score: Any) -> Any:
        return interp_clipped(score, self.knots_, self.values_)

    def _check_state(self) -> None:
        """Raise ``ValueError`` unless the knots are consistent and the values in [0, 1]."""
        check_knot_map(self.knots_, self.values_, names=("knots_", "values_"), monotone=False)
        if self.model_weights_.shape[0] < 1 or not np.all(self.model_weights_ >= 0):
            msg = "model_weights_ must hold non-negative model weights"
            raise ValueError(msg)


__all__ = ["ENIRCalibrator", "enir_knot_map"]
