r"""Platt scaling on logit hinges: a continuous piecewise-linear map of the logit, one logistic fit.

.. math::

    \hat p = \sigma\Big(a x + b + \sum_{k=1}^{K} c_k\, (x - t_k)_+\Big),
    \qquad x = \operatorname{logit}(p) \text{ (or a raw margin)},

with the knots :math:`t_k` at fixed weighted quantiles of the calibration rows' :math:`x`. The design
``[x, (x - t_1)_+, ..., (x - t_K)_+]`` is a small matrix, so the fit is the Newton fit over row sums of
every scaling calibrator (:func:`gpucal.calibrators.logistic.fit_logistic_rows`); on many rows it is
solved from one pass, on the series of the loss over bins of :math:`x`
(``gpucal.calibrators.hinge_series``), as Platt scaling's.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from gpucal._backend import array_namespace
from gpucal.calibrators._logistic_kernels import NUMBA_MIN_ROWS
from gpucal.calibrators.base import (
    OUTPUT_TYPE_OPTIONS,
    SCORE_KIND_OPTIONS,
    Calibrator,
    Constraint,
    Interval,
    Options,
)
from gpucal.calibrators.hinge_series import HingeSeries, fit_hinge_series, hinge_moments
from gpucal.calibrators.logistic import EPS, ScoreBlock, fit_logistic_rows, sigmoid
from gpucal.calibrators.platt import platt_targets_from_sums
from gpucal.calibrators.score_rows import COUNT, ScoreRows
from gpucal.calibrators.spline import block_histogram, transform_scores, weighted_range, widest
from gpucal.kernels.jit import map_row_chunks
from gpucal.persistence import MAX_TERM, check_magnitude, check_span
from gpucal.registry import calibration_method
from gpucal.rows import Rows

#: Default knot levels: weighted quantiles of the calibration logit (the class docstring says why).
DEFAULT_QUANTILES = (0.5, 0.8, 0.95)
#: From this many rows the fit is solved on the series of the bins of the logit (one compiled pass over
#: the rows, ``gpucal.calibrators.hinge_series``); below it the 5 to 9 Newton passes over the rows are
#: taken. From it the series pay (row passes against series, CPU ms, ``benchmarks/results/hinge_fit.md``):
#: 32,768 rows of make_ctr's cross400 scenario 12.0 against 7.3, of kdd 14.0 against 10.9; 150,000 rows
#: of cross400 51.5 against 10.9. Below it the benchmark cannot force the series, so the bound itself is
#: the compiled kernels' own (``NUMBA_MIN_ROWS``), not a measured crossover.
SERIES_MIN_ROWS = NUMBA_MIN_ROWS


def hinge_variable(score: Any, score_kind: str) -> Any:
    """The map's variable :math:`x`: the logit of the score clipped to ``[EPS, 1 - EPS]`` (as Platt's), or
    the margin as given."""
    return transform_scores(score, EPS, score_kind)


def hinge_design(x: Any, knots: np.ndarray) -> Any:
    """The design ``[x, (x - t_1)_+, ..., (x - t_K)_+]`` of shape ``(n, 1 + K)`` (numpy or cupy, as ``x``)."""
    xp = array_namespace(x)
    out = xp.empty((x.shape[0], 1 + knots.shape[0]), dtype=np.float64)
    out[:, 0] = x
    for k, knot in enumerate(knots):
        out[:, 1 + k] = xp.maximum(x - float(knot), 0.0)
    return out


def design_block(block: ScoreBlock, knots: np.ndarray) -> ScoreBlock:
    """One block of the variable :math:`x` (:func:`variable_block`) as its design (:func:`hinge_design`)."""
    return ScoreBlock(hinge_design(block.score, knots), block.y, block.w)


def variable_block(block: ScoreBlock, score_kind: str) -> ScoreBlock:
    """One block of scores as the map's variable :math:`x` (:func:`hinge_variable`), computed once for
    every pass of the fit."""
    return ScoreBlock(hinge_variable(block.score, score_kind), block.y, block.w)


def histogram_quantiles(histogram: np.ndarray, low: float, high: float, levels: np.ndarray) -> np.ndarray:
    r"""Weighted quantiles at ``levels`` read on a histogram of ``len(histogram)`` equal bins of
    ``[low, high]``: the quantile :math:`q` is the upper edge of the first bin whose cumulative weight
    reaches :math:`q W` (within a bin's width of the exact one; the same on any partitioning)."""
    cumulative = np.cumsum(histogram)
    cells = np.searchsorted(cumulative, levels * cumulative[-1])
    return low + (high - low) / histogram.shape[0] * (cells + 1)


def hinge_knots(variable: Rows, quantiles: np.ndarray) -> tuple[np.ndarray, tuple[float, float]]:
    """The knots: weighted quantiles of :math:`x` at ``quantiles`` (rows of :func:`variable_block`),
    strictly inside the range of the :math:`x` of the rows of positive weight (a knot at or beyond an end
    carries no row), ties merged; and that range. The knots lie on edges of the range's
    ``HISTOGRAM_BINS`` equal bins."""
    low, high = (float(v) for v in variable.reduce(weighted_range, widest))
    if not high > low:
        msg = "X: every score is equal; Platt scaling on hinges needs at least two distinct scores"
        raise ValueError(msg)
    histogram = variable.sum(block_histogram, low, high, EPS, "logit")
    knots = np.unique(histogram_quantiles(histogram, low, high, quantiles))
    return knots[(knots > low) & (knots < high)], (low, high)


def fit_hinge_platt_rows(
    scores: ScoreRows,
    *,
    quantiles: np.ndarray,
    l2: float,
    score_kind: str = "probability",
    target_smoothing: bool = True,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Return the knots, the coefficients ``[a, c_1, ..., c_K]`` and the intercept ``b`` of the hinge map
    on rows held anywhere (see :class:`HingePlattCalibrator`).

    From :data:`SERIES_MIN_ROWS` rows the fit is first solved on the series of the bins of :math:`x`
    (``gpucal.calibrators.hinge_series``: one pass over the rows); where the series are not accurate
    enough its answer starts the Newton passes over the rows.
    """
    scores.check_two_classes()
    variable = scores.rows.map(variable_block, score_kind)
    knots, span = hinge_knots(variable, quantiles)
    total_weight, label_sum = scores.label_sums()
    targets = platt_targets_from_sums(total_weight, label_sum) if target_smoothing else (0.0, 1.0)
    # l2 is on the summed loss (scikit-learn's 1 / C); the Newton driver's ridge is on the mean loss.
    penalties = np.r_[0.0, np.full(knots.shape[0], l2 / total_weight)]
    n_rows = int(scores.summary[COUNT])
    theta0 = None
    if n_rows >= SERIES_MIN_ROWS:
        # From the identity map sigma(x), the score read as calibrated: 5-9 Newton steps on the series of
        # make_ctr's, kdd's, flights' and acs' scores instead of 7-11 from the best constant.
        identity = np.r_[1.0, np.zeros(knots.shape[0]), 0.0]
        series = HingeSeries(variable.sum(hinge_moments, span), span, knots, targets)
        ridge = np.r_[penalties, 0.0]  # the intercept, last, is not penalised
        result, stands = fit_hinge_series(series, identity, total_weight=total_weight, ridge=ridge)
        if stands:
            return knots, result.theta[:-1].copy(), float(result.theta[-1])
        theta0 = result.theta if result.converged else None
    fit = fit_logistic_rows(
        variable.map(design_block, knots),
        n_rows=n_rows,
        n_columns=1 + knots.shape[0],
        total_weight=total_weight,
        label_sum=label_sum,
        targets=targets,
        l2=penalties,
        theta0=theta0,
        what="HingePlattCalibrator",
    )
    return knots, fit.coef, fit.intercept


def predict_hinge_platt(
    score: Any, knots: np.ndarray, coef: np.ndarray, intercept: float, *, score_kind: str = "probability"
) -> Any:
    r""":math:`\sigma(a x + b + \sum_k c_k (x - t_k)_+)` per row (numpy or cupy, float64).

    Over row chunks on every core for a large float64 vector (``gpucal.kernels.jit.map_row_chunks``),
    the numbers of one call over all the rows without its temporaries of every row (nine at three knots).
    """
    return map_row_chunks(lambda s: _hinge_probabilities(s, knots, coef, intercept, score_kind), score)


def _hinge_probabilities(
    score: Any, knots: np.ndarray, coef: np.ndarray, intercept: float, score_kind: str
) -> Any:
    xp = array_namespace(score)
    x = hinge_variable(score, score_kind)
    z = float(coef[0]) * x + float(intercept)
    for knot, c in zip(knots, coef[1:], strict=True):
        z = z + float(c) * xp.maximum(x - float(knot), 0.0)
    return sigmoid(z)


@calibration_method("platt_hinge", fits_on_dask=True)
class HingePlattCalibrator(Calibrator):
    r"""Platt scaling on logit hinges: Platt's logistic map with a few slope changes along the logit.

    .. math::

        \hat p = \sigma\Big(a x + b + \sum_{k=1}^{K} c_k\, (x - t_k)_+\Big), \qquad
        x = \begin{cases} \log\frac{p}{1-p} & \text{score\_kind="probability"} \\
        s & \text{score\_kind="logit"} \end{cases}

    a continuous piecewise-linear map of the logit (a linear spline with knots :math:`t_k`, Hastie,
    Tibshirani and Friedman 2009, Sec. 5.2), slope :math:`a` below the first knot and
    :math:`a + c_1 + \dots + c_k` above knot :math:`k`. The knots are weighted quantiles of the
    calibration rows' :math:`x` at ``quantiles`` (read on a 4096-bin histogram of :math:`x`, so any
    partitioning of the rows gives the same knots; knots that coincide, or fall at the ends, are
    dropped). :math:`(a, b, c)` minimise

    .. math::

        \sum_i w_i \big[\log(1 + e^{z_i}) - t_i z_i\big] + \frac{\lambda}{2} \sum_k c_k^2,

    :math:`z_i` the linear predictor, :math:`t_i` Platt's (optionally smoothed) target and
    :math:`\lambda` = ``l2``, by Newton steps whose gradient and Hessian are sums over rows
    (``gpucal.calibrators.logistic``). Only the slope changes are penalised: with few rows between two
    knots their :math:`c_k` shrink toward 0, toward Platt's map; with many, the penalty (on the summed,
    not the mean, loss) fades.

    Parameters
    ----------
    quantiles : sequence of float in (0, 1) or None, default=None
        Levels of the knots; None: :data:`DEFAULT_QUANTILES`, (0.5, 0.8, 0.95), chosen on 13 sets
        (``benchmarks/results/auto_hinge_knots.md``): knots at 0.8 and 0.95 follow the top scores, where
        over-confident models bend the logit (``make_ctr``'s monotone scenario bends at its 0.8
        quantile: 0.00077 below Platt's log-loss, the median knot alone 0.00042); four or five knots gain
        nothing more there and cost fit time and noise on small sets.
    l2 : float >= 0, default=1.0
        :math:`\lambda`, the ridge on the slope changes :math:`c_k`, in the units of the summed loss
        (scikit-learn's ``C = 1 / l2`` on the same design with an unpenalised logit column).
    score_col : str, default="score"
        Column holding the score when ``X`` is a dataframe.
    score_kind : {"probability", "logit"}, default="probability"
        ``"probability"``: scores in [0, 1], mapped through their logit (clipped to machine epsilon
        first, as Platt's); ``"logit"``: raw margins, used as they are.
    target_smoothing : bool, default=True
        Fit to Platt's smoothed targets (:func:`gpucal.calibrators.platt.platt_targets`), as
        :class:`~gpucal.calibrators.platt.PlattCalibrator` does.
    output_type : str, default="input"
        Family of the returned predictions (see ``gpucal._frames``).

    Attributes
    ----------
    knots_ : numpy.ndarray of shape (K,)
        The knots :math:`t_k` on the scale of :math:`x`, increasing (K may be below
        ``len(quantiles)``).
    coef_ : numpy.ndarray of shape (K + 1,)
        :math:`[a, c_1, \dots, c_K]`.
    intercept_ : float
        :math:`b`.

    See Also
    --------
    PlattCalibrator : the same map without knots (:math:`K = 0`).
    SplineCalibrator : a natural cubic spline of the logit with many knots and a searched penalty.

    Notes
    -----
    Equal to scikit-learn's ``LogisticRegression(C=1 / l2)`` fitted on the design
    ``[x * s, (x - t_1)_+, ..., (x - t_K)_+]`` with :math:`s` large (so that the logit's coefficient is
    practically unpenalised) and the smoothed targets written as two weighted rows per row. The map is
    increasing wherever every partial slope :math:`a + c_1 + \dots + c_k` is positive (the fit does not
    force it; on the benchmarks' sets it always was). Sample weights are row multiplicities: integer
    weights equal repeated rows. The fit costs a few passes over a ``(n, K + 1)`` design, and from
    :data:`SERIES_MIN_ROWS` rows one pass over :math:`x` (the bins' moments) where the series are
    accurate: at 150,000 rows 10.5-11.6 ms against 40.4-56.8 ms for the passes, far below the spline's.

    References
    ----------
    .. [1] J. Platt, "Probabilistic outputs for support vector machines and comparisons to
       regularized likelihood methods", in Advances in Large Margin Classifiers, MIT Press, 1999,
       pp. 61-74.
    .. [2] T. Hastie, R. Tibshirani, J. Friedman, "The Elements of Statistical Learning", 2nd ed.,
       Springer, 2009, section 5.2 (piecewise polynomials and splines).

    Examples
    --------
    >>> import numpy as np
    >>> from gpucal.calibrators.hinge_platt import HingePlattCalibrator
    >>> rng = np.random.default_rng(0)
    >>> p = rng.random(2000)
    >>> y = (rng.random(2000) < p**2).astype(float)
    >>> cal = HingePlattCalibrator().fit(p, y)
    >>> cal.knots_.shape, cal.coef_.shape
    ((3,), (4,))
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "l2": Interval(float, 0, None),
        "score_kind": SCORE_KIND_OPTIONS,
        "target_smoothing": Options(True, False),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {
        "knots_": "float_array",
        "coef_": "float_array",
        "intercept_": "float",
    }

    def __init__(
        self,
        *,
        quantiles: Any = None,
        l2: float = 1.0,
        score_col: str = "score",
        score_kind: str = "probability",
        target_smoothing: bool = True,
        output_type: str = "input",
    ) -> None:
        self.quantiles = quantiles
        self.l2 = l2
        self.score_col = score_col
        self.score_kind = score_kind
        self.target_smoothing = target_smoothing
        self.output_type = output_type

    def _levels(self) -> np.ndarray:
        chosen = DEFAULT_QUANTILES if self.quantiles is None else self.quantiles
        levels = np.asarray(chosen, dtype=np.float64).ravel()
        if not np.all((levels > 0.0) & (levels < 1.0)):
            msg = f"quantiles must lie strictly between 0 and 1, got {levels.tolist()}"
            raise ValueError(msg)
        return np.unique(levels)

    def _fit(self, rows: Rows) -> None:
        levels = self._levels()
        self.knots_, self.coef_, self.intercept_ = fit_hinge_platt_rows(
            ScoreRows.of(rows, self.score_col, self.score_kind),
            quantiles=levels,
            l2=float(self.l2),
            score_kind=self.score_kind,
            target_smoothing=self.target_smoothing,
        )

    def _predict_scores(self, score: Any) -> Any:
        return predict_hinge_platt(
            score, self.knots_, self.coef_, self.intercept_, score_kind=self.score_kind
        )

    def increasing(self) -> bool:
        r"""Whether the fitted map increases with the score: every partial slope
        :math:`a + c_1 + \dots + c_k` (``k = 0..K``) is positive, so it keeps the score's ranking."""
        return bool(np.all(np.cumsum(self.coef_) > 0.0))

    def _check_state(self) -> None:
        """Raise ``ValueError`` unless the knots increase and ``coef_`` has one entry more than them."""
        if np.any(np.diff(self.knots_) <= 0):
            msg = "knots_ must be strictly increasing"
            raise ValueError(msg)
        if self.coef_.shape[0] != self.knots_.shape[0] + 1:
            msg = f"coef_ has {self.coef_.shape[0]} entries; knots_ needs {self.knots_.shape[0] + 1}"
            raise ValueError(msg)
        check_span(self.knots_, "knots_")
        check_magnitude(self.coef_, "coef_")
        # Each term is a coefficient times (t - knot): bounded together, over the knots' span.
        span = float(self.knots_[-1] - self.knots_[0]) if self.knots_.shape[0] else 0.0
        if float(np.abs(self.coef_).max(initial=0.0)) * max(span, 1.0) > MAX_TERM:
            msg = f"coef_ times the knots' span passes {MAX_TERM:g}: the map's terms would overflow"
            raise ValueError(msg)


__all__ = [
    "DEFAULT_QUANTILES",
    "HingePlattCalibrator",
    "fit_hinge_platt_rows",
    "hinge_design",
    "hinge_knots",
    "histogram_quantiles",
    "predict_hinge_platt",
]
