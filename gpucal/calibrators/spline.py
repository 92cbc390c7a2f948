r"""Spline calibration: a ridge-penalised logistic natural cubic spline on the logit of the score.

The functional core :func:`natural_spline_basis` expands transformed scores on a natural cubic spline
basis; :func:`spline_block_sums` gives one block's log-loss, gradient and Hessian (sums over rows, so
any partitioning of the rows gives the same fit); :class:`SplineCalibrator` chooses the knots from a
weighted histogram of the scores, fits the ridge path on the training rows, picks the penalty on the
held-out rows and refits on every row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal.calibrators._newton import WARM_ERROR_TOL, newton_minimize
from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, Calibrator, Constraint, Interval, Options
from gpucal.calibrators.bins import count_not_above
from gpucal.calibrators.logistic import ScoreBlock
from gpucal.calibrators.score_rows import ScoreRows
from gpucal.kernels.jit import empty_rows, map_row_chunks, numba, parallel_rows
from gpucal.persistence import MAX_LOADED_MAGNITUDE, check_magnitude
from gpucal.registry import calibration_method
from gpucal.rows import Rows, row_uniforms

#: Rows per chunk of the basis matrix (the chunk's basis is ``CHUNK_ROWS x n_knots`` floats).
CHUNK_ROWS = 1 << 16
#: Rows per task of the numba loop.
KERNEL_CHUNK = 1 << 14
#: Bins of the weighted histogram of transformed scores the quantile knots are read from.
HISTOGRAM_BINS = 4096
#: Knots always added on the probability scale (then transformed), besides the quantile knots.
EXTRA_KNOTS = np.linspace(0.1, 0.9, 9)
#: The penalties searched when ``reg_params`` is None: 17 values, 1e-4 to 1e4, evenly on a log scale.
DEFAULT_REG_PARAMS = np.logspace(-4.0, 4.0, 17)
#: Clip of the score before the logit: at most this, smaller when the data come closer to 0 or 1.
MAX_LOGIT_EPS = 1e-4
MIN_LOGIT_EPS = 1e-16
#: The stream of ``row_uniforms`` that draws the held-out rows.
HOLDOUT_STREAM = 26


def unity_prior_grid() -> tuple[np.ndarray, np.ndarray]:
    """The pseudo-rows of the unity prior: scores ``g`` (label ``g`` too) and their relative weights.

    99 points :math:`0.01, 0.02, \\dots, 0.99` of weight 1 and, in each tail, 18 points log-spaced
    from :math:`10^{-8}` to :math:`10^{-2 - 1/3}` (mirrored at 1) of weight 1/18; weights sum to 101.
    """
    tail = 10.0 ** np.linspace(-8.0, -2.0, 19)[:-1]
    grid = np.concatenate([tail, np.linspace(0.01, 0.99, 99), (1.0 - tail)[::-1]])
    weight = np.concatenate([np.full(18, 1.0 / 18.0), np.ones(99), np.full(18, 1.0 / 18.0)])
    return grid, weight


def logit_eps(closest: float) -> float:
    r"""Clip of the score before the logit from the score closest to 0 or 1 (strictly inside (0, 1)).

    :math:`\epsilon = 2^{\operatorname{round}(\log_2 c) - 1}` for the distance :math:`c` of that score to
    0 or 1, kept in [1e-16, 1e-4]: half the closest score, to a power of two, so no score inside (0, 1)
    is clipped and 0 and 1 map a little beyond every other score.
    """
    if not math.isfinite(closest) or closest <= 0.0:
        return MAX_LOGIT_EPS
    eps = 2.0 ** (round(math.log2(closest)) - 1)
    return float(min(max(eps, MIN_LOGIT_EPS), MAX_LOGIT_EPS))


def transform_scores(score: Any, eps: float, score_kind: str) -> Any:
    """The spline's variable: the logit of the score clipped to ``[eps, 1 - eps]``, or a margin as given
    (over row chunks on every core for a large float64 vector, ``gpucal.kernels.jit.map_row_chunks``)."""
    if score_kind == "logit":
        return score

    def clipped_logit(chunk: Any) -> Any:
        xp = array_namespace(chunk)
        clipped = xp.clip(chunk, eps, 1.0 - eps)
        return xp.log(clipped / (1.0 - clipped))

    return map_row_chunks(clipped_logit, score)


def _check_basis_range(largest: float, what: str) -> None:
    """Refuse values past :data:`MAX_LOADED_MAGNITUDE` in size where the basis reads them: it cubes
    ``t - knot``, which overflows past about 1e100 (and a loaded model's knots are bounded there).
    """
    if largest > MAX_LOADED_MAGNITUDE:
        limit = f"{MAX_LOADED_MAGNITUDE:g}"
        msg = f"{what} reach {largest:g}; the spline's cubic basis overflows past {limit}: rescale them"
        raise ValueError(msg)


def natural_spline_basis(t: Any, knots: np.ndarray) -> Any:
    r"""The natural cubic spline basis at ``t`` with knots :math:`\xi_1 < \dots < \xi_K`: shape (n, K).

    Hastie, Tibshirani & Friedman (2009), eq. (5.4)-(5.5):

    .. math::

        N_1 = 1,\quad N_2 = t,\quad N_{k+2} = d_k - d_{K-1},\quad
        d_k(t) = \frac{(t - \xi_k)_+^3 - (t - \xi_K)_+^3}{\xi_K - \xi_k}, \quad k = 1 .. K-2:

    cubic between the knots, linear beyond the first and the last (numpy or cupy, as ``t``).
    """
    xp = array_namespace(t)
    k = knots.shape[0]
    out = xp.empty((t.shape[0], k), dtype=np.float64, order="F")  # filled column by column
    out[:, 0] = 1.0
    out[:, 1] = t
    if k > 2:
        last = float(knots[-1])
        tail = xp.maximum(t - last, 0.0) ** 3

        def d(j: int) -> Any:
            return (xp.maximum(t - float(knots[j]), 0.0) ** 3 - tail) / (last - float(knots[j]))

        d_last = d(k - 2)
        for j in range(k - 2):
            out[:, j + 2] = d(j) - d_last
    return out


@dataclass(frozen=True)
class SplitBlock:
    """One block's rows of positive weight, on the spline's scale ``t``: the training rows and the
    held-out rows (``(t, y, w)`` each)."""

    train: tuple[Any, Any, Any]
    held: tuple[Any, Any, Any]


def split_block(
    block: ScoreBlock, eps: float, score_kind: str, fraction: float, seed: int, *, row_offset: int
) -> SplitBlock:
    """Transform one block's scores and deal its rows: row :math:`r` is held out when its
    counter-based uniform (``row_uniforms``, stream ``HOLDOUT_STREAM``) is below ``fraction``."""
    xp = array_namespace(block.score)
    keep = block.w > 0
    u = row_uniforms(seed, HOLDOUT_STREAM, np.arange(row_offset, row_offset + len(block)))
    held = xp.asarray(u < fraction)
    t = transform_scores(block.score, eps, score_kind)
    parts = [keep & ~held, keep & held]
    train, out = ((t[m], block.y[m], block.w[m]) for m in parts)
    return SplitBlock(train, out)


def piecewise_basis(knots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""The natural spline basis as one cubic per interval between knots: ``(origins, coef)``.

    Interval :math:`I = 0 .. K` holds the :math:`t` with exactly :math:`I` knots at or below it; on it
    :math:`N_j(t) = \sum_{p=0}^{3} c_{Ijp}\, s^p` in the local variable :math:`s = t - o_I`,
    :math:`o_0 = \xi_1` and :math:`o_I = \xi_I` (the interval's lower knot) for :math:`I \ge 1`: each
    :math:`(t - \xi_m)_+^3` is :math:`(s + o_I - \xi_m)^3` expanded binomially where
    :math:`\xi_m \le o_I`, else 0 (:func:`natural_spline_basis`, interval by interval).
    """
    k = knots.shape[0]
    origins = np.concatenate([knots[:1], knots])
    coef = np.zeros((k + 1, k, 4))
    coef[:, 0, 0] = 1.0
    coef[:, 1, 0] = origins
    coef[:, 1, 1] = 1.0
    if k > 2:
        # cube[I, m, :]: (t - knots[m])_+^3 on interval I, active where knot m lies below interval I
        delta = origins[:, None] - knots[None, :]
        active = np.arange(k)[None, :] <= np.arange(k + 1)[:, None] - 1
        cube = np.stack([delta**3, 3.0 * delta**2, 3.0 * delta, np.ones_like(delta)], axis=-1)
        cube *= active[:, :, None]
        width = knots[-1] - knots[:-1]  # (K - 1,)
        d = (cube[:, :-1, :] - cube[:, -1:, :]) / width[None, :, None]  # d_m, m = 0 .. K-2
        coef[:, 2:, :] = d[:, :-1, :] - d[:, -1:, :]
    return origins, coef


@numba.njit(cache=True, inline="always")
def _interval_eta(ti, knots, origins, eta_coef):  # pragma: no cover - compiled
    """``(I, s, eta)`` of one ``t``: its interval of :func:`piecewise_basis` (the number of knots at or
    below it, by binary search), its local variable and the spline's value there (Horner)."""
    lo = count_not_above(knots, ti)
    s = ti - origins[lo]
    return lo, s, eta_coef[lo, 0] + s * (eta_coef[lo, 1] + s * (eta_coef[lo, 2] + s * eta_coef[lo, 3]))


@parallel_rows("t")
def _predict_cpu(t, knots, origins, eta_coef, out):  # pragma: no cover - compiled; tested vs the basis
    """``out[i] = sigmoid(eta(t[i]))`` on the piecewise cubic of :func:`piecewise_basis` (the fit's own
    ``eta``, :func:`_moment_sums_cpu`), with the fit's overflow-free sigmoid."""
    n = t.shape[0]
    for c in numba.prange((n + KERNEL_CHUNK - 1) // KERNEL_CHUNK):
        for i in range(c * KERNEL_CHUNK, min(n, (c + 1) * KERNEL_CHUNK)):
            eta = _interval_eta(t[i], knots, origins, eta_coef)[2]
            e = math.exp(-abs(eta))
            out[i] = 1.0 / (1.0 + e) if eta >= 0.0 else e / (1.0 + e)
    return out


@numba.njit(parallel=True, cache=True)
def _moment_sums_cpu(t, y, w, knots, origins, eta_coef, hessian):  # pragma: no cover - compiled; tested
    """Per interval of :func:`piecewise_basis`: ``[loss, sum r s^p (p < 4), sum v s^p (p < 7)]``, with
    ``r = w (p - y)``, ``v = w p (1 - p)`` and ``s`` the local variable (the last 7 zero unless
    ``hessian``); chunks of rows in parallel."""
    n = t.shape[0]
    k = knots.shape[0]
    n_chunks = (n + KERNEL_CHUNK - 1) // KERNEL_CHUNK
    partial = np.zeros((n_chunks, k + 1, 12))
    for c in numba.prange(n_chunks):
        acc = partial[c]
        for i in range(c * KERNEL_CHUNK, min(n, (c + 1) * KERNEL_CHUNK)):
            wi = w[i]
            if wi == 0.0:
                continue
            lo, s, eta = _interval_eta(t[i], knots, origins, eta_coef)
            e = math.exp(-abs(eta))
            p = 1.0 / (1.0 + e) if eta >= 0.0 else e / (1.0 + e)
            acc[lo, 0] += wi * (max(eta, 0.0) + math.log1p(e) - y[i] * eta)
            r = wi * (p - y[i])
            power = 1.0
            for q in range(4):
                acc[lo, 1 + q] += r * power
                power *= s
            if hessian:
                v = wi * p * (1.0 - p)
                power = 1.0
                for q in range(7):
                    acc[lo, 5 + q] += v * power
                    power *= s
    return partial.sum(axis=0)


def _assemble(moments: np.ndarray, coef: np.ndarray) -> np.ndarray:
    r"""``[loss, gradient (K), Hessian (K*K)]`` from the per-interval moments (:func:`_moment_sums_cpu`):
    :math:`g_j = \sum_I \sum_p c_{Ijp} R_{Ip}` and
    :math:`H_{jm} = \sum_I \sum_{p,q} c_{Ijp} c_{Imq} V_{I,p+q}`."""
    k = coef.shape[1]
    grad = np.einsum("ijp,ip->j", coef, moments[:, 1:5])
    hankel = moments[:, 5:][:, np.add.outer(np.arange(4), np.arange(4))]  # (K + 1, 4, 4)
    hess = np.einsum("ijp,ipq,imq->jm", coef, hankel, coef)
    return np.concatenate([[moments[:, 0].sum()], grad, hess.reshape(k * k)])


def _logistic_sums(
    t: Any, y: Any, w: Any, knots: np.ndarray, theta: np.ndarray, *, hessian: bool = True
) -> np.ndarray:
    """``[loss, gradient (K), Hessian (K*K)]`` of the weighted log-loss of ``sigmoid(N(t) @ theta)``
    (the Hessian zero unless ``hessian``): the numba loop on the host, array code on a device."""
    xp = array_namespace(t)
    if xp is np:
        origins, coef = piecewise_basis(np.asarray(knots, dtype=np.float64))
        moments = _moment_sums_cpu(
            np.ascontiguousarray(t, dtype=np.float64),
            np.ascontiguousarray(y, dtype=np.float64),
            np.ascontiguousarray(w, dtype=np.float64),
            np.ascontiguousarray(knots, dtype=np.float64),
            origins,
            np.ascontiguousarray(np.einsum("ijp,j->ip", coef, theta)),
            hessian,
        )
        return _assemble(moments, coef)
    k = knots.shape[0]
    out = np.zeros(1 + k + k * k)
    coef = xp.asarray(theta)
    for start in range(0, t.shape[0], CHUNK_ROWS):
        stop = start + CHUNK_ROWS
        basis = natural_spline_basis(t[start:stop], knots)
        eta = basis @ coef
        wc, yc = w[start:stop], y[start:stop]
        p = 1.0 / (1.0 + xp.exp(-eta))
        out[0] += float(wc @ (xp.logaddexp(0.0, eta) - yc * eta))
        out[1 : 1 + k] += to_numpy(basis.T @ (wc * (p - yc)))
        if hessian:
            out[1 + k :] += to_numpy((basis * (wc * p * (1.0 - p))[:, None]).T @ basis).ravel()
    return out


def spline_block_sums(block: SplitBlock, theta: np.ndarray, knots: np.ndarray, every: bool) -> np.ndarray:
    """One block's sums at ``theta``: ``[loss, gradient, Hessian]`` of the training rows (of every row
    with ``every``), then the held-out rows' ``[loss, weight]``."""
    sums = _logistic_sums(*block.train, knots, theta)
    held = _logistic_sums(*block.held, knots, theta, hessian=every)
    weight = float(block.held[2].sum())
    if every:
        return np.concatenate([sums + held, [0.0, 0.0]])
    return np.concatenate([sums, [float(held[0]), weight]])


def split_weights(block: SplitBlock) -> np.ndarray:
    """``[training weight, held-out weight]`` of one block."""
    return np.array([float(block.train[2].sum()), float(block.held[2].sum())])


def block_closest(block: ScoreBlock) -> float:
    """The smallest distance to 0 or 1 of a block's scores strictly inside (0, 1) of positive weight
    (inf when none): a row of no weight is no row."""
    xp = array_namespace(block.score)
    s = block.score[(block.score > 0.0) & (block.score < 1.0) & (block.w > 0.0)]
    return float(xp.min(xp.minimum(s, 1.0 - s))) if s.shape[0] else math.inf


def weighted_range(block: ScoreBlock) -> np.ndarray:
    """``[lowest, highest]`` score of a block's rows of positive weight (``[inf, -inf]`` when none)."""
    xp = array_namespace(block.score)
    s = block.score[block.w > 0]
    return np.array([float(xp.min(s)), float(xp.max(s))]) if s.shape[0] else np.array([math.inf, -math.inf])


def widest(*spans: np.ndarray) -> np.ndarray:
    """The smallest lowest and the largest highest end of ``[lowest, highest]`` spans."""
    stacked = np.stack(spans)
    return np.array([stacked[:, 0].min(), stacked[:, 1].max()])


def block_histogram(block: ScoreBlock, low: float, high: float, eps: float, score_kind: str) -> np.ndarray:
    """Weights of a block's rows in ``HISTOGRAM_BINS`` equal bins of the transformed score on [low, high]."""
    xp = array_namespace(block.score)
    t = transform_scores(block.score, eps, score_kind)
    width = (high - low) / HISTOGRAM_BINS
    cell = xp.clip(((t - low) / width).astype(np.int64), 0, HISTOGRAM_BINS - 1)
    counts = xp.bincount(cell, weights=block.w, minlength=HISTOGRAM_BINS)
    return to_numpy(counts).astype(np.float64)


def quantile_knots(histogram: np.ndarray, low: float, high: float, n_knots: int) -> np.ndarray:
    """The ends ``low``, ``high`` and ``n_knots - 2`` weighted quantiles between, read on the histogram:
    the quantile :math:`q` is the upper edge of the first bin whose cumulative weight reaches
    :math:`q W` (increasing, ties merged)."""
    cumulative = np.cumsum(histogram)
    levels = np.arange(1, n_knots - 1) / (n_knots - 1) * cumulative[-1]
    edges = low + (high - low) / HISTOGRAM_BINS * (np.searchsorted(cumulative, levels) + 1)
    return np.unique(np.clip(np.concatenate([[low], edges, [high]]), low, high))


class _PathSums:
    """The row sums of one penalised fit, keeping the held-out loss of the last point evaluated."""

    def __init__(
        self,
        blocks: Rows,
        prior: tuple[np.ndarray, np.ndarray, np.ndarray],
        knots: np.ndarray,
        *,
        every: bool,
    ) -> None:
        self.blocks = blocks
        self.prior = prior
        self.knots = knots
        self.every = every
        self.k = knots.shape[0]
        self.last: tuple[np.ndarray, float, float] | None = None

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        sums = self.blocks.sum(spline_block_sums, theta, self.knots, self.every)
        t, y, w = self.prior
        if t.shape[0]:
            sums[:-2] += _logistic_sums(t, y, w, self.knots, theta)
        k = self.k
        self.last = (theta.copy(), float(sums[-2]), float(sums[-1]))
        return float(sums[0]), sums[1 : 1 + k], sums[1 + k : 1 + k + k * k].reshape(k, k)

    def held_out_loss(self, theta: np.ndarray) -> float:
        """Weighted mean log-loss of the held-out rows at ``theta`` (a pass unless just evaluated there)."""
        if self.last is None or not np.array_equal(self.last[0], theta):
            self(theta)
        _, loss, weight = self.last if self.last is not None else (theta, math.nan, 1.0)
        return loss / weight


@calibration_method("spline", fits_on_dask=True)
class SplineCalibrator(Calibrator):
    r"""Spline calibration (Lucena 2018): a ridge-penalised logistic natural cubic spline on the logit.

    The calibrated probability is :math:`\sigma(\sum_j \beta_j N_j(t))`, :math:`t = \operatorname{logit}
    s` (the score clipped to :math:`[\epsilon, 1 - \epsilon]`) and :math:`N_j` the natural cubic spline
    basis of Hastie et al. (2009, eq. 5.4-5.5) on knots :math:`\xi_1 < \dots < \xi_K`: cubic between the
    knots, linear on the logit beyond them. For a penalty :math:`\lambda` the coefficients minimise

    .. math::

        \frac{1}{W} \sum_i w_i \bigl[\log(1 + e^{\eta_i}) - y_i \eta_i\bigr]
        + \frac{\lambda}{K} \sum_{j=1}^{K} \beta_j^2,
        \qquad \eta_i = \sum_j \beta_j N_j(t_i),

    the sum running over the rows and the unity prior's pseudo-rows (:math:`W` their total weight):
    ``unity_prior_weight`` of weight spread over 135 scores :math:`g` along :math:`(0, 1)` labelled
    :math:`g` (:func:`unity_prior_grid`), which pulls the map toward the identity where rows are few
    (Lucena 2018, section 3). :math:`\lambda` is chosen among ``reg_params`` by the weighted mean
    log-loss on held-out rows (a fraction ``1 / n_folds``, the rest fitting each :math:`\lambda`): the
    largest :math:`\lambda` whose loss, rounded to 4 decimals, is the smallest. The model is then
    refitted with it on every row. Every fit is damped Newton on sums over rows, from the previous
    :math:`\lambda`'s solution (strongest penalty first); the search's fits stop at a relative error of
    1e-6, the final one at 1e-10.

    Parameters
    ----------
    n_knots : int >= 2, default=30
        Knots at the lowest and highest score and ``n_knots - 2`` weighted quantiles between (read on a
        4096-bin histogram of the transformed scores); the probabilities 0.1, ..., 0.9 are added (their
        logits with ``score_kind="logit"``). Ignored when ``knots`` is given.
    knots : array-like or None, default=None
        The knots, on the score's scale; None chooses them as above.
    reg_params : array-like or None, default=None
        The penalties :math:`\lambda > 0` searched; None: 17 values from 1e-4 to 1e4 evenly on a log
        scale.
    n_folds : int >= 2, default=5
        A fraction ``1 / n_folds`` of the rows is held out to choose :math:`\lambda` (drawn per global
        row index: the same rows on one machine and on any partitioning).
    unity_prior_weight : float >= 0, default=20.0
        Total weight of the unity prior's pseudo-rows, in the units of ``sample_weight``; 0 turns it off.
    random_state : int, default=0
        Seed of the held-out rows.
    score_col : str, default="score"
        Column of the scores when ``X`` is a dataframe.
    score_kind : {"probability", "logit"}, default="probability"
        Probabilities (the logit is taken) or raw margins (used as given).
    output_type : str, default="input"
        Family of the returned array (see ``gpucal._frames``).

    Attributes
    ----------
    knots_ : numpy.ndarray of shape (K,)
        The knots on the transformed scale (logits), increasing.
    coef_ : numpy.ndarray of shape (K,)
        The basis coefficients :math:`\beta`.
    logit_eps_ : float
        :math:`\epsilon` (:func:`logit_eps` of the score closest to 0 or 1, the prior's scores included).
    reg_param_ : float
        The chosen :math:`\lambda`.
    held_out_losses_ : numpy.ndarray
        The held-out mean log-loss of each penalty of ``reg_params``, in their order (empty when one
        penalty is given: nothing is chosen and no row is held out).

    Notes
    -----
    *Against ml-insights.* ``SplineCalib`` (ml-insights 1.1) fits the same model: the basis, the ridge on
    every coefficient (the intercept included), the unity prior with the same scores and weights, the
    logit clip rule and the 17 penalties. The penalised fit for given knots and :math:`\lambda` is
    tested equal to the minimiser of ml-insights' own objective to 1e-6. The differences: ml-insights
    divides the loss by the number of rows, the prior's pseudo-rows counted as rows (135), where the
    loss here is a weighted mean (so integer weights equal repeated rows): its :math:`\lambda` is
    :math:`\lambda W / n` here. It draws 28 random distinct scores as knots (quantiles here, the same
    on every partitioning), deals stratified folds and holds out some prior pseudo-rows too, breaks
    ties of the rounded loss toward the smaller :math:`\lambda` (its documentation says the larger, as
    here), and its final model is fitted on the training rows of the search, not on every row. With
    defaults, on 20000 rows, the two maps differ by less than 0.03 (0.01 on average over the scores):
    the noise of the fit, not a difference of model.

    *Cost.* The spline is one cubic per interval between knots (:func:`piecewise_basis`), so on the
    host a Newton pass adds, per interval, 12 moments of the rows (:math:`\sum r s^p`, :math:`\sum v
    s^p`); the gradient and the :math:`K \times K` Hessian are assembled from them, not from a basis
    row per data row: :math:`O(n \log K + K^3)` per pass. Device arrays form the basis in chunks.

    *Weights.* Rows of zero weight are ignored; the sums are weighted, so integer weights equal
    repeated rows and a dask fit is the one-machine fit.

    References
    ----------
    .. [1] B. Lucena, "Spline-based probability calibration", arXiv:1809.07751, 2018.
    .. [2] T. Hastie, R. Tibshirani, J. Friedman, "The Elements of Statistical Learning", 2nd ed.,
       Springer, 2009, section 5.2.1 (natural cubic splines).

    Examples
    --------
    >>> import numpy as np
    >>> from gpucal.calibrators.spline import SplineCalibrator
    >>> rng = np.random.default_rng(0)
    >>> s = rng.random(2000)
    >>> y = (rng.random(2000) < s**2).astype(float)
    >>> cal = SplineCalibrator().fit(s, y)
    >>> cal.predict(np.array([0.2, 0.5, 0.8])).round(2).tolist()
    [0.04, 0.24, 0.63]
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_knots": Interval(int, 2, None),
        "n_folds": Interval(int, 2, None),
        "unity_prior_weight": Interval(float, 0, None),
        "random_state": Interval(int, 0, None),
        "score_kind": Options("probability", "logit"),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {
        "knots_": "float_array",
        "coef_": "float_array",
        "logit_eps_": "float",
        "reg_param_": "float",
        "held_out_losses_": "float_array",
    }

    def __init__(
        self,
        *,
        n_knots: int = 30,
        knots: Any = None,
        reg_params: Any = None,
        n_folds: int = 5,
        unity_prior_weight: float = 20.0,
        random_state: int = 0,
        score_col: str = "score",
        score_kind: str = "probability",
        output_type: str = "input",
    ) -> None:
        self.n_knots = n_knots
        self.knots = knots
        self.reg_params = reg_params
        self.n_folds = n_folds
        self.unity_prior_weight = unity_prior_weight
        self.random_state = random_state
        self.score_col = score_col
        self.score_kind = score_kind
        self.output_type = output_type

    def _reg_params(self) -> np.ndarray:
        if self.reg_params is None:
            return DEFAULT_REG_PARAMS
        values = np.asarray(self.reg_params, dtype=np.float64).ravel()
        if values.shape[0] == 0 or not np.all(np.isfinite(values)) or np.any(values <= 0):
            msg = f"reg_params must be positive finite numbers, got {values.tolist()[:10]}"
            raise ValueError(msg)
        return values

    def _prior(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # The grid lies inside [1e-8, 1 - 1e-8] and eps is below 1e-8 with the prior on: no clip.
        grid, weight = unity_prior_grid()
        if self.unity_prior_weight == 0:
            return np.empty(0), np.empty(0), np.empty(0)
        return np.log(grid / (1.0 - grid)), grid, weight * (self.unity_prior_weight / weight.sum())

    def _choose_knots(self, scores: ScoreRows, eps: float) -> np.ndarray:
        if self.knots is not None:
            given = np.asarray(self.knots, dtype=np.float64).ravel()
            if not np.all(np.isfinite(given)):
                msg = "knots must be finite"
                raise ValueError(msg)
            knots = np.unique(np.asarray(transform_scores(given, eps, self.score_kind)))
        else:
            span = scores.rows.reduce(weighted_range, widest)  # rows of positive weight only
            low, high = (float(v) for v in transform_scores(span, eps, self.score_kind))
            if not high > low:
                msg = "X: the scores are all equal; a spline needs at least two distinct scores"
                raise ValueError(msg)
            _check_basis_range(max(-low, high), "X: margins")
            histogram = scores.rows.sum(block_histogram, low, high, eps, self.score_kind)
            extra = transform_scores(EXTRA_KNOTS, eps, "probability")
            knots = np.unique(np.concatenate([quantile_knots(histogram, low, high, self.n_knots), extra]))
        if knots.shape[0] < 2:
            msg = f"knots: a spline needs at least two distinct knots, got {knots.shape[0]}"
            raise ValueError(msg)
        _check_basis_range(float(np.abs(knots).max()), "knots")
        return knots

    def _fit(self, rows: Rows) -> None:
        reg_params = self._reg_params()
        scores = ScoreRows.of(rows, self.score_col, self.score_kind)
        scores.check_two_classes()
        blocks = scores.rows
        closest = math.inf
        if self.score_kind == "probability":
            closest = blocks.reduce(block_closest, min)
            if self.unity_prior_weight > 0:
                closest = min(closest, float(unity_prior_grid()[0][0]))
        eps = logit_eps(closest)
        knots = self._choose_knots(scores, eps)
        prior = self._prior()
        split = blocks.map(
            split_block, eps, self.score_kind, 1.0 / self.n_folds, self.random_state, offsets=True
        )
        k = knots.shape[0]
        losses, start, lam = np.empty(0), np.zeros(k), float(reg_params[0])
        if reg_params.shape[0] > 1:  # one penalty: nothing to choose, no rows held out
            losses, start, lam = self._search(split, prior, knots, reg_params)
        every = _PathSums(split, prior, knots, every=True)
        total = scores.label_sums()[0] + float(prior[2].sum())
        self.coef_ = newton_minimize(
            every, start, total_weight=total, l2=2.0 * lam / k, what="spline fit"
        ).theta
        self.knots_ = knots
        self.logit_eps_ = eps
        self.reg_param_ = lam
        self.held_out_losses_ = losses

    def _search(
        self,
        split: Rows,
        prior: tuple[np.ndarray, np.ndarray, np.ndarray],
        knots: np.ndarray,
        reg_params: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """Fit every penalty on the training rows (strongest first, each from the last solution) and
        return the held-out losses, the chosen penalty's solution and the penalty."""
        train_weight = self._train_weight(split, float(prior[2].sum()))
        path = _PathSums(split, prior, knots, every=False)
        k = knots.shape[0]
        theta = np.zeros(k)
        losses = np.empty(reg_params.shape[0])
        solutions = {}
        for i in np.argsort(-reg_params, kind="stable"):
            # The path only ranks penalties by a loss rounded to 4 decimals: 1e-6 is ample.
            theta = newton_minimize(
                path,
                theta,
                total_weight=train_weight,
                l2=2.0 * float(reg_params[i]) / k,
                what="spline fit",
                error_tol=WARM_ERROR_TOL,
            ).theta
            solutions[int(i)] = theta
            losses[i] = path.held_out_loss(theta)
        rounded = np.round(losses, 4)
        ties = np.flatnonzero(rounded == rounded.min())
        best = int(ties[np.argmax(reg_params[ties])])
        return losses, solutions[best], float(reg_params[best])

    @staticmethod
    def _train_weight(split: Rows, prior_weight: float) -> float:
        """Weight of the training rows, the prior's included; refuse a side without weight."""
        parts = split.sum(split_weights)
        if not (parts[0] > 0 and parts[1] > 0):
            msg = (
                "n_folds: the held-out rows or the training rows hold no weight; use fewer folds or more rows"
            )
            raise ValueError(msg)
        return float(parts[0]) + prior_weight

    def _predict_scores(self, score: Any) -> Any:
        xp = array_namespace(score)
        t = transform_scores(score, self.logit_eps_, self.score_kind)
        if xp is np:
            knots = np.ascontiguousarray(self.knots_, dtype=np.float64)
            origins, coef = piecewise_basis(knots)
            eta_coef = np.ascontiguousarray(np.einsum("ijp,j->ip", coef, self.coef_))
            t = np.ascontiguousarray(t, dtype=np.float64)
            return _predict_cpu(t, knots, origins, eta_coef, empty_rows(t.shape[0]))
        out = xp.empty(t.shape[0], dtype=np.float64)
        coef = xp.asarray(self.coef_)
        for start in range(0, t.shape[0], CHUNK_ROWS):
            eta = natural_spline_basis(t[start : start + CHUNK_ROWS], self.knots_) @ coef
            out[start : start + CHUNK_ROWS] = 1.0 / (1.0 + xp.exp(-eta))
        return out

    def _check_state(self) -> None:
        """Raise ``ValueError`` unless the knots increase and match the coefficients."""
        if self.knots_.shape[0] < 2 or np.any(np.diff(self.knots_) <= 0):
            msg = "knots_ must hold at least two strictly increasing knots"
            raise ValueError(msg)
        if self.coef_.shape != self.knots_.shape:
            msg = f"coef_ has {self.coef_.shape[0]} entries; knots_ needs {self.knots_.shape[0]}"
            raise ValueError(msg)
        # Bounded in size, not only in span: the basis cubes (t - knot), which overflows for knots past
        # about 1e100 well before their span does.
        check_magnitude(self.knots_, "knots_")
        check_magnitude(self.coef_, "coef_")
        if not (MIN_LOGIT_EPS <= self.logit_eps_ <= MAX_LOGIT_EPS) or not self.reg_param_ > 0:
            msg = "logit_eps_ must lie in [1e-16, 1e-4] and reg_param_ must be positive"
            raise ValueError(msg)


__all__ = [
    "SplineCalibrator",
    "block_histogram",
    "natural_spline_basis",
    "spline_block_sums",
    "transform_scores",
    "unity_prior_grid",
    "weighted_range",
    "widest",
]
