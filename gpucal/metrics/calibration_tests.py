r"""The classical calibration tests: Hosmer-Lemeshow, Spiegelhalter, Cox's slope and intercept, the
Murphy decompositions of the Brier score and of the log-loss, and the per-grade binomial and
Jeffreys tests.

Each returns one result object whose fields are named as probcal 0.4 names them (``statistic``, ``df``,
``p_value``; ``z``; ``reliability``, ``resolution``, ``uncertainty``; per grade ``pd``, ``p_value``). Each
is a function of sums over rows (``gpucal.metrics.inputs``), so it runs on any backend and on dask
partitions with the one-machine value.

*Weights* are frequency weights: a row of weight 2 counts as two rows, so integer weights give what
repeated rows give (the null variances are :math:`\sum w\,v_i`, not probcal's :math:`\sum w^2 v_i`).
Weights adding up to less than two rows (normalised to sum to 1) are refused where rows are counted:
the equal-mass groups and Hosmer-Lemeshow.
With unit weights every test equals probcal 0.4 (and statsmodels for the slope and intercept).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import special, stats

from gpucal._params import Interval, Options, validate_params
from gpucal.kernels.jit import numba, parallel_rows
from gpucal.metrics.grouped import field_value_sums
from gpucal.metrics.inputs import (
    CheckedRows,
    check_repeated_rows,
    check_total,
    keyed_score_table,
    metric_rows,
)
from gpucal.metrics.scores import log_loss
from gpucal.metrics.sums import COUNT, WP, WY, W, group_stats
from gpucal.rows import Rows

#: Scores are clipped to ``[LOGIT_EPS, 1 - LOGIT_EPS]`` before the logit (probcal's clip).
LOGIT_EPS = 1e-12
#: Newton stops when no coefficient moves more than this (relative to ``1 + |theta|``).
NEWTON_TOL = 1e-12
NEWTON_MAX_ITER = 100


# ------------------------------------------------------------------------------------------------
# Equal-mass groups: numpy's default (linear) quantiles of the scores, counted with the weights


def _quantile_edges(xs: np.ndarray, weight: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """``numpy.quantile(rows, qs)`` of the rows that the distinct scores ``xs`` with weights stand for.

    Row rank :math:`h = (W - 1) q` over the total weight :math:`W`; the value at rank :math:`k` is the
    first distinct score whose cumulative weight exceeds :math:`k`; between ranks, numpy's linear
    interpolation. With integer weights this is ``numpy.quantile`` of the repeated rows.
    """
    cumulative = np.cumsum(weight)
    h = (cumulative[-1] - 1.0) * qs
    low = np.floor(h)
    t = h - low
    a = xs[np.minimum(np.searchsorted(cumulative, low, side="right"), xs.shape[0] - 1)]
    b = xs[np.minimum(np.searchsorted(cumulative, low + 1.0, side="right"), xs.shape[0] - 1)]
    diff = b - a
    return np.where(t >= 0.5, b - diff * (1.0 - t), a + diff * t)


def _group_edges(rows: Rows, n_bins: int, strategy: str, weighted: bool) -> np.ndarray:
    """Interior edges of the groups: equal mass (``"quantile"``) or equal width over [0, 1]."""
    if strategy == "uniform":
        return np.linspace(0.0, 1.0, n_bins + 1)[1:-1]
    qs = np.linspace(0.0, 1.0, n_bins + 1)[1:-1]
    if rows.n_blocks == 1:
        block: CheckedRows = rows.blocks[0]  # type: ignore[attr-defined]
        if block.w is None and block.xp is np and block.n > 0:
            return np.unique(np.quantile(block.p, qs))  # a selection, no sort: the common case
    table = keyed_score_table(rows)
    kept = table.stats[:, W] > 0
    check_repeated_rows(float(table.stats[kept, W].sum()), "the equal-mass grouping", weighted)
    return np.unique(_quantile_edges(table.keys[0][kept], table.stats[kept, W], qs))


def _group_sums(block: CheckedRows, edges: np.ndarray) -> np.ndarray:
    """Sums ``count, w, w p, w y`` per group (a score equal to an edge goes to the upper group)."""
    codes = block.xp.searchsorted(block.xp.asarray(edges), block.p, side="right")
    return group_stats(codes, block.p, block.y, block.w, edges.shape[0] + 1)


def _grouped(y_true: Any, y_prob: Any, sample_weight: Any, n_bins: int, strategy: str) -> np.ndarray:
    """The groups' sums (rows of positive weight only)."""
    rows = metric_rows(y_true, y_prob, sample_weight)
    edges = _group_edges(rows, n_bins, strategy, sample_weight is not None)
    stats = rows.sum(_group_sums, edges)
    check_total(stats[:, COUNT].sum(), stats[:, W].sum())
    return stats[stats[:, W] > 0]


def _group_means(
    y_true: Any, y_prob: Any, sample_weight: Any, n_bins: int, strategy: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """The decompositions' groups: weight ``W_k``, share ``W_k / W``, observed rate ``ybar_k``, mean
    prediction ``pbar_k``, and the overall rate ``ybar``."""
    stats = _grouped(y_true, y_prob, sample_weight, n_bins, strategy)
    weight = stats[:, W]
    total = weight.sum()
    return (
        weight,
        weight / total,
        stats[:, WY] / weight,
        stats[:, WP] / weight,
        float(stats[:, WY].sum() / total),
    )


# ------------------------------------------------------------------------------------------------
# Hosmer-Lemeshow


@dataclass(frozen=True)
class HosmerLemeshowResult:
    """What :func:`hosmer_lemeshow` measured.

    Attributes
    ----------
    statistic : float
        The chi-square statistic.
    df : int
        Degrees of freedom: the groups holding weight, less ``ddof``.
    p_value : float
        Upper tail of :math:`\\chi^2_{df}` at ``statistic`` (NaN when ``df`` is 0).
    """

    statistic: float
    df: int
    p_value: float


@validate_params(
    n_bins=Interval(int, 1, None),
    ddof=Interval(int, 0, None),
    strategy=Options("quantile", "uniform"),
)
def hosmer_lemeshow(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    n_bins: int = 10,
    strategy: str = "quantile",
    ddof: int = 0,
) -> HosmerLemeshowResult:
    r"""Hosmer-Lemeshow goodness-of-fit test on groups of the score (deciles by default).

    With :math:`O_g = \sum_{i \in g} w_i y_i`, :math:`E_g = \sum_{i \in g} w_i p_i`,
    :math:`W_g = \sum_{i \in g} w_i` and :math:`\bar p_g = E_g / W_g`:

    .. math::

        \hat C = \sum_g \frac{(O_g - E_g)^2}{W_g\, \bar p_g (1 - \bar p_g)}
        \sim \chi^2_{G - \mathrm{ddof}}

    (Hosmer & Lemeshow 1980; Hosmer, Lemeshow & Sturdivant 2013, section 5.2.2). ``ddof=0`` is for
    scores fixed before the labels were seen (external validation), ``ddof=2`` for a logistic model
    fitted on the same rows. Groups whose denominator is 0 (mean prediction 0 or 1) add nothing when
    their labels agree (:math:`O_g = E_g`) and make the statistic infinite (p-value 0) when they do not;
    they count in :math:`G`.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels in [0, 1] and predicted probabilities.
    sample_weight : array-like of shape (n,), optional
        Frequency weights (integer weights = repeated rows).
    n_bins : int, default 10
        Groups asked for. ``"quantile"``: cut at numpy's (linear) ``1/n_bins`` quantiles of the
        scores (weighted as repeated rows), equal edges merged, a score equal to an edge in the upper
        group (probcal's rule); ``"uniform"``: equal width over [0, 1].
    strategy : {"quantile", "uniform"}, default "quantile"
        See ``n_bins``.
    ddof : int, default 0
        Subtracted from the number of groups.

    Returns
    -------
    HosmerLemeshowResult

    Notes
    -----
    Equal to probcal 0.4's ``hosmer_lemeshow`` with unit weights (and on repeated rows); probcal's
    weighted form uses :math:`\sum w^2` in the denominator, a survey-weight reading. Tied scores can
    merge groups; when no group is left beyond ``ddof`` the result has ``df=0`` and a NaN p-value.

    Examples
    --------
    >>> r = hosmer_lemeshow([0, 0, 1, 1, 0, 1], [0.1, 0.2, 0.6, 0.7, 0.3, 0.8], n_bins=2)
    >>> (round(r.statistic, 4), r.df)
    (2.0357, 2)
    """
    stats_ = _grouped(y_true, y_prob, sample_weight, n_bins, strategy)
    check_repeated_rows(float(stats_[:, W].sum()), "the Hosmer-Lemeshow test", sample_weight is not None)
    denominator = stats_[:, WP] * (1.0 - stats_[:, WP] / stats_[:, W])
    ok = denominator > 0
    statistic = float(np.sum((stats_[ok, WY] - stats_[ok, WP]) ** 2 / denominator[ok]))
    # A group predicted at exactly 0 (or 1) with an event (a non-event) in it: the test's variance
    # says the gap cannot happen, so it is infinitely far from calibrated, not silently left out.
    if np.any(~ok & (np.abs(stats_[:, WY] - stats_[:, WP]) > 1e-12 * stats_[:, W])):
        statistic = math.inf
    df = max(stats_.shape[0] - ddof, 0)
    p_value = float(stats.chi2.sf(statistic, df)) if df > 0 else math.nan
    return HosmerLemeshowResult(statistic=statistic, df=df, p_value=p_value)


# ------------------------------------------------------------------------------------------------
# Murphy decomposition of the Brier score


@dataclass(frozen=True)
class MurphyDecomposition:
    """What :func:`murphy_decomposition` measured.

    Attributes
    ----------
    reliability : float
        Weighted mean squared gap between a group's mean prediction and its event rate.
    resolution : float
        Weighted mean squared gap between a group's event rate and the overall rate.
    uncertainty : float
        ``ybar (1 - ybar)``, the overall rate's Bernoulli variance.
    """

    reliability: float
    resolution: float
    uncertainty: float


@validate_params(n_bins=Interval(int, 1, None), strategy=Options("quantile", "uniform"))
def murphy_decomposition(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    n_bins: int = 10,
    strategy: str = "quantile",
    bias_corrected: bool = False,
) -> MurphyDecomposition:
    r"""Murphy's (1973) split of the Brier score over groups of the score.

    With :math:`\bar y_g`, :math:`\bar p_g` the group's weighted event rate and mean prediction,
    :math:`W_g / W` its weight share and :math:`\bar y` the overall rate:

    .. math::

        \mathrm{REL} = \sum_g \tfrac{W_g}{W} (\bar p_g - \bar y_g)^2, \quad
        \mathrm{RES} = \sum_g \tfrac{W_g}{W} (\bar y_g - \bar y)^2, \quad
        \mathrm{UNC} = \bar y (1 - \bar y),

    and Brier :math:`= \mathrm{REL} - \mathrm{RES} + \mathrm{UNC}` exactly when the predictions are
    constant inside each group (otherwise up to their within-group variance). ``bias_corrected``
    subtracts each group rate's sampling variance :math:`\bar y_g (1 - \bar y_g) / (W_g - 1)` from
    both squared gaps, floored at 0 (Ferro & Fricker 2012; groups with :math:`W_g \le 1` unchanged).

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels in [0, 1] and predicted probabilities.
    sample_weight : array-like of shape (n,), optional
        Frequency weights (integer weights = repeated rows).
    n_bins : int, default 10
        Groups, as in :func:`hosmer_lemeshow`.
    strategy : {"quantile", "uniform"}, default "quantile"
        Equal mass (probcal's ``"mass"``) or equal width (probcal's ``"width"``).
    bias_corrected : bool, default False
        Apply the within-group variance correction.

    Returns
    -------
    MurphyDecomposition

    Notes
    -----
    Equal to probcal 0.4's ``murphy_decomposition`` with unit weights; with weights probcal's
    correction uses the effective count :math:`W_g^2 / \sum w^2` where this uses :math:`W_g`.

    Examples
    --------
    >>> r = murphy_decomposition([0, 1, 0, 1], [0.2, 0.2, 0.8, 0.8], n_bins=2)
    >>> (round(r.reliability, 6), r.resolution, r.uncertainty)
    (0.09, 0.0, 0.25)
    """
    weight, share, rate, mean_p, y_bar = _group_means(y_true, y_prob, sample_weight, n_bins, strategy)
    rel_term = (mean_p - rate) ** 2
    res_term = (rate - y_bar) ** 2
    if bias_corrected:
        multi = weight > 1.0
        variance = rate * (1.0 - rate) / np.where(multi, weight - 1.0, 1.0)
        rel_term = np.where(multi, np.maximum(rel_term - variance, 0.0), rel_term)
        res_term = np.where(multi, np.maximum(res_term - variance, 0.0), res_term)
    return MurphyDecomposition(
        reliability=float(np.sum(share * rel_term)),
        resolution=float(np.sum(share * res_term)),
        uncertainty=y_bar * (1.0 - y_bar),
    )


# ------------------------------------------------------------------------------------------------
# Spiegelhalter's z


@dataclass(frozen=True)
class SpiegelhalterResult:
    """What :func:`spiegelhalter_z` measured.

    Attributes
    ----------
    z : float
        The standardised statistic (NaN when its null variance is 0).
    p_value : float
        Two-sided normal p-value (NaN when ``z`` is).
    """

    z: float
    p_value: float


def _spiegelhalter_sums(block: CheckedRows) -> np.ndarray:
    xp, p = block.xp, block.p
    w = block.weights()
    slope = 1.0 - 2.0 * p
    return np.array(
        [
            float(block.n),
            float(w.sum()),
            float(xp.sum(w * (block.y - p) * slope)),
            float(xp.sum(w * slope * slope * p * (1.0 - p))),
        ]
    )


def spiegelhalter_z(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> SpiegelhalterResult:
    r"""Spiegelhalter's (1986) z test of calibration, built on the Brier score.

    .. math::

        z = \frac{\sum_i w_i (y_i - p_i)(1 - 2 p_i)}{\sqrt{\sum_i w_i (1 - 2 p_i)^2 p_i (1 - p_i)}}
        \;\sim\; N(0, 1)

    under calibration; two-sided p-value. No groups; errors of opposite sign in different score
    regions cancel.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels in [0, 1] and predicted probabilities.
    sample_weight : array-like of shape (n,), optional
        Frequency weights (integer weights = repeated rows).

    Returns
    -------
    SpiegelhalterResult
        ``z`` and ``p_value`` are NaN when every prediction is 0, 1/2 or 1 (null variance 0).

    Notes
    -----
    Equal to probcal 0.4's ``spiegelhalter_z`` with unit weights; probcal's weighted variance uses
    :math:`w_i^2`.

    Examples
    --------
    >>> round(spiegelhalter_z([0, 1, 1, 1], [0.2, 0.4, 0.7, 0.9]).z, 4)
    -0.5025
    """
    sums = metric_rows(y_true, y_prob, sample_weight).sum(_spiegelhalter_sums)
    check_total(sums[0], sums[1])
    if not sums[3] > 0:
        return SpiegelhalterResult(z=math.nan, p_value=math.nan)
    z = float(sums[2] / math.sqrt(sums[3]))
    return SpiegelhalterResult(z=z, p_value=min(1.0, 2.0 * float(stats.norm.sf(abs(z)))))


# ------------------------------------------------------------------------------------------------
# Cox's calibration slope and intercept


@dataclass(frozen=True)
class CalibrationSlopeResult:
    """What :func:`calibration_slope` measured: the logistic recalibration ``y ~ a + b logit(p)``.

    Attributes
    ----------
    slope, intercept : float
        :math:`\\hat b` and :math:`\\hat a` (1 and 0 for a calibrated score).
    slope_se, intercept_se : float
        Their standard errors (inverse Fisher information).
    statistic : float
        Likelihood-ratio statistic of :math:`(a, b) = (0, 1)`, the joint test.
    df : int
        2.
    p_value : float
        Upper tail of :math:`\\chi^2_2` at ``statistic``.
    """

    slope: float
    slope_se: float
    intercept: float
    intercept_se: float
    statistic: float
    df: int
    p_value: float


@dataclass(frozen=True)
class CalibrationInterceptResult:
    """What :func:`calibration_intercept` measured: ``y ~ a + offset(logit(p))``.

    Attributes
    ----------
    intercept : float
        :math:`\\hat a`, calibration-in-the-large on the log-odds scale (0 when calibrated).
    se : float
        Its standard error.
    z : float
        ``intercept / se``, the Wald statistic of :math:`a = 0`.
    p_value : float
        Two-sided normal p-value of ``z``.
    """

    intercept: float
    se: float
    z: float
    p_value: float


def _logit_block(block: CheckedRows) -> CheckedRows:
    """The block with ``p`` replaced by ``logit(clip(p))`` (computed once for every Newton pass)."""
    xp = block.xp
    q = xp.clip(block.p, LOGIT_EPS, 1.0 - LOGIT_EPS)
    return CheckedRows(y=block.y, p=xp.log(q) - xp.log1p(-q), w=block.w, xp=xp)


@parallel_rows("z")
def _recalibration_sums_cpu(z, y, w, unit, a, b):  # pragma: no cover - compiled; tested vs statsmodels
    """:func:`_recalibration_sums` in one parallel pass (``unit``: every weight 1, ``w`` unread)."""
    total_w = 0.0
    total_wy = 0.0
    loglik = 0.0
    g0 = 0.0
    g1 = 0.0
    h00 = 0.0
    h01 = 0.0
    h11 = 0.0
    for i in numba.prange(z.shape[0]):
        wi = 1.0 if unit else w[i]
        eta = a + b * z[i]
        if eta >= 0.0:
            e = np.exp(-eta)
            log_mu = -np.log1p(e)
            log_not = -eta + log_mu
            mu = 1.0 / (1.0 + e)
        else:
            e = np.exp(eta)
            log_not = -np.log1p(e)
            log_mu = eta + log_not
            mu = e / (1.0 + e)
        r = wi * (y[i] - mu)
        v = wi * mu * (1.0 - mu)
        total_w += wi
        total_wy += wi * y[i]
        loglik += wi * (y[i] * log_mu + (1.0 - y[i]) * log_not)
        g0 += r
        g1 += r * z[i]
        h00 += v
        h01 += v * z[i]
        h11 += v * z[i] * z[i]
    return np.array([float(z.shape[0]), total_w, total_wy, loglik, g0, g1, h00, h01, h11])


def _recalibration_sums(block: CheckedRows, a: float, b: float) -> np.ndarray:
    """``[count, W, W y, log-likelihood, gradient (2), Hessian (2 x 2)]`` of ``y ~ a + b z`` at ``(a, b)``."""
    xp, z, y = block.xp, block.p, block.y
    if xp is np:
        return _recalibration_sums_cpu(*block.host_arrays(), a, b)
    w = block.weights()
    eta = a + b * z
    # log(mu) = -log(1 + e^-eta), log(1 - mu) = -log(1 + e^eta), both without overflow
    log_mu = -xp.logaddexp(0.0, -eta)
    log_not = -xp.logaddexp(0.0, eta)
    mu = xp.exp(log_mu)
    r = w * (y - mu)
    v = w * mu * (1.0 - mu)
    return np.array(
        [
            float(block.n),
            float(w.sum()),
            float(xp.sum(w * y)),
            float(xp.sum(w * (y * log_mu + (1.0 - y) * log_not))),
            float(r.sum()),
            float(xp.sum(r * z)),
            float(v.sum()),
            float(xp.sum(v * z)),
            float(xp.sum(v * z * z)),
        ]
    )


def _recalibration_rows(y_true: Any, y_prob: Any, sample_weight: Any) -> tuple[Rows, np.ndarray]:
    """The rows with their logits, and their :func:`_recalibration_sums` at the identity ``(0, 1)``
    (the totals and the start of every fit), after the checks of both classes."""
    rows = metric_rows(y_true, y_prob, sample_weight).map(_logit_block)
    sums = rows.sum(_recalibration_sums, 0.0, 1.0)
    check_total(sums[0], sums[1])
    if not 0.0 < sums[2] < sums[1]:
        msg = "y_true: one class only; the logistic recalibration has no finite maximum"
        raise ValueError(msg)
    return rows, sums


def ill_conditioned(hess: np.ndarray) -> bool:
    """Whether the Hessian, scaled to a unit diagonal, is numerically singular."""
    scale = np.sqrt(np.abs(np.diag(hess)))
    return not np.all(scale > 0) or bool(np.linalg.cond(hess / np.outer(scale, scale)) > 1e12)


def separated_fit(
    hess: np.ndarray, loglik: float, total_weight: float, start_hess: np.ndarray | None = None
) -> bool:
    """Whether a converged logistic fit ran off to infinite coefficients (no finite maximum).

    Classes separated by the score drive the fitted probabilities to 0 or 1 and Newton stops where its
    steps vanish, at finite but meaningless coefficients. Complete separation sends the log-likelihood
    to 0; quasi-complete separation (the classes meet only at tied scores) leaves curvature on the tied
    rows alone, so the Hessian turns singular, or a diagonal entry falls by ten orders of magnitude from
    where the fit started (``start_hess``).
    """
    if ill_conditioned(hess) or loglik >= -1e-9 * total_weight:
        return True
    return start_hess is not None and bool(np.any(np.diag(hess) < 1e-10 * np.diag(start_hess)))


def _hessian(sums: np.ndarray, fit_slope: bool) -> np.ndarray:
    """The negative log-likelihood's Hessian in ``(a, b)`` (``(a,)`` without the slope), from the sums."""
    full = np.array([[sums[6], sums[7]], [sums[7], sums[8]]])
    return full if fit_slope else full[:1, :1]


def _newton(rows: Rows, a: float, b: float, *, fit_slope: bool) -> tuple[float, float, np.ndarray, float]:
    """Maximise the log-likelihood from ``(a, b)`` (``b`` fixed unless ``fit_slope``); return the
    estimate, the inverse Hessian (the covariance) and the log-likelihood."""
    sums = rows.sum(_recalibration_sums, a, b)
    start_hessian = _hessian(sums, fit_slope=True)
    for _ in range(NEWTON_MAX_ITER):
        gradient = sums[4:6] if fit_slope else sums[4:5]
        hessian = _hessian(sums, fit_slope)
        try:
            step = np.linalg.solve(hessian, gradient)
        except np.linalg.LinAlgError:
            break  # no curvature left: the classes are separated, which the check below reports
        loglik = sums[3]
        scale = 1.0
        while True:  # halve the step until the log-likelihood does not fall
            a_new = a + scale * step[0]
            b_new = b + scale * step[1] if fit_slope else b
            trial = rows.sum(_recalibration_sums, a_new, b_new)
            if trial[3] >= loglik - 1e-12 * abs(loglik) or scale < 1e-8:
                break
            scale *= 0.5
        a, b, sums = a_new, b_new, trial
        if np.max(np.abs(scale * step)) <= NEWTON_TOL * (1.0 + max(abs(a), abs(b))):
            break
    hessian = _hessian(sums, fit_slope)
    if fit_slope and separated_fit(hessian, float(sums[3]), float(sums[1]), start_hessian):
        msg = (
            "y_true: the logistic recalibration has no finite maximum "
            "(the classes are separated by the score)"
        )
        raise ValueError(msg)
    return float(a), float(b), np.linalg.inv(hessian), float(sums[3])


def calibration_slope(y_true: Any, y_prob: Any, *, sample_weight: Any = None) -> CalibrationSlopeResult:
    r"""Cox's (1958) calibration slope, with the intercept, their standard errors and the joint test.

    The logistic recalibration of the label on the score's log-odds,

    .. math::

        \Pr(y = 1 \mid p) = \sigma\bigl(a + b \,\mathrm{logit}(p)\bigr),

    fitted by maximum likelihood (Newton's method, each pass a sum over rows); :math:`b < 1` means
    over-confident scores (too spread), :math:`b > 1` under-confident. Standard errors are the square
    roots of the inverse Fisher information's diagonal; the joint test is the likelihood ratio of
    :math:`(a, b) = (0, 1)` against :math:`\chi^2_2` (Miller, Hui & Tierney 1991).

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels in [0, 1] and predicted probabilities (clipped to ``[1e-12, 1 - 1e-12]`` before the
        logit, as probcal does).
    sample_weight : array-like of shape (n,), optional
        Frequency weights (integer weights = repeated rows).

    Returns
    -------
    CalibrationSlopeResult

    Notes
    -----
    Equal to statsmodels' ``GLM(y, [1, logit(p)], family=Binomial(), freq_weights=w)`` (parameters,
    ``bse``, log-likelihood) to 1e-8, and the slope to probcal 0.4's ``calibration_slope``. Labels of
    one class, or scores with one logit (the slope is not identified: a singular Hessian), raise
    ``ValueError``.

    Examples
    --------
    >>> r = calibration_slope([0, 0, 1, 0, 1, 1], [0.1, 0.4, 0.3, 0.6, 0.8, 0.7])
    >>> round(r.slope, 3), r.df
    (1.07, 2)
    """
    rows, start = _recalibration_rows(y_true, y_prob, sample_weight)
    # The Hessian at the start is the weighted Gram matrix of (1, z): singular iff z is constant.
    if not start[6] * start[8] - start[7] ** 2 > 1e-12 * start[6] * start[8]:
        msg = "y_prob: every score has the same logit; the calibration slope is not identified"
        raise ValueError(msg)
    null = float(start[3])
    a, b, covariance, loglik = _newton(rows, 0.0, 1.0, fit_slope=True)
    statistic = max(2.0 * (loglik - null), 0.0)
    return CalibrationSlopeResult(
        slope=b,
        slope_se=float(math.sqrt(covariance[1, 1])),
        intercept=a,
        intercept_se=float(math.sqrt(covariance[0, 0])),
        statistic=statistic,
        df=2,
        p_value=float(stats.chi2.sf(statistic, 2)),
    )


def calibration_intercept(
    y_true: Any, y_prob: Any, *, sample_weight: Any = None
) -> CalibrationInterceptResult:
    r"""Calibration-in-the-large: the intercept of the recalibration with the slope fixed at 1.

    .. math::

        \Pr(y = 1 \mid p) = \sigma\bigl(a + \mathrm{logit}(p)\bigr)

    (Cox 1958; the offset model of Steyerberg, *Clinical Prediction Models*, 2nd ed., section
    15.3.4): :math:`a > 0` means the scores are too low on average. The Wald test of :math:`a = 0`
    uses the standard error from the inverse Fisher information.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels in [0, 1] and predicted probabilities (clipped to ``[1e-12, 1 - 1e-12]``).
    sample_weight : array-like of shape (n,), optional
        Frequency weights (integer weights = repeated rows).

    Returns
    -------
    CalibrationInterceptResult

    Notes
    -----
    Equal to statsmodels' ``GLM(y, ones, offset=logit(p), family=Binomial(), freq_weights=w)`` to
    1e-8, and the intercept to probcal 0.4's ``calibration_intercept``. Labels of one class raise
    ``ValueError``.

    Examples
    --------
    >>> r = calibration_intercept([0, 0, 1, 0, 1, 1], [0.1, 0.4, 0.3, 0.6, 0.8, 0.7])
    >>> round(r.intercept, 3)
    0.087
    """
    rows, _ = _recalibration_rows(y_true, y_prob, sample_weight)
    a, _, covariance, _ = _newton(rows, 0.0, 1.0, fit_slope=False)
    se = float(math.sqrt(covariance[0, 0]))
    z = a / se
    return CalibrationInterceptResult(
        intercept=a, se=se, z=z, p_value=min(1.0, 2.0 * float(stats.norm.sf(abs(z))))
    )


# ------------------------------------------------------------------------------------------------
# Per-grade tests (credit-risk rating grades)


@dataclass(frozen=True)
class GradeTestResult:
    """What :func:`binomial_grade_test` or :func:`jeffreys_grade_test` measured, one entry per grade.

    Attributes
    ----------
    grades : tuple
        The grades, in ``order`` or sorted.
    n : numpy.ndarray
        Weight (row count) per grade.
    k : numpy.ndarray
        Weighted defaults per grade.
    pd : numpy.ndarray
        Assigned PD per grade: the weighted mean prediction.
    p_value : numpy.ndarray
        The test's one-sided p-value per grade (small: more defaults than the PD supports).
    light : tuple of str
        ``"green"`` (p > 0.05), ``"amber"`` (0.01 < p <= 0.05) or ``"red"``; ``"none"`` for a grade
        without rows.
    ci_low, ci_high : numpy.ndarray
        The 90% display interval of the default rate (Clopper-Pearson for the binomial test, the
        central Jeffreys posterior interval for the Jeffreys test).
    p_normal : numpy.ndarray or None
        The binomial test's normal approximation (None for the Jeffreys test).
    """

    grades: tuple
    n: np.ndarray
    k: np.ndarray
    pd: np.ndarray
    p_value: np.ndarray
    light: tuple
    ci_low: np.ndarray
    ci_high: np.ndarray
    p_normal: np.ndarray | None = None


def _grade_counts(
    y_true: Any, y_prob: Any, grades: Any, sample_weight: Any, order: Any
) -> tuple[tuple, np.ndarray, np.ndarray, np.ndarray]:
    """The grades (``order``, else sorted) with their weight ``n``, defaults ``k = sum w y`` and assigned
    PD ``sum w p / n`` (NaN for a listed grade without rows); unlisted grades refused."""
    uniques, sums = field_value_sums(y_true, y_prob, grades, sample_weight, "grade")
    present = list(uniques)
    if any(pd.api.types.is_scalar(g) and bool(pd.isna(g)) for g in present):  # None, NaN, pd.NA, NaT
        # Sorted with the grades, a missing one failed in sorted() (text) or stood among them (NaN).
        msg = "grades: some rows have no grade (a missing value); every row needs one"
        raise ValueError(msg)
    if order is None:
        listed = tuple(sorted(present))
    else:
        listed = tuple(order)
        unlisted = [g for g in present if g not in set(listed)]
        if unlisted or len(set(listed)) != len(listed):
            msg = f"order: must list every grade once; missing {unlisted[:5]} or repeated entries"
            raise ValueError(msg)
    position = {g: i for i, g in enumerate(present)}
    out = np.zeros((len(listed), 4))
    for j, g in enumerate(listed):
        if g in position:
            out[j] = sums[position[g]]
    n = out[:, W]
    with np.errstate(invalid="ignore", divide="ignore"):
        pd_ = out[:, WP] / n
    return listed, n, out[:, WY], pd_


def _lights(p_value: np.ndarray) -> tuple[str, ...]:
    return tuple(
        "none" if not np.isfinite(v) else "red" if v <= 0.01 else "amber" if v <= 0.05 else "green"
        for v in p_value
    )


def binomial_grade_test(
    y_true: Any, y_prob: Any, grades: Any, *, sample_weight: Any = None, order: Any = None
) -> GradeTestResult:
    r"""Exact one-sided binomial test per rating grade: :math:`\Pr(X \ge k)` for :math:`X \sim B(n, PD)`.

    Per grade, :math:`n` rows, :math:`k` defaults and the assigned PD (the mean prediction); the
    p-value is the binomial upper tail, :math:`I_{\mathrm{PD}}(k, n - k + 1)` (1 when :math:`k = 0`),
    with its normal approximation :math:`1 - \Phi\bigl((k - n\,\mathrm{PD}) / \sqrt{n\,
    \mathrm{PD}(1 - \mathrm{PD})}\bigr)` beside it (BCBS Working Paper 14, 2005, section 5.2).

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Default labels in [0, 1] and assigned PDs.
    grades : array-like of shape (n,)
        The rating grade of each row (any 1-D column).
    sample_weight : array-like of shape (n,), optional
        Frequency weights: :math:`n` and :math:`k` become weight sums (integer weights = repeated rows;
        the tail is the regularised incomplete beta function, defined for real :math:`n, k`).
    order : sequence, optional
        The grades to report, in this order; it must include every grade present, and a listed grade
        without rows is reported with ``n = 0`` and NaN ``pd``, ``p_value`` and interval (light
        ``"none"``). Default: the grades present, sorted.

    Returns
    -------
    GradeTestResult

    Notes
    -----
    Equal to probcal 0.4's ``binomial_grade_test`` (grades as strings, unit weights); probcal ignores
    weights and refuses an ``order`` naming absent grades.

    Examples
    --------
    >>> grades = ["A", "A", "A", "B", "B", "B"]
    >>> r = binomial_grade_test([0, 1, 0, 0, 1, 1], [0.1, 0.1, 0.1, 0.5, 0.5, 0.5], grades)
    >>> r.grades, r.p_value.round(3).tolist(), r.light
    (('A', 'B'), [0.271, 0.5], ('green', 'green'))
    """
    listed, n, k, pd_ = _grade_counts(y_true, y_prob, grades, sample_weight, order)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_value = np.where(k == 0, 1.0, special.betainc(np.maximum(k, 1e-300), n - k + 1.0, pd_))
        p_value = np.where(n > 0, p_value, np.nan)
        se = np.sqrt(n * pd_ * (1.0 - pd_))
        p_normal = np.where(n > 0, stats.norm.sf(np.where(se > 0, (k - n * pd_) / se, 0.0)), np.nan)
        ci_low = np.where(k == 0, 0.0, stats.beta.ppf(0.05, k, n - k + 1.0))
        ci_high = np.where(k == n, 1.0, stats.beta.ppf(0.95, k + 1.0, n - k))
    empty = n <= 0
    ci_low[empty] = np.nan
    ci_high[empty] = np.nan
    return GradeTestResult(listed, n, k, pd_, p_value, _lights(p_value), ci_low, ci_high, p_normal)


def jeffreys_grade_test(
    y_true: Any, y_prob: Any, grades: Any, *, sample_weight: Any = None, order: Any = None
) -> GradeTestResult:
    r"""Jeffreys test per rating grade: the posterior probability that the default rate is at most the PD.

    With the Jeffreys prior :math:`\mathrm{Beta}(1/2, 1/2)` the posterior of a grade's default rate
    after :math:`k` defaults in :math:`n` rows is :math:`\mathrm{Beta}(k + 1/2, n - k + 1/2)`, and the
    p-value is its CDF at the assigned PD (ECB, *Instructions for reporting the validation results of
    internal models*, 2019, section 2.5.3.1); small values flag under-estimated PDs.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Default labels in [0, 1] and assigned PDs.
    grades : array-like of shape (n,)
        The rating grade of each row.
    sample_weight : array-like of shape (n,), optional
        Frequency weights (as in :func:`binomial_grade_test`).
    order : sequence, optional
        As in :func:`binomial_grade_test`.

    Returns
    -------
    GradeTestResult
        ``ci_low`` and ``ci_high`` are the posterior's 5% and 95% quantiles.

    Notes
    -----
    Equal to probcal 0.4's ``jeffreys_grade_test`` (grades as strings, unit weights).

    Examples
    --------
    >>> grades = ["A", "A", "A", "B", "B", "B"]
    >>> r = jeffreys_grade_test([0, 1, 0, 0, 1, 1], [0.1, 0.1, 0.1, 0.5, 0.5, 0.5], grades)
    >>> r.p_value.round(3).tolist()
    [0.098, 0.288]
    """
    listed, n, k, pd_ = _grade_counts(y_true, y_prob, grades, sample_weight, order)
    with np.errstate(invalid="ignore", divide="ignore"):
        a, b = k + 0.5, n - k + 0.5
        p_value = np.where(n > 0, special.betainc(a, b, pd_), np.nan)
        ci_low = np.where(n > 0, stats.beta.ppf(0.05, a, b), np.nan)
        ci_high = np.where(n > 0, stats.beta.ppf(0.95, a, b), np.nan)
    return GradeTestResult(listed, n, k, pd_, p_value, _lights(p_value), ci_low, ci_high)


# ------------------------------------------------------------------------------------------------
# Murphy's decomposition of the log-loss


@dataclass(frozen=True)
class LogLossDecomposition:
    """What :func:`murphy_decomposition_log_loss` measured (every term in nats per unit weight).

    Attributes
    ----------
    log_loss : float
        The weighted mean log-loss.
    calibration : float
        ``log_loss - refinement``: the part of the loss the groups' event rates would remove.
    refinement : float
        :math:`\\sum_g \\tfrac{W_g}{W} H(\\bar y_g)`, the loss of the groups' own event rates
        (``uncertainty - resolution``).
    reliability : float
        :math:`\\sum_g \\tfrac{W_g}{W} \\mathrm{KL}(\\bar y_g \\,\\|\\, \\bar p_g)`; equal to
        ``calibration`` when the predictions are constant inside each group.
    resolution : float
        :math:`\\sum_g \\tfrac{W_g}{W} \\mathrm{KL}(\\bar y_g \\,\\|\\, \\bar y)`.
    uncertainty : float
        :math:`H(\\bar y)`, the loss of the overall rate.
    """

    log_loss: float
    calibration: float
    refinement: float
    reliability: float
    resolution: float
    uncertainty: float


def _entropy(q: np.ndarray) -> np.ndarray:
    return -(special.xlogy(q, q) + special.xlogy(1.0 - q, 1.0 - q))


def _kl(q: np.ndarray, p: np.ndarray) -> np.ndarray:
    p = np.clip(p, np.finfo(np.float64).eps, 1.0 - np.finfo(np.float64).eps)
    return special.xlogy(q, q / p) + special.xlogy(1.0 - q, (1.0 - q) / (1.0 - p))


@validate_params(n_bins=Interval(int, 1, None), strategy=Options("quantile", "uniform"))
def murphy_decomposition_log_loss(
    y_true: Any, y_prob: Any, *, sample_weight: Any = None, n_bins: int = 10, strategy: str = "quantile"
) -> LogLossDecomposition:
    r"""Murphy's split of the log-loss over groups of the score: calibration plus refinement.

    With :math:`\bar y_g`, :math:`\bar p_g` the group's weighted event rate and mean prediction,
    :math:`W_g / W` its weight share, :math:`\bar y` the overall rate, :math:`H` the binary entropy
    and :math:`\mathrm{KL}` the binary Kullback-Leibler divergence (natural logarithms):

    .. math::

        \mathrm{LL} = \underbrace{(\mathrm{LL} - \mathrm{REF})}_{\text{calibration}}
        + \underbrace{\textstyle\sum_g \tfrac{W_g}{W} H(\bar y_g)}_{\mathrm{REF}}, \qquad
        \mathrm{REF} = H(\bar y) - \textstyle\sum_g \tfrac{W_g}{W}\,\mathrm{KL}(\bar y_g \,\|\, \bar y),

    the log-loss form of the Brier score's :func:`murphy_decomposition` (DeGroot & Fienberg 1983;
    Bröcker 2009): uncertainty less resolution is the refinement. When the predictions are constant
    inside each group, calibration is the reliability
    :math:`\sum_g \tfrac{W_g}{W}\,\mathrm{KL}(\bar y_g \,\|\, \bar p_g)` (both are returned).

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels in [0, 1] and predicted probabilities (clipped to machine epsilon, as
        :func:`gpucal.metrics.log_loss`).
    sample_weight : array-like of shape (n,), optional
        Frequency weights (integer weights = repeated rows).
    n_bins : int, default 10
        Groups, as in :func:`hosmer_lemeshow`.
    strategy : {"quantile", "uniform"}, default "quantile"
        Equal mass or equal width.

    Returns
    -------
    LogLossDecomposition

    Notes
    -----
    probcal 0.4's ``logloss_calibration_refinement`` splits the log-loss the same way around a LOESS
    recalibration curve instead of score groups; the two agree only as the groups and the smoother
    both approach the true recalibration curve.

    References
    ----------
    .. [1] M. H. DeGroot, S. E. Fienberg, "The comparison and evaluation of forecasters", The
       Statistician 32, 12-22, 1983.
    .. [2] J. Bröcker, "Reliability, sufficiency, and the decomposition of proper scores", Q. J. R.
       Meteorol. Soc. 135, 1512-1519, 2009.

    Examples
    --------
    >>> r = murphy_decomposition_log_loss([0, 1, 0, 1], [0.2, 0.2, 0.8, 0.8], n_bins=2)
    >>> (round(r.calibration, 6), round(r.refinement, 6), round(r.uncertainty, 6))
    (0.223144, 0.693147, 0.693147)
    """
    _, share, rate, mean_p, y_bar = _group_means(y_true, y_prob, sample_weight, n_bins, strategy)
    rate = np.clip(rate, 0.0, 1.0)
    y_bar = float(np.clip(y_bar, 0.0, 1.0))
    loss = log_loss(y_true, y_prob, sample_weight=sample_weight)
    uncertainty = float(_entropy(np.array([y_bar]))[0])
    resolution = float(np.sum(share * _kl(rate, np.full_like(rate, y_bar))))
    refinement = float(np.sum(share * _entropy(rate)))
    return LogLossDecomposition(
        log_loss=loss,
        calibration=loss - refinement,
        refinement=refinement,
        reliability=float(np.sum(share * _kl(rate, mean_p))),
        resolution=resolution,
        uncertainty=uncertainty,
    )
