r"""The squared kernel calibration error (SKCE, Widmann, Lindsten & Zachariah 2019) and its test.

For binary predictions, with residuals :math:`r_i = y_i - p_i` and a kernel :math:`k` on the score
(or its logit), the pair term is :math:`h_{ij} = 2\,k(s_i, s_j)\,r_i r_j` (the paper's matrix-valued
kernel :math:`k\,I_2` on the prediction :math:`(1 - p, p)`). Every estimator here is a function of
sums over rows:

* the quadratic estimators read the keyed table of sums per distinct score (``w`` and
  :math:`R = \sum w r`, merged over blocks) and the sum :math:`\sum w r^2`: the double sum
  :math:`\sum_{a,b} k(s_a, s_b) R_a R_b` over distinct scores is one O(m) recursion on the sorted
  table for the Laplace kernel (:math:`e^{-|s_b - s_a|/h}` factorises along the sorted scores), and a
  loop over pairs within the kernel's reach for the Gaussian one;
* the linear estimator pairs rows ``2k`` and ``2k + 1`` by global row index, one reduction in block
  order that joins a pair split between two blocks.

So they run on any backend and on dask partitions with the one-machine value.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from gpucal._backend import to_numpy
from gpucal._params import Interval, Options, validate_params
from gpucal.kernels.jit import numba
from gpucal.metrics.inputs import CheckedRows, check_total, keyed_score_table, metric_rows
from gpucal.metrics.sums import COUNT, WP, WY, W

#: Scores are clipped to ``[LOGIT_EPS, 1 - LOGIT_EPS]`` before the logit of ``scale="logit"``.
LOGIT_EPS = 1e-12
#: The median heuristic reads at most about this many scores, evenly strided by global row index.
MAX_MEDIAN_POINTS = 4096
#: exp(-x) is 0 in float64 beyond this: the Gaussian pair loop stops where the kernel underflows.
EXP_UNDERFLOW = 746.0

#: The kernel, bandwidth and scale parameters shared by :func:`skce` and :func:`skce_test`.
KERNEL_PARAMS: dict[str, Interval | Options] = {
    "kernel": Options("laplace", "gaussian"),
    "bandwidth": Interval(float, 0, None, closed="neither", allow_none=True),
    "scale": Options("probability", "logit"),
}


def _kernel_input(p: Any, scale: str) -> Any:
    if scale == "probability":
        return p
    q = np.clip(p, LOGIT_EPS, 1.0 - LOGIT_EPS)
    return np.log(q / (1.0 - q))


def _kernel(d: Any, kernel: str, bandwidth: float) -> Any:
    if kernel == "laplace":
        return np.exp(-d / bandwidth)
    return np.exp(-(d * d) / (2.0 * bandwidth * bandwidth))


# ------------------------------------------------------------------------------------------------
# The bandwidth: median heuristic on a strided subsample


def _strided_scores(block: CheckedRows, stride: int, *, row_offset: int) -> np.ndarray:
    """``(2, m)``: the block's scores at global rows that are multiples of ``stride``, in row order, and
    whether each row has positive weight."""
    first = (-row_offset) % stride
    scores = to_numpy(block.p[first::stride]).astype(np.float64)
    weighted = (to_numpy(block.weights()[first::stride]) > 0).astype(np.float64)
    return np.stack([scores, weighted])


def _positive_scores(block: CheckedRows) -> np.ndarray:
    """The block's scores of rows of positive weight, in row order."""
    return to_numpy(block.p[block.weights() > 0]).astype(np.float64)


def _concatenate(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate(parts, axis=-1)


@numba.njit(cache=True)
def _pairs_within(s, t):  # pragma: no cover - compiled; tested against the materialised differences
    """The number of pairs ``a < b`` of the increasing ``s`` with ``s[b] - s[a] <= t`` (two pointers)."""
    count = 0
    a = 0
    for b in range(s.shape[0]):
        while s[b] - s[a] > t:
            a += 1
        count += b - a
    return count


@numba.njit(cache=True)
def _kth_difference(s, k):  # pragma: no cover - compiled; tested against the materialised differences
    """The ``k``-th smallest (1-based) of the pairwise differences of the increasing ``s``.

    Bisection over the bit patterns of non-negative float64 (ordered as the numbers are): the smallest
    ``t`` with at least ``k`` differences at most ``t`` is a difference, exactly as computed.
    """
    lo = np.int64(0)
    hi = np.array([s[-1] - s[0]]).view(np.int64)[0]
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if _pairs_within(s, np.array([mid]).view(np.float64)[0]) >= k:
            hi = mid
        else:
            lo = mid + 1
    return np.array([lo]).view(np.float64)[0]


def _median_distance(s: np.ndarray) -> float:
    r"""The median of :math:`|s_a - s_b|` over the pairs :math:`a < b` (their mean when it is 0).

    Equal to ``np.median`` of the materialised differences, in :math:`O(m \log m)` time and
    :math:`O(m)` memory instead of :math:`O(m^2)`: the middle differences are found by counting (the
    mean, needed only when most pairs tie, is taken from the materialised differences).
    """
    if s.shape[0] < 2 or not s.max() > s.min():  # before numpy's warnings of an empty mean
        msg = "y_prob: all scores are identical; pass bandwidth explicitly"
        raise ValueError(msg)
    ordered = np.sort(s)
    n_pairs = ordered.shape[0] * (ordered.shape[0] - 1) // 2
    upper = _kth_difference(ordered, n_pairs // 2 + 1)
    median = upper if n_pairs % 2 else (_kth_difference(ordered, n_pairs // 2) + upper) / 2
    if median > 0.0:
        return float(median)
    return float(np.mean(np.abs(s[:, None] - s[None, :])[np.triu_indices(s.shape[0], k=1)]))


def _resolve_bandwidth(rows: Any, n: int, scale: str, bandwidth: float | None) -> float:
    """``bandwidth``, or the median pairwise distance of the kernel inputs of rows ``0, c, 2c, ...``
    of positive weight, :math:`c = \\lceil n / 4096 \\rceil` (the mean when the median is 0).

    A row of weight 0 is not in the data and must not move the bandwidth; when the stride meets fewer
    than two rows of positive weight, or only equal ones (weights on every other row, a stride of 2),
    the rows of positive weight are strided among themselves instead.
    """
    if bandwidth is not None:
        return float(bandwidth)
    stride = max(1, math.ceil(n / MAX_MEDIAN_POINTS))
    scores, weighted = rows.reduce(_strided_scores, _concatenate, stride, offsets=True)
    sample = scores[weighted > 0]
    if sample.shape[0] < 2 or sample.min() == sample.max():
        positive = rows.reduce(_positive_scores, _concatenate)
        sample = positive[:: max(1, math.ceil(positive.shape[0] / MAX_MEDIAN_POINTS))]
    return _median_distance(_kernel_input(sample, scale))


# ------------------------------------------------------------------------------------------------
# The quadratic estimators


@numba.njit(cache=True)
def _laplace_double_sum(s, r, bandwidth):  # pragma: no cover - compiled; tested vs the O(n^2) oracle
    r"""``sum_{a,b} exp(-|s_a - s_b| / h) r_a r_b`` over increasing ``s``: with
    :math:`A_b = \sum_{a<b} e^{-(s_b - s_a)/h} r_a = e^{-(s_b - s_{b-1})/h} (A_{b-1} + r_{b-1})`,
    the sum is :math:`\sum_b r_b^2 + 2 \sum_b r_b A_b`."""
    total = 0.0
    acc = 0.0
    for b in range(s.shape[0]):
        if b > 0:
            acc = math.exp(-(s[b] - s[b - 1]) / bandwidth) * (acc + r[b - 1])
        total += r[b] * (r[b] + 2.0 * acc)
    return total


@numba.njit(cache=True)
def _gaussian_double_sum(s, r, bandwidth):  # pragma: no cover - compiled; tested vs the O(n^2) oracle
    """``sum_{a,b} exp(-(s_a - s_b)^2 / (2 h^2)) r_a r_b`` over increasing ``s``: each pair once, up to
    the distance where the kernel is 0 in float64."""
    reach = bandwidth * math.sqrt(2.0 * EXP_UNDERFLOW)
    scale = 2.0 * bandwidth * bandwidth
    total = 0.0
    for a in range(s.shape[0]):
        total += r[a] * r[a]
        for b in range(a + 1, s.shape[0]):
            d = s[b] - s[a]
            if d > reach:
                break
            total += 2.0 * math.exp(-(d * d) / scale) * r[a] * r[b]
    return total


def _residual_squares(block: CheckedRows) -> np.ndarray:
    r = block.y - block.p
    w = block.weights()
    return np.array([float(w @ (r * r))])


@dataclass(frozen=True)
class SKCEResult:
    """What :func:`skce` measured.

    Attributes
    ----------
    statistic : float
        The SKCE estimate (the unbiased one may be negative).
    estimator : str
        ``"uq"`` (unbiased quadratic) or ``"biased"`` (the V-statistic).
    bandwidth : float
        The kernel bandwidth used (resolved by the median heuristic when not given).
    """

    statistic: float
    estimator: str
    bandwidth: float


@validate_params(estimator=Options("uq", "biased"), **KERNEL_PARAMS)
def skce(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    estimator: str = "uq",
    kernel: str = "laplace",
    bandwidth: float | None = None,
    scale: str = "probability",
) -> SKCEResult:
    r"""The squared kernel calibration error of binary predictions (Widmann et al. 2019, Table 1).

    With :math:`h_{ij} = 2\,k(s_i, s_j)(y_i - p_i)(y_j - p_j)`, :math:`s = p` or
    :math:`\operatorname{logit} p` (``scale``), :math:`k(s, t) = e^{-|s - t|/h}` (Laplace) or
    :math:`e^{-(s - t)^2 / 2h^2}` (Gaussian), and :math:`W = \sum_i w_i`:

    .. math::

        \widehat{\mathrm{SKCE}}_{uq} = \frac{\sum_{i,j} w_i w_j h_{ij} - \sum_i w_i h_{ii}}{W^2 - W},
        \qquad
        \widehat{\mathrm{SKCE}}_{b} = \frac{1}{W^2} \sum_{i,j} w_i w_j h_{ij}.

    With unit weights these are the paper's unbiased quadratic U-statistic (the mean of
    :math:`h_{ij}` over pairs :math:`i \ne j`) and the biased V-statistic; with integer weights and a
    given ``bandwidth`` they are the estimators of the repeated rows (the median heuristic reads each
    row of positive weight once, so its :math:`h` may differ a little from the repeated rows').

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels in [0, 1] and predicted probabilities.
    sample_weight : array-like of shape (n,), optional
        Frequency weights (integer weights = repeated rows, with a given ``bandwidth``).
    estimator : {"uq", "biased"}, default "uq"
        The unbiased quadratic estimator or the V-statistic.
    kernel : {"laplace", "gaussian"}, default "laplace"
        The kernel on the score. Laplace costs O(m) after the table of the m distinct scores;
        Gaussian loops over the pairs of distinct scores closer than :math:`38.6 h`, O(m^2) at worst.
    bandwidth : float > 0 or None, default None
        :math:`h`. None: the median heuristic, probcal's: the median distance between the kernel
        inputs of rows :math:`0, c, 2c, \dots` of positive weight in row order, each once whatever its
        weight, :math:`c = \lceil n / 4096 \rceil` (their mean if the median is 0).
    scale : {"probability", "logit"}, default "probability"
        The kernel's input: the probability or its logit (clipped at 1e-12); the residuals stay on the
        probability scale.

    Returns
    -------
    SKCEResult

    Notes
    -----
    Equal to probcal 0.4's ``skce`` (estimators ``"uq"`` and ``"biased"``, same ``bandwidth``
    convention) with unit weights; probcal takes no weights. Its linear estimator is
    :func:`skce_test`'s statistic.

    References
    ----------
    .. [1] D. Widmann, F. Lindsten, D. Zachariah, "Calibration tests in multi-class classification: a
       unifying framework", NeurIPS 2019.

    Examples
    --------
    >>> round(skce([0, 1, 1, 0], [0.1, 0.8, 0.6, 0.3], bandwidth=0.5).statistic, 6)
    -0.011281
    """
    rows = metric_rows(y_true, y_prob, sample_weight)
    table = keyed_score_table(rows)
    kept = table.stats[:, W] > 0
    n = int(table.stats[:, COUNT].sum())
    h = _resolve_bandwidth(rows, n, scale, bandwidth)
    s = np.ascontiguousarray(_kernel_input(table.keys[0][kept], scale), dtype=np.float64)
    r = np.ascontiguousarray(table.stats[kept, WY] - table.stats[kept, WP])
    double = _laplace_double_sum(s, r, h) if kernel == "laplace" else _gaussian_double_sum(s, r, h)
    total = float(table.stats[:, W].sum())
    if estimator == "biased":
        return SKCEResult(statistic=2.0 * double / total**2, estimator=estimator, bandwidth=h)
    if not total > 1.0:
        msg = f"sample_weight: the unbiased SKCE needs a total weight above 1, got {total}"
        raise ValueError(msg)
    diagonal = float(rows.sum(_residual_squares)[0])
    return SKCEResult(
        statistic=2.0 * (double - diagonal) / (total * total - total), estimator=estimator, bandwidth=h
    )


# ------------------------------------------------------------------------------------------------
# The linear estimator and the asymptotic test

# Pair sums of the linear estimator: sum omega, sum omega t, sum omega t^2, pairs, sum omega^2.
_PAIR_SUMS = 5


@dataclass(frozen=True)
class _Pairs:
    """The linear estimator's reduction over a run of consecutive blocks: the run's first row when it
    closes a pair opened before the run (``head``: the row's global index is odd), the sums of the
    pairs inside, and its last row when it opens a pair (``tail``: the index is even); a row is
    ``(s, r, w)``. By parity, a run has a ``tail`` exactly when the next non-empty run has a ``head``."""

    head: tuple[float, float, float] | None
    sums: np.ndarray
    tail: tuple[float, float, float] | None
    empty: bool


def _pair_terms(s: np.ndarray, r: np.ndarray, w: np.ndarray, kernel: str, bandwidth: float) -> np.ndarray:
    """Sums of the pair terms :math:`t = 2 k(s_a, s_b) r_a r_b` with weights :math:`w_a w_b`."""
    t = 2.0 * _kernel(np.abs(s[0::2] - s[1::2]), kernel, bandwidth) * r[0::2] * r[1::2]
    omega = w[0::2] * w[1::2]
    return np.array([omega.sum(), omega @ t, omega @ (t * t), float(t.shape[0]), omega @ omega])


def _block_pairs(block: CheckedRows, scale: str, kernel: str, bandwidth: float, *, row_offset: int) -> _Pairs:
    s = _kernel_input(to_numpy(block.p).astype(np.float64), scale)
    r = to_numpy(block.y - block.p).astype(np.float64)
    w = to_numpy(block.weights()).astype(np.float64)
    n = s.shape[0]
    if n == 0:
        return _Pairs(None, np.zeros(_PAIR_SUMS), None, empty=True)
    start = row_offset % 2
    stop = start + (n - start) // 2 * 2
    head = (float(s[0]), float(r[0]), float(w[0])) if start else None
    tail = (float(s[stop]), float(r[stop]), float(w[stop])) if stop < n else None
    sums = _pair_terms(s[start:stop], r[start:stop], w[start:stop], kernel, bandwidth)
    return _Pairs(head, sums, tail, empty=False)


def _join_pairs(kernel: str, bandwidth: float, *parts: _Pairs) -> _Pairs:
    """Join consecutive runs in order: a run's ``tail`` and the next run's ``head`` make one pair."""
    out = parts[0]
    for part in parts[1:]:
        if part.empty or out.empty:
            out = out if part.empty else part
            continue
        sums = out.sums + part.sums
        if out.tail is not None and part.head is not None:
            s, r, w = (np.array(v) for v in zip(out.tail, part.head, strict=True))
            sums = sums + _pair_terms(s, r, w, kernel, bandwidth)
        out = _Pairs(out.head, sums, part.tail, empty=False)
    return out


@dataclass(frozen=True)
class SKCETestResult:
    """What :func:`skce_test` measured (H0: calibrated; a large positive statistic rejects).

    Attributes
    ----------
    statistic : float
        The linear SKCE estimate (the mean pair term).
    estimator : str
        ``"ul"``.
    method : str
        ``"asymptotic"``.
    p_value : float
        One-sided normal p-value of :math:`\\sqrt{m}\\,\\hat S / \\hat\\sigma`.
    p_value_bound : float
        The distribution-free bound :math:`\\min(1, e^{-m \\hat S^2 / 8})` over the :math:`m`
        (effective) pairs, :math:`\\lfloor n/2 \\rfloor` under unit weights (Widmann et al. 2019,
        theorems H.3-H.4), 1 when :math:`\\hat S \\le 0`.
    bandwidth : float
        The kernel bandwidth used.
    n_boot : None
        No resampling (probcal's field, for its bootstrap test).
    """

    statistic: float
    estimator: str
    method: str
    p_value: float
    p_value_bound: float
    bandwidth: float
    n_boot: int | None


@validate_params(**KERNEL_PARAMS)
def skce_test(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    kernel: str = "laplace",
    bandwidth: float | None = None,
    scale: str = "probability",
) -> SKCETestResult:
    r"""The asymptotic calibration test on the linear SKCE estimator (Widmann et al. 2019, App. G).

    Rows :math:`2k` and :math:`2k + 1` (global row order) form pair :math:`k` with term
    :math:`t_k = h_{2k, 2k+1}` and weight :math:`\omega_k = w_{2k} w_{2k+1}` (a last odd row is
    left out). The statistic is :math:`\hat S = \sum \omega_k t_k / \Omega`, :math:`\Omega =
    \sum \omega_k`; with the effective number of pairs :math:`m = \Omega^2 / \sum \omega_k^2`
    (Kish; the number of pairs under unit weights) its spread is :math:`\hat\sigma^2 = \frac{m}{m - 1}
    \sum \omega_k (t_k - \hat S)^2 / \Omega`, and under calibration :math:`z = \sqrt{m}\,\hat S /
    \hat\sigma` is asymptotically standard normal (Corollary G.3): the p-value is :math:`1 - \Phi(z)`.
    Weights are importances: scaling them all leaves the test as it is. O(n), one pass.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels in [0, 1] and predicted probabilities; the rows are paired in their order, so rows
        sorted by score must be shuffled first (neighbours would pair).
    sample_weight : array-like of shape (n,), optional
        Weights; a pair weighs the product of its rows' weights (unit weights: probcal's test). One
        pair carrying all the weight is refused: the test needs a spread.
    kernel, bandwidth, scale
        As in :func:`skce`.

    Returns
    -------
    SKCETestResult

    Notes
    -----
    Equal to probcal 0.4's ``skce_test(method="asymptotic")`` on the rows in the order of probcal's
    seeded pairing, with unit weights. probcal's default, a bootstrap of the quadratic statistic,
    costs O(n_boot n^2) and is not offered.

    Examples
    --------
    >>> r = skce_test([0, 1, 1, 0, 1, 0], [0.1, 0.8, 0.6, 0.3, 0.9, 0.2], bandwidth=0.5)
    >>> (round(r.statistic, 6), round(r.p_value, 4))
    (-0.050481, 0.893)
    """
    rows = metric_rows(y_true, y_prob, sample_weight)
    counts = rows.sum(_count_weight)
    check_total(counts[0], counts[1])
    if counts[0] < 4:
        msg = f"y_prob: the SKCE test needs at least 4 rows, got {int(counts[0])}"
        raise ValueError(msg)
    h = _resolve_bandwidth(rows, int(counts[0]), scale, bandwidth)
    join = functools.partial(_join_pairs, kernel, h)
    pairs = rows.reduce(_block_pairs, join, scale, kernel, h, offsets=True)
    omega, weighted_t, weighted_t2, _, omega_squares = pairs.sums
    if not omega > 0:
        msg = "sample_weight: no pair of rows with positive weight"
        raise ValueError(msg)
    stat = float(weighted_t / omega)
    effective_pairs = float(omega * omega / omega_squares)
    if not effective_pairs > 1.0 + 1e-9:
        msg = "sample_weight: one pair of rows carries all the weight; the test needs the spread of two"
        raise ValueError(msg)
    spread = max(weighted_t2 / omega - stat * stat, 0.0)
    variance = float(spread * effective_pairs / (effective_pairs - 1.0))
    if variance == 0.0:
        p_value = 1.0 if stat <= 0.0 else 0.0
    else:
        p_value = float(stats.norm.sf(math.sqrt(effective_pairs) * stat / math.sqrt(variance)))
    bound = 1.0 if stat <= 0.0 else float(min(1.0, math.exp(-effective_pairs * stat * stat / 8.0)))
    return SKCETestResult(
        statistic=stat,
        estimator="ul",
        method="asymptotic",
        p_value=p_value,
        p_value_bound=bound,
        bandwidth=h,
        n_boot=None,
    )


def _count_weight(block: CheckedRows) -> np.ndarray:
    return np.array([float(block.n), block.total_weight])


__all__ = ["SKCEResult", "SKCETestResult", "skce", "skce_test"]
